//! The `[agent]` section: the Bluesky account, the language model, and the loop's limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A bad or missing `[agent]` setting, named by its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// An hour of the day written as 0–23, or the word `"off"` (TOML has no null).
mod hour_or_off {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Hour(i64),
        Word(String),
    }

    pub(super) fn serialize<S: Serializer>(hour: &Option<u8>, s: S) -> Result<S::Ok, S::Error> {
        match hour {
            Some(h) => s.serialize_u8(*h),
            None => s.serialize_str("off"),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
        let out_of_range = |what: String| D::Error::custom(format!("{what} is not an hour: write 0 to 23, or \"off\""));
        match Written::deserialize(d)? {
            // Out of range but still a u8 (24..=255) is left to `Config::check`, which names the key.
            Written::Hour(h) => u8::try_from(h).map(Some).map_err(|_| out_of_range(h.to_string())),
            Written::Word(w) if w.eq_ignore_ascii_case("off") => Ok(None),
            Written::Word(w) => Err(out_of_range(format!("{w:?}"))),
        }
    }
}

/// The agent loop (seeds 000–002); off until configured. Every key is documented in
/// `deploy/edge.toml`; [`Config::check`] refuses a bad or missing one by name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub enabled: bool,
    /// How often notifications are polled (seed 001: 10 s).
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Replies one author may get within `per_author_window` (a moving window).
    pub per_author_replies: u32,
    #[serde(with = "humantime_serde")]
    pub per_author_window: Duration,
    /// Notification batches (threads) handled at once.
    pub concurrent_batches: usize,
    /// Most LLM round trips in one run of the agent (tool calls answered, then asked again).
    pub max_tool_steps: usize,
    /// Notifications taken from one poll, at most.
    pub max_batch: usize,
    /// Scheduled musing: an original post at most every `musing_interval`, off by default.
    pub musing: bool,
    #[serde(with = "humantime_serde")]
    pub musing_interval: Duration,
    /// Seed 003: activity after a longer gap starts a new session; a musing is never posted
    /// within this long of a conversation, and at most once per session.
    #[serde(with = "humantime_serde")]
    pub session_gap: Duration,
    /// The UTC hour (0–23) from which the daily reflection runs; `"off"` turns it off.
    #[serde(with = "hour_or_off")]
    pub reflection_hour: Option<u8>,
    /// How long an approval request waits for the owner's like.
    #[serde(with = "humantime_serde")]
    pub approval_ttl: Duration,
    /// Similar situations handled well before the distill pass writes their procedure as a
    /// skill (seed 004's crystallization); as many more make its next version.
    #[serde(alias = "crystallize_after")]
    pub distill_after: u32,
    /// Cosine similarity (of the memory engine's vectors) at which two episodes count as the
    /// same kind of situation.
    pub distill_similarity: f32,
    /// A run's reward at or above which its episode counts as handled well.
    pub good_reward: f64,
    /// How long after a run reactions to its replies count toward its reward.
    #[serde(with = "humantime_serde")]
    pub outcome_window: Duration,
    /// A run with a reaction closes once no other came for this long (or at the window's end).
    #[serde(with = "humantime_serde")]
    pub outcome_quiet: Duration,
    /// What the agent may spend adopting the swarm's skills per UTC day, in micro-USDC.
    pub skill_budget_per_day: u64,
    /// Above this price (micro-USDC) an adoption waits for the owner's approval.
    pub skill_approval_above: u64,
    /// The asking price of the skills the agent publishes, in micro-USDC: a buyer pays it only
    /// where its own computed price supports it, and its computed price otherwise.
    pub skill_asking_price: u64,
    /// Swarm skills shown in each batch's context, at most.
    pub swarm_skills: usize,
    /// Whose reactions a signed execution report may rest on (issue 38): `owner`, `follows`
    /// (accounts the agent follows, each follow approved by the owner), `allow_list`
    /// (`outcome_allow`), `older_than` (accounts older than `outcome_min_account_age`).
    /// Reactions from anyone else still shape the agent's own memory, never a report.
    pub outcome_from: Vec<OutcomeSource>,
    /// The accounts (handles or DIDs) whose reactions a report may rest on, with `allow_list`.
    pub outcome_allow: Vec<String>,
    /// With `older_than`: the age an account must have for its reactions to back a report.
    #[serde(with = "humantime_serde")]
    pub outcome_min_account_age: Duration,

    // Who may steer the agent, and how long it may take (issue 27).
    /// Longest a thread's run may take, model calls and retries included; past it the run is
    /// dropped and its notifications are tried again at a later poll.
    #[serde(with = "humantime_serde")]
    pub batch_deadline: Duration,
    /// Approval requests (posts, follows, skills) that one author's messages may lead to per
    /// UTC day; the owner's own messages are not limited. 0: a stranger never leads to one.
    pub gated_per_author_per_day: u32,
    /// When not empty, only these authors (handles or DIDs) are answered, and the owner.
    pub allow_authors: Vec<String>,
    /// Authors (handles or DIDs) never answered, and whose messages lead to nothing.
    pub block_authors: Vec<String>,
    /// An answer over Bluesky's 300 graphemes: `thread` posts it as a thread of replies,
    /// `shorten` cuts it at a word and ends it with an ellipsis.
    pub long_posts: LongPosts,
    /// Posts one answer may become as a thread, at most (the rest is cut).
    pub max_thread_posts: usize,

    // An operator's controls (issue 28).
    /// The agent decides but writes nothing to Bluesky (no post, reply, like, follow, record or
    /// read mark): it logs what it would have written.
    pub dry_run: bool,
    /// A file whose text replaces the agent's default persona (who it is and how it speaks) at
    /// the head of every prompt; the safety rules always follow it. At most 16 KiB.
    pub persona_file: Option<std::path::PathBuf>,
    /// The episodic memories a run sees go through one model pass first (seed 000): deduped,
    /// recency-aware, stale entries flagged; cached for an hour.
    pub synthesize_memories: bool,
    /// The daily reflection may also post a short public reflection (as phi does).
    pub post_reflection: bool,
    /// A musing's or a reflection's post goes out at once; otherwise it waits for the owner's
    /// like. Either way it passes the privacy check and quotes no stranger.
    pub autopost: bool,
    /// How many runs of the model the journal keeps (`druse-node agent log`); older ones are
    /// forgotten.
    pub run_log_keep: usize,

    pub bluesky: AgentBluesky,
    pub llm: AgentLlm,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            enabled: false,
            poll_interval: Duration::from_secs(10),
            per_author_replies: 30,
            per_author_window: Duration::from_secs(3600),
            concurrent_batches: 3,
            max_tool_steps: 6,
            max_batch: 50,
            musing: false,
            musing_interval: Duration::from_secs(2 * 3600),
            session_gap: Duration::from_secs(30 * 60),
            reflection_hour: Some(23),
            approval_ttl: Duration::from_secs(3600),
            distill_after: 3,
            distill_similarity: 0.5,
            good_reward: 0.5,
            outcome_window: Duration::from_secs(24 * 3600),
            outcome_quiet: Duration::from_secs(3600),
            skill_budget_per_day: 100_000,
            skill_approval_above: 20_000,
            skill_asking_price: 50_000,
            swarm_skills: 3,
            outcome_from: vec![OutcomeSource::Owner, OutcomeSource::Follows],
            outcome_allow: Vec::new(),
            outcome_min_account_age: Duration::from_secs(180 * 24 * 3600),
            batch_deadline: Duration::from_secs(180),
            gated_per_author_per_day: 2,
            allow_authors: Vec::new(),
            block_authors: Vec::new(),
            long_posts: LongPosts::Thread,
            max_thread_posts: 4,
            dry_run: false,
            persona_file: None,
            synthesize_memories: true,
            post_reflection: false,
            autopost: false,
            run_log_keep: 1000,
            bluesky: AgentBluesky::default(),
            llm: AgentLlm::default(),
        }
    }
}

