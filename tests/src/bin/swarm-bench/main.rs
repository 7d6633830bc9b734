//! `swarm-bench`: the swarm figures of DESIGN §12, measured in one run on a loopback swarm of
//! in-process nodes with fixed keys and a fixed seed:
//!
//! - publish → stored on every node, p50 and p99 (target: p99 ≤ 1 s);
//! - weather broadcast → every node halted, p50 and p99 (target: p99 ≤ 1 s);
//! - signed listings ingested per second by one node (decode, verify, validate, gate, store,
//!   then index in memory), against the raw single-core `verify_strict` rate of the same run,
//!   measured first while nothing else runs (targets: stored ≥ 70%, stored and indexed ≥ 40%);
//! - the same listings flooded at one fresh node by a peer over gossipsub, as fast as its
//!   queues take them: stored and indexed per second through the whole network path
//!   (transport, gossipsub, message ids, the event channel), beside the injected figures, and
//!   how many the node shed when it could not keep up;
//! - the swarm's process: resident memory per node, threads, connected peers per node and the
//!   CPU the swarm uses while nothing is published.
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
use druse_tests::procfs::{self, mb};
use druse_tests::swarm::{MGMT_SEED, Sniffer, TestNode, connect, listing, mesh_ready, mgmt_key, seal, wait_connected};
use ed25519_dalek::Signer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

/// Each latency sample must complete within this, or the run fails.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the stores and weather of every node are polled while timing.
const POLL: Duration = Duration::from_millis(1);

/// The key seed of the flooding peer (no node of the swarm uses it).
const FLOODER_SEED: u8 = 250;

/// A flooded node whose stored and indexed counts have not grown for this long is done.
const SETTLED: Duration = Duration::from_secs(3);

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
    /// The gossipsub heartbeat of every node (the tests' 100 ms; a node's default is 1 s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    heartbeat: Duration,
    /// Connections each node keeps at most (`[p2p] max_connections`; the default if unset).
    #[arg(long)]
    max_connections: Option<u32>,
    /// Peers each node keeps connections to (`[p2p] target_peers`; the default if unset).
    #[arg(long)]
    target_peers: Option<u32>,
    /// How long the idle swarm's CPU use is measured, once it is up.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    idle: Duration,
    /// Seed of every random choice (keys are fixed seeds too).
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// No per-peer rate limit gets in the way of what is measured.
fn unlimited(config: &mut Config) {
    config.trust.listings_per_window = 1_000_000;
    config.trust.reports_per_window = 1_000_000;
}

/// A swarm node's config: unlimited, with the run's heartbeat and connection limit.
fn swarm_node(args: &Args) -> impl Fn(&mut Config) + use<> {
    let (heartbeat, max_connections, target_peers) = (args.heartbeat, args.max_connections, args.target_peers);
    move |config| {
        unlimited(config);
        config.p2p.heartbeat = heartbeat;
        if let Some(max) = max_connections {
            config.p2p.max_connections = max;
        }
        if target_peers.is_some() {
            config.p2p.target_peers = target_peers;
        }
    }
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
        args.heartbeat,
        args.seed
    );
    let pid = std::process::id();
    let before = procfs::status(pid)?;
    let nodes = start_swarm(&args, &mut rng).await?;
    let settled = settle(&nodes).await?;
    let swarm = measure_idle(pid, before, &nodes, args.idle).await?;
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
    println!("| the swarm's process                        | value            |");
    println!("|--------------------------------------------|------------------|");
    println!("| {:<42} | {:>13.1} MB |", "resident memory before any node", mb(before.rss));
    println!("| {:<42} | {:>13.1} MB |", format!("resident memory with {} nodes up", args.nodes), mb(swarm.up.rss));
    println!("| {:<42} | {:>13.1} MB |", "  per node", mb(swarm.up.rss.saturating_sub(before.rss)) / args.nodes as f64);
    println!("| {:<42} | {:>16} |", "threads", swarm.up.threads);
    println!("| {:<42} | {:>16.1} |", "connected peers per node", swarm.peers);
    println!("| {:<42} | {:>14.1} s |", "swarm up -> every node at its peer target", settled.as_secs_f64());
    println!("| {:<42} | {:>10.2} cores |", format!("CPU while idle, over {:?}", args.idle), swarm.idle_cores);
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
    let flood = &ingest.flood;
    println!(
        "| {:<42} | {:>10.0} msg/s | {:<11} |",
        "flooded over gossipsub by one peer: stored", flood.stored_rate, ""
    );
    println!("| {:<42} | {:>10.0} msg/s | {:<11} |", "  ... and indexed in memory", flood.indexed_rate, "");
    println!(
        "| {:<42} | {:>14.1} % | {:<11} |",
        "flood stored / raw verify",
        flood.stored_rate / ingest.raw_rate * 100.0,
        ""
    );
    println!(
        "| {:<42} | {:>14.1} % | {:<11} |",
        "flood stored and indexed / raw verify",
        flood.indexed_rate / ingest.raw_rate * 100.0,
        ""
    );
    println!(
        "| {:<42} | {:>16} | {:<11} |",
        "flood: stored / sent (the rest shed)",
        format!("{}/{}", flood.stored, ingest.count - flood.queue_full),
        ""
    );
    println!("| {:<42} | {:>16} | {:<11} |", "flood: events the node dropped", flood.dropped, "");
    println!("| {:<42} | {:>16} | {:<11} |", "flood: not sent, the flooder's queue full", flood.queue_full, "");
    Ok(())
}

