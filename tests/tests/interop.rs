#![allow(clippy::unwrap_used)]
//! A peer written in another language joins a real swarm: `tests/js/peer.mjs` (js-libp2p,
//! gossipsub, noise, yamux, with @ipld/dag-cbor and @noble/curves for its own envelope code)
//! dials a real `druse-node` and `druse-mgmt`, and proves both ways that the wire protocol is
//! what DESIGN §5 says:
//! - it reads and verifies the Rust node's skill and the management node's endorsement and
//!   weather with an Ed25519 implementation that shares no code with the nodes;
//! - a skill it signs is accepted by the Rust nodes, and weather it forges is refused and
//!   counted in `/metrics`.
//!
//! Needs Node.js >= 20 and `tests/js/setup.sh`; without them it fails when `CI` is set and
//! skips with a printed reason otherwise.

use std::path::Path;

use druse_protocol::Keypair;
use druse_tests::js::{self, JsPeer};
use druse_tests::metrics;
use druse_tests::process::{ProcNode, binaries};
use druse_tests::swarm::{key, mgmt_key};
use druse_tests::{WAIT, eventually, wait_for};
use serde_json::{Value, json};

/// The js peer's key seed: its own key, on no trust list.
const JS_SEED: [u8; 32] = [0x4a; 32];

/// Topics the js peer must see both Rust nodes subscribe to before anything is published.
const TOPICS: [&str; 3] = ["druse/crystals/1", "druse/endorsements/1", "druse/weather/1"];

/// Runs a CLI subcommand pointed at `node`; fails the test quoting the node's log.
async fn cli(program: &Path, args: &[&str], node: &ProcNode) -> String {
    node.cli(program, args).await.unwrap_or_else(|e| panic!("{e:#}"))
}

/// The checks the js peer made on one envelope, all of which must hold.
fn assert_verified_by_js(event: &Value, what: &str, signer: &str) {
    for check in [
        "signature_valid",
        "flipped_signature_refused",
        "other_kind_refused",
        "envelope_canonical",
        "kind_matches_topic",
    ] {
        assert_eq!(event[check], true, "the js peer's check {check} failed on {what}: {event}");
    }
    assert_eq!(event["signer"], signer, "{what} was signed by another key: {event}");
}

