#![allow(clippy::unwrap_used)]
//! `kill -9` under load: the real `druse-node` binary is killed at pseudo-random moments (fixed
//! seed) while three things run against it at once:
//! - gossip ingest: a peer in this process publishes a new signed skill every few ms;
//! - API memory writes: `POST /v1/memories` back to back;
//! - consolidation: `POST /v1/consolidate`, one pass after another.
//!
//! After each restart every memory write the API acknowledged (201) and every skill the node
//! listed in `GET /v1/skills` before the kill is read back. `node/tests/durability.rs` covers
//! API writes alone; this adds gossip and consolidation racing them.
//!
//! The default run makes [`DEFAULT_KILLS`] kills; `DRUSE_KILLS=100` makes the long run the
//! tests README documents.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use druse_protocol::body::Body;
use druse_protocol::topic;
use druse_tests::process::{ProcNode, binaries};
use druse_tests::swarm::{Sniffer, listen_addr, listing, seal};
use druse_tests::{WAIT, eventually};
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// Kills in the default (CI) run.
const DEFAULT_KILLS: usize = 10;

/// The most kills `DRUSE_KILLS` may ask for.
const MAX_KILLS: usize = 1000;

/// The publishing peer's key seed.
const PUBLISHER_SEED: u8 = 61;

/// Pause between two skills the peer publishes.
const PUBLISH_EVERY: Duration = Duration::from_millis(20);

/// How often the node's skill listing is read during a round.
const POLL_SKILLS_EVERY: Duration = Duration::from_millis(100);

/// A round lasts this long plus up to [`KILL_JITTER_MS`] before the kill.
const KILL_AFTER_MIN: Duration = Duration::from_millis(300);
const KILL_JITTER_MS: u64 = 900;

/// Requests in flight while reading everything back.
const CHECK_CONCURRENCY: usize = 16;

/// A fixed-seed generator so a failure reproduces.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

fn kills() -> usize {
    match std::env::var("DRUSE_KILLS") {
        Ok(n) => n.parse().ok().filter(|n| (1..=MAX_KILLS).contains(n)).unwrap_or_else(|| {
            panic!("DRUSE_KILLS must be a number in 1..={MAX_KILLS}, not {n:?}");
        }),
        Err(_) => DEFAULT_KILLS,
    }
}

/// Words memory texts are made of, so no two texts are near-duplicates that consolidation
/// might merge.
const WORDS: [&str; 24] = [
    "parcel", "locker", "invoice", "garden", "violin", "harbour", "ledger", "quartz", "meadow", "tunnel", "lantern",
    "compass", "orchard", "glacier", "pepper", "saddle", "marble", "falcon", "copper", "thimble", "canyon", "walnut",
    "beacon", "velvet",
];

fn memory_text(rng: &mut Lcg, round: usize, n: usize) -> String {
    let words: Vec<&str> = (0..6).map(|_| WORDS[rng.next(WORDS.len() as u64) as usize]).collect();
    format!("round {round} write {n}: {} on day {}", words.join(" "), rng.next(100_000))
}

/// Reads every `(path, expected text)` back from `node`, a few at a time; returns the failures.
async fn read_back(
    http: &reqwest::Client,
    api: &str,
    token: &str,
    items: Vec<(String, Option<String>)>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut set = JoinSet::new();
    let mut items = items.into_iter();
    loop {
        while set.len() < CHECK_CONCURRENCY {
            let Some((path, text)) = items.next() else { break };
            let request = http.get(format!("{api}{path}")).bearer_auth(token);
            set.spawn(async move {
                let response = request.send().await.map_err(|e| format!("{path}: {e}"))?;
                let status = response.status();
                if status != reqwest::StatusCode::OK {
                    return Err(format!("{path}: answered {status}"));
                }
                let body: Value = response.json().await.map_err(|e| format!("{path}: {e}"))?;
                match text {
                    Some(text) if body["text"].as_str() != Some(text.as_str()) => {
                        Err(format!("{path}: text is {} instead of {text:?}", body["text"]))
                    }
                    _ => Ok(()),
                }
            });
        }
        match set.join_next().await {
            Some(Ok(Err(failure))) => failures.push(failure),
            Some(Err(panic)) => failures.push(format!("a check task failed: {panic}")),
            Some(Ok(Ok(()))) => {}
            None => return failures,
        }
    }
}