/// The swarm's process once every node is up.
struct Swarm {
    up: procfs::Status,
    /// CPU used per second of wall time while nothing is published: heartbeats, timers.
    idle_cores: f64,
    /// Connected peers per node, on average, after the idle time.
    peers: f64,
}

/// How long a settling swarm may take before the run goes on without it.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(180);

/// Waits until every node is back within its connection target: Kademlia's first lookups
/// connect each node to nearly every other, and each node closes the surplus once the
/// connections are past their grace period. What is measured afterwards is the swarm as it
/// runs, not its first minute.
async fn settle(nodes: &[TestNode]) -> Result<Duration> {
    let started = Instant::now();
    loop {
        let mut over = 0;
        for node in nodes {
            let high = druse_protocol::net::peer_high_water(node.config.net().target_peers as usize);
            if node.net().peers().await?.len() > high {
                over += 1;
            }
        }
        if over == 0 {
            println!("settled in {:.1} s: every node within its peer target", started.elapsed().as_secs_f64());
            return Ok(started.elapsed());
        }
        if started.elapsed() > SETTLE_TIMEOUT {
            println!("not settled after {SETTLE_TIMEOUT:?}: {over} nodes above their peer target; measuring anyway");
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The process's resident memory with the swarm up, and its CPU use while the swarm idles.
async fn measure_idle(pid: u32, before: procfs::Status, nodes: &[TestNode], idle: Duration) -> Result<Swarm> {
    let up = procfs::status(pid)?;
    let connected = async || -> Result<f64> {
        let mut sum = 0;
        for node in nodes {
            sum += node.net().peers().await?.len();
        }
        Ok(sum as f64 / nodes.len() as f64)
    };
    let peers_before = connected().await?;
    let (cpu, started) = (procfs::cpu_seconds(pid)?, Instant::now());
    tokio::time::sleep(idle).await;
    let idle_cores = (procfs::cpu_seconds(pid)? - cpu) / started.elapsed().as_secs_f64();
    let peers_after = connected().await?;
    println!(
        "{} nodes: {:.1} MB resident ({:.1} MB before), {} threads, idle CPU {idle_cores:.2} cores, \
         peers per node {peers_before:.1} then {peers_after:.1}",
        nodes.len(),
        mb(up.rss),
        mb(before.rss),
        up.threads
    );
    Ok(Swarm { up, idle_cores, peers: peers_after })
}

/// Starts the management node (index 0) and the edges; node `i` dials `i + 1` (a ring, so the
/// swarm is connected) and random others; waits until gossip flows between all of them.
async fn start_swarm(args: &Args, rng: &mut StdRng) -> Result<Vec<TestNode>> {
    let trusted = [mgmt_key().public()];
    let mut nodes = vec![TestNode::start("mgmt", MGMT_SEED, Role::Management, &trusted, swarm_node(args)).await?];
    for i in 1..args.nodes {
        let seed = u8::try_from(i).context("at most 199 nodes")?;
        ensure!(seed < MGMT_SEED, "at most {MGMT_SEED} nodes");
        nodes.push(TestNode::start(&format!("edge-{i}"), seed, Role::Edge, &trusted, swarm_node(args)).await?);
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
    flood: Flood,
}

/// One node flooded by a peer over gossipsub.
struct Flood {
    stored: usize,
    /// Stored per second, from the first send to the last listing stored.
    stored_rate: f64,
    /// Indexed in memory per second, from the first send to the last listing indexed.
    indexed_rate: f64,
    /// Gossip events the node's swarm task could not hand on (`druse_net_events_dropped_total`).
    dropped: f64,
    /// Listings the flooder could not send because gossipsub's queue to the node was full.
    queue_full: usize,
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
    let flood_messages: Vec<Vec<u8>> = messages.iter().map(|(bytes, _)| bytes.clone()).collect();
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
    let flood = measure_flood(flood_messages).await?;
    Ok(Ingest {
        count: args.listings,
        stored,
        ingest_rate: args.listings as f64 / elapsed.as_secs_f64(),
        indexed_rate: args.listings as f64 / indexed_elapsed.as_secs_f64(),
        raw_rate: args.listings as f64 / raw_elapsed.as_secs_f64(),
        flood,
    })
}

/// A bare peer connects to one fresh node and publishes every listing over gossipsub without
/// pacing: it pauses only when gossipsub's queue to the node is full (the listing it was
/// sending is then lost at the flooder, and counted). The node takes them as
/// it would from any peer; whatever its swarm task cannot hand on is shed and counted. Ends
/// once every listing is stored and indexed, or the counts stop growing for [`SETTLED`].
async fn measure_flood(messages: Vec<Vec<u8>>) -> Result<Flood> {
    let count = messages.len();
    let node = TestNode::start("flooded", 2, Role::Edge, &[mgmt_key().public()], unlimited).await?;
    let flooder = Sniffer::start(FLOODER_SEED)?;
    connect(&flooder.net, node.net()).await?;
    wait_connected(&flooder.net, &[node.peer_id()]).await?;
    let mut messages = messages.into_iter();
    let first = messages.next().context("no listings to flood")?;
    // The first one waits until the node has subscribed; the clock starts after it.
    flooder.publish(topic::CRYSTALS, first).await?;
    let started = Instant::now();
    let net = flooder.net.clone();
    let sender = tokio::spawn(async move {
        let mut queue_full = 0;
        for bytes in messages {
            match net.publish(topic::CRYSTALS, bytes).await {
                Ok(_) => {}
                // Gossipsub has already taken its id: sent again it would be a duplicate. It
                // is lost at the flooder, which pauses a moment for its queue to drain.
                Err(druse_protocol::net::Error::Publish(_)) => {
                    queue_full += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => return Err(anyhow::Error::from(e).context("flooding")),
            }
        }
        Ok(queue_full)
    });

    let (mut stored, mut indexed) = (0, 0);
    let (mut stored_at, mut indexed_at) = (Duration::ZERO, Duration::ZERO);
    let mut last_growth = Instant::now();
    while (stored < count || indexed < count) && last_growth.elapsed() < SETTLED {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = (node.store().skill_count()?, node.memory().len());
        if now.0 > stored {
            (stored, stored_at) = (now.0, started.elapsed());
            last_growth = Instant::now();
        }
        if now.1 > indexed {
            (indexed, indexed_at) = (now.1, started.elapsed());
            last_growth = Instant::now();
        }
    }
    let queue_full = sender.await??;
    let dropped = node.metric("druse_net_events_dropped_total", &[]);
    drop(flooder);
    node.stop().await;
    ensure!(stored > 0 && indexed > 0, "the flooded node stored {stored} and indexed {indexed} listings");
    Ok(Flood {
        stored,
        stored_rate: stored as f64 / stored_at.as_secs_f64(),
        indexed_rate: indexed as f64 / indexed_at.as_secs_f64(),
        dropped,
        queue_full,
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
