//! `swarm-bench`: the swarm figures of DESIGN §12 and issue 43, measured in one run on a
//! loopback swarm of in-process nodes with fixed keys and a fixed seed:
//!
//! - publish → stored on every honest node, p50 and p99 (target: p99 ≤ `--target`);
//! - weather broadcast → every honest node halted, p50 and p99 (the same target); both timed by
//!   the stamp each node puts on what it applied (`received_at`), in this process's one clock;
//!   the weather rounds start once every honest node has indexed every listing in its memory
//!   (how long after the last listing that took is printed);
//! - what each published message costs: per node and message, the copies gossipsub received,
//!   the duplicates among them, and the bytes sent and received (with `--idontwant false`, the
//!   same without gossipsub 1.2's IDONTWANT);
//! - with `--silent 0.2`, a fifth of the members take every message and forward none: the
//!   figures above are then the honest nodes', and the scores the honest nodes give silent
//!   peers are printed beside those they give each other;
//! - signed listings ingested per second by one node (decode, verify, validate, gate, store,
//!   then index in memory), against the raw single-core `verify_strict` rate of the same run,
//!   measured first while nothing else runs (targets: stored ≥ 70%, stored and indexed ≥ 40%);
//! - the same listings flooded at one fresh node by a peer over gossipsub, as fast as its
//!   queues take them: stored and indexed per second through the whole network path
//!   (transport, gossipsub, message ids, the event channel), beside the injected figures, and
//!   how many the node shed when it could not keep up (`--listings 0` skips both);
//! - the swarm's process: resident memory per node, threads, connected peers per node and the
//!   CPU the swarm uses while nothing is published.
//!
//! The bench raises its own open-file limit: every member holds sockets and store files.
//!
//! Run it with `cargo run --release -p druse-tests --bin swarm-bench -- --nodes 10`.

mod ingest;
mod members;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use clap::Parser;
use druse_node::Config;
use druse_tests::procfs::{self, mb};
use rand::SeedableRng;
use rand::rngs::StdRng;

use members::{Scores, Traffic, spread};

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

