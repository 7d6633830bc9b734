#![allow(clippy::unwrap_used)]
//! Every write route of an edge node and of a management node, as `druse-node run` and
//! `druse-mgmt run` serve them, refuses a body one byte over `api.max_body_bytes` with 413, and
//! reads a body at the cap.

use druse_management::Management;
use druse_node::Role;
use druse_node::daemon::{self, Running};
use druse_protocol::ContentId;
use druse_tests::swarm::{config, mgmt_key};

const CAP: usize = 4096;

/// Every write route of an edge node, and whether it reads a body (`{id}` stands for a content id).
const EDGE_WRITES: [(&str, bool); 5] = [
    ("/v1/skills", true),
    ("/v1/skills/{id}/reports", true),
    ("/v1/skills/{id}/adopt", false),
    ("/v1/memories", true),
    ("/v1/consolidate", false),
];
/// The management role's own write routes; each reads a body.
const MANAGEMENT_WRITES: [(&str, bool); 5] = [
    ("/v1/endorsements", true),
    ("/v1/weather", true),
    ("/v1/bans", true),
    ("/v1/attestations", true),
    ("/v1/bounties", true),
];

async fn start(role: Role, dir: &std::path::Path) -> Running {
    let mut config = config(dir, &[mgmt_key().public()]).unwrap();
    config.api.max_body_bytes = CAP;
    if role == Role::Management {
        mgmt_key().save(&dir.join("node.key")).unwrap();
    }
    daemon::start(config, role, |node| match role {
        Role::Management => druse_management::api::router(Management::new(node.clone(), Default::default()).unwrap()),
        _ => axum::Router::new(),
    })
    .await
    .unwrap()
}

/// A JSON object of exactly `len` bytes (no route accepts its one field).
fn body_of(len: usize) -> String {
    let frame = r#"{"pad":""}"#.len();
    format!(r#"{{"pad":"{}"}}"#, "x".repeat(len - frame))
}

/// POSTs `body` to `route`, once with a declared length and once chunked (no length declared);
/// returns each answer's status and body.
async fn post(running: &Running, route: &str, body: &str) -> [(u16, String); 2] {
    let token = running.node.token().to_owned();
    let declared = reqwest::Client::new()
        .post(format!("http://{}{route}", running.api_addr))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let declared = (declared.status().as_u16(), declared.text().await.unwrap_or_default());
    [declared, post_chunked(running, route, &token, body).await]
}

/// A raw HTTP/1.1 POST whose body comes in 1000-byte chunks.
async fn post_chunked(running: &Running, route: &str, token: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(running.api_addr).await.unwrap();
    let mut request = format!(
        "POST {route} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        running.api_addr
    );
    for chunk in body.as_bytes().chunks(1000) {
        request.push_str(&format!("{:x}\r\n{}\r\n", chunk.len(), std::str::from_utf8(chunk).unwrap()));
    }
    request.push_str("0\r\n\r\n");
    // The server may answer and close before it has read the whole body.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {answer}"));
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    (status, if chunked { dechunk(body) } else { body.to_owned() })
}

/// The payload of a chunked response body.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

async fn check_every_route(role: Role, routes: &[(&str, bool)]) {
    let dir = tempfile::tempdir().unwrap();
    let running = start(role, dir.path()).await;
    let id = ContentId::of(b"some skill").to_string();
    for (route, reads_body) in routes {
        let route = route.replace("{id}", &id);
        let [declared, chunked] = post(&running, &route, &body_of(CAP + 1)).await;
        // A declared length over the cap is refused on every route; a chunked body is cut at
        // the cap by every route that reads one (the others never read it).
        let over = if *reads_body { vec![declared, chunked] } else { vec![declared] };
        for (status, text) in over {
            assert_eq!(status, 413, "{role:?} {route} with {} bytes: {text}", CAP + 1);
            let error: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(error["error"], "too_large", "{route}: {text}");
        }
        for (status, text) in post(&running, &route, &body_of(CAP)).await {
            assert_ne!(status, 413, "{role:?} {route} refused a body at the cap: {text}");
        }
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_edge_write_route_refuses_a_body_one_byte_over_the_cap() {
    check_every_route(Role::Edge, &EDGE_WRITES).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_management_write_route_refuses_a_body_one_byte_over_the_cap() {
    check_every_route(Role::Management, &[&EDGE_WRITES[..], &MANAGEMENT_WRITES[..]].concat()).await;
}
