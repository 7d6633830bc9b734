//! Context assembly at 10k memories (seed 003's target: p50 ≤ 500 ms): fills a memory engine
//! with observations and exchanges of 100 users and the agent's episodic notes, then times the
//! assembly of one batch's blocks (the author's impression, observations and past exchanges,
//! and the episodic memories), as the agent does before each run, and prints p50 and p99.
//!
//!   cargo run --release -p druse-tests --bin agent-context-bench [-- --memories 10000 --runs 300]
//!
//! The embedder is the node's default: MiniLM when `DRUSE_MINILM_DIR` names its folder,
//! else the hashing embedder.

use std::time::Instant;

use clap::Parser;
use druse_memory::Memory;
use druse_memory::crystal::{MemoryKind, Namespace};
use druse_memory::engine::{Config as EngineConfig, NewMemory};
use druse_node::agent::context::{self, Budgets};
use druse_node::config::Config;
use druse_protocol::body::SemanticType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

#[derive(Debug, Parser)]
struct Args {
    /// Memories stored before timing.
    #[arg(long, default_value_t = 10_000)]
    memories: usize,
    /// Assemblies timed.
    #[arg(long, default_value_t = 300)]
    runs: usize,
}

const USERS: usize = 100;
const TOPICS: &[&str] = &[
    "favorite color",
    "works as",
    "lives in",
    "has a dog named",
    "is learning",
    "plays the",
    "likes to cook",
    "is training for",
    "reads books about",
    "moved to",
    "studies",
    "builds",
    "prefers tea over coffee",
];

fn new(text: String, namespace: Namespace, kind: MemoryKind) -> NewMemory {
    let mut m: NewMemory = serde_json::from_value(serde_json::json!({"text": "x"})).expect("the minimal memory parses");
    m.text = text;
    m.namespace = namespace;
    m.kind = kind;
    m.semantic_type = if kind == MemoryKind::Interaction { SemanticType::Episode } else { SemanticType::Fact };
    m
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let embedder = druse_memory::embed::from_config(&Config::default().memory.embed)?;
    let now = druse_protocol::now_ms();
    let db = druse_node::store::open_database(&dir.path().join("db"), 64 << 20)?;
    let memory = Memory::open(&db, &dir.path().join("index"), EngineConfig::default(), embedder, now)?;
    let mut rng = StdRng::seed_from_u64(11);
    let mut batch = Vec::new();
    for i in 0..args.memories {
        let topic = TOPICS[rng.random_range(0..TOPICS.len())];
        let user = rng.random_range(0..USERS);
        let handle = format!("user{user}.test");
        let item = match i % 5 {
            0 => new(
                format!("agent note {i}: the swarm talked about {topic} today"),
                Namespace::Episodic,
                MemoryKind::Observation,
            ),
            1 | 2 => new(
                format!("@{handle}: I {topic} number {i}\n@agent.test: nice, tell me more"),
                Namespace::User(handle),
                MemoryKind::Interaction,
            ),
            _ => new(format!("The user {topic} item {i}"), Namespace::User(handle), MemoryKind::Observation),
        };
        batch.push(item);
    }
    let started = Instant::now();
    for chunk in batch.chunks(1000) {
        memory.add_many(chunk.to_vec(), "bench", now)?;
    }
    eprintln!("stored {} memories in {:?} with {}", args.memories, started.elapsed(), memory.embedder_name());
    memory.wait_indexed(std::time::Duration::from_secs(120));
    let budgets = Budgets::default();
    let mut times = Vec::with_capacity(args.runs);
    let mut bytes = 0;
    let mut lines = 0;
    for _ in 0..args.runs {
        let user = rng.random_range(0..USERS);
        let topic = TOPICS[rng.random_range(0..TOPICS.len())];
        let query = format!("hey agent, about what I said: I {topic} now");
        let t = Instant::now();
        let mut text = context::author_blocks(&memory, &format!("user{user}.test"), &query, &budgets, now)?;
        text += &context::episodic_block(&context::episodic(&memory, &query, now)?, &budgets, now);
        times.push(t.elapsed());
        bytes += text.len();
        lines += text.lines().filter(|l| l.starts_with("- ")).count();
    }
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    println!(
        "context assembly at {} memories ({}): p50 {:.2} ms, p99 {:.2} ms over {} runs \
         (mean context {} bytes, {:.1} memories; target p50 <= 500 ms)",
        args.memories,
        memory.embedder_name(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        args.runs,
        bytes / args.runs.max(1),
        lines as f64 / args.runs.max(1) as f64
    );
    Ok(())
}
