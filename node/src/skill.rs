//! Skills this node holds: its own and those ingested from peers, with their endorsement
//! state (seed 004's `isVerified` / `verifiedBy`) and the endorsements waiting for their skill.

pub mod folder;
pub mod pending;

use std::collections::{HashMap, VecDeque};

use druse_memory::governance::{self, Scope, Sensitivity};
use druse_protocol::body::{CrystalListing, Endorsement, EndorsementVerdict, ExecutionStats, SemanticType};
use druse_protocol::{ContentId, PublicKey, UnixMillis};
use serde::{Deserialize, Serialize};

/// Where a skill came from (a crystal has an origin of its own: `memory::crystal::Origin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    /// Published by this node.
    Local,
    /// Received from the swarm.
    Peer,
}

/// The last endorsement verdict applied to a skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endorsed {
    pub by: PublicKey,
    pub seq: u64,
    pub issued_at: UnixMillis,
    pub verdict: EndorsementVerdict,
    pub note: String,
}

/// A stored skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skill {
    pub id: ContentId,
    pub listing: CrystalListing,
    /// The key that signed the listing.
    pub author: PublicKey,
    /// The author's PeerId.
    pub author_peer: String,
    pub origin: Provenance,
    pub received_at: UnixMillis,
    /// Endorsed by a management key and not revoked since.
    pub is_verified: bool,
    /// The management key that endorsed it.
    pub verified_by: Option<PublicKey>,
    /// The last endorsement or revocation applied.
    pub endorsement: Option<Endorsed>,
    /// A newer version from the same author (same `skill_id`) is known.
    #[serde(default)]
    pub deprecated: bool,
    /// The content id of the newest version known.
    #[serde(default)]
    pub deprecated_by: Option<ContentId>,
    /// The memory crystal that indexes this skill, once it is in the memory engine. The
    /// engine keeps the link with the crystal, and the node fills this in when it reads a
    /// skill; a skill stored by an older version may still hold it in its record.
    #[serde(default)]
    pub crystal: Option<u64>,
}

impl Skill {
    /// A skill as first stored.
    pub fn new(id: ContentId, listing: CrystalListing, author: PublicKey, origin: Provenance, now: UnixMillis) -> Self {
        Self {
            id,
            listing,
            author,
            author_peer: author.peer_id().to_string(),
            origin,
            received_at: now,
            is_verified: false,
            verified_by: None,
            endorsement: None,
            deprecated: false,
            deprecated_by: None,
            crystal: None,
        }
    }

    /// Applies an endorsement or revocation; returns false if it is older than the one applied.
    /// A newer seq from the same key wins; between keys, the later issue time wins.
    pub fn apply_endorsement(&mut self, signer: PublicKey, e: &Endorsement) -> bool {
        if let Some(last) = &self.endorsement {
            let older = if last.by == signer { e.seq <= last.seq } else { e.issued_at < last.issued_at };
            if older {
                return false;
            }
        }
        self.endorsement =
            Some(Endorsed { by: signer, seq: e.seq, issued_at: e.issued_at, verdict: e.verdict, note: e.note.clone() });
        match e.verdict {
            EndorsementVerdict::Endorse => {
                self.is_verified = true;
                self.verified_by = Some(signer);
            }
            EndorsementVerdict::Revoke => {
                self.is_verified = false;
                self.verified_by = None;
            }
        }
        true
    }
}

/// Signed messages about a skill (endorsements, reports) that arrived before the skill:
/// bounded in count, each kept for a TTL, applied in arrival order when the skill arrives.
#[derive(Debug)]
pub struct Pending<T> {
    waiting: HashMap<ContentId, Vec<(PublicKey, T, UnixMillis)>>,
    order: VecDeque<(ContentId, UnixMillis)>,
    capacity: usize,
    ttl_ms: u64,
}

impl<T> Pending<T> {
    /// At most `capacity` messages, each kept `ttl_ms`.
    pub fn new(capacity: usize, ttl_ms: u64) -> Self {
        Self { waiting: HashMap::new(), order: VecDeque::new(), capacity: capacity.max(1), ttl_ms }
    }

    /// Keeps a message about skill `id` until the skill arrives, dropping the oldest when full.
    pub fn push(&mut self, id: ContentId, signer: PublicKey, item: T, now: UnixMillis) {
        self.expire(now);
        while self.order.len() >= self.capacity {
            self.drop_oldest();
        }
        self.order.push_back((id, now));
        self.waiting.entry(id).or_default().push((signer, item, now));
    }

    /// Takes the messages waiting for `id`, in arrival order.
    pub fn take(&mut self, id: &ContentId, now: UnixMillis) -> Vec<(PublicKey, T)> {
        self.expire(now);
        let taken = self.waiting.remove(id).unwrap_or_default();
        if !taken.is_empty() {
            self.order.retain(|(waiting, _)| waiting != id);
        }
        taken.into_iter().map(|(signer, item, _)| (signer, item)).collect()
    }

