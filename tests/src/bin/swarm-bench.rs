//! `swarm-bench`: the swarm figures of DESIGN §12, measured in one run on a loopback swarm of
//! in-process nodes with fixed keys and a fixed seed:
//!
//! - publish → stored on every node, p50 and p99 (target: p99 ≤ 1 s);
//! - weather broadcast → every node halted, p50 and p99 (target: p99 ≤ 1 s);
//! - signed listings ingested per second by one node (decode, verify, validate, gate, store,
//!   then index in memory), against the raw single-core `verify_strict` rate of the same run,
//!   measured first while nothing else runs (targets: stored ≥ 70%, stored and indexed ≥ 40%).
//!
//! Run it with `cargo run --release -p druse-tests --bin swarm-bench -- --nodes 10`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use druse_node::ingest::Outcome;
use druse_node::{Config, Role};
use druse_protocol::body::{Body, CrystalListing, ExecutionStats, SemanticType};
use druse_protocol::net::PeerId;
use druse_protocol::now_ms;
use druse_protocol::{Keypair, topic};
use druse_tests::swarm::{
    HEARTBEAT, MGMT_SEED, TestNode, connect, listing, mesh_ready, mgmt_key, seal, wait_connected,
};
use ed25519_dalek::Signer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

/// Each latency sample must complete within this, or the run fails.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the stores and weather of every node are polled while timing.
const POLL: Duration = Duration::from_millis(1);

#[derive(Debug, Parser)]
#[command(about = "Propagation, weather lockdown and ingest figures of a loopback druse swarm")]
struct Args {
    /// Nodes in the swarm: one management node, the rest edges.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Peers each node dials (a ring plus random chords, so the swarm is connected).
    #[arg(long, default_value_t = 3)]
    dials: usize,
    /// Listings published from random edges, each timed until every node stores it.
    #[arg(long, default_value_t = 50)]
    publishes: usize,
    /// Weather broadcasts, each timed until every node is halted (then lifted).
    #[arg(long, default_value_t = 20)]
    weather_rounds: usize,
    /// Signed 1 KiB listings ingested by one node.
    #[arg(long, default_value_t = 20_000)]
    listings: usize,
    /// Distinct authors of those listings.
    #[arg(long, default_value_t = 1_000)]
    authors: usize,
    /// Seed of every random choice (keys are fixed seeds too).
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// No per-peer rate limit gets in the way of what is measured.
fn unlimited(config: &mut Config) {
    config.trust.listings_per_window = 1_000_000;
    config.trust.reports_per_window = 1_000_000;
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.nodes >= 2, "--nodes must be at least 2");
    ensure!(args.authors >= 1, "--authors must be at least 1");
    let mut rng = StdRng::seed_from_u64(args.seed);

    println!(
        "druse swarm-bench: {} nodes ({} edges + 1 management) on loopback, each dialling {}, heartbeat {:?}, seed {}",
        args.nodes,
        args.nodes - 1,
        args.dials.min(args.nodes - 1),
        HEARTBEAT,
        args.seed
    );
    let nodes = start_swarm(&args, &mut rng).await?;
    let mgmt = &nodes[0];
    let management =
        druse_management::Management::new(mgmt.node.clone(), Default::default()).context("management role")?;

    let publish = measure_publish(&nodes, args.publishes, &mut rng).await?;
    let (lockdown, lift) = measure_weather(&nodes, &management, args.weather_rounds).await?;
    drop(management);
    for node in nodes {
        node.stop().await;
    }
    let ingest = measure_ingest(&args, &mut rng).await?;

    println!();
    println!("| measure                           |   n   |    p50    |    p99    |    max    | target         |");
    println!("|-----------------------------------|-------|-----------|-----------|-----------|----------------|");
    row("publish -> stored on every node", &publish, Some(Duration::from_secs(1)));
    row("weather -> every node halted", &lockdown, Some(Duration::from_secs(1)));
    row("weather lifted -> every node free", &lift, None);
    println!();
    println!("| ingest on one node                         | value            | target      |");
    println!("|--------------------------------------------|------------------|-------------|");
    println!("| {:<42} | {:>10.0} sig/s | {:<11} |", "raw verify_strict, one core", ingest.raw_rate, "");
    println!(
        "| {:<42} | {:>10.0} msg/s | {:<11} |",
        format!("{} listings of 1 KiB, {} authors: stored", ingest.count, args.authors),
        ingest.ingest_rate,
        ""
    );
    println!("| {:<42} | {:>10.0} msg/s | {:<11} |", "  ... and indexed in memory", ingest.indexed_rate, "");
    let stored_ratio = ingest.ingest_rate / ingest.raw_rate;
    println!(
        "| {:<42} | {:>14.1} % | {:<11} |",
        "stored / raw verify",
        stored_ratio * 100.0,
        verdict(stored_ratio >= 0.7, ">= 70%")
    );
    let ratio = ingest.indexed_rate / ingest.raw_rate;
    println!(
        "| {:<42} | {:>14.1} % | {:<11} |",
        "stored and indexed / raw verify",
        ratio * 100.0,
        verdict(ratio >= 0.4, ">= 40%")
    );
    println!("| {:<42} | {:>16} | {:<11} |", "stored after ingest", format!("{}/{}", ingest.stored, ingest.count), "");
    Ok(())
}

