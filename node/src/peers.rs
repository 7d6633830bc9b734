//! Live peer trust (DESIGN §7): what this node has seen of each peer, the reputation that
//! evidence earns, management attestations and bans, and operator pins.

use std::collections::{HashMap, HashSet};

use druse_protocol::body::TrustLevel;
use druse_protocol::net::PeerId;
use druse_protocol::reputation::{self, Evidence, Thresholds};
use druse_protocol::trust::TrustList;
use druse_protocol::{PublicKey, UnixMillis};
use serde::{Deserialize, Serialize};

use crate::market::{Weight, Weights};

const DAY_MS: f64 = 86_400_000.0;

/// A level set by management until it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ruling {
    pub level: TrustLevel,
    pub expires_at: UnixMillis,
}

/// Everything known of one peer; persisted as it changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub first_seen: UnixMillis,
    pub accepted: u64,
    pub rejected: u64,
    pub endorsed_skills: u64,
    /// Execution reports on the peer's skills from vouched adopters, each by its reporter's
    /// vouched weight when it arrived (see `ingest::trade`).
    pub report_successes: f64,
    pub report_failures: f64,
    /// The latest management attestation or ban.
    pub ruling: Option<Ruling>,
}

impl Record {
    fn evidence(&self, now: UnixMillis) -> Evidence {
        Evidence {
            accepted: self.accepted,
            rejected: self.rejected,
            endorsed_skills: self.endorsed_skills,
            report_successes: self.report_successes,
            report_failures: self.report_failures,
            age_days: now.saturating_sub(self.first_seen) as f64 / DAY_MS,
        }
    }
}

/// The trust book: one record per peer, bounded, plus pins and the management keys.
#[derive(Debug, Clone)]
pub struct Book {
    records: HashMap<PeerId, Record>,
    pins: HashMap<PeerId, TrustLevel>,
    /// The PeerIds of the management keys, so a lookup by PeerId needs no key decoding.
    management_peers: HashSet<PeerId>,
    thresholds: Thresholds,
    capacity: usize,
}

impl Book {
    /// A book that knows the management keys and the operator's pins.
    pub fn new(management: TrustList, pins: HashMap<PeerId, TrustLevel>, capacity: usize) -> Self {
        let management_peers = management.iter().map(PublicKey::peer_id).collect();
        Self {
            records: HashMap::new(),
            pins,
            management_peers,
            thresholds: Thresholds::default(),
            capacity: capacity.max(1),
        }
    }

    /// Loads a persisted record (at start-up).
    pub fn restore(&mut self, peer: PeerId, record: Record) {
        self.records.insert(peer, record);
    }

    /// The record of `peer`, if any.
    pub fn record(&self, peer: &PeerId) -> Option<&Record> {
        self.records.get(peer)
    }

    /// Every known peer.
    pub fn iter(&self) -> impl Iterator<Item = (&PeerId, &Record)> {
        self.records.iter()
    }

    /// The record of `peer`, created if new; the book forgets the least-known peer when full.
    pub fn entry(&mut self, peer: PeerId, now: UnixMillis) -> &mut Record {
        if !self.records.contains_key(&peer) && self.records.len() >= self.capacity {
            let victim = self
                .records
                .iter()
                .filter(|(_, r)| r.ruling.is_none())
                .min_by_key(|(_, r)| r.accepted + r.rejected)
                .map(|(p, _)| *p);
            if let Some(victim) = victim {
                self.records.remove(&victim);
            }
        }
        self.records.entry(peer).or_insert_with(|| Record { first_seen: now, ..Record::default() })
    }

    /// The peer's reputation in [0, 1]; management keys are 1.
    pub fn reputation(&self, peer: &PeerId, now: UnixMillis) -> f64 {
        if self.is_management(peer) {
            return 1.0;
        }
        self.records.get(peer).map_or(reputation::INITIAL, |r| reputation::score(&r.evidence(now)))
    }

    /// The peer's reputation from signed evidence only (endorsements of its skills, and
    /// others' execution reports on them), which every node that saw the same messages agrees
    /// on; the market prices with it.
    pub fn market_reputation(&self, peer: &PeerId) -> f64 {
        let evidence = self.records.get(peer).map(|r| r.evidence(0)).unwrap_or_default();
        crate::market::signed_reputation(evidence, self.is_management(peer))
    }

    /// How much the reports and adoptions of the key written `key` (as market stats keep it)
    /// count at `now`, from signed evidence only: management keys, then an unexpired
    /// attestation or ban, then the key's endorsed skills. Operator pins play no part: no
    /// other node knows them.
    pub fn weight(&self, key: &str, now: UnixMillis, weights: &Weights) -> Weight {
        let Ok(key) = key.parse::<PublicKey>() else { return Weight::ZERO };
        self.weight_of(&key.peer_id(), now, weights)
    }

    /// [`Book::weight`] by PeerId.
    pub fn weight_of(&self, peer: &PeerId, now: UnixMillis, weights: &Weights) -> Weight {
        if self.is_management(peer) {
            return weights.of_management();
        }
        let record = self.records.get(peer);
        match record.and_then(|r| r.ruling).filter(|r| now < r.expires_at) {
            Some(ruling) => weights.of_attested(ruling.level),
            None => weights.of_unattested(record.map_or(0, |r| r.endorsed_skills)),
        }
    }

    fn is_management(&self, peer: &PeerId) -> bool {
        self.management_peers.contains(peer)
    }

