//! `memory-bench reopen`, and the restart every engine run ends with: the engine opened again
//! on a loaded store, timed until it answers.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use druse_memory::Memory;
use druse_memory::engine::{Config as EngineConfig, Query};
use druse_memory::governance::Caller;

use super::{
    DAY_MS, DataArgs, Rng, START_MS, Synthetic, ids, mean, open_store, progress, recall, synthetic, time_searches,
    wait_indexed,
};

#[derive(Debug, Args)]
pub(crate) struct ReopenArgs {
    #[command(flatten)]
    data: DataArgs,
    /// The directory a run kept its stores in (`--keep`).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Days the kept run stored its crystals over (its `--days`).
    #[arg(long, default_value_t = 60)]
    days: u64,
}

/// The engine opened again on the same store.
pub(crate) struct Restart {
    /// Until the store was open, and until `Memory::open` returned.
    pub(crate) store: Duration,
    pub(crate) open: Duration,
    /// Until the first search answered.
    pub(crate) first_answer: Duration,
    /// The vector search's recall@k against exact search, right after the start.
    pub(crate) recall: f64,
    /// Vectors found in the graphs read back, and put in the tail.
    pub(crate) from_graphs: usize,
    pub(crate) tail: usize,
    /// Segments built after the start, until the index was idle.
    pub(crate) builds: u64,
}

impl Restart {
    pub(crate) fn print(&self, n: usize, k: usize) {
        println!(
            "  n={n}: restart: store open in {:.2} s, memory in {:.2} s, first answer {:.2} s after the start, recall@{k} {:.4}; {} vectors from the graphs read back, {} to the tail, {} segments built after it",
            self.store.as_secs_f64(),
            self.open.as_secs_f64(),
            self.first_answer.as_secs_f64(),
            self.recall,
            self.from_graphs,
            self.tail,
            self.builds
        );
    }
}

/// Closes `memory` and opens it again on `dir`: how long until it answers, and how well.
pub(crate) fn restart(
    memory: Memory,
    dir: &Path,
    embedder: &Arc<Synthetic>,
    k: usize,
    now: u64,
) -> anyhow::Result<Restart> {
    memory.flush()?;
    drop(memory);
    Ok(reopen(dir, embedder, k, now)?.0)
}

/// Opens the engine on the store in `dir`: how long until it answers, and how well.
fn reopen(dir: &Path, embedder: &Arc<Synthetic>, k: usize, now: u64) -> anyhow::Result<(Restart, Memory)> {
    let started = Instant::now();
    let db = open_store(dir)?;
    let store = started.elapsed();
    let memory = Memory::open(&db, &dir.join("index"), EngineConfig::default(), embedder.clone(), now)?;
    let open = started.elapsed();
    let query = |j: usize| format!("#q{j}");
    memory.search(&Query { q: query(0), k, ..Query::default() }, Caller::LocalAgent, now)?;
    let first_answer = started.elapsed();
    let stats = memory.vector_stats();
    let mut recalls = Vec::new();
    for j in 0..embedder.queries.len() {
        let found = memory.vector_hits(&query(j), k)?;
        recalls.push(recall(&ids(&found), &ids(&memory.vector_hits_exact(&query(j), k)?)));
        progress();
    }
    if !wait_indexed(&memory) {
        bail!("the vector index was still building an hour after the restart");
    }
    let restart = Restart {
        store,
        open,
        first_answer,
        recall: mean(&recalls),
        from_graphs: stats.live - stats.tail.min(stats.live),
        tail: stats.tail,
        builds: memory.vector_stats().builds,
    };
    Ok((restart, memory))
}

/// `memory-bench reopen`: a restart on each kept store, then the searches timed on it.
pub(crate) fn reopen_kept(args: &ReopenArgs) -> anyhow::Result<()> {
    for &n in &args.data.sizes {
        let dir = args.dir.join(n.to_string());
        if !dir.join("db").exists() {
            bail!("{} holds no kept store (run with --keep {})", dir.display(), args.dir.display());
        }
        let embedder = synthetic(&args.data, n);
        let k = args.data.k;
        // As the run that kept it: its restart came an hour after its searches.
        let now = START_MS + args.days * DAY_MS + 2 * 3_600_000;
        let (restart, memory) = reopen(&dir, &embedder, k, now)?;
        restart.print(n, k);
        let s = time_searches(&memory, embedder.queries.len(), k, &mut Rng(0x5eed ^ n as u64), now)?;
        println!(
            "  n={n}: search p50 / p99 {:.2} / {:.2} ms, scoped {:.2} / {:.2} ms, vector {:.2} / {:.2} ms, recall@{k} {:.4}, exact p50 {:.2} ms",
            s.search.0, s.search.1, s.scoped.0, s.scoped.1, s.vector.0, s.vector.1, s.recall, s.exact_p50
        );
    }
    Ok(())
}
