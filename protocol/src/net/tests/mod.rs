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

mod anonymous;
mod manager;

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

#[test]
fn spawning_outside_a_runtime_is_an_error() {
    let key = Keypair::from_seed([121; 32]);
    let result = spawn(&key, config(TCP), &mut Registry::default());
    assert!(matches!(result, Err(Error::NoRuntime)), "{result:?}");
}
