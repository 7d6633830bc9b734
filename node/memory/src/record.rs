//! How a crystal is stored: a version byte, then its fields in postcard's encoding, a fixed
//! order of compact values. A start reads every crystal of the store: at a million memories
//! (772,716 crystals, `memory-bench reopen`, the same build back to back) the read took
//! 2.9–3.2 s with the crystals stored as JSON and 1.7–1.8 s in this form. Records written as
//! JSON by earlier versions are still read, and each is stored in this form the next time its
//! crystal changes.
//!
//! postcard is not self-describing: a field is known by its place, and an enum variant by its
//! number. So [`Fields`] lists every field of [`Crystal`] in one order, and a field added to
//! the crystal fails to compile in [`decode`] until it is stored too. Storing it takes a new
//! version byte, with records of this version still decoded (the new field at its default).
//! The tests pin each stored enum's variant numbers: a new variant goes after the others,
//! which needs no new version.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::crystal::{Crystal, CrystalId, Governance, Lifecycle, MemoryKind, Namespace, Origin, Status};
use crate::decay::DecayClass;
use crate::hormones::Influence;
use druse_protocol::body::SemanticType;
use druse_protocol::{ContentId, UnixMillis};

/// The first byte of a record in this form. A JSON record starts with `{`.
const VERSION_1: u8 = 1;

/// A crystal's fields in the stored order: borrowed from the crystal to encode it, owned when
/// decoded.
#[derive(Serialize, Deserialize)]
struct Fields<'a> {
    id: CrystalId,
    text: Cow<'a, str>,
    namespace: Cow<'a, Namespace>,
    kind: MemoryKind,
    semantic_type: SemanticType,
    origin: Origin,
    lifecycle: Lifecycle,
    status: Status,
    supersedes: Option<CrystalId>,
    superseded_by: Option<CrystalId>,
    subject: Option<Cow<'a, str>>,
    attribute: Option<Cow<'a, str>>,
    confidence: f64,
    decay_class: DecayClass,
    event_at: Option<UnixMillis>,
    governance: Cow<'a, Governance>,
    hormones: Cow<'a, Influence>,
    emotional_valence: f64,
    emotional_weight: f64,
    importance: f64,
    access_count: u64,
    last_access: UnixMillis,
    created_at: UnixMillis,
    parent_id: Option<CrystalId>,
    session: Option<Cow<'a, str>>,
    turn_at: Option<UnixMillis>,
    curiosity_boost: f64,
    steering_reward: f64,
    external_id: Option<Cow<'a, str>>,
    /// The caller's JSON object, as JSON text: it may hold anything JSON holds.
    metadata: Option<String>,
    skill: Option<ContentId>,
}

