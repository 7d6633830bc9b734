//! The market's rules: weights, the gate, prices, settlement, versions, bounties and the ledger.

use druse_protocol::Keypair;

use super::*;
use crate::store::{Store, Writes};

/// The skill every test counts evidence on.
fn skill() -> ContentId {
    ContentId::of(b"skill")
}

/// Nothing vouches for any key (the rooms' view; weights at price time come from `weights`).
fn unvouched(_: &str) -> bool {
    false
}

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
        stats.execution(config, &skill(), reporter, i < successes, reward, unvouched);
    }
}

#[test]
fn one_reporter_contributes_at_most_its_cap() {
    let config = Config { reports_per_reporter: 3, ..Config::default() };
    let mut stats = Stats::default();
    let spammer = key(2);
    for _ in 0..3 {
        assert_eq!(stats.execution(&config, &skill(), &spammer, true, 1.0, unvouched), Counted::Yes);
    }
    assert_eq!(stats.execution(&config, &skill(), &spammer, true, 1.0, unvouched), Counted::OverCap);
    stats.adoption(&config, &skill(), &spammer, 0, unvouched);
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
    stats.adoption(&config, &skill(), &author, 0, unvouched);
    let s = stats.summary(&config, &author, weights(&[(author, 1.0)]));
    assert_eq!((s.executions, s.counted_reporters, s.reporter_weight, s.quality), (10, 0, 0.0, 0.0));
    assert!(!s.passes(&config.gate), "own executions do not pass the gate, even from a verified key");
    assert_eq!(price(&config, &s, 1.0, 0).usdc, 0.0, "nor give a price");
    assert_eq!(s.independent_reporters, 0);

    let others = [(key(2), 1.0), (key(3), 1.0), (key(4), 1.0)];
    for (k, _) in &others {
        stats.adoption(&config, &skill(), k, 0, unvouched);
        stats.execution(&config, &skill(), k, true, 0.8, unvouched);
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
    stats.adoption(&config, &skill(), &reporter, 0, unvouched);
    let s = stats.summary(&config, &author, weights(&vouched));
    assert_eq!((s.counted_reporters, s.reporter_weight, s.quality), (1, 1.0, 1.0));
    assert_eq!(
        (s.gate_successes, s.success_weight),
        (2, 1.0),
        "its adoption, whenever it arrives, makes its reports count"
    );
}

#[test]
fn the_gate_needs_vouched_reporter_weight() {
    let config = Config::default();
    let author = key(1);
    let trusted = [(key(2), 0.75), (key(3), 0.75)];
    let mut stats = Stats::default();
    for (k, _) in &trusted[..1] {
        stats.adoption(&config, &skill(), k, 0, unvouched);
        runs(&mut stats, &config, k, 10, 10, 1.0);
    }
    let s = stats.summary(&config, &author, weights(&trusted));
    assert_eq!((s.vouched_weight, s.vouched_executions), (0.75, 7.5));
    assert!(!s.passes(&config.gate), "one trusted reporter is not enough, however many runs");
    stats.adoption(&config, &skill(), &trusted[1].0, 0, unvouched);
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

/// The `i`th fresh key.
fn fresh_key(i: u32) -> PublicKey {
    let mut seed = [0xfe; 32];
    seed[..4].copy_from_slice(&i.to_le_bytes());
    Keypair::from_seed(seed).public()
}

/// `n` fresh keys that each adopt the skill, paying `paid`, and report 10 perfect runs; the
/// rooms see the keys of `vouched` as vouched.
fn fresh_keys(stats: &mut Stats, config: &Config, n: u32, paid: u64, vouched: &[(PublicKey, f64)]) {
    for i in 0..n {
        let k = fresh_key(i);
        stats.adoption(config, &skill(), &k, paid, room(vouched));
        for _ in 0..10 {
            stats.execution(config, &skill(), &k, true, 1.0, room(vouched));
        }
    }
}

/// The rooms' view of `vouched`: whether a key is among them with some weight.
fn room(vouched: &[(PublicKey, f64)]) -> impl Fn(&str) -> bool + '_ {
    move |k: &str| weights(vouched)(k).vouched > 0.0
}

#[test]
fn fresh_keys_alone_never_pass_the_gate_nor_price_a_skill_past_the_bound() {
    let config = Config::default();
    let author = key(1);
    let mut effects = Vec::new();
    for n in [1, 4, 20, 2_000] {
        let mut stats = Stats::default();
        fresh_keys(&mut stats, &config, n, 1_000, &[]);
        let s = stats.summary(&config, &author, weights(&[]));
        assert_eq!(s.counted_reporters, u64::from(n).min(1_024), "the unvouched room holds 1 024 keys");
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
    let config = Config::default();
    let author = key(1);
    let verified = [(key(2), 1.0), (key(3), 1.0)];
    let mut honest = Stats::default();
    for (k, _) in &verified {
        honest.adoption(&config, &skill(), k, 0, room(&verified));
        for i in 0..4 {
            honest.execution(&config, &skill(), k, i < 3, 0.5, room(&verified));
        }
    }
    let before = honest.summary(&config, &author, weights(&verified));
    assert!(before.passes(&config.gate));
    // 3 of 4 at reward 0.5 each; the failure's reward counts as 0.
    assert!((before.quality - 0.75 * (1.5 / 4.0)).abs() < 1e-12, "{before:?}");
    let price_before = price(&config, &before, 0.5, 0);

    let cap = config.weights.unvouched_cap;
    let mut prices = Vec::new();
    for n in [20, 2_000] {
        let mut attacked = honest.clone();
        fresh_keys(&mut attacked, &config, n, 1_000, &verified);
        let s = attacked.summary(&config, &author, weights(&verified));
        assert_eq!((s.vouched_weight, s.vouched_executions), (before.vouched_weight, before.vouched_executions));
        // Quality is a weighted mean of per-reporter qualities in [0, 1]: a pool of weight
        // at most `cap` beside a vouched weight V moves it by at most cap / (V + cap).
        let bound = cap / (before.vouched_weight + cap);
        assert!(s.quality - before.quality <= bound * (1.0 - before.quality) + 1e-12, "{n}: {s:?}");
        let v = before.vouched_weight;
        assert!((s.quality - (v * before.quality + cap) / (v + cap)).abs() < 1e-12);
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
    assert_eq!((price_before.micros(), prices[0]), (2_109, 2_646), "the figures the README quotes");
}

#[test]
fn three_trusted_adopters_with_one_success_each_price_a_skill_and_failures_lower_it() {
    let config = Config::default();
    let author = key(1);
    let trusted = [(key(2), 0.75), (key(3), 0.75), (key(4), 0.75)];
    let mut stats = Stats::default();
    for (k, _) in &trusted {
        stats.adoption(&config, &skill(), k, 0, room(&trusted));
        stats.execution(&config, &skill(), k, true, 0.8, room(&trusted));
    }
    let s = stats.summary(&config, &author, weights(&trusted));
    assert_eq!((s.gate_successes, s.gate_executions, s.success_weight), (3, 3, 2.25));
    assert!(s.passes(&config.gate), "3 × 0.75 is no longer compared with 3 executions");
    let reputation = |successes, failures| {
        signed_reputation(
            Evidence { report_successes: successes, report_failures: failures, ..Evidence::default() },
            false,
        )
    };
    let listed = price(&config, &s, reputation(2.25, 0.0), 0);
    // Two of them report a failure: their success rates fall to 1/2, quality to 0.4.
    for (k, _) in &trusted[..2] {
        stats.execution(&config, &skill(), k, false, 0.0, room(&trusted));
    }
    let s = stats.summary(&config, &author, weights(&trusted));
    assert!(s.passes(&config.gate), "2/3 of the weight's success rate is still over 60%");
    assert!((s.quality - 0.4).abs() < 1e-12);
    let lower = price(&config, &s, reputation(2.25, 1.5), 0);
    assert_eq!((listed.micros(), lower.micros()), (6_398, 3_067), "the figures the README quotes");
}

#[test]
fn one_node_never_passes_the_gate_however_many_runs_and_two_can() {
    let config = Config::default();
    let author = key(1);
    let verified = [(key(2), 1.0), (key(3), 1.0)];
    let mut stats = Stats::default();
    stats.adoption(&config, &skill(), &verified[0].0, 0, room(&verified));
    runs(&mut stats, &config, &verified[0].0, 10, 10, 1.0);
    let s = stats.summary(&config, &author, weights(&verified));
    assert_eq!((s.gate_successes, s.success_weight), (2, 1.0), "one voice: two runs of ten count");
    assert!(!s.passes(&config.gate), "one verified node's three users liking its replies");
    stats.adoption(&config, &skill(), &verified[1].0, 0, room(&verified));
    runs(&mut stats, &config, &verified[1].0, 1, 1, 1.0);
    assert!(stats.summary(&config, &author, weights(&verified)).passes(&config.gate));
}

#[test]
fn adoptions_that_paid_nothing_are_no_demand() {
    let config = Config::default();
    let author = key(1);
    let vouched = [(key(2), 1.0), (key(3), 0.75)];
    let mut stats = Stats::default();
    stats.adoption(&config, &skill(), &key(2), 0, unvouched);
    stats.adoption(&config, &skill(), &author, 500, unvouched);
    let s = stats.summary(&config, &author, weights(&vouched));
    assert_eq!((s.unique_adopters, s.paid_adopters, s.adopter_weight), (1, 0, 0.0));
    assert_eq!(price(&config, &s, 1.0, 0).demand, 1.0);
    stats.adoption(&config, &skill(), &key(3), 10, unvouched);
    let s = stats.summary(&config, &author, weights(&vouched));
    assert_eq!((s.unique_adopters, s.paid_adopters, s.adopter_weight), (2, 1, 0.75));
    assert!((price(&config, &s, 1.0, 0).demand - (1.0 + 1.75f64.ln() * 0.1)).abs() < 1e-12);
}

#[test]
fn adopters_count_once_and_the_publisher_not_at_all() {
    let config = Config::default();
    let author = key(1);
    let mut stats = Stats::default();
    assert_eq!(stats.adoption(&config, &skill(), &key(2), 10, unvouched), Counted::Yes);
    assert_eq!(stats.adoption(&config, &skill(), &key(2), 10, unvouched), Counted::OverCap);
    assert_eq!(stats.adoption(&config, &skill(), &author, 10, unvouched), Counted::Yes);
    let s = stats.summary(&config, &author, weights(&[(key(2), 1.0), (author, 1.0)]));
    assert_eq!((s.unique_adopters, s.adopter_weight), (1, 1.0));
}

#[test]
fn unvouched_room_keeps_the_lowest_ranks_whatever_the_arrival_order() {
    let config = Config { max_reporters: 8, ..Config::default() };
    let keys: Vec<PublicKey> = (0..40).map(fresh_key).collect();
    let fill = |order: &[PublicKey]| {
        let mut stats = Stats::default();
        for k in order {
            stats.adoption(&config, &skill(), k, 10, unvouched);
            stats.execution(&config, &skill(), k, true, 1.0, unvouched);
        }
        // A second round: keys let go stay out, kept keys count a second run.
        for k in order {
            stats.execution(&config, &skill(), k, false, 0.0, unvouched);
        }
        stats
    };
    let forward = fill(&keys);
    let mut reversed = keys.clone();
    reversed.reverse();
    let mut interleaved: Vec<PublicKey> =
        keys.iter().step_by(2).chain(keys.iter().skip(1).step_by(2)).copied().collect();
    interleaved.rotate_left(7);
    let mut lowest: Vec<String> = keys.iter().map(ToString::to_string).collect();
    lowest.sort_by_key(|k| room::rank(&skill(), k));
    lowest.truncate(8);
    lowest.sort();
    assert_eq!(forward.executions.keys().cloned().collect::<Vec<_>>(), lowest, "the eight lowest ranks are kept");
    assert_eq!(forward.adopters.keys().cloned().collect::<Vec<_>>(), lowest);
    for e in forward.executions.values() {
        assert_eq!((e.successes, e.failures), (1, 1), "every kept key was kept from its first message");
    }
    for other in [fill(&reversed), fill(&interleaved)] {
        assert_eq!((&other.executions, &other.adopters), (&forward.executions, &forward.adopters));
        assert_eq!(other.unvouched_bound, forward.unvouched_bound);
    }
    let out = keys.iter().find(|k| !lowest.contains(&k.to_string())).unwrap();
    let mut stats = forward.clone();
    assert_eq!(stats.execution(&config, &skill(), out, true, 1.0, unvouched), Counted::Full, "a let-go key stays out");
    assert_eq!(stats, forward);
}

#[test]
fn a_vouched_adopter_counts_after_two_thousand_fresh_keys_in_either_order_with_the_default_rooms() {
    let config = Config::default();
    let author = key(1);
    let trusted = [(key(2), 0.75), (key(3), 0.75), (key(4), 0.75)];
    let vouched_evidence = |stats: &mut Stats| {
        for (k, _) in &trusted {
            assert_eq!(stats.adoption(&config, &skill(), k, 100, room(&trusted)), Counted::Yes);
            assert_eq!(stats.execution(&config, &skill(), k, true, 1.0, room(&trusted)), Counted::Yes);
        }
    };
    let mut fresh_first = Stats::default();
    fresh_keys(&mut fresh_first, &config, 2_000, 1_000, &trusted);
    let flooded = fresh_first.summary(&config, &author, weights(&trusted));
    assert!(!flooded.passes(&config.gate));
    vouched_evidence(&mut fresh_first);
    let mut vouched_first = Stats::default();
    vouched_evidence(&mut vouched_first);
    fresh_keys(&mut vouched_first, &config, 2_000, 1_000, &trusted);
    assert_eq!(fresh_first.unvouched_keys_held(), 1_024);
    assert_eq!(fresh_first.vouched.len(), 3, "vouched keys hold room of their own");

    let mut prices = Vec::new();
    for stats in [&fresh_first, &vouched_first] {
        let s = stats.summary(&config, &author, weights(&trusted));
        assert_eq!((s.gate_successes, s.success_weight), (3, 2.25), "{s:?}");
        assert!(s.passes(&config.gate), "three trusted adopters, one success each");
        assert_eq!(s.counted_reporters, 1_024 + 3);
        let p = price(&config, &s, 0.5, 0);
        prices.push((p.micros(), s));
    }
    assert_eq!(prices[0], prices[1], "the same messages in either order, the same evidence and price");
}

#[test]
fn a_key_vouched_for_after_it_reported_keeps_its_reports_and_its_place() {
    let config = Config { max_reporters: 4, ..Config::default() };
    // The key that ranks highest of the first five, so the flood would let it go first.
    let mut keys: Vec<PublicKey> = (0..5).map(fresh_key).collect();
    keys.sort_by_key(|k| room::rank(&skill(), &k.to_string()));
    let late = keys[4];
    let mut stats = Stats::default();
    stats.adoption(&config, &skill(), &late, 0, unvouched);
    stats.execution(&config, &skill(), &late, true, 1.0, unvouched);
    assert!(stats.vouched.is_empty());
    // Its attestation arrives; then the flood.
    let attested = [(late, 1.0)];
    for k in &keys[..4] {
        stats.adoption(&config, &skill(), k, 0, room(&attested));
    }
    for i in 5..200 {
        stats.adoption(&config, &skill(), &fresh_key(i), 0, room(&attested));
    }
    assert!(stats.vouched.contains(&late.to_string()), "moved to the vouched room instead of being let go");
    assert_eq!(stats.executions[&late.to_string()].successes, 1, "its report from before the attestation stays");
    assert_eq!(stats.unvouched_keys_held(), 4);
    // Once its attestation ends it competes again, and ranking past the bound it goes.
    assert_eq!(stats.execution(&config, &skill(), &late, true, 1.0, unvouched), Counted::Full);
    assert!(!stats.executions.contains_key(&late.to_string()) && !stats.vouched.contains(&late.to_string()));
}

#[test]
fn stats_written_before_the_rooms_still_read() {
    let old = r#"{"executions":{"k":{"successes":2,"failures":1,"reward_sum":1.5}},"adopters":{"k":10},
        "bounty_matches":[],"claims":[]}"#;
    let stats: Stats = serde_json::from_str(old).unwrap();
    assert_eq!(stats.executions["k"].successes, 2);
    assert!(stats.vouched.is_empty() && stats.unvouched_bound.is_none() && stats.boosted.is_empty());
}

#[test]
fn a_failure_earns_no_reward() {
    let config = Config::default();
    let mut stats = Stats::default();
    stats.execution(&config, &skill(), &key(2), true, 0.5, unvouched);
    stats.execution(&config, &skill(), &key(2), false, 1.0, unvouched);
    stats.execution(&config, &skill(), &key(2), false, -0.5, unvouched);
    assert_eq!(stats.executions[&key(2).to_string()].reward_sum, 0.0);
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
        stats.adoption(&config, &skill(), k, 0, unvouched);
        stats.execution(&config, &skill(), k, true, 1.0, unvouched);
    }
    let reported = price(&config, &stats.summary(&config, &author, weights(&vouched)), 0.5, 0);
    assert!((reported.usdc - 0.01 * 1.0 * 1.0 * 0.5 * 1.5).abs() < 1e-12, "{reported:?}");
    stats.adoption(&config, &skill(), &key(5), 0, unvouched);
    stats.adoption(&config, &skill(), &key(6), 7, unvouched);
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

/// Random report sequences: adding a failure never raises a price, and the rooms keep the same
/// evidence whatever the arrival order.
mod sequences {
    use proptest::prelude::*;

    use super::*;

    /// One report: who sent it (an index into [`cast`]) and what it says.
    #[derive(Debug, Clone, Copy)]
    enum Event {
        /// What the adopter says it paid depends on the key (one adoption per key, as a node
        /// sends it: a second is not counted, so two that differ would make order matter).
        Adoption,
        Execution {
            success: bool,
            reward: f64,
        },
    }

    /// The publisher, then reporters at verified, trusted (two), provisional and no weight.
    fn cast() -> Vec<(PublicKey, f64)> {
        vec![(key(1), 0.0), (key(2), 1.0), (key(3), 0.75), (key(4), 0.75), (key(5), 0.25), (key(6), 0.0), (key(7), 0.0)]
    }

    fn event() -> impl Strategy<Value = (usize, Event)> {
        let adoption = Just(Event::Adoption);
        let execution =
            (any::<bool>(), -1.0f64..=1.0).prop_map(|(success, reward)| Event::Execution { success, reward });
        (0usize..7, prop_oneof![1 => adoption, 3 => execution])
    }

    fn apply(config: &Config, events: &[(usize, Event)]) -> Stats {
        let cast = cast();
        let vouched: Vec<(PublicKey, f64)> = cast.iter().filter(|(_, w)| *w > 0.0).copied().collect();
        let mut stats = Stats::default();
        for (who, event) in events {
            let k = &cast[*who].0;
            match *event {
                Event::Adoption => stats.adoption(config, &skill(), k, 100 * (*who as u64 % 2), room(&vouched)),
                Event::Execution { success, reward } => {
                    stats.execution(config, &skill(), k, success, reward, room(&vouched))
                }
            };
        }
        stats
    }

    /// The price every node would show: 0 below the gate.
    fn shown(config: &Config, events: &[(usize, Event)]) -> (f64, Summary) {
        let cast = cast();
        let vouched: Vec<(PublicKey, f64)> = cast.iter().filter(|(_, w)| *w > 0.0).copied().collect();
        let s = apply(config, events).summary(config, &key(1), weights(&vouched));
        let p = price(config, &s, 0.5, 0);
        (PriceView::new(&p, 0, s.passes(&config.gate)).usdc, s)
    }

    proptest! {
        #[test]
        fn a_later_failure_never_raises_the_price(
            events in prop::collection::vec(event(), 0..80),
            who in 0usize..7,
            reward in -1.0f64..=1.0,
        ) {
            let config = Config::default();
            let (before, s) = shown(&config, &events);
            let mut more = events.clone();
            more.push((who, Event::Execution { success: false, reward }));
            let (after, t) = shown(&config, &more);
            prop_assert!(after <= before + 1e-15, "{before} → {after}\n{s:?}\n{t:?}");
            prop_assert!(!t.passes(&config.gate) || s.passes(&config.gate), "a failure listed the skill");
        }

        #[test]
        fn a_failure_anywhere_never_raises_the_price_below_the_per_reporter_cap(
            events in prop::collection::vec(event(), 0..60),
            at in any::<prop::sample::Index>(),
            who in 0usize..7,
            reward in -1.0f64..=1.0,
        ) {
            let config = Config { reports_per_reporter: 1_000, ..Config::default() };
            let (before, _) = shown(&config, &events);
            let mut more = events.clone();
            more.insert(at.index(events.len() + 1), (who, Event::Execution { success: false, reward }));
            let (after, _) = shown(&config, &more);
            prop_assert!(after <= before + 1e-15, "{before} → {after}");
        }

        #[test]
        fn a_later_success_never_takes_a_skill_off_the_list(
            events in prop::collection::vec(event(), 0..80),
            who in 0usize..7,
            reward in -1.0f64..=1.0,
        ) {
            let config = Config::default();
            let (_, s) = shown(&config, &events);
            let mut more = events.clone();
            more.push((who, Event::Execution { success: true, reward }));
            let (_, t) = shown(&config, &more);
            prop_assert!(!s.passes(&config.gate) || t.passes(&config.gate));
        }

        #[test]
        fn small_rooms_keep_the_same_evidence_in_any_order(
            events in prop::collection::vec(event(), 0..60),
            order in any::<u64>(),
        ) {
            // Two unvouched slots for three unvouched keys (the publisher and two fresh ones).
            let config = Config { max_reporters: 2, reports_per_reporter: 1_000, ..Config::default() };
            let mut shuffled = events.clone();
            let mut state = order;
            for i in (1..shuffled.len()).rev() {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (state >> 33) as usize % (i + 1));
            }
            let (a, b) = (apply(&config, &events), apply(&config, &shuffled));
            prop_assert_eq!((&a.executions.keys().collect::<Vec<_>>(), &a.adopters), (&b.executions.keys().collect::<Vec<_>>(), &b.adopters));
            for (k, e) in &a.executions {
                let f = &b.executions[k];
                prop_assert_eq!((e.successes, e.failures), (f.successes, f.failures));
                prop_assert!((e.reward_sum - f.reward_sum).abs() < 1e-9);
            }
            let (x, y) = (shown(&config, &events).0, shown(&config, &shuffled).0);
            prop_assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        }
    }
}
