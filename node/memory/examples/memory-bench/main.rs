//! Measures the memory engine against DESIGN §12: retrieval at 100k 384-d crystals (p50 ≤ 5 ms,
//! p99 ≤ 20 ms, recall@10 ≥ 0.95 against exact search) and a consolidation pass over 100k
//! crystals (≤ 2 s), plus the HNSW segment build time and the cost of one memory add.
//!
//! `cargo run --release -p druse-memory --example memory-bench [-- --sizes 10000,100000 ...]`
//!
//! Every figure goes through the real engine ([`Memory`] on the store and tantivy in a temporary
//! directory). The vectors are synthetic but clustered like real embeddings: unit centroids plus
//! Gaussian noise, normalised, from a fixed-seed PRNG, so every run measures the same data. A
//! small embedder maps each crystal's marker (`#v17`) and each query's (`#q3`) to its vector and
//! any other text through the hashing embedder, so adds of real sentences into the loaded store
//! embed as a hashing node would. One in twenty crystals is a near copy of another, so
//! consolidation has overlaps to merge.
//!
//! `memory-bench index [...]` measures the vector index alone, with every knob of its config:
//! the sweep that chose the defaults.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use druse_memory::Memory;
use druse_memory::crystal::{Lifespan, MemoryKind, Namespace, Origin};
use druse_memory::decay::DecayClass;
use druse_memory::embed::{self, Embedder, Hashing, MiniLm};
use druse_memory::engine::{Config as EngineConfig, NewMemory, Query};
use druse_memory::governance::{Caller, Scope};
use druse_memory::index::{self as vector, BuildStats};

mod index;
mod restart;
use druse_protocol::body::SemanticType;
use index::IndexArgs;
use restart::{ReopenArgs, Restart};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// The vector index alone, with its tuning knobs.
    Index(IndexArgs),
    /// A restart on stores a run kept (`--keep`), and searches after it: the same data
    /// arguments find the same synthetic vectors. Changes to the start can be timed at a
    /// million memories without loading a million again.
    Reopen(ReopenArgs),
}

/// The shape of the synthetic data.
#[derive(Debug, Clone, Args)]
struct DataArgs {
    /// Store sizes to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    sizes: Vec<usize>,
    /// Timed queries per size (half perturbed stored vectors, half fresh points).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Number of clusters in the synthetic data.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Norm of the noise added to a centroid (before normalising); larger is harder.
    #[arg(long, default_value_t = 0.8)]
    noise: f32,
    /// Norm of the noise that turns a stored vector into a query.
    #[arg(long, default_value_t = 0.3)]
    query_noise: f32,
    /// Results per query.
    #[arg(long, default_value_t = 10)]
    k: usize,
}

/// The engine run.
#[derive(Debug, Args)]
struct EngineArgs {
    #[command(flatten)]
    data: DataArgs,
    /// Memory adds timed per embedder and per store size (conversation turns).
    #[arg(long, default_value_t = 200)]
    adds: usize,
    /// The loaded crystals were stored over this many days, so consolidation finds some old.
    #[arg(long, default_value_t = 60)]
    days: u64,
    /// Clusters searched often (12 times, 48 hits each) before consolidating, so it has
    /// activated, promoted and merged crystals to handle.
    #[arg(long, default_value_t = 40)]
    popular_clusters: usize,
    /// Keep each size's store in this directory (`<keep>/<n>`) after the run, for
    /// `memory-bench reopen`; a store already there is refused.
    #[arg(long)]
    keep: Option<std::path::PathBuf>,
}

/// When the run started, and when it last made progress (seconds after the start).
static START: OnceLock<Instant> = OnceLock::new();
static PROGRESS: AtomicU64 = AtomicU64::new(0);

fn seconds_since_start() -> u64 {
    START.get_or_init(Instant::now).elapsed().as_secs()
}

/// Records progress for the watchdog.
fn progress() {
    PROGRESS.store(seconds_since_start(), Ordering::Relaxed);
}

/// Ends the run if it makes no progress for `limit`: a hang must not pass for a slow run.
/// The one seen (twice in a dozen runs of the 100k load, when the engine was on sled) was sled
/// 0.34's deadlock under heavy writes (spacejam/sled#1412).
fn watchdog(limit: Duration) {
    progress();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(10));
            let idle = seconds_since_start().saturating_sub(PROGRESS.load(Ordering::Relaxed));
            if idle > limit.as_secs() {
                eprintln!("memory-bench: no progress for {idle} s; the load or a measurement hangs");
                for dir in SCRATCH.lock().map(|dirs| dirs.clone()).unwrap_or_default() {
                    let _ = std::fs::remove_dir_all(dir);
                }
                std::process::exit(3);
            }
        }
    });
}

