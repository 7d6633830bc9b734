//! The swarm under measure: honest nodes (the management node first) and silent peers, how
//! they are linked, and what is timed and counted on them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use druse_node::Role;
use druse_protocol::body::{Body, CrystalListing};
use druse_protocol::net::{self, PeerId};
use druse_protocol::{ContentId, now_ms};
use druse_tests::procfs::{self, mb};
use druse_tests::swarm::{MGMT_SEED, Silent, TestNode, connect, mesh_ready_reprobing, mgmt_key, numbered_key};
use futures::StreamExt;
use rand::Rng;
use rand::rngs::StdRng;

use crate::{Args, swarm_node};

/// Dials between members in flight at once while the swarm starts.
const DIALS_AT_ONCE: usize = 64;

/// Each latency sample must complete within this, or the run fails.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many of the counters that grew most in the idle time are printed.
const IDLE_COUNTERS: usize = 15;

/// How long every node may take to put the published listings into its memory.
const INDEX_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the nodes are read while a message spreads; their own stamps time it.
const STAMP_POLL: Duration = Duration::from_millis(100);

/// The swarm: every honest node (index 0 the management node), then the silent peers.
pub(crate) struct Members {
    pub(crate) nodes: Vec<TestNode>,
    pub(crate) silent: Vec<Silent>,
    /// Dials between members that a full peer refused (its ceiling, see `net::gate`).
    pub(crate) refused: usize,
}

impl Members {
    /// The swarm handle of member `i`, honest or silent.
    fn net(&self, i: usize) -> &net::Handle {
        match self.nodes.get(i) {
            Some(node) => node.net(),
            None => &self.silent[i - self.nodes.len()].net,
        }
    }

    fn len(&self) -> usize {
        self.nodes.len() + self.silent.len()
    }

    pub(crate) async fn stop(self) {
        drop(self.silent);
        for node in self.nodes {
            node.stop().await;
        }
    }
}

/// Starts the management node, the honest edges and the silent peers; member `i` dials `i + 1`
/// (a ring, so the swarm is connected) and random others; waits until gossip flows between
/// every honest node.
pub(crate) async fn start_swarm(args: &Args, rng: &mut StdRng) -> Result<Members> {
    let started = Instant::now();
    let trusted = [mgmt_key().public()];
    let silent_count = args.silent_count();
    let honest = args.nodes - silent_count;
    let mut nodes = vec![
        TestNode::start_keyed(
            "mgmt",
            &druse_tests::swarm::key(MGMT_SEED),
            Role::Management,
            &trusted,
            swarm_node(args),
        )
        .await?,
    ];
    for i in 1..honest {
        let key = numbered_key(u32::try_from(i)?);
        nodes.push(TestNode::start_keyed(&format!("edge-{i}"), &key, Role::Edge, &trusted, swarm_node(args)).await?);
    }
    let mut silent = Vec::with_capacity(silent_count);
    for i in honest..args.nodes {
        silent.push(Silent::start(&numbered_key(u32::try_from(i)?), args.heartbeat)?);
    }
    phase("members started", started, args.nodes);
    let mut members = Members { nodes, silent, refused: 0 };
    let n = members.len();
    let dials = args.dials.clamp(1, n - 1);
    // Silent peers are spread over the ring, not bunched at its end, so no stretch of it is
    // silent: member `i` of the ring is `order[i]`.
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(1..=i));
    }
    // Every dial is planned first, then made a few at a time: one handshake after another
    // would leave the start waiting on loopback round trips, not on the cores.
    let mut planned = BTreeSet::new();
    for i in 0..n {
        let mut targets = vec![order[(i + 1) % n]];
        while targets.len() < dials {
            let j = rng.random_range(0..n);
            if j != order[i] && !targets.contains(&j) {
                targets.push(j);
            }
        }
        for j in targets {
            let (a, b) = (order[i], j);
            planned.insert((a.min(b), a.max(b)));
        }
    }
    let dialled = Instant::now();
    let outcomes: Vec<bool> = futures::stream::iter(planned.iter().map(|&(a, b)| {
        let (from, to) = (members.net(a), members.net(b));
        async move { connect(from, to).await.is_ok() }
    }))
    .buffer_unordered(DIALS_AT_ONCE)
    .collect()
    .await;
    // A member at its ceiling refuses; Kademlia and the others' dials connect the swarm. A
    // link the peer manager trims later is not waited for: `mesh_ready` proves delivery.
    let links = outcomes.iter().filter(|ok| **ok).count();
    members.refused = outcomes.len() - links;
    phase("links dialled", dialled, n);
    let meshing = Instant::now();
    // Half a second a member for the meshes to form and the probes to arrive, at least the
    // tests' wait: a 500-node swarm on two cores takes minutes.
    let wait = Duration::from_millis(500 * n as u64).max(druse_tests::WAIT);
    // A node short of a probe gets a second round rather than ending the run; the run says so.
    let short = mesh_ready_reprobing(&members.nodes.iter().collect::<Vec<_>>(), wait).await?;
    for node in &short {
        println!("start probes: {node}; it received every probe of a second round");
    }
    phase("gossip proven between every honest node", meshing, n);
    println!(
        "swarm up: {} members ({} honest, {} silent), {} links dialled, {} dials refused at a full peer",
        n,
        members.nodes.len(),
        members.silent.len(),
        links,
        members.refused
    );
    Ok(members)
}