/// Whose reactions an execution report may rest on (`outcome_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeSource {
    /// The owner's own reactions.
    Owner,
    /// Accounts the agent follows (a follow needs the owner's approval).
    Follows,
    /// Accounts named in `outcome_allow`.
    AllowList,
    /// Accounts older than `outcome_min_account_age`.
    OlderThan,
}

/// What the agent does with an answer too long for one post.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LongPosts {
    Thread,
    Shorten,
}

/// The agent's Bluesky account (`[agent.bluesky]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentBluesky {
    /// The agent's PDS, e.g. `https://bsky.social` or a local `http://localhost:2583`.
    pub service: String,
    /// The agent's handle.
    pub handle: String,
    /// The name of the environment variable holding the app password (never the password).
    pub password_env: String,
    /// The owner's handle: the only account whose like approves a gated action.
    pub owner: String,
}

impl Default for AgentBluesky {
    fn default() -> Self {
        Self {
            service: String::new(),
            handle: String::new(),
            password_env: "DRUSE_AGENT_BSKY_PASSWORD".into(),
            owner: String::new(),
        }
    }
}

/// The agent's language model: any OpenAI-compatible server (`[agent.llm]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentLlm {
    /// The server's base URL, up to and including `/v1`.
    pub base_url: String,
    pub model: String,
    /// The name of the environment variable holding the API key; empty for a server that
    /// needs none (Ollama, llama.cpp).
    pub api_key_env: String,
    /// Most tokens one answer may have.
    pub max_tokens: u32,
    /// Longest wait for one answer.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Retries of a 429, a 5xx or a transport error, with exponential backoff.
    pub max_retries: u32,
    /// The first backoff; each retry doubles it (a `Retry-After` header wins, capped at 60 s).
    #[serde(with = "humantime_serde")]
    pub retry_backoff: Duration,
    /// What the server charges, in USD per million prompt tokens and per million completion
    /// tokens (0 for a local model): spend per day is counted in metrics and the status.
    pub prompt_price: f64,
    pub completion_price: f64,
    /// Most USD the model may cost in one UTC day; once reached, the agent asks the model
    /// nothing more (and answers nothing) until the next day. 0: no cap.
    pub daily_spend_cap: f64,
    /// Most tokens (prompt and completion) the model may use in one UTC day, counted from the
    /// server's `usage` or estimated at four bytes a token when it reports none. 0: none.
    pub daily_token_budget: u64,
    /// The fraction of `daily_token_budget` one stranger's notifications may use in a day;
    /// the owner and the agent's own entries have no share, only the budget. 1: no share.
    pub stranger_share: f64,
    /// The fraction of `daily_token_budget` all strangers together may use in a day: the
    /// rest is kept for the owner and the agent's own entries. 1: no such share.
    pub strangers_share: f64,
    /// A GGUF model file the node serves itself: it starts llama.cpp's server on 127.0.0.1 as
    /// a child process, restarts it if it dies, stops it with the node, and talks to it in
    /// place of `base_url` (which stays empty).
    pub local_model: Option<std::path::PathBuf>,
    /// The `llama-server` binary for `local_model`; by default `llama-server` on PATH, else
    /// Python's `xllamacpp` wheel (in `python3`, or in `~/.cache/druse/llama-venv`).
    pub llama_server: Option<std::path::PathBuf>,
    /// The context window, in tokens, the local model is served with.
    pub local_context: u32,
}

