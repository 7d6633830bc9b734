//! The agent every druse node runs (seeds 000–002, DESIGN §10), off until `[agent] enabled`: it
//! lives on Bluesky through atrium-api, thinks with any OpenAI-compatible model, remembers
//! through the node's memory engine, and earns skills it may publish to the swarm.
//!
//! The node runs it through a narrow port ([`node::Node`]: memory, a keyspace, a task, the
//! market), which the agent defines and the node implements; the node's daemon composes its
//! HTTP routes and CLI from the [`Handle`] this crate gives. Where each part lives:
//!
//! - this file: [`start`], logging in, and the [`Handle`] the daemon holds; `runs`: the loop
//!   and what only it changes (threads under way, failures and their pauses, the entry point
//!   and distill pass running, the operators' runs waiting), each run a task of its set;
//!   `task`: the task set (every run under its deadline, each ending with what the loop
//!   learns, all cancelled and awaited when the node stops) and blocking work off the async
//!   threads;
//! - [`node`]: the port to the node; [`config`]: the `[agent]` section; `secret`: the
//!   passwords and keys it reads from the environment;
//! - `core`: the running agent's parts (model, account, node, state, metrics, status) and
//!   `run_model`/`structured`, every model call's journal record and deadline;
//! - `turn`: one mention from the poll to its reply, in numbered steps (poll, gate, context,
//!   model, tools, act, outcome), each naming the one file it goes to: `prompt` (the
//!   messages), `tools` (the one tool table, its dispatch and gate; handlers in
//!   `tools/social.rs`, `tools/memory.rs`, `tools/skills.rs`), `act` (what it does on Bluesky
//!   and in the swarm, behind the owner's gate), `learn` (the exchange, observations
//!   extracted and reconciled) and `watch` (runs watched for reactions, closed and reported);
//!   `account`: the account's history and the tagging consents kept on its PDS;
//! - `mind`: the self-state, goals, first-interaction and synthesis blocks (seed 002);
//!   [`context`]: the trust-labelled blocks of the system prompt;
//! - `entries`: musing, the daily reflection and the review beside the batches, with
//!   [`schedule`] deciding when and [`RunReport`] saying what a run did;
//! - `swarm`: the agent as a buyer (skills by meaning, adoption, execution reports);
//!   `distill`: skills it earns from episodes that went well, `privacy` keeping anything
//!   personal from leaving in one, `optin` from a musing or a reflection; [`outcome`]: what
//!   followed a run, the reward it reports, read by [`reaction`] (thanks, a correction, a
//!   complaint, or nothing clear) from the people [`standing`] says the agent stands behind;
//!   [`experience`]: what the agent lived, apart from peers' skills;
//! - [`llm`]: the chat-completions client (tools, bounded loop, retries, JSON schema), with
//!   `toolcall` reading the calls a model writes in its text; `spend`: what the model costs,
//!   its daily token budget and each stranger's share of it; `local`: a model the node serves
//!   itself (`local_model`), its llama.cpp server a supervised child;
//! - [`bluesky`]: the account (session, notifications, threads, replies, likes; profiles in
//!   `bluesky/profile.rs`); [`facets`]: mentions and links as byte ranges; [`posts`]: posts that
//!   fit; [`consent`]: tagging consent as users say it;
//! - [`rules`]: batch-only URIs, per-author limit, the owner gate bound to its request post;
//! - [`reconcile`]: the LLM reconciler of new observations, with the rules as fallback;
//! - [`chat`]: a local conversation with the operator; [`journal`]: the record of every run;
//!   [`state`]: what the agent keeps in its keyspace; [`metrics`]: what it counts.

mod account;
mod act;
pub mod bluesky;
pub mod chat;
pub mod config;
pub mod consent;
pub mod context;
mod core;
mod distill;
mod entries;
pub mod experience;
pub mod facets;
pub mod journal;
mod learn;
pub mod llm;
mod local;
pub mod metrics;
mod mind;
pub mod node;
mod optin;
pub mod outcome;
pub mod posts;
mod privacy;
mod prompt;
pub mod reaction;
pub mod reconcile;
pub mod rules;
mod runs;
pub mod schedule;
mod secret;
mod spend;
pub mod standing;
pub mod state;
mod swarm;
mod task;
mod toolcall;
mod tools;
mod turn;
mod watch;

