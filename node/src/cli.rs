//! Command-line pieces shared by `druse-node` and `druse-mgmt`: the flags that override the
//! config file, the flags that reach a running node, and logging.

pub mod agent;
pub mod skill_folder;

use std::net::SocketAddr;
use std::path::PathBuf;

use druse_protocol::net::Multiaddr;

use crate::client::Client;
use crate::config::{self, Config};

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Flags of `run`; each overrides the config file and has a `DRUSE_*` variable.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// TOML config file.
    #[arg(long, env = "DRUSE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory (key, API token, database).
    #[arg(long, env = "DRUSE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// P2P listen addresses, comma-separated.
    #[arg(long, env = "DRUSE_P2P_LISTEN", value_delimiter = ',')]
    pub listen: Vec<Multiaddr>,
    /// Bootstrap peers (`.../p2p/<peer id>`), comma-separated.
    #[arg(long, env = "DRUSE_BOOTSTRAP", value_delimiter = ',')]
    pub bootstrap: Vec<Multiaddr>,
    /// API listen address.
    #[arg(long, env = "DRUSE_API_LISTEN")]
    pub api_listen: Option<SocketAddr>,
    /// Metrics listen address.
    #[arg(long, env = "DRUSE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Trust list file of management keys.
    #[arg(long, env = "DRUSE_TRUST_LIST")]
    pub trust_list: Option<PathBuf>,
    /// Turn mDNS discovery on or off.
    #[arg(long, env = "DRUSE_MDNS")]
    pub mdns: Option<bool>,
    /// Gossipsub heartbeat, like `1s` or `100ms`.
    #[arg(long, env = "DRUSE_HEARTBEAT", value_parser = humantime::parse_duration)]
    pub heartbeat: Option<std::time::Duration>,
    /// Log format.
    #[arg(long, env = "DRUSE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Download all-MiniLM-L6-v2 into the data directory when no model folder is configured
    /// (`memory.embed.download`).
    #[arg(long, env = "DRUSE_MODEL_DOWNLOAD")]
    pub model_download: Option<bool>,
}

/// The defaults `druse-node run` and `druse-mgmt run` start from: `Config::default()` with the
/// MiniLM download on, so a node started by hand embeds by meaning. Library code and tests, which
/// build `Config::default()`, never reach the network.
pub fn run_defaults() -> Config {
    let mut config = Config::default();
    config.memory.embed.download = true;
    config
}

impl RunArgs {
    /// The config file (or [`run_defaults`]) with every given flag applied on top.
    pub fn load(&self) -> Result<Config, config::Error> {
        self.load_over(run_defaults())
    }

    /// Like [`RunArgs::load`], with `base` (a binary's own defaults) under the file.
    pub fn load_over(&self, base: Config) -> Result<Config, config::Error> {
        let mut config = match &self.config {
            Some(path) => Config::load_over(path, &base)?,
            None => base,
        };
        if let Some(dir) = &self.data_dir {
            config.store.data_dir = dir.clone();
        }
        if !self.listen.is_empty() {
            config.p2p.listen = self.listen.clone();
        }
        if !self.bootstrap.is_empty() {
            config.p2p.bootstrap = self.bootstrap.clone();
        }
        if let Some(addr) = self.api_listen {
            config.api.listen = addr;
        }
        if let Some(addr) = self.metrics_listen {
            config.metrics.listen = addr;
        }
        if let Some(path) = &self.trust_list {
            config.trust.trust_list = Some(path.clone());
        }
        if let Some(mdns) = self.mdns {
            config.p2p.mdns = mdns;
        }
        if let Some(heartbeat) = self.heartbeat {
            config.p2p.heartbeat = heartbeat;
        }
        if let Some(download) = self.model_download {
            config.memory.embed.download = download;
        }
        config.check()?;
        Ok(config)
    }
}

/// Flags that reach a running node's API.
#[derive(Debug, Clone, clap::Args)]
pub struct ApiArgs {
    /// The node's API.
    #[arg(long, env = "DRUSE_API", default_value = "http://127.0.0.1:7700", global = true)]
    pub api: String,
    /// Bearer token for write routes (default: read from the data directory).
    #[arg(long, env = "DRUSE_API_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// The node's data directory, to read its API token from (the same flag as `run`'s;
    /// `--node-data-dir` is its older name).
    #[arg(
        long = "data-dir",
        alias = "node-data-dir",
        env = "DRUSE_DATA_DIR",
        default_value = "./druse-data",
        global = true
    )]
    pub data_dir: PathBuf,
}

