//! `resources/subscribe` and `resources/unsubscribe`, the subscriptions of the protocol
//! versions with an `initialize` handshake (before 2026-07-28, which the SDKs' sessions still
//! negotiate): a session's subscribed skills (at most [`MAX_WATCHED`]) are read every
//! [`POLL`] by one watcher per session, which sends `notifications/resources/updated` when
//! one changes and `notifications/resources/list_changed` when the node's skills change in
//! number, and ends when the session does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::Peer;
use rmcp::RoleServer;
use rmcp::model::{ErrorData, ResourceUpdatedNotificationParam, SubscriptionFilter};
use serde_json::Value;

use super::Backend;
use super::resources::{MAX_WATCHED, POLL, Seen, look, skill_of};

/// One session's subscriptions.
#[derive(Debug, Default)]
pub struct Watching {
    /// Each subscribed skill's URI with what its listing was when last read.
    uris: BTreeMap<String, Value>,
    /// The node's skill count when last read.
    skills: Option<u64>,
    running: bool,
}

/// Shared by the clones of one session's server.
pub type Shared = Arc<Mutex<Watching>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Watching> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Subscribes the session to `uri`, reading its listing now (a change after this answer is
/// one), and starts the session's watcher if none runs.
pub async fn subscribe(
    shared: &Shared,
    backend: &Backend,
    peer: Peer<RoleServer>,
    uri: String,
) -> Result<(), ErrorData> {
    if skill_of(&uri).is_none() {
        return Err(ErrorData::invalid_params(
            format!("{uri:?} is not a skill's URI (druse://skill/<content id>)"),
            None,
        ));
    }
    {
        let watching = lock(shared);
        if !watching.uris.contains_key(&uri) && watching.uris.len() >= MAX_WATCHED {
            return Err(ErrorData::invalid_params(
                format!("this session watches {MAX_WATCHED} skills already; unsubscribe from one first"),
                None,
            ));
        }
    }
    let mut first = SubscriptionFilter::default();
    first.resources_list_changed = Some(true);
    first.resource_subscriptions = Some(vec![uri.clone()]);
    let seen = look(backend, &first).await;
    let mut watching = lock(shared);
    if watching.uris.len() >= MAX_WATCHED && !watching.uris.contains_key(&uri) {
        return Err(ErrorData::invalid_params(format!("this session watches {MAX_WATCHED} skills already"), None));
    }
    watching.uris.insert(uri.clone(), seen.watched.get(&uri).cloned().unwrap_or(Value::Null));
    if watching.skills.is_none() {
        watching.skills = seen.skills;
    }
    if !watching.running {
        watching.running = true;
        tokio::spawn(watch(shared.clone(), backend.clone(), peer));
    }
    Ok(())
}

/// Stops watching `uri`.
pub fn unsubscribe(shared: &Shared, uri: &str) {
    lock(shared).uris.remove(uri);
}

fn filter(shared: &Shared) -> SubscriptionFilter {
    let mut filter = SubscriptionFilter::default();
    filter.resources_list_changed = Some(true);
    filter.resource_subscriptions = Some(lock(shared).uris.keys().cloned().collect());
    filter
}

/// What changed since the last read, written down as read now: whether the list did, and the
/// subscribed skills that did.
fn changes(shared: &Shared, now: Seen) -> (bool, Vec<String>) {
    let mut watching = lock(shared);
    let list = now.skills.is_some() && watching.skills.is_some() && now.skills != watching.skills;
    if now.skills.is_some() {
        watching.skills = now.skills;
    }
    let mut updated = Vec::new();
    for (uri, print) in now.watched {
        // A skill unsubscribed meanwhile is not watched any more.
        if let Some(was) = watching.uris.get_mut(&uri)
            && *was != print
        {
            *was = print;
            updated.push(uri);
        }
    }
    (list, updated)
}

/// The session's watcher: until its client goes away.
async fn watch(shared: Shared, backend: Backend, peer: Peer<RoleServer>) {
    'session: loop {
        tokio::time::sleep(POLL).await;
        if peer.is_transport_closed() {
            break;
        }
        let now = look(&backend, &filter(&shared)).await;
        let (list, updated) = changes(&shared, now);
        if list && peer.notify_resource_list_changed().await.is_err() {
            break;
        }
        for uri in updated {
            if peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.is_err() {
                break 'session;
            }
        }
    }
    lock(&shared).running = false;
}
