//! The MCP tools' arguments: their JSON schemas (derived with schemars), how they are read
//! (every refusal names the argument at fault), and the API request each one becomes.
//!
//! The rules are the API's own: a memory is read into the engine's [`NewMemory`] and checked
//! by the engine's check, a search into the engine's [`Query`] and its check, a report into
//! the API's [`ReportRequest`]. The tools only translate, so an MCP caller and an HTTP caller
//! are refused for the same reasons.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::api::{self, ReportRequest};
use crate::cli::percent_encode;
use druse_memory::crystal::CrystalId;
use druse_memory::engine::{self, Memory, NewMemory, Query};

/// An argument the tool cannot use: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The argument at fault, when one is (a dotted path into nested objects).
    pub field: Option<String>,
    pub detail: String,
}

impl Invalid {
    pub(crate) fn new(field: &str, detail: impl Into<String>) -> Self {
        Self { field: Some(field.to_owned()), detail: detail.into() }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "invalid argument `{field}`: {}", self.detail),
            None => write!(f, "invalid arguments: {}", self.detail),
        }
    }
}

/// Reads a tool's arguments into `T`; a refusal names the argument at fault (a wrong type,
/// an unknown value, a missing or unknown argument).
pub fn parse<T: DeserializeOwned>(arguments: Map<String, Value>) -> Result<T, Invalid> {
    serde_path_to_error::deserialize(Value::Object(arguments)).map_err(|error| {
        let path = error.path().to_string();
        let detail = error.into_inner().to_string();
        let field = if path == "." { missing_or_unknown(&detail) } else { Some(path) };
        Invalid { field, detail }
    })
}

/// The argument a top-level serde error is about: serde names a missing or unknown field in
/// backquotes ("missing field `text`", "unknown field `foo`, expected ...").
fn missing_or_unknown(detail: &str) -> Option<String> {
    let start = detail.find('`')? + 1;
    let end = start + detail[start..].find('`')?;
    Some(detail[start..end].to_owned())
}

/// The argument an engine or API refusal names: the first of `fields` its sentence mentions
/// as a word (`aliases` map the engine's names to the tool's, like `q` to `query`).
fn named_field(detail: &str, fields: &[&str], aliases: &[(&str, &str)]) -> Option<String> {
    detail.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).find_map(|word| {
        let word = aliases.iter().find(|(from, _)| *from == word).map_or(word, |(_, to)| *to);
        fields.contains(&word).then(|| word.to_owned())
    })
}

/// A search hit as `memory_search` answers it by default: what a model needs to use it (the
/// text, the id to fetch or correct it by, its kind and namespace, the score and when it was
/// said), not the whole stored record. Anything else is passed through.
pub(crate) fn compact_hit(hit: &Value) -> Value {
    let crystal = &hit["crystal"];
    if !crystal.is_object() {
        return hit.clone();
    }
    let said = crystal["turn_at"].as_u64().or_else(|| crystal["created_at"].as_u64());
    let time = said.map(|ms| {
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)).to_string()
    });
    json!({
        "id": crystal["id"],
        "text": crystal["text"],
        "kind": crystal["kind"],
        "namespace": crystal["namespace"],
        "score": hit["score"],
        "time": time,
    })
}

/// `text` with the word `from` (not inside a longer word) written `to`.
pub(crate) fn rename_word(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        out.push_str(if word == from { to } else { &word });
        word.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// What a tool asks of the node's API.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Get(String),
    Post(String, Value),
}

impl Request {
    /// Whether the request writes, and so needs the node's token.
    pub fn writes(&self) -> bool {
        matches!(self, Request::Post(..))
    }
}

/// A point in time: Unix milliseconds, or an ISO 8601 date or date-time.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Instant {
    Millis(u64),
    Text(String),
}

/// A crystal id: a memory crystal's number, or a skill's content id.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Id {
    Number(u64),
    Text(String),
}

impl Id {
    /// The id as the API's path segment: a crystal number or a parsed content id.
    fn path_segment(&self) -> Result<String, Invalid> {
        match self {
            Id::Number(n) => Ok(n.to_string()),
            Id::Text(text) if text.trim().parse::<CrystalId>().is_ok() => Ok(text.trim().to_owned()),
            Id::Text(text) => {
                api::parse_id(text.trim()).map(|cid| cid.to_string()).map_err(|e| Invalid::new("id", e.detail))
            }
        }
    }

