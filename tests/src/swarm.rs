//! Swarms in one process: real [`Node`]s on loopback TCP with 100 ms heartbeats, fixed keys,
//! and a management node whose key every edge trusts.

use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use druse_management::Management;
use druse_management::config::Config as ManagementConfig;
use druse_node::skill::Skill;
use druse_node::{Config, Node, Role};
use druse_protocol::body::{Body, CrystalListing, ExecutionStats, Report, ReportEvent, SemanticType};
use druse_protocol::net::{self, Acceptance, Event, Multiaddr, PeerId};
use druse_protocol::now_ms;
use druse_protocol::{ContentId, Envelope, Keypair, PublicKey, topic};
use tempfile::TempDir;
use tokio::task::JoinHandle;

use crate::{WAIT, eventually, metrics, wait_for};

/// The management node's seed in every scenario.
pub const MGMT_SEED: u8 = 200;

/// Gossipsub heartbeat of every test node.
pub const HEARTBEAT: Duration = Duration::from_millis(100);

/// The key a seed names: `[seed; 32]`.
pub fn key(seed: u8) -> Keypair {
    Keypair::from_seed([seed; 32])
}

/// The key of the `n`th member of a large swarm, for more members than `u8` seeds name: four
/// bytes of `n`, then a filler no `[seed; 32]` key has.
pub fn numbered_key(n: u32) -> Keypair {
    let mut seed = [0xa5; 32];
    seed[..4].copy_from_slice(&n.to_le_bytes());
    seed[4] = 0x5a;
    Keypair::from_seed(seed)
}

/// The management key every test node trusts.
pub fn mgmt_key() -> Keypair {
    key(MGMT_SEED)
}

/// A config for a loopback test node in `data_dir` that trusts `management` keys: no mDNS,
/// 100 ms heartbeats, ports chosen by the OS.
pub fn config(data_dir: &Path, management: &[PublicKey]) -> Result<Config> {
    let mut config = Config::default();
    config.store.data_dir = data_dir.to_owned();
    config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().context("listen address")?];
    config.p2p.mdns = false;
    config.p2p.heartbeat = HEARTBEAT;
    config.api.listen = ([127, 0, 0, 1], 0).into();
    config.metrics.listen = ([127, 0, 0, 1], 0).into();
    config.trust.management_keys = management.iter().map(ToString::to_string).collect();
    Ok(config)
}

/// A skill listing named `name`, issued now.
pub fn listing(name: &str) -> CrystalListing {
    CrystalListing {
        issued_at: now_ms(),
        name: name.to_owned(),
        text: format!("How to {name}: read the input, validate it, and return a typed result."),
        semantic_type: SemanticType::Skill,
        tags: vec!["test".to_owned()],
        category: Some("testing".to_owned()),
        skill_id: format!("{name}-id"),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 5, successes: 4, avg_reward: 0.6 },
        asking_price: 10_000,
    }
}

/// The wire bytes of `body` signed by `key`, whoever sends them.
pub fn seal(key: &Keypair, body: &Body) -> Result<Vec<u8>> {
    Ok(Envelope::seal(key, body.kind(), &body.encode().context("encoding a test body")?))
}

/// The content id of `body`, as every node computes it.
pub fn content_id(body: &Body) -> Result<ContentId> {
    Ok(ContentId::of(&body.encode().context("encoding a test body")?))
}

/// A node started in a temporary data directory with a fixed key.
#[derive(Debug)]
pub struct TestNode {
    pub name: String,
    pub node: Node,
    pub config: Config,
    role: Role,
    dir: TempDir,
}

impl Deref for TestNode {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl TestNode {
    /// Starts a node whose key is `key(seed)`, trusting `management`; `tweak` edits its config.
    pub async fn start(
        name: &str,
        seed: u8,
        role: Role,
        management: &[PublicKey],
        tweak: impl FnOnce(&mut Config),
    ) -> Result<Self> {
        Self::start_keyed(name, &key(seed), role, management, tweak).await
    }

    /// [`TestNode::start`] with any key (see [`numbered_key`]).
    pub async fn start_keyed(
        name: &str,
        key: &Keypair,
        role: Role,
        management: &[PublicKey],
        tweak: impl FnOnce(&mut Config),
    ) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix(&format!("druse-{name}-")).tempdir().context("data dir")?;
        let mut config = config(dir.path(), management)?;
        tweak(&mut config);
        key.save(&config.key_path()).with_context(|| format!("saving {name}'s key"))?;
        let node = Node::start(config.clone(), role).await.with_context(|| format!("starting node {name}"))?;
        Ok(Self { name: name.to_owned(), node, config, role, dir })
    }