/// Starts the management node (index 0) and the edges; node `i` dials `i + 1` (a ring, so the
/// swarm is connected) and random others; waits until gossip flows between all of them.
async fn start_swarm(args: &Args, rng: &mut StdRng) -> Result<Vec<TestNode>> {
    let trusted = [mgmt_key().public()];
    let mut nodes = vec![TestNode::start("mgmt", MGMT_SEED, Role::Management, &trusted, unlimited).await?];
    for i in 1..args.nodes {
        let seed = u8::try_from(i).context("at most 199 nodes")?;
        ensure!(seed < MGMT_SEED, "at most {MGMT_SEED} nodes");
        nodes.push(TestNode::start(&format!("edge-{i}"), seed, Role::Edge, &trusted, unlimited).await?);
    }
    let n = nodes.len();
    let dials = args.dials.clamp(1, n - 1);
    let mut links = std::collections::BTreeSet::new();
    for i in 0..n {
        let mut targets = vec![(i + 1) % n];
        while targets.len() < dials {
            let j = rng.random_range(0..n);
            if j != i && !targets.contains(&j) {
                targets.push(j);
            }
        }
        for j in targets {
            if links.insert((i.min(j), i.max(j))) {
                connect(nodes[i].net(), nodes[j].net()).await?;
            }
        }
    }
    for (i, node) in nodes.iter().enumerate() {
        let expected: Vec<PeerId> = links
            .iter()
            .filter_map(|&(x, y)| {
                if x == i {
                    Some(y)
                } else if y == i {
                    Some(x)
                } else {
                    None
                }
            })
            .map(|j| nodes[j].peer_id())
            .collect();
        wait_connected(node.net(), &expected).await?;
    }
    mesh_ready(&nodes.iter().collect::<Vec<_>>()).await?;
    println!("swarm up: {} nodes, {} connections", n, links.len());
    Ok(nodes)
}

async fn measure_publish(nodes: &[TestNode], publishes: usize, rng: &mut StdRng) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(publishes);
    for k in 0..publishes {
        let edge = &nodes[rng.random_range(1..nodes.len())];
        let body = Body::Crystal(listing(&format!("bench-skill-{k}")));
        let started = Instant::now();
        let id = edge.publish(&body).await.with_context(|| format!("publishing from {}", edge.name))?;
        let mut waiting: Vec<&TestNode> = nodes.iter().collect();
        loop {
            waiting.retain(|n| !n.has_skill(&id));
            if waiting.is_empty() {
                break;
            }
            if started.elapsed() > SAMPLE_TIMEOUT {
                let names: Vec<&str> = waiting.iter().map(|n| n.name.as_str()).collect();
                bail!("listing {k} from {} did not reach {names:?} within {SAMPLE_TIMEOUT:?}", edge.name);
            }
            tokio::time::sleep(POLL).await;
        }
        samples.push(started.elapsed());
    }
    Ok(samples)
}

async fn measure_weather(
    nodes: &[TestNode],
    management: &druse_management::Management,
    rounds: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let mut lockdown = Vec::with_capacity(rounds);
    let mut lift = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let started = Instant::now();
        management.weather(0.9, Duration::from_secs(60), format!("bench round {round}")).await?;
        wait_all(nodes, true, started).await.with_context(|| format!("weather round {round}"))?;
        lockdown.push(started.elapsed());

        let started = Instant::now();
        management.weather(0.0, Duration::from_secs(1), format!("bench round {round} lifted")).await?;
        wait_all(nodes, false, started).await.with_context(|| format!("lifting weather round {round}"))?;
        lift.push(started.elapsed());
    }
    Ok((lockdown, lift))
}

