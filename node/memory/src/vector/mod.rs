//! The vector index (DESIGN §8): the memory's semantic candidates, found fast at 100k crystals.
//!
//! Vectors are unit length (the index normalises what it is given), so similarity is cosine
//! similarity, a plain dot product; they are stored in Q14 fixed point, which halves the memory
//! traffic that dominates graph search (see [`kernel`]). They live in two places:
//!
//! - sealed **segments**, each an instant-distance HNSW graph built once and then only read;
//! - the unsealed **tail**, where inserts go and which every search scans exactly.
//!
//! When the tail reaches [`Config::seal_threshold`] vectors, the index's own builder thread
//! (a `std::thread` owned by the [`VectorIndex`], stopped and joined when it drops) builds a
//! segment from a snapshot of the tail and swaps it in under a short write lock. Until the swap
//! the vectors are still searched in the tail, so a query never waits for a build and never
//! misses a vector. The same thread merges segments of similar size (so a search visits few
//! graphs) and rebuilds segments that are mostly dead. Builds run instant-distance on the global
//! rayon pool. While a bulk load arrives (about 1,000 inserts a second or more), a full tail
//! waits for it to slow (up to [`BULK_TAIL`] seals' worth), so builds neither slow the load nor
//! build graphs the next seals soon merge again; searches meanwhile scan more of it exactly. Each vector is stored once,
//! shared between the tail and the graph being built from it.
//!
//! Removal and replacement are by version: every stored vector carries a sequence number, and
//! a hit counts only while that number is its id's live one. Dead vectors are filtered from
//! results and dropped when their segment is rebuilt or merged.
//!
//! An index opened on a directory ([`VectorIndex::open`]) writes each segment there when it is
//! built and removes it when it is replaced ([`persist`]), and at the next start reads the
//! graphs back instead of building them again: at a million vectors, seconds instead of minutes
//! of both cores. Which stored vector is live is decided by the caller's store, the source of
//! truth: until [`VectorIndex::restored`], an insert whose vector a loaded graph holds under the
//! same id (to within one step of the stored precision) takes the graph's copy, and anything else goes to the tail as usual. So a crash, a
//! lost or damaged file, or a store changed since the files were written cost only a rebuild of
//! what differs, never a wrong answer.
//!
//! Queries and inserts of the wrong dimension, zero vectors and non-finite values are refused
//! with an [`Error`]; nothing here panics on input, and no score is NaN.

mod builder;
pub(crate) mod kernel;
mod persist;
mod restore;
mod segment;
mod topk;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use self::segment::{BuildParams, Entry, Point, Segment};
use self::topk::{Hit, TopK};

/// How many finished builds [`Stats::recent_builds`] remembers.
const RECENT_BUILDS: usize = 64;

/// How long the builder watches a full tail before it seals it ([`Shared::wait_for_a_pause`]).
const BULK_PAUSE: Duration = Duration::from_millis(250);

/// Inserts within [`BULK_PAUSE`] that make a bulk load (about 1,000 a second): a full tail
/// waits while they keep arriving this fast.
const BULK_INSERTS: usize = 256;

/// The longest tail, in seals, that waits for inserts to pause: past it, searches would slow
/// too much. At the default seal of 8192 vectors, 32768 vectors scanned exactly.
const BULK_TAIL: usize = 4;