/// The engine's vector dimension (all-MiniLM-L6-v2's and the default hashing embedder's).
const DIM: usize = 384;

/// xorshift64*: tiny, fixed-seed, good enough for synthetic data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }

    /// Standard normal, Box–Muller.
    fn gauss(&mut self) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }

    /// A random direction of norm `scale`.
    fn direction(&mut self, dim: usize, scale: f32) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| self.gauss()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x *= scale / norm);
        v
    }
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
}

/// `base` plus Gaussian noise of norm about `noise`, normalised.
fn perturb(rng: &mut Rng, base: &[f32], noise: f32) -> Vec<f32> {
    let mut v: Vec<f32> = base.iter().zip(rng.direction(base.len(), noise)).map(|(b, n)| b + n).collect();
    normalise(&mut v);
    v
}

/// One size's synthetic vectors: the stored ones, the queries (`true` for a perturbed copy of
/// a stored vector) and the cluster centroids.
struct Data {
    vectors: Vec<Vec<f32>>,
    queries: Vec<(bool, Vec<f32>)>,
    centroids: Vec<Vec<f32>>,
}

impl Data {
    /// `n` vectors of `dim` dimensions; with `near_copies`, one in twenty is a near copy
    /// (noise 0.2, cosine about 0.98) of an earlier one.
    fn new(args: &DataArgs, n: usize, dim: usize, near_copies: bool) -> Data {
        let mut rng = Rng(0x0dd5_eed5 ^ n as u64);
        let centroids: Vec<Vec<f32>> = (0..args.clusters.max(1)).map(|_| rng.direction(dim, 1.0)).collect();
        let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(n);
        for i in 0..n {
            let v = if near_copies && i > 0 && i % 20 == 0 {
                let of = rng.below(i);
                perturb(&mut rng, &vectors[of], 0.2)
            } else {
                let c = rng.below(centroids.len());
                perturb(&mut rng, &centroids[c], args.noise)
            };
            vectors.push(v);
        }
        let copies = args.queries / 2;
        let stride = (n / copies.max(1)).max(1);
        let mut queries: Vec<(bool, Vec<f32>)> = Vec::with_capacity(args.queries);
        for source in vectors.iter().step_by(stride).take(copies) {
            queries.push((true, perturb(&mut rng, source, args.query_noise)));
        }
        while queries.len() < args.queries {
            let c = rng.below(centroids.len());
            queries.push((false, perturb(&mut rng, &centroids[c], args.noise)));
        }
        Data { vectors, queries, centroids }
    }
}

/// The p-th percentile (nearest rank) of sorted durations, in milliseconds.
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// p50 and p99 of some timings, in milliseconds.
fn p50_p99(mut timings: Vec<Duration>) -> (f64, f64) {
    timings.sort();
    (percentile(&timings, 0.50), percentile(&timings, 0.99))
}

/// Runs `f`, adding how long it took to `timings`.
fn timed<T>(timings: &mut Vec<Duration>, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    timings.push(t.elapsed());
    out
}

/// The ids of some hits, in order.
fn ids(hits: &[(u64, f32)]) -> Vec<u64> {
    hits.iter().map(|h| h.0).collect()
}

