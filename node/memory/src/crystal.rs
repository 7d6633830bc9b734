//! The memory crystal (seed 004's anatomy, seed 000's namespaces and kinds, seed 003's decay
//! classes): what one stored memory is and carries.

use druse_protocol::body::SemanticType;
use druse_protocol::{ContentId, UnixMillis};
use serde::{Deserialize, Serialize};

use crate::decay::DecayClass;
use crate::governance::{Scope, Sensitivity};
use crate::hormones::Influence;

/// A crystal's id: unique on this node, assigned in write order.
pub type CrystalId = u64;

/// Whose memory a crystal is (seed 000): one namespace per counterpart user, the agent's own
/// episodic namespace, what the operator told the agent in local conversations (`operator`),
/// and the skills other nodes published (`swarm`), kept apart so that a stranger publisher's
/// text never reads as something the agent lived, and the operator's words never reach a
/// stranger.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Namespace {
    /// Everything about one counterpart, by handle.
    User(String),
    /// The agent's own notes about the world.
    Episodic,
    /// Skills other nodes published: data from another node, never the agent's experience.
    Swarm,
    /// What the operator told the agent in a local conversation (`druse-node agent chat`):
    /// read in those conversations and in the owner's own threads, never for a stranger.
    Operator,
}

impl Namespace {
    /// The wire name: `user:<handle>`, `episodic`, `operator` or `swarm`.
    pub fn as_string(&self) -> String {
        match self {
            Namespace::User(handle) => format!("user:{handle}"),
            Namespace::Episodic => "episodic".to_owned(),
            Namespace::Swarm => "swarm".to_owned(),
            Namespace::Operator => "operator".to_owned(),
        }
    }
}

impl TryFrom<String> for Namespace {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s == "episodic" {
            return Ok(Namespace::Episodic);
        }
        if s == "swarm" {
            return Ok(Namespace::Swarm);
        }
        if s == "operator" {
            return Ok(Namespace::Operator);
        }
        match s.strip_prefix("user:") {
            Some(handle) if !handle.is_empty() && handle.len() <= 256 && !handle.contains(char::is_whitespace) => {
                Ok(Namespace::User(handle.to_owned()))
            }
            _ => Err(format!("namespace {s:?} is none of \"episodic\", \"operator\", \"swarm\" or \"user:<handle>\"")),
        }
    }
}

impl From<Namespace> for String {
    fn from(n: Namespace) -> String {
        n.as_string()
    }
}

/// What a row in a namespace is (seed 000), each with the trust its context block carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// An extracted fact about the user ("likes rust").
    #[default]
    Observation,
    /// A verbatim exchange.
    Interaction,
    /// Background research on a person's public activity.
    ExplorationNote,
    /// A compacted relationship summary.
    Summary,
}

/// How far an agent should trust a block of memories of one kind, when it injects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KindTrust {
    Lowest,
    Low,
    Medium,
    High,
}

impl MemoryKind {
    /// Seed 000: interactions are verbatim (high), observations extracted (medium), summaries
    /// synthesized (low), exploration notes research about others (lowest).
    pub fn trust(self) -> KindTrust {
        match self {
            MemoryKind::Interaction => KindTrust::High,
            MemoryKind::Observation => KindTrust::Medium,
            MemoryKind::Summary => KindTrust::Low,
            MemoryKind::ExplorationNote => KindTrust::Lowest,
        }
    }
}

/// How a crystal came to be (seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    Indexed,
    Session,
    Skill,
    Dream,
    #[default]
    UserInput,
    Inferred,
    Peer,
}

/// Where a crystal is in its life (seed 004's state machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lifecycle {
    Generated,
    Activated,
    Consolidated,
    Archived,
    Expired,
    Frozen,
}

impl Lifecycle {
    /// Every state, for metrics.
    pub const ALL: [Lifecycle; 6] = [
        Lifecycle::Generated,
        Lifecycle::Activated,
        Lifecycle::Consolidated,
        Lifecycle::Archived,
        Lifecycle::Expired,
        Lifecycle::Frozen,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Generated => "generated",
            Lifecycle::Activated => "activated",
            Lifecycle::Consolidated => "consolidated",
            Lifecycle::Archived => "archived",
            Lifecycle::Expired => "expired",
            Lifecycle::Frozen => "frozen",
        }
    }

    /// Whether recall may return a crystal in this state.
    pub fn is_recallable(self) -> bool {
        matches!(self, Lifecycle::Generated | Lifecycle::Activated | Lifecycle::Consolidated | Lifecycle::Frozen)
    }

    /// Whether the state machine allows `self → to` (seed 004's diagram).
    pub fn can_become(self, to: Lifecycle) -> bool {
        use Lifecycle::*;
        matches!(
            (self, to),
            (Generated, Activated)
                | (Generated, Consolidated)
                | (Activated, Consolidated)
                | (Generated | Activated | Consolidated, Archived)
                | (Generated | Activated, Expired)
                | (Generated | Activated, Frozen)
        )
    }
}

/// Supersession instead of deletion (seed 000): superseded rows stay as provenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    #[default]
    Active,
    Superseded,
}

/// How long a crystal lives (seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Lifespan {
    /// Never expired automatically.
    Permanent,
    /// Expired `ttl_ms` after creation.
    Ttl,
    /// Subject to decay in consolidation.
    #[default]
    Decay,
}

