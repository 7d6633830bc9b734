//! One turn of the agent (seed 001): a mention, from the poll that reads it to the reply and
//! what follows. Read it top to bottom; each step names the one place it goes for details.
//!
//! 1. **Poll** ([`Agent::poll`]): the unread notifications, newest 100 at most; the agent's
//!    own posts, notifications already handled and authors the owner's lists exclude are
//!    dropped (a post answered from another device is never answered twice).
//! 2. **Gate**: a like from the owner on an approval request carries it out (`act.rs`); every
//!    other like is a reaction to a run (step 7). Mentions, replies and quotes are grouped per
//!    thread; a thread starts if it is not under way and a slot is free (the owner's threads
//!    have a slot of their own, so strangers' hung threads never hold the owner). Each thread
//!    becomes one task in the loop's task set, under `batch_deadline` ([`Agent::thread`]):
//!    notifications still pausing after a failure, over their author's limit or over a
//!    stranger's share of the token budget wait or are dropped.
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
//! A batch whose model fails keeps its unanswered notifications for a later poll, with a
//! pause that grows, and gives them up after a day.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::bluesky::Notification;
use super::core::{Agent, Failing, id, lock};
use super::metrics::Metrics;
use super::outcome::{self, Signal};
use super::tools::{self, Hands, Room};
use druse_protocol::now_ms;

/// A notification whose batch keeps failing (the model down, or answering garbage) is tried
/// again at later polls with a growing pause, and given up only after this long, with a log
/// line: an outage of the model loses nothing.
const GIVE_UP_AFTER_MS: u64 = 24 * 3600 * 1000;

/// The longest pause between two tries of a failing notification.
const MAX_RETRY_PAUSE_MS: u64 = 5 * 60 * 1000;

/// Failing notifications remembered at most.
const MAX_FAILING: usize = 10_000;

/// One thread's notifications, admitted to run (step 2).
#[derive(Debug)]
pub(crate) struct Thread {
    pub(crate) root: String,
    pub(crate) notes: Vec<Notification>,
}