/// The fraction of `truth` that `found` holds.
fn recall<T: PartialEq>(found: &[T], truth: &[T]) -> f64 {
    found.iter().filter(|f| truth.contains(f)).count() as f64 / truth.len().max(1) as f64
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// The index's segment sizes and its tail, described.
fn describe_shape(stats: &vector::Stats) -> String {
    let sizes: Vec<String> = stats.segments.iter().map(|s| s.len.to_string()).collect();
    format!("segments [{}] + tail {}", sizes.join(", "), stats.tail)
}

/// Seals (tail → segment) and merges among the index's recent builds, described.
fn describe_builds(builds: &[BuildStats]) -> String {
    let seals: Vec<&BuildStats> = builds.iter().filter(|b| b.inputs == 0).collect();
    let secs: Vec<f64> = seals.iter().map(|b| b.took.as_secs_f64()).collect();
    let (min, max) = secs.iter().fold((f64::MAX, 0.0f64), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
    let mut out = match seals.first() {
        Some(first) => format!(
            "{} seals of {} vectors: mean {:.2} s (min {:.2}, max {:.2})",
            seals.len(),
            first.len,
            mean(&secs),
            min,
            max
        ),
        None => "no seals".to_owned(),
    };
    for m in builds.iter().filter(|b| b.inputs > 0) {
        out += &format!("; merge of {} into {} in {:.2} s", m.inputs, m.len, m.took.as_secs_f64());
    }
    out
}

/// Maps `#v<i>` to stored vector `i`, `#q<j>` to query `j`, `#c<c>` to centroid `c`, and any
/// other text through `fallback`.
#[derive(Debug)]
struct Synthetic {
    vectors: Arc<Vec<Vec<f32>>>,
    queries: Arc<Vec<Vec<f32>>>,
    centroids: Arc<Vec<Vec<f32>>>,
    fallback: Hashing,
}

impl Synthetic {
    fn lookup(&self, text: &str) -> Option<Vec<f32>> {
        let marker = text.strip_prefix('#')?.split(' ').next()?;
        let table = match marker.get(..1)? {
            "v" => &self.vectors,
            "q" => &self.queries,
            "c" => &self.centroids,
            _ => return None,
        };
        table.get(marker.get(1..)?.parse::<usize>().ok()?).cloned()
    }
}

impl Embedder for Synthetic {
    fn name(&self) -> &str {
        "synthetic-384"
    }

    fn dim(&self) -> usize {
        DIM
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, embed::Error> {
        texts
            .iter()
            .map(|t| self.lookup(t).map_or_else(|| self.fallback.embed(&[t]).map(|mut v| v.remove(0)), Ok))
            .collect()
    }
}

/// A pronounceable pseudo-word for vocabulary entry `k`, so BM25 has words to match.
fn word(k: usize) -> String {
    const SYLLABLES: [&str; 20] = [
        "ka", "lo", "mi", "re", "su", "ta", "ne", "po", "vi", "da", "go", "hu", "ji", "be", "fa", "wo", "ze", "ri",
        "sa", "mo",
    ];
    let (a, b, c) = (k % 20, (k / 20) % 20, (k / 400) % 20);
    format!("{}{}{}", SYLLABLES[a], SYLLABLES[b], SYLLABLES[c])
}

/// `count` words from a 5000-word vocabulary, skewed toward the common ones.
fn words(rng: &mut Rng, count: usize) -> String {
    (0..count).map(|_| word(((rng.unit().powi(2)) * 5000.0) as usize)).collect::<Vec<_>>().join(" ")
}

const DAY_MS: u64 = 86_400_000;
/// When the synthetic store starts filling (2026-09-21).
const START_MS: u64 = 1_790_000_000_000;

/// How many users' namespaces the loaded store's crystals are spread over.
const USERS: usize = 50;

/// Crystal `i` of the loaded store: a mix of kinds, lifespans and weights like a node's.
fn synthetic_memory(i: usize, rng: &mut Rng) -> anyhow::Result<NewMemory> {
    let roll = rng.below(100);
    Ok(NewMemory {
        text: format!("#v{i} {}", words(rng, 12)),
        namespace: Namespace::try_from(format!("user:u{}", i % USERS)).map_err(anyhow::Error::msg)?,
        kind: MemoryKind::Interaction,
        semantic_type: if roll < 2 { SemanticType::Skill } else { SemanticType::Fact },
        origin: Origin::Session,
        subject: None,
        attribute: None,
        decay_class: if roll % 7 == 3 { DecayClass::ActiveProject } else { DecayClass::Default },
        event_at: None,
        emotional_weight: if roll % 10 == 5 { 0.9 } else { 0.0 },
        scope: Scope::Private,
        lifespan: match roll {
            2..=6 => Lifespan::Ttl,
            7..=11 => Lifespan::Permanent,
            _ => Lifespan::Decay,
        },
        ttl_ms: Some(30 * DAY_MS),
        session: None,
        turn_at: None,
        external_id: None,
        metadata: None,
        correction: false,
    })
}

/// A conversation turn of real text, said at `at` in `session`.
fn turn(text: &str, session: &str, at: u64) -> anyhow::Result<NewMemory> {
    let mut new: NewMemory = serde_json::from_value(serde_json::json!({ "text": text, "namespace": "user:bench" }))?;
    new.kind = MemoryKind::Interaction;
    new.session = Some(session.to_owned());
    new.turn_at = Some(at);
    Ok(new)
}

/// Real conversation turns to time adds with: the labelled set the retrieval test uses.
fn sample_turns() -> anyhow::Result<Vec<String>> {
    let set: serde_json::Value = serde_json::from_str(include_str!("../../../tests/data/retrieval.json"))?;
    let mut out = Vec::new();
    for conversation in set["conversations"].as_array().into_iter().flatten() {
        for session in conversation["sessions"].as_array().into_iter().flatten() {
            for turn in session["turns"].as_array().into_iter().flatten() {
                if let (Some(who), Some(text)) = (turn[0].as_str(), turn[1].as_str()) {
                    out.push(format!("{who}: {text}"));
                }
            }
        }
    }
    if out.is_empty() {
        bail!("no turns in tests/data/retrieval.json");
    }
    Ok(out)
}

/// Times `count` adds of conversation turns (a new session every 12 turns) into `memory`.
fn time_adds(memory: &Memory, turns: &[String], count: usize, start: u64) -> anyhow::Result<(f64, f64)> {
    let mut timings = Vec::with_capacity(count);
    for i in 0..count {
        let at = start + i as u64 * 60_000;
        let new = turn(&turns[i % turns.len()], &format!("bench-{}", i / 12), at)?;
        timed(&mut timings, || memory.add(new, "agent", at))?;
        progress();
    }
    Ok(p50_p99(timings))
}

/// The scratch directories in use, for the watchdog to remove.
static SCRATCH: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());

/// A directory under the system's temporary one, removed when dropped, or one kept (the
/// `bool`: a directory of `--keep`).
struct Scratch(std::path::PathBuf, bool);

impl Scratch {
    fn new(name: &str) -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("druse-memory-bench-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if let Ok(mut dirs) = SCRATCH.lock() {
            dirs.push(dir.clone());
        }
        Ok(Scratch(dir, false))
    }

    /// A new directory that outlives the run.
    fn kept(dir: std::path::PathBuf) -> anyhow::Result<Scratch> {
        if dir.exists() {
            bail!("{} exists: a kept store is never loaded over", dir.display());
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir, true))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn open(dir: &Path, embedder: Arc<dyn Embedder>, now: u64) -> anyhow::Result<Memory> {
    Ok(Memory::open(&open_store(dir)?, &dir.join("index"), EngineConfig::default(), embedder, now)?)
}

/// The store as the node opens it: a 64 MiB cache and 512 MiB of journal.
fn open_store(dir: &Path) -> anyhow::Result<fjall::Database> {
    fjall::Database::builder(dir.join("db")).cache_size(64 << 20).max_journaling_size(512 << 20).open().context("store")
}

/// One size's figures.
struct Row {
    n: usize,
    searches: Searches,
    add: (f64, f64),
    consolidation: Duration,
    purge: Duration,
    /// The process's resident memory with the store loaded, less what it held before the
    /// store was opened (the synthetic data), in MiB.
    resident_mib: f64,
    restart: Restart,
}

/// Timed searches on a loaded store.
struct Searches {
    search: (f64, f64),
    /// A search scoped to one of the 50 users' namespaces.
    scoped: (f64, f64),
    vector: (f64, f64),
    exact_p50: f64,
    recall: f64,
}

/// Times `queries` searches of each kind on `memory`, after 20 to warm its caches.
fn time_searches(memory: &Memory, queries: usize, k: usize, rng: &mut Rng, now: u64) -> anyhow::Result<Searches> {
    let query_text = |j: usize, rng: &mut Rng| format!("#q{j} {}", words(rng, 4));
    for j in 0..20.min(queries) {
        memory.search(&Query { q: query_text(j, rng), k, ..Query::default() }, Caller::LocalAgent, now)?;
    }
    let (mut search, mut scoped, mut vector, mut exact, mut recalls) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for j in 0..queries {
        let query = Query { q: query_text(j, rng), k, ..Query::default() };
        timed(&mut search, || memory.search(&query, Caller::LocalAgent, now))?;
        let namespace = Namespace::try_from(format!("user:u{}", j % USERS)).map_err(anyhow::Error::msg)?;
        let one_user = Query { namespace: Some(namespace), ..query.clone() };
        timed(&mut scoped, || memory.search(&one_user, Caller::LocalAgent, now))?;
        let found = timed(&mut vector, || memory.vector_hits(&query.q, k))?;
        let truth = timed(&mut exact, || memory.vector_hits_exact(&query.q, k))?;
        recalls.push(recall(&ids(&found), &ids(&truth)));
        progress();
    }
    Ok(Searches {
        search: p50_p99(search),
        scoped: p50_p99(scoped),
        vector: p50_p99(vector),
        exact_p50: p50_p99(exact).0,
        recall: mean(&recalls),
    })
}

/// Waits up to an hour for the vector index's builds, telling the watchdog the wait is
/// progress: at a million memories they take about ten minutes.
fn wait_indexed(memory: &Memory) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3600) {
        if memory.wait_indexed(Duration::from_secs(10)) {
            return true;
        }
        progress();
    }
    false
}

