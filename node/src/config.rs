//! Node configuration: a TOML file with one section per component, overridden by flags and
//! `DRUSE_*` environment variables. `Config::default()` is a working single-machine node.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use druse_protocol::body::TrustLevel;
use druse_protocol::net::Multiaddr;
use serde::{Deserialize, Serialize};

pub use druse_agent::config::{AgentBluesky, AgentLlm, Config as Agent, LongPosts, OutcomeSource};

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("reading config {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config: {0}")]
    Invalid(String),
}

impl From<druse_agent::config::Invalid> for Error {
    fn from(invalid: druse_agent::config::Invalid) -> Self {
        Self::Invalid(invalid.0)
    }
}

/// The whole node configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub p2p: P2p,
    pub trust: Trust,
    pub store: Store,
    pub memory: Memory,
    pub market: Market,
    pub api: Api,
    pub metrics: Metrics,
    pub agent: Agent,
    /// The `[management]` table, kept unread: `druse-mgmt` reads and checks it
    /// (`druse_management::config`); an edge node ignores it, so both can share a file.
    pub management: toml::Table,
}

/// How the node joins the swarm.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct P2p {
    /// Listen addresses (TCP and QUIC).
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start, each ending in `/p2p/<peer id>`.
    pub bootstrap: Vec<Multiaddr>,
    /// Find peers on the local network.
    pub mdns: bool,
    /// Gossipsub heartbeat.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    /// Most connections at once.
    pub max_connections: u32,
    /// Peers the node keeps connections to: at a tenth more (at least two) it refuses inbound
    /// connections and closes the least useful; below it, it dials peers it has heard of, up
    /// to a third of it, and leaves the rest to peers that dial in. At most
    /// `max_connections`; unset, 32 or `max_connections` if that is lower.
    pub target_peers: Option<u32>,
    /// Gossipsub 1.2's IDONTWANT for messages over 1000 bytes (on by default).
    pub idontwant: bool,
    /// Gossipsub's mesh degree D, 2 to 16: the peers each message is forwarded to, per topic
    /// (6, gossipsub's default). Fewer copies and less CPU a message for one or two more hops.
    pub mesh_degree: usize,
    /// Holds every listing-mesh peer to a delivery quota (gossipsub's P3), so peers that take
    /// listings and forward none lose their mesh slots. Off by default: where listings are
    /// quiet for 30 s, honest peers are pruned too. For swarms where listings flow all the time.
    pub delivery_quota: bool,
}

impl Default for P2p {
    fn default() -> Self {
        let net = druse_protocol::net::Config::default();
        Self {
            listen: net.listen,
            bootstrap: net.bootstrap,
            mdns: net.mdns,
            heartbeat: net.heartbeat,
            max_connections: net.max_established,
            target_peers: None,
            idontwant: net.idontwant,
            mesh_degree: net.mesh_degree,
            delivery_quota: net.delivery_quota,
        }
    }
}

/// Whom the node trusts, and the ingestion limits of DESIGN §5.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Trust {
    /// A trust list file: one management public key per line, `#` comments.
    pub trust_list: Option<PathBuf>,
    /// Management public keys given inline (hex, base64 or PeerId).
    pub management_keys: Vec<String>,
    /// Peers whose trust level the operator fixes, by PeerId.
    pub pins: BTreeMap<String, TrustLevel>,
    /// Oldest `issued_at` accepted.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    /// Furthest-future `issued_at` accepted.
    #[serde(with = "humantime_serde")]
    pub max_skew: Duration,
    /// Listings one peer may originate per `rate_window`.
    pub listings_per_window: u32,
    /// Reports one peer may originate per `rate_window`.
    pub reports_per_window: u32,
    #[serde(with = "humantime_serde")]
    pub rate_window: Duration,
    /// Endorsements kept while their skill has not arrived yet.
    pub pending_endorsements: usize,
    /// How long a pending endorsement waits for its skill.
    #[serde(with = "humantime_serde")]
    pub pending_endorsement_ttl: Duration,
}

