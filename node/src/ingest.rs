//! The ingestion pipeline (DESIGN §6) after the protocol validator: topic check, the trust and
//! weather gate, content checks, and applying each kind to the node's state. Local publishes
//! take the same path, so a node holds its own messages exactly as its peers do.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use druse_protocol::body::{Body, Bounty, CrystalListing, Endorsement, EndorsementVerdict, Report, TrustLevel};
use druse_protocol::net::{Acceptance, PeerId};
use druse_protocol::trust::TrustList;
use druse_protocol::validate::{self, Accepted, Reason, TrustView};
use druse_protocol::{ContentId, Envelope, Kind, PublicKey, UnixMillis, sync, topic};

use crate::market::{self, BountyRecord};
use crate::metrics::{LevelLabel, Metrics, OutcomeLabels, RefusedLabels, VerdictLabel};
use crate::peers::{self, Book};
use crate::skill::{Pending, Provenance, Skill};
use crate::store::{self, Store, Writes};
use crate::weather;
use druse_memory::governance;

/// What a peer did, as the node saw it: observers such as the management node's anomaly
/// detector read it from `Node::activity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// A peer's first connection opened.
    Connected(PeerId),
    /// A gossip message that `source` originated went through ingestion.
    Message { source: PeerId, kind: Option<Kind>, outcome: Outcome },
}

/// What happened to one message, for gossipsub and for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stored or applied, and forwarded.
    Accepted,
    /// Refused by a protocol rule.
    Protocol(Reason),
    /// A crystal or report from a peer below `trusted` while weather is active.
    Halted,
    /// From a peer a management node banned.
    Banned,
    /// Content that looks like a secret.
    Confidential,
    /// A skill the scanner refused (a high finding: a payload for the model that would read
    /// it, remote code, a read of secrets, hidden characters); see `druse_protocol::scan`.
    SkillScan,
    /// The store failed; the message is dropped without blame.
    StoreFailed,
}

impl Outcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Protocol(reason) => reason.as_str(),
            Outcome::Halted => "halted",
            Outcome::Banned => "banned",
            Outcome::Confidential => "confidential",
            Outcome::SkillScan => "skill_scan",
            Outcome::StoreFailed => "store_failed",
        }
    }

    /// What gossipsub is told.
    pub fn acceptance(self) -> Acceptance {
        match self {
            Outcome::Accepted => Acceptance::Accept,
            Outcome::Protocol(reason) if reason.is_reject() => Acceptance::Reject,
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

/// Work ingestion leaves for the memory worker once a message's writes are committed.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// A new skill to index in the memory engine, as it was stored: the worker indexes it
    /// without reading it back.
    NewSkill(Box<Skill>),
    /// A bounty matched this skill: its crystal is owed a curiosity boost (the skill's stats
    /// say which bounties it has not had yet).
    Boost(ContentId),
}

/// A peer's message with the checks that need no state done ahead of the ingestor, on any
/// thread: its envelope opened ([`validate::open_envelope`]: size, strict decode, signature,
/// body decoded) and, for a skill listing, its content checked ([`Content`]).
#[derive(Debug)]
pub struct Prepared {
    opened: Result<validate::Opened, Reason>,
    confidential: Content,
}

/// What step 8 found in a skill listing's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Content {
    /// Nothing to refuse.
    Clean,
    /// It looks like it holds a password, key or token.
    Confidential,
    /// The scanner found a high finding; the rule of the first.
    Hostile(String),
}

impl Content {
    /// Compiles what a listing's content is checked against (the secret patterns and the skill
    /// scanner's phrase lists), so the first listing a node receives is checked as fast as the
    /// rest: its verify thread does this when it starts.
    pub(crate) fn compile() {
        governance::compile();
        druse_protocol::scan::compile();
    }

    /// Checks a listing's name and text: secrets first, then the skill scanner (a folder's
    /// files one by one).
    pub(crate) fn of(listing: &CrystalListing) -> Self {
        if governance::is_confidential(&listing.text) || governance::is_confidential(&listing.name) {
            return Content::Confidential;
        }
        // An Agent Skills folder is scanned file by file (its frame checked first).
        let report = crate::skill::folder::scan_listing(listing);
        match report.first_high() {
            Some(finding) => Content::Hostile(finding.rule.clone()),
            None => Content::Clean,
        }
    }
}

