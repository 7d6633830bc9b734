//! Swarms in one process, on loopback, with fast heartbeats and a timeout on every wait.

use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAuthenticity, PublishError, ValidationMode};
use libp2p::multiaddr::Protocol;
use libp2p::swarm::SwarmEvent;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep, timeout};

use super::*;
use crate::body::{Body, Report, ReportEvent};
use crate::trust::TrustList;
use crate::validate::{self, Reason, TrustView, Verdict};
use crate::{ContentId, Envelope, Keypair, Kind};

/// The longest any single wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

/// How long a message that should not arrive is waited for: ten heartbeats, so both mesh
/// forwarding and gossip would have delivered it.
const SILENCE: Duration = Duration::from_secs(1);

/// The gossipsub heartbeat of every node and bare peer in these tests.
const HEARTBEAT: Duration = Duration::from_millis(100);

/// A time inside the freshness window of every envelope [`envelope`] makes.
const NOW: crate::UnixMillis = 1_700_000_000_000 + 1_000;

const TCP: &str = "/ip4/127.0.0.1/tcp/0";
const QUIC: &str = "/ip4/127.0.0.1/udp/0/quic-v1";

struct Node {
    key: Keypair,
    handle: Handle,
    events: mpsc::Receiver<Event>,
    /// A listen address, ending in /p2p/<peer id>.
    addr: Multiaddr,
}

fn config(listen: &str) -> Config {
    Config { listen: vec![listen.parse().unwrap()], mdns: false, heartbeat: HEARTBEAT, ..Config::default() }
}

/// Starts a node and waits until it listens.
async fn start(seed: u8, config: Config) -> Node {
    let key = Keypair::from_seed([seed; 32]);
    let mut registry = Registry::default();
    let (handle, mut events) = spawn(&key, config, &mut registry).unwrap();
    let addr = timeout(WAIT, async {
        loop {
            match events.recv().await {
                Some(Event::NewListenAddr(addr)) => break addr,
                Some(_) => continue,
                None => panic!("event channel closed before the node listened"),
            }
        }
    })
    .await
    .expect("node did not start listening");
    let addr = addr.with(Protocol::P2p(key.peer_id()));
    Node { key, handle, events, addr }
}

/// A valid execution-report envelope signed by `key`; `n` makes its content id unique.
fn envelope(key: &Keypair, n: u8) -> Vec<u8> {
    let body = Body::Report(Report {
        issued_at: 1_700_000_000_000 + u64::from(n),
        reporter: key.public(),
        content_id: ContentId::of(&[n]),
        event: ReportEvent::Execution { success: true, reward: 0.5 },
    });
    Envelope::seal(key, Kind::Report, &body.encode().unwrap())
}

/// The next gossip message a node receives, skipping other events.
async fn next_message(events: &mut mpsc::Receiver<Event>) -> (MessageId, PeerId, Option<PeerId>, Vec<u8>) {
    loop {
        match events.recv().await {
            Some(Event::Message { id, propagation_source, source, topic, data }) => {
                assert_eq!(topic, crate::topic::REPORTS);
                break (id, propagation_source, source, data);
            }
            Some(_) => continue,
            None => panic!("event channel closed"),
        }
    }
}

async fn receive(node: &mut Node) -> (MessageId, PeerId, Option<PeerId>, Vec<u8>) {
    timeout(WAIT, next_message(&mut node.events)).await.expect("no message arrived")
}

/// Publishes once some peer has subscribed (subscriptions travel after the connection opens).
async fn publish_when_subscribed(node: &Node, data: Vec<u8>) -> MessageId {
    timeout(WAIT, async {
        loop {
            match node.handle.publish(crate::topic::REPORTS, data.clone()).await {
                Ok(id) => break id,
                Err(Error::NoPeers) => sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("publish failed: {e}"),
            }
        }
    })
    .await
    .expect("no peer ever subscribed")
}

async fn connect(from: &Node, to: &Node) {
    timeout(WAIT, from.handle.dial(to.addr.clone())).await.expect("dial hung").unwrap();
}

