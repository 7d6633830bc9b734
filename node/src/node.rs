//! A running node: its key, store, network handle, ingest actor and background tasks.
//! The HTTP API, the CLI and the management role all act through [`Node`].
//!
//! Every background task belongs to the node's [`JoinSet`], runs in a span, and stops when the
//! node shuts down: the node cancels them, waits for each to finish what it holds, then stops
//! the ingest actor, which commits its last batch.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use druse_protocol::body::{Body, TrustLevel};
use druse_protocol::net::{self, Event, PeerId, SyncChannel};
use druse_protocol::now_ms;
use druse_protocol::sync::Request;
use druse_protocol::trust::TrustList;
use druse_protocol::validate::{Reason, TrustView};
use druse_protocol::{ContentId, Envelope, Keypair, Kind, UnixMillis, keys};
use serde::Serialize;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Config;
use crate::ingest::actor::{self, Command};
use crate::ingest::{self, Activity, Ingestor, Outcome};
use crate::metrics::{KindLabel, Metrics};
use crate::peers::Book;
use crate::skill::{Pending, Skill};
use crate::store::{self, Store};
use crate::task::blocking;
use crate::weather;

mod agent;
mod memory_worker;
mod sync;

pub use sync::Synced;
/// The version every binary reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How often scores, gauges and expiries are refreshed.
const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(2);

/// Skills waiting to be put into memory, and bounty boosts, at most. A waiting skill is its
/// stored record, so the queue holds at most this many listings of at most one envelope each
/// (64 KiB); what does not fit is swept from the store instead.
const EFFECTS_QUEUE: usize = 1024;

/// How long shutdown waits for the background tasks to finish what they hold.
const DRAIN: Duration = Duration::from_secs(5);

/// Peers remembered in the trust book.
const PEER_BOOK_CAPACITY: usize = 10_000;

/// Peer activity an observer may fall behind by before it loses the oldest events.
const ACTIVITY_BUFFER: usize = 4096;

/// Which role a node plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Edge,
    Management,
}

