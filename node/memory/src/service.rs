//! The memory engine as an owned service: the [`Handle`] a node, its API and its agent hold.
//!
//! The engine's calls block (embedding, the disk, scans of every crystal), so no caller runs
//! them itself. Writes (add, change, consolidation) go through one bounded queue to one writer
//! thread, in the order they were handed over; reads (search, get, history, similar, scans) go
//! through another to a small pool of reader threads; work nobody waits for (skills from
//! peers, bounty boosts) goes to a background writer of low priority
//! ([`crate::background`]). An async caller waits for its answer without holding an executor
//! thread; a caller past a full queue waits to hand its command over, so a flood of requests
//! queues at the door instead of piling threads on the engine's locks. The threads start with
//! the first command that needs them and end when the last handle is dropped.

use std::sync::{Arc, Mutex, OnceLock};

use druse_protocol::UnixMillis;
use tokio::sync::{mpsc, oneshot};

use crate::background::{self, Background};
use crate::correction::Reconciler;
use crate::crystal::{Crystal, CrystalId};
use crate::engine::{Added, Error, History, Hit, Memory, NewMemory, Query};
use crate::governance::Caller;

type Job = Box<dyn FnOnce(&Memory) + Send>;

/// Writes waiting for the writer at most; a caller past this waits to hand its write over.
const WRITES_WAITING: usize = 64;
/// Reads waiting for a reader at most.
const READS_WAITING: usize = 256;
/// Reader threads at most (one per core below that).
const MAX_READERS: usize = 4;

/// A handle to the memory service; clones share it.
#[derive(Clone)]
pub struct Handle {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Arc<Memory>,
    /// The writer's and the readers' queues, once the first command started them (`None`:
    /// their threads could not be made).
    queues: OnceLock<Option<Queues>>,
    /// Where work nobody waits for runs, at low priority.
    background: Background,
}

struct Queues {
    writes: mpsc::Sender<Job>,
    reads: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("engine", &self.inner.engine).finish_non_exhaustive()
    }
}

impl Handle {
    /// Serves `engine`; its background writer is a thread named `background_name`, started now
    /// at [`background::LOW`] priority.
    pub fn new(engine: Memory, background_name: &str) -> std::io::Result<Self> {
        let background = Background::start(background_name, background::LOW)?;
        Ok(Self { inner: Arc::new(Inner { engine: Arc::new(engine), queues: OnceLock::new(), background }) })
    }

    fn queues(&self) -> Result<&Queues, Error> {
        self.inner.queues.get_or_init(|| start(&self.inner.engine)).as_ref().ok_or(Error::Stopped)
    }

