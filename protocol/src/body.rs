//! The body of each message kind, and the field rules a body must meet before anyone acts on it.
//!
//! Decoding is strict: unknown fields, unknown enum values, trailing bytes and non-canonical
//! encodings are refused, and every string and list has a length cap.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::UnixMillis;
use crate::cid::ContentId;
use crate::envelope::Kind;
use crate::keys::PublicKey;

/// Length caps, in bytes for strings and in items for lists.
pub mod limits {
    /// A crystal's or bounty's short name or id.
    pub const NAME: usize = 128;
    /// A crystal listing's text.
    pub const TEXT: usize = 48 * 1024;
    /// A bounty's description.
    pub const DESCRIPTION: usize = 4 * 1024;
    /// A note or reason.
    pub const NOTE: usize = 512;
    /// One tag.
    pub const TAG: usize = 64;
    /// Tags on one crystal or bounty.
    pub const TAGS: usize = 16;
    /// The longest weather a management node may declare: 7 days.
    pub const WEATHER_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;
    /// The furthest a bounty, ban or attestation may expire after it is issued: 365 days.
    pub const EXPIRY_MS: u64 = 365 * 24 * 3600 * 1000;
    /// The largest bounty reward multiplier.
    pub const REWARD_MULTIPLIER: f64 = 100.0;
}

/// Classification of a crystal (seed 004). Only `skill` and `task_pattern` may be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SemanticType {
    Fact,
    Preference,
    TaskPattern,
    Skill,
    Episode,
    Insight,
    Relationship,
    Goal,
    General,
}

impl SemanticType {
    /// The name used on the wire, in the API and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            SemanticType::Fact => "fact",
            SemanticType::Preference => "preference",
            SemanticType::TaskPattern => "task_pattern",
            SemanticType::Skill => "skill",
            SemanticType::Episode => "episode",
            SemanticType::Insight => "insight",
            SemanticType::Relationship => "relationship",
            SemanticType::Goal => "goal",
            SemanticType::General => "general",
        }
    }

    /// Knowledge crystals (skills and task patterns) may leave the node; memory crystals never do.
    pub fn is_publishable(self) -> bool {
        matches!(self, SemanticType::Skill | SemanticType::TaskPattern)
    }
}

/// Peer trust levels, lowest first (DESIGN §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustLevel {
    Banned,
    Untrusted,
    Provisional,
    Trusted,
    Verified,
}

impl TrustLevel {
    /// Every level, lowest first.
    pub const ALL: [TrustLevel; 5] =
        [TrustLevel::Banned, TrustLevel::Untrusted, TrustLevel::Provisional, TrustLevel::Trusted, TrustLevel::Verified];

    /// The name used in config, the API and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            TrustLevel::Banned => "banned",
            TrustLevel::Untrusted => "untrusted",
            TrustLevel::Provisional => "provisional",
            TrustLevel::Trusted => "trusted",
            TrustLevel::Verified => "verified",
        }
    }
}

/// Execution statistics an author claims for a listing (nodes recompute from signed reports).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionStats {
    pub executions: u64,
    pub successes: u64,
    /// Mean reward over the executions, in [-1, 1].
    pub avg_reward: f64,
}

/// A knowledge crystal offered to the swarm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrystalListing {
    pub issued_at: UnixMillis,
    pub name: String,
    pub text: String,
    pub semantic_type: SemanticType,
    pub tags: Vec<String>,
    pub category: Option<String>,
    /// Stays the same across versions of one skill.
    pub skill_id: String,
    pub version: u32,
    /// The content id of the version this one replaces.
    pub previous_version: Option<ContentId>,
    pub stats: ExecutionStats,
    /// Asking price in micro-USDC (1 USDC = 1 000 000).
    pub asking_price: u64,
}

/// Whether a management node vouches for a skill or withdraws that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndorsementVerdict {
    Endorse,
    Revoke,
}

/// A management verdict on one version of a skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endorsement {
    pub issued_at: UnixMillis,
    pub seq: u64,
    pub content_id: ContentId,
    pub skill_id: String,
    pub version: u32,
    pub verdict: EndorsementVerdict,
    pub note: String,
}

/// Cortisol weather: while active, every node halts ingestion from peers below `trusted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weather {
    pub issued_at: UnixMillis,
    pub seq: u64,
    /// Network cortisol in [0, 1]; 0 lifts the weather.
    pub level: f64,
    pub duration_ms: u64,
    pub reason: String,
}

/// Work the management node wants done, with a reward multiplier for skills that match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounty {
    pub issued_at: UnixMillis,
    pub seq: u64,
    pub id: String,
    pub description: String,
    pub tags: Vec<String>,
    /// In [0, 1].
    pub priority: f64,
    /// In (0, 100].
    pub reward_multiplier: f64,
    pub expires_at: UnixMillis,
}

/// What a report says happened to a skill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ReportEvent {
    /// The reporter ran the skill.
    Execution { success: bool, reward: f64 },
    /// The reporter adopted the skill, paying `price_paid` micro-USDC in credits.
    Adoption { price_paid: u64 },
    /// The reporter claims a bounty with the skill.
    Claim { bounty_id: String },
}

