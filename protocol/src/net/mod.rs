//! The libp2p layer: how a druse node joins the swarm and moves envelopes over gossipsub.
//!
//! One task owns the [`libp2p::Swarm`]. Everyone else holds a cheap, cloneable [`Handle`] that
//! sends it a command with a oneshot reply, and reads what the swarm saw from a bounded
//! [`Event`] channel. The task never waits on its consumers: events go out with `try_send`, and
//! what does not fit is counted in `druse_net_events_dropped_total` (a dropped gossip message is
//! reported `Ignore`, so gossipsub neither forwards nor penalises it).
//!
//! Every gossip message is held by gossipsub until the node reports its verdict with
//! [`Handle::report`]: `Accept` forwards it, `Reject` penalises the peer that sent it, and
//! `Ignore` drops it quietly.
//!
//! Gossip is anonymous: gossipsub adds no author, sequence number or signature to what this
//! node publishes, because the envelope inside is already signed by its author and the node's
//! validator checks that signature, so each message costs one signature check, not two.
//! Message ids are derived from the content (the topic and the envelope bytes), so the swarm
//! dedupes one envelope however many peers publish it. Messages that other peers did sign are
//! still taken (and their gossipsub signature checked). The author a node learns of is the
//! envelope's signer; the peer that forwarded a message is what scoring and penalties use.

mod actor;
mod behaviour;
mod gate;
mod peers;
mod start;
#[cfg(test)]
mod tests;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use libp2p::multiaddr::Protocol;
use tokio::sync::{mpsc, oneshot};

/// The node's verdict on a gossip message: `Accept` forwards, `Reject` penalises, `Ignore` drops.
pub use libp2p::gossipsub::MessageAcceptance as Acceptance;
/// Names a gossip message when reporting its verdict: sha256 of the topic, a zero byte and the
/// envelope bytes.
pub use libp2p::gossipsub::MessageId;
/// The metrics registry libp2p records into (prometheus-client's), re-exported so types match.
pub use libp2p::metrics::Registry;
/// Addresses and peer ids, re-exported so the node needs no libp2p dependency of its own.
pub use libp2p::{Multiaddr, PeerId};
pub use peers::high_water as peer_high_water;
pub use start::spawn;

use crate::sync;

/// The mesh degrees a node may be configured with: below 2 a mesh is a line, and past 16 every
/// message is sent to more peers than most nodes hold.
pub const MESH_DEGREES: std::ops::RangeInclusive<usize> = 2..=16;

/// How many commands may wait for the swarm task before callers feel backpressure.
const COMMAND_BUFFER: usize = 256;

/// How a node joins the swarm; `Default` is a working single-machine config.
#[derive(Debug, Clone)]
pub struct Config {
    /// Addresses to listen on.
    pub listen: Vec<Multiaddr>,
    /// Known peers, each ending in `/p2p/<peer id>`: dialled at start and added to Kademlia.
    pub bootstrap: Vec<Multiaddr>,
    /// Whether to find (and dial) peers on the local network with mDNS.
    pub mdns: bool,
    /// The gossipsub heartbeat: how often meshes are repaired and gossip is emitted.
    pub heartbeat: Duration,
    /// At most this many connections to one peer (2 lets a simultaneous dial succeed).
    pub max_established_per_peer: u32,
    /// At most this many connections in total.
    pub max_established: u32,
    /// The peers the node keeps connections to: it trims back to this many once it has a
    /// tenth more (at least two), and while it has fewer dials peers it knows of, up to a
    /// third of this many dialled by itself (see `peers`).
    pub target_peers: u32,
    /// A new connection is never trimmed before it is this old.
    pub peer_grace: Duration,
    /// A connection no protocol uses is closed after this long.
    pub idle_timeout: Duration,
    /// Bound of the event channel; events that do not fit are dropped and counted.
    pub event_buffer: usize,
    /// Whether gossipsub 1.2's IDONTWANT is sent for messages over 1000 bytes: a peer that
    /// receives one tells its other mesh peers not to send it the same.
    pub idontwant: bool,
    /// Gossipsub's mesh degree D: the peers a node forwards each message to, per topic
    /// ([`MESH_DEGREES`]; the rest of the mesh bounds follow from it, see `behaviour`).
    /// Gossipsub's default, 6.
    pub mesh_degree: usize,
    /// Whether gossipsub holds each listing-mesh peer to a delivery quota (P3): a peer that
    /// takes listings and forwards none then falls below zero and loses its mesh slots, but so
    /// does an honest peer whenever listings have been quiet for 30 s. Off by default.
    pub delivery_quota: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: vec![
                Multiaddr::empty().with(Protocol::Ip4(Ipv4Addr::UNSPECIFIED)).with(Protocol::Tcp(4001)),
                Multiaddr::empty()
                    .with(Protocol::Ip4(Ipv4Addr::UNSPECIFIED))
                    .with(Protocol::Udp(4001))
                    .with(Protocol::QuicV1),
            ],
            bootstrap: Vec::new(),
            mdns: true,
            heartbeat: Duration::from_secs(1),
            max_established_per_peer: 2,
            max_established: 128,
            target_peers: 32,
            peer_grace: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(60),
            event_buffer: 1024,
            idontwant: true,
            mesh_degree: 6,
            delivery_quota: false,
        }
    }
}

