//! Anti-entropy on the node ([`druse_protocol::sync`]): when a peer connects, and now and then
//! with a random connected peer, read its inventory, fetch the signed messages this node lacks
//! and run each through the pipeline; and answer the same questions from peers, out of the
//! envelopes the store keeps.
//!
//! One task owns both sides. Its work arrives on bounded queues (a full queue drops the work:
//! a skipped sync happens again at the next connection or round, a dropped question fails the
//! peer's request), and at most [`MAX_SYNCS`] syncs and [`MAX_ANSWERS`] answers run at once.

use std::collections::HashSet;
use std::time::Duration;

use druse_protocol::net::{self, PeerId};
use druse_protocol::sync::{self, ByteBuf, Key, Request, Response};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::{Node, Question, lock};
use crate::ingest::actor::Command;
use crate::metrics::ResultLabel;
use crate::store::Store;
use druse_protocol::now_ms;

/// Syncs running at once.
pub(super) const MAX_SYNCS: usize = 2;

/// Peers' questions being answered at once; more are refused as busy.
pub(super) const MAX_ANSWERS: usize = 8;

/// How often the node syncs with one connected peer picked at random, besides on connection:
/// what a dropped gossip message or a failed sync missed arrives within this.
const ROUND: Duration = Duration::from_secs(300);

/// What one sync with a peer brought.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// Keys the peer offered.
    pub offered: usize,
    /// Of those, the ones this node lacked and fetched.
    pub fetched: usize,
    /// Of those, the ones the pipeline accepted.
    pub accepted: usize,
}

impl Node {
    /// Asks the sync task to sync with `peer` (dropped, and counted, when its queue is full).
    pub(super) fn request_sync(&self, peer: PeerId) {
        if self.inner.sync.syncs.try_send(peer).is_err() {
            self.inner.metrics.syncs.get_or_create(&ResultLabel { result: "skipped" }).inc();
        }
    }

    /// Hands a peer's question to the sync task; when its queue is full the channel drops
    /// and the peer's request fails (it asks again at its next round).
    pub(super) fn question(&self, question: Question) {
        if self.inner.sync.questions.try_send(question).is_err() {
            tracing::debug!("sync questions queue full; one dropped");
        }
    }

    /// The task that runs syncs and answers questions; ends when the node drops its queues.
    pub(super) async fn sync_loop(self, mut syncs: mpsc::Receiver<PeerId>, mut questions: mpsc::Receiver<Question>) {
        let mut running: JoinSet<(PeerId, Result<Synced, net::Error>)> = JoinSet::new();
        let mut peers_running: HashSet<PeerId> = HashSet::new();
        // Peers that announced news while a sync with them ran: synced again once it ends.
        let mut again: HashSet<PeerId> = HashSet::new();
        let mut answering: JoinSet<()> = JoinSet::new();
        let mut round = tokio::time::interval(ROUND);
        round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        round.tick().await;
        loop {
            tokio::select! {
                Some(done) = running.join_next() => {
                    if let Ok((peer, result)) = done {
                        peers_running.remove(&peer);
                        if again.remove(&peer) {
                            self.request_sync(peer);
                        }
                        if let Ok(synced) = &result
                            && synced.accepted > 0
                        {
                            let node = self.clone();
                            answering.spawn(async move { node.announce(peer).await });
                        }
                        self.note_sync(peer, result);
                    }
                }
                Some(_) = answering.join_next() => {}
                peer = syncs.recv(), if running.len() < MAX_SYNCS => {
                    let Some(peer) = peer else { break };
                    if peers_running.insert(peer) {
                        let node = self.clone();
                        let span = tracing::debug_span!("sync", %peer);
                        running.spawn(async move { (peer, node.sync_with(peer).await) }.instrument(span));
                    }
                }
                question = questions.recv() => {
                    let Some(question) = question else { break };
                    if question.request == Request::Announce {
                        // At most one sync per peer runs, and one more is owed after it.
                        if peers_running.contains(&question.peer) {
                            again.insert(question.peer);
                        } else {
                            self.request_sync(question.peer);
                        }
                        let _ = self.inner.net.answer_sync(question.channel, Response::Noted).await;
                        continue;
                    }
                    if answering.len() >= MAX_ANSWERS {
                        let busy = Response::Refused { reason: "busy".into() };
                        let _ = self.inner.net.answer_sync(question.channel, busy).await;
                        continue;
                    }
                    let node = self.clone();
                    answering.spawn(async move { node.answer(question).await });
                }
                _ = round.tick() => {
                    let connected: Vec<PeerId> = lock(&self.inner.connected).iter().copied().collect();
                    if !connected.is_empty() {
                        // Any spread will do: the round only has to reach every peer in time.
                        self.request_sync(connected[now_ms() as usize % connected.len()]);
                    }
                }
            }
        }
    }

