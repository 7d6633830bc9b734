//! The pure validator every gossip message passes before a node stores or forwards it.
//!
//! `check(bytes, source, topic, now, &view)` runs DESIGN §6 steps 1–6 in order: size cap,
//! envelope decode, signature, topic, body decode, timestamp window, authority, dedupe, seq and
//! per-peer rate. It changes nothing a later message is judged by: only `TrustView::commit`,
//! called once the message is applied, records its content id, its seq and its rate slot, so a
//! refused copy (wrong topic, tampered, halted, unstorable) can never block the genuine one.
//! `validate` is both steps at once, for callers with no later gate. It does no IO; `TrustView`
//! carries the state it needs and is bounded.

use std::collections::{HashMap, VecDeque};

use libp2p_identity::PeerId;

use crate::UnixMillis;
use crate::body::{self, Body};
use crate::cid::ContentId;
use crate::envelope::{self, Envelope, Kind};
use crate::keys::PublicKey;
use crate::trust::TrustList;

/// Why a message was not accepted; one label per reason for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Over the envelope or body size cap.
    TooLarge,
    /// Not decodable, wrong field types, unknown fields or trailing bytes.
    Malformed,
    /// An envelope version this node does not speak.
    UnsupportedVersion,
    /// A kind this node does not know.
    UnknownKind,
    /// The bytes are not in their one canonical encoding.
    NonCanonical,
    /// The signature does not verify for this signer, kind and body.
    BadSignature,
    /// A field breaks its rule (range, length, expiry).
    InvalidField,
    /// A listing of a private memory type (only skills and task patterns may travel).
    NotPublishable,
    /// A management kind signed by a key that is not on the trust list.
    UntrustedSigner,
    /// A crystal or report whose signer is not the `source` it was checked for, or a report
    /// naming another reporter than its signer. Gossip is anonymous, so the network layer
    /// names the envelope's signer as a gossiped message's source (`net::Event::Message`):
    /// there, only the envelope's own signature binds a message to its author.
    AuthorMismatch,
    /// Issued further in the future than the window allows.
    FutureDated,
    /// Issued further in the past than the window allows.
    Stale,
    /// A body already accepted.
    Duplicate,
    /// A seq this signer already used (or one too old to tell).
    ReplayedSeq,
    /// The originating peer is over its message rate.
    RateLimited,
    /// A valid envelope published on a topic that does not carry its kind.
    WrongTopic,
}

impl Reason {
    /// Every reason, for pre-registering metric labels.
    pub const ALL: [Reason; 16] = [
        Reason::TooLarge,
        Reason::Malformed,
        Reason::UnsupportedVersion,
        Reason::UnknownKind,
        Reason::NonCanonical,
        Reason::BadSignature,
        Reason::InvalidField,
        Reason::NotPublishable,
        Reason::UntrustedSigner,
        Reason::AuthorMismatch,
        Reason::FutureDated,
        Reason::Stale,
        Reason::Duplicate,
        Reason::ReplayedSeq,
        Reason::RateLimited,
        Reason::WrongTopic,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::TooLarge => "too_large",
            Reason::Malformed => "malformed",
            Reason::UnsupportedVersion => "unsupported_version",
            Reason::UnknownKind => "unknown_kind",
            Reason::NonCanonical => "non_canonical",
            Reason::BadSignature => "bad_signature",
            Reason::InvalidField => "invalid_field",
            Reason::NotPublishable => "not_publishable",
            Reason::UntrustedSigner => "untrusted_signer",
            Reason::AuthorMismatch => "author_mismatch",
            Reason::FutureDated => "future_dated",
            Reason::Stale => "stale",
            Reason::Duplicate => "duplicate",
            Reason::ReplayedSeq => "replayed_seq",
            Reason::RateLimited => "rate_limited",
            Reason::WrongTopic => "wrong_topic",
        }
    }

    /// Provably bad (the sender is penalised) rather than merely "not now".
    pub fn is_reject(self) -> bool {
        !matches!(
            self,
            Reason::FutureDated | Reason::Stale | Reason::Duplicate | Reason::ReplayedSeq | Reason::RateLimited
        )
    }
}