/// Why the network layer could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The swarm task has ended (after `shutdown`, or because every handle was dropped).
    #[error("the network task has stopped")]
    Closed,
    /// No connected peer is subscribed to the topic: the message is stored locally only.
    #[error("no peer is subscribed to the topic")]
    NoPeers,
    /// This exact content was published recently; gossipsub will not send it twice.
    #[error("this message was already published")]
    Duplicate,
    /// `publish` was asked for a topic that druse does not use.
    #[error("{0:?} is not a druse topic")]
    UnknownTopic(&'static str),
    /// Gossipsub refused the message for another reason (too large, queues full...).
    #[error("publishing failed: {0}")]
    Publish(String),
    /// A sync request failed: the peer did not answer, refused the protocol, or went away.
    #[error("sync with the peer failed: {0}")]
    Sync(String),
    /// The transport or a behaviour could not be built.
    #[error("building the transport failed: {0}")]
    Transport(String),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: Multiaddr, reason: String },
    /// A bootstrap address does not name its peer.
    #[error("bootstrap address {0} does not end in /p2p/<peer id>")]
    Bootstrap(Multiaddr),
    /// A dial failed, or the connection was refused.
    #[error("dialling failed: {0}")]
    Dial(String),
    /// `spawn` was called outside a tokio runtime.
    #[error("the network layer must be started inside a tokio runtime")]
    NoRuntime,
}

/// What the swarm saw, for the node to act on.
#[derive(Debug)]
pub enum Event {
    /// A gossip message awaiting the node's verdict ([`Handle::report`]).
    Message {
        /// The id to report the verdict under (see [`MessageId`]).
        id: MessageId,
        /// The peer that forwarded it to us: the one a `Reject` penalises, and the one
        /// gossipsub scores for it.
        propagation_source: PeerId,
        /// The author: the PeerId of the key the envelope names as its signer, read from the
        /// bytes but not yet verified (the validator checks the envelope's signature). Gossip is
        /// anonymous, so this is not gossipsub's author field, which our messages lack and
        /// other peers' messages may fill with anything. `None` when the bytes are not an
        /// envelope that names a signer (malformed).
        source: Option<PeerId>,
        /// The topic it arrived on.
        topic: String,
        /// The envelope bytes.
        data: Vec<u8>,
    },
    /// The first connection to a peer opened: time to set its application score.
    PeerConnected(PeerId),
    /// The last connection to a peer closed.
    PeerDisconnected(PeerId),
    /// The node can now be reached at this address.
    NewListenAddr(Multiaddr),
    /// A peer asks for part of this node's inventory or some of its envelopes; answer with
    /// [`Handle::answer_sync`] (dropping the channel fails the peer's request).
    SyncRequest {
        /// Who asks.
        peer: PeerId,
        /// What it asks for.
        request: sync::Request,
        /// Where the answer goes.
        channel: SyncChannel,
    },
}

/// The way back to a peer that sent a sync request.
#[derive(Debug)]
pub struct SyncChannel(libp2p::request_response::ResponseChannel<sync::Response>);

/// A connected peer, as the census and `/v1/peers` show it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PeerInfo {
    /// Who it is.
    pub peer_id: PeerId,
    /// Its gossipsub score (negative after invalid messages); `None` if scoring is off.
    pub score: Option<f64>,
    /// The remote addresses of our open connections to it.
    pub addresses: Vec<Multiaddr>,
}

