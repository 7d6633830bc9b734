//! A fresh `druse-node` fetches all-MiniLM-L6-v2 from the Hugging Face hub on its first start,
//! checks it against the pinned sha256 and embeds by meaning; a later start does not download
//! again; a truncated download, a wrong file or an unreachable hub leave it on the hashing
//! embedder with one warning that says how to fix it, and never a file that looks good.
//! `druse-node model fetch` does the same by hand.
//!
//! The hub is [`druse_tests::hub`], on loopback, named by `HF_ENDPOINT`, serving the weights
//! `.ci/fetch-minilm.sh` fetches (byte for byte the pinned revision's files). Needs
//! `DRUSE_MINILM_DIR`: fails when `CI` is set and it is missing, skips with the reason otherwise.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use std::path::{Path, PathBuf};

use druse_memory::embed::fetch;
use druse_tests::hub::{self, Fault, LocalHub, SilentHub};
use druse_tests::process::{ProcNode, binaries, run_cli_env};
use serde_json::Value;

/// The embedder names `/v1/status` reports.
const MINILM: &str = "all-MiniLM-L6-v2";
const HASHING: &str = "hashing-384";

/// The line of the fallback warning; exactly one per start.
const FALLBACK: &str = "all-MiniLM-L6-v2 could not be fetched";

/// The folder `.ci/fetch-minilm.sh` filled, or why this test cannot run.
fn weights() -> Option<PathBuf> {
    let reason = match std::env::var_os("DRUSE_MINILM_DIR").map(PathBuf::from) {
        Some(dir) if hub::FILES.iter().all(|f| dir.join(f).is_file()) => return Some(dir),
        Some(dir) => format!("DRUSE_MINILM_DIR ({}) lacks one of {:?}", dir.display(), hub::FILES),
        None => "DRUSE_MINILM_DIR is not set".to_owned(),
    };
    let how = "export DRUSE_MINILM_DIR=\"$(bash .ci/fetch-minilm.sh)\"";
    assert!(std::env::var_os("CI").is_none(), "{reason}; CI must provide the MiniLM weights: {how}");
    println!("skipped: {reason} ({how})");
    None
}

async fn local_hub(weights: &Path, fault: Fault) -> LocalHub {
    LocalHub::start(weights, fetch::REPO, fetch::REVISION, fault).await.unwrap()
}

/// A scratch folder with a data directory and an empty trust list.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trust-list"), "").unwrap();
        Self { dir }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("node")
    }

    fn model_dir(&self) -> PathBuf {
        fetch::Fetch::new(&self.data(), None).model_dir()
    }

    /// Starts `druse-node run` with the download on, `HF_ENDPOINT` at `endpoint` and `extra`
    /// flags; returns once its API answers.
    async fn node(&self, name: &str, endpoint: &str, extra: &[&str]) -> ProcNode {
        let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
        let flags: Vec<&str> = ["--model-download", "true"].into_iter().chain(extra.iter().copied()).collect();
        let trust = self.dir.path().join("trust-list");
        let env = [("HF_ENDPOINT", endpoint)];
        ProcNode::spawn_env(name, &bins.node, &self.data(), &trust, &[], &flags, &env).unwrap().ready().await.unwrap()
    }
}

async fn embedder(node: &ProcNode) -> String {
    node.status().await.unwrap()["embedder"].as_str().unwrap().to_owned()
}

/// The lines of the node's log that carry the fallback warning.
fn fallback_warnings(node: &ProcNode) -> Vec<String> {
    node.process.log().lines().filter(|line| line.contains(FALLBACK)).map(str::to_owned).collect()
}

/// The one warning, which must say what failed (`what`) and name every way to fix it.
fn assert_one_warning(node: &ProcNode, what: &str) {
    let warnings = fallback_warnings(node);
    assert_eq!(warnings.len(), 1, "one fallback warning expected:\n{}", node.process.log());
    let warning = &warnings[0];
    assert!(warning.contains("WARN"), "not logged as a warning: {warning}");
    for needle in [what, "druse-node model fetch", "HF_ENDPOINT", "DRUSE_MINILM_DIR", "memory.embed.minilm_dir"] {
        assert!(warning.contains(needle), "the warning does not say {needle:?}: {warning}");
    }
}

