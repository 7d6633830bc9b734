//! Where the tools' requests go. Both ways end in the HTTP API's own handlers, so a tool
//! answers exactly what the API would (validation, access rules for private memories,
//! errors): `/mcp` calls the node's API router in-process with the node's token; `druse-node
//! mcp` calls a running node's API over HTTP, with the token from its data directory if it
//! has one.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, header};
use serde_json::Value;
use tower::ServiceExt;

use super::tools::Request;
use crate::client::{self, Client};

/// Largest API answer a tool reads in-process, in bytes (a search answers at most 100
/// memories of at most 16 KiB each, with their metadata).
const MAX_ANSWER: usize = 32 * 1024 * 1024;

/// Why a request did not get an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API refused the request: its status, code and sentence.
    #[error("the node answered {status} {code}: {detail}")]
    Api { status: u16, code: String, detail: String },
    /// The request writes and this server has no token to write with.
    #[error("{0}")]
    NoToken(String),
    /// The node could not be reached, or answered something that is not JSON.
    #[error("{0}")]
    Transport(String),
}

/// The node's API, in-process or over HTTP.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The API router of the node that serves `/mcp`, called with the node's token (a caller
    /// of `/mcp` has shown that token).
    InProcess { router: Router, token: Arc<str> },
    /// A running node's API. Without a token, it reads what the API shows without one, and
    /// every write is refused with `missing_token` (where the token was looked for).
    Http { client: Client, token: bool, missing_token: String },
}

impl Backend {
    /// The API `router` of a node, in-process, called with its `token`.
    pub fn in_process(router: Router, token: &str) -> Self {
        Self::InProcess { router, token: token.into() }
    }

    /// The API at `base` (like `http://127.0.0.1:7700`), with `token` if there is one;
    /// `missing_token` says where it was looked for.
    pub fn http(base: &str, token: Option<String>, missing_token: String) -> Self {
        let has_token = token.is_some();
        Self::Http { client: Client::new(base, token), token: has_token, missing_token }
    }

    /// Sends `request` to the API and returns its JSON answer.
    pub async fn call(&self, request: &Request) -> Result<Value, Error> {
        match self {
            Self::InProcess { router, token } => in_process(router.clone(), token, request).await,
            Self::Http { missing_token, token: false, .. } if request.writes() => {
                Err(Error::NoToken(missing_token.clone()))
            }
            Self::Http { client, .. } => {
                let answer = match request {
                    Request::Get(path) => client.get::<Value>(path).await,
                    Request::Post(path, body) => client.post::<_, Value>(path, body).await,
                };
                answer.map_err(|error| match error {
                    client::Error::Api { status, error, detail } => Error::Api { status, code: error, detail },
                    other => Error::Transport(other.to_string()),
                })
            }
        }
    }
}

/// One request through the API's router, as if it came over HTTP with the token.
async fn in_process(router: Router, token: &str, request: &Request) -> Result<Value, Error> {
    let (method, path, body) = match request {
        Request::Get(path) => (Method::GET, path, Body::empty()),
        Request::Post(path, body) => {
            let bytes = serde_json::to_vec(body).map_err(|e| Error::Transport(e.to_string()))?;
            (Method::POST, path, Body::from(bytes))
        }
    };
    let http_request = axum::http::Request::builder()
        .method(method)
        .uri(path.as_str())
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| Error::Transport(format!("building the request for {path}: {e}")))?;
    let response = match router.oneshot(http_request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER)
        .await
        .map_err(|e| Error::Transport(format!("reading the answer to {path}: {e}")))?;
    let answer: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::Transport(format!("the answer to {path} ({status}) is not JSON: {e}")))?;
    if !status.is_success() {
        return Err(Error::Api {
            status: status.as_u16(),
            code: answer["error"].as_str().unwrap_or("unknown").to_owned(),
            detail: answer["detail"].as_str().unwrap_or("").to_owned(),
        });
    }
    Ok(answer)
}
