//! Starting the swarm task: the behaviour built for the node's key, the actor that owns it, and
//! the handle and event queue the node talks to it through.

use std::sync::Arc;

use libp2p::multiaddr::Protocol;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::actor::Actor;
use super::behaviour::build_swarm;
use super::{COMMAND_BUFFER, Config, Error, Event, Handle, Registry, TaskGuard};

/// Starts the swarm task for `key`; must be called inside a tokio runtime.
///
/// libp2p's metrics (and `druse_net_events_dropped_total`) are registered in `registry`.
pub fn spawn(
    key: &crate::Keypair,
    config: Config,
    registry: &mut Registry,
) -> Result<(Handle, mpsc::Receiver<Event>), Error> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
    let local_peer_id = key.peer_id();
    let bootstrap = config
        .bootstrap
        .iter()
        .map(|addr| match addr.iter().last() {
            Some(Protocol::P2p(peer)) => Ok((peer, addr.clone())),
            _ => Err(Error::Bootstrap(addr.clone())),
        })
        .collect::<Result<Vec<_>, _>>()?;

    let swarm = build_swarm(key.to_libp2p(), &config, registry)?;
    let (event_tx, event_rx) = mpsc::channel(config.event_buffer.max(1));
    let (command_tx, command_rx) = mpsc::channel(COMMAND_BUFFER);
    let mut actor = Actor::new(swarm, &config, command_rx, event_tx, registry);
    actor.start(&config.listen, &bootstrap)?;

    let span = tracing::info_span!("net", peer = %local_peer_id);
    let task = runtime.spawn(actor.run().instrument(span));
    let handle = Handle { local_peer_id, commands: command_tx, _task: Arc::new(TaskGuard(task)) };
    Ok((handle, event_rx))
}
