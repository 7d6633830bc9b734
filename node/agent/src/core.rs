//! The running agent's parts, shared by its turns (`turn`), its tools and its scheduled entry
//! points: the model, the account, the node, its state and metrics, and what it shows of itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use druse_memory::crystal::{MemoryKind, Namespace, Origin};
use druse_memory::decay::DecayClass;
use druse_memory::engine::NewMemory;
use druse_protocol::body::SemanticType;
use druse_protocol::now_ms;
use serde::Serialize;

use super::bluesky::{self, Bluesky, Notification};
use super::journal::{Journal, RunRecord};
use super::llm::{self as model, Llm, Message, Tool, Tools, Trace};
use super::metrics::Metrics;
use super::rules::{Gate, RateLimit};
use super::schedule::{Entry, Schedule};
use super::state::{AgentState, Copy};
use crate::config;
use crate::node::Node;

/// Who the agent is and how it speaks, unless `persona_file` says otherwise.
pub(crate) const PERSONA: &str = "You are a druse agent on Bluesky: one node of a peer-to-peer swarm of agents \
that share skills. Be brief, kind and concrete; a reply is at most a few sentences.";

/// What `GET /v1/agent` and `druse-node agent status` show.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentStatus {
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
    /// Micro-USDC spent on the swarm's skills today (UTC), and what the owner allows per day.
    pub skills_spent_today: u64,
    pub skill_budget_per_day: u64,
    pub last_error: Option<String>,
    /// An operator paused it (`druse-node agent pause`).
    pub paused: bool,
    /// Polls skipped while paused, since the node started.
    pub polls_skipped: u64,
    /// It decides but writes nothing to Bluesky (`dry_run`).
    pub dry_run: bool,
    /// It has no Bluesky account: it answers its operator's chat alone.
    pub chat_only: bool,
    /// What the model cost today (UTC) at the configured prices, the daily cap if there is
    /// one, and whether the cap is reached (then it polls nothing until the next day).
    pub model_spent_today_usd: f64,
    pub model_daily_cap_usd: Option<f64>,
    pub model_capped: bool,
    /// Tokens the model used today (UTC), counted against `daily_token_budget`.
    pub model_tokens_today: u64,
    /// The approval requests waiting for the owner's like, each with its action in full
    /// (a post's text included) and whose messages led to it.
    pub pending: Vec<super::rules::Request>,
}

/// The running agent.
#[derive(Debug)]
pub(crate) struct Agent {
    pub(crate) node: Arc<dyn Node>,
    pub(crate) config: config::Config,
    pub(crate) llm: Llm,
    pub(crate) bsky: Bluesky,
    pub(crate) owner_did: String,
    pub(crate) state: AgentState,
    pub(crate) metrics: Metrics,
    pub(crate) status: Arc<Mutex<AgentStatus>>,
    pub(crate) limit: Mutex<RateLimit>,
    pub(crate) gate: Mutex<Gate>,
    pub(crate) schedule: Mutex<Schedule>,
    /// Who the agent is and how it speaks: the head of every prompt (`persona_file`).
    pub(crate) persona: String,
    /// Goals, strangers looked up and syntheses, kept between runs.
    pub(crate) mind: Mutex<Mind>,
    /// Where every run of the model is recorded, if the journal opened.
    pub(crate) journal: Option<Arc<Journal>>,
}

/// One goal: its record key (what `propose_goal_change` names) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Goal {
    pub(crate) rkey: String,
    pub(crate) title: String,
    pub(crate) description: String,
}

/// What the blocks of `mind` keep between runs: the goals read and when, the syntheses by
/// their inputs' hash, and the authors whose profile was read (oldest first).
#[derive(Debug, Default)]
pub(crate) struct Mind {
    pub(crate) goals: Option<(u64, Vec<Goal>)>,
    pub(crate) syntheses: HashMap<u64, (u64, String)>,
    pub(crate) looked_up: std::collections::VecDeque<String>,
}

/// Whose messages led to an approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lead {
    /// The owner's own message.
    Owner,
    /// The agent's own schedule or spending.
    Agent,
    /// Messages of these authors (DIDs), none of them the owner.
    Strangers(Vec<String>),
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A notification's identity in the handled set: the same post can be a mention and a reply.
pub(crate) fn id(n: &Notification) -> String {
    format!("{}#{}", n.uri, n.reason)
}

