//! `druse-mgmt`: run a management node, or drive a running one: endorse, revoke, weather,
//! ban, attest, bounty, census.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use druse_management::Management;
use druse_management::api::{AttestRequest, BanRequest, BountyRequest, EndorseRequest, Endorsed, WeatherRequest};
use druse_node::cli::{self, ApiArgs, RunArgs, print_json};
use druse_node::skill::Published;
use druse_node::skill::folder::Located;
use druse_node::{Role, daemon};
use druse_protocol::body::{EndorsementVerdict, TrustLevel};
use druse_protocol::{ContentId, Keypair};
use serde_json::Value;

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

/// Where a management node keeps its data unless told otherwise.
const DEFAULT_DATA_DIR: &str = "./druse-mgmt-data";

/// Flags that reach a running management node's API (its defaults differ from an edge's).
#[derive(Debug, Clone, clap::Args)]
struct MgmtApi {
    /// The management node's API.
    #[arg(long, env = "DRUSE_MGMT_API", default_value = "http://127.0.0.1:7710", global = true)]
    api: String,
    /// Bearer token (default: read from the data directory).
    #[arg(long, env = "DRUSE_API_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// The management node's data directory, to read its API token from (the same flag as
    /// `run`'s; `--node-data-dir` is its older name).
    #[arg(long = "data-dir", alias = "node-data-dir", env = "DRUSE_MGMT_DATA_DIR", default_value = DEFAULT_DATA_DIR, global = true)]
    data_dir: PathBuf,
}

impl From<MgmtApi> for ApiArgs {
    fn from(m: MgmtApi) -> Self {
        ApiArgs { api: m.api, token: m.token, data_dir: m.data_dir }
    }
}

#[derive(Debug, Parser)]
#[command(name = "druse-mgmt", version, about = "A druse management node")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the management node until SIGTERM or Ctrl-C.
    Run(RunArgs),
    /// Create a management key file (mode 0600); print the public key for trust lists.
    Keygen {
        #[arg(long, default_value = "./druse-mgmt-data/node.key")]
        out: PathBuf,
    },
    /// Endorse a skill the management node holds; prints what the skill scanner finds in it,
    /// and refuses a skill with a high finding unless `--despite-findings`.
    Endorse {
        content_id: ContentId,
        #[arg(long, default_value = "")]
        note: String,
        /// Endorse even when the scanner finds something high.
        #[arg(long)]
        despite_findings: bool,
        #[command(flatten)]
        api: MgmtApi,
    },
    /// Revoke an endorsement.
    Revoke {
        content_id: ContentId,
        #[arg(long, default_value = "")]
        note: String,
        #[command(flatten)]
        api: MgmtApi,
    },
    /// Broadcast cortisol weather (level 0 lifts it).
    Weather {
        #[arg(long)]
        level: f64,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
        duration: Duration,
        #[arg(long, default_value = "")]
        reason: String,
        #[command(flatten)]
        api: MgmtApi,
    },
    /// Ban a peer (public key or PeerId).
    Ban {
        peer: String,
        #[arg(long, default_value = "")]
        reason: String,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
        duration: Duration,
        #[command(flatten)]
        api: MgmtApi,
    },
    /// Attest a peer's trust level (public key or PeerId).
    Attest {
        peer: String,
        #[arg(long, value_parser = parse_level)]
        level: TrustLevel,
        #[arg(long, default_value = "")]
        reason: String,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
        duration: Duration,
        #[command(flatten)]
        api: MgmtApi,
    },
    /// Post a bounty.
    Bounty {
        #[arg(long)]
        id: String,
        #[arg(long)]
        description: String,
        #[arg(long, value_delimiter = ',')]
        tags: Vec<String>,
        #[arg(long, default_value_t = 0.5)]
        priority: f64,
        #[arg(long, default_value_t = 1.0)]
        reward_multiplier: f64,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
        duration: Duration,
        #[command(flatten)]
        api: MgmtApi,
    },
    /// Every peer the management node knows (trust, reputation, listings held) and its health.
    Census {
        /// Print the raw JSON of `GET /v1/census` instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        api: MgmtApi,
    },
}

