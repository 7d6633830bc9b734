//! The agent every node runs (seeds 000–002, DESIGN §10), off until `[agent] enabled`: it
//! lives on Bluesky through atrium-api, thinks with any OpenAI-compatible model, remembers
//! through the node's memory engine, and earns skills it may publish to the swarm.
//!
//! - [`llm`]: the chat-completions client (tools, bounded loop, retries, JSON schema);
//! - [`bluesky`]: the account (session, notifications, threads, replies, likes, facets);
//! - [`context`]: the trust-labelled blocks of the system prompt;
//! - [`rules`]: batch-only URIs, per-author limit, the owner gate bound to its request post;
//! - `run` and `tools`: the loop and the tools the model calls; `act`: what it does on
//!   Bluesky and in the swarm, behind the owner's gate;
//! - [`consent`] and [`posts`]: tagging consent as users say it, and posts that fit;
//! - [`schedule`] and `entries`: musing, the daily reflection and review beside the batches;
//! - [`reconcile`]: the LLM reconciler of new observations, with the rules as fallback.

mod act;
pub mod bluesky;
pub mod consent;
pub mod context;
mod core;
mod distill;
mod entries;
pub mod facets;
pub mod llm;
pub mod metrics;
pub mod outcome;
pub mod posts;
pub mod reconcile;
pub mod rules;
mod run;
pub mod schedule;
mod secret;
pub(crate) mod state;
mod swarm;
mod tools;

pub use core::AgentStatus;
pub use entries::RunReport;
pub use schedule::Entry;
pub use secret::{Secret, Secrets};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State as AxumState;
use axum::extract::rejection::JsonRejection;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use crate::node::Node;
use druse_protocol::now_ms;

/// An operator's request to run an entry point now, and where its outcome goes.
type RunRequest = (Entry, oneshot::Sender<RunReport>);

/// Entry-point requests waiting at most; more are refused as busy.
const MAX_WAITING_RUNS: usize = 4;

/// The longest an operator's run may take (a few LLM round trips).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// A handle to the running agent.
#[derive(Debug, Clone)]
pub struct Handle {
    status: Arc<Mutex<AgentStatus>>,
    runs: mpsc::Sender<RunRequest>,
    /// Set: the agent reads, answers and runs nothing until it is cleared.
    paused: Arc<AtomicBool>,
}