    /// Stops the node and starts it again on the same data directory and key.
    pub async fn restart(self) -> Result<Self> {
        let Self { name, node, config, role, dir } = self;
        node.shutdown().await;
        drop(node);
        // `shutdown` aborts the background tasks without awaiting them, so their handles on the
        // store may outlive it by a moment; retry while the database is still locked.
        let mut last = String::new();
        let node = wait_for(WAIT, format_args!("node {name} to restart on its data directory"), async || {
            match Node::start(config.clone(), role).await {
                Ok(node) => Some(node),
                Err(error) => {
                    last = error.to_string();
                    None
                }
            }
        })
        .await
        .with_context(|| format!("last error: {last}"))?;
        Ok(Self { name, node, config, role, dir })
    }

    /// Stops the node; its data directory is removed.
    pub async fn stop(self) {
        self.node.shutdown().await;
    }

    /// The node's data directory.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The node's public key.
    pub fn public_key(&self) -> PublicKey {
        self.node.key().public()
    }

    /// A listen address ending in `/p2p/<peer id>`.
    pub async fn addr(&self) -> Result<Multiaddr> {
        listen_addr(self.node.net()).await.with_context(|| format!("node {}", self.name))
    }

    /// Whether the node stores the skill `id`.
    pub fn has_skill(&self, id: &ContentId) -> bool {
        matches!(self.node.skill(id), Ok(Some(_)))
    }

    /// The stored skill `id`.
    pub fn stored(&self, id: &ContentId) -> Result<Option<Skill>> {
        self.node.skill(id).with_context(|| format!("reading skill {id} on {}", self.name))
    }

    /// The node's metrics body, as `/metrics` serves it.
    pub fn metrics_text(&self) -> String {
        self.node.metrics().render()
    }

    /// The sum of the samples named `name` with `labels`; 0 if there are none.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metrics::value(&self.metrics_text(), name, labels).unwrap_or(0.0)
    }

    /// How many messages with this ingestion outcome the node counted, over every kind.
    pub fn outcomes(&self, outcome: &str) -> f64 {
        self.metric("druse_ingest_outcomes_total", &[("outcome", outcome)])
    }

    /// How many gossip messages arrived on `topic`, whatever their verdict: the counters that
    /// `druse_messages_total` exports, read where they are. Waits poll this on every node every
    /// few milliseconds, and rendering and parsing a node's whole exposition for it took most of
    /// a large swarm's CPU.
    pub fn messages_on(&self, topic: &str) -> f64 {
        self.node.metrics().messages_on(topic) as f64
    }
}

/// A listen address of `net`, ending in `/p2p/<peer id>`, once it listens.
pub async fn listen_addr(net: &net::Handle) -> Result<Multiaddr> {
    let peer = net.local_peer_id();
    let addr = wait_for(WAIT, format_args!("{peer} to listen"), async || {
        net.listen_addrs().await.ok().and_then(|addrs| addrs.into_iter().next())
    })
    .await?;
    format!("{addr}/p2p/{peer}").parse().with_context(|| format!("{addr}/p2p/{peer}"))
}

/// Dials `to` from `from` and returns once the connection is up.
pub async fn connect(from: &net::Handle, to: &net::Handle) -> Result<()> {
    let addr = listen_addr(to).await?;
    tokio::time::timeout(WAIT, from.dial(addr.clone()))
        .await
        .with_context(|| format!("dialling {addr} hung"))?
        .with_context(|| format!("dialling {addr}"))
}

/// Waits until `net` is connected to every peer of `expected`.
pub async fn wait_connected(net: &net::Handle, expected: &[PeerId]) -> Result<()> {
    let me = net.local_peer_id();
    eventually(WAIT, format_args!("{me} to be connected to {expected:?}"), async || {
        let connected: Vec<PeerId> = net.peers().await.unwrap_or_default().iter().map(|p| p.peer_id).collect();
        expected.iter().all(|p| connected.contains(p))
    })
    .await
}

