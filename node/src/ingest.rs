//! The ingestion pipeline (DESIGN §6) after the protocol validator: topic check, the trust and
//! weather gate, content checks, and applying each kind to the node's state. Local publishes
//! take the same path, so a node holds its own messages exactly as its peers do.

use std::collections::HashSet;

use druse_protocol::body::{Body, ReportEvent, TrustLevel};
use druse_protocol::net::{Acceptance, PeerId};
use druse_protocol::trust::TrustList;
use druse_protocol::validate::{self, Accepted, Reason, TrustView, Verdict};
use druse_protocol::{ContentId, Envelope, Kind, PublicKey, UnixMillis, topic};

use crate::governance::{self, Sensitivity};
use crate::metrics::{LevelLabel, Metrics, OutcomeLabels, VerdictLabel};
use crate::peers::{self, Book};
use crate::skill::{Origin, Pending, Skill};
use crate::store::{self, Store};
use crate::weather;

/// What happened to one message, for gossipsub and for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stored or applied, and forwarded.
    Accepted,
    /// Refused by a protocol rule.
    Protocol(Reason),
    /// A valid message on a topic that does not carry its kind.
    WrongTopic,
    /// A crystal or report from a peer below `trusted` while weather is active.
    Halted,
    /// From a peer a management node banned.
    Banned,
    /// Content that looks like a secret.
    Confidential,
    /// The store failed; the message is dropped without blame.
    StoreFailed,
}

impl Outcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Protocol(reason) => reason.as_str(),
            Outcome::WrongTopic => "wrong_topic",
            Outcome::Halted => "halted",
            Outcome::Banned => "banned",
            Outcome::Confidential => "confidential",
            Outcome::StoreFailed => "store_failed",
        }
    }

    /// What gossipsub is told.
    pub fn acceptance(self) -> Acceptance {
        match self {
            Outcome::Accepted => Acceptance::Accept,
            Outcome::Protocol(reason) if reason.is_reject() => Acceptance::Reject,
            Outcome::WrongTopic => Acceptance::Reject,
            _ => Acceptance::Ignore,
        }
    }

    /// The verdict label of `druse_messages_total`.
    pub fn verdict_label(self) -> &'static str {
        match self.acceptance() {
            Acceptance::Accept => "accept",
            Acceptance::Reject => "reject",
            Acceptance::Ignore => "ignore",
        }
    }
}

/// Everything ingestion reads and changes, behind one lock in the node.
#[derive(Debug)]
pub struct Pipeline {
    pub view: TrustView,
    pub book: Book,
    pub weather: weather::State,
    pub pending: Pending,
    store: Store,
    /// Peers whose counters changed since they were last written; `persist_peers` writes them.
    dirty: HashSet<PeerId>,
}

const WEATHER_KEY: &str = "weather";
const SEQS_KEY: &str = "seqs";

impl Pipeline {
    /// Rebuilds the pipeline's state from the store.
    pub fn restore(store: Store, mut view: TrustView, mut book: Book, pending: Pending) -> Result<Self, store::Error> {
        let weather = store.state::<weather::State>(WEATHER_KEY)?.unwrap_or_default();
        let seqs: Vec<(PublicKey, u64)> = store.state(SEQS_KEY)?.unwrap_or_default();
        for (key, seq) in seqs {
            view.restore_seq(key, seq);
        }
        for entry in store.peers::<peers::Record>() {
            let (key, record) = entry?;
            if let Ok(peer) = PeerId::from_bytes(&key) {
                book.restore(peer, record);
            }
        }
        Ok(Self { view, book, weather, pending, store, dirty: HashSet::new() })
    }

    /// The management keys in force.
    pub fn trust_list(&self) -> &TrustList {
        self.view.trust_list()
    }

