//! The management routes: endorse, revoke, weather, bounties, bans and attestations are write
//! routes and need the node's bearer token; the census is a read route, like `/v1/peers`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use druse_node::api::Error;
use druse_node::skill::Published;
use druse_node::skill::folder::Located;
use druse_protocol::api::Code;
use druse_protocol::body::{Bounty, EndorsementVerdict, TrustLevel};
use druse_protocol::now_ms;
use druse_protocol::{ContentId, PublicKey};
use serde::{Deserialize, Serialize};

use crate::Management;

impl From<crate::Error> for Error {
    fn from(error: crate::Error) -> Self {
        match error {
            crate::Error::UnknownSkill(_) => Error::not_found(error.to_string()),
            crate::Error::Invalid(_) | crate::Error::Findings(_) => Error::new(Code::Invalid, error.to_string()),
            crate::Error::Node(e) => (*e).into(),
            crate::Error::Store(e) => Error::internal(e),
            crate::Error::Task(e) => Error::internal(e),
        }
    }
}

/// `POST /v1/endorsements`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndorseRequest {
    pub content_id: ContentId,
    #[serde(default = "endorse")]
    pub verdict: EndorsementVerdict,
    #[serde(default)]
    pub note: String,
    /// Endorse even when the skill scanner finds something high in the skill.
    #[serde(default)]
    pub despite_findings: bool,
}

/// The answer to an endorsement: what was published and what the scanner finds in the skill.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Endorsed {
    #[serde(flatten)]
    pub published: Published,
    pub findings: Vec<Located>,
}

fn endorse() -> EndorsementVerdict {
    EndorsementVerdict::Endorse
}

/// `POST /v1/weather`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeatherRequest {
    pub level: f64,
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    #[serde(default)]
    pub reason: String,
}

/// `POST /v1/bans`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BanRequest {
    /// Public key or PeerId.
    pub peer: String,
    #[serde(default)]
    pub reason: String,
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
}

/// `POST /v1/attestations`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestRequest {
    /// Public key or PeerId.
    pub peer: String,
    pub level: TrustLevel,
    #[serde(default)]
    pub reason: String,
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
}

/// `POST /v1/bounties`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BountyRequest {
    pub id: String,
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default = "half")]
    pub priority: f64,
    #[serde(default = "one")]
    pub reward_multiplier: f64,
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
}

fn half() -> f64 {
    0.5
}
fn one() -> f64 {
    1.0
}

fn parse_peer(text: &str) -> Result<PublicKey, Error> {
    text.parse().map_err(|e: druse_protocol::keys::Error| Error::bad_request(e.to_string()))
}

type Answer = Result<(StatusCode, Json<Published>), Error>;

fn published(content_id: ContentId) -> Answer {
    Ok((StatusCode::CREATED, Json(Published { content_id, issued_at: now_ms() })))
}

/// The management routes, behind the node's bearer token.
pub fn router(management: Arc<Management>) -> Router {
    let token = management.node().token().to_owned();
    let routes = Router::new()
        .route("/v1/endorsements", post(endorse_route))
        .route("/v1/weather", post(weather_route))
        .route("/v1/bans", post(ban_route))
        .route("/v1/attestations", post(attest_route))
        .route("/v1/bounties", post(bounty_route));
    let reads = Router::new().route("/v1/census", get(census_route));
    druse_node::api::require_token(routes, &token).merge(reads).with_state(management)
}

async fn census_route(State(m): State<Arc<Management>>) -> Result<Json<crate::census::Census>, Error> {
    Ok(Json(crate::census::take(&m).await?))
}

async fn endorse_route(
    State(m): State<Arc<Management>>,
    request: Result<Json<EndorseRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Endorsed>), Error> {
    let Json(request) = request?;
    let (content_id, findings) =
        m.endorse_reviewed(request.content_id, request.verdict, request.note, request.despite_findings).await?;
    let published = Published { content_id, issued_at: now_ms() };
    Ok((StatusCode::CREATED, Json(Endorsed { published, findings })))
}

async fn weather_route(
    State(m): State<Arc<Management>>,
    request: Result<Json<WeatherRequest>, JsonRejection>,
) -> Answer {
    let Json(request) = request?;
    if !(0.0..=1.0).contains(&request.level) {
        return Err(Error::new(Code::Invalid, "level must be in [0, 1]"));
    }
    published(m.weather(request.level, request.duration, request.reason).await?)
}

async fn ban_route(State(m): State<Arc<Management>>, request: Result<Json<BanRequest>, JsonRejection>) -> Answer {
    let Json(request) = request?;
    published(m.ban(parse_peer(&request.peer)?, request.reason, request.duration).await?)
}

async fn attest_route(State(m): State<Arc<Management>>, request: Result<Json<AttestRequest>, JsonRejection>) -> Answer {
    let Json(request) = request?;
    published(m.attest(parse_peer(&request.peer)?, request.level, request.reason, request.duration).await?)
}

async fn bounty_route(State(m): State<Arc<Management>>, request: Result<Json<BountyRequest>, JsonRejection>) -> Answer {
    let Json(request) = request?;
    let issued_at = now_ms();
    let bounty = Bounty {
        issued_at,
        seq: 0,
        id: request.id,
        description: request.description,
        tags: request.tags,
        priority: request.priority,
        reward_multiplier: request.reward_multiplier,
        expires_at: issued_at.saturating_add(u64::try_from(request.duration.as_millis()).unwrap_or(u64::MAX)),
    };
    published(m.bounty(bounty).await?)
}
