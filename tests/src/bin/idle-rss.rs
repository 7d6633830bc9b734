//! `idle-rss`: the idle-memory figure of DESIGN §12 (an idle edge node with the hashing embedder
//! uses at most 100 MB RSS), measured on the real `druse-node` binary.
//!
//! It starts `druse-node run` on a fresh data directory (loopback, every port chosen by the OS,
//! mDNS off, no `DRUSE_*` variable, so the hashing embedder), waits for its startup line and
//! its API, lets it settle, then samples `VmRSS` and `VmHWM` from `/proc/<pid>/status` and
//! prints them with the target, with the node's own metrics of what it holds.
//!
//! Run it with `cargo run --release -p druse-tests --bin idle-rss`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use druse_tests::process::{ProcNode, binaries};
use druse_tests::procfs::{self, mb};
use druse_tests::swarm::{key, mgmt_key};

/// DESIGN §12: an idle edge node with the hashing embedder.
const TARGET_MB: f64 = 100.0;

#[derive(Debug, Parser)]
#[command(about = "Resident memory of an idle druse-node with the hashing embedder")]
struct Args {
    /// How long the node runs after its API answers before sampling starts (start-up work,
    /// such as the first maintenance tick, is over by then).
    #[arg(long, default_value_t = 10)]
    settle_secs: u64,
    /// How long the samples are taken over.
    #[arg(long, default_value_t = 5)]
    sample_secs: u64,
    /// Samples taken over that time.
    #[arg(long, default_value_t = 10)]
    samples: u32,
    /// Extra flags for `druse-node run` (e.g. `--extra=--log-format=json`), to compare settings.
    #[arg(long, allow_hyphen_values = true)]
    extra: Vec<String>,
}

/// The largest mappings of the process by resident size, from `/proc/<pid>/smaps`: where the
/// memory sits (heap, thread stacks, mapped index files, the binary itself).
fn largest_mappings(pid: u32, count: usize) -> Result<Vec<(u64, String)>> {
    let path = format!("/proc/{pid}/smaps");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let mut mappings: Vec<(u64, String)> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rss) = line.strip_prefix("Rss:") {
            let kb = rss.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
            mappings.push((kb, current.clone()));
        } else if line.split_whitespace().next().is_some_and(|first| first.contains('-') && !first.ends_with(':')) {
            // A mapping's header: `start-end perms offset dev inode [path]`.
            let fields: Vec<&str> = line.split_whitespace().collect();
            current = fields.get(5..).map(|p| p.join(" ")).filter(|p| !p.is_empty()).unwrap_or("[anonymous]".into());
        }
    }
    // Many anonymous mappings (thread stacks, allocator arenas) add up; group by name.
    let mut grouped: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for (kb, name) in mappings {
        let name = if name.contains("/index/") { "tantivy index files".to_owned() } else { name };
        *grouped.entry(name).or_default() += kb;
    }
    let mut sorted: Vec<(u64, String)> = grouped.into_iter().map(|(name, kb)| (kb, name)).collect();
    sorted.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    sorted.truncate(count);
    Ok(sorted)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.samples >= 1, "--samples must be at least 1");
    let bins = tokio::task::spawn_blocking(binaries).await??;
    let root = tempfile::tempdir()?;
    let dir = root.path().join("edge");
    key(1).save(&dir.join("node.key"))?;
    let trust_list = root.path().join("trust.list");
    std::fs::write(&trust_list, format!("{}  # druse-mgmt\n", mgmt_key().public()))?;

    let extra: Vec<&str> = args.extra.iter().map(String::as_str).collect();
    let started = Instant::now();
    let mut node = ProcNode::start_with("druse-node (idle)", &bins.node, &dir, &trust_list, &[], &extra).await?;
    let pid = node.process.pid().context("the node exited at start")?;
    let up = started.elapsed();
    let settle = Duration::from_secs(args.settle_secs);
    let status = node.status().await?;
    println!(
        "druse idle-rss: druse-node pid {pid} up in {:.2} s (embedder {}, API {}), settling {:?}",
        up.as_secs_f64(),
        status["embedder"].as_str().unwrap_or("?"),
        node.api,
        settle
    );
    if status["embedder"].as_str().is_some_and(|e| !e.starts_with("hashing")) {
        bail!("the node did not start with the hashing embedder: {}", status["embedder"]);
    }
    let at_start = procfs::status(pid)?;
    tokio::time::sleep(settle).await;
    node.process.check_running()?;

    let every = Duration::from_secs(args.sample_secs) / args.samples;
    let mut readings = Vec::new();
    for _ in 0..args.samples {
        readings.push(procfs::status(pid)?);
        tokio::time::sleep(every).await;
    }
    node.process.check_running()?;
    let rss: Vec<u64> = readings.iter().map(|r| r.rss).collect();
    let last = readings.last().copied().unwrap_or(at_start);
    let (min, max) = (rss.iter().copied().min().unwrap_or(0), rss.iter().copied().max().unwrap_or(0));
    let mean = rss.iter().sum::<u64>() as f64 / rss.len() as f64;

    println!();
    println!("| idle druse-node, hashing embedder      | value       | target     |");
    println!("|----------------------------------------|-------------|------------|");
    println!("| {:<38} | {:>8.1} MB | {:<10} |", "VmRSS when the API first answered", mb(at_start.rss), "");
    println!(
        "| {:<38} | {:>8.1} MB | {:<10} |",
        format!("VmRSS idle, mean of {} samples", rss.len()),
        mean / 1024.0,
        if mean / 1024.0 <= TARGET_MB { "<= 100 MB ok" } else { "<= 100 MB MISSED" }
    );
    println!("| {:<38} | {:>5.1}–{:<5.1} | {:<10} |", "VmRSS idle, min–max (MB)", mb(min), mb(max), "");
    println!("| {:<38} | {:>8.1} MB | {:<10} |", "VmHWM (peak RSS since start)", mb(last.hwm), "");
    println!("| {:<38} | {:>8.1} MB | {:<10} |", "  of which anonymous (heap, stacks)", mb(last.anon), "");
    println!("| {:<38} | {:>8.1} MB | {:<10} |", "  of which file-backed (binary, mmaps)", mb(last.file), "");
    println!("| {:<38} | {:>11} | {:<10} |", "threads", last.threads, "");
    println!();
    println!("largest resident mappings:");
    for (kb, name) in largest_mappings(pid, 8)? {
        println!("  {:>8.1} MB  {name}", mb(kb));
    }
    node.process.terminate().await?;
    Ok(())
}