/// The sum of one ingestion outcome of weather messages in a scrape.
fn weather_outcome(scrape: &str, outcome: &str) -> f64 {
    metrics::value(scrape, "druse_ingest_outcomes_total", &[("kind", "weather"), ("outcome", outcome)]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_js_libp2p_peer_verifies_rust_messages_and_rust_nodes_accept_its_skill_and_refuse_its_forgeries() {
    if !js::available_or_skip("interop").await {
        return;
    }
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (mgmt_dir, a_dir) = (root.path().join("mgmt"), root.path().join("a"));
    mgmt_key().save(&mgmt_dir.join("node.key")).unwrap();
    key(1).save(&a_dir.join("node.key")).unwrap();
    let mgmt_public = mgmt_key().public().to_string();
    let a_public = key(1).public().to_string();
    let trust_list = root.path().join("trust.list");
    std::fs::write(&trust_list, format!("{mgmt_public}  # druse-mgmt\n")).unwrap();

    let mgmt = ProcNode::start("druse-mgmt", &bins.mgmt, &mgmt_dir, &trust_list, &[]).await.unwrap();
    let mgmt_addr = mgmt.p2p_addr().await.unwrap();
    let a = ProcNode::start("druse-node a", &bins.node, &a_dir, &trust_list, std::slice::from_ref(&mgmt_addr))
        .await
        .unwrap();
    let a_addr = a.p2p_addr().await.unwrap();
    let (mgmt_peer, a_peer) = (mgmt.peer_id().await.unwrap().to_string(), a.peer_id().await.unwrap().to_string());

    let bootstrap = [a_addr.to_string(), mgmt_addr.to_string()];
    let (mut peer, ready) = JsPeer::start(JS_SEED, &bootstrap, root.path().join("js-peer.log")).await.unwrap();
    let logs = |peer: &JsPeer| format!("{}\n{}\n{}", a.process.log_tail(), mgmt.process.log_tail(), peer.tail());

    // The js peer derived the same public key and PeerId from the seed as the Rust code does.
    let js_key = Keypair::from_seed(JS_SEED);
    assert_eq!(ready["key_agrees"], true, "libp2p's key and @noble/curves' key differ: {ready}");
    assert_eq!(ready["public_key"], js_key.public().to_string().as_str(), "{ready}");
    assert_eq!(ready["peer_id"], js_key.peer_id().to_string().as_str(), "{ready}");

    for (name, node) in [("a", &a), ("mgmt", &mgmt)] {
        eventually(WAIT, format_args!("{name} to connect to the other node and the js peer"), async || {
            node.status().await.is_ok_and(|s| s["connected_peers"].as_u64() == Some(2))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs(&peer)));
    }
    for rust_peer in [&a_peer, &mgmt_peer] {
        for topic in TOPICS {
            peer.wait_event(&format!("the js peer to see {rust_peer} subscribe to {topic}"), |e| {
                e["event"] == "subscribed" && e["peer"] == rust_peer.as_str() && e["topic"] == topic
            })
            .await
            .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&peer)));
        }
    }
    for (name, node) in [("a", &a), ("mgmt", &mgmt)] {
        eventually(WAIT, format_args!("{name} to mesh with the other node and the js peer"), async || {
            node.status().await.is_ok_and(|s| TOPICS.iter().all(|t| s["mesh_peers"][*t].as_u64() == Some(2)))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs(&peer)));
    }

    // 1. A skill the js peer signs is accepted and listed by both Rust nodes.
    peer.send(&json!({ "cmd": "publish_skill", "name": "interop-js-skill", "text": "Retry with jittered backoff." }))
        .await
        .unwrap();
    let published = peer
        .wait_event("the js peer to publish its skill", |e| e["event"] == "published" && e["what"] == "skill")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&peer)));
    let js_skill = published["content_id"].as_str().unwrap().to_owned();
    for (name, node) in [("a", &a), ("mgmt", &mgmt)] {
        let listing = wait_for(WAIT, format_args!("{name} to list the js peer's skill {js_skill}"), async || {
            let skills = node.get_json("/v1/skills").await.ok()??;
            skills.as_array()?.iter().find(|s| s["id"] == js_skill.as_str()).cloned()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs(&peer)));
        assert_eq!(listing["author"], js_key.public().to_string().as_str(), "{name}: {listing}");
        assert_eq!(listing["author_peer"], js_key.peer_id().to_string().as_str(), "{name}: {listing}");
        assert_eq!(listing["listing"]["name"], "interop-js-skill", "{name}: {listing}");
        assert_eq!(listing["listing"]["stats"]["avg_reward"], 0.75, "{name}: {listing}");
    }

    // 2. The js peer verifies a Rust node's skill and the management node's endorsement and
    //    weather with its own code.
    let rust_skill = cli(
        &bins.node,
        &["skill", "publish", "--name", "interop-rust-skill", "--text", "Parse ISO 8601 durations.", "--tags", "time"],
        &a,
    )
    .await
    .trim()
    .to_owned();
    cli(&bins.mgmt, &["endorse", &rust_skill, "--note", "interop review"], &mgmt).await;
    cli(&bins.mgmt, &["weather", "--level", "0.9", "--duration", "60s", "--reason", "interop drill"], &mgmt).await;

    let skill = peer
        .wait_event("the js peer to receive the Rust skill", |e| {
            e["event"] == "message" && e["kind"] == "crystal" && e["content_id"] == rust_skill.as_str()
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&peer)));
    assert_verified_by_js(&skill, "the Rust skill", &a_public);
    // Gossip is anonymous: no gossipsub author or signature, the envelope's signer is a.
    assert_eq!(skill["gossip"], "unsigned", "the skill's gossipsub message: {skill}");
    assert_eq!(skill["signer_peer"], a_peer.as_str(), "the skill's author: {skill}");
    assert_eq!(skill["body"]["name"], "interop-rust-skill", "{skill}");

    let endorsement = peer
        .wait_event("the js peer to receive the endorsement", |e| {
            e["event"] == "message" && e["kind"] == "endorsement" && e["body"]["content_id"] == rust_skill.as_str()
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&peer)));
    assert_verified_by_js(&endorsement, "the endorsement", &mgmt_public);
    assert_eq!(endorsement["body"]["verdict"], "endorse", "{endorsement}");

    let weather = peer
        .wait_event("the js peer to receive the weather", |e| {
            e["event"] == "message" && e["kind"] == "weather" && e["body"]["reason"] == "interop drill"
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&peer)));
    assert_verified_by_js(&weather, "the weather", &mgmt_public);
    assert_eq!(weather["body"]["level"], 0.9, "{weather}");
    let real_seq = weather["body"]["seq"].as_u64().unwrap();

    // 3. Weather the js peer forges is refused by both Rust nodes and counted.
    let before = [a.scrape().await.unwrap(), mgmt.scrape().await.unwrap()];
    peer.send(&json!({ "cmd": "forge_weather", "how": "untrusted_signer" })).await.unwrap();
    peer.send(&json!({ "cmd": "forge_weather", "how": "bad_signature", "signer": mgmt_public })).await.unwrap();
    for how in ["untrusted_signer", "bad_signature"] {
        peer.wait_event(&format!("the js peer to publish weather forged by {how}"), |e| {
            e["event"] == "published" && e["what"] == format!("weather:{how}").as_str()
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&peer)));
    }
    for ((name, node), before) in [("a", &a), ("mgmt", &mgmt)].into_iter().zip(&before) {
        for outcome in ["untrusted_signer", "bad_signature"] {
            let was = weather_outcome(before, outcome);
            eventually(WAIT, format_args!("{name} to count forged weather as {outcome}"), async || {
                node.scrape().await.is_ok_and(|s| weather_outcome(&s, outcome) >= was + 1.0)
            })
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", logs(&peer)));
        }
        let view = node.get_json("/v1/weather").await.unwrap().unwrap();
        assert_eq!(view["last"]["signer"], mgmt_public.as_str(), "{name} took forged weather: {view}");
        assert_eq!(view["last"]["seq"], real_seq, "{name} took forged weather: {view}");
        assert_eq!(view["last"]["level"], 0.9, "{name} took forged weather: {view}");
        println!("{name} refused both forged weathers; its weather is still the management node's seq {real_seq}");
    }
    println!(
        "interop: js peer skill {js_skill} accepted by a and mgmt; Rust skill {rust_skill}, its endorsement and \
         weather seq {real_seq} verified by @noble/curves"
    );
    peer.stop().await.unwrap();
}
