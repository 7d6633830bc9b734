//! Harness for multi-node druse scenarios.
//!
//! The `tests` crate proves what only a running swarm can show: that a skill, an endorsement or
//! a weather message travels through real libp2p gossipsub and is applied (or refused) by every
//! node. It drives swarms two ways: nodes in one process on loopback with 100 ms heartbeats
//! ([`swarm`]), and the built `druse-node` / `druse-mgmt` binaries as child processes driven
//! through their CLI ([`process`]). Every wait has a timeout and names what it waited for, and
//! every key comes from a fixed seed, so a failure reproduces.

pub mod agent;
pub mod atproto;
pub mod browser;
pub mod hub;
pub mod js;
pub mod llm;
pub mod metrics;
pub mod page;
pub mod process;
pub mod procfs;
pub mod swarm;

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The longest any single wait may take before a scenario fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// How often a wait re-checks its condition.
const POLL: Duration = Duration::from_millis(10);

/// Waits until `check` holds, re-checking every 10 ms; fails after `timeout`, naming `what`.
pub async fn eventually(
    timeout: Duration,
    what: impl Display,
    mut check: impl AsyncFnMut() -> bool,
) -> anyhow::Result<()> {
    wait_for(timeout, what, async || check().await.then_some(())).await
}

/// Waits until `probe` yields a value, re-checking every 10 ms; fails after `timeout`, naming
/// `what`. A probe that hangs counts against the same timeout.
pub async fn wait_for<T>(
    timeout: Duration,
    what: impl Display,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    loop {
        let left = timeout.saturating_sub(started.elapsed()).max(POLL);
        if let Ok(Some(value)) = tokio::time::timeout(left, probe()).await {
            return Ok(value);
        }
        if started.elapsed() >= timeout {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Sends node logs to the test output when `RUST_LOG` is set (`RUST_LOG=druse_node=debug`).
pub fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}