/// Three nodes in a line, A - B - C, with C in B's mesh. A and C may hold one connection only, so
/// Kademlia can never introduce them to each other: whatever reaches C came through B.
async fn line(seeds: [u8; 3]) -> (Node, Node, Node) {
    let single = |listen| Config { max_established: 1, ..config(listen) };
    let a = start(seeds[0], single(TCP)).await;
    let b = start(seeds[1], config(TCP)).await;
    let c = start(seeds[2], single(TCP)).await;
    connect(&a, &b).await;
    connect(&c, &b).await;
    // B forwards along its mesh only, and gossip skips mesh peers: a message forwarded just
    // before C is grafted would never reach C. So wait for the graft.
    let c_id = c.key.peer_id();
    timeout(WAIT, async {
        while !b.handle.mesh_peers(crate::topic::REPORTS).await.unwrap().contains(&c_id) {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("C never joined B's mesh");
    (a, b, c)
}

/// A publishes a fresh message, B gives its verdict; returns the id.
async fn publish_through_b(a: &Node, b: &mut Node, n: u8, verdict: Acceptance) -> MessageId {
    let id = publish_when_subscribed(a, envelope(&a.key, n)).await;
    let (got, from, _, _) = receive(b).await;
    assert_eq!((&got, from), (&id, a.key.peer_id()));
    b.handle.report(got, from, verdict).await.unwrap();
    id
}

/// Proves B forwards to C at all, so a later silence means something.
async fn prove_b_forwards_to_c(a: &Node, b: &mut Node, c: &mut Node) {
    let id = publish_through_b(a, b, 0, Acceptance::Accept).await;
    let (got, _, _, _) = receive(c).await;
    assert_eq!(got, id);
}

#[tokio::test(flavor = "multi_thread")]
async fn handle_peer_id_is_the_key_peer_id() {
    let node = start(1, config(TCP)).await;
    assert_eq!(node.handle.local_peer_id(), node.key.peer_id());
}

#[tokio::test(flavor = "multi_thread")]
async fn accepted_message_is_forwarded_along_the_line() {
    let (a, mut b, mut c) = line([11, 12, 13]).await;
    let data = envelope(&a.key, 1);
    let id = publish_when_subscribed(&a, data.clone()).await;

    let (got, from, _, _) = receive(&mut b).await;
    assert_eq!(got, id);
    b.handle.report(got, from, Acceptance::Accept).await.unwrap();

    let (got, from, source, received) = receive(&mut c).await;
    assert_eq!(got, id);
    assert_eq!(from, b.key.peer_id(), "C must hear it from B");
    assert_eq!(source, Some(a.key.peer_id()), "the author stays A, the envelope's signer");
    assert_eq!(received, data);
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_message_is_not_forwarded() {
    let (a, mut b, mut c) = line([21, 22, 23]).await;
    prove_b_forwards_to_c(&a, &mut b, &mut c).await;

    publish_through_b(&a, &mut b, 1, Acceptance::Reject).await;
    let arrived = timeout(SILENCE, next_message(&mut c.events)).await;
    assert!(arrived.is_err(), "C received a message B rejected: {arrived:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ignored_message_is_not_forwarded() {
    let (a, mut b, mut c) = line([31, 32, 33]).await;
    prove_b_forwards_to_c(&a, &mut b, &mut c).await;

    publish_through_b(&a, &mut b, 1, Acceptance::Ignore).await;
    let arrived = timeout(SILENCE, next_message(&mut c.events)).await;
    assert!(arrived.is_err(), "C received a message B ignored: {arrived:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rejecting_a_message_drops_its_sender_score_below_zero() {
    let a = start(41, config(TCP)).await;
    let mut b = start(42, config(TCP)).await;
    connect(&a, &b).await;
    let before = b.handle.peer_score(a.key.peer_id()).await.unwrap().unwrap();
    assert!(before >= 0.0, "a fresh peer starts at {before}");

    publish_through_b(&a, &mut b, 1, Acceptance::Reject).await;
    let after = b.handle.peer_score(a.key.peer_id()).await.unwrap().unwrap();
    assert!(after < 0.0, "score after a rejected message is {after}");
}

#[tokio::test(flavor = "multi_thread")]
async fn quic_nodes_exchange_a_message() {
    let a = start(51, config(QUIC)).await;
    let mut b = start(52, config(QUIC)).await;
    assert!(a.addr.iter().any(|p| p == Protocol::QuicV1), "{}", a.addr);
    connect(&b, &a).await;

    let data = envelope(&a.key, 1);
    let id = publish_when_subscribed(&a, data.clone()).await;
    let (got, from, _, received) = receive(&mut b).await;
    assert_eq!((got, from, received), (id, a.key.peer_id(), data));
}

#[tokio::test(flavor = "multi_thread")]
async fn publishing_without_peers_is_no_peers() {
    let a = start(61, config(TCP)).await;
    let result = a.handle.publish(crate::topic::REPORTS, envelope(&a.key, 1)).await;
    assert!(matches!(result, Err(Error::NoPeers)), "{result:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn publishing_on_a_foreign_topic_is_refused() {
    let a = start(62, config(TCP)).await;
    let result = a.handle.publish("other/topic/1", envelope(&a.key, 1)).await;
    assert!(matches!(result, Err(Error::UnknownTopic(_))), "{result:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_ends_the_task() {
    let mut a = start(71, config(TCP)).await;
    timeout(WAIT, a.handle.shutdown()).await.expect("shutdown hung");

    assert!(matches!(a.handle.peers().await, Err(Error::Closed)));
    let result = a.handle.publish(crate::topic::REPORTS, envelope(&a.key, 1)).await;
    assert!(matches!(result, Err(Error::Closed)), "{result:?}");
    // The task dropped its event sender: the stream ends once drained.
    timeout(WAIT, async { while a.events.recv().await.is_some() {} }).await.expect("event channel still open");
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_closes_connections() {
    let a = start(72, config(TCP)).await;
    let mut b = start(73, config(TCP)).await;
    connect(&a, &b).await;
    timeout(WAIT, a.handle.shutdown()).await.expect("shutdown hung");

    timeout(WAIT, async {
        loop {
            match b.events.recv().await {
                Some(Event::PeerDisconnected(peer)) if peer == a.key.peer_id() => break,
                Some(_) => continue,
                None => panic!("event channel closed"),
            }
        }
    })
    .await
    .expect("B never saw A leave");
}

#[tokio::test(flavor = "multi_thread")]
async fn connected_peers_are_listed_with_scores_and_addresses() {
    let a = start(81, config(TCP)).await;
    let b = start(82, config(TCP)).await;
    connect(&a, &b).await;
    let peers = a.handle.peers().await.unwrap();
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!(peers[0].peer_id, b.key.peer_id());
    assert!(peers[0].score.is_some());
    assert!(!peers[0].addresses.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn dialling_a_closed_port_fails() {
    let a = start(91, config(TCP)).await;
    let b = start(92, config(TCP)).await;
    let b_addr = b.addr.clone();
    b.handle.shutdown().await;
    let result = timeout(WAIT, a.handle.dial(b_addr)).await.expect("dial hung");
    assert!(matches!(result, Err(Error::Dial(_))), "{result:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_address_must_name_its_peer() {
    let key = Keypair::from_seed([101; 32]);
    let config = Config { bootstrap: vec![TCP.parse().unwrap()], ..config(TCP) };
    let result = spawn(&key, config, &mut Registry::default());
    assert!(matches!(result, Err(Error::Bootstrap(_))), "{result:?}");
}

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

#[test]
fn spawning_outside_a_runtime_is_an_error() {
    let key = Keypair::from_seed([121; 32]);
    let result = spawn(&key, config(TCP), &mut Registry::default());
    assert!(matches!(result, Err(Error::NoRuntime)), "{result:?}");
}

// Anonymous gossip: what goes on the wire, who is still heard, and what still refuses a forgery.

/// What a bare peer is told to do.
enum BareCommand {
    Dial(Multiaddr),
    Publish(Vec<u8>, oneshot::Sender<Result<MessageId, PublishError>>),
    Score(PeerId, oneshot::Sender<Option<f64>>),
}

/// A bare gossipsub peer on the reports topic, not a druse node: another implementation, or a
/// druse node of an earlier release (`Signed` with `ValidationMode::Strict`). It has no
/// validator, so it forwards whatever its gossipsub takes, and it hands on every message its
/// gossipsub delivers. It scores peers with druse's parameters.
struct Bare {
    key: Keypair,
    commands: mpsc::Sender<BareCommand>,
    messages: mpsc::Receiver<gossipsub::Message>,
    _task: TaskGuard,
}

impl Bare {
    fn start(seed: u8, authenticity: fn(&Keypair) -> MessageAuthenticity, mode: ValidationMode) -> Self {
        let key = Keypair::from_seed([seed; 32]);
        let config = gossipsub::ConfigBuilder::default()
            .validation_mode(mode)
            .message_id_fn(behaviour::message_id)
            .heartbeat_interval(HEARTBEAT)
            .heartbeat_initial_delay(HEARTBEAT)
            .build()
            .unwrap();
        let mut gossipsub: gossipsub::Behaviour = gossipsub::Behaviour::new(authenticity(&key), config).unwrap();
        gossipsub.with_peer_score(behaviour::score_params(false), behaviour::score_thresholds()).unwrap();
        gossipsub.subscribe(&IdentTopic::new(crate::topic::REPORTS)).unwrap();
        let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key.to_libp2p())
            .with_tokio()
            .with_tcp(libp2p::tcp::Config::default(), libp2p::noise::Config::new, libp2p::yamux::Config::default)
            .unwrap()
            .with_behaviour(|_| gossipsub)
            .unwrap()
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
            .build();
        let (command_tx, mut commands) = mpsc::channel(16);
        let (message_tx, messages) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    command = commands.recv() => match command {
                        Some(BareCommand::Dial(addr)) => swarm.dial(addr).unwrap(),
                        Some(BareCommand::Publish(data, reply)) => {
                            let topic = IdentTopic::new(crate::topic::REPORTS);
                            let _ = reply.send(swarm.behaviour_mut().publish(topic, data));
                        }
                        Some(BareCommand::Score(peer, reply)) => {
                            let _ = reply.send(swarm.behaviour().peer_score(&peer));
                        }
                        None => break,
                    },
                    event = swarm.select_next_some() => {
                        if let SwarmEvent::Behaviour(gossipsub::Event::Message { message, .. }) = event {
                            let _ = message_tx.try_send(message);
                        }
                    }
                }
            }
        });
        Self { key, commands: command_tx, messages, _task: TaskGuard(task) }
    }

    /// A druse node of an earlier release: it signs what it publishes and requires signatures.
    fn older_druse(seed: u8) -> Self {
        Self::start(seed, |key| MessageAuthenticity::Signed(key.to_libp2p()), ValidationMode::Strict)
    }

    fn peer_id(&self) -> PeerId {
        self.key.peer_id()
    }

    async fn dial(&self, node: &Node) {
        self.commands.send(BareCommand::Dial(node.addr.clone())).await.unwrap();
    }

    async fn publish_when_subscribed(&self, data: Vec<u8>) -> MessageId {
        timeout(WAIT, async {
            loop {
                let (reply, answer) = oneshot::channel();
                self.commands.send(BareCommand::Publish(data.clone(), reply)).await.unwrap();
                match answer.await.unwrap() {
                    Ok(id) => break id,
                    Err(PublishError::NoPeersSubscribedToTopic) => sleep(Duration::from_millis(20)).await,
                    Err(e) => panic!("bare publish failed: {e}"),
                }
            }
        })
        .await
        .expect("no peer ever subscribed")
    }

    async fn score(&self, peer: PeerId) -> f64 {
        let (reply, answer) = oneshot::channel();
        self.commands.send(BareCommand::Score(peer, reply)).await.unwrap();
        answer.await.unwrap().expect("scoring is on")
    }

    async fn receive(&mut self) -> gossipsub::Message {
        timeout(WAIT, self.messages.recv()).await.expect("no message arrived").expect("bare peer stopped")
    }
}

/// Waits until `peer` is in `node`'s mesh for the reports topic (forwarding uses the mesh).
async fn wait_for_mesh(node: &Node, peer: PeerId) {
    timeout(WAIT, async {
        while !node.handle.mesh_peers(crate::topic::REPORTS).await.unwrap().contains(&peer) {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the peer never joined the mesh");
}

/// The application validator, as a node runs it on a gossiped message.
fn judge(data: &[u8], source: Option<PeerId>) -> Verdict {
    let source = source.expect("the event names no author");
    let mut view = TrustView::new(validate::Config::default(), TrustList::default());
    validate::validate(data, &source, crate::topic::REPORTS, NOW, &mut view)
}

#[tokio::test(flavor = "multi_thread")]
async fn our_messages_carry_no_author_seqno_or_signature() {
    let a = start(131, config(TCP)).await;
    // Gossipsub's Anonymous validation refuses any message that carries an author, a sequence
    // number or a signature: that it delivers ours proves they carry none.
    let mut bare = Bare::start(132, |_| MessageAuthenticity::Anonymous, ValidationMode::Anonymous);
    bare.dial(&a).await;
    let data = envelope(&a.key, 1);
    let id = publish_when_subscribed(&a, data.clone()).await;

    let message = bare.receive().await;
    assert_eq!(message.source, None, "our message names a gossipsub author");
    assert_eq!(message.sequence_number, None, "our message carries a sequence number");
    assert_eq!(message.data, data);
    assert_eq!(behaviour::message_id(&message), id);
    assert!(bare.score(a.key.peer_id()).await >= 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signing_peer_is_heard_and_its_envelope_validated() {
    let mut b = start(141, config(TCP)).await;
    let signer = Bare::older_druse(142);
    signer.dial(&b).await;
    let data = envelope(&signer.key, 1);
    let id = signer.publish_when_subscribed(data.clone()).await;

    let (got, from, source, received) = receive(&mut b).await;
    assert_eq!((&got, from, &received), (&id, signer.peer_id(), &data));
    assert_eq!(source, Some(signer.peer_id()), "the author is the envelope's signer");
    let verdict = judge(&received, source);
    assert!(verdict.is_accept(), "{verdict:?}");
    b.handle.report(got, from, Acceptance::Accept).await.unwrap();
    let score = b.handle.peer_score(signer.peer_id()).await.unwrap().unwrap();
    assert!(score >= 0.0, "a signing peer was penalised: {score}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_message_is_forwarded_intact_to_a_peer_that_requires_signatures() {
    // S (signs) - B (this release) - C (an older release: requires and verifies signatures).
    let mut b = start(151, config(TCP)).await;
    let signer = Bare::older_druse(152);
    let mut strict = Bare::older_druse(153);
    signer.dial(&b).await;
    strict.dial(&b).await;
    wait_for_mesh(&b, strict.peer_id()).await;

    let data = envelope(&signer.key, 1);
    let id = signer.publish_when_subscribed(data.clone()).await;
    let (got, from, _, _) = receive(&mut b).await;
    assert_eq!(got, id);
    b.handle.report(got, from, Acceptance::Accept).await.unwrap();

    // C's Strict mode verified the signature S made: B kept author, seqno and signature.
    let message = strict.receive().await;
    assert_eq!((message.source, message.data), (Some(signer.peer_id()), data));
    assert!(message.sequence_number.is_some());
    assert!(strict.score(b.key.peer_id()).await >= 0.0, "C penalised B for forwarding");
}

/// The mixed-version swarm, stated as a test: a node of an earlier release (`Strict`) refuses
/// what this release publishes, unsigned, and penalises the peer that sent it.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_strict_node_refuses_our_messages_and_penalises_us() {
    let a = start(161, config(TCP)).await;
    let mut older = Bare::older_druse(162);
    older.dial(&a).await;
    publish_when_subscribed(&a, envelope(&a.key, 1)).await;

    let arrived = timeout(SILENCE, older.messages.recv()).await;
    assert!(arrived.is_err(), "a Strict node took an unsigned message: {arrived:?}");
    let score = older.score(a.key.peer_id()).await;
    assert!(score < 0.0, "the Strict node did not penalise us: {score}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_copies_of_one_envelope_are_one_message() {
    let a = start(171, config(TCP)).await;
    let mut b = start(172, config(TCP)).await;
    let signer = Bare::older_druse(173);
    connect(&a, &b).await;
    signer.dial(&b).await;

    // A publishes an envelope unsigned; S publishes the same envelope again, signed, with its
    // own author and seqno. B holds the first until its verdict, and drops the second as a
    // duplicate: the id is the topic and the envelope, nothing else.
    let data = envelope(&a.key, 1);
    let id = publish_when_subscribed(&a, data.clone()).await;
    let (got, from, _, _) = receive(&mut b).await;
    assert_eq!(got, id);
    assert_eq!(signer.publish_when_subscribed(data.clone()).await, id, "the signed copy has another id");
    let again = timeout(SILENCE, next_message(&mut b.events)).await;
    assert!(again.is_err(), "B was handed the second copy: {again:?}");
    let result = a.handle.publish(crate::topic::REPORTS, data).await;
    assert!(matches!(result, Err(Error::Duplicate)), "{result:?}");

    b.handle.report(got, from, Acceptance::Accept).await.unwrap();
    let score = b.handle.peer_score(signer.peer_id()).await.unwrap().unwrap();
    assert!(score >= 0.0, "the second copy cost S: {score}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_envelope_is_refused_by_the_validator_and_its_sender_penalised() {
    let a = start(181, config(TCP)).await;
    let mut b = start(182, config(TCP)).await;
    connect(&a, &b).await;
    // A signs a report, then names another key (the victim's) as signer and reporter: the
    // signature no longer verifies for the signer the envelope names.
    let victim = Keypair::from_seed([183; 32]);
    let genuine = envelope(&a.key, 1);
    let (from_key, to_key) = (a.key.public().to_bytes(), victim.public().to_bytes());
    let mut forged = genuine.clone();
    for at in 0..=forged.len() - from_key.len() {
        if forged[at..at + from_key.len()] == from_key {
            forged[at..at + to_key.len()].copy_from_slice(&to_key);
        }
    }
    assert!(forged != genuine && Envelope::open(&forged).is_err());

    let id = publish_when_subscribed(&a, forged.clone()).await;
    let (got, from, source, data) = receive(&mut b).await;
    assert_eq!((&got, from, &data), (&id, a.key.peer_id(), &forged));
    assert_eq!(source, Some(victim.peer_id()), "the event names the signer the envelope claims");
    let verdict = judge(&data, source);
    assert!(matches!(verdict, Verdict::Reject(Reason::BadSignature)), "{verdict:?}");

    // The penalty lands on the peer that sent it, not on the author it named.
    b.handle.report(got, from, Acceptance::Reject).await.unwrap();
    let score = b.handle.peer_score(a.key.peer_id()).await.unwrap().unwrap();
    assert!(score < 0.0, "the forger's score is {score}");
}

#[test]
fn the_author_is_read_from_the_envelope() {
    let key = Keypair::from_seed([191; 32]);
    assert_eq!(actor::envelope_author(&envelope(&key, 1)), Some(key.peer_id()));
    assert_eq!(actor::envelope_author(b"not an envelope"), None);
    assert_eq!(actor::envelope_author(&[]), None);
}

/// Per-message CPU of gossipsub's own signatures, which anonymous gossip no longer spends,
/// beside the envelope check that remains. Prints figures; asserts nothing about time.
/// `cargo test -p druse-protocol --release -- --ignored --nocapture gossipsub_signature_cost`
#[test]
#[ignore = "a measurement: run it by name with --release -- --ignored --nocapture"]
fn gossipsub_signature_cost() {
    const ROUNDS: u32 = 5_000;
    let key = Keypair::from_seed([201; 32]);
    let libp2p_key = key.to_libp2p();
    let peer = key.peer_id();
    // A 1 KiB body in its envelope, then the bytes gossipsub signs for it: the prefix and the
    // protobuf message without signature (author, data, seqno, topic), give or take a few bytes
    // of framing.
    let data = Envelope::seal(&key, Kind::Crystal, &[0x5a; 1024]);
    let mut signed = b"libp2p-pubsub:".to_vec();
    signed.extend_from_slice(&peer.to_bytes());
    signed.extend_from_slice(&data);
    signed.extend_from_slice(&7u64.to_be_bytes());
    signed.extend_from_slice(crate::topic::CRYSTALS.as_bytes());
    let signature = libp2p_key.sign(&signed).unwrap();

    let time = |what: &str, f: &mut dyn FnMut()| {
        for _ in 0..ROUNDS / 10 {
            f();
        }
        let started = Instant::now();
        for _ in 0..ROUNDS {
            f();
        }
        let each = started.elapsed().as_secs_f64() / f64::from(ROUNDS);
        println!("{what:<58} {:>8.2} µs  {:>9.0} per core-second", each * 1e6, 1.0 / each);
        each
    };
    println!("gossip message of {} bytes (envelope of a 1 KiB body), {ROUNDS} rounds each:", data.len());
    let sign = time("publish: gossipsub sign (libp2p-identity ed25519)", &mut || {
        std::hint::black_box(libp2p_key.sign(std::hint::black_box(&signed)).unwrap());
    });
    // What the codec does per signed message in Strict (and Permissive, when signed): the
    // author's PeerId parsed, its key decoded from it (a curve point decompressed), the
    // signature verified.
    let verify = time("receive: gossipsub verify (PeerId -> key decode -> verify)", &mut || {
        let source = PeerId::from_bytes(&peer.to_bytes()).unwrap();
        let public = libp2p::identity::PublicKey::try_decode_protobuf(&source.to_bytes()[2..]).unwrap();
        assert!(public.verify(std::hint::black_box(&signed), &signature));
    });
    let open = time("receive: envelope open (decode, canonical, verify_strict)", &mut || {
        std::hint::black_box(Envelope::open(std::hint::black_box(&data)).unwrap());
    });
    let author = time("receive: envelope author read by the net layer", &mut || {
        std::hint::black_box(actor::envelope_author(std::hint::black_box(&data)).unwrap());
    });
    println!(
        "signature work per received message: signed gossip {:.2} µs, anonymous {:.2} µs ({:.0}% less)",
        (verify + open) * 1e6,
        (open + author) * 1e6,
        100.0 * (1.0 - (open + author) / (verify + open)),
    );
    println!("and per published message: {:.2} µs of gossipsub signing saved", sign * 1e6);
}
