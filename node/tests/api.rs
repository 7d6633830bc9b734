//! The HTTP API on a real node: the bearer token, bounded bodies, and JSON errors with the
//! right status, with nothing already stored lost on a bad request.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use druse_node::config::Config;
use druse_node::daemon::{self, Running};
use druse_node::{Role, skill::PublishSkill};
use serde_json::{Value, json};

/// A loopback node keeping its data in `dir`, on ports the OS picks.
fn loopback(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.store.data_dir = dir.to_owned();
    config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()];
    config.p2p.mdns = false;
    config.api.listen = "127.0.0.1:0".parse().unwrap();
    config.metrics.listen = "127.0.0.1:0".parse().unwrap();
    config
}

async fn start() -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = loopback(dir.path());
    config.api.max_body_bytes = 4096;
    let running = daemon::start(config, Role::Edge, |_| axum::Router::new()).await.unwrap();
    (running, dir)
}

fn skill(name: &str) -> Value {
    json!({ "name": name, "text": "retry with exponential backoff", "tags": ["net"] })
}

async fn post(running: &Running, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(format!("http://{}/v1/skills", running.api_addr)).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn skill_count(running: &Running) -> usize {
    let url = format!("http://{}/v1/skills", running.api_addr);
    reqwest::get(url).await.unwrap().json::<Vec<Value>>().await.unwrap().len()
}

#[tokio::test]
async fn publish_needs_the_bearer_token() {
    let (running, _dir) = start().await;
    let (status, body) = post(&running, None, skill("a")).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"], "unauthorized");
    let (status, _) = post(&running, Some("wrong"), skill("a")).await;
    assert_eq!(status, 401);
    let token = running.node.token().to_owned();
    let (status, body) = post(&running, Some(&token), skill("a")).await;
    assert_eq!(status, 201, "{body}");
    assert!(body["content_id"].as_str().unwrap().starts_with("bafyrei"));
    running.stop().await;
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_lose_nothing() {
    let (running, _dir) = start().await;
    let token = running.node.token().to_owned();
    assert_eq!(post(&running, Some(&token), skill("kept")).await.0, 201);

    let (status, body) = post(&running, Some(&token), json!({ "name": "x" })).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "missing text: {body}");

    let (status, body) = post(&running, Some(&token), json!({ "name": "x", "text": "y", "color": "red" })).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "unknown field: {body}");

    let huge = json!({ "name": "x", "text": "y".repeat(10_000) });
    let (status, body) = post(&running, Some(&token), huge).await;
    assert_eq!((status, body["error"].as_str()), (413, Some("too_large")), "{body}");

    let memory = json!({ "name": "x", "text": "I went to the beach", "semantic_type": "episode" });
    let (status, body) = post(&running, Some(&token), memory).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("not_publishable")), "{body}");

    let secret = json!({ "name": "x", "text": "api_key = 12345" });
    let (status, body) = post(&running, Some(&token), secret).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("not_publishable")), "{body}");

    let private = json!({ "name": "x", "text": "y", "scope": "private" });
    assert_eq!(post(&running, Some(&token), private).await.0, 422);

    let url = format!("http://{}/v1/crystals/not-a-cid", running.api_addr);
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status().as_u16(), 400);

    assert_eq!(skill_count(&running).await, 1, "the skill stored first is still there");
    running.stop().await;
}

#[tokio::test]
async fn a_published_skill_is_counted_by_the_next_status_read() {
    let (running, _dir) = start().await;
    let token = running.node.token().to_owned();
    for n in 1..=10 {
        let (status, body) = post(&running, Some(&token), skill(&format!("counted-{n}"))).await;
        assert_eq!(status, 201, "{body}");
        let (status, body) = get_json(&running, "/v1/status", false).await;
        assert_eq!((status, body["skills"].as_u64()), (200, Some(n)), "the status after publish {n}: {body}");
    }
    running.stop().await;
}