/// Why the index refused a call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The vector's length is not the index's dimension.
    #[error("vector has {got} dimensions, the index holds {expected}")]
    Dimension {
        /// The index's dimension.
        expected: usize,
        /// The vector's length.
        got: usize,
    },
    /// The vector is zero or holds a NaN or an infinity, so it has no direction.
    #[error("vector is zero or holds a non-finite value")]
    Degenerate,
    /// A config value the index cannot work with.
    #[error("invalid vector index config: {0}")]
    Config(&'static str),
    /// The OS refused the builder thread.
    #[error("cannot start the segment builder thread")]
    Spawn(#[source] std::io::Error),
    /// The directory of the index's segments could not be made or read.
    #[error("cannot use the vector segment directory {0}")]
    Dir(PathBuf, #[source] std::io::Error),
}

/// How the index is shaped and tuned; the defaults meet DESIGN §12 at 100k 384-d vectors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Length of every vector (384 for all-MiniLM-L6-v2 and the hashing embedder).
    pub dim: usize,
    /// Tail length that triggers a segment build; also the size of a freshly sealed segment.
    pub seal_threshold: usize,
    /// Candidate list size while building a graph: higher builds slower and finds better.
    pub ef_construction: usize,
    /// Candidate list size per segment search, fixed into a graph when it is built.
    pub ef_search: usize,
    /// Whether graph neighbours are picked by the HNSW diversity heuristic rather than simply
    /// the nearest. Off: in instant-distance it costs ~27× the distance calls per insert
    /// (measured: 40k vs 1.5k), and the plain graph already meets the recall target.
    pub heuristic: bool,
    /// This many segments of one size class merge into one; below 2, segments never merge.
    pub merge_factor: usize,
    /// A merge never builds a segment larger than this many vectors.
    pub max_segment_len: usize,
    /// A segment whose dead fraction exceeds this is rebuilt without its dead vectors.
    pub compact_dead_fraction: f64,
    /// Seeds each graph's level assignment. Graph layers are built in parallel, so a graph is
    /// reproducible in its levels, not edge for edge.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            dim: 384,
            seal_threshold: 8192,
            ef_construction: 64,
            ef_search: 48,
            heuristic: false,
            merge_factor: 3,
            max_segment_len: 131_072,
            compact_dead_fraction: 0.3,
            seed: 0x5eed_d00d,
        }
    }
}

impl Config {
    fn check(&self) -> Result<(), Error> {
        if self.dim == 0 {
            return Err(Error::Config("dim must be at least 1"));
        }
        if self.seal_threshold == 0 {
            return Err(Error::Config("seal_threshold must be at least 1"));
        }
        if self.ef_construction == 0 || self.ef_search == 0 {
            return Err(Error::Config("ef_construction and ef_search must be at least 1"));
        }
        if !(self.compact_dead_fraction > 0.0 && self.compact_dead_fraction <= 1.0) {
            return Err(Error::Config("compact_dead_fraction must be in (0, 1]"));
        }
        Ok(())
    }

    fn params(&self) -> BuildParams {
        BuildParams {
            ef_construction: self.ef_construction,
            ef_search: self.ef_search,
            heuristic: self.heuristic,
            seed: self.seed,
        }
    }
}

/// What one sealed segment holds, for operators and benchmarks.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentStats {
    /// Vectors in the graph, live or dead.
    pub len: usize,
    /// Of which removed or replaced since the build.
    pub dead: usize,
    /// How long the graph took to build.
    pub build_time: Duration,
    /// When the build finished.
    pub built_at: SystemTime,
}

/// One finished build, so a benchmark can time every build, not only surviving segments.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildStats {
    /// How many segments went in: 0 for a seal of the tail, 1 for a compaction, more for a merge.
    pub inputs: usize,
    /// Vectors in the new segment.
    pub len: usize,
    /// How long the graph took to build.
    pub took: Duration,
}

/// The index's shape at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// Live vectors (what [`VectorIndex::len`] says).
    pub live: usize,
    /// Vectors in the tail, live or dead.
    pub tail: usize,
    /// Sealed segments, oldest first.
    pub segments: Vec<SegmentStats>,
    /// Builds finished since the index was made.
    pub builds: u64,
    /// Their summed build time.
    pub build_time_total: Duration,
    /// The last 64 builds, oldest first.
    pub recent_builds: Vec<BuildStats>,
    /// Whether the builder thread is working now.
    pub building: bool,
    /// Whether a build panicked, after which the index stops building and scans its tail.
    pub builder_failed: bool,
}

