//! `druse_agent_*` metrics, registered in the node's one registry.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// One label: an outcome, a reason, a tool or an action.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    pub label: &'static str,
}

/// The agent's metrics; clones share the same series.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Notifications taken into a batch, by reason (`mention`, `reply`, `like`, …).
    pub notifications: Family<Label, Counter>,
    /// Replies posted.
    pub replies: Counter,
    /// Likes and posts made.
    pub actions: Family<Label, Counter>,
    /// LLM calls by outcome (`ok`, `retryable`, `error`).
    pub llm_calls: Family<Label, Counter>,
    pub llm_seconds: Histogram,
    /// LLM tokens by direction (`prompt`, `completion`).
    pub llm_tokens: Family<Label, Counter>,
    /// What the model cost, in USD (from `agent.llm.prompt_price` and `completion_price`):
    /// in all, and today (UTC).
    pub llm_spend: Counter<f64, std::sync::atomic::AtomicU64>,
    pub llm_spend_today: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The model's daily cap in USD (0: none), and 1 while today's spend has reached it.
    pub llm_spend_cap: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub llm_capped: Gauge,
    /// Tool calls by tool name.
    pub tool_calls: Family<Label, Counter>,
    /// Tool calls by the form they came in (`native`, `content_json`, `tagged`), and runs
    /// whose model answered with text and no call at all (`prose`: silence).
    pub tool_call_format: Family<Label, Counter>,
    /// Tool calls the model got wrong, by why (`bad_arguments`, `unknown_tool`): not calls of
    /// any tool.
    pub tool_errors: Family<Label, Counter>,
    /// Approval requests posted, by whose message led to them (`owner`, `stranger`, `agent`
    /// for the agent's own schedule or spending).
    pub gate_requests_led: Family<Label, Counter>,
    /// Threads whose run passed `batch_deadline` and was dropped, to be tried again.
    pub batch_deadlines: Counter,
    /// Actions the rules refused, by rule.
    pub refused: Family<Label, Counter>,
    /// Approval requests posted, and approvals granted.
    pub gate_requests: Counter,
    pub gate_approvals: Counter,
    /// Batches run, by outcome (`ok`, `llm_failed`, …).
    pub batches: Family<Label, Counter>,
    /// Runs of the other entry points, by entry and outcome (`musing_posted`, …).
    pub entries: Family<Label, Counter>,
    /// Observations reconciled, by the model's decision (`add`, `update`, `delete`, `noop`)
    /// or `rules` when the rule-based reconciler decided instead.
    pub reconciled: Family<Label, Counter>,
    /// Bluesky sessions started, by how (`logged_in`, `reused`).
    pub sessions: Family<Label, Counter>,
    /// Access tokens refreshed with the refresh token.
    pub session_refreshes: Gauge,
    /// Skills the distill pass wrote, by `new` or `new_version`.
    pub skills_distilled: Family<Label, Counter>,
    /// Skills kept from the swarm, by reason (`privacy`).
    pub skills_refused: Family<Label, Counter>,
    /// Skills whose procedure a run used, by origin (`own`, `swarm`).
    pub skills_used: Family<Label, Counter>,
    /// Swarm skills the agent adopted (paid for).
    pub skills_adopted: Counter,
    /// Execution reports signed for swarm skills from a run's reward, by `success`/`failure`.
    pub rewards_reported: Family<Label, Counter>,
    /// Runs closed, by outcome (`good`, `bad`, `neutral`, `silent`).
    pub runs_closed: Family<Label, Counter>,
    /// Times the local model server (`[agent.llm] local_model`) stopped and was started again.
    pub local_model_restarts: Counter,
}

fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl Default for Metrics {
    /// Metrics that are counted but not registered (tests, tools).
    fn default() -> Self {
        Self {
            notifications: Family::default(),
            replies: Counter::default(),
            actions: Family::default(),
            llm_calls: Family::default(),
            llm_seconds: histogram(),
            llm_tokens: Family::default(),
            llm_spend: Counter::default(),
            llm_spend_today: Gauge::default(),
            llm_spend_cap: Gauge::default(),
            llm_capped: Gauge::default(),
            tool_calls: Family::default(),
            tool_call_format: Family::default(),
            tool_errors: Family::default(),
            gate_requests_led: Family::default(),
            batch_deadlines: Counter::default(),
            refused: Family::default(),
            gate_requests: Counter::default(),
            gate_approvals: Counter::default(),
            batches: Family::default(),
            entries: Family::default(),
            reconciled: Family::default(),
            sessions: Family::default(),
            session_refreshes: Gauge::default(),
            skills_distilled: Family::default(),
            skills_refused: Family::default(),
            skills_used: Family::default(),
            skills_adopted: Counter::default(),
            rewards_reported: Family::default(),
            runs_closed: Family::default(),
            local_model_restarts: Counter::default(),
        }
    }
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("druse_agent");
        r.register("notifications", "Notifications taken into a batch, by reason", m.notifications.clone());
        r.register("replies", "Replies posted", m.replies.clone());
        r.register("actions", "Likes and posts made, by action", m.actions.clone());
        r.register("llm_calls", "LLM calls by outcome", m.llm_calls.clone());
        r.register("llm_duration_seconds", "Duration of one LLM call", m.llm_seconds.clone());
        r.register("llm_tokens", "LLM tokens by direction", m.llm_tokens.clone());
        r.register("llm_spend_usd", "What the model cost, in USD, from the configured prices", m.llm_spend.clone());
        r.register("llm_spend_today_usd", "What the model cost today (UTC), in USD", m.llm_spend_today.clone());
        r.register("llm_daily_cap_usd", "The model's daily spend cap in USD (0: none)", m.llm_spend_cap.clone());
        r.register("llm_capped", "1 while today's spend has reached the daily cap", m.llm_capped.clone());
        r.register("tool_calls", "Tool calls by tool", m.tool_calls.clone());
        r.register(
            "tool_call_format",
            "Tool calls by the form they came in, and runs that were prose with no call",
            m.tool_call_format.clone(),
        );
        r.register("tool_errors", "Tool calls the model got wrong, by why", m.tool_errors.clone());
        r.register(
            "gate_requests_led",
            "Approval requests posted, by whose message led to them",
            m.gate_requests_led.clone(),
        );
        r.register("batch_deadlines", "Thread runs dropped at batch_deadline", m.batch_deadlines.clone());
        r.register("refused", "Actions refused by a rule, by rule", m.refused.clone());
        r.register("gate_requests", "Owner approval requests posted", m.gate_requests.clone());
        r.register("gate_approvals", "Owner approvals granted", m.gate_approvals.clone());
        r.register("batches", "Notification batches by outcome", m.batches.clone());
        r.register("entries", "Musing, reflection and review runs by outcome", m.entries.clone());
        r.register("reconciled", "Observations reconciled, by decision or by the rules", m.reconciled.clone());
        r.register("sessions", "Bluesky sessions started, by how", m.sessions.clone());
        r.register("session_refreshes", "Access tokens refreshed with the refresh token", m.session_refreshes.clone());
        r.register(
            "skills_distilled",
            "Skills distilled from episodes that went well, by kind",
            m.skills_distilled.clone(),
        );
        r.register("skills_refused", "Distilled skills kept from the swarm, by reason", m.skills_refused.clone());
        r.register("skills_used", "Skills whose procedure a run used, by origin", m.skills_used.clone());
        r.register("skills_adopted", "Swarm skills the agent adopted", m.skills_adopted.clone());
        r.register(
            "rewards_reported",
            "Execution reports signed from a run's reward, by outcome",
            m.rewards_reported.clone(),
        );
        r.register("runs_closed", "Runs closed with their outcome, by outcome", m.runs_closed.clone());
        r.register(
            "local_model_restarts",
            "Times the local model server (agent.llm.local_model) stopped and was started again",
            m.local_model_restarts.clone(),
        );
        m
    }

    pub(crate) fn llm_call(&self, outcome: &'static str, took: Duration) {
        self.llm_calls.get_or_create(&Label { label: outcome }).inc();
        self.llm_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn llm_tokens(&self, prompt: u64, completion: u64) {
        self.llm_tokens.get_or_create(&Label { label: "prompt" }).inc_by(prompt);
        self.llm_tokens.get_or_create(&Label { label: "completion" }).inc_by(completion);
    }

    pub(crate) fn tool_call(&self, tool: &'static str) {
        self.tool_calls.get_or_create(&Label { label: tool }).inc();
    }

    pub(crate) fn refuse(&self, rule: &'static str) {
        self.refused.get_or_create(&Label { label: rule }).inc();
    }

    pub(crate) fn count(family: &Family<Label, Counter>, label: &'static str) {
        family.get_or_create(&Label { label }).inc();
    }
}
