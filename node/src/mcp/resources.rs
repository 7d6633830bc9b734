//! The swarm's skills as MCP resources: `resources/list` (the skills this node holds, newest
//! first, [`PAGE`] a page, through at most the newest 1,000), `resources/read` of
//! `druse://skill/<content id>` (its `SKILL.md` and files, the folder the node exports), and
//! `subscriptions/listen` (protocol 2026-07-28): `notifications/resources/updated` when a
//! subscribed skill's listing changes (a new version, its price, an endorsement, reports) and
//! `notifications/resources/list_changed` when the node's skills change in number.
//!
//! Like the tools, everything goes through the node's HTTP API ([`Backend`]), so `/mcp` and
//! `druse-node mcp` behave alike: a listener reads the listings it watches every [`POLL`] and
//! tells its client what changed. Bounded: [`MAX_LISTENERS`] open listens per server, each
//! watching at most [`MAX_WATCHED`] skills; notifications are sent one at a time, each awaited.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use druse_protocol::ContentId;
use rmcp::model::{
    ErrorData, ListResourcesResult, NotificationNoParam, ReadResourceResult, ResourceUpdatedNotification,
    ResourceUpdatedNotificationParam, ServerNotification, SubscriptionFilter,
};
use rmcp::service::SubscriptionContext;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::Backend;
use super::tools::Request;

/// Resources in one page of `resources/list`.
pub const PAGE: usize = 50;
/// The newest listings `resources/list` pages through.
const LISTED: usize = 1000;
/// Open `subscriptions/listen` streams one server serves at once.
pub const MAX_LISTENERS: usize = 8;
/// Skills one listen watches.
pub const MAX_WATCHED: usize = 32;
/// How often a listener reads what it watches.
pub const POLL: Duration = Duration::from_secs(1);
/// The scheme and path a skill's URI starts with.
const PREFIX: &str = "druse://skill/";

/// The URI of skill `id`.
pub fn uri(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// The skill a URI names: `druse://skill/<content id>`.
pub fn skill_of(uri: &str) -> Option<ContentId> {
    uri.strip_prefix(PREFIX)?.parse().ok()
}

/// The bound on open listens, shared by every server one `/mcp` route makes.
#[derive(Debug, Clone)]
pub struct Listeners(Arc<Semaphore>);

impl Default for Listeners {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(MAX_LISTENERS)))
    }
}