pub use config::{AgentBluesky, AgentLlm, Config, LongPosts};
pub use core::AgentStatus;
pub use schedule::{Entry, RunReport};
pub use secret::{Secret, Secrets};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

use druse_protocol::now_ms;
use node::Node;

pub use runs::RUN_TIMEOUT;
use runs::{MAX_WAITING_RUNS, RunRequest};

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

/// Why the agent could not take an operator's request now.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    #[error("the agent is paused: resume it first (druse-node agent resume)")]
    Paused,
    #[error("the agent is {0}, not running yet; try again shortly")]
    NotRunning(&'static str),
    #[error("{MAX_WAITING_RUNS} runs are already waiting; try again later")]
    Busy,
    #[error("the agent stopped before the run ended")]
    Stopped,
    #[error("the {0} took longer than {RUN_TIMEOUT:?}")]
    TimedOut(&'static str),
    #[error("no answer: {0}")]
    Failed(String),
    #[error("the run journal could not be opened; see the node's log")]
    NoJournal,
    #[error("{}: musings, reflections and reviews need one", bluesky::NO_ACCOUNT)]
    ChatOnly,
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

    /// The record of every run (its calls block: run them off the async threads).
    pub fn journal(&self) -> Result<Arc<journal::Journal>, Refused> {
        self.journal.clone().ok_or(Refused::NoJournal)
    }

    /// One turn of a local conversation with the agent, without Bluesky.
    pub async fn chat(&self, body: chat::ChatBody) -> Result<chat::ChatAnswer, Refused> {
        if self.paused.load(Ordering::SeqCst) {
            return Err(Refused::Paused);
        }
        let Some(agent) = self.agent.get().cloned() else {
            return Err(Refused::NotRunning(self.status().state));
        };
        match tokio::time::timeout(RUN_TIMEOUT, agent.chat(body)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(Refused::Failed(error.to_string())),
            Err(_) => Err(Refused::TimedOut("conversation")),
        }
    }

    /// Runs `entry` now, in the agent's loop and with its rules (a musing still posts at most
    /// once per session, a reflection once per day), and answers what it did.
    pub async fn run(&self, entry: Entry) -> Result<RunReport, Refused> {
        let status = self.status();
        if status.chat_only {
            return Err(Refused::ChatOnly);
        }
        if status.state != "running" {
            return Err(Refused::NotRunning(status.state));
        }
        if self.paused.load(Ordering::SeqCst) {
            return Err(Refused::Paused);
        }
        let (tx, rx) = oneshot::channel();
        self.runs.try_send((entry, tx)).map_err(|_| Refused::Busy)?;
        match tokio::time::timeout(RUN_TIMEOUT, rx).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err(Refused::Stopped),
            Err(_) => Err(Refused::TimedOut("run")),
        }
    }
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

/// The body of `POST /v1/agent/run`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    pub entry: Entry,
}

/// Starts the agent's task in `node` (the config enables it: there are `secrets`), its
/// Bluesky session kept in the file `session`. Returns at once: logging in and polling happen
/// in the task, which retries a failed login with backoff.
pub fn start(
    node: Arc<dyn Node>,
    config: Config,
    session: PathBuf,
    metrics: metrics::Metrics,
    secrets: Secrets,
) -> Handle {
    let mut config = config;
    // A model the node serves itself: its server starts now, and the agent waits for it.
    let local = local::start(&*node, &mut config.llm, metrics.clone());
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
    let journal = match node
        .keyspace(journal::KEYSPACE)
        .and_then(|tree| journal::Journal::open(node.database(), tree, config.run_log_keep))
    {
        Ok(journal) => Some(Arc::new(journal)),
        Err(error) => {
            tracing::error!(%error, "could not open the run journal: runs are not recorded");
            None
        }
    };
    let running = Arc::new(OnceLock::new());
    let handle =
        Handle { status: Arc::clone(&status), runs, paused: Arc::clone(&paused), journal, agent: Arc::clone(&running) };
    let host = Host { node: Arc::clone(&node), config, session, local };
    node.spawn("agent", Box::pin(run_agent(host, metrics, secrets, handle.clone(), requests)));
    handle
}

fn set<F: FnOnce(&mut AgentStatus)>(status: &Mutex<AgentStatus>, f: F) {
    f(&mut status.lock().unwrap_or_else(|p| p.into_inner()));
}

