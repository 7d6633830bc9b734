//! The marketplace on real swarms: signed reports and adoptions price a skill the same way on
//! every node, only the reports of vouched adopters lift a skill over the gate (its publisher's
//! own and those of any number of fresh keys never do, and fresh keys move a listed skill's
//! price by a bounded amount at most), the management node endorses by policy only on
//! attested evidence, bounties are matched and claimed, a new version deprecates the old
//! everywhere, and an adoption never pays an asking price the adopter's own computation does
//! not support. Issue 38's step-by-step walk runs on real processes, in `market_walk.rs`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use druse_management::config::Config as ManagementConfig;
use druse_node::ingest::Outcome;
use druse_node::market::{Listing, Stats};
use druse_node::node;
use druse_node::store::Writes;
use druse_protocol::api::Code;
use druse_protocol::body::{Body, Bounty, CrystalListing, Report, ReportEvent, TrustLevel};
use druse_protocol::reputation::{self, Evidence};
use druse_protocol::{ContentId, Keypair, topic};
use druse_tests::swarm::{Cluster, TestNode, key, listing, mgmt_key, seal};
use druse_tests::{WAIT, eventually, wait_for};

const EDGES: [(&str, u8); 4] = [("a", 1), ("b", 2), ("c", 3), ("d", 4)];

fn priced(name: &str, asking_price: u64, tags: &[&str]) -> CrystalListing {
    CrystalListing { asking_price, tags: tags.iter().map(|t| (*t).to_owned()).collect(), ..listing(name) }
}

/// A bounty with one tag that expires after `ttl` (the management node sets its seq).
fn bounty(id: &str, description: &str, tag: &str, ttl: Duration) -> Bounty {
    let now = druse_protocol::now_ms();
    Bounty {
        issued_at: now,
        seq: 0,
        id: id.into(),
        description: description.into(),
        tags: vec![tag.into()],
        priority: 0.5,
        reward_multiplier: 2.0,
        expires_at: now + ttl.as_millis() as u64,
    }
}

async fn publish_everywhere(cluster: &Cluster, author: &TestNode, listing: CrystalListing) -> ContentId {
    let id = author.publish(&Body::Crystal(listing)).await.unwrap();
    for node in cluster.nodes() {
        eventually(WAIT, format_args!("{} to store {id}", node.name), async || node.has_skill(&id)).await.unwrap();
    }
    id
}

/// Waits for `n` more maintenance ticks on `node` than it had run.
async fn maintenance_ticks(node: &TestNode, n: u32) {
    let before = node.metric("druse_maintenance_ticks_total", &[]);
    eventually(WAIT, format_args!("{} to run {n} more maintenance ticks", node.name), async || {
        node.metric("druse_maintenance_ticks_total", &[]) >= before + f64::from(n)
    })
    .await
    .unwrap();
}

/// One execution report by `node`. Two identical reports from one node are two messages: the
/// node issues each after the last (see `Node::report`).
async fn execution(node: &TestNode, id: ContentId, success: bool, reward: f64) {
    node.market().report(id, ReportEvent::Execution { success, reward }).await.unwrap();
}

/// Waits until every node's listing of `id` satisfies `check`, and returns the listings.
async fn listings_when(cluster: &Cluster, id: ContentId, what: &str, check: impl Fn(&Listing) -> bool) -> Vec<Listing> {
    let mut out = Vec::new();
    for node in cluster.nodes() {
        let listing = wait_for(WAIT, format_args!("{} to see {what}", node.name), async || {
            node.market().listing(id).await.ok().filter(|l| check(l))
        })
        .await
        .unwrap();
        out.push(listing);
    }
    out
}

/// Management attests each of `peers` at `level`, and waits until every node holds it.
async fn attest(cluster: &Cluster, peers: &[&TestNode], level: TrustLevel) {
    for peer in peers {
        cluster.management.attest(peer.public_key(), level, "test reporter".into(), WAIT * 20).await.unwrap();
    }
    for node in cluster.nodes() {
        for peer in peers {
            eventually(WAIT, format_args!("{} to hold {}'s attestation", node.name, peer.name), async || {
                node.trust_level(&peer.peer_id()) == level
            })
            .await
            .unwrap();
        }
    }
}