    /// The most messages kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How long a message waits.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// How many messages are waiting.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none are waiting.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    fn expire(&mut self, now: UnixMillis) {
        while self.order.front().is_some_and(|(_, at)| now.saturating_sub(*at) >= self.ttl_ms) {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        let Some((id, _)) = self.order.pop_front() else { return };
        if let Some(list) = self.waiting.get_mut(&id) {
            if !list.is_empty() {
                list.remove(0);
            }
            if list.is_empty() {
                self.waiting.remove(&id);
            }
        }
    }
}

/// A version-1 skill listing with no stats, tags or price, for tests.
/// What an agent developer sends to publish a skill.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishSkill {
    pub name: String,
    pub text: String,
    #[serde(default = "default_semantic_type")]
    pub semantic_type: SemanticType,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub category: Option<String>,
    /// Stable across versions; defaults to the name.
    #[serde(default)]
    pub skill_id: Option<String>,
    #[serde(default = "default_version")]
    pub version: u32,
    #[serde(default)]
    pub previous_version: Option<ContentId>,
    #[serde(default)]
    pub stats: Option<ExecutionStats>,
    /// Asking price in micro-USDC.
    #[serde(default)]
    pub asking_price: u64,
    #[serde(default = "default_scope")]
    pub scope: Scope,
    #[serde(default = "default_sensitivity")]
    pub sensitivity: Sensitivity,
}

fn default_semantic_type() -> SemanticType {
    SemanticType::Skill
}
fn default_version() -> u32 {
    1
}
fn default_scope() -> Scope {
    Scope::Shared
}
fn default_sensitivity() -> Sensitivity {
    Sensitivity::Normal
}

/// The answer to a publish.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Published {
    pub content_id: ContentId,
    pub issued_at: UnixMillis,
}

impl PublishSkill {
    /// The listing this request describes, after the governance check: memory crystals,
    /// private scope and confidential content never leave the node.
    pub fn into_listing(self, now: UnixMillis) -> Result<CrystalListing, governance::Refusal> {
        governance::check_publishable(self.semantic_type, self.scope, self.sensitivity, &[&self.name, &self.text])?;
        Ok(CrystalListing {
            issued_at: now,
            skill_id: self.skill_id.unwrap_or_else(|| self.name.clone()),
            name: self.name,
            text: self.text,
            semantic_type: self.semantic_type,
            tags: self.tags,
            category: self.category,
            version: self.version,
            previous_version: self.previous_version,
            stats: self.stats.unwrap_or(ExecutionStats { executions: 0, successes: 0, avg_reward: 0.0 }),
            asking_price: self.asking_price,
        })
    }
}

#[cfg(test)]
pub(crate) fn sample_listing(name: &str, text: &str, issued_at: UnixMillis) -> CrystalListing {
    use druse_protocol::body::{ExecutionStats, SemanticType};
    CrystalListing {
        issued_at,
        name: name.into(),
        text: text.into(),
        semantic_type: SemanticType::Skill,
        tags: vec![],
        category: None,
        skill_id: name.into(),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 0, successes: 0, avg_reward: 0.0 },
        asking_price: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use druse_protocol::Keypair;

    fn endorsement(seq: u64, verdict: EndorsementVerdict, id: ContentId) -> Endorsement {
        Endorsement {
            issued_at: seq,
            seq,
            content_id: id,
            skill_id: "s".into(),
            version: 1,
            verdict,
            note: String::new(),
        }
    }

    fn skill() -> Skill {
        let listing = sample_listing("s", "t", 0);
        Skill::new(ContentId::of(b"s"), listing, Keypair::from_seed([2; 32]).public(), Provenance::Peer, 0)
    }

    #[test]
    fn endorse_then_revoke_then_late_endorse_is_ignored() {
        let mgmt = Keypair::from_seed([1; 32]).public();
        let mut s = skill();
        assert!(s.apply_endorsement(mgmt, &endorsement(1, EndorsementVerdict::Endorse, s.id)));
        assert!(s.is_verified && s.verified_by == Some(mgmt));
        assert!(s.apply_endorsement(mgmt, &endorsement(3, EndorsementVerdict::Revoke, s.id)));
        assert!(!s.is_verified && s.verified_by.is_none());
        assert!(!s.apply_endorsement(mgmt, &endorsement(2, EndorsementVerdict::Endorse, s.id)));
        assert!(!s.is_verified);
    }

    #[test]
    fn pending_endorsements_are_bounded_and_expire() {
        let mgmt = Keypair::from_seed([1; 32]).public();
        let mut pending = Pending::new(2, 1000);
        let ids: Vec<_> = (0..3u8).map(|i| ContentId::of(&[i])).collect();
        for (i, id) in ids.iter().enumerate() {
            pending.push(*id, mgmt, endorsement(i as u64, EndorsementVerdict::Endorse, *id), 0);
        }
        assert_eq!(pending.len(), 2);
        assert!(pending.take(&ids[0], 10).is_empty(), "the oldest was dropped");
        assert_eq!(pending.take(&ids[1], 10).len(), 1);
        assert!(pending.take(&ids[2], 1000).is_empty(), "expired after its TTL");
        assert!(pending.is_empty());
    }
}