/// What the agent runs in and from: the node, its `[agent]` section, and the file that keeps
/// its Bluesky session.
#[derive(Debug)]
struct Host {
    node: Arc<dyn Node>,
    config: Config,
    session: PathBuf,
    /// The model the node serves itself (`[agent.llm] local_model`), if any.
    local: Option<local::LocalModel>,
}

async fn connect(
    host: &Host,
    metrics: &metrics::Metrics,
    secrets: &Secrets,
    status: &Arc<Mutex<AgentStatus>>,
    journal: Option<Arc<journal::Journal>>,
) -> Result<Arc<core::Agent>, String> {
    let Host { node, config, session, local } = host;
    if let Some(local) = local {
        local.ready(local::LOAD_TIMEOUT).await?;
        tracing::info!(url = local.base_url(), "the agent talks to the local model");
    }
    let (bsky, origin, owner_did) = if config.chat_only() {
        tracing::warn!("{}", bluesky::NO_ACCOUNT);
        (bluesky::Bluesky::offline(session.clone()), None, String::new())
    } else {
        let (bsky, origin) = bluesky::Bluesky::connect(
            &config.bluesky.service,
            &config.bluesky.handle,
            &secrets.password,
            session.clone(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let owner_did = bsky
            .resolve(&config.bluesky.owner)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("agent.bluesky.owner: the handle {} does not resolve", config.bluesky.owner))?;
        (bsky, Some(origin), owner_did)
    };
    let db = node.database().clone();
    let tree = node.keyspace(state::KEYSPACE).map_err(|e| e.to_string())?;
    let (state, pruned) = task::blocking(move || -> Result<_, fjall::Error> {
        let state = state::AgentState::open(&db, tree)?;
        let pruned = state.prune(now_ms())?;
        Ok((state, pruned))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    let spend = Arc::new(spend::Spend::new(&config.llm, metrics.clone(), Some(state.clone())));
    let llm = llm::Llm::with_spend(&config.llm, secrets.llm_key.clone(), metrics.clone(), spend)
        .map_err(|e| e.to_string())?;
    if let Some(origin) = origin {
        tracing::info!(handle = bsky.handle(), did = bsky.did(), session = ?origin, pruned, "the agent is on Bluesky");
        let how = match origin {
            bluesky::SessionOrigin::Reused => "reused",
            bluesky::SessionOrigin::LoggedIn => "logged_in",
        };
        metrics::Metrics::count(&metrics.sessions, how);
        metrics.session_refreshes.set(bsky.refreshes() as i64);
    }
    let spent_today = node.spent_today();
    set(status, |s| {
        s.did = origin.map(|_| bsky.did().to_owned());
        s.session = origin;
        s.chat_only = config.chat_only();
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
    let mut agent = core::Agent::new(
        Arc::clone(node),
        config.clone(),
        llm,
        bsky,
        owner_did,
        state,
        metrics.clone(),
        Arc::clone(status),
    );
    if let Some(persona) = persona {
        agent.persona = persona;
    }
    agent.journal = journal;
    let agent = Arc::new(agent);
    if origin.is_some() {
        agent.adopt_history().await.map_err(|e| format!("reading the account's history: {e}"))?;
    }
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
    host: Host,
    metrics: metrics::Metrics,
    secrets: Secrets,
    handle: Handle,
    requests: mpsc::Receiver<RunRequest>,
) {
    let Handle { status, paused, journal, agent: running, .. } = handle;
    let mut stopped = host.node.stopped();
    // Retries double from 2 s up to a minute: an operator who mends the PDS or the password
    // sees the agent log in within a minute, and a host under load that failed the first few
    // tries is not left waiting minutes for the next.
    const MOST: Duration = Duration::from_secs(60);
    let mut backoff = Duration::from_secs(2);
    let agent = loop {
        let connected = tokio::select! {
            () = &mut stopped => return,
            connected = connect(&host, &metrics, &secrets, &status, journal.clone()) => connected,
        };
        match connected {
            Ok(agent) => break agent,
            Err(error) => {
                tracing::error!(%error, retry_in_s = backoff.as_secs(), "the agent could not start");
                set(&status, |s| {
                    s.state = "retrying";
                    s.last_error = Some(error);
                });
                tokio::select! {
                    () = &mut stopped => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MOST);
            }
        }
    };
    let _ = running.set(Arc::clone(&agent));
    // Running once the agent can be reached (a conversation, an operator's run).
    set(&status, |s| s.state = "running");
    runs::serve(agent, requests, paused, stopped).await;
}
