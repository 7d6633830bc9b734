//! `store-stress`: a store that never stalls (sled 0.34.7, the node's store before fjall,
//! deadlocked twice in about a dozen 100k memory-bench loads, spacejam/sled#1412).
//!
//! It starts a real node in this process (its store and tantivy on disk, the HTTP API on a port the
//! OS picks, the hashing embedder unless `DRUSE_MINILM_DIR` is set), loads `--crystals` memory
//! crystals, then runs three parts at once until `--minutes` have passed:
//!
//! - **api**: `--writers` HTTP clients adding memories through `POST /v1/memories`;
//! - **gossip**: signed crystal listings from many authors, signed as they go, through the
//!   node's gossip ingest (`Node::ingest_bytes`: decode, verify, validate, store, index);
//! - **consolidate**: consolidation passes through `POST /v1/consolidate`, back to back.
//!
//! A watchdog on its own OS thread (so it runs even if every async worker is stuck) prints each
//! part's throughput every minute, and if any part makes no progress for `--stall-secs` it
//! prints what each part had in flight and for how long, and the state and kernel wait channel
//! of every thread, and exits with status 2. A run that outlives its time bound by more than
//! that exits with status 3.
//!
//! `cargo run --release -p druse-tests --bin store-stress -- --minutes 30 --crystals 100000`

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use druse_node::daemon;
use druse_node::ingest::Outcome;
use druse_node::{Node, Role};
use druse_protocol::body::{Body, CrystalListing, ExecutionStats, SemanticType};
use druse_protocol::net::PeerId;
use druse_protocol::now_ms;
use druse_protocol::{Keypair, topic};
use druse_tests::swarm::{config, mgmt_key, seal};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

#[derive(Debug, Parser)]
#[command(about = "Concurrent API writes, gossip ingest and consolidation on a loaded store, with a stall watchdog")]
struct Args {
    /// How long the three parts run together, after the load.
    #[arg(long, default_value_t = 10)]
    minutes: u64,
    /// Memory crystals loaded before the parts start.
    #[arg(long, default_value_t = 100_000)]
    crystals: usize,
    /// Concurrent API writers.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Gossiped listings per second at most (each is stored and indexed as a crystal, so this
    /// bounds how fast the store and the memory grow); 0 for as fast as the node takes them.
    #[arg(long, default_value_t = 300)]
    gossip_per_second: u64,
    /// Distinct authors of the gossiped listings.
    #[arg(long, default_value_t = 1_000)]
    authors: usize,
    /// A part that makes no progress for this long is a stall.
    #[arg(long, default_value_t = 60)]
    stall_secs: u64,
    /// Where the node's data directory goes (a fresh temporary directory inside it).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seed of the generated texts and keys.
    #[arg(long, default_value_t = 12)]
    seed: u64,
}

/// One part of the load: how much it has done, and what it is doing now.
#[derive(Debug)]
struct Part {
    name: &'static str,
    done: AtomicU64,
    errors: AtomicU64,
    /// Milliseconds after the start of the last completed operation.
    last_progress: AtomicU64,
    /// The operation in flight and when it started.
    in_flight: Mutex<Option<(String, Instant)>>,
    /// The last error, to quote in the report.
    last_error: Mutex<Option<String>>,
    active: AtomicBool,
}

