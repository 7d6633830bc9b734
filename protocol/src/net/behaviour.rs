//! The composed behaviour, gossipsub's configuration and peer scoring, and the transport.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use libp2p::gossipsub::{self, IdentTopic, MessageAuthenticity, MessageId, ValidationMode};
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    StreamProtocol, Swarm, SwarmBuilder, connection_limits, identify, identity, kad, mdns, noise, ping,
    request_response, tcp, yamux,
};
use sha2::{Digest, Sha256};

use super::gate::Gate;
use super::{Config, Error, Registry, peers};
use crate::envelope::MAX_ENVELOPE_LEN;
use crate::{sync, topic};

/// The identify protocol version druse nodes announce.
pub(super) const IDENTIFY_PROTOCOL: &str = "/druse/id/1";

/// The Kademlia protocol: druse runs its own DHT, apart from the public IPFS one.
pub(super) const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/druse/kad/1");

/// Connections being set up at once, each way: bounds the cost of a dial or accept storm.
const MAX_PENDING: u32 = 32;

/// How long gossipsub holds a message for the node's verdict, whatever the heartbeat.
const VALIDATION_WINDOW: Duration = Duration::from_secs(5);

/// Messages above this size (protobuf-framed) are announced with IDONTWANT when it is on:
/// libp2p's default. Below it the announcement costs about what the copies it saves do.
const IDONTWANT_MIN_BYTES: usize = 1000;

/// How long a sync request may take before it fails.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Sync streams open at once on one connection, each way.
const SYNC_STREAMS: usize = 8;

/// Anti-entropy over request-response ([`crate::sync`]).
pub(super) type AntiEntropy = request_response::cbor::Behaviour<sync::Request, sync::Response>;

/// Gossipsub as druse runs it: remote subscriptions to anything but druse topics are ignored,
/// so a peer cannot make us track unbounded topic state.
pub(super) type Gossipsub = gossipsub::Behaviour<gossipsub::IdentityTransform, gossipsub::WhitelistSubscriptionFilter>;

