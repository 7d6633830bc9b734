//! What the node crate's API tests share: a real edge node on loopback ports the OS picks.

use druse_node::Role;
use druse_node::config::Config;
use druse_node::daemon::{self, Running};
use serde_json::Value;

/// Starts an edge node in a fresh data directory, with every listener on port 0 and mDNS off.
#[allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.
pub(crate) async fn start() -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.store.data_dir = dir.path().to_owned();
    config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()];
    config.p2p.mdns = false;
    config.api.listen = "127.0.0.1:0".parse().unwrap();
    config.metrics.listen = "127.0.0.1:0".parse().unwrap();
    let running = daemon::start(config, Role::Edge, |_| axum::Router::new()).await.unwrap();
    (running, dir)
}

/// GETs `path` from the node's API, with its token when `token`; the status and the JSON body.
#[allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.
pub(crate) async fn get(running: &Running, path: &str, token: bool) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("http://{}{path}", running.api_addr));
    if token {
        request = request.bearer_auth(running.node.token());
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}