#[tokio::test]
async fn over_the_listing_rate_is_429() {
    let (running, _dir) = start().await;
    let token = running.node.token().to_owned();
    for i in 0..10 {
        let request: PublishSkill = serde_json::from_value(skill(&format!("s{i}"))).unwrap();
        let (status, body) = post(&running, Some(&token), serde_json::to_value(request).unwrap()).await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = post(&running, Some(&token), skill("s10")).await;
    assert_eq!((status, body["error"].as_str()), (429, Some("rate_limited")), "{body}");
    assert_eq!(skill_count(&running).await, 10);
    running.stop().await;
}

async fn post_to(running: &Running, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", running.api_addr))
        .bearer_auth(running.node.token())
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn get_json(running: &Running, path: &str, token: bool) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("http://{}{path}", running.api_addr));
    if token {
        request = request.bearer_auth(running.node.token());
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn corrected_memory_is_recalled_and_its_history_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = || loopback(dir.path());
    let running = daemon::start(config(), Role::Edge, |_| axum::Router::new()).await.unwrap();
    let old = json!({ "text": "Dad's surgery is March 15", "namespace": "user:sam" });
    let (status, first) = post_to(&running, "/v1/memories", old).await;
    assert_eq!(status, 201, "{first}");
    let fix = json!({ "text": "Wait, actually it's March 22 - I got the date wrong", "namespace": "user:sam" });
    let (status, second) = post_to(&running, "/v1/memories", fix).await;
    assert_eq!(status, 201, "{second}");
    assert_eq!(second["decision"]["action"], "update");
    let new_id = second["crystal"]["id"].as_u64().unwrap();
    running.stop().await;

    let running = daemon::start(config(), Role::Edge, |_| axum::Router::new()).await.unwrap();
    let (status, hits) =
        get_json(&running, "/v1/memories?q=when%20is%20dad%27s%20surgery&k=3&namespace=user:sam", true).await;
    assert_eq!(status, 200, "{hits}");
    assert_eq!(hits[0]["crystal"]["text"], "Wait, actually it's March 22 - I got the date wrong");
    assert!(!hits.as_array().unwrap().iter().any(|h| h["crystal"]["text"] == "Dad's surgery is March 15"));

    let (status, anonymous) = get_json(&running, "/v1/memories?q=surgery", false).await;
    assert_eq!((status, anonymous["error"].as_str()), (401, Some("unauthorized")), "private memories need the token");

    let (status, history) = get_json(&running, &format!("/v1/crystals/{new_id}/history"), true).await;
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["chain"][0]["text"], "Dad's surgery is March 15");
    assert_eq!(history["chain"][0]["status"], "superseded");
    assert_eq!(history["chain"][1]["id"].as_u64(), Some(new_id));

    let (status, report) = post_to(&running, "/v1/consolidate", json!({})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["scored"].as_u64(), Some(1));

    let (status, body) = post_to(&running, "/v1/memories", json!({ "text": "" })).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("invalid")));
    running.stop().await;
}

#[tokio::test]
async fn market_routes_report_list_adopt_and_refuse_bad_input_clearly() {
    let (running, _dir) = start().await;
    let token = running.node.token().to_owned();
    let (_, published) = post(&running, Some(&token), skill("backoff")).await;
    let id = published["content_id"].as_str().unwrap().to_owned();
    let reports = format!("/v1/skills/{id}/reports");

    let (status, body) = post_to(&running, &reports, json!({ "success": true, "reward": 0.9 })).await;
    assert_eq!(status, 201, "{body}");
    for (bad, why) in [
        (json!({ "success": true, "reward": 3.0 }), "reward out of range"),
        (json!({}), "neither an execution nor a claim"),
        (json!({ "success": true, "claim": "b" }), "both"),
        (json!({ "claim": " " }), "empty bounty id"),
    ] {
        let (status, body) = post_to(&running, &reports, bad).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{why}: {body}");
    }
    let unknown = format!("/v1/skills/{}/reports", druse_protocol::ContentId::of(b"no such skill"));
    let (status, body) = post_to(&running, &unknown, json!({ "success": false })).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")), "{body}");
    let (status, _) = post_to(&running, "/v1/skills/not-a-cid/reports", json!({ "success": true })).await;
    assert_eq!(status, 400);

    // The listing shows the asking price beside the computed one, the stats and the version.
    let (status, listing) = get_json(&running, &format!("/v1/skills/{id}"), false).await;
    assert_eq!(status, 200);
    assert_eq!(listing["stats"]["executions"], 1);
    assert_eq!(listing["asking_price"], 0);
    assert_eq!(listing["computed_price"]["micros"], 0, "one execution does not pass the gate yet: {listing}");
    assert_eq!(listing["gate_passed"], false);
    assert_eq!(listing["listing"]["version"], 1);
    assert_eq!(listing["deprecated"], false);
    let (_, all) = get_json(&running, "/v1/skills?limit=5", false).await;
    assert_eq!(all.as_array().unwrap().len(), 1);
    let (status, _) = get_json(&running, "/v1/skills?limit=lots", false).await;
    assert_eq!(status, 400);

    let (status, body) = post_to(&running, &format!("/v1/skills/{id}/adopt"), json!({})).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("invalid")), "adopting its own skill: {body}");
    let (status, versions) = get_json(&running, "/v1/skills/backoff/versions", false).await;
    assert_eq!((status, versions.as_array().map(Vec::len)), (200, Some(1)), "{versions}");
    let (status, _) = get_json(&running, "/v1/skills/nothing-here/versions", false).await;
    assert_eq!(status, 404);
    let (status, ledger) = get_json(&running, "/v1/ledger", false).await;
    assert_eq!((status, &ledger["balance"]), (200, &json!(1_000_000)), "{ledger}");
    let (status, bounties) = get_json(&running, "/v1/bounties", false).await;
    assert_eq!((status, bounties), (200, json!([])));

    let unauthenticated = reqwest::Client::new()
        .post(format!("http://{}{reports}", running.api_addr))
        .json(&json!({ "success": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
    running.stop().await;
}