impl From<envelope::Error> for Reason {
    fn from(e: envelope::Error) -> Self {
        match e {
            envelope::Error::TooLarge { .. } | envelope::Error::BodyTooLarge { .. } => Reason::TooLarge,
            envelope::Error::Malformed(_) | envelope::Error::BadSigner | envelope::Error::BadSignatureLength => {
                Reason::Malformed
            }
            envelope::Error::Version(_) => Reason::UnsupportedVersion,
            envelope::Error::UnknownKind(_) => Reason::UnknownKind,
            envelope::Error::NonCanonical => Reason::NonCanonical,
            envelope::Error::BadSignature => Reason::BadSignature,
        }
    }
}

impl From<body::Error> for Reason {
    fn from(e: body::Error) -> Self {
        match e {
            body::Error::Malformed { .. } => Reason::Malformed,
            body::Error::NonCanonical { .. } => Reason::NonCanonical,
            body::Error::Field { .. } => Reason::InvalidField,
            body::Error::NotPublishable(_) => Reason::NotPublishable,
        }
    }
}

/// A message that passed every rule, decoded and ready to act on.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub envelope: Envelope,
    pub body: Body,
    pub content_id: ContentId,
}

/// The outcome gossipsub is told: forward, drop quietly, or drop and penalise.
#[derive(Debug, Clone)]
pub enum Verdict {
    Accept(Box<Accepted>),
    Ignore(Reason),
    Reject(Reason),
}

impl Verdict {
    fn refuse(reason: Reason) -> Self {
        if reason.is_reject() { Verdict::Reject(reason) } else { Verdict::Ignore(reason) }
    }

    /// The reason, when not accepted.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Verdict::Accept(_) => None,
            Verdict::Ignore(r) | Verdict::Reject(r) => Some(*r),
        }
    }

    /// Whether the message was accepted.
    pub fn is_accept(&self) -> bool {
        matches!(self, Verdict::Accept(_))
    }
}

/// A message budget: at most `count` messages per `per_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per_ms: u64,
}

/// The validator's knobs; `Default` holds DESIGN §5's numbers.
#[derive(Debug, Clone)]
pub struct Config {
    /// How far in the past `issued_at` may be (300 s).
    pub max_age_ms: u64,
    /// How far in the future `issued_at` may be (60 s).
    pub max_skew_ms: u64,
    /// Content ids remembered for dedupe.
    pub seen_capacity: usize,
    /// Listings one peer may originate (10 per 60 s).
    pub listing_rate: Rate,
    /// Reports one peer may originate (60 per 60 s).
    pub report_rate: Rate,
    /// Peers whose rates are tracked at once; the least recently seen are forgotten first.
    /// As many signer keys are kept decoded.
    pub rate_peers: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_age_ms: 300_000,
            max_skew_ms: 60_000,
            seen_capacity: 65_536,
            listing_rate: Rate { count: 10, per_ms: 60_000 },
            report_rate: Rate { count: 60, per_ms: 60_000 },
            rate_peers: 4_096,
        }
    }
}

/// How far back a signer's out-of-order seqs are still accepted (gossip does not keep order).
const SEQ_WINDOW: u64 = 128;

/// Seqs seen from one signer: the highest, and which of the `SEQ_WINDOW` below it were seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SeqWindow {
    last: u64,
    /// Bit i set: seq `last - i` was seen.
    mask: u128,
}

impl SeqWindow {
    fn check(&self, seq: u64) -> Result<(), Reason> {
        if seq > self.last {
            return Ok(());
        }
        let behind = self.last - seq;
        if behind >= SEQ_WINDOW || self.mask & (1u128 << behind) != 0 {
            return Err(Reason::ReplayedSeq);
        }
        Ok(())
    }

