//! Every tool the model may call, declared once in [`TABLE`]: its name, what the model is told,
//! its arguments, the runs that offer it, the gate it passes and whether it writes to Bluesky.
//! The tool list each run offers ([`offered`]), the dispatch ([`Hands`]'s `call`), the gate and
//! the docs ([`markdown`], the table in node/README's "Run an agent") all come from it.
//!
//! The handlers live beside this file, by what they touch: `tools/social.rs` (reply, like,
//! post, follow, goals), `tools/memory.rs` (search, remember, the reflection's summary, the
//! review's keep, update and archive) and `tools/skills.rs` (the swarm's skills and the agent's
//! own).

mod memory;
mod skills;
mod social;

use std::collections::HashSet;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::bluesky::Notification;
use super::core::{Agent, Lead};
use super::llm::{Tool, ToolCall, Tools};
use super::rules::BatchScope;
use super::schedule::Entry;
use super::schedule::RunReport;
use crate::config;
use druse_memory::crystal::CrystalId;

/// The kinds of run a tool can be offered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// One thread's new notifications (`turn.rs`).
    Batch,
    /// A local conversation with the operator (`druse-node agent chat`): nothing reaches
    /// Bluesky.
    Chat,
    Musing,
    Reflection,
    Review,
}

impl Room {
    /// The room of a scheduled or operator-run entry point.
    pub(crate) fn of(entry: Entry) -> Self {
        match entry {
            Entry::Notifications => Room::Batch,
            Entry::Musing => Room::Musing,
            Entry::Reflection => Room::Reflection,
            Entry::Review => Room::Review,
        }
    }

    #[cfg(test)]
    fn as_str(self) -> &'static str {
        match self {
            Room::Batch => "batch",
            Room::Chat => "chat",
            Room::Musing => "musing",
            Room::Reflection => "reflection",
            Room::Review => "review",
        }
    }
}

/// What a tool must pass before it acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Nothing: it acts on the agent's own memory or reads.
    Open,
    /// Its `uri` must be one of the batch's posts (checked before the handler runs).
    Batch,
    /// It posts an approval request; the owner's like acts. A musing's or a reflection's
    /// `post` first passes the privacy check (`optin.rs`), and posts at once only with the
    /// owner's standing approval (`autopost`); `use_skill` asks only above
    /// `skill_approval_above`.
    Owner,
}

impl Gate {
    #[cfg(test)]
    fn as_str(self) -> &'static str {
        match self {
            Gate::Open => "none",
            Gate::Batch => "the batch's posts only",
            Gate::Owner => "the owner's approval",
        }
    }
}

/// Every tool, named once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Name {
    Reply,
    Like,
    Post,
    Follow,
    ProposeGoalChange,
    SearchMemory,
    Remember,
    SearchSkills,
    UseSkill,
    PublishSkill,
    WriteSummary,
    Keep,
    Update,
    Archive,
    DoNothing,
}

/// An argument's JSON type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Integer,
}

/// One argument: its name, type, and whether the model must give it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arg(&'static str, Kind, bool);

/// One tool as the table declares it.
#[derive(Debug)]
pub(crate) struct Spec {
    pub(crate) name: Name,
    /// What the model calls it.
    pub(crate) id: &'static str,
    /// What the model is told (seed 001: the guidance is in the tool, not the prompt).
    pub(crate) about: &'static str,
    pub(crate) args: &'static [Arg],
    pub(crate) rooms: &'static [Room],
    pub(crate) gate: Gate,
    /// It writes to Bluesky: a local conversation refuses it and says so.
    pub(crate) bluesky: bool,
}

const URI: Arg = Arg("uri", Kind::Text, true);
const TEXT: Arg = Arg("text", Kind::Text, true);
const QUERY: Arg = Arg("query", Kind::Text, true);
const CRYSTAL: Arg = Arg("crystal", Kind::Integer, true);

/// The batch's URIs a refusal names, at most.
const MAX_NAMED: usize = 5;