impl Agent {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        node: Arc<dyn Node>,
        config: config::Config,
        llm: Llm,
        bsky: Bluesky,
        owner_did: String,
        state: AgentState,
        metrics: Metrics,
        status: Arc<Mutex<AgentStatus>>,
    ) -> Self {
        let gate = state.gate();
        let schedule = state.schedule();
        let mut limit = RateLimit::new(config.per_author_replies, config.per_author_window);
        for (author, times) in state.limits() {
            limit.restore(author, times);
        }
        let agent = Self {
            schedule: Mutex::new(schedule),
            limit: Mutex::new(limit),
            gate: Mutex::new(gate),
            persona: PERSONA.to_owned(),
            journal: None,
            mind: Default::default(),
            node,
            config,
            llm,
            bsky,
            owner_did,
            state,
            metrics,
            status,
        };
        agent.show_pending(&lock(&agent.gate));
        agent
    }

    /// One run of the model for `entry`: the tool loop over `messages`, cut off at
    /// `batch_deadline`, and recorded in the journal however it ends.
    pub(crate) async fn run_model<T: Tools + Send>(
        &self,
        entry: &str,
        messages: Vec<Message>,
        tools: &[Tool],
        handler: &mut T,
    ) -> Result<model::Finished, model::Error> {
        let at = now_ms();
        let started = std::time::Instant::now();
        let context = messages.clone();
        let mut trace = Trace::default();
        let run = self.llm.run(messages, tools, self.config.max_tool_steps, handler, &mut trace);
        let result = self.bounded(run).await;
        let outcome = ended(&result, if result.as_ref().is_ok_and(|r| r.exhausted) { "step_limit" } else { "ok" });
        let error = result.as_ref().err().map(ToString::to_string);
        self.record(RunRecord::new(entry, at, &context, trace), started, outcome, error).await;
        result
    }

    /// `call` under [`Agent::deadline`], counted in `batch_deadlines` when it passes.
    async fn bounded<T>(&self, call: impl Future<Output = Result<T, model::Error>>) -> Result<T, model::Error> {
        let deadline = self.deadline();
        tokio::time::timeout(deadline, call).await.unwrap_or_else(|_| {
            self.metrics.batch_deadlines.inc();
            Err(model::Error::Deadline(deadline))
        })
    }

    /// How long a model call may take now: `batch_deadline`, or less when the task it runs in
    /// must end sooner (a second is kept to record the call).
    fn deadline(&self) -> std::time::Duration {
        const TO_RECORD: std::time::Duration = std::time::Duration::from_secs(1);
        match crate::task::time_left() {
            Some(left) => left.saturating_sub(TO_RECORD).min(self.config.batch_deadline),
            None => self.config.batch_deadline,
        }
    }

    /// Keeps `record` in the journal with how long it took, its cost and how it ended.
    async fn record(&self, mut record: RunRecord, started: std::time::Instant, outcome: &str, error: Option<String>) {
        record.ms = started.elapsed().as_millis() as u64;
        record.cost_usd = self.llm.spend().cost_usd(record.tokens.prompt_tokens, record.tokens.completion_tokens);
        record.outcome = outcome.to_owned();
        record.error = error;
        if let Some(journal) = self.journal.clone() {
            let kept = crate::task::blocking(move || journal.put(&mut record)).await;
            if let Err(error) = kept.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
                tracing::warn!(%error, "could not record the run in the journal");
            }
        }
    }

    /// One model call without tools for `entry` (a synthesis, a summary): the answer's text,
    /// with the run's deadline and its record in the journal, as every other run.
    pub(crate) async fn ask_model(&self, entry: &str, messages: Vec<Message>) -> Result<String, model::Error> {
        /// Offered no tools, so a call the model makes anyway is answered with a refusal.
        struct NoTools;
        impl Tools for NoTools {
            async fn call(&mut self, _: &model::ToolCall) -> String {
                "error: no tools are offered here; answer with text".to_owned()
            }
        }
        Ok(self.run_model(entry, messages, &[], &mut NoTools).await?.summary.unwrap_or_default())
    }

    /// One structured answer for `entry` (an extraction, a reconciliation, a distill pass): the
    /// answer to `name`'s JSON `schema`, under the run's deadline and recorded in the journal
    /// however it ends, as every other call of the model.
    pub(crate) async fn structured<T: serde::de::DeserializeOwned>(
        &self,
        entry: &str,
        messages: &[Message],
        name: &str,
        schema: serde_json::Value,
    ) -> Result<T, model::Error> {
        let (at, started) = (now_ms(), std::time::Instant::now());
        let mut trace = Trace::default();
        let result = self.bounded(self.llm.extract_counted(messages, name, schema, &mut trace.tokens)).await;
        trace.steps = 1;
        trace.text = result.as_ref().ok().cloned();
        let outcome = ended(&result, "ok");
        let error = result.as_ref().err().map(ToString::to_string);
        self.record(RunRecord::new(entry, at, messages, trace), started, outcome, error).await;
        model::parse_json(&result?).map_err(|e| model::Error::Schema { schema: name.to_owned(), detail: e.to_string() })
    }

    /// Runs a write of the agent's state off the async threads (it blocks on the store's
    /// journal); a failure is logged as failing to `what`, and gives `None`.
    pub(crate) async fn write_state<T: Send + 'static>(
        &self,
        what: &'static str,
        write: impl FnOnce(&AgentState) -> Result<T, fjall::Error> + Send + 'static,
    ) -> Option<T> {
        let state = self.state.clone();
        match crate::task::blocking(move || write(&state)).await {
            Ok(Ok(out)) => Some(out),
            Ok(Err(error)) => {
                tracing::error!(%error, "could not {what}");
                None
            }
            Err(error) => {
                tracing::error!(%error, "could not {what}");
                None
            }
        }
    }

    /// Writes a copy of the gate taken under its lock; synced first if `durable` (before the
    /// agent acts on what it changed).
    pub(crate) async fn save_gate(&self, copy: Copy, durable: bool) {
        self.write_state("persist the approval gate", move |state| state.save(copy, durable)).await;
    }

    /// Reads and changes the schedule's memory, and persists it.
    pub(crate) async fn with_schedule<T>(&self, f: impl FnOnce(&mut Schedule) -> T) -> T {
        let (out, copy) = {
            let mut schedule = lock(&self.schedule);
            let out = f(&mut schedule);
            (out, self.state.schedule_copy(&schedule))
        };
        self.write_state("persist the agent's schedule", move |state| state.save(copy, false)).await;
        out
    }

    /// Records a musing posted at `now`.
    pub(crate) async fn mused(&self, now: u64) {
        let gap = self.config.session_gap;
        self.with_schedule(|s| {
            s.active(now, gap, false);
            s.mused_at = now;
        })
        .await;
    }

    /// The entry points due at `now` (musing, reflection), by the schedule.
    pub(crate) fn due(&self, now: u64) -> Vec<Entry> {
        lock(&self.schedule).due(&self.config, now)
    }

    /// Counts a reply to `author` against the per-author limit, and persists it (the limit
    /// survives a restart); false when it is spent.
    pub(crate) async fn count_reply(&self, author: &str) -> bool {
        let now = now_ms();
        let times = {
            let mut limit = lock(&self.limit);
            if !limit.allow(author, now) {
                return false;
            }
            limit.times(author, now)
        };
        let author = author.to_owned();
        self.write_state("persist the per-author limit", move |state| state.put_limit(&author, &times)).await;
        true
    }

    /// Whether the owner's lists let `n`'s author be answered: never a blocked author, and
    /// only a listed one when the allow list is not empty (the owner always).
    pub(crate) fn may_answer(&self, n: &Notification) -> bool {
        let named = |list: &[String]| {
            list.iter().any(|a| {
                let a = a.trim_start_matches('@');
                a == n.author_did || a.eq_ignore_ascii_case(&n.author_handle)
            })
        };
        if named(&self.config.block_authors) {
            return false;
        }
        n.author_did == self.owner_did || self.config.allow_authors.is_empty() || named(&self.config.allow_authors)
    }

    /// Changes what the status shows.
    pub(crate) fn set_status(&self, f: impl FnOnce(&mut AgentStatus)) {
        f(&mut lock(&self.status));
    }

    /// Shows the pending approval requests in the status.
    pub(crate) fn show_pending(&self, gate: &super::rules::Gate) {
        lock(&self.status).pending = gate.pending().cloned().collect();
    }

    /// Records that the agent answered `n` (its post, whatever the reason it came by),
    /// synced before this returns.
    pub(crate) async fn mark_answered(&self, n: &Notification) {
        let (uri, handled, now) = (n.uri.clone(), id(n), now_ms());
        self.write_state("record an answered post", move |state| state.mark_answered(&uri, &handled, now)).await;
        lock(&self.status).handled += 1;
    }

    /// Records that `n` was handled, synced before this returns.
    pub(crate) async fn mark_handled(&self, n: &Notification) {
        let (handled, now) = (id(n), now_ms());
        self.write_state("record a handled notification", move |state| state.mark_handled(&handled, now)).await;
        lock(&self.status).handled += 1;
    }
}

/// How a model call ended, for its journal record: `ok` (what a success is called), `deadline`
/// or `failed`.
fn ended<T>(result: &Result<T, model::Error>, ok: &'static str) -> &'static str {
    match result {
        Ok(_) => ok,
        Err(model::Error::Deadline(_)) => "deadline",
        Err(_) => "failed",
    }
}

/// A private memory the agent keeps about a session, its text capped at 8 KiB.
pub(crate) fn memory(text: String, namespace: Namespace, kind: MemoryKind, semantic_type: SemanticType) -> NewMemory {
    let mut text = text;
    super::llm::truncate(&mut text, 8 * 1024);
    NewMemory {
        namespace,
        kind,
        semantic_type,
        origin: Origin::Session,
        decay_class: DecayClass::Default,
        scope: druse_memory::governance::Scope::Private,
        ..NewMemory::text(text)
    }
}