    fn record(&mut self, seq: u64) {
        if seq > self.last {
            let shift = seq - self.last;
            self.mask = if shift >= SEQ_WINDOW { 0 } else { self.mask << shift };
            self.mask |= 1;
            self.last = seq;
        } else {
            self.mask |= 1u128 << (self.last - seq);
        }
    }
}

/// A map of recent entries with a fixed capacity; the oldest is forgotten first.
#[derive(Debug, Clone)]
struct Bounded<K: std::hash::Hash + Eq + Copy, V = ()> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    capacity: usize,
}

impl<K: std::hash::Hash + Eq + Copy, V> Bounded<K, V> {
    fn new(capacity: usize) -> Self {
        Self { map: HashMap::new(), order: VecDeque::new(), capacity: capacity.max(1) }
    }

    fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key, value).is_some() {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

/// One peer's recent message times for one budget.
#[derive(Debug, Clone, Default)]
struct Window {
    times: VecDeque<UnixMillis>,
    last_seen: UnixMillis,
}

/// Everything the validator remembers: whom to trust, which seqs and bodies it has seen,
/// and how fast each peer is sending. Every part has a bound.
#[derive(Debug, Clone)]
pub struct TrustView {
    config: Config,
    trust: TrustList,
    seqs: HashMap<PublicKey, SeqWindow>,
    seen: Bounded<ContentId>,
    /// Signer keys whose signatures verified, decoded once (as many as `rate_peers`).
    signers: SignerKeys,
    rates: HashMap<(PublicKey, Kind), Window>,
}

impl TrustView {
    /// A view trusting `trust` for management kinds.
    pub fn new(config: Config, trust: TrustList) -> Self {
        let (seen, signers) = (Bounded::new(config.seen_capacity), SignerKeys::new(config.rate_peers));
        Self { config, trust, seqs: HashMap::new(), seen, signers, rates: HashMap::new() }
    }

    /// The trust list in force.
    pub fn trust_list(&self) -> &TrustList {
        &self.trust
    }

    /// Replaces the trust list (an operator reloaded it).
    pub fn set_trust_list(&mut self, trust: TrustList) {
        self.trust = trust;
    }

    /// The highest seq accepted from each management key, for persisting.
    pub fn last_seqs(&self) -> impl Iterator<Item = (PublicKey, u64)> + '_ {
        self.seqs.iter().map(|(k, w)| (*k, w.last))
    }

    /// Restores a persisted seq: after a restart nothing at or below it is accepted again.
    pub fn restore_seq(&mut self, key: PublicKey, last: u64) {
        let entry = self.seqs.entry(key).or_insert(SeqWindow { last, mask: u128::MAX });
        if last >= entry.last {
            *entry = SeqWindow { last, mask: u128::MAX };
        }
    }

    /// Whether a body with this id was already accepted.
    pub fn has_seen(&self, id: &ContentId) -> bool {
        self.seen.contains(id)
    }

    /// Marks a body as seen, e.g. one this node published itself.
    pub fn mark_seen(&mut self, id: ContentId) {
        self.seen.insert(id, ());
    }

    fn rate_for(&self, kind: Kind) -> Option<Rate> {
        match kind {
            Kind::Crystal => Some(self.config.listing_rate),
            Kind::Report => Some(self.config.report_rate),
            _ => None,
        }
    }

    /// Whether `peer` may send one more message of `kind` now; records nothing.
    fn check_rate(&self, peer: PublicKey, kind: Kind, now: UnixMillis) -> Result<(), Reason> {
        let Some(rate) = self.rate_for(kind) else { return Ok(()) };
        let Some(window) = self.rates.get(&(peer, kind)) else { return Ok(()) };
        let recent = window.times.iter().filter(|t| now.saturating_sub(**t) < rate.per_ms).count();
        if recent >= rate.count as usize { Err(Reason::RateLimited) } else { Ok(()) }
    }

    /// Spends one of `peer`'s message slots for `kind`.
    fn record_rate(&mut self, peer: PublicKey, kind: Kind, now: UnixMillis) {
        let Some(rate) = self.rate_for(kind) else { return };
        if !self.rates.contains_key(&(peer, kind)) && self.rates.len() >= self.config.rate_peers {
            // Forget the peer heard from longest ago so the table stays bounded.
            if let Some(oldest) = self.rates.iter().min_by_key(|(_, w)| w.last_seen).map(|(k, _)| *k) {
                self.rates.remove(&oldest);
            }
        }
        let window = self.rates.entry((peer, kind)).or_default();
        window.last_seen = now;
        while window.times.front().is_some_and(|t| now.saturating_sub(*t) >= rate.per_ms) {
            window.times.pop_front();
        }
        // A window never holds more than its budget, whatever the caller committed.
        while window.times.len() >= rate.count.max(1) as usize {
            window.times.pop_front();
        }
        window.times.push_back(now);
    }

    /// Records an accepted message, so its body, its seq and its rate slot count against
    /// later messages. Call it only once every later rule passed and the message was applied.
    pub fn commit(&mut self, accepted: &Accepted, now: UnixMillis) {
        let signer = accepted.envelope.signer();
        if let Some(seq) = accepted.body.seq() {
            self.seqs.entry(signer).or_insert(SeqWindow { last: 0, mask: 0 }).record(seq);
        }
        self.record_rate(signer, accepted.body.kind(), now);
        self.seen.insert(accepted.content_id, ());
    }

    fn check_future(&self, body: &Body, now: UnixMillis) -> Result<(), Reason> {
        if body.issued_at() > now.saturating_add(self.config.max_skew_ms) {
            return Err(Reason::FutureDated);
        }
        Ok(())
    }

    /// The gossip freshness window. Weather is fresh for as long as it is in force: a
    /// management node re-announces the very message it signed (never a re-dated copy, which
    /// would overtake newer weather from another key), and a node that joins late obeys it.
    fn check_time(&self, body: &Body, now: UnixMillis) -> Result<(), Reason> {
        self.check_future(body, now)?;
        let oldest = now.saturating_sub(self.config.max_age_ms);
        let in_force = matches!(body, Body::Weather(w) if w.expires_at() > now);
        if body.issued_at() < oldest && !in_force {
            return Err(Reason::Stale);
        }
        Ok(())
    }
}

