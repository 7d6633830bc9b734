//! The peer manager and the gate on real swarms: bootstrap dials, what a node dials itself,
//! a full peer's refusal, and trimming.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_peers_are_dialled_at_start() {
    let a = start(111, config(TCP)).await;
    let config = Config { bootstrap: vec![a.addr.clone()], ..config(TCP) };
    let b = start(112, config).await;
    // Polled, not awaited as an event: the connection may open before `start` returns.
    timeout(WAIT, async {
        while !b.handle.peers().await.unwrap().iter().any(|p| p.peer_id == a.key.peer_id()) {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("B never connected to its bootstrap peer");
}

/// A node dials a third of its target itself and leaves the rest of its slots to the peers
/// that dial it: knowing eight peers with room, a node whose target is nine dials three (its
/// bootstrap peer and two Kademlia found) and no more, so the peers that come later find room.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_dials_a_third_of_its_target_and_leaves_the_rest_to_inbound_peers() {
    const TARGET: u32 = 9;
    let dialled = peers::dial_at_most(TARGET as usize);
    let hub = start(241, config(TCP)).await;
    let mut spokes = Vec::new();
    for seed in 242..250 {
        // A target of one: each spoke dials the hub and nobody else, and has room for two more.
        let spoke = start(seed, Config { target_peers: 1, ..config(TCP) }).await;
        connect(&spoke, &hub).await;
        spokes.push(spoke);
    }
    let node = start(250, Config { target_peers: TARGET, bootstrap: vec![hub.addr.clone()], ..config(TCP) }).await;
    timeout(WAIT, async {
        while node.handle.peers().await.unwrap().len() < dialled {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the node never dialled the peers it may");
    // Several peer-manager ticks later it still holds what it dialled: six more spokes had room.
    sleep(peers::TICK * 3).await;
    let held = node.handle.peers().await.unwrap();
    assert_eq!(held.len(), dialled, "{held:?}");
    assert!(held.iter().any(|p| p.peer_id == hub.key.peer_id()), "the bootstrap peer was dropped");
}

/// A bootstrap peer at its ceiling refuses a newcomer, who knows nobody else: once the peer has
/// room again the newcomer, still alone, dials it again by itself and gets in.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_refused_by_a_full_bootstrap_peer_joins_once_it_has_room() {
    // Target 1, ceiling 3 connections; a grace of an hour, so the hub never trims and only
    // leaving spokes make room.
    let hub = start(231, Config { target_peers: 1, peer_grace: Duration::from_secs(3600), ..config(TCP) }).await;
    let mut spokes = Vec::new();
    for seed in 232..235 {
        let spoke = start(seed, config(TCP)).await;
        // The third may find the hub full already (a spoke can hold two connections to it).
        let _ = timeout(WAIT, spoke.handle.dial(hub.addr.clone())).await.expect("dial hung");
        spokes.push(spoke);
    }
    assert!(hub.handle.peers().await.unwrap().len() >= 2, "the spokes did not fill the hub");
    let newcomer = start(235, Config { bootstrap: vec![hub.addr.clone()], ..config(TCP) }).await;
    // Refused: a second later it is still alone, past its first dial.
    sleep(SILENCE).await;
    assert!(newcomer.handle.peers().await.unwrap().is_empty(), "a full hub took a newcomer");

    for spoke in spokes {
        spoke.handle.shutdown().await;
    }
    timeout(WAIT, async {
        while !newcomer.handle.peers().await.unwrap().iter().any(|p| p.peer_id == hub.key.peer_id()) {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the newcomer never joined the hub once it had room");
}

/// Reports `Accept` for every gossip message `node` receives, so it forwards them, and sends
/// `index` to `heard` for each.
fn accept_everything(mut node: Node, index: usize, heard: mpsc::Sender<usize>) -> (Handle, TaskGuard) {
    let handle = node.handle.clone();
    let task = tokio::spawn(async move {
        while let Some(event) = node.events.recv().await {
            if let Event::Message { id, propagation_source, .. } = event {
                let _ = node.handle.report(id, propagation_source, Acceptance::Accept).await;
                let _ = heard.send(index).await;
            }
        }
    });
    (handle, TaskGuard(task))
}

/// Eight nodes that all dial each other, each keeping four: every node trims back to its high
/// water mark or under it (closing and redialling as the others trim too), and messages
/// published afterwards still reach every node.
#[tokio::test(flavor = "multi_thread")]
async fn crowded_nodes_trim_to_their_target_and_the_swarm_still_delivers() {
    const TARGET: u32 = 4;
    let kept = || Config { target_peers: TARGET, peer_grace: Duration::from_millis(300), ..config(TCP) };
    let mut nodes = Vec::new();
    for seed in 210..218 {
        nodes.push(start(seed, kept()).await);
    }
    // A node at its ceiling refuses the later dials (see `gate`); node 0's own seven dials
    // crowd it past its high water mark all the same.
    for i in 0..nodes.len() {
        for j in i + 1..nodes.len() {
            let _ = timeout(WAIT, nodes[i].handle.dial(nodes[j].addr.clone())).await.expect("dial hung");
        }
    }
    let author = nodes[0].key.clone();
    let ids: Vec<PeerId> = nodes.iter().map(|node| node.key.peer_id()).collect();
    let (heard_tx, mut heard) = mpsc::channel(64);
    let running: Vec<(Handle, TaskGuard)> =
        nodes.into_iter().enumerate().map(|(i, node)| accept_everything(node, i, heard_tx.clone())).collect();

    // Every old node trims the same newest peers, so the newest nodes may hold only each other
    // for a moment; below their target they dial the others back, and a node those dials take
    // to its high water mark trims again. The test waits for one connected swarm under the high
    // water mark, then publishes a message every few heartbeats until each node has heard one:
    // gossipsub hands a message only to the nodes connected when it goes out, so one published
    // while the churn has cut a node off never reaches it.
    let high_water = peers::high_water(TARGET as usize);
    let counts = timeout(WAIT * 3, async {
        loop {
            let mut links = Vec::new();
            for (handle, _) in &running {
                let peers = handle.peers().await.unwrap();
                links.push(peers.iter().filter_map(|p| ids.iter().position(|id| *id == p.peer_id)).collect::<Vec<_>>());
            }
            let counts: Vec<usize> = links.iter().map(Vec::len).collect();
            if counts.iter().all(|&n| (1..=high_water).contains(&n)) && reachable_from_first(&links) == links.len() {
                break counts;
            }
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the nodes never came back under their high water mark in one connected swarm");
    assert!(counts.iter().any(|&n| n < 7), "nothing was trimmed: {counts:?}");

    let (publisher, _) = &running[0];
    let mut reached = std::collections::BTreeSet::new();
    let mut published = 0;
    timeout(WAIT, async {
        let mut n = 0u8;
        while reached.len() < running.len() - 1 {
            // A fresh message each time (at most 10 s over 300 ms: well under 255 of them).
            n = n.saturating_add(1);
            match publisher.publish(crate::topic::REPORTS, envelope(&author, n)).await {
                Ok(_) => published += 1,
                Err(Error::NoPeers) => {}
                Err(e) => panic!("publish failed: {e}"),
            }
            let next = sleep(HEARTBEAT * 3);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    index = heard.recv() => { reached.insert(index.expect("every node stopped")); }
                    () = &mut next => break,
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{published} messages reached only {reached:?} of nodes 1-7 (peer counts {counts:?})"));
}

/// How many nodes node 0 reaches through the connections `links` lists (node i's peers by
/// index), counting a connection either node lists.
fn reachable_from_first(links: &[Vec<usize>]) -> usize {
    let mut seen = vec![false; links.len()];
    let mut stack = vec![0];
    seen[0] = true;
    while let Some(node) = stack.pop() {
        for next in (0..links.len()).filter(|&other| links[node].contains(&other) || links[other].contains(&node)) {
            if !seen[next] {
                seen[next] = true;
                stack.push(next);
            }
        }
    }
    seen.iter().filter(|&&s| s).count()
}
