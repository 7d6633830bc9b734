#![allow(clippy::unwrap_used)]
//! Anti-entropy on real swarms: a node that was not there when signed messages went out gets
//! every one of them from the first peer it connects to, and only those it lacks.

use std::time::Duration;

use druse_node::Role;
use druse_protocol::body::{Body, Bounty, EndorsementVerdict};
use druse_tests::swarm::{Cluster, TestNode, connect, listing, mgmt_key};
use druse_tests::{WAIT, eventually};

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_joins_later_gets_every_skill_endorsement_bounty_and_the_weather_from_one_peer() {
    let cluster = Cluster::start(&[("a", 1)], |_| {}).await.unwrap();
    let (a, mgmt) = (cluster.edge("a"), &cluster.mgmt);
    let skill = a.publish(&Body::Crystal(listing("sync-me"))).await.unwrap();
    eventually(WAIT, "the management node to store the skill", async || mgmt.has_skill(&skill)).await.unwrap();
    cluster.management.endorse(skill, EndorsementVerdict::Endorse, "reviewed".into()).await.unwrap();
    let now = druse_protocol::now_ms();
    let bounty = Bounty {
        issued_at: now,
        seq: 0,
        id: "sync-bounty".into(),
        description: "anything that syncs".into(),
        tags: vec!["sync".into()],
        priority: 0.5,
        reward_multiplier: 1.0,
        expires_at: now + 3_600_000,
    };
    cluster.management.bounty(bounty).await.unwrap();
    cluster.management.weather(0.4, Duration::from_secs(600), "drill".into()).await.unwrap();
    eventually(WAIT, "a to hold all four", async || {
        a.stored(&skill).ok().flatten().is_some_and(|s| s.is_verified)
            && a.halted()
            && a.market().bounties().is_ok_and(|b| b.iter().any(|r| r.bounty.id == "sync-bounty"))
    })
    .await
    .unwrap();

    // The newcomer connects to edge `a` only: nothing is gossiped any more, so what it gets,
    // it gets by sync.
    let late = TestNode::start("late", 9, Role::Edge, &[mgmt_key().public()], |_| {}).await.unwrap();
    connect(late.net(), a.net()).await.unwrap();
    eventually(WAIT, "the newcomer to hold the endorsed skill, the bounty and the weather", async || {
        late.stored(&skill).ok().flatten().is_some_and(|s| s.is_verified && s.verified_by == Some(mgmt_key().public()))
            && late.market().bounties().is_ok_and(|b| b.iter().any(|r| r.bounty.id == "sync-bounty"))
            && late.weather().active.zip(a.weather().active).is_some_and(|(late, a)| late.same_message(&a))
    })
    .await
    .unwrap();
    assert!(late.metric("druse_sync_messages_total", &[("kind", "crystal"), ("outcome", "accepted")]) >= 1.0);

    // A second sync with the same peer fetches nothing: the newcomer holds all it offers.
    let again = late.sync_with(a.peer_id()).await.unwrap();
    assert!(again.offered >= 4, "a offers its skill, endorsement, bounty and weather: {again:?}");
    assert_eq!(again.fetched, 0, "{again:?}");
    late.stop().await;
    cluster.stop().await;
}
