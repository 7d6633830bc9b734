#![allow(clippy::unwrap_used)]
//! A partition and its healing, on six real nodes in one process (loopback TCP, 100 ms
//! heartbeats): in-process nodes start in well under a second each and need no nested build,
//! which keeps the scenario steady on a loaded two-core machine.
//!
//! ```text
//!   left half                     right half
//!   mgmt-l ── l1                  mgmt-r ── r1
//!      \     /                       \     /
//!       bridge-l ──────────────── bridge-r
//! ```
//!
//! Each half has a management node (both keys are on every trust list) and an edge; the halves
//! meet only through the two bridges. The bridges shut down (and start again on their data
//! directories, linked to no one); each half publishes a skill, endorses it and declares
//! weather (the right half's last, so it is the newest); then the bridges reconnect. Every node
//! must converge on both skills, both endorsements and the right half's weather. The time from
//! the reconnection to the last node converging is printed.

use std::time::{Duration, Instant};

use druse_management::Management;
use druse_node::{Config, Role};
use druse_protocol::body::{Body, EndorsementVerdict, TrustLevel};
use druse_protocol::now_ms;
use druse_protocol::{ContentId, PublicKey};
use druse_tests::swarm::{TestNode, connect, key, listing, mesh_ready};
use druse_tests::{WAIT, eventually};

/// Key seeds: the two management nodes, the two edges, the two bridges.
const MGMT_L: u8 = 210;
const MGMT_R: u8 = 211;
const L1: u8 = 11;
const R1: u8 = 21;
const BRIDGE_L: u8 = 12;
const BRIDGE_R: u8 = 22;

/// How often each management node re-announces its active weather (30 s in production).
const REANNOUNCE_EVERY: Duration = Duration::from_secs(2);

/// How long the healed swarm has to converge.
const CONVERGE_WITHIN: Duration = Duration::from_secs(60);

/// Both management keys trusted, and every node of the scenario pinned `trusted`, so the
/// weather each half declares (which halts ingestion from peers below `trusted`) does not
/// stop the other half's skills: this scenario is about the partition, not the halt gate.
fn tweak(config: &mut Config) {
    config.trust.management_keys = [MGMT_L, MGMT_R].map(|s| key(s).public().to_string()).to_vec();
    for seed in [MGMT_L, MGMT_R, L1, R1, BRIDGE_L, BRIDGE_R] {
        config.trust.pins.insert(key(seed).peer_id().to_string(), TrustLevel::Trusted);
    }
}

/// Starts a node that holds at most `links` connections: exactly its links in the figure.
/// Kademlia dials every peer it learns of, and without the cap it would join the halves
/// directly; with it, a node whose links are all up refuses any other connection, and the
/// halves meet only through the bridges.
async fn start(name: &str, seed: u8, role: Role, links: u32) -> TestNode {
    TestNode::start(name, seed, role, &[], |config| {
        tweak(config);
        config.p2p.max_connections = links;
        config.p2p.target_peers = Some(links);
    })
    .await
    .unwrap()
}

/// What `node` still lacks of the converged state; empty once it has converged.
fn missing(node: &TestNode, skills: &[ContentId], endorsers: &[PublicKey], weather: (&PublicKey, u64)) -> Vec<String> {
    let mut lacks = Vec::new();
    for (id, endorser) in skills.iter().zip(endorsers) {
        match node.stored(id) {
            Ok(Some(skill)) if skill.is_verified && skill.verified_by.as_ref() == Some(endorser) => {}
            Ok(Some(_)) => lacks.push(format!("the endorsement of {id}")),
            _ => lacks.push(format!("skill {id}")),
        }
    }
    let view = node.weather();
    match view.last {
        Some(last) if last.signer == *weather.0 && last.issued_at >= weather.1 => {}
        other => lacks.push(format!(
            "the newest weather (has {:?})",
            other.map(|w| (w.reason, w.level, w.signer.to_string()[..8].to_owned()))
        )),
    }
    lacks
}

