#![allow(clippy::unwrap_used)]
//! The census on a real swarm: after edges publish listings, `GET /v1/census` on the management
//! node lists every peer with its listing count and trust level, and `druse-mgmt census` prints
//! the same as a table.

use std::time::Duration;

use druse_management::census::{Census, Peer};
use druse_protocol::body::{Body, TrustLevel};
use druse_tests::process::{binaries, run_cli};
use druse_tests::swarm::{Cluster, TestNode, listing};
use druse_tests::{WAIT, eventually};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Serves the management routes of `cluster` on a loopback port; returns the base URL and the
/// sender that stops the server.
async fn serve(cluster: &Cluster) -> (String, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = druse_management::api::router(cluster.management.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(druse_node::api::serve(listener, app, async move {
        let _ = stopped.await;
    }));
    (url, stop)
}

/// Publishes `n` listings from `edge` and waits until the management node holds them all.
async fn publish(cluster: &Cluster, edge: &TestNode, n: usize) {
    for i in 0..n {
        let id = edge.publish(&Body::Crystal(listing(&format!("{}-skill-{i}", edge.name)))).await.unwrap();
        eventually(WAIT, format_args!("the management node to store {}'s {id}", edge.name), async || {
            cluster.mgmt.has_skill(&id)
        })
        .await
        .unwrap();
    }
}

fn row<'a>(census: &'a Census, edge: &TestNode) -> &'a Peer {
    let id = edge.peer_id().to_string();
    census.peers.iter().find(|p| p.peer_id == id).unwrap_or_else(|| panic!("{} is not in the census", edge.name))
}

#[tokio::test(flavor = "multi_thread")]
async fn census_lists_every_peer_with_its_listings_and_trust_level() {
    let cluster = Cluster::start(&[("a", 1), ("b", 2), ("c", 3)], |_| {}).await.unwrap();
    let (a, b, c) = (cluster.edge("a"), cluster.edge("b"), cluster.edge("c"));
    cluster
        .management
        .attest(b.public_key(), TrustLevel::Trusted, "known operator".into(), Duration::from_secs(600))
        .await
        .unwrap();
    publish(&cluster, a, 2).await;
    publish(&cluster, b, 3).await;
    let (url, stop) = serve(&cluster).await;

    let census: Census = reqwest::get(format!("{url}/v1/census")).await.unwrap().json().await.unwrap();
    let (ra, rb, rc) = (row(&census, a), row(&census, b), row(&census, c));
    assert_eq!((ra.listings, ra.trust_level, ra.connected), (2, TrustLevel::Provisional, true), "{ra:?}");
    assert_eq!((rb.listings, rb.trust_level, rb.connected), (3, TrustLevel::Trusted, true), "{rb:?}");
    assert_eq!((rc.listings, rc.trust_level, rc.connected), (0, TrustLevel::Provisional, true), "{rc:?}");
    assert!(ra.accepted >= 2 && rb.accepted >= 3, "accepted counts: a {}, b {}", ra.accepted, rb.accepted);
    for r in [ra, rb, rc] {
        assert!(r.first_seen.is_some_and(|t| t <= census.taken_at), "{r:?}");
        assert!((0.0..=1.0).contains(&r.reputation), "{r:?}");
    }
    assert_eq!(census.peers.len(), 3, "{:?}", census.peers);
    assert_eq!(census.peers[0].peer_id, rb.peer_id, "the peer with the most listings comes first");

    let h = &census.health;
    assert_eq!(h.peer_id, cluster.mgmt.peer_id().to_string());
    assert_eq!((h.connected_peers, h.known_peers, h.skills_held), (3, 3, 5));
    assert_eq!(h.connected_by_trust_level.get("trusted"), Some(&1));
    assert_eq!(h.connected_by_trust_level.get("provisional"), Some(&2));
    assert!(!h.halted && h.weather.level.is_none());
    let _ = stop.send(());
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn druse_mgmt_census_prints_the_census_as_a_table_and_as_json() {
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let cluster = Cluster::start(&[("a", 1), ("b", 2)], |_| {}).await.unwrap();
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    publish(&cluster, a, 2).await;
    publish(&cluster, b, 1).await;
    cluster.management.weather(0.9, Duration::from_secs(60), "drill".into()).await.unwrap();
    let (url, stop) = serve(&cluster).await;

    let text = run_cli(&bins.mgmt, &["census", "--api", &url]).await.unwrap();
    for (edge, listings) in [(a, "2"), (b, "1")] {
        let id = edge.peer_id().to_string();
        let line = text.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("no row for {id}:\n{text}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[1..3], ["yes", "provisional"], "{line}");
        assert_eq!(cells[6], listings, "{line}");
    }
    assert!(text.contains("peers     2 connected, 2 known"), "{text}");
    assert!(text.contains("skills    3 held"), "{text}");
    assert!(text.contains("HALTED at cortisol 0.90") && text.contains(": drill"), "{text}");

    let json = run_cli(&bins.mgmt, &["census", "--json", "--api", &url]).await.unwrap();
    let census: Census = serde_json::from_str(&json).unwrap();
    assert_eq!(census.peers.len(), 2);
    assert_eq!(row(&census, a).listings, 2);
    assert!(census.health.halted);
    let _ = stop.send(());
    cluster.stop().await;
}
