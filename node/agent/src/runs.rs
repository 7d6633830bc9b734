//! The agent's loop and what it owns (seed 001): one loop for every entry point, and the
//! state only it changes, so none of it sits behind a lock.
//!
//! At each tick it polls (`turn.rs`, step 1) and admits the threads that may run now (step 2):
//! a thread already under way waits, strangers' threads take at most `concurrent_batches`
//! slots and the owner's have one of their own, and a notification still pausing after a
//! failed run is left for a later poll. Each admitted thread, each operator's run, each
//! scheduled entry point and each distill pass is a task of its [`Tasks`] set, under its
//! deadline; the loop hears each end as it happens and applies what it says ([`Ended`]): the
//! thread's slot freed, its failures paused or given up, the next entry point or distill
//! pass started. When the node stops it cancels and awaits every task.
//!
//! What runs change while they run (the per-author limit, the owner's gate, the schedule)
//! stays on the agent, behind its own lock: a run counts a reply or asks for an approval in
//! the middle of its tool loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use druse_protocol::now_ms;
use tokio::sync::{mpsc, oneshot};

use crate::bluesky::Notification;
use crate::core::{Agent, id, lock};
use crate::metrics::Metrics;
use crate::node::Pending;
use crate::schedule::{Entry, RunReport};
use crate::task::Tasks;
use crate::turn::{Ran, Thread, reason_label};

/// An operator's request to run an entry point now, and where its outcome goes.
pub(crate) type RunRequest = (Entry, oneshot::Sender<RunReport>);

/// Entry-point requests waiting at most; more are refused as busy.
pub(crate) const MAX_WAITING_RUNS: usize = 4;

/// The longest an operator's run may take (a few LLM round trips).
pub const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// A notification whose batch keeps failing (the model down, or answering garbage) is tried
/// again at later polls with a growing pause, and given up only after this long, with a log
/// line: an outage of the model loses nothing.
const GIVE_UP_AFTER_MS: u64 = 24 * 3600 * 1000;

/// The longest pause between two tries of a failing notification.
const MAX_RETRY_PAUSE_MS: u64 = 5 * 60 * 1000;

/// Failing notifications remembered at most.
const MAX_FAILING: usize = 10_000;

/// Episodes waiting for a distill pass at most; more are left out (each is seen again when
/// the next episode like it goes well).
const MAX_TO_DISTILL: usize = 256;

/// A notification whose batch failed: since when, how often, and when to try again.
#[derive(Debug, Clone, Copy)]
struct Failing {
    since: u64,
    tries: u32,
    next: u64,
}

/// What a task of the loop ended with.
#[derive(Debug)]
pub(crate) enum Ended {
    /// A thread's run, and how it went (nothing, past its deadline).
    Thread { root: String, ran: Ran },
    /// An entry point run by the schedule or an operator (its report already sent).
    Entry,
    /// A distill pass.
    Distill,
}

/// An operator's run of the notifications, waiting for the threads its poll started.
#[derive(Debug)]
struct Waiter {
    roots: HashSet<String>,
    reply: oneshot::Sender<RunReport>,
}

/// What the loop owns.
#[derive(Debug)]
struct Runs {
    agent: Arc<Agent>,
    tasks: Tasks<Ended>,
    /// The threads (by root URI) under way, each with whether it holds the owner's
    /// notifications: a poll leaves their new notifications for a later one.
    in_flight: HashMap<String, bool>,
    failing: HashMap<String, Failing>,
    /// An entry point (musing, reflection, review) runs: one at a time.
    entry_running: bool,
    /// Operators' entry points waiting for the one that runs (at most [`MAX_WAITING_RUNS`]).
    waiting: VecDeque<RunRequest>,
    /// Operators' runs of the notifications waiting for their threads.
    waiters: Vec<Waiter>,
    /// A distill pass runs: one at a time, and these episodes wait for the next.
    distilling: bool,
    to_distill: VecDeque<u64>,
}

