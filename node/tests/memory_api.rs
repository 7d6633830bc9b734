//! The memory routes of the HTTP API on a real node, as an agent developer drives them:
//! batch adds, their own ids and metadata, session and time filters, clear errors for bad
//! input and for private memories asked for without the token, conversation turns that are
//! never reconciled as facts, and the crystal gauge.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use druse_node::daemon::Running;
use serde_json::{Value, json};

mod common;
use common::{get, start};

async fn post(running: &Running, path: &str, body: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", running.api_addr))
        .bearer_auth(running.node.token())
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn post_json(running: &Running, path: &str, body: Value) -> (u16, Value) {
    post(running, path, &body.to_string()).await
}

fn texts(hits: &Value) -> Vec<String> {
    hits.as_array().unwrap().iter().map(|h| h["crystal"]["text"].as_str().unwrap().to_owned()).collect()
}

/// How many memories a search with a large k finds in `namespace`.
async fn stored(running: &Running, namespace: &str) -> usize {
    let (status, hits) = get(running, &format!("/v1/memories?q=anything&k=100&namespace={namespace}"), true).await;
    assert_eq!(status, 200, "{hits}");
    hits.as_array().unwrap().len()
}

fn turn(text: &str, session: &str, at: &str) -> Value {
    json!({ "text": text, "namespace": "user:mel", "session": session, "turn_at": at, "kind": "interaction" })
}

#[tokio::test]
async fn a_batch_is_stored_in_order_or_not_at_all() {
    let (running, _dir) = start().await;
    let batch = json!({ "memories": [
        turn("Caroline: I went to the support group", "s1", "2023-05-08T13:56:00Z"),
        turn("Melanie: the pottery class was fun", "s1", "2023-05-08T13:57:00Z"),
        turn("Caroline: next week I paint the sunrise", "s1", "2023-05-08T13:58:00Z"),
    ]});
    let (status, added) = post_json(&running, "/v1/memories/batch", batch).await;
    assert_eq!(status, 201, "{added}");
    let ids: Vec<u64> = added.as_array().unwrap().iter().map(|a| a["crystal"]["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "stored in the order sent: {ids:?}");
    assert_eq!(added[0]["crystal"]["turn_at"].as_u64(), Some(1_683_554_160_000), "ISO 8601 turn_at");

    // One bad memory refuses the whole batch, and nothing of it is stored.
    let bad = json!({ "memories": [turn("Melanie: kept out", "s2", "2023-05-09T10:00:00Z"), { "text": "" }] });
    let (status, body) = post_json(&running, "/v1/memories/batch", bad).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("invalid")), "{body}");
    let (status, body) = post_json(&running, "/v1/memories/batch", json!({ "memories": [] })).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{body}");
    let too_many: Vec<Value> = (0..1001).map(|i| json!({ "text": format!("memory {i}") })).collect();
    let (status, body) = post_json(&running, "/v1/memories/batch", json!({ "memories": too_many })).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{body}");
    assert_eq!(stored(&running, "user:mel").await, 3, "nothing of a refused batch is stored");
    running.stop().await;
}

#[tokio::test]
async fn the_callers_id_and_metadata_come_back_with_the_memory() {
    let (running, _dir) = start().await;
    let memory = json!({
        "text": "Melanie ran a charity race for mental health", "namespace": "user:mel",
        "external_id": "msg-4711", "metadata": { "channel": "sms", "turn": 12 },
    });
    let (status, added) = post_json(&running, "/v1/memories", memory).await;
    assert_eq!(status, 201, "{added}");
    let id = added["crystal"]["id"].as_u64().unwrap();
    let (status, crystal) = get(&running, &format!("/v1/crystals/{id}"), true).await;
    assert_eq!(status, 200);
    assert_eq!(crystal["external_id"], "msg-4711");
    assert_eq!(crystal["metadata"], json!({ "channel": "sms", "turn": 12 }));
    let (_, hits) = get(&running, "/v1/memories?q=charity%20race&namespace=user:mel&k=1", true).await;
    assert_eq!(hits[0]["crystal"]["external_id"], "msg-4711");

    let big = json!({ "text": "x", "metadata": { "blob": "y".repeat(5000) } });
    let (status, body) = post_json(&running, "/v1/memories", big).await;
    assert_eq!((status, body["error"].as_str()), (422, Some("invalid")), "{body}");
    let long_id = json!({ "text": "x", "external_id": "i".repeat(300) });
    assert_eq!(post_json(&running, "/v1/memories", long_id).await.0, 422);
    let not_an_object = json!({ "text": "x", "metadata": [1, 2] });
    assert_eq!(post_json(&running, "/v1/memories", not_an_object).await.0, 400);
    running.stop().await;
}

#[tokio::test]
async fn searches_filter_by_session_and_time_inside_recall() {
    let (running, _dir) = start().await;
    let batch = json!({ "memories": [
        turn("Melanie: I signed up for a pottery class", "s1", "2023-05-08T13:56:00Z"),
        turn("Melanie: the pottery class made a bowl", "s2", "2023-06-20T10:00:00Z"),
        turn("Melanie: my pottery teacher moved away", "s3", "2023-08-01T09:00:00Z"),
    ]});
    assert_eq!(post_json(&running, "/v1/memories/batch", batch).await.0, 201);
    let ask = |filter: &str| format!("/v1/memories?q=pottery&namespace=user:mel&k=10&{filter}");

    let (status, hits) = get(&running, &ask("session=s2"), true).await;
    assert_eq!(status, 200, "{hits}");
    assert_eq!(texts(&hits), vec!["Melanie: the pottery class made a bowl"]);
    let (_, hits) = get(&running, &ask("since=2023-06-01&until=2023-07-01T00:00:00Z"), true).await;
    assert_eq!(texts(&hits), vec!["Melanie: the pottery class made a bowl"]);
    let (_, hits) = get(&running, &ask("since=1688169600000"), true).await;
    assert_eq!(texts(&hits), vec!["Melanie: my pottery teacher moved away"], "since in Unix milliseconds");
    let (_, hits) = get(&running, &ask("until=2023-05-31"), true).await;
    assert_eq!(texts(&hits), vec!["Melanie: I signed up for a pottery class"]);
    let (_, hits) = get(&running, &ask("session=s9"), true).await;
    assert_eq!(hits, json!([]), "an empty session is an empty answer");

    let (status, body) = get(&running, &ask("since=last%20week"), true).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{body}");
    let (status, body) = get(&running, &ask("since=2023-08-01&until=2023-05-01"), true).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{body}");
    running.stop().await;
}

#[tokio::test]
async fn bad_searches_and_bodies_are_clear_400s_and_private_memory_needs_the_token() {
    let (running, _dir) = start().await;
    let (status, _) =
        post_json(&running, "/v1/memories", json!({ "text": "Sam's dentist is on Tuesday", "namespace": "user:sam" }))
            .await;
    assert_eq!(status, 201);

    for (query, why) in [
        ("q=dentist&k=0", "k = 0"),
        ("q=dentist&k=101", "k over 100"),
        ("q=&k=5", "empty q"),
        ("q=%20%20&k=5", "blank q"),
        ("k=5", "no q"),
        ("q=dentist&k=lots", "k not a number"),
        ("q=dentist&colour=red", "unknown parameter"),
    ] {
        let (status, body) = get(&running, &format!("/v1/memories?{query}&namespace=user:sam"), true).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{why}: {body}");
        assert!(!body["detail"].as_str().unwrap().is_empty(), "{why}: the detail says what is wrong");
    }
    for (body, why) in [
        ("{\"text\": ", "truncated JSON"),
        ("not json", "not JSON"),
        ("{\"text\": 5}", "text not a string"),
        ("{\"text\": \"x\", \"colour\": \"red\"}", "unknown field"),
        ("{\"text\": \"x\", \"turn_at\": \"next week\"}", "unreadable turn_at"),
    ] {
        let (status, answer) = post(&running, "/v1/memories", body).await;
        assert_eq!((status, answer["error"].as_str()), (400, Some("bad_request")), "{why}: {answer}");
    }

    let (status, body) = get(&running, "/v1/memories?q=dentist&k=5&namespace=user:sam", false).await;
    assert_eq!((status, body["error"].as_str()), (401, Some("unauthorized")), "{body}");
    let (status, hits) = get(&running, "/v1/memories?q=dentist&k=5&namespace=user:sam", true).await;
    assert_eq!(status, 200);
    assert_eq!(texts(&hits), vec!["Sam's dentist is on Tuesday"], "nothing was lost to the bad requests");
    // A namespace with nothing in it is an empty answer, with or without the token.
    let (status, hits) = get(&running, "/v1/memories?q=dentist&k=5&namespace=user:nobody", false).await;
    assert_eq!((status, hits), (200, json!([])));
    // What the caller may read comes back without the token.
    let public = json!({ "text": "The dentist's office opens at nine", "namespace": "user:sam", "scope": "public" });
    assert_eq!(post_json(&running, "/v1/memories", public).await.0, 201);
    let (status, hits) = get(&running, "/v1/memories?q=dentist&k=5&namespace=user:sam", false).await;
    assert_eq!(status, 200, "{hits}");
    assert_eq!(texts(&hits), vec!["The dentist's office opens at nine"]);
    running.stop().await;
}

#[tokio::test]
async fn conversation_turns_are_never_reconciled_as_facts() {
    let (running, _dir) = start().await;
    // The default kind (observation), but said in a session: these are turns, not facts.
    let said = [
        "Caroline: I went to the LGBTQ support group yesterday",
        "Melanie: Actually I went to a pottery class yesterday",
        "Caroline: I stopped going to the gym",
        "Caroline: I went to the LGBTQ support group yesterday",
    ];
    for (i, text) in said.iter().enumerate() {
        let body = json!({ "text": text, "namespace": "user:c", "session": "s1", "turn_at": 1_683_554_160_000u64 + i as u64 * 1000 });
        let (status, added) = post_json(&running, "/v1/memories", body).await;
        assert_eq!(status, 201, "{added}");
        assert_eq!(added["decision"]["action"], "add", "{text}: {added}");
        assert_eq!(added["superseded"], Value::Null);
    }
    // Interactions without a session are turns too.
    for text in ["Melanie: I quit my job", "Melanie: actually I left the band"] {
        let (_, added) =
            post_json(&running, "/v1/memories", json!({ "text": text, "namespace": "user:c", "kind": "interaction" }))
                .await;
        assert_eq!(added["decision"]["action"], "add", "{text}: {added}");
    }
    assert_eq!(stored(&running, "user:c").await, 6, "every turn is kept and recallable");
    running.stop().await;
}

#[tokio::test]
async fn the_crystal_gauge_counts_memories_before_any_consolidation() {
    let (running, _dir) = start().await;
    let said = ["Sam likes crows", "the dentist is on Tuesday", "Lisbon in June", "a blue bicycle"];
    let batch: Vec<Value> = said.iter().map(|text| json!({ "text": text, "kind": "interaction" })).collect();
    assert_eq!(post_json(&running, "/v1/memories/batch", json!({ "memories": batch })).await.0, 201);
    let metrics = reqwest::get(format!("http://{}/metrics", running.metrics_addr)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("druse_crystals{lifecycle=\"generated\"} 4"), "{metrics}");
    assert!(metrics.contains("druse_crystals{lifecycle=\"archived\"} 0"), "{metrics}");
    running.stop().await;
}
