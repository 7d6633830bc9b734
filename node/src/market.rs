//! The marketplace as one node sees it (seed 004, DESIGN §9): what signed reports say about
//! each skill, the price the node computes from that, skill versions, bounties and their
//! matches, and the node's credit ledger.
//!
//! Every input to a price except scarcity comes from signed messages every node receives, so
//! nodes that saw the same messages compute the same quality and demand:
//! - **quality** counts only the reports of reporters other than the publisher that adopted
//!   the skill, at most `reports_per_reporter` executions each, every reporter weighed by
//!   what vouches for its key ([`Weights`]): a management key, an unexpired management
//!   attestation, or skills of its that management endorsed. A key nothing vouches for (a
//!   fresh key costs nothing) has a small base weight, and all such keys together weigh at
//!   most [`Weights::unvouched_cap`], however many there are. Quality is the weighted mean of
//!   each reporter's success rate × average reward;
//! - **the gate** looks at vouched reporters only, so unvouched keys never lift a skill over
//!   it, and counts what happened: their successes, at most two per reporter (one node is one
//!   voice, whatever its users did), their weighted success rate, and the vouched weight of
//!   the reporters with a success (see [`QualityGate`]). Trust weighs quality and demand, never
//!   the count. A failure report never raises a price: it adds no counted success and no
//!   success weight, lowers its reporter's success rate, and a failure's reward counts as at
//!   most 0, so its reporter's quality only falls (see [`Stats::execution`]);
//! - **demand** counts distinct bounties, and distinct adopters that paid something, each by
//!   its weight with the same cap on unvouched keys (an adoption at 0 is no evidence of
//!   demand; what an adopter says it paid is self-declared);
//! - **reputation** is the publisher's reputation from signed evidence only (its endorsed skills
//!   and the execution reports of vouched adopters on its skills, each by its vouched weight;
//!   see `ingest::trade`). The live reputation that drives gossip trust also counts messages
//!   this node happened to receive and how long it has known the peer, which differ between
//!   nodes; a price built on it would differ too;
//! - **scarcity** comes from this node's vector index (how many similar skills it holds).
//!
//! Weights are computed when a price is, from the attestations and endorsements the node holds
//! then, so nodes with the same messages agree whatever order they came in.
//!
//! No table of a skill's evidence can be frozen (see `room`): vouched keys have room of their
//! own, unvouched keys compete for theirs by a rank fixed by the skill and the key, and the
//! lowest ranks are kept, so which unvouched keys count does not depend on arrival order. The publisher's
//! report evidence is the exception: it is counted as each report arrives, with the weight
//! its reporter has then (see `ingest::trade`).
//!
//! A node never takes a listing's asking price on trust. When it adopts a skill whose asking
//! price its own computation does not support, it pays its computed price instead, says so in
//! the answer, and signs that price in its adoption report (see [`settle`]).

use std::collections::{BTreeMap, BTreeSet};

use druse_protocol::body::{Bounty, CrystalListing, TrustLevel};
use druse_protocol::pricing::{self, Price, PriceConfig, PriceInputs, QualityGate};
use druse_protocol::reputation::{self, Evidence};
use druse_protocol::{ContentId, PublicKey, UnixMillis};
use serde::{Deserialize, Serialize};

use crate::skill::Skill;

pub mod desk;
mod ledger;
pub mod quote;
mod room;
pub mod shared;

pub use ledger::{
    DAY_MS, DAY_SPENT_KEY, DayBudget, DaySpent, Direction, Entry, PaidAdoption, TOTALS_KEY, Totals, add_day_spent,
    day_spent, day_spent_in, paid_adoption_key, record, totals, totals_in,
};

/// The market's knobs; `Default` holds seed 004's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub price: PriceConfig,
    pub gate: QualityGate,
    /// Executions one reporter can contribute to one skill's stats (its success rate and
    /// quality; the gate counts at most `gate.runs_per_reporter` of them).
    pub reports_per_reporter: u64,
    /// Unvouched keys (reporters and adopters together) kept per skill; past it the
    /// highest-ranked are let go (see `room`).
    pub max_reporters: usize,
    /// Vouched keys kept per skill, in room of their own.
    pub max_vouched_reporters: usize,
    /// Cosine similarity at which another skill counts as similar, for scarcity.
    pub similar_cosine: f32,
    /// Fraction of a bounty's words a skill must contain to match it (without a shared tag).
    pub bounty_text_overlap: f64,
    /// Curiosity a bounty match adds to the skill's crystal.
    pub bounty_curiosity_boost: f64,
    /// Open bounties kept.
    pub max_bounties: usize,
    /// Credits a new node starts with, in micro-USDC.
    pub starting_credits: u64,
    /// Ledger entries kept (the totals keep counting past it).
    pub max_ledger_entries: usize,
    /// How much each reporter's and adopter's word counts.
    pub weights: Weights,
}