    /// Runs `work` on the writer, after every write handed over before it, and answers what it
    /// gives. For a write made of several calls (a reconciliation asked beforehand, then the
    /// add it decided).
    pub async fn write<T: Send + 'static>(&self, work: impl FnOnce(&Memory) -> T + Send + 'static) -> Result<T, Error> {
        let queue = self.queues()?.writes.clone();
        run(&queue, work).await
    }

    /// Runs `work` on a reader and answers what it gives: for a read made of several calls
    /// (the blocks of an agent's prompt).
    pub async fn read<T: Send + 'static>(&self, work: impl FnOnce(&Memory) -> T + Send + 'static) -> Result<T, Error> {
        let queue = self.queues()?.reads.clone();
        run(&queue, work).await
    }

    /// [`Handle::read`] for code that already runs on a blocking thread (a store scan that
    /// needs a vector lookup): it waits for the answer there. Called on an async thread, it
    /// panics (that is the caller's bug: use [`Handle::read`]).
    pub fn read_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Memory) -> T + Send + 'static,
    ) -> Result<T, Error> {
        let (job, answer) = job(work);
        self.queues()?.reads.blocking_send(job).map_err(|_| Error::Stopped)?;
        answer.blocking_recv().map_err(|_| Error::Stopped)
    }

    /// Runs `work` on the background writer, at low priority, after the background work
    /// handed over before it.
    pub async fn background<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Memory) -> T + Send + 'static,
    ) -> Result<T, Error> {
        let engine = Arc::clone(&self.inner.engine);
        self.inner.background.run(move || work(&engine)).await.map_err(|_| Error::Stopped)
    }

    /// Stores a memory ([`Memory::add`]).
    pub async fn add(&self, new: NewMemory, actor: &str, now: UnixMillis) -> Result<Added, Error> {
        let actor = actor.to_owned();
        self.write(move |m| m.add(new, &actor, now)).await?
    }

    /// Stores memories in order, all or none ([`Memory::add_many`]).
    pub async fn add_many(&self, news: Vec<NewMemory>, actor: &str, now: UnixMillis) -> Result<Vec<Added>, Error> {
        let actor = actor.to_owned();
        self.write(move |m| m.add_many(news, &actor, now)).await?
    }

    /// Stores a memory with `reconciler` deciding ([`Memory::add_with`]).
    pub async fn add_with(
        &self,
        new: NewMemory,
        reconciler: impl Reconciler + 'static,
        actor: &str,
        now: UnixMillis,
    ) -> Result<Added, Error> {
        let actor = actor.to_owned();
        self.write(move |m| m.add_with(new, &reconciler, &actor, now)).await?
    }

    /// Rewrites one crystal through `edit` ([`Memory::change`]).
    pub async fn change(
        &self,
        id: CrystalId,
        actor: &str,
        why: &str,
        now: UnixMillis,
        edit: impl FnMut(&mut Crystal) + Send + 'static,
    ) -> Result<Crystal, Error> {
        let (actor, why) = (actor.to_owned(), why.to_owned());
        self.write(move |m| m.change(id, &actor, now, &why, edit)).await?
    }

    /// One consolidation pass ([`Memory::consolidate`]).
    pub async fn consolidate(&self, now: UnixMillis) -> Result<crate::consolidation::Report, Error> {
        self.write(move |m| m.consolidate(now)).await?
    }

    /// Recall, counted as access ([`Memory::search`]).
    pub async fn search(&self, query: Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        self.read(move |m| m.search(&query, caller, now)).await?
    }

    /// Recall that leaves no trace ([`Memory::peek`]).
    pub async fn peek(&self, query: Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        self.read(move |m| m.peek(&query, caller, now)).await?
    }

    /// One crystal, as it is now ([`Memory::get`]); `None` also when the service stopped.
    pub async fn get(&self, id: CrystalId) -> Option<Crystal> {
        self.read(move |m| m.get(id)).await.ok().flatten()
    }

    /// A crystal's supersession chain and audit log ([`Memory::history`]).
    pub async fn history(&self, id: CrystalId) -> Result<History, Error> {
        self.read(move |m| m.history(id)).await?
    }

    /// Crystals similar to `id`'s by meaning ([`Memory::similar`]).
    pub async fn similar(
        &self,
        id: CrystalId,
        types: Vec<druse_protocol::body::SemanticType>,
        min_cosine: f32,
        except: Vec<CrystalId>,
        k: usize,
    ) -> Result<Vec<(CrystalId, f32)>, Error> {
        self.read(move |m| m.similar(id, &types, min_cosine, &except, k)).await?
    }

    /// Every crystal `keep` keeps, in no order ([`Memory::crystals_where`]).
    pub async fn scan(&self, keep: impl FnMut(&Crystal) -> bool + Send + 'static) -> Result<Vec<Crystal>, Error> {
        self.read(move |m| m.crystals_where(keep)).await
    }

    /// How many crystals the engine holds, by lifecycle ([`Memory::counts`]).
    pub async fn counts(&self) -> Result<std::collections::HashMap<crate::crystal::Lifecycle, usize>, Error> {
        self.read(|m| m.counts()).await
    }

    /// The engine itself, for a benchmark that turns its knobs in place and reads its indexes
    /// (`locomo-bench`); the node's own code goes through the commands above.
    pub fn engine(&self) -> &Arc<Memory> {
        &self.inner.engine
    }

    /// The engine's knobs (read without a lock).
    pub fn config(&self) -> &crate::engine::Config {
        self.inner.engine.config()
    }

    /// The embedder's name.
    pub fn embedder_name(&self) -> &str {
        self.inner.engine.embedder_name()
    }

    /// Crystals held (a count kept beside the map).
    pub fn len(&self) -> usize {
        self.inner.engine.len()
    }

    /// Whether no crystal is held.
    pub fn is_empty(&self) -> bool {
        self.inner.engine.is_empty()
    }

    /// The crystal a skill became, if it has one (a lookup in memory).
    pub fn skill_crystal(&self, skill: &druse_protocol::ContentId) -> Option<CrystalId> {
        self.inner.engine.skill_crystal(skill)
    }

    /// The node's hormonal influence now ([`Memory::hormones`]).
    pub fn hormones(&self, now: UnixMillis) -> crate::hormones::Influence {
        self.inner.engine.hormones(now)
    }

    /// Sets the cortisol the network's weather adds ([`Memory::set_network_cortisol`]).
    pub fn set_network_cortisol(&self, level: f64) {
        self.inner.engine.set_network_cortisol(level);
    }
}

