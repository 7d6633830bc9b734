//! Running a node as a service: the daemon wires the parts and owns them. It starts the node
//! core, then the agent with a handle to the core, then the HTTP surfaces (the core API, the
//! agent's routes, the skill folders' routes, the memory page, MCP and the role's own routes,
//! composed here), and stops them in the reverse order on SIGTERM or Ctrl-C (leave the swarm,
//! flush the store).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::node::{self, Node, Role};

/// A started node with its agent and its HTTP listeners.
#[derive(Debug)]
pub struct Running {
    pub node: Node,
    /// The agent, when `[agent] enabled`.
    pub agent: Option<druse_agent::Handle>,
    /// Where the API listens (the configured port, or the one the OS chose for port 0).
    pub api_addr: SocketAddr,
    /// Where the metrics listener listens.
    pub metrics_addr: SocketAddr,
    stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, node::StartError> {
    TcpListener::bind(addr).await.map_err(|e| {
        node::StartError::Io(std::io::Error::new(e.kind(), format!("cannot listen for the {what} on {addr}: {e}")))
    })
}

/// Starts a node and its agent, and serves its API (with `extra` routes merged in) and its
/// metrics.
pub async fn start(
    config: Config,
    role: Role,
    extra: impl FnOnce(&Node) -> Router,
) -> Result<Running, node::StartError> {
    let api = bind(config.api.listen, "API").await?;
    let metrics = bind(config.metrics.listen, "metrics").await?;
    // The agent's secrets are read before anything starts, so a missing one refuses to start.
    let secrets = druse_agent::Secrets::from_env(&config.agent).map_err(crate::config::Error::from)?;
    let mut agent_metrics = None;
    let node = Node::start_with(config, role, |registry| {
        agent_metrics = Some(druse_agent::metrics::Metrics::register(registry))
    })
    .await?;
    let agent = match (secrets, agent_metrics) {
        (Some(secrets), Some(metrics)) => {
            let session = node.config().store.data_dir.join("agent-session.json");
            let port: Arc<dyn druse_agent::node::Node> = Arc::new(node.clone());
            Some(druse_agent::start(port, node.config().agent.clone(), session, metrics, secrets))
        }
        _ => None,
    };
    let api_addr = api.local_addr()?;
    let metrics_addr = metrics.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let app = routes(&node, agent.clone(), extra(&node));
    let metrics_app = crate::api::metrics_router(node.clone());
    let servers = vec![spawn_server(api, app, stopped.clone()), spawn_server(metrics, metrics_app, stopped)];
    Ok(Running { node, agent, api_addr, metrics_addr, stop, servers })
}

/// The API listener's routes: the core API, the agent's, the memory page's and `extra` under
/// the body cap with the API's errors, and MCP (which calls the others in-process) with its
/// own, which MCP clients read as JSON-RPC.
fn routes(node: &Node, agent: Option<druse_agent::Handle>, extra: Router) -> Router {
    let max_body = node.config().api.max_body_bytes;
    let api = crate::api::routes(node.clone())
        .merge(crate::api::agent::routes(agent, node.token()))
        .merge(crate::api::skill_folder::routes(node))
        .merge(crate::api::adopt::routes(node))
        .merge(crate::memory_map::routes(node.clone()));
    let mcp = crate::mcp::routes(node, crate::api::finish(api.clone(), max_body));
    crate::api::finish(api.merge(extra), max_body).merge(mcp)
}

fn spawn_server(listener: TcpListener, app: Router, mut stopped: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        if let Err(error) = crate::api::serve(listener, app, shutdown).await {
            tracing::error!(%error, "HTTP server failed");
        }
    })
}

impl Running {
    /// The line an operator reads first: who the node is and where to reach it.
    pub async fn startup_line(&self) -> String {
        let status = self.node.status().await;
        format!(
            "druse {role} node {peer} started: p2p {listen}; API http://{api}; metrics http://{metrics}/metrics; \
             embedder {embedder}; trusted management keys: {keys}",
            role = status.role.as_str(),
            peer = status.peer_id,
            listen = status.listen_addrs.join(", "),
            api = self.api_addr,
            metrics = self.metrics_addr,
            keys = status.management_keys.len(),
            embedder = status.embedder,
        )
    }

    /// Stops the HTTP servers, leaves the swarm and flushes the store.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for server in self.servers {
            let _ = server.await;
        }
        self.node.shutdown().await;
    }
}

/// SIGTERM and Ctrl-C, caught from the moment [`Signals::listen`] returns.
///
/// A node listens before it does anything else, so a stop request that arrives while it is
/// still starting is kept and honoured as soon as it can stop cleanly, never met by the
/// default action that would kill it without a flush.
#[derive(Debug)]
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts catching SIGTERM and SIGINT now (inside a Tokio runtime).
    pub fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self { term: signal(SignalKind::terminate())?, interrupt: signal(SignalKind::interrupt())? })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Resolves on the next SIGTERM or Ctrl-C, or at once if one came since the last call.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Runs a node until SIGTERM or Ctrl-C, then stops it cleanly. `signals` must have been caught
/// before the caller started any work, so a stop request at any moment of start-up is honoured.
pub async fn run(
    config: Config,
    role: Role,
    mut signals: Signals,
    extra: impl FnOnce(&Node) -> Router,
) -> Result<(), node::StartError> {
    let running = start(config, role, extra).await?;
    // Give the swarm a moment to bind its listeners so the startup line names them; a stop
    // request cuts the wait short.
    let listening = async {
        for _ in 0..20 {
            if !running.node.net().listen_addrs().await.unwrap_or_default().is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let stop_early = tokio::select! {
        () = listening => false,
        () = signals.recv() => true,
    };
    tracing::info!("{}", running.startup_line().await);
    if !stop_early {
        signals.recv().await;
    }
    tracing::info!("stopping: leaving the swarm and flushing the store");
    running.stop().await;
    tracing::info!("stopped");
    Ok(())
}