/// How much a key's reports and adoptions count, from what every node can check: management
/// keys, management attestations and management endorsements of the key's skills (all signed
/// messages). An operator's local pins do not count: other nodes do not know them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weights {
    /// A management key (1.0).
    pub management: f64,
    /// An unexpired attestation at `verified` (1.0), `trusted` (0.75) or `provisional`
    /// (0.25); `untrusted` and a ban weigh 0.
    pub verified: f64,
    pub trusted: f64,
    pub provisional: f64,
    /// A key with no attestation: the base weight (0.05), which is *unvouched*…
    pub unvouched: f64,
    /// …plus this much per skill of the key's that management endorsed (0.1), which is vouched…
    pub per_endorsed_skill: f64,
    /// …up to this much (0.45), so such a key weighs at most 0.5, below a trusted attestation.
    pub max_endorsed: f64,
    /// The most every unvouched weight on one skill adds up to (0.2, a fifth of a verified
    /// reporter), however many keys: past it each is scaled down.
    pub unvouched_cap: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            management: 1.0,
            verified: 1.0,
            trusted: 0.75,
            provisional: 0.25,
            unvouched: 0.05,
            per_endorsed_skill: 0.1,
            max_endorsed: 0.45,
            unvouched_cap: 0.2,
        }
    }
}

impl Weights {
    /// A management key's weight.
    pub fn of_management(&self) -> Weight {
        Weight { vouched: self.management, unvouched: 0.0 }
    }

    /// The weight an unexpired attestation at `level` gives.
    pub fn of_attested(&self, level: TrustLevel) -> Weight {
        let vouched = match level {
            TrustLevel::Verified => self.verified,
            TrustLevel::Trusted => self.trusted,
            TrustLevel::Provisional => self.provisional,
            TrustLevel::Untrusted | TrustLevel::Banned => 0.0,
        };
        Weight { vouched, unvouched: 0.0 }
    }

    /// The weight of a key with no attestation and `endorsed_skills` endorsed skills.
    pub fn of_unattested(&self, endorsed_skills: u64) -> Weight {
        let endorsed = (endorsed_skills as f64 * self.per_endorsed_skill).min(self.max_endorsed);
        Weight { vouched: endorsed.max(0.0), unvouched: self.unvouched }
    }
}

/// One key's weight: the vouched part counts in full, the unvouched part is pooled with every
/// other key's and capped ([`Weights::unvouched_cap`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Weight {
    pub vouched: f64,
    pub unvouched: f64,
}

impl Weight {
    /// No weight at all.
    pub const ZERO: Self = Self { vouched: 0.0, unvouched: 0.0 };

    fn total(&self) -> f64 {
        self.vouched + self.unvouched
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            price: PriceConfig::default(),
            gate: QualityGate::default(),
            reports_per_reporter: 10,
            max_reporters: 1024,
            max_vouched_reporters: 1024,
            similar_cosine: 0.8,
            bounty_text_overlap: 0.3,
            bounty_curiosity_boost: 0.2,
            max_bounties: 1024,
            starting_credits: 1_000_000,
            max_ledger_entries: 10_000,
            weights: Weights::default(),
        }
    }
}

/// One reporter's executions of one skill.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Executions {
    pub successes: u64,
    pub failures: u64,
    pub reward_sum: f64,
}

impl Executions {
    fn total(&self) -> u64 {
        self.successes + self.failures
    }
}

/// A bounty claim, as every node records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub skill: ContentId,
    /// The claimant's PeerId.
    pub claimant: String,
    pub at: UnixMillis,
    /// The claimed skill matches the bounty.
    pub matched: bool,
}