impl Prepared {
    /// Runs the checks on `bytes`, keeping verified signers' keys decoded in `keys`.
    pub fn new(bytes: &[u8], keys: &mut validate::SignerKeys) -> Self {
        let opened = validate::open_envelope(bytes, keys);
        let confidential = match opened.as_ref().ok().and_then(validate::Opened::body) {
            Some(Body::Crystal(listing)) => Content::of(listing),
            _ => Content::Clean,
        };
        Self { opened, confidential }
    }
}

/// Where a gossip message came from.
#[derive(Debug, Clone, Copy)]
pub struct Gossiped<'a> {
    /// Its author: the envelope's signer (gossip is anonymous), not yet verified here.
    pub source: &'a PeerId,
    /// The peer that forwarded it.
    pub propagation_source: &'a PeerId,
    pub topic: &'a str,
}

/// Skills whose price changed since the node last looked, at most.
const MAX_REPRICED: usize = 4096;

/// The node's own side of the market, for the ledger.
#[derive(Debug, Clone)]
pub struct Me {
    pub key: PublicKey,
    pub market: market::Config,
}

/// Everything ingestion reads and changes. One owner drives it (the node's ingest actor,
/// [`actor`]); each message's writes go to [`Writes`] and reach the store when the owner
/// commits them ([`Ingestor::commit`]), all of them or none.
#[derive(Debug)]
pub struct Ingestor {
    pub view: TrustView,
    /// The trust book; readers share it through the actor's handle, and only the ingestor
    /// writes it, briefly.
    pub book: Arc<RwLock<Book>>,
    pub weather: weather::WeatherState,
    pub pending: Pending<Endorsement>,
    /// Reports that arrived before their skill.
    pub pending_reports: Pending<Report>,
    me: Me,
    store: Store,
    /// What the messages since the last commit wrote.
    writes: Writes,
    /// The validator as it was at start (its config and trust list), to rebuild from.
    fresh_view: TrustView,
    /// Peers whose counters changed since they were last written; `persist_peers` writes them.
    dirty: HashSet<PeerId>,
    /// Work for the memory worker from the messages since the last commit.
    effects: Vec<Effect>,
    /// Skills whose price inputs changed since `take_repriced`.
    repriced: HashSet<ContentId>,
    /// Skills in the store, counted once at start and then as they are committed (counting
    /// walks the whole table).
    skills: usize,
    /// The terms of the bounties in the store, so a new listing is matched without reading
    /// the table (only the ingestor writes it).
    bounties: Vec<Bounty>,
}

const WEATHER_KEY: &str = "weather";
const SEQS_KEY: &str = "seqs";

impl Ingestor {
    /// Rebuilds ingestion's state from the store.
    pub fn restore(
        store: Store,
        view: TrustView,
        mut book: Book,
        pending: Pending<Endorsement>,
        me: Me,
    ) -> Result<Self, store::Error> {
        for entry in store.peers::<peers::Record>() {
            let (key, record) = entry?;
            if let Ok(peer) = PeerId::from_bytes(&key) {
                book.restore(peer, record);
            }
        }
        let pending_reports = Pending::new(pending.capacity(), pending.ttl_ms());
        let mut ingestor = Self {
            fresh_view: view.clone(),
            view,
            book: Arc::new(RwLock::new(book)),
            weather: weather::WeatherState::default(),
            pending,
            pending_reports,
            me,
            store,
            writes: Writes::default(),
            dirty: HashSet::new(),
            effects: Vec::new(),
            repriced: HashSet::new(),
            skills: 0,
            bounties: Vec::new(),
        };
        ingestor.reload()?;
        Ok(ingestor)
    }

    /// Reads back what the store holds of the state kept in memory: the weather, the
    /// management seqs and the bounties' terms. The dedupe set starts empty; the kept
    /// envelopes still refuse a message applied before.
    fn reload(&mut self) -> Result<(), store::Error> {
        self.weather = self.store.state::<weather::WeatherState>(WEATHER_KEY)?.unwrap_or_default();
        let mut view = self.fresh_view.clone();
        let seqs: Vec<(PublicKey, u64)> = self.store.state(SEQS_KEY)?.unwrap_or_default();
        for (key, seq) in seqs {
            view.restore_seq(key, seq);
        }
        self.view = view;
        self.bounties =
            self.store.bounties.iter::<BountyRecord>().map(|e| e.map(|(_, r)| r.bounty)).collect::<Result<_, _>>()?;
        self.skills = self.store.skill_count()?;
        Ok(())
    }

