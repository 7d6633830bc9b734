//! The tools that read and write the agent's own memory: search and remember in any run, the
//! reflection's one summary, and the review's keep, update and archive of listed observations
//! (archiving supersedes; nothing is hard-deleted).

use serde::Deserialize;
use serde_json::json;

use super::{CrystalArg, Hands, QueryArg, Room, TextArg, ToolError, args};
use crate::core::Lead;
use crate::core::memory;
use crate::llm::ToolCall;
use crate::reconcile::Fixed;
use druse_memory::correction::Decision;
use druse_memory::crystal::{Crystal, CrystalId, MemoryKind, Namespace, Status};
use druse_memory::engine::NewMemory;
use druse_protocol::body::SemanticType;
use druse_protocol::now_ms;

#[derive(Deserialize)]
struct UpdateArgs {
    crystal: CrystalId,
    text: String,
}
#[derive(Deserialize)]
struct ArchiveArgs {
    crystal: CrystalId,
    #[serde(default)]
    reason: String,
}

impl Hands {
    /// The agent's own episodic notes and what it knows of the run's authors; what the operator
    /// said in local conversations only in those (a reply on Bluesky, even to the owner, is
    /// public); never peers' skills, which come through the skills block.
    pub(super) async fn search_memory(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: QueryArg = args(call)?;
        let mut namespaces: Vec<Namespace> = vec![Namespace::Episodic];
        if self.room == Room::Chat {
            namespaces.insert(0, Namespace::Operator);
        }
        for n in &self.notes {
            let ns = Namespace::User(n.author_handle.clone());
            if !namespaces.contains(&ns) {
                namespaces.push(ns);
            }
        }
        let lines = self
            .agent
            .node
            .memory()
            .read(move |memory| crate::experience::search(memory, &a.query, &namespaces, now_ms()))
            .await
            .map_err(ToolError::failed)?;
        Ok(if lines.is_empty() { "nothing found".into() } else { lines.join("\n") })
    }

    /// Keeps a note where it belongs, by who leads the run: the operator's in a local
    /// conversation; the agent's own (episodic) in a musing or a thread of the owner's alone;
    /// in a stranger's thread, that stranger's, labelled as what they asked to be kept (low
    /// trust), so that nobody writes the agent's own memory, or another person's, through it.
    pub(super) async fn remember(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: TextArg = args(call)?;
        let new = match (self.room, self.lead()) {
            (Room::Chat, _) => memory(a.text, Namespace::Operator, MemoryKind::Observation, SemanticType::Episode),
            (_, Lead::Strangers(dids)) => {
                let [did] = dids.as_slice() else {
                    self.agent.metrics.refuse("remember_several");
                    return Err(ToolError::Refused(
                        "several people wrote in this thread: nothing is kept, since a note would be theirs".into(),
                    ));
                };
                let handle = self.notes.iter().find(|n| n.author_did == *did).map(|n| n.author_handle.clone());
                let handle = handle.unwrap_or_else(|| did.clone());
                let mut new = memory(
                    format!("@{handle} asked me to remember: {}", a.text),
                    Namespace::User(handle),
                    MemoryKind::Observation,
                    SemanticType::Fact,
                );
                new.metadata = json!({"asked_by": did, "trust": "low"}).as_object().cloned();
                new
            }
            _ => memory(a.text, Namespace::Episodic, MemoryKind::Observation, SemanticType::Episode),
        };
        let whose = new.namespace.as_string();
        self.agent
            .store(new)
            .await
            .map(|id| format!("ok: remembered as crystal {id} ({whose})"))
            .map_err(ToolError::failed)
    }

    /// The reflection's one summary of the day, naming the crystals it summarises.
    pub(super) async fn summary(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: TextArg = args(call)?;
        if !self.report.crystals.is_empty() {
            self.agent.metrics.refuse("second_summary");
            return Err(ToolError::Refused("the day already has its summary".into()));
        }
        let date = atrium_api::types::string::Datetime::now().as_str().chars().take(10).collect::<String>();
        let mut new = memory(
            format!("Reflection on {date}: {}", a.text),
            Namespace::Episodic,
            MemoryKind::Summary,
            SemanticType::Episode,
        );
        new.metadata =
            Some(json!({"reflection_of": self.sources, "day": date}).as_object().cloned().unwrap_or_default());
        let id = self.agent.store(new).await.map_err(ToolError::failed)?;
        self.report.crystals.push(id);
        Ok(format!("ok: the summary is crystal {id}"))
    }

    /// A listed crystal, still active, not yet acted on in this review.
    async fn target(&self, id: CrystalId) -> Result<Crystal, ToolError> {
        if !self.listed.contains(&id) {
            self.agent.metrics.refuse("review_unlisted");
            return Err(ToolError::Refused(format!("crystal {id} is not among the observations listed")));
        }
        if self.acted.contains(&id) {
            return Err(ToolError::Refused(format!("crystal {id} was already reviewed")));
        }
        match self.agent.node.memory().get(id).await {
            Some(c) if c.status == Status::Active => Ok(c),
            _ => Err(ToolError::Refused(format!("crystal {id} is no longer active"))),
        }
    }

    pub(super) async fn keep(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: CrystalArg = args(call)?;
        self.target(a.crystal).await?;
        self.acted.insert(a.crystal);
        self.report.kept.push(a.crystal);
        Ok("ok: kept".into())
    }

    pub(super) async fn update(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: UpdateArgs = args(call)?;
        let old = self.target(a.crystal).await?;
        let confidence = self.agent.node.memory().config().correction.supersede_confidence;
        let new = NewMemory {
            subject: old.subject.clone(),
            attribute: old.attribute.clone(),
            decay_class: old.decay_class,
            ..memory(a.text, old.namespace.clone(), MemoryKind::Observation, old.semantic_type)
        };
        let id = self.write(new, Decision::Update { target: old.id, confidence }).await?;
        self.acted.insert(old.id);
        self.report.updated.push(old.id);
        self.report.crystals.push(id);
        Ok(format!("ok: crystal {} is superseded by crystal {id}", old.id))
    }

    pub(super) async fn archive(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: ArchiveArgs = args(call)?;
        let old = self.target(a.crystal).await?;
        let reason = if a.reason.trim().is_empty() { "stale".to_owned() } else { a.reason };
        let new = memory(
            format!("archived in review: {reason}"),
            old.namespace.clone(),
            MemoryKind::Observation,
            old.semantic_type,
        );
        self.write(new, Decision::Delete { target: old.id }).await?;
        self.acted.insert(old.id);
        self.report.archived.push(old.id);
        Ok(format!("ok: crystal {} is archived (superseded, kept in its history)", old.id))
    }

    /// Writes through the engine with the review's decision on that exact crystal.
    async fn write(&self, new: NewMemory, decision: Decision) -> Result<CrystalId, ToolError> {
        let added = self.agent.node.memory().add_with(new, Fixed(decision), "agent:review", now_ms()).await;
        added.map(|added| added.crystal.id).map_err(ToolError::failed)
    }
}