/// The tools, in the order the model sees them.
pub(crate) const TABLE: &[Spec] = &[
    Spec {
        name: Name::Reply,
        id: "reply",
        about: "Reply to one post of the current batch, by its exact URI. Only URIs listed in [NEW NOTIFICATIONS] are accepted.",
        args: &[URI, TEXT],
        rooms: &[Room::Batch],
        gate: Gate::Batch,
        bluesky: true,
    },
    Spec {
        name: Name::Like,
        id: "like",
        about: "Like one post of the current batch, by its exact URI.",
        args: &[URI],
        rooms: &[Room::Batch],
        gate: Gate::Batch,
        bluesky: true,
    },
    Spec {
        name: Name::Post,
        id: "post",
        about: "Post one original thought outside any thread, once at most. It is not posted until the owner \
                approves it, unless the owner let your musings and reflections post at once.",
        args: &[TEXT],
        rooms: &[Room::Batch, Room::Chat, Room::Musing, Room::Reflection],
        gate: Gate::Owner,
        bluesky: true,
    },
    Spec {
        name: Name::SearchMemory,
        id: "search_memory",
        about: "Search your memory: your own episodic notes, and what you know of the people in this batch.",
        args: &[QUERY],
        rooms: &[Room::Batch, Room::Chat, Room::Musing, Room::Reflection],
        gate: Gate::Open,
        bluesky: false,
    },
    Spec {
        name: Name::Remember,
        id: "remember",
        about: "Keep a note about the world in your memory (not about a person). In a stranger's thread it is kept as \
                what they asked you to keep, with what you know of them; in a local conversation, as what your operator told you.",
        args: &[TEXT],
        rooms: &[Room::Batch, Room::Chat, Room::Musing],
        gate: Gate::Open,
        bluesky: false,
    },
    Spec {
        name: Name::SearchSkills,
        id: "search_skills",
        about: "Search the swarm's skill market by meaning: each skill with its id, verification, price and publisher reputation.",
        args: &[QUERY],
        rooms: &[Room::Batch, Room::Chat],
        gate: Gate::Open,
        bluesky: false,
    },
    Spec {
        name: Name::UseSkill,
        id: "use_skill",
        about: "Use a skill, by the id the skills blocks show (a swarm skill's id, or your own skill's crystal id): adopts a swarm skill (paying its price from the node's ledger, \
                within the owner's daily budget; above a price the owner approves first) and returns its procedure.",
        args: &[Arg("skill", Kind::Text, true)],
        rooms: &[Room::Batch, Room::Chat],
        gate: Gate::Owner,
        bluesky: false,
    },
    Spec {
        name: Name::PublishSkill,
        id: "publish_skill",
        about: "Propose publishing one of your distilled skills to the swarm, by its crystal id. The owner must approve.",
        args: &[CRYSTAL],
        rooms: &[Room::Batch],
        gate: Gate::Owner,
        bluesky: true,
    },
    Spec {
        name: Name::Follow,
        id: "follow",
        about: "Propose following an account, by its handle. It is not followed until the owner approves.",
        args: &[Arg("handle", Kind::Text, true)],
        rooms: &[Room::Batch],
        gate: Gate::Owner,
        bluesky: true,
    },
    Spec {
        name: Name::ProposeGoalChange,
        id: "propose_goal_change",
        about: "Propose setting one of your goals ([GOALS]): by its rkey to change it, or without one for a new goal. \
                It changes only when your owner approves.",
        args: &[Arg("rkey", Kind::Text, false), Arg("title", Kind::Text, true), Arg("description", Kind::Text, true)],
        rooms: &[Room::Batch],
        gate: Gate::Owner,
        bluesky: true,
    },
    Spec {
        name: Name::WriteSummary,
        id: "write_summary",
        about: "Write the one summary of your day, from the memories listed. Once.",
        args: &[TEXT],
        rooms: &[Room::Reflection],
        gate: Gate::Open,
        bluesky: false,
    },
    Spec {
        name: Name::Keep,
        id: "keep",
        about: "Keep one listed observation as it is.",
        args: &[CRYSTAL],
        rooms: &[Room::Review],
        gate: Gate::Open,
        bluesky: false,
    },
    Spec {
        name: Name::Update,
        id: "update",
        about: "Replace one listed observation with a better wording or value; the old one is kept in its history.",
        args: &[CRYSTAL, TEXT],
        rooms: &[Room::Review],
        gate: Gate::Open,
        bluesky: false,
    },
    Spec {
        name: Name::Archive,
        id: "archive",
        about: "Archive one listed observation that is stale or wrong; it leaves your context but stays in its history.",
        args: &[CRYSTAL, Arg("reason", Kind::Text, false)],
        rooms: &[Room::Review],
        gate: Gate::Open,
        bluesky: false,
    },
    Spec {
        name: Name::DoNothing,
        id: "do_nothing",
        about: "Decide to do nothing now; silence is fine.",
        args: &[Arg("reason", Kind::Text, false)],
        rooms: &[Room::Batch, Room::Musing, Room::Reflection, Room::Review],
        gate: Gate::Open,
        bluesky: false,
    },
];

