//! The node's HTTP API (DESIGN §11): JSON over axum, on 127.0.0.1 by default. Read routes are
//! open; write routes need `Authorization: Bearer <token>` from the data directory. Errors are
//! `{ "error": code, "detail": text }` with the matching status. Request bodies are bounded.

pub mod adopt;
pub mod agent;
pub mod skill_folder;

use std::future::Future;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use druse_protocol::ContentId;
use druse_protocol::api::Code;
use druse_protocol::body::{Body, ReportEvent};
use druse_protocol::validate::Reason;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;

use crate::ingest::Outcome;
use crate::node::{self, Node};
use crate::skill::{PublishSkill, Published};
use druse_memory::governance::{self, Caller};
use druse_memory::{self as memory, crystal::CrystalId};
use druse_protocol::now_ms;

/// An API error: a stable code (shared with every client: [`Code`]), sent with the code's
/// status, and a human sentence.
#[derive(Debug)]
pub struct Error {
    pub code: Code,
    pub detail: String,
}

impl Error {
    /// An error with this code.
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        Self { code, detail: detail.into() }
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(Code::BadRequest, detail)
    }

    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(Code::NotFound, detail)
    }

    /// 500, logged: the node failed, not the request.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "request failed");
        Self::new(Code::Internal, error.to_string())
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(json!({ "error": self.code, "detail": self.detail }))).into_response()
    }
}

impl From<JsonRejection> for Error {
    /// A body that is not what the route takes: 400, whether the JSON is malformed, of the
    /// wrong shape or not declared JSON; 413 when it is over the cap.
    fn from(rejection: JsonRejection) -> Self {
        let code = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE { Code::TooLarge } else { Code::BadRequest };
        Self::new(code, rejection.body_text())
    }
}

impl From<PathRejection> for Error {
    fn from(rejection: PathRejection) -> Self {
        Self::bad_request(rejection.body_text())
    }
}

impl From<node::Error> for Error {
    fn from(error: node::Error) -> Self {
        match error {
            node::Error::Refused(Outcome::Protocol(Reason::RateLimited)) => {
                Self::new(Code::RateLimited, "over the per-peer listing rate; try later")
            }
            node::Error::Refused(Outcome::Protocol(Reason::Duplicate)) => {
                Self::new(Code::Duplicate, "this exact message was already published")
            }
            node::Error::Refused(Outcome::Confidential) => Self::new(Code::Confidential, error.to_string()),
            node::Error::Refused(_) | node::Error::Body(_) => Self::new(Code::Invalid, error.to_string()),
            node::Error::NoSkill(_) => Self::not_found(error.to_string()),
            node::Error::Market(code, detail) => Self::new(code, detail),
            node::Error::PriceAboveMax { .. } | node::Error::OverBudget { .. } => {
                Self::new(Code::Conflict, error.to_string())
            }
            other => Self::internal(other),
        }
    }
}

impl From<crate::task::Failed> for Error {
    fn from(failed: crate::task::Failed) -> Self {
        Self::internal(failed)
    }
}

impl From<governance::Refusal> for Error {
    fn from(refusal: governance::Refusal) -> Self {
        Self::new(Code::NotPublishable, refusal.to_string())
    }
}

/// Parses a content id from a path segment.
pub fn parse_id(text: &str) -> Result<ContentId, Error> {
    text.parse().map_err(|e: druse_protocol::cid::ParseError| Error::bad_request(format!("{text:?}: {e}")))
}

/// Wraps `routes` so each needs the node's bearer token.
pub fn require_token<S: Clone + Send + Sync + 'static>(routes: Router<S>, token: &str) -> Router<S> {
    let expected = format!("Bearer {token}");
    routes.route_layer(middleware::from_fn(move |headers: HeaderMap, request: Request, next: Next| {
        let expected = expected.clone();
        async move {
            let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
                return Error::new(
                    Code::Unauthorized,
                    "write routes need `Authorization: Bearer <token>` (the token is in the data directory's api.token)",
                )
                .into_response();
            }
            next.run(request).await
        }
    }))
}