impl ApiArgs {
    /// A client that reads only.
    pub fn reader(&self) -> Client {
        Client::new(&self.api, None)
    }

    /// A client with the write token.
    pub fn writer(&self) -> Result<Client, crate::client::Error> {
        let token = match &self.token {
            Some(token) => token.clone(),
            None => Client::token_from(&self.data_dir)?,
        };
        Ok(Client::new(&self.api, Some(token)))
    }
}

/// Starts logging to stderr; `RUST_LOG` filters (default `info`, libp2p at `warn`).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,libp2p_kad=error,libp2p_gossipsub=error,libp2p_mdns=warn")
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Prints a value as pretty JSON.
pub fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(error) => eprintln!("cannot print the answer: {error}"),
    }
}

/// Runs a binary's async `main` on a multi-threaded tokio runtime (what `#[tokio::main]` builds),
/// after sizing the compute pool, before anything can use it
/// ([`druse_memory::embed::settle_compute_threads`]).
pub fn block_on<F: std::future::Future>(main: F) -> F::Output {
    druse_memory::embed::settle_compute_threads();
    // Proof of impossibility: building a runtime fails only when the OS refuses its threads or
    // its I/O driver, and a process that cannot have them cannot run at all.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("starting the tokio runtime");
    runtime.block_on(main)
}

/// A CLI's exit: success, or the error's whole chain on one line and status 1.
pub fn exit_code<E: std::fmt::Display>(result: Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Writes a new key file (never over an existing one) and returns the lines to print.
pub fn keygen(out: &std::path::Path) -> Result<String, String> {
    if out.exists() {
        return Err(format!("{} already exists; refusing to overwrite a key", out.display()));
    }
    let key = druse_protocol::Keypair::generate().map_err(|e| e.to_string())?;
    key.save(out).map_err(|e| e.to_string())?;
    Ok(format!("wrote {}\npeer_id    {}\npublic_key {}", out.display(), key.peer_id(), key.public()))
}

/// What `memory add` sends: the flags as a `POST /v1/memories` body. A turn in a `session`
/// without `turn_at` is said now (`now`); `turn_at` is Unix milliseconds or ISO 8601.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MemoryAdd {
    pub text: String,
    /// `episodic` or `user:<handle>`.
    #[arg(long, default_value = "episodic")]
    pub namespace: String,
    /// observation, interaction, exploration_note or summary.
    #[arg(long, default_value = "observation")]
    pub kind: String,
    #[arg(long)]
    pub subject: Option<String>,
    #[arg(long)]
    pub attribute: Option<String>,
    /// Seed 003's decay class (never, location, employment, long_term_goal, active_project,
    /// health, emotional_state, temporary_location, event_bound).
    #[arg(long)]
    pub decay_class: Option<String>,
    /// private, shared or public.
    #[arg(long, default_value = "private")]
    pub scope: String,
    /// The conversation this turn belongs to.
    #[arg(long)]
    pub session: Option<String>,
    /// When the turn was said: Unix milliseconds or ISO 8601 (default: now, with --session).
    #[arg(long)]
    pub turn_at: Option<String>,
    /// Your own id for this memory, returned with it.
    #[arg(long)]
    pub external_id: Option<String>,
}

impl MemoryAdd {
    /// The request body, or why the flags are wrong.
    pub fn body(&self, now: druse_protocol::UnixMillis) -> Result<serde_json::Value, String> {
        let mut body = serde_json::json!({
            "text": self.text, "namespace": self.namespace, "kind": self.kind, "scope": self.scope,
        });
        let optional = [
            ("subject", &self.subject),
            ("attribute", &self.attribute),
            ("decay_class", &self.decay_class),
            ("session", &self.session),
            ("external_id", &self.external_id),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                body[name] = serde_json::Value::String(value.clone());
            }
        }
        let turn_at = match &self.turn_at {
            Some(at) => Some(druse_memory::dates::parse(at).map_err(|e| format!("--turn-at: {e}"))?),
            None => self.session.as_ref().map(|_| now),
        };
        if let Some(at) = turn_at {
            body["turn_at"] = serde_json::Value::from(at);
        }
        Ok(body)
    }
}

