//! The agent's tasks, and blocking work off the async runtime.
//!
//! Every batch, operator run, scheduled entry point and distill pass runs in one [`Tasks`]
//! set that the agent's loop owns, each under its deadline: the loop reaps those that ended
//! at each tick, and when the node stops it cancels and awaits them all, so nothing the agent
//! started outlives it. Blocking work (the memory engine's calls, the store's writes) runs on
//! the runtime's blocking pool ([`blocking`]), so none holds an executor thread.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

/// A blocking task that panicked or was cancelled.
#[derive(Debug, thiserror::Error)]
#[error("a blocking task failed: {0}")]
pub struct Failed(String);

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

/// The tasks the agent's loop owns.
#[derive(Debug)]
pub(crate) struct Tasks {
    /// `None` once closed: nothing new starts while the agent stops.
    set: Mutex<Option<JoinSet<()>>>,
}

impl Default for Tasks {
    fn default() -> Self {
        Self { set: Mutex::new(Some(JoinSet::new())) }
    }
}

impl Tasks {
    /// Runs `task`, stopped at `deadline` (then `on_deadline` runs and a warning names
    /// `what`); `false` when the set is closed and it did not start.
    pub(crate) fn spawn(
        &self,
        what: &'static str,
        deadline: Duration,
        on_deadline: impl FnOnce() + Send + 'static,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> bool {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        let Some(set) = set.as_mut() else { return false };
        let until = Instant::now() + deadline;
        set.spawn(DEADLINE.scope(until, async move {
            if tokio::time::timeout_at(until, task).await.is_err() {
                on_deadline();
                tracing::warn!(
                    task = what,
                    deadline_s = deadline.as_secs(),
                    "an agent task passed its deadline and was stopped"
                );
            }
        }));
        true
    }

    /// Collects the tasks that ended; answers how many still run.
    pub(crate) fn reap(&self) -> usize {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        let Some(set) = set.as_mut() else { return 0 };
        while let Some(ended) = set.try_join_next() {
            if let Err(error) = ended
                && error.is_panic()
            {
                tracing::error!(%error, "an agent task panicked");
            }
        }
        set.len()
    }

    /// Closes the set: cancels every task still running and waits until each has stopped.
    /// Answers how many were cancelled.
    pub(crate) async fn close(&self) -> usize {
        let set = self.set.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut set) = set else { return 0 };
        let running = set.len();
        set.shutdown().await;
        running
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_task_stops_at_its_deadline_and_closing_cancels_and_awaits_the_rest() {
        let tasks = Tasks::default();
        let late = Arc::new(AtomicUsize::new(0));
        let l = Arc::clone(&late);
        assert!(tasks.spawn(
            "hung",
            Duration::from_millis(50),
            move || {
                l.fetch_add(1, Ordering::SeqCst);
            },
            async {
                std::future::pending::<()>().await;
            }
        ));
        // The deadline reaches the task's model call.
        let left = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&left);
        assert!(tasks.spawn("short", Duration::from_secs(60), || {}, async move {
            *seen.lock().expect("lock") = time_left();
            std::future::pending::<()>().await;
        }));
        // Bounded: the deadline passed long before, whatever the machine's load.
        for _ in 0..200 {
            if late.load(Ordering::SeqCst) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(late.load(Ordering::SeqCst), 1, "the hung task was stopped at its deadline");
        assert_eq!(tasks.reap(), 1, "one task still runs");
        let left = left.lock().expect("lock").expect("a task in the set has a deadline");
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(50), "{left:?}");
        // A guard inside a running task is dropped by the time close returns.
        let dropped = Arc::new(AtomicUsize::new(0));
        struct Guard(Arc<AtomicUsize>);
        impl Drop for Guard {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let guard = Guard(Arc::clone(&dropped));
        assert!(tasks.spawn("held", Duration::from_secs(600), || {}, async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        }));
        assert_eq!(tasks.close().await, 2);
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "closing awaited the task's end");
        assert!(!tasks.spawn("after", Duration::from_secs(1), || {}, async {}), "a closed set starts nothing");
        assert_eq!(tasks.reap(), 0);
        assert_eq!(time_left(), None, "outside the set there is no deadline");
    }
}
