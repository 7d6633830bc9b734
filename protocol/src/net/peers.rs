//! Keeps a node's connections near a target, as a connection manager does.
//!
//! Gossipsub keeps a stream open on every connection, so libp2p never closes one as idle, and
//! every Kademlia lookup dials the peers it learns of. Left alone, every node of a swarm ends up
//! connected to every other: at a hundred nodes that is 99 connections each, whose handshakes,
//! pings, keep-alive traffic and per-peer scoring cost more than the messages themselves. The
//! mesh of each topic uses a handful of them; the rest only carry gossip about what the meshes
//! already delivered.
//!
//! So, once a tick: at the high water mark, the node closes connections until it is back at
//! the target, choosing among the peers connected longer than a grace period (a newcomer has
//! time to join meshes) those in the fewest meshes, then the lowest gossipsub score, then the
//! newest. Below the target, while the connections it dialled itself are fewer than a third of
//! it ([`dial_at_most`]: the rest are kept for peers that dial in), it dials peers its Kademlia
//! routing table knows of, a few a tick,
//! leaving alone for a while those it closed itself or could not reach, and runs a Kademlia
//! bootstrap when the table has no one left to offer. A node left with almost no peers (its
//! bootstrap peers were full when it came) dials its bootstrap list again every few seconds.

use std::collections::HashMap;
use std::time::Duration;

use libp2p::PeerId;
use libp2p::swarm::DialError;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// How often connections are counted and trimmed or topped up.
pub(super) const TICK: Duration = Duration::from_secs(1);

/// At most this many dials a tick while below the target.
pub(super) const DIALS_PER_TICK: usize = 8;

/// A peer this node closed is not dialled again for this long (it may still dial us): the
/// node had more peers than it keeps, and dialling it back would undo the trim.
pub(super) const REDIAL_AFTER: Duration = Duration::from_secs(300);

/// A peer this node could not reach, while the node is cut off (below [`rejoin_below`]), is
/// tried again after this long. A peer at its ceiling refuses a dial that way (before the
/// handshake), and has a free slot again once it trims back to its target; a newcomer that
/// waited [`REDIAL_AFTER`] for each such peer could stay on one or two peers of a busy swarm
/// for minutes.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(30);

/// How long a node with `connected` peers leaves a peer it could not reach: [`RETRY_AFTER`]
/// while it is cut off, [`REDIAL_AFTER`] otherwise. A node with peers enough has no hurry, and
/// its dials would take the slots a full peer frees from the newcomers that need them: with
/// every node below its target retrying at 30 s, a hundred-node swarm left newcomers at no peer
/// for minutes.
pub(super) fn retry_after(connected: usize, target: usize) -> Duration {
    if connected < rejoin_below(target) { RETRY_AFTER } else { REDIAL_AFTER }
}

/// Whether a failed dial tells that the peer could not be reached, so that the peer manager
/// leaves it alone for a while. A dial this node refused itself (`Denied`: the gate refuses
/// Kademlia's dials while the node has its target) or never started says nothing about the
/// peer: counted, a node at its target would leave every peer its Kademlia walked through alone
/// for [`REDIAL_AFTER`], and could not dial them back when trimming or churn took its peers.
pub(super) fn says_peer_unreachable(error: &DialError) -> bool {
    !matches!(error, DialError::Denied { .. } | DialError::DialPeerConditionFalse(_) | DialError::Aborted)
}

/// The closed peers remembered at most; past it the oldest is forgotten first.
const CLOSED_MAX: usize = 4096;

/// Kademlia bootstraps, when the routing table has nobody left to dial, at most this often
/// while the node is short of [`nearly_full`] peers.
pub(super) const BOOTSTRAP_EVERY: Duration = Duration::from_secs(60);

/// How long a node with `connected` peers waits between Kademlia bootstraps while it is below
/// its target and knows nobody left to dial: [`BOOTSTRAP_EVERY`] while it is short of
/// [`nearly_full`], [`REDIAL_AFTER`] once it has that many. A swarm of nodes that keep the
/// same target never has every node at it (a node one short finds every peer full); each
/// lookup of a bootstrap asks twenty or so peers, and at a minute a 300-node swarm answered a
/// `FindNode` a second per node with nothing to gain. At [`REDIAL_AFTER`] the lookups come
/// back as often as the peers that refused the node may be dialled again.
pub(super) fn bootstrap_every(connected: usize, target: usize) -> Duration {
    if connected < nearly_full(target) { BOOTSTRAP_EVERY } else { REDIAL_AFTER }
}

