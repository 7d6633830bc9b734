//! The market's rules: weights, the gate, prices, settlement, versions, bounties and the ledger.

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

/// Weights as a book would give them: `vouched` keys at their weight, any other key fresh.
fn weights(vouched: &[(PublicKey, f64)]) -> impl Fn(&str) -> Weight + '_ {
    move |k: &str| {
        vouched
            .iter()
            .find(|(key, _)| key.to_string() == k)
            .map_or(Weights::default().of_unattested(0), |(_, w)| Weight { vouched: *w, unvouched: 0.0 })
    }
}

/// `n` executions by `reporter`, `successes` of them successful with `reward`.
fn runs(stats: &mut Stats, config: &Config, reporter: &PublicKey, n: u64, successes: u64, reward: f64) {
    for i in 0..n {
        stats.execution(config, reporter, i < successes, reward);
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
    stats.adoption(&config, &spammer, 0);
    let s = stats.summary(&config, &key(1), weights(&[(spammer, 1.0)]));
    assert_eq!((s.executions, s.successes, s.reporters), (3, 3, 1));
    assert_eq!((s.counted_executions, s.vouched_executions), (3.0, 3.0));
}

#[test]
fn the_publishers_reports_never_count() {
    let config = Config::default();
    let author = key(1);
    let mut stats = Stats::default();
    runs(&mut stats, &config, &author, 10, 10, 1.0);
    stats.adoption(&config, &author, 0);
    let s = stats.summary(&config, &author, weights(&[(author, 1.0)]));
    assert_eq!((s.executions, s.counted_reporters, s.reporter_weight, s.quality), (10, 0, 0.0, 0.0));
    assert!(!s.passes(&config.gate), "own executions do not pass the gate, even from a verified key");
    assert_eq!(price(&config, &s, 1.0, 0).usdc, 0.0, "nor give a price");
    assert_eq!(s.independent_reporters, 0);

    let others = [(key(2), 1.0), (key(3), 1.0), (key(4), 1.0)];
    for (k, _) in &others {
        stats.adoption(&config, k, 0);
        stats.execution(&config, k, true, 0.8);
    }
    let s = stats.summary(&config, &author, weights(&others));
    assert_eq!((s.counted_reporters, s.vouched_weight, s.vouched_executions), (3, 3.0, 3.0));
    assert!((s.quality - 0.8).abs() < 1e-12, "the author's 10 at reward 1 are not in it: {s:?}");
    assert!(s.passes(&config.gate));
    assert!(s.passes_independently(&config.gate, 3.0));
    assert!(!s.passes_independently(&config.gate, 3.5));
}

#[test]
fn reporters_that_did_not_adopt_do_not_count() {
    let config = Config::default();
    let (author, reporter) = (key(1), key(2));
    let mut stats = Stats::default();
    runs(&mut stats, &config, &reporter, 5, 5, 1.0);
    let vouched = [(reporter, 1.0)];
    let s = stats.summary(&config, &author, weights(&vouched));
    assert_eq!((s.independent_reporters, s.counted_reporters, s.reporter_weight), (1, 0, 0.0));
    assert!(!s.passes(&config.gate));
    stats.adoption(&config, &reporter, 0);
    let s = stats.summary(&config, &author, weights(&vouched));
    assert_eq!((s.counted_reporters, s.reporter_weight, s.quality), (1, 1.0, 1.0));
    assert!(s.passes(&config.gate), "its adoption, whenever it arrives, makes its reports count");
}

#[test]
fn the_gate_needs_vouched_reporter_weight() {
    let config = Config::default();
    let author = key(1);
    let trusted = [(key(2), 0.75), (key(3), 0.75)];
    let mut stats = Stats::default();
    for (k, _) in &trusted[..1] {
        stats.adoption(&config, k, 0);
        runs(&mut stats, &config, k, 10, 10, 1.0);
    }
    let s = stats.summary(&config, &author, weights(&trusted));
    assert_eq!((s.vouched_weight, s.vouched_executions), (0.75, 7.5));
    assert!(!s.passes(&config.gate), "one trusted reporter is not enough, however many runs");
    stats.adoption(&config, &trusted[1].0, 0);
    runs(&mut stats, &config, &trusted[1].0, 1, 0, 0.0);
    let s = stats.summary(&config, &author, weights(&trusted));
    assert_eq!(s.vouched_weight, 1.5);
    assert!((s.vouched_success_rate - 0.5).abs() < 1e-12, "each reporter's rate weighs by its reporter");
    assert!(!s.passes(&config.gate), "half of the weight says it fails");
    runs(&mut stats, &config, &trusted[1].0, 2, 2, 1.0);
    let s = stats.summary(&config, &author, weights(&trusted));
    assert!((s.vouched_success_rate - (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
    assert!(s.passes(&config.gate));

    // An attestation at `untrusted` weighs nothing.
    let s = stats.summary(&config, &author, weights(&[(key(2), 0.0), (key(3), 0.0)]));
    assert_eq!((s.counted_reporters, s.vouched_weight), (0, 0.0));
}

/// `n` fresh keys that each adopt the skill, paying `paid`, and report 10 perfect runs.
fn fresh_keys(stats: &mut Stats, config: &Config, n: u32, paid: u64) {
    for i in 0..n {
        let mut seed = [0xfe; 32];
        seed[..4].copy_from_slice(&i.to_le_bytes());
        let k = Keypair::from_seed(seed).public();
        stats.adoption(config, &k, paid);
        runs(stats, config, &k, 10, 10, 1.0);
    }
}

#[test]
fn fresh_keys_alone_never_pass_the_gate_nor_price_a_skill_past_the_bound() {
    let config = Config { max_reporters: 4096, ..Config::default() };
    let author = key(1);
    let mut effects = Vec::new();
    for n in [1, 4, 20, 2_000] {
        let mut stats = Stats::default();
        fresh_keys(&mut stats, &config, n, 1_000);
        let s = stats.summary(&config, &author, weights(&[]));
        assert_eq!(s.counted_reporters, u64::from(n));
        assert!(s.unvouched_weight <= 0.2 + 1e-12 && s.vouched_weight == 0.0, "{n}: {s:?}");
        assert!(!s.passes(&config.gate), "{n} fresh keys passed the gate");
        assert!(s.adopter_weight <= 0.2 + 1e-12);
        effects.push((s.unvouched_weight, s.adopter_weight));
    }
    assert!((effects[0].0 - 0.05).abs() < 1e-12, "one fresh key weighs 0.05");
    for effect in &effects[1..] {
        assert!((effect.0 - 0.2).abs() < 1e-12 && (effect.1 - 0.2).abs() < 1e-12, "{effects:?}");
    }
}

#[test]
fn twenty_or_two_thousand_fresh_keys_move_a_listed_skill_by_the_same_bounded_amount() {
    let config = Config { max_reporters: 4096, ..Config::default() };
    let author = key(1);
    let verified = [(key(2), 1.0)];
    let mut honest = Stats::default();
    honest.adoption(&config, &verified[0].0, 0);
    runs(&mut honest, &config, &verified[0].0, 4, 3, 0.5);
    let before = honest.summary(&config, &author, weights(&verified));
    assert!(before.passes(&config.gate));
    assert!((before.quality - 0.75 * 0.5).abs() < 1e-12, "{before:?}");
    let price_before = price(&config, &before, 0.5, 0);

    let cap = config.weights.unvouched_cap;
    let mut prices = Vec::new();
    for n in [20, 2_000] {
        let mut attacked = honest.clone();
        fresh_keys(&mut attacked, &config, n, 1_000);
        let s = attacked.summary(&config, &author, weights(&verified));
        assert_eq!((s.vouched_weight, s.vouched_executions), (before.vouched_weight, before.vouched_executions));
        // Quality is a weighted mean of per-reporter qualities in [0, 1]: a pool of weight
        // at most `cap` beside a vouched weight V moves it by at most cap / (V + cap).
        let bound = cap / (before.vouched_weight + cap);
        assert!(s.quality - before.quality <= bound * (1.0 - before.quality) + 1e-12, "{n}: {s:?}");
        assert!((s.quality - (before.quality + cap) / (1.0 + cap)).abs() < 1e-12);
        let p = price(&config, &s, 0.5, 0);
        assert!((p.demand - (1.0 + (1.0 + cap).ln() * 0.1)).abs() < 1e-12, "demand from paid fresh adopters");
        prices.push(p.micros());
    }
    assert_eq!(prices[0], prices[1], "twenty keys or two thousand, the same price");
    assert!(prices[0] > price_before.micros(), "{prices:?} vs {}", price_before.micros());
    // The bound: quality closes at most cap / (V + cap) of its gap to 1, demand gains at
    // most demand_weight × ln(1 + cap).
    let bound = cap / (before.vouched_weight + cap);
    let quality = before.quality + bound * (1.0 - before.quality);
    let demand = price_before.demand + (1.0 + cap).ln() * 0.1;
    let most = 0.01 * quality * demand * 0.5 * 1.5 * 1e6;
    assert!((prices[0] as f64) <= most + 1.0, "{prices:?} vs at most {most}");
    assert_eq!((price_before.micros(), prices[0]), (2_812, 3_659), "the figures the README quotes");
}

#[test]
fn adoptions_that_paid_nothing_are_no_demand() {
    let config = Config::default();
    let author = key(1);
    let vouched = [(key(2), 1.0), (key(3), 0.75)];
    let mut stats = Stats::default();
    stats.adoption(&config, &key(2), 0);
    stats.adoption(&config, &author, 500);
    let s = stats.summary(&config, &author, weights(&vouched));
    assert_eq!((s.unique_adopters, s.paid_adopters, s.adopter_weight), (1, 0, 0.0));
    assert_eq!(price(&config, &s, 1.0, 0).demand, 1.0);
    stats.adoption(&config, &key(3), 10);
    let s = stats.summary(&config, &author, weights(&vouched));
    assert_eq!((s.unique_adopters, s.paid_adopters, s.adopter_weight), (2, 1, 0.75));
    assert!((price(&config, &s, 1.0, 0).demand - (1.0 + 1.75f64.ln() * 0.1)).abs() < 1e-12);
}

#[test]
fn adopters_count_once_and_the_publisher_not_at_all() {
    let config = Config::default();
    let author = key(1);
    let mut stats = Stats::default();
    assert_eq!(stats.adoption(&config, &key(2), 10), Counted::Yes);
    assert_eq!(stats.adoption(&config, &key(2), 10), Counted::OverCap);
    assert_eq!(stats.adoption(&config, &author, 10), Counted::Yes);
    let s = stats.summary(&config, &author, weights(&[(key(2), 1.0), (author, 1.0)]));
    assert_eq!((s.unique_adopters, s.adopter_weight), (1, 1.0));
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
    let vouched = [(key(2), 1.0), (key(3), 1.0), (key(4), 1.0)];
    let mut stats = Stats::default();
    let before = price(&config, &stats.summary(&config, &author, weights(&vouched)), 0.5, 0);
    assert_eq!(before.usdc, 0.0, "no executions, no quality");
    for (k, _) in &vouched {
        stats.adoption(&config, k, 0);
        stats.execution(&config, k, true, 1.0);
    }
    let reported = price(&config, &stats.summary(&config, &author, weights(&vouched)), 0.5, 0);
    assert!((reported.usdc - 0.01 * 1.0 * 1.0 * 0.5 * 1.5).abs() < 1e-12, "{reported:?}");
    stats.adoption(&config, &key(5), 0);
    stats.adoption(&config, &key(6), 7);
    stats.bounty_matches.insert("b".into());
    let demanded = price(&config, &stats.summary(&config, &author, weights(&vouched)), 0.5, 0);
    assert!((demanded.demand - (1.0 + 2.05f64.ln() * 0.1)).abs() < 1e-12, "a paid fresh adopter and a bounty");
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
        let direction = match n {
            4 => Direction::Claimed,
            _ if n % 2 == 0 => Direction::Earned,
            _ => Direction::Spent,
        };
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
    let totals = totals(&store).unwrap();
    assert_eq!(totals, Totals { earned: 20, spent: 20, claimed: 10, entries: 5 });
    assert_eq!(totals.balance(100), 100, "a claim is recorded, never credited");
}

#[test]
fn ledger_balance_starts_from_the_starting_credits() {
    let totals = Totals { earned: 30, spent: 100, claimed: 5_000, entries: 3 };
    assert_eq!(totals.balance(1_000), 930);
    assert_eq!(totals.balance(50), -20);
}