/// An approximate nearest-neighbour index over unit vectors, keyed by `u64`; share it as
/// `Arc<VectorIndex>`. Searches share a read lock; inserts and removes take a brief write lock.
pub struct VectorIndex {
    shared: Arc<Shared>,
    /// The builder thread; joined on drop.
    builder: Option<JoinHandle<()>>,
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.read();
        f.debug_struct("VectorIndex")
            .field("config", &self.shared.config)
            .field("live", &state.live.len())
            .field("tail", &state.tail.len())
            .field("segments", &state.segments.len())
            .finish()
    }
}

/// Where an id's live version is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Tail,
    /// The segment with this uid.
    Segment(u64),
}

/// An id's live version, with its vector (shared with the tail or segment that stores it).
#[derive(Clone, Debug)]
struct Slot {
    seq: u64,
    home: Home,
    point: Point,
}

/// A vector in the tail.
#[derive(Debug)]
struct TailEntry {
    entry: Entry,
    point: Point,
}

/// Vectors checked by a [`Preparer`], for [`VectorIndex::insert_prepared`].
#[derive(Debug, Default)]
pub struct Prepared {
    dim: usize,
    points: Vec<(u64, Ready)>,
}

impl Prepared {
    /// The ids of the vectors it holds, in order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.points.iter().map(|(id, _)| *id)
    }

    /// How many vectors it holds.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// One prepared vector: a new point, or the copy a loaded graph holds of the same vector.
#[derive(Debug)]
enum Ready {
    New(Point),
    Loaded(Loaded),
}

/// Does the work of an insert that needs no lock (see [`VectorIndex::preparer`]).
#[derive(Debug)]
pub struct Preparer {
    shared: Arc<Shared>,
    restoring: Option<Arc<FxHashMap<u64, Loaded>>>,
}

impl Preparer {
    /// Checks `items` for [`VectorIndex::insert_prepared`]: each is compared with the copy a
    /// loaded graph holds under its id, if any (see [`VectorIndex::open`]), and made into a
    /// point of its own only when there is none or it differs. Nothing is prepared when one
    /// is refused.
    pub fn prepare(&self, items: &[(u64, &[f32])]) -> Result<Prepared, Error> {
        let loaded = |id: u64, vector: &[f32]| {
            let loaded = self.restoring.as_ref()?.get(&id)?;
            kernel::same_unit(vector, &loaded.point.0).then(|| loaded.clone())
        };
        let points = items
            .iter()
            .map(|&(id, vector)| match loaded(id, vector) {
                Some(loaded) => Ok((id, Ready::Loaded(loaded))),
                None => Ok((id, Ready::New(self.shared.unit(vector)?))),
            })
            .collect::<Result<_, Error>>()?;
        Ok(Prepared { dim: self.shared.config.dim, points })
    }
}

/// A vector a loaded graph holds, waiting for the store to say it is live (see
/// [`VectorIndex::open`]).
#[derive(Debug, Clone)]
struct Loaded {
    seq: u64,
    uid: u64,
    point: Point,
}

/// Everything searches read and inserts change, behind one lock.
///
/// Invariants: each id in `live` has exactly one stored vector with its `seq`, in `home`; the
/// tail is in `seq` order and only the builder removes from it, from the front.
#[derive(Debug, Default)]
struct State {
    segments: Vec<Arc<Segment>>,
    tail: Vec<TailEntry>,
    /// Keyed by a fast hash: every scoped search looks ids up here, and ids are the
    /// engine's own, not chosen by a peer.
    live: FxHashMap<u64, Slot>,
    next_seq: u64,
    /// Tail entries below this seq are sealed whatever the tail's length ([`VectorIndex::seal`]).
    seal_below: u64,
    builds: u64,
    build_time_total: Duration,
    recent_builds: VecDeque<BuildStats>,
    builder_failed: bool,
    /// Between [`VectorIndex::open`] and [`VectorIndex::restored`]: the newest vector of each
    /// id in the loaded graphs.
    /// Shared with the [`Preparer`]s of a start, which compare the store's vectors with it.
    restoring: Option<Arc<FxHashMap<u64, Loaded>>>,
}