/// Runs every rule on `bytes`, received over gossip on `topic` from `source` (its author: for
/// gossip, the envelope's signer as `net::Event::Message` names it; for a message this node
/// publishes, this node), and commits an accepted message to `view` at once.
pub fn validate(bytes: &[u8], source: &PeerId, topic: &str, now: UnixMillis, view: &mut TrustView) -> Verdict {
    match check(bytes, source, topic, now, view) {
        Ok(accepted) => {
            view.commit(&accepted, now);
            Verdict::Accept(Box::new(accepted))
        }
        Err(reason) => Verdict::refuse(reason),
    }
}

/// Runs every rule on `bytes`, received over gossip on `topic` from `source`, without recording
/// anything a later message is judged by (see [`TrustView::commit`]).
pub fn check(
    bytes: &[u8],
    source: &PeerId,
    topic: &str,
    now: UnixMillis,
    view: &mut TrustView,
) -> Result<Accepted, Reason> {
    let opened = open(bytes, view)?;
    check_opened(opened, source, topic, now, view)
}

/// [`check`] for an envelope [`open_envelope`] already opened (size, decode and signature
/// checked): every rule after those, in the same order.
pub fn check_opened(
    opened: Opened,
    source: &PeerId,
    topic: &str,
    now: UnixMillis,
    view: &TrustView,
) -> Result<Accepted, Reason> {
    let Opened { envelope, body, content_id } = opened;
    let kind = envelope.kind();
    if !kind.is_carried_on(topic) {
        return Err(Reason::WrongTopic);
    }
    let body = body?;
    view.check_time(&body, now)?;
    let signer = envelope.signer();
    check_authority(view, &envelope, &body)?;
    if !kind.is_management() && signer.peer_id() != *source {
        return Err(Reason::AuthorMismatch);
    }
    if view.seen.contains(&content_id) {
        return Err(Reason::Duplicate);
    }
    if let Some(seq) = body.seq() {
        view.seqs.get(&signer).map_or(Ok(()), |w| w.check(seq))?;
    }
    view.check_rate(signer, kind, now)?;
    Ok(Accepted { envelope, body, content_id })
}