impl Default for AgentLlm {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key_env: String::new(),
            max_tokens: 1024,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            retry_backoff: Duration::from_millis(500),
            prompt_price: 0.0,
            completion_price: 0.0,
            daily_spend_cap: 0.0,
            daily_token_budget: 2_000_000,
            stranger_share: 0.05,
            strangers_share: 0.8,
            local_model: None,
            llama_server: None,
            local_context: 8192,
        }
    }
}

impl Config {
    /// The agent has no Bluesky account (`[agent.bluesky] handle` is unset): it answers its
    /// operator in local conversations (`druse-node agent chat`) and reads no network.
    pub fn chat_only(&self) -> bool {
        self.bluesky.handle.trim().is_empty()
    }

    /// Checks what TOML types cannot. A disabled agent is not checked further; an enabled
    /// one needs its accounts and its model, and each refusal names the key.
    pub fn check(&self) -> Result<(), Invalid> {
        if !self.enabled {
            return Ok(());
        }
        let bad = |key: &str, why: &str| Err(Invalid(format!("agent.{key} {why}")));
        let http = |s: &str| s.starts_with("http://") || s.starts_with("https://");
        if self.poll_interval < Duration::from_millis(100) || self.poll_interval > Duration::from_secs(3600) {
            return bad("poll_interval", "must be between 100ms and 1h");
        }
        if self.per_author_replies == 0 {
            return bad("per_author_replies", "must be positive");
        }
        if self.per_author_window.is_zero() {
            return bad("per_author_window", "must be positive");
        }
        if !(1..=64).contains(&self.concurrent_batches) {
            return bad("concurrent_batches", "must be between 1 and 64");
        }
        if !(1..=6).contains(&self.max_tool_steps) {
            return bad("max_tool_steps", "must be between 1 and 6");
        }
        if !(1..=100).contains(&self.max_batch) {
            return bad("max_batch", "must be between 1 and 100");
        }
        if self.musing_interval < Duration::from_secs(60) {
            return bad("musing_interval", "must be at least 1m");
        }
        if self.session_gap.is_zero() || self.session_gap > Duration::from_secs(24 * 3600) {
            return bad("session_gap", "must be between 1s and 24h");
        }
        if self.reflection_hour.is_some_and(|h| h > 23) {
            return bad("reflection_hour", "must be an hour from 0 to 23");
        }
        if self.approval_ttl.is_zero() {
            return bad("approval_ttl", "must be positive");
        }
        if !(1..=100).contains(&self.distill_after) {
            return bad("distill_after", "must be between 1 and 100");
        }
        if !(0.0..=1.0).contains(&self.distill_similarity) {
            return bad("distill_similarity", "must be a cosine between 0 and 1");
        }
        if !(-1.0..=1.0).contains(&self.good_reward) {
            return bad("good_reward", "must be between -1 and 1");
        }
        if self.outcome_window < Duration::from_secs(1) || self.outcome_window > Duration::from_secs(30 * 24 * 3600) {
            return bad("outcome_window", "must be between 1s and 30 days");
        }
        if self.outcome_quiet.is_zero() || self.outcome_quiet > self.outcome_window {
            return bad("outcome_quiet", "must be positive and at most outcome_window");
        }
        if self.swarm_skills > 20 {
            return bad("swarm_skills", "must be at most 20");
        }
        if !(1..=100_000).contains(&self.run_log_keep) {
            return bad("run_log_keep", "must be between 1 and 100000");
        }
        if self.batch_deadline < Duration::from_secs(1) || self.batch_deadline > Duration::from_secs(3600) {
            return bad("batch_deadline", "must be between 1s and 1h");
        }
        if self.gated_per_author_per_day > 100 {
            return bad("gated_per_author_per_day", "must be at most 100");
        }
        if self.outcome_from.len() > 4 {
            return bad("outcome_from", "may name each of owner, follows, allow_list, older_than once");
        }
        if self.outcome_from.contains(&OutcomeSource::OlderThan)
            && self.outcome_min_account_age < Duration::from_secs(24 * 3600)
        {
            return bad("outcome_min_account_age", "must be at least 1 day with older_than (a fresh account is free)");
        }
        for (key, list) in [
            ("allow_authors", &self.allow_authors),
            ("block_authors", &self.block_authors),
            ("outcome_allow", &self.outcome_allow),
        ] {
            if list.len() > 10_000 {
                return bad(key, "may name at most 10000 authors");
            }
            if let Some(who) = list.iter().find(|a| !a.starts_with("did:") && !is_handle(a)) {
                return bad(key, &format!("names {who:?}, which is neither a handle nor a DID"));
            }
        }
        if !(1..=10).contains(&self.max_thread_posts) {
            return bad("max_thread_posts", "must be between 1 and 10");
        }
        let b = &self.bluesky;
        // Without a handle the agent has no account: it answers its operator alone (`agent chat`).
        if !self.chat_only() {
            if !http(&b.service) {
                return bad("bluesky.service", "must be the http(s) URL of the agent's PDS");
            }
            if !is_handle(&b.handle) {
                return bad("bluesky.handle", "must be a handle such as agent.bsky.social");
            }
            if !is_env_name(&b.password_env) {
                return bad("bluesky.password_env", "must name the environment variable holding the app password");
            }
            if !is_handle(&b.owner) {
                return bad("bluesky.owner", "must be the owner's handle");
            }
        }
        let l = &self.llm;
        if let Some(model) = &l.local_model {
            l.check_local(model)?;
        } else {
            if !http(&l.base_url) {
                return bad(
                    "llm.base_url",
                    "must be the http(s) URL of an OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1 \
                     (or set llm.local_model to a .gguf file the node serves itself)",
                );
            }
            if l.model.trim().is_empty() {
                return bad("llm.model", "must name the model");
            }
        }
        if !l.api_key_env.is_empty() && !is_env_name(&l.api_key_env) {
            return bad("llm.api_key_env", "must be empty or name an environment variable");
        }
        if !(16..=32_768).contains(&l.max_tokens) {
            return bad("llm.max_tokens", "must be between 16 and 32768");
        }
        if l.timeout < Duration::from_millis(100) || l.timeout > Duration::from_secs(600) {
            return bad("llm.timeout", "must be between 100ms and 10m");
        }
        if l.max_retries > 10 {
            return bad("llm.max_retries", "must be at most 10");
        }
        if l.retry_backoff > Duration::from_secs(60) {
            return bad("llm.retry_backoff", "must be at most 60s");
        }
        for (key, value) in [
            ("llm.prompt_price", l.prompt_price),
            ("llm.completion_price", l.completion_price),
            ("llm.daily_spend_cap", l.daily_spend_cap),
        ] {
            if !value.is_finite() || !(0.0..=1_000_000.0).contains(&value) {
                return bad(key, "must be a number of USD from 0 to 1000000");
            }
        }
        for (key, share) in [("llm.stranger_share", l.stranger_share), ("llm.strangers_share", l.strangers_share)] {
            if !share.is_finite() || share <= 0.0 || share > 1.0 {
                return bad(key, "must be a fraction above 0 and at most 1");
            }
        }
        Ok(())
    }
}