/// A figure of this process's from /proc/self/status (`VmRSS`, `VmHWM`), in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix(" kB")?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The engine's synthetic embedder for `n` memories of the data `args` describe.
fn synthetic(args: &DataArgs, n: usize) -> Arc<Synthetic> {
    let data = Data::new(args, n, DIM, true);
    Arc::new(Synthetic {
        vectors: Arc::new(data.vectors),
        queries: Arc::new(data.queries.iter().map(|(_, q)| q.clone()).collect()),
        centroids: Arc::new(data.centroids),
        fallback: Hashing::new(DIM),
    })
}

fn engine_run(args: &EngineArgs, n: usize, turns: &[String]) -> anyhow::Result<Row> {
    let embedder = synthetic(&args.data, n);
    // The synthetic vectors are the bench's, not the engine's: resident memory counts from here.
    let baseline = status_mib("VmRSS");
    let dir = match &args.keep {
        Some(keep) => Scratch::kept(keep.join(n.to_string()))?,
        None => Scratch::new(&format!("load-{n}"))?,
    };
    let memory = open(&dir.0, embedder.clone(), START_MS)?;

    let mut rng = Rng(0x5eed ^ n as u64);
    let chunk = 1000;
    let chunks = n.div_ceil(chunk).max(1) as u64;
    let started = Instant::now();
    for (c, first) in (0..n).step_by(chunk).enumerate() {
        let batch = (first..(first + chunk).min(n)).map(|i| synthetic_memory(i, &mut rng)).collect::<Result<_, _>>()?;
        memory.add_many(batch, "bench", START_MS + c as u64 * args.days * DAY_MS / chunks)?;
        progress();
    }
    let load = started.elapsed();
    if !wait_indexed(&memory) {
        bail!("the vector index was still building after an hour");
    }
    progress();
    let stats = memory.vector_stats();
    println!(
        "  n={n}: stored in {:.1} s ({:.0} µs per crystal through add_many), index built {:.1} s after the start",
        load.as_secs_f64(),
        load.as_secs_f64() * 1e6 / n as f64,
        started.elapsed().as_secs_f64()
    );
    println!("  n={n}: segment builds: {}", describe_builds(&stats.recent_builds));
    println!("  n={n}: {}", describe_shape(&stats));

    let now = START_MS + args.days * DAY_MS + 3_600_000;
    let k = args.data.k;
    let searches = time_searches(&memory, embedder.queries.len(), k, &mut rng, now)?;
    let add = time_adds(&memory, turns, args.adds, now)?;

    // Popular clusters: searched often, so consolidation activates, promotes and merges.
    for c in 0..args.popular_clusters.min(embedder.centroids.len()) {
        for _ in 0..12 {
            memory.search(&Query { q: format!("#c{c}"), k: 100, ..Query::default() }, Caller::LocalAgent, now)?;
        }
    }
    let t = Instant::now();
    let report = memory.consolidate(now)?;
    let consolidation = t.elapsed();
    progress();
    println!(
        "  n={n}: consolidation scored {}, activated {}, expired {}, merged {}, purged {} in {:.3} s",
        report.scored,
        report.activated,
        report.expired,
        report.merged,
        report.purged,
        consolidation.as_secs_f64()
    );
    let t = Instant::now();
    let report = memory.consolidate(now + 30 * 60_000)?;
    let purge = t.elapsed();
    println!(
        "  n={n}: the next pass (30 min later) expired {}, merged {}, purged {} in {:.3} s",
        report.expired,
        report.merged,
        report.purged,
        purge.as_secs_f64()
    );
    let resident_mib = status_mib("VmRSS") - baseline;
    let restart = restart::restart(memory, &dir.0, &embedder, k, now + 3_600_000)?;
    restart.print(n, k);
    Ok(Row { n, searches, add, consolidation, purge, resident_mib, restart })
}

