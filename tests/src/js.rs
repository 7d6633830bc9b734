//! A peer written with js-libp2p (`tests/js/peer.mjs`) as a child process: it prints one JSON
//! event per line on stdout and takes one JSON command per line on stdin.
//!
//! Its npm packages are installed by `tests/js/setup.sh`. When they or `node` are missing, a
//! test fails with a clear message if `CI` is set, and skips with a printed reason otherwise.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::task::JoinHandle;

use crate::wait_for;

/// How long the `node --version` probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Lines of the peer's stderr and events quoted in a failure message.
const TAIL: usize = 40;

/// The folder of the js peer: `tests/js`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("js")
}

/// Why the js peer cannot run here, if it cannot: `node` missing or too old, or the npm
/// packages not installed.
pub async fn unavailable() -> Option<String> {
    let probe = tokio::time::timeout(PROBE_TIMEOUT, tokio::process::Command::new("node").arg("--version").output());
    let version = match probe.await {
        Err(_) => return Some(format!("`node --version` did not answer within {PROBE_TIMEOUT:?}")),
        Ok(Err(error)) => return Some(format!("cannot run `node` ({error}); install Node.js >= 20")),
        Ok(Ok(output)) => String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    };
    let major: Option<u32> = version.trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok());
    if major.is_none_or(|m| m < 20) {
        return Some(format!("Node.js {version} is too old; the js peer needs >= 20"));
    }
    for package in ["libp2p", "@chainsafe/libp2p-gossipsub", "@ipld/dag-cbor", "@noble/curves"] {
        let path = dir().join("node_modules").join(package).join("package.json");
        if !path.is_file() {
            return Some(format!(
                "npm package {package} is not installed ({} is missing): run tests/js/setup.sh",
                path.display()
            ));
        }
    }
    None
}

/// Returns `true` when the js peer can run. Otherwise fails the test when `CI` is set, or
/// prints why it skips and returns `false`.
pub async fn available_or_skip(test: &str) -> bool {
    let Some(reason) = unavailable().await else { return true };
    if std::env::var_os("CI").is_some() {
        panic!("{test}: the js-libp2p peer cannot run: {reason}");
    }
    eprintln!("SKIPPED {test}: the js-libp2p peer cannot run: {reason}");
    false
}

/// The running js peer.
#[derive(Debug)]
pub struct JsPeer {
    child: Child,
    stdin: ChildStdin,
    events: Arc<Mutex<Vec<Value>>>,
    reader: JoinHandle<()>,
    stderr: PathBuf,
}

impl Drop for JsPeer {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl JsPeer {
    /// Starts `peer.mjs` with the Ed25519 key of `seed` and dials `bootstrap`; returns once it
    /// reports `ready`, with that event.
    pub async fn start(seed: [u8; 32], bootstrap: &[String], stderr: PathBuf) -> Result<(Self, Value)> {
        let seed_hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
        let mut command = tokio::process::Command::new("node");
        command.current_dir(dir()).args(["--import", "./polyfill.mjs", "peer.mjs", "--seed", &seed_hex]);
        for addr in bootstrap {
            command.args(["--bootstrap", addr]);
        }
        let log = std::fs::File::create(&stderr).with_context(|| format!("creating {}", stderr.display()))?;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("spawning node tests/js/peer.mjs")?;
        let stdin = child.stdin.take().context("the js peer's stdin")?;
        let stdout = child.stdout.take().context("the js peer's stdout")?;
        let events = Arc::new(Mutex::new(Vec::new()));
        let reader = tokio::spawn({
            let events = Arc::clone(&events);
            async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let event = serde_json::from_str(&line)
                        .unwrap_or_else(|_| serde_json::json!({ "event": "unparsed", "line": line }));
                    if let Ok(mut events) = events.lock() {
                        events.push(event);
                    }
                }
            }
        });
        let mut peer = Self { child, stdin, events, reader, stderr };
        let ready = peer.wait_event("the js peer to be ready", |e| e["event"] == "ready").await?;
        Ok((peer, ready))
    }

    /// Every event so far, oldest first.
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// The first event `matches` accepts, waiting up to [`crate::WAIT`]; fails quoting the
    /// peer's events and stderr. An `error` event from the peer fails the wait at once.
    pub async fn wait_event(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Result<Value> {
        let events = Arc::clone(&self.events);
        let found = wait_for(crate::WAIT, what, async || {
            let events = events.lock().ok()?;
            if let Some(error) = events.iter().find(|e| e["event"] == "error") {
                return Some(Err(error.clone()));
            }
            events.iter().find(|e| matches(e)).cloned().map(Ok)
        })
        .await;
        match found {
            Ok(Ok(event)) => Ok(event),
            Ok(Err(error)) => bail!("the js peer reported an error while waiting for {what}: {error}\n{}", self.tail()),
            Err(timeout) => {
                let exited = self.child.try_wait().ok().flatten().map(|s| format!(" (it exited with {s})"));
                bail!("{timeout}{}\n{}", exited.unwrap_or_default(), self.tail())
            }
        }
    }

    /// Sends one command (a JSON object with `cmd`).
    pub async fn send(&mut self, command: &Value) -> Result<()> {
        let mut line = serde_json::to_vec(command)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await.context("writing to the js peer")?;
        self.stdin.flush().await.context("flushing the js peer's stdin")
    }

    /// Tells the peer to stop and waits for it to exit 0.
    pub async fn stop(mut self) -> Result<()> {
        self.send(&serde_json::json!({ "cmd": "stop" })).await?;
        let status = tokio::time::timeout(crate::WAIT, self.child.wait())
            .await
            .context("the js peer did not exit after stop")?
            .context("waiting for the js peer")?;
        if !status.success() {
            bail!("the js peer exited with {status}\n{}", self.tail());
        }
        Ok(())
    }

    /// The last events and stderr lines, for a failure message.
    pub fn tail(&self) -> String {
        let events = self.events();
        let events: Vec<String> = events[events.len().saturating_sub(TAIL)..].iter().map(Value::to_string).collect();
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = stderr.lines().collect();
        format!(
            "--- last events of the js peer ---\n{}\n--- its stderr ({}) ---\n{}",
            events.join("\n"),
            self.stderr.display(),
            lines[lines.len().saturating_sub(TAIL)..].join("\n")
        )
    }
}
