//! Cortisol weather: while it is active, every node refuses listings from peers below
//! `trusted`; it ends on its own; and a node that joins during it obeys it too.

use std::time::Duration;

use druse_node::Role;
use druse_protocol::body::{Body, TrustLevel};
use druse_tests::swarm::{Cluster, TestNode, connect, listing, mgmt_key};
use druse_tests::{WAIT, eventually};

/// How often the management node re-announces active weather in these scenarios.
const REANNOUNCE: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread")]
async fn weather_halts_listings_from_untrusted_peers_everywhere_until_it_expires() {
    const WEATHER: Duration = Duration::from_secs(5);
    let cluster = Cluster::start(&[("a", 1), ("b", 2), ("c", 3)], |_| {}).await.unwrap();
    cluster.management.spawn_reannounce(REANNOUNCE);
    let (mgmt, a, b, c) = (&cluster.mgmt, cluster.edge("a"), cluster.edge("b"), cluster.edge("c"));

    // b is attested trusted; a stays a provisional newcomer.
    cluster
        .management
        .attest(b.public_key(), TrustLevel::Trusted, "known operator".into(), Duration::from_secs(600))
        .await
        .unwrap();
    for node in [mgmt, a, c] {
        eventually(WAIT, format_args!("{} to trust b", node.name), async || {
            node.trust_level(&b.peer_id()) == TrustLevel::Trusted
        })
        .await
        .unwrap();
    }
    for node in [mgmt, b, c] {
        assert_eq!(node.trust_level(&a.peer_id()), TrustLevel::Provisional, "a's level on {}", node.name);
    }

    cluster.management.weather(0.9, WEATHER, "sybil burst".into()).await.unwrap();
    for node in cluster.nodes() {
        eventually(WAIT, format_args!("{} to halt", node.name), async || node.halted()).await.unwrap();
        let text = node.metrics_text();
        assert!(text.lines().any(|l| l == "druse_halted 1"), "{} does not export druse_halted 1:\n{text}", node.name);
        assert_eq!(node.metric("druse_weather_cortisol", &[]), 0.9, "{}'s cortisol gauge", node.name);
    }

    let from_a = a.publish(&Body::Crystal(listing("a-during-weather"))).await.unwrap();
    let from_b = b.publish(&Body::Crystal(listing("b-during-weather"))).await.unwrap();
    for node in [mgmt, a, c] {
        eventually(WAIT, format_args!("{} to store trusted b's listing", node.name), async || node.has_skill(&from_b))
            .await
            .unwrap();
    }
    for node in [mgmt, b, c] {
        eventually(WAIT, format_args!("{} to refuse a's listing as halted", node.name), async || {
            node.metric("druse_ingest_outcomes_total", &[("kind", "crystal"), ("outcome", "halted")]) >= 1.0
        })
        .await
        .unwrap();
        assert!(!node.has_skill(&from_a), "{} stored a provisional peer's listing during weather", node.name);
    }
    for node in cluster.nodes() {
        assert!(node.halted(), "the weather on {} ended before the checks did; lengthen WEATHER", node.name);
    }

    for node in cluster.nodes() {
        eventually(WEATHER + WAIT, format_args!("{}'s weather to expire", node.name), async || !node.halted())
            .await
            .unwrap();
        eventually(WAIT, format_args!("{} to export druse_halted 0", node.name), async || {
            node.metrics_text().lines().any(|l| l == "druse_halted 0")
        })
        .await
        .unwrap();
    }
    let after = a.publish(&Body::Crystal(listing("a-after-weather"))).await.unwrap();
    for node in [mgmt, b, c] {
        eventually(WAIT, format_args!("{} to store a's listing after the weather", node.name), async || {
            node.has_skill(&after)
        })
        .await
        .unwrap();
        assert!(!node.has_skill(&from_a), "{} stored the listing refused during weather", node.name);
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn node_that_joins_during_weather_becomes_halted() {
    let cluster = Cluster::start(&[("a", 1)], |_| {}).await.unwrap();
    cluster.management.spawn_reannounce(REANNOUNCE);
    cluster.management.weather(0.9, Duration::from_secs(60), "lockdown".into()).await.unwrap();
    let a = cluster.edge("a");
    eventually(WAIT, "a to halt", async || a.halted()).await.unwrap();

    let late = TestNode::start("late", 9, Role::Edge, &[mgmt_key().public()], |_| {}).await.unwrap();
    assert!(!late.halted(), "a node that has heard no weather is halted");
    connect(late.net(), cluster.mgmt.net()).await.unwrap();
    eventually(WAIT, "the late joiner to halt", async || late.halted()).await.unwrap();
    let weather = late.weather().active.unwrap();
    let on_a = a.weather().active.unwrap();
    // The late joiner obeys the very message the management node signed (by sync on
    // connection, or by its re-announcement), never a re-dated copy.
    assert!(weather.same_message(&on_a), "the late joiner holds the original weather: {weather:?} against {on_a:?}");
    assert_eq!((weather.level, weather.signer, weather.seq), (0.9, mgmt_key().public(), on_a.seq));
    late.stop().await;
    cluster.stop().await;
}