    /// Tells every connected peer but `from` that this node holds news, so each syncs with it.
    async fn announce(&self, from: PeerId) {
        let peers: Vec<PeerId> = lock(&self.inner.connected).iter().copied().filter(|p| *p != from).collect();
        let sends = peers.into_iter().map(|peer| async move {
            if let Err(error) = self.inner.net.sync(peer, Request::Announce).await {
                tracing::debug!(%peer, %error, "announcing news failed");
            }
        });
        futures::future::join_all(sends).await;
    }

    fn note_sync(&self, peer: PeerId, result: Result<Synced, net::Error>) {
        let result = match result {
            Ok(synced) => {
                if synced.fetched > 0 {
                    tracing::info!(%peer, offered = synced.offered, fetched = synced.fetched,
                        accepted = synced.accepted, "synced with a peer");
                }
                "complete"
            }
            Err(error) => {
                tracing::debug!(%peer, %error, "sync with a peer failed");
                "failed"
            }
        };
        self.inner.metrics.syncs.get_or_create(&ResultLabel { result }).inc();
    }

    /// Reads `peer`'s whole inventory, fetches what this node lacks and ingests it.
    pub async fn sync_with(&self, peer: PeerId) -> Result<Synced, net::Error> {
        let mut synced = Synced::default();
        let mut missing: Vec<Key> = Vec::new();
        let mut after: Option<Key> = None;
        for _ in 0..sync::MAX_PAGES {
            let request = Request::Inventory { after: after.map(|k| ByteBuf::from(k.as_bytes().to_vec())) };
            let (keys, more) = match self.inner.net.sync(peer, request).await? {
                Response::Inventory { keys, more } => (keys, more),
                other => return Err(unexpected(&other)),
            };
            if keys.len() > sync::PAGE {
                return Err(net::Error::Sync(format!("an inventory page of {} keys", keys.len())));
            }
            let keys: Vec<Key> = keys.iter().filter_map(|k| Key::from_bytes(k)).collect();
            synced.offered += keys.len();
            let store = self.inner.store.clone();
            let page = keys.clone();
            let lacking =
                super::blocking(move || lacking(&store, page)).await.map_err(|e| net::Error::Sync(e.to_string()))?;
            missing.extend(lacking);
            // A peer whose page does not move forward would keep the sync going for ever.
            match keys.last() {
                Some(last) if more && after.is_none_or(|a| *last > a) => after = Some(*last),
                _ => break,
            }
        }
        let mut queue = missing.as_slice();
        while !queue.is_empty() {
            let chunk = &queue[..queue.len().min(sync::MAX_FETCH)];
            let keys = chunk.iter().map(|k| ByteBuf::from(k.as_bytes().to_vec())).collect();
            let items = match self.inner.net.sync(peer, Request::Fetch { keys }).await? {
                Response::Envelopes { items } => items,
                other => return Err(unexpected(&other)),
            };
            if items.is_empty() {
                // The peer no longer holds the first one: move past it.
                queue = &queue[1..];
                continue;
            }
            let answered = items.len().min(chunk.len());
            synced.fetched += answered;
            let mut items = items;
            items.truncate(answered);
            let (accepted, rejected) = self.ingest_fetched(items).await?;
            synced.accepted += accepted;
            if rejected == answered {
                // A peer that answers with nothing but provably bad envelopes is not worth the
                // signature checks the rest of its inventory would cost.
                return Err(net::Error::Sync(format!("the peer sent {rejected} invalid envelopes")));
            }
            queue = &queue[answered..];
        }
        Ok(synced)
    }