/// Prints how long a phase of the start took, and per member.
fn phase(what: &str, since: Instant, members: usize) {
    let elapsed = since.elapsed();
    println!(
        "start: {what} in {:.1} s ({:.1} ms a member)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / members.max(1) as f64
    );
}

/// Waits until every node is back within its connection ceiling (`net::peer_high_water`):
/// what is measured afterwards is the swarm as it runs, not its first minute.
pub(crate) async fn settle(members: &Members, timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    loop {
        let mut over = 0;
        for node in &members.nodes {
            let high = net::peer_high_water(node.config.net().target_peers as usize);
            if node.net().peers().await?.len() > high {
                over += 1;
            }
        }
        if over == 0 {
            println!("settled in {:.1} s: every node within its ceiling", started.elapsed().as_secs_f64());
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            println!("not settled after {timeout:?}: {over} nodes above their ceiling; measuring anyway");
            return Ok(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The swarm's process once every node is up.
pub(crate) struct Idle {
    pub(crate) up: procfs::Status,
    /// CPU used per second of wall time while nothing is published: heartbeats, timers.
    pub(crate) cores: f64,
    /// Connected peers per node, on average, after the idle time.
    pub(crate) peers: f64,
    /// What the honest nodes sent and received in the idle time.
    pub(crate) traffic: Traffic,
    pub(crate) elapsed: Duration,
}

impl Idle {
    /// What the idle swarm sent and received in `elapsed`, at its idle rate.
    pub(crate) fn traffic_over(&self, elapsed: Duration) -> Traffic {
        let scale = elapsed.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9);
        let t = &self.traffic;
        Traffic {
            copies: t.copies * scale,
            unique: t.unique * scale,
            sent: t.sent * scale,
            received: t.received * scale,
            idontwant: t.idontwant * scale,
        }
    }
}

/// The process's resident memory with the swarm up, and its CPU use and traffic while the
/// swarm idles.
pub(crate) async fn measure_idle(pid: u32, before: procfs::Status, members: &Members, idle: Duration) -> Result<Idle> {
    let up = procfs::status(pid)?;
    // How many nodes hold each number of peers: a node short of its target keeps looking
    // for more (Kademlia lookups, dials), the rest are quiet.
    let connected = async || -> Result<BTreeMap<usize, usize>> {
        let mut nodes = BTreeMap::new();
        for node in &members.nodes {
            *nodes.entry(node.net().peers().await?.len()).or_insert(0) += 1;
        }
        Ok(nodes)
    };
    let mean = |nodes: &BTreeMap<usize, usize>| {
        nodes.iter().map(|(peers, n)| peers * n).sum::<usize>() as f64 / members.nodes.len() as f64
    };
    let peers_before = connected().await?;
    let counters = Counters::of(&members.nodes);
    let (cpu, started) = (procfs::cpu_seconds(pid)?, Instant::now());
    tokio::time::sleep(idle).await;
    let elapsed = started.elapsed();
    let cores = (procfs::cpu_seconds(pid)? - cpu) / elapsed.as_secs_f64();
    let counters = Counters::of(&members.nodes).since(&counters);
    let traffic = Traffic::from(&counters);
    let peers_after = connected().await?;
    println!(
        "{} members: {:.1} MB resident ({:.1} MB before), {} threads, idle CPU {cores:.2} cores, \
         peers per node {:.1} then {:.1} (nodes by peers: {peers_after:?})",
        members.len(),
        mb(up.rss),
        mb(before.rss),
        up.threads,
        mean(&peers_before),
        mean(&peers_after),
    );
    // What an idle swarm spends its CPU on varies from run to run (0.3 to 1 core at 300 and 500
    // nodes): the counters that grew most say which protocol was busy.
    let per = members.nodes.len() as f64 * elapsed.as_secs_f64();
    println!("idle: the counters that grew most, per node and second");
    for (series, grew) in counters.largest(IDLE_COUNTERS) {
        println!("  {:>12.3}  {series}", grew / per);
    }
    Ok(Idle { up, cores, peers: mean(&peers_after), traffic, elapsed })
}

/// Every counter of the honest nodes (the series named `…_total`), summed over the nodes, by
/// name and labels: one reading of each node's `/metrics`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters(BTreeMap<(String, BTreeMap<String, String>), f64>);

impl Counters {
    pub(crate) fn of(nodes: &[TestNode]) -> Self {
        let mut sum = BTreeMap::new();
        for node in nodes {
            for sample in druse_tests::metrics::parse(&node.metrics_text()) {
                if sample.name.ends_with("_total") {
                    *sum.entry((sample.name, sample.labels)).or_insert(0.0) += sample.value;
                }
            }
        }
        Self(sum)
    }

    /// How much each series grew since `earlier`.
    pub(crate) fn since(&self, earlier: &Self) -> Self {
        Self(self.0.iter().map(|(k, v)| (k.clone(), v - earlier.0.get(k).copied().unwrap_or(0.0))).collect())
    }

    /// The sum of the series named `name` whose labels include every pair of `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|((n, l), _)| n == name && druse_tests::metrics::has_labels(l, labels))
            .map(|(_, v)| v)
            .sum()
    }

    /// The `n` largest series, largest first, each written as the exposition format names it.
    pub(crate) fn largest(&self, n: usize) -> Vec<(String, f64)> {
        let mut all: Vec<(String, f64)> = self
            .0
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|((name, labels), v)| {
                let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
                (format!("{name}{{{}}}", labels.join(",")), *v)
            })
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        all.truncate(n);
        all
    }
}

/// What gossipsub and the transport counted on the honest nodes, summed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Traffic {
    /// Gossip messages received, every copy (before gossipsub drops duplicates).
    pub(crate) copies: f64,
    /// Gossip messages received once each (after it drops them).
    pub(crate) unique: f64,
    /// Bytes on the nodes' connections, every protocol, each way (libp2p's bandwidth metrics:
    /// stream bytes above noise and yamux framing).
    pub(crate) sent: f64,
    pub(crate) received: f64,
    /// IDONTWANT messages received.
    pub(crate) idontwant: f64,
}