// What makes it converge: on every (re)connection each node reads its peer's inventory of
// signed messages and fetches what it lacks (anti-entropy, `druse_protocol::sync`), since
// gossip delivers a message only when it is first seen; and a management node re-announces
// the very weather message it signed, so two keys' weathers keep the order of their issue.
#[tokio::test(flavor = "multi_thread")]
async fn halves_that_lost_each_other_converge_on_every_skill_endorsement_and_the_newest_weather_after_healing() {
    druse_tests::init_logging();
    let mgmt_l = start("mgmt-l", MGMT_L, Role::Management, 2).await;
    let mgmt_r = start("mgmt-r", MGMT_R, Role::Management, 2).await;
    let l1 = start("l1", L1, Role::Edge, 2).await;
    let r1 = start("r1", R1, Role::Edge, 2).await;
    let bridge_l = start("bridge-l", BRIDGE_L, Role::Edge, 3).await;
    let bridge_r = start("bridge-r", BRIDGE_R, Role::Edge, 3).await;
    let (management_l, management_r) = (
        Management::new(mgmt_l.node.clone(), Default::default()).unwrap(),
        Management::new(mgmt_r.node.clone(), Default::default()).unwrap(),
    );
    management_l.spawn_reannounce(REANNOUNCE_EVERY);
    management_r.spawn_reannounce(REANNOUNCE_EVERY);

    let links = |bl: &TestNode, br: &TestNode| {
        [(&mgmt_l, &l1), (&mgmt_l, bl), (&l1, bl), (&mgmt_r, &r1), (&mgmt_r, br), (&r1, br), (bl, br)]
            .map(|(a, b)| (a.net().clone(), b.net().clone()))
    };
    for (a, b) in links(&bridge_l, &bridge_r) {
        connect(&a, &b).await.unwrap();
    }
    mesh_ready(&[&mgmt_l, &l1, &bridge_l, &bridge_r, &mgmt_r, &r1]).await.unwrap();

    // The partition: both bridges shut down, which takes the only links between the halves.
    // They start again at once on their data directories, but dial no one until the healing.
    let bridge_l = bridge_l.restart().await.unwrap();
    let bridge_r = bridge_r.restart().await.unwrap();
    let (left, right) = ([&mgmt_l, &l1, &bridge_l], [&mgmt_r, &r1, &bridge_r]);
    for (node, others) in left.iter().map(|n| (n, &right)).chain(right.iter().map(|n| (n, &left))) {
        let others: Vec<_> = others.iter().map(|o| o.net().local_peer_id()).collect();
        eventually(WAIT, format_args!("{} to lose the other half", node.name), async || {
            node.net().peers().await.is_ok_and(|p| p.iter().all(|p| !others.contains(&p.peer_id)))
        })
        .await
        .unwrap();
    }

    // Each half publishes a skill, endorses it and declares weather; the right half's is newest.
    let left_skill = l1.publish(&Body::Crystal(listing("left-half-skill"))).await.unwrap();
    let right_skill = r1.publish(&Body::Crystal(listing("right-half-skill"))).await.unwrap();
    for (node, id) in [(&mgmt_l, left_skill), (&mgmt_r, right_skill)] {
        eventually(WAIT, format_args!("{} to store {id}", node.name), async || node.has_skill(&id)).await.unwrap();
    }
    management_l.endorse(left_skill, EndorsementVerdict::Endorse, "left review".into()).await.unwrap();
    management_r.endorse(right_skill, EndorsementVerdict::Endorse, "right review".into()).await.unwrap();
    management_l.weather(0.3, Duration::from_secs(600), "left storm".into()).await.unwrap();
    // The right storm is issued in a later millisecond, so it is the newer one everywhere.
    let left_issued = mgmt_l.weather().last.unwrap().issued_at;
    eventually(WAIT, "the clock to pass the left storm's issue time", async || now_ms() > left_issued).await.unwrap();
    management_r.weather(0.6, Duration::from_secs(600), "right storm".into()).await.unwrap();
    let newest = mgmt_r.weather().last.unwrap();
    assert_eq!(newest.reason, "right storm");
    let skills = [left_skill, right_skill];
    let endorsers = [key(MGMT_L).public(), key(MGMT_R).public()];
    let right_key = key(MGMT_R).public();
    let target = (&right_key, newest.issued_at);
    for node in [&mgmt_l, &l1] {
        assert!(!node.has_skill(&right_skill), "{} got the right half's skill during the partition", node.name);
    }

    // Healing: the bridges are back, at once.
    for (a, b) in links(&bridge_l, &bridge_r) {
        connect(&a, &b).await.unwrap();
    }
    let healed = Instant::now();
    let nodes = [&mgmt_l, &l1, &bridge_l, &bridge_r, &mgmt_r, &r1];
    let mut converged_at = vec![None; nodes.len()];
    let outcome = eventually(CONVERGE_WITHIN, "every node to converge after healing", async || {
        for (i, node) in nodes.iter().enumerate() {
            if converged_at[i].is_none() && missing(node, &skills, &endorsers, target).is_empty() {
                converged_at[i] = Some(healed.elapsed());
            }
        }
        converged_at.iter().all(Option::is_some)
    })
    .await;
    for (node, at) in nodes.iter().zip(&converged_at) {
        match at {
            Some(at) => println!("partition: {} converged {at:?} after healing", node.name),
            None => println!("partition: {} still lacks {:?}", node.name, missing(node, &skills, &endorsers, target)),
        }
    }
    outcome.unwrap();
    let slowest = converged_at.iter().flatten().max().unwrap();
    println!("partition: time to converge after healing: {slowest:?} (6 nodes, 2 skills, 2 endorsements, weather)");
    drop((management_l, management_r));
    for node in [mgmt_l, l1, bridge_l, bridge_r, mgmt_r, r1] {
        node.stop().await;
    }
}
