//! One turn of the agent (seed 001): a mention, from the poll that reads it to the reply and
//! what follows. Read it top to bottom; each step names the one place it goes for details.
//!
//! 1. **Poll** ([`Agent::poll`]): the unread notifications, newest 100 at most; the agent's
//!    own posts, notifications already handled and authors the owner's lists exclude are
//!    dropped (a post answered from another device is never answered twice).
//! 2. **Gate**: a like from the owner on an approval request carries it out (`act.rs`); every
//!    other like is a reaction to a run (step 7). Mentions, replies and quotes are grouped per
//!    thread, and the loop (`runs.rs`) starts a thread if it is not under way and a slot is
//!    free (the owner's threads have a slot of their own, so strangers' hung threads never
//!    hold the owner), without the notifications still pausing after a failure: each thread
//!    one task of the loop's set, under `batch_deadline` ([`Agent::thread`]). Notifications
//!    over their author's limit or over a stranger's share of the token budget are dropped.
//! 3. **Context** (`prompt.rs`): the system prompt with its trust-labelled blocks (goals, self
//!    state, what is known of each author, episodic memories synthesized, the swarm's skills),
//!    the thread, and the batch.
//! 4. **Model** (`core.rs`'s `run_model`): the tool loop, bounded in steps and by the deadline,
//!    recorded in the journal however it ends.
//! 5. **Tools** (`tools.rs`): each call checked against the one tool table and its gate, then
//!    its handler.
//! 6. **Act** (`act.rs`): replies that fit in graphemes and bytes, facets only for consenting
//!    people, approval requests to the owner.
//! 7. **Outcome** (`learn.rs`, `watch.rs`): the exchange kept verbatim, observations extracted
//!    and reconciled, the run watched for reactions; at a later poll runs whose outcome is known
//!    close, report their skill's reward, and hand good episodes to the distill pass.
//!
//! A batch whose model fails answers which notifications it left unanswered ([`Ran`]): the
//! loop keeps them for a later poll, with a pause that grows, and gives them up after a day.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::bluesky::Notification;
use super::core::{Agent, id, lock};
use super::metrics::Metrics;
use super::outcome::{self, Signal};
use super::tools::{self, Hands, Room};
use druse_protocol::now_ms;

/// One thread's notifications, as a poll found them (step 1); the loop decides whether it
/// runs now (step 2).
#[derive(Debug)]
pub(crate) struct Thread {
    pub(crate) root: String,
    pub(crate) notes: Vec<Notification>,
    /// Whether the owner wrote any of them: the owner's threads have a slot of their own.
    pub(crate) owners: bool,
}

/// How a thread's run ended, for the loop that owns the failures (step 7).
#[derive(Debug)]
pub(crate) enum Ran {
    /// The model answered: these notifications (their ids) are done, failures forgotten.
    Answered(Vec<String>),
    /// The model failed: the notifications left unanswered wait for a later poll.
    Failed { left: Vec<Notification>, replied: usize, error: String },
    /// Nothing reached the model (every notification refused, or no context), or the run
    /// passed its deadline: nothing changes, and a later poll sees what is left.
    Nothing,
}

impl Agent {
    /// Step 1 and the start of 2: reads the notifications, acts on the owner's likes, notes
    /// reactions, and answers the mentions grouped per thread (the loop admits those that may
    /// run now, `runs.rs`). Marks the notifications seen and closes the runs whose outcome is
    /// known (step 7), answering the episodes to distill.
    pub(crate) async fn poll(self: &Arc<Self>) -> Result<(Vec<Thread>, Vec<u64>), super::bluesky::Error> {
        // 1. Poll.
        let notes = self.bsky.notifications(self.config.max_batch.min(100) as u8).await?;
        let newest = notes.first().map(|n| n.indexed_at.clone());
        let mut threads: BTreeMap<String, Vec<Notification>> = BTreeMap::new();
        for n in notes.into_iter().rev() {
            if n.author_did == self.bsky.did() || self.state.handled(&id(&n)) || self.state.answered(&n.uri) {
                continue;
            }
            if !self.may_answer(&n) {
                self.metrics.refuse("author_not_allowed");
                tracing::info!(author = %n.author_handle, "the owner's lists say this author is not answered");
                self.mark_handled(&n).await;
                continue;
            }
            // 2. Gate: likes act now; mentions wait for their thread's run.
            match n.reason.as_str() {
                "like" => {
                    Metrics::count(&self.metrics.notifications, reason_label(&n.reason));
                    self.on_like(&n).await;
                    if let Some(subject) = &n.subject {
                        self.signal(subject, &n.author_did, Signal::Liked).await;
                    }
                    self.mark_handled(&n).await;
                }
                // A reply that also @-mentions the agent arrives as `mention`: both are for it.
                "mention" | "reply" | "quote" => {
                    self.consent_from(&n).await;
                    if let Some(parent) = &n.parent {
                        self.signal(&parent.uri, &n.author_did, outcome::classify(&n.text)).await;
                    }
                    let root = n.root.as_ref().map_or_else(|| n.uri.clone(), |r| r.uri.clone());
                    // The same post can come as a mention and a reply: answer it once.
                    let thread = threads.entry(root).or_default();
                    if thread.iter().any(|o| o.uri == n.uri) {
                        self.mark_handled(&n).await;
                    } else {
                        thread.push(n);
                    }
                }
                _ => {
                    Metrics::count(&self.metrics.notifications, reason_label(&n.reason));
                    self.mark_handled(&n).await
                }
            }
        }
        let threads = threads
            .into_iter()
            .map(|(root, notes)| {
                let owners = notes.iter().any(|n| n.author_did == self.owner_did);
                Thread { root, notes, owners }
            })
            .collect();
        if let Some(newest) = newest
            && let Err(error) = self.bsky.update_seen(&newest).await
        {
            tracing::warn!(%error, "could not mark notifications seen");
        }
        let copy = {
            let mut gate = lock(&self.gate);
            gate.expire(now_ms());
            self.show_pending(&gate);
            self.state.gate_copy(&gate)
        };
        self.save_gate(copy, false).await;
        // 7. Outcome, of earlier runs.
        let distill = self.close_runs().await;
        Ok((threads, distill))
    }