fn parse_level(text: &str) -> Result<TrustLevel, String> {
    serde_json::from_value(Value::String(text.to_owned()))
        .map_err(|_| format!("unknown trust level {text:?} (untrusted, provisional, trusted, verified)"))
}

async fn send<B: serde::Serialize>(api: MgmtApi, path: &str, body: &B) -> anyhow::Result<()> {
    let published: Published = ApiArgs::from(api).writer()?.post(path, body).await?;
    println!("{}", published.content_id);
    Ok(())
}

fn main() -> std::process::ExitCode {
    cli::block_on(async { cli::exit_code(run(Cli::parse()).await) })
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            let signals = daemon::Signals::listen().context("catching SIGTERM and Ctrl-C")?;
            cli::init_logging(args.log_format);
            // The management node's own defaults sit under the file and the flags, so it can
            // run beside an edge node on one machine.
            let mut base = cli::run_defaults();
            base.store.data_dir = PathBuf::from(DEFAULT_DATA_DIR);
            base.api.listen = ([127, 0, 0, 1], 7710).into();
            base.metrics.listen = ([127, 0, 0, 1], 9465).into();
            base.p2p.listen = vec!["/ip4/0.0.0.0/tcp/4010".parse()?, "/ip4/0.0.0.0/udp/4010/quic-v1".parse()?];
            let config = args.load_over(base).context("loading the config")?;
            let role = druse_management::config::Config::from_node(&config).context("loading the config")?;
            let every = role.weather_reannounce;
            daemon::run(config, Role::Management, signals, |node| match Management::new(node.clone(), role) {
                Ok(management) => {
                    management.spawn_reannounce(every);
                    druse_management::anomaly::spawn(&management);
                    management.spawn_auto_endorse();
                    druse_management::api::router(management)
                }
                Err(error) => {
                    tracing::error!(%error, "management role unavailable");
                    axum::Router::new()
                }
            })
            .await
            .context("running the management node")?;
        }
        Command::Keygen { out } => {
            println!("{}", cli::keygen(&out).map_err(anyhow::Error::msg)?);
            let key = Keypair::load(&out)?;
            println!("add this line to every node's trust list:\n{}  # druse-mgmt", key.public());
        }
        Command::Endorse { content_id, note, despite_findings, api } => {
            let api = ApiArgs::from(api);
            let path = format!("/v1/skills/{content_id}/findings");
            let findings: Vec<Located> = api.reader().get(&path).await?;
            for finding in &findings {
                println!("finding: {finding}");
            }
            let request = EndorseRequest { content_id, verdict: EndorsementVerdict::Endorse, note, despite_findings };
            let endorsed: Endorsed = api.writer()?.post("/v1/endorsements", &request).await?;
            println!("{}", endorsed.published.content_id);
        }
        Command::Revoke { content_id, note, api } => {
            let request =
                EndorseRequest { content_id, verdict: EndorsementVerdict::Revoke, note, despite_findings: false };
            send(api, "/v1/endorsements", &request).await?
        }
        Command::Weather { level, duration, reason, api } => {
            send(api, "/v1/weather", &WeatherRequest { level, duration, reason }).await?
        }
        Command::Ban { peer, reason, duration, api } => {
            send(api, "/v1/bans", &BanRequest { peer, reason, duration }).await?
        }
        Command::Attest { peer, level, reason, duration, api } => {
            send(api, "/v1/attestations", &AttestRequest { peer, level, reason, duration }).await?
        }
        Command::Bounty { id, description, tags, priority, reward_multiplier, duration, api } => {
            let request = BountyRequest { id, description, tags, priority, reward_multiplier, duration };
            send(api, "/v1/bounties", &request).await?
        }
        Command::Census { json, api } => {
            let census: Value = ApiArgs::from(api).reader().get("/v1/census").await?;
            if json {
                print_json(&census);
            } else {
                let census: druse_management::census::Census =
                    serde_json::from_value(census).context("reading the census")?;
                print!("{}", druse_management::census::table(&census));
            }
        }
    }
    Ok(())
}
