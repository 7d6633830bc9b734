//! Measures the vector index against DESIGN §12 (retrieval at 100k 384-d crystals: p50 ≤ 5 ms,
//! p99 ≤ 20 ms, recall@10 ≥ 0.95 against exact search).
//!
//! `cargo run --release -p druse-node --bin vector-bench [-- --sizes 10000,100000 ...]`
//!
//! The data is synthetic but clustered like real embeddings: unit centroids plus Gaussian noise,
//! normalised, from a fixed-seed PRNG, so every run measures the same vectors. Half the queries
//! are perturbed copies of stored vectors, half are fresh points from the same distribution.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use druse_node::memory::vector::{Config, VectorIndex, kernel};

/// Benchmark arguments; the index defaults are [`Config::default`]'s.
#[derive(Debug, Parser)]
struct Args {
    /// Index sizes to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    sizes: Vec<usize>,
    /// Queries per size (half perturbed stored vectors, half fresh points).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Vector dimension.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Number of clusters in the synthetic data.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Norm of the noise added to a centroid (before normalising); larger is harder.
    #[arg(long, default_value_t = 0.8)]
    noise: f32,
    /// Norm of the noise that turns a stored vector into a query.
    #[arg(long, default_value_t = 0.3)]
    query_noise: f32,
    /// Overrides `Config::seal_threshold`.
    #[arg(long)]
    seal: Option<usize>,
    /// Overrides `Config::ef_search`.
    #[arg(long)]
    ef_search: Option<usize>,
    /// Overrides `Config::ef_construction`.
    #[arg(long)]
    ef_construction: Option<usize>,
    /// Overrides `Config::merge_factor` (below 2 disables merging).
    #[arg(long)]
    merge_factor: Option<usize>,
    /// Overrides `Config::max_segment_len`.
    #[arg(long)]
    max_segment: Option<usize>,
    /// Overrides `Config::heuristic` (HNSW neighbour diversity heuristic).
    #[arg(long)]
    heuristic: Option<bool>,
    /// Seals the tail after loading, so every vector is in a graph (the worst case for recall).
    #[arg(long)]
    seal_all: bool,
    /// Searches to time while the builder is still busy after loading (0: none). They slow
    /// the builds down, so build timings from such a run are not comparable.
    #[arg(long, default_value_t = 0)]
    during_build: usize,
    /// Results per query.
    #[arg(long, default_value_t = 10)]
    k: usize,
}

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

/// The p-th percentile (nearest rank) of sorted durations, in milliseconds.
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// The `k` nearest of the f32 originals by brute force (`kernel::dot`), as indices into `data`.
fn exact_f32(data: &[Vec<f32>], query: &[f32], k: usize) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> = data.iter().enumerate().map(|(i, v)| (kernel::dot(query, v), i)).collect();
    let k = k.min(scored.len());
    if k == 0 {
        return Vec::new();
    }
    scored.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
    scored[..k].iter().map(|&(_, i)| i).collect()
}

fn config(args: &Args) -> Config {
    let defaults = Config::default();
    Config {
        dim: args.dim,
        seal_threshold: args.seal.unwrap_or(defaults.seal_threshold),
        ef_search: args.ef_search.unwrap_or(defaults.ef_search),
        ef_construction: args.ef_construction.unwrap_or(defaults.ef_construction),
        merge_factor: args.merge_factor.unwrap_or(defaults.merge_factor),
        max_segment_len: args.max_segment.unwrap_or(defaults.max_segment_len),
        heuristic: args.heuristic.unwrap_or(defaults.heuristic),
        ..defaults
    }
}

/// One row of the results table.
struct Row {
    n: usize,
    load: Duration,
    build_wall: Duration,
    builds: String,
    shape: String,
    p50: f64,
    p99: f64,
    recall_copies: f64,
    recall_fresh: f64,
    recall_all: f64,
    recall_f32: f64,
    exact_p50: f64,
}