/// Compares in time that does not depend on where the inputs differ (only on their lengths).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// The node's own routes (status, skills, the market, memory, weather, metrics), writes behind
/// the token. The daemon merges the agent's, the memory page's and MCP's beside them and
/// closes the whole with [`finish`].
pub fn routes(node: Node) -> Router {
    let writes = require_token(
        Router::new()
            .route("/v1/skills", axum::routing::post(publish_skill))
            .route("/v1/skills/{id}/reports", axum::routing::post(report_skill))
            .route("/v1/memories", axum::routing::post(add_memory))
            .route("/v1/memories/batch", axum::routing::post(add_memories))
            .route("/v1/consolidate", axum::routing::post(consolidate)),
        node.token(),
    );
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status))
        .route("/v1/skills", get(list_skills))
        .route("/v1/skills/{id}", get(get_skill))
        .route("/v1/skills/{id}/versions", get(skill_versions))
        .route("/v1/bounties", get(bounties))
        .route("/v1/ledger", get(ledger))
        .route("/v1/crystals/{id}", get(get_crystal))
        .route("/v1/crystals/{id}/history", get(crystal_history))
        .route("/v1/memories", get(search_memories))
        .route("/v1/peers", get(peers))
        .route("/v1/weather", get(weather))
        .merge(writes)
        .with_state(node)
}

/// Closes an API: 404 (in the API's error form) for a route it does not have, and every route
/// under the `max_body` cap (`api.max_body_bytes`).
pub fn finish(routes: Router, max_body: usize) -> Router {
    routes
        .fallback(|| async { Error::not_found("no such route") })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn(move |request: Request, next: Next| refuse_declared_over(max_body, request, next)))
}

/// Answers 413 to a request that declares a body over `max` bytes, before any route reads it;
/// a body that does not declare its length is cut at `max` by the extractors
/// (`DefaultBodyLimit`).
async fn refuse_declared_over(max: usize, request: Request, next: Next) -> Response {
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Error::new(Code::TooLarge, format!("the body is over the {max}-byte cap (api.max_body_bytes)"))
            .into_response();
    }
    next.run(request).await
}

/// The metrics listener's routes: `/metrics` and `/healthz` only.
pub fn metrics_router(node: Node) -> Router {
    Router::new().route("/metrics", get(metrics)).route("/healthz", get(healthz)).with_state(node)
}

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn metrics(State(node): State<Node>) -> Response {
    // Crystals are counted as the scrape happens, not only after a consolidation pass.
    if let Ok(counts) = node.memory().counts().await {
        node.metrics().set_crystals(&counts);
    }
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], node.metrics().render()).into_response()
}

async fn status(State(node): State<Node>) -> Json<node::NodeStatus> {
    Json(node.status().await)
}

async fn peers(State(node): State<Node>) -> Json<Vec<node::PeerView>> {
    Json(node.peers().await)
}

async fn weather(State(node): State<Node>) -> Json<node::WeatherView> {
    Json(node.weather())
}

/// `?limit=` for list routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    #[serde(default = "hundred")]
    pub limit: usize,
}

fn hundred() -> usize {
    100
}

/// The most a list route returns.
const MAX_LIMIT: usize = 1000;

fn limit(query: Result<Query<Limit>, QueryRejection>) -> Result<usize, Error> {
    let Query(Limit { limit }) = query.map_err(|e| Error::bad_request(e.body_text()))?;
    Ok(limit.clamp(1, MAX_LIMIT))
}

/// `GET /v1/skills?limit=`: the market as this node sees it, newest first.
async fn list_skills(
    State(node): State<Node>,
    query: Result<Query<Limit>, QueryRejection>,
) -> Result<Json<Vec<crate::market::Listing>>, Error> {
    Ok(Json(node.market().listings(limit(query)?).await?))
}