impl Default for Trust {
    fn default() -> Self {
        Self {
            trust_list: None,
            management_keys: Vec::new(),
            pins: BTreeMap::new(),
            max_age: Duration::from_secs(300),
            max_skew: Duration::from_secs(60),
            listings_per_window: 10,
            reports_per_window: 60,
            rate_window: Duration::from_secs(60),
            pending_endorsements: 1024,
            pending_endorsement_ttl: Duration::from_secs(3600),
        }
    }
}

/// Where the node keeps its data.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Store {
    /// Holds the key, the API token and the database.
    pub data_dir: PathBuf,
    /// The store's block cache, in bytes (filled only as data is read).
    pub cache_bytes: u64,
}

impl Default for Store {
    fn default() -> Self {
        Self { data_dir: PathBuf::from("./druse-data"), cache_bytes: 128 * 1024 * 1024 }
    }
}

/// The memory engine: its embedder, and the seeds' numbers for decay, hormones,
/// supersession and consolidation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Memory {
    /// How often consolidation runs.
    #[serde(with = "humantime_serde")]
    pub consolidation_interval: Duration,
    pub embed: druse_memory::embed::Config,
    pub decay: druse_memory::decay::Config,
    pub hormones: druse_memory::hormones::Config,
    pub correction: druse_memory::correction::Config,
    pub consolidation: druse_memory::consolidation::Config,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            consolidation_interval: Duration::from_secs(30 * 60),
            embed: Default::default(),
            decay: Default::default(),
            hormones: Default::default(),
            correction: Default::default(),
            consolidation: Default::default(),
        }
    }
}

impl Memory {
    /// The engine's part of this section.
    pub fn engine(&self) -> druse_memory::engine::Config {
        druse_memory::engine::Config {
            decay: self.decay.clone(),
            hormones: self.hormones.clone(),
            correction: self.correction.clone(),
            consolidation: self.consolidation.clone(),
        }
    }
}

/// The marketplace (seed 004's pricing and quality gate, DESIGN §9).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Market {
    /// Base price of a listed skill, in USDC.
    pub base_price_usdc: f64,
    /// Weight of ln(adopters + bounty matches + 1) in the demand multiplier.
    pub demand_weight: f64,
    /// Scarcity multiplier of a skill with no similar skill known.
    pub rare_multiplier: f64,
    /// Scarcity multiplier of a skill with at most `uncommon_max_similar` similar skills.
    pub uncommon_multiplier: f64,
    pub uncommon_max_similar: usize,
    /// Cosine similarity at which another skill counts as similar.
    pub similar_cosine: f32,
    /// Successful executions a skill needs before it may be listed, each reporter's counted
    /// up to 2 (see `druse_protocol::pricing::QualityGate`).
    pub min_executions: u64,
    /// Success rate a skill needs before it may be listed.
    pub min_success_rate: f64,
    /// Weight of the vouched reporters with a success a skill needs before it may be listed
    /// (1.0: one verified reporter or two trusted ones; see `market::Weights`).
    pub min_reporter_weight: f64,
    /// Executions one reporter can contribute to one skill's stats.
    pub reports_per_reporter: u64,
    /// Fraction of a bounty's words a skill must contain to match it without a shared tag.
    pub bounty_text_overlap: f64,
    /// Curiosity a bounty match adds to the matched skill's crystal.
    pub bounty_curiosity_boost: f64,
    /// Credits a new node starts with, in micro-USDC.
    pub starting_credits: u64,
}

impl Default for Market {
    fn default() -> Self {
        let d = crate::market::Config::default();
        Self {
            base_price_usdc: d.price.base_usdc,
            demand_weight: d.price.demand_weight,
            rare_multiplier: d.price.rare,
            uncommon_multiplier: d.price.uncommon,
            uncommon_max_similar: d.price.uncommon_max_similar,
            similar_cosine: d.similar_cosine,
            min_executions: d.gate.min_executions,
            min_success_rate: d.gate.min_success_rate,
            min_reporter_weight: d.gate.min_reporter_weight,
            reports_per_reporter: d.reports_per_reporter,
            bounty_text_overlap: d.bounty_text_overlap,
            bounty_curiosity_boost: d.bounty_curiosity_boost,
            starting_credits: d.starting_credits,
        }
    }
}

