//! Issue 38's walk through the market on real processes: a `druse-mgmt` and five `druse-node`
//! processes on 127.0.0.1, the price printed on every node after each step, each step asserted
//! on every node. No evidence; the publisher's own reports; fresh keys that do not adopt, then
//! adopt, none of which price the skill; three adopters attested `trusted` by the management
//! process, one success each, price it everywhere; two failures lower the price; 2 000
//! unvouched keys leave it where it was with the default rooms; and a vouched adopter that
//! comes after them is counted.
//!
//! The processes are driven through their HTTP API and `druse-mgmt attest`; the fresh keys'
//! signed reports come from a bare libp2p peer of the test ([`Sniffer`]) and reach the
//! processes over gossip, like anyone's.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use druse_node::client::Client;
use druse_protocol::body::{Body, Report, ReportEvent};
use druse_protocol::net::Multiaddr;
use druse_protocol::reputation::{self, Evidence};
use druse_protocol::{ContentId, Keypair, PublicKey, topic};
use druse_tests::metrics;
use druse_tests::process::{Binaries, ProcNode, binaries};
use druse_tests::swarm::{Sniffer, key, mgmt_key, seal, wait_connected};
use druse_tests::{WAIT, eventually, wait_for};
use serde_json::{Value, json};

/// Reports the test's peer publishes before it waits for every process to apply them: gossip
/// drops what overflows a connection's send queue, so the flood goes in rounds.
const ROUND: usize = 250;

/// How long the 2 000 keys' 4 000 reports may take to reach every process.
const FLOOD_WAIT: Duration = Duration::from_secs(90);

/// One process of the walk with its API client.
struct Member {
    name: &'static str,
    process: ProcNode,
    client: Client,
    key: Keypair,
}

impl Member {
    async fn start(
        name: &'static str,
        program: &Path,
        dir: PathBuf,
        key: Keypair,
        trust_list: &Path,
        bootstrap: &[Multiaddr],
        extra: &[&str],
    ) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        key.save(&dir.join("node.key")).unwrap();
        let process = ProcNode::start_with(name, program, &dir, trust_list, bootstrap, extra).await.unwrap();
        let client = Client::new(&process.api, Some(Client::token_from(&dir).unwrap()));
        Self { name, process, client, key }
    }

    fn public(&self) -> PublicKey {
        self.key.public()
    }

    async fn listing(&self, id: ContentId) -> Option<Value> {
        self.client.get::<Value>(&format!("/v1/skills/{id}")).await.ok()
    }

    async fn report(&self, id: ContentId, success: bool, reward: f64) {
        let body = json!({ "success": success, "reward": reward });
        let _: Value = self.client.post(&format!("/v1/skills/{id}/reports"), &body).await.unwrap();
    }

    async fn adopt(&self, id: ContentId) -> Value {
        self.client.post(&format!("/v1/skills/{id}/adopt"), &json!({})).await.unwrap()
    }

    /// Signed reports of `event` ("adoption", "execution") this process applied.
    async fn reports_applied(&self, event: &str) -> f64 {
        let scrape = self.process.scrape().await.unwrap_or_default();
        metrics::value(&scrape, "druse_reports_total", &[("event", event)]).unwrap_or(0.0)
    }

    /// The trust level this process gives `peer`'s key, as `/v1/peers` shows it.
    async fn level_of(&self, peer: &Member) -> String {
        let peer_id = peer.public().peer_id().to_string();
        let peers: Value = self.client.get("/v1/peers").await.unwrap_or(Value::Null);
        let found = peers.as_array().into_iter().flatten().find(|p| p["peer_id"] == peer_id.as_str());
        found.and_then(|p| p["trust_level"].as_str()).unwrap_or("").to_owned()
    }
}

/// The management process, the edges `a` to `e`, and the test's bare peer connected to all.
struct Walk {
    _root: tempfile::TempDir,
    bins: &'static Binaries,
    mgmt: Member,
    edges: Vec<Member>,
    peer: Sniffer,
}