impl AgentLlm {
    /// A local model's keys: the file is there, the server named (if any) is a file, and no
    /// `base_url` competes with it.
    fn check_local(&self, model: &std::path::Path) -> Result<(), Invalid> {
        let bad = |key: &str, why: String| Err(Invalid(format!("agent.llm.{key} {why}")));
        if !self.base_url.is_empty() {
            return bad(
                "base_url",
                "must be empty with local_model: the node serves the model itself and knows its URL".into(),
            );
        }
        if !model.is_file() {
            return bad("local_model", format!("{}: no such file (a .gguf model file)", model.display()));
        }
        if let Some(server) = &self.llama_server
            && !server.is_file()
        {
            return bad(
                "llama_server",
                format!("{}: no such file (llama.cpp's llama-server binary)", server.display()),
            );
        }
        if !(512..=1_048_576).contains(&self.local_context) {
            return bad("local_context", "must be between 512 and 1048576 tokens".into());
        }
        Ok(())
    }
}

/// A plausible handle: dot-separated labels of letters, digits and hyphens.
fn is_handle(s: &str) -> bool {
    let s = s.strip_prefix('@').unwrap_or(s);
    s.len() <= 253
        && s.contains('.')
        && s.split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

/// A plausible environment variable name.
fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> Config {
        Config {
            enabled: true,
            bluesky: AgentBluesky {
                service: "http://localhost:2583".into(),
                handle: "agent.test".into(),
                owner: "owner.test".into(),
                ..AgentBluesky::default()
            },
            ..Config::default()
        }
    }

    #[test]
    fn a_local_model_replaces_the_url_and_must_be_there() {
        let dir = tempfile::tempdir().unwrap();
        let gguf = dir.path().join("model.gguf");
        std::fs::write(&gguf, b"GGUF").unwrap();
        let mut agent = enabled();
        agent.llm.local_model = Some(gguf.clone());
        agent.check().expect("a local model needs no base_url and no model name");

        let refused = |agent: &Config| agent.check().unwrap_err().to_string();
        let mut missing = agent.clone();
        missing.llm.local_model = Some(dir.path().join("absent.gguf"));
        let why = refused(&missing);
        assert!(why.contains("agent.llm.local_model") && why.contains("absent.gguf") && why.contains("no such file"));
        let mut both = agent.clone();
        both.llm.base_url = "http://127.0.0.1:11434/v1".into();
        assert!(refused(&both).contains("agent.llm.base_url must be empty with local_model"));
        let mut server = agent.clone();
        server.llm.llama_server = Some(dir.path().join("llama-server"));
        assert!(refused(&server).contains("agent.llm.llama_server"));
        let mut small = agent.clone();
        small.llm.local_context = 100;
        assert!(refused(&small).contains("agent.llm.local_context"));
        let mut neither = enabled();
        neither.llm.model = "m".into();
        assert!(refused(&neither).contains("local_model"), "the error names both ways to set a model");
    }
}