/// Connects every pair of `nodes` and waits until each sees all the others.
pub async fn connect_all(nodes: &[&net::Handle]) -> Result<()> {
    for (i, from) in nodes.iter().enumerate() {
        for to in &nodes[i + 1..] {
            connect(from, to).await?;
        }
    }
    for net in nodes {
        let others: Vec<PeerId> =
            nodes.iter().map(|n| n.local_peer_id()).filter(|p| *p != net.local_peer_id()).collect();
        wait_connected(net, &others).await?;
    }
    Ok(())
}

/// Proves gossip flows between `nodes` (already connected): once every node has a mesh peer on
/// every topic, each node publishes one harmless execution report, and every node must receive the
/// reports of all the others. A scenario that then asserts a message did *not* arrive knows
/// the path was open.
pub async fn mesh_ready(nodes: &[&TestNode]) -> Result<()> {
    mesh_ready_within(nodes, WAIT).await
}

/// [`mesh_ready`] with each of its waits bounded by `wait` (a large swarm on few cores takes
/// longer than [`WAIT`] to form its meshes); a node still without a mesh peer is named with how
/// many peers it is connected to. A node short of a probe gets a second round
/// ([`mesh_ready_reprobing`]): a probe published while a mesh was still forming can be lost
/// for good, and a second round that arrives proves the path is open.
pub async fn mesh_ready_within(nodes: &[&TestNode], wait: Duration) -> Result<()> {
    mesh_ready_reprobing(nodes, wait).await.map(|_| ())
}

/// [`mesh_ready_within`], but nodes that miss a probe get one more round: every node
/// publishes a second probe, and each node that was short must receive all of those. A probe
/// that leaves gossipsub's message cache before it reaches a node is never repaired by gossip,
/// and a swarm that takes minutes to start on few cores can lose one that way. Returns the
/// nodes that were short in the first round, each with what it received and its counters of
/// lost messages; empty when one round did.
pub async fn mesh_ready_reprobing(nodes: &[&TestNode], wait: Duration) -> Result<Vec<String>> {
    meshed(nodes, wait).await?;
    let short = probe_round(nodes, wait).await?;
    if short.is_empty() {
        return Ok(Vec::new());
    }
    let again = probe_round(nodes, wait).await?;
    let still: Vec<&String> = again.iter().filter(|(i, _)| short.iter().any(|(j, _)| i == j)).map(|(_, w)| w).collect();
    if !still.is_empty() {
        anyhow::bail!("nodes short of probes twice: {still:?}");
    }
    Ok(short.into_iter().map(|(_, what)| what).collect())
}

/// Waits until every node has a mesh peer on every topic, naming the first that does not.
async fn meshed(nodes: &[&TestNode], wait: Duration) -> Result<()> {
    let started = std::time::Instant::now();
    // A node alone has nobody to mesh with.
    for node in nodes.iter().filter(|_| nodes.len() > 1) {
        let left = wait.saturating_sub(started.elapsed()).max(WAIT);
        let meshed = eventually(left, format_args!("{} to mesh with a peer on every topic", node.name), async || {
            let mut meshed = true;
            for topic in topic::ALL {
                meshed &= node.net().mesh_peers(topic).await.is_ok_and(|peers| !peers.is_empty());
            }
            meshed
        })
        .await;
        if let Err(error) = meshed {
            let peers = node.net().peers().await.map(|p| p.len()).unwrap_or(0);
            return Err(error.context(format!("{} is connected to {peers} peers", node.name)));
        }
    }
    Ok(())
}