    /// Runs fetched envelopes through the ingest actor, in order; how many it accepted, and
    /// how many it refused as provably bad.
    async fn ingest_fetched(&self, items: Vec<ByteBuf>) -> Result<(usize, usize), net::Error> {
        let envelopes = items.into_iter().map(|item| item.into_vec()).collect();
        let outcomes = self
            .inner
            .ingest
            .ask(|reply| Command::Synced { envelopes, reply })
            .await
            .map_err(|_| net::Error::Closed)?;
        let (mut accepted, mut rejected) = (0, 0);
        for (_, outcome) in outcomes {
            match outcome.acceptance() {
                net::Acceptance::Accept => accepted += 1,
                net::Acceptance::Reject => rejected += 1,
                net::Acceptance::Ignore => {}
            }
        }
        Ok((accepted, rejected))
    }

    /// Answers one question out of the store, off the async threads.
    async fn answer(&self, question: Question) {
        let store = self.inner.store.clone();
        let Question { peer, request, channel } = question;
        let response = super::blocking(move || answer(&store, request)).await.unwrap_or_else(|error| {
            tracing::error!(%error, "answering a sync question failed");
            Response::Refused { reason: "internal error".into() }
        });
        if let Err(error) = self.inner.net.answer_sync(channel, response).await {
            tracing::debug!(%peer, %error, "could not answer a sync question");
        }
    }
}

fn unexpected(response: &Response) -> net::Error {
    match response {
        Response::Refused { reason } => net::Error::Sync(format!("the peer refused: {reason}")),
        _ => net::Error::Sync("the peer answered another question".into()),
    }
}

/// The keys of a page this node does not keep.
fn lacking(store: &Store, keys: Vec<Key>) -> Vec<Key> {
    keys.into_iter().filter(|k| !store.has_envelope(k).unwrap_or(false)).collect()
}

/// What this node answers a peer's question with.
fn answer(store: &Store, request: Request) -> Response {
    let refused = |reason: &str| Response::Refused { reason: reason.to_owned() };
    match request {
        Request::Inventory { after } => {
            let after = match after.as_ref().map(|k| Key::from_bytes(k)) {
                None => None,
                Some(Some(key)) => Some(key),
                Some(None) => return refused("a malformed key"),
            };
            match store.envelope_keys(after.as_ref(), sync::PAGE) {
                Ok((keys, more)) => Response::Inventory {
                    keys: keys.iter().map(|k| ByteBuf::from(k.as_bytes().to_vec())).collect(),
                    more,
                },
                Err(error) => {
                    tracing::error!(%error, "reading the inventory failed");
                    refused("store error")
                }
            }
        }
        // The sync task answers announcements itself.
        Request::Announce => Response::Noted,
        Request::Fetch { keys } => {
            let keys = match Request::fetch_keys(&keys) {
                Ok(keys) => keys,
                Err(reason) => return refused(&reason),
            };
            let mut items = Vec::new();
            let mut size = 0;
            for key in keys {
                match store.envelope(&key) {
                    Ok(Some(bytes)) => {
                        size += bytes.len();
                        if size > sync::MAX_ANSWER_BYTES && !items.is_empty() {
                            break;
                        }
                        items.push(ByteBuf::from(bytes));
                    }
                    // Answers are in the order asked, so a gap would shift the rest: stop at one.
                    Ok(None) => break,
                    Err(error) => {
                        tracing::error!(%error, "reading an envelope failed");
                        break;
                    }
                }
            }
            Response::Envelopes { items }
        }
    }
}
