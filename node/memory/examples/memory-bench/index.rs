//! `memory-bench index`: the vector index alone, with every knob of its config (the sweep
//! that chose the defaults).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use druse_memory::index::{self as vector, VectorIndex};

use super::{Data, DataArgs, describe_builds, describe_shape, ids, mean, p50_p99, progress, recall, timed};

/// The index-only run; its defaults are [`vector::Config::default`]'s.
#[derive(Debug, Args)]
pub(crate) struct IndexArgs {
    #[command(flatten)]
    pub(crate) data: DataArgs,
    /// Vector dimension.
    #[arg(long, default_value_t = 384)]
    dim: usize,
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
}

/// The `k` nearest of the f32 originals by brute force (`vector::dot`), as indices into `data`.
fn exact_f32(data: &[Vec<f32>], query: &[f32], k: usize) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> = data.iter().enumerate().map(|(i, v)| (vector::dot(query, v), i)).collect();
    let k = k.min(scored.len());
    if k == 0 {
        return Vec::new();
    }
    scored.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
    scored[..k].iter().map(|&(_, i)| i).collect()
}

fn index_config(args: &IndexArgs) -> vector::Config {
    let defaults = vector::Config::default();
    vector::Config {
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

fn index_run(args: &IndexArgs, n: usize) -> anyhow::Result<String> {
    let k = args.data.k;
    let data = Data::new(&args.data, n, args.dim, false);
    let index = VectorIndex::new(index_config(args)).context("index")?;
    let started = Instant::now();
    for (id, v) in data.vectors.iter().enumerate() {
        index.insert(id as u64, v).context("insert")?;
    }
    progress();
    let load = started.elapsed();
    if args.seal_all {
        index.seal();
    }
    // Searches while the builder works: they must not wait for it (they share the 2 cores).
    let mut during = Vec::new();
    for (_, q) in data.queries.iter().cycle().take(args.during_build) {
        if !index.stats().building {
            break;
        }
        timed(&mut during, || index.search(q, k))?;
    }
    if !(0..360).any(|_| {
        progress();
        index.wait_idle(Duration::from_secs(10))
    }) {
        bail!("builder still busy after an hour");
    }
    let stats = index.stats();
    println!(
        "  n={n}: load {:.2} s, builds done {:.1} s after start; {}",
        load.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        describe_builds(&stats.recent_builds)
    );
    println!("  n={n}: {}", describe_shape(&stats));
    if !during.is_empty() {
        let (p50, p99) = p50_p99(during.clone());
        println!("  n={n}: {} searches during builds: p50 {p50:.3} ms, p99 {p99:.3} ms", during.len());
    }
    for (_, q) in data.queries.iter().take(20) {
        index.search(q, k)?;
    }
    let (mut latencies, mut exact_latencies) = (Vec::new(), Vec::new());
    let (mut copies, mut fresh, mut vs_f32) = (Vec::new(), Vec::new(), Vec::new());
    for (copy, q) in &data.queries {
        let found = ids(&timed(&mut latencies, || index.search(q, k))?);
        let truth = ids(&timed(&mut exact_latencies, || index.exact(q, k))?);
        let r = recall(&found, &truth);
        if *copy {
            copies.push(r)
        } else {
            fresh.push(r)
        }
        // Against the f32 originals, so Q14 storage is measured too.
        let f32_truth: Vec<u64> = exact_f32(&data.vectors, q, k).into_iter().map(|i| i as u64).collect();
        vs_f32.push(recall(&found, &f32_truth));
        progress();
    }
    let (p50, p99) = p50_p99(latencies);
    Ok(format!(
        "{:>8} {:>9.3} {:>9.3} {:>10.4} {:>9.4} {:>9.4} {:>10.4} {:>14.3}",
        n,
        p50,
        p99,
        mean(&[copies.clone(), fresh.clone()].concat()),
        mean(&copies),
        mean(&fresh),
        mean(&vs_f32),
        p50_p99(exact_latencies).0
    ))
}

pub(crate) fn index(args: &IndexArgs) -> anyhow::Result<()> {
    let config = index_config(args);
    println!(
        "memory-bench index: dim {} clusters {} noise {} | seal {} ef_construction {} ef_search {} heuristic {} merge_factor {} max_segment {} | {} queries, k {}",
        config.dim,
        args.data.clusters,
        args.data.noise,
        config.seal_threshold,
        config.ef_construction,
        config.ef_search,
        config.heuristic,
        config.merge_factor,
        config.max_segment_len,
        args.data.queries,
        args.data.k,
    );
    let rows = args.data.sizes.iter().map(|&n| index_run(args, n)).collect::<anyhow::Result<Vec<_>>>()?;
    println!();
    println!(
        "{:>8} {:>9} {:>9} {:>10} {:>9} {:>9} {:>10} {:>14}",
        "N", "p50 ms", "p99 ms", "recall@k", "copies", "fresh", "vs f32", "exact scan ms"
    );
    for row in rows {
        println!("{row}");
    }
    Ok(())
}