/// What a [`Handle`] asks the swarm task to do; each carries its reply channel.
#[derive(Debug)]
enum Command {
    Publish {
        topic: &'static str,
        data: Vec<u8>,
        reply: oneshot::Sender<Result<MessageId, Error>>,
    },
    /// Nobody waits for a verdict: it is sent and forgotten.
    Report {
        id: MessageId,
        propagation_source: PeerId,
        verdict: Acceptance,
    },
    SetApplicationScore {
        peer: PeerId,
        score: f64,
        reply: oneshot::Sender<()>,
    },
    Peers {
        reply: oneshot::Sender<Vec<PeerInfo>>,
    },
    PeerScore {
        peer: PeerId,
        reply: oneshot::Sender<Option<f64>>,
    },
    ListenAddrs {
        reply: oneshot::Sender<Vec<Multiaddr>>,
    },
    Dial {
        addr: Multiaddr,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Sync {
        peer: PeerId,
        request: sync::Request,
        reply: oneshot::Sender<Result<sync::Response, Error>>,
    },
    AnswerSync {
        channel: SyncChannel,
        response: sync::Response,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
    MeshPeers {
        topic: &'static str,
        reply: oneshot::Sender<Vec<PeerId>>,
    },
}

/// Aborts the swarm task when the last handle goes away, so the task always has an owner.
#[derive(Debug)]
struct TaskGuard(tokio::task::JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The node's way to talk to the swarm task; clone it freely.
#[derive(Clone, Debug)]
pub struct Handle {
    local_peer_id: PeerId,
    commands: mpsc::Sender<Command>,
    _task: Arc<TaskGuard>,
}

impl Handle {
    /// This node's PeerId (the same as `Keypair::peer_id`).
    pub fn local_peer_id(&self) -> PeerId {
        self.local_peer_id
    }

    /// Sends a command and waits for its reply; a stopped task is `Error::Closed`.
    async fn request<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Error> {
        let (reply, response) = oneshot::channel();
        self.commands.send(make(reply)).await.map_err(|_| Error::Closed)?;
        response.await.map_err(|_| Error::Closed)
    }

    /// Publishes envelope bytes on a druse topic. `Error::NoPeers` means nobody could be told
    /// (callers treat the message as stored locally).
    pub async fn publish(&self, topic: &'static str, data: Vec<u8>) -> Result<MessageId, Error> {
        self.request(|reply| Command::Publish { topic, data, reply }).await?
    }

    /// Tells gossipsub the node's verdict on a received message: forward, penalise or drop.
    /// Waits only for room in the swarm task's queue, never for the task to act on it.
    pub async fn report(&self, id: MessageId, propagation_source: PeerId, verdict: Acceptance) -> Result<(), Error> {
        let report = Command::Report { id, propagation_source, verdict };
        self.commands.send(report).await.map_err(|_| Error::Closed)
    }

    /// [`Handle::report`] from a thread outside the async runtime (the node's ingest actor).
    pub fn report_blocking(&self, id: MessageId, propagation_source: PeerId, verdict: Acceptance) -> Result<(), Error> {
        let report = Command::Report { id, propagation_source, verdict };
        self.commands.blocking_send(report).map_err(|_| Error::Closed)
    }

    /// Feeds the node's opinion of a peer into its gossipsub score. The score is weighted by
    /// 10: a reputation in [0, 1] adds up to 10, and -70 graylists a peer whatever else it earned.
    /// Gossipsub keeps it only for peers it knows (connected, or recently so), so set it on
    /// `Event::PeerConnected`.
    pub async fn set_application_score(&self, peer: PeerId, score: f64) -> Result<(), Error> {
        self.request(|reply| Command::SetApplicationScore { peer, score, reply }).await
    }

    /// The peers we are connected to, with their scores and addresses.
    pub async fn peers(&self) -> Result<Vec<PeerInfo>, Error> {
        self.request(|reply| Command::Peers { reply }).await
    }

    /// A peer's gossipsub score (0 for a peer it has never seen); `None` if scoring is off.
    pub async fn peer_score(&self, peer: PeerId) -> Result<Option<f64>, Error> {
        self.request(|reply| Command::PeerScore { peer, reply }).await
    }

    /// The addresses the node listens on right now.
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, Error> {
        self.request(|reply| Command::ListenAddrs { reply }).await
    }

    /// Connects to `addr` (with or without `/p2p/<peer id>`); returns once the connection is up,
    /// or at once if that peer is already connected.
    pub async fn dial(&self, addr: Multiaddr) -> Result<(), Error> {
        self.request(|reply| Command::Dial { addr, reply }).await?
    }

    /// Sends a sync request to a connected peer and waits for its answer.
    pub async fn sync(&self, peer: PeerId, request: sync::Request) -> Result<sync::Response, Error> {
        self.request(|reply| Command::Sync { peer, request, reply }).await?
    }

    /// Answers a peer's sync request; the swarm task sends it without the caller waiting.
    pub async fn answer_sync(&self, channel: SyncChannel, response: sync::Response) -> Result<(), Error> {
        self.commands.send(Command::AnswerSync { channel, response }).await.map_err(|_| Error::Closed)
    }

    /// Leaves the swarm cleanly: closes every connection and ends the task.
    /// Every call after it returns `Error::Closed`.
    pub async fn shutdown(&self) {
        // A task that has already stopped has nothing left to leave.
        let _ = self.request(|reply| Command::Shutdown { reply }).await;
    }

    /// The peers in this node's mesh for `topic`: tests and operators wait on it for gossip to
    /// flow (forwarding uses the mesh).
    pub async fn mesh_peers(&self, topic: &'static str) -> Result<Vec<PeerId>, Error> {
        self.request(|reply| Command::MeshPeers { topic, reply }).await
    }
}