/// Runs the rules that hold for a message a peer relayed by anti-entropy ([`crate::sync`])
/// rather than gossiped: size, strict decode, signature, body rules, not future-dated, and
/// authority (a management kind needs a trust-listed signer; a report must name its signer),
/// then dedupe on the seen-set. It skips what only live gossip can be judged by: the freshness
/// window (a relayed message is old by nature), the originating peer (the relay is not the
/// author), the seq window (the receiver orders management messages when it applies them, by
/// seq from one key and by issue time across keys, and dedupes on its store) and the per-peer
/// rate (a sync is bounded per peer). Like [`check`], it records nothing.
pub fn check_synced(bytes: &[u8], now: UnixMillis, view: &mut TrustView) -> Result<Accepted, Reason> {
    let opened = open(bytes, view)?;
    check_synced_opened(opened, now, view)
}

/// [`check_synced`] for an envelope [`open_envelope`] already opened.
pub fn check_synced_opened(opened: Opened, now: UnixMillis, view: &TrustView) -> Result<Accepted, Reason> {
    let Opened { envelope, body, content_id } = opened;
    let body = body?;
    view.check_future(&body, now)?;
    check_authority(view, &envelope, &body)?;
    if view.seen.contains(&content_id) {
        return Err(Reason::Duplicate);
    }
    Ok(Accepted { envelope, body, content_id })
}

/// Signer keys whose signatures verified, kept decoded (a bounded number, the oldest forgotten
/// first), so a signer's curve point is decompressed once.
#[derive(Debug, Clone)]
pub struct SignerKeys(Bounded<[u8; 32], PublicKey>);

impl SignerKeys {
    /// Room for `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        Self(Bounded::new(capacity))
    }
}

/// The first rules, which need no state: size, strict decode, canonical form and signature.
/// A node may run them ahead of the rest, on another thread, and hand the envelope to
/// [`check_opened`] or [`check_synced_opened`].
pub fn open_envelope(bytes: &[u8], keys: &mut SignerKeys) -> Result<Opened, Reason> {
    let envelope = Envelope::open_with(bytes, |key| keys.0.get(key).copied())?;
    keys.0.insert(envelope.signer().to_bytes(), envelope.signer());
    let body = Body::decode(envelope.kind(), envelope.body()).map_err(Reason::from);
    let content_id = envelope.content_id();
    Ok(Opened { envelope, body, content_id })
}

/// An envelope [`open_envelope`] opened, with what else needs no state done ahead too: its
/// body decoded (or why it does not decode, which the later rules report in their order) and
/// its content id hashed.
#[derive(Debug, Clone)]
pub struct Opened {
    envelope: Envelope,
    body: Result<Body, Reason>,
    content_id: ContentId,
}

impl Opened {
    /// The decoded body, if it decodes.
    pub fn body(&self) -> Option<&Body> {
        self.body.as_ref().ok()
    }
}

/// Opens the envelope (size, decode, signature), keeping the verified signer's key decoded.
fn open(bytes: &[u8], view: &mut TrustView) -> Result<Opened, Reason> {
    open_envelope(bytes, &mut view.signers)
}

/// Who may sign what: management kinds only a trust-listed key, and a report only the
/// reporter it names.
fn check_authority(view: &TrustView, envelope: &Envelope, body: &Body) -> Result<(), Reason> {
    let signer = envelope.signer();
    if envelope.kind().is_management() {
        if !view.trust.contains(&signer) {
            return Err(Reason::UntrustedSigner);
        }
    } else if body.named_signer().is_some_and(|named| named != signer) {
        return Err(Reason::AuthorMismatch);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
