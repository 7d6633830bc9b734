//! Hostile messages on a real swarm: weather from a key nobody trusts, a replay of genuine
//! weather after the receiver restarted, and a listing sent in someone else's name. Each is
//! refused, changes nothing, and is counted.

use std::time::Duration;

use druse_node::Role;
use druse_node::ingest::Outcome;
use druse_protocol::body::{Body, Report, ReportEvent, Weather};
use druse_protocol::cid::ContentId;
use druse_protocol::now_ms;
use druse_protocol::{Reason, topic};
use druse_tests::swarm::{
    Cluster, Sniffer, TestNode, connect, content_id, key, listing, mesh_ready, mgmt_key, publish_raw, seal,
};
use druse_tests::{WAIT, eventually, wait_for};

const ROGUE_SEED: u8 = 66;

/// Starts a cluster of `mgmt`, `a` and `b`, plus a rogue edge connected to all of them.
async fn cluster_with_rogue() -> anyhow::Result<(Cluster, TestNode)> {
    let cluster = Cluster::start(&[("a", 1), ("b", 2)], |_| {}).await?;
    let rogue = TestNode::start("rogue", ROGUE_SEED, Role::Edge, &[mgmt_key().public()], |_| {}).await?;
    for node in cluster.nodes() {
        connect(rogue.net(), node.net()).await?;
    }
    let mut all = cluster.nodes();
    all.push(&rogue);
    mesh_ready(&all).await?;
    Ok((cluster, rogue))
}

/// Waits until `node` has received a harmless report probe from `sniffer`. A peer sends its
/// subscriptions first on a new connection, and gossipsub delivers one peer's messages in
/// order, so from then on `node` knows every topic the sniffer listens on and sends it what it
/// broadcasts there.
async fn heard_by(sniffer: &Sniffer, node: &TestNode) -> anyhow::Result<()> {
    let before = node.messages_on(topic::REPORTS);
    let probe = Body::Report(Report {
        issued_at: now_ms(),
        reporter: sniffer.key.public(),
        content_id: ContentId::of(b"subscription probe"),
        event: ReportEvent::Execution { success: true, reward: 0.0 },
    });
    sniffer.publish(topic::REPORTS, seal(&sniffer.key, &probe)?).await?;
    eventually(WAIT, format_args!("{} to hear the sniffer's probe", node.name), async || {
        node.messages_on(topic::REPORTS) > before
    })
    .await
}

fn storm(seq: u64) -> Body {
    Body::Weather(Weather { issued_at: now_ms(), seq, level: 0.9, duration_ms: 60_000, reason: "fake storm".into() })
}

#[tokio::test(flavor = "multi_thread")]
async fn weather_signed_by_an_untrusted_key_changes_nothing_and_is_counted() {
    let (cluster, rogue) = cluster_with_rogue().await.unwrap();

    // Signed by the rogue itself, then by a key no node has ever seen.
    publish_raw(rogue.net(), topic::WEATHER, seal(&key(ROGUE_SEED), &storm(1_000)).unwrap()).await.unwrap();
    publish_raw(rogue.net(), topic::WEATHER, seal(&key(67), &storm(1_001)).unwrap()).await.unwrap();

    for node in cluster.nodes() {
        // The outcome is matched over every kind label: node/src/ingest.rs labels refusals
        // before body decode as kind="unknown" (see the report); the topic pins it to weather.
        eventually(WAIT, format_args!("{} to count both as untrusted_signer", node.name), async || {
            node.outcomes("untrusted_signer") >= 2.0
        })
        .await
        .unwrap();
        let rejected = node.metric("druse_messages_total", &[("topic", topic::WEATHER), ("verdict", "reject")]);
        assert!(rejected >= 2.0, "{} rejected {rejected} weather messages, expected 2", node.name);
    }
    let mut all = cluster.nodes();
    all.push(&rogue);
    for node in all {
        assert!(!node.halted(), "{} obeys weather from an untrusted key", node.name);
        assert!(node.weather().last.is_none(), "{} recorded untrusted weather", node.name);
        assert_eq!(node.metric("druse_halted", &[]), 0.0, "{}'s halted gauge", node.name);
    }
    rogue.stop().await;
    cluster.stop().await;
}