impl Traffic {
    pub(crate) fn of(nodes: &[TestNode]) -> Self {
        Self::from(&Counters::of(nodes))
    }

    pub(crate) fn since(&self, earlier: &Self) -> Self {
        Self {
            copies: self.copies - earlier.copies,
            unique: self.unique - earlier.unique,
            sent: self.sent - earlier.sent,
            received: self.received - earlier.received,
            idontwant: self.idontwant - earlier.idontwant,
        }
    }
}

impl From<&Counters> for Traffic {
    fn from(counters: &Counters) -> Self {
        let value = |name: &str, labels: &[(&str, &str)]| counters.sum(name, labels);
        Self {
            copies: value("libp2p_gossipsub_topic_msg_recv_counts_unfiltered_total", &[]),
            unique: value("libp2p_gossipsub_topic_msg_recv_counts_total", &[]),
            // libp2p-metrics spells the direction as its enum variant: `Outbound`, `Inbound`.
            sent: value("libp2p_bandwidth_bytes_total", &[("direction", "Outbound")]),
            received: value("libp2p_bandwidth_bytes_total", &[("direction", "Inbound")]),
            idontwant: value("libp2p_gossipsub_idontwant_msgs_total", &[]),
        }
    }
}

/// A skill listing named `name` whose text is `bytes` long (at least the short text of a test
/// listing).
fn sized_listing(name: &str, bytes: usize) -> CrystalListing {
    const WORDS: [&str; 8] = ["parse", "validate", "retry", "stream", "buffer", "decode", "schema", "index"];
    let mut text = format!("How to {name}: ");
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(WORDS[i % WORDS.len()]);
        text.push(' ');
        i += 1;
    }
    text.truncate(bytes.max(text.find(':').map_or(0, |c| c + 1)));
    CrystalListing { text, ..druse_tests::swarm::listing(name) }
}