/// Nothing in the model folder that could pass for the model, not even a partial file.
fn assert_no_model_files(scratch: &Scratch) {
    let dir = scratch.model_dir();
    let left: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.map(|e| e.unwrap().file_name()).collect(),
        Err(_) => Vec::new(),
    };
    assert!(left.is_empty(), "{} holds {left:?} after a failed fetch", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_node_downloads_the_model_checks_it_and_finds_memories_by_meaning() {
    let Some(weights) = weights() else { return };
    let hub = local_hub(&weights, Fault::None).await;
    let scratch = Scratch::new();
    let node = scratch.node("druse-node (fresh)", &hub.url, &[]).await;

    assert_eq!(embedder(&node).await, MINILM, "{}", node.process.log_tail());
    fetch::verify(&scratch.model_dir()).unwrap();
    assert!(fallback_warnings(&node).is_empty(), "a warning on a good download:\n{}", node.process.log());

    let bins = binaries().unwrap();
    for text in [
        "Sam drives a red car to work every morning",
        "Sam's sister adopted a grey cat last spring",
        "The quarterly report is due on Friday afternoon",
    ] {
        node.cli(&bins.node, &["memory", "add", text, "--namespace", "user:sam"]).await.unwrap();
    }
    // No word of the query is in the memory it must find: only an embedder that knows meaning can.
    let out = node.cli(&bins.node, &["memory", "search", "automobile", "--namespace", "user:sam", "--k", "1"]).await;
    let hits: Value = serde_json::from_str(&out.unwrap()).unwrap();
    assert_eq!(hits[0]["crystal"]["text"], "Sam drives a red car to work every morning", "hits: {hits}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_start_uses_the_verified_model_without_downloading_again() {
    let Some(weights) = weights() else { return };
    let hub = local_hub(&weights, Fault::None).await;
    let scratch = Scratch::new();
    let mut node = scratch.node("druse-node (first start)", &hub.url, &[]).await;
    assert_eq!(embedder(&node).await, MINILM, "{}", node.process.log_tail());
    node.process.terminate().await.unwrap();
    let served = hub.requests();
    assert!(served > 0, "the first start asked the hub nothing");

    let node = scratch.node("druse-node (second start)", &hub.url, &[]).await;
    assert_eq!(embedder(&node).await, MINILM, "{}", node.process.log_tail());
    assert_eq!(hub.requests(), served, "the second start asked the hub again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_download_falls_back_to_hashing_with_one_warning_and_leaves_no_model() {
    let Some(weights) = weights() else { return };
    let hub = local_hub(&weights, Fault::Truncate("model.safetensors")).await;
    let scratch = Scratch::new();
    let node = scratch.node("druse-node (truncated)", &hub.url, &[]).await;

    assert_eq!(embedder(&node).await, HASHING);
    assert_one_warning(&node, "model.safetensors");
    assert_no_model_files(&scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_the_wrong_hash_falls_back_to_hashing_with_one_warning_and_is_not_kept() {
    let Some(weights) = weights() else { return };
    let hub = local_hub(&weights, Fault::Corrupt("tokenizer.json")).await;
    let scratch = Scratch::new();
    let node = scratch.node("druse-node (wrong hash)", &hub.url, &[]).await;

    assert_eq!(embedder(&node).await, HASHING);
    assert_one_warning(&node, "tokenizer.json from");
    assert!(fallback_warnings(&node)[0].contains("fails its check: sha256"));
    assert_no_model_files(&scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_hub_falls_back_to_hashing_with_one_warning() {
    let Some(_) = weights() else { return };
    let scratch = Scratch::new();
    let node = scratch.node("druse-node (hub down)", &hub::down().unwrap(), &[]).await;

    assert_eq!(embedder(&node).await, HASHING);
    assert_one_warning(&node, "cannot reach the model hub");
    assert_no_model_files(&scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_never_answers_does_not_hold_up_the_start() {
    let Some(_) = weights() else { return };
    let silent = SilentHub::start().await.unwrap();
    let scratch = Scratch::new();
    let config = scratch.dir.path().join("node.toml");
    std::fs::write(&config, "[memory.embed]\ndownload_connect_timeout = \"1s\"\n").unwrap();
    // Without the bound the start would wait on the silent hub for ever; wait_healthy gives up
    // long before that.
    let node = scratch.node("druse-node (silent hub)", &silent.url, &["--config", config.to_str().unwrap()]).await;

    assert_eq!(embedder(&node).await, HASHING);
    assert_one_warning(&node, "no answer within 1s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_fetch_downloads_checks_and_prints_the_model_folder_once() {
    let Some(weights) = weights() else { return };
    let hub = local_hub(&weights, Fault::None).await;
    let scratch = Scratch::new();
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let data = scratch.data().display().to_string();
    let args = ["model", "fetch", "--data-dir", data.as_str()];

    let output = run_cli_env(&bins.node, &args, &[("HF_ENDPOINT", hub.url.as_str())]).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "model fetch failed: {stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), scratch.model_dir().display().to_string());
    fetch::verify(&scratch.model_dir()).unwrap();

    let served = hub.requests();
    let again = run_cli_env(&bins.node, &args, &[("HF_ENDPOINT", hub.url.as_str())]).await.unwrap();
    assert!(again.status.success(), "a second fetch failed: {}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(hub.requests(), served, "a second fetch downloaded again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_fetch_from_a_hub_serving_a_wrong_file_exits_non_zero_and_says_why() {
    let Some(weights) = weights() else { return };
    let hub = local_hub(&weights, Fault::Corrupt("model.safetensors")).await;
    let scratch = Scratch::new();
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let data = scratch.data().display().to_string();

    let output =
        run_cli_env(&bins.node, &["model", "fetch", "--data-dir", &data], &[("HF_ENDPOINT", hub.url.as_str())])
            .await
            .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "model fetch succeeded with a wrong file: {stderr}");
    assert!(stderr.contains("model.safetensors from") && stderr.contains("fails its check: sha256"), "{stderr}");
    assert!(stderr.contains("HF_ENDPOINT"), "the error does not say how to fix it: {stderr}");
    assert_no_model_files(&scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_fetch_from_an_unreachable_hub_exits_non_zero_and_says_why() {
    let Some(_) = weights() else { return };
    let scratch = Scratch::new();
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let data = scratch.data().display().to_string();
    let endpoint = hub::down().unwrap();

    let output =
        run_cli_env(&bins.node, &["model", "fetch", "--data-dir", &data], &[("HF_ENDPOINT", endpoint.as_str())])
            .await
            .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "model fetch succeeded without a hub: {stderr}");
    assert!(stderr.contains(&format!("cannot reach the model hub at {endpoint}")), "{stderr}");
}