/// Publishes a new skill every [`PUBLISH_EVERY`] until `stop`; counts what went out.
fn spawn_publisher(sniffer: Arc<Sniffer>, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let body = listing(&format!("kill-skill-{n}"));
            n += 1;
            if let Ok(bytes) = seal(&sniffer.key, &Body::Crystal(body))
                && sniffer.net.publish(topic::CRYSTALS, bytes).await.is_ok()
            {
                sent.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(PUBLISH_EVERY).await;
        }
    })
}

/// What one round of load did before its kill.
#[derive(Default)]
struct Round {
    acknowledged: Vec<(u64, String)>,
    skills: BTreeSet<String>,
    passes: u64,
    consolidating_at_kill: bool,
}

/// Runs writes, consolidation and skill polling against `node` until `kill_after` has passed.
async fn load(node: &ProcNode, token: &str, round: usize, kill_after: Duration, rng: &mut Lcg, author: &str) -> Round {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let deadline = tokio::time::Instant::now() + kill_after;
    let consolidating = Arc::new(AtomicBool::new(false));
    let passes = Arc::new(AtomicU64::new(0));
    let consolidator = tokio::spawn({
        let (http, url, token) = (http.clone(), format!("{}/v1/consolidate", node.api), token.to_owned());
        let (consolidating, passes) = (Arc::clone(&consolidating), Arc::clone(&passes));
        async move {
            while tokio::time::Instant::now() < deadline {
                consolidating.store(true, Ordering::SeqCst);
                let answered = http.post(&url).bearer_auth(&token).send().await;
                consolidating.store(false, Ordering::SeqCst);
                if answered.is_ok_and(|r| r.status().is_success()) {
                    passes.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let poller = tokio::spawn({
        let (http, url, author) = (http.clone(), format!("{}/v1/skills?limit=1000", node.api), author.to_owned());
        async move {
            let mut seen = BTreeSet::new();
            while tokio::time::Instant::now() < deadline {
                if let Ok(response) = http.get(&url).send().await
                    && let Ok(Value::Array(skills)) = response.json::<Value>().await
                {
                    let ids = skills.iter().filter(|s| s["author"] == author.as_str());
                    seen.extend(ids.filter_map(|s| s["id"].as_str().map(str::to_owned)));
                }
                tokio::time::sleep(POLL_SKILLS_EVERY).await;
            }
            seen
        }
    });
    let mut acknowledged = Vec::new();
    let mut n = 0;
    while tokio::time::Instant::now() < deadline {
        let text = memory_text(rng, round, n);
        n += 1;
        let request = http.post(format!("{}/v1/memories", node.api)).bearer_auth(token);
        if let Ok(response) = request.json(&json!({ "text": text, "kind": "interaction" })).send().await
            && response.status().as_u16() == 201
            && let Ok(body) = response.json::<Value>().await
            && let Some(id) = body["crystal"]["id"].as_u64()
        {
            acknowledged.push((id, text));
        }
    }
    let consolidating_at_kill = consolidating.load(Ordering::SeqCst);
    let skills = poller.await.unwrap();
    consolidator.abort();
    Round { acknowledged, skills, passes: passes.load(Ordering::Relaxed), consolidating_at_kill }
}

async fn start(bins: &Path, dir: &Path, trust: &Path, config: &Path, bootstrap: &str) -> ProcNode {
    let addr = bootstrap.parse().unwrap();
    let extra = ["--config", config.to_str().unwrap()];
    ProcNode::start_with("druse-node victim", bins, dir, trust, &[addr], &extra).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_and_accepted_skills_survive_kill_9_during_gossip_writes_and_consolidation() {
    let kills = kills();
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("victim");
    std::fs::create_dir_all(&dir).unwrap();
    let trust = root.path().join("trust.list");
    std::fs::write(&trust, "").unwrap();
    // The default rate limit (10 listings a minute per peer) would ignore most of the load.
    let config = root.path().join("victim.toml");
    std::fs::write(&config, "[trust]\nlistings_per_window = 1000000\n").unwrap();

    let sniffer = Arc::new(Sniffer::start(PUBLISHER_SEED).unwrap());
    let bootstrap = listen_addr(&sniffer.net).await.unwrap().to_string();
    let author = sniffer.key.public().to_string();
    let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let publisher = spawn_publisher(Arc::clone(&sniffer), Arc::clone(&stop), Arc::clone(&sent));

    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut rng = Lcg(0x6b11);
    let mut acknowledged: Vec<(u64, String)> = Vec::new();
    let mut skills: BTreeSet<String> = BTreeSet::new();
    let (mut passes, mut consolidating_kills, mut checks) = (0u64, 0usize, 0usize);
    let started = Instant::now();
    for round in 0..=kills {
        let mut node = start(&bins.node, &dir, &trust, &config, &bootstrap).await;
        let token = std::fs::read_to_string(dir.join("api.token")).unwrap().trim().to_owned();
        let mut items: Vec<(String, Option<String>)> =
            acknowledged.iter().map(|(id, text)| (format!("/v1/crystals/{id}"), Some(text.clone()))).collect();
        items.extend(skills.iter().map(|id| (format!("/v1/skills/{id}"), None)));
        checks += items.len();
        let failures = read_back(&http, &node.api, &token, items).await;
        assert!(
            failures.is_empty(),
            "after kill {round}: {} of {} acknowledged writes and {} accepted skills are lost or changed:\n{}\n{}",
            failures.len(),
            acknowledged.len(),
            skills.len(),
            failures.iter().take(20).cloned().collect::<Vec<_>>().join("\n"),
            node.process.log_tail()
        );
        if round == kills {
            break;
        }
        // Gossip must reach the restarted node before the round counts as racing it.
        let peer = sniffer.net.local_peer_id();
        eventually(WAIT, format_args!("the victim to reconnect to the publisher (round {round})"), async || {
            sniffer.net.peers().await.is_ok_and(|p| p.iter().any(|i| i.peer_id != peer))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.process.log_tail()));
        let kill_after = KILL_AFTER_MIN + Duration::from_millis(rng.next(KILL_JITTER_MS));
        let done = load(&node, &token, round, kill_after, &mut rng, &author).await;
        node.process.check_running().unwrap();
        // SIGKILL: no shutdown path runs.
        node.process.kill9().await.unwrap();
        passes += done.passes;
        consolidating_kills += usize::from(done.consolidating_at_kill);
        println!(
            "kill {:>3}: after {kill_after:?}, {} writes acknowledged, {} new skills listed, {} consolidation passes{}",
            round + 1,
            done.acknowledged.len(),
            done.skills.difference(&skills).count(),
            done.passes,
            if done.consolidating_at_kill { ", killed during a pass" } else { "" }
        );
        acknowledged.extend(done.acknowledged);
        skills.extend(done.skills);
    }
    stop.store(true, Ordering::Relaxed);
    publisher.await.unwrap();
    println!(
        "kill -9: {kills} kills survived in {:?}; {} acknowledged writes and {} accepted skills (of {} published) all \
         present after every restart ({checks} reads); {passes} consolidation passes, {consolidating_kills} kills \
         during a pass",
        started.elapsed(),
        acknowledged.len(),
        skills.len(),
        sent.load(Ordering::Relaxed)
    );
    assert!(acknowledged.len() >= kills, "too few writes were acknowledged to prove anything: {}", acknowledged.len());
    assert!(skills.len() >= kills, "too few skills were accepted over gossip to prove anything: {}", skills.len());
    assert!(passes >= 1, "no consolidation pass completed: consolidation never raced a kill");
}
