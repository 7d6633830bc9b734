//! The task that owns the swarm: it runs the handles' commands and turns swarm events into
//! [`Event`]s. Nothing in here awaits while handling an event, so a slow consumer can never
//! stall the swarm.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Duration;

use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, PublishError};
use libp2p::metrics::{Metrics, Recorder};
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, OutboundRequestId};
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::{ConnectionId, DialError, SwarmEvent};
use libp2p::{Multiaddr, PeerId, Swarm, identify, mdns};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::behaviour::{Behaviour, BehaviourEvent, KAD_PROTOCOL};
use super::peers::{self, Closed, Connected};
use super::{Acceptance, Command, Config, Error, Event, MessageId, PeerInfo, Registry, SyncChannel};
use crate::{sync, topic};

/// How long a leaving node lets in-flight work settle before it closes its connections.
const LEAVE_FLUSH: Duration = Duration::from_millis(200);

/// How long a leaving node waits for its connections to close.
const LEAVE_CLOSE: Duration = Duration::from_secs(1);

type DialReply = oneshot::Sender<Result<(), Error>>;
type SyncReply = oneshot::Sender<Result<sync::Response, Error>>;

/// The swarm and everything only the swarm task may touch.
pub(super) struct Actor {
    swarm: Swarm<Behaviour>,
    commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<Event>,
    metrics: Metrics,
    /// Events the node's channel had no room for.
    dropped: Counter,
    /// Dials started by `Handle::dial`, answered when their connection opens or fails.
    pending_dials: HashMap<ConnectionId, DialReply>,
    /// The remote address of every open connection, for `Handle::peers`.
    connections: HashMap<PeerId, HashMap<ConnectionId, Multiaddr>>,
    /// Sync requests sent by `Handle::sync`, answered when the peer answers or the request
    /// fails (request-response times every one out, so this map cannot grow without bound).
    pending_syncs: HashMap<OutboundRequestId, SyncReply>,
    /// When each connected peer's first open connection opened.
    connected_since: HashMap<PeerId, Instant>,
    /// The connections the node keeps (see [`peers`]), and how long a new one is safe.
    target_peers: usize,
    peer_grace: Duration,
    /// Peers the manager disconnected or a dial could not reach, not dialled again for a while.
    closed: Closed,
    /// When the manager last started a Kademlia bootstrap.
    last_bootstrap: Option<Instant>,
    /// The configured bootstrap peers (addresses without the `/p2p` suffix), dialled again
    /// while the node is cut off (see [`peers::rejoin_below`]).
    bootstrap: Vec<(PeerId, Multiaddr)>,
    /// When the node, cut off, last dialled its bootstrap list.
    last_rejoin: Option<Instant>,
    /// Peers disconnected because the node had more than it keeps.
    trimmed: Counter,
    /// Peers dialled because the node had fewer than it keeps.
    topped_up: Counter,
}

impl Actor {
    pub(super) fn new(
        swarm: Swarm<Behaviour>,
        config: &Config,
        commands: mpsc::Receiver<Command>,
        events: mpsc::Sender<Event>,
        registry: &mut Registry,
    ) -> Self {
        let metrics = Metrics::new(registry);
        let dropped = Counter::default();
        registry.register(
            "druse_net_events_dropped",
            "Swarm events dropped because the node's event channel was full",
            dropped.clone(),
        );
        let trimmed = Counter::default();
        registry.register(
            "druse_net_peers_trimmed",
            "Peers disconnected because the node had more connections than it keeps",
            trimmed.clone(),
        );
        let topped_up = Counter::default();
        registry.register(
            "druse_net_peers_dialled",
            "Known peers dialled because the node had fewer connections than it keeps",
            topped_up.clone(),
        );
        Self {
            swarm,
            commands,
            events,
            metrics,
            dropped,
            pending_dials: HashMap::new(),
            connections: HashMap::new(),
            pending_syncs: HashMap::new(),
            connected_since: HashMap::new(),
            // More than the connection limit could never be reached; dials beyond it are refused.
            target_peers: usize::try_from(config.target_peers.min(config.max_established)).unwrap_or(usize::MAX),
            peer_grace: config.peer_grace,
            closed: Closed::default(),
            last_bootstrap: None,
            bootstrap: Vec::new(),
            last_rejoin: None,
            trimmed,
            topped_up,
        }
    }