/// Hands `work` to `queue`, waiting for room, and waits for its answer.
async fn run<T: Send + 'static>(
    queue: &mpsc::Sender<Job>,
    work: impl FnOnce(&Memory) -> T + Send + 'static,
) -> Result<T, Error> {
    let (job, answer) = job(work);
    queue.send(job).await.map_err(|_| Error::Stopped)?;
    answer.await.map_err(|_| Error::Stopped)
}

/// `work` as a job, and where its answer comes: the job's end without one (a panic) closes it.
fn job<T: Send + 'static>(work: impl FnOnce(&Memory) -> T + Send + 'static) -> (Job, oneshot::Receiver<T>) {
    let (reply, answer) = oneshot::channel();
    let job: Job = Box::new(move |m| {
        let _ = reply.send(work(m));
    });
    (job, answer)
}

/// Starts the writer and the readers; `None` (logged) when a thread could not be made.
fn start(engine: &Arc<Memory>) -> Option<Queues> {
    let (writes, write_queue) = mpsc::channel::<Job>(WRITES_WAITING);
    let (reads, read_queue) = mpsc::channel::<Job>(READS_WAITING);
    let spawn = |name: String, work: Box<dyn FnOnce() + Send>| std::thread::Builder::new().name(name).spawn(work);
    let mut write_queue = write_queue;
    let writer = Arc::clone(engine);
    let started = spawn(
        "druse-memory-w".into(),
        Box::new(move || {
            crate::compile_patterns();
            while let Some(job) = write_queue.blocking_recv() {
                serve(&writer, job);
            }
        }),
    );
    if let Err(error) = started {
        tracing::error!(%error, "could not start the memory service's writer");
        return None;
    }
    let shared = Arc::new(Mutex::new(read_queue));
    let readers = background::pool_threads().clamp(1, MAX_READERS);
    for i in 0..readers {
        let (queue, reader) = (Arc::clone(&shared), Arc::clone(engine));
        let started = spawn(
            format!("druse-memory-r{i}"),
            Box::new(move || {
                loop {
                    // One reader waits on the queue at a time; the others wait for their turn.
                    let job = queue.lock().unwrap_or_else(|p| p.into_inner()).blocking_recv();
                    let Some(job) = job else { break };
                    serve(&reader, job);
                }
            }),
        );
        if let Err(error) = started {
            tracing::error!(%error, "could not start a memory reader");
            if i == 0 {
                return None;
            }
        }
    }
    Some(Queues { writes, reads })
}

