//! `resources/subscribe` and `resources/unsubscribe`, the subscriptions of the protocol
//! versions with an `initialize` handshake (before 2026-07-28, which the SDKs' sessions still
//! negotiate): a session's subscribed skills (at most [`MAX_WATCHED`]) are read every
//! [`POLL`] by one watcher per session, which sends `notifications/resources/updated` when
//! one changes and `notifications/resources/list_changed` when the node's skills change in
//! number, and ends when the session does.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::Peer;
use rmcp::RoleServer;
use rmcp::model::{ErrorData, ResourceUpdatedNotificationParam, SubscriptionFilter};

use super::Backend;
use super::resources::{MAX_WATCHED, POLL, Seen, look, skill_of};

/// One session's subscriptions.
#[derive(Debug, Default)]
pub struct Watching {
    uris: BTreeSet<String>,
    running: bool,
}

/// Shared by the clones of one session's server.
pub type Shared = Arc<Mutex<Watching>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Watching> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Subscribes the session to `uri`, starting its watcher if none runs.
pub fn subscribe(shared: &Shared, backend: &Backend, peer: Peer<RoleServer>, uri: String) -> Result<(), ErrorData> {
    if skill_of(&uri).is_none() {
        return Err(ErrorData::invalid_params(
            format!("{uri:?} is not a skill's URI (druse://skill/<content id>)"),
            None,
        ));
    }
    let mut watching = lock(shared);
    if !watching.uris.contains(&uri) && watching.uris.len() >= MAX_WATCHED {
        return Err(ErrorData::invalid_params(
            format!("this session watches {MAX_WATCHED} skills already; unsubscribe from one first"),
            None,
        ));
    }
    watching.uris.insert(uri);
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
    filter.resource_subscriptions = Some(lock(shared).uris.iter().cloned().collect());
    filter
}

/// The session's watcher: until its client goes away.
async fn watch(shared: Shared, backend: Backend, peer: Peer<RoleServer>) {
    let mut before: Seen = look(&backend, &filter(&shared)).await;
    loop {
        tokio::time::sleep(POLL).await;
        if peer.is_transport_closed() {
            break;
        }
        let now = look(&backend, &filter(&shared)).await;
        if now.skills.is_some() && before.skills.is_some() && now.skills != before.skills {
            if peer.notify_resource_list_changed().await.is_err() {
                break;
            }
        }
        let mut gone = false;
        for (uri, print) in &now.watched {
            // A skill subscribed since the last look has nothing to compare with yet.
            if before.watched.get(uri).is_none_or(|was| was == print) {
                continue;
            }
            if peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone())).await.is_err() {
                gone = true;
                break;
            }
        }
        if gone {
            break;
        }
        before = now;
    }
    lock(&shared).running = false;
}