impl Part {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            done: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_progress: AtomicU64::new(0),
            in_flight: Mutex::new(None),
            last_error: Mutex::new(None),
            active: AtomicBool::new(false),
        }
    }

    fn start(&self, clock: &Clock) {
        self.last_progress.store(clock.ms(), Ordering::Relaxed);
        self.active.store(true, Ordering::Relaxed);
    }

    fn begin(&self, what: impl Into<String>) {
        if let Ok(mut slot) = self.in_flight.lock() {
            *slot = Some((what.into(), Instant::now()));
        }
    }

    /// Counts `n` completed operations (an error is progress too: the store answered).
    fn finish(&self, clock: &Clock, n: u64, error: Option<String>) {
        if let Some(error) = error {
            self.errors.fetch_add(n, Ordering::Relaxed);
            if let Ok(mut slot) = self.last_error.lock() {
                *slot = Some(error);
            }
        } else {
            self.done.fetch_add(n, Ordering::Relaxed);
        }
        self.last_progress.store(clock.ms(), Ordering::Relaxed);
        if let Ok(mut slot) = self.in_flight.lock() {
            *slot = None;
        }
    }

    fn stop(&self) {
        self.active.store(false, Ordering::Relaxed);
    }

    fn describe(&self, clock: &Clock) -> String {
        let in_flight = match self.in_flight.lock().ok().and_then(|s| s.clone()) {
            Some((what, since)) => format!("in flight for {:.1} s: {what}", since.elapsed().as_secs_f64()),
            None => "nothing in flight".to_owned(),
        };
        let idle = clock.ms().saturating_sub(self.last_progress.load(Ordering::Relaxed));
        let last_error = self.last_error.lock().ok().and_then(|e| e.clone()).unwrap_or_else(|| "none".into());
        format!(
            "{:<12} done {:>9}, errors {:>6}, last progress {:.1} s ago, {in_flight}; last error: {last_error}",
            self.name,
            self.done.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            idle as f64 / 1000.0
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

#[derive(Debug)]
struct Shared {
    clock: Clock,
    load: Part,
    api: Part,
    gossip: Part,
    consolidate: Part,
    stop: AtomicBool,
}

impl Shared {
    fn parts(&self) -> [&Part; 4] {
        [&self.load, &self.api, &self.gossip, &self.consolidate]
    }
}

/// Every thread of this process: name, scheduler state and the kernel function it waits in.
fn thread_states() -> String {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return "(no /proc/self/task)".into() };
    for task in tasks.flatten() {
        let path = task.path();
        let read = |file: &str| std::fs::read_to_string(path.join(file)).unwrap_or_default().trim().to_owned();
        let stat = read("stat");
        // The state follows the parenthesised name: `tid (name) S ...`.
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("?");
        out.push(format!("  {:>7} {:<18} {state} {}", task.file_name().to_string_lossy(), read("comm"), read("wchan")));
    }
    out.sort();
    out.join("\n")
}

fn directory_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// Prints throughput every minute; ends the process on a stall or an overrun.
fn watchdog(shared: Arc<Shared>, stall: Duration, deadline: Duration, data_dir: PathBuf) {
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            let mut last_counts: Vec<u64> = shared.parts().iter().map(|p| p.done.load(Ordering::Relaxed)).collect();
            let mut last_print = Instant::now();
            loop {
                std::thread::sleep(Duration::from_millis(500));
                let now = shared.clock.ms();
                for part in shared.parts() {
                    let idle = now.saturating_sub(part.last_progress.load(Ordering::Relaxed));
                    if part.active.load(Ordering::Relaxed) && idle > stall.as_millis() as u64 {
                        eprintln!(
                            "\nSTALL: {} made no progress for {:.1} s (limit {stall:?}) at {:.0} s into the run",
                            part.name,
                            idle as f64 / 1000.0,
                            now as f64 / 1000.0
                        );
                        for part in shared.parts() {
                            eprintln!("  {}", part.describe(&shared.clock));
                        }
                        eprintln!("threads (tid, name, state, kernel wait channel):\n{}", thread_states());
                        std::process::exit(2);
                    }
                }
                if shared.clock.0.elapsed() > deadline {
                    eprintln!("\nOVERRUN: the run passed its time bound of {deadline:?}");
                    for part in shared.parts() {
                        eprintln!("  {}", part.describe(&shared.clock));
                    }
                    std::process::exit(3);
                }
                if last_print.elapsed() >= Duration::from_secs(60) {
                    let seconds = last_print.elapsed().as_secs_f64();
                    last_print = Instant::now();
                    let mut line = format!("[{:>5.0} s]", now as f64 / 1000.0);
                    for (part, last) in shared.parts().iter().zip(last_counts.iter_mut()) {
                        let done = part.done.load(Ordering::Relaxed);
                        if done > *last || part.active.load(Ordering::Relaxed) {
                            line.push_str(&format!(
                                "  {} {:.1}/s (total {done}, errors {})",
                                part.name,
                                (done - *last) as f64 / seconds,
                                part.errors.load(Ordering::Relaxed)
                            ));
                        }
                        *last = done;
                    }
                    line.push_str(&format!("  data {:.0} MB", directory_bytes(&data_dir) as f64 / 1e6));
                    println!("{line}");
                }
            }
        })
        .map(drop)
        .unwrap_or_else(|e| panic!("cannot start the watchdog thread: {e}"));
}

const WORDS: [&str; 24] = [
    "parcel", "locker", "train", "ticket", "notebook", "garden", "invoice", "meeting", "recipe", "bicycle", "dentist",
    "passport", "budget", "holiday", "printer", "library", "concert", "password", "kitchen", "harbour", "festival",
    "battery", "umbrella", "weather",
];

fn sentence(rng: &mut StdRng, words: usize) -> String {
    (0..words).map(|_| WORDS[rng.random_range(0..WORDS.len())]).collect::<Vec<_>>().join(" ")
}