impl State {
    fn is_live(&self, entry: Entry) -> bool {
        self.live.get(&entry.id).is_some_and(|slot| slot.seq == entry.seq)
    }
}

/// Records that `slot`'s vector died, in whichever of `segments` holds it; true when that
/// segment now wants compacting.
fn bury(segments: &[Arc<Segment>], slot: Slot, compact_dead_fraction: f64) -> bool {
    let Home::Segment(uid) = slot.home else { return false };
    let Some(segment) = segments.iter().find(|s| s.uid == uid) else { return false };
    segment.kill_one();
    segment.dead() as f64 > segment.len() as f64 * compact_dead_fraction
}

/// What the builder thread takes from the callers.
#[derive(Debug, Default)]
struct Control {
    stop: bool,
    /// Set whenever the state may hold work; the builder clears it before it plans.
    wanted: bool,
    busy: bool,
}

/// The part the builder thread shares with the index.
#[derive(Debug)]
struct Shared {
    config: Config,
    /// Where segments are written, if anywhere.
    dir: Option<PathBuf>,
    state: RwLock<State>,
    control: Mutex<Control>,
    /// Wakes the builder.
    wake: Condvar,
    /// Wakes [`VectorIndex::wait_idle`] callers.
    idle: Condvar,
}

/// Where a job's vectors come from, and so what its segment replaces.
#[derive(Debug)]
enum Source {
    /// The first this many tail entries (dead ones are left out of the build).
    Tail(usize),
    /// The segments with these uids: a merge, or a compaction when there is one.
    Segments(Vec<u64>),
}

/// One build the builder thread will run, with its inputs snapshotted under the read lock.
#[derive(Debug)]
struct Job {
    source: Source,
    entries: Vec<Entry>,
    points: Vec<Point>,
}

impl VectorIndex {
    /// Makes an empty index, kept in memory only, and starts its builder thread.
    pub fn new(config: Config) -> Result<Self, Error> {
        config.check()?;
        Self::start(config, None, State::default(), 0)
    }