#[derive(Debug, Parser)]
#[command(about = "Propagation, weather lockdown, message cost and ingest figures of a loopback druse swarm")]
pub(crate) struct Args {
    /// Members of the swarm: one management node, the rest edges (and silent peers).
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Peers each member dials (a ring plus random chords, so the swarm is connected).
    #[arg(long, default_value_t = 3)]
    dials: usize,
    /// Listings published from random edges, each timed until every honest node stores it.
    #[arg(long, default_value_t = 50)]
    publishes: usize,
    /// Bytes of text in each published listing (1 KiB: above IDONTWANT's 1000-byte threshold).
    #[arg(long, default_value_t = 1024)]
    listing_bytes: usize,
    /// Weather broadcasts, each timed until every honest node is halted (then lifted).
    #[arg(long, default_value_t = 20)]
    weather_rounds: usize,
    /// The p99 target of publish and weather.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    target: Duration,
    /// The share of members that take every message and forward none (0 to 0.5).
    #[arg(long, default_value_t = 0.0)]
    silent: f64,
    /// Whether nodes send gossipsub 1.2's IDONTWANT (`[p2p] idontwant`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    idontwant: bool,
    /// Gossipsub's mesh degree D on every node (`[p2p] mesh_degree`, 2 to 16).
    #[arg(long, default_value_t = 6)]
    mesh_degree: usize,
    /// Whether nodes hold listing-mesh peers to a delivery quota (`[p2p] delivery_quota`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    delivery_quota: bool,
    /// Signed 1 KiB listings ingested by one node (0 skips the ingest and flood figures).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) listings: usize,
    /// Distinct authors of those listings.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) authors: usize,
    /// The gossipsub heartbeat of every node (the tests' 100 ms; a node's default is 1 s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    heartbeat: Duration,
    /// Connections each node keeps at most (`[p2p] max_connections`; the default if unset).
    #[arg(long)]
    max_connections: Option<u32>,
    /// Peers each node keeps connections to (`[p2p] target_peers`; the default if unset).
    #[arg(long)]
    target_peers: Option<u32>,
    /// Each node's store block cache in MiB (`[store] cache_bytes`; the default if unset).
    #[arg(long)]
    cache_mib: Option<u64>,
    /// Threads in each compute pool of each swarm node (0: one per core, a node's default; 1:
    /// no pools, so threads grow by a handful a node, not eighteen). The ingest figures always
    /// run with the node's default.
    #[arg(long, default_value_t = 1)]
    pool_threads: usize,
    /// How long the bench waits for every node to trim back within its ceiling before it
    /// measures anyway.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "180s")]
    settle: Duration,
    /// How long the idle swarm's CPU use is measured, once it is up.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    idle: Duration,
    /// Seed of every random choice (keys are fixed seeds too).
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

impl Args {
    /// How many members are silent.
    fn silent_count(&self) -> usize {
        ((self.nodes as f64 * self.silent).round() as usize).min(self.nodes.saturating_sub(2))
    }
}

/// No per-peer rate limit gets in the way of what is measured.
pub(crate) fn unlimited(config: &mut Config) {
    config.trust.listings_per_window = 1_000_000;
    config.trust.reports_per_window = 1_000_000;
}

/// A swarm node's config: unlimited, with the run's heartbeat, connection limits and IDONTWANT.
fn swarm_node(args: &Args) -> impl Fn(&mut Config) + use<> {
    let (heartbeat, max_connections, target_peers) = (args.heartbeat, args.max_connections, args.target_peers);
    let (idontwant, quota, cache) = (args.idontwant, args.delivery_quota, args.cache_mib);
    let mesh_degree = args.mesh_degree;
    move |config| {
        unlimited(config);
        config.p2p.heartbeat = heartbeat;
        config.p2p.idontwant = idontwant;
        config.p2p.mesh_degree = mesh_degree;
        config.p2p.delivery_quota = quota;
        if let Some(max) = max_connections {
            config.p2p.max_connections = max;
        }
        if target_peers.is_some() {
            config.p2p.target_peers = target_peers;
        }
        if let Some(mib) = cache {
            config.store.cache_bytes = mib << 20;
        }
    }
}

/// Raises the soft open-file limit as far as the process may: to what the run needs if it can
/// raise the hard limit too (a privileged process), else to the hard limit. Says what it got.
fn raise_open_files(members: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // Sockets of each connection's two ends, listeners, store files: a few hundred a member
    // at the most, with room to spare.
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let Some(current) = current else {
        println!("open files: no limit");
        return;
    };
    let wanted = (members as u64 * 256).max(4096).max(current);
    let raised =
        setrlimit(Resource::Nofile, Rlimit { current: Some(wanted), maximum: maximum.map(|hard| hard.max(wanted)) })
            .or_else(|_| setrlimit(Resource::Nofile, Rlimit { current: maximum, maximum }));
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    match raised {
        Ok(()) if now >= wanted => println!("open files: soft limit {current} raised to {now}"),
        Ok(()) => println!(
            "open files: soft limit {current} raised to the hard limit, {now}, not to the {wanted} wanted \
             (raising the hard limit needs CAP_SYS_RESOURCE); a large swarm may need a lower --target-peers"
        ),
        Err(error) => {
            println!("open files: cannot raise the soft limit {current} ({error}); large swarms may fail to dial")
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.nodes >= 2, "--nodes must be at least 2");
    ensure!(args.authors >= 1, "--authors must be at least 1");
    ensure!((0.0..=0.5).contains(&args.silent), "--silent must be between 0 and 0.5");
    let mut rng = StdRng::seed_from_u64(args.seed);
    raise_open_files(args.nodes);

    let silent = args.silent_count();
    println!(
        "druse swarm-bench: {} members ({} edges + 1 management, {} of them silent) on loopback, each dialling {}, \
         heartbeat {:?}, IDONTWANT {}, mesh degree {}, listings of {} bytes, seed {}",
        args.nodes,
        args.nodes - 1,
        silent,
        args.dials.min(args.nodes - 1),
        args.heartbeat,
        if args.idontwant { "on" } else { "off" },
        args.mesh_degree,
        args.listing_bytes,
        args.seed
    );
    let pid = std::process::id();
    let before = procfs::status(pid)?;
    druse_memory::background::set_pool_threads(args.pool_threads);
    let members = members::start_swarm(&args, &mut rng).await?;
    let settled = members::settle(&members, args.settle).await?;
    let idle = members::measure_idle(pid, before, &members, args.idle).await?;
    let mgmt = &members.nodes[0];
    let management =
        druse_management::Management::new(mgmt.node.clone(), Default::default()).context("management role")?;

    let scores_before = Scores::read(&members).await?;
    let traffic_before = Traffic::of(&members.nodes);
    let publish_started = std::time::Instant::now();
    let (publish, published) = members::measure_publish(&members, args.publishes, args.listing_bytes, &mut rng).await?;
    let publish_elapsed = publish_started.elapsed();
    let traffic = Traffic::of(&members.nodes).since(&traffic_before);
    let indexed = members::wait_indexed(&members, &published).await?;
    println!(
        "memory: every listing indexed on every honest node {:.1} s after the last was stored",
        indexed.as_secs_f64()
    );
    let scores_published = Scores::read(&members).await?;
    let (lockdown, lift) = members::measure_weather(&members, &management, args.weather_rounds).await?;
    let scores = Scores::read(&members).await?;
    let taken: usize = members.silent.iter().map(|s| s.taken()).sum();
    drop(management);
    let honest = members.nodes.len();
    let refused = members.refused;
    members.stop().await;
    druse_memory::background::set_pool_threads(0);
    let ingest = if args.listings > 0 { Some(ingest::measure_ingest(&args, &mut rng).await?) } else { None };

    println!();
    println!("| measure                           |   n   |    p50    |    p99    |    max    | target         |");
    println!("|-----------------------------------|-------|-----------|-----------|-----------|----------------|");
    row("publish -> stored on every node", &publish, Some(args.target));
    row("weather -> every node halted", &lockdown, Some(args.target));
    row("weather lifted -> every node free", &lift, None);
    println!();
    // What one published listing costs each honest node, over the publish phase; the idle
    // traffic of the same length (heartbeats, gossip about nothing, pings) is shown apart.
    let per = |v: f64| v / (honest as f64 * args.publishes.max(1) as f64);
    let background = idle.traffic_over(publish_elapsed);
    println!("| per honest node and published listing      | value            |");
    println!("|--------------------------------------------|------------------|");
    println!("| {:<42} | {:>16.2} |", "copies received", per(traffic.copies));
    println!("| {:<42} | {:>16.2} |", "  of which duplicates", per(traffic.copies - traffic.unique));
    println!(
        "| {:<42} | {:>14.1} % |",
        "  duplicates / copies",
        if traffic.copies > 0.0 { (traffic.copies - traffic.unique) / traffic.copies * 100.0 } else { 0.0 }
    );
    println!("| {:<42} | {:>16.2} |", "IDONTWANT received", per(traffic.idontwant));
    println!("| {:<42} | {:>10.0} bytes |", "bytes sent", per(traffic.sent));
    println!("| {:<42} | {:>10.0} bytes |", "bytes received", per(traffic.received));
    println!("| {:<42} | {:>10.0} bytes |", "  background in the same time, sent", per(background.sent));
    println!("| {:<42} | {:>10.0} bytes |", "  background in the same time, received", per(background.received));
    if silent > 0 {
        println!();
        println!(
            "| silent peers ({silent} of {}): scores honest nodes give, low / median / high | value |",
            args.nodes
        );
        println!("|--------------------------------------------|--------------------------------------|");
        println!("| {:<42} | {:>36} |", "messages they took and dropped", taken);
        for (when, s) in [
            ("settled, before any publish", &scores_before),
            ("after the publishes", &scores_published),
            ("after the weather rounds", &scores),
        ] {
            println!("| {:<42} | {:>36} |", format!("{when}: honest peers"), spread(&s.honest).to_string());
            println!("| {:<42} | {:>36} |", "  silent peers", spread(&s.silent).to_string());
            println!(
                "| {:<42} | {:>36} |",
                "  connections scored (silent / honest)",
                format!("{} / {}", s.silent.len(), s.honest.len())
            );
        }
        // `measure_publish` and `measure_weather` fail the run when any honest node misses one.
        println!("| {:<42} | {:>36} |", "honest nodes that store every listing", format!("{honest} of {honest}"));
        println!("| {:<42} | {:>24} |", "honest nodes that obeyed every weather", format!("{honest} of {honest}"));
    }
    println!();
    println!("| the swarm's process                        | value            |");
    println!("|--------------------------------------------|------------------|");
    println!("| {:<42} | {:>13.1} MB |", "resident memory before any node", mb(before.rss));
    println!("| {:<42} | {:>13.1} MB |", format!("resident memory with {} members up", args.nodes), mb(idle.up.rss));
    println!(
        "| {:<42} | {:>13.1} MB |",
        "  per member",
        mb(idle.up.rss.saturating_sub(before.rss)) / args.nodes as f64
    );
    println!("| {:<42} | {:>16} |", "threads", idle.up.threads);
    println!(
        "| {:<42} | {:>16.1} |",
        "  per member",
        idle.up.threads.saturating_sub(before.threads) as f64 / args.nodes as f64
    );
    println!("| {:<42} | {:>16.1} |", "connected peers per honest node", idle.peers);
    println!("| {:<42} | {:>16} |", "dials refused at a full peer (start)", refused);
    println!("| {:<42} | {:>14.1} s |", "swarm up -> every node within its ceiling", settled.as_secs_f64());
    println!("| {:<42} | {:>10.2} cores |", format!("CPU while idle, over {:?}", args.idle), idle.cores);
    if let Some(ingest) = ingest {
        ingest.print(&args);
    }
    Ok(())
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
    let target = p99_target.map_or(String::new(), |t| verdict(p99 <= t, &format!("p99<={t:?}")));
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