impl Market {
    /// The market engine's config.
    pub fn engine(&self) -> crate::market::Config {
        let d = crate::market::Config::default();
        crate::market::Config {
            price: druse_protocol::pricing::PriceConfig {
                base_usdc: self.base_price_usdc,
                demand_weight: self.demand_weight,
                rare: self.rare_multiplier,
                uncommon: self.uncommon_multiplier,
                rare_max_similar: d.price.rare_max_similar,
                uncommon_max_similar: self.uncommon_max_similar,
            },
            gate: druse_protocol::pricing::QualityGate {
                min_executions: self.min_executions,
                min_success_rate: self.min_success_rate,
                min_reporter_weight: self.min_reporter_weight,
                runs_per_reporter: d.gate.runs_per_reporter,
            },
            reports_per_reporter: self.reports_per_reporter,
            similar_cosine: self.similar_cosine,
            bounty_text_overlap: self.bounty_text_overlap,
            bounty_curiosity_boost: self.bounty_curiosity_boost,
            starting_credits: self.starting_credits,
            ..d
        }
    }
}

/// The HTTP API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Api {
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl Default for Api {
    fn default() -> Self {
        Self { listen: SocketAddr::from(([127, 0, 0, 1], 7700)), max_body_bytes: 256 * 1024 }
    }
}

/// The Prometheus endpoint (also served at the API's `/metrics`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    pub listen: SocketAddr,
}

impl Default for Metrics {
    fn default() -> Self {
        Self { listen: SocketAddr::from(([127, 0, 0, 1], 9464)) }
    }
}

impl Config {
    /// Reads a TOML file; unknown keys are an error that names them.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
        Self::parse(&text).map_err(|message| Error::Parse { path: path.to_owned(), message })
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Reads a TOML file whose keys override `base` (a binary's own defaults) rather than
    /// `Config::default()`.
    pub fn load_over(path: &Path, base: &Config) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
        Self::parse_over(&text, base).map_err(|message| Error::Parse { path: path.to_owned(), message })
    }

    /// Parses TOML text whose keys override `base`; unknown keys are still errors.
    pub fn parse_over(text: &str, base: &Config) -> Result<Self, String> {
        fn merge(into: &mut toml::Value, from: toml::Value) {
            match (into, from) {
                (toml::Value::Table(into), toml::Value::Table(from)) => {
                    for (key, value) in from {
                        match into.get_mut(&key) {
                            Some(existing) => merge(existing, value),
                            None => {
                                into.insert(key, value);
                            }
                        }
                    }
                }
                (into, from) => *into = from,
            }
        }
        // Parsed on its own first, so a bad or unknown key is reported with its line.
        Self::parse(text)?;
        let mut merged = toml::Value::try_from(base).map_err(|e| format!("encoding the defaults: {e}"))?;
        let file: toml::Value = toml::from_str(text).map_err(|e| e.to_string())?;
        merge(&mut merged, file);
        merged.try_into().map_err(|e: toml::de::Error| e.to_string())
    }

    /// The node's key file.
    pub fn key_path(&self) -> PathBuf {
        self.store.data_dir.join("node.key")
    }

    /// The API token file.
    pub fn token_path(&self) -> PathBuf {
        self.store.data_dir.join("api.token")
    }

    /// The full-text index directory (derived from the database; safe to delete). The vector
    /// index's graphs are beside it, in `vectors/` (`druse_memory::engine::vectors_dir`).
    pub fn index_path(&self) -> PathBuf {
        self.store.data_dir.join("index")
    }

    /// Where earlier versions kept a sled database (the agent's state; before that,
    /// everything): read once, on the first start of this version, to move it into the store,
    /// then removed.
    pub fn sled_path(&self) -> PathBuf {
        self.store.data_dir.join("db")
    }