fn run(args: &Args, n: usize) -> anyhow::Result<Row> {
    let config = config(args);
    let dim = args.dim;
    let mut rng = Rng(0x0dd5_eed5 ^ n as u64);
    let centroids: Vec<Vec<f32>> = (0..args.clusters.max(1)).map(|_| rng.direction(dim, 1.0)).collect();
    let fresh = |rng: &mut Rng| {
        let c = rng.below(centroids.len());
        perturb(rng, &centroids[c], args.noise)
    };

    let index = VectorIndex::new(config).context("index")?;
    let copies = args.queries / 2;
    let stride = (n / copies.max(1)).max(1);
    let data: Vec<Vec<f32>> = (0..n).map(|_| fresh(&mut rng)).collect();
    let sources: Vec<&Vec<f32>> = data.iter().step_by(stride).take(copies).collect();
    let mut queries: Vec<(bool, Vec<f32>)> =
        sources.iter().map(|s| (true, perturb(&mut rng, s, args.query_noise))).collect();
    while queries.len() < args.queries {
        queries.push((false, fresh(&mut rng)));
    }
    let started = Instant::now();
    for (id, v) in data.iter().enumerate() {
        index.insert(id as u64, v).context("insert")?;
    }
    let load = started.elapsed();
    if args.seal_all {
        index.seal();
    }
    // Searches while the builder works: they must not wait for it (they share the 2 cores).
    let mut during = Vec::new();
    for (_, q) in queries.iter().cycle().take(args.during_build) {
        if !index.stats().building {
            break;
        }
        let t = Instant::now();
        index.search(q, args.k)?;
        during.push(t.elapsed());
    }
    during.sort();
    if !index.wait_idle(Duration::from_secs(3600)) {
        bail!("builder still busy after an hour");
    }
    let build_wall = started.elapsed();

    let stats = index.stats();
    let seals: Vec<_> = stats.recent_builds.iter().filter(|b| b.inputs == 0).collect();
    let merges: Vec<_> = stats.recent_builds.iter().filter(|b| b.inputs > 0).collect();
    let mean = |xs: &[&druse_node::memory::vector::BuildStats]| {
        xs.iter().map(|b| b.took.as_secs_f64()).sum::<f64>() / xs.len().max(1) as f64
    };
    let mut builds = format!(
        "{} builds, {:.1} s total: {} seals (mean {:.2} s)",
        stats.builds,
        stats.build_time_total.as_secs_f64(),
        seals.len(),
        mean(&seals)
    );
    for m in &merges {
        builds += &format!(", merge {}→{} in {:.2} s", m.inputs, m.len, m.took.as_secs_f64());
    }
    let sizes: Vec<String> = stats.segments.iter().map(|s| s.len.to_string()).collect();
    let mut shape = format!("segments [{}] + tail {}", sizes.join(", "), stats.tail);
    if !during.is_empty() {
        shape += &format!(
            "; {} searches during builds: p50 {:.3} ms, p99 {:.3} ms",
            during.len(),
            percentile(&during, 0.50),
            percentile(&during, 0.99)
        );
    }

    // Warm caches and the per-segment search scratch before timing.
    for (_, q) in queries.iter().take(20) {
        index.search(q, args.k)?;
    }
    let mut latencies = Vec::with_capacity(queries.len());
    let mut exact_latencies = Vec::with_capacity(queries.len());
    let (mut recall_copies, mut recall_fresh, mut recall_f32) = (Vec::new(), Vec::new(), Vec::new());
    for (copy, q) in &queries {
        let t = Instant::now();
        let found = index.search(q, args.k)?;
        latencies.push(t.elapsed());
        let t = Instant::now();
        let truth = index.exact(q, args.k)?;
        exact_latencies.push(t.elapsed());
        let hits = found.iter().filter(|(id, _)| truth.iter().any(|(t, _)| t == id)).count();
        let recall = hits as f64 / truth.len().max(1) as f64;
        if *copy {
            recall_copies.push(recall)
        } else {
            recall_fresh.push(recall)
        }
        // Against the f32 originals, so Q14 storage is measured too.
        let f32_truth = exact_f32(&data, q, args.k);
        let hits = found.iter().filter(|(id, _)| f32_truth.contains(&(*id as usize))).count();
        recall_f32.push(hits as f64 / f32_truth.len().max(1) as f64);
    }
    latencies.sort();
    exact_latencies.sort();
    let avg = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    Ok(Row {
        n,
        load,
        build_wall,
        builds,
        shape,
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        recall_copies: avg(&recall_copies),
        recall_fresh: avg(&recall_fresh),
        recall_all: avg(&[recall_copies, recall_fresh].concat()),
        recall_f32: avg(&recall_f32),
        exact_p50: percentile(&exact_latencies, 0.50),
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = config(&args);
    println!(
        "vector-bench: dim {} clusters {} noise {} | seal {} ef_construction {} ef_search {} heuristic {} merge_factor {} max_segment {} | {} queries, k {}",
        config.dim,
        args.clusters,
        args.noise,
        config.seal_threshold,
        config.ef_construction,
        config.ef_search,
        config.heuristic,
        config.merge_factor,
        config.max_segment_len,
        args.queries,
        args.k,
    );
    let mut rows = Vec::new();
    for &n in &args.sizes {
        let row = run(&args, n)?;
        println!(
            "  n={}: load {:.2} s, builds done {:.1} s after start; {}",
            n,
            row.load.as_secs_f64(),
            row.build_wall.as_secs_f64(),
            row.builds
        );
        println!("  n={}: {}", n, row.shape);
        rows.push(row);
    }
    println!();
    println!(
        "{:>8} {:>9} {:>9} {:>10} {:>9} {:>9} {:>10} {:>14}",
        "N", "p50 ms", "p99 ms", "recall@10", "copies", "fresh", "vs f32", "exact scan ms"
    );
    for r in &rows {
        println!(
            "{:>8} {:>9.3} {:>9.3} {:>10.4} {:>9.4} {:>9.4} {:>10.4} {:>14.3}",
            r.n, r.p50, r.p99, r.recall_all, r.recall_copies, r.recall_fresh, r.recall_f32, r.exact_p50
        );
    }
    Ok(())
}
