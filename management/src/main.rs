//! `druse-mgmt`: run a management node, or drive a running one: endorse, revoke, weather,
//! ban, attest, bounty, census.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use druse_management::Management;
use druse_management::api::{AttestRequest, BanRequest, BountyRequest, EndorseRequest, WeatherRequest};
use druse_node::api::Published;
use druse_node::cli::{self, ApiArgs, RunArgs, print_json};
use druse_node::{Role, daemon};
use druse_protocol::body::{EndorsementVerdict, TrustLevel};
use druse_protocol::{ContentId, Keypair};
use serde_json::Value;

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
    /// Endorse a skill the management node holds.
    Endorse {
        content_id: ContentId,
        #[arg(long, default_value = "")]
        note: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Revoke an endorsement.
    Revoke {
        content_id: ContentId,
        #[arg(long, default_value = "")]
        note: String,
        #[command(flatten)]
        api: ApiArgs,
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
        api: ApiArgs,
    },
    /// Ban a peer (public key or PeerId).
    Ban {
        peer: String,
        #[arg(long, default_value = "")]
        reason: String,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "24h")]
        duration: Duration,
        #[command(flatten)]
        api: ApiArgs,
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
        api: ApiArgs,
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
        api: ApiArgs,
    },
    /// The peers the management node knows, with their trust levels.
    Census {
        #[command(flatten)]
        api: ApiArgs,
    },
}

fn parse_level(text: &str) -> Result<TrustLevel, String> {
    serde_json::from_value(Value::String(text.to_owned()))
        .map_err(|_| format!("unknown trust level {text:?} (untrusted, provisional, trusted, verified)"))
}

async fn send<B: serde::Serialize>(api: &ApiArgs, path: &str, body: &B) -> anyhow::Result<()> {
    let published: Published = api.writer()?.post(path, body).await?;
    println!("{}", published.content_id);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            cli::init_logging(args.log_format);
            let mut config = args.load().context("loading the config")?;
            if args.data_dir.is_none() && args.config.is_none() {
                config.store.data_dir = PathBuf::from("./druse-mgmt-data");
            }
            let every = config.management.weather_reannounce;
            daemon::run(config, Role::Management, |node| match Management::new(node.clone()) {
                Ok(management) => {
                    management.spawn_reannounce(every);
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
            anyhow::ensure!(!out.exists(), "{} already exists; refusing to overwrite a key", out.display());
            let key = Keypair::generate()?;
            key.save(&out)?;
            println!("wrote {}\npeer_id    {}\npublic_key {}", out.display(), key.peer_id(), key.public());
            println!("add this line to every node's trust list:\n{}  # druse-mgmt", key.public());
        }
        Command::Endorse { content_id, note, api } => {
            send(&api, "/v1/endorsements", &EndorseRequest { content_id, verdict: EndorsementVerdict::Endorse, note })
                .await?
        }
        Command::Revoke { content_id, note, api } => {
            send(&api, "/v1/endorsements", &EndorseRequest { content_id, verdict: EndorsementVerdict::Revoke, note })
                .await?
        }
        Command::Weather { level, duration, reason, api } => {
            send(&api, "/v1/weather", &WeatherRequest { level, duration, reason }).await?
        }
        Command::Ban { peer, reason, duration, api } => {
            send(&api, "/v1/bans", &BanRequest { peer, reason, duration }).await?
        }
        Command::Attest { peer, level, reason, duration, api } => {
            send(&api, "/v1/attestations", &AttestRequest { peer, level, reason, duration }).await?
        }
        Command::Bounty { id, description, tags, priority, reward_multiplier, duration, api } => {
            let request = BountyRequest { id, description, tags, priority, reward_multiplier, duration };
            send(&api, "/v1/bounties", &request).await?
        }
        Command::Census { api } => print_json(&api.reader().get::<Value>("/v1/peers").await?),
    }
    Ok(())
}
