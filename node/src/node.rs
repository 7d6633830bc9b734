//! A running node: its key, store, network handle, ingestion pipeline and background tasks.
//! The HTTP API, the CLI and the management role all act through [`Node`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use druse_protocol::body::{Body, TrustLevel};
use druse_protocol::net::{self, Event, PeerId};
use druse_protocol::trust::TrustList;
use druse_protocol::validate::{Reason, TrustView};
use druse_protocol::{ContentId, Envelope, Keypair, Kind, UnixMillis, keys};
use serde::Serialize;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::ingest::{self, Outcome, Pipeline};
use crate::metrics::{KindLabel, Metrics};
use crate::peers::Book;
use crate::skill::{Pending, Skill};
use crate::store::{self, Store};
use crate::weather;

mod market;
mod sync;

pub use market::{Adoption, LedgerView, market_error};
pub use sync::Synced;

/// The version every binary reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How often scores, gauges and expiries are refreshed.
const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(2);

/// Skills waiting to be put into memory, and bounty boosts, at most.
const EFFECTS_QUEUE: usize = 1024;

/// Peers remembered in the trust book.
const PEER_BOOK_CAPACITY: usize = 10_000;

/// Batches of changed market evidence an observer may fall behind by.
const EVIDENCE_BATCHES: usize = 64;

