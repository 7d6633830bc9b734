//! OpenAI client tests against a real HTTP server on 127.0.0.1:0 that speaks `/v1/embeddings`.
//!
//! The server's path prefix picks its behaviour (`/ok/v1/embeddings`, `/fail/v1/embeddings`, …). Its
//! vectors come from the hashing embedder, scaled so they are not unit length, and it answers in
//! reverse index order, as servers may.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::*;
use crate::embed::Hashing;
use crate::embed::choose::select;

/// The dimension the fake server's vectors have.
const DIM: usize = 16;

/// What the fake server saw.
#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    authorization: Mutex<Vec<Option<String>>>,
    models: Mutex<Vec<String>>,
}

#[derive(serde::Deserialize)]
struct Request {
    model: String,
    input: Vec<String>,
}

async fn embeddings(
    State(seen): State<Arc<Seen>>,
    Path(mode): Path<String>,
    headers: HeaderMap,
    Json(request): Json<Request>,
) -> Response {
    let count = seen.requests.fetch_add(1, Ordering::SeqCst);
    let authorization = headers.get("authorization").map(|v| v.to_str().unwrap().to_string());
    seen.authorization.lock().unwrap().push(authorization);
    seen.models.lock().unwrap().push(request.model.clone());
    let dim = match mode.as_str() {
        "fail" => return (StatusCode::INTERNAL_SERVER_ERROR, "upstream model exploded").into_response(),
        "malformed" => return (StatusCode::OK, "{\"data\": [{\"embedding\": [0.1, ").into_response(),
        "wrongdim" => DIM / 2,
        "drift" if count > 0 => DIM / 2,
        _ => DIM,
    };
    let inputs: Vec<&str> = request.input.iter().map(String::as_str).collect();
    let vectors = Hashing::new(dim).embed(&inputs).unwrap();
    let mut data: Vec<serde_json::Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let scaled: Vec<f32> = v.iter().map(|x| x * (index as f32 + 2.0)).collect();
            serde_json::json!({ "object": "embedding", "embedding": scaled, "index": index })
        })
        .collect();
    data.reverse();
    if mode == "short" {
        data.pop();
    }
    if mode == "duplicate" {
        data[0]["index"] = serde_json::json!(0);
    }
    Json(serde_json::json!({
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": { "prompt_tokens": 1, "total_tokens": 1 },
    }))
    .into_response()
}

/// Starts the fake server on the current tokio runtime; returns its base URL.
async fn serve(seen: Arc<Seen>) -> String {
    let app = axum::Router::new().route("/{mode}/v1/embeddings", axum::routing::post(embeddings)).with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The fake server on its own runtime, for tests that run on a plain thread; stops when dropped.
struct Server {
    url: String,
    seen: Arc<Seen>,
    _runtime: tokio::runtime::Runtime,
}

impl Server {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let seen = Arc::new(Seen::default());
        let url = runtime.block_on(serve(seen.clone()));
        Self { url, seen, _runtime: runtime }
    }

    fn url(&self, mode: &str) -> String {
        format!("{}/{mode}", self.url)
    }
}

const TEXTS: [&str; 5] = [
    "The cat sat on the mat.",
    "Gossip spreads weather between peers.",
    "",
    "Crystals decay unless reinforced.",
    "A fifth text, to make the reversal visible.",
];

#[test]
fn openai_returns_unit_vectors_in_input_order() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("ok"), "test-model", None, Some(DIM)).unwrap();
    assert_close(&client.embed(&TEXTS).unwrap(), &Hashing::new(DIM).embed(&TEXTS).unwrap());
}

/// Each vector matches the one at the same place: proves order and normalisation.
fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let diff = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff < 1e-6, "text {i} is out of order or not normalised (max diff {diff})");
    }
}

#[test]
fn openai_splits_large_inputs_into_batches() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("ok"), "test-model", None, Some(DIM)).unwrap();
    let texts: Vec<String> = (0..(BATCH * 2 + 3)).map(|i| format!("text number {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    assert_close(&client.embed(&refs).unwrap(), &Hashing::new(DIM).embed(&refs).unwrap());
    assert_eq!(server.seen.requests.load(Ordering::SeqCst), 3);
}

#[test]
fn openai_sends_the_bearer_key_and_the_model() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("ok"), "nomic-embed-text", Some("sk-test-123".into()), Some(DIM)).unwrap();
    client.embed(&["hello"]).unwrap();
    assert_eq!(*server.seen.authorization.lock().unwrap(), vec![Some("Bearer sk-test-123".to_string())]);
    assert_eq!(*server.seen.models.lock().unwrap(), vec!["nomic-embed-text".to_string()]);
}

#[test]
fn openai_without_a_key_sends_no_authorization() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("ok"), "m", None, Some(DIM)).unwrap();
    client.embed(&["hello"]).unwrap();
    assert_eq!(*server.seen.authorization.lock().unwrap(), vec![None]);
}

