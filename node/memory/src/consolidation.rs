//! The consolidation engine (seed 004): on a timer (30 minutes by default) and on demand,
//! four phases committed as one batch, every transition logged:
//! 1. score every crystal with the decay rules (hormones add decay resistance);
//! 2. expire what fell below the forget threshold (skills and permanent crystals never) and
//!    what outlived its TTL; activate often-used, important crystals;
//! 3. merge promoted crystals that overlap (cosine ≥ the merge threshold, raised by
//!    cortisol): the more important becomes consolidated, the other archived under it;
//! 4. apply it all at once. Crystals already expired before the pass are purged.
//!
//! This module holds the pass's knobs and its report; the pass itself is the engine's
//! (`Memory::consolidate`), which alone touches the store.

use serde::{Deserialize, Serialize};

/// Seed 004's thresholds; `Default` holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Above this importance a crystal is promoted: it may merge (0.7).
    pub promote_threshold: f64,
    /// Below this importance a crystal expires (0.02).
    pub forget_threshold: f64,
    /// Cosine at or above which promoted crystals merge, before cortisol raises it (0.92).
    pub merge_threshold: f64,
    /// Accesses after which an important crystal is activated.
    pub activate_after_accesses: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self { promote_threshold: 0.7, forget_threshold: 0.02, merge_threshold: 0.92, activate_after_accesses: 3 }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub scored: usize,
    pub activated: usize,
    pub expired: usize,
    pub merged: usize,
    pub purged: usize,
    pub merge_threshold: f64,
}