    /// The peer's trust level: an unexpired ban, then an operator pin, then management keys
    /// (verified), then an unexpired attestation, then reputation.
    pub fn level(&self, peer: &PeerId, now: UnixMillis) -> TrustLevel {
        let ruling = self.records.get(peer).and_then(|r| r.ruling).filter(|r| now < r.expires_at);
        if let Some(Ruling { level: TrustLevel::Banned, .. }) = ruling {
            return TrustLevel::Banned;
        }
        if let Some(level) = self.pins.get(peer) {
            return *level;
        }
        if self.is_management(peer) {
            return TrustLevel::Verified;
        }
        if let Some(ruling) = ruling {
            return ruling.level;
        }
        self.thresholds.level(self.reputation(peer, now))
    }

    /// The gossipsub application score for `peer`: reputation centred on a new peer's, so
    /// good peers gain and bad ones lose; a banned peer is pushed below the graylist.
    pub fn application_score(&self, peer: &PeerId, now: UnixMillis) -> f64 {
        match self.level(peer, now) {
            TrustLevel::Banned => -1000.0,
            _ => (self.reputation(peer, now) - reputation::INITIAL) * 2.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use druse_protocol::Keypair;

    fn peer(n: u8) -> PeerId {
        Keypair::from_seed([n; 32]).peer_id()
    }

    #[test]
    fn new_peer_is_provisional_and_management_is_verified() {
        let mgmt = Keypair::from_seed([1; 32]);
        let book = Book::new(TrustList::new([mgmt.public()]), HashMap::new(), 16);
        assert_eq!(book.level(&peer(2), 0), TrustLevel::Provisional);
        assert_eq!(book.level(&mgmt.peer_id(), 0), TrustLevel::Verified);
    }

    #[test]
    fn attestation_holds_until_it_expires() {
        let mut book = Book::new(TrustList::default(), HashMap::new(), 16);
        book.entry(peer(2), 0).ruling = Some(Ruling { level: TrustLevel::Trusted, expires_at: 1000 });
        assert_eq!(book.level(&peer(2), 999), TrustLevel::Trusted);
        assert_eq!(book.level(&peer(2), 1000), TrustLevel::Provisional);
    }

    #[test]
    fn ban_beats_a_pin_and_sinks_the_application_score() {
        let pins = HashMap::from([(peer(2), TrustLevel::Trusted)]);
        let mut book = Book::new(TrustList::default(), pins, 16);
        assert_eq!(book.level(&peer(2), 0), TrustLevel::Trusted);
        book.entry(peer(2), 0).ruling = Some(Ruling { level: TrustLevel::Banned, expires_at: 1000 });
        assert_eq!(book.level(&peer(2), 10), TrustLevel::Banned);
        assert!(book.application_score(&peer(2), 10) < -100.0);
    }

    #[test]
    fn rejected_messages_lower_reputation_and_level() {
        let mut book = Book::new(TrustList::default(), HashMap::new(), 16);
        book.entry(peer(2), 0).rejected = 40;
        assert_eq!(book.level(&peer(2), 0), TrustLevel::Untrusted);
        assert!(book.application_score(&peer(2), 0) < 0.0);
    }

    #[test]
    fn weights_come_from_management_attestations_and_endorsements_only() {
        let mgmt = Keypair::from_seed([1; 32]);
        let pins = HashMap::from([(peer(5), TrustLevel::Verified)]);
        let mut book = Book::new(TrustList::new([mgmt.public()]), pins, 16);
        let w = Weights::default();
        let weight = |book: &Book, n: u8, now| book.weight(&Keypair::from_seed([n; 32]).public().to_string(), now, &w);
        assert_eq!(weight(&book, 1, 0), Weight { vouched: 1.0, unvouched: 0.0 }, "management");
        assert_eq!(weight(&book, 2, 0), Weight { vouched: 0.0, unvouched: 0.05 }, "a fresh key");
        assert_eq!(weight(&book, 5, 0), Weight { vouched: 0.0, unvouched: 0.05 }, "a local pin is not evidence");
        book.entry(peer(2), 0).endorsed_skills = 2;
        assert_eq!(weight(&book, 2, 0).unvouched, 0.05);
        assert!((weight(&book, 2, 0).vouched - 0.2).abs() < 1e-12, "two endorsed skills");
        book.entry(peer(2), 0).endorsed_skills = 40;
        assert_eq!(weight(&book, 2, 0).vouched, 0.45, "endorsements weigh less than a trusted attestation");
        for (level, vouched) in [
            (TrustLevel::Verified, 1.0),
            (TrustLevel::Trusted, 0.75),
            (TrustLevel::Provisional, 0.25),
            (TrustLevel::Untrusted, 0.0),
            (TrustLevel::Banned, 0.0),
        ] {
            book.entry(peer(3), 0).ruling = Some(Ruling { level, expires_at: 1000 });
            assert_eq!(weight(&book, 3, 999), Weight { vouched, unvouched: 0.0 }, "{level:?}");
            assert_eq!(weight(&book, 3, 1000), Weight { vouched: 0.0, unvouched: 0.05 }, "expired {level:?}");
        }
        assert_eq!(book.weight("not a key", 0, &w), Weight::ZERO);
    }

    #[test]
    fn book_stays_bounded_and_keeps_ruled_peers() {
        let mut book = Book::new(TrustList::default(), HashMap::new(), 4);
        book.entry(peer(1), 0).ruling = Some(Ruling { level: TrustLevel::Trusted, expires_at: u64::MAX });
        for n in 2..20 {
            book.entry(peer(n), 0);
        }
        assert!(book.iter().count() <= 4);
        assert!(book.record(&peer(1)).is_some());
    }
}