impl Spec {
    /// The JSON schema of its arguments.
    fn schema(&self) -> Value {
        let properties: serde_json::Map<String, Value> = self
            .args
            .iter()
            .map(|Arg(name, kind, _)| {
                let kind = match kind {
                    Kind::Text => "string",
                    Kind::Integer => "integer",
                };
                ((*name).to_owned(), json!({"type": kind}))
            })
            .collect();
        let required: Vec<&str> = self.args.iter().filter(|a| a.2).map(|a| a.0).collect();
        let mut schema = json!({"type": "object", "properties": properties});
        if !required.is_empty() {
            schema["required"] = json!(required);
        }
        schema
    }

    /// Whether a run in `room` offers it, with the owner's opt-ins in `config`.
    fn offered_in(&self, room: Room, config: &config::Config) -> bool {
        self.rooms.contains(&room) && (self.name != Name::Post || room != Room::Reflection || config.post_reflection)
    }
}

/// The table's entry for the tool the model called `id`.
pub(crate) fn find(id: &str) -> Option<&'static Spec> {
    TABLE.iter().find(|s| s.id == id)
}

/// The tools a run in `room` offers the model.
pub(crate) fn offered(room: Room, config: &config::Config) -> Vec<Tool> {
    TABLE.iter().filter(|s| s.offered_in(room, config)).map(|s| Tool::new(s.id, s.about, s.schema())).collect()
}

/// The table as node/README's "Run an agent" shows it (a test keeps the two the same).
#[cfg(test)]
fn markdown() -> String {
    let mut out = String::from("| tool | arguments | offered in | gate | writes to Bluesky |\n|---|---|---|---|---|\n");
    for s in TABLE {
        let args: Vec<String> = s
            .args
            .iter()
            .map(|Arg(name, _, required)| if *required { format!("`{name}`") } else { format!("`{name}`?") })
            .collect();
        let rooms: Vec<&str> = s.rooms.iter().map(|r| r.as_str()).collect();
        out += &format!(
            "| `{}` | {} | {} | {} | {} |\n",
            s.id,
            args.join(", "),
            rooms.join(", "),
            s.gate.as_str(),
            if s.bluesky { "yes" } else { "no" }
        );
    }
    out
}

/// A reply the agent posted in a batch: what it answered and what it said.
#[derive(Debug, Clone)]
pub(crate) struct Replied {
    pub to: Notification,
    pub text: String,
    /// The reply post's URI (its first part).
    pub post: String,
    /// Every part of the reply as posted (one, or a thread): reactions to any of them count.
    pub parts: Vec<String>,
}

/// The tool handler of one run, whatever its room: what the tools may act on, and what they did.
#[derive(Debug)]
pub(crate) struct Hands {
    pub agent: Arc<Agent>,
    pub room: Room,
    /// The batch's posts: what `reply` and `like` may name.
    pub scope: BatchScope,
    pub notes: Vec<Notification>,
    pub replied: Vec<Replied>,
    pub liked: Vec<String>,
    /// Set when a tool failed in a way the run should report.
    pub failures: usize,
    /// The swarm skill whose procedure the run took (its content id).
    pub used_skill: Option<String>,
    /// The crystals a review may act on, and those it acted on.
    pub listed: HashSet<CrystalId>,
    pub acted: HashSet<CrystalId>,
    /// The crystals a reflection summarises.
    pub sources: Vec<CrystalId>,
    /// What an entry point did: its post, the crystals it wrote, a review's decisions.
    pub report: RunReport,
}