    /// Runs one gossip message through the whole pipeline.
    pub fn ingest(
        &mut self,
        bytes: &[u8],
        source: &PeerId,
        propagation_source: &PeerId,
        topic: &str,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> (Option<Kind>, Outcome) {
        let accepted = match validate::validate(bytes, source, now, &mut self.view) {
            Verdict::Accept(accepted) => accepted,
            Verdict::Reject(reason) => {
                self.note_peer(propagation_source, now, |r| r.rejected += 1);
                return (Envelope::peek_kind(bytes), Outcome::Protocol(reason));
            }
            Verdict::Ignore(reason) => return (Envelope::peek_kind(bytes), Outcome::Protocol(reason)),
        };
        let kind = accepted.body.kind();
        if !topic::carries(topic, kind) {
            self.note_peer(propagation_source, now, |r| r.rejected += 1);
            return (Some(kind), Outcome::WrongTopic);
        }
        if let Some(refusal) = self.gate(&accepted, source, now) {
            return (Some(kind), refusal);
        }
        let outcome = self.apply(&accepted, Origin::Peer, now, metrics);
        if outcome == Outcome::Accepted {
            self.note_peer(source, now, |r| r.accepted += 1);
        }
        (Some(kind), outcome)
    }

    /// Step 7 and 8: the trust and weather gate, and content checks.
    fn gate(&self, accepted: &Accepted, source: &PeerId, now: UnixMillis) -> Option<Outcome> {
        if accepted.body.kind().is_management() {
            return None;
        }
        let level = self.book.level(source, now);
        if level == TrustLevel::Banned {
            return Some(Outcome::Banned);
        }
        if self.weather.halted(now) && level < TrustLevel::Trusted {
            return Some(Outcome::Halted);
        }
        None
    }

    /// Validates a message this node signed itself, then applies it; the caller gossips it.
    pub fn admit_local(&mut self, bytes: &[u8], me: &PeerId, now: UnixMillis, metrics: &Metrics) -> Outcome {
        match validate::validate(bytes, me, now, &mut self.view) {
            Verdict::Accept(accepted) => self.apply(&accepted, Origin::Local, now, metrics),
            Verdict::Ignore(reason) | Verdict::Reject(reason) => Outcome::Protocol(reason),
        }
    }

    /// Step 9: stores or applies an accepted message.
    fn apply(&mut self, accepted: &Accepted, origin: Origin, now: UnixMillis, metrics: &Metrics) -> Outcome {
        match self.apply_inner(accepted, origin, now, metrics) {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::error!(%error, "store failed while applying a message");
                Outcome::StoreFailed
            }
        }
    }

