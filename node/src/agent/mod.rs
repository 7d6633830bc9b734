//! The agent every node runs (seeds 000–002, DESIGN §10), off until `[agent] enabled`: it
//! lives on Bluesky through atrium-api, thinks with any OpenAI-compatible model, remembers
//! through the node's memory engine, and earns skills it may publish to the swarm.
//!
//! - [`llm`]: the chat-completions client (tools, bounded loop, retries, JSON schema);
//! - [`bluesky`]: the account (session, notifications, threads, replies, likes, facets);
//! - [`context`]: the trust-labelled blocks of the system prompt;
//! - [`rules`]: batch-only URIs, per-author limit, the owner gate bound to its request post;
//! - `run` and `tools`: the loop and the tools the model calls;
//! - [`schedule`] and `entries`: musing, the daily reflection and review beside the batches;
//! - [`reconcile`]: the LLM reconciler of new observations, with the rules as fallback.

pub mod bluesky;
pub mod context;
mod entries;
pub mod facets;
pub mod llm;
pub mod metrics;
pub mod reconcile;
pub mod rules;
mod run;
pub mod schedule;
mod state;
mod tools;

pub use entries::Outcome;
pub use schedule::Entry;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State as AxumState;
use axum::extract::rejection::JsonRejection;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::config::{self, Config};
use crate::node::{Node, now_ms};

/// A secret read from the environment: never printed, never logged.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The secrets an enabled agent needs, read from the variables its config names.
#[derive(Debug, Clone)]
pub struct Secrets {
    password: Secret,
    llm_key: Option<Secret>,
}

impl Secrets {
    /// Reads them, or refuses with a sentence naming the key and the variable. `None` when
    /// the agent is off.
    pub fn from_env(config: &Config) -> Result<Option<Self>, config::Error> {
        let agent = &config.agent;
        if !agent.enabled {
            return Ok(None);
        }
        let var = &agent.bluesky.password_env;
        let password = match std::env::var(var) {
            Ok(v) if !v.is_empty() => Secret(v),
            _ => {
                return Err(config::Error::Invalid(format!(
                    "agent.bluesky.password_env names {var}, which is not set: export the agent's app password in it"
                )));
            }
        };
        let llm_key = if agent.llm.api_key_env.is_empty() {
            None
        } else {
            let var = &agent.llm.api_key_env;
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => Some(Secret(v)),
                _ => {
                    return Err(config::Error::Invalid(format!(
                        "agent.llm.api_key_env names {var}, which is not set (leave api_key_env empty for a server that needs no key)"
                    )));
                }
            }
        };
        Ok(Some(Self { password, llm_key }))
    }
}

/// What `GET /v1/agent` and `druse-node agent status` show.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub enabled: bool,
    /// `starting`, `running`, or `retrying` (after a failed login).
    pub state: &'static str,
    pub handle: String,
    pub did: Option<String>,
    pub owner: String,
    pub model: String,
    /// How the Bluesky session was obtained: `reused` or `logged_in`.
    pub session: Option<bluesky::SessionOrigin>,
    pub last_poll_at: Option<u64>,
    pub polls: u64,
    pub handled: u64,
    pub replies: u64,
    pub approvals: u64,
    pub last_error: Option<String>,
}

/// An operator's request to run an entry point now, and where its outcome goes.
type RunRequest = (Entry, oneshot::Sender<Outcome>);

/// Entry-point requests waiting at most; more are refused as busy.
const MAX_WAITING_RUNS: usize = 4;

/// The longest an operator's run may take (a few LLM round trips).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// A handle to the running agent.
#[derive(Debug, Clone)]
pub struct Handle {
    status: Arc<Mutex<Status>>,
    runs: mpsc::Sender<RunRequest>,
}

impl Handle {
    pub fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `GET /v1/agent`.
pub async fn status(AxumState(node): AxumState<Node>) -> Json<Status> {
    Json(node.agent().map(Handle::status).unwrap_or_default())
}

/// The body of `POST /v1/agent/run`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    pub entry: Entry,
}

/// `POST /v1/agent/run {"entry": "musing" | "reflection" | "review" | "notifications"}`: runs
/// that entry point now, in the agent's loop and with its rules (a musing still posts at most
/// once per session, a reflection once per day), and answers what it did.
pub async fn run_now(
    AxumState(node): AxumState<Node>,
    body: Result<Json<RunBody>, JsonRejection>,
) -> Result<Json<Outcome>, crate::api::Error> {
    use druse_protocol::api::Code;
    let Json(body) = body.map_err(|e| {
        crate::api::Error::bad_request(format!(
            "{}: send {{\"entry\": \"musing\" | \"reflection\" | \"review\" | \"notifications\"}}",
            e.body_text()
        ))
    })?;
    let unavailable = |detail: String| crate::api::Error::new(Code::AgentUnavailable, detail);
    let Some(agent) = node.agent() else {
        return Err(crate::api::Error::new(Code::AgentDisabled, "the agent is off: set [agent] enabled = true"));
    };
    let state = agent.status().state;
    if state != "running" {
        return Err(unavailable(format!("the agent is {state}, not running yet; try again shortly")));
    }
    let (tx, rx) = oneshot::channel();
    agent
        .runs
        .try_send((body.entry, tx))
        .map_err(|_| unavailable(format!("{MAX_WAITING_RUNS} runs are already waiting; try again later")))?;
    match tokio::time::timeout(RUN_TIMEOUT, rx).await {
        Ok(Ok(outcome)) => Ok(Json(outcome)),
        Ok(Err(_)) => Err(unavailable("the agent stopped before the run ended".into())),
        Err(_) => Err(unavailable(format!("the run took longer than {RUN_TIMEOUT:?}"))),
    }
}

