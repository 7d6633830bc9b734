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
//! - [`reconcile`]: the LLM reconciler of new observations, with the rules as fallback;
//! - [`chat`]: a local conversation with the operator; [`journal`]: the record of every run;
//!   `spend`: what the model costs, and its daily cap; `toolcall`: tool calls a model writes
//!   in its text; `privacy`: nothing personal leaves in a published skill.

mod act;
pub mod bluesky;
pub mod chat;
pub mod consent;
pub mod context;
mod core;
mod distill;
mod entries;
pub mod facets;
pub mod journal;
pub mod llm;
pub mod metrics;
mod mind;
pub mod outcome;
pub mod posts;
mod privacy;
pub mod reconcile;
pub mod rules;
mod run;
pub mod schedule;
mod secret;
mod spend;
pub(crate) mod state;
mod swarm;
mod toolcall;
mod tools;

pub use core::AgentStatus;
pub use entries::RunReport;
pub use schedule::Entry;
pub use secret::{Secret, Secrets};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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
    /// The record of every run, if it opened.
    journal: Option<Arc<journal::Journal>>,
    /// The agent, once it is on Bluesky.
    agent: Arc<OnceLock<Arc<core::Agent>>>,
}

impl Handle {
    pub fn status(&self) -> AgentStatus {
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // What the model cost is read now, not at the last tick.
        if let Some(agent) = self.agent.get() {
            let spend = agent.llm.spend();
            status.model_spent_today_usd = spend.today_usd();
            status.model_daily_cap_usd = spend.cap_usd();
            status.model_capped = spend.capped();
            status.model_tokens_today = spend.tokens_today();
        }
        status
    }

    /// Pauses the agent (`true`) or resumes it: from its next tick it polls nothing, answers
    /// nothing and runs no entry point, until resumed. The loop keeps it across a restart.
    pub fn pause(&self, paused: bool) -> AgentStatus {
        self.paused.store(paused, Ordering::SeqCst);
        set(&self.status, |s| s.paused = paused);
        self.status()
    }
}