/// What signed reports say about one skill, keyed by the reporters' public keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub executions: BTreeMap<String, Executions>,
    /// Adopter → credits it says it paid.
    pub adopters: BTreeMap<String, u64>,
    /// Ids of the bounties the skill matches.
    pub bounty_matches: BTreeSet<String>,
    /// Ids of the bounties claimed with the skill.
    pub claims: BTreeSet<String>,
    /// Ids of the matched bounties whose curiosity boost this node's memory had applied, as
    /// records written before the crystal kept them ([`BOUNTIES_BOOSTED`]) say; read, no
    /// longer written.
    #[serde(default)]
    pub boosted: BTreeSet<String>,
    /// Keys of the two tables that something vouched for when last looked at: they hold the
    /// vouched room and are never let go for unvouched keys (see `room`).
    #[serde(default)]
    pub vouched: BTreeSet<String>,
    /// Once unvouched keys overflowed their room, the lowest rank let go: an unvouched key
    /// ranked at or above it is refused. It only falls.
    #[serde(default)]
    pub unvouched_bound: Option<[u8; 32]>,
}

impl Stats {
    /// Matched bounties whose curiosity boost the stats do not record as had: the crystal's
    /// own record ([`bounties_boosted`]) says which of these it had since.
    pub fn boosts_owed(&self) -> Vec<String> {
        self.bounty_matches.difference(&self.boosted).cloned().collect()
    }
}

/// The key of a skill crystal's metadata that lists the bounties whose curiosity boost it had,
/// written with the boost itself.
pub const BOUNTIES_BOOSTED: &str = "bounties_boosted";

/// The bounties whose boost `crystal` had.
pub fn bounties_boosted(crystal: &druse_memory::crystal::Crystal) -> BTreeSet<String> {
    let list = crystal.metadata.as_ref().and_then(|m| m.get(BOUNTIES_BOOSTED)).and_then(|v| v.as_array());
    list.into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
}

/// Adds `bounties` to the bounties whose boost `crystal` had.
pub fn record_boosts(crystal: &mut druse_memory::crystal::Crystal, bounties: &[String]) {
    let mut had = bounties_boosted(crystal);
    had.extend(bounties.iter().cloned());
    let list = had.into_iter().map(serde_json::Value::String).collect();
    crystal.metadata.get_or_insert_default().insert(BOUNTIES_BOOSTED.to_owned(), serde_json::Value::Array(list));
}

/// What a report did to a skill's stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Counted.
    Yes,
    /// The reporter already gave this skill its share of executions, or already adopted it.
    OverCap,
    /// The skill has no room for the key: it is unvouched and ranks past the ones kept.
    Full,
}

impl Stats {
    /// Counts one execution by `reporter` on `skill`; `vouched` says whether something vouches
    /// for a key now (for its room, see `room`). A failure's reward counts as at most 0: a
    /// failed run earns nothing, so a failure never raises its reporter's quality.
    pub fn execution(
        &mut self,
        config: &Config,
        skill: &ContentId,
        reporter: &PublicKey,
        success: bool,
        reward: f64,
        vouched: impl Fn(&str) -> bool,
    ) -> Counted {
        let key = reporter.to_string();
        let admitted = self.admit(config, skill, &key, &vouched);
        if admitted.refused() {
            return Counted::Full;
        }
        let entry = self.executions.entry(key.clone()).or_default();
        if entry.total() >= config.reports_per_reporter {
            return match self.settle_room(config, skill, &key, admitted, &vouched) {
                Counted::Yes => Counted::OverCap,
                other => other,
            };
        }
        if success {
            entry.successes += 1;
        } else {
            entry.failures += 1;
        }
        let reward = if reward.is_finite() { reward.clamp(-1.0, 1.0) } else { 0.0 };
        entry.reward_sum += if success { reward } else { reward.min(0.0) };
        self.settle_room(config, skill, &key, admitted, &vouched)
    }

    /// Counts one adoption by `adopter` of `skill`; each adopter counts once.
    pub fn adoption(
        &mut self,
        config: &Config,
        skill: &ContentId,
        adopter: &PublicKey,
        price_paid: u64,
        vouched: impl Fn(&str) -> bool,
    ) -> Counted {
        let key = adopter.to_string();
        if self.adopters.contains_key(&key) {
            return Counted::OverCap;
        }
        let admitted = self.admit(config, skill, &key, &vouched);
        if admitted.refused() {
            return Counted::Full;
        }
        self.adopters.insert(key.clone(), price_paid);
        self.settle_room(config, skill, &key, admitted, &vouched)
    }