    /// The store (fjall 3): skills, peers, the market, kept envelopes, the memory engine's
    /// records and the agent's state.
    pub fn store_path(&self) -> PathBuf {
        self.store.data_dir.join("store")
    }

    /// The network layer's config.
    pub fn net(&self) -> druse_protocol::net::Config {
        let defaults = druse_protocol::net::Config::default();
        druse_protocol::net::Config {
            listen: self.p2p.listen.clone(),
            bootstrap: self.p2p.bootstrap.clone(),
            mdns: self.p2p.mdns,
            heartbeat: self.p2p.heartbeat,
            max_established: self.p2p.max_connections,
            // Unset, the network layer's default, unless the connection limit is lower.
            target_peers: self.p2p.target_peers.unwrap_or(defaults.target_peers).min(self.p2p.max_connections),
            idontwant: self.p2p.idontwant,
            mesh_degree: self.p2p.mesh_degree,
            delivery_quota: self.p2p.delivery_quota,
            ..defaults
        }
    }

    /// The validator's config.
    pub fn validator(&self) -> druse_protocol::validate::Config {
        use druse_protocol::validate::Rate;
        let per_ms = self.trust.rate_window.as_millis() as u64;
        druse_protocol::validate::Config {
            max_age_ms: self.trust.max_age.as_millis() as u64,
            max_skew_ms: self.trust.max_skew.as_millis() as u64,
            listing_rate: Rate { count: self.trust.listings_per_window, per_ms },
            report_rate: Rate { count: self.trust.reports_per_window, per_ms },
            ..druse_protocol::validate::Config::default()
        }
    }