/// Publishes listings from random honest edges, each timed until every honest node stores it.
pub(crate) async fn measure_publish(
    members: &Members,
    publishes: usize,
    bytes: usize,
    rng: &mut StdRng,
) -> Result<(Vec<Duration>, Vec<ContentId>)> {
    let nodes = &members.nodes;
    let mut samples = Vec::with_capacity(publishes);
    let mut ids = Vec::with_capacity(publishes);
    for k in 0..publishes {
        let edge = &nodes[rng.random_range(1..nodes.len())];
        let body = Body::Crystal(sized_listing(&format!("bench-skill-{k}"), bytes));
        let started = now_ms();
        let id = edge.publish(&body).await.with_context(|| format!("publishing from {}", edge.name))?;
        let arrivals = wait_stamped(members, started, |node| node.stored(&id).ok().flatten().map(|s| s.received_at))
            .await
            .with_context(|| format!("listing {k} from {}", edge.name))?;
        // One line a trial: how the slowest trials differ from the rest (a few late nodes, or
        // the whole swarm late) is what the percentiles cannot say.
        let last: Vec<String> =
            arrivals.last.iter().map(|(name, at)| format!("{name} {:.0} ms", at.as_secs_f64() * 1e3)).collect();
        println!(
            "publish {k} from {}: on half the nodes after {:.0} ms, 90% after {:.0} ms, every node after {:.0} ms \
             (last: {})",
            edge.name,
            arrivals.half.as_secs_f64() * 1e3,
            arrivals.p90.as_secs_f64() * 1e3,
            arrivals.all.as_secs_f64() * 1e3,
            last.join(", ")
        );
        samples.push(arrivals.all);
        ids.push(id);
    }
    Ok((samples, ids))
}

/// Waits until every honest node has put every listing in `ids` into its memory (a node
/// indexes a peer's skill after it has stored it, at background priority), and says how long
/// that took after the last listing reached every node: the weather rounds then start on a
/// quiet swarm, as the publishes do after the idle time.
pub(crate) async fn wait_indexed(members: &Members, ids: &[ContentId]) -> Result<Duration> {
    let started = Instant::now();
    let indexed =
        |node: &TestNode| ids.iter().all(|id| node.stored(id).ok().flatten().is_some_and(|s| s.crystal.is_some()));
    wait_each(members, INDEX_TIMEOUT, "index every listing", |node| indexed(node).then_some(())).await?;
    Ok(started.elapsed())
}

/// Weather rounds from the management node: each timed until every honest node is halted,
/// then until every one is free again.
pub(crate) async fn measure_weather(
    members: &Members,
    management: &druse_management::Management,
    rounds: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let mut lockdown = Vec::with_capacity(rounds);
    let mut lift = Vec::with_capacity(rounds);
    for round in 0..rounds {
        for (level, lasting, reason) in [
            (0.9, Duration::from_secs(60), format!("bench round {round}")),
            (0.0, Duration::from_secs(1), format!("bench round {round} lifted")),
        ] {
            let started = now_ms();
            management.weather(level, lasting, reason.clone()).await?;
            let halted = level > 0.0;
            let applied = wait_stamped(members, started, |node| {
                let view = node.weather();
                let last = view.last.filter(|w| w.reason == reason && view.halted == halted)?;
                Some(last.received_at)
            })
            .await
            .with_context(|| format!("weather \"{reason}\""))?;
            if halted { &mut lockdown } else { &mut lift }.push(applied.all);
        }
    }
    Ok((lockdown, lift))
}