/// Every protocol a druse node speaks, one field each.
#[derive(NetworkBehaviour)]
pub(super) struct Behaviour {
    /// Refuses connections beyond the configured limits before any other protocol sees them.
    pub(super) connection_limits: connection_limits::Behaviour,
    /// Refuses inbound connections while the node is at its ceiling, so a dial storm cannot
    /// take it far past its target.
    pub(super) gate: Gate,
    /// Carries envelopes, holds each message until the node's verdict, and scores peers.
    pub(super) gossipsub: Gossipsub,
    /// Learns peers' listen addresses and protocols, which feed Kademlia.
    pub(super) identify: identify::Behaviour,
    /// Measures round trips and notices dead connections.
    pub(super) ping: ping::Behaviour,
    /// Finds peers beyond the bootstrap list.
    pub(super) kademlia: kad::Behaviour<kad::store::MemoryStore>,
    /// Finds peers on the local network, when enabled.
    pub(super) mdns: Toggle<mdns::tokio::Behaviour>,
    /// Anti-entropy: on a new connection, each side fetches the signed messages it lacks.
    pub(super) sync: AntiEntropy,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Behaviour {
    fn new(key: &identity::Keypair, config: &Config, gossip_metrics: &mut Registry) -> Result<Self, BoxError> {
        let peer_id = key.public().to_peer_id();

        let limits = connection_limits::ConnectionLimits::default()
            .with_max_established(Some(config.max_established))
            .with_max_established_per_peer(Some(config.max_established_per_peer))
            .with_max_pending_incoming(Some(MAX_PENDING))
            .with_max_pending_outgoing(Some(MAX_PENDING));

        let topics = topic::ALL.iter().map(|t| IdentTopic::new(*t).hash()).collect();
        // Anonymous: gossipsub adds no author, no sequence number and no signature. Every
        // envelope is already signed by its author, and the node's validator checks that one
        // signature (DESIGN §6 step 3); a second, gossipsub-level signature by the same key
        // would cost one more Ed25519 sign per publish and one more check per message received,
        // and bind nothing the envelope does not. Content-derived message ids (`message_id`)
        // take the place of the author and sequence number in deduplication.
        let mut gossipsub = Gossipsub::new_with_subscription_filter(
            MessageAuthenticity::Anonymous,
            gossipsub_config(config.heartbeat, config.idontwant, config.mesh_degree)?,
            gossipsub::WhitelistSubscriptionFilter(topics),
        )?
        // What gossipsub saw: copies received before and after deduplication, bytes per topic,
        // IDONTWANTs, mesh sizes (a handful of topics, so the families stay small).
        .with_metrics(gossip_metrics, gossipsub::MetricsConfig::default());
        gossipsub.with_peer_score(score_params(config.delivery_quota), score_thresholds())?;
        for t in topic::ALL {
            gossipsub.subscribe(&IdentTopic::new(t))?;
        }

        let identify = identify::Behaviour::new(
            identify::Config::new(IDENTIFY_PROTOCOL.to_owned(), key.public())
                .with_agent_version(format!("druse/{}", env!("CARGO_PKG_VERSION"))),
        );

        let mut kad_config = kad::Config::new(KAD_PROTOCOL);
        // A bootstrap dials the peers it walks through, and gossipsub keeps every connection
        // open: the peer manager bootstraps when it needs peers, not every five minutes.
        kad_config.set_periodic_bootstrap_interval(None);
        let mut kademlia = kad::Behaviour::with_config(peer_id, kad::store::MemoryStore::new(peer_id), kad_config);
        // Every druse node answers DHT queries: nodes on one LAN or machine never confirm an
        // external address, and in automatic mode they would all stay silent clients.
        kademlia.set_mode(Some(kad::Mode::Server));

        let mdns =
            if config.mdns { Some(mdns::tokio::Behaviour::new(mdns::Config::default(), peer_id)?) } else { None };

        let target = usize::try_from(config.target_peers.min(config.max_established)).unwrap_or(usize::MAX);
        let ceiling = peers::high_water(target);
        Ok(Self {
            connection_limits: connection_limits::Behaviour::new(limits),
            gate: Gate::new(target, ceiling, peers::dial_at_most(target)),
            gossipsub,
            identify,
            ping: ping::Behaviour::new(ping::Config::new()),
            kademlia,
            mdns: Toggle::from(mdns),
            sync: AntiEntropy::new(
                [(StreamProtocol::new(sync::PROTOCOL), request_response::ProtocolSupport::Full)],
                request_response::Config::default()
                    .with_request_timeout(SYNC_TIMEOUT)
                    .with_max_concurrent_streams(SYNC_STREAMS),
            ),
        })
    }
}

/// The gossip message id: sha256 of the topic, a zero byte and the whole message data.
///
/// It covers everything a receiver judges, so no refused copy can share the genuine message's
/// id: a copy on the wrong topic, or one with a broken signature over the same body, gets an id
/// of its own, and gossipsub's duplicate cache never drops the genuine message because of it.
/// It covers nothing else: not the gossipsub author, sequence number or signature, which
/// anonymous messages lack. So one envelope on one topic is one message however many peers
/// publish it and whether or not a peer signed its copy. The store still dedupes on the body's
/// content id. Other implementations compute the same: `sha256(topic_utf8 ‖ 0x00 ‖ data)`.
fn message_id_of(topic: &str, data: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(topic.as_bytes());
    hash.update([0u8]);
    hash.update(data);
    hash.finalize().into()
}

pub(super) fn message_id(message: &gossipsub::Message) -> MessageId {
    MessageId::new(&message_id_of(message.topic.as_str(), &message.data))
}

/// The mesh bounds for mesh degree `d`, as gossipsub's defaults are for its D of 6:
/// (D_low, D_high, D_out, D_lazy) = (5, 12, 2, 6). D_low is five sixths of D, D_high twice it,
/// D_out (outbound peers a mesh keeps, against eclipses) a third of it and at most 2, and gossip
/// (IHAVE) goes to D peers outside the mesh.
fn mesh_bounds(d: usize) -> Result<MeshBounds, String> {
    if !super::MESH_DEGREES.contains(&d) {
        return Err(format!(
            "a mesh degree of {d} is out of range: it must be between {} and {}",
            super::MESH_DEGREES.start(),
            super::MESH_DEGREES.end()
        ));
    }
    Ok(MeshBounds { n: d, low: (d * 5 / 6).max(1), high: 2 * d, outbound: (d / 3).clamp(1, 2), lazy: d })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MeshBounds {
    n: usize,
    low: usize,
    high: usize,
    outbound: usize,
    lazy: usize,
}

fn gossipsub_config(heartbeat: Duration, idontwant: bool, mesh_degree: usize) -> Result<gossipsub::Config, BoxError> {
    let mesh = mesh_bounds(mesh_degree)?;
    // The message cache holds `history_length` heartbeats; keep a message at least
    // VALIDATION_WINDOW so the node's verdict still finds it when heartbeats are short.
    let heartbeat_ms = heartbeat.as_millis().max(1);
    let history = VALIDATION_WINDOW.as_millis().div_ceil(heartbeat_ms);
    let history = usize::try_from(history).unwrap_or(usize::MAX).clamp(5, 1000);
    let config = gossipsub::ConfigBuilder::default()
        // Inbound, gossipsub checks a signature only on a message that carries one, and takes
        // messages with none. What each mode does (libp2p-gossipsub 0.50, protocol.rs, the
        // codec's `decode`):
        // - Strict requires author, seqno and signature and verifies the signature: it would
        //   refuse every anonymous message, ours included, and penalise whoever relayed it.
        // - Anonymous refuses (and penalises) any message carrying an author, a seqno or a
        //   signature: js-libp2p peers with their default StrictSign policy, and druse nodes
        //   of earlier releases, could not be heard at all.
        // - None checks nothing, but it does not keep what it does not check: the author and
        //   seqno of a signed message are dropped on decode while its signature is kept, so the
        //   copy we forward carries a signature with no author, and every peer that verifies
        //   (Strict, Permissive, js-libp2p's StrictSign) refuses it and penalises us.
        // - Permissive, the one chosen, verifies a field only when present. Between druse nodes
        //   of this release nothing is signed, so it checks no gossipsub signature at all: one
        //   signature check per message, the envelope's. A message a peer did sign (another
        //   implementation, an older druse node) costs the second check it costs today, and in
        //   return is forwarded intact, author, seqno and signature, so peers that require
        //   signatures still take it from us. A peer can make us spend that check only with a
        //   valid gossipsub signature; an invalid one is refused and penalised as before.
        // Authenticity is the envelope's: the node's validator checks its signature, and the
        // author the node hears of is the envelope's signer, never gossipsub's `from` (which
        // Permissive does not verify when a message carries an author but no signature).
        .validation_mode(ValidationMode::Permissive)
        // Nothing is forwarded until the node has opened the envelope and said Accept.
        .validate_messages()
        .message_id_fn(message_id)
        .mesh_n(mesh.n)
        .mesh_n_low(mesh.low)
        .mesh_n_high(mesh.high)
        .mesh_outbound_min(mesh.outbound)
        .gossip_lazy(mesh.lazy)
        // The largest envelope plus room for gossipsub's own framing (topic, and the author,
        // key and signature a signing peer still adds).
        .max_transmit_size(MAX_ENVELOPE_LEN + 4096)
        .heartbeat_interval(heartbeat)
        // The default waits 5 s before the first heartbeat; one interval is enough to let
        // the first connections come up.
        .heartbeat_initial_delay(heartbeat)
        .history_length(history)
        // Gossipsub 1.2's IDONTWANT: on receiving a message larger than the threshold, tell the
        // other mesh peers not to send it. Off, the threshold is out of reach.
        .idontwant_message_size_threshold(if idontwant { IDONTWANT_MIN_BYTES } else { usize::MAX })
        .build()?;
    Ok(config)
}

/// Peer-score weights. Scores are read relative to the thresholds in [`score_thresholds`]:
/// one invalid message costs 100, and all the credit an honest peer can earn is 30, so a single
/// `Reject` always drives a peer's score below zero.
pub(super) fn score_params(delivery_quota: bool) -> gossipsub::PeerScoreParams {
    let topics = topic::ALL.iter().map(|t| (IdentTopic::new(*t).hash(), topic_score_params(t, delivery_quota)));
    // Counters fade to 10% of their value over this long: a peer's record is about the last
    // ten minutes, long enough that a burst of bad messages is not forgotten between bursts.
    let memory = gossipsub::score_parameter_decay(Duration::from_secs(600));
    gossipsub::PeerScoreParams {
        topics: topics.collect::<HashMap<_, _>>(),
        // Positive credit from all topics together is capped at 20 (see the invariant above).
        topic_score_cap: 20.0,
        // P5: the node's reputation in [0, 1] adds up to 10; a banned peer can be pushed
        // below the graylist with a negative application score.
        app_specific_weight: 10.0,
        // P6: more than 10 peers behind one IP is suspicious (a sybil farm), except on the
        // loopback, where test swarms and single-machine deployments legitimately live.
        ip_colocation_factor_weight: -5.0,
        ip_colocation_factor_threshold: 10.0,
        ip_colocation_factor_whitelist: HashSet::from([
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ]),
        // P7: broken IWANT promises and early re-grafts. A few are network noise (hence the
        // threshold of 6); beyond that the penalty grows with the square of the excess.
        behaviour_penalty_weight: -10.0,
        behaviour_penalty_threshold: 6.0,
        behaviour_penalty_decay: memory,
        decay_interval: Duration::from_secs(1),
        decay_to_zero: 0.1,
        // A peer that disconnects keeps its record for an hour, so reconnecting does not
        // wash away a penalty.
        retain_score: Duration::from_secs(3600),
        ..gossipsub::PeerScoreParams::default()
    }
}

/// P3's quota on a busy topic: a mesh peer must have delivered this many messages (first, or
/// within [`MESH_DELIVERY_WINDOW`] of the first), decayed over [`MESH_DELIVERY_MEMORY`].
const MESH_DELIVERY_THRESHOLD: f64 = 2.0;
/// P3 and P3b weight: a mesh peer that delivered nothing costs `-8 × 2² = -32` on the topic,
/// more than all the credit a peer can hold without delivering anything (P1 on every topic,
/// capped at 20, plus P5's 10), so a silent mesh peer is always below zero.
const MESH_DELIVERY_WEIGHT: f64 = -8.0;
/// How late a copy may come after the first and still count as a delivery. Copies that
/// arrive while the node is still validating the first always count; the window is for a
/// peer that forwarded in parallel over a slower path, and costs nothing against a peer that
/// forwards nothing.
const MESH_DELIVERY_WINDOW: Duration = Duration::from_millis(250);
/// How long a peer is in a mesh before its quota is checked: time for the first messages to flow.
const MESH_DELIVERY_ACTIVATION: Duration = Duration::from_secs(30);
/// Deliveries fade to 10% over an hour: a mesh that saw a few messages keeps its peers in
/// credit through a long lull.
const MESH_DELIVERY_MEMORY: Duration = Duration::from_secs(3600);
/// A peer pruned short of its quota carries the shortfall (P3b) for about as long as
/// gossipsub's prune backoff keeps it out anyway; then it may be grafted again.
const MESH_FAILURE_MEMORY: Duration = Duration::from_secs(60);

/// Topics where messages flow all the time (listings), so a mesh peer that delivers none is
/// silent, not idle. Weather, bans, endorsements and bounties are rare by design; execution
/// reports flow only where skills are run. A quota there would punish honest peers for the
/// network being quiet.
const BUSY_TOPICS: [&str; 1] = [topic::CRYSTALS];

/// The parameters of one druse topic: every topic carries signed envelopes that every node
/// validates identically, so an invalid message is equally damning on any of them; busy
/// topics also hold each mesh peer to a delivery quota.
fn topic_score_params(topic_name: &str, delivery_quota: bool) -> gossipsub::TopicScoreParams {
    let memory = gossipsub::score_parameter_decay(Duration::from_secs(600));
    let busy = delivery_quota && BUSY_TOPICS.contains(&topic_name);
    gossipsub::TopicScoreParams {
        topic_weight: 1.0,
        // P1: staying in the mesh earns 0.01 per second, up to 3 after five minutes.
        time_in_mesh_weight: 0.01,
        time_in_mesh_quantum: Duration::from_secs(1),
        time_in_mesh_cap: 300.0,
        // P2: being first to deliver a valid message earns 0.5, up to 10 per topic.
        first_message_deliveries_weight: 0.5,
        first_message_deliveries_decay: memory,
        first_message_deliveries_cap: 20.0,
        // P3 and P3b, on busy topics only: a mesh peer short of its quota after the
        // activation time pays the square of the shortfall, and keeps paying it for a while
        // after it is pruned. A silent peer falls to -32 on the topic; an honest peer that
        // only forwards delivers its share of every message and pays nothing.
        mesh_message_deliveries_weight: if busy { MESH_DELIVERY_WEIGHT } else { 0.0 },
        mesh_message_deliveries_decay: gossipsub::score_parameter_decay(MESH_DELIVERY_MEMORY),
        mesh_message_deliveries_cap: 20.0,
        mesh_message_deliveries_threshold: MESH_DELIVERY_THRESHOLD,
        mesh_message_deliveries_window: MESH_DELIVERY_WINDOW,
        mesh_message_deliveries_activation: MESH_DELIVERY_ACTIVATION,
        mesh_failure_penalty_weight: if busy { MESH_DELIVERY_WEIGHT } else { 0.0 },
        mesh_failure_penalty_decay: gossipsub::score_parameter_decay(MESH_FAILURE_MEMORY),
        // P4: each `Reject` counts one invalid delivery, and the penalty is 100 times the
        // square of the count: one costs 100, two cost 400, three cost 900. The penalty lands
        // at once; the decay only sets how long it is remembered (ten minutes to 10%).
        invalid_message_deliveries_weight: -100.0,
        invalid_message_deliveries_decay: memory,
    }
}

/// What a low score costs a peer. With no credit: one invalid message (-100) leaves a peer
/// fully served but negative; two (-400) stop gossip to and from it and our publishing to it;
/// three (-900) graylist it, so everything it sends is dropped unread.
pub(super) fn score_thresholds() -> gossipsub::PeerScoreThresholds {
    gossipsub::PeerScoreThresholds {
        gossip_threshold: -150.0,
        publish_threshold: -300.0,
        graylist_threshold: -600.0,
        // Peer exchange is off; should it be turned on, only accept it from peers in credit.
        accept_px_threshold: 10.0,
        // Graft better peers when the mesh's median score falls below a little credit.
        opportunistic_graft_threshold: 5.0,
    }
}

/// Builds the transports (TCP with noise and yamux, QUIC, optionally DNS) and the behaviour.
pub(super) fn build_swarm(
    key: identity::Keypair,
    config: &Config,
    registry: &mut Registry,
) -> Result<Swarm<Behaviour>, Error> {
    let transport = |e: &dyn std::fmt::Display| Error::Transport(e.to_string());
    let idle_timeout = config.idle_timeout;
    // Gossipsub's own metrics, beside libp2p's (`libp2p_gossipsub_*`).
    let behaviour = |key: &identity::Keypair, registry: &mut Registry| {
        Behaviour::new(key, config, registry.sub_registry_with_prefix("libp2p_gossipsub"))
    };

    // The builder's phases are distinct types, so the two endings are spelled out twice.
    macro_rules! base {
        () => {
            SwarmBuilder::with_existing_identity(key.clone())
                .with_tokio()
                .with_tcp(tcp::Config::default(), noise::Config::new, yamux::Config::default)
                .map_err(|e| transport(&e))?
                .with_quic()
        };
    }
    // DNS lets bootstrap addresses name hosts. A host without a readable resolver
    // configuration (some containers) can still run on IP addresses alone.
    let swarm = match base!().with_dns() {
        Ok(builder) => builder
            .with_bandwidth_metrics(registry)
            .with_behaviour(|key| behaviour(key, registry))
            .map_err(|e| transport(&e))?
            .with_swarm_config(|c| c.with_idle_connection_timeout(idle_timeout))
            .build(),
        Err(e) => {
            tracing::warn!(error = %e, "no DNS resolver configuration; /dns addresses will not resolve");
            base!()
                .with_bandwidth_metrics(registry)
                .with_behaviour(|key| behaviour(key, registry))
                .map_err(|e| transport(&e))?
                .with_swarm_config(|c| c.with_idle_connection_timeout(idle_timeout))
                .build()
        }
    };
    Ok(swarm)
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::envelope::Envelope;

    #[test]
    fn score_parameters_are_accepted_by_gossipsub() {
        score_params(false).validate().unwrap();
        score_params(true).validate().unwrap();
        score_thresholds().validate().unwrap();
    }

    #[test]
    fn one_rejected_message_outweighs_all_possible_credit() {
        let params = score_params(true);
        let topic = topic_score_params(topic::WEATHER, true);
        let credit = params.topic_score_cap + params.app_specific_weight * 1.0;
        assert!(credit + topic.invalid_message_deliveries_weight * topic.topic_weight < 0.0);
    }

    #[test]
    fn a_silent_mesh_peer_on_a_busy_topic_falls_below_zero_and_stays_above_gossip() {
        let params = score_params(true);
        let busy = topic_score_params(topic::CRYSTALS, true);
        // All the credit a peer can hold without delivering a message: time in every mesh
        // (within the topic cap) and the highest reputation.
        let in_mesh = busy.time_in_mesh_weight * busy.time_in_mesh_cap * topic::ALL.len() as f64;
        let credit = in_mesh.min(params.topic_score_cap) + params.app_specific_weight * 1.0;
        let shortfall = busy.mesh_message_deliveries_threshold.powi(2);
        let in_mesh_penalty = shortfall * busy.mesh_message_deliveries_weight * busy.topic_weight;
        assert!(credit + in_mesh_penalty < 0.0, "a silent mesh peer keeps {}", credit + in_mesh_penalty);
        // Pruned, it carries the shortfall as P3b: still below zero right after the prune.
        let pruned_penalty = shortfall * busy.mesh_failure_penalty_weight * busy.topic_weight;
        assert!(credit + pruned_penalty < 0.0);
        // Both together never reach the gossip threshold: silence costs mesh slots, not gossip.
        let worst = in_mesh_penalty + pruned_penalty;
        assert!(worst > score_thresholds().gossip_threshold, "{worst}");
        // The quota is checked after the activation time, against a window wider than zero.
        assert!(busy.mesh_message_deliveries_activation >= Duration::from_secs(1));
        assert!(busy.mesh_message_deliveries_window > Duration::ZERO);
    }

    #[test]
    fn rare_topics_hold_no_peer_to_a_delivery_quota() {
        for on in [true, false] {
            for name in topic::ALL {
                let params = topic_score_params(name, on);
                let quota = params.mesh_message_deliveries_weight != 0.0 || params.mesh_failure_penalty_weight != 0.0;
                assert_eq!(quota, on && name == topic::CRYSTALS, "{name}, quota {on}");
            }
        }
    }

    #[test]
    fn message_id_covers_the_topic_and_every_byte() {
        let key = crate::Keypair::from_seed([1; 32]);
        let data = Envelope::seal(&key, crate::Kind::Weather, b"body");
        let id = |topic: &str, data: &[u8]| {
            message_id(&gossipsub::Message {
                source: None,
                data: data.to_vec(),
                sequence_number: None,
                topic: IdentTopic::new(topic).hash(),
            })
        };
        let genuine = id(topic::WEATHER, &data);
        assert_eq!(genuine.0, Sha256::digest([topic::WEATHER.as_bytes(), &[0], &data].concat()).to_vec());
        // The same bytes on another topic, and the same body under another signature, differ.
        assert_ne!(id(topic::CRYSTALS, &data), genuine);
        let mut tampered = data.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_ne!(id(topic::WEATHER, &tampered), genuine);
        assert_eq!(id(topic::WEATHER, &data), genuine);
    }

    #[test]
    fn message_id_ignores_gossipsub_author_and_seqno() {
        let key = crate::Keypair::from_seed([2; 32]);
        let data = Envelope::seal(&key, crate::Kind::Weather, b"body");
        let topic = IdentTopic::new(topic::WEATHER).hash();
        let anonymous = gossipsub::Message { source: None, data: data.clone(), sequence_number: None, topic };
        let signed = gossipsub::Message { source: Some(key.peer_id()), sequence_number: Some(7), ..anonymous.clone() };
        let relayed =
            gossipsub::Message { source: Some(crate::Keypair::from_seed([3; 32]).peer_id()), ..signed.clone() };
        assert_eq!(message_id(&signed), message_id(&anonymous));
        assert_eq!(message_id(&relayed), message_id(&anonymous));
    }

    #[test]
    fn anonymous_publishing_is_accepted_with_permissive_validation() {
        let config = gossipsub_config(Duration::from_millis(100), true, 6).unwrap();
        assert!(matches!(config.validation_mode(), ValidationMode::Permissive));
        Gossipsub::new_with_subscription_filter(
            MessageAuthenticity::Anonymous,
            config,
            gossipsub::WhitelistSubscriptionFilter(HashSet::new()),
        )
        .unwrap();
    }

    #[test]
    fn idontwant_is_sent_above_the_threshold_only_when_on() {
        let on = gossipsub_config(Duration::from_millis(100), true, 6).unwrap();
        assert_eq!(on.idontwant_message_size_threshold(), IDONTWANT_MIN_BYTES);
        let off = gossipsub_config(Duration::from_millis(100), false, 6).unwrap();
        assert_eq!(off.idontwant_message_size_threshold(), usize::MAX);
    }

    #[test]
    fn the_default_mesh_degree_keeps_gossipsubs_default_bounds() {
        let ours = gossipsub_config(Duration::from_secs(1), true, Config::default().mesh_degree).unwrap();
        let theirs = gossipsub::Config::default();
        assert_eq!(
            (ours.mesh_n(), ours.mesh_n_low(), ours.mesh_n_high(), ours.mesh_outbound_min(), ours.gossip_lazy()),
            (
                theirs.mesh_n(),
                theirs.mesh_n_low(),
                theirs.mesh_n_high(),
                theirs.mesh_outbound_min(),
                theirs.gossip_lazy()
            )
        );
    }

    #[test]
    fn every_mesh_degree_in_range_builds_and_others_are_refused_by_name() {
        for d in super::super::MESH_DEGREES {
            let config = gossipsub_config(Duration::from_secs(1), true, d)
                .unwrap_or_else(|e| panic!("mesh degree {d} should build: {e}"));
            assert_eq!(config.mesh_n(), d);
            assert!(config.mesh_outbound_min() <= config.mesh_n_low() && config.mesh_n_low() <= d);
            assert!(config.mesh_n_high() >= d);
        }
        let four = gossipsub_config(Duration::from_secs(1), true, 4).unwrap();
        assert_eq!((four.mesh_n_low(), four.mesh_n_high(), four.mesh_outbound_min(), four.gossip_lazy()), (3, 8, 1, 4));
        for d in [0, 1, 17, 100] {
            let error = gossipsub_config(Duration::from_secs(1), true, d).unwrap_err().to_string();
            assert!(error.contains(&format!("mesh degree of {d}")) && error.contains("between 2 and 16"), "{error}");
        }
    }
}
