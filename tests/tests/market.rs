//! The marketplace on real swarms: signed reports and adoptions price a skill the same way on
//! every node, the management node endorses by policy only on independent evidence, bounties
//! are matched and claimed, a new version deprecates the old everywhere, and an adoption never
//! pays an asking price the adopter's own computation does not support.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use druse_management::config::Config as ManagementConfig;
use druse_node::ingest::Outcome;
use druse_node::market::{Listing, Stats};
use druse_node::node;
use druse_node::store::Writes;
use druse_protocol::ContentId;
use druse_protocol::api::Code;
use druse_protocol::body::{Body, Bounty, CrystalListing, ReportEvent};
use druse_protocol::reputation::{self, Evidence};
use druse_protocol::topic;
use druse_tests::swarm::{Cluster, TestNode, listing, mgmt_key, seal};
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

async fn execution(node: &TestNode, id: ContentId, success: bool, reward: f64) {
    node.report(id, ReportEvent::Execution { success, reward }).await.unwrap();
    // Two identical reports from one reporter in the same millisecond are one message.
    tokio::time::sleep(Duration::from_millis(2)).await;
}

/// Waits until every node's listing of `id` satisfies `check`, and returns the listings.
async fn listings_when(cluster: &Cluster, id: ContentId, what: &str, check: impl Fn(&Listing) -> bool) -> Vec<Listing> {
    let mut out = Vec::new();
    for node in cluster.nodes() {
        let listing = wait_for(WAIT, format_args!("{} to see {what}", node.name), async || {
            node.listing(id).await.ok().filter(|l| check(l))
        })
        .await
        .unwrap();
        out.push(listing);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn reports_from_three_adopters_move_the_price_identically_on_every_node() {
    let cluster = Cluster::start(&EDGES, |_| {}).await.unwrap();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| cluster.edge(n));
    let id = publish_everywhere(&cluster, a, priced("retry-backoff", 1_000, &["net"])).await;

    let before = listings_when(&cluster, id, "the new skill", |_| true).await;
    for listing in &before {
        assert_eq!(listing.computed_price.micros, 0, "no executions yet, so no quality");
        assert!(!listing.gate_passed);
        assert!(!listing.asking_supported, "an asking price with no evidence behind it is not supported");
    }

    // All at once: the three reports have the same fields and, likely, the same millisecond;
    // each names its reporter, so none is deduplicated as another.
    let run = ReportEvent::Execution { success: true, reward: 0.8 };
    let (x, y, z) = tokio::join!(b.report(id, run.clone()), c.report(id, run.clone()), d.report(id, run));
    let ids = [x.unwrap(), y.unwrap(), z.unwrap()];
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "three reports, three content ids");
    let reported = listings_when(&cluster, id, "three executions", |l| l.stats.executions == 3).await;
    let (x, y, z) = tokio::join!(b.adopt(id), c.adopt(id), d.adopt(id));
    for (adopter, adoption) in [(b, x), (c, y), (d, z)] {
        let adoption = adoption.unwrap();
        assert!(adoption.settlement.asking_supported, "{} computes {:?}", adopter.name, adoption.settlement);
        assert_eq!(adoption.settlement.paid, 1_000, "a supported asking price is paid as asked");
    }
    let after = listings_when(&cluster, id, "three adopters", |l| l.stats.unique_adopters == 3).await;

    // Every input is signed, so every node computes the same price.
    let reputation = reputation::score(&Evidence { report_successes: 3, ..Evidence::default() });
    let expected_before = 0.01 * 0.8 * 1.0 * reputation * 1.5;
    let expected_after = 0.01 * 0.8 * (1.0 + 4f64.ln() * 0.1) * reputation * 1.5;
    for (node, (reported, after)) in cluster.nodes().iter().zip(reported.iter().zip(&after)) {
        assert!((reported.computed_price.usdc - expected_before).abs() < 1e-12, "{}: {:?}", node.name, reported);
        assert!((after.computed_price.usdc - expected_after).abs() < 1e-12, "{}: {:?}", node.name, after);
        assert!(after.gate_passed && after.asking_supported);
        assert_eq!((after.stats.reporters, after.stats.independent_reporters), (3, 3));
        assert_eq!(
            node.metric("druse_reports_total", &[("event", "execution"), ("outcome", "success")]),
            3.0,
            "{}",
            node.name
        );
        assert_eq!(node.metric("druse_reports_total", &[("event", "adoption"), ("outcome", "none")]), 3.0);
    }
    let prices: Vec<u64> = after.iter().map(|l| l.computed_price.micros).collect();
    assert!(prices.windows(2).all(|w| w[0] == w[1]), "prices differ between nodes: {prices:?}");
    assert!(after[0].computed_price.micros > reported[0].computed_price.micros, "adoptions raise demand");

    // The ledgers: each adopter spent the asking price, the author earned it three times.
    for adopter in [b, c, d] {
        let ledger = adopter.ledger(10).unwrap();
        assert_eq!((ledger.spent, ledger.earned), (1_000, 0), "{}", adopter.name);
        assert_eq!(ledger.balance, 1_000_000 - 1_000);
    }
    let ledger = a.ledger(10).unwrap();
    assert_eq!((ledger.earned, ledger.spent, ledger.entries.len()), (3_000, 0, 3));
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_authors_own_reports_never_satisfy_the_independent_reporter_rule() {
    let mut role = ManagementConfig::default();
    role.endorsement.auto = true;
    let cluster = Cluster::start_managed(&EDGES, |_| {}, role).await.unwrap();
    assert!(cluster.management.spawn_auto_endorse());
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| cluster.edge(n));
    let id = publish_everywhere(&cluster, a, priced("parse-dates", 1_000, &["time"])).await;

    for _ in 0..5 {
        execution(a, id, true, 1.0).await;
    }
    let seen = listings_when(&cluster, id, "the author's five executions", |l| l.stats.executions == 5).await;
    assert!(seen.iter().all(|l| l.gate_passed && l.stats.independent_reporters == 0));
    assert!(cluster.management.auto_endorse_pass().await.unwrap().is_empty(), "own reports alone endorsed it");
    // A maintenance tick hands the policy the changed evidence.
    maintenance_ticks(&cluster.mgmt, 2).await;
    assert!(!cluster.mgmt.stored(&id).unwrap().unwrap().is_verified);

    execution(b, id, true, 0.9).await;
    execution(c, id, true, 0.9).await;
    listings_when(&cluster, id, "two independent reporters", |l| l.stats.independent_reporters == 2).await;
    assert!(cluster.management.auto_endorse_pass().await.unwrap().is_empty(), "two of three reporters endorsed it");

    execution(d, id, true, 0.9).await;
    for node in cluster.nodes() {
        eventually(WAIT, format_args!("{} to show {id} auto-endorsed", node.name), async || {
            node.stored(&id).unwrap().is_some_and(|s| s.is_verified)
        })
        .await
        .unwrap();
    }
    let skill = a.stored(&id).unwrap().unwrap();
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
            node.bounties().unwrap().into_iter().find(|r| r.bounty.id == "flaky-http" && !r.matches.is_empty())
        })
        .await
        .unwrap();
        assert_eq!(record.matches, vec![id], "{} matched the wrong skills", node.name);
        let listing = node.listing(id).await.unwrap();
        assert_eq!(listing.stats.bounty_matches, 1);
        assert_eq!(listing.bounties_matched, vec!["flaky-http".to_owned()]);
        assert!((listing.computed_price.demand - (1.0 + 2f64.ln() * 0.1)).abs() < 1e-12, "a match is demand");
        assert_eq!(node.listing(other).await.unwrap().stats.bounty_matches, 0);
        assert_eq!(node.metric("druse_bounty_matches_total", &[]), 1.0);
    }
    // The matched skill's crystal gained curiosity on the author's node.
    let boosted = wait_for(WAIT, "a's crystal of the skill to be boosted", async || {
        let crystal = a.stored(&id).unwrap()?.crystal?;
        a.memory().get(crystal).filter(|c| c.curiosity_boost > 0.0)
    })
    .await
    .unwrap();
    assert!((boosted.curiosity_boost - 0.2).abs() < 1e-9);

    a.report(id, ReportEvent::Claim { bounty_id: "flaky-http".into() }).await.unwrap();
    let claimed = wait_for(WAIT, "the management node to record the claim", async || {
        cluster.mgmt.bounties().unwrap().into_iter().find(|r| r.bounty.id == "flaky-http" && !r.claims.is_empty())
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
        b.bounties().unwrap().iter().any(|r| r.bounty.id == "short")
    })
    .await
    .unwrap();
    eventually(WAIT, "the short bounty to be dropped from b's store", async || {
        b.store().bounties.len().unwrap() == 1 && b.metric("druse_bounties_open", &[]) == 1.0
    })
    .await
    .unwrap();
    assert!(b.bounties().unwrap().iter().all(|r| r.bounty.id != "short"));
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
    assert_eq!(a.memory().get(crystal).unwrap().curiosity_boost, 0.0);

    // The sweep at startup finds the boost owed and applies it.
    cluster.restart_edge("a").await.unwrap();
    let a = cluster.edge("a");
    let boosted_by = async |bounty: &str| {
        wait_for(WAIT, format_args!("a's crystal to have the boost of {bounty}"), async || {
            let stats: Stats = a.store().market.get(id.digest()).unwrap()?;
            stats.boosted.contains(bounty).then(|| a.memory().get(crystal)).flatten()
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
        let versions = node.versions(&v1.to_string()).await.unwrap();
        let ids: Vec<(u32, ContentId)> = versions.iter().map(|l| (l.skill.listing.version, l.skill.id)).collect();
        assert_eq!(ids, vec![(1, v1), (2, v2)], "{}", node.name);
        let by_stable_id = node.versions("csv-import-id").await.unwrap();
        assert_eq!(by_stable_id.len(), 2);
    }

    // Another author's listing with the same stable id and a higher version is its own skill.
    let squatter = CrystalListing { version: 9, previous_version: Some(v2), ..listing("csv-import") };
    let squatter = publish_everywhere(&cluster, b, squatter).await;
    for node in cluster.nodes() {
        assert!(!node.stored(&v2).unwrap().unwrap().deprecated, "{} let b deprecate a's skill", node.name);
        assert!(!node.stored(&squatter).unwrap().unwrap().deprecated);
    }
    let err = a.versions("no-such-skill").await.unwrap_err();
    assert!(matches!(err, node::Error::Market(Code::NotFound, _)), "{err}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn adoption_at_an_unsupported_asking_price_pays_the_computed_price() {
    let cluster = Cluster::start(&EDGES, |config| config.market.starting_credits = 5_000).await.unwrap();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| cluster.edge(n));

    // No evidence: the computed price is 0, so the 50 000 asked is not supported and b pays 0.
    let greedy = publish_everywhere(&cluster, a, priced("greedy", 50_000, &[])).await;
    let adoption = b.adopt(greedy).await.unwrap();
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
    let again = b.adopt(greedy).await.unwrap_err();
    assert!(matches!(again, node::Error::Market(Code::Conflict, _)), "{again}");
    let own = a.adopt(greedy).await.unwrap_err();
    assert!(matches!(own, node::Error::Market(Code::Invalid, _)), "{own}");

    // A skill priced above b's credits: the adoption is refused and nothing changes.
    let good = publish_everywhere(&cluster, a, priced("good", 1_000_000, &[])).await;
    for reporter in [b, c, d] {
        execution(reporter, good, true, 1.0).await;
    }
    let seen = listings_when(&cluster, good, "three executions", |l| l.stats.executions == 3).await;
    assert!(seen[0].computed_price.micros > 5_000, "{:?}", seen[0].computed_price);
    let poor = b.adopt(good).await.unwrap_err();
    assert!(matches!(poor, node::Error::Market(Code::Conflict, _)), "{poor}");
    assert!(poor.to_string().contains("ledger holds 5000"), "{poor}");
    let ledger = b.ledger(10).unwrap();
    assert_eq!((ledger.balance, ledger.spent, ledger.entries.len()), (5_000, 0, 1));
    assert!(!b.listing(good).await.unwrap().adopted);
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
            node.memory().get(crystal)
        })
        .await
        .unwrap();
        assert_eq!((crystal.origin, crystal.governance.peer_origin.clone()), (origin, peer), "{}", node.name);
        assert_eq!(crystal.semantic_type, SemanticType::Skill);
        let query =
            Query { q: "retry-backoff".into(), k: 3, semantic_type: Some(SemanticType::Skill), ..Query::default() };
        let hits = node.memory().search(&query, Caller::Anyone, druse_protocol::now_ms()).unwrap();
        assert_eq!(hits.first().map(|h| h.crystal.id), Some(crystal.id), "{} cannot recall the skill", node.name);
    }
    cluster.stop().await;
}