    fn apply_inner(
        &mut self,
        accepted: &Accepted,
        origin: Origin,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Result<Outcome, store::Error> {
        let signer = accepted.envelope.signer();
        match &accepted.body {
            Body::Crystal(listing) => {
                if governance::tag_sensitivity(&listing.text) == Sensitivity::Confidential
                    || governance::tag_sensitivity(&listing.name) == Sensitivity::Confidential
                {
                    return Ok(Outcome::Confidential);
                }
                let skill = Skill::new(accepted.content_id, listing.clone(), signer, origin, now);
                if self.store.insert_skill(&accepted.content_id, &skill)? {
                    metrics.listing_price.observe(listing.asking_price as f64 / 1e6);
                    for (by, endorsement) in self.pending.take(&accepted.content_id, now) {
                        self.apply_endorsement(by, &endorsement, now, metrics)?;
                    }
                }
            }
            Body::Endorsement(endorsement) => {
                if !self.apply_endorsement(signer, endorsement, now, metrics)? {
                    self.pending.push(signer, endorsement.clone(), now);
                }
            }
            Body::Weather(w) => {
                let applied = self.weather.apply(signer, w);
                tracing::info!(level = w.level, seq = w.seq, reason = %w.reason, ?applied, "weather");
                self.store.put_state(WEATHER_KEY, &self.weather)?;
            }
            Body::Ban(ban) => {
                let ruling = peers::Ruling { level: TrustLevel::Banned, expires_at: ban.expires_at };
                self.rule(&ban.peer.peer_id(), ruling, now)?;
            }
            Body::Attest(attest) => {
                let ruling = peers::Ruling { level: attest.level, expires_at: attest.expires_at };
                self.rule(&attest.peer.peer_id(), ruling, now)?;
            }
            Body::Report(report) => {
                if let ReportEvent::Execution { success, .. } = report.event {
                    self.note_report(&report.content_id, signer, success, now)?;
                }
            }
            Body::Bounty(_) => {}
        }
        if accepted.body.seq().is_some() {
            let seqs: Vec<(PublicKey, u64)> = self.view.last_seqs().collect();
            self.store.put_state(SEQS_KEY, &seqs)?;
        }
        self.refresh_weather_gauges(now, metrics);
        Ok(Outcome::Accepted)
    }

    /// Applies an endorsement to its stored skill; false if the skill is not here yet.
    fn apply_endorsement(
        &mut self,
        signer: PublicKey,
        endorsement: &druse_protocol::body::Endorsement,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Result<bool, store::Error> {
        let mut changed = false;
        let Some(skill) = self.store.update_skill::<Skill, _>(&endorsement.content_id, |skill| {
            changed = skill.apply_endorsement(signer, endorsement);
        })?
        else {
            return Ok(false);
        };
        if changed {
            let verdict = match endorsement.verdict {
                druse_protocol::body::EndorsementVerdict::Endorse => "endorse",
                druse_protocol::body::EndorsementVerdict::Revoke => "revoke",
            };
            metrics.endorsements_applied.get_or_create(&VerdictLabel { verdict }).inc();
            if skill.is_verified {
                self.note_peer(&skill.author.peer_id(), now, |r| r.endorsed_skills += 1);
            }
        }
        Ok(true)
    }

    /// Counts an execution report toward the reputation of the skill's author (never the
    /// author reporting on itself).
    fn note_report(
        &mut self,
        id: &ContentId,
        reporter: PublicKey,
        success: bool,
        now: UnixMillis,
    ) -> Result<(), store::Error> {
        let Some(skill) = self.store.skill::<Skill>(id)? else { return Ok(()) };
        if skill.author != reporter {
            self.note_peer(&skill.author.peer_id(), now, |r| {
                if success {
                    r.report_successes += 1;
                } else {
                    r.report_failures += 1;
                }
            });
        }
        Ok(())
    }

    /// Changes a peer's counters; they reach the store at the next `persist_peers`, so the
    /// per-message path does no extra write (a crash loses at most one tick of evidence).
    fn note_peer(&mut self, peer: &PeerId, now: UnixMillis, change: impl FnOnce(&mut peers::Record)) {
        change(self.book.entry(*peer, now));
        self.dirty.insert(*peer);
    }

    /// Applies a management ruling and writes it at once: bans and attestations must survive
    /// any crash.
    fn rule(&mut self, peer: &PeerId, ruling: peers::Ruling, now: UnixMillis) -> Result<(), store::Error> {
        let record = self.book.entry(*peer, now);
        record.ruling = Some(ruling);
        self.store.put_peer(&peer.to_bytes(), record)?;
        self.dirty.remove(peer);
        Ok(())
    }

    /// Writes every peer record changed since the last call.
    pub fn persist_peers(&mut self) {
        for peer in std::mem::take(&mut self.dirty) {
            let Some(record) = self.book.record(&peer) else { continue };
            if let Err(error) = self.store.put_peer(&peer.to_bytes(), record) {
                tracing::warn!(%error, %peer, "could not persist a peer record");
            }
        }
    }

    /// Brings the state gauges up to date (counting skills walks the table: the maintenance
    /// tick calls this, not the per-message path).
    pub fn refresh_gauges(&self, now: UnixMillis, metrics: &Metrics) {
        self.refresh_weather_gauges(now, metrics);
        metrics.listings.set(self.store.skill_count() as i64);
    }

    /// The weather and pending-endorsement gauges, cheap enough for every message.
    pub fn refresh_weather_gauges(&self, now: UnixMillis, metrics: &Metrics) {
        let active = self.weather.active(now);
        metrics.weather_cortisol.set(self.weather.override_level(now));
        metrics.halted.set(i64::from(active.is_some()));
        metrics.weather_expires.set(active.map_or(0.0, |w| w.expires_at as f64 / 1000.0));
        metrics.endorsements_pending.set(self.pending.len() as i64);
    }

    /// Sets the connected-peers-by-level gauge.
    pub fn count_peers<'a>(&self, connected: impl Iterator<Item = &'a PeerId>, now: UnixMillis, metrics: &Metrics) {
        let mut counts = [0i64; 5];
        for peer in connected {
            counts[self.book.level(peer, now) as usize] += 1;
        }
        for level in TrustLevel::ALL {
            metrics.peers.get_or_create(&LevelLabel { level: level.as_str() }).set(counts[level as usize]);
        }
    }
}

/// Counts one message in the metrics.
pub fn count(metrics: &Metrics, topic: &str, kind: Option<Kind>, outcome: Outcome) {
    metrics
        .messages
        .get_or_create(&crate::metrics::MessageLabels { topic: topic_label(topic), verdict: outcome.verdict_label() })
        .inc();
    let kind = kind.map_or("unknown", Kind::as_str);
    metrics.ingest.get_or_create(&OutcomeLabels { kind, outcome: outcome.label() }).inc();
}

/// Topic names for labels: druse topics as they are, anything else as "other" (bounded labels).
fn topic_label(topic: &str) -> String {
    if topic::ALL.contains(&topic) { topic.to_owned() } else { "other".to_owned() }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use druse_protocol::body::{
        Attest, CrystalListing, Endorsement, EndorsementVerdict, ExecutionStats, SemanticType, Weather,
    };
    use druse_protocol::validate::Config;
    use druse_protocol::{Envelope, Keypair};

    use super::*;

    const NOW: UnixMillis = 1_700_000_000_000;

    struct Fixture {
        pipeline: Pipeline,
        metrics: Metrics,
        mgmt: Keypair,
        _dir: tempfile::TempDir,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let mgmt = Keypair::from_seed([1; 32]);
        let trust = TrustList::new([mgmt.public()]);
        let view = TrustView::new(Config::default(), trust.clone());
        let book = Book::new(trust, HashMap::new(), 100);
        let pipeline = Pipeline::restore(store, view, book, Pending::new(16, 60_000)).unwrap();
        Fixture { pipeline, metrics: Metrics::new("test", "edge"), mgmt, _dir: dir }
    }

    fn listing(name: &str, text: &str) -> Body {
        Body::Crystal(CrystalListing {
            issued_at: NOW,
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
        })
    }

    fn seal(key: &Keypair, body: &Body) -> Vec<u8> {
        Envelope::seal(key, body.kind(), &body.encode().unwrap())
    }

    impl Fixture {
        fn ingest(&mut self, key: &Keypair, body: &Body) -> Outcome {
            let source = key.peer_id();
            let topic = body.kind().topic();
            self.pipeline.ingest(&seal(key, body), &source, &source, topic, NOW, &self.metrics).1
        }

        fn weather(&mut self, seq: u64) {
            let mgmt = self.mgmt.clone();
            let body =
                Body::Weather(Weather { issued_at: NOW, seq, level: 0.9, duration_ms: 60_000, reason: "x".into() });
            assert_eq!(self.ingest(&mgmt, &body), Outcome::Accepted);
        }
    }

    #[test]
    fn weather_halts_listings_from_provisional_peers_but_not_trusted_ones() {
        let mut f = fixture();
        let provisional = Keypair::from_seed([2; 32]);
        let trusted = Keypair::from_seed([3; 32]);
        let mgmt = f.mgmt.clone();
        let attest = Body::Attest(Attest {
            issued_at: NOW,
            seq: 1,
            peer: trusted.public(),
            level: TrustLevel::Trusted,
            reason: "known".into(),
            expires_at: NOW + 3_600_000,
        });
        assert_eq!(f.ingest(&mgmt, &attest), Outcome::Accepted);
        f.weather(2);
        assert!(f.pipeline.weather.halted(NOW));
        assert_eq!(f.ingest(&provisional, &listing("a", "retry with backoff")), Outcome::Halted);
        assert_eq!(f.ingest(&trusted, &listing("b", "retry with jitter")), Outcome::Accepted);
        assert_eq!(f.pipeline.store.skill_count(), 1);
    }

    #[test]
    fn listing_that_carries_a_secret_is_refused_and_not_stored() {
        let mut f = fixture();
        let author = Keypair::from_seed([2; 32]);
        assert_eq!(f.ingest(&author, &listing("leak", "the password: hunter2")), Outcome::Confidential);
        assert_eq!(f.pipeline.store.skill_count(), 0);
    }

    #[test]
    fn message_on_the_wrong_topic_is_rejected_and_blamed() {
        let mut f = fixture();
        let author = Keypair::from_seed([2; 32]);
        let bytes = seal(&author, &listing("a", "text"));
        let source = author.peer_id();
        let (_, outcome) = f.pipeline.ingest(&bytes, &source, &source, topic::WEATHER, NOW, &f.metrics);
        assert_eq!(outcome, Outcome::WrongTopic);
        assert_eq!(outcome.acceptance(), Acceptance::Reject);
        assert_eq!(f.pipeline.book.record(&source).map(|r| r.rejected), Some(1));
    }

    #[test]
    fn endorsement_before_its_skill_is_applied_when_the_skill_arrives() {
        let mut f = fixture();
        let author = Keypair::from_seed([2; 32]);
        let body = listing("a", "retry with backoff");
        let id = ContentId::of(&body.encode().unwrap());
        let mgmt = f.mgmt.clone();
        let endorsement = Body::Endorsement(Endorsement {
            issued_at: NOW,
            seq: 1,
            content_id: id,
            skill_id: "a".into(),
            version: 1,
            verdict: EndorsementVerdict::Endorse,
            note: String::new(),
        });
        assert_eq!(f.ingest(&mgmt, &endorsement), Outcome::Accepted);
        assert_eq!(f.pipeline.pending.len(), 1);
        assert_eq!(f.ingest(&author, &body), Outcome::Accepted);
        let skill: Skill = f.pipeline.store.skill(&id).unwrap().unwrap();
        assert!(skill.is_verified);
        assert_eq!(skill.verified_by, Some(mgmt.public()));
        assert!(f.pipeline.pending.is_empty());
    }

    #[test]
    fn counters_are_written_at_persist_but_a_ban_at_once() {
        let mut f = fixture();
        let author = Keypair::from_seed([2; 32]);
        let spammer = Keypair::from_seed([3; 32]);
        let stored =
            |f: &Fixture, k: &Keypair| f.pipeline.store.peer::<peers::Record>(&k.peer_id().to_bytes()).unwrap();
        assert_eq!(f.ingest(&author, &listing("a", "retry with backoff")), Outcome::Accepted);
        assert!(stored(&f, &author).is_none(), "the per-message path does not write");
        f.pipeline.persist_peers();
        assert_eq!(stored(&f, &author).map(|r| r.accepted), Some(1));
        let mgmt = f.mgmt.clone();
        let ban = Body::Ban(druse_protocol::body::Ban {
            issued_at: NOW,
            seq: 1,
            peer: spammer.public(),
            reason: "spam".into(),
            expires_at: NOW + 60_000,
        });
        assert_eq!(f.ingest(&mgmt, &ban), Outcome::Accepted);
        assert_eq!(stored(&f, &spammer).and_then(|r| r.ruling).map(|r| r.level), Some(TrustLevel::Banned));
    }

    #[test]
    fn banned_peer_listings_are_ignored() {
        let mut f = fixture();
        let spammer = Keypair::from_seed([2; 32]);
        let mgmt = f.mgmt.clone();
        let ban = Body::Ban(druse_protocol::body::Ban {
            issued_at: NOW,
            seq: 1,
            peer: spammer.public(),
            reason: "spam".into(),
            expires_at: NOW + 60_000,
        });
        assert_eq!(f.ingest(&mgmt, &ban), Outcome::Accepted);
        assert_eq!(f.ingest(&spammer, &listing("a", "x")), Outcome::Banned);
    }

    #[test]
    fn weather_and_seqs_survive_a_restore_from_the_store() {
        let mut f = fixture();
        f.weather(7);
        let store = f.pipeline.store.clone();
        let trust = TrustList::new([f.mgmt.public()]);
        let view = TrustView::new(Config::default(), trust.clone());
        let book = Book::new(trust, HashMap::new(), 100);
        let restored = Pipeline::restore(store, view, book, Pending::new(16, 60_000)).unwrap();
        assert!(restored.weather.halted(NOW));
        assert_eq!(restored.view.last_seqs().collect::<Vec<_>>(), vec![(f.mgmt.public(), 7)]);
    }
}
