//! `druse-node`: run an edge node, or act on a running one through its API.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use druse_node::api::ReportRequest;
use druse_node::cli::{self, ApiArgs, RunArgs, print_json};
use druse_node::skill::{PublishSkill, Published};
use druse_node::{Role, daemon};
use druse_protocol::Keypair;
use druse_protocol::body::{ExecutionStats, SemanticType};
use serde_json::Value;

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

#[derive(Debug, Parser)]
#[command(name = "druse-node", version, about = "A druse edge node")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node until SIGTERM or Ctrl-C.
    Run(RunArgs),
    /// Print the PeerId and public key of the key in a data directory.
    Id {
        #[arg(long, env = "DRUSE_DATA_DIR", default_value = "./druse-data")]
        data_dir: PathBuf,
    },
    /// Create a key file (mode 0600) and print its PeerId and public key.
    Keygen {
        /// Where to write the key.
        #[arg(long, default_value = "./druse-data/node.key")]
        out: PathBuf,
    },
    /// Show a running node's status.
    Status {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// The agent: `agent status`.
    Agent {
        #[command(subcommand)]
        command: druse_node::cli::agent::Cli,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Skills: publish, list, import and export folders.
    Skill {
        #[command(subcommand)]
        command: SkillCommand,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Memories: add, search, get, history.
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Run a consolidation pass now.
    Consolidate {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Show the weather a running node obeys.
    Weather {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// List the peers a running node knows.
    Peers {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Open bounties, with the skills that match them and the claims.
    Bounties {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Serve the node's memory and skill market over MCP on stdio, for desktop agents (talks
    /// to the node's API; stdout carries MCP only, logs go to stderr).
    Mcp(druse_node::mcp::StdioArgs),
    /// The credit ledger: balance, earned, spent and the newest entries.
    Ledger {
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// The all-MiniLM-L6-v2 embedding model: `model fetch`.
    Model {
        #[command(subcommand)]
        command: cli::ModelCommand,
    },
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// Store a memory (a correction like "actually, it's March 22" supersedes what it corrects).
    Add(cli::MemoryAdd),
    /// Recall memories.
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        k: usize,
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long)]
        kind: Option<String>,
        /// Only turns of this conversation.
        #[arg(long)]
        session: Option<String>,
        /// Only memories said at or after this (Unix milliseconds or ISO 8601).
        #[arg(long)]
        since: Option<String>,
        /// Only memories said at or before this.
        #[arg(long)]
        until: Option<String>,
    },
    /// Show one crystal.
    Get { id: String },
    /// Show a crystal's supersession chain and audit log.
    History { id: String },
}

#[derive(Debug, Subcommand)]
enum SkillCommand {
    /// Publish a skill or task pattern to the swarm.
    Publish {
        #[arg(long)]
        name: String,
        #[arg(long)]
        text: String,
        /// `skill` or `task_pattern` (memory types are refused).
        #[arg(long = "type", default_value = "skill", value_parser = parse_semantic_type)]
        semantic_type: SemanticType,
        #[arg(long, value_delimiter = ',')]
        tags: Vec<String>,
        #[arg(long)]
        category: Option<String>,
        /// Stable id across versions (default: the name).
        #[arg(long)]
        skill_id: Option<String>,
        #[arg(long, default_value_t = 1)]
        version: u32,
        /// The content id of the version this one replaces.
        #[arg(long)]
        previous: Option<String>,
        /// Asking price in micro-USDC.
        #[arg(long, default_value_t = 0)]
        price: u64,
        /// Executions, successes and mean reward so far, like `10,8,0.7`.
        #[arg(long, value_parser = parse_stats)]
        stats: Option<ExecutionStats>,
    },
    /// List the skills the node holds, with asking and computed prices.
    List {
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show one skill with its market view.
    Show { id: String },
    /// Show every version of a skill (by content id or stable skill id).
    Versions { id: String },
    /// Report running a skill (`--success` or `--failure`), or claim a bounty with it.
    Report {
        id: String,
        #[arg(long, conflicts_with_all = ["failure", "claim"])]
        success: bool,
        #[arg(long, conflicts_with = "claim")]
        failure: bool,
        /// Reward in [-1, 1] (default 1 for a success, 0 for a failure).
        #[arg(long, allow_hyphen_values = true)]
        reward: Option<f64>,
        /// Claim this bounty with the skill.
        #[arg(long)]
        claim: Option<String>,
    },
    /// Import an Agent Skills folder (`SKILL.md` and its `scripts/`, `references/`,
    /// `assets/`): checked, scanned, and published as this node's skill of that name.
    Import {
        dir: PathBuf,
        /// Asking price in micro-USDC.
        #[arg(long, default_value_t = 0)]
        price: u64,
    },
    /// Write a stored skill (imported or distilled) as an Agent Skills folder into DIR (or
    /// DIR/<name> when DIR is not named after the skill).
    Export { id: String, dir: PathBuf },
    /// List the skills MCP clients submitted (`skill_publish`), private until approved.
    Pending,
    /// Publish a pending skill to the swarm as this node's own (an import of its folder).
    Approve { id: String },
    /// Drop a pending skill without publishing it.
    Discard { id: String },
    /// Adopt a skill, paying what this node's own price computation supports. Without
    /// `--max-price` the owner's rules apply (`[agent] skill_approval_above` and
    /// `skill_budget_per_day`), as for the agent and MCP.
    Adopt {
        id: String,
        /// The owner's approval: pay at most this many micro-USDC, past the approval threshold
        /// and the day's budget (still counted in the day's spending). A price settled above it
        /// is refused (exit 1, with the new price) and nothing is paid.
        #[arg(long)]
        max_price: Option<u64>,
    },
}

fn parse_semantic_type(text: &str) -> Result<SemanticType, String> {
    serde_json::from_value(Value::String(text.to_owned())).map_err(|_| format!("unknown semantic type {text:?}"))
}

fn parse_stats(text: &str) -> Result<ExecutionStats, String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let [executions, successes, avg_reward] = parts.as_slice() else {
        return Err("expected executions,successes,avg_reward".into());
    };
    Ok(ExecutionStats {
        executions: executions.parse().map_err(|e| format!("executions: {e}"))?,
        successes: successes.parse().map_err(|e| format!("successes: {e}"))?,
        avg_reward: avg_reward.parse().map_err(|e| format!("avg_reward: {e}"))?,
    })
}

/// Percent-encodes a query or path component.
fn encode(text: &str) -> String {
    cli::percent_encode(text)
}

fn main() -> std::process::ExitCode {
    cli::block_on(async { cli::exit_code(run(Cli::parse()).await) })
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            let signals = daemon::Signals::listen().context("catching SIGTERM and Ctrl-C")?;
            cli::init_logging(args.log_format);
            let config = args.load().context("loading the config")?;
            daemon::run(config, Role::Edge, signals, |_| axum::Router::new()).await.context("running the node")?;
        }
        Command::Mcp(args) => {
            cli::init_logging(cli::LogFormat::Text);
            druse_node::mcp::serve_stdio(args).await?;
        }
        Command::Id { data_dir } => {
            let path = data_dir.join("node.key");
            anyhow::ensure!(
                path.exists(),
                "no key at {}: a node creates one on its first `run`, or use `druse-node keygen --out {}`",
                path.display(),
                path.display()
            );
            let key = Keypair::load(&path)?;
            println!("peer_id    {}\npublic_key {}", key.peer_id(), key.public());
        }
        Command::Keygen { out } => {
            println!("{}", cli::keygen(&out).map_err(anyhow::Error::msg)?);
        }
        Command::Status { api } => print_json(&api.reader().get::<Value>("/v1/status").await?),
        Command::Agent { command, api } => {
            // The conversation (`agent chat` without a message) printed as it went, and
            // answers nothing more.
            let answer = command.run(&api).await?;
            if !answer.is_null() {
                print_json(&answer);
            }
        }
        Command::Memory { command, api } => {
            let client = api.writer()?;
            match command {
                MemoryCommand::Add(add) => {
                    let body = add.body(druse_protocol::now_ms()).map_err(anyhow::Error::msg)?;
                    print_json(&client.post::<_, Value>("/v1/memories", &body).await?);
                }
                MemoryCommand::Search { query, k, namespace, kind, session, since, until } => {
                    let search = cli::MemorySearch { query, k, namespace, kind, session, since, until };
                    print_json(&client.get::<Value>(&search.path()).await?);
                }
                MemoryCommand::Get { id } => {
                    print_json(&client.get::<Value>(&format!("/v1/crystals/{}", encode(&id))).await?)
                }
                MemoryCommand::History { id } => {
                    print_json(&client.get::<Value>(&format!("/v1/crystals/{}/history", encode(&id))).await?)
                }
            }
        }
        Command::Consolidate { api } => {
            print_json(&api.writer()?.post::<_, Value>("/v1/consolidate", &serde_json::json!({})).await?)
        }
        Command::Weather { api } => print_json(&api.reader().get::<Value>("/v1/weather").await?),
        Command::Peers { api } => print_json(&api.reader().get::<Value>("/v1/peers").await?),
        Command::Skill { command, api } => match command {
            SkillCommand::Publish {
                name,
                text,
                semantic_type,
                tags,
                category,
                skill_id,
                version,
                previous,
                price,
                stats,
            } => {
                let previous_version =
                    previous.map(|p| p.parse().map_err(|e| anyhow::anyhow!("--previous {p:?}: {e}"))).transpose()?;
                let request = PublishSkill {
                    name,
                    text,
                    semantic_type,
                    tags,
                    category,
                    skill_id,
                    version,
                    previous_version,
                    stats,
                    asking_price: price,
                    scope: druse_memory::governance::Scope::Shared,
                    sensitivity: druse_memory::governance::Sensitivity::Normal,
                };
                let published: Published = api.writer()?.post("/v1/skills", &request).await?;
                println!("{}", published.content_id);
            }
            SkillCommand::List { limit } => {
                print_json(&api.reader().get::<Value>(&format!("/v1/skills?limit={limit}")).await?)
            }
            SkillCommand::Show { id } => {
                print_json(&api.reader().get::<Value>(&format!("/v1/skills/{}", encode(&id))).await?)
            }
            SkillCommand::Versions { id } => {
                print_json(&api.reader().get::<Value>(&format!("/v1/skills/{}/versions", encode(&id))).await?)
            }
            SkillCommand::Report { id, success, failure, reward, claim } => {
                anyhow::ensure!(
                    success || failure || claim.is_some(),
                    "say what happened: --success, --failure, or --claim <bounty id>"
                );
                let request = ReportRequest { success: (success || failure).then_some(success), reward, claim };
                let path = format!("/v1/skills/{}/reports", encode(&id));
                let published: Published = api.writer()?.post(&path, &request).await?;
                println!("{}", published.content_id);
            }
            SkillCommand::Import { dir, price } => {
                let request = cli::skill_folder::read(&dir, price)?;
                print_json(&api.writer()?.post::<_, Value>("/v1/skills/import", &request).await?)
            }
            SkillCommand::Export { id, dir } => {
                let path = format!("/v1/skills/{}/folder", encode(&id));
                let exported: druse_node::skill::folder::Exported = api.reader().get(&path).await?;
                for finding in &exported.findings {
                    eprintln!("finding: {finding}");
                }
                println!("{}", cli::skill_folder::write(&dir, &exported)?.display());
            }
            SkillCommand::Pending => print_json(&api.writer()?.get::<Value>("/v1/skills/pending").await?),
            SkillCommand::Approve { id } => {
                let path = format!("/v1/skills/pending/{}/approve", encode(&id));
                print_json(&api.writer()?.post::<_, Value>(&path, &serde_json::json!({})).await?)
            }
            SkillCommand::Discard { id } => {
                let path = format!("/v1/skills/pending/{}/discard", encode(&id));
                print_json(&api.writer()?.post::<_, Value>(&path, &serde_json::json!({})).await?)
            }
            SkillCommand::Adopt { id, max_price } => {
                let mut path = format!("/v1/skills/{}/adopt", encode(&id));
                if let Some(max) = max_price {
                    path.push_str(&format!("?approved_price={max}"));
                }
                print_json(&api.writer()?.post::<_, Value>(&path, &serde_json::json!({})).await?)
            }
        },
        Command::Bounties { api } => print_json(&api.reader().get::<Value>("/v1/bounties").await?),
        Command::Ledger { limit, api } => {
            print_json(&api.reader().get::<Value>(&format!("/v1/ledger?limit={limit}")).await?)
        }
        Command::Model { command } => println!("{}", command.run().await.map_err(anyhow::Error::msg)?.display()),
    }
    Ok(())
}