    /// The figures a price and the endorsement policy need; `author` is the skill's publisher
    /// and `weight` says how much a key (as its string form in the stats) counts.
    pub fn summary(&self, config: &Config, author: &PublicKey, weight: impl Fn(&str) -> Weight) -> Summary {
        let author = author.to_string();
        let mut s = Summary::default();
        let mut reward_sum = 0.0;
        for (reporter, e) in &self.executions {
            s.executions += e.total();
            s.successes += e.successes;
            reward_sum += e.reward_sum;
            if e.total() > 0 {
                s.reporters += 1;
                if reporter != &author {
                    s.independent_reporters += 1;
                    s.independent_executions += e.total();
                    s.independent_successes += e.successes;
                }
            }
        }
        s.avg_reward = if s.executions == 0 { 0.0 } else { reward_sum / s.executions as f64 };
        s.unique_adopters = self.adopters.keys().filter(|a| *a != &author).count() as u64;
        s.bounty_matches = self.bounty_matches.len() as u64;
        s.claims = self.claims.len() as u64;

        // Reporters: others than the publisher that adopted the skill, by weight.
        let counted: Vec<(&Executions, Weight)> = self
            .executions
            .iter()
            .filter(|(reporter, e)| e.total() > 0 && *reporter != &author && self.adopters.contains_key(*reporter))
            .map(|(reporter, e)| (e, sane(weight(reporter))))
            .filter(|(_, w)| w.total() > 0.0)
            .collect();
        let scale = pool_scale(counted.iter().map(|(_, w)| w.unvouched), config.weights.unvouched_cap);
        let (mut all, mut vouched) = (Weighed::default(), Weighed::default());
        for (e, w) in &counted {
            all.add(e, w.vouched + w.unvouched * scale);
            vouched.add(e, w.vouched);
            if w.vouched > 0.0 {
                s.gate_executions += e.total().min(config.gate.runs_per_reporter);
                s.gate_successes += config.gate.counted(e.successes);
                if e.successes > 0 {
                    s.success_weight += w.vouched;
                }
            }
        }
        s.counted_reporters = counted.len() as u64;
        s.reporter_weight = all.weight;
        s.vouched_weight = vouched.weight;
        s.unvouched_weight = all.weight - vouched.weight;
        s.counted_executions = all.executions;
        s.success_rate = all.mean(all.rate);
        s.quality = all.mean(all.quality);
        s.vouched_executions = vouched.executions;
        s.vouched_success_rate = vouched.mean(vouched.rate);

        // Demand: adopters other than the publisher that paid something, by weight.
        let paid: Vec<Weight> = self
            .adopters
            .iter()
            .filter(|(adopter, paid)| **paid > 0 && *adopter != &author)
            .map(|(adopter, _)| sane(weight(adopter)))
            .collect();
        let scale = pool_scale(paid.iter().map(|w| w.unvouched), config.weights.unvouched_cap);
        s.paid_adopters = paid.len() as u64;
        s.adopter_weight = paid.iter().map(|w| w.vouched + w.unvouched * scale).sum();
        s
    }
}

/// A weight with anything negative or not finite taken as 0.
fn sane(w: Weight) -> Weight {
    let sane = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    Weight { vouched: sane(w.vouched), unvouched: sane(w.unvouched) }
}

/// What each unvouched weight is multiplied by so that together they reach at most `cap`.
fn pool_scale(unvouched: impl Iterator<Item = f64>, cap: f64) -> f64 {
    let total: f64 = unvouched.sum();
    if total > cap { cap.max(0.0) / total } else { 1.0 }
}

/// Reporters' executions summed by weight.
#[derive(Default)]
struct Weighed {
    weight: f64,
    /// Σ weight × executions.
    executions: f64,
    /// Σ weight × the reporter's success rate.
    rate: f64,
    /// Σ weight × the reporter's success rate × average reward (seed 004's quality).
    quality: f64,
}

impl Weighed {
    fn add(&mut self, e: &Executions, weight: f64) {
        if weight <= 0.0 {
            return;
        }
        let total = e.total() as f64;
        let rate = e.successes as f64 / total;
        self.weight += weight;
        self.executions += weight * total;
        self.rate += weight * rate;
        self.quality += weight * pricing::quality(rate, e.reward_sum / total);
    }

    /// The weighted mean of a sum this gathered; 0 with no weight.
    fn mean(&self, sum: f64) -> f64 {
        if self.weight > 0.0 { sum / self.weight } else { 0.0 }
    }
}

