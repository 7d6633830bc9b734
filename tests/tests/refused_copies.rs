#![allow(clippy::unwrap_used)]
//! A refused copy never suppresses the genuine message, on a real swarm: for every management
//! kind, a peer first gossips the genuine bytes on a wrong topic, or the same body under a
//! broken signature; the copy is refused and counted, and the genuine message relayed after it
//! by another peer is still applied. Gossipsub's duplicate cache and the validator's seen-set,
//! seqs and rates keep nothing a refused copy carried.

use druse_protocol::body::{Attest, Ban, Body, Bounty, Endorsement, EndorsementVerdict, TrustLevel, Weather};
use druse_protocol::now_ms;
use druse_protocol::{ContentId, topic};
use druse_tests::swarm::{Cluster, Sniffer, TestNode, connect, key, mgmt_key, publish_raw, seal};
use druse_tests::{WAIT, eventually};

/// The management body of `kind` (by index), with `seq`.
fn body(kind: usize, seq: u64) -> Body {
    let issued_at = now_ms();
    let peer = key(90).public();
    match kind {
        0 => Body::Endorsement(Endorsement {
            issued_at,
            seq,
            content_id: ContentId::of(format!("skill {seq}").as_bytes()),
            skill_id: format!("skill-{seq}"),
            version: 1,
            verdict: EndorsementVerdict::Endorse,
            note: "reviewed".into(),
        }),
        1 => Body::Weather(Weather { issued_at, seq, level: 0.9, duration_ms: 60_000, reason: "storm".into() }),
        2 => Body::Bounty(Bounty {
            issued_at,
            seq,
            id: format!("bounty-{seq}"),
            description: "make flaky HTTP calls reliable".into(),
            tags: vec!["net".into()],
            priority: 0.5,
            reward_multiplier: 2.0,
            expires_at: issued_at + 3_600_000,
        }),
        3 => Body::Ban(Ban { issued_at, seq, peer, reason: "spam".into(), expires_at: issued_at + 60_000 }),
        _ => Body::Attest(Attest {
            issued_at,
            seq,
            peer,
            level: TrustLevel::Trusted,
            reason: "known operator".into(),
            expires_at: issued_at + 60_000,
        }),
    }
}

fn accepted(node: &TestNode, kind: &str) -> f64 {
    node.metric("druse_ingest_outcomes_total", &[("kind", kind), ("outcome", "accepted")])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_topic_or_tampered_copy_never_suppresses_the_genuine_management_message() {
    let cluster = Cluster::start(&[("e", 1)], |_| {}).await.unwrap();
    let e = cluster.edge("e");
    let mut seq = 1_000;
    for kind in 0..5 {
        for tampered in [false, true] {
            seq += 1;
            let body = body(kind, seq);
            let label = body.kind().as_str();
            let right = body.kind().topic();
            let genuine = seal(&mgmt_key(), &body).unwrap();
            let case = format!("{label} after a {} copy", if tampered { "tampered" } else { "wrong-topic" });

            // A fresh peer for each case: a refused copy costs its sender its gossip score.
            let attacker = Sniffer::start(100 + u8::try_from(seq % 100).unwrap()).unwrap();
            connect(&attacker.net, e.net()).await.unwrap();
            let (reason, copy, on) = if tampered {
                let mut copy = genuine.clone();
                let last = copy.len() - 1;
                copy[last] ^= 1;
                ("bad_signature", copy, right)
            } else {
                ("wrong_topic", genuine.clone(), topic::CRYSTALS)
            };
            let refused_before = e.outcomes(reason);
            attacker.publish(on, copy).await.unwrap();
            eventually(WAIT, format_args!("e to refuse the copy ({case})"), async || {
                e.outcomes(reason) > refused_before
            })
            .await
            .unwrap();

            let accepted_before = accepted(e, label);
            publish_raw(cluster.mgmt.net(), right, genuine).await.unwrap();
            eventually(WAIT, format_args!("e to apply the genuine {case}"), async || {
                accepted(e, label) > accepted_before
            })
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", e.metrics_text()));
            if label == "weather" {
                assert_eq!(e.weather().last.map(|w| w.seq), Some(seq), "{case}");
            }
            attacker.net.shutdown().await;
        }
    }
    cluster.stop().await;
}
