use druse_tests::swarm::{Cluster, connect};
#[tokio::test(flavor = "multi_thread")]
async fn scratch_restart_score() {
    let mut cluster = Cluster::start(&[("e", 1)], |_| {}).await.unwrap();
    let e_id = cluster.edge("e").peer_id();
    let m_id = cluster.mgmt.peer_id();
    let t = tokio::time::Instant::now();
    let e = cluster.edges.remove(0).restart().await.unwrap();
    tokio::time::sleep_until(t + std::time::Duration::from_millis(10_500)).await;
    connect(e.net(), cluster.mgmt.net()).await.unwrap();
    for i in 0..4 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        println!("{}ms: e on mgmt {:?}; mgmt on e {:?}", i*500, cluster.mgmt.net().peer_score(e_id).await, e.net().peer_score(m_id).await);
    }
}