/// A signed statement by any node about a skill it used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub issued_at: UnixMillis,
    /// The signer. Naming it in the body gives two reporters' identical statements two
    /// content ids, so neither is deduplicated away as the other.
    pub reporter: PublicKey,
    pub content_id: ContentId,
    pub event: ReportEvent,
}

/// A management ban: the peer is `banned` until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ban {
    pub issued_at: UnixMillis,
    pub seq: u64,
    pub peer: PublicKey,
    pub reason: String,
    pub expires_at: UnixMillis,
}

/// A management attestation: the peer holds `level` until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attest {
    pub issued_at: UnixMillis,
    pub seq: u64,
    pub peer: PublicKey,
    pub level: TrustLevel,
    pub reason: String,
    pub expires_at: UnixMillis,
}

/// Any message body, tagged by its kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Crystal(CrystalListing),
    Endorsement(Endorsement),
    Weather(Weather),
    Bounty(Bounty),
    Report(Report),
    Ban(Ban),
    Attest(Attest),
}

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{kind} body is not well-formed: {detail}")]
    Malformed { kind: Kind, detail: String },
    #[error("{kind} body is not in canonical DAG-CBOR form")]
    NonCanonical { kind: Kind },
    #[error("field {field}: {problem}")]
    Field { field: &'static str, problem: String },
    #[error("a {} crystal is private memory and can never be published", .0.as_str())]
    NotPublishable(SemanticType),
}

fn field(field: &'static str, problem: impl Into<String>) -> Error {
    Error::Field { field, problem: problem.into() }
}

fn check_str(name: &'static str, value: &str, max: usize) -> Result<(), Error> {
    if value.len() > max {
        return Err(field(name, format!("{} bytes, over the cap of {max}", value.len())));
    }
    Ok(())
}

fn check_id(name: &'static str, value: &str) -> Result<(), Error> {
    check_str(name, value, limits::NAME)?;
    if value.trim().is_empty() {
        return Err(field(name, "must not be empty"));
    }
    Ok(())
}

fn check_tags(tags: &[String]) -> Result<(), Error> {
    if tags.len() > limits::TAGS {
        return Err(field("tags", format!("{} tags, over the cap of {}", tags.len(), limits::TAGS)));
    }
    tags.iter().try_for_each(|t| check_str("tags", t, limits::TAG))
}

fn check_range(name: &'static str, value: f64, lo: f64, hi: f64) -> Result<(), Error> {
    if !(lo..=hi).contains(&value) {
        return Err(field(name, format!("{value} is outside [{lo}, {hi}]")));
    }
    Ok(())
}

fn check_expiry(issued_at: UnixMillis, expires_at: UnixMillis) -> Result<(), Error> {
    if expires_at <= issued_at || expires_at - issued_at > limits::EXPIRY_MS {
        return Err(field("expires_at", "must fall after issued_at and within 365 days of it"));
    }
    Ok(())
}

impl CrystalListing {
    fn check(&self) -> Result<(), Error> {
        if !self.semantic_type.is_publishable() {
            return Err(Error::NotPublishable(self.semantic_type));
        }
        check_id("name", &self.name)?;
        check_str("text", &self.text, limits::TEXT)?;
        check_tags(&self.tags)?;
        if let Some(category) = &self.category {
            check_str("category", category, limits::TAG)?;
        }
        check_id("skill_id", &self.skill_id)?;
        if self.stats.successes > self.stats.executions {
            return Err(field("stats", "more successes than executions"));
        }
        check_range("stats.avg_reward", self.stats.avg_reward, -1.0, 1.0)
    }
}

impl Endorsement {
    fn check(&self) -> Result<(), Error> {
        check_id("skill_id", &self.skill_id)?;
        check_str("note", &self.note, limits::NOTE)
    }
}

impl Weather {
    fn check(&self) -> Result<(), Error> {
        check_range("level", self.level, 0.0, 1.0)?;
        if self.duration_ms > limits::WEATHER_DURATION_MS {
            return Err(field("duration_ms", "longer than 7 days"));
        }
        check_str("reason", &self.reason, limits::NOTE)
    }

    /// When this weather stops applying.
    pub fn expires_at(&self) -> UnixMillis {
        self.issued_at.saturating_add(self.duration_ms)
    }
}

impl Bounty {
    fn check(&self) -> Result<(), Error> {
        check_id("id", &self.id)?;
        check_str("description", &self.description, limits::DESCRIPTION)?;
        check_tags(&self.tags)?;
        check_range("priority", self.priority, 0.0, 1.0)?;
        if !(self.reward_multiplier > 0.0 && self.reward_multiplier <= limits::REWARD_MULTIPLIER) {
            return Err(field("reward_multiplier", "must be in (0, 100]"));
        }
        check_expiry(self.issued_at, self.expires_at)
    }
}

impl Report {
    fn check(&self) -> Result<(), Error> {
        match &self.event {
            ReportEvent::Execution { reward, .. } => check_range("reward", *reward, -1.0, 1.0),
            ReportEvent::Adoption { .. } => Ok(()),
            ReportEvent::Claim { bounty_id } => check_id("bounty_id", bounty_id),
        }
    }
}

