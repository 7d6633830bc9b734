//! The marketplace as one node sees it (seed 004, DESIGN §9): what signed reports say about
//! each skill, the price the node computes from that, skill versions, bounties and their
//! matches, and the node's credit ledger.
//!
//! Every input to a price except scarcity comes from signed messages every node receives, so
//! nodes that saw the same messages compute the same quality and demand:
//! - **quality** counts at most `reports_per_reporter` executions from each reporter, so no one
//!   peer can carry a skill's success rate;
//! - **demand** counts distinct adopters and distinct bounties, never repeated messages;
//! - **reputation** is the publisher's reputation from signed evidence only (its endorsed skills
//!   and the execution reports of others on its skills). The live reputation that drives
//!   gossip trust also counts messages this node happened to receive and how long it has known
//!   the peer, which differ between nodes; a price built on it would differ too;
//! - **scarcity** comes from this node's vector index (how many similar skills it holds).
//!
//! A node never takes a listing's asking price on trust. When it adopts a skill whose asking
//! price its own computation does not support, it pays its computed price instead, says so in
//! the answer, and signs that price in its adoption report (see [`settle`]).

use std::collections::{BTreeMap, BTreeSet};

use druse_protocol::body::{Bounty, CrystalListing};
use druse_protocol::pricing::{self, Price, PriceConfig, PriceInputs, QualityGate};
use druse_protocol::reputation::{self, Evidence};
use druse_protocol::{ContentId, PublicKey, UnixMillis};
use serde::{Deserialize, Serialize};

use crate::skill::Skill;
use crate::store::{self, Store, Writes};

/// The market's knobs; `Default` holds seed 004's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub price: PriceConfig,
    pub gate: QualityGate,
    /// Executions one reporter can contribute to one skill's stats.
    pub reports_per_reporter: u64,
    /// Distinct reporters (and adopters) tracked per skill.
    pub max_reporters: usize,
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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            price: PriceConfig::default(),
            gate: QualityGate::default(),
            reports_per_reporter: 10,
            max_reporters: 1024,
            similar_cosine: 0.8,
            bounty_text_overlap: 0.3,
            bounty_curiosity_boost: 0.2,
            max_bounties: 1024,
            starting_credits: 1_000_000,
            max_ledger_entries: 10_000,
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
    /// Ids of the matched bounties whose curiosity boost this node's memory has applied.
    #[serde(default)]
    pub boosted: BTreeSet<String>,
}

impl Stats {
    /// Matched bounties whose curiosity boost the skill's crystal has not had yet.
    pub fn boosts_owed(&self) -> Vec<String> {
        self.bounty_matches.difference(&self.boosted).cloned().collect()
    }
}

/// What a report did to a skill's stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Counted.
    Yes,
    /// The reporter already gave this skill its share of executions, or already adopted it.
    OverCap,
    /// The skill already tracks as many reporters as it may.
    Full,
}

impl Stats {
    /// Counts one execution by `reporter`.
    pub fn execution(&mut self, config: &Config, reporter: &PublicKey, success: bool, reward: f64) -> Counted {
        let key = reporter.to_string();
        if !self.executions.contains_key(&key) && self.executions.len() >= config.max_reporters {
            return Counted::Full;
        }
        let entry = self.executions.entry(key).or_default();
        if entry.total() >= config.reports_per_reporter {
            return Counted::OverCap;
        }
        if success {
            entry.successes += 1;
        } else {
            entry.failures += 1;
        }
        entry.reward_sum += if reward.is_finite() { reward.clamp(-1.0, 1.0) } else { 0.0 };
        Counted::Yes
    }

    /// Counts one adoption by `adopter`; each adopter counts once.
    pub fn adoption(&mut self, config: &Config, adopter: &PublicKey, price_paid: u64) -> Counted {
        let key = adopter.to_string();
        if self.adopters.contains_key(&key) {
            return Counted::OverCap;
        }
        if self.adopters.len() >= config.max_reporters {
            return Counted::Full;
        }
        self.adopters.insert(key, price_paid);
        Counted::Yes
    }

