#![allow(clippy::unwrap_used)]
//! The management node's anomaly detector on real swarms: a flood of new peers, or a listing
//! burst from one peer, makes the management node raise weather by itself and every edge
//! halts; ordinary churn (a few peers joining, leaving and coming back, a few listings) does
//! not.

use std::sync::Arc;
use std::time::Duration;

use druse_management::anomaly::Watch;
use druse_management::config::Config as ManagementConfig;
use druse_node::Role;
use druse_node::weather::Current;
use druse_protocol::body::Body;
use druse_tests::swarm::{Cluster, Sniffer, TestNode, connect, listing, mesh_ready, mgmt_key};
use druse_tests::{WAIT, eventually};

/// The detector with its defaults, except that it counts new peers from the start: a test
/// swarm has no reconnecting crowd to learn first.
fn no_warmup() -> ManagementConfig {
    let mut config = ManagementConfig::default();
    config.anomaly.warmup = Duration::ZERO;
    config
}

/// Time for the detector to act on what it has counted: two of its one-second ticks.
/// Waits until the detector has carried out two more decisions than it had: at least one made
/// after everything it has counted so far.
async fn settle(watch: &Watch) {
    let before = watch.snapshot().decisions;
    eventually(WAIT, "the detector to decide on what it counted", async || watch.snapshot().decisions >= before + 2)
        .await
        .unwrap();
}

/// Starts a cluster with `edges` and the detector (without warm-up) on its management node, and
/// waits until the detector knows the edges.
async fn watched(edges: &[(&str, u8)]) -> (Cluster, Arc<Watch>) {
    let cluster = Cluster::start_managed(edges, |_| {}, no_warmup()).await.unwrap();
    let watch = druse_management::anomaly::spawn(&cluster.management).expect("the detector is on by default");
    let known = cluster.edges.len();
    eventually(WAIT, "the detector to learn the peers already there", async || watch.snapshot().known_peers >= known)
        .await
        .unwrap();
    (cluster, watch)
}

/// Waits until `node` halts on the detector's weather: signed by the management key, at the
/// seed's level 0.9. Returns that weather.
async fn halted_by_detector(node: &TestNode) -> Current {
    eventually(WAIT, format_args!("{} to halt on the detector's weather", node.name), async || node.halted())
        .await
        .unwrap();
    let weather = node.weather().active.unwrap();
    assert_eq!(weather.signer, mgmt_key().public(), "{}", node.name);
    assert_eq!(weather.level, 0.9, "{}", node.name);
    weather
}