fn api_error(error: super::backend::Error) -> ErrorData {
    match error {
        super::backend::Error::Api { status: 404, detail, .. } => ErrorData::resource_not_found(detail, None),
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

/// One line a model reads to choose a skill: the price, the publisher's reputation, the
/// endorsement and the evidence.
pub fn describe(listing: &Value) -> String {
    let endorsed = match (listing["is_verified"].as_bool(), listing["verified_by"].as_str()) {
        (Some(true), Some(by)) => format!("endorsed by management key {by}"),
        _ => "not endorsed".to_owned(),
    };
    format!(
        "{}. Price {} micro-USDC as this node computes it (asking {}); publisher {} with market reputation {}; \
         {endorsed}; {} executions reported{}.",
        listing["listing"]["name"].as_str().unwrap_or(""),
        listing["computed_price"]["micros"],
        listing["asking_price"],
        listing["author"].as_str().unwrap_or(""),
        listing["computed_price"]["reputation"],
        listing["stats"]["executions"],
        if listing["deprecated"] == true { "; a newer version exists" } else { "" },
    )
}

/// `resources/list`: a page of skills from `cursor` (an offset this server gave).
pub async fn list(backend: &Backend, cursor: Option<&str>) -> Result<ListResourcesResult, ErrorData> {
    let offset =
        match cursor {
            None => 0,
            Some(cursor) => cursor.parse::<usize>().ok().filter(|at| *at < LISTED).ok_or_else(|| {
                ErrorData::invalid_params(format!("cursor {cursor:?} is not one this server gave"), None)
            })?,
        };
    let want = (offset + PAGE + 1).min(LISTED);
    let listings = backend.call(&Request::Get(format!("/v1/skills?limit={want}"))).await.map_err(api_error)?;
    let listings = listings.as_array().cloned().unwrap_or_default();
    let more = listings.len() > offset + PAGE;
    let resources: Vec<Value> = listings
        .iter()
        .skip(offset)
        .take(PAGE)
        .map(|listing| {
            let id = listing["id"].as_str().unwrap_or("");
            json!({
                "uri": uri(id),
                "name": listing["listing"]["skill_id"],
                "title": listing["listing"]["name"],
                "description": describe(listing),
                "mimeType": "text/markdown",
            })
        })
        .collect();
    let mut page = json!({ "resources": resources });
    if more {
        page["nextCursor"] = json!((offset + PAGE).to_string());
    }
    serde_json::from_value(page).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// `resources/read`: the skill's folder, `SKILL.md` first (at the skill's own URI), each
/// other file at `druse://skill/<id>/<path>`; the listing's price, reputation and
/// endorsement in the contents' `_meta`.
pub async fn read(backend: &Backend, resource: &str) -> Result<ReadResourceResult, ErrorData> {
    let id = skill_of(resource).ok_or_else(|| {
        ErrorData::invalid_params(format!("{resource:?} is not a skill's URI (druse://skill/<content id>)"), None)
    })?;
    let folder = backend.call(&Request::Get(format!("/v1/skills/{id}/folder"))).await.map_err(api_error)?;
    let listing = backend.call(&Request::Get(format!("/v1/skills/{id}"))).await.map_err(api_error)?;
    let meta = json!({
        "druse/description": describe(&listing),
        "druse/computed_price": listing["computed_price"]["micros"],
        "druse/asking_price": listing["asking_price"],
        "druse/publisher": listing["author"],
        "druse/reputation": listing["computed_price"]["reputation"],
        "druse/is_verified": listing["is_verified"],
        "druse/verified_by": listing["verified_by"],
        "druse/digest": folder["digest"],
        "druse/findings": folder["findings"],
    });
    let contents: Vec<Value> = folder["files"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|file| {
            let path = file["path"].as_str().unwrap_or("");
            let at = if path == druse_protocol::skill_folder::SKILL_MD {
                uri(&id.to_string())
            } else {
                format!("{}/{path}", uri(&id.to_string()))
            };
            let mime = if path.ends_with(".md") { "text/markdown" } else { "text/plain" };
            json!({ "uri": at, "mimeType": mime, "text": file["text"], "_meta": meta })
        })
        .collect();
    serde_json::from_value(json!({ "contents": contents })).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// What a listen accepts of what its client asked: the list changes, and the skills' URIs
/// (the first [`MAX_WATCHED`] that name a skill).
pub fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    let mut accepted = SubscriptionFilter::default();
    accepted.resources_list_changed = requested.resources_list_changed;
    accepted.resource_subscriptions = requested
        .resource_subscriptions
        .as_ref()
        .map(|uris| uris.iter().filter(|u| skill_of(u).is_some()).take(MAX_WATCHED).cloned().collect());
    accepted
}

/// What a watched listing is, as far as a subscriber cares: a change in any of it is an update.
fn fingerprint(listing: &Value) -> Value {
    json!([
        listing["computed_price"]["micros"],
        listing["asking_price"],
        listing["is_verified"],
        listing["verified_by"],
        listing["endorsement"],
        listing["deprecated"],
        listing["deprecated_by"],
        listing["stats"],
        listing["adopted"],
    ])
}

/// What a watcher compares from one poll to the next: the node's skill count, and each
/// watched skill's URI with its listing's [`fingerprint`].
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Seen {
    pub(crate) skills: Option<u64>,
    pub(crate) watched: BTreeMap<String, Value>,
}

impl Seen {
    /// Takes in what a later [`look`] saw, and answers what changed: whether the number of
    /// skills did, and the URIs watched here whose listing did (a URI no longer watched here
    /// is left out). A figure the look could not read stays as it was.
    pub(crate) fn absorb(&mut self, now: Seen) -> (bool, Vec<String>) {
        let list = now.skills.is_some() && self.skills.is_some() && now.skills != self.skills;
        if now.skills.is_some() {
            self.skills = now.skills;
        }
        let mut updated = Vec::new();
        for (uri, print) in now.watched {
            if let Some(was) = self.watched.get_mut(&uri)
                && *was != print
            {
                *was = print;
                updated.push(uri);
            }
        }
        (list, updated)
    }
}

/// What `filter` watches, as the API shows it now.
pub(crate) async fn look(backend: &Backend, filter: &SubscriptionFilter) -> Seen {
    let mut seen = Seen::default();
    if filter.resources_list_changed == Some(true)
        && let Ok(status) = backend.call(&Request::Get("/v1/status".into())).await
    {
        seen.skills = status["skills"].as_u64();
    }
    for watched in filter.resource_subscriptions.iter().flatten() {
        let Some(id) = skill_of(watched) else { continue };
        let print = match backend.call(&Request::Get(format!("/v1/skills/{id}"))).await {
            Ok(listing) => fingerprint(&listing),
            Err(_) => Value::Null,
        };
        seen.watched.insert(watched.clone(), print);
    }
    seen
}

/// Serves one listen until its client ends it: reads what it watches every [`POLL`] and sends
/// what changed. Refused when [`MAX_LISTENERS`] listens are open.
pub async fn listen(backend: &Backend, listeners: &Listeners, context: SubscriptionContext) -> Result<(), ErrorData> {
    let Ok(_permit) = listeners.0.clone().try_acquire_owned() else {
        return Err(ErrorData::internal_error(
            format!("{MAX_LISTENERS} subscriptions are open on this server; close one first"),
            None,
        ));
    };
    let filter = context.accepted().clone();
    let mut before = look(backend, &filter).await;
    loop {
        tokio::select! {
            () = context.cancelled() => return Ok(()),
            () = tokio::time::sleep(POLL) => {}
        }
        let (list, updated) = before.absorb(look(backend, &filter).await);
        if list {
            let changed = ServerNotification::ResourceListChangedNotification(NotificationNoParam::default());
            if context.sink().send(changed).await.is_err() {
                return Ok(());
            }
        }
        for watched in updated {
            let update = ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(watched));
            if context.sink().send(ServerNotification::ResourceUpdatedNotification(update)).await.is_err() {
                return Ok(());
            }
        }
    }
}