/// A sniffer captures a genuine weather broadcast; the weather is lifted; the edge restarts
/// (forgetting which bodies it has seen, but not the seqs). The captured bytes, fed to it
/// directly and then gossiped by a fresh peer, are refused as a replayed seq.
#[tokio::test(flavor = "multi_thread")]
async fn replayed_weather_is_refused_after_a_restart_and_counted() {
    let mut cluster = Cluster::start(&[("e", 1)], |_| {}).await.unwrap();
    let sniffer = Sniffer::start(70).unwrap();
    connect(&sniffer.net, cluster.mgmt.net()).await.unwrap();
    heard_by(&sniffer, &cluster.mgmt).await.unwrap();

    cluster.management.weather(0.9, Duration::from_secs(60), "storm".into()).await.unwrap();
    let captured = wait_for(WAIT, "the sniffer to capture the weather broadcast", async || {
        sniffer.captured().into_iter().find(|c| c.topic == topic::WEATHER)
    })
    .await
    .unwrap();
    eventually(WAIT, "e to halt", async || cluster.edge("e").halted()).await.unwrap();
    cluster.management.weather(0.0, Duration::from_secs(1), "all clear".into()).await.unwrap();
    eventually(WAIT, "e to resume after the lift", async || !cluster.edge("e").halted()).await.unwrap();
    let mut seqs = cluster.edge("e").last_seqs();
    seqs.sort_by_key(|(k, _)| k.to_bytes());
    assert_eq!(seqs, vec![(mgmt_key().public(), 2)]);

    cluster.restart_edge("e").await.unwrap();
    let e = cluster.edge("e");
    let mut restored = e.last_seqs();
    restored.sort_by_key(|(k, _)| k.to_bytes());
    assert_eq!(restored, seqs, "the restarted edge forgot the seqs it had accepted");

    let outcome = e.ingest_bytes(&captured.data, &cluster.mgmt.peer_id(), topic::WEATHER).await;
    assert_eq!(outcome, Outcome::Protocol(Reason::ReplayedSeq));
    assert!(!e.halted(), "a replayed weather halted the edge");
    assert_eq!(e.outcomes("replayed_seq"), 1.0);

    let replayer = Sniffer::start(71).unwrap();
    connect(&replayer.net, e.net()).await.unwrap();
    // The publish waits until the replayer has seen e subscribe to the weather topic.
    replayer.publish(topic::WEATHER, captured.data.clone()).await.unwrap();
    eventually(WAIT, "e to refuse the gossiped replay", async || e.outcomes("replayed_seq") >= 2.0).await.unwrap();
    assert!(!e.halted(), "a replayed weather arriving over gossip halted the edge");
    assert_eq!(e.weather().last.map(|w| w.seq), Some(2), "the replay replaced the current weather");
    let ignored = e.metric("druse_messages_total", &[("topic", topic::WEATHER), ("verdict", "ignore")]);
    assert!(ignored >= 1.0, "the gossiped replay was not counted as ignored ({ignored})");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_naming_another_author_without_its_key_is_rejected_and_penalised() {
    let (cluster, rogue) = cluster_with_rogue().await.unwrap();

    // The rogue gossips a listing that names a's key as its signer, signed with a key of its
    // own: an impersonation without a's key. Gossip is anonymous, so the envelope's signature
    // is what binds a listing to its author, whoever relays it.
    let body = Body::Crystal(listing("impersonated-skill"));
    let id = content_id(&body).unwrap();
    let rogue_key = key(66);
    let mut forged = seal(&rogue_key, &body).unwrap();
    let (from, to) = (rogue_key.public().to_bytes(), key(1).public().to_bytes());
    let at = forged.windows(from.len()).position(|w| w == from).expect("the envelope names its signer");
    forged[at..at + to.len()].copy_from_slice(&to);
    publish_raw(rogue.net(), topic::CRYSTALS, forged).await.unwrap();

    for node in cluster.nodes() {
        eventually(WAIT, format_args!("{} to count a bad_signature", node.name), async || {
            node.outcomes("bad_signature") >= 1.0
        })
        .await
        .unwrap();
        let rejected = node.metric("druse_messages_total", &[("topic", topic::CRYSTALS), ("verdict", "reject")]);
        assert!(rejected >= 1.0, "{} did not count the listing as rejected", node.name);
        let mut score = None;
        eventually(WAIT, format_args!("the rogue's gossipsub score on {} to fall below 0", node.name), async || {
            score = node.net().peer_score(rogue.peer_id()).await.ok().flatten();
            score.is_some_and(|s| s < 0.0)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}; last score {score:?}"));
        assert!(!node.has_skill(&id), "{} stored the impersonating listing", node.name);
    }
    // Honest peers keep a non-negative score with each other.
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    let honest = a.net().peer_score(b.peer_id()).await.unwrap().unwrap();
    assert!(honest >= 0.0, "b's score on a is {honest}");
    rogue.stop().await;
    cluster.stop().await;
}