    /// Listens, then dials the bootstrap peers and seeds Kademlia with them.
    pub(super) fn start(&mut self, listen: &[Multiaddr], bootstrap: &[(PeerId, Multiaddr)]) -> Result<(), Error> {
        for addr in listen {
            self.swarm
                .listen_on(addr.clone())
                .map_err(|e| Error::Listen { addr: addr.clone(), reason: e.to_string() })?;
        }
        for (peer, addr) in bootstrap {
            let mut addr = addr.clone();
            addr.pop(); // the /p2p/<peer id> suffix: Kademlia keeps the peer id apart
            self.bootstrap.push((*peer, addr));
        }
        self.last_rejoin = Some(Instant::now());
        self.dial_bootstrap();
        if !bootstrap.is_empty()
            && let Err(error) = self.swarm.behaviour_mut().kademlia.bootstrap()
        {
            tracing::debug!(%error, "kademlia bootstrap not started");
        }
        Ok(())
    }

    /// The event loop: local commands first, then the swarm. Ends on `shutdown` or when every
    /// handle is gone.
    pub(super) async fn run(mut self) {
        tracing::info!("network task started");
        let mut tick = tokio::time::interval(peers::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = loop {
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    Some(command) => {
                        if let ControlFlow::Break(reply) = self.on_command(command) {
                            break Some(reply);
                        }
                    }
                    None => break None,
                },
                event = self.swarm.select_next_some() => self.on_swarm_event(event),
                _ = tick.tick() => self.manage_peers(),
            }
        };
        self.leave().await;
        // The swarm and the command receiver are gone before the caller hears back, so every
        // later request fails with `Error::Closed`.
        drop(self);
        tracing::info!("network task stopped");
        if let Some(reply) = shutdown {
            let _ = reply.send(());
        }
    }

    /// Closes every connection. It does not unsubscribe first: an unsubscription makes peers
    /// back off from this node for a while, and a node that restarts at once would then be
    /// penalised for re-grafting inside that backoff.
    async fn leave(&mut self) {
        self.commands.close();
        if self.swarm.network_info().num_peers() > 0 {
            self.drive_until(Instant::now() + LEAVE_FLUSH, false).await;
        }
        let peers: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
        for peer in peers {
            let _ = self.swarm.disconnect_peer_id(peer);
        }
        self.drive_until(Instant::now() + LEAVE_CLOSE, true).await;
    }

    /// Keeps handling swarm events until `deadline` (or, if `until_alone`, until no peer is
    /// left).
    async fn drive_until(&mut self, deadline: Instant, until_alone: bool) {
        while !(until_alone && self.swarm.network_info().num_peers() == 0) {
            match tokio::time::timeout_at(deadline, self.swarm.select_next_some()).await {
                Ok(event) => self.on_swarm_event(event),
                Err(_) => break,
            }
        }
    }

    fn gossipsub(&mut self) -> &mut super::behaviour::Gossipsub {
        &mut self.swarm.behaviour_mut().gossipsub
    }

    /// Runs one command; `Break` carries the reply of a shutdown.
    fn on_command(&mut self, command: Command) -> ControlFlow<oneshot::Sender<()>> {
        // A caller that stopped waiting does not care about its reply, so send errors are
        // ignored throughout.
        match command {
            Command::Publish { topic, data, reply } => {
                let _ = reply.send(self.publish(topic, data));
            }
            Command::Report { id, propagation_source, verdict } => {
                let held = self.gossipsub().report_message_validation_result(&id, &propagation_source, verdict);
                if !held {
                    tracing::debug!(message_id = %id, "verdict came after gossipsub let go of the message");
                }
            }
            Command::SetApplicationScore { peer, score, reply } => {
                if !self.gossipsub().set_application_score(&peer, score) {
                    tracing::debug!(%peer, "application score for a peer gossipsub does not know");
                }
                let _ = reply.send(());
            }
            Command::Peers { reply } => {
                let _ = reply.send(self.peers());
            }
            Command::PeerScore { peer, reply } => {
                let _ = reply.send(self.swarm.behaviour().gossipsub.peer_score(&peer));
            }
            Command::ListenAddrs { reply } => {
                let _ = reply.send(self.swarm.listeners().cloned().collect());
            }
            Command::Dial { addr, reply } => self.dial(addr, reply),
            Command::Sync { peer, request, reply } => {
                let id = self.swarm.behaviour_mut().sync.send_request(&peer, request);
                self.pending_syncs.insert(id, reply);
            }
            Command::AnswerSync { channel, response } => {
                if self.swarm.behaviour_mut().sync.send_response(channel.0, response).is_err() {
                    tracing::debug!("a sync answer found its peer gone");
                }
            }
            Command::Shutdown { reply } => return ControlFlow::Break(reply),
            Command::MeshPeers { topic, reply } => {
                let hash = IdentTopic::new(topic).hash();
                let _ = reply.send(self.swarm.behaviour().gossipsub.mesh_peers(&hash).copied().collect());
            }
        }
        ControlFlow::Continue(())
    }

    fn publish(&mut self, topic: &'static str, data: Vec<u8>) -> Result<MessageId, Error> {
        if !topic::ALL.contains(&topic) {
            return Err(Error::UnknownTopic(topic));
        }
        self.gossipsub().publish(IdentTopic::new(topic), data).map_err(|e| match e {
            PublishError::NoPeersSubscribedToTopic => Error::NoPeers,
            PublishError::Duplicate => Error::Duplicate,
            other => Error::Publish(other.to_string()),
        })
    }

    fn peers(&self) -> Vec<PeerInfo> {
        let gossipsub = &self.swarm.behaviour().gossipsub;
        self.swarm
            .connected_peers()
            .map(|peer| PeerInfo {
                peer_id: *peer,
                score: gossipsub.peer_score(peer),
                addresses: self.connections.get(peer).map(|c| c.values().cloned().collect()).unwrap_or_default(),
            })
            .collect()
    }

    fn dial(&mut self, addr: Multiaddr, reply: DialReply) {
        let opts = match addr.iter().last() {
            // Naming the peer lets the swarm verify it and skip the dial if it is connected.
            Some(Protocol::P2p(peer)) => {
                DialOpts::peer_id(peer).addresses(vec![addr]).condition(PeerCondition::Disconnected).build()
            }
            _ => DialOpts::unknown_peer_id().address(addr).build(),
        };
        let connection = opts.connection_id();
        match self.dial_own(opts) {
            Ok(()) => {
                self.pending_dials.insert(connection, reply);
            }
            Err(DialError::DialPeerConditionFalse(_)) => {
                let _ = reply.send(Ok(()));
            }
            Err(error) => {
                let _ = reply.send(Err(Error::Dial(error.to_string())));
            }
        }
    }

    /// Dials every bootstrap peer not connected or being dialled, and tells Kademlia their
    /// addresses (again: a failed dial may have made it drop them).
    fn dial_bootstrap(&mut self) {
        for (peer, addr) in self.bootstrap.clone() {
            self.swarm.behaviour_mut().kademlia.add_address(&peer, addr.clone());
            let opts = DialOpts::peer_id(peer)
                .addresses(vec![addr])
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .build();
            // An unreachable bootstrap peer is not fatal: others, or mDNS, may do.
            match self.dial_own(opts) {
                Ok(()) | Err(DialError::DialPeerConditionFalse(_)) => {}
                Err(error) => tracing::warn!(%peer, %error, "cannot dial bootstrap peer"),
            }
        }
    }

    /// Dials as the node itself asked to: the gate lets it through whatever the node holds
    /// (a dial Kademlia starts on its own is refused once the node has its target).
    fn dial_own(&mut self, opts: DialOpts) -> Result<(), DialError> {
        self.swarm.behaviour_mut().gate.own(opts.connection_id());
        self.swarm.dial(opts)
    }

    /// Hands an event to the node without waiting; `false` if it was not delivered.
    fn emit(&mut self, event: Event) -> bool {
        match self.events.try_send(event) {
            Ok(()) => true,
            Err(TrySendError::Full(event)) => {
                self.dropped.inc();
                tracing::debug!(?event, "event channel full; event dropped");
                false
            }
            // The node stopped listening; nothing to count.
            Err(TrySendError::Closed(_)) => false,
        }
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        self.metrics.record(&event);
        match event {
            SwarmEvent::Behaviour(event) => self.on_behaviour_event(event),
            SwarmEvent::ConnectionEstablished { peer_id, connection_id, endpoint, num_established, .. } => {
                if let Some(reply) = self.pending_dials.remove(&connection_id) {
                    let _ = reply.send(Ok(()));
                }
                let addr = endpoint.get_remote_address().clone();
                self.connections.entry(peer_id).or_default().insert(connection_id, addr);
                if num_established.get() == 1 {
                    self.connected_since.insert(peer_id, Instant::now());
                    tracing::debug!(peer = %peer_id, "peer connected");
                    self.emit(Event::PeerConnected(peer_id));
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, connection_id, num_established, .. } => {
                if let Some(open) = self.connections.get_mut(&peer_id) {
                    open.remove(&connection_id);
                    if open.is_empty() {
                        self.connections.remove(&peer_id);
                    }
                }
                if num_established == 0 {
                    self.connected_since.remove(&peer_id);
                    tracing::debug!(peer = %peer_id, "peer disconnected");
                    self.emit(Event::PeerDisconnected(peer_id));
                }
            }
            SwarmEvent::OutgoingConnectionError { connection_id, peer_id, error } => {
                // The peer manager leaves a peer it could not reach alone for a while, rather
                // than dial it again every tick: briefly while this node is cut off, else long,
                // so that well-connected nodes do not take the slots a full peer frees.
                if let Some(peer) =
                    peer_id.filter(|peer| peers::says_peer_unreachable(&error) && !self.swarm.is_connected(peer))
                {
                    let wait = peers::retry_after(self.connected_since.len(), self.target_peers);
                    self.closed.insert(peer, Instant::now(), wait);
                }
                match self.pending_dials.remove(&connection_id) {
                    Some(reply) => {
                        let _ = reply.send(Err(Error::Dial(error.to_string())));
                    }
                    None => tracing::debug!(?peer_id, %error, "outgoing connection failed"),
                }
            }
            SwarmEvent::NewListenAddr { address, .. } => {
                tracing::info!(%address, "listening");
                self.emit(Event::NewListenAddr(address));
            }
            SwarmEvent::ListenerError { error, .. } => {
                tracing::warn!(%error, "listener error");
            }
            SwarmEvent::ListenerClosed { addresses, reason, .. } => {
                tracing::warn!(?addresses, ?reason, "listener closed");
            }
            _ => {}
        }
    }

    fn on_behaviour_event(&mut self, event: BehaviourEvent) {
        match event {
            BehaviourEvent::Gossipsub(event) => {
                self.metrics.record(&event);
                if let gossipsub::Event::Message { propagation_source, message_id, message } = event {
                    self.on_message(propagation_source, message_id, message);
                }
            }
            BehaviourEvent::Identify(event) => {
                self.metrics.record(&event);
                if let identify::Event::Received { peer_id, info, .. } = event
                    && info.protocols.contains(&KAD_PROTOCOL)
                {
                    let kademlia = &mut self.swarm.behaviour_mut().kademlia;
                    for addr in info.listen_addrs {
                        kademlia.add_address(&peer_id, addr);
                    }
                }
            }
            BehaviourEvent::Kademlia(event) => self.metrics.record(&event),
            BehaviourEvent::Ping(event) => self.metrics.record(&event),
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => self.on_discovered(found),
            BehaviourEvent::Mdns(mdns::Event::Expired(_)) => {}
            BehaviourEvent::ConnectionLimits(never) | BehaviourEvent::Gate(never) => match never {},
            BehaviourEvent::Sync(event) => self.on_sync_event(event),
        }
    }

    /// Passes a gossip message to the node for its verdict. One the node cannot take is
    /// ignored at once: gossipsub frees it, forwards nothing and penalises nobody.
    fn on_message(&mut self, propagation_source: PeerId, id: MessageId, message: gossipsub::Message) {
        // The author is the envelope's signer. Gossipsub's own `message.source` is not used:
        // our messages and other anonymous ones have none, and in a signed message from
        // another peer it is only what that peer wrote (verified by nobody when the message
        // is unsigned), where the envelope's signature is what the validator checks.
        let event = Event::Message {
            id: id.clone(),
            propagation_source,
            source: envelope_author(&message.data),
            topic: message.topic.into_string(),
            data: message.data,
        };
        if !self.emit(event) {
            self.gossipsub().report_message_validation_result(&id, &propagation_source, Acceptance::Ignore);
        }
    }

    /// Hands a peer's sync request to the node, and matches answers and failures to the
    /// requests `Handle::sync` sent.
    fn on_sync_event(&mut self, event: request_response::Event<sync::Request, sync::Response>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request { request, channel, .. } => {
                    // When the node cannot take it, the channel drops and the peer's request fails.
                    self.emit(Event::SyncRequest { peer, request, channel: SyncChannel(channel) });
                }
                request_response::Message::Response { request_id, response } => {
                    if let Some(reply) = self.pending_syncs.remove(&request_id) {
                        let _ = reply.send(Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure { request_id, error, peer, .. } => {
                tracing::debug!(%peer, %error, "sync request failed");
                if let Some(reply) = self.pending_syncs.remove(&request_id) {
                    let _ = reply.send(Err(Error::Sync(error.to_string())));
                }
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, %error, "answering a sync request failed");
            }
            request_response::Event::ResponseSent { .. } => {}
        }
    }

    /// Dials the peers mDNS found on the local network, as many as the node has room for and
    /// may still dial (see [`peers::dial_at_most`]), and tells Kademlia about all of them.
    fn on_discovered(&mut self, found: Vec<(PeerId, Multiaddr)>) {
        let mut by_peer: HashMap<PeerId, Vec<Multiaddr>> = HashMap::new();
        for (peer, addr) in found {
            self.swarm.behaviour_mut().kademlia.add_address(&peer, addr.clone());
            by_peer.entry(peer).or_default().push(addr);
        }
        let mut room = self.room_to_dial(self.swarm.network_info().num_peers());
        for (peer, addrs) in by_peer {
            if self.swarm.is_connected(&peer) {
                continue;
            }
            // Kademlia keeps the rest, for the peer manager to dial when it needs them.
            let Some(left) = room.checked_sub(1) else { break };
            room = left;
            if let Err(error) = self.dial_own(DialOpts::peer_id(peer).addresses(addrs).build()) {
                tracing::debug!(%peer, %error, "cannot dial peer found by mDNS");
            }
        }
    }

    /// The peer manager's tick (see [`peers`]): trims at the high water mark, tops up below the
    /// target.
    fn manage_peers(&mut self) {
        let now = Instant::now();
        self.closed.expire(now);
        let connected = self.swarm.network_info().num_peers();
        if connected < peers::rejoin_below(self.target_peers)
            && self.bootstrap.iter().any(|(peer, _)| !self.swarm.is_connected(peer))
            && self.last_rejoin.is_none_or(|at| now.saturating_duration_since(at) >= peers::REJOIN_EVERY)
        {
            // Cut off: every bootstrap peer may have been full, and the few peers the node has
            // may be newcomers as lost as itself. (With every bootstrap peer connected, the
            // swarm is only small: nothing to do.) Try the bootstrap peers again, and bootstrap
            // Kademlia at the next top-up rather than up to a minute later.
            tracing::debug!(connected, "too few peers; dialling the bootstrap list again");
            self.last_rejoin = Some(now);
            self.last_bootstrap = None;
            self.dial_bootstrap();
        }
        if connected >= peers::high_water(self.target_peers) {
            self.trim(now);
        } else if connected < self.target_peers {
            self.top_up(connected, now);
        }
    }

    fn trim(&mut self, now: Instant) {
        let gossipsub = &self.swarm.behaviour().gossipsub;
        let mut meshes: HashMap<PeerId, usize> = HashMap::new();
        for topic in gossipsub.topics() {
            for peer in gossipsub.mesh_peers(topic) {
                *meshes.entry(*peer).or_default() += 1;
            }
        }
        let connected = self
            .connected_since
            .iter()
            .map(|(peer, since)| Connected {
                peer: *peer,
                since: *since,
                meshes: meshes.get(peer).copied().unwrap_or(0),
                score: gossipsub.peer_score(peer).unwrap_or(0.0),
            })
            .collect();
        let excess = peers::excess(connected, self.target_peers, self.peer_grace, now);
        if !excess.is_empty() {
            tracing::debug!(
                peers = self.connected_since.len(),
                closing = excess.len(),
                "more peers than the node keeps"
            );
        }
        for peer in excess {
            if self.swarm.disconnect_peer_id(peer).is_ok() {
                self.closed.insert(peer, now, peers::REDIAL_AFTER);
                self.trimmed.inc();
            }
        }
    }

    /// How many more peers the node dials itself with `connected` peers: up to its target, and
    /// no more than [`peers::dial_at_most`] connections of its own dialling in all, those still
    /// being dialled counted (the rest of its slots are for the peers that dial it).
    fn room_to_dial(&self, connected: usize) -> usize {
        let dialled = self.swarm.behaviour().gate.dialled();
        self.target_peers.saturating_sub(connected).min(peers::dial_at_most(self.target_peers).saturating_sub(dialled))
    }

    /// Dials known peers while the node has `connected`, fewer than its target, and may still
    /// dial; bootstraps Kademlia when it knows nobody left to dial.
    fn top_up(&mut self, connected: usize, now: Instant) {
        let wanted = self.room_to_dial(connected);
        if wanted == 0 {
            // It has dialled all it dials: the rest come to it.
            return;
        }
        let known: Vec<PeerId> = self
            .swarm
            .behaviour_mut()
            .kademlia
            .kbuckets()
            .flat_map(|bucket| bucket.iter().map(|entry| *entry.node.key.preimage()).collect::<Vec<_>>())
            .collect();
        let candidates: Vec<PeerId> =
            known.into_iter().filter(|peer| !self.swarm.is_connected(peer) && !self.closed.recent(peer, now)).collect();
        if candidates.is_empty() {
            let every = peers::bootstrap_every(connected, self.target_peers);
            if self.last_bootstrap.is_none_or(|at| now.saturating_duration_since(at) >= every) {
                self.last_bootstrap = Some(now);
                if let Err(error) = self.swarm.behaviour_mut().kademlia.bootstrap() {
                    tracing::debug!(%error, "kademlia bootstrap not started");
                }
            }
            return;
        }
        for peer in peers::shuffled(candidates).into_iter().take(wanted.min(peers::DIALS_PER_TICK)) {
            // Kademlia supplies the addresses; a peer being dialled already is left alone.
            let opts = DialOpts::peer_id(peer).condition(PeerCondition::DisconnectedAndNotDialing).build();
            if self.dial_own(opts).is_ok() {
                self.topped_up.inc();
            }
        }
    }
}

/// The PeerId of the key an envelope names as its signer, read from the bytes and checked for
/// nothing (not the signature, not even that the 32 bytes are a curve point): the validator
/// does that, once. `None` when the bytes are not a map with a 32-byte `signer` byte string.
pub(super) fn envelope_author(data: &[u8]) -> Option<PeerId> {
    #[derive(serde::Deserialize)]
    struct Signer<'a> {
        #[serde(with = "serde_bytes")]
        signer: &'a [u8],
    }
    let Signer { signer } = serde_ipld_dagcbor::from_slice(data).ok()?;
    let signer: &[u8; 32] = signer.try_into().ok()?;
    // What libp2p names an Ed25519 key's owner: the identity multihash (code 0, 36 bytes) of
    // the key's protobuf encoding (type 1, Ed25519; 32 bytes of key), written out so that no
    // curve point is decompressed. `PublicKey::peer_id` writes the same bytes.
    let mut bytes = [0u8; 38];
    bytes[..6].copy_from_slice(&[0x00, 36, 0x08, 0x01, 0x12, 0x20]);
    bytes[6..].copy_from_slice(signer);
    PeerId::from_bytes(&bytes).ok()
}
