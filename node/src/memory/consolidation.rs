//! The consolidation engine (seed 004): on a timer (30 minutes by default) and on demand,
//! four phases committed as one batch, every transition logged:
//! 1. score every crystal with the decay rules (hormones add decay resistance);
//! 2. expire what fell below the forget threshold (skills and permanent crystals never) and
//!    what outlived its TTL; activate often-used, important crystals;
//! 3. merge promoted crystals that overlap (cosine ≥ the merge threshold, raised by
//!    cortisol): the more important becomes consolidated, the other archived under it;
//! 4. apply it all at once. Crystals already expired before the pass are purged.

use std::collections::HashSet;

use druse_protocol::UnixMillis;
use serde::{Deserialize, Serialize};

use crate::memory::crystal::{Crystal, CrystalId, Lifecycle, Status};
use crate::memory::engine::{Changes, Error, Memory, audit, decay_inputs};
use crate::memory::vector::kernel::dot;

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

impl Memory {
    /// Runs one consolidation pass at `now`.
    pub fn consolidate(&self, now: UnixMillis) -> Result<Report, Error> {
        let modulation = self.hormone_state().consolidation(
            &self.config.hormones,
            self.network_cortisol(),
            self.config.consolidation.merge_threshold,
            now,
        );
        let cfg = &self.config.consolidation;
        let t0 = std::time::Instant::now();
        let mut report = Report { merge_threshold: modulation.merge_threshold, ..Report::default() };
        let mut changes = Changes::default();
        let mut promoted: Vec<(CrystalId, f64)> = Vec::new();
        {
            let crystals = self.crystals.read().unwrap_or_else(|p| p.into_inner());
            for c in crystals.values() {
                if c.lifecycle == Lifecycle::Expired {
                    changes.purge.push(c.id);
                    changes.audit.push(audit(
                        c,
                        "consolidation",
                        now,
                        "expired",
                        "purged",
                        "purge of expired crystals",
                    ));
                    continue;
                }
                if c.status == Status::Superseded || c.lifecycle == Lifecycle::Archived {
                    continue;
                }
                report.scored += 1;
                let importance = self.config.decay.importance(&decay_inputs(c), now, modulation.decay_resistance);
                let mut next = c.clone();
                next.importance = importance;
                if c.ttl_passed(now) && c.lifecycle.can_become(Lifecycle::Expired) {
                    transition(&mut next, Lifecycle::Expired, now, "ttl elapsed", &mut changes);
                    report.expired += 1;
                } else if importance < cfg.forget_threshold
                    && !c.is_decay_immune()
                    && c.lifecycle.can_become(Lifecycle::Expired)
                {
                    transition(
                        &mut next,
                        Lifecycle::Expired,
                        now,
                        "importance below the forget threshold",
                        &mut changes,
                    );
                    report.expired += 1;
                } else {
                    if c.lifecycle == Lifecycle::Generated
                        && c.access_count >= cfg.activate_after_accesses
                        && importance >= cfg.promote_threshold
                    {
                        transition(
                            &mut next,
                            Lifecycle::Activated,
                            now,
                            "accessed often, high importance",
                            &mut changes,
                        );
                        report.activated += 1;
                    }
                    if importance > cfg.promote_threshold && !c.is_decay_immune() {
                        promoted.push((c.id, importance));
                    }
                }
                if (next.importance - c.importance).abs() > 1e-4 || next.lifecycle != c.lifecycle {
                    changes.crystals.push(next);
                }
            }
        }
        eprintln!("PROF score {:?} promoted {}", t0.elapsed(), promoted.len());
        let t1 = std::time::Instant::now();
        report.merged = self.merge(&promoted, modulation.merge_threshold, now, &mut changes);
        eprintln!("PROF merge {:?}", t1.elapsed());
        report.purged = changes.purge.len();
        let t2 = std::time::Instant::now();
        self.commit(changes, true)?;
        eprintln!("PROF commit {:?}", t2.elapsed());
        Ok(report)
    }

    /// Phase 3: pairs of promoted crystals in one namespace whose embeddings overlap.
    fn merge(&self, promoted: &[(CrystalId, f64)], threshold: f64, now: UnixMillis, changes: &mut Changes) -> usize {
        let mut taken: HashSet<CrystalId> = HashSet::new();
        let mut merged = 0;
        let mut order: Vec<(CrystalId, f64)> = promoted.to_vec();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let embeddings: Vec<Option<Vec<f32>>> = order.iter().map(|(id, _)| self.embedding(*id)).collect();
        for i in 0..order.len() {
            let (winner_id, _) = order[i];
            if taken.contains(&winner_id) {
                continue;
            }
            let Some(a) = &embeddings[i] else { continue };
            for j in (i + 1)..order.len() {
                let (loser_id, _) = order[j];
                if taken.contains(&loser_id) {
                    continue;
                }
                let Some(b) = &embeddings[j] else { continue };
                if f64::from(dot(a, b)) < threshold {
                    continue;
                }
                let (Some(winner), Some(loser)) = (self.current(winner_id, changes), self.current(loser_id, changes))
                else {
                    continue;
                };
                if winner.namespace != loser.namespace {
                    continue;
                }
                let mut winner = winner;
                let mut loser = loser;
                if winner.lifecycle.can_become(Lifecycle::Consolidated) {
                    transition(&mut winner, Lifecycle::Consolidated, now, &format!("merged with {loser_id}"), changes);
                }
                transition(&mut loser, Lifecycle::Archived, now, &format!("merged into {winner_id}"), changes);
                loser.parent_id = Some(winner_id);
                upsert(changes, winner);
                upsert(changes, loser);
                taken.insert(winner_id);
                taken.insert(loser_id);
                merged += 1;
                break;
            }
        }
        merged
    }

    fn current(&self, id: CrystalId, changes: &Changes) -> Option<Crystal> {
        changes.crystals.iter().rev().find(|c| c.id == id).cloned().or_else(|| self.get(id))
    }
}

fn upsert(changes: &mut Changes, crystal: Crystal) {
    changes.crystals.retain(|c| c.id != crystal.id);
    changes.crystals.push(crystal);
}

fn transition(c: &mut Crystal, to: Lifecycle, now: UnixMillis, why: &str, changes: &mut Changes) {
    changes.audit.push(audit(c, "consolidation", now, c.lifecycle.as_str(), to.as_str(), why));
    c.lifecycle = to;
}
