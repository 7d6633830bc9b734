//! The agent's tasks, and blocking work off the async runtime.
//!
//! Every batch, operator run, scheduled entry point and distill pass runs in one [`Tasks`]
//! set that the agent's loop owns (`runs.rs`), each under its deadline and each ending with
//! what the loop learns from it: the loop hears each end as it happens, and when the node
//! stops it cancels and awaits them all, so nothing the agent started outlives it. Blocking work (the memory engine's calls, the store's writes) runs on
//! the runtime's blocking pool ([`blocking`]), so none holds an executor thread.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

/// A blocking task that panicked or was cancelled.
#[derive(Debug, thiserror::Error)]
#[error("a blocking task failed: {0}")]
pub(crate) struct Failed(String);

/// Runs `f` on the runtime's blocking pool and waits for it.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Failed> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Failed(e.to_string()))
}

tokio::task_local! {
    /// When the task this runs in must end: a model call inside it stops in time to be
    /// recorded.
    static DEADLINE: Instant;
}

/// The time left before the deadline of the task this runs in, if it has one.
pub(crate) fn time_left() -> Option<Duration> {
    DEADLINE.try_with(|d| d.saturating_duration_since(Instant::now())).ok()
}

/// The tasks the agent's loop owns, each ending with what the loop learns from it (`O`).
/// Only the loop holds it: no lock.
#[derive(Debug)]
pub(crate) struct Tasks<O> {
    set: JoinSet<O>,
    /// Set once closed: nothing new starts while the agent stops.
    closed: bool,
}

impl<O> Default for Tasks<O> {
    fn default() -> Self {
        Self { set: JoinSet::new(), closed: false }
    }
}

impl<O: Send + 'static> Tasks<O> {
    /// Runs `task`, stopped at `deadline` (then it ends with what `on_deadline` gives, and a
    /// warning names `what`); `false` when the set is closed and it did not start.
    pub(crate) fn spawn(
        &mut self,
        what: &'static str,
        deadline: Duration,
        on_deadline: impl FnOnce() -> O + Send + 'static,
        task: impl Future<Output = O> + Send + 'static,
    ) -> bool {
        if self.closed {
            return false;
        }
        let until = Instant::now() + deadline;
        self.set.spawn(DEADLINE.scope(until, async move {
            match tokio::time::timeout_at(until, task).await {
                Ok(out) => out,
                Err(_) => {
                    tracing::warn!(
                        task = what,
                        deadline_s = deadline.as_secs(),
                        "an agent task passed its deadline and was stopped"
                    );
                    on_deadline()
                }
            }
        }));
        true
    }

    /// Waits for the next task to end and answers what it gave; `None` at once when none
    /// runs. A task that panicked is logged and skipped.
    pub(crate) async fn next(&mut self) -> Option<O> {
        while let Some(ended) = self.set.join_next().await {
            match ended {
                Ok(out) => return Some(out),
                Err(error) if error.is_panic() => tracing::error!(%error, "an agent task panicked"),
                Err(_) => {}
            }
        }
        None
    }

    /// How many tasks still run.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    /// Closes the set: cancels every task still running and waits until each has stopped.
    /// Answers how many were cancelled.
    pub(crate) async fn close(&mut self) -> usize {
        self.closed = true;
        let running = self.set.len();
        self.set.shutdown().await;
        running
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn a_task_stops_at_its_deadline_and_closing_cancels_and_awaits_the_rest() {
        let mut tasks: Tasks<&'static str> = Tasks::default();
        assert_eq!(tasks.next().await, None, "an empty set answers at once");
        assert!(tasks.spawn("hung", Duration::from_millis(50), || "deadline", async {
            std::future::pending::<&'static str>().await
        }));
        // The deadline reaches the task's model call.
        let left = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&left);
        assert!(tasks.spawn("short", Duration::from_secs(60), || "deadline", async move {
            *seen.lock().expect("lock") = time_left();
            std::future::pending::<&'static str>().await
        }));
        // The hung task ends at its deadline with what `on_deadline` gives; the other runs on.
        let ended = tokio::time::timeout(Duration::from_secs(10), tasks.next()).await;
        assert_eq!(ended.expect("the deadline passed long before"), Some("deadline"));
        assert_eq!(tasks.len(), 1, "one task still runs");
        let left = left.lock().expect("lock").expect("a task in the set has a deadline");
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(50), "{left:?}");
        // A task that ends gives its outcome to the loop.
        assert!(tasks.spawn("quick", Duration::from_secs(60), || "deadline", async { "done" }));
        assert_eq!(tasks.next().await, Some("done"));
        // A guard inside a running task is dropped by the time close returns.
        let dropped = Arc::new(AtomicUsize::new(0));
        struct Guard(Arc<AtomicUsize>);
        impl Drop for Guard {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let guard = Guard(Arc::clone(&dropped));
        assert!(tasks.spawn("held", Duration::from_secs(600), || "deadline", async move {
            let _guard = guard;
            std::future::pending::<&'static str>().await
        }));
        assert_eq!(tasks.close().await, 2);
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "closing awaited the task's end");
        assert!(
            !tasks.spawn("after", Duration::from_secs(1), || "deadline", async { "done" }),
            "a closed set starts nothing"
        );
        assert_eq!(tasks.len(), 0);
        assert_eq!(time_left(), None, "outside the set there is no deadline");
    }
}
