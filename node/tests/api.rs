//! The HTTP API on a real node: the bearer token, bounded bodies, and JSON errors with the
//! right status, with nothing already stored lost on a bad request.

use druse_node::config::Config;
use druse_node::daemon::{self, Running};
use druse_node::{Role, api::PublishSkill};
use serde_json::{Value, json};

async fn start() -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.store.data_dir = dir.path().to_owned();
    config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()];
    config.p2p.mdns = false;
    config.api.listen = "127.0.0.1:0".parse().unwrap();
    config.metrics.listen = "127.0.0.1:0".parse().unwrap();
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
    assert_eq!((status, body["error"].as_str()), (422, Some("bad_request")), "missing text: {body}");

    let (status, body) = post(&running, Some(&token), json!({ "name": "x", "text": "y", "color": "red" })).await;
    assert_eq!(status, 422, "unknown field: {body}");

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