impl Handle {
    pub fn status(&self) -> AgentStatus {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Pauses the agent (`true`) or resumes it: from its next tick it polls nothing, answers
    /// nothing and runs no entry point, until resumed. The loop keeps it across a restart.
    pub fn pause(&self, paused: bool) -> AgentStatus {
        self.paused.store(paused, Ordering::SeqCst);
        set(&self.status, |s| s.paused = paused);
        self.status()
    }
}

/// The agent's routes: `GET /v1/agent` and, behind the node's `token`, `POST /v1/agent/run`.
/// With the agent off (`agent` is `None`) the status says so and a run is refused.
pub fn routes(agent: Option<Handle>, token: &str) -> axum::Router {
    let run = crate::api::require_token(
        axum::Router::new()
            .route("/v1/agent/run", axum::routing::post(run_now))
            .route("/v1/agent/pause", axum::routing::post(pause))
            .route("/v1/agent/resume", axum::routing::post(resume)),
        token,
    );
    axum::Router::new().route("/v1/agent", axum::routing::get(status)).merge(run).with_state(agent)
}

/// `GET /v1/agent`.
async fn status(AxumState(agent): AxumState<Option<Handle>>) -> Json<AgentStatus> {
    Json(agent.as_ref().map(Handle::status).unwrap_or_default())
}

/// `POST /v1/agent/pause`: the agent stops reading and answering until resumed; answers the
/// status.
async fn pause(AxumState(agent): AxumState<Option<Handle>>) -> Result<Json<AgentStatus>, crate::api::Error> {
    paused(agent, true)
}

/// `POST /v1/agent/resume`.
async fn resume(AxumState(agent): AxumState<Option<Handle>>) -> Result<Json<AgentStatus>, crate::api::Error> {
    paused(agent, false)
}

fn paused(agent: Option<Handle>, yes: bool) -> Result<Json<AgentStatus>, crate::api::Error> {
    let Some(agent) = agent else {
        return Err(crate::api::Error::new(
            druse_protocol::api::Code::AgentDisabled,
            "the agent is off: set [agent] enabled = true",
        ));
    };
    tracing::info!(paused = yes, "an operator {} the agent", if yes { "paused" } else { "resumed" });
    Ok(Json(agent.pause(yes)))
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
async fn run_now(
    AxumState(agent): AxumState<Option<Handle>>,
    body: Result<Json<RunBody>, JsonRejection>,
) -> Result<Json<RunReport>, crate::api::Error> {
    use druse_protocol::api::Code;
    let Json(body) = body.map_err(|e| {
        crate::api::Error::bad_request(format!(
            "{}: send {{\"entry\": \"musing\" | \"reflection\" | \"review\" | \"notifications\"}}",
            e.body_text()
        ))
    })?;
    let unavailable = |detail: String| crate::api::Error::new(Code::AgentUnavailable, detail);
    let Some(agent) = agent else {
        return Err(crate::api::Error::new(Code::AgentDisabled, "the agent is off: set [agent] enabled = true"));
    };
    let state = agent.status().state;
    if state != "running" {
        return Err(unavailable(format!("the agent is {state}, not running yet; try again shortly")));
    }
    if agent.paused.load(Ordering::SeqCst) {
        return Err(unavailable("the agent is paused: resume it first (druse-node agent resume)".into()));
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

/// Starts the agent's task (the config enables it: there are `secrets`). Returns at once: logging in and
/// polling happen in the task, which retries a failed login with backoff.
pub fn start(node: &Node, metrics: metrics::Metrics, secrets: Secrets) -> Handle {
    let config = node.config().agent.clone();
    let status = Arc::new(Mutex::new(AgentStatus {
        enabled: true,
        state: "starting",
        handle: config.bluesky.handle.clone(),
        owner: config.bluesky.owner.clone(),
        model: config.llm.model.clone(),
        skill_budget_per_day: config.skill_budget_per_day,
        ..AgentStatus::default()
    }));
    let (runs, requests) = mpsc::channel(MAX_WAITING_RUNS);
    let paused = Arc::new(AtomicBool::new(false));
    let handle = Handle { status: Arc::clone(&status), runs, paused: Arc::clone(&paused) };
    node.spawn_task("agent", run_agent(node.clone(), metrics, secrets, status, requests, paused));
    handle
}

fn set<F: FnOnce(&mut AgentStatus)>(status: &Mutex<AgentStatus>, f: F) {
    f(&mut status.lock().unwrap_or_else(|p| p.into_inner()));
}

async fn connect(
    node: &Node,
    metrics: &metrics::Metrics,
    secrets: &Secrets,
    status: &Arc<Mutex<AgentStatus>>,
) -> Result<Arc<core::Agent>, String> {
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
    let db = node.store().database().clone();
    let (state, pruned) = crate::task::blocking(move || -> Result<_, fjall::Error> {
        let state = state::AgentState::open(&db)?;
        let pruned = state.prune(now_ms())?;
        Ok((state, pruned))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    tracing::info!(handle = bsky.handle(), did = bsky.did(), session = ?origin, pruned, "the agent is on Bluesky");
    let how = match origin {
        bluesky::SessionOrigin::Reused => "reused",
        bluesky::SessionOrigin::LoggedIn => "logged_in",
    };
    metrics::Metrics::count(&metrics.sessions, how);
    metrics.session_refreshes.set(bsky.refreshes() as i64);
    let spent_today = state.spent(now_ms() / 86_400_000);
    set(status, |s| {
        s.state = "running";
        s.did = Some(bsky.did().to_owned());
        s.session = Some(origin);
        s.skills_spent_today = spent_today;
    });
    let persona = match &config.persona_file {
        Some(path) => Some(persona(path)?),
        None => None,
    };
    let mut bsky = bsky;
    if config.dry_run {
        bsky.set_dry_run(true);
        tracing::warn!(
            "dry run: the agent decides but writes nothing to Bluesky; the log says what it would have written"
        );
    }
    set(status, |s| s.dry_run = config.dry_run);
    let mut agent = core::Agent::new(node.clone(), llm, bsky, owner_did, state, metrics.clone(), Arc::clone(status));
    if let Some(persona) = persona {
        agent.persona = persona;
    }
    let agent = Arc::new(agent);
    agent.adopt_history().await.map_err(|e| format!("reading the account's history: {e}"))?;
    Ok(agent)
}

/// The persona in `path`: its text, at most 16 KiB, not empty.
fn persona(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("agent.persona_file {}: {e}", path.display()))?;
    let text = text.trim();
    if text.is_empty() || text.len() > 16 * 1024 {
        return Err(format!("agent.persona_file {}: must hold 1 byte to 16 KiB of text", path.display()));
    }
    Ok(text.to_owned())
}

async fn run_agent(
    node: Node,
    metrics: metrics::Metrics,
    secrets: Secrets,
    status: Arc<Mutex<AgentStatus>>,
    mut requests: mpsc::Receiver<RunRequest>,
    paused: Arc<AtomicBool>,
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
    // A pause outlives a restart: the state keeps it, and an operator's change is written at
    // the next tick.
    let mut kept = agent.state.paused();
    if kept {
        paused.store(true, Ordering::SeqCst);
        set(&status, |s| s.paused = true);
        tracing::info!("the agent was paused before the restart and stays paused (druse-node agent resume)");
    }
    let mut tick = tokio::time::interval(node.config().agent.poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // One loop for every entry point: an operator's run waits for the batch in progress.
        // Nothing that waits for the model runs in this loop: each thread's run, an operator's
        // run and the scheduled entry points run beside it, so a slow model never holds a
        // poll or an owner's approval.
        tokio::select! {
            _ = tick.tick() => {}
            Some((entry, reply)) = requests.recv() => {
                let agent = Arc::clone(&agent);
                tokio::spawn(async move {
                    let _one_at_a_time = agent.entries.lock().await;
                    let _ = reply.send(agent.run_entry(entry).await);
                });
                continue;
            }
        }
        let now_paused = paused.load(Ordering::SeqCst);
        if now_paused != kept {
            kept = now_paused;
            agent.write_state("keep the pause", move |s| s.set_paused(now_paused)).await;
        }
        if now_paused {
            set(&status, |s| s.polls_skipped += 1);
            continue;
        }
        let result = agent.poll(false).await;
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
        let due = agent.due(now_ms());
        if !due.is_empty()
            && let Ok(running) = Arc::clone(&agent.entries).try_lock_owned()
        {
            let agent = Arc::clone(&agent);
            tokio::spawn(async move {
                let _running = running;
                for entry in due {
                    agent.run_entry(entry).await;
                }
            });
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
    /// Pause the agent (`POST /v1/agent/pause`): it reads, answers and runs nothing until
    /// resumed, across restarts too.
    Pause,
    /// Resume a paused agent (`POST /v1/agent/resume`).
    Resume,
}

impl Cli {
    /// Runs the subcommand against the node `api` points at.
    pub async fn run(self, api: &crate::cli::ApiArgs) -> Result<serde_json::Value, crate::client::Error> {
        match self {
            Cli::Status => api.reader().get("/v1/agent").await,
            Cli::Run { entry } => api.writer()?.post("/v1/agent/run", &serde_json::json!({ "entry": entry })).await,
            Cli::Pause => api.writer()?.post("/v1/agent/pause", &serde_json::json!({})).await,
            Cli::Resume => api.writer()?.post("/v1/agent/resume", &serde_json::json!({})).await,
        }
    }
}
