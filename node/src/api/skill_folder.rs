//! The routes for Agent Skills folders: import one (`POST /v1/skills/import`), export a stored
//! skill as one (`GET /v1/skills/{id}/folder`), and what the scanner finds in a skill
//! (`GET /v1/skills/{id}/findings`), for a reviewer before it endorses; and the skills an MCP
//! client submitted (`skill_publish`), private until the owner approves them
//! (`/v1/skills/pending`, all behind the token).

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use druse_protocol::ContentId;
use druse_protocol::api::Code;
use druse_protocol::body::Body;
use druse_protocol::now_ms;
use druse_protocol::skill_folder::Folder;

use super::{Error, parse_id};
use crate::node::Node;
use crate::skill::folder::{self, Exported, ImportRequest, Imported, Located, Provenance, Refusal};
use crate::skill::pending::{self, Pending, Submission};

/// The folder routes: import behind the token, export and findings open; the daemon merges
/// them with the core API's.
pub fn routes(node: &Node) -> Router {
    let writes = super::require_token(
        Router::new()
            .route("/v1/skills/import", post(import))
            .route("/v1/skills/pending", post(submit).get(pending_list))
            .route("/v1/skills/pending/{id}/approve", post(approve))
            .route("/v1/skills/pending/{id}/discard", post(discard)),
        node.token(),
    );
    Router::new()
        .route("/v1/skills/{id}/folder", get(export))
        .route("/v1/skills/{id}/findings", get(findings))
        .merge(writes)
        .with_state(node.clone())
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        let code = match refusal {
            Refusal::Confidential(_) => Code::Confidential,
            Refusal::Folder(_) | Refusal::Scan(_) => Code::Invalid,
        };
        Self::new(code, refusal.to_string())
    }
}

/// Imports a folder: checks it, scans it, and publishes it as the next version of this node's
/// skill of that name (or answers the latest when its digest is the same).
pub async fn import_folder(node: &Node, request: ImportRequest) -> Result<Imported, Error> {
    let folder = Folder::from_texts(request.files, request.dir_name.as_deref()).map_err(Refusal::from)?;
    let name = folder.frontmatter().name.clone();
    let me = node.key().public();
    let reader = node.clone();
    let skills = crate::task::blocking(move || reader.skills()).await??;
    let latest =
        skills.into_iter().filter(|s| s.author == me && s.listing.skill_id == name).max_by_key(|s| s.listing.version);
    if let Some(latest) = &latest
        && folder::folder_of(&latest.listing).is_ok_and(|f| f.digest() == folder.digest())
        && latest.listing.asking_price == request.asking_price
    {
        return Ok(Imported {
            content_id: latest.id,
            name,
            version: latest.listing.version,
            digest: folder.digest(),
            findings: folder::findings(&latest.listing),
            unchanged: true,
        });
    }
    let version = latest.as_ref().map_or(1, |s| s.listing.version.saturating_add(1));
    let (listing, findings) =
        folder::listing_for(&folder, request.asking_price, version, latest.map(|s| s.id), now_ms())?;
    let content_id = node.publish(&Body::Crystal(listing)).await?;
    Ok(Imported { content_id, name, version, digest: folder.digest(), findings, unchanged: false })
}

/// A stored skill as a folder, with the price this node computes for it.
pub async fn export_folder(node: &Node, id: ContentId) -> Result<Exported, Error> {
    let listing = node.market().listing(id).await?;
    Ok(folder::export(&Provenance { skill: &listing.skill, computed_price: listing.computed_price.micros })?)
}

/// What the scanner finds in a stored skill.
pub async fn skill_findings(node: &Node, id: ContentId) -> Result<Vec<Located>, Error> {
    let reader = node.clone();
    let skill = crate::task::blocking(move || reader.skill(&id)).await??;
    let skill = skill.ok_or_else(|| Error::not_found(format!("this node holds no skill {id}")))?;
    Ok(folder::findings(&skill.listing))
}