/// Loads `n` crystals through the engine's batch add, 1000 at a time.
async fn load(node: &Node, shared: &Arc<Shared>, n: usize, seed: u64) -> Result<()> {
    shared.load.start(&shared.clock);
    let memory = node.memory();
    let mut rng = StdRng::seed_from_u64(seed);
    for first in (0..n).step_by(1000) {
        let batch = (first..(first + 1000).min(n))
            .map(|i| {
                serde_json::from_value(serde_json::json!({
                    "text": format!("note {i}: {}", sentence(&mut rng, 12)),
                    "namespace": format!("user:u{}", i % 50),
                    "kind": "interaction",
                }))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let size = batch.len() as u64;
        shared.load.begin(format!("add_many of crystals {first}..{}", first + size as usize));
        let result = memory.add_many(batch, "stress", now_ms()).await;
        shared.load.finish(&shared.clock, size, result.err().map(|e| e.to_string()));
    }
    shared.load.stop();
    Ok(())
}

async fn api_writer(http: reqwest::Client, api: String, token: String, shared: Arc<Shared>, writer: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ (writer as u64) << 32);
    let url = format!("{api}/v1/memories");
    for n in 0u64.. {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let text = format!("writer {writer} note {n}: {}", sentence(&mut rng, 10));
        shared.api.begin(format!("writer {writer}: POST /v1/memories #{n}"));
        let body = serde_json::json!({ "text": text, "kind": "interaction", "namespace": format!("user:w{writer}") });
        let error = match http.post(&url).bearer_auth(&token).json(&body).send().await {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("{}: {}", response.status(), response.text().await.unwrap_or_default())),
            Err(error) => Some(error.to_string()),
        };
        shared.api.finish(&shared.clock, 1, error);
    }
}

fn listing(n: u64, rng: &mut StdRng) -> CrystalListing {
    CrystalListing {
        issued_at: now_ms(),
        name: format!("stress-skill-{n}"),
        text: format!("Skill {n}: {}", sentence(rng, 40)),
        semantic_type: SemanticType::Skill,
        tags: vec!["stress".into()],
        category: Some("stress".into()),
        skill_id: format!("stress-skill-{n}"),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 10, successes: 8, avg_reward: 0.5 },
        asking_price: 5_000,
    }
}

/// Signs and ingests listings one by one on a blocking thread, as the gossip path would.
fn gossip(node: Node, shared: Arc<Shared>, authors: usize, per_second: u64, seed: u64) -> Result<()> {
    let runtime = tokio::runtime::Handle::current();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9055_1900);
    let authors: Vec<(Keypair, PeerId)> = (0..authors.max(1))
        .map(|_| {
            let key = Keypair::from_seed(rng.random());
            let peer = key.peer_id();
            (key, peer)
        })
        .collect();
    let started = Instant::now();
    for n in 0u64.. {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        if per_second > 0 {
            // Pacing, not synchronisation: listing n is due n / rate seconds after the start.
            let due = Duration::from_secs_f64(n as f64 / per_second as f64);
            if let Some(ahead) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
        let (key, peer) = &authors[n as usize % authors.len()];
        let bytes = seal(key, &Body::Crystal(listing(n, &mut rng)))?;
        shared.gossip.begin(format!("ingest_bytes of listing {n}"));
        let outcome = runtime.block_on(node.ingest_bytes(&bytes, peer, topic::CRYSTALS));
        let error = (outcome != Outcome::Accepted).then(|| outcome.label().to_owned());
        shared.gossip.finish(&shared.clock, 1, error);
    }
    Ok(())
}