fn raised(node: &TestNode, trigger: &str) -> f64 {
    node.metric("druse_anomaly_weather_total", &[("trigger", trigger)])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_new_peers_makes_the_management_node_halt_every_edge() {
    let (cluster, watch) = watched(&[("a", 1), ("b", 2)]).await;
    let threshold = cluster.management.config().anomaly.new_peers;
    assert_eq!(threshold, 20, "this scenario runs at the default threshold");
    for node in cluster.nodes() {
        assert!(!node.halted(), "{} is halted before the flood", node.name);
    }

    // Fresh identities join through the management node, as a Sybil swarm would.
    let mut sybils = Vec::new();
    for seed in 100..100 + threshold as u8 {
        let sybil = Sniffer::start(seed).unwrap();
        connect(&sybil.net, cluster.mgmt.net()).await.unwrap();
        sybils.push(sybil);
    }

    for node in cluster.nodes() {
        let weather = halted_by_detector(node).await;
        assert_eq!(weather.expires_at - weather.issued_at, 300_000, "{}: the seed's 5 minutes", node.name);
        assert!(weather.reason.contains("20 new peers first seen within 1m"), "{}: {}", node.name, weather.reason);
    }
    assert_eq!(raised(&cluster.mgmt, "new_peers"), 1.0);
    assert_eq!(raised(&cluster.mgmt, "listing_burst"), 0.0);
    let fired = watch.snapshot().last_fired.unwrap();
    assert_eq!(fired.trigger.as_str(), "new_peers");
    for sybil in sybils {
        sybil.net.shutdown().await;
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listing_burst_from_one_peer_makes_the_management_node_halt_every_edge_once() {
    let (cluster, watch) = watched(&[("b", 2), ("c", 3)]).await;
    let threshold = cluster.management.config().anomaly.listings_per_peer;
    assert_eq!(threshold, 30, "this scenario runs at the default threshold");

    // A peer that ignores the per-peer listing rate on its own side; every other node keeps
    // the default (10 a minute) and refuses what is over it.
    let flooder = TestNode::start("flooder", 9, Role::Edge, &[mgmt_key().public()], |config| {
        config.trust.listings_per_window = 1000;
    })
    .await
    .unwrap();
    for node in cluster.nodes() {
        connect(flooder.net(), node.net()).await.unwrap();
    }
    let mut all = cluster.nodes();
    all.push(&flooder);
    mesh_ready(&all).await.unwrap();

    for i in 0..threshold {
        flooder.publish(&Body::Crystal(listing(&format!("flood-{i}")))).await.unwrap();
    }
    for node in &all {
        let weather = halted_by_detector(node).await;
        assert!(weather.reason.starts_with("suspicious skill burst from peer cluster"), "{}", weather.reason);
        assert!(weather.reason.contains(&flooder.peer_id().to_string()), "{} names the flooder", weather.reason);
    }
    assert_eq!(raised(&cluster.mgmt, "listing_burst"), 1.0);
    assert!(
        cluster.mgmt.metric("druse_ingest_outcomes_total", &[("kind", "crystal"), ("outcome", "rate_limited")]) >= 1.0,
        "the management node refused part of the burst by rate, and counted it anyway"
    );
    let seq = cluster.mgmt.weather().active.unwrap().seq;

    // The flood goes on under the weather: the detector counts it again but holds off.
    for i in threshold..2 * threshold {
        flooder.publish(&Body::Crystal(listing(&format!("flood-{i}")))).await.unwrap();
    }
    eventually(WAIT, "the detector to count the flood going on under the weather", async || {
        watch.snapshot().busiest_lister_listings >= threshold as usize
    })
    .await
    .unwrap();
    settle(&watch).await;
    assert_eq!(raised(&cluster.mgmt, "listing_burst"), 1.0, "the detector raised weather again while it was in force");
    assert_eq!(cluster.mgmt.weather().active.unwrap().seq, seq);
    flooder.stop().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ordinary_churn_and_a_few_listings_raise_no_weather() {
    let (cluster, watch) = watched(&[("a", 1), ("b", 2), ("c", 3)]).await;

    // Four newcomers join; two leave and come back with the same identity.
    let mut peers = Vec::new();
    for seed in 50..54 {
        let peer = Sniffer::start(seed).unwrap();
        connect(&peer.net, cluster.mgmt.net()).await.unwrap();
        peers.push((seed, peer));
    }
    for _ in 0..2 {
        let (seed, leaving) = peers.pop().unwrap();
        leaving.net.shutdown().await;
        drop(leaving);
        let back = Sniffer::start(seed).unwrap();
        connect(&back.net, cluster.mgmt.net()).await.unwrap();
        peers.insert(0, (seed, back));
    }
    // Edges publish a few skills.
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(a.publish(&Body::Crystal(listing(&format!("a-skill-{i}")))).await.unwrap());
    }
    for i in 0..2 {
        ids.push(b.publish(&Body::Crystal(listing(&format!("b-skill-{i}")))).await.unwrap());
    }
    for id in &ids {
        eventually(WAIT, format_args!("the management node to store {id}"), async || cluster.mgmt.has_skill(id))
            .await
            .unwrap();
    }

    // The detector saw all of it...
    eventually(WAIT, "the detector to count four new peers and a's three listings", async || {
        let s = watch.snapshot();
        s.new_peers == 4 && s.busiest_lister_listings == 3
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", watch.snapshot()));
    settle(&watch).await;
    // ...and raised nothing.
    let snapshot = watch.snapshot();
    assert_eq!(snapshot.last_fired, None);
    assert_eq!(snapshot.new_peers, 4, "a peer that came back was counted twice");
    for node in cluster.nodes() {
        assert!(!node.halted(), "{} halted on ordinary churn", node.name);
    }
    assert_eq!(raised(&cluster.mgmt, "new_peers"), 0.0);
    assert_eq!(raised(&cluster.mgmt, "listing_burst"), 0.0);
    for (_, peer) in peers {
        peer.net.shutdown().await;
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_detector_can_be_turned_off() {
    let mut role = ManagementConfig::default();
    role.anomaly.enabled = false;
    let cluster = Cluster::start_managed(&[], |_| {}, role).await.unwrap();
    assert!(
        druse_management::anomaly::spawn(&cluster.management).is_none(),
        "the detector started although the config turns it off"
    );
    assert!(cluster.management.anomaly().is_none());
    let census = druse_management::census::take(&cluster.management).await.unwrap();
    assert_eq!(census.health.anomaly, None);
    cluster.stop().await;
}