/// A skill's stats, summed: the raw counts of every report, and the weighed figures the price
/// and the gate use (see the module notes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Every execution reported, the publisher's included (raw).
    pub executions: u64,
    pub successes: u64,
    pub avg_reward: f64,
    /// Distinct reporters with at least one execution.
    pub reporters: u64,
    /// Reporters other than the publisher.
    pub independent_reporters: u64,
    pub independent_executions: u64,
    pub independent_successes: u64,
    /// Adopters other than the publisher.
    pub unique_adopters: u64,
    pub bounty_matches: u64,
    pub claims: u64,
    /// Reporters whose executions count: not the publisher, adopted the skill, some weight.
    #[serde(default)]
    pub counted_reporters: u64,
    /// Their total weight, the unvouched keys' capped share included.
    #[serde(default)]
    pub reporter_weight: f64,
    /// The part of it from vouched weight (what the gate looks at).
    #[serde(default)]
    pub vouched_weight: f64,
    /// The part of it from unvouched keys, at most the cap.
    #[serde(default)]
    pub unvouched_weight: f64,
    /// Σ reporter weight × its executions.
    #[serde(default)]
    pub counted_executions: f64,
    /// The reporter-weighted mean of each counted reporter's success rate.
    #[serde(default)]
    pub success_rate: f64,
    /// The reporter-weighted mean of each counted reporter's success rate × average reward:
    /// the price's quality.
    #[serde(default)]
    pub quality: f64,
    /// Σ vouched weight × executions (shown; the gate counts executions, not weight).
    #[serde(default)]
    pub vouched_executions: f64,
    /// The vouched-weighted mean success rate, for the gate.
    #[serde(default)]
    pub vouched_success_rate: f64,
    /// The vouched reporters' executions, each reporter's counted up to the gate's
    /// `runs_per_reporter` (shown beside the successes).
    #[serde(default)]
    pub gate_executions: u64,
    /// Their successes, counted the same way: what the gate's minimum applies to.
    #[serde(default)]
    pub gate_successes: u64,
    /// The vouched weight of the reporters with at least one success, for the gate.
    #[serde(default)]
    pub success_weight: f64,
    /// Adopters other than the publisher that paid something.
    #[serde(default)]
    pub paid_adopters: u64,
    /// Their total weight (unvouched keys capped): the price's adopters.
    #[serde(default)]
    pub adopter_weight: f64,
}

impl Summary {
    /// Whether the skill passes the quality gate on its vouched reporters' evidence: counted
    /// successes, weighted success rate, and at least `gate.min_reporter_weight` of vouched
    /// weight behind the successes (see [`QualityGate`]).
    pub fn passes(&self, gate: &QualityGate) -> bool {
        gate.passes_counted(self.gate_successes, self.vouched_success_rate, self.success_weight)
    }

    /// Whether it passes the gate with at least `reporter_weight` of vouched reporters with a
    /// success (and never less than the gate's own minimum).
    pub fn passes_independently(&self, gate: &QualityGate, reporter_weight: f64) -> bool {
        let gate = QualityGate { min_reporter_weight: gate.min_reporter_weight.max(reporter_weight), ..*gate };
        self.passes(&gate)
    }
}

/// The publisher's reputation from signed evidence only (see the module notes); management
/// keys are 1.
pub fn signed_reputation(evidence: Evidence, is_management: bool) -> f64 {
    if is_management {
        return 1.0;
    }
    reputation::score(&Evidence { accepted: 0, rejected: 0, age_days: 0.0, ..evidence })
}

/// The price a node computes for a skill.
pub fn price(config: &Config, summary: &Summary, reputation: f64, similar_skills: usize) -> Price {
    pricing::price(
        &config.price,
        &PriceInputs {
            quality: summary.quality,
            adopters: summary.adopter_weight,
            bounty_matches: summary.bounty_matches,
            reputation,
            similar_skills,
        },
    )
}

/// A computed price with its factors, for display.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PriceView {
    /// In micro-USDC.
    pub micros: u64,
    pub usdc: f64,
    pub quality: f64,
    pub demand: f64,
    pub reputation: f64,
    pub scarcity: f64,
    pub similar_skills: usize,
}

impl PriceView {
    /// The view of `price`. A skill that has not passed the quality gate is not listed, so
    /// its price is 0 (the factors still show where it stands).
    pub fn new(price: &Price, similar_skills: usize, gate_passed: bool) -> Self {
        Self {
            micros: if gate_passed { price.micros() } else { 0 },
            usdc: if gate_passed { price.usdc } else { 0.0 },
            quality: price.quality,
            demand: price.demand,
            reputation: price.reputation,
            scarcity: price.scarcity,
            similar_skills,
        }
    }
}

