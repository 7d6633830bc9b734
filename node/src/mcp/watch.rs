//! `resources/subscribe` and `resources/unsubscribe`, the subscriptions of the protocol
//! versions with an `initialize` handshake (before 2026-07-28, which the SDKs' sessions still
//! negotiate): a session's subscribed skills (at most [`MAX_WATCHED`]) are read every
//! [`POLL`] by one watcher per session, which sends `notifications/resources/updated` when
//! one changes and `notifications/resources/list_changed` when the node's skills change in
//! number, and ends when the session does.

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::Peer;
use rmcp::RoleServer;
use rmcp::model::{ErrorData, ResourceUpdatedNotificationParam, SubscriptionFilter};
use serde_json::Value;

use super::Backend;
use super::resources::{MAX_WATCHED, POLL, Seen, look, skill_of};

/// One session's subscriptions: each subscribed skill's URI with what its listing was when
/// last read, and the node's skill count then.
#[derive(Debug, Default)]
pub struct Watching {
    seen: Seen,
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
        if !watching.seen.watched.contains_key(&uri) && watching.seen.watched.len() >= MAX_WATCHED {
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
    if watching.seen.watched.len() >= MAX_WATCHED && !watching.seen.watched.contains_key(&uri) {
        return Err(ErrorData::invalid_params(format!("this session watches {MAX_WATCHED} skills already"), None));
    }
    watching.seen.watched.insert(uri.clone(), seen.watched.get(&uri).cloned().unwrap_or(Value::Null));
    if watching.seen.skills.is_none() {
        watching.seen.skills = seen.skills;
    }
    if !watching.running {
        watching.running = true;
        tokio::spawn(watch(shared.clone(), backend.clone(), peer));
    }
    Ok(())
}

/// Stops watching `uri`.
pub fn unsubscribe(shared: &Shared, uri: &str) {
    lock(shared).seen.watched.remove(uri);
}

fn filter(shared: &Shared) -> SubscriptionFilter {
    let mut filter = SubscriptionFilter::default();
    filter.resources_list_changed = Some(true);
    filter.resource_subscriptions = Some(lock(shared).seen.watched.keys().cloned().collect());
    filter
}

/// The session's watcher: until its client goes away.
async fn watch(shared: Shared, backend: Backend, peer: Peer<RoleServer>) {
    'session: loop {
        tokio::time::sleep(POLL).await;
        if peer.is_transport_closed() {
            break;
        }
        let now = look(&backend, &filter(&shared)).await;
        let (list, updated) = lock(&shared).seen.absorb(now);
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