/// Add latency on a fresh store with a real embedder.
fn fresh_adds(name: &str, embedder: Arc<dyn Embedder>, turns: &[String], count: usize) -> anyhow::Result<()> {
    let dir = Scratch::new(name)?;
    let memory = open(&dir.0, embedder, START_MS)?;
    let (p50, p99) = time_adds(&memory, turns, count, START_MS)?;
    println!("{name:<18} {count:>6} {p50:>9.3} {p99:>9.3}");
    Ok(())
}

fn engine(args: &EngineArgs) -> anyhow::Result<()> {
    let data = &args.data;
    println!(
        "memory-bench: {DIM}-d, {} clusters, noise {}, {} queries at k {}, {} adds per store; the index as the engine configures it ({:?})",
        data.clusters,
        data.noise,
        data.queries,
        data.k,
        args.adds,
        vector::Config::default()
    );
    let turns = sample_turns()?;
    let mut rows = Vec::new();
    for &n in &data.sizes {
        rows.push(engine_run(args, n, &turns)?);
    }
    println!();
    println!(
        "Retrieval (Memory::search end to end, over everything and scoped to one of {USERS} users; the vector half alone; its recall@{} against exact search)",
        data.k
    );
    println!(
        "{:>8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>10} {:>11} {:>12} {:>12} {:>13} {:>11}",
        "N",
        "search p50",
        "search p99",
        "scoped p50",
        "scoped p99",
        "vector p50",
        "vector p99",
        "recall@k",
        "exact p50",
        "add p50",
        "add p99",
        "consolidate",
        "next pass"
    );
    for r in &rows {
        println!(
            "{:>8} {:>8.3} ms {:>8.3} ms {:>8.3} ms {:>8.3} ms {:>8.3} ms {:>8.3} ms {:>10.4} {:>8.3} ms {:>9.3} ms {:>9.3} ms {:>11.3} s {:>9.3} s",
            r.n,
            r.searches.search.0,
            r.searches.search.1,
            r.searches.scoped.0,
            r.searches.scoped.1,
            r.searches.vector.0,
            r.searches.vector.1,
            r.searches.recall,
            r.searches.exact_p50,
            r.add.0,
            r.add.1,
            r.consolidation.as_secs_f64(),
            r.purge.as_secs_f64()
        );
    }
    println!("(add: a conversation turn embedded by hashing, stored and indexed into the loaded store)");
    println!();
    println!("A restart on the loaded store (after consolidation), and the process's memory");
    println!(
        "{:>8} {:>9} {:>13} {:>16} {:>12} {:>15}",
        "N", "open", "first answer", "recall@k after", "resident", "resident/1M"
    );
    for r in &rows {
        println!(
            "{:>8} {:>7.2} s {:>11.2} s {:>16.4} {:>8.0} MiB {:>11.0} MiB",
            r.n,
            r.restart.open.as_secs_f64(),
            r.restart.first_answer.as_secs_f64(),
            r.restart.recall,
            r.resident_mib,
            r.resident_mib * 1e6 / r.n.max(1) as f64
        );
    }
    println!(
        "(resident: the process with that store loaded, after its measurements, less the synthetic data it held before; the process's peak was {:.0} MiB)",
        status_mib("VmHWM")
    );
    println!();
    println!("Memory add on a fresh store (embed, store durably, index; conversation turns with context)");
    println!("{:<18} {:>6} {:>9} {:>9}", "embedder", "adds", "p50 ms", "p99 ms");
    fresh_adds("hashing-384", Arc::new(Hashing::new(DIM)), &turns, args.adds)?;
    match std::env::var(embed::MINILM_DIR_ENV).ok().filter(|d| !d.is_empty()) {
        Some(dir) => fresh_adds("all-MiniLM-L6-v2", Arc::new(MiniLm::load(Path::new(&dir))?), &turns, args.adds)?,
        None => println!("{:<18} skipped: set {} to the model folder", "all-MiniLM-L6-v2", embed::MINILM_DIR_ENV),
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    druse_memory::embed::settle_compute_threads();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "druse_memory=info".into()),
        )
        .init();
    let cli = Cli::parse();
    watchdog(Duration::from_secs(600));
    match &cli.mode {
        Some(Mode::Index(args)) => index::index(args),
        Some(Mode::Reopen(args)) => restart::reopen_kept(args),
        None => engine(&cli.engine),
    }
}