impl Hands {
    /// The hands of a run in `room` over `notes` (none outside a batch).
    pub(crate) fn new(agent: Arc<Agent>, room: Room, notes: Vec<Notification>) -> Self {
        let entry = match room {
            Room::Batch | Room::Chat => Entry::Notifications,
            Room::Musing => Entry::Musing,
            Room::Reflection => Entry::Reflection,
            Room::Review => Entry::Review,
        };
        Self {
            agent,
            room,
            scope: BatchScope::new(notes.iter().map(|n| n.uri.clone())),
            notes,
            replied: Vec::new(),
            liked: Vec::new(),
            failures: 0,
            used_skill: None,
            listed: HashSet::new(),
            acted: HashSet::new(),
            sources: Vec::new(),
            report: RunReport::new(entry, "done", ""),
        }
    }

    /// Whose messages in this run lead to what the model proposes: the owner's alone, or
    /// every other author's.
    fn lead(&self) -> Lead {
        let mut strangers: Vec<String> = Vec::new();
        for n in &self.notes {
            if n.author_did != self.agent.owner_did && !strangers.contains(&n.author_did) {
                strangers.push(n.author_did.clone());
            }
        }
        if strangers.is_empty() { Lead::Owner } else { Lead::Strangers(strangers) }
    }

    /// The table's gate, before the handler: a `uri` of the batch for [`Gate::Batch`].
    fn gate(&self, spec: &Spec, call: &ToolCall) -> Result<(), ToolError> {
        if spec.gate != Gate::Batch {
            return Ok(());
        }
        let a: UriArg = args(call)?;
        if !self.scope.contains(&a.uri) {
            self.agent.metrics.refuse("outside_batch");
            tracing::warn!(uri = %a.uri, tool = spec.id, "refused a call on a URI outside the batch");
            // Named, so a model that wrote a wrong URI (small ones make one up) can correct it.
            let batch: Vec<&str> = self.notes.iter().take(MAX_NAMED).map(|n| n.uri.as_str()).collect();
            return Err(ToolError::Refused(format!(
                "that URI is not in the current batch; its posts are: {}",
                batch.join(", ")
            )));
        }
        Ok(())
    }
}

impl Tools for Hands {
    async fn call(&mut self, call: &ToolCall) -> String {
        let name = call.function.name.as_str();
        let spec = match find(name) {
            Some(spec) if spec.offered_in(self.room, &self.agent.config) => spec,
            Some(spec) if self.room == Room::Chat && spec.bluesky => {
                return ToolError::Refused(LOCAL.into()).to_string();
            }
            _ => return ToolError::Failed(format!("there is no tool named {name:?} here")).to_string(),
        };
        if let Err(refused) = self.gate(spec, call) {
            return refused.to_string();
        }
        let result = match spec.name {
            Name::Reply => self.reply(call).await,
            Name::Like => self.like(call).await,
            Name::Post if self.room == Room::Chat => Err(ToolError::Refused(LOCAL.into())),
            Name::Post if self.room == Room::Batch => self.propose_post(call).await,
            Name::Post => self.post_now(call).await,
            Name::Follow => self.follow(call).await,
            Name::ProposeGoalChange => self.propose_goal_change(call).await,
            Name::SearchMemory => self.search_memory(call).await,
            Name::Remember => self.remember(call).await,
            Name::SearchSkills => self.search_skills(call).await,
            Name::UseSkill => self.use_skill(call).await,
            Name::PublishSkill => self.publish_skill(call).await,
            Name::WriteSummary => self.summary(call).await,
            Name::Keep => self.keep(call).await,
            Name::Update => self.update(call).await,
            Name::Archive => self.archive(call).await,
            Name::DoNothing => Ok("ok: nothing done".to_owned()),
        };
        result.unwrap_or_else(|e| e.to_string())
    }
}

/// What a local conversation answers a tool that would write to Bluesky.
const LOCAL: &str = "this is a local conversation with your operator: there is no network here, so nothing is \
                     posted; say in your answer what you would have posted";

/// The arguments several tools share.
#[derive(Deserialize)]
struct UriArg {
    uri: String,
}
#[derive(Deserialize)]
struct TextArg {
    text: String,
}
#[derive(Deserialize)]
struct QueryArg {
    query: String,
}
#[derive(Deserialize)]
struct CrystalArg {
    crystal: CrystalId,
}

/// Why a tool call did nothing, as the model is told: a rule said no, or the action failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolError {
    #[error("refused: {0}")]
    Refused(String),
    #[error("error: {0}")]
    Failed(String),
}

