#![allow(clippy::unwrap_used)]
//! Silent mesh peers lose their score on a busy topic, honest quiet ones keep theirs. A hub
//! hears listings only through its five peers: three honest nodes that publish nothing but
//! forward what they get, and two silent peers that take every message and forward none. As
//! listings flow, the hub's scores for the silent peers fall below zero (P3, the mesh-delivery
//! quota on listings, `[p2p] delivery_quota`, off by default and on here), while the quiet
//! honest peers stay at zero or above.

use std::time::Duration;

use druse_node::Role;
use druse_protocol::body::Body;
use druse_protocol::net::PeerId;
use druse_tests::swarm::{Silent, TestNode, connect, content_id, listing, mesh_ready, mgmt_key, numbered_key};
use druse_tests::{WAIT, eventually};

/// At most this many listings, one a second: well past the quota's 30 s activation.
const MOST_LISTINGS: usize = 90;

/// The hub's score for each of `peers` (none when gossipsub has no record of one).
async fn scores(hub: &TestNode, peers: &[PeerId]) -> Vec<Option<f64>> {
    let mut scores = Vec::new();
    for peer in peers {
        scores.push(hub.net().peer_score(*peer).await.unwrap());
    }
    scores
}

#[tokio::test(flavor = "multi_thread")]
async fn silent_mesh_peers_fall_below_zero_and_quiet_honest_peers_do_not() {
    druse_tests::init_logging();
    let trusted = [mgmt_key().public()];
    // A listing a second from one author is more than the default rate allows.
    let target = |n: u32| {
        move |c: &mut druse_node::Config| {
            c.p2p.target_peers = Some(n);
            c.p2p.delivery_quota = true;
            c.trust.listings_per_window = 1000;
        }
    };
    let hub = TestNode::start("hub", 70, Role::Edge, &trusted, target(5)).await.unwrap();
    let publisher = TestNode::start("publisher", 71, Role::Edge, &trusted, target(5)).await.unwrap();
    let mut quiet = Vec::new();
    for (name, seed) in [("quiet-a", 72), ("quiet-b", 73), ("quiet-c", 74)] {
        let node = TestNode::start(name, seed, Role::Edge, &trusted, target(2)).await.unwrap();
        connect(node.net(), publisher.net()).await.unwrap();
        connect(node.net(), hub.net()).await.unwrap();
        quiet.push(node);
    }
    let heartbeat = Duration::from_secs(1);
    let silent: Vec<Silent> =
        (0..2).map(|i| Silent::start_with(&numbered_key(20_000 + i), heartbeat, 2).unwrap()).collect();
    for peer in &silent {
        connect(&peer.net, publisher.net()).await.unwrap();
        connect(&peer.net, hub.net()).await.unwrap();
    }
    let honest: Vec<&TestNode> = [&hub, &publisher].into_iter().chain(&quiet).collect();
    mesh_ready(&honest).await.unwrap();
    let quiet_ids: Vec<PeerId> = quiet.iter().map(|n| n.net().local_peer_id()).collect();
    let silent_ids: Vec<PeerId> = silent.iter().map(|s| s.net.local_peer_id()).collect();
    // The silent peers hold slots in the hub's listing mesh, which is what the quota is for.
    eventually(WAIT, "both silent peers in the hub's listing mesh", async || {
        let mesh = hub.net().mesh_peers(druse_protocol::topic::CRYSTALS).await.unwrap();
        silent_ids.iter().all(|id| mesh.contains(id))
    })
    .await
    .unwrap();

    let mut published = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    while published.len() < MOST_LISTINGS {
        ticker.tick().await;
        let body = Body::Crystal(listing(&format!("listing-{}", published.len())));
        published.push(content_id(&body).unwrap());
        publisher.publish(&body).await.unwrap();
        if scores(&hub, &silent_ids).await.iter().all(|s| s.is_some_and(|s| s < 0.0)) {
            break;
        }
    }
    let silent_scores = scores(&hub, &silent_ids).await;
    let quiet_scores = scores(&hub, &quiet_ids).await;
    println!("after {} listings: silent {silent_scores:?}, quiet {quiet_scores:?}", published.len());
    assert!(
        silent_scores.iter().all(|s| s.is_some_and(|s| s < 0.0)),
        "after {} listings the hub scores its silent peers {silent_scores:?}",
        published.len()
    );
    assert!(
        quiet_scores.iter().all(|s| s.is_some_and(|s| s >= 0.0)),
        "after {} listings the hub scores its quiet honest peers {quiet_scores:?} (silent: {silent_scores:?})",
        published.len()
    );
    assert!(silent.iter().all(|s| s.taken() > 0), "a silent peer took nothing: it was never in a mesh");

    // Every listing still reached the hub, through the quiet peers alone.
    eventually(WAIT, "every listing to reach the hub", async || published.iter().all(|id| hub.has_skill(id)))
        .await
        .unwrap();
    // A silent peer's score stays negative after the hub prunes it (P3b), and the quiet
    // peers stay in credit.
    let quiet_scores = scores(&hub, &quiet_ids).await;
    assert!(quiet_scores.iter().all(|s| s.is_some_and(|s| s >= 0.0)), "{quiet_scores:?}");
    let silent_scores = scores(&hub, &silent_ids).await;
    assert!(silent_scores.iter().all(|s| s.is_some_and(|s| s < 0.0)), "{silent_scores:?}");

    drop(silent);
    for node in quiet {
        node.stop().await;
    }
    publisher.stop().await;
    hub.stop().await;
}