/// Three quarters of the target: enough peers for every gossipsub mesh and spare, so the
/// node looks for the rest without hurry.
pub(super) fn nearly_full(target: usize) -> usize {
    target - target / 4
}

/// A node short of [`rejoin_below`] peers dials its bootstrap list again this often, and
/// bootstraps Kademlia through whoever answers. A bootstrap peer at its ceiling refuses a
/// newcomer before the handshake, and the newcomer then knows nobody else (or only another
/// newcomer refused the same way): without this it would wait for [`REDIAL_AFTER`], or forever
/// once Kademlia drops the address. A refused attempt costs the full peer one refused TCP
/// accept or QUIC handshake.
pub(super) const REJOIN_EVERY: Duration = Duration::from_secs(5);

/// Below this many peers (a quarter of the target, at least one) a node counts as cut off
/// from the swarm and dials its bootstrap list again every [`REJOIN_EVERY`], while one of its
/// bootstrap peers is not connected (in a swarm smaller than that, the node is not cut off).
pub(super) fn rejoin_below(target: usize) -> usize {
    (target / 4).max(1)
}

/// The most connections a node with `target` dials itself to top up (the peer manager's
/// dials, mDNS's, Kademlia's): a third of the target, at least one. The rest of its slots are
/// left to the peers that dial it, as Ethereum's clients keep two thirds of theirs for
/// inbound peers. A node that dialled up to its target filled its peers' slots with every
/// dial: in a swarm of nodes that all did, the first third to start dialled each other up to
/// their ceilings, and the hundred nodes of a lossy network came after to find every peer they
/// learned of full, half of them left on one peer (the bootstrap node, itself full and trimming
/// newcomers) three minutes on. Dialling a third, a swarm of nodes with one target holds about
/// two thirds of it on each, so a newcomer finds room wherever it looks. The bootstrap list and
/// an operator's dials are not counted against it.
pub(super) fn dial_at_most(target: usize) -> usize {
    (target / 3).max(1)
}

/// At this many peers the node trims back to `target`, and it refuses inbound connections at
/// this many established ones (see `gate`): a tenth more, and at least two, so a peer dialling
/// in does not make the node close a connection every tick, and a dial storm never takes it
/// past 1.1 times its target (for targets of 20 and up).
pub fn high_water(target: usize) -> usize {
    target + (target / 10).max(2)
}

/// A connected peer as the manager weighs it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Connected {
    pub(super) peer: PeerId,
    /// When the first of its current connections opened.
    pub(super) since: Instant,
    /// How many of this node's topic meshes it is in.
    pub(super) meshes: usize,
    /// Its gossipsub score (0 when gossipsub does not score it).
    pub(super) score: f64,
}

/// The peers to disconnect so that at most `target` remain: none while the node has fewer than
/// [`high_water`] peers. Peers connected for less than `grace` are kept. Of the others, the
/// ones in the fewest meshes go first, then the lowest scored, then the newest.
pub(super) fn excess(mut connected: Vec<Connected>, target: usize, grace: Duration, now: Instant) -> Vec<PeerId> {
    if connected.len() < high_water(target) {
        return Vec::new();
    }
    let surplus = connected.len() - target;
    connected.retain(|c| now.saturating_duration_since(c.since) >= grace);
    connected.sort_by(|a, b| {
        a.meshes.cmp(&b.meshes).then(a.score.total_cmp(&b.score)).then(b.since.cmp(&a.since)).then(a.peer.cmp(&b.peer))
    });
    connected.into_iter().take(surplus).map(|c| c.peer).collect()
}

/// `candidates` in an order no peer can choose: sorted by a hash of each peer id under a fresh
/// random salt, so that who gets dialled does not depend on routing-table order.
pub(super) fn shuffled(mut candidates: Vec<PeerId>) -> Vec<PeerId> {
    let mut salt = [0u8; 16];
    // Without randomness the order is the routing table's; still a valid choice.
    let _ = getrandom::fill(&mut salt);
    let rank = |peer: &PeerId| -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(salt);
        hash.update(peer.to_bytes());
        hash.finalize().into()
    };
    candidates.sort_by_cached_key(rank);
    candidates
}

/// Peers this node closed or could not reach, each with when it may be dialled again
/// ([`REDIAL_AFTER`] or [`RETRY_AFTER`] after).
#[derive(Debug, Default)]
pub(super) struct Closed(HashMap<PeerId, Instant>);

