//! What the agent reads from its own account before and beside the turns: the account's
//! history, taken as handled the first time a data directory meets it, and the tagging
//! consents users give, kept on the agent's PDS so a new data directory knows them.

use super::bluesky::Notification;
use super::core::{Agent, id};
use super::prompt::chrono_now;
use druse_protocol::now_ms;

/// Posts of the account read to take its history as handled, at most; and notifications.
const HISTORY_POSTS: usize = 5_000;
const HISTORY_NOTIFICATIONS: usize = 2_000;

impl Agent {
    /// Before the first poll: reads the consents kept on the agent's PDS into the local state,
    /// and, the first time this data directory meets the account, takes the account's history
    /// as handled: every post the account already replied to, and every notification already
    /// read. Unread notifications it never answered are answered once, by the polls.
    pub(crate) async fn adopt_history(&self) -> Result<(), super::bluesky::Error> {
        let records = self.bsky.own_records(super::consent::COLLECTION, super::consent::MAX_RECORDS).await?;
        let consents: Vec<(String, bool)> =
            records.iter().filter_map(|(rkey, value)| super::consent::parse(rkey, value)).collect();
        if !consents.is_empty() {
            let read = consents.len();
            self.write_state("keep the consents read from the PDS", move |s| s.set_consents(&consents)).await;
            tracing::info!(consents = read, "read the tagging consents kept on the agent's PDS");
        }
        let did = self.bsky.did().to_owned();
        if self.state.adopted(&did) {
            return Ok(());
        }
        let posts = self.bsky.own_records("app.bsky.feed.post", HISTORY_POSTS).await?;
        let answered: Vec<String> = posts
            .iter()
            .filter_map(|(_, post)| post.get("reply")?.get("parent")?.get("uri")?.as_str().map(str::to_owned))
            .collect();
        let notes = self.bsky.history(HISTORY_NOTIFICATIONS).await?;
        let read: Vec<String> = notes.iter().filter(|n| n.is_read).map(id).collect();
        let unread = notes.iter().filter(|n| !n.is_read && !answered.contains(&n.uri)).count();
        let (replies, seen) = (answered.len(), read.len());
        let adopted = self
            .write_state("take the account's history as handled", move |s| s.adopt(&did, &answered, &read, now_ms()))
            .await;
        if adopted.is_none() {
            return Err(super::bluesky::Error::Invalid("could not record the account's history".into()));
        }
        tracing::info!(
            replies,
            read = seen,
            unread,
            "first start on this account: its earlier replies and read notifications are taken as handled"
        );
        Ok(())
    }

    /// A user opts in to being tagged ("you may tag me") or out ("stop tagging me"): kept in
    /// the local state and as a record on the agent's PDS, which a new data directory reads.
    pub(crate) async fn consent_from(&self, n: &Notification) {
        let Some(yes) = super::consent::said(&n.text) else { return };
        if self.state.consent(&n.author_did) == Some(yes) {
            return;
        }
        let did = n.author_did.clone();
        self.write_state("store a tagging consent", move |state| state.set_consent(&did, yes)).await;
        let record = super::consent::record(&n.author_did, &n.author_handle, yes, &n.uri, &chrono_now());
        match self.bsky.put_record(super::consent::COLLECTION, &n.author_did, record).await {
            Ok(()) => tracing::info!(author = %n.author_handle, consent = yes, "kept a tagging consent on the PDS"),
            Err(error) => tracing::warn!(%error, "could not keep a tagging consent on the PDS; it is kept locally"),
        }
    }
}