/// `crystal` as the store keeps it.
pub(crate) fn encode(c: &Crystal) -> Result<Vec<u8>, String> {
    fn text(s: &Option<String>) -> Option<Cow<'_, str>> {
        s.as_deref().map(Cow::Borrowed)
    }
    let fields = Fields {
        id: c.id,
        text: Cow::Borrowed(&c.text),
        namespace: Cow::Borrowed(&c.namespace),
        kind: c.kind,
        semantic_type: c.semantic_type,
        origin: c.origin,
        lifecycle: c.lifecycle,
        status: c.status,
        supersedes: c.supersedes,
        superseded_by: c.superseded_by,
        subject: text(&c.subject),
        attribute: text(&c.attribute),
        confidence: c.confidence,
        decay_class: c.decay_class,
        event_at: c.event_at,
        governance: Cow::Borrowed(&c.governance),
        hormones: Cow::Borrowed(&c.hormones),
        emotional_valence: c.emotional_valence,
        emotional_weight: c.emotional_weight,
        importance: c.importance,
        access_count: c.access_count,
        last_access: c.last_access,
        created_at: c.created_at,
        parent_id: c.parent_id,
        session: text(&c.session),
        turn_at: c.turn_at,
        curiosity_boost: c.curiosity_boost,
        steering_reward: c.steering_reward,
        external_id: text(&c.external_id),
        metadata: c.metadata.as_ref().map(serde_json::to_string).transpose().map_err(|e| e.to_string())?,
        skill: c.skill,
    };
    let mut bytes = vec![VERSION_1];
    postcard::to_io(&fields, &mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// A stored crystal, in this form or as JSON.
pub(crate) fn decode(bytes: &[u8]) -> Result<Crystal, String> {
    let f: Fields = match bytes.split_first() {
        Some((&VERSION_1, rest)) => postcard::from_bytes(rest).map_err(|e| e.to_string())?,
        Some((b'{', _)) => return serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        Some((other, _)) => return Err(format!("unknown record version {other}")),
        None => return Err("empty record".into()),
    };
    let text = |s: Option<Cow<str>>| s.map(Cow::into_owned);
    // Every field of the crystal is named: one added to it fails to compile here until it is
    // stored (see the module's docs).
    Ok(Crystal {
        id: f.id,
        text: f.text.into_owned(),
        namespace: f.namespace.into_owned(),
        kind: f.kind,
        semantic_type: f.semantic_type,
        origin: f.origin,
        lifecycle: f.lifecycle,
        status: f.status,
        supersedes: f.supersedes,
        superseded_by: f.superseded_by,
        subject: text(f.subject),
        attribute: text(f.attribute),
        confidence: f.confidence,
        decay_class: f.decay_class,
        event_at: f.event_at,
        governance: f.governance.into_owned(),
        hormones: f.hormones.into_owned(),
        emotional_valence: f.emotional_valence,
        emotional_weight: f.emotional_weight,
        importance: f.importance,
        access_count: f.access_count,
        last_access: f.last_access,
        created_at: f.created_at,
        parent_id: f.parent_id,
        session: text(f.session),
        turn_at: f.turn_at,
        curiosity_boost: f.curiosity_boost,
        steering_reward: f.steering_reward,
        external_id: text(f.external_id),
        metadata: f.metadata.map(|json| serde_json::from_str(&json)).transpose().map_err(|e| e.to_string())?,
        skill: f.skill,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crystal::{Lifespan, ProvenanceNode};
    use crate::governance::{Scope, Sensitivity};

    /// A crystal with no field at its default, so a field out of place cannot pass.
    fn full() -> Crystal {
        let mut metadata = serde_json::Map::new();
        metadata.insert("tags".into(), serde_json::json!(["a", 1, null, {"deep": [true, 2.5]}]));
        metadata.insert("note".into(), serde_json::json!("ünïcode ✓ \"quoted\"\n"));
        Crystal {
            id: 42,
            text: "Dad's surgery is on March 15 — 🦀".into(),
            namespace: Namespace::try_from("user:alice".to_owned()).unwrap(),
            kind: MemoryKind::Summary,
            semantic_type: SemanticType::Relationship,
            origin: Origin::Peer,
            lifecycle: Lifecycle::Consolidated,
            status: Status::Superseded,
            supersedes: Some(7),
            superseded_by: Some(99),
            subject: Some("dad".into()),
            attribute: Some("surgery date".into()),
            confidence: 0.875,
            decay_class: DecayClass::EventBound,
            event_at: Some(1_790_000_123_456),
            governance: Governance {
                scope: Scope::Shared,
                lifespan: Lifespan::Ttl,
                ttl_ms: Some(86_400_000),
                priority: 0.3,
                sensitivity: Sensitivity::Confidential,
                provenance: vec![ProvenanceNode {
                    crystal_id: 42,
                    operation: "merged".into(),
                    actor: "peer:12D3KooW".into(),
                    timestamp: 1_790_000_000_001,
                    parent_ids: vec![3, 5],
                }],
                peer_origin: Some("12D3KooWpeer".into()),
            },
            hormones: Influence { dopamine: 0.1, cortisol: 0.2, oxytocin: 0.3 },
            emotional_valence: -0.25,
            emotional_weight: 0.9,
            importance: 0.123_456_789_012_345_6,
            access_count: 12,
            last_access: 1_790_000_999_000,
            created_at: 1_790_000_000_000,
            parent_id: Some(41),
            session: Some("s-2026-11-27".into()),
            turn_at: Some(1_790_000_000_500),
            curiosity_boost: 0.05,
            steering_reward: -0.5,
            external_id: Some("ext-1".into()),
            metadata: Some(metadata),
            skill: Some(ContentId::of(b"a skill")),
        }
    }

    #[test]
    fn a_crystal_comes_back_as_it_was_stored_in_under_half_the_bytes_of_json() {
        let crystal = full();
        let bytes = encode(&crystal).unwrap();
        assert_eq!(bytes[0], VERSION_1);
        assert_eq!(decode(&bytes).unwrap(), crystal);
        let json = serde_json::to_vec(&crystal).unwrap();
        assert!(bytes.len() * 2 < json.len(), "{} bytes against {} as JSON", bytes.len(), json.len());
        // Every optional field empty, and floats at their edges.
        let bare = Crystal {
            subject: None,
            attribute: None,
            session: None,
            external_id: None,
            metadata: None,
            skill: None,
            supersedes: None,
            importance: f64::MIN_POSITIVE,
            confidence: 1.0 - f64::EPSILON,
            ..crate::tests::crystal(u64::MAX >> 8, "")
        };
        assert_eq!(decode(&encode(&bare).unwrap()).unwrap(), bare);
    }

    #[test]
    fn a_record_written_as_json_by_an_earlier_version_is_still_read() {
        let crystal = full();
        let json = serde_json::to_vec(&crystal).unwrap();
        assert_eq!(decode(&json).unwrap(), crystal);
    }

    #[test]
    fn a_damaged_record_is_a_clear_error_not_a_panic_or_another_crystal() {
        let bytes = encode(&full()).unwrap();
        assert!(decode(&[]).unwrap_err().contains("empty"));
        assert!(decode(&[9, 1, 2]).unwrap_err().contains("version 9"));
        for cut in 1..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} of {}", bytes.len());
        }
        assert!(decode(b"{\"id\": 1").is_err());
        // An enum number no variant has.
        let mut bad = encode(&crate::tests::crystal(1, "x")).unwrap();
        let text_end = 1 + 1 + 1 + 1; // version, id 1, text length 1, "x"
        let namespace_len = usize::from(bad[text_end]);
        bad[text_end + 1 + namespace_len] = 200;
        assert!(decode(&bad).is_err());
    }

    /// The stored enums' variant numbers: a record says which variant by this number, so a
    /// variant may only be added after the others, never between or in place of one.
    #[test]
    fn the_stored_variant_numbers_never_change() {
        fn numbers<T: Serialize>(variants: &[T]) -> Vec<u8> {
            variants.iter().map(|v| postcard::to_allocvec(v).unwrap()[0]).collect()
        }
        let count = |n: u8| (0..n).collect::<Vec<u8>>();
        use MemoryKind as K;
        assert_eq!(numbers(&[K::Observation, K::Interaction, K::ExplorationNote, K::Summary]), count(4));
        use SemanticType as T;
        let types = [
            T::Fact,
            T::Preference,
            T::TaskPattern,
            T::Skill,
            T::Episode,
            T::Insight,
            T::Relationship,
            T::Goal,
            T::General,
        ];
        assert_eq!(numbers(&types), count(9));
        use Origin as O;
        let origins = [O::Indexed, O::Session, O::Skill, O::Dream, O::UserInput, O::Inferred, O::Peer];
        assert_eq!(numbers(&origins), count(7));
        assert_eq!(numbers(&Lifecycle::ALL), count(6));
        assert_eq!(
            Lifecycle::ALL,
            [
                Lifecycle::Generated,
                Lifecycle::Activated,
                Lifecycle::Consolidated,
                Lifecycle::Archived,
                Lifecycle::Expired,
                Lifecycle::Frozen
            ]
        );
        assert_eq!(numbers(&[Status::Active, Status::Superseded]), count(2));
        assert_eq!(numbers(&[Lifespan::Permanent, Lifespan::Ttl, Lifespan::Decay]), count(3));
        use DecayClass as D;
        let classes = [
            D::Never,
            D::Location,
            D::Employment,
            D::LongTermGoal,
            D::ActiveProject,
            D::Health,
            D::EmotionalState,
            D::TemporaryLocation,
            D::EventBound,
            D::Default,
        ];
        assert_eq!(numbers(&classes), count(10));
        assert_eq!(numbers(&[Sensitivity::Normal, Sensitivity::Personal, Sensitivity::Confidential]), count(3));
        assert_eq!(numbers(&[Scope::Private, Scope::Shared, Scope::Public]), count(3));
    }
}