/// One step in a crystal's derivation (seed 004's provenance DAG).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvenanceNode {
    pub crystal_id: CrystalId,
    /// created, mutated, merged, imported, forked, superseded.
    pub operation: String,
    /// `local_agent`, `user`, `consolidation`, or `peer:<peer id>`.
    pub actor: String,
    pub timestamp: UnixMillis,
    pub parent_ids: Vec<CrystalId>,
}

/// Who may see a crystal and how long it lives (seed 004).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Governance {
    pub scope: Scope,
    pub lifespan: Lifespan,
    pub ttl_ms: Option<u64>,
    pub priority: f64,
    pub sensitivity: Sensitivity,
    pub provenance: Vec<ProvenanceNode>,
    pub peer_origin: Option<String>,
}

/// One stored memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Crystal {
    pub id: CrystalId,
    pub text: String,
    pub namespace: Namespace,
    pub kind: MemoryKind,
    pub semantic_type: SemanticType,
    pub origin: Origin,
    pub lifecycle: Lifecycle,
    pub status: Status,
    /// The row this one replaced.
    pub supersedes: Option<CrystalId>,
    /// The row that replaced this one.
    pub superseded_by: Option<CrystalId>,
    /// What the memory is about, for supersession ("dad").
    pub subject: Option<String>,
    /// Which property of the subject ("surgery date").
    pub attribute: Option<String>,
    /// How sure the agent is, in [0, 1]; reinforcement adds 0.05.
    pub confidence: f64,
    pub decay_class: DecayClass,
    /// For event-bound memories: when the event happens.
    pub event_at: Option<UnixMillis>,
    pub governance: Governance,
    /// The hormone levels when the crystal was stored.
    pub hormones: Influence,
    /// (dopamine + oxytocin − cortisol) / 2 at ingestion, in [−1, 1].
    pub emotional_valence: f64,
    /// Seed 003's emotional weight in [0, 1]; 0.9 or more means almost no decay.
    pub emotional_weight: f64,
    /// Ebbinghaus importance in [0, 1], recomputed by consolidation.
    pub importance: f64,
    pub access_count: u64,
    /// The decay clock: the last access or reinforcement.
    pub last_access: UnixMillis,
    pub created_at: UnixMillis,
    /// For an archived merge loser: the crystal it merged into.
    pub parent_id: Option<CrystalId>,
    /// The conversation a memory came from, and when it was said.
    pub session: Option<String>,
    pub turn_at: Option<UnixMillis>,
    pub curiosity_boost: f64,
    pub steering_reward: f64,
    /// The caller's own id for this memory, returned with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// The caller's own metadata (a JSON object), stored and returned as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// For a skill's crystal, the skill (by content id) it indexes: kept with the crystal, so
    /// a skill is linked to its crystal by the same write that stores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill: Option<ContentId>,
}

impl Crystal {
    /// Whether recall may return it: active, in a recallable state, not past its TTL.
    pub fn is_recallable(&self, now: UnixMillis) -> bool {
        self.status == Status::Active && self.lifecycle.is_recallable() && !self.ttl_passed(now)
    }

    /// Whether a TTL lifespan has run out.
    pub fn ttl_passed(&self, now: UnixMillis) -> bool {
        self.governance.lifespan == Lifespan::Ttl
            && self.governance.ttl_ms.is_some_and(|ttl| now.saturating_sub(self.created_at) >= ttl)
    }

    /// Seed 004's access check for this crystal.
    pub fn can_access(&self, caller: crate::governance::Caller, now: UnixMillis) -> bool {
        let expired = self.lifecycle == Lifecycle::Expired || self.ttl_passed(now);
        crate::governance::can_access(self.governance.scope, self.governance.sensitivity, expired, caller)
    }

    /// Skills never decay (seed 004); neither do permanent crystals.
    pub fn is_decay_immune(&self) -> bool {
        matches!(self.semantic_type, SemanticType::Skill)
            || self.governance.lifespan == Lifespan::Permanent
            || self.lifecycle == Lifecycle::Frozen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_parse_and_print() {
        assert_eq!(Namespace::try_from("episodic".to_owned()), Ok(Namespace::Episodic));
        assert_eq!(Namespace::try_from("swarm".to_owned()), Ok(Namespace::Swarm));
        assert_eq!(Namespace::Swarm.as_string(), "swarm");
        assert_eq!(Namespace::try_from("operator".to_owned()), Ok(Namespace::Operator));
        assert_eq!(Namespace::Operator.as_string(), "operator");
        assert_eq!(Namespace::try_from("user:alice".to_owned()), Ok(Namespace::User("alice".into())));
        assert!(Namespace::try_from("user:".to_owned()).is_err());
        assert!(Namespace::try_from("users".to_owned()).is_err());
        assert_eq!(Namespace::User("bob".into()).as_string(), "user:bob");
    }

    #[test]
    fn kinds_carry_seed_000_trust_order() {
        assert!(MemoryKind::Interaction.trust() > MemoryKind::Observation.trust());
        assert!(MemoryKind::Observation.trust() > MemoryKind::Summary.trust());
        assert!(MemoryKind::Summary.trust() > MemoryKind::ExplorationNote.trust());
    }

    #[test]
    fn lifecycle_follows_the_seed_state_machine() {
        use Lifecycle::*;
        assert!(Generated.can_become(Activated));
        assert!(Generated.can_become(Expired));
        assert!(Activated.can_become(Consolidated));
        assert!(Generated.can_become(Frozen));
        assert!(!Frozen.can_become(Expired), "frozen is immutable");
        assert!(!Expired.can_become(Activated));
        assert!(!Archived.can_become(Generated));
        assert!(!Consolidated.can_become(Expired));
    }
}