/// Every node publishes one harmless execution report; waits up to `wait` for every node to
/// receive all the others'. Returns the nodes that did not (index, and what they got and lost).
async fn probe_round(nodes: &[&TestNode], wait: Duration) -> Result<Vec<(usize, String)>> {
    let before: Vec<f64> = nodes.iter().map(|n| n.messages_on(topic::REPORTS)).collect();
    for node in nodes {
        let probe = Body::Report(Report {
            issued_at: now_ms(),
            reporter: node.public_key(),
            content_id: ContentId::of(format!("mesh probe from {} at {}", node.name, now_ms()).as_bytes()),
            event: ReportEvent::Execution { success: true, reward: 0.0 },
        });
        node.publish(&probe).await.with_context(|| format!("publishing {}'s mesh probe", node.name))?;
    }
    let expected = nodes.len() as f64 - 1.0;
    let got = |i: usize| nodes[i].messages_on(topic::REPORTS) - before[i];
    let all = eventually(wait, "every node to receive every mesh probe", async || {
        (0..nodes.len()).all(|i| got(i) >= expected)
    })
    .await;
    if all.is_ok() {
        return Ok(Vec::new());
    }
    let mut short = Vec::new();
    for (i, node) in nodes.iter().enumerate().filter(|(i, _)| got(*i) < expected) {
        let mesh = node.net().mesh_peers(topic::REPORTS).await.map(|p| p.len()).unwrap_or(0);
        let text = node.metrics_text();
        let count = |name: &str| metrics::value(&text, name, &[]).unwrap_or(0.0);
        short.push((
            i,
            format!(
                "{} got {} of {expected} (reports mesh {mesh} peers; events dropped {}, gossipsub failed sends {}, \
                 message-cache misses {})",
                node.name,
                got(i),
                count("druse_net_events_dropped_total"),
                count("libp2p_gossipsub_failed_messages_sum"),
                count("libp2p_gossipsub_memcache_misses_total"),
            ),
        ));
    }
    Ok(short)
}

/// A management node and edges that trust it, fully connected, with gossip proven to flow.
#[derive(Debug)]
pub struct Cluster {
    pub mgmt: TestNode,
    pub management: Arc<Management>,
    pub edges: Vec<TestNode>,
}

impl Cluster {
    /// Starts the management node (seed [`MGMT_SEED`]) and one edge per `(name, seed)`, each
    /// config edited by `tweak`; connects every pair and waits for gossip to flow.
    pub async fn start(edges: &[(&str, u8)], tweak: impl Fn(&mut Config)) -> Result<Self> {
        Self::start_managed(edges, tweak, ManagementConfig::default()).await
    }

    /// [`Cluster::start`] with the management role's own config (`[management]`).
    pub async fn start_managed(
        edges: &[(&str, u8)],
        tweak: impl Fn(&mut Config),
        role: ManagementConfig,
    ) -> Result<Self> {
        crate::init_logging();
        let trusted = [mgmt_key().public()];
        let mgmt = TestNode::start("mgmt", MGMT_SEED, Role::Management, &trusted, &tweak).await?;
        let management = Management::new(mgmt.node.clone(), role).context("taking the management role")?;
        let mut started = Vec::new();
        for (name, seed) in edges {
            started.push(TestNode::start(name, *seed, Role::Edge, &trusted, &tweak).await?);
        }
        let cluster = Self { mgmt, management, edges: started };
        let nets: Vec<&net::Handle> = cluster.nodes().iter().map(|n| n.net()).collect();
        connect_all(&nets).await?;
        mesh_ready(&cluster.nodes()).await?;
        Ok(cluster)
    }

    /// The management node, then every edge.
    pub fn nodes(&self) -> Vec<&TestNode> {
        std::iter::once(&self.mgmt).chain(&self.edges).collect()
    }

    /// The edge called `name`.
    pub fn edge(&self, name: &str) -> &TestNode {
        match self.edges.iter().find(|e| e.name == name) {
            Some(edge) => edge,
            None => panic!("no edge called {name}"),
        }
    }

    /// Restarts the management node on its data directory and takes the role again, reconnects
    /// it to every edge at once and waits for gossip to flow.
    pub async fn restart_mgmt(self) -> Result<Self> {
        let Self { mgmt, management, edges } = self;
        let role = management.config().clone();
        drop(management);
        let mgmt = mgmt.restart().await?;
        let management = Management::new(mgmt.node.clone(), role).context("taking the management role again")?;
        let cluster = Self { mgmt, management, edges };
        for edge in &cluster.edges {
            connect(cluster.mgmt.net(), edge.net()).await?;
        }
        mesh_ready(&cluster.nodes()).await?;
        Ok(cluster)
    }

    /// Restarts the edge `name` on its data directory. It stays disconnected until the test
    /// connects it.
    pub async fn restart_edge(&mut self, name: &str) -> Result<()> {
        let index = self.edges.iter().position(|e| e.name == name).with_context(|| format!("no edge {name}"))?;
        let edge = self.edges.remove(index).restart().await?;
        self.edges.insert(index, edge);
        Ok(())
    }

    /// Stops every node.
    pub async fn stop(self) {
        drop(self.management);
        self.mgmt.stop().await;
        for edge in self.edges {
            edge.stop().await;
        }
    }
}