    /// Checks what TOML types cannot.
    pub fn check(&self) -> Result<(), Error> {
        if self.p2p.heartbeat.is_zero() {
            return Err(Error::Invalid("p2p.heartbeat must be positive".into()));
        }
        let degrees = druse_protocol::net::MESH_DEGREES;
        if !degrees.contains(&self.p2p.mesh_degree) {
            return Err(Error::Invalid(format!(
                "p2p.mesh_degree must be between {} and {}, not {}",
                degrees.start(),
                degrees.end(),
                self.p2p.mesh_degree
            )));
        }
        if let Some(target) = self.p2p.target_peers
            && (target == 0 || target > self.p2p.max_connections)
        {
            return Err(Error::Invalid(format!(
                "p2p.target_peers must be between 1 and p2p.max_connections ({}), not {target}",
                self.p2p.max_connections
            )));
        }
        if !(0.0..=1.0).contains(&self.market.min_success_rate) {
            return Err(Error::Invalid("market.min_success_rate must be in [0, 1]".into()));
        }
        if !(self.market.min_reporter_weight.is_finite() && self.market.min_reporter_weight >= 0.0) {
            return Err(Error::Invalid("market.min_reporter_weight must be a weight ≥ 0".into()));
        }
        if !(self.market.base_price_usdc.is_finite() && self.market.base_price_usdc >= 0.0) {
            return Err(Error::Invalid("market.base_price_usdc must be a non-negative number".into()));
        }
        if !(0.0..=1.0).contains(&self.market.bounty_text_overlap) {
            return Err(Error::Invalid("market.bounty_text_overlap must be in [0, 1]".into()));
        }
        if !(-1.0..=1.0).contains(&self.market.similar_cosine) {
            return Err(Error::Invalid("market.similar_cosine must be in [-1, 1]".into()));
        }
        if self.market.reports_per_reporter == 0 {
            return Err(Error::Invalid("market.reports_per_reporter must be positive".into()));
        }
        if self.trust.rate_window.is_zero() {
            return Err(Error::Invalid("trust.rate_window must be positive".into()));
        }
        self.agent.check()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_default_config() {
        let config = Config::parse("").unwrap();
        assert_eq!(config.api.listen, Config::default().api.listen);
        assert_eq!(config.metrics.listen.port(), 9464);
        assert!(config.p2p.mdns);
        assert_eq!(config.store.data_dir, PathBuf::from("./druse-data"));
    }

    #[test]
    fn durations_are_human_readable() {
        let config =
            Config::parse("[memory]\nconsolidation_interval = \"45m\"\n[p2p]\nheartbeat = \"250ms\"\n").unwrap();
        assert_eq!(config.memory.consolidation_interval, Duration::from_secs(45 * 60));
        assert_eq!(config.p2p.heartbeat, Duration::from_millis(250));
    }

    #[test]
    fn unknown_keys_are_an_error_that_names_them() {
        let err = Config::parse("[api]\nlisten = \"127.0.0.1:1\"\nlisten_port = 3\n").unwrap_err();
        assert!(err.contains("listen_port"), "{err}");
        assert!(Config::parse("[nonsense]\n").is_err());
    }

    #[test]
    fn every_sample_config_in_deploy_loads() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&deploy).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let config = Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                config.check().unwrap();
                loaded += 1;
            }
        }
        assert!(loaded >= 2, "expected the edge and management samples in {}", deploy.display());
    }

    #[test]
    fn the_peer_target_is_checked_against_the_connection_limit() {
        let config = Config::parse("[p2p]\ntarget_peers = 12\n").unwrap();
        config.check().unwrap();
        assert_eq!(config.net().target_peers, 12);
        assert_eq!(Config::default().net().target_peers, 32);
        // Unset, the target follows a lower connection limit instead of refusing it.
        let capped = Config::parse("[p2p]\nmax_connections = 16\n").unwrap();
        capped.check().unwrap();
        assert_eq!(capped.net().target_peers, 16);
        for bad in ["target_peers = 0", "max_connections = 16\ntarget_peers = 17"] {
            let err = Config::parse(&format!("[p2p]\n{bad}\n")).unwrap().check().unwrap_err().to_string();
            assert!(err.contains("p2p.target_peers"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_mesh_degree_reaches_the_network_layer_and_is_bounded() {
        assert_eq!(Config::default().net().mesh_degree, 6);
        let four = Config::parse("[p2p]\nmesh_degree = 4\n").unwrap();
        four.check().unwrap();
        assert_eq!(four.net().mesh_degree, 4);
        for bad in [1, 17] {
            let err = Config::parse(&format!("[p2p]\nmesh_degree = {bad}\n")).unwrap().check().unwrap_err().to_string();
            assert!(err.contains("p2p.mesh_degree must be between 2 and 16"), "{bad}: {err}");
        }
    }

    #[test]
    fn pins_name_trust_levels() {
        let config = Config::parse("[trust.pins]\n\"12D3KooWabc\" = \"trusted\"\n").unwrap();
        assert_eq!(config.trust.pins.get("12D3KooWabc"), Some(&TrustLevel::Trusted));
        assert!(Config::parse("[trust.pins]\n\"x\" = \"emperor\"\n").is_err());
    }

    #[test]
    fn a_file_overrides_only_its_own_keys_of_a_binarys_defaults() {
        let mut base = Config::default();
        base.api.listen = ([127, 0, 0, 1], 7710).into();
        base.store.data_dir = "./druse-mgmt-data".into();
        assert_eq!(Config::parse_over("", &base).unwrap().api.listen, base.api.listen);
        let config =
            Config::parse_over("[management.endorsement]\nauto = true\n[metrics]\nlisten = \"127.0.0.1:1\"\n", &base)
                .unwrap();
        assert_eq!(config.management["endorsement"]["auto"].as_bool(), Some(true), "the management table is kept");
        assert_eq!(config.api.listen, base.api.listen, "a key the file does not name keeps the base value");
        assert_eq!(config.store.data_dir, base.store.data_dir);
        assert_eq!(config.metrics.listen, ([127, 0, 0, 1], 1).into());
        let err = Config::parse_over("[api]\ncolour = \"red\"\n", &base).unwrap_err();
        assert!(err.contains("colour"), "{err}");
    }

    fn enabled_agent() -> String {
        "[agent]\nenabled = true\n[agent.bluesky]\nservice = \"http://localhost:2583\"\nhandle = \"agent.test\"\n\
         owner = \"owner.test\"\n[agent.llm]\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodel = \"m\"\n"
            .to_owned()
    }

    #[test]
    fn the_agent_is_off_by_default_with_the_seeds_numbers() {
        let config = Config::parse("").unwrap();
        let a = &config.agent;
        assert!(!a.enabled && !a.musing);
        assert_eq!(a.poll_interval, Duration::from_secs(10));
        assert_eq!((a.per_author_replies, a.per_author_window), (30, Duration::from_secs(3600)));
        assert_eq!((a.concurrent_batches, a.max_tool_steps), (3, 6));
        config.check().unwrap();
        let config = Config::parse(&enabled_agent()).unwrap();
        config.check().unwrap();
        assert_eq!(config.agent.bluesky.password_env, "DRUSE_AGENT_BSKY_PASSWORD");
    }

    #[test]
    fn a_bad_or_missing_agent_setting_is_refused_by_name() {
        let base = Config::parse(&enabled_agent()).unwrap();
        let cases = [
            ("[agent.bluesky]\nservice = \"\"\n", "agent.bluesky.service"),
            ("[agent.bluesky]\nhandle = \"not a handle\"\n", "agent.bluesky.handle"),
            ("[agent.bluesky]\nowner = \"\"\n", "agent.bluesky.owner"),
            ("[agent.bluesky]\npassword_env = \"MY PASSWORD\"\n", "agent.bluesky.password_env"),
            ("[agent.llm]\nbase_url = \"localhost:11434\"\n", "agent.llm.base_url"),
            ("[agent.llm]\nmodel = \" \"\n", "agent.llm.model"),
            ("[agent.llm]\nmax_tokens = 0\n", "agent.llm.max_tokens"),
            ("[agent.llm]\ntimeout = \"0s\"\n", "agent.llm.timeout"),
            ("[agent]\nmax_tool_steps = 7\n", "agent.max_tool_steps"),
            ("[agent]\nper_author_replies = 0\n", "agent.per_author_replies"),
            ("[agent]\nreflection_hour = 24\n", "agent.reflection_hour"),
            ("[agent]\nconcurrent_batches = 0\n", "agent.concurrent_batches"),
        ];
        for (extra, key) in cases {
            let config = Config::parse_over(extra, &base).unwrap_or_else(|e| panic!("{extra}: {e}"));
            let err = config.check().expect_err(extra).to_string();
            assert!(err.contains(key), "{extra}: {err}");
        }
        let off = Config::parse_over("[agent]\nreflection_hour = \"off\"\n", &base).unwrap();
        assert_eq!(off.agent.reflection_hour, None, "\"off\" turns the daily reflection off");
        off.check().unwrap();
        let err = Config::parse_over("[agent]\nreflection_hour = \"noon\"\n", &base).unwrap_err();
        assert!(err.contains("reflection_hour") && err.contains("\"off\""), "a word other than off: {err}");
        let err = Config::parse("[agent]\nenabled = true\n[agent.bluesky]\nhandle = \"agent.test\"\n")
            .unwrap()
            .check()
            .unwrap_err()
            .to_string();
        assert!(err.contains("agent.bluesky.service"), "a missing setting is named: {err}");
        // Without a handle the agent is chat-only: it needs a model, and no account.
        let err = Config::parse("[agent]\nenabled = true\n").unwrap().check().unwrap_err().to_string();
        assert!(err.contains("agent.llm.base_url"), "a chat-only agent still needs its model: {err}");
        let chat_only = Config::parse(
            "[agent]\nenabled = true\n[agent.llm]\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"\n",
        )
        .unwrap();
        chat_only.check().expect("an agent without a Bluesky account answers its operator alone");
        assert!(chat_only.agent.chat_only());
        let err = Config::parse("[agent.llm]\napi_key = \"sk-secret\"\n").unwrap_err();
        assert!(err.contains("api_key"), "a key in the file itself is an unknown field: {err}");
    }
}
