//! The `/memory` page's routes on a real node, as an operator's browser reads them: the map of
//! crystals (`GET /v1/memory/map`) with the API's token rule for private memories, its bound,
//! the supersession edges, and the page itself (`GET /memory`), self-contained.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use druse_node::daemon::Running;
use druse_node::memory_map::MAX_LIMIT;
use serde_json::{Value, json};

mod common;
use common::{get, start};

async fn add(running: &Running, memory: Value) -> Value {
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/memories", running.api_addr))
        .bearer_auth(running.node.token())
        .json(&memory)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    response.json().await.unwrap()
}

fn ids(map: &Value) -> Vec<u64> {
    map["points"].as_array().unwrap().iter().map(|p| p["id"].as_u64().unwrap()).collect()
}

#[tokio::test]
async fn private_crystals_are_on_the_map_only_with_the_token() {
    let (running, _dir) = start().await;
    let public = add(&running, json!({"text": "The swarm meets on Thursdays", "scope": "public"})).await;
    let private = add(&running, json!({"text": "Sam's dad has surgery in March", "namespace": "user:sam"})).await;
    let (public_id, private_id) =
        (public["crystal"]["id"].as_u64().unwrap(), private["crystal"]["id"].as_u64().unwrap());

    let (status, map) = get(&running, "/v1/memory/map", false).await;
    assert_eq!(status, 200, "{map}");
    assert_eq!(ids(&map), vec![public_id], "without the token only the public crystal");
    assert_eq!(map["total"], 1);
    assert!(!map.to_string().contains("surgery"), "nothing of the private text leaks: {map}");

    let (status, map) = get(&running, "/v1/memory/map", true).await;
    assert_eq!(status, 200, "{map}");
    assert_eq!(ids(&map), vec![public_id, private_id], "with the token, both");
    let point = &map["points"][1];
    assert_eq!(point["namespace"], "user:sam");
    assert_eq!(point["kind"], "observation");
    assert_eq!(point["lifecycle"], "generated");
    assert_eq!(point["status"], "active");
    assert_eq!(point["decay_class"], "default");
    assert!(point["importance"].as_f64().unwrap() > 0.0);
    assert!(point["x"].as_f64().unwrap().is_finite() && point["y"].as_f64().unwrap().is_finite());
}

#[tokio::test]
async fn a_map_of_nothing_but_private_memories_needs_the_token_as_a_search_does() {
    let (running, _dir) = start().await;
    add(&running, json!({"text": "Sam likes pottery", "namespace": "user:sam"})).await;
    let (status, body) = get(&running, "/v1/memory/map", false).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"], "unauthorized");
    let (search, _) = get(&running, "/v1/memories?q=pottery", false).await;
    assert_eq!(search, 401, "the search route's rule, which the map follows");

    let (status, body) = get(&running, "/v1/memory/map", true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body).len(), 1);
    let wrong = reqwest::Client::new()
        .get(format!("http://{}/v1/memory/map", running.api_addr))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401, "a wrong token is no token");
}

#[tokio::test]
async fn an_empty_node_has_an_empty_map() {
    let (running, _dir) = start().await;
    for token in [false, true] {
        let (status, map) = get(&running, "/v1/memory/map", token).await;
        assert_eq!(status, 200, "{map}");
        assert_eq!(map["points"], json!([]));
        assert_eq!(map["edges"], json!([]));
    }
}

#[tokio::test]
async fn the_map_is_bounded_by_its_limit_and_says_so() {
    let (running, _dir) = start().await;
    let texts = ["red kites over the ridge", "a bakery on Elm street", "tidal pools at dawn", "the lighthouse keeper"];
    let mut stored = Vec::new();
    for text in texts {
        stored.push(add(&running, json!({"text": text, "scope": "public"})).await["crystal"]["id"].as_u64().unwrap());
    }
    let (status, map) = get(&running, "/v1/memory/map?limit=2", false).await;
    assert_eq!(status, 200, "{map}");
    assert_eq!(ids(&map), stored[2..].to_vec(), "the newest two");
    assert_eq!(map["total"], 4);
    assert_eq!(map["truncated"], true);
    assert_eq!(map["limit"], 2);

    let (status, map) = get(&running, "/v1/memory/map", false).await;
    assert_eq!((status, map["truncated"].clone(), map["limit"].clone()), (200, json!(false), json!(10_000)));

    for bad in [format!("limit={}", MAX_LIMIT + 1), "limit=0".to_owned(), "limit=many".to_owned(), "lmit=3".to_owned()]
    {
        let (status, body) = get(&running, &format!("/v1/memory/map?{bad}"), true).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"], "bad_request");
    }
    let (_, body) = get(&running, &format!("/v1/memory/map?limit={}", MAX_LIMIT + 1), true).await;
    assert!(body["detail"].as_str().unwrap().contains(&MAX_LIMIT.to_string()), "the error names the maximum: {body}");
    let (status, _) = get(&running, &format!("/v1/memory/map?limit={MAX_LIMIT}"), true).await;
    assert_eq!(status, 200, "the maximum itself is allowed");
}

#[tokio::test]
async fn a_correction_is_an_edge_from_the_old_crystal_to_the_new() {
    let (running, _dir) = start().await;
    let old = add(&running, json!({"text": "Dad's surgery is March 15", "namespace": "user:sam"})).await;
    let new = add(&running, json!({"text": "Wait, actually it's March 22", "namespace": "user:sam"})).await;
    let (old_id, new_id) = (old["crystal"]["id"].as_u64().unwrap(), new["crystal"]["id"].as_u64().unwrap());
    assert_eq!(new["superseded"].as_u64(), Some(old_id), "the correction superseded the old value: {new}");

    let (status, map) = get(&running, "/v1/memory/map", true).await;
    assert_eq!(status, 200, "{map}");
    assert_eq!(map["edges"], json!([{"from": old_id, "to": new_id}]));
    let statuses: Vec<&str> = map["points"].as_array().unwrap().iter().map(|p| p["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["superseded", "active"]);
    assert_eq!(map["points"][0]["text"], "Dad's surgery is March 15", "a superseded crystal stays on the map");
}

#[tokio::test]
async fn the_same_memories_always_make_the_same_map() {
    let (running, _dir) = start().await;
    for text in ["rust borrow checker", "tokio runtime tasks", "gossipsub mesh peers", "sled trees and batches"] {
        add(&running, json!({"text": text, "scope": "public"})).await;
    }
    let (_, first) = get(&running, "/v1/memory/map", false).await;
    let (_, second) = get(&running, "/v1/memory/map", false).await;
    let at = |m: &Value| {
        m["points"].as_array().unwrap().iter().map(|p| (p["x"].clone(), p["y"].clone())).collect::<Vec<_>>()
    };
    assert_eq!(at(&first), at(&second));
    let spread = at(&first).iter().map(|(x, _)| x.as_f64().unwrap()).fold(0.0, |m: f64, x| m.max(x.abs()));
    assert!(spread > 0.0, "different texts are spread out: {first}");
}

#[tokio::test]
async fn the_page_is_one_self_contained_document() {
    let (running, _dir) = start().await;
    let response = reqwest::get(format!("http://{}/memory", running.api_addr)).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), "{policy}");
    let page = response.text().await.unwrap();
    assert!(page.contains("/v1/memory/map") && page.contains("/v1/memories?"), "it reads the map and the search route");
    for external in ["src=\"http", "href=\"http", "url(http", "@import", "@font-face", "//cdn"] {
        assert!(!page.contains(external), "the page loads nothing from elsewhere ({external})");
    }
}