    /// Steps 2 to 7 for one thread the loop admitted. The strangers of the thread pay for its
    /// model calls, each within its share of the day's tokens. The loop bounds it by
    /// `batch_deadline` and frees its slot however it ends.
    pub(crate) async fn thread(self: Arc<Self>, thread: Thread) -> Ran {
        let mut payers: Vec<String> =
            thread.notes.iter().map(|n| n.author_did.clone()).filter(|d| *d != self.owner_did).collect();
        payers.sort_unstable();
        payers.dedup();
        let span = tracing::info_span!("agent_batch", notifications = thread.notes.len(), thread = %thread.root);
        super::spend::paid_by(payers, tracing::Instrument::instrument(self.batch(thread.notes), span)).await
    }

    /// One thread's notifications through the model.
    async fn batch(self: &Arc<Self>, notes: Vec<Notification>) -> Ran {
        // 2. Gate, per notification (the loop left out those pausing after a failure): a
        // stranger's share, the author's limit.
        let now = now_ms();
        let mut allowed = Vec::new();
        for n in notes {
            let share =
                if n.author_did == self.owner_did { Ok(()) } else { self.llm.spend().stranger_allowed(&n.author_did) };
            if let Err(over) = share {
                self.metrics.refuse(over.label());
                tracing::info!(author = %n.author_handle, %over, "over a stranger's share of the token budget: no reply");
                self.mark_handled(&n).await;
            } else if lock(&self.limit).would_allow(&n.author_did, now) {
                allowed.push(n);
            } else {
                self.metrics.refuse("rate_limit");
                tracing::info!(author = %n.author_handle, "over the per-author limit: no reply");
                self.mark_handled(&n).await;
            }
        }
        if allowed.is_empty() {
            return Ran::Nothing;
        }
        // 3. Context.
        let messages = match self.prompt(&allowed).await {
            Ok(m) => m,
            Err(error) => {
                tracing::error!(%error, "could not assemble the context; the batch waits for the next poll");
                return Ran::Nothing;
            }
        };
        // 4–6. Model, tools, act: the handler carries out each call through the table.
        let mut hands = Hands::new(Arc::clone(self), Room::Batch, allowed.clone());
        let tools = tools::offered(Room::Batch, &self.config);
        let run = self.run_model("notifications", messages, &tools, &mut hands).await;
        // 7. Outcome: the failures are the loop's to keep (`runs.rs`).
        let ran = match run {
            Ok(run) => {
                Metrics::count(&self.metrics.batches, if run.exhausted { "step_limit" } else { "ok" });
                let gap = self.config.session_gap;
                self.with_schedule(|s| s.active(now_ms(), gap, true)).await;
                for n in &allowed {
                    self.mark_handled(n).await;
                }
                lock(&self.status).replies += hands.replied.len() as u64;
                Ran::Answered(allowed.iter().map(id).collect())
            }
            Err(error) => {
                let left = allowed.into_iter().filter(|n| !hands.replied.iter().any(|r| r.to.uri == n.uri)).collect();
                Ran::Failed { left, replied: hands.replied.len(), error: error.to_string() }
            }
        };
        self.after(&hands.replied, hands.used_skill.clone()).await;
        ran
    }
}

pub(crate) fn reason_label(reason: &str) -> &'static str {
    match reason {
        "mention" => "mention",
        "reply" => "reply",
        "like" => "like",
        "quote" => "quote",
        "follow" => "follow",
        "repost" => "repost",
        _ => "other",
    }
}
