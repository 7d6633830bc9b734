//! Blocking work (embedding, disk) run off the async runtime, so no storage call or model
//! computation holds an executor thread.

/// A blocking task that panicked or was cancelled.
#[derive(Debug, thiserror::Error)]
#[error("a blocking task failed: {0}")]
pub struct Failed(String);

/// Runs `f` on the runtime's blocking pool and waits for it.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Failed> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Failed(e.to_string()))
}