impl Role {
    /// The label metrics and status use.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Edge => "edge",
            Role::Management => "management",
        }
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error(transparent)]
    Key(#[from] keys::Error),
    #[error(transparent)]
    TrustList(#[from] druse_protocol::trust::Error),
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Net(#[from] net::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("trust.pins: {0:?} is not a PeerId")]
    BadPin(String),
    #[error(transparent)]
    Memory(#[from] druse_memory::engine::Error),
    #[error(transparent)]
    Embed(#[from] druse_memory::embed::Error),
    #[error(transparent)]
    Join(#[from] crate::task::Failed),
}

/// Why a running node could not act.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Net(#[from] net::Error),
    #[error("the message was refused: {}", .0.label())]
    Refused(Outcome),
    #[error(transparent)]
    Body(#[from] druse_protocol::body::Error),
    #[error(transparent)]
    Memory(#[from] druse_memory::engine::Error),
    #[error(transparent)]
    Join(#[from] crate::task::Failed),
    #[error(transparent)]
    Stopped(#[from] actor::Stopped),
    #[error("this node holds no skill {0}")]
    NoSkill(ContentId),
    /// A market refusal: its API code (not found, invalid or conflict) and a sentence.
    #[error("{1}")]
    Market(druse_protocol::api::Code, String),
    /// An adoption bound to a maximum price settled above it: nothing was paid.
    #[error("adopting skill {id} now costs {price} micro-USDC, above the maximum of {max}")]
    PriceAboveMax { id: ContentId, price: u64, max: u64 },
    /// An adoption held to the owner's daily budget would pass it: nothing was paid.
    #[error("adopting skill {id} costs {price} micro-USDC, over what is left of today's budget ({left} micro-USDC)")]
    OverBudget { id: ContentId, price: u64, left: u64 },
}

/// Syncs and questions waiting for the anti-entropy task, each.
const SYNC_QUEUE: usize = 64;

/// A peer's question and where its answer goes.
#[derive(Debug)]
pub(crate) struct Question {
    pub(crate) peer: PeerId,
    pub(crate) request: Request,
    pub(crate) channel: SyncChannel,
}

/// The anti-entropy task's two queues (`node/sync.rs`), held by the node.
#[derive(Debug)]
struct SyncQueues {
    syncs: mpsc::Sender<PeerId>,
    questions: mpsc::Sender<Question>,
}

/// A handle to a running node; clone it freely.
#[derive(Debug, Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    role: Role,
    key: Keypair,
    store: Store,
    memory: druse_memory::Handle,
    net: net::Handle,
    metrics: Arc<Metrics>,
    /// The one writer of ingestion's state and the store's ingestion tables.
    ingest: actor::Handle,
    /// The actor's threads, joined at shutdown.
    ingest_threads: Mutex<Option<actor::Threads>>,
    /// The market's config and state between calls (see `market::desk`).
    market: crate::market::shared::Shared,
    connected: Mutex<HashSet<PeerId>>,
    token: String,
    started: Instant,
    /// Every background task; dropping the set aborts them.
    tasks: Mutex<JoinSet<()>>,
    /// Cancelled at shutdown: every task's loop ends at its next turn.
    stopping: CancellationToken,
    /// Set when work for the memory worker was dropped or failed: the next sweep makes up for it.
    owed: Arc<AtomicBool>,
    /// Peer activity for observers; sending costs nothing while nobody subscribes.
    activity: broadcast::Sender<Activity>,
    /// Work for the anti-entropy task.
    sync: SyncQueues,
}

/// A snapshot of the node for `/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    pub peer_id: String,
    pub public_key: String,
    pub role: Role,
    pub version: &'static str,
    pub uptime_seconds: u64,
    pub listen_addrs: Vec<String>,
    pub connected_peers: usize,
    pub skills: usize,
    pub halted: bool,
    pub weather: WeatherView,
    pub management_keys: Vec<String>,
    pub embedder: String,
    pub memories: usize,
    /// Peers in this node's gossip mesh, by topic: gossip flows on a topic once it has one.
    pub mesh_peers: std::collections::BTreeMap<&'static str, usize>,
}

/// The weather as `/v1/weather` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WeatherView {
    pub halted: bool,
    pub effective_cortisol: f64,
    pub active: Option<weather::Current>,
    pub last: Option<weather::Current>,
}

/// A peer as `/v1/peers` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PeerView {
    pub peer_id: String,
    pub connected: bool,
    pub trust_level: TrustLevel,
    pub reputation: f64,
    pub gossip_score: Option<f64>,
    pub accepted: u64,
    pub rejected: u64,
    /// When this node first heard from the peer (`None` for a peer it has only connected to).
    pub first_seen: Option<UnixMillis>,
    pub addresses: Vec<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn load_or_create_token(path: &std::path::Path) -> Result<String, StartError> {
    match std::fs::read_to_string(path) {
        Ok(token) if !token.trim().is_empty() => return Ok(token.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let token = data_encoding::HEXLOWER.encode(&bytes);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    use std::io::Write;
    let mut file = options.open(path)?;
    file.write_all(format!("{token}\n").as_bytes())?;
    file.sync_all()?;
    Ok(token)
}

/// Reads the trust list a config names: its file, its inline keys, and (for a management
/// node) the node's own key.
pub fn trust_list(config: &Config) -> Result<TrustList, StartError> {
    let mut list = match &config.trust.trust_list {
        Some(path) => TrustList::load(path)?,
        None => TrustList::default(),
    };
    for (index, key) in config.trust.management_keys.iter().enumerate() {
        let key = key.parse().map_err(|e: keys::Error| druse_protocol::trust::Error::Line {
            line: index + 1,
            reason: format!("trust.management_keys: {e}"),
        })?;
        list.insert(key);
    }
    Ok(list)
}

impl Node {
    /// Opens the data directory, joins the swarm and starts ingesting.
    pub async fn start(config: Config, role: Role) -> Result<Self, StartError> {
        Self::start_with(config, role, |_| {}).await
    }

    /// [`Node::start`], with `register` adding the metrics of what runs on the node (the
    /// agent's) to the node's registry before it is served.
    pub async fn start_with(
        config: Config,
        role: Role,
        register: impl FnOnce(&mut prometheus_client::registry::Registry),
    ) -> Result<Self, StartError> {
        config.check()?;
        // The shared thread pool (the MiniLM embedder's matrix products) starts here, at the
        // default priority: started lazily by a background thread, its threads would inherit
        // that thread's lower priority (see `druse_memory::background`).
        let _ = rayon::current_num_threads();
        std::fs::create_dir_all(&config.store.data_dir)?;
        let key = Keypair::load_or_generate(&config.key_path())?;
        let token = load_or_create_token(&config.token_path())?;
        let store = Store::open(&config.store_path(), &config.sled_path(), config.store.cache_bytes)?;
        let memory = {
            let embed = config.memory.embed.clone();
            let engine = config.memory.engine();
            let db = store.database().clone();
            let index = config.index_path();
            let data_dir = config.store.data_dir.clone();
            blocking(move || -> Result<_, StartError> {
                let embedder = druse_memory::embed::for_node(&embed, &data_dir)?;
                let engine = druse_memory::Memory::open(&db, &index, engine, embedder, now_ms())?;
                // Skills and bounty boosts are indexed by its background writer ("druse-index").
                Ok(druse_memory::Handle::new(engine, "druse-index")?)
            })
            .await??
        };
        let mut trust = trust_list(&config)?;
        if role == Role::Management {
            trust.insert(key.public());
        }
        let mut pins = HashMap::new();
        for (peer, level) in &config.trust.pins {
            let id = peer.parse::<PeerId>().map_err(|_| StartError::BadPin(peer.clone()))?;
            pins.insert(id, *level);
        }
        let mut metrics = Metrics::new(VERSION, role.as_str());
        register(metrics.registry_mut());
        let (net, events) = net::spawn(&key, config.net(), metrics.registry_mut())?;
        let view = TrustView::new(config.validator(), trust.clone());
        let book = Book::new(trust, pins, PEER_BOOK_CAPACITY);
        let pending =
            Pending::new(config.trust.pending_endorsements, config.trust.pending_endorsement_ttl.as_millis() as u64);
        let market = config.market.engine();
        let me = ingest::Me { key: key.public(), market: market.clone() };
        let store_for_restore = store.clone();
        let mut ingestor = blocking(move || Ingestor::restore(store_for_restore, view, book, pending, me)).await??;
        let (effects, effects_rx) = mpsc::channel(EFFECTS_QUEUE);
        let (syncs, syncs_rx) = mpsc::channel(SYNC_QUEUE);
        let (questions, questions_rx) = mpsc::channel(SYNC_QUEUE);
        ingestor.refresh_gauges(now_ms(), &metrics);
        let metrics = Arc::new(metrics);
        let owed = Arc::new(AtomicBool::new(false));
        let activity = broadcast::channel(ACTIVITY_BUFFER).0;
        let outlets = actor::Outlets {
            net: net.clone(),
            metrics: Arc::clone(&metrics),
            effects,
            owed: Arc::clone(&owed),
            activity: activity.clone(),
        };
        let (ingest, ingest_threads) = actor::spawn(ingestor, outlets)?;
        let node = Node {
            inner: Arc::new(Inner {
                config,
                role,
                key,
                store,
                memory,
                net,
                metrics,
                ingest,
                ingest_threads: Mutex::new(Some(ingest_threads)),
                market: crate::market::shared::Shared::new(market),
                connected: Mutex::new(HashSet::new()),
                token,
                started: Instant::now(),
                tasks: Mutex::new(JoinSet::new()),
                stopping: CancellationToken::new(),
                owed,
                activity,
                sync: SyncQueues { syncs, questions },
            }),
        };
        node.spawn_task("events", node.clone().event_loop(events));
        node.spawn_task("maintenance", node.clone().maintenance_loop());
        node.spawn_task("consolidation", node.clone().consolidation_loop());
        node.spawn_task("memory-worker", node.clone().effects_loop(effects_rx));
        node.spawn_task("sweep", node.clone().sweep_loop());
        node.spawn_task("sync", node.clone().sync_loop(syncs_rx, questions_rx));
        Ok(node)
    }

    /// Stops the background tasks (each finishes what it holds, for at most 5 s), stops the
    /// ingest actor once it has committed what waits, leaves the swarm and flushes the store.
    pub async fn shutdown(&self) {
        self.inner.stopping.cancel();
        let mut tasks = std::mem::take(&mut *lock(&self.inner.tasks));
        let drained = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(left = tasks.len(), "background tasks did not finish in time; aborting them");
            tasks.shutdown().await;
        }
        if self.inner.ingest.ask(|reply| Command::Stop { reply }).await.is_err() {
            tracing::debug!("the ingest actor had already stopped");
        }
        let threads = lock(&self.inner.ingest_threads).take();
        if let Some(threads) = threads
            && !blocking(move || threads.join()).await.unwrap_or(false)
        {
            tracing::error!("an ingest actor thread panicked");
        }
        self.inner.net.shutdown().await;
        if let Err(error) = self.inner.store.flush().await {
            tracing::error!(%error, "flushing the store at shutdown failed");
        }
    }

    /// Runs `task` in the span `name` for as long as the node: it is cancelled at shutdown
    /// (when it next waits), and aborted if it does not end within the drain time.
    pub fn spawn_task(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let stopping = self.inner.stopping.clone();
        let span = tracing::info_span!("task", name);
        lock(&self.inner.tasks).spawn(
            async move {
                tokio::select! {
                    () = stopping.cancelled() => {}
                    () = task => {}
                }
            }
            .instrument(span),
        );
    }

    /// Runs `task` until it ends by itself: it watches [`Node::stopping`] and ends soon after,
    /// and shutdown waits for it (at most `DRAIN`, then aborts it).
    pub fn spawn_to_end(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        lock(&self.inner.tasks).spawn(task.instrument(tracing::info_span!("task", name)));
    }

    /// Whether the node is shutting down.
    pub fn stopping(&self) -> &CancellationToken {
        &self.inner.stopping
    }

    /// This node's PeerId.
    pub fn peer_id(&self) -> PeerId {
        self.inner.net.local_peer_id()
    }

    /// This node's key.
    pub fn key(&self) -> &Keypair {
        &self.inner.key
    }

    /// The config the node started with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The role the node plays.
    pub fn role(&self) -> Role {
        self.inner.role
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The market's config and state between calls (see `market::desk`).
    pub(crate) fn market_state(&self) -> &crate::market::shared::Shared {
        &self.inner.market
    }

    /// The one writer of ingestion's state, the trust book and the market's tables.
    pub(crate) fn ingest(&self) -> &actor::Handle {
        &self.inner.ingest
    }

    /// The memory service.
    pub fn memory(&self) -> &druse_memory::Handle {
        &self.inner.memory
    }

    /// Runs one consolidation pass now, timing it in the metrics.
    pub async fn consolidate(&self) -> Result<druse_memory::consolidation::Report, Error> {
        let started = Instant::now();
        let report = self.inner.memory.consolidate(now_ms()).await?;
        self.inner.metrics.consolidation_seconds.observe(started.elapsed().as_secs_f64());
        self.refresh_memory_gauges().await;
        Ok(report)
    }

    async fn refresh_memory_gauges(&self) {
        let Ok(counts) = self.inner.memory.counts().await else { return };
        for lifecycle in druse_memory::crystal::Lifecycle::ALL {
            let n = counts.get(&lifecycle).copied().unwrap_or(0) as i64;
            self.inner
                .metrics
                .crystals
                .get_or_create(&crate::metrics::LifecycleLabel { lifecycle: lifecycle.as_str() })
                .set(n);
        }
    }

    async fn consolidation_loop(self) {
        let every = self.inner.config.memory.consolidation_interval;
        let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        self.refresh_memory_gauges().await;
        loop {
            tick.tick().await;
            match self.consolidate().await {
                Ok(report) => tracing::info!(?report, "consolidation pass"),
                Err(error) => {
                    self.inner.metrics.consolidation_failures.inc();
                    tracing::error!(%error, "consolidation failed");
                }
            }
        }
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The network handle.
    pub fn net(&self) -> &net::Handle {
        &self.inner.net
    }

    /// The bearer token write routes require.
    pub fn token(&self) -> &str {
        &self.inner.token
    }

    /// Signs `body` with the node's key, applies it locally through the same validator and
    /// state as gossip, makes it durable, then gossips it. A message refused locally is
    /// never sent.
    pub async fn publish(&self, body: &Body) -> Result<ContentId, Error> {
        let (id, bytes) = self.seal(body)?;
        self.publish_sealed(body.kind(), id, bytes, false).await
    }

    /// Signs `body` with the node's key: its content id and the envelope.
    pub(crate) fn seal(&self, body: &Body) -> Result<(ContentId, Vec<u8>), Error> {
        let encoded = body.encode()?;
        Ok((ContentId::of(&encoded), Envelope::seal(&self.inner.key, body.kind(), &encoded)))
    }

    /// [`Node::publish`] for a message already signed. With `again`, a message this node
    /// already applied is gossiped again rather than refused (an adoption retried after its
    /// caller went away).
    pub(crate) async fn publish_sealed(
        &self,
        kind: Kind,
        id: ContentId,
        bytes: Vec<u8>,
        again: bool,
    ) -> Result<ContentId, Error> {
        let topic = kind.topic();
        let outcome = self.inner.ingest.ask(|reply| Command::Local { bytes: bytes.clone(), topic, reply }).await?;
        let applied_before = again && outcome == Outcome::Protocol(Reason::Duplicate);
        if outcome != Outcome::Accepted && !applied_before {
            return Err(Error::Refused(outcome));
        }
        self.inner.store.flush().await?;
        self.inner.metrics.published.get_or_create(&KindLabel { kind: kind.as_str() }).inc();
        match self.inner.net.publish(topic, bytes).await {
            Ok(_) => {}
            Err(net::Error::NoPeers) => tracing::info!(%kind, %id, "published with no peers subscribed"),
            Err(net::Error::Duplicate) if applied_before => {}
            Err(error) => tracing::warn!(%error, %kind, %id, "gossip publish failed; kept locally"),
        }
        Ok(id)
    }

    /// Gossips the kept weather envelope again, exactly as it was signed, so that a node
    /// which missed it obeys it too. A re-dated copy would overtake newer weather from another
    /// management key; the original keeps the order every node agrees on. `None` when nothing
    /// was sent (no weather kept, or gossip still holds this message as recently sent).
    pub async fn republish_weather(&self) -> Result<Option<ContentId>, Error> {
        let Some((key, bytes)) = self.inner.store.weather_envelope()? else { return Ok(None) };
        let id = key.content_id();
        match self.inner.net.publish(Kind::Weather.topic(), bytes).await {
            Ok(_) => Ok(Some(id)),
            Err(net::Error::NoPeers | net::Error::Duplicate) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// One stored skill.
    pub fn skill(&self, id: &ContentId) -> Result<Option<Skill>, Error> {
        Ok(self.inner.store.skill(id)?.map(|skill| self.with_crystal(skill)))
    }

    /// `skill` with the crystal the memory engine indexed it as (a skill stored by an older
    /// version keeps the crystal recorded with it).
    fn with_crystal(&self, mut skill: Skill) -> Skill {
        skill.crystal = skill.crystal.or_else(|| self.inner.memory.skill_crystal(&skill.id));
        skill
    }

    /// Peer activity from now on. The channel is bounded: a receiver more than 4096 events
    /// behind loses the oldest and is told how many.
    pub fn activity(&self) -> broadcast::Receiver<Activity> {
        self.inner.activity.subscribe()
    }

    /// Every stored skill.
    pub fn skills(&self) -> Result<Vec<Skill>, Error> {
        Ok(self.inner.store.skills().map(|skill| skill.map(|s| self.with_crystal(s))).collect::<Result<_, _>>()?)
    }

    /// The weather as this node sees it now.
    pub fn weather(&self) -> WeatherView {
        let now = now_ms();
        let snapshot = self.inner.ingest.snapshot();
        let weather = &snapshot.weather;
        let local = self.inner.memory.hormones(now).cortisol;
        WeatherView {
            halted: weather.halted(now),
            effective_cortisol: weather.effective_cortisol(local, now),
            active: weather.active(now).cloned(),
            last: weather.last().cloned(),
        }
    }

    /// Whether ingestion from peers below `trusted` is halted now.
    pub fn halted(&self) -> bool {
        self.inner.ingest.snapshot().weather.halted(now_ms())
    }

    /// The trust level this node gives `peer`.
    pub fn trust_level(&self, peer: &PeerId) -> TrustLevel {
        self.inner.ingest.book(|book| book.level(peer, now_ms()))
    }

    /// The highest seq accepted from each management key.
    pub fn last_seqs(&self) -> Vec<(druse_protocol::PublicKey, u64)> {
        self.inner.ingest.snapshot().seqs.clone()
    }

    /// The node's status.
    pub async fn status(&self) -> NodeStatus {
        let listen_addrs = self.inner.net.listen_addrs().await.unwrap_or_default();
        let mut mesh_peers = std::collections::BTreeMap::new();
        for topic in druse_protocol::topic::ALL {
            mesh_peers.insert(topic, self.inner.net.mesh_peers(topic).await.map_or(0, |peers| peers.len()));
        }
        let weather = self.weather();
        let management_keys =
            self.inner.ingest.snapshot().management_keys.iter().map(ToString::to_string).collect::<Vec<_>>();
        NodeStatus {
            peer_id: self.peer_id().to_string(),
            public_key: self.inner.key.public().to_string(),
            role: self.inner.role,
            version: VERSION,
            uptime_seconds: self.inner.started.elapsed().as_secs(),
            listen_addrs: listen_addrs.iter().map(ToString::to_string).collect(),
            connected_peers: lock(&self.inner.connected).len(),
            skills: self.inner.ingest.snapshot().skills,
            halted: weather.halted,
            weather,
            management_keys,
            embedder: self.inner.memory.embedder_name().to_owned(),
            memories: self.inner.memory.len(),
            mesh_peers,
        }
    }

    /// Connected peers, and every peer the trust book knows.
    pub async fn peers(&self) -> Vec<PeerView> {
        let live = self.inner.net.peers().await.unwrap_or_default();
        let now = now_ms();
        self.inner.ingest.book(|book| Self::peer_views(book, &live, now))
    }

    fn peer_views(book: &Book, live: &[net::PeerInfo], now: UnixMillis) -> Vec<PeerView> {
        let mut views: Vec<PeerView> = live
            .iter()
            .map(|info| {
                let record = book.record(&info.peer_id);
                PeerView {
                    peer_id: info.peer_id.to_string(),
                    connected: true,
                    trust_level: book.level(&info.peer_id, now),
                    reputation: book.reputation(&info.peer_id, now),
                    gossip_score: info.score,
                    accepted: record.map_or(0, |r| r.accepted),
                    rejected: record.map_or(0, |r| r.rejected),
                    first_seen: record.map(|r| r.first_seen),
                    addresses: info.addresses.iter().map(ToString::to_string).collect(),
                }
            })
            .collect();
        let connected: HashSet<PeerId> = live.iter().map(|i| i.peer_id).collect();
        for (peer, record) in book.iter().filter(|(p, _)| !connected.contains(p)) {
            views.push(PeerView {
                peer_id: peer.to_string(),
                connected: false,
                trust_level: book.level(peer, now),
                reputation: book.reputation(peer, now),
                gossip_score: None,
                accepted: record.accepted,
                rejected: record.rejected,
                first_seen: Some(record.first_seen),
                addresses: Vec::new(),
            });
        }
        views
    }

    /// Ingests one message as if it had arrived over gossip from `source` (benchmarks and tests
    /// use this to drive ingestion without a network), once the actor has committed it.
    pub async fn ingest_bytes(&self, bytes: &[u8], source: &PeerId, topic: &str) -> Outcome {
        match self.submit_bytes(bytes.to_vec(), *source, topic).await {
            Ok(outcome) => outcome.await.unwrap_or(Outcome::StoreFailed),
            Err(_) => Outcome::StoreFailed,
        }
    }

    /// Queues one message as if it had arrived over gossip from `source`, without waiting for
    /// it to be ingested: the receiver answers once it is. Messages queued back to back are
    /// ingested in batches, as gossip is.
    pub async fn submit_bytes(
        &self,
        bytes: Vec<u8>,
        source: PeerId,
        topic: &str,
    ) -> Result<tokio::sync::oneshot::Receiver<Outcome>, Error> {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        self.inner.ingest.send(Command::Message { bytes, source, topic: topic.to_owned(), reply }).await?;
        Ok(outcome)
    }

    /// Hands the swarm's events on: gossip messages to the ingest actor, sync questions to
    /// the sync task, and new peers their application score and a sync.
    async fn event_loop(self, mut events: mpsc::Receiver<Event>) {
        while let Some(event) = events.recv().await {
            match event {
                Event::Message { id, propagation_source, source, topic, data } => {
                    let gossip = Command::Gossip { id, propagation_source, source, topic, data };
                    if self.inner.ingest.send(gossip).await.is_err() {
                        break;
                    }
                }
                Event::PeerConnected(peer) => {
                    lock(&self.inner.connected).insert(peer);
                    let _ = self.inner.activity.send(Activity::Connected(peer));
                    let score = self.inner.ingest.book(|book| book.application_score(&peer, now_ms()));
                    let _ = self.inner.net.set_application_score(peer, score).await;
                    self.request_sync(peer);
                }
                Event::PeerDisconnected(peer) => {
                    lock(&self.inner.connected).remove(&peer);
                }
                Event::NewListenAddr(addr) => tracing::info!(%addr, "listening"),
                Event::SyncRequest { peer, request, channel } => {
                    self.question(Question { peer, request, channel });
                }
            }
        }
    }

    async fn maintenance_loop(self) {
        let mut tick = tokio::time::interval(MAINTENANCE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let connected: Vec<PeerId> = lock(&self.inner.connected).iter().copied().collect();
            let Ok(done) = self.inner.ingest.ask(|reply| Command::Tick { connected, reply }).await else { break };
            let now = now_ms();
            self.inner.memory.set_network_cortisol(self.inner.ingest.snapshot().weather.override_level(now));
            for (peer, score) in done.scores {
                let _ = self.inner.net.set_application_score(peer, score).await;
            }
            self.market().end_tick(done.repriced).await;
            self.inner.metrics.maintenance_ticks.inc();
        }
    }
}