impl Walk {
    async fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let bins = binaries().unwrap();
        let trust_list = root.path().join("trust.list");
        std::fs::write(&trust_list, format!("{}  # druse-mgmt\n", mgmt_key().public())).unwrap();
        // Two thousand new keys within a minute would raise weather; this walk is about prices.
        let config = root.path().join("mgmt.toml");
        std::fs::write(&config, "[management.anomaly]\nenabled = false\n").unwrap();
        let config_flag = config.display().to_string();
        let mgmt_dir = root.path().join("mgmt");
        let mgmt =
            Member::start("mgmt", &bins.mgmt, mgmt_dir, mgmt_key(), &trust_list, &[], &["--config", &config_flag])
                .await;
        let bootstrap = [mgmt.process.p2p_addr().await.unwrap()];
        let mut edges = Vec::new();
        for (name, seed) in [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)] {
            let dir = root.path().join(name);
            edges.push(Member::start(name, &bins.node, dir, key(seed), &trust_list, &bootstrap, &[]).await);
        }
        let peer = Sniffer::start(90).unwrap();
        let mut ids = Vec::new();
        for member in std::iter::once(&mgmt).chain(&edges) {
            peer.net.dial(member.process.p2p_addr().await.unwrap()).await.unwrap();
            ids.push(member.process.peer_id().await.unwrap());
        }
        wait_connected(&peer.net, &ids).await.unwrap();
        Self { _root: root, bins, mgmt, edges, peer }
    }

    fn edge(&self, name: &str) -> &Member {
        self.edges.iter().find(|m| m.name == name).unwrap()
    }

    fn all(&self) -> Vec<&Member> {
        std::iter::once(&self.mgmt).chain(&self.edges).collect()
    }

    /// Waits until every process's listing of `id` satisfies `check`; returns the listings.
    async fn listings_when(&self, id: ContentId, what: &str, check: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut listings = Vec::new();
        for member in self.all() {
            let found = wait_for(WAIT, format_args!("{} to show {what}", member.name), async || {
                member.listing(id).await.filter(|l| check(l))
            })
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n{}", member.process.process.log_tail()));
            listings.push(found);
        }
        listings
    }

    /// Prints every process's price of `id` after `step`; returns it, which must be the same on
    /// all.
    fn show(&self, step: &str, listings: &[Value]) -> u64 {
        let shown: Vec<String> = self
            .all()
            .iter()
            .zip(listings)
            .map(|(m, l)| {
                let closed = if l["gate_passed"].as_bool().unwrap() { "" } else { " (gate closed)" };
                format!("{}={} µUSDC{closed}", m.name, micros(l))
            })
            .collect();
        println!("{step:<44} {}", shown.join(" "));
        let first = micros(&listings[0]);
        assert!(listings.iter().all(|l| micros(l) == first), "the processes disagree after {step:?}: {shown:?}");
        first
    }

    /// The management process attests each of `members` `trusted`, through `druse-mgmt
    /// attest`, and waits until every other process gives them that level.
    async fn attest(&self, members: &[&Member]) {
        for member in members {
            let public = member.public().to_string();
            let args = ["attest", &public, "--level", "trusted", "--duration", "1h", "--reason", "walk"];
            self.mgmt.process.cli(&self.bins.mgmt, &args).await.unwrap();
        }
        for observer in self.all() {
            for member in members.iter().filter(|m| m.name != observer.name) {
                eventually(WAIT, format_args!("{} to hold {}'s attestation", observer.name, member.name), async || {
                    observer.level_of(member).await == "trusted"
                })
                .await
                .unwrap();
            }
        }
    }

    /// Publishes `messages` from the test's peer in rounds, each round waiting until every
    /// process has applied it (`adoptions` and `executions` among them).
    async fn gossip(&self, messages: &[Vec<u8>], adoptions: usize, executions: usize) {
        let mut before = Vec::new();
        for member in self.all() {
            before.push((member.reports_applied("adoption").await, member.reports_applied("execution").await));
        }
        let per_message = (adoptions + executions) as f64 / messages.len() as f64;
        let mut sent = 0;
        for round in messages.chunks(ROUND) {
            for bytes in round {
                self.peer.publish(topic::REPORTS, bytes.clone()).await.unwrap();
            }
            sent += round.len();
            let expected = (sent as f64 * per_message).floor();
            for (member, (a, e)) in self.all().into_iter().zip(&before) {
                eventually(FLOOD_WAIT, format_args!("{} to apply {sent} reports", member.name), async || {
                    let applied =
                        member.reports_applied("adoption").await - a + member.reports_applied("execution").await - e;
                    applied >= expected
                })
                .await
                .unwrap_or_else(|e| panic!("{e:#}\n{}", member.process.process.log_tail()));
            }
        }
        for (member, (a, e)) in self.all().into_iter().zip(&before) {
            let applied = (member.reports_applied("adoption").await - a, member.reports_applied("execution").await - e);
            assert_eq!(applied, (adoptions as f64, executions as f64), "{} applied another count", member.name);
        }
    }

    async fn stop(self) {
        for member in std::iter::once(self.mgmt).chain(self.edges) {
            let mut process = member.process;
            let status = process.process.terminate().await.unwrap();
            assert!(status.success(), "{} exited with {status}:\n{}", member.name, process.process.log_tail());
        }
    }
}

