//! The runs the agent watches for what follows their replies (`outcome.rs` says how a
//! reaction is read and weighed): a reaction is noted on its run as it arrives, and a run
//! whose outcome is known closes, reporting its swarm skill's reward and handing episodes that
//! went well to the distill pass.

use std::sync::Arc;

use super::core::Agent;
use super::outcome::{self, Signal, Watched};
use super::state::Good;
use druse_protocol::now_ms;

/// Runs closed in one poll, at most (each may ask the AppView whether the person blocked the
/// agent); the rest close at the next.
const CLOSED_PER_POLL: usize = 32;

impl Agent {
    /// Notes a reaction to one of the agent's replies on the run that posted it.
    pub(crate) async fn signal(&self, reply: &str, person: &str, signal: Signal) {
        let Some(mut run) = self.state.run_of_reply(reply) else { return };
        if run.note(reply, person, signal, now_ms()) {
            let backed = self.stands_behind(person).await;
            if backed {
                run.back(signal);
            }
            tracing::info!(run = %run.id, signal = signal.as_str(), backed, "a reaction to a run's reply");
            self.write_state("record a run's signal", move |state| state.put_run(&run)).await;
        }
    }

    /// Closes the runs whose outcome is known (quiet after a signal) or whose window ended:
    /// reports the reward of the swarm skill a run used, and answers the episodes that went
    /// well, for the distill pass the loop runs beside the polls. A run with no signal closes unreported.
    pub(crate) async fn close_runs(self: &Arc<Self>) -> Vec<u64> {
        let now = now_ms();
        let window = self.config.outcome_window.as_millis() as u64;
        let quiet = self.config.outcome_quiet.as_millis() as u64;
        let due: Vec<Watched> = self.state.runs().into_iter().filter(|r| r.closes(now, window, quiet)).collect();
        let mut distill = Vec::new();
        for mut run in due.into_iter().take(CLOSED_PER_POLL) {
            // A block is seen on the person's profile, not in the notifications.
            let people: std::collections::BTreeSet<String> = run.answered.iter().map(|a| a.person.clone()).collect();
            for person in people {
                match self.bsky.blocks_me(&person).await {
                    Ok(true) => {
                        if let Some(reply) = run.answered.iter().find(|a| a.person == person).map(|a| a.reply.clone())
                            && run.note(&reply, &person, Signal::Blocked, now)
                            && self.stands_behind(&person).await
                        {
                            run.back(Signal::Blocked);
                        }
                    }
                    Ok(false) => {}
                    Err(error) => tracing::debug!(%error, "could not read whether a person blocks the agent"),
                }
            }
            let reward = outcome::reward(&run.signals);
            let label = match reward {
                None => "silent",
                Some(r) if r >= self.config.good_reward => "good",
                Some(r) if r > 0.0 => "neutral",
                Some(_) => "bad",
            };
            super::metrics::Metrics::count(&self.metrics.runs_closed, label);
            let closed = run.clone();
            if self.write_state("close a run", move |state| state.close_run(&closed)).await.is_none() {
                continue;
            }
            let Some(reward) = reward else {
                tracing::info!(run = %run.id, "a run closed without any reaction: nothing to report");
                continue;
            };
            tracing::info!(run = %run.id, reward, signals = ?run.signals, "a run closed");
            // A report rests only on reactions the agent stands behind (`outcome_from`).
            if let Some(skill) = &run.skill {
                match outcome::reward(&run.backed) {
                    Some(backed) => self.report_reward(skill, backed).await,
                    None => {
                        self.metrics.refuse("outcome_not_backed");
                        tracing::info!(run = %run.id, %skill, "no reaction the agent stands behind: the skill's run is not reported");
                    }
                }
            }
            if reward >= self.config.good_reward {
                for episode in run.episodes.clone() {
                    let good = Good { reward, at: now };
                    if self.write_state("record a good episode", move |s| s.add_good(episode, &good)).await.is_some() {
                        distill.push(episode);
                    }
                }
            }
        }
        distill
    }
}