    /// The figures a price and the endorsement policy need; `author` is the skill's publisher.
    pub fn summary(&self, author: &PublicKey) -> Summary {
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
        s
    }
}

/// A skill's stats, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
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
}

impl Summary {
    /// Whether the skill passes the quality gate (every reporter's executions count).
    pub fn passes(&self, gate: &QualityGate) -> bool {
        gate.passes(self.executions, self.successes)
    }

    /// Whether it passes the gate on reports from at least `reporters` reporters other than
    /// the publisher, counting only their executions.
    pub fn passes_independently(&self, gate: &QualityGate, reporters: u64) -> bool {
        self.independent_reporters >= reporters && gate.passes(self.independent_executions, self.independent_successes)
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
            executions: summary.executions,
            successes: summary.successes,
            avg_reward: summary.avg_reward,
            unique_adopters: summary.unique_adopters,
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

/// Which way credits moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// This node adopted someone's skill.
    Spent,
    /// Someone adopted this node's skill.
    Earned,
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub at: UnixMillis,
    pub direction: Direction,
    pub skill: ContentId,
    /// The other side's PeerId.
    pub counterparty: String,
    /// Micro-USDC.
    pub amount: u64,
}

/// The ledger's running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub earned: u64,
    pub spent: u64,
    /// Entries written so far; the next entry's key.
    pub entries: u64,
}

impl Totals {
    /// The balance, in micro-USDC, from `starting` credits.
    pub fn balance(&self, starting: u64) -> i128 {
        i128::from(starting) + i128::from(self.earned) - i128::from(self.spent)
    }
}

/// The state record of the ledger's totals.
pub const TOTALS_KEY: &str = "ledger_totals";

/// Appends a ledger entry and updates the totals, trimming the oldest entries past
/// `max_entries` (the totals keep counting them).
pub fn record(store: &Store, writes: &mut Writes, entry: &Entry, max_entries: usize) -> Result<Totals, store::Error> {
    let mut totals: Totals = writes.get(&store.state, TOTALS_KEY.as_bytes())?.unwrap_or_default();
    writes.put(&store.ledger, &totals.entries.to_be_bytes(), entry)?;
    totals.entries += 1;
    match entry.direction {
        Direction::Earned => totals.earned = totals.earned.saturating_add(entry.amount),
        Direction::Spent => totals.spent = totals.spent.saturating_add(entry.amount),
    }
    writes.put(&store.state, TOTALS_KEY.as_bytes(), &totals)?;
    // Keys are 0, 1, 2, …: the entry that falls out of the window is `entries − max − 1`.
    if let Some(old) = totals.entries.checked_sub(max_entries.max(1) as u64 + 1) {
        writes.remove(&store.ledger, &old.to_be_bytes());
    }
    Ok(totals)
}

/// The ledger's totals.
pub fn totals(store: &Store) -> Result<Totals, store::Error> {
    Ok(store.state(TOTALS_KEY)?.unwrap_or_default())
}

/// An adoption this node paid for: kept with its debit, so that a retry publishes the same
/// signed report instead of paying again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaidAdoption {
    pub report_id: ContentId,
    /// The signed adoption report.
    pub report: Vec<u8>,
    pub settlement: Settlement,
}

/// Where the paid adoption of `skill` is kept (in the state table).
pub fn paid_adoption_key(skill: &ContentId) -> String {
    format!("adoption/{skill}")
}

