//! A write the API acknowledged survives `kill -9` at any moment: the real `druse-node`
//! binary in a write loop, killed at pseudo-random moments (fixed seed) twenty times; after
//! each restart the store opens and every acknowledged memory is there.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Node {
    child: Child,
    log: PathBuf,
    /// The API's base URL, read from the startup line (empty until then).
    api: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the node with every port chosen by the OS; its startup line names the API's.
fn start(dir: &Path, round: usize) -> Node {
    let log = dir.with_extension(format!("{round}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_druse-node"))
        .args(["run", "--data-dir"])
        .arg(dir)
        .args(["--listen", "/ip4/127.0.0.1/tcp/0", "--mdns", "false"])
        .args(["--api-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn,druse_node::daemon=info")
        // The embedder it always had (MiniLM when DRUSE_MINILM_DIR names it): no hub download.
        .env("DRUSE_MODEL_DOWNLOAD", "false")
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap();
    Node { child, log, api: String::new() }
}

/// The API address in the startup line (`...; API http://127.0.0.1:PORT; metrics ...`).
fn startup_api(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains(" started: p2p "))?;
    let (_, rest) = line.split_once("; API ")?;
    Some(rest.split_once(';')?.0.to_owned())
}

/// Waits for the startup line, then until the API answers.
async fn wait_ready(client: &reqwest::Client, node: &mut Node) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if node.api.is_empty()
            && let Some(api) = startup_api(&std::fs::read_to_string(&node.log).unwrap_or_default())
        {
            node.api = api;
        }
        if !node.api.is_empty()
            && let Ok(response) = client.get(format!("{}/healthz", node.api)).send().await
            && response.status().is_success()
        {
            return;
        }
        if let Ok(Some(status)) = node.child.try_wait() {
            let log = std::fs::read_to_string(&node.log).unwrap_or_default();
            panic!("the node exited at start-up with {status}: the store did not open\n{log}");
        }
        assert!(Instant::now() < deadline, "the node did not become ready within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fixed-seed generator so a failure reproduces.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_memories_survive_kill_9_at_random_moments() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut rng = Lcg(0x5eed);
    let mut acknowledged: Vec<(u64, String)> = Vec::new();
    for round in 0..20 {
        let mut node = start(&dir.path().join("node"), round);
        wait_ready(&client, &mut node).await;
        let token = std::fs::read_to_string(dir.path().join("node").join("api.token")).unwrap().trim().to_owned();
        for (id, text) in &acknowledged {
            let response =
                client.get(format!("{}/v1/crystals/{id}", node.api)).bearer_auth(&token).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200, "round {round}: acknowledged memory {id} ({text}) is lost");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["text"].as_str(), Some(text.as_str()), "round {round}: memory {id} changed");
        }
        let kill_after = Duration::from_millis(50 + rng.next(400));
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < kill_after {
            let text = format!("round {round} note {n}: the parcel locker code changes on day {}", rng.next(1000));
            let request = client
                .post(format!("{}/v1/memories", node.api))
                .bearer_auth(&token)
                .json(&json!({ "text": text, "kind": "interaction" }));
            if let Ok(response) = request.send().await
                && response.status().as_u16() == 201
            {
                let body: Value = response.json().await.unwrap();
                acknowledged.push((body["crystal"]["id"].as_u64().unwrap(), text));
            }
            n += 1;
        }
        // SIGKILL: no shutdown path runs.
        node.child.kill().unwrap();
        node.child.wait().unwrap();
    }
    assert!(acknowledged.len() >= 20, "too few writes were acknowledged to prove anything: {}", acknowledged.len());
    let mut node = start(&dir.path().join("node"), 20);
    wait_ready(&client, &mut node).await;
    let token = std::fs::read_to_string(dir.path().join("node").join("api.token")).unwrap().trim().to_owned();
    let hits: Value = client
        .get(format!("{}/v1/memories?q=parcel%20locker&k=100", node.api))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!hits.as_array().unwrap().is_empty(), "recall works on the restarted store");
}