impl Closed {
    /// Leaves `peer` alone for `wait` from `now` (a later call replaces an earlier one).
    pub(super) fn insert(&mut self, peer: PeerId, now: Instant, wait: Duration) {
        if self.0.len() >= CLOSED_MAX
            && !self.0.contains_key(&peer)
            && let Some(soonest) = self.0.iter().min_by_key(|(_, until)| **until).map(|(peer, _)| *peer)
        {
            self.0.remove(&soonest);
        }
        self.0.insert(peer, now + wait);
    }

    /// Whether `peer` is still to be left alone at `now`.
    pub(super) fn recent(&self, peer: &PeerId, now: Instant) -> bool {
        self.0.get(peer).is_some_and(|until| now < *until)
    }

    /// Forgets the peers that may be dialled again, so the map holds at most what a few
    /// minutes of trimming and failed dials put in it.
    pub(super) fn expire(&mut self, now: Instant) {
        self.0.retain(|_, until| now < *until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(n: u8) -> Vec<PeerId> {
        (0..n).map(|i| crate::Keypair::from_seed([i; 32]).peer_id()).collect()
    }

    fn connected(peer: PeerId, since: Instant, meshes: usize, score: f64) -> Connected {
        Connected { peer, since, meshes, score }
    }

    #[test]
    fn a_node_dials_a_third_of_its_target_and_at_least_one_peer() {
        assert_eq!(dial_at_most(1), 1);
        assert_eq!(dial_at_most(3), 1);
        assert_eq!(dial_at_most(6), 2);
        assert_eq!(dial_at_most(20), 6);
        assert_eq!(dial_at_most(32), 10);
        // What a swarm of such nodes holds on average (twice what each dials) leaves room
        // below the ceiling for a newcomer's dials.
        for target in [1, 3, 8, 20, 32, 100] {
            assert!(2 * dial_at_most(target) < high_water(target), "target {target}");
        }
    }

    #[test]
    fn high_water_is_a_tenth_above_the_target_and_at_least_two() {
        assert_eq!(high_water(1), 3);
        assert_eq!(high_water(8), 10);
        assert_eq!(high_water(20), 22);
        assert_eq!(high_water(32), 35);
    }

    #[test]
    fn a_node_is_cut_off_below_a_quarter_of_its_target_and_always_when_alone() {
        assert_eq!(rejoin_below(32), 8);
        assert_eq!(rejoin_below(20), 5);
        assert_eq!(rejoin_below(3), 1);
        assert_eq!(rejoin_below(0), 1);
    }

    #[test]
    fn a_node_short_of_three_quarters_of_its_target_bootstraps_every_minute_and_later_every_five() {
        assert_eq!(nearly_full(20), 15);
        assert_eq!(bootstrap_every(14, 20), BOOTSTRAP_EVERY);
        assert_eq!(bootstrap_every(15, 20), REDIAL_AFTER);
        assert_eq!(bootstrap_every(19, 20), REDIAL_AFTER);
        // A small target has no "nearly": one short of it is short.
        assert_eq!(bootstrap_every(2, 3), BOOTSTRAP_EVERY);
        assert_eq!(bootstrap_every(0, 1), BOOTSTRAP_EVERY);
        assert!(REDIAL_AFTER > BOOTSTRAP_EVERY);
    }

    #[test]
    fn nothing_is_trimmed_below_the_high_water_mark() {
        let now = Instant::now() + Duration::from_secs(3600);
        let old = now - Duration::from_secs(600);
        let all: Vec<Connected> = peers(10).into_iter().map(|p| connected(p, old, 0, 0.0)).collect();
        assert!(excess(all[..9].to_vec(), 8, Duration::from_secs(20), now).is_empty(), "9 peers, high water 10");
        assert_eq!(excess(all.clone(), 8, Duration::from_secs(20), now).len(), 2, "10 peers, target 8, high water 10");
        assert_eq!(excess(all, 7, Duration::from_secs(20), now).len(), 3, "10 peers, target 7, high water 9");
    }

    #[test]
    fn only_a_dial_that_reached_for_the_peer_marks_it_unreachable() {
        use libp2p::TransportError;
        use libp2p::swarm::ConnectionDenied;
        let refused = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let addr: libp2p::Multiaddr = "/ip4/127.0.0.1/tcp/1".parse().unwrap();
        assert!(says_peer_unreachable(&DialError::Transport(vec![(addr, TransportError::Other(refused()))])));
        assert!(says_peer_unreachable(&DialError::NoAddresses));
        // The node's own gate (or connection limits) refused it before it was dialled.
        assert!(!says_peer_unreachable(&DialError::Denied { cause: ConnectionDenied::new(refused()) }));
        assert!(!says_peer_unreachable(&DialError::Aborted));
    }

    #[test]
    fn trimming_keeps_newcomers_mesh_peers_and_high_scores() {
        let now = Instant::now() + Duration::from_secs(3600);
        let grace = Duration::from_secs(20);
        let old = now - Duration::from_secs(600);
        let ids = peers(8);
        let all = vec![
            connected(ids[0], now - Duration::from_secs(5), 0, -50.0), // inside its grace period
            connected(ids[1], old, 3, 0.0),                            // in three meshes
            connected(ids[2], old, 1, 0.0),                            // in one mesh
            connected(ids[3], old, 0, 10.0),                           // no mesh, well scored
            connected(ids[4], old, 0, -10.0),                          // no mesh, scored low
            connected(ids[5], old + Duration::from_secs(60), 0, 0.0),  // no mesh, newer
            connected(ids[6], old, 0, 0.0),                            // no mesh, older
            connected(ids[7], old, 2, 0.0),                            // in two meshes
        ];
        // Target 3, high water 5: five of eight go, in this order.
        let trimmed = excess(all.clone(), 3, grace, now);
        assert_eq!(trimmed, vec![ids[4], ids[5], ids[6], ids[3], ids[2]]);
        // With more newcomers than the surplus allows, the node stays above target for now.
        let fresh: Vec<Connected> = all.iter().map(|c| Connected { since: now, ..*c }).collect();
        assert!(excess(fresh, 3, grace, now).is_empty());
    }

    #[test]
    fn a_closed_peer_is_left_alone_for_a_while_and_then_forgotten() {
        let now = Instant::now();
        let [a, b] = [peers(2)[0], peers(2)[1]];
        let mut closed = Closed::default();
        closed.insert(a, now, REDIAL_AFTER);
        assert!(closed.recent(&a, now + REDIAL_AFTER - Duration::from_secs(1)));
        assert!(!closed.recent(&a, now + REDIAL_AFTER));
        assert!(!closed.recent(&b, now));
        closed.expire(now + REDIAL_AFTER);
        assert!(closed.0.is_empty());
    }

    #[test]
    fn only_a_node_cut_off_retries_an_unreachable_peer_soon() {
        assert_eq!(retry_after(0, 32), RETRY_AFTER);
        assert_eq!(retry_after(7, 32), RETRY_AFTER);
        assert_eq!(retry_after(8, 32), REDIAL_AFTER);
        assert_eq!(retry_after(31, 32), REDIAL_AFTER);
    }

    #[test]
    fn a_peer_that_could_not_be_reached_is_tried_again_sooner_than_one_trimmed() {
        let now = Instant::now();
        let [trimmed, unreachable] = [peers(2)[0], peers(2)[1]];
        let mut closed = Closed::default();
        closed.insert(trimmed, now, REDIAL_AFTER);
        closed.insert(unreachable, now, RETRY_AFTER);
        let later = now + RETRY_AFTER;
        assert!(!closed.recent(&unreachable, later), "a failed dial waits only RETRY_AFTER");
        assert!(closed.recent(&trimmed, later), "a trimmed peer still waits");
        closed.expire(later);
        assert_eq!(closed.0.len(), 1, "the failed dial is forgotten, the trim is not");
        // A trim after a failed dial makes the peer wait the longer time.
        closed.insert(unreachable, later, REDIAL_AFTER);
        assert!(closed.recent(&unreachable, later + RETRY_AFTER));
    }

    #[test]
    fn closed_peers_past_the_bound_forget_the_oldest() {
        let now = Instant::now();
        let mut closed = Closed::default();
        let ids: Vec<PeerId> = (0..=CLOSED_MAX as u16)
            .map(|i| {
                let mut seed = [7u8; 32];
                seed[..2].copy_from_slice(&i.to_le_bytes());
                crate::Keypair::from_seed(seed).peer_id()
            })
            .collect();
        for (i, peer) in ids.iter().enumerate() {
            closed.insert(*peer, now + Duration::from_millis(i as u64), REDIAL_AFTER);
        }
        assert_eq!(closed.0.len(), CLOSED_MAX);
        assert!(!closed.recent(&ids[0], now), "the oldest went first");
        assert!(closed.recent(&ids[1], now + Duration::from_secs(1)));
        assert!(closed.recent(&ids[CLOSED_MAX], now + Duration::from_secs(1)));
    }

    #[test]
    fn shuffling_keeps_every_candidate_once() {
        let ids = peers(50);
        let mut out = shuffled(ids.clone());
        assert_ne!(out, ids, "50 peers in the same order twice is a 1 in 50! chance");
        out.sort();
        let mut sorted = ids;
        sorted.sort();
        assert_eq!(out, sorted);
    }
}
