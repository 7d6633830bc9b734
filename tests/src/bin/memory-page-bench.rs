//! The `/memory` page at 10k crystals: starts a real `druse-node`, stores the page test's
//! corpus (people, topics, every kind, corrections) through the API, then prints the latency of
//! `GET /v1/memory/map` (wall time as a client sees it, and the node's own compute time for the
//! PCA and the assembly), and, in headless Chromium, the page's time to first draw (from
//! navigation to the first frame holding every point) and the time of one full redraw.
//!
//!   cargo run --release -p druse-tests --bin memory-page-bench [-- --crystals 10000 --runs 20 --loads 5]
//!
//! Needs Chromium (`tests/page/setup.sh`) for the page's figures; without it only the route's
//! are printed. The node uses its default embedder (the hashing one, unless configured).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use druse_tests::browser::{self, Browser};
use druse_tests::page;
use serde_json::Value;

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

#[derive(Debug, Parser)]
struct Args {
    /// Crystals stored before timing.
    #[arg(long, default_value_t = 10_000)]
    crystals: usize,
    /// Map requests timed.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Page loads timed in Chromium.
    #[arg(long, default_value_t = 5)]
    loads: usize,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(name: &str, mut values: Vec<f64>) {
    values.sort_by(f64::total_cmp);
    println!(
        "{name}: p50 {:.1} ms, p95 {:.1} ms, min {:.1} ms, max {:.1} ms ({} runs)",
        percentile(&values, 0.5),
        percentile(&values, 0.95),
        values.first().copied().unwrap_or(f64::NAN),
        values.last().copied().unwrap_or(f64::NAN),
        values.len()
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let root = tempfile::tempdir()?;
    let (node, token) = page::start_node(root.path()).await?;

    let corpus = page::corpus(args.crystals);
    let started = Instant::now();
    let stored = page::store(&node.api, &token, &corpus.memories, 1000).await?;
    println!(
        "stored {} crystals ({} corrections) through POST /v1/memories/batch in {:.1} s",
        stored.len(),
        corpus.corrections,
        started.elapsed().as_secs_f64()
    );

    let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build()?;
    let (mut wall, mut compute) = (Vec::new(), Vec::new());
    let mut last = Value::Null;
    let mut bytes = 0;
    for _ in 0..args.runs {
        let started = Instant::now();
        let body = http.get(format!("{}/v1/memory/map", node.api)).bearer_auth(&token).send().await?.bytes().await?;
        wall.push(started.elapsed().as_secs_f64() * 1000.0);
        bytes = body.len();
        last = serde_json::from_slice(&body).context("the map")?;
        compute.push(last["compute_ms"].as_f64().context("compute_ms")?);
    }
    let points = last["points"].as_array().map_or(0, Vec::len);
    ensure!(points == stored.len().min(page_limit()), "the map holds every crystal: {points}");
    println!(
        "GET /v1/memory/map: {points} points, {} edges, {:.1} MB, PCA over {} dimensions in {} iterations ({:.0}% of variance)",
        last["edges"].as_array().map_or(0, Vec::len),
        bytes as f64 / 1e6,
        last["dim"],
        last["iterations"],
        (last["explained"][0].as_f64().unwrap_or(0.0) + last["explained"][1].as_f64().unwrap_or(0.0)) * 100.0
    );
    summary("  wall time (client)", wall);
    summary("  compute on the node (read, PCA, assembly)", compute);

    if !browser::available_or_skip("memory-page-bench") {
        return Ok(());
    }
    let browser = Browser::launch().await?;
    // The token goes where the page keeps it, as typing it in would put it.
    let page = browser.open(&format!("{}/memory", node.api)).await?;
    page.eval(&format!("sessionStorage.setItem('druse.token', {token:?})")).await?;
    let (mut first_draw, mut redraw) = (Vec::new(), Vec::new());
    for _ in 0..args.loads {
        page.navigate(&format!("{}/memory", node.api)).await?;
        let expression = format!(
            "(() => {{ const m = document.getElementById('map'); return m.dataset.state === 'drawn' && m.dataset.pointsDrawn === '{points}' && m.dataset.firstDrawMs; }})()"
        );
        let at = page.wait_for("the first draw", Duration::from_secs(120), &expression).await?;
        first_draw.push(at.as_str().and_then(|s| s.parse().ok()).context("data-first-draw-ms")?);
        // One full redraw, as a change of colouring makes it.
        let took = page
            .eval(
                "new Promise(resolve => { const m = document.getElementById('map'), s = document.getElementById('color-by'); \
                 const before = Number(m.dataset.draws), t0 = performance.now(); \
                 s.value = s.value === 'kind' ? 'lifecycle' : 'kind'; s.dispatchEvent(new Event('change')); \
                 const check = () => Number(m.dataset.draws) > before ? resolve(performance.now() - t0) : requestAnimationFrame(check); check(); })",
            )
            .await?;
        redraw.push(took.as_f64().context("redraw time")?);
    }
    println!("/memory in headless Chromium ({points} points):");
    summary("  time to first draw (navigation → every point drawn)", first_draw);
    summary("  full redraw (change of colouring → next frame drawn)", redraw);
    Ok(())
}

/// The map's default bound.
fn page_limit() -> usize {
    druse_node::memory_map::DEFAULT_LIMIT
}