    /// The id as a memory crystal's number.
    fn crystal(&self) -> Result<CrystalId, Invalid> {
        match self {
            Id::Number(n) => Ok(*n),
            Id::Text(text) => text
                .trim()
                .parse()
                .map_err(|_| Invalid::new("id", format!("{text:?} is not a memory crystal id (a number)"))),
        }
    }
}

fn ten() -> usize {
    10
}

/// `memory_search`: recall memories.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to recall, in words or a question ("when is Sam's dad's surgery?"). Must not be
    /// empty; at most 16384 bytes.
    pub query: String,
    /// How many memories to return, best first: 1 to 100 (default 10).
    #[serde(default = "ten")]
    #[schemars(range(min = 1, max = 100))]
    pub k: usize,
    /// Only memories of this namespace: `episodic` (the agent's own notes) or
    /// `user:<handle>` (what is known about one person). Default: every namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Only memories of this kind: `observation` (an extracted fact), `interaction` (a
    /// conversation turn), `exploration_note` or `summary`. Default: every kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// Only memories of this semantic type: `fact`, `preference`, `task_pattern`, `skill`,
    /// `episode`, `insight`, `relationship`, `goal` or `general`.
    #[serde(default)]
    pub semantic_type: Option<String>,
    /// Only turns of this conversation (the `session` they were stored with).
    #[serde(default)]
    pub session: Option<String>,
    /// Only memories said (a turn's time, else when stored) at or after this: Unix
    /// milliseconds or an ISO 8601 date or date-time ("2023-05-01").
    #[serde(default)]
    pub since: Option<Instant>,
    /// Only memories said at or before this; not before `since`.
    #[serde(default)]
    pub until: Option<Instant>,
    /// Each hit's whole stored record (governance, hormones, decay, links, ranks) instead of
    /// its text, id, kind, namespace, score and time. Default: false.
    #[serde(default)]
    pub full: bool,
}

impl SearchArgs {
    const FIELDS: &'static [&'static str] =
        &["query", "k", "namespace", "kind", "semantic_type", "session", "since", "until", "full"];

    /// The `GET /v1/memories` request, after the engine's own checks of a recall.
    pub fn request(&self) -> Result<Request, Invalid> {
        let mut query = json!({ "q": self.query, "k": self.k });
        for (name, value) in [
            ("namespace", self.namespace.as_ref().map(|v| json!(v))),
            ("kind", self.kind.as_ref().map(|v| json!(v))),
            ("semantic_type", self.semantic_type.as_ref().map(|v| json!(v))),
            ("session", self.session.as_ref().map(|v| json!(v))),
            ("since", self.since.as_ref().map(|v| json!(v))),
            ("until", self.until.as_ref().map(|v| json!(v))),
        ] {
            if let Some(value) = value {
                query[name] = value;
            }
        }
        let query: Query = serde_path_to_error::deserialize(query).map_err(|error| {
            let path = error.path().to_string();
            Invalid::new(if path == "q" { "query" } else { &path }, error.into_inner().to_string())
        })?;
        query.check().map_err(|error| {
            // The engine names the REST parameter `q`; the tool's argument is `query`.
            let detail = rename_word(&error.to_string(), "q", "query");
            Invalid { field: named_field(&detail, Self::FIELDS, &[]), detail }
        })?;
        let mut path = format!("/v1/memories?q={}&k={}", percent_encode(&query.q), query.k);
        let mut push = |name: &str, value: String| path.push_str(&format!("&{name}={}", percent_encode(&value)));
        if let Some(namespace) = &query.namespace {
            push("namespace", namespace.as_string());
        }
        if let Some(kind) = query.kind {
            push("kind", engine::kind_tag(kind));
        }
        if let Some(semantic_type) = query.semantic_type {
            push("semantic_type", semantic_type.as_str().to_owned());
        }
        if let Some(session) = &query.session {
            push("session", session.clone());
        }
        if let Some(since) = query.since {
            push("since", since.to_string());
        }
        if let Some(until) = query.until {
            push("until", until.to_string());
        }
        Ok(Request::Get(path))
    }
}