/// Peer activity an observer may fall behind by before it loses the oldest events.
const ACTIVITY_BUFFER: usize = 4096;

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> UnixMillis {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

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

/// Why a node could not start or act.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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
    #[error("the message was refused: {}", .0.label())]
    Refused(Outcome),
    #[error(transparent)]
    Body(#[from] druse_protocol::body::Error),
    #[error(transparent)]
    Memory(#[from] crate::memory::engine::Error),
    #[error(transparent)]
    Embed(#[from] crate::memory::embed::Error),
    #[error("a blocking task failed: {0}")]
    Join(String),
    #[error("this node holds no skill {0}")]
    NoSkill(ContentId),
    /// A market refusal: a code from [`market_error`] and a sentence.
    #[error("{1}")]
    Market(&'static str, String),
}

/// Runs blocking work (embedding, disk) off the async runtime.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Join(e.to_string()))
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
    memory: Arc<crate::memory::Memory>,
    net: net::Handle,
    metrics: Metrics,
    pipeline: Mutex<Pipeline>,
    connected: Mutex<HashSet<PeerId>>,
    token: String,
    started: Instant,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Work ingestion leaves for the memory worker.
    effects: mpsc::Sender<ingest::Effect>,
    /// Set when the memory worker's queue was full: the next sweep indexes what it missed.
    effects_dropped: AtomicBool,
    /// Adoptions run one at a time, so the ledger is never spent twice.
    adopting: tokio::sync::Mutex<()>,
    /// Skills are put into memory one at a time, so none is indexed twice.
    indexing: Mutex<()>,
    /// Bounty boosts are applied one skill at a time, so none is applied twice.
    boosting: Mutex<()>,
    /// Peer activity for observers; sending costs nothing while nobody subscribes.
    activity: broadcast::Sender<Activity>,
    /// Skills whose market evidence changed, a batch per maintenance tick, for observers.
    evidence: broadcast::Sender<Vec<ContentId>>,
    /// The agent, when `[agent] enabled`.
    agent: std::sync::OnceLock<crate::agent::Handle>,
    /// Work for the anti-entropy task.
    sync: sync::Queues,
}

/// What a peer did, as the node saw it: observers such as the management node's anomaly
/// detector read it from [`Node::activity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// A peer's first connection opened.
    Connected(PeerId),
    /// A gossip message that `source` originated went through ingestion.
    Message { source: PeerId, kind: Option<Kind>, outcome: Outcome },
}

/// A snapshot of the node for `/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
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

fn load_or_create_token(path: &std::path::Path) -> Result<String, Error> {
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
pub fn trust_list(config: &Config) -> Result<TrustList, Error> {
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
    pub async fn start(config: Config, role: Role) -> Result<Self, Error> {
        config.check()?;
        // The agent (crate::agent): its secrets are read now, so a missing one refuses to start.
        let agent_secrets = crate::agent::Secrets::from_env(&config)?;
        std::fs::create_dir_all(&config.store.data_dir)?;
        let key = Keypair::load_or_generate(&config.key_path())?;
        let token = load_or_create_token(&config.token_path())?;
        let store = Store::open(&config.db_path(), config.store.cache_bytes)?;
        let memory = {
            let embed = config.memory.embed.clone();
            let engine = config.memory.engine();
            let db = store.db().clone();
            let index = config.index_path();
            let data_dir = config.store.data_dir.clone();
            blocking(move || -> Result<_, Error> {
                let embedder = crate::memory::embed::for_node(&embed, &data_dir)?;
                Ok(Arc::new(crate::memory::Memory::open(&db, &index, engine, embedder, now_ms())?))
            })
            .await??
        };
        let mut trust = trust_list(&config)?;
        if role == Role::Management {
            trust.insert(key.public());
        }
        let mut pins = HashMap::new();
        for (peer, level) in &config.trust.pins {
            let id = peer.parse::<PeerId>().map_err(|_| Error::BadPin(peer.clone()))?;
            pins.insert(id, *level);
        }
        let mut metrics = Metrics::new(VERSION, role.as_str());
        let agent_metrics = crate::agent::metrics::Metrics::register(metrics.registry_mut());
        let (net, events) = net::spawn(&key, config.net(), metrics.registry_mut())?;
        let view = TrustView::new(config.validator(), trust.clone());
        let book = Book::new(trust, pins, PEER_BOOK_CAPACITY);
        let pending =
            Pending::new(config.trust.pending_endorsements, config.trust.pending_endorsement_ttl.as_millis() as u64);
        let me = ingest::Me { key: key.public(), market: config.market.engine() };
        let mut pipeline = Pipeline::restore(store.clone(), view, book, pending, me)?;
        let (effects, effects_rx) = mpsc::channel(EFFECTS_QUEUE);
        let (syncs, syncs_rx) = mpsc::channel(sync::QUEUE);
        let (questions, questions_rx) = mpsc::channel(sync::QUEUE);
        pipeline.refresh_gauges(now_ms(), &metrics);
        let node = Node {
            inner: Arc::new(Inner {
                config,
                role,
                key,
                store,
                memory,
                net,
                metrics,
                pipeline: Mutex::new(pipeline),
                connected: Mutex::new(HashSet::new()),
                token,
                started: Instant::now(),
                tasks: Mutex::new(Vec::new()),
                effects,
                effects_dropped: AtomicBool::new(false),
                adopting: tokio::sync::Mutex::new(()),
                indexing: Mutex::new(()),
                boosting: Mutex::new(()),
                activity: broadcast::channel(ACTIVITY_BUFFER).0,
                evidence: broadcast::channel(EVIDENCE_BATCHES).0,
                agent: std::sync::OnceLock::new(),
                sync: sync::Queues { syncs, questions },
            }),
        };
        let ingest = tokio::spawn(node.clone().ingest_loop(events));
        let maintenance = tokio::spawn(node.clone().maintenance_loop());
        let consolidation = tokio::spawn(node.clone().consolidation_loop());
        let effects = tokio::spawn(node.clone().effects_loop(effects_rx));
        let sweep = tokio::spawn(node.clone().sweep_loop());
        let sync = tokio::spawn(node.clone().sync_loop(syncs_rx, questions_rx));
        lock(&node.inner.tasks).extend([ingest, maintenance, consolidation, effects, sweep, sync]);
        // The agent (seeds 000–002): starts its own task when `[agent] enabled`.
        if let Some(agent) = crate::agent::start(&node, agent_metrics, agent_secrets) {
            let _ = node.inner.agent.set(agent);
        }
        Ok(node)
    }

    /// Stops the background tasks, leaves the swarm and flushes the store.
    pub async fn shutdown(&self) {
        for task in lock(&self.inner.tasks).drain(..) {
            task.abort();
        }
        lock(&self.inner.pipeline).persist_peers();
        self.inner.net.shutdown().await;
        if let Err(error) = self.inner.store.flush().await {
            tracing::error!(%error, "flushing the store at shutdown failed");
        }
    }

    /// Keeps a task alive as long as the node, and stops it at shutdown.
    pub fn own_task(&self, task: JoinHandle<()>) {
        lock(&self.inner.tasks).push(task);
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

    /// The agent, when it runs.
    pub fn agent(&self) -> Option<&crate::agent::Handle> {
        self.inner.agent.get()
    }

    /// The memory engine.
    pub fn memory(&self) -> &Arc<crate::memory::Memory> {
        &self.inner.memory
    }

    /// Runs one consolidation pass now, timing it in the metrics.
    pub async fn consolidate(&self) -> Result<crate::memory::consolidation::Report, Error> {
        let memory = Arc::clone(&self.inner.memory);
        let started = Instant::now();
        let report = blocking(move || memory.consolidate(now_ms())).await??;
        self.inner.metrics.consolidation_seconds.observe(started.elapsed().as_secs_f64());
        self.refresh_memory_gauges();
        Ok(report)
    }

    fn refresh_memory_gauges(&self) {
        let counts = self.inner.memory.counts();
        for lifecycle in crate::memory::crystal::Lifecycle::ALL {
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
        self.refresh_memory_gauges();
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
        let encoded = body.encode()?;
        let id = ContentId::of(&encoded);
        let bytes = Envelope::seal(&self.inner.key, body.kind(), &encoded);
        let me = self.peer_id();
        let outcome =
            self.through_pipeline(|p| p.admit_local(&bytes, &me, body.kind().topic(), now_ms(), &self.inner.metrics));
        if outcome != Outcome::Accepted {
            return Err(Error::Refused(outcome));
        }
        self.inner.store.flush().await?;
        self.inner.metrics.published.get_or_create(&KindLabel { kind: body.kind().as_str() }).inc();
        match self.inner.net.publish(body.kind().topic(), bytes).await {
            Ok(_) => {}
            Err(net::Error::NoPeers) => tracing::info!(kind = %body.kind(), %id, "published with no peers subscribed"),
            Err(error) => tracing::warn!(%error, kind = %body.kind(), %id, "gossip publish failed; kept locally"),
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
        Ok(self.inner.store.skill(id)?)
    }

    /// Peer activity from now on. The channel is bounded: a receiver more than 4096 events
    /// behind loses the oldest and is told how many.
    pub fn activity(&self) -> broadcast::Receiver<Activity> {
        self.inner.activity.subscribe()
    }

    /// Every stored skill.
    pub fn skills(&self) -> Result<Vec<Skill>, Error> {
        Ok(self.inner.store.skills().collect::<Result<_, _>>()?)
    }

    /// The weather as this node sees it now.
    pub fn weather(&self) -> WeatherView {
        let now = now_ms();
        let pipeline = lock(&self.inner.pipeline);
        let local = self.inner.memory.hormones(now).cortisol;
        WeatherView {
            halted: pipeline.weather.halted(now),
            effective_cortisol: pipeline.weather.effective_cortisol(local, now),
            active: pipeline.weather.active(now).cloned(),
            last: pipeline.weather.last().cloned(),
        }
    }

    /// Whether ingestion from peers below `trusted` is halted now.
    pub fn halted(&self) -> bool {
        lock(&self.inner.pipeline).weather.halted(now_ms())
    }

    /// The trust level this node gives `peer`.
    pub fn trust_level(&self, peer: &PeerId) -> TrustLevel {
        lock(&self.inner.pipeline).book.level(peer, now_ms())
    }

    /// The highest seq accepted from each management key.
    pub fn last_seqs(&self) -> Vec<(druse_protocol::PublicKey, u64)> {
        lock(&self.inner.pipeline).view.last_seqs().collect()
    }

    /// The node's status.
    pub async fn status(&self) -> Status {
        let listen_addrs = self.inner.net.listen_addrs().await.unwrap_or_default();
        let weather = self.weather();
        let management_keys =
            lock(&self.inner.pipeline).trust_list().iter().map(ToString::to_string).collect::<Vec<_>>();
        Status {
            peer_id: self.peer_id().to_string(),
            public_key: self.inner.key.public().to_string(),
            role: self.inner.role,
            version: VERSION,
            uptime_seconds: self.inner.started.elapsed().as_secs(),
            listen_addrs: listen_addrs.iter().map(ToString::to_string).collect(),
            connected_peers: lock(&self.inner.connected).len(),
            skills: self.inner.store.skill_count(),
            halted: weather.halted,
            weather,
            management_keys,
            embedder: self.inner.memory.embedder_name().to_owned(),
            memories: self.inner.memory.counts().values().sum(),
        }
    }

    /// Connected peers, and every peer the trust book knows.
    pub async fn peers(&self) -> Vec<PeerView> {
        let live = self.inner.net.peers().await.unwrap_or_default();
        let now = now_ms();
        let pipeline = lock(&self.inner.pipeline);
        let mut views: Vec<PeerView> = live
            .iter()
            .map(|info| {
                let record = pipeline.book.record(&info.peer_id);
                PeerView {
                    peer_id: info.peer_id.to_string(),
                    connected: true,
                    trust_level: pipeline.book.level(&info.peer_id, now),
                    reputation: pipeline.book.reputation(&info.peer_id, now),
                    gossip_score: info.score,
                    accepted: record.map_or(0, |r| r.accepted),
                    rejected: record.map_or(0, |r| r.rejected),
                    first_seen: record.map(|r| r.first_seen),
                    addresses: info.addresses.iter().map(ToString::to_string).collect(),
                }
            })
            .collect();
        let connected: HashSet<PeerId> = live.iter().map(|i| i.peer_id).collect();
        for (peer, record) in pipeline.book.iter().filter(|(p, _)| !connected.contains(p)) {
            views.push(PeerView {
                peer_id: peer.to_string(),
                connected: false,
                trust_level: pipeline.book.level(peer, now),
                reputation: pipeline.book.reputation(peer, now),
                gossip_score: None,
                accepted: record.accepted,
                rejected: record.rejected,
                first_seen: Some(record.first_seen),
                addresses: Vec::new(),
            });
        }
        views
    }

    /// Ingests one message as if it had arrived over gossip (benchmarks and tests use this to
    /// drive the pipeline without a network).
    pub fn ingest_bytes(&self, bytes: &[u8], source: &PeerId, topic: &str) -> Outcome {
        let now = now_ms();
        let (kind, outcome) =
            self.through_pipeline(|p| p.ingest(bytes, source, source, topic, now, &self.inner.metrics));
        ingest::count(&self.inner.metrics, topic, kind, outcome);
        outcome
    }

    /// Runs `f` on the pipeline under its lock, then hands the work it left to the memory
    /// worker once the lock is released.
    fn through_pipeline<T>(&self, f: impl FnOnce(&mut Pipeline) -> T) -> T {
        let (result, effects) = {
            let mut pipeline = lock(&self.inner.pipeline);
            let result = f(&mut pipeline);
            (result, pipeline.take_effects())
        };
        if !effects.is_empty() {
            self.dispatch(effects);
        }
        result
    }

    async fn ingest_loop(self, mut events: mpsc::Receiver<Event>) {
        while let Some(event) = events.recv().await {
            match event {
                Event::Message { id, propagation_source, source, topic, data } => {
                    let started = Instant::now();
                    let now = now_ms();
                    let (kind, outcome) = match source {
                        Some(source) => self.through_pipeline(|p| {
                            p.ingest(&data, &source, &propagation_source, &topic, now, &self.inner.metrics)
                        }),
                        // Strict validation signs every message; an unsigned one is malformed.
                        None => (None, Outcome::Protocol(Reason::Malformed)),
                    };
                    ingest::count(&self.inner.metrics, &topic, kind, outcome);
                    self.inner.metrics.ingest_seconds.observe(started.elapsed().as_secs_f64());
                    if let Some(source) = source {
                        // An error only means nobody is observing.
                        let _ = self.inner.activity.send(Activity::Message { source, kind, outcome });
                    }
                    if let Err(error) = self.inner.net.report(id, propagation_source, outcome.acceptance()).await {
                        tracing::debug!(%error, "could not report a verdict");
                    }
                    if outcome == Outcome::Accepted {
                        tracing::debug!(?kind, %topic, "ingested");
                    } else {
                        tracing::debug!(?kind, %topic, outcome = outcome.label(), "refused");
                    }
                }
                Event::PeerConnected(peer) => {
                    lock(&self.inner.connected).insert(peer);
                    let _ = self.inner.activity.send(Activity::Connected(peer));
                    let score = lock(&self.inner.pipeline).book.application_score(&peer, now_ms());
                    let _ = self.inner.net.set_application_score(peer, score).await;
                    self.request_sync(peer);
                }
                Event::PeerDisconnected(peer) => {
                    lock(&self.inner.connected).remove(&peer);
                }
                Event::NewListenAddr(addr) => tracing::info!(%addr, "listening"),
                Event::SyncRequest { peer, request, channel } => {
                    self.question(sync::Question { peer, request, channel });
                }
            }
        }
    }

    async fn maintenance_loop(self) {
        let mut tick = tokio::time::interval(MAINTENANCE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = now_ms();
            let connected: Vec<PeerId> = lock(&self.inner.connected).iter().copied().collect();
            let scores: Vec<(PeerId, f64)> = {
                let mut pipeline = lock(&self.inner.pipeline);
                pipeline.persist_peers();
                self.inner.memory.set_network_cortisol(pipeline.weather.override_level(now));
                pipeline.refresh_gauges(now, &self.inner.metrics);
                pipeline.count_peers(connected.iter(), now, &self.inner.metrics);
                connected.iter().map(|p| (*p, pipeline.book.application_score(p, now))).collect()
            };
            for (peer, score) in scores {
                let _ = self.inner.net.set_application_score(peer, score).await;
            }
            self.observe_market().await;
        }
    }
}
