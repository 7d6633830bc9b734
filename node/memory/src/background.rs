//! Work that can wait: threads that run it at a lower CPU priority.
//!
//! Indexing skills into memory and building vector index segments catch up whenever the CPU is
//! free; ingestion, whose verdicts gate gossip propagation, and the API should not wait for
//! them. On Linux the nice value is a per-thread attribute, so a background thread raises its
//! own and the threads that serve peers and users keep theirs. Lowering a priority needs no
//! privilege.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot};

/// Threads in each compute pool a node starts; 0: one per core.
static POOL_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Sets the threads of each compute pool a node starts from now on (ingest's signature checks,
/// background jobs, vector segment builds): one per core unless set. A process that runs
/// hundreds of nodes (a swarm benchmark) sets 1, and each node then does that work on the
/// thread that asks for it, with no pool at all; the nodes themselves keep the cores busy.
pub fn set_pool_threads(threads: usize) {
    POOL_THREADS.store(threads, Ordering::Relaxed);
}

/// The threads of each compute pool a node starts (see [`set_pool_threads`]): 1 means none.
pub fn pool_threads() -> usize {
    match POOL_THREADS.load(Ordering::Relaxed) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        threads => threads,
    }
}

/// The nice value of work that holds locks others may wait for (the memory engine's writer):
/// about a tenth of a core's share against busy threads of the default priority, so it still
/// moves while they run.
pub const LOW: i32 = 10;
/// The nice value of work nobody waits for (vector segment builds): the lowest priority.
pub const LOWEST: i32 = 19;

/// Jobs waiting for the background thread; a caller past this waits to hand its job over.
const QUEUE: usize = 16;

/// Lowers the calling thread's CPU priority to `nice` ([`LOW`] or [`LOWEST`]). Failing
/// changes nothing but the scheduling, so it is logged, not returned.
pub fn lower_this_thread(nice: i32) {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice) {
        tracing::debug!(%error, nice, "could not lower a background thread's priority");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Runs `work` at `nice` and returns what it returns: on the calling thread if that already
/// runs at `nice` or lower, else on a thread of its own that the call waits for (`Err`: the
/// OS refused that thread). For a library call that starts threads (they inherit the
/// priority of the thread that starts them), so the threads it leaves behind run at `nice`.
pub fn run_lowered<T: Send>(nice: i32, work: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    #[cfg(target_os = "linux")]
    if this_thread_nice().is_some_and(|current| current >= nice) {
        return Ok(work());
    }
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new().name("druse-lowered".into()).spawn_scoped(scope, move || {
            lower_this_thread(nice);
            work()
        })?;
        // A panic in `work` is passed on as it would be on the calling thread.
        Ok(thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// The calling thread's nice value (Linux), for tests and diagnostics.
#[cfg(target_os = "linux")]
pub fn this_thread_nice() -> Option<i32> {
    rustix::process::getpriority_process(Some(rustix::thread::gettid())).ok()
}

type Job = Box<dyn FnOnce() + Send>;

/// The background thread has stopped (it panicked, or the process is shutting down).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the background thread has stopped")]
pub struct Stopped;

/// One thread of lower priority that runs jobs one at a time, in the order they were handed
/// over. It ends when the last handle is dropped, after the jobs already queued. A job runs in
/// a compute pool of its own, whose threads share that priority, so what a job does in
/// parallel (embedding a batch, say) yields to the node's other work as the job does.
#[derive(Debug, Clone)]
pub struct Background {
    jobs: mpsc::Sender<Job>,
}

impl Background {
    /// Starts the thread, named `name`, at `nice`.
    pub fn start(name: &str, nice: i32) -> std::io::Result<Self> {
        let (jobs, mut queue) = mpsc::channel::<Job>(QUEUE);
        let pool_name = name.to_owned();
        std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            lower_this_thread(nice);
            // Started from this thread, the pool's threads inherit its priority.
            let threads = pool_threads();
            let pool = (threads > 1)
                .then(|| {
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .thread_name(move |i| format!("{pool_name}-{i}"))
                        .build()
                        .inspect_err(|error| tracing::warn!(%error, "a background thread without a pool of its own"))
                        .ok()
                })
                .flatten();
            while let Some(job) = queue.blocking_recv() {
                // A job that panics fails alone: its caller gets `Stopped`, the next job runs.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &pool {
                    Some(pool) => pool.install(job),
                    None => job(),
                }));
            }
        })?;
        Ok(Self { jobs })
    }

    /// Runs `work` on the background thread and returns its result. If the caller stops
    /// waiting, a job already handed over still runs to its end.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, Stopped> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = reply.send(work());
        });
        self.jobs.send(job).await.map_err(|_| Stopped)?;
        answer.await.map_err(|_| Stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_on_a_named_thread_of_lower_priority() {
        let background = Background::start("test-background", LOW).unwrap();
        let first = background.run(|| (std::thread::current().name().map(str::to_owned), 1)).await.unwrap();
        assert!(first.0.as_ref().is_some_and(|name| name.starts_with("test-background")), "{first:?}");
        assert_eq!(first.1, 1);
        #[cfg(target_os = "linux")]
        {
            let before = this_thread_nice();
            let low = Some(LOW.max(before.unwrap_or(0)));
            // Both halves of a parallel section run in the job's own pool, at its priority.
            let (nice, other) = background.run(|| rayon::join(this_thread_nice, this_thread_nice)).await.unwrap();
            assert_eq!((nice, other), (low, low), "the background thread and its pool kept their priority");
            assert_eq!(this_thread_nice(), before, "the caller's priority changed too");
        }
    }

    #[tokio::test]
    async fn a_job_that_panics_fails_alone() {
        let background = Background::start("test-background-panic", LOWEST).unwrap();
        let failed = background.run(|| -> u32 { panic!("a job failed") }).await;
        assert!(failed.is_err());
        assert_eq!(background.run(|| 7).await.unwrap(), 7, "the thread did not survive a job's panic");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn threads_started_by_lowered_work_keep_its_priority_and_the_caller_keeps_its_own() {
        let before = this_thread_nice();
        let low = Some(LOW.max(before.unwrap_or(0)));
        let (inside, started) = run_lowered(LOW, || {
            let started = std::thread::spawn(this_thread_nice).join().unwrap();
            (this_thread_nice(), started)
        })
        .unwrap();
        assert_eq!((inside, started), (low, low));
        assert_eq!(this_thread_nice(), before, "the caller's priority changed");
        // Already low enough: the work runs where it is called.
        let same = std::thread::spawn(|| {
            lower_this_thread(LOWEST);
            let me = std::thread::current().id();
            run_lowered(LOW, move || std::thread::current().id() == me).unwrap()
        });
        assert!(same.join().unwrap(), "a thread already below LOW spawned another");
    }
}