    fn start(config: Config, dir: Option<PathBuf>, state: State, last_uid: u64) -> Result<Self, Error> {
        let shared = Arc::new(Shared {
            config,
            dir,
            state: RwLock::new(state),
            control: Mutex::new(Control::default()),
            wake: Condvar::new(),
            idle: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let builder = thread::Builder::new()
            .name("vector-index-builder".into())
            .spawn(move || {
                // Segments are built whenever the CPU is free: searches and inserts never wait
                // for a build, so the build yields to the threads that serve peers and users.
                // Its parallel graph construction runs on a pool of its own, whose threads
                // inherit that priority; the process's shared pool keeps the default.
                crate::background::lower_this_thread(crate::background::LOWEST);
                let threads = crate::background::pool_threads();
                if threads < 2 {
                    return worker.run_builder(last_uid);
                }
                match rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("vector-build-{i}"))
                    .build()
                {
                    Ok(pool) => pool.install(|| worker.run_builder(last_uid)),
                    Err(error) => {
                        tracing::warn!(%error, "no thread pool of its own for vector segment builds");
                        worker.run_builder(last_uid)
                    }
                }
            })
            .map_err(Error::Spawn)?;
        Ok(Self { shared, builder: Some(builder) })
    }

    /// The config the index was made with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Stores `vector` (normalised) under `id`, replacing the id's previous vector if any.
    pub fn insert(&self, id: u64, vector: &[f32]) -> Result<(), Error> {
        let point = self.shared.unit(vector)?;
        let full = self.shared.store(&mut self.shared.write(), id, point);
        if full {
            self.shared.want();
        }
        Ok(())
    }

    /// Checks and quantises vectors for [`VectorIndex::insert_prepared`] on any thread and
    /// without the index's lock: a start prepares the store's vectors on the threads that
    /// read them, and compares them there with what the loaded graphs hold.
    pub fn preparer(&self) -> Preparer {
        Preparer { shared: Arc::clone(&self.shared), restoring: self.shared.read().restoring.clone() }
    }

    /// Stores what a [`Preparer`] made, in order and under one lock, as that many
    /// [`VectorIndex::insert`]s would. Refuses everything if any was prepared for another
    /// dimension.
    pub fn insert_prepared(&self, prepared: Vec<Prepared>) -> Result<(), Error> {
        let dim = self.shared.config.dim;
        if let Some(other) = prepared.iter().find(|p| p.dim != dim && !p.points.is_empty()) {
            return Err(Error::Dimension { expected: dim, got: other.dim });
        }
        let mut full = false;
        {
            let mut state = self.shared.write();
            for (id, ready) in prepared.into_iter().flat_map(|p| p.points) {
                full |= match ready {
                    Ready::New(point) => self.shared.store_new(&mut state, id, point),
                    Ready::Loaded(loaded) => self.shared.store_loaded(&mut state, id, loaded),
                };
            }
        }
        if full {
            self.shared.want();
        }
        Ok(())
    }

    /// Hides `id` from every later search; false when it was not stored.
    pub fn remove(&self, id: u64) -> bool {
        self.remove_many([id]) == 1
    }

    /// [`VectorIndex::remove`] for each of `ids`, taking the lock once a few thousand (so a
    /// search waits for no more); how many had a live vector.
    pub fn remove_many(&self, ids: impl IntoIterator<Item = u64>) -> usize {
        const PER_LOCK: usize = 4096;
        let shared = &self.shared;
        let mut ids = ids.into_iter().peekable();
        let (mut found, mut compact) = (0, false);
        while ids.peek().is_some() {
            let mut state = shared.write();
            for id in ids.by_ref().take(PER_LOCK) {
                if let Some(old) = state.live.remove(&id) {
                    found += 1;
                    compact |= bury(&state.segments, old, shared.config.compact_dead_fraction);
                }
            }
        }
        if compact {
            shared.want();
        }
        found
    }

    /// Whether `id` has a live vector.
    pub fn contains(&self, id: u64) -> bool {
        self.shared.read().live.contains_key(&id)
    }

    /// How many ids have a live vector.
    pub fn len(&self) -> usize {
        self.shared.read().live.len()
    }

    /// Whether no id has a live vector.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `k` live vectors most similar to `query`, best first, as `(id, cosine similarity)`:
    /// approximate in the segments, exact in the tail. Fewer than `k` only when fewer are stored.
    /// Keep `k` at most [`Config::ef_search`]: above it each segment is scanned exactly.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>, Error> {
        self.search_where(query, k, k, &|_| true)
    }