/// `memory_add`: store a memory, as `POST /v1/memories` does.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddArgs {
    /// The memory itself, one fact or one turn ("Sam's dad's surgery is March 15"). Must not
    /// be empty; at most 16384 bytes. A correction ("wait, actually it's March 22") supersedes
    /// what it corrects in the same namespace; the answer's `superseded` names the old crystal.
    pub text: String,
    /// `episodic` (default: the agent's own notes) or `user:<handle>` (about one person).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `observation` (default: an extracted fact, reconciled against similar ones),
    /// `interaction` (a conversation turn, stored as said), `exploration_note` or `summary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `fact` (default), `preference`, `episode`, `insight`, `relationship`, `goal`,
    /// `general`, `task_pattern` or `skill`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_type: Option<String>,
    /// How it came to be: `user_input` (default), `session`, `inferred`, `indexed`, `skill`,
    /// `dream` or `peer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Who or what the fact is about ("sam's dad"); with `attribute`, a newer value for the
    /// same subject and attribute supersedes the old one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Which property of the subject ("surgery date").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribute: Option<String>,
    /// How fast it fades: `never`, `location` (365 d), `employment` (180 d), `long_term_goal`
    /// (90 d), `active_project` (45 d), `health` (30 d), `emotional_state` (7 d),
    /// `temporary_location` (3 d) or `event_bound` (fades after `event_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decay_class: Option<String>,
    /// When the event the memory is about happens: Unix milliseconds or ISO 8601.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_at: Option<Instant>,
    /// How emotionally charged it is, 0 to 1 (default 0); heavier memories fade slower.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub emotional_weight: Option<f64>,
    /// Who may read it: `private` (default: only callers with the node's token), `shared` or
    /// `public`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `decay` (default: fades unless reinforced), `permanent`, or `ttl` (needs `ttl_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifespan: Option<String>,
    /// With `lifespan: ttl`, how long it lives, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The conversation this turn belongs to (1 to 256 bytes); turns are never reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// When the turn was said: Unix milliseconds or ISO 8601.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_at: Option<Instant>,
    /// Your own id for this memory (at most 256 bytes), returned with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// Your own metadata: a JSON object of at most 4096 bytes, returned with the memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl AddArgs {
    const FIELDS: &'static [&'static str] = &[
        "text",
        "namespace",
        "kind",
        "semantic_type",
        "origin",
        "subject",
        "attribute",
        "decay_class",
        "event_at",
        "emotional_weight",
        "scope",
        "lifespan",
        "ttl_ms",
        "session",
        "turn_at",
        "external_id",
        "metadata",
    ];

    /// The `POST /v1/memories` request: the arguments read as the engine's [`NewMemory`] and
    /// passed by the engine's own check.
    pub fn request(&self) -> Result<Request, Invalid> {
        let body = serde_json::to_value(self).map_err(|e| Invalid { field: None, detail: e.to_string() })?;
        let new: NewMemory = serde_path_to_error::deserialize(body).map_err(|error| {
            let path = error.path().to_string();
            Invalid::new(&path, error.into_inner().to_string())
        })?;
        Memory::check(&new).map_err(|error| {
            let detail = error.to_string();
            Invalid { field: named_field(&detail, Self::FIELDS, &[]), detail }
        })?;
        let body = serde_json::to_value(&new).map_err(|e| Invalid { field: None, detail: e.to_string() })?;
        Ok(Request::Post("/v1/memories".into(), body))
    }
}

/// `memory_get` and `memory_history`: one crystal.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// A memory crystal's id (the number `memory_search` and `memory_add` return as
    /// `crystal.id`), or, for `memory_get` only, a skill's content id (`skill_search`'s `id`).
    pub id: Id,
}

impl GetArgs {
    /// `GET /v1/crystals/{id}`.
    pub fn get(&self) -> Result<Request, Invalid> {
        Ok(Request::Get(format!("/v1/crystals/{}", self.id.path_segment()?)))
    }

    /// `GET /v1/crystals/{id}/history`.
    pub fn history(&self) -> Result<Request, Invalid> {
        Ok(Request::Get(format!("/v1/crystals/{}/history", self.id.crystal()?)))
    }
}

/// Longest `skill_search` query accepted, in bytes.
pub const MAX_SKILL_QUERY: usize = 1024;
/// Most skills one `skill_search` returns.
pub const MAX_SKILLS: usize = 100;
/// How many of the market's newest listings `skill_search` looks through.
const MARKET_SCAN: usize = 1000;

/// `skill_search`: the market as this node sees it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillSearchArgs {
    /// Words to look for in a skill's name, text, tags, category and skill id (any word
    /// matches; skills matching more words come first). Default: every skill, newest first.
    /// At most 1024 bytes.
    #[serde(default)]
    pub query: Option<String>,
    /// Only skills a management node has endorsed (`is_verified`).
    #[serde(default)]
    pub verified_only: bool,
    /// How many skills to return: 1 to 100 (default 10).
    #[serde(default = "ten")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: usize,
}

