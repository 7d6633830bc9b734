#![allow(clippy::unwrap_used)]
//! A swarm whose nodes keep few peers settles within its ceiling: each node bootstraps
//! Kademlia from a few others, and the lookups walk the whole swarm, but the dials Kademlia
//! makes on its own are refused once a node has its target, so no node is taken far past its
//! ceiling for the peer manager to trim (and Kademlia to dial again).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use druse_protocol::net;
use druse_tests::swarm::numbered_key;
use druse_tests::{WAIT, wait_for};

/// Nodes in the swarm.
const NODES: u32 = 30;
/// Each node's peer target: far below the swarm's size, which a Kademlia walk reaches.
const TARGET: u32 = 3;
/// Bootstrap peers each node starts with.
const BOOTSTRAP: usize = 3;

/// Established connections of `handle`, over all its peers.
async fn connections(handle: &net::Handle) -> usize {
    handle.peers().await.map(|peers| peers.iter().map(|p| p.addresses.len()).sum()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_swarm_of_small_targets_settles_within_its_ceiling() {
    druse_tests::init_logging();
    let ceiling = net::peer_high_water(TARGET as usize);
    let mut handles: Vec<net::Handle> = Vec::new();
    let mut addrs = Vec::new();
    let mut _events = Vec::new();
    for i in 0..NODES {
        // The last few started nodes, so every node's Kademlia bootstrap has a way in.
        let bootstrap: Vec<net::Multiaddr> = addrs.iter().rev().take(BOOTSTRAP).cloned().collect();
        let config = net::Config {
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
            bootstrap,
            mdns: false,
            target_peers: TARGET,
            peer_grace: Duration::from_secs(1),
            ..net::Config::default()
        };
        let (handle, events) = net::spawn(&numbered_key(20_000 + i), config, &mut net::Registry::default()).unwrap();
        let addr = wait_for(WAIT, "the node to listen", async || handle.listen_addrs().await.unwrap().first().cloned())
            .await
            .unwrap();
        addrs.push(format!("{addr}/p2p/{}", handle.local_peer_id()).parse::<net::Multiaddr>().unwrap());
        handles.push(handle);
        _events.push(events);
    }
    let handles = Arc::new(handles);

    // The most connections each node held, sampled until the swarm has settled.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (handles, watching) = (Arc::clone(&handles), Arc::clone(&watching));
        tokio::spawn(async move {
            let mut most = vec![0usize; handles.len()];
            while watching.load(Ordering::Relaxed) {
                for (i, handle) in handles.iter().enumerate() {
                    most[i] = most[i].max(connections(handle).await);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };

    // Settled: every node has a peer and is within its ceiling.
    wait_for(WAIT, "every node connected and within its ceiling", async || {
        for handle in handles.iter() {
            let held = connections(handle).await;
            if held == 0 || held > ceiling {
                return None;
            }
        }
        Some(())
    })
    .await
    .unwrap();
    watching.store(false, Ordering::Relaxed);
    let most = watcher.await.unwrap();

    // A node may pass its ceiling only by its own dials in flight, made while below its
    // target (at most the target of them); Kademlia's own walks would take it to most of the
    // swarm.
    let bound = ceiling + TARGET as usize;
    for (i, held) in most.iter().enumerate() {
        assert!(*held <= bound, "node {i} held {held} connections, above {bound} (ceiling {ceiling}, target {TARGET})");
    }
    for handle in handles.iter() {
        assert!(connections(handle).await <= ceiling);
    }
}