/// The loop: polls at each tick, runs what operators ask, and applies each task's end, until
/// `stopped`; then cancels and awaits every task.
pub(crate) async fn serve(
    agent: Arc<Agent>,
    mut requests: mpsc::Receiver<RunRequest>,
    paused: Arc<AtomicBool>,
    mut stopped: Pending<'static, ()>,
) {
    // A pause outlives a restart: the state keeps it, and an operator's change is written at
    // the next tick.
    let mut kept = agent.state.paused();
    if kept {
        paused.store(true, Ordering::SeqCst);
        agent.set_status(|s| s.paused = true);
        tracing::info!("the agent was paused before the restart and stays paused (druse-node agent resume)");
    }
    let mut tick = tokio::time::interval(agent.config.poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut runs = Runs {
        agent: Arc::clone(&agent),
        tasks: Tasks::default(),
        in_flight: HashMap::new(),
        failing: HashMap::new(),
        entry_running: false,
        waiting: VecDeque::new(),
        waiters: Vec::new(),
        distilling: false,
        to_distill: VecDeque::new(),
    };
    loop {
        // Nothing that waits for the model runs in the loop itself: a slow model never holds
        // a poll or an owner's approval.
        let room = runs.waiting.len() + runs.waiters.len() < MAX_WAITING_RUNS;
        tokio::select! {
            () = &mut stopped => break,
            Some(ended) = runs.tasks.next() => {
                runs.ended(ended).await;
                continue;
            }
            Some(request) = requests.recv(), if room => {
                runs.request(request).await;
                continue;
            }
            _ = tick.tick() => {}
        }
        let now_paused = paused.load(Ordering::SeqCst);
        if now_paused != kept {
            kept = now_paused;
            agent.write_state("keep the pause", move |s| s.set_paused(now_paused)).await;
        }
        if agent.config.chat_only() {
            // No account: nothing to poll, and no entry point that would post.
            continue;
        }
        if now_paused || agent.llm.spend().capped() {
            // At the daily cap the notifications wait unread for the next UTC day.
            agent.set_status(|s| s.polls_skipped += 1);
            continue;
        }
        let polled = tokio::select! {
            () = &mut stopped => break,
            polled = runs.poll() => polled,
        };
        if let Err(error) = polled {
            tracing::warn!(%error, "polling notifications failed; trying again next tick");
        }
        // The scheduled entry points whose time has come (seed 001: checked on every tick).
        let due = agent.due(now_ms());
        if !due.is_empty() && !runs.entry_running {
            let a = Arc::clone(&agent);
            runs.start_entry("scheduled_run", async move {
                for entry in due {
                    a.run_entry(entry).await;
                }
            });
        }
    }
    let cancelled = runs.tasks.close().await;
    agent.set_status(|s| s.state = "stopped");
    tracing::info!(cancelled, "the agent stopped: its runs are cancelled and awaited, and none is left");
}

impl Runs {
    /// Steps 1 and 2: polls, and starts each thread that may run now; answers their roots.
    async fn poll(&mut self) -> Result<Vec<String>, crate::bluesky::Error> {
        let agent = &self.agent;
        let result = agent.poll().await;
        agent.metrics.session_refreshes.set(agent.bsky.refreshes() as i64);
        agent.set_status(|s| {
            s.polls += 1;
            s.last_poll_at = Some(now_ms());
            if let Err(error) = &result {
                s.last_error = Some(error.to_string());
            }
        });
        let (threads, distill) = result?;
        let started = threads.into_iter().filter_map(|thread| self.admit(thread)).collect();
        self.distill(distill);
        Ok(started)
    }

    /// Step 2 for one thread: starts it when it is not under way and a slot of its kind is
    /// free (the owner's threads have one of their own beside `concurrent_batches`
    /// strangers' threads), without the notifications still pausing after a failure.
    /// Answers its root if it started.
    fn admit(&mut self, mut thread: Thread) -> Option<String> {
        let strangers = self.in_flight.values().filter(|owner| !**owner).count();
        let full = if thread.owners {
            self.in_flight.values().any(|owner| *owner)
        } else {
            strangers >= self.agent.config.concurrent_batches
        };
        if self.in_flight.contains_key(&thread.root) || full {
            return None;
        }
        // Counted once a run takes them: a thread still under way is seen again at each poll.
        for n in &thread.notes {
            Metrics::count(&self.agent.metrics.notifications, reason_label(&n.reason));
        }
        let now = now_ms();
        thread.notes.retain(|n| self.failing.get(&id(n)).is_none_or(|f| f.next <= now));
        if thread.notes.is_empty() {
            return None;
        }
        let (agent, metrics, owners) = (Arc::clone(&self.agent), self.agent.metrics.clone(), thread.owners);
        let (root, late) = (thread.root.clone(), thread.root.clone());
        let started = self.tasks.spawn(
            "thread",
            self.agent.config.batch_deadline,
            move || {
                metrics.batch_deadlines.inc();
                Ended::Thread { root: late, ran: Ran::Nothing }
            },
            async move {
                let root = thread.root.clone();
                Ended::Thread { ran: agent.thread(thread).await, root }
            },
        );
        started.then(|| {
            self.in_flight.insert(root.clone(), owners);
            root
        })
    }

    /// Applies what a task ended with.
    async fn ended(&mut self, ended: Ended) {
        match ended {
            Ended::Thread { root, ran } => {
                self.in_flight.remove(&root);
                match ran {
                    Ran::Answered(ids) => {
                        for id in ids {
                            self.failing.remove(&id);
                        }
                    }
                    Ran::Failed { left, replied, error } => self.keep_for_later(left, replied, error).await,
                    Ran::Nothing => {}
                }
                for waiter in &mut self.waiters {
                    waiter.roots.remove(&root);
                }
                let (done, kept) = std::mem::take(&mut self.waiters).into_iter().partition(|w| w.roots.is_empty());
                self.waiters = kept;
                for waiter in done {
                    let report = polled();
                    self.agent.counted(Entry::Notifications, &report);
                    let _ = waiter.reply.send(report);
                }
            }
            Ended::Entry => {
                self.entry_running = false;
                if let Some(request) = self.waiting.pop_front() {
                    self.run_for_operator(request);
                }
            }
            Ended::Distill => {
                self.distilling = false;
                self.distill(Vec::new());
            }
        }
    }

    /// An operator's request: the notifications are polled now and answered once the
    /// threads that poll started end; any other entry point runs now, or after the one under
    /// way.
    async fn request(&mut self, (entry, reply): RunRequest) {
        if entry != Entry::Notifications {
            if self.entry_running {
                self.waiting.push_back((entry, reply));
            } else {
                self.run_for_operator((entry, reply));
            }
            return;
        }
        let report = match self.poll().await {
            Ok(roots) if roots.is_empty() => polled(),
            Ok(roots) => {
                self.waiters.push(Waiter { roots: roots.into_iter().collect(), reply });
                return;
            }
            Err(error) => RunReport::new(Entry::Notifications, "failed", error.to_string()),
        };
        self.agent.counted(Entry::Notifications, &report);
        let _ = reply.send(report);
    }

    fn run_for_operator(&mut self, (entry, reply): RunRequest) {
        let agent = Arc::clone(&self.agent);
        self.start_entry("operator_run", async move {
            let _ = reply.send(agent.run_entry(entry).await);
        });
    }

    fn start_entry(&mut self, what: &'static str, run: impl Future<Output = ()> + Send + 'static) {
        self.entry_running = self.tasks.spawn(what, RUN_TIMEOUT, || Ended::Entry, async move {
            run.await;
            Ended::Entry
        });
    }

    /// Queues `episodes` for distilling and starts a pass over what waits, when none runs:
    /// one pass at a time, beside the polls, so a slow model never holds a reply; stopped at
    /// `batch_deadline`.
    fn distill(&mut self, episodes: Vec<u64>) {
        for episode in episodes {
            if self.to_distill.len() >= MAX_TO_DISTILL {
                tracing::warn!(episode, "too many episodes wait for a distill pass: this one is left out");
            } else if !self.to_distill.contains(&episode) {
                self.to_distill.push_back(episode);
            }
        }
        if self.distilling || self.to_distill.is_empty() {
            return;
        }
        let episodes: Vec<u64> = self.to_distill.drain(..).collect();
        let agent = Arc::clone(&self.agent);
        self.distilling =
            self.tasks.spawn("distill", self.agent.config.batch_deadline, || Ended::Distill, async move {
                for episode in episodes {
                    agent.distill_around(episode).await;
                }
                Ended::Distill
            });
    }

    /// After a failed model run: the notifications left unanswered wait for a later poll with
    /// a growing pause, and are given up after a day.
    async fn keep_for_later(&mut self, left: Vec<Notification>, replied: usize, error: String) {
        let mut given_up = 0;
        let pause = self.agent.config.poll_interval.as_millis() as u64;
        for n in &left {
            let now = now_ms();
            if self.failing.len() >= MAX_FAILING && !self.failing.contains_key(&id(n)) {
                self.failing.retain(|_, f| now.saturating_sub(f.since) < GIVE_UP_AFTER_MS);
            }
            let f = self.failing.entry(id(n)).or_insert(Failing { since: now, tries: 0, next: now });
            f.tries += 1;
            f.next = now + pause.saturating_mul(1 << f.tries.min(16)).min(MAX_RETRY_PAUSE_MS);
            if now.saturating_sub(f.since) >= GIVE_UP_AFTER_MS {
                self.failing.remove(&id(n));
                self.agent.mark_handled(n).await;
                given_up += 1;
            }
        }
        lock(&self.agent.status).last_error = Some(format!("LLM: {error}"));
        match (left.len() - given_up, given_up) {
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
        // Counted once the failure is kept and said: what reads the count finds both.
        Metrics::count(&self.agent.metrics.batches, "llm_failed");
    }
}

/// What an operator's run of the notifications answers once its threads ended.
fn polled() -> RunReport {
    RunReport::new(Entry::Notifications, "done", "polled the notifications and ran their batches")
}