impl ToolError {
    pub(crate) fn refused(why: impl std::fmt::Display) -> Self {
        Self::Refused(why.to_string())
    }
    pub(crate) fn failed(why: impl std::fmt::Display) -> Self {
        Self::Failed(why.to_string())
    }
}

/// A tool call's arguments, or what the model is told about them.
fn args<T: for<'de> Deserialize<'de>>(call: &ToolCall) -> Result<T, ToolError> {
    super::llm::parse_json(&call.function.arguments)
        .map_err(|e| ToolError::Failed(format!("bad arguments for {}: {e}", call.function.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool the agent's sources and the scripted models of the tests name is in the
    /// table, once; and node/README shows the table as it is.
    #[test]
    fn every_tool_named_anywhere_is_in_the_table_once() {
        let mut ids: Vec<&str> = TABLE.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), before, "a tool is declared twice");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut named = Vec::new();
        for dir in ["src", "../../tests/src", "../../tests/tests"] {
            // This file's own test names a tool the table lacks, on purpose.
            for file in walk(&root.join(dir)).into_iter().filter(|f| !f.ends_with("src/tools.rs")) {
                let text = std::fs::read_to_string(&file).expect("read a source file");
                for name in tool_names(&text) {
                    // A test of the refusal of an unknown tool names one on purpose.
                    if !text.contains(&format!("no tool named \\\"{name}\\\"")) {
                        named.push((file.display().to_string(), name));
                    }
                }
            }
        }
        assert!(named.len() >= 10, "the scan found too few tool names: {named:?}");
        for (file, name) in named {
            assert!(find(&name).is_some(), "{file} names a tool {name:?} that the table does not declare");
        }
        let config = crate::config::Config::default();
        for room in [Room::Batch, Room::Musing, Room::Reflection, Room::Review] {
            assert!(offered(room, &config).iter().any(|t| t.name() == "do_nothing"), "{room:?} offers no silence");
        }
        assert!(!offered(Room::Reflection, &config).iter().any(|t| t.name() == "post"), "post_reflection is off");
        let readme = std::fs::read_to_string(root.join("../README.md")).expect("node/README.md");
        assert!(
            readme.contains(&markdown()),
            "node/README.md's tool table differs from tools::markdown():\n{}",
            markdown()
        );
    }

    /// The tool names `text` writes the ways code names a tool: a scripted call
    /// (`("reply".into(), json!(`), a journal's `tool: "reply"`, a request's offered tools
    /// (`|t| t == "reply"`), a definition (`Tool::new("reply"`).
    fn tool_names(text: &str) -> Vec<String> {
        const FORMS: &[(&str, &[&str])] = &[
            ("(\"", &["\".into(), json!(", "\".into(), serde_json::json!("]),
            ("tool: \"", &["\""]),
            ("|t| t == \"", &["\""]),
            ("Tool::new(\"", &["\""]),
        ];
        let mut out = Vec::new();
        for (before, afters) in FORMS {
            for (at, _) in text.match_indices(before) {
                let rest = &text[at + before.len()..];
                let name: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                if !name.is_empty() && afters.iter().any(|a| rest[name.len()..].starts_with(a)) {
                    out.push(name);
                }
            }
        }
        out
    }

    #[test]
    fn the_scan_finds_tools_in_every_form_it_knows() {
        let text = r#"Answer::Tools(vec![("reply".into(), json!({})), ("shout".into(), serde_json::json!({}))]);
            CallTrace { tool: "like".into() }; tools.iter().any(|t| t == "post"); ("done".into(), 3);
            level.await == "trusted""#;
        assert_eq!(tool_names(text), ["reply", "shout", "like", "post"]);
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).expect("read a source dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
        out
    }

    #[test]
    fn schemas_name_every_argument_and_the_required_ones() {
        let reply = find("reply").expect("reply");
        assert_eq!(
            reply.schema(),
            json!({"type": "object", "properties": {"uri": {"type": "string"}, "text": {"type": "string"}},
                   "required": ["uri", "text"]})
        );
        let nothing = find("do_nothing").expect("do_nothing");
        assert_eq!(nothing.schema(), json!({"type": "object", "properties": {"reason": {"type": "string"}}}));
        let chat: Vec<&str> = offered(Room::Chat, &crate::config::Config::default()).iter().map(|t| t.name()).collect();
        assert_eq!(chat, ["post", "search_memory", "remember", "search_skills", "use_skill"]);
    }
}