impl SkillSearchArgs {
    /// `GET /v1/skills` over the newest listings, after checking the arguments.
    pub fn request(&self) -> Result<Request, Invalid> {
        if !(1..=MAX_SKILLS).contains(&self.limit) {
            return Err(Invalid::new(
                "limit",
                format!("limit is {}; it must be between 1 and {MAX_SKILLS}", self.limit),
            ));
        }
        if let Some(query) = &self.query
            && query.len() > MAX_SKILL_QUERY
        {
            return Err(Invalid::new(
                "query",
                format!("query is {} bytes, over the cap of {MAX_SKILL_QUERY}", query.len()),
            ));
        }
        Ok(Request::Get(format!("/v1/skills?limit={MARKET_SCAN}")))
    }

    /// The listings (the API's answer, newest first) this search keeps, best first.
    pub fn select(&self, listings: Vec<Value>) -> Vec<Value> {
        let terms = self.query.as_deref().map(terms).unwrap_or_default();
        let mut kept: Vec<(usize, Value)> = listings
            .into_iter()
            .filter(|listing| !self.verified_only || listing["is_verified"] == Value::Bool(true))
            .filter_map(|listing| {
                if terms.is_empty() {
                    return Some((0, listing));
                }
                let haystack = haystack(&listing);
                let matched = terms.iter().filter(|term| haystack.contains(term.as_str())).count();
                (matched > 0).then_some((matched, listing))
            })
            .collect();
        // Stable: among equal matches, the API's order (newest first) stays.
        kept.sort_by_key(|(matched, _)| std::cmp::Reverse(*matched));
        kept.into_iter().take(self.limit).map(|(_, listing)| listing).collect()
    }
}

/// A query's distinct lower-case words.
fn terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> =
        query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect();
    terms.sort();
    terms.dedup();
    terms
}

/// The lower-case text of a listing a skill search looks in.
fn haystack(listing: &Value) -> String {
    let body = &listing["listing"];
    let mut text = String::new();
    for field in ["name", "text", "category", "skill_id"] {
        if let Some(value) = body[field].as_str() {
            text.push_str(value);
            text.push(' ');
        }
    }
    for tag in body["tags"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        text.push_str(tag);
        text.push(' ');
    }
    text.to_lowercase()
}

/// `skill_report`: report running a skill.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportArgs {
    /// The skill's content id (`skill_search`'s `id`).
    pub id: String,
    /// Whether running the skill did what it promised.
    pub success: bool,
    /// How good the outcome was, -1 to 1 (default 1 for a success, 0 for a failure).
    #[serde(default)]
    #[schemars(range(min = -1.0, max = 1.0))]
    pub reward: Option<f64>,
}

impl ReportArgs {
    /// `POST /v1/skills/{id}/reports`, after the API's own check of a report.
    pub fn request(&self) -> Result<Request, Invalid> {
        let id = api::parse_id(self.id.trim()).map_err(|e| Invalid::new("id", e.detail))?;
        let report = ReportRequest { success: Some(self.success), reward: self.reward, claim: None };
        report
            .event()
            .map_err(|e| Invalid { field: named_field(&e.detail, &["success", "reward"], &[]), detail: e.detail })?;
        let body = serde_json::to_value(&report).map_err(|e| Invalid { field: None, detail: e.to_string() })?;
        Ok(Request::Post(format!("/v1/skills/{id}/reports"), body))
    }
}

/// `agent_chat`: one turn of a local conversation with the node's agent.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatArgs {
    /// What to say to the agent now (at most 8 KiB).
    pub message: String,
    /// The conversation so far, oldest first, as `agent_chat` answered it (at most 40 turns).
    #[serde(default)]
    pub history: Vec<ChatTurn>,
}

/// One earlier turn of a conversation with the agent.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatTurn {
    /// Who spoke: `user` (you) or `assistant` (the agent).
    pub role: druse_agent::chat::Role,
    /// What was said.
    pub content: String,
}

impl ChatArgs {
    /// `POST /v1/agent/chat`, after the API's own check of the message and history.
    pub fn request(self) -> Result<Request, Invalid> {
        let body = druse_agent::chat::ChatBody {
            message: self.message,
            history: self
                .history
                .into_iter()
                .map(|t| druse_agent::chat::Turn { role: t.role, content: t.content })
                .collect(),
        };
        body.check().map_err(|detail| Invalid { field: named_field(&detail, &["message", "history"], &[]), detail })?;
        let body = serde_json::to_value(&body).map_err(|e| Invalid { field: None, detail: e.to_string() })?;
        Ok(Request::Post("/v1/agent/chat".into(), body))
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