/// Signs a report by `by` (any key, a fresh one say) and hands it to every node, as gossip
/// would; `at` is its issue time, distinct per report.
async fn report_as(cluster: &Cluster, by: &Keypair, id: ContentId, event: ReportEvent, at: u64) {
    let body = Body::Report(Report { issued_at: at, reporter: by.public(), content_id: id, event });
    let bytes = seal(by, &body).unwrap();
    for node in cluster.nodes() {
        let outcome = node.ingest_bytes(&bytes, &by.peer_id(), topic::REPORTS).await;
        assert_eq!(outcome, Outcome::Accepted, "{} refused a report by {}", node.name, by.peer_id());
    }
}

/// Twenty fresh keys (nothing vouches for them) each adopt `id` saying they paid 1 000 and
/// report ten perfect executions.
async fn twenty_fresh_keys(cluster: &Cluster, id: ContentId, seeds: std::ops::Range<u8>) {
    let mut at = druse_protocol::now_ms();
    for seed in seeds {
        let fresh = key(seed);
        report_as(cluster, &fresh, id, ReportEvent::Adoption { price_paid: 1_000 }, at).await;
        for _ in 0..10 {
            at += 1;
            report_as(cluster, &fresh, id, ReportEvent::Execution { success: true, reward: 1.0 }, at).await;
        }
    }
}

/// Every node's computed price of `id`, which must be the same on all.
fn same_price(listings: &[Listing]) -> u64 {
    let prices: Vec<u64> = listings.iter().map(|l| l.computed_price.micros).collect();
    assert!(prices.windows(2).all(|w| w[0] == w[1]), "prices differ between nodes: {prices:?}");
    prices[0]
}

#[tokio::test(flavor = "multi_thread")]
async fn reports_from_attested_adopters_move_the_price_identically_on_every_node() {
    let cluster = Cluster::start(&EDGES, |_| {}).await.unwrap();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| cluster.edge(n));
    let id = publish_everywhere(&cluster, a, priced("retry-backoff", 1_000, &["net"])).await;

    let before = listings_when(&cluster, id, "the new skill", |_| true).await;
    for listing in &before {
        assert_eq!(listing.computed_price.micros, 0, "no executions yet, so no quality");
        assert!(!listing.gate_passed);
        assert!(!listing.asking_supported, "an asking price with no evidence behind it is not supported");
    }

    // Management vouches for the reporters; they adopt first (the skill has no price yet, so
    // they pay nothing) and then report.
    attest(&cluster, &[b, c], TrustLevel::Verified).await;
    attest(&cluster, &[d], TrustLevel::Trusted).await;
    let (b_market, c_market) = (b.market(), c.market());
    let (x, y) = tokio::join!(b_market.adopt(id), c_market.adopt(id));
    for adoption in [x, y] {
        let adoption = adoption.unwrap();
        assert_eq!((adoption.settlement.computed, adoption.settlement.paid), (0, 0), "no price, nothing paid");
    }
    listings_when(&cluster, id, "two adopters", |l| l.stats.unique_adopters == 2).await;
    // All at once: the reports have the same fields and, likely, the same millisecond; each
    // names its reporter, so none is deduplicated as another.
    let run = ReportEvent::Execution { success: true, reward: 0.8 };
    let (x, y) = tokio::join!(b_market.report(id, run.clone()), c_market.report(id, run.clone()));
    assert!(x.unwrap() != y.unwrap(), "two reports, two content ids");
    execution(b, id, true, 0.8).await;
    execution(c, id, true, 0.8).await;
    let reported = listings_when(&cluster, id, "four executions", |l| l.stats.executions == 4).await;

    // d adopts at the asking price, which every node's computation now supports.
    let adoption = d.market().adopt(id).await.unwrap();
    assert!(adoption.settlement.asking_supported, "d computes {:?}", adoption.settlement);
    assert_eq!(adoption.settlement.paid, 1_000, "a supported asking price is paid as asked");
    let after = listings_when(&cluster, id, "three adopters", |l| l.stats.unique_adopters == 3).await;

    // Every input is signed, so every node computes the same price: quality 0.8 from two
    // verified reporters, demand from the one paid adoption (a trusted key, 0.75), reputation
    // from four reports of verified adopters.
    let reputation = reputation::score(&Evidence { report_successes: 4.0, ..Evidence::default() });
    let expected_before = 0.01 * 0.8 * 1.0 * reputation * 1.5;
    let expected_after = 0.01 * 0.8 * (1.0 + 1.75f64.ln() * 0.1) * reputation * 1.5;
    for (node, (reported, after)) in cluster.nodes().iter().zip(reported.iter().zip(&after)) {
        assert!((reported.computed_price.usdc - expected_before).abs() < 1e-12, "{}: {:?}", node.name, reported);
        assert!((after.computed_price.usdc - expected_after).abs() < 1e-12, "{}: {:?}", node.name, after);
        assert!(after.gate_passed && after.asking_supported);
        let stats = &after.stats;
        assert_eq!((stats.reporters, stats.independent_reporters, stats.counted_reporters), (2, 2, 2));
        assert_eq!((stats.vouched_weight, stats.vouched_executions, stats.adopter_weight), (2.0, 4.0, 0.75));
        assert_eq!((stats.unique_adopters, stats.paid_adopters), (3, 1));
        assert_eq!(
            node.metric("druse_reports_total", &[("event", "execution"), ("outcome", "success")]),
            4.0,
            "{}",
            node.name
        );
        assert_eq!(node.metric("druse_reports_total", &[("event", "adoption"), ("outcome", "none")]), 3.0);
    }
    same_price(&after);
    assert!(after[0].computed_price.micros > reported[0].computed_price.micros, "a paid adoption raises demand");

    // The ledgers: d spent the asking price and the author earned it; b and c paid nothing.
    for (adopter, spent) in [(b, 0), (c, 0), (d, 1_000)] {
        let ledger = adopter.market().ledger(10).unwrap();
        assert_eq!((ledger.spent, ledger.earned), (spent, 0), "{}", adopter.name);
        assert_eq!(ledger.balance, 1_000_000 - i128::from(spent));
    }
    let ledger = a.market().ledger(10).unwrap();
    assert_eq!((ledger.earned, ledger.spent, ledger.entries.len()), (1_000, 0, 3));
    cluster.stop().await;
}