/// Starts the agent's task if the config enables it. Returns at once: logging in and
/// polling happen in the task, which retries a failed login with backoff.
pub fn start(node: &Node, metrics: metrics::Metrics, secrets: Option<Secrets>) -> Option<Handle> {
    let secrets = secrets?;
    let config = node.config().agent.clone();
    let status = Arc::new(Mutex::new(Status {
        enabled: true,
        state: "starting",
        handle: config.bluesky.handle.clone(),
        owner: config.bluesky.owner.clone(),
        model: config.llm.model.clone(),
        ..Status::default()
    }));
    let (runs, requests) = mpsc::channel(MAX_WAITING_RUNS);
    let handle = Handle { status: Arc::clone(&status), runs };
    node.spawn_task("agent", run_agent(node.clone(), metrics, secrets, status, requests));
    Some(handle)
}

fn set<F: FnOnce(&mut Status)>(status: &Mutex<Status>, f: F) {
    f(&mut status.lock().unwrap_or_else(|p| p.into_inner()));
}

async fn connect(
    node: &Node,
    metrics: &metrics::Metrics,
    secrets: &Secrets,
    status: &Arc<Mutex<Status>>,
) -> Result<Arc<run::Agent>, String> {
    let config = &node.config().agent;
    let llm = llm::Llm::new(&config.llm, secrets.llm_key.clone(), metrics.clone()).map_err(|e| e.to_string())?;
    let session = node.config().store.data_dir.join("agent-session.json");
    let (bsky, origin) =
        bluesky::Bluesky::connect(&config.bluesky.service, &config.bluesky.handle, &secrets.password, session)
            .await
            .map_err(|e| e.to_string())?;
    let owner_did = bsky
        .resolve(&config.bluesky.owner)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("agent.bluesky.owner: the handle {} does not resolve", config.bluesky.owner))?;
    let state = state::State::open(node.store().db()).map_err(|e| e.to_string())?;
    let pruned = state.prune(now_ms());
    tracing::info!(handle = bsky.handle(), did = bsky.did(), session = ?origin, pruned, "the agent is on Bluesky");
    let how = match origin {
        bluesky::SessionOrigin::Reused => "reused",
        bluesky::SessionOrigin::LoggedIn => "logged_in",
    };
    metrics::Metrics::count(&metrics.sessions, how);
    metrics.session_refreshes.set(bsky.refreshes() as i64);
    set(status, |s| {
        s.state = "running";
        s.did = Some(bsky.did().to_owned());
        s.session = Some(origin);
    });
    Ok(Arc::new(run::Agent::new(node.clone(), llm, bsky, owner_did, state, metrics.clone(), Arc::clone(status))))
}

async fn run_agent(
    node: Node,
    metrics: metrics::Metrics,
    secrets: Secrets,
    status: Arc<Mutex<Status>>,
    mut requests: mpsc::Receiver<RunRequest>,
) {
    let mut backoff = Duration::from_secs(2);
    let agent = loop {
        match connect(&node, &metrics, &secrets, &status).await {
            Ok(agent) => break agent,
            Err(error) => {
                tracing::error!(%error, retry_in_s = backoff.as_secs(), "the agent could not start");
                set(&status, |s| {
                    s.state = "retrying";
                    s.last_error = Some(error);
                });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(300));
            }
        }
    };
    let mut tick = tokio::time::interval(node.config().agent.poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // One loop for every entry point: an operator's run waits for the batch in progress.
        tokio::select! {
            _ = tick.tick() => {}
            Some((entry, reply)) = requests.recv() => {
                let outcome = agent.run_entry(entry).await;
                let _ = reply.send(outcome);
                continue;
            }
        }
        let result = agent.poll().await;
        metrics.session_refreshes.set(agent.bsky.refreshes() as i64);
        set(&status, |s| {
            s.polls += 1;
            s.last_poll_at = Some(now_ms());
            if let Err(error) = &result {
                s.last_error = Some(error.to_string());
            }
        });
        if let Err(error) = result {
            tracing::warn!(%error, "polling notifications failed; trying again next tick");
        }
        // The scheduled entry points whose time has come (seed 001: checked on every tick).
        for entry in agent.due(now_ms()) {
            agent.run_entry(entry).await;
        }
    }
}

/// `druse-node agent …`: the agent of a running node.
#[derive(Debug, Clone, Copy, clap::Subcommand)]
pub enum Cli {
    /// Show the agent's status (`GET /v1/agent`): its account, session, polls and replies.
    Status,
    /// Run an entry point now (`POST /v1/agent/run`), with its rules, and print what it did.
    Run {
        /// musing, reflection, review or notifications.
        #[arg(value_enum)]
        entry: Entry,
    },
}

impl Cli {
    /// Runs the subcommand against the node `api` points at.
    pub async fn run(self, api: &crate::cli::ApiArgs) -> Result<serde_json::Value, crate::client::Error> {
        match self {
            Cli::Status => api.reader().get("/v1/agent").await,
            Cli::Run { entry } => api.writer()?.post("/v1/agent/run", &serde_json::json!({ "entry": entry })).await,
        }
    }
}
