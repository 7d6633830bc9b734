#![allow(clippy::unwrap_used)]
//! A dial storm at one node: ten times its peer target of peers dial it at once. Its
//! established connections never pass 1.1 times the target (the gate refuses the rest), and
//! the nodes it already serves still get what is published among them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use druse_node::Role;
use druse_protocol::body::Body;
use druse_protocol::net;
use druse_tests::swarm::{TestNode, connect, content_id, listing, mesh_ready, mgmt_key, numbered_key};
use druse_tests::{WAIT, eventually};

/// The flooded node's peer target.
const TARGET: u32 = 20;

/// Established connections of `node`, over all its peers.
async fn connections(node: &TestNode) -> usize {
    node.net().peers().await.unwrap().iter().map(|p| p.addresses.len()).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dial_storm_stays_within_the_ceiling_and_the_mesh_is_still_served() {
    druse_tests::init_logging();
    let trusted = [mgmt_key().public()];
    let hub = TestNode::start("hub", 60, Role::Edge, &trusted, |c| c.p2p.target_peers = Some(TARGET)).await.unwrap();
    // Three nodes that keep one peer each, the hub: whatever reaches them came through it.
    let mut spokes = Vec::new();
    for (name, seed) in [("a", 61), ("b", 62), ("c", 63)] {
        let spoke = TestNode::start(name, seed, Role::Edge, &trusted, |c| c.p2p.target_peers = Some(1)).await.unwrap();
        connect(spoke.net(), hub.net()).await.unwrap();
        spokes.push(spoke);
    }
    let everyone: Vec<&TestNode> = std::iter::once(&hub).chain(&spokes).collect();
    mesh_ready(&everyone).await.unwrap();

    // Ten times the target of bare peers, none listening, each dialling the hub once, all at once.
    let hub_addr = hub.addr().await.unwrap();
    let mut flood = Vec::new();
    for i in 0..TARGET * 10 {
        let config = net::Config { listen: Vec::new(), mdns: false, target_peers: 1, ..net::Config::default() };
        flood.push(net::spawn(&numbered_key(10_000 + i), config, &mut net::Registry::default()).unwrap());
    }
    let most = Arc::new(AtomicUsize::new(0));
    let storming = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (most, storming, hub) = (Arc::clone(&most), Arc::clone(&storming), hub.node.clone());
        tokio::spawn(async move {
            while storming.load(Ordering::Relaxed) {
                let now: usize = hub.net().peers().await.unwrap().iter().map(|p| p.addresses.len()).sum();
                most.fetch_max(now, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let dials = flood.iter().map(|(handle, _)| {
        let addr = hub_addr.clone();
        async move { tokio::time::timeout(WAIT, handle.dial(addr)).await.is_ok_and(|dialled| dialled.is_ok()) }
    });
    // A dialler may see its connection open before the hub refuses it, so what counts is the
    // hub's side.
    futures::future::join_all(dials).await;
    let after = connections(&hub).await;
    storming.store(false, Ordering::Relaxed);
    watcher.await.unwrap();

    let ceiling = (f64::from(TARGET) * 1.1) as usize;
    let most = most.load(Ordering::Relaxed).max(after);
    assert!(most <= ceiling, "the hub held {most} connections during the storm, above {ceiling}");
    let flooders: std::collections::HashSet<_> = flood.iter().map(|(handle, _)| handle.local_peer_id()).collect();
    let admitted = hub.net().peers().await.unwrap().iter().filter(|p| flooders.contains(&p.peer_id)).count();
    assert!(admitted > 0, "the hub admitted nobody: it should fill up to its ceiling, not refuse all");
    assert!(admitted <= ceiling - spokes.len(), "{admitted} flooders are connected to the hub");

    // The hub still serves its mesh: a listing from one spoke reaches the other two.
    let body = Body::Crystal(listing("after-the-storm"));
    let id = content_id(&body).unwrap();
    spokes[0].publish(&body).await.unwrap();
    eventually(WAIT, "the listing to reach the hub and every spoke", async || {
        everyone.iter().all(|node| node.has_skill(&id))
    })
    .await
    .unwrap();
    assert!(connections(&hub).await <= ceiling);
    drop(flood);
    for node in spokes {
        node.stop().await;
    }
    hub.stop().await;
}
