//! What an operator sees of a node's memory: `GET /memory`, a self-contained page (no CDN, no
//! external fonts: nodes run offline) that draws the crystals as a 2-D map, and
//! `GET /v1/memory/map`, the JSON it reads: every crystal the caller may see, placed by a PCA
//! of its embedding that the node computes, with the supersession links as edges.
//!
//! Private crystals follow the rule of the API's searches: they are shown only to a caller
//! with the bearer token, and a map that would hold nothing but private crystals answers 401.

use std::time::Instant;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use druse_protocol::UnixMillis;
use druse_protocol::body::SemanticType;
use serde::{Deserialize, Serialize};

use crate::node::Node;
use druse_memory::Memory;
use druse_memory::crystal::{Crystal, CrystalId, Lifecycle, MemoryKind, Origin, Status};
use druse_memory::decay::DecayClass;
use druse_memory::governance::Caller;
use druse_protocol::now_ms;

pub mod pca;

#[cfg(test)]
mod tests;

/// The page, compiled into the binary.
pub const PAGE: &str = include_str!("page/memory.html");

/// Crystals a map holds unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 10_000;

/// The most crystals one map holds: the page stays responsive well past it, and the PCA takes
/// a fraction of a second (see `node/README.md`, "The /memory page").
pub const MAX_LIMIT: usize = 20_000;

/// A crystal's text is cut to this many characters on the map (the full text is one
/// `GET /v1/crystals/{id}` away).
pub const TEXT_CHARS: usize = 200;

/// Why a map cannot be drawn as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("limit is {0}; it must be between 1 and {MAX_LIMIT}")]
    Limit(usize),
    #[error("the memories on this node are private: send `Authorization: Bearer <token>`")]
    Private,
}

/// `GET /v1/memory/map?limit=`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapQuery {
    #[serde(default = "default_limit")]
    pub limit: usize,
}

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

/// One crystal on the map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub id: CrystalId,
    /// Along the first principal component.
    pub x: f32,
    /// Along the second.
    pub y: f32,
    pub namespace: String,
    pub kind: MemoryKind,
    pub semantic_type: SemanticType,
    /// How it came to be: `skill` for the agent's own skills, `peer` for the swarm's.
    pub origin: Origin,
    pub lifecycle: Lifecycle,
    pub status: Status,
    pub importance: f64,
    pub confidence: f64,
    pub decay_class: DecayClass,
    pub created_at: UnixMillis,
    /// Milliseconds since it was stored, when the map was made.
    pub age_ms: u64,
    /// The text, cut to [`TEXT_CHARS`] characters.
    pub text: String,
    /// Whether `text` was cut.
    pub truncated: bool,
}

/// A supersession: `from` (the older row) was replaced by `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub from: CrystalId,
    pub to: CrystalId,
}

/// The map: the points, the supersession edges between them, and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Map {
    pub generated_at: UnixMillis,
    /// Crystals the caller may see.
    pub total: usize,
    /// Whether `total` is over `limit`, so only the newest `limit` are on the map.
    pub truncated: bool,
    pub limit: usize,
    /// The embedding dimension the PCA ran on.
    pub dim: usize,
    /// The share of the variance each axis shows.
    pub explained: [f64; 2],
    /// Power iterations the PCA ran.
    pub iterations: usize,
    /// Crystals left off because they have no embedding of `dim` (stored by another embedder).
    pub unembedded: usize,
    /// How long the map took to make, in milliseconds.
    pub compute_ms: f64,
    pub points: Vec<Point>,
    pub edges: Vec<Edge>,
}