impl Agent {
    /// Steps 1 and 2: reads the notifications, acts on the owner's likes, notes reactions, and
    /// answers the threads that may start now, each claimed in the in-flight set (the caller
    /// runs each with [`Agent::thread`], which releases it). Marks the notifications seen and
    /// closes the runs whose outcome is known (step 7), answering the episodes to distill.
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
        let mut admitted = Vec::new();
        for (root, notes) in threads {
            let owners = notes.iter().any(|n| n.author_did == self.owner_did);
            if !self.claim(&root, owners) {
                continue;
            }
            // Counted once a run takes them: a thread still under way is seen again at each poll.
            for n in &notes {
                Metrics::count(&self.metrics.notifications, reason_label(&n.reason));
            }
            admitted.push(Thread { root, notes });
        }
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
        Ok((admitted, distill))
    }

    /// Starts `thread` in the loop's task set, stopped at `batch_deadline` (its model calls
    /// end a second before, to be recorded); the receiver hears when it ended, however.
    pub(crate) fn start(self: &Arc<Self>, thread: Thread) -> tokio::sync::oneshot::Receiver<()> {
        let (done, ended) = tokio::sync::oneshot::channel();
        let (agent, metrics, root) = (Arc::clone(self), self.metrics.clone(), thread.root.clone());
        let started = self.tasks.spawn(
            "thread",
            self.config.batch_deadline,
            move || {
                metrics.batch_deadlines.inc();
            },
            async move {
                agent.thread(thread).await;
                let _ = done.send(());
            },
        );
        if !started {
            lock(&self.in_flight).remove(&root);
        }
        ended
    }

    /// Claims a slot for the thread `root`: none while it is under way, or when every slot of
    /// its kind is taken (the owner's threads have one of their own beside
    /// `concurrent_batches` strangers' threads).
    fn claim(&self, root: &str, owners: bool) -> bool {
        let mut in_flight = lock(&self.in_flight);
        let strangers = in_flight.values().filter(|owner| !**owner).count();
        let full =
            if owners { in_flight.values().any(|owner| *owner) } else { strangers >= self.config.concurrent_batches };
        if in_flight.contains_key(root) || full {
            return false;
        }
        in_flight.insert(root.to_owned(), owners);
        true
    }

    /// Steps 2 to 7 for one thread, then frees its slot. The strangers of the thread pay for
    /// its model calls, each within its share of the day's tokens. The caller bounds it by
    /// `batch_deadline` (the loop's task set); the slot is freed however it ends.
    pub(crate) async fn thread(self: Arc<Self>, thread: Thread) {
        struct Slot(Arc<Agent>, String);
        impl Drop for Slot {
            fn drop(&mut self) {
                lock(&self.0.in_flight).remove(&self.1);
            }
        }
        let _slot = Slot(Arc::clone(&self), thread.root.clone());
        let mut payers: Vec<String> =
            thread.notes.iter().map(|n| n.author_did.clone()).filter(|d| *d != self.owner_did).collect();
        payers.sort_unstable();
        payers.dedup();
        let span = tracing::info_span!("agent_batch", notifications = thread.notes.len(), thread = %thread.root);
        super::spend::paid_by(payers, tracing::Instrument::instrument(self.batch(thread.notes), span)).await;
    }

    /// One thread's notifications through the model.
    async fn batch(self: &Arc<Self>, notes: Vec<Notification>) {
        // 2. Gate, per notification: a pause after a failure, a stranger's share, the
        // author's limit.
        let now = now_ms();
        let mut allowed = Vec::new();
        for n in notes {
            if lock(&self.failing).get(&id(&n)).is_some_and(|f| f.next > now) {
                continue; // still pausing after a failure; kept for a later poll
            }
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
            return;
        }
        // 3. Context.
        let messages = match self.prompt(&allowed).await {
            Ok(m) => m,
            Err(error) => {
                tracing::error!(%error, "could not assemble the context; the batch waits for the next poll");
                return;
            }
        };
        // 4–6. Model, tools, act: the handler carries out each call through the table.
        let mut hands = Hands::new(Arc::clone(self), Room::Batch, allowed.clone());
        let tools = tools::offered(Room::Batch, &self.config);
        let run = self.run_model("notifications", messages, &tools, &mut hands).await;
        // 7. Outcome.
        match run {
            Ok(run) => {
                Metrics::count(&self.metrics.batches, if run.exhausted { "step_limit" } else { "ok" });
                let gap = self.config.session_gap;
                self.with_schedule(|s| s.active(now_ms(), gap, true)).await;
                for n in &allowed {
                    self.mark_handled(n).await;
                    lock(&self.failing).remove(&id(n));
                }
                lock(&self.status).replies += hands.replied.len() as u64;
            }
            Err(error) => {
                Metrics::count(&self.metrics.batches, "llm_failed");
                self.keep_for_later(&allowed, &hands, &error).await;
            }
        }
        self.after(&hands.replied, hands.used_skill.clone()).await;
    }

    /// After a failed model run: the notifications left unanswered wait for a later poll with
    /// a growing pause, and are given up after a day.
    async fn keep_for_later(&self, allowed: &[Notification], hands: &Hands, error: &super::llm::Error) {
        let left: Vec<&Notification> =
            allowed.iter().filter(|n| !hands.replied.iter().any(|r| r.to.uri == n.uri)).collect();
        let mut given_up = 0;
        let pause = self.config.poll_interval.as_millis() as u64;
        for n in &left {
            let now = now_ms();
            let give_up = {
                let mut failing = lock(&self.failing);
                if failing.len() >= MAX_FAILING && !failing.contains_key(&id(n)) {
                    failing.retain(|_, f| now.saturating_sub(f.since) < GIVE_UP_AFTER_MS);
                }
                let f = failing.entry(id(n)).or_insert(Failing { since: now, tries: 0, next: now });
                f.tries += 1;
                f.next = now + pause.saturating_mul(1 << f.tries.min(16)).min(MAX_RETRY_PAUSE_MS);
                let give_up = now.saturating_sub(f.since) >= GIVE_UP_AFTER_MS;
                if give_up {
                    failing.remove(&id(n));
                }
                give_up
            };
            if give_up {
                self.mark_handled(n).await;
                given_up += 1;
            }
        }
        lock(&self.status).last_error = Some(format!("LLM: {error}"));
        let kept = left.len() - given_up;
        let replied = hands.replied.len();
        match (kept, given_up) {
            (0, 0) => tracing::error!(%error, replied, "the LLM failed after every notification was answered"),
            (kept, 0) => tracing::error!(
                %error,
                kept,
                replied,
                "the LLM gave no usable answer; the unanswered notifications are tried again at a later poll"
            ),
            (kept, given_up) => tracing::error!(
                %error,
                kept,
                given_up,
                replied,
                "the LLM gave no usable answer; notifications failing for a day are given up, the rest tried again"
            ),
        }
    }
}

fn reason_label(reason: &str) -> &'static str {
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