/// A gossip message as a [`Sniffer`] saw it on the wire.
#[derive(Debug, Clone)]
pub struct Captured {
    pub topic: String,
    pub source: Option<PeerId>,
    pub data: Vec<u8>,
}

/// A bare swarm member with no node behind it: it records every gossip message it receives
/// (verdict `Ignore`, so it forwards nothing) and can publish arbitrary bytes. Scenarios use
/// it to capture wire bytes for a replay, and to replay them.
#[derive(Debug)]
pub struct Sniffer {
    pub net: net::Handle,
    pub key: Keypair,
    captured: Arc<Mutex<Vec<Captured>>>,
    task: JoinHandle<()>,
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sniffer {
    /// Joins the swarm layer with the key `key(seed)`.
    pub fn start(seed: u8) -> Result<Self> {
        let key = key(seed);
        let config = net::Config {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().context("listen address")?],
            mdns: false,
            heartbeat: HEARTBEAT,
            ..net::Config::default()
        };
        let (net, mut events) = net::spawn(&key, config, &mut net::Registry::default()).context("sniffer swarm")?;
        let captured = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let captured = Arc::clone(&captured);
            let net = net.clone();
            async move {
                while let Some(event) = events.recv().await {
                    if let Event::Message { id, propagation_source, source, topic, data } = event {
                        if let Ok(mut captured) = captured.lock() {
                            captured.push(Captured { topic, source, data });
                        }
                        let _ = net.report(id, propagation_source, Acceptance::Ignore).await;
                    }
                }
            }
        });
        Ok(Self { net, key, captured, task })
    }

    /// Every message captured so far, oldest first.
    pub fn captured(&self) -> Vec<Captured> {
        self.captured.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Publishes raw bytes on `topic`, retrying while no peer has subscribed yet.
    pub async fn publish(&self, topic: &'static str, data: Vec<u8>) -> Result<()> {
        publish_raw(&self.net, topic, data).await
    }
}

/// Publishes raw bytes through a swarm handle, bypassing every check of the node behind it;
/// retries while no peer has subscribed yet.
pub async fn publish_raw(net: &net::Handle, topic: &'static str, data: Vec<u8>) -> Result<()> {
    let mut last = String::new();
    wait_for(WAIT, format_args!("a peer to take a raw message on {topic}"), async || {
        match net.publish(topic, data.clone()).await {
            Ok(_) => Some(()),
            Err(error) => {
                last = error.to_string();
                None
            }
        }
    })
    .await
    .with_context(|| format!("last error: {last}"))
}

/// A swarm member that takes every gossip message and forwards none: it reports `Ignore` for
/// each, which neither forwards nor penalises, so to its peers it looks like a node that
/// never has anything new. Under gossipsub it is both a fault (a node whose validation is
/// stuck) and an attack (an eclipse by mesh slots). It counts what it took.
#[derive(Debug)]
pub struct Silent {
    pub net: net::Handle,
    taken: Arc<std::sync::atomic::AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Silent {
    /// Joins the swarm layer with `key` and the given heartbeat, on loopback TCP.
    pub fn start(key: &Keypair, heartbeat: Duration) -> Result<Self> {
        Self::start_with(key, heartbeat, net::Config::default().target_peers)
    }

    /// [`Silent::start`] keeping `target_peers` connections, so it dials no more than a test
    /// has it dial.
    pub fn start_with(key: &Keypair, heartbeat: Duration, target_peers: u32) -> Result<Self> {
        let config = net::Config {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().context("listen address")?],
            mdns: false,
            heartbeat,
            target_peers,
            ..net::Config::default()
        };
        let (net, mut events) = net::spawn(key, config, &mut net::Registry::default()).context("silent swarm")?;
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let task = tokio::spawn({
            let taken = Arc::clone(&taken);
            let net = net.clone();
            async move {
                while let Some(event) = events.recv().await {
                    if let Event::Message { id, propagation_source, .. } = event {
                        taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let _ = net.report(id, propagation_source, Acceptance::Ignore).await;
                    }
                }
            }
        });
        Ok(Self { net, taken, task })
    }

    /// How many gossip messages it has taken (and dropped).
    pub fn taken(&self) -> usize {
        self.taken.load(std::sync::atomic::Ordering::Relaxed)
    }
}