/// Issue 26's attack on real swarms: a publisher's own reports, and twenty fresh keys that
/// adopt (saying they paid) and report success, never price a skill nor pass its gate; on a
/// skill listed on attested evidence the fresh keys move the price by the documented bound at
/// most, the same on every node; the publisher's other skill does not gain; and attested
/// reporters lift the gate and the automatic endorsement fires.
#[tokio::test(flavor = "multi_thread")]
async fn fresh_keys_and_self_reports_never_price_a_skill_and_attested_adopters_do() {
    let mut role = ManagementConfig::default();
    role.endorsement.auto = true;
    // Twenty new keys within a minute would raise weather; this test is about prices.
    role.anomaly.enabled = false;
    let cluster = Cluster::start_managed(&EDGES, |_| {}, role).await.unwrap();
    assert!(cluster.management.spawn_auto_endorse());
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| cluster.edge(n));
    let target = publish_everywhere(&cluster, a, priced("parse-dates", 1_000, &["time"])).await;
    let other = publish_everywhere(&cluster, a, priced("summarise-contracts", 1_000, &["law"])).await;

    // The publisher's other skill is listed on two verified adopters' reports.
    attest(&cluster, &[b, c, d], TrustLevel::Verified).await;
    for reporter in [b, c] {
        reporter.market().adopt(other).await.unwrap();
    }
    listings_when(&cluster, other, "two adopters of the other skill", |l| l.stats.unique_adopters == 2).await;
    for reporter in [b, c] {
        execution(reporter, other, true, 0.5).await;
        execution(reporter, other, true, 0.5).await;
    }
    let listed = listings_when(&cluster, other, "the other skill listed on all four runs", |l| {
        l.gate_passed && l.stats.gate_executions == 4
    })
    .await;
    let other_before = same_price(&listed);
    assert!(other_before > 0);
    let reputation = listed[0].computed_price.reputation;

    // 1. The publisher's own ten successes: no price anywhere, no gate, no endorsement.
    for _ in 0..10 {
        execution(a, target, true, 1.0).await;
    }
    let seen = listings_when(&cluster, target, "the author's ten executions", |l| l.stats.executions == 10).await;
    for listing in &seen {
        assert_eq!((listing.computed_price.micros, listing.gate_passed), (0, false), "{:?}", listing.stats);
        assert_eq!((listing.stats.counted_reporters, listing.stats.reporter_weight), (0, 0.0));
    }
    assert!(cluster.management.auto_endorse_pass().await.unwrap().is_empty(), "own reports alone endorsed it");

    // 2. Twenty fresh keys adopt it, saying they paid, and report 200 successes: still no price.
    twenty_fresh_keys(&cluster, target, 100..120).await;
    let seen = listings_when(&cluster, target, "twenty fresh adopters", |l| l.stats.executions == 210).await;
    for listing in &seen {
        let stats = &listing.stats;
        assert_eq!((listing.computed_price.micros, listing.gate_passed), (0, false), "{stats:?}");
        assert_eq!((stats.counted_reporters, stats.vouched_weight), (20, 0.0));
        assert!((stats.unvouched_weight - 0.2).abs() < 1e-12 && (stats.adopter_weight - 0.2).abs() < 1e-12);
    }
    assert!(cluster.management.auto_endorse_pass().await.unwrap().is_empty(), "fresh keys endorsed it");
    maintenance_ticks(&cluster.mgmt, 2).await;
    assert!(!cluster.mgmt.stored(&target).unwrap().unwrap().is_verified);
    // Nor did they raise the publisher's reputation, so its other skill's price is unchanged.
    let unchanged = listings_when(&cluster, other, "the other skill", |_| true).await;
    assert_eq!(same_price(&unchanged), other_before);
    assert_eq!(unchanged[0].computed_price.reputation, reputation);

    // 3. On the listed skill, twenty fresh keys move the price by the bound at most: quality
    //    closes at most cap / (V + cap) of its gap to 1 (V = 2 verified reporters), demand
    //    gains at most 0.1 × ln(1 + cap), with cap = 0.2.
    twenty_fresh_keys(&cluster, other, 120..140).await;
    let attacked = listings_when(&cluster, other, "twenty fresh keys on the other skill", |l| {
        l.stats.unique_adopters == 22 && l.stats.executions == 204
    })
    .await;
    let other_after = same_price(&attacked);
    let (quality, demand) = (listed[0].computed_price.quality, listed[0].computed_price.demand);
    assert_eq!((quality, demand), (0.5, 1.0), "two verified reporters at reward 0.5, nobody paid");
    let bound = (quality + 0.2 / 2.2 * (1.0 - quality)) / quality * (demand + 1.2f64.ln() * 0.1) / demand;
    let moved = attacked[0].computed_price.usdc / listed[0].computed_price.usdc;
    assert!(moved > 1.0 && moved <= bound + 1e-9, "{other_before} → {other_after}: ×{moved}, bound ×{bound}");
    println!("the other skill: {other_before} µUSDC → {other_after} µUSDC after twenty fresh keys (bound ×{bound:.4})");
    for listing in &attacked {
        assert_eq!(listing.computed_price.reputation, reputation, "fresh keys moved the publisher's reputation");
    }

    // 4. Attested adopters lift the gate: two verified (weight 2) list it, a third (weight 3)
    //    satisfies the endorsement policy.
    for reporter in [b, c, d] {
        reporter.market().adopt(target).await.unwrap();
    }
    listings_when(&cluster, target, "three attested adopters", |l| l.stats.unique_adopters == 23).await;
    execution(b, target, true, 0.9).await;
    execution(b, target, true, 0.9).await;
    execution(c, target, true, 0.9).await;
    let listed =
        listings_when(&cluster, target, "the target listed", |l| l.gate_passed && l.stats.gate_executions == 3).await;
    let stats = &listed[0].stats;
    assert_eq!((stats.vouched_weight, stats.vouched_executions), (2.0, 3.0), "{stats:?}");
    assert!(same_price(&listed) > 0);
    assert!(cluster.management.auto_endorse_pass().await.unwrap().is_empty(), "a weight of 2 endorsed it");
    execution(d, target, true, 0.9).await;
    for node in cluster.nodes() {
        eventually(WAIT, format_args!("{} to show {target} auto-endorsed", node.name), async || {
            node.stored(&target).unwrap().is_some_and(|s| s.is_verified)
        })
        .await
        .unwrap();
    }
    let skill = a.stored(&target).unwrap().unwrap();
    assert!(skill.endorsement.unwrap().note.starts_with("auto:"));
    // The policy counts an endorsement after publishing it, so the count may trail the gossip.
    eventually(WAIT, "the auto endorsement to be counted", async || {
        cluster.mgmt.metric("druse_endorsements_issued_total", &[("policy", "auto")]) >= 1.0
    })
    .await
    .unwrap();
    maintenance_ticks(&cluster.mgmt, 2).await;
    assert_eq!(cluster.mgmt.metric("druse_endorsements_issued_total", &[("policy", "auto")]), 1.0, "endorsed once");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bounty_is_matched_claimed_and_seen_by_the_management_node() {
    let cluster = Cluster::start(&EDGES[..2], |_| {}).await.unwrap();
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    let id = publish_everywhere(&cluster, a, priced("retry-backoff", 0, &["net"])).await;
    let other = publish_everywhere(&cluster, b, priced("summarise-contracts", 0, &["law"])).await;

    let flaky = bounty("flaky-http", "make flaky HTTP calls reliable", "net", Duration::from_secs(3600));
    cluster.management.bounty(flaky).await.unwrap();
    for node in cluster.nodes() {
        let record = wait_for(WAIT, format_args!("{} to match the bounty", node.name), async || {
            node.market().bounties().unwrap().into_iter().find(|r| r.bounty.id == "flaky-http" && !r.matches.is_empty())
        })
        .await
        .unwrap();
        assert_eq!(record.matches, vec![id], "{} matched the wrong skills", node.name);
        let listing = node.market().listing(id).await.unwrap();
        assert_eq!(listing.stats.bounty_matches, 1);
        assert_eq!(listing.bounties_matched, vec!["flaky-http".to_owned()]);
        assert!((listing.computed_price.demand - (1.0 + 2f64.ln() * 0.1)).abs() < 1e-12, "a match is demand");
        assert_eq!(node.market().listing(other).await.unwrap().stats.bounty_matches, 0);
        assert_eq!(node.metric("druse_bounty_matches_total", &[]), 1.0);
    }
    // The matched skill's crystal gained curiosity on the author's node.
    let boosted = wait_for(WAIT, "a's crystal of the skill to be boosted", async || {
        let crystal = a.stored(&id).unwrap()?.crystal?;
        a.memory().get(crystal).await.filter(|c| c.curiosity_boost > 0.0)
    })
    .await
    .unwrap();
    assert!((boosted.curiosity_boost - 0.2).abs() < 1e-9);

    a.market().report(id, ReportEvent::Claim { bounty_id: "flaky-http".into() }).await.unwrap();
    let claimed = wait_for(WAIT, "the management node to record the claim", async || {
        cluster
            .mgmt
            .market()
            .bounties()
            .unwrap()
            .into_iter()
            .find(|r| r.bounty.id == "flaky-http" && !r.claims.is_empty())
    })
    .await
    .unwrap();
    assert_eq!(claimed.claims.len(), 1);
    assert_eq!(claimed.claims[0].skill, id);
    assert_eq!(claimed.claims[0].claimant, a.peer_id().to_string());
    assert!(claimed.claims[0].matched);
    assert_eq!(cluster.mgmt.metric("druse_bounty_claims_total", &[]), 1.0);
    eventually(WAIT, "the open-bounty gauge", async || cluster.mgmt.metric("druse_bounties_open", &[]) == 1.0)
        .await
        .unwrap();

    // A bounty that expires is dropped.
    let short = bounty("short", "anything about contracts", "law", Duration::from_millis(1_500));
    cluster.management.bounty(short).await.unwrap();
    eventually(WAIT, "b to hold the short bounty", async || {
        b.market().bounties().unwrap().iter().any(|r| r.bounty.id == "short")
    })
    .await
    .unwrap();
    eventually(WAIT, "the short bounty to be dropped from b's store", async || {
        b.store().bounties.len().unwrap() == 1 && b.metric("druse_bounties_open", &[]) == 1.0
    })
    .await
    .unwrap();
    assert!(b.market().bounties().unwrap().iter().all(|r| r.bounty.id != "short"));
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bounty_boost_that_never_reached_memory_is_applied_once_by_the_sweep() {
    let mut cluster = Cluster::start(&EDGES[..1], |_| {}).await.unwrap();
    let id = publish_everywhere(&cluster, cluster.edge("a"), priced("retry-backoff", 0, &["net"])).await;
    let a = cluster.edge("a");
    let crystal =
        wait_for(WAIT, "the skill to reach a's memory", async || a.stored(&id).unwrap()?.crystal).await.unwrap();
    // What a full memory queue leaves behind: the match is recorded, its boost was dropped.
    let mut writes = Writes::default();
    writes
        .upsert(&a.store().market, id.digest(), |s: &mut Stats| {
            s.bounty_matches.insert("lost".into());
        })
        .unwrap();
    a.store().commit(&mut writes).unwrap();
    assert_eq!(a.memory().get(crystal).await.unwrap().curiosity_boost, 0.0);

    // The sweep at startup finds the boost owed and applies it.
    cluster.restart_edge("a").await.unwrap();
    let a = cluster.edge("a");
    let boosted_by = async |bounty: &str| {
        wait_for(WAIT, format_args!("a's crystal to have the boost of {bounty}"), async || {
            // The crystal records the bounties whose boost it had, in the write that boosts it.
            a.memory().get(crystal).await.filter(|c| druse_node::market::bounties_boosted(c).contains(bounty))
        })
        .await
        .unwrap()
        .curiosity_boost
    };
    assert!((boosted_by("lost").await - 0.2).abs() < 1e-9);

    // A real match later adds its own boost and only its own: the one the sweep applied is
    // not applied again.
    let matching = Bounty { seq: 1, ..bounty("flaky-http", "make flaky HTTP calls reliable", "net", WAIT) };
    let bytes = seal(&mgmt_key(), &Body::Bounty(matching)).unwrap();
    assert_eq!(a.ingest_bytes(&bytes, &cluster.mgmt.peer_id(), topic::BOUNTIES).await, Outcome::Accepted);
    assert!((boosted_by("flaky-http").await - 0.4).abs() < 1e-9);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_version_deprecates_the_first_everywhere_and_nobody_else_can() {
    let cluster = Cluster::start(&EDGES[..2], |_| {}).await.unwrap();
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    let v1 = publish_everywhere(&cluster, a, listing("csv-import")).await;
    let v2 = CrystalListing {
        version: 2,
        previous_version: Some(v1),
        text: "How to import CSV: stream rows, validate headers, and report bad lines with their numbers.".into(),
        ..listing("csv-import")
    };
    let v2 = publish_everywhere(&cluster, a, v2).await;
    for node in cluster.nodes() {
        let old = node.stored(&v1).unwrap().unwrap();
        assert!(old.deprecated, "{} still shows v1 as current", node.name);
        assert_eq!(old.deprecated_by, Some(v2));
        assert!(!node.stored(&v2).unwrap().unwrap().deprecated);
        let versions = node.market().versions(&v1.to_string()).await.unwrap();
        let ids: Vec<(u32, ContentId)> = versions.iter().map(|l| (l.skill.listing.version, l.skill.id)).collect();
        assert_eq!(ids, vec![(1, v1), (2, v2)], "{}", node.name);
        let by_stable_id = node.market().versions("csv-import-id").await.unwrap();
        assert_eq!(by_stable_id.len(), 2);
    }

    // Another author's listing with the same stable id and a higher version is its own skill.
    let squatter = CrystalListing { version: 9, previous_version: Some(v2), ..listing("csv-import") };
    let squatter = publish_everywhere(&cluster, b, squatter).await;
    for node in cluster.nodes() {
        assert!(!node.stored(&v2).unwrap().unwrap().deprecated, "{} let b deprecate a's skill", node.name);
        assert!(!node.stored(&squatter).unwrap().unwrap().deprecated);
    }
    let err = a.market().versions("no-such-skill").await.unwrap_err();
    assert!(matches!(err, node::Error::Market(Code::NotFound, _)), "{err}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn adoption_at_an_unsupported_asking_price_pays_the_computed_price() {
    let cluster = Cluster::start(&EDGES, |config| config.market.starting_credits = 5_000).await.unwrap();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| cluster.edge(n));

    // No evidence: the computed price is 0, so the 50 000 asked is not supported and b pays 0.
    let greedy = publish_everywhere(&cluster, a, priced("greedy", 50_000, &[])).await;
    let adoption = b.market().adopt(greedy).await.unwrap();
    assert!(!adoption.settlement.asking_supported);
    assert_eq!((adoption.settlement.asking, adoption.settlement.paid), (50_000, adoption.settlement.computed));
    assert_eq!(adoption.settlement.paid, 0);
    assert_eq!(adoption.balance, 5_000, "nothing was spent");
    for node in cluster.nodes() {
        eventually(WAIT, format_args!("{} to see b's adoption", node.name), async || {
            node.store()
                .market
                .get::<druse_node::market::Stats>(greedy.digest())
                .unwrap()
                .is_some_and(|s| s.adopters.get(&b.public_key().to_string()) == Some(&0))
        })
        .await
        .unwrap();
    }
    let again = b.market().adopt(greedy).await.unwrap_err();
    assert!(matches!(again, node::Error::Market(Code::Conflict, _)), "{again}");
    let own = a.market().adopt(greedy).await.unwrap_err();
    assert!(matches!(own, node::Error::Market(Code::Invalid, _)), "{own}");

    // A skill priced above b's credits (listed on the reports of two verified adopters): the
    // adoption is refused and nothing changes.
    let good = publish_everywhere(&cluster, a, priced("good", 1_000_000, &[])).await;
    attest(&cluster, &[c, d], TrustLevel::Verified).await;
    for reporter in [c, d] {
        assert_eq!(reporter.market().adopt(good).await.unwrap().settlement.paid, 0, "no price yet");
    }
    listings_when(&cluster, good, "two adopters", |l| l.stats.unique_adopters == 2).await;
    // Each reporter's two runs at once, all fields the same: still two reports.
    let run = ReportEvent::Execution { success: true, reward: 1.0 };
    for reporter in [c, d] {
        let market = reporter.market();
        let (x, y) = tokio::join!(market.report(good, run.clone()), market.report(good, run.clone()));
        assert!(x.unwrap() != y.unwrap(), "{}'s two identical reports are two messages", reporter.name);
    }
    let seen = listings_when(&cluster, good, "four executions", |l| l.stats.executions == 4).await;
    assert!(seen[0].gate_passed);
    assert!(seen[0].computed_price.micros > 5_000, "{:?}", seen[0].computed_price);
    let poor = b.market().adopt(good).await.unwrap_err();
    assert!(matches!(poor, node::Error::Market(Code::Conflict, _)), "{poor}");
    assert!(poor.to_string().contains("ledger holds 5000"), "{poor}");
    let ledger = b.market().ledger(10).unwrap();
    assert_eq!((ledger.balance, ledger.spent, ledger.entries.len()), (5_000, 0, 1));
    assert!(!b.market().listing(good).await.unwrap().adopted);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_from_the_swarm_land_in_memory_with_origin_peer_and_their_peer() {
    use druse_memory::crystal::Origin;
    use druse_memory::engine::Query;
    use druse_memory::governance::Caller;
    use druse_protocol::body::SemanticType;

    let cluster = Cluster::start(&EDGES[..2], |_| {}).await.unwrap();
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    let id = publish_everywhere(&cluster, a, priced("retry-backoff", 0, &["net"])).await;
    for (node, origin, peer) in [(b, Origin::Peer, Some(a.peer_id().to_string())), (a, Origin::Skill, None)] {
        let crystal = wait_for(WAIT, format_args!("{} to index the skill in memory", node.name), async || {
            let crystal = node.stored(&id).unwrap()?.crystal?;
            node.memory().get(crystal).await
        })
        .await
        .unwrap();
        assert_eq!((crystal.origin, crystal.governance.peer_origin.clone()), (origin, peer), "{}", node.name);
        assert_eq!(crystal.semantic_type, SemanticType::Skill);
        let query =
            Query { q: "retry-backoff".into(), k: 3, semantic_type: Some(SemanticType::Skill), ..Query::default() };
        let hits = node.memory().search(query, Caller::Anyone, druse_protocol::now_ms()).await.unwrap();
        assert_eq!(hits.first().map(|h| h.crystal.id), Some(crystal.id), "{} cannot recall the skill", node.name);
    }
    cluster.stop().await;
}