/// When a message reached half the honest nodes and when it reached all of them, by the
/// stamps the nodes put on it.
struct Arrivals {
    half: Duration,
    p90: Duration,
    all: Duration,
    /// The nodes it reached last, the last one first, with when: a few late nodes and a whole
    /// swarm late are different faults.
    last: Vec<(String, Duration)>,
}

/// The late nodes [`Arrivals`] names.
const LAST_NAMED: usize = 3;

/// Waits until `stamp` gives every honest node's time of applying a message (Unix ms, the one
/// clock of this process), and returns the arrivals after `started`. The nodes' own stamps
/// time it, so the stores are polled only every `STAMP_POLL`: polling them every few
/// milliseconds took a share of the cores the swarm runs on.
async fn wait_stamped(members: &Members, started: u64, stamp: impl Fn(&TestNode) -> Option<u64>) -> Result<Arrivals> {
    let stamped = wait_each(members, SAMPLE_TIMEOUT, "apply it", stamp).await?;
    let mut stamps: Vec<(u64, &str)> =
        stamped.into_iter().map(|(at, name)| (at.saturating_sub(started), name)).collect();
    stamps.sort_unstable();
    let at = |i: usize| Duration::from_millis(stamps[i].0);
    let n = stamps.len();
    let last = stamps.iter().rev().take(LAST_NAMED).map(|(ms, name)| ((*name).to_owned(), Duration::from_millis(*ms)));
    Ok(Arrivals { half: at((n - 1) / 2), p90: at((n - 1) * 9 / 10), all: at(n - 1), last: last.collect() })
}

/// Polls every honest node every `STAMP_POLL` until `probe` gives something for each (a node
/// that has given it is not read again), within `timeout`; each node's answer with its name.
async fn wait_each<'a, T>(
    members: &'a Members,
    timeout: Duration,
    what: &str,
    probe: impl Fn(&TestNode) -> Option<T>,
) -> Result<Vec<(T, &'a str)>> {
    let deadline = Instant::now() + timeout;
    let mut waiting: Vec<&TestNode> = members.nodes.iter().collect();
    let mut answers = Vec::with_capacity(waiting.len());
    loop {
        waiting.retain(|node| match probe(node) {
            Some(answer) => {
                answers.push((answer, node.name.as_str()));
                false
            }
            None => true,
        });
        if waiting.is_empty() {
            return Ok(answers);
        }
        if Instant::now() > deadline {
            let names: Vec<&str> = waiting.iter().take(10).map(|n| n.name.as_str()).collect();
            bail!("{} nodes ({names:?}...) did not {what} within {timeout:?}", waiting.len());
        }
        tokio::time::sleep(STAMP_POLL).await;
    }
}

/// The gossipsub scores honest nodes give their connected peers, split by whether the peer is
/// silent.
#[derive(Debug, Default)]
pub(crate) struct Scores {
    pub(crate) honest: Vec<f64>,
    pub(crate) silent: Vec<f64>,
}

impl Scores {
    pub(crate) async fn read(members: &Members) -> Result<Self> {
        let silent: BTreeSet<PeerId> = members.silent.iter().map(|s| s.net.local_peer_id()).collect();
        let mut scores = Self::default();
        for node in &members.nodes {
            for peer in node.net().peers().await? {
                let score = peer.score.unwrap_or(0.0);
                if silent.contains(&peer.peer_id) {
                    scores.silent.push(score);
                } else {
                    scores.honest.push(score);
                }
            }
        }
        Ok(scores)
    }
}

/// The lowest, median and highest of some scores, and the share of them below zero.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spread {
    pub(crate) low: f64,
    pub(crate) median: f64,
    pub(crate) high: f64,
    pub(crate) below_zero: f64,
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} / {:.2} / {:.2}, {:.1}% < 0", self.low, self.median, self.high, self.below_zero * 100.0)
    }
}

/// Lowest, median and highest of `values` (zeros when empty).
pub(crate) fn spread(values: &[f64]) -> Spread {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match (sorted.first(), sorted.last()) {
        (Some(&low), Some(&high)) => {
            let below = sorted.iter().filter(|s| **s < 0.0).count() as f64 / sorted.len() as f64;
            Spread { low, median: sorted[sorted.len() / 2], high, below_zero: below }
        }
        _ => Spread::default(),
    }
}
