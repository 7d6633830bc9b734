//! A chat-completions server that speaks the OpenAI protocol (`/v1/chat/completions`,
//! `tool_calls`, `response_format`, error bodies, 429 with `Retry-After`, slow answers) and
//! answers from a script each scenario writes, so scenarios can assert the agent's decisions.
//! Every request is recorded for the scenario to inspect.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A plain assistant message.
    Text(String),
    /// Tool calls: (function name, arguments object).
    Tools(Vec<(String, Value)>),
    /// Tool calls whose arguments are sent as written, valid JSON or not (a real model's
    /// mess): (function name, arguments text).
    RawTools(Vec<(String, String)>),
    /// An error status with an OpenAI-style error body.
    Status(u16, String),
    /// 429 with `Retry-After` in seconds.
    TooMany(u64),
    /// A 200 whose body is not a completion.
    Garbage(String),
    /// The answer after a delay.
    Slow(Duration, Box<Answer>),
}

/// What the scenario's script sees of one request.
#[derive(Debug, Clone)]
pub struct Request {
    pub body: Value,
    pub authorization: Option<String>,
}

impl Request {
    /// The request asks for a JSON-schema answer (extraction).
    pub fn is_extraction(&self) -> bool {
        self.body.get("response_format").is_some()
    }
    /// The request offers tools (an agent run).
    pub fn has_tools(&self) -> bool {
        self.body.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty())
    }
    /// The name of the JSON schema asked for (`observations`, `reconciliation`), if any.
    pub fn schema_name(&self) -> Option<String> {
        self.body["response_format"]["json_schema"]["name"].as_str().map(str::to_owned)
    }
    /// The names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }
    /// The role of the last message (`tool` once the agent sent tool results back).
    pub fn last_role(&self) -> String {
        self.messages().last().and_then(|m| m["role"].as_str()).unwrap_or("").to_owned()
    }
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"].as_array().cloned().unwrap_or_default()
    }
    /// All the text of the messages, joined.
    pub fn text(&self) -> String {
        self.messages().iter().filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n")
    }
    /// The `at://` URIs listed after `uri: ` in the request (the batch's notifications).
    pub fn batch_uris(&self) -> Vec<String> {
        self.text().lines().filter_map(|l| l.trim().strip_prefix("- uri: ").map(|u| u.trim().to_owned())).collect()
    }
    /// The first crystal id the request's `[YOUR SKILLS]` block lists (`- crystal N: …`).
    pub fn listed_crystal(&self) -> Option<u64> {
        self.text().lines().find_map(|l| {
            l.trim().strip_prefix("- crystal ").and_then(|r| r.split(':').next()).and_then(|id| id.parse().ok())
        })
    }
    /// The tool results sent back, in order.
    pub fn tool_results(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect()
    }
}

type Script = dyn Fn(&Request) -> Answer + Send + Sync;

struct Inner {
    script: Box<Script>,
    queue: Mutex<VecDeque<Answer>>,
    requests: Mutex<Vec<Request>>,
}

/// The running server; stops when dropped.
pub struct ScriptedLlm {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedLlm").field("addr", &self.addr).finish()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ScriptedLlm {
    /// Starts on a free loopback port. Queued answers (see [`ScriptedLlm::push`]) go first;
    /// when the queue is empty, `script` decides.
    pub async fn start(script: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1:0", script).await
    }

    /// [`ScriptedLlm::start`] on a given address (a model that comes up where the agent was
    /// told it would be).
    pub async fn start_on(
        addr: &str,
        script: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let inner = Arc::new(Inner {
            script: Box::new(script),
            queue: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(complete))
            .with_state(Arc::clone(&inner));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, inner, task })
    }

    /// The base URL to configure (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues answers given before the script is asked.
    pub fn push(&self, answers: impl IntoIterator<Item = Answer>) {
        lock(&self.inner.queue).extend(answers);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.inner.requests).clone()
    }
}

async fn complete(State(inner): State<Arc<Inner>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let request =
        Request { body, authorization: headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned) };
    let answer = lock(&inner.queue).pop_front().unwrap_or_else(|| (inner.script)(&request));
    lock(&inner.requests).push(request.clone());
    respond(answer, &request).await
}

fn respond(
    answer: Answer,
    request: &Request,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send + '_>> {
    Box::pin(async move {
        let model = request.body["model"].as_str().unwrap_or("scripted").to_owned();
        match answer {
            Answer::Slow(delay, inner) => {
                tokio::time::sleep(delay).await;
                respond(*inner, request).await
            }
            Answer::Text(text) => {
                Json(completion(&model, json!({"role": "assistant", "content": text}), "stop")).into_response()
            }
            Answer::Tools(calls) => {
                let raw = calls.into_iter().map(|(name, args)| (name, args.to_string())).collect();
                respond(Answer::RawTools(raw), request).await
            }
            Answer::RawTools(calls) => {
                let calls: Vec<Value> = calls
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        json!({"id": format!("call_{i}"), "type": "function",
                               "function": {"name": name, "arguments": args}})
                    })
                    .collect();
                Json(completion(
                    &model,
                    json!({"role": "assistant", "content": null, "tool_calls": calls}),
                    "tool_calls",
                ))
                .into_response()
            }
            Answer::Status(status, message) => {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, Json(json!({"error": {"message": message, "type": "server_error"}}))).into_response()
            }
            Answer::TooMany(after) => {
                let mut response = (
                    StatusCode::TOO_MANY_REQUESTS,
                    Json(json!({"error": {"message": "rate limited", "type": "rate_limit"}})),
                )
                    .into_response();
                if let Ok(v) = HeaderValue::from_str(&after.to_string()) {
                    response.headers_mut().insert("retry-after", v);
                }
                response
            }
            Answer::Garbage(text) => (StatusCode::OK, text).into_response(),
        }
    })
}

fn completion(model: &str, message: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
    })
}