/// Runs one job: one that panics fails alone (its caller hears `Error::Stopped`), and the next runs.
fn serve(engine: &Memory, job: Job) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(engine)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crystal::Namespace;

    fn handle(dir: &std::path::Path) -> Handle {
        let db = fjall::Database::builder(dir.join("db")).open().expect("db");
        let engine = Memory::open(
            &db,
            &dir.join("index"),
            crate::engine::Config::default(),
            Arc::new(crate::embed::Hashing::new(384)),
            1_000,
        )
        .expect("engine");
        Handle::new(engine, "test-bg").expect("handle")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commands_reach_the_engine_in_order_and_a_panicking_one_fails_alone() {
        let dir = tempfile::tempdir().expect("dir");
        let memory = handle(dir.path());
        let mut ids = Vec::new();
        for text in ["the boat is called Wren", "the garden has three apple trees"] {
            let new = NewMemory { namespace: Namespace::User("sam".into()), ..NewMemory::text(text) };
            ids.push(memory.add(new, "test", 2_000).await.expect("add").crystal.id);
        }
        assert_eq!(memory.len(), 2);
        let hits = memory
            .search(
                Query { namespace: Some(Namespace::User("sam".into())), ..Query::new("boat", 5) },
                Caller::LocalAgent,
                3_000,
            )
            .await
            .expect("search");
        assert_eq!(hits.first().map(|h| h.crystal.id), Some(ids[0]), "{hits:?}");
        assert_eq!(memory.get(ids[1]).await.map(|c| c.text), Some("the garden has three apple trees".into()));
        let changed =
            memory.change(ids[1], "test", "a test", 4_000, |c| c.curiosity_boost = 0.5).await.expect("change");
        assert_eq!(changed.curiosity_boost, 0.5);
        assert_eq!(memory.history(ids[1]).await.expect("history").chain.len(), 1);
        // Bad input is the engine's error, unchanged.
        let empty = memory.search(Query::new("", 5), Caller::LocalAgent, 3_000).await;
        assert!(matches!(empty, Err(Error::BadQuery(_))), "{empty:?}");
        // A command that panics answers `Error::Stopped`, and the service goes on.
        let panicked = memory.read(|_| -> usize { panic!("a bad command") }).await;
        assert!(matches!(panicked, Err(Error::Stopped)));
        let panicked = memory.write(|_| -> usize { panic!("a bad command") }).await;
        assert!(matches!(panicked, Err(Error::Stopped)));
        assert_eq!(memory.scan(|c| c.text.contains("Wren")).await.expect("scan").len(), 1);
        assert_eq!(memory.background(|m| m.len()).await.expect("background"), 2);
        let on_a_blocking_thread = memory.clone();
        let found =
            tokio::task::spawn_blocking(move || on_a_blocking_thread.read_blocking(|m| m.len())).await.expect("join");
        assert_eq!(found.expect("read"), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_callers_at_once_all_get_their_answer_past_full_queues() {
        let dir = tempfile::tempdir().expect("dir");
        let memory = handle(dir.path());
        // More callers than both queues hold: those past a full queue wait their turn.
        let adds = (0..WRITES_WAITING * 2).map(|i| {
            let memory = memory.clone();
            tokio::spawn(async move {
                let new =
                    NewMemory { namespace: Namespace::User("sam".into()), ..NewMemory::text(format!("note {i}")) };
                memory.add(new, "test", 2_000 + i as u64).await.map(|a| a.crystal.id)
            })
        });
        let mut ids = Vec::new();
        for add in adds {
            ids.push(add.await.expect("join").expect("add"));
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), WRITES_WAITING * 2, "every write stored once");
        let reads = (0..READS_WAITING * 2).map(|i| {
            let memory = memory.clone();
            let id = ids[i % ids.len()];
            tokio::spawn(async move { memory.get(id).await.map(|c| c.id) })
        });
        for (i, read) in reads.enumerate() {
            assert_eq!(read.await.expect("join"), Some(ids[i % ids.len()]));
        }
    }
}