async fn import(
    State(node): State<Node>,
    request: Result<Json<ImportRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Imported>), Error> {
    let Json(request) = request?;
    let imported = import_folder(&node, request).await?;
    let status = if imported.unchanged { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(imported)))
}

async fn export(State(node): State<Node>, id: Result<Path<String>, PathRejection>) -> Result<Json<Exported>, Error> {
    let Path(id) = id?;
    Ok(Json(export_folder(&node, parse_id(&id)?).await?))
}

async fn findings(
    State(node): State<Node>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Vec<Located>>, Error> {
    let Path(id) = id?;
    Ok(Json(skill_findings(&node, parse_id(&id)?).await?))
}

impl From<pending::Error> for Error {
    fn from(error: pending::Error) -> Self {
        match error {
            pending::Error::Refused(refusal) => refusal.into(),
            pending::Error::Full => Self::new(Code::Conflict, error.to_string()),
            pending::Error::Store(error) => Self::internal(error),
        }
    }
}

/// A submitted skill as the API answers it: kept private, with the owner's command.
#[derive(Debug, serde::Serialize)]
pub struct Kept {
    #[serde(flatten)]
    pub pending: Pending,
    /// Where it is: `private` until the owner publishes it.
    pub visibility: &'static str,
    /// The command by which the owner publishes it to the swarm.
    pub publish_command: String,
}

impl From<Pending> for Kept {
    fn from(pending: Pending) -> Self {
        let publish_command = pending.publish_command();
        Self { pending, visibility: "private", publish_command }
    }
}

/// Checks, scans and keeps a submitted skill, private until the owner approves it.
pub async fn submit_skill(node: &Node, submission: Submission) -> Result<Kept, Error> {
    let checked = pending::check(submission, now_ms())?;
    let store = node.clone();
    let kept = crate::task::blocking(move || pending::keep(store.store(), checked)).await??;
    Ok(kept.into())
}

/// Takes pending skill `id` out of the record, or says none waits by that id.
async fn take_pending(node: &Node, id: String) -> Result<Pending, Error> {
    let store = node.clone();
    let wanted = id.clone();
    let taken = crate::task::blocking(move || pending::take(store.store(), &wanted)).await??;
    taken.ok_or_else(|| Error::not_found(format!("no skill {id:?} waits for the owner")))
}

/// Publishes pending skill `id` to the swarm as the node's own (an import of its folder).
pub async fn approve_skill(node: &Node, id: String) -> Result<Imported, Error> {
    let taken = take_pending(node, id).await?;
    let request = ImportRequest { dir_name: None, files: taken.files.clone(), asking_price: taken.asking_price };
    match import_folder(node, request).await {
        Ok(imported) => Ok(imported),
        Err(error) => {
            let store = node.clone();
            // Taken back, it waits again.
            crate::task::blocking(move || pending::keep(store.store(), taken)).await??;
            Err(error)
        }
    }
}

async fn submit(
    State(node): State<Node>,
    request: Result<Json<Submission>, JsonRejection>,
) -> Result<(StatusCode, Json<Kept>), Error> {
    let Json(submission) = request?;
    Ok((StatusCode::CREATED, Json(submit_skill(&node, submission).await?)))
}

async fn pending_list(State(node): State<Node>) -> Result<Json<Vec<Kept>>, Error> {
    let all = crate::task::blocking(move || pending::list(node.store())).await??;
    Ok(Json(all.into_iter().map(Kept::from).collect()))
}

async fn approve(
    State(node): State<Node>,
    id: Result<Path<String>, PathRejection>,
) -> Result<(StatusCode, Json<Imported>), Error> {
    let Path(id) = id?;
    Ok((StatusCode::CREATED, Json(approve_skill(&node, id).await?)))
}

async fn discard(State(node): State<Node>, id: Result<Path<String>, PathRejection>) -> Result<Json<Kept>, Error> {
    let Path(id) = id?;
    let taken = take_pending(&node, id).await?;
    Ok(Json(Kept { visibility: "discarded", ..taken.into() }))
}
