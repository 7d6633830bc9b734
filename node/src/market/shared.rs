//! What the node holds for its market between calls: the config, the lock that lets one
//! adoption pay at a time, the issue time of the last report, the evidence observers, and the
//! price of each skill for the current maintenance tick.
//!
//! The price cache is what lets one `use_skill` price a listing once: the agent's port reads a
//! skill's price, then adopts at that price, within one tick. A tick's end clears it (the
//! evidence that changed is repriced then), and only the agent's port reads through it: the
//! API's routes always price afresh.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use druse_protocol::ContentId;
use tokio::sync::broadcast;

use super::{Config, Listing};

/// Batches of changed market evidence an observer may fall behind by.
const EVIDENCE_BATCHES: usize = 64;

/// Listings whose price is kept for the tick, at most: past it, a new one is not kept.
const MAX_CACHED_PRICES: usize = 1024;

/// The market's state inside a node (see the module notes).
#[derive(Debug)]
pub struct Shared {
    /// The market's config (fixed at start).
    pub config: Config,
    /// Adoptions run one at a time, so the ledger is never spent twice.
    pub(crate) adopting: tokio::sync::Mutex<()>,
    /// The issue time of the node's last report: each report is issued after it, so two
    /// reports with the same fields are two messages.
    pub(crate) last_report: AtomicU64,
    /// Skills whose market evidence changed, a batch per maintenance tick, for observers.
    pub(crate) evidence: broadcast::Sender<Vec<ContentId>>,
    /// The listings priced during this tick, for the agent's port.
    prices: Mutex<HashMap<ContentId, Listing>>,
    /// Listings priced since start (each one a vector search for its scarcity).
    priced: AtomicU64,
}

impl Shared {
    /// The market's state with nothing in it yet.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            adopting: tokio::sync::Mutex::new(()),
            last_report: AtomicU64::new(0),
            evidence: broadcast::channel(EVIDENCE_BATCHES).0,
            prices: Mutex::new(HashMap::new()),
            priced: AtomicU64::new(0),
        }
    }

    /// The listing of `id` priced during this tick, if there is one.
    pub(crate) fn cached(&self, id: &ContentId) -> Option<Listing> {
        self.prices().get(id).cloned()
    }

    /// Keeps `listing`'s price for the rest of the tick.
    pub(crate) fn cache(&self, listing: &Listing) {
        let mut prices = self.prices();
        if prices.len() < MAX_CACHED_PRICES || prices.contains_key(&listing.skill.id) {
            prices.insert(listing.skill.id, listing.clone());
        }
    }

    /// Forgets the price of `id` (it was adopted: its listing changed).
    pub(crate) fn forget(&self, id: &ContentId) {
        self.prices().remove(id);
    }

    /// Ends the tick: every kept price is forgotten.
    pub(crate) fn new_tick(&self) {
        self.prices().clear();
    }

    /// Counts one listing priced.
    pub(crate) fn count_priced(&self) {
        self.priced.fetch_add(1, Ordering::Relaxed);
    }

    /// Listings priced since start.
    pub fn priced(&self) -> u64 {
        self.priced.load(Ordering::Relaxed)
    }

    fn prices(&self) -> std::sync::MutexGuard<'_, HashMap<ContentId, Listing>> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.prices.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