    /// How many skills the store holds.
    pub fn skill_count(&self) -> usize {
        self.skills
    }

    /// Whether anything waits to be committed.
    pub fn has_writes(&self) -> bool {
        !self.writes.is_empty()
    }

    /// Commits what every message since the last commit wrote, in one transaction, and
    /// returns the work they left for the memory worker. On an error nothing of them is
    /// written, the state kept in memory is read back from the store, and the caller must
    /// treat those messages as not stored.
    pub fn commit(&mut self) -> Result<Vec<Effect>, store::Error> {
        match self.store.commit(&mut self.writes) {
            Ok(()) => {
                self.skills += self.effects.iter().filter(|e| matches!(e, Effect::NewSkill(_))).count();
                Ok(std::mem::take(&mut self.effects))
            }
            Err(error) => {
                self.writes.clear();
                self.effects.clear();
                if let Err(reload) = self.reload() {
                    tracing::error!(error = %reload, "could not read the state back after a failed commit");
                }
                Err(error)
            }
        }
    }

    fn read_book(&self) -> RwLockReadGuard<'_, Book> {
        self.book.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_book(&self) -> RwLockWriteGuard<'_, Book> {
        self.book.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the skills whose price inputs changed.
    pub fn take_repriced(&mut self) -> HashSet<ContentId> {
        std::mem::take(&mut self.repriced)
    }

    fn reprice(&mut self, id: ContentId) {
        if self.repriced.len() < MAX_REPRICED {
            self.repriced.insert(id);
        }
    }

    /// The market's config.
    pub fn market(&self) -> &market::Config {
        &self.me.market
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
        let checked = validate::check(bytes, source, topic, now, &mut self.view);
        self.ingest_checked(checked, None, bytes, source, propagation_source, now, metrics)
    }

    /// [`Ingestor::ingest`] for a message [`Prepared`] ahead.
    pub fn ingest_opened(
        &mut self,
        opened: Prepared,
        bytes: &[u8],
        gossip: Gossiped<'_>,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> (Option<Kind>, Outcome) {
        let Gossiped { source, propagation_source, topic } = gossip;
        let Prepared { opened, confidential } = opened;
        let checked = opened.and_then(|opened| validate::check_opened(opened, source, topic, now, &self.view));
        self.ingest_checked(checked, Some(confidential), bytes, source, propagation_source, now, metrics)
    }

