//! Restarts keep what a node must not forget: its identity, its crystals, its weather and the
//! seqs it accepted; and a management node keeps the seq it signs with.

use std::time::Duration;

use druse_node::skill::Skill;
use druse_protocol::PublicKey;
use druse_protocol::body::{Body, EndorsementVerdict, TrustLevel};
use druse_tests::swarm::{Cluster, TestNode, connect, listing, mesh_ready, mgmt_key};
use druse_tests::{WAIT, eventually};

fn sorted_seqs(node: &TestNode) -> Vec<(PublicKey, u64)> {
    let mut seqs = node.last_seqs();
    seqs.sort_by_key(|(k, _)| k.to_bytes());
    seqs
}

fn sorted_skills(node: &TestNode) -> anyhow::Result<Vec<Skill>> {
    let mut skills = node.skills()?;
    skills.sort_by_key(|s| s.id.to_string());
    Ok(skills)
}

#[tokio::test(flavor = "multi_thread")]
async fn restarted_edge_keeps_its_identity_crystals_weather_and_seqs() {
    let mut cluster = Cluster::start(&[("a", 1), ("b", 2)], |_| {}).await.unwrap();
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    let own = a.publish(&Body::Crystal(listing("a-own-skill"))).await.unwrap();
    let received = b.publish(&Body::Crystal(listing("b-shared-skill"))).await.unwrap();
    for node in [a, &cluster.mgmt] {
        eventually(WAIT, format_args!("{} to store b's skill", node.name), async || node.has_skill(&received))
            .await
            .unwrap();
    }
    cluster.management.endorse(received, EndorsementVerdict::Endorse, "reviewed".into()).await.unwrap();
    eventually(WAIT, "a to show b's skill verified", async || {
        a.stored(&received).unwrap().is_some_and(|s| s.is_verified)
    })
    .await
    .unwrap();
    cluster.management.weather(0.9, Duration::from_secs(120), "drill".into()).await.unwrap();
    eventually(WAIT, "a to halt", async || a.halted()).await.unwrap();

    // Both skills are in a's memory before the snapshot, so the snapshot is settled.
    eventually(WAIT, "a to index both skills in memory", async || {
        sorted_skills(a).unwrap().iter().all(|s| s.crystal.is_some())
    })
    .await
    .unwrap();
    let peer_id = a.peer_id();
    let skills = sorted_skills(a).unwrap();
    let weather = a.weather().active.unwrap();
    let seqs = sorted_seqs(a);
    assert!(skills.iter().any(|s| s.id == own) && skills.iter().any(|s| s.id == received));
    assert_eq!(seqs, vec![(mgmt_key().public(), 2)]);

    cluster.restart_edge("a").await.unwrap();
    let a = cluster.edge("a");
    assert_eq!(a.peer_id(), peer_id, "the restarted node has another identity");
    assert_eq!(sorted_skills(a).unwrap(), skills, "the restarted node's crystals differ");
    for skill in &skills {
        let crystal = match skill.crystal {
            Some(c) => a.memory().get(c).await,
            None => None,
        };
        assert!(crystal.is_some_and(|c| c.text.contains(&skill.listing.name)), "{} left memory", skill.id);
    }
    assert!(a.halted(), "the restarted node forgot the active weather");
    assert_eq!(a.weather().active, Some(weather), "the restarted node's weather differs");
    assert_eq!(sorted_seqs(a), seqs, "the restarted node's seqs differ");
    assert!(a.metrics_text().lines().any(|l| l == "druse_halted 1"), "the halted gauge was not restored");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn restarted_management_node_keeps_its_seq_and_is_still_obeyed() {
    let cluster = Cluster::start(&[("a", 1), ("b", 2)], |_| {}).await.unwrap();
    cluster.management.weather(0.9, Duration::from_secs(120), "before restart".into()).await.unwrap();
    let b_key = cluster.edge("b").public_key();
    cluster.management.attest(b_key, TrustLevel::Trusted, "known".into(), Duration::from_secs(600)).await.unwrap();
    let signed = cluster.management.last_seq().await;
    assert_eq!(signed, 2);
    for edge in &cluster.edges {
        eventually(WAIT, format_args!("{} to accept seq {signed}", edge.name), async || {
            sorted_seqs(edge) == vec![(mgmt_key().public(), signed)]
        })
        .await
        .unwrap();
        assert!(edge.halted(), "{} is not halted", edge.name);
    }

    let cluster = cluster.restart_mgmt().await.unwrap();
    assert_eq!(cluster.management.last_seq().await, signed, "the restarted management node forgot its seq");

    cluster.management.weather(0.0, Duration::from_secs(1), "after restart".into()).await.unwrap();
    assert_eq!(cluster.management.last_seq().await, signed + 1);
    for edge in &cluster.edges {
        eventually(WAIT, format_args!("{} to obey the lift signed after the restart", edge.name), async || {
            !edge.halted()
        })
        .await
        .unwrap();
        assert_eq!(sorted_seqs(edge), vec![(mgmt_key().public(), signed + 1)], "{}'s seqs", edge.name);
        assert_eq!(edge.weather().last.map(|w| w.seq), Some(signed + 1), "{}'s weather", edge.name);
    }
    cluster.stop().await;
}

/// A cleanly restarted node that reconnects at once must be heard at once, as after a crash:
/// it leaves without unsubscribing, so its peers put it under no backoff and do not penalise
/// its re-grafts.
#[tokio::test(flavor = "multi_thread")]
async fn restarted_node_that_reconnects_at_once_is_heard_again() {
    let mut cluster = Cluster::start(&[("a", 1), ("b", 2)], |_| {}).await.unwrap();
    cluster.restart_edge("a").await.unwrap();
    let a = cluster.edge("a");
    for other in [&cluster.mgmt, cluster.edge("b")] {
        connect(a.net(), other.net()).await.unwrap();
    }
    mesh_ready(&cluster.nodes()).await.unwrap();
    for other in [&cluster.mgmt, cluster.edge("b")] {
        let score = other.net().peer_score(a.peer_id()).await.unwrap().unwrap();
        assert!(score >= 0.0, "the restarted node's score on {} is {score}", other.name);
    }
    cluster.stop().await;
}