async fn consolidator(http: reqwest::Client, api: String, token: String, shared: Arc<Shared>) -> Vec<Duration> {
    let url = format!("{api}/v1/consolidate");
    let mut passes = Vec::new();
    for n in 0u64.. {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        shared.consolidate.begin(format!("POST /v1/consolidate #{n}"));
        let started = Instant::now();
        let error = match http.post(&url).bearer_auth(&token).json(&serde_json::json!({})).send().await {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("{}: {}", response.status(), response.text().await.unwrap_or_default())),
            Err(error) => Some(error.to_string()),
        };
        if error.is_none() {
            passes.push(started.elapsed());
        }
        shared.consolidate.finish(&shared.clock, 1, error);
    }
    passes
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.writers >= 1, "--writers must be at least 1");
    ensure!(args.stall_secs >= 1, "--stall-secs must be at least 1");
    let root = match &args.dir {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .context("creating the data directory")?;
    let data_dir = root.path().join("node");
    let mut config = config(&data_dir, &[mgmt_key().public()])?;
    config.trust.listings_per_window = u32::MAX;
    config.trust.reports_per_window = u32::MAX;

    let shared = Arc::new(Shared {
        clock: Clock(Instant::now()),
        load: Part::new("load"),
        api: Part::new("api"),
        gossip: Part::new("gossip"),
        consolidate: Part::new("consolidate"),
        stop: AtomicBool::new(false),
    });
    let stall = Duration::from_secs(args.stall_secs);
    // The load at 100k takes minutes; allow an hour for it on a slow machine.
    let bound = Duration::from_secs(args.minutes * 60 + 3600) + 2 * stall;
    watchdog(Arc::clone(&shared), stall, bound, data_dir.clone());

    let running = daemon::start(config, Role::Edge, |_| axum::Router::new()).await.context("starting the node")?;
    let node = running.node.clone();
    let api = format!("http://{}", running.api_addr);
    let token = node.token().to_owned();
    println!(
        "druse store-stress: node {} in {}, embedder {}, API {api}; loading {} crystals",
        node.peer_id(),
        data_dir.display(),
        node.memory().embedder_name(),
        args.crystals
    );
    let started = Instant::now();
    load(&node, &shared, args.crystals, args.seed).await?;
    let load_time = started.elapsed();
    println!(
        "loaded {} crystals in {:.1} s ({:.0} per second); {} errors",
        shared.load.done.load(Ordering::Relaxed),
        load_time.as_secs_f64(),
        args.crystals as f64 / load_time.as_secs_f64().max(1e-9),
        shared.load.errors.load(Ordering::Relaxed)
    );

    println!(
        "running for {} min: {} API writers, gossip ingest from {} authors (at most {}/s, 0 = unpaced), consolidation \
         passes; stall limit {stall:?}",
        args.minutes, args.writers, args.authors, args.gossip_per_second
    );
    let http = reqwest::Client::builder().timeout(stall * 2).build()?;
    for part in [&shared.api, &shared.gossip, &shared.consolidate] {
        part.start(&shared.clock);
    }
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..args.writers {
        writers.spawn(api_writer(http.clone(), api.clone(), token.clone(), Arc::clone(&shared), w, args.seed));
    }
    let gossiper = tokio::task::spawn_blocking({
        let (node, shared) = (node.clone(), Arc::clone(&shared));
        move || gossip(node, shared, args.authors, args.gossip_per_second, args.seed)
    });
    let consolidation = tokio::spawn(consolidator(http.clone(), api.clone(), token.clone(), Arc::clone(&shared)));

    let run_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.minutes * 60)).await;
    shared.stop.store(true, Ordering::Relaxed);
    let run_time = run_started.elapsed();
    // Each part ends after its operation in flight; the watchdog still guards that.
    while writers.join_next().await.is_some() {}
    shared.api.stop();
    gossiper.await??;
    shared.gossip.stop();
    let passes = consolidation.await?;
    shared.consolidate.stop();

    let mut sorted = passes.clone();
    sorted.sort();
    let pct =
        |p: f64| sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).map_or(0.0, Duration::as_secs_f64);
    println!();
    println!(
        "| part (over {:>5.1} min)             | done      | per second | errors  |",
        run_time.as_secs_f64() / 60.0
    );
    println!("|-----------------------------------|-----------|------------|---------|");
    for part in [&shared.api, &shared.gossip, &shared.consolidate] {
        let done = part.done.load(Ordering::Relaxed);
        println!(
            "| {:<33} | {:>9} | {:>10.1} | {:>7} |",
            part.name,
            done,
            done as f64 / run_time.as_secs_f64(),
            part.errors.load(Ordering::Relaxed)
        );
    }
    println!(
        "consolidation pass: p50 {:.2} s, max {:.2} s over {} passes",
        pct(0.5),
        sorted.last().map_or(0.0, Duration::as_secs_f64),
        passes.len()
    );
    for part in [&shared.api, &shared.gossip, &shared.consolidate] {
        if let Some(error) = part.last_error.lock().ok().and_then(|e| e.clone()) {
            println!("last {} error: {error}", part.name);
        }
    }
    let crystals: usize = node.memory().counts().await?.values().sum();
    println!(
        "crystals in memory at the end: {crystals}; data directory {:.0} MB",
        directory_bytes(&data_dir) as f64 / 1e6
    );
    let flush = Instant::now();
    tokio::time::timeout(stall, running.stop())
        .await
        .with_context(|| format!("STALL: the node did not stop and flush within {stall:?}"))?;
    println!("stopped and flushed in {:.1} s", flush.elapsed().as_secs_f64());
    println!("no stall: no part went {stall:?} without progress");
    Ok(())
}