    /// `confidential`: what [`Prepared`] found in a listing's content, if it looked.
    #[allow(clippy::too_many_arguments)]
    fn ingest_checked(
        &mut self,
        checked: Result<Accepted, Reason>,
        confidential: Option<Content>,
        bytes: &[u8],
        source: &PeerId,
        propagation_source: &PeerId,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> (Option<Kind>, Outcome) {
        let accepted = match checked {
            Ok(accepted) => accepted,
            Err(reason) => {
                if reason.is_reject() {
                    self.note_peer(propagation_source, now, |r| r.rejected += 1);
                }
                return (Envelope::peek_kind(bytes), Outcome::Protocol(reason));
            }
        };
        let kind = accepted.body.kind();
        if let Some(refusal) = self.kept_already(&accepted).or_else(|| self.gate(&accepted, source, now)) {
            return (Some(kind), refusal);
        }
        let outcome = self.apply(&accepted, bytes, confidential, Provenance::Peer, now, metrics);
        if outcome == Outcome::Accepted {
            self.note_peer(source, now, |r| r.accepted += 1);
        }
        (Some(kind), outcome)
    }

    /// Runs one message a peer relayed by anti-entropy (DESIGN §6 with `validate::check_synced`
    /// for steps 1–6): the trust and weather gate then judge its author, as they would have
    /// judged it arriving over gossip from its author. A message already kept is a duplicate.
    pub fn ingest_synced(&mut self, bytes: &[u8], now: UnixMillis, metrics: &Metrics) -> (Option<Kind>, Outcome) {
        let checked = validate::check_synced(bytes, now, &mut self.view);
        self.ingest_synced_checked(checked, None, bytes, now, metrics)
    }

    /// [`Ingestor::ingest_synced`] for a message [`Prepared`] ahead.
    pub fn ingest_synced_opened(
        &mut self,
        opened: Prepared,
        bytes: &[u8],
        now: UnixMillis,
        metrics: &Metrics,
    ) -> (Option<Kind>, Outcome) {
        let Prepared { opened, confidential } = opened;
        let checked = opened.and_then(|opened| validate::check_synced_opened(opened, now, &self.view));
        self.ingest_synced_checked(checked, Some(confidential), bytes, now, metrics)
    }

    fn ingest_synced_checked(
        &mut self,
        checked: Result<Accepted, Reason>,
        confidential: Option<Content>,
        bytes: &[u8],
        now: UnixMillis,
        metrics: &Metrics,
    ) -> (Option<Kind>, Outcome) {
        let accepted = match checked {
            Ok(accepted) => accepted,
            Err(reason) => return (Envelope::peek_kind(bytes), Outcome::Protocol(reason)),
        };
        let kind = accepted.body.kind();
        let author = accepted.envelope.signer().peer_id();
        if let Some(refusal) = self.kept_already(&accepted).or_else(|| self.gate(&accepted, &author, now)) {
            return (Some(kind), refusal);
        }
        (Some(kind), self.apply(&accepted, bytes, confidential, Provenance::Peer, now, metrics))
    }

    /// A message whose envelope is kept was applied before: a duplicate, even when the
    /// bounded dedupe set has forgotten it (or was emptied by a restart or a failed commit).
    fn kept_already(&self, accepted: &Accepted) -> Option<Outcome> {
        let key = sync::Key::new(accepted.body.kind(), &accepted.content_id);
        match self.store.keeps_envelope(&self.writes, &key) {
            Ok(false) => None,
            Ok(true) => Some(Outcome::Protocol(Reason::Duplicate)),
            Err(error) => {
                tracing::error!(%error, "store failed while checking for a kept message");
                Some(Outcome::StoreFailed)
            }
        }
    }

    /// Step 7 and 8: the trust and weather gate, and content checks.
    fn gate(&self, accepted: &Accepted, source: &PeerId, now: UnixMillis) -> Option<Outcome> {
        if accepted.body.kind().is_management() {
            return None;
        }
        let level = self.read_book().level(source, now);
        if level == TrustLevel::Banned {
            return Some(Outcome::Banned);
        }
        if self.weather.halted(now) && level < TrustLevel::Trusted {
            return Some(Outcome::Halted);
        }
        None
    }

    /// Validates a message this node signed itself for `topic`, then applies it; the caller
    /// gossips it.
    pub fn admit_local(
        &mut self,
        bytes: &[u8],
        me: &PeerId,
        topic: &str,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Outcome {
        match validate::check(bytes, me, topic, now, &mut self.view) {
            Ok(accepted) => self.apply(&accepted, bytes, None, Provenance::Local, now, metrics),
            Err(reason) => Outcome::Protocol(reason),
        }
    }

    /// Step 9: stores or applies an accepted message. Only a message applied in full is
    /// committed to the validator's view: one refused here blocks no later copy.
    /// `confidential` says what a listing's content holds when [`Prepared`] looked already.
    /// `bytes` is the envelope as it came: validation found it to be the envelope's one
    /// canonical encoding, so it is kept as it came rather than encoded again.
    fn apply(
        &mut self,
        accepted: &Accepted,
        bytes: &[u8],
        confidential: Option<Content>,
        origin: Provenance,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Outcome {
        match self.apply_inner(accepted, bytes, confidential, origin, now, metrics) {
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
        bytes: &[u8],
        confidential: Option<Content>,
        origin: Provenance,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Result<Outcome, store::Error> {
        let signer = accepted.envelope.signer();
        // Whether peers that lacked this message should get it from this node (anti-entropy).
        let mut keep = true;
        match &accepted.body {
            Body::Crystal(listing) => {
                // Step 8: no secret spreads through the swarm, and no skill that carries a
                // payload for the model that would read it.
                match confidential.unwrap_or_else(|| Content::of(listing)) {
                    Content::Clean => {}
                    Content::Confidential => return Ok(Outcome::Confidential),
                    Content::Hostile(rule) => {
                        tracing::info!(skill = %accepted.content_id, %rule, "refused a skill the scanner flagged");
                        metrics.refused.get_or_create(&RefusedLabels { label: "skill_scan", rule }).inc();
                        return Ok(Outcome::SkillScan);
                    }
                }
                // Endorsements that waited for the skill are applied before it is stored, so no
                // reader ever sees it without them.
                let id = accepted.content_id;
                let mut skill = Skill::new(id, listing.clone(), signer, origin, now);
                let waiting = self.pending.take(&id, now);
                // Each with whether the skill was verified right after it, as if applied one by one.
                let mut applied: Vec<(EndorsementVerdict, bool)> = Vec::new();
                for (by, endorsement) in &waiting {
                    if skill.apply_endorsement(*by, endorsement) {
                        applied.push((endorsement.verdict, skill.is_verified));
                    }
                }
                if self.writes.insert_new(&self.store.skills, id.digest(), &skill)? {
                    for (verdict, verified) in applied {
                        self.count_endorsement(&skill.author, verdict, verified, now, metrics);
                    }
                    self.on_new_skill(skill, now, metrics)?;
                } else {
                    // Already stored (nothing waits for a stored skill, but lose nothing).
                    for (by, endorsement) in waiting {
                        self.apply_endorsement(by, &endorsement, now, metrics)?;
                    }
                }
            }
            Body::Endorsement(endorsement) => {
                if !self.apply_endorsement(signer, endorsement, now, metrics)? {
                    self.pending.push(endorsement.content_id, signer, endorsement.clone(), now);
                }
            }
            Body::Weather(w) => {
                let applied = self.weather.apply(signer, w, now);
                tracing::info!(level = w.level, seq = w.seq, reason = %w.reason, ?applied, "weather");
                self.writes.put(&self.store.state, WEATHER_KEY.as_bytes(), &self.weather)?;
                keep = applied != weather::Applied::Older;
            }
            Body::Ban(ban) => {
                let ruling = peers::Ruling { level: TrustLevel::Banned, expires_at: ban.expires_at };
                self.rule(&ban.peer.peer_id(), ruling, now)?;
            }
            Body::Attest(attest) => {
                let ruling = peers::Ruling { level: attest.level, expires_at: attest.expires_at };
                self.rule(&attest.peer.peer_id(), ruling, now)?;
            }
            Body::Report(report) => match self.writes.get::<Skill>(&self.store.skills, report.content_id.digest())? {
                Some(skill) => self.apply_report(&skill, signer, report, now, metrics)?,
                None => self.pending_reports.push(report.content_id, signer, report.clone(), now),
            },
            Body::Bounty(bounty) => self.apply_bounty(signer, bounty, now, metrics)?,
        }
        if keep {
            let key = sync::Key::new(accepted.body.kind(), &accepted.content_id);
            self.store.keep_envelope(&mut self.writes, &key, bytes)?;
        }
        self.view.commit(accepted, now);
        if accepted.body.seq().is_some() {
            let seqs: Vec<(PublicKey, u64)> = self.view.last_seqs().collect();
            self.writes.put(&self.store.state, SEQS_KEY.as_bytes(), &seqs)?;
        }
        self.refresh_weather_gauges(now, metrics);
        Ok(Outcome::Accepted)
    }

    /// Applies an endorsement to its stored skill; false if the skill is not here yet.
    fn apply_endorsement(
        &mut self,
        signer: PublicKey,
        endorsement: &Endorsement,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Result<bool, store::Error> {
        let mut changed = false;
        let Some(skill) =
            self.writes.update::<Skill, _>(&self.store.skills, endorsement.content_id.digest(), |skill| {
                changed = skill.apply_endorsement(signer, endorsement);
            })?
        else {
            return Ok(false);
        };
        if changed {
            self.count_endorsement(&skill.author, endorsement.verdict, skill.is_verified, now, metrics);
        }
        Ok(true)
    }

    /// Counts an endorsement that changed a skill by `author`, which it left `verified` or not.
    fn count_endorsement(
        &mut self,
        author: &PublicKey,
        verdict: EndorsementVerdict,
        verified: bool,
        now: UnixMillis,
        metrics: &Metrics,
    ) {
        let verdict = match verdict {
            EndorsementVerdict::Endorse => "endorse",
            EndorsementVerdict::Revoke => "revoke",
        };
        metrics.endorsements_applied.get_or_create(&VerdictLabel { verdict }).inc();
        if verified {
            self.note_peer(&author.peer_id(), now, |r| r.endorsed_skills += 1);
        }
    }

    /// A skill stored for the first time: reports that waited for it, its place among its
    /// versions, the bounties it matches, and its memory crystal.
    fn on_new_skill(&mut self, skill: Skill, now: UnixMillis, metrics: &Metrics) -> Result<(), store::Error> {
        let (id, listing) = (skill.id, &skill.listing);
        metrics.listing_price.observe(listing.asking_price as f64 / 1e6);
        self.place_version(id, listing, skill.author)?;
        let overlap = self.me.market.bounty_text_overlap;
        let matching: Vec<Bounty> = self
            .bounties
            .iter()
            .filter(|b| b.expires_at > now && market::matches(b, listing, overlap))
            .cloned()
            .collect();
        for bounty in &matching {
            self.record_match(bounty, id)?;
        }
        metrics.bounty_matches.inc_by(matching.len() as u64);
        self.reprice(id);
        for (by, report) in self.pending_reports.take(&id, now) {
            self.apply_report(&skill, by, &report, now, metrics)?;
        }
        self.effects.push(Effect::NewSkill(Box::new(skill)));
        Ok(())
    }

    /// Changes a peer's counters; they reach the store at the next `persist_peers`, so the
    /// per-message path does no extra write (a crash loses at most one tick of evidence).
    fn note_peer(&mut self, peer: &PeerId, now: UnixMillis, change: impl FnOnce(&mut peers::Record)) {
        change(self.write_book().entry(*peer, now));
        self.dirty.insert(*peer);
    }

    /// Applies a management ruling and writes it at once: bans and attestations must survive
    /// any crash.
    fn rule(&mut self, peer: &PeerId, ruling: peers::Ruling, now: UnixMillis) -> Result<(), store::Error> {
        let record = {
            let mut book = self.write_book();
            let record = book.entry(*peer, now);
            record.ruling = Some(ruling);
            record.clone()
        };
        self.writes.put(&self.store.peers, &peer.to_bytes(), &record)?;
        self.dirty.remove(peer);
        Ok(())
    }

    /// Writes every peer record changed since the last call (they reach the store with the
    /// next commit).
    pub fn persist_peers(&mut self) {
        let book = Arc::clone(&self.book);
        let book = book.read().unwrap_or_else(PoisonError::into_inner);
        for peer in std::mem::take(&mut self.dirty) {
            let Some(record) = book.record(&peer) else { continue };
            if let Err(error) = self.writes.put(&self.store.peers, &peer.to_bytes(), record) {
                tracing::warn!(%error, %peer, "could not persist a peer record");
            }
        }
    }

    /// Brings the state gauges up to date (counting skills walks the table: the maintenance
    /// tick calls this, not the per-message path).
    pub fn refresh_gauges(&mut self, now: UnixMillis, metrics: &Metrics) {
        self.refresh_weather_gauges(now, metrics);
        metrics.listings.set(self.skills as i64);
        match self.expire_bounties(now) {
            Ok(open) => {
                metrics.bounties_open.set(open as i64);
            }
            Err(error) => tracing::warn!(%error, "could not expire bounties"),
        }
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
        let book = self.read_book();
        for peer in connected {
            counts[book.level(peer, now) as usize] += 1;
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

/// Counts one message received by anti-entropy sync.
pub fn count_synced(metrics: &Metrics, kind: Option<Kind>, outcome: Outcome) {
    let kind = kind.map_or("unknown", Kind::as_str);
    metrics.synced.get_or_create(&OutcomeLabels { kind, outcome: outcome.label() }).inc();
}

/// Topic names for labels: druse topics as they are, anything else as "other" (bounded labels).
fn topic_label(topic: &str) -> String {
    if topic::ALL.contains(&topic) { topic.to_owned() } else { "other".to_owned() }
}

pub mod actor;
#[cfg(test)]
mod tests;
mod trade;