    /// A read view that scores chosen ids exactly against `query`: for a search scoped to a
    /// few ids (one namespace's memories) it reads only their vectors, where
    /// [`VectorIndex::search_where`] reads the whole tail and falls back to scanning every
    /// segment when the filter admits few of a graph's candidates. Inserts wait while it lives.
    pub fn scorer(&self, query: &[f32]) -> Result<Scorer<'_>, Error> {
        let query = self.shared.unit(query)?;
        Ok(Scorer { state: self.shared.read(), query })
    }

    /// [`VectorIndex::search`] among the ids `keep` accepts: up to `k` hits, and the filter
    /// applies inside the search, so at least `at_least` (at most `k`) come back whenever that
    /// many live ids pass it. A segment whose graph candidates hold fewer than `at_least` that
    /// pass is scanned exactly; one that holds fewer than `k` but enough is not, since an exact
    /// scan of a large segment costs a hundred graph searches.
    pub fn search_where(
        &self,
        query: &[f32],
        k: usize,
        at_least: usize,
        keep: &dyn Fn(u64) -> bool,
    ) -> Result<Vec<(u64, f32)>, Error> {
        self.top_k(query, k, keep, |segment, query, live, top| {
            for hit in segment.search(query, k, at_least.min(k), &live) {
                top.offer(hit);
            }
        })
    }

    /// The exact `k` nearest live vectors, by brute force over everything: the reference that
    /// [`VectorIndex::search`]'s recall is measured against.
    pub fn exact(&self, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>, Error> {
        self.exact_where(query, k, &|_| true)
    }

    /// [`VectorIndex::exact`] among the ids `keep` accepts.
    pub fn exact_where(&self, query: &[f32], k: usize, keep: &dyn Fn(u64) -> bool) -> Result<Vec<(u64, f32)>, Error> {
        self.top_k(query, k, keep, |segment, query, live, top| segment.scan(&query.0, &live, top))
    }

    /// The best `k` live vectors: each segment through `per_segment` (graph or scan), the tail
    /// always exactly.
    fn top_k(
        &self,
        query: &[f32],
        k: usize,
        keep: &dyn Fn(u64) -> bool,
        per_segment: impl Fn(&Segment, &Point, &dyn Fn(Entry) -> bool, &mut TopK),
    ) -> Result<Vec<(u64, f32)>, Error> {
        let query = self.shared.unit(query)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let state = self.shared.read();
        let live = |entry: Entry| state.is_live(entry) && keep(entry.id);
        let mut top = TopK::new(k);
        for segment in &state.segments {
            per_segment(segment, &query, &live, &mut top);
        }
        scan_tail(&state, &query.0, &live, &mut top);
        Ok(hits(top))
    }

    /// Asks the builder to seal everything now in the tail, whatever its length (after a bulk
    /// load, or in tests); returns at once.
    pub fn seal(&self) {
        {
            let mut state = self.shared.write();
            state.seal_below = state.next_seq;
        }
        self.shared.wake_now();
    }

    /// Blocks until the builder has no work left, or `timeout` passes; true when idle. For
    /// tests, benchmarks and orderly shutdown; never call it from an async task.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut control = self.shared.control();
        while control.wanted || control.busy {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return false };
            control = self.shared.idle.wait_timeout(control, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        true
    }

    /// The sealed segments, oldest first.
    pub fn segments(&self) -> Vec<SegmentStats> {
        self.shared.read().segments.iter().map(|s| segment_stats(s)).collect()
    }

    /// Everything an operator or a benchmark wants to know about the index's shape.
    pub fn stats(&self) -> Stats {
        let building = self.shared.control().busy;
        let state = self.shared.read();
        Stats {
            live: state.live.len(),
            tail: state.tail.len(),
            segments: state.segments.iter().map(|s| segment_stats(s)).collect(),
            builds: state.builds,
            build_time_total: state.build_time_total,
            recent_builds: state.recent_builds.iter().cloned().collect(),
            building,
            builder_failed: state.builder_failed,
        }
    }
}

impl Drop for VectorIndex {
    /// Stops the builder and joins it; a build in progress finishes first (instant-distance
    /// cannot be interrupted), so this may block for one segment build.
    fn drop(&mut self) {
        self.shared.control().stop = true;
        self.shared.wake.notify_all();
        if let Some(builder) = self.builder.take()
            && builder.join().is_err()
        {
            tracing::error!("vector index builder thread panicked");
        }
    }
}

fn segment_stats(segment: &Segment) -> SegmentStats {
    SegmentStats {
        len: segment.len(),
        dead: segment.dead(),
        build_time: segment.build_time(),
        built_at: segment.built_at(),
    }
}

/// See [`VectorIndex::scorer`].
#[derive(Debug)]
pub struct Scorer<'a> {
    state: RwLockReadGuard<'a, State>,
    query: Point,
}