/// Waits until every node's `halted()` equals `halted`.
async fn wait_all(nodes: &[TestNode], halted: bool, started: Instant) -> Result<()> {
    let mut waiting: Vec<&TestNode> = nodes.iter().collect();
    loop {
        waiting.retain(|n| n.halted() != halted);
        if waiting.is_empty() {
            return Ok(());
        }
        if started.elapsed() > SAMPLE_TIMEOUT {
            let names: Vec<&str> = waiting.iter().map(|n| n.name.as_str()).collect();
            bail!("{names:?} did not reach halted={halted} within {SAMPLE_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

struct Ingest {
    count: usize,
    stored: usize,
    /// Decoded, verified, validated and stored.
    ingest_rate: f64,
    /// Also indexed in memory (embedded, written, searchable by vector and text).
    indexed_rate: f64,
    raw_rate: f64,
}

/// A listing with about 1 KiB of text; `n` makes it unique.
fn bench_listing(n: usize, rng: &mut StdRng) -> CrystalListing {
    const WORDS: [&str; 16] = [
        "parse", "validate", "retry", "stream", "buffer", "decode", "schema", "index", "merge", "cache", "token",
        "window", "batch", "queue", "route", "shard",
    ];
    let mut text = format!("Skill {n}: ");
    while text.len() < 1024 {
        text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        text.push(' ');
    }
    text.truncate(1024);
    CrystalListing {
        issued_at: now_ms(),
        name: format!("ingest-skill-{n}"),
        text,
        semantic_type: SemanticType::Skill,
        tags: vec!["bench".into(), "ingest".into()],
        category: Some("benchmark".into()),
        skill_id: format!("ingest-skill-{n}"),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 10, successes: 8, avg_reward: 0.5 },
        asking_price: 5_000,
    }
}

/// Verifies raw signatures of the listings' size on one core while nothing else runs, then
/// feeds the pre-signed listings from many authors to one fresh node's ingest actor, as
/// gossip would, and waits until every one is also indexed in the node's memory.
async fn measure_ingest(args: &Args, rng: &mut StdRng) -> Result<Ingest> {
    let authors: Vec<(Keypair, PeerId)> = (0..args.authors)
        .map(|_| {
            let key = Keypair::from_seed(rng.random());
            let peer = key.peer_id();
            (key, peer)
        })
        .collect();
    let mut messages = Vec::with_capacity(args.listings);
    let mut raw = Vec::with_capacity(args.listings);
    for n in 0..args.listings {
        let (key, peer) = &authors[n % authors.len()];
        let body = Body::Crystal(bench_listing(n, rng));
        let bytes = seal(key, &body)?;
        let encoded = body.encode()?;
        // The same domain-separated message an envelope signs, signed by a dalek key of the
        // same kind, for the raw verify rate.
        let signing = ed25519_dalek::SigningKey::from_bytes(&rng.random());
        let message = [b"druse/v1/crystal\0".as_slice(), &encoded].concat();
        let signature = signing.sign(&message);
        raw.push((signing.verifying_key(), message, signature));
        messages.push((bytes, *peer));
    }
    println!(
        "signed {} listings ({} bytes each on the wire)",
        messages.len(),
        messages.first().map_or(0, |m| m.0.len())
    );

    // The raw rate first, before any node runs: nothing else competes for the cores.
    let (raw_elapsed, valid) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let valid =
            raw.iter().filter(|(key, message, signature)| key.verify_strict(message, signature).is_ok()).count();
        (started.elapsed(), valid)
    })
    .await?;
    ensure!(valid == args.listings, "only {valid} of {} raw signatures verified", args.listings);

    let node = TestNode::start("ingest", 1, Role::Edge, &[mgmt_key().public()], unlimited).await?;
    // Every listing is queued as gossip delivers it, without waiting for the one before: the
    // node's ingest actor takes them in batches, and its bounded inbox pushes back.
    let node_ref = node.node.clone();
    let started = Instant::now();
    let outcomes = tokio::spawn(async move {
        let mut outcomes = Vec::with_capacity(messages.len());
        for (bytes, peer) in messages {
            outcomes.push(node_ref.submit_bytes(bytes, peer, topic::CRYSTALS).await?);
        }
        anyhow::Ok(outcomes)
    })
    .await??;
    let mut refused = Vec::new();
    for outcome in outcomes {
        let outcome = outcome.await.context("the ingest actor stopped")?;
        if outcome != Outcome::Accepted {
            refused.push(outcome.label());
        }
    }
    let elapsed = started.elapsed();
    ensure!(refused.is_empty(), "{} listings were refused, first: {:?}", refused.len(), refused.first());
    let stored = node.store().skill_count()?;
    let indexed = || node.memory().len();
    druse_tests::eventually(Duration::from_secs(300), "every listing to be indexed in memory", async || {
        indexed() >= args.listings
    })
    .await?;
    let indexed_elapsed = started.elapsed();
    node.stop().await;
    Ok(Ingest {
        count: args.listings,
        stored,
        ingest_rate: args.listings as f64 / elapsed.as_secs_f64(),
        indexed_rate: args.listings as f64 / indexed_elapsed.as_secs_f64(),
        raw_rate: args.listings as f64 / raw_elapsed.as_secs_f64(),
    })
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn verdict(pass: bool, target: &str) -> String {
    format!("{target} {}", if pass { "PASS" } else { "FAIL" })
}

fn row(what: &str, samples: &[Duration], p99_target: Option<Duration>) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let p99 = percentile(&sorted, 99.0);
    let target = p99_target.map_or(String::new(), |t| verdict(p99 <= t, &format!("p99<={}s", t.as_secs())));
    println!(
        "| {:<33} | {:>5} | {:>9} | {:>9} | {:>9} | {:<14} |",
        what,
        sorted.len(),
        ms(percentile(&sorted, 50.0)),
        ms(p99),
        ms(sorted.last().copied().unwrap_or_default()),
        target
    );
}