fn micros(listing: &Value) -> u64 {
    listing["computed_price"]["micros"].as_u64().unwrap()
}

fn stat(listing: &Value, name: &str) -> f64 {
    listing["stats"][name].as_f64().unwrap_or_else(|| panic!("no stats.{name} in {listing}"))
}

fn closed(listing: &Value) -> bool {
    micros(listing) == 0 && listing["gate_passed"] == false
}

/// A fresh key (nothing vouches for it) from a number.
fn fresh(i: u32) -> Keypair {
    let mut seed = [0x5a; 32];
    seed[..4].copy_from_slice(&i.to_le_bytes());
    Keypair::from_seed(seed)
}

/// `by`'s signed report of `event` on `id`, issued at `at`.
fn signed(by: &Keypair, id: ContentId, event: ReportEvent, at: u64) -> Vec<u8> {
    seal(by, &Body::Report(Report { issued_at: at, reporter: by.public(), content_id: id, event })).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_price_follows_what_happened_step_by_step_on_every_process() {
    let walk = Walk::start().await;
    let [a, b, c, d, e] = ["a", "b", "c", "d", "e"].map(|n| walk.edge(n));

    let skill = json!({ "name": "merge-sorted-logs", "text": "Merge sorted log files by timestamp with a heap.",
                        "tags": ["logs"], "asking_price": 1_000 });
    let published: Value = a.client.post("/v1/skills", &skill).await.unwrap();
    let id: ContentId = published["content_id"].as_str().unwrap().parse().unwrap();

    let seen = walk.listings_when(id, "the new skill", |_| true).await;
    assert_eq!(walk.show("no evidence", &seen), 0);
    assert!(seen.iter().all(closed));

    for _ in 0..3 {
        a.report(id, true, 1.0).await;
    }
    let seen = walk.listings_when(id, "the publisher's three runs", |l| stat(l, "executions") == 3.0).await;
    assert_eq!(walk.show("the publisher's own 3 successes", &seen), 0);
    assert!(seen.iter().all(|l| closed(l) && stat(l, "counted_reporters") == 0.0));

    let keys: Vec<Keypair> = (10_000..10_005).map(fresh).collect();
    let at = druse_protocol::now_ms();
    let runs: Vec<Vec<u8>> = (keys.iter().enumerate())
        .map(|(i, k)| signed(k, id, ReportEvent::Execution { success: true, reward: 1.0 }, at + i as u64))
        .collect();
    walk.gossip(&runs, 0, 5).await;
    let seen = walk.listings_when(id, "five fresh keys' runs", |l| stat(l, "executions") == 8.0).await;
    assert_eq!(walk.show("5 fresh keys report, not adopting", &seen), 0);
    assert!(seen.iter().all(|l| closed(l) && stat(l, "counted_reporters") == 0.0));

    let adoptions: Vec<Vec<u8>> = (keys.iter().enumerate())
        .map(|(i, k)| signed(k, id, ReportEvent::Adoption { price_paid: 1_000 }, at + i as u64))
        .collect();
    walk.gossip(&adoptions, 5, 0).await;
    let seen = walk.listings_when(id, "five fresh adopters", |l| stat(l, "unique_adopters") == 5.0).await;
    assert_eq!(walk.show("the 5 fresh keys adopt, saying they paid", &seen), 0);
    for l in &seen {
        assert!(closed(l), "{l}");
        let s = (stat(l, "counted_reporters"), stat(l, "vouched_weight"), stat(l, "gate_successes"));
        assert_eq!(s, (5.0, 0.0, 0.0), "{l}");
        assert!((stat(l, "unvouched_weight") - 0.2).abs() < 1e-12, "five keys, capped at 0.2: {l}");
    }

    // Three adopters the management process attests `trusted`, one success each: 3 counted
    // successes, 2.25 of vouched weight.
    walk.attest(&[b, c, d]).await;
    for adopter in [b, c, d] {
        assert_eq!(adopter.adopt(id).await["settlement"]["paid"], 0, "no price yet");
    }
    walk.listings_when(id, "three trusted adopters", |l| stat(l, "unique_adopters") == 8.0).await;
    for reporter in [b, c, d] {
        reporter.report(id, true, 0.8).await;
    }
    let priced = walk.listings_when(id, "the skill listed", |l| l["gate_passed"] == true).await;
    let first = walk.show("3 trusted adopters, one success each", &priced);
    // Quality: the trusted 2.25 at 0.8 and the fresh pool's 0.2 at 1; demand: the pool's 0.2
    // of paid adoption; reputation: three reports of weight 0.75; rare, ×1.5.
    let quality = (2.25 * 0.8 + 0.2) / 2.45;
    let reputation = reputation::score(&Evidence { report_successes: 2.25, ..Evidence::default() });
    let expected = 0.01 * quality * (1.0 + 1.2f64.ln() * 0.1) * reputation * 1.5;
    for l in &priced {
        let s = (stat(l, "gate_successes"), stat(l, "success_weight"), stat(l, "vouched_weight"));
        assert_eq!(s, (3.0, 2.25, 2.25), "{l}");
        let usdc = l["computed_price"]["usdc"].as_f64().unwrap();
        assert!((usdc - expected).abs() < 1e-12, "{usdc} vs {expected}");
    }
    assert!(first > 0);

    // Two failures: lower everywhere, still listed (rates 1/2, 1/2 and 1 average 2/3).
    b.report(id, false, 0.0).await;
    c.report(id, false, 0.0).await;
    let failed = walk.listings_when(id, "two failures", |l| stat(l, "executions") == 13.0).await;
    let lower = walk.show("2 of them report a failure", &failed);
    assert!(lower < first, "{first} → {lower}: a failure raised the price");
    assert!(failed.iter().all(|l| l["gate_passed"] == true && stat(l, "gate_successes") == 3.0));

    // 2 000 unvouched keys adopt and report over gossip, with the default rooms: the
    // unvouched room keeps its 1 024 lowest ranks on every process whatever the order, the
    // vouched evidence keeps its own room, and the price does not move (the unvouched pool was
    // at its cap already).
    let at = druse_protocol::now_ms();
    let mut flood = Vec::new();
    for i in 0..2_000 {
        let k = fresh(i);
        flood.push(signed(&k, id, ReportEvent::Adoption { price_paid: 1_000 }, at));
        flood.push(signed(&k, id, ReportEvent::Execution { success: true, reward: 1.0 }, at));
    }
    walk.gossip(&flood, 2_000, 2_000).await;
    let flooded = walk.listings_when(id, "the flood", |_| true).await;
    assert_eq!(walk.show("2 000 unvouched keys adopt and report", &flooded), lower);
    for l in &flooded {
        assert!(stat(l, "unique_adopters") <= 1_027.0 && stat(l, "counted_reporters") >= 1_026.0, "{l}");
        assert_eq!((stat(l, "gate_successes"), stat(l, "success_weight")), (3.0, 2.25), "{l}");
    }
    assert!(flooded.windows(2).all(|w| w[0]["stats"] == w[1]["stats"]), "the processes kept different evidence");

    // A vouched adopter after them, the process `e`: counted everywhere.
    walk.attest(&[e]).await;
    let paid = e.adopt(id).await["settlement"]["paid"].as_u64().unwrap();
    assert_eq!(paid, lower.min(1_000), "it pays the asking price, which the computed one supports");
    e.report(id, true, 0.8).await;
    let counted = walk.listings_when(id, "the late adopter", |l| stat(l, "gate_successes") == 4.0).await;
    let last = walk.show("then a trusted adopter, one success", &counted);
    for (l, before) in counted.iter().zip(&flooded) {
        assert_eq!(stat(l, "success_weight"), 3.0, "{l}");
        assert_eq!(stat(l, "counted_reporters"), stat(before, "counted_reporters") + 1.0, "{l}");
    }
    assert!(last > lower, "{lower} → {last}");
    walk.stop().await;
}