/// What `memory search` asks: the flags as a `GET /v1/memories` path.
#[derive(Debug, Clone, Default)]
pub struct MemorySearch {
    pub query: String,
    pub k: usize,
    pub namespace: Option<String>,
    pub kind: Option<String>,
    pub session: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
}

impl MemorySearch {
    /// The request path, every value percent-encoded.
    pub fn path(&self) -> String {
        let mut path = format!("/v1/memories?q={}&k={}", percent_encode(&self.query), self.k);
        let optional = [
            ("namespace", &self.namespace),
            ("kind", &self.kind),
            ("session", &self.session),
            ("since", &self.since),
            ("until", &self.until),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                path.push_str(&format!("&{name}={}", percent_encode(value)));
            }
        }
        path
    }
}

/// Percent-encodes a query or path component.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod memory_flag_tests {
    use super::*;

    fn add(session: Option<&str>, turn_at: Option<&str>) -> MemoryAdd {
        MemoryAdd {
            text: "Melanie: I ran a charity race".into(),
            namespace: "user:mel".into(),
            kind: "interaction".into(),
            scope: "private".into(),
            session: session.map(str::to_owned),
            turn_at: turn_at.map(str::to_owned),
            ..MemoryAdd::default()
        }
    }

    #[test]
    fn memory_add_sends_session_and_turn_time_in_either_form() {
        let body = add(Some("s1"), Some("2023-05-08T13:56:00Z")).body(5).unwrap();
        assert_eq!(body["session"], "s1");
        assert_eq!(body["turn_at"], 1_683_554_160_000u64);
        assert_eq!(add(Some("s1"), Some("1683554160000")).body(5).unwrap()["turn_at"], 1_683_554_160_000u64);
        assert_eq!(add(Some("s1"), None).body(5).unwrap()["turn_at"], 5, "a session turn without a time is now");
        assert!(add(None, None).body(5).unwrap().get("turn_at").is_none());
        assert!(add(None, None).body(5).unwrap().get("subject").is_none());
    }

    #[test]
    fn memory_add_refuses_a_turn_time_it_cannot_read() {
        let error = add(Some("s1"), Some("last tuesday")).body(5).unwrap_err();
        assert!(error.contains("--turn-at"), "{error}");
    }

    #[test]
    fn memory_search_encodes_every_filter() {
        let search = MemorySearch {
            query: "when did she run?".into(),
            k: 5,
            namespace: Some("user:mel".into()),
            session: Some("s 1".into()),
            since: Some("2023-05-01".into()),
            ..MemorySearch::default()
        };
        assert_eq!(
            search.path(),
            "/v1/memories?q=when%20did%20she%20run%3F&k=5&namespace=user:mel&session=s%201&since=2023-05-01"
        );
    }
}

/// `druse-node model …`: the embedding model, fetched by hand.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ModelCommand {
    /// Download all-MiniLM-L6-v2 from the Hugging Face hub (or the mirror HF_ENDPOINT names) into
    /// the data directory and check it against its pinned sha256; prints the model folder. A node
    /// started on that data directory then embeds with it, without downloading.
    Fetch {
        /// The node's data directory.
        #[arg(long, env = "DRUSE_DATA_DIR", default_value = "./druse-data")]
        data_dir: PathBuf,
        /// Give up when the hub has not answered within this long.
        #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
        connect_timeout: std::time::Duration,
        /// Give up when the download has not finished within this long.
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
}

impl ModelCommand {
    /// Runs the command; returns the folder that holds the verified model.
    pub async fn run(self) -> Result<PathBuf, String> {
        use druse_memory::embed::fetch;
        use std::io::IsTerminal;
        let Self::Fetch { data_dir, connect_timeout, timeout } = self;
        let mut job = fetch::Fetch::new(&data_dir, std::env::var(fetch::ENDPOINT_ENV).ok());
        job.connect_timeout = connect_timeout;
        job.timeout = timeout;
        job.progress = std::io::stderr().is_terminal();
        eprintln!(
            "fetching {} at revision {} from {} into {}",
            fetch::REPO,
            fetch::REVISION,
            job.endpoint,
            job.model_dir().display()
        );
        let fetched = tokio::task::spawn_blocking(move || job.fetch())
            .await
            .map_err(|e| format!("the fetch task failed: {e}"))?;
        fetched.map_err(|error| format!("{error}\nTo fix it, {}.", fetch::FETCH_HINT))
    }
}
