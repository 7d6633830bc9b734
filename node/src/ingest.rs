//! The ingestion pipeline (DESIGN §6) after the protocol validator: topic check, the trust and
//! weather gate, content checks, and applying each kind to the node's state. Local publishes
//! take the same path, so a node holds its own messages exactly as its peers do.

use druse_protocol::body::{Body, ReportEvent, TrustLevel};
use druse_protocol::net::{Acceptance, PeerId};
use druse_protocol::trust::TrustList;
use druse_protocol::validate::{self, Accepted, Reason, TrustView, Verdict};
use druse_protocol::{ContentId, Kind, PublicKey, UnixMillis, topic};

use crate::governance::{self, Sensitivity};
use crate::metrics::{LevelLabel, LifecycleLabel, Metrics, OutcomeLabels, VerdictLabel};
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
        Ok(Self { view, book, weather, pending, store })
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
                return (None, Outcome::Protocol(reason));
            }
            Verdict::Ignore(reason) => return (None, Outcome::Protocol(reason)),
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
                self.note_peer(&ban.peer.peer_id(), now, |r| r.ruling = Some(ruling));
            }
            Body::Attest(attest) => {
                let ruling = peers::Ruling { level: attest.level, expires_at: attest.expires_at };
                self.note_peer(&attest.peer.peer_id(), now, |r| r.ruling = Some(ruling));
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
        self.refresh_gauges(now, metrics);
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

    /// Changes a peer's record and persists it.
    fn note_peer(&mut self, peer: &PeerId, now: UnixMillis, change: impl FnOnce(&mut peers::Record)) {
        let record = self.book.entry(*peer, now);
        change(record);
        if let Err(error) = self.store.put_peer(&peer.to_bytes(), record) {
            tracing::warn!(%error, %peer, "could not persist a peer record");
        }
    }

    /// Brings the state gauges up to date.
    pub fn refresh_gauges(&self, now: UnixMillis, metrics: &Metrics) {
        let active = self.weather.active(now);
        metrics.weather_cortisol.set(self.weather.override_level(now));
        metrics.halted.set(i64::from(active.is_some()));
        metrics.weather_expires.set(active.map_or(0.0, |w| w.expires_at as f64 / 1000.0));
        metrics.endorsements_pending.set(self.pending.len() as i64);
        let skills = self.store.skill_count() as i64;
        metrics.crystals.get_or_create(&LifecycleLabel { lifecycle: "frozen" }).set(skills);
        metrics.listings.set(skills);
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
    metrics.messages.get_or_create(&crate::metrics::MessageLabels { topic: topic_label(topic), verdict: outcome.verdict_label() }).inc();
    let kind = kind.map_or("unknown", Kind::as_str);
    metrics.ingest.get_or_create(&OutcomeLabels { kind, outcome: outcome.label() }).inc();
}

/// Topic names for labels: druse topics as they are, anything else as "other" (bounded labels).
fn topic_label(topic: &str) -> String {
    if topic::ALL.contains(&topic) { topic.to_owned() } else { "other".to_owned() }
}