#[test]
fn openai_never_shows_the_key_in_debug_output() {
    let client = OpenAi::new("http://127.0.0.1:9", "m", Some("sk-secret-456".into()), Some(DIM)).unwrap();
    let debug = format!("{client:?}");
    assert!(!debug.contains("sk-secret-456"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
}

#[test]
fn openai_learns_its_dim_from_a_probe_when_unconfigured() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("ok"), "test-model", None, None).unwrap();
    assert_eq!(client.dim(), DIM);
    assert_eq!(client.name(), "openai:test-model");
    assert_eq!(server.seen.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn openai_http_500_names_the_status_and_endpoint() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("fail"), "m", None, Some(DIM)).unwrap();
    let err = client.embed(&["x"]).unwrap_err();
    assert!(matches!(&err, Error::Status { status: 500, .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("500") && message.contains(&server.url("fail/v1/embeddings")), "{message}");
    assert!(message.contains("upstream model exploded"), "{message}");
}

#[test]
fn openai_malformed_json_is_a_clear_error() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("malformed"), "m", None, Some(DIM)).unwrap();
    let err = client.embed(&["x"]).unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err:?}");
    assert!(err.to_string().contains("malformed response"), "{err}");
}

#[test]
fn openai_rejects_vectors_of_another_dim_than_configured() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("wrongdim"), "m", None, Some(DIM)).unwrap();
    let err = client.embed(&["x", "y"]).unwrap_err();
    assert!(matches!(err, Error::Dim { expected: DIM, got: 8, .. }), "{err:?}");
}

#[test]
fn openai_rejects_vectors_of_another_dim_than_its_first_answer() {
    let server = Server::start();
    let client = OpenAi::new(&server.url("drift"), "m", None, None).unwrap();
    assert_eq!(client.dim(), DIM);
    let err = client.embed(&["x"]).unwrap_err();
    assert!(matches!(err, Error::Dim { expected: DIM, got: 8, .. }), "{err:?}");
}

#[test]
fn openai_rejects_answers_missing_or_repeating_an_index() {
    let server = Server::start();
    for mode in ["short", "duplicate"] {
        let client = OpenAi::new(&server.url(mode), "m", None, Some(DIM)).unwrap();
        let err = client.embed(&["x", "y", "z"]).unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{mode}: {err:?}");
    }
}

#[test]
fn openai_unreachable_endpoint_names_it() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = OpenAi::new(&format!("http://127.0.0.1:{port}"), "m", None, Some(DIM)).unwrap();
    let err = client.embed(&["x"]).unwrap_err();
    assert!(matches!(err, Error::Http { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("http://127.0.0.1:{port}/v1/embeddings")), "{message}");
    assert!(message.contains("could not connect"), "{message}");
}

#[test]
fn openai_stuck_endpoint_times_out() {
    // Connections complete into the listen backlog, but nobody ever answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut client = OpenAi::new(&url, "m", None, Some(DIM)).unwrap();
    client.timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = client.embed(&["x"]).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(err, Error::Http { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[test]
fn openai_rejects_bad_configuration() {
    assert!(matches!(OpenAi::new("not a url", "m", None, Some(4)), Err(Error::Config(_))));
    assert!(matches!(OpenAi::new("ftp://example.invalid", "m", None, Some(4)), Err(Error::Config(_))));
    assert!(matches!(OpenAi::new("http://127.0.0.1:9", " ", None, Some(4)), Err(Error::Config(_))));
    assert!(matches!(OpenAi::new("http://127.0.0.1:9", "m", None, Some(0)), Err(Error::Config(_))));
    assert!(matches!(OpenAi::new("http://127.0.0.1:9", "m", Some("bad\nkey".into()), Some(4)), Err(Error::Config(_))));
}

#[test]
fn openai_endpoint_accepts_base_v1_and_full_urls() {
    for url in ["http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/", "http://h:1/v1/embeddings"] {
        assert_eq!(endpoint_for(url).unwrap(), "http://h:1/v1/embeddings", "{url}");
    }
    assert_eq!(endpoint_for("https://h/proxy/openai").unwrap(), "https://h/proxy/openai/v1/embeddings");
}

#[tokio::test]
async fn openai_works_from_spawn_blocking() {
    let seen = Arc::new(Seen::default());
    let url = format!("{}/ok", serve(seen).await);
    let vectors = tokio::task::spawn_blocking(move || {
        let client = OpenAi::new(&url, "m", None, None)?;
        client.embed(&["from a blocking thread"])
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(vectors.len(), 1);
    assert_eq!(vectors[0].len(), DIM);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_called_on_a_runtime_thread_does_not_panic() {
    // A caller that forgot spawn_blocking: the request hops to a plain thread instead of panicking.
    let seen = Arc::new(Seen::default());
    let url = format!("{}/ok", serve(seen).await);
    let client = OpenAi::new(&url, "m", None, None).unwrap();
    let vectors = client.embed(&["from inside the runtime"]).unwrap();
    assert_eq!(vectors[0].len(), DIM);
    drop(client);
}

#[test]
fn from_config_picks_openai_when_configured() {
    let server = Server::start();
    let config = crate::embed::Config {
        openai_url: Some(server.url("ok")),
        openai_model: Some("test-model".into()),
        openai_api_key_env: Some("DRUSE_TEST_EMBED_KEY".into()),
        ..Default::default()
    };
    let embedder =
        select(&config, None, |name| (name == "DRUSE_TEST_EMBED_KEY").then(|| "sk-from-env".to_string())).unwrap();
    assert_eq!((embedder.name(), embedder.dim()), ("openai:test-model", DIM));
    assert_eq!(*server.seen.authorization.lock().unwrap(), vec![Some("Bearer sk-from-env".to_string())]);
}
