//! The tools the model may call, and the rules each one obeys: reply and like only URIs of
//! the current batch, tag only the owner, consenting users and the author answered, and
//! gate posts outside a thread (and skill publishing) behind the owner's approval.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use super::bluesky::{Notification, PostRef};
use super::core::{Agent, Lead};
use super::llm::{Tool, ToolCall, Tools};
use super::rules::{BatchScope, Gated};
use druse_memory::crystal::{MemoryKind, Namespace};
use druse_protocol::now_ms;

/// The tool definitions; the descriptions are the per-tool guidance (seed 001: docstrings,
/// not prompt restatement).
pub(crate) fn definitions() -> Vec<Tool> {
    let text = json!({"type": "string"});
    vec![
        Tool::new(
            "reply",
            "Reply to one post of the current batch, by its exact URI. Only URIs listed in [NEW NOTIFICATIONS] are accepted.",
            json!({"type": "object", "properties": {"uri": text, "text": text}, "required": ["uri", "text"]}),
        ),
        Tool::new(
            "like",
            "Like one post of the current batch, by its exact URI.",
            json!({"type": "object", "properties": {"uri": text}, "required": ["uri"]}),
        ),
        Tool::new(
            "post",
            "Propose an original post outside any thread. It is not posted until the owner approves it.",
            json!({"type": "object", "properties": {"text": text}, "required": ["text"]}),
        ),
        Tool::new(
            "search_memory",
            "Search your memory about the people in this batch and your own episodic notes.",
            json!({"type": "object", "properties": {"query": text}, "required": ["query"]}),
        ),
        Tool::new(
            "remember",
            "Keep a note about the world in your episodic memory (not about a person).",
            json!({"type": "object", "properties": {"text": text}, "required": ["text"]}),
        ),
        Tool::new(
            "search_skills",
            "Search the swarm's skill market by meaning: each skill with its id, verification, price and publisher reputation.",
            json!({"type": "object", "properties": {"query": text}, "required": ["query"]}),
        ),
        Tool::new(
            "use_skill",
            "Use a skill, by the id the skills blocks show (a swarm skill's id, or your own skill's crystal id): adopts a swarm skill (paying its price from the node's ledger, \
             within the owner's daily budget; above a price the owner approves first) and returns its procedure.",
            json!({"type": "object", "properties": {"skill": text}, "required": ["skill"]}),
        ),
        Tool::new(
            "publish_skill",
            "Propose publishing one of your distilled skills to the swarm, by its crystal id. The owner must approve.",
            json!({"type": "object", "properties": {"crystal": {"type": "integer"}}, "required": ["crystal"]}),
        ),
        Tool::new(
            "follow",
            "Propose following an account, by its handle. It is not followed until the owner approves.",
            json!({"type": "object", "properties": {"handle": text}, "required": ["handle"]}),
        ),
        Tool::new(
            "propose_goal_change",
            "Propose setting one of your goals ([GOALS]): by its rkey to change it, or without one for a new goal. \
             It changes only when your owner approves.",
            json!({"type": "object", "properties": {"rkey": text, "title": text, "description": text}, "required": ["title", "description"]}),
        ),
        Tool::new(
            "do_nothing",
            "Decide to do nothing for this batch; silence is fine.",
            json!({"type": "object", "properties": {"reason": text}}),
        ),
    ]
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

/// The tool handler of one batch.
#[derive(Debug)]
pub(crate) struct Batch {
    pub agent: Arc<Agent>,
    pub scope: BatchScope,
    pub notes: Vec<Notification>,
    pub replied: Vec<Replied>,
    pub liked: Vec<String>,
    /// Set when a tool failed in a way the run should report.
    pub failures: usize,
    /// The swarm skill whose procedure the run took (its content id).
    pub used_skill: Option<String>,
    /// A local conversation with the operator (`druse-node agent chat`): nothing reaches
    /// Bluesky, and the tools that would write there say so.
    pub local: bool,
}

/// The tools a local conversation offers: the memory, the skills, and `post`, which says
/// there is no network.
pub(crate) fn local_definitions() -> Vec<Tool> {
    definitions()
        .into_iter()
        .filter(|t| matches!(t.name(), "search_memory" | "remember" | "search_skills" | "use_skill" | "post"))
        .collect()
}

impl Batch {
    /// The handler of a local conversation, with no notification in scope.
    pub(crate) fn local(agent: Arc<Agent>) -> Self {
        Self {
            agent,
            scope: BatchScope::new(std::iter::empty()),
            notes: Vec::new(),
            replied: Vec::new(),
            liked: Vec::new(),
            failures: 0,
            used_skill: None,
            local: true,
        }
    }
}
#[derive(Deserialize)]
struct GoalArgs {
    #[serde(default)]
    rkey: Option<String>,
    title: String,
    #[serde(default)]
    description: String,
}
#[derive(Deserialize)]
struct SkillArg {
    skill: String,
}

#[derive(Deserialize)]
struct ReplyArgs {
    uri: String,
    text: String,
}
#[derive(Deserialize)]
struct UriArg {
    uri: String,
}
/// A tool's one text argument.
#[derive(Deserialize)]
pub(super) struct TextArg {
    pub(super) text: String,
}
/// A tool's one query argument.
#[derive(Deserialize)]
pub(super) struct QueryArg {
    pub(super) query: String,
}
#[derive(Deserialize)]
struct HandleArg {
    handle: String,
}
#[derive(Deserialize)]
struct CrystalArg {
    crystal: u64,
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
pub(super) fn args<T: for<'de> Deserialize<'de>>(call: &ToolCall) -> Result<T, ToolError> {
    super::llm::parse_json(&call.function.arguments)
        .map_err(|e| ToolError::Failed(format!("bad arguments for {}: {e}", call.function.name)))
}

impl Tools for Batch {
    async fn call(&mut self, call: &ToolCall) -> String {
        let name = call.function.name.as_str();
        if self.local && matches!(name, "reply" | "like" | "post" | "follow" | "publish_skill" | "propose_goal_change")
        {
            return ToolError::Refused(
                "this is a local conversation with your operator: there is no network here, so nothing is \
                 posted; say in your answer what you would have posted"
                    .into(),
            )
            .to_string();
        }
        let result = match name {
            "reply" => self.reply(call).await,
            "like" => self.like(call).await,
            "post" => self.post(call).await,
            "search_memory" => self.search_memory(call).await,
            "remember" => self.remember(call).await,
            "search_skills" => self.search_skills(call).await,
            "use_skill" => self.use_skill(call).await,
            "publish_skill" => self.publish_skill(call).await,
            "follow" => self.follow(call).await,
            "propose_goal_change" => self.propose_goal_change(call).await,
            "do_nothing" => Ok("ok: nothing done".to_owned()),
            other => Err(ToolError::Failed(format!("there is no tool named {other:?}"))),
        };
        result.unwrap_or_else(|e| e.to_string())
    }
}

impl Batch {
    async fn reply(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: ReplyArgs = args(call)?;
        if !self.scope.contains(&a.uri) {
            self.agent.metrics.refuse("outside_batch");
            tracing::warn!(uri = %a.uri, "refused a reply to a URI outside the batch");
            return Err(ToolError::Refused("that URI is not in the current batch".into()));
        }
        if self.replied.iter().any(|r| r.to.uri == a.uri) {
            self.agent.metrics.refuse("already_replied");
            return Err(ToolError::Refused("you already replied to that post".into()));
        }
        let Some(note) = self.notes.iter().find(|n| n.uri == a.uri).cloned() else {
            return Err(ToolError::Refused("that URI is not in the current batch".into()));
        };
        if !self.agent.count_reply(&note.author_did).await {
            self.agent.metrics.refuse("rate_limit");
            return Err(ToolError::Refused("this author has had the most replies allowed for now".into()));
        }
        let parent = PostRef { uri: note.uri.clone(), cid: note.cid.clone() };
        let root = note.root.clone().unwrap_or_else(|| parent.clone());
        match self.agent.reply_fitted(&a.text, &parent, &root, &note.author_did).await {
            Ok(parts) => {
                let parts: Vec<String> = parts.into_iter().map(|p| p.uri).collect();
                let post = parts.first().cloned().unwrap_or_default();
                self.agent.metrics.replies.inc();
                self.agent.mark_answered(&note).await;
                let answer = format!("ok: replied as {post}");
                self.replied.push(Replied { to: note, text: a.text, post, parts });
                Ok(answer)
            }
            Err(e) => {
                self.failures += 1;
                Err(ToolError::Failed(format!("the reply failed: {e}")))
            }
        }
    }

    async fn like(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: UriArg = args(call)?;
        if !self.scope.contains(&a.uri) {
            self.agent.metrics.refuse("outside_batch");
            tracing::warn!(uri = %a.uri, "refused a like of a URI outside the batch");
            return Err(ToolError::Refused("that URI is not in the current batch".into()));
        }
        let Some(note) = self.notes.iter().find(|n| n.uri == a.uri) else {
            return Err(ToolError::Refused("that URI is not in the current batch".into()));
        };
        let post = PostRef { uri: note.uri.clone(), cid: note.cid.clone() };
        match self.agent.bsky.like(&post).await {
            Ok(_) => {
                super::metrics::Metrics::count(&self.agent.metrics.actions, "like");
                self.liked.push(a.uri);
                Ok("ok: liked".into())
            }
            Err(e) => {
                self.failures += 1;
                Err(ToolError::Failed(format!("the like failed: {e}")))
            }
        }
    }

    /// Whose messages in this batch lead to what the model proposes: the owner's alone, or
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

    async fn ask(&mut self, action: Gated) -> Result<String, ToolError> {
        self.agent.request_approval(action, self.lead()).await.map_err(|e| match e {
            super::act::ActionError::GatedLimit => ToolError::refused(e),
            e => ToolError::failed(e),
        })
    }

    async fn post(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: TextArg = args(call)?;
        self.ask(Gated::Post { text: a.text }).await
    }

    async fn follow(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: HandleArg = args(call)?;
        let handle = a.handle.trim().trim_start_matches('@').to_ascii_lowercase();
        let did = match self.agent.bsky.resolve(&handle).await {
            Ok(Some(did)) => did,
            Ok(None) => return Err(ToolError::Failed(format!("the handle {handle:?} does not resolve"))),
            Err(e) => return Err(ToolError::Failed(format!("{e}"))),
        };
        self.ask(Gated::Follow { did, handle }).await
    }

    async fn publish_skill(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: CrystalArg = args(call)?;
        let (_, skill) = self.agent.publishable(a.crystal).map_err(ToolError::refused)?;
        let name = skill.name;
        self.ask(Gated::PublishSkill { crystal: a.crystal, name }).await
    }

    async fn propose_goal_change(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: GoalArgs = args(call)?;
        let (title, description) = (a.title.trim().to_owned(), a.description.trim().to_owned());
        if title.is_empty() || title.len() > 200 || description.len() > 1000 {
            return Err(ToolError::Refused(
                "a goal needs a title (at most 200 bytes) and a description (at most 1000)".into(),
            ));
        }
        let rkey = match a.rkey.map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()) {
            Some(rkey) => {
                let goals = self.agent.goals().await;
                if !goals.iter().any(|g| g.rkey == rkey) {
                    return Err(ToolError::Refused(format!(
                        "there is no goal {rkey:?}; leave rkey out for a new goal"
                    )));
                }
                rkey
            }
            None => super::mind::goal_key(&title, now_ms()),
        };
        self.ask(Gated::Goal { rkey, title, description }).await
    }

    async fn search_memory(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: QueryArg = args(call)?;
        let mut namespaces: Vec<Namespace> = vec![Namespace::Episodic];
        for n in &self.notes {
            let ns = Namespace::User(n.author_handle.clone());
            if !namespaces.contains(&ns) {
                namespaces.push(ns);
            }
        }
        let memory = Arc::clone(self.agent.node.memory());
        // The agent's own memories only: peers' skills come through the skills block.
        let lines = crate::task::blocking(move || super::experience::search(&memory, &a.query, &namespaces, now_ms()))
            .await
            .map_err(ToolError::failed)?;
        Ok(if lines.is_empty() { "nothing found".into() } else { lines.join("\n") })
    }

    async fn remember(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: TextArg = args(call)?;
        let new = super::core::memory(
            a.text,
            Namespace::Episodic,
            MemoryKind::Observation,
            druse_protocol::body::SemanticType::Episode,
        );
        self.agent.store(new).await.map(|id| format!("ok: remembered as crystal {id}")).map_err(ToolError::failed)
    }

    async fn use_skill(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: SkillArg = args(call)?;
        let lead = (!self.local).then(|| self.lead());
        match self.agent.use_skill(&a.skill, lead).await {
            Ok(super::swarm::Used::Procedure { skill, paid }) => {
                if !skill.own {
                    self.used_skill = Some(skill.id.to_string());
                }
                Ok(super::swarm::procedure(&skill, paid))
            }
            Ok(super::swarm::Used::Own { crystal, text }) => {
                Ok(super::swarm::framed(&format!("your own skill, crystal {crystal}"), &text))
            }
            Ok(super::swarm::Used::AskedOwner(asked)) => {
                Ok(format!("{asked}. Its price is above what you may spend alone; answer without it for now."))
            }
            Ok(super::swarm::Used::NeedsApproval { price }) => Ok(format!(
                "not adopted: it costs {price} micro-USDC, above what you may spend without the owner's approval, and \
                 this conversation posts no approval request. Tell the operator the owner's approval is needed \
                 (`druse-node skill adopt {} --max-price {price}` adopts it at that price); answer without it.",
                a.skill.trim()
            )),
            Err(e) => Err(ToolError::Refused(format!("{e}"))),
        }
    }

    async fn search_skills(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: QueryArg = args(call)?;
        let lines = self.agent.swarm_skills(&a.query, 10).await;
        Ok(if lines.is_empty() {
            "no skill matches".into()
        } else {
            super::context::skills_block(&lines, &Default::default())
        })
    }
}