/// The agent's routes: `GET /v1/agent` and, behind the node's `token`, its controls (run,
/// pause, resume, chat) and its journal. With the agent off (`agent` is `None`) the status
/// says so and the rest is refused.
pub fn routes(agent: Option<Handle>, token: &str) -> axum::Router {
    let run = crate::api::require_token(
        axum::Router::new()
            .route("/v1/agent/run", axum::routing::post(run_now))
            .route("/v1/agent/pause", axum::routing::post(pause))
            .route("/v1/agent/resume", axum::routing::post(resume))
            .route("/v1/agent/chat", axum::routing::post(chat_now))
            .route("/v1/agent/runs", axum::routing::get(runs))
            .route("/v1/agent/runs/{id}", axum::routing::get(one_run)),
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

/// The agent, or the error that says it is off.
fn enabled(agent: Option<Handle>) -> Result<Handle, crate::api::Error> {
    agent.ok_or_else(|| {
        crate::api::Error::new(druse_protocol::api::Code::AgentDisabled, "the agent is off: set [agent] enabled = true")
    })
}

fn unavailable(detail: impl Into<String>) -> crate::api::Error {
    crate::api::Error::new(druse_protocol::api::Code::AgentUnavailable, detail)
}

/// The query of `GET /v1/agent/runs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// How many, newest first (default 20, at most 500).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only this entry point's runs (`notifications`, `musing`, `reflection`, `review`, `chat`).
    #[serde(default)]
    pub entry: Option<String>,
}

fn journal_of(agent: Option<Handle>) -> Result<Arc<journal::Journal>, crate::api::Error> {
    enabled(agent)?.journal.ok_or_else(|| unavailable("the run journal could not be opened; see the node's log"))
}

/// `GET /v1/agent/runs?limit=&entry=`: the newest runs of the model, newest first.
async fn runs(
    AxumState(agent): AxumState<Option<Handle>>,
    query: Result<axum::extract::Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<journal::RunSummary>>, crate::api::Error> {
    let axum::extract::Query(query) = query.map_err(|e| {
        crate::api::Error::bad_request(format!("{}: the parameters are limit (1 to 500) and entry", e.body_text()))
    })?;
    let limit = query.limit.unwrap_or(20);
    if !(1..=500).contains(&limit) {
        return Err(crate::api::Error::bad_request("limit: from 1 to 500"));
    }
    let journal = journal_of(agent)?;
    let entry = query.entry;
    let runs = crate::task::blocking(move || journal.recent(limit, entry.as_deref()))
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    Ok(Json(runs))
}

/// `GET /v1/agent/runs/{id}`: one run in full.
async fn one_run(
    AxumState(agent): AxumState<Option<Handle>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<journal::RunRecord>, crate::api::Error> {
    let id: u64 = id.parse().map_err(|_| crate::api::Error::bad_request(format!("id: {id:?} is not a run number")))?;
    let journal = journal_of(agent)?;
    crate::task::blocking(move || journal.get(id)).await.map_err(|e| unavailable(e.to_string()))?.map(Json).ok_or_else(
        || crate::api::Error::not_found(format!("no run {id} in the journal (it keeps the newest agent.run_log_keep)")),
    )
}

/// `POST /v1/agent/chat {"message": …, "history": [{"role": "user" | "assistant", "content": …}]}`:
/// one turn of a local conversation with the agent, without Bluesky.
async fn chat_now(
    AxumState(agent): AxumState<Option<Handle>>,
    body: Result<Json<chat::ChatBody>, JsonRejection>,
) -> Result<Json<chat::ChatAnswer>, crate::api::Error> {
    let Json(body) = body.map_err(|e| {
        crate::api::Error::bad_request(format!(
            "{}: send {{\"message\": \"…\", \"history\": [{{\"role\": \"user\" | \"assistant\", \"content\": \"…\"}}]}}",
            e.body_text()
        ))
    })?;
    body.check().map_err(crate::api::Error::bad_request)?;
    let handle = enabled(agent)?;
    if handle.paused.load(Ordering::SeqCst) {
        return Err(unavailable("the agent is paused: resume it first (druse-node agent resume)"));
    }
    let Some(agent) = handle.agent.get().cloned() else {
        return Err(unavailable(format!("the agent is {}, not running yet; try again shortly", handle.status().state)));
    };
    match tokio::time::timeout(RUN_TIMEOUT, agent.chat(body)).await {
        Ok(Ok(answer)) => Ok(Json(answer)),
        Ok(Err(error)) => Err(unavailable(format!("no answer: {error}"))),
        Err(_) => Err(unavailable(format!("the conversation took longer than {RUN_TIMEOUT:?}"))),
    }
}

fn paused(agent: Option<Handle>, yes: bool) -> Result<Json<AgentStatus>, crate::api::Error> {
    let agent = enabled(agent)?;
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
    let Json(body) = body.map_err(|e| {
        crate::api::Error::bad_request(format!(
            "{}: send {{\"entry\": \"musing\" | \"reflection\" | \"review\" | \"notifications\"}}",
            e.body_text()
        ))
    })?;
    let agent = enabled(agent)?;
    let state = agent.status().state;
    if state != "running" {
        return Err(unavailable(format!("the agent is {state}, not running yet; try again shortly")));
    }
    if agent.paused.load(Ordering::SeqCst) {
        return Err(unavailable("the agent is paused: resume it first (druse-node agent resume)"));
    }
    let (tx, rx) = oneshot::channel();
    agent
        .runs
        .try_send((body.entry, tx))
        .map_err(|_| unavailable(format!("{MAX_WAITING_RUNS} runs are already waiting; try again later")))?;
    match tokio::time::timeout(RUN_TIMEOUT, rx).await {
        Ok(Ok(outcome)) => Ok(Json(outcome)),
        Ok(Err(_)) => Err(unavailable("the agent stopped before the run ended")),
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
    let journal = match journal::Journal::open(node.store().database(), config.run_log_keep) {
        Ok(journal) => Some(Arc::new(journal)),
        Err(error) => {
            tracing::error!(%error, "could not open the run journal: runs are not recorded");
            None
        }
    };
    let running = Arc::new(OnceLock::new());
    let handle =
        Handle { status: Arc::clone(&status), runs, paused: Arc::clone(&paused), journal, agent: Arc::clone(&running) };
    node.spawn_task("agent", run_agent(node.clone(), metrics, secrets, handle.clone(), requests));
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
    journal: Option<Arc<journal::Journal>>,
) -> Result<Arc<core::Agent>, String> {
    let config = &node.config().agent;
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
    let spend = Arc::new(spend::Spend::new(&config.llm, metrics.clone(), Some(state.clone())));
    let llm = llm::Llm::with_spend(&config.llm, secrets.llm_key.clone(), metrics.clone(), spend)
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
    agent.journal = journal;
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
    handle: Handle,
    mut requests: mpsc::Receiver<RunRequest>,
) {
    let Handle { status, paused, journal, agent: running, .. } = handle;
    // Retries double from 2 s up to a minute: an operator who mends the PDS or the password
    // sees the agent log in within a minute, and a host under load that failed the first few
    // tries is not left waiting minutes for the next.
    const MOST: Duration = Duration::from_secs(60);
    let mut backoff = Duration::from_secs(2);
    let agent = loop {
        match connect(&node, &metrics, &secrets, &status, journal.clone()).await {
            Ok(agent) => break agent,
            Err(error) => {
                tracing::error!(%error, retry_in_s = backoff.as_secs(), "the agent could not start");
                set(&status, |s| {
                    s.state = "retrying";
                    s.last_error = Some(error);
                });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MOST);
            }
        }
    };
    let _ = running.set(Arc::clone(&agent));
    // Running once the agent can be reached (a conversation, an operator's run).
    set(&status, |s| s.state = "running");
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
        let capped = agent.llm.spend().capped();
        if now_paused || capped {
            // At the daily cap the notifications wait unread for the next UTC day.
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
#[derive(Debug, Clone, clap::Subcommand)]
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
    /// Talk to the agent in the terminal (`POST /v1/agent/chat`), without Bluesky: with a
    /// message, one turn; without, a conversation until end of input (Ctrl-D).
    Chat {
        /// One message to send; leave it out to converse.
        message: Option<String>,
    },
    /// The newest runs of the model (`GET /v1/agent/runs`), or one run in full with `--id`:
    /// what it was shown, its tool calls, its answer, tokens, cost and time.
    Log {
        /// One run in full, by its id.
        #[arg(long)]
        id: Option<u64>,
        /// How many runs, newest first.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Only this entry point's runs: notifications, musing, reflection, review or chat.
        #[arg(long)]
        entry: Option<String>,
    },
}

impl Cli {
    /// Runs the subcommand against the node `api` points at.
    pub async fn run(self, api: &crate::cli::ApiArgs) -> Result<serde_json::Value, crate::client::Error> {
        match self {
            Cli::Status => api.reader().get("/v1/agent").await,
            Cli::Run { entry } => {
                api.writer()?.waiting(RUN_TIMEOUT).post("/v1/agent/run", &serde_json::json!({ "entry": entry })).await
            }
            Cli::Chat { message: Some(message) } => {
                let body = chat::ChatBody { message, history: Vec::new() };
                api.writer()?.waiting(RUN_TIMEOUT).post("/v1/agent/chat", &body).await
            }
            Cli::Chat { message: None } => chat_in_terminal(api).await.map(|()| serde_json::Value::Null),
            Cli::Pause => api.writer()?.post("/v1/agent/pause", &serde_json::json!({})).await,
            Cli::Resume => api.writer()?.post("/v1/agent/resume", &serde_json::json!({})).await,
            Cli::Log { id: Some(id), .. } => api.writer()?.get(&format!("/v1/agent/runs/{id}")).await,
            Cli::Log { id: None, limit, entry } => {
                let mut path = format!("/v1/agent/runs?limit={limit}");
                if let Some(entry) = entry {
                    path += &format!("&entry={}", crate::cli::percent_encode(&entry));
                }
                api.writer()?.get(&path).await
            }
        }
    }
}

/// `druse-node agent chat` without a message: a conversation on standard input and output,
/// the turns kept here and sent with each message.
async fn chat_in_terminal(api: &crate::cli::ApiArgs) -> Result<(), crate::client::Error> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let client = api.writer()?.waiting(RUN_TIMEOUT);
    let status: serde_json::Value = client.get("/v1/agent").await?;
    eprintln!(
        "talking to @{} (nothing here is posted; end with Ctrl-D)",
        status["handle"].as_str().unwrap_or("the agent").trim_start_matches('@')
    );
    let mut history: Vec<chat::Turn> = Vec::new();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        eprint!("> ");
        let Ok(Some(line)) = lines.next_line().await else { break };
        let message = line.trim().to_owned();
        if message.is_empty() {
            continue;
        }
        let body = chat::ChatBody { message: message.clone(), history: history.clone() };
        match client.post::<_, chat::ChatAnswer>("/v1/agent/chat", &body).await {
            Ok(answer) => {
                if !answer.tools.is_empty() {
                    eprintln!("[tools: {}]", answer.tools.join(", "));
                }
                println!("{}", if answer.answer.is_empty() { "(no answer)" } else { answer.answer.as_str() });
                history.push(chat::Turn { role: chat::Role::User, content: message });
                let mut content = answer.answer;
                llm::truncate(&mut content, chat::MAX_MESSAGE);
                history.push(chat::Turn { role: chat::Role::Assistant, content });
                let over = history.len().saturating_sub(chat::MAX_HISTORY);
                history.drain(..over);
            }
            Err(error @ crate::client::Error::Unreachable { .. }) => return Err(error),
            Err(error) => eprintln!("{error}"),
        }
    }
    Ok(())
}
