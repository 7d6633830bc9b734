//! The agent's routes: `GET /v1/agent` and, behind the node's token, its controls (run,
//! pause, resume, chat) and its journal. With the agent off the status says so and the rest is
//! refused. The daemon composes them with the core API; the agent crate knows no HTTP.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query};
use druse_agent::{AgentStatus, Handle, RunBody, RunReport, RunsQuery, chat, journal};
use druse_protocol::api::Code;

use super::Error;

/// The agent's routes, its controls behind `token`.
pub fn routes(agent: Option<Handle>, token: &str) -> axum::Router {
    let controls = super::require_token(
        axum::Router::new()
            .route("/v1/agent/run", axum::routing::post(run_now))
            .route("/v1/agent/pause", axum::routing::post(pause))
            .route("/v1/agent/resume", axum::routing::post(resume))
            .route("/v1/agent/chat", axum::routing::post(chat_now))
            .route("/v1/agent/runs", axum::routing::get(runs))
            .route("/v1/agent/runs/{id}", axum::routing::get(one_run)),
        token,
    );
    axum::Router::new().route("/v1/agent", axum::routing::get(status)).merge(controls).with_state(agent)
}

/// `GET /v1/agent`.
async fn status(State(agent): State<Option<Handle>>) -> Json<AgentStatus> {
    Json(agent.as_ref().map(Handle::status).unwrap_or_default())
}

/// `POST /v1/agent/pause`: the agent stops reading and answering until resumed; answers the
/// status.
async fn pause(State(agent): State<Option<Handle>>) -> Result<Json<AgentStatus>, Error> {
    paused(agent, true)
}

/// `POST /v1/agent/resume`.
async fn resume(State(agent): State<Option<Handle>>) -> Result<Json<AgentStatus>, Error> {
    paused(agent, false)
}

fn paused(agent: Option<Handle>, yes: bool) -> Result<Json<AgentStatus>, Error> {
    let agent = enabled(agent)?;
    tracing::info!(paused = yes, "an operator {} the agent", if yes { "paused" } else { "resumed" });
    Ok(Json(agent.pause(yes)))
}

/// The agent, or the error that says it is off.
fn enabled(agent: Option<Handle>) -> Result<Handle, Error> {
    agent.ok_or_else(|| Error::new(Code::AgentDisabled, "the agent is off: set [agent] enabled = true"))
}

fn unavailable(detail: impl std::fmt::Display) -> Error {
    Error::new(Code::AgentUnavailable, detail.to_string())
}

/// `GET /v1/agent/runs?limit=&entry=`: the newest runs of the model, newest first.
async fn runs(
    State(agent): State<Option<Handle>>,
    query: Result<Query<RunsQuery>, QueryRejection>,
) -> Result<Json<Vec<journal::RunSummary>>, Error> {
    let Query(query) = query
        .map_err(|e| Error::bad_request(format!("{}: the parameters are limit (1 to 500) and entry", e.body_text())))?;
    let limit = query.limit.unwrap_or(20);
    if !(1..=500).contains(&limit) {
        return Err(Error::bad_request("limit: from 1 to 500"));
    }
    let journal = enabled(agent)?.journal().map_err(unavailable)?;
    let entry = query.entry;
    let runs = crate::task::blocking(move || journal.recent(limit, entry.as_deref())).await.map_err(unavailable)?;
    Ok(Json(runs))
}

/// `GET /v1/agent/runs/{id}`: one run in full.
async fn one_run(
    State(agent): State<Option<Handle>>,
    Path(id): Path<String>,
) -> Result<Json<journal::RunRecord>, Error> {
    let id: u64 = id.parse().map_err(|_| Error::bad_request(format!("id: {id:?} is not a run number")))?;
    let journal = enabled(agent)?.journal().map_err(unavailable)?;
    crate::task::blocking(move || journal.get(id))
        .await
        .map_err(unavailable)?
        .map(Json)
        .ok_or_else(|| Error::not_found(format!("no run {id} in the journal (it keeps the newest agent.run_log_keep)")))
}

/// `POST /v1/agent/chat {"message": …, "history": [{"role": "user" | "assistant", "content": …}]}`:
/// one turn of a local conversation with the agent, without Bluesky.
async fn chat_now(
    State(agent): State<Option<Handle>>,
    body: Result<Json<chat::ChatBody>, JsonRejection>,
) -> Result<Json<chat::ChatAnswer>, Error> {
    let Json(body) = body.map_err(|e| {
        Error::bad_request(format!(
            "{}: send {{\"message\": \"…\", \"history\": [{{\"role\": \"user\" | \"assistant\", \"content\": \"…\"}}]}}",
            e.body_text()
        ))
    })?;
    body.check().map_err(Error::bad_request)?;
    enabled(agent)?.chat(body).await.map(Json).map_err(unavailable)
}

/// `POST /v1/agent/run {"entry": "musing" | "reflection" | "review" | "notifications"}`: runs
/// that entry point now, in the agent's loop and with its rules (a musing still posts at most
/// once per session, a reflection once per day), and answers what it did.
async fn run_now(
    State(agent): State<Option<Handle>>,
    body: Result<Json<RunBody>, JsonRejection>,
) -> Result<Json<RunReport>, Error> {
    let Json(body) = body.map_err(|e| {
        Error::bad_request(format!(
            "{}: send {{\"entry\": \"musing\" | \"reflection\" | \"review\" | \"notifications\"}}",
            e.body_text()
        ))
    })?;
    enabled(agent)?.run(body.entry).await.map(Json).map_err(unavailable)
}
