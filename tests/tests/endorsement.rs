//! Skills travel to every node, and a management endorsement marks them verified everywhere,
//! even when the endorsement overtakes its skill.

use druse_node::ingest::Outcome;
use druse_protocol::body::{Body, EndorsementVerdict};
use druse_protocol::topic;
use druse_tests::swarm::{Cluster, content_id, key, listing, mgmt_key, seal};
use druse_tests::{WAIT, eventually};

const EDGES: [(&str, u8); 3] = [("a", 1), ("b", 2), ("c", 3)];

#[tokio::test(flavor = "multi_thread")]
async fn skill_published_on_one_edge_is_stored_and_then_verified_on_every_edge() {
    let cluster = Cluster::start(&EDGES, |_| {}).await.unwrap();
    let (a, b, c) = (cluster.edge("a"), cluster.edge("b"), cluster.edge("c"));

    let id = a.publish(&Body::Crystal(listing("parse-rfc3339-dates"))).await.unwrap();
    for node in [b, c, &cluster.mgmt] {
        eventually(WAIT, format_args!("{} to store skill {id}", node.name), async || node.has_skill(&id))
            .await
            .unwrap();
    }
    for node in [b, c] {
        let skill = node.stored(&id).unwrap().unwrap();
        assert!(!skill.is_verified, "{} shows an unendorsed skill as verified", node.name);
        assert_eq!(skill.author, a.public_key(), "{} records the wrong author", node.name);
    }

    cluster.management.endorse(id, EndorsementVerdict::Endorse, "reviewed".into()).await.unwrap();
    let mgmt = mgmt_key().public();
    for node in [a, b, c] {
        eventually(WAIT, format_args!("{} to show {id} verified", node.name), async || {
            node.stored(&id).unwrap().is_some_and(|s| s.is_verified)
        })
        .await
        .unwrap();
        let skill = node.stored(&id).unwrap().unwrap();
        assert_eq!(skill.verified_by, Some(mgmt), "{} names the wrong endorser", node.name);
        assert_eq!(
            node.metric("druse_endorsements_applied_total", &[("verdict", "endorse")]),
            1.0,
            "{} counts the endorsement once",
            node.name
        );
    }
    cluster.stop().await;
}

/// The management node learns of a skill before the swarm does (it is fed the author's signed
/// listing directly), endorses it, and the endorsement reaches the edges first: they keep it
/// pending. When the author then publishes the skill over gossip, each edge stores it already
/// verified.
#[tokio::test(flavor = "multi_thread")]
async fn endorsement_that_arrives_before_its_skill_is_applied_when_the_skill_arrives() {
    let cluster = Cluster::start(&EDGES, |_| {}).await.unwrap();
    let (a, b, c) = (cluster.edge("a"), cluster.edge("b"), cluster.edge("c"));

    let body = Body::Crystal(listing("retry-with-backoff"));
    let id = content_id(&body).unwrap();
    let signed_by_a = seal(&key(1), &body).unwrap();
    let outcome = cluster.mgmt.ingest_bytes(&signed_by_a, &a.peer_id(), topic::CRYSTALS).await;
    assert_eq!(outcome, Outcome::Accepted, "the management node takes a's listing");

    cluster.management.endorse(id, EndorsementVerdict::Endorse, "reviewed early".into()).await.unwrap();
    for node in [a, b, c] {
        eventually(WAIT, format_args!("{} to hold the endorsement pending", node.name), async || {
            node.metric("druse_endorsements_pending", &[]) == 1.0
        })
        .await
        .unwrap();
        assert!(!node.has_skill(&id), "{} has the skill before a published it", node.name);
    }

    let published = a.publish(&body).await.unwrap();
    assert_eq!(published, id);
    let mgmt = mgmt_key().public();
    for node in [a, b, c] {
        eventually(WAIT, format_args!("{} to store {id}", node.name), async || node.has_skill(&id)).await.unwrap();
        let skill = node.stored(&id).unwrap().unwrap();
        assert!(skill.is_verified, "{} stored the skill without its pending endorsement", node.name);
        assert_eq!(skill.verified_by, Some(mgmt), "{} names the wrong endorser", node.name);
        // The gauge is refreshed at the end of the step that stored the skill.
        eventually(WAIT, format_args!("{} to hold nothing pending", node.name), async || {
            node.metric("druse_endorsements_pending", &[]) == 0.0
        })
        .await
        .unwrap();
    }
    cluster.stop().await;
}
