//! Refuses inbound connections while the node is at its ceiling of established connections,
//! and outbound ones the node did not ask for once it has its target.
//!
//! The peer manager ([`super::peers`]) trims surplus peers only once they are past their grace
//! period, so on its own it lets a dial storm fill the node up to `max_established` for that
//! long: a flood of ten times the target would push a node far past it, and every one of those
//! connections costs a handshake, a gossipsub stream and scoring. The gate holds the line at
//! once: an inbound connection is refused, before its handshake when possible, while the
//! node's established connections are at the ceiling ([`super::peers::high_water`] of the
//! target). A node at the ceiling trims back to the target after the grace period, so a
//! newcomer finds room again.
//!
//! The node's own dials (the bootstrap list, an operator's dial, mDNS, the peer manager's top-up)
//! are announced with [`Gate::own`] and never refused: the node makes them only below its
//! target, or when asked to. Every other outbound dial comes from Kademlia: a lookup or a
//! bootstrap dials each peer it walks through, whatever the node holds already. Left alone
//! those dials took a third of a hundred-node swarm past its ceiling, where the trimmer closed
//! them after their grace period and the next lookup dialled again: a churn of handshakes that
//! kept an idle swarm busy. So once the node has its target, or has dialled as many
//! connections as it dials at all ([`super::peers::dial_at_most`]: it leaves the rest of its
//! slots to the peers that dial it), a dial it did not ask for is refused before it starts
//! (Kademlia counts the peer as unreachable for that query and keeps its address), and if
//! several started together, the surplus is closed once established.

use std::collections::HashSet;
use std::convert::Infallible;
use std::task::{Context, Poll};

use libp2p::PeerId;
use libp2p::core::transport::PortUse;
use libp2p::core::{Endpoint, Multiaddr};
use libp2p::swarm::{
    ConnectionDenied, ConnectionId, FromSwarm, NetworkBehaviour, THandler, THandlerInEvent, THandlerOutEvent, ToSwarm,
    dummy,
};

/// Why an inbound connection was refused: the node holds `ceiling` connections already.
#[derive(Debug, thiserror::Error)]
#[error("the node is at its ceiling of {ceiling} established connections")]
pub(super) struct AtCeiling {
    ceiling: usize,
}

/// Why an outbound connection the node did not ask for was refused: it has its `target`.
#[derive(Debug, thiserror::Error)]
#[error("the node has its target of {target} connections; dials it did not ask for are refused")]
pub(super) struct AtTarget {
    target: usize,
}

/// Why an outbound connection the node did not ask for was refused: it has dialled `most`
/// connections, as many as it dials, and leaves the rest of its slots to inbound peers.
#[derive(Debug, thiserror::Error)]
#[error("the node has dialled {most} connections, all it dials; dials it did not ask for are refused")]
pub(super) struct DialledEnough {
    most: usize,
}

/// Counts established connections, refuses inbound ones at the ceiling and outbound ones the
/// node did not ask for at the target or once it has dialled all it dials.
#[derive(Debug)]
pub(super) struct Gate {
    target: usize,
    ceiling: usize,
    /// The most established connections this node dialled, beyond which a dial it did not
    /// ask for is refused.
    dial_at_most: usize,
    established: HashSet<ConnectionId>,
    /// The established connections this node dialled (a subset of `established`).
    dialled: HashSet<ConnectionId>,
    /// The node's own dials not yet established or failed: each leaves on either event, and
    /// the node starts at most a few a tick.
    own: HashSet<ConnectionId>,
}

impl Gate {
    /// A gate that refuses inbound connections once `ceiling` are established, and outbound
    /// ones not announced with [`Gate::own`] once `target` are, or once `dial_at_most` of the
    /// established ones were dialled by this node.
    pub(super) fn new(target: usize, ceiling: usize, dial_at_most: usize) -> Self {
        Self {
            target,
            ceiling,
            dial_at_most,
            established: HashSet::new(),
            dialled: HashSet::new(),
            own: HashSet::new(),
        }
    }

    /// How many connections this node dialled: established, and its own dials still under
    /// way (each becomes one of the first, or fails).
    pub(super) fn dialled(&self) -> usize {
        self.dialled.len() + self.own.len()
    }

    /// Marks `connection` as a dial the node itself asked for: it is never refused. Call it
    /// just before `Swarm::dial` with the dial's connection id.
    pub(super) fn own(&mut self, connection: ConnectionId) {
        self.own.insert(connection);
    }

    fn check(&self) -> Result<(), ConnectionDenied> {
        if self.established.len() >= self.ceiling {
            return Err(ConnectionDenied::new(AtCeiling { ceiling: self.ceiling }));
        }
        Ok(())
    }

    fn check_outbound(&self, connection: ConnectionId) -> Result<(), ConnectionDenied> {
        if self.own.contains(&connection) {
            return Ok(());
        }
        if self.established.len() >= self.target {
            return Err(ConnectionDenied::new(AtTarget { target: self.target }));
        }
        if self.dialled.len() >= self.dial_at_most {
            return Err(ConnectionDenied::new(DialledEnough { most: self.dial_at_most }));
        }
        Ok(())
    }
}

impl NetworkBehaviour for Gate {
    type ConnectionHandler = dummy::ConnectionHandler;
    type ToSwarm = Infallible;

    fn handle_pending_inbound_connection(
        &mut self,
        _: ConnectionId,
        _: &Multiaddr,
        _: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        // Refused before the handshake: a full node spends nothing on it.
        self.check()
    }

    fn handle_established_inbound_connection(
        &mut self,
        _: ConnectionId,
        _: PeerId,
        _: &Multiaddr,
        _: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        // Several may have passed the pending check together; the last ones stop here.
        self.check()?;
        Ok(dummy::ConnectionHandler)
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection: ConnectionId,
        _: Option<PeerId>,
        _: &[Multiaddr],
        _: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        // Refused before it is dialled: no handshake on either side.
        self.check_outbound(connection)?;
        Ok(Vec::new())
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection: ConnectionId,
        _: PeerId,
        _: &Multiaddr,
        _: Endpoint,
        _: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        // Several may have been dialled together; the ones past the target stop here.
        let checked = self.check_outbound(connection);
        self.own.remove(&connection);
        checked?;
        Ok(dummy::ConnectionHandler)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        match event {
            FromSwarm::ConnectionEstablished(established) => {
                self.established.insert(established.connection_id);
                if established.endpoint.is_dialer() {
                    self.dialled.insert(established.connection_id);
                }
            }
            FromSwarm::ConnectionClosed(closed) => {
                self.established.remove(&closed.connection_id);
                self.dialled.remove(&closed.connection_id);
            }
            FromSwarm::DialFailure(failure) => {
                self.own.remove(&failure.connection_id);
            }
            _ => {}
        }
    }

    fn on_connection_handler_event(&mut self, _: PeerId, _: ConnectionId, event: THandlerOutEvent<Self>) {
        match event {}
    }

    fn poll(&mut self, _: &mut Context<'_>) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        Poll::Pending
    }
}