async fn get_skill(
    State(node): State<Node>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<crate::market::Listing>, Error> {
    let Path(id) = id?;
    Ok(Json(node.market().listing(parse_id(&id)?).await?))
}

/// `GET /v1/skills/{id}/versions`: `id` is a content id of any version, or a stable skill id.
async fn skill_versions(
    State(node): State<Node>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Vec<crate::market::Listing>>, Error> {
    let Path(id) = id?;
    Ok(Json(node.market().versions(&id).await?))
}

/// What a report says: an execution (`success`, optional `reward` in [-1, 1]) or a bounty
/// claim (`claim`: the bounty id).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    #[serde(default)]
    pub success: Option<bool>,
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub claim: Option<String>,
}

impl ReportRequest {
    /// The report event, or why the request is not one.
    pub fn event(&self) -> Result<ReportEvent, Error> {
        match (self.success, &self.claim) {
            (Some(success), None) => {
                let reward = self.reward.unwrap_or(if success { 1.0 } else { 0.0 });
                if !(reward.is_finite() && (-1.0..=1.0).contains(&reward)) {
                    return Err(Error::bad_request(format!("reward {reward} is not in [-1, 1]")));
                }
                Ok(ReportEvent::Execution { success, reward })
            }
            (None, Some(bounty)) if self.reward.is_none() => {
                if bounty.trim().is_empty() {
                    return Err(Error::bad_request("claim needs a bounty id"));
                }
                Ok(ReportEvent::Claim { bounty_id: bounty.clone() })
            }
            _ => Err(Error::bad_request(
                "a report is either an execution ({\"success\": bool, \"reward\": -1..1}) or a claim ({\"claim\": bounty id})",
            )),
        }
    }
}

/// `POST /v1/skills/{id}/reports`.
async fn report_skill(
    State(node): State<Node>,
    id: Result<Path<String>, PathRejection>,
    request: Result<Json<ReportRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Published>), Error> {
    let Path(id) = id?;
    let id = parse_id(&id)?;
    let Json(request) = request?;
    let event = request.event()?;
    let now = now_ms();
    let content_id = node.market().report(id, event).await?;
    Ok((StatusCode::CREATED, Json(Published { content_id, issued_at: now })))
}

async fn bounties(State(node): State<Node>) -> Result<Json<Vec<crate::market::BountyRecord>>, Error> {
    Ok(Json(crate::task::blocking(move || node.market().bounties()).await??))
}

/// `GET /v1/ledger?limit=`.
async fn ledger(
    State(node): State<Node>,
    query: Result<Query<Limit>, QueryRejection>,
) -> Result<Json<crate::market::desk::LedgerView>, Error> {
    let limit = limit(query)?;
    Ok(Json(crate::task::blocking(move || node.market().ledger(limit)).await??))
}

/// Who an API read comes from: the node's own agent when it carries the bearer token.
pub(crate) fn caller(node: &Node, headers: &HeaderMap) -> Caller {
    let expected = format!("Bearer {}", node.token());
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
    if constant_time_eq(given.as_bytes(), expected.as_bytes()) { Caller::LocalAgent } else { Caller::Anyone }
}

impl From<memory::engine::Error> for Error {
    fn from(error: memory::engine::Error) -> Self {
        match error {
            memory::engine::Error::Invalid(_) => Self::new(Code::Invalid, error.to_string()),
            memory::engine::Error::BadQuery(_) => Self::bad_request(error.to_string()),
            memory::engine::Error::Private(_) => Self::new(Code::Unauthorized, error.to_string()),
            memory::engine::Error::NotFound(_) => Self::not_found(error.to_string()),
            other => Self::internal(other),
        }
    }
}

/// A memory crystal (by number) or a skill (by content id).
async fn get_crystal(
    State(node): State<Node>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, Error> {
    let Path(id) = id?;
    if let Ok(number) = id.parse::<CrystalId>() {
        let crystal = node.memory().get(number).await.filter(|c| c.can_access(caller(&node, &headers), now_ms()));
        return crystal.map(|c| Json(c).into_response()).ok_or_else(|| Error::not_found(format!("no crystal {id}")));
    }
    let id = parse_id(&id)?;
    let skill = crate::task::blocking(move || node.skill(&id)).await??;
    skill.map(|s| Json(s).into_response()).ok_or_else(|| Error::not_found(format!("no crystal {id}")))
}

async fn crystal_history(
    State(node): State<Node>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<memory::engine::History>, Error> {
    let Path(id) = id?;
    let id: CrystalId = id.parse().map_err(|_| Error::bad_request(format!("{id:?} is not a memory crystal id")))?;
    let who = caller(&node, &headers);
    let history = node.memory().history(id).await?;
    if !history.chain.iter().all(|c| c.can_access(who, now_ms())) {
        return Err(Error::not_found(format!("no crystal {id}")));
    }
    Ok(Json(history))
}

async fn add_memory(
    State(node): State<Node>,
    request: Result<Json<memory::engine::NewMemory>, JsonRejection>,
) -> Result<(StatusCode, Json<memory::engine::Added>), Error> {
    let Json(request) = request?;
    let added = node.memory().add(request, "api", now_ms()).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

/// Most memories one batch stores.
pub const MAX_MEMORY_BATCH: usize = 1000;

/// `POST /v1/memories/batch`: `{"memories": [...]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryBatch {
    pub memories: Vec<memory::engine::NewMemory>,
}

/// `POST /v1/memories/batch`: up to [`MAX_MEMORY_BATCH`] memories stored in order, each as
/// `POST /v1/memories` would store it, embedded in batches and made durable once. Nothing is
/// stored unless every memory is valid.
async fn add_memories(
    State(node): State<Node>,
    request: Result<Json<MemoryBatch>, JsonRejection>,
) -> Result<(StatusCode, Json<Vec<memory::engine::Added>>), Error> {
    let Json(MemoryBatch { memories }) = request?;
    if memories.is_empty() || memories.len() > MAX_MEMORY_BATCH {
        return Err(Error::bad_request(format!(
            "a batch holds 1 to {MAX_MEMORY_BATCH} memories, not {}",
            memories.len()
        )));
    }
    let added = node.memory().add_many(memories, "api", now_ms()).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

/// `GET /v1/memories?q=&k=&namespace=&kind=&semantic_type=&session=&since=&until=`: `q` must
/// not be empty and `k` is 1 to 100 (400 otherwise); without the token, a search that matches
/// only private memories answers 401.
async fn search_memories(
    State(node): State<Node>,
    headers: HeaderMap,
    query: Result<Query<memory::engine::Query>, QueryRejection>,
) -> Result<Json<Vec<memory::engine::Hit>>, Error> {
    let Query(query) = query.map_err(|e| Error::bad_request(e.body_text()))?;
    let who = caller(&node, &headers);
    let started = std::time::Instant::now();
    let hits = node.memory().search(query, who, now_ms()).await?;
    node.metrics().retrieval_seconds.observe(started.elapsed().as_secs_f64());
    Ok(Json(hits))
}

async fn consolidate(State(node): State<Node>) -> Result<Json<memory::consolidation::Report>, Error> {
    Ok(Json(node.consolidate().await?))
}

async fn publish_skill(
    State(node): State<Node>,
    request: Result<Json<PublishSkill>, JsonRejection>,
) -> Result<(StatusCode, Json<Published>), Error> {
    let Json(request) = request?;
    let now = now_ms();
    let listing = request.into_listing(now)?;
    let content_id = node.publish(&Body::Crystal(listing)).await?;
    Ok((StatusCode::CREATED, Json(Published { content_id, issued_at: now })))
}
