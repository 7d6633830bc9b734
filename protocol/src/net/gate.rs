//! Refuses inbound connections while the node is at its ceiling of established connections.
//!
//! The peer manager ([`super::peers`]) trims surplus peers only once they are past their grace
//! period, so on its own it lets a dial storm fill the node up to `max_established` for that
//! long: a flood of ten times the target would push a node far past it, and every one of those
//! connections costs a handshake, a gossipsub stream and scoring. The gate holds the line at
//! once: an inbound connection is refused, before its handshake when possible, while the
//! node's established connections are at the ceiling ([`super::peers::high_water`] of the
//! target). The node's own dials are never refused here: it dials only below its target, or
//! when asked to. A node at the ceiling trims back to the target after the grace period, so a
//! newcomer finds room again.

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

/// Counts established connections and refuses inbound ones at the ceiling.
#[derive(Debug)]
pub(super) struct Gate {
    ceiling: usize,
    established: HashSet<ConnectionId>,
}

impl Gate {
    /// A gate that refuses inbound connections once `ceiling` are established.
    pub(super) fn new(ceiling: usize) -> Self {
        Self { ceiling, established: HashSet::new() }
    }

    fn check(&self) -> Result<(), ConnectionDenied> {
        if self.established.len() >= self.ceiling {
            return Err(ConnectionDenied::new(AtCeiling { ceiling: self.ceiling }));
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

    fn handle_established_outbound_connection(
        &mut self,
        _: ConnectionId,
        _: PeerId,
        _: &Multiaddr,
        _: Endpoint,
        _: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        Ok(dummy::ConnectionHandler)
    }

    fn on_swarm_event(&mut self, event: FromSwarm) {
        match event {
            FromSwarm::ConnectionEstablished(established) => {
                self.established.insert(established.connection_id);
            }
            FromSwarm::ConnectionClosed(closed) => {
                self.established.remove(&closed.connection_id);
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