impl Scorer<'_> {
    /// The cosine similarity of the query to `id`'s live vector; none when `id` has none.
    pub fn score(&self, id: u64) -> Option<f32> {
        self.state.live.get(&id).map(|slot| kernel::dot_q14(&self.query.0, &slot.point.0))
    }

    /// [`Scorer::score`] of each of `ids`, pushed to `out` as `(id, score)` in order, for
    /// those with a live vector. Every id is looked up before any is scored, so the memory
    /// reads of many ids overlap instead of waiting one after another.
    pub fn score_many(&self, ids: &[u64], out: &mut Vec<(u64, f32)>) {
        let points: Vec<(u64, &[i16])> =
            ids.iter().filter_map(|&id| Some((id, &*self.state.live.get(&id)?.point.0))).collect();
        out.extend(points.into_iter().map(|(id, point)| (id, kernel::dot_q14(&self.query.0, point))));
    }
}

/// Offers every live tail vector to `top`.
fn scan_tail(state: &State, query: &[i16], live: &dyn Fn(Entry) -> bool, top: &mut TopK) {
    for TailEntry { entry, point } in &state.tail {
        let hit = Hit { score: kernel::dot_q14(query, &point.0), id: entry.id };
        if top.admits(hit) && live(*entry) {
            top.offer(hit);
        }
    }
}

fn hits(top: TopK) -> Vec<(u64, f32)> {
    top.into_sorted().into_iter().map(|hit| (hit.id, hit.score)).collect()
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks `vector` and returns it as a unit point.
    fn unit(&self, vector: &[f32]) -> Result<Point, Error> {
        if vector.len() != self.config.dim {
            return Err(Error::Dimension { expected: self.config.dim, got: vector.len() });
        }
        kernel::unit_q14(vector).map(Point).ok_or(Error::Degenerate)
    }

    /// Stores `point` as `id`'s live vector: the loaded graph's copy while restoring, if it
    /// holds the same one, else in the tail. True when the builder has work.
    fn store(&self, state: &mut State, id: u64, point: Point) -> bool {
        let loaded = state.restoring.as_ref().and_then(|restoring| restoring.get(&id));
        match loaded.filter(|loaded| kernel::same(&loaded.point.0, &point.0)).cloned() {
            Some(loaded) => self.store_loaded(state, id, loaded),
            None => self.store_new(state, id, point),
        }
    }

    /// Makes a loaded graph's copy `id`'s live vector; once it is, a second store of the same
    /// vector goes to the tail as any other would.
    fn store_loaded(&self, state: &mut State, id: u64, loaded: Loaded) -> bool {
        let Loaded { seq, uid, point } = loaded;
        if state.live.get(&id).is_some_and(|slot| slot.seq == seq) {
            return self.store_new(state, id, point);
        }
        if let Some(old) = state.live.insert(id, Slot { seq, home: Home::Segment(uid), point }) {
            bury(&state.segments, old, self.config.compact_dead_fraction);
        }
        false
    }

    /// Stores `point` as `id`'s live vector, in the tail. True when the builder has work.
    fn store_new(&self, state: &mut State, id: u64, point: Point) -> bool {
        let seq = state.next_seq;
        state.next_seq += 1;
        let compact = match state.live.insert(id, Slot { seq, home: Home::Tail, point: point.clone() }) {
            Some(old) => bury(&state.segments, old, self.config.compact_dead_fraction),
            None => false,
        };
        state.tail.push(TailEntry { entry: Entry { id, seq }, point });
        compact || state.tail.len() >= self.config.seal_threshold
    }

    /// Tells the builder there may be work (once: while it has not taken the news, telling it
    /// again wakes nothing).
    fn want(&self) {
        let mut control = self.control();
        if !control.wanted {
            control.wanted = true;
            self.wake.notify_one();
        }
    }

    /// Tells the builder there is work, waking it even while it watches a bulk load.
    fn wake_now(&self) {
        self.control().wanted = true;
        self.wake.notify_one();
    }
}