/// A skill as the market route shows it: the stored skill, and beside it the asking price, the
/// computed price, the stats and the gate.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    #[serde(flatten)]
    pub skill: Skill,
    pub asking_price: u64,
    pub computed_price: PriceView,
    /// The asking price is at most the computed one.
    pub asking_supported: bool,
    pub gate_passed: bool,
    pub stats: Summary,
    pub bounties_matched: Vec<String>,
    /// This node adopted the skill (its adoption report is among the stats).
    pub adopted: bool,
}

/// What an adoption costs: never more than the node's own computation supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    pub asking: u64,
    pub computed: u64,
    /// What the node pays: the asking price if supported, else the computed price.
    pub paid: u64,
    pub asking_supported: bool,
}

/// Settles an adoption: the asking price when the computed price supports it, otherwise the
/// computed price (a node never pays more than its own computation says a skill is worth).
pub fn settle(asking: u64, computed: u64) -> Settlement {
    let asking_supported = asking <= computed;
    Settlement { asking, computed, paid: asking.min(computed), asking_supported }
}

/// The version-index key of a skill: its author and stable id.
pub fn version_key(author: &PublicKey, skill_id: &str) -> Vec<u8> {
    let mut key = author.to_string().into_bytes();
    key.push(0);
    key.extend_from_slice(skill_id.as_bytes());
    key
}

/// Every version of one skill from one author that this node has seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    /// (version, issued_at, content id), sorted.
    pub known: Vec<(u32, UnixMillis, ContentId)>,
}

/// Versions kept per skill.
pub const MAX_VERSIONS: usize = 256;

impl Versions {
    /// Adds a version (idempotent), keeping the newest `MAX_VERSIONS`.
    pub fn add(&mut self, version: u32, issued_at: UnixMillis, id: ContentId) {
        let entry = (version, issued_at, id);
        if !self.known.contains(&entry) {
            self.known.push(entry);
            self.known.sort_by(|a, b| (a.0, a.1, a.2.digest()).cmp(&(b.0, b.1, b.2.digest())));
        }
        if self.known.len() > MAX_VERSIONS {
            let excess = self.known.len() - MAX_VERSIONS;
            self.known.drain(..excess);
        }
    }

    /// The newest version: the highest number; a re-publish of the same number (a new
    /// price, say) replaces the earlier one.
    pub fn newest(&self) -> Option<ContentId> {
        self.known.last().map(|(_, _, id)| *id)
    }

    /// Every version's content id, oldest first.
    pub fn ids(&self) -> impl Iterator<Item = ContentId> + '_ {
        self.known.iter().map(|(_, _, id)| *id)
    }
}

/// An open bounty with what this node has seen of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BountyRecord {
    pub bounty: Bounty,
    /// The management key that posted it.
    pub issuer: PublicKey,
    /// Skills this node holds that match it.
    pub matches: Vec<ContentId>,
    pub claims: Vec<Claim>,
}

/// Matches and claims kept per bounty.
pub const MAX_BOUNTY_ENTRIES: usize = 1024;

/// Lower-case words of three letters or more, minus a few that carry no meaning.
fn words(text: &str) -> BTreeSet<String> {
    const STOP: [&str; 16] = [
        "the", "and", "for", "with", "that", "this", "from", "into", "are", "was", "you", "your", "our", "all", "any",
        "can",
    ];
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
        .collect()
}

/// Whether a listing matches a bounty: a shared tag (case-insensitive), or at least
/// `text_overlap` of the bounty's words (and at least two) in the listing's name and text.
pub fn matches(bounty: &Bounty, listing: &CrystalListing, text_overlap: f64) -> bool {
    let tags: BTreeSet<String> = listing.tags.iter().map(|t| t.trim().to_lowercase()).collect();
    if bounty.tags.iter().any(|t| tags.contains(&t.trim().to_lowercase())) {
        return true;
    }
    let wanted = words(&bounty.description);
    if wanted.is_empty() {
        return false;
    }
    let have = words(&format!("{} {} {}", listing.name, listing.text, listing.tags.join(" ")));
    let shared = wanted.intersection(&have).count();
    shared >= 2 && shared as f64 >= text_overlap * wanted.len() as f64
}

#[cfg(test)]
mod tests;