/// Makes the map of what `caller` may see at `now`: the newest `limit` crystals (by id),
/// projected onto the top two principal components of their embeddings. Blocks (it reads
/// every embedding and runs the PCA): async callers use `spawn_blocking`.
pub fn build(memory: &Memory, caller: Caller, limit: usize, now: UnixMillis) -> Result<Map, Error> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Error::Limit(limit));
    }
    let started = Instant::now();
    let mut hidden = false;
    let mut visible = memory.crystals_where(|c| {
        let visible = c.can_access(caller, now);
        hidden |= !visible && c.can_access(Caller::LocalAgent, now);
        visible
    });
    if visible.is_empty() && hidden && caller != Caller::LocalAgent {
        return Err(Error::Private);
    }
    let total = visible.len();
    visible.sort_unstable_by_key(|c| std::cmp::Reverse(c.id));
    visible.truncate(limit);
    visible.reverse();

    let embeddings: Vec<Option<Vec<f32>>> = visible.iter().map(|c| memory.embedding(c.id)).collect();
    let dim = most_common_dim(&embeddings);
    let (crystals, rows): (Vec<&Crystal>, Vec<&[f32]>) = visible
        .iter()
        .zip(&embeddings)
        .filter_map(|(c, e)| e.as_deref().filter(|e| e.len() == dim).map(|e| (c, e)))
        .unzip();
    let unembedded = visible.len() - crystals.len();
    let projection = pca::project(&rows, dim);

    let on_map: std::collections::HashSet<CrystalId> = crystals.iter().map(|c| c.id).collect();
    let edges = crystals
        .iter()
        .filter_map(|c| c.superseded_by.filter(|to| on_map.contains(to)).map(|to| Edge { from: c.id, to }))
        .collect();
    let points = crystals.iter().zip(&projection.points).map(|(c, &[x, y])| point(c, x, y, now)).collect();
    Ok(Map {
        generated_at: now,
        total,
        truncated: total > limit,
        limit,
        dim,
        explained: projection.explained,
        iterations: projection.iterations,
        unembedded,
        compute_ms: started.elapsed().as_secs_f64() * 1000.0,
        points,
        edges,
    })
}

/// The dimension most embeddings have (the smallest among equals); 0 when there are none.
fn most_common_dim(embeddings: &[Option<Vec<f32>>]) -> usize {
    let mut counts = std::collections::BTreeMap::new();
    for e in embeddings.iter().flatten() {
        *counts.entry(e.len()).or_insert(0usize) += 1;
    }
    counts.into_iter().fold((0, 0), |best, (dim, n)| if n > best.1 { (dim, n) } else { best }).0
}

fn point(c: &Crystal, x: f32, y: f32, now: UnixMillis) -> Point {
    let (text, truncated) = cut(&c.text, TEXT_CHARS);
    Point {
        id: c.id,
        x,
        y,
        namespace: c.namespace.as_string(),
        kind: c.kind,
        semantic_type: c.semantic_type,
        origin: c.origin,
        lifecycle: c.lifecycle,
        status: c.status,
        importance: c.importance,
        confidence: c.confidence,
        decay_class: c.decay_class,
        created_at: c.created_at,
        age_ms: now.saturating_sub(c.created_at),
        text,
        truncated,
    }
}

/// `text` cut to `chars` characters, and whether it was.
fn cut(text: &str, chars: usize) -> (String, bool) {
    match text.char_indices().nth(chars) {
        Some((at, _)) => (format!("{}…", &text[..at]), true),
        None => (text.to_owned(), false),
    }
}

/// The page and its data route, for the API's router.
pub fn routes(node: Node) -> Router {
    Router::new().route("/memory", get(page)).route("/v1/memory/map", get(map)).with_state(node)
}

/// `GET /memory`: the page. Its script and styles are inline and it loads nothing else, so
/// the policy allows only inline code and requests to this node.
async fn page() -> Response {
    let policy = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                  connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'";
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(policy)),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        ],
        PAGE,
    )
        .into_response()
}

impl From<Error> for crate::api::Error {
    fn from(error: Error) -> Self {
        match error {
            Error::Limit(_) => Self::bad_request(error.to_string()),
            Error::Private => Self::new(druse_protocol::api::Code::Unauthorized, error.to_string()),
        }
    }
}

/// `GET /v1/memory/map?limit=`: see [`build`]; 400 for a `limit` outside 1..=[`MAX_LIMIT`].
async fn map(
    State(node): State<Node>,
    headers: HeaderMap,
    query: Result<Query<MapQuery>, QueryRejection>,
) -> Result<Json<Map>, crate::api::Error> {
    let Query(MapQuery { limit }) = query.map_err(|e| crate::api::Error::bad_request(e.body_text()))?;
    let who = crate::api::caller(&node, &headers);
    let map = node.memory().read(move |memory| build(memory, who, limit, now_ms())).await??;
    tracing::debug!(points = map.points.len(), compute_ms = map.compute_ms, "memory map");
    Ok(Json(map))
}