/// The ledger's totals as `writes` leave them.
pub fn totals_in(store: &Store, writes: &Writes) -> Result<Totals, store::Error> {
    Ok(writes.get(&store.state, TOTALS_KEY.as_bytes())?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use druse_protocol::Keypair;

    use super::*;

    fn key(n: u8) -> PublicKey {
        Keypair::from_seed([n; 32]).public()
    }

    fn listing(name: &str, text: &str, tags: &[&str]) -> CrystalListing {
        let tags = tags.iter().map(|t| (*t).to_owned()).collect();
        CrystalListing { tags, ..crate::skill::sample_listing(name, text, 0) }
    }

    fn bounty(description: &str, tags: &[&str]) -> Bounty {
        Bounty {
            issued_at: 0,
            seq: 1,
            id: "b".into(),
            description: description.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            priority: 0.5,
            reward_multiplier: 2.0,
            expires_at: 1,
        }
    }

    #[test]
    fn one_reporter_contributes_at_most_its_cap() {
        let config = Config { reports_per_reporter: 3, ..Config::default() };
        let mut stats = Stats::default();
        let spammer = key(2);
        for _ in 0..3 {
            assert_eq!(stats.execution(&config, &spammer, true, 1.0), Counted::Yes);
        }
        assert_eq!(stats.execution(&config, &spammer, true, 1.0), Counted::OverCap);
        let s = stats.summary(&key(1));
        assert_eq!((s.executions, s.successes, s.reporters), (3, 3, 1));
    }

    #[test]
    fn the_publishers_reports_count_but_never_as_independent() {
        let config = Config::default();
        let author = key(1);
        let mut stats = Stats::default();
        for _ in 0..5 {
            stats.execution(&config, &author, true, 0.9);
        }
        let s = stats.summary(&author);
        assert!(s.passes(&config.gate), "own executions count toward the gate");
        assert_eq!(s.independent_reporters, 0);
        assert!(!s.passes_independently(&config.gate, 3));
        for n in 2..5 {
            stats.execution(&config, &key(n), true, 0.8);
        }
        let s = stats.summary(&author);
        assert_eq!(s.independent_reporters, 3);
        assert!(s.passes_independently(&config.gate, 3));
        assert!(!s.passes_independently(&config.gate, 4));
    }

    #[test]
    fn independent_gate_counts_only_others_successes() {
        let config = Config::default();
        let author = key(1);
        let mut stats = Stats::default();
        for _ in 0..10 {
            stats.execution(&config, &author, true, 1.0);
        }
        for n in 2..5 {
            stats.execution(&config, &key(n), false, -1.0);
        }
        let s = stats.summary(&author);
        assert!(s.passes(&config.gate), "10 of 13 overall");
        assert!(!s.passes_independently(&config.gate, 3), "0 of 3 from others");
    }

    #[test]
    fn adopters_count_once_and_the_publisher_not_at_all() {
        let config = Config::default();
        let author = key(1);
        let mut stats = Stats::default();
        assert_eq!(stats.adoption(&config, &key(2), 10), Counted::Yes);
        assert_eq!(stats.adoption(&config, &key(2), 10), Counted::OverCap);
        assert_eq!(stats.adoption(&config, &author, 10), Counted::Yes);
        assert_eq!(stats.summary(&author).unique_adopters, 1);
    }

    #[test]
    fn reporters_per_skill_are_bounded() {
        let config = Config { max_reporters: 2, ..Config::default() };
        let mut stats = Stats::default();
        assert_eq!(stats.execution(&config, &key(2), true, 1.0), Counted::Yes);
        assert_eq!(stats.execution(&config, &key(3), true, 1.0), Counted::Yes);
        assert_eq!(stats.execution(&config, &key(4), true, 1.0), Counted::Full);
        assert_eq!(stats.execution(&config, &key(2), true, 1.0), Counted::Yes, "known reporters still count");
    }

    #[test]
    fn settlement_never_pays_more_than_the_computed_price() {
        assert_eq!(settle(100, 250), Settlement { asking: 100, computed: 250, paid: 100, asking_supported: true });
        assert_eq!(settle(900, 250), Settlement { asking: 900, computed: 250, paid: 250, asking_supported: false });
        assert_eq!(settle(0, 0).paid, 0);
    }

    #[test]
    fn price_follows_reports_adopters_and_bounties() {
        let config = Config::default();
        let author = key(1);
        let mut stats = Stats::default();
        let before = price(&config, &stats.summary(&author), 0.5, 0);
        assert_eq!(before.usdc, 0.0, "no executions, no quality");
        for n in 2..5 {
            stats.execution(&config, &key(n), true, 1.0);
        }
        let reported = price(&config, &stats.summary(&author), 0.5, 0);
        assert!((reported.usdc - 0.01 * 1.0 * 1.0 * 0.5 * 1.5).abs() < 1e-12, "{reported:?}");
        stats.adoption(&config, &key(2), 0);
        stats.bounty_matches.insert("b".into());
        let demanded = price(&config, &stats.summary(&author), 0.5, 0);
        assert!((demanded.demand - (1.0 + 3f64.ln() * 0.1)).abs() < 1e-12);
        assert!(demanded.usdc > reported.usdc);
    }

    #[test]
    fn signed_reputation_ignores_local_observations() {
        let a = Evidence { accepted: 500, rejected: 0, endorsed_skills: 1, age_days: 90.0, ..Evidence::default() };
        let b = Evidence { accepted: 3, rejected: 0, endorsed_skills: 1, age_days: 0.1, ..Evidence::default() };
        assert_eq!(signed_reputation(a, false), signed_reputation(b, false));
        assert!(signed_reputation(a, false) > reputation::INITIAL);
        assert_eq!(signed_reputation(Evidence::default(), true), 1.0);
    }

    #[test]
    fn versions_know_their_newest_whatever_the_arrival_order() {
        let (v1, v2, v3, v3b) = (ContentId::of(b"1"), ContentId::of(b"2"), ContentId::of(b"3"), ContentId::of(b"3b"));
        let mut versions = Versions::default();
        versions.add(2, 20, v2);
        versions.add(1, 10, v1);
        assert_eq!(versions.newest(), Some(v2));
        versions.add(3, 30, v3);
        versions.add(3, 30, v3);
        assert_eq!(versions.known.len(), 3);
        assert_eq!(versions.newest(), Some(v3));
        versions.add(3, 40, v3b);
        assert_eq!(versions.newest(), Some(v3b), "a re-publish of a version replaces it");
        assert_eq!(versions.ids().collect::<Vec<_>>(), vec![v1, v2, v3, v3b]);
    }

    #[test]
    fn bounty_matches_on_a_shared_tag_or_enough_words() {
        let skill = listing("retry-backoff", "Retry failed HTTP calls with exponential backoff and jitter", &["Net"]);
        assert!(matches(&bounty("anything", &["net"]), &skill, 0.3), "tags match case-insensitively");
        assert!(matches(&bounty("exponential backoff for flaky HTTP calls", &[]), &skill, 0.3));
        assert!(!matches(&bounty("summarise legal contracts", &["law"]), &skill, 0.3));
        assert!(!matches(&bounty("backoff", &[]), &skill, 0.3), "one shared word is not enough");
        assert!(!matches(&bounty("", &[]), &skill, 0.3));
    }

    #[test]
    fn ledger_keeps_the_newest_entries_and_every_total() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let mut writes = Writes::default();
        for n in 0..5u64 {
            let direction = if n % 2 == 0 { Direction::Earned } else { Direction::Spent };
            let entry = Entry { at: n, direction, skill: ContentId::of(b"s"), counterparty: "p".into(), amount: 10 };
            record(&store, &mut writes, &entry, 3).unwrap();
            if n == 3 {
                store.commit(&mut writes).unwrap();
            }
        }
        assert_eq!(totals(&store).unwrap().entries, 4, "the fifth entry is not committed yet");
        store.commit(&mut writes).unwrap();
        let kept: Vec<u64> = store.ledger.iter::<Entry>().map(|e| e.unwrap().1.at).collect();
        assert_eq!(kept, vec![2, 3, 4]);
        assert_eq!(totals(&store).unwrap(), Totals { earned: 30, spent: 20, entries: 5 });
    }

    #[test]
    fn ledger_balance_starts_from_the_starting_credits() {
        let totals = Totals { earned: 30, spent: 100, entries: 2 };
        assert_eq!(totals.balance(1_000), 930);
        assert_eq!(totals.balance(50), -20);
    }
}