impl Ban {
    fn check(&self) -> Result<(), Error> {
        check_str("reason", &self.reason, limits::NOTE)?;
        check_expiry(self.issued_at, self.expires_at)
    }
}

impl Attest {
    fn check(&self) -> Result<(), Error> {
        if self.level == TrustLevel::Banned {
            return Err(field("level", "use a ban to ban a peer"));
        }
        check_str("reason", &self.reason, limits::NOTE)?;
        check_expiry(self.issued_at, self.expires_at)
    }
}

fn decode_strict<T: Serialize + DeserializeOwned>(kind: Kind, bytes: &[u8]) -> Result<T, Error> {
    let value: T =
        serde_ipld_dagcbor::from_slice(bytes).map_err(|e| Error::Malformed { kind, detail: e.to_string() })?;
    let again = serde_ipld_dagcbor::to_vec(&value).map_err(|e| Error::Malformed { kind, detail: e.to_string() })?;
    if again != bytes {
        return Err(Error::NonCanonical { kind });
    }
    Ok(value)
}

impl Body {
    /// The kind this body is sent as.
    pub fn kind(&self) -> Kind {
        match self {
            Body::Crystal(_) => Kind::Crystal,
            Body::Endorsement(_) => Kind::Endorsement,
            Body::Weather(_) => Kind::Weather,
            Body::Bounty(_) => Kind::Bounty,
            Body::Report(_) => Kind::Report,
            Body::Ban(_) => Kind::Ban,
            Body::Attest(_) => Kind::Attest,
        }
    }

    /// When the signer says it wrote this body.
    pub fn issued_at(&self) -> UnixMillis {
        match self {
            Body::Crystal(b) => b.issued_at,
            Body::Endorsement(b) => b.issued_at,
            Body::Weather(b) => b.issued_at,
            Body::Bounty(b) => b.issued_at,
            Body::Report(b) => b.issued_at,
            Body::Ban(b) => b.issued_at,
            Body::Attest(b) => b.issued_at,
        }
    }

    /// The signer's sequence number, carried by management broadcasts.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Body::Endorsement(b) => Some(b.seq),
            Body::Weather(b) => Some(b.seq),
            Body::Bounty(b) => Some(b.seq),
            Body::Ban(b) => Some(b.seq),
            Body::Attest(b) => Some(b.seq),
            Body::Crystal(_) | Body::Report(_) => None,
        }
    }

    /// The key the body says signed it, where the body names one: it must be the signer.
    pub fn named_signer(&self) -> Option<PublicKey> {
        match self {
            Body::Report(b) => Some(b.reporter),
            _ => None,
        }
    }

    /// Checks every field rule for this body's kind.
    pub fn check(&self) -> Result<(), Error> {
        match self {
            Body::Crystal(b) => b.check(),
            Body::Endorsement(b) => b.check(),
            Body::Weather(b) => b.check(),
            Body::Bounty(b) => b.check(),
            Body::Report(b) => b.check(),
            Body::Ban(b) => b.check(),
            Body::Attest(b) => b.check(),
        }
    }

    /// Canonical DAG-CBOR bytes, after checking the fields, so nothing invalid is ever signed.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        self.check()?;
        let kind = self.kind();
        let encoded = match self {
            Body::Crystal(b) => serde_ipld_dagcbor::to_vec(b),
            Body::Endorsement(b) => serde_ipld_dagcbor::to_vec(b),
            Body::Weather(b) => serde_ipld_dagcbor::to_vec(b),
            Body::Bounty(b) => serde_ipld_dagcbor::to_vec(b),
            Body::Report(b) => serde_ipld_dagcbor::to_vec(b),
            Body::Ban(b) => serde_ipld_dagcbor::to_vec(b),
            Body::Attest(b) => serde_ipld_dagcbor::to_vec(b),
        };
        let bytes = encoded.map_err(|e| Error::Malformed { kind, detail: e.to_string() })?;
        if bytes.len() > kind.max_body_len() {
            return Err(field(
                "body",
                format!("{} bytes, over the {kind} cap of {}", bytes.len(), kind.max_body_len()),
            ));
        }
        Ok(bytes)
    }

    /// Decodes and checks a body of `kind` from the exact bytes that were signed.
    pub fn decode(kind: Kind, bytes: &[u8]) -> Result<Self, Error> {
        let body = match kind {
            Kind::Crystal => Body::Crystal(decode_strict(kind, bytes)?),
            Kind::Endorsement => Body::Endorsement(decode_strict(kind, bytes)?),
            Kind::Weather => Body::Weather(decode_strict(kind, bytes)?),
            Kind::Bounty => Body::Bounty(decode_strict(kind, bytes)?),
            Kind::Report => Body::Report(decode_strict(kind, bytes)?),
            Kind::Ban => Body::Ban(decode_strict(kind, bytes)?),
            Kind::Attest => Body::Attest(decode_strict(kind, bytes)?),
        };
        body.check()?;
        Ok(body)
    }
}
