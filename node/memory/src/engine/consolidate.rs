//! The consolidation pass (see [`crate::consolidation`] for its phases and knobs): the
//! engine's own, since it reads and rewrites the store under the writer lock.

use std::collections::{HashMap, HashSet};

use druse_protocol::UnixMillis;
use rayon::prelude::*;

use super::{AuditEntry, Changes, Error, Memory, audit, is_live, lock, read};
use crate::consolidation::Report;
use crate::crystal::{Crystal, CrystalId, Lifecycle, Namespace};
use crate::hormones::ConsolidationModulation;
use crate::vector::kernel::dot;

/// Crystals one task of a pass decides for.
const DECIDED_PER_TASK: usize = 16 * 1024;

/// What phases 1 and 2 of a pass decided, for some of the crystals.
#[derive(Default)]
struct Decided {
    scored: usize,
    activated: usize,
    expired: usize,
    purge: Vec<CrystalId>,
    audit: Vec<AuditEntry>,
    /// Crystals whose lifecycle changes.
    changed: Vec<Crystal>,
    /// New importance of crystals that otherwise stay as they are.
    refreshed: Vec<(CrystalId, f64)>,
    promoted: Vec<Promoted>,
}

impl Decided {
    fn join(mut self, other: Self) -> Self {
        self.scored += other.scored;
        self.activated += other.activated;
        self.expired += other.expired;
        self.purge.extend(other.purge);
        self.audit.extend(other.audit);
        self.changed.extend(other.changed);
        self.refreshed.extend(other.refreshed);
        self.promoted.extend(other.promoted);
        self
    }
}

/// A promoted crystal, waiting for phase 3.
struct Promoted {
    id: CrystalId,
    importance: f64,
    namespace: Namespace,
}

impl Memory {
    /// Runs one consolidation pass at `now`. It holds the writer lock, so no add interleaves
    /// with it; recall goes on meanwhile.
    ///
    /// Importance is derived from what the store keeps (access count, decay clock, weights), so
    /// the values a pass recomputes are kept in memory, and opening the engine recomputes them
    /// ([`Memory::open`]); a crystal is rewritten only when its lifecycle changes. Rewriting
    /// every crystal for its drifting importance made a pass over 100k crystals cost 1.2 to
    /// 2 s on sled, nearly all of it writes.
    pub fn consolidate(&self, now: UnixMillis) -> Result<Report, Error> {
        let _writer = lock(&self.write);
        let started = std::time::Instant::now();
        let modulation = self.consolidation_modulation(now);
        // Each core decides for a share of the crystals.
        let decided = {
            let crystals = read(&self.crystals);
            let all: Vec<&Crystal> = crystals.values().collect();
            all.par_chunks(DECIDED_PER_TASK)
                .map(|share| {
                    let mut decided = Decided::default();
                    for c in share {
                        self.decide(c, now, &modulation, &mut decided);
                    }
                    decided
                })
                .reduce(Decided::default, Decided::join)
        };
        let Decided { scored, activated, expired, purge, audit, changed, refreshed, promoted } = decided;
        let mut report =
            Report { scored, activated, expired, merge_threshold: modulation.merge_threshold, ..Report::default() };
        let mut changes = Changes { purge, audit, ..Changes::default() };
        // Crystals this pass changes, by id: phase 3 reads and changes them again.
        let mut changed: HashMap<CrystalId, Crystal> = changed.into_iter().map(|c| (c.id, c)).collect();
        // New importance of crystals that otherwise stay as they are.
        let refreshed: HashMap<CrystalId, f64> = refreshed.into_iter().collect();
        report.merged =
            self.merge(promoted, modulation.merge_threshold, now, &refreshed, &mut changed, &mut changes.audit);
        report.purged = changes.purge.len();
        changes.importance = refreshed.into_iter().filter(|(id, _)| !changed.contains_key(id)).collect();
        changes.crystals = changed.into_values().collect();
        let deciding = started.elapsed();
        let took = self.commit_timed(changes)?;
        tracing::info!(
            scored = report.scored,
            activated = report.activated,
            expired = report.expired,
            merged = report.merged,
            purged = report.purged,
            decide_ms = deciding.as_millis() as u64,
            write_ms = took.write.as_millis() as u64,
            sync_ms = took.sync.as_millis() as u64,
            index_ms = took.index.as_millis() as u64,
            "consolidation pass"
        );
        Ok(report)
    }

    /// Phases 1 and 2 for one crystal: purged if it expired at the last pass; else scored,
    /// and expired, activated or promoted as its importance says.
    fn decide(&self, c: &Crystal, now: UnixMillis, modulation: &ConsolidationModulation, decided: &mut Decided) {
        let cfg = &self.config.consolidation;
        if c.lifecycle == Lifecycle::Expired {
            decided.purge.push(c.id);
            decided.audit.push(audit(c, "consolidation", now, "expired", "purged", "purge of expired crystals"));
            return;
        }
        if !is_live(c) {
            return;
        }
        decided.scored += 1;
        let importance = self.importance(c, now, modulation.decay_resistance);
        let to = if c.ttl_passed(now) && c.lifecycle.can_become(Lifecycle::Expired) {
            decided.expired += 1;
            Some((Lifecycle::Expired, "ttl elapsed"))
        } else if importance < cfg.forget_threshold
            && !c.is_decay_immune()
            && c.lifecycle.can_become(Lifecycle::Expired)
        {
            decided.expired += 1;
            Some((Lifecycle::Expired, "importance below the forget threshold"))
        } else {
            if importance > cfg.promote_threshold && !c.is_decay_immune() {
                decided.promoted.push(Promoted { id: c.id, importance, namespace: c.namespace.clone() });
            }
            if c.lifecycle == Lifecycle::Generated
                && c.access_count >= cfg.activate_after_accesses
                && importance >= cfg.promote_threshold
            {
                decided.activated += 1;
                Some((Lifecycle::Activated, "accessed often, high importance"))
            } else {
                None
            }
        };
        if let Some((to, why)) = to {
            let mut next = c.clone();
            next.importance = importance;
            transition(&mut next, to, now, why, &mut decided.audit);
            decided.changed.push(next);
        } else if importance != c.importance {
            decided.refreshed.push((c.id, importance));
        }
    }

    /// Phase 3: pairs of promoted crystals in one namespace whose embeddings overlap. The more
    /// important of a pair (the lower id on a tie) wins; each crystal merges at most once.
    fn merge(
        &self,
        mut promoted: Vec<Promoted>,
        threshold: f64,
        now: UnixMillis,
        refreshed: &HashMap<CrystalId, f64>,
        changed: &mut HashMap<CrystalId, Crystal>,
        audit: &mut Vec<AuditEntry>,
    ) -> usize {
        promoted.sort_by(|a, b| b.importance.total_cmp(&a.importance).then(a.id.cmp(&b.id)));
        // Only crystals of one namespace merge, so each namespace is compared within itself.
        let mut by_namespace: HashMap<Namespace, Vec<(CrystalId, Vec<f32>)>> = HashMap::new();
        for p in promoted {
            if let Some(embedding) = self.embedding(p.id) {
                by_namespace.entry(p.namespace).or_default().push((p.id, embedding));
            }
        }
        let mut merged = 0;
        for group in by_namespace.values() {
            let mut taken: HashSet<CrystalId> = HashSet::new();
            for (i, (winner_id, a)) in group.iter().enumerate() {
                if taken.contains(winner_id) {
                    continue;
                }
                for (loser_id, b) in &group[i + 1..] {
                    if taken.contains(loser_id) || f64::from(dot(a, b)) < threshold {
                        continue;
                    }
                    let current = |id: CrystalId| {
                        changed.get(&id).cloned().or_else(|| {
                            let mut c = self.get(id)?;
                            c.importance = refreshed.get(&id).copied().unwrap_or(c.importance);
                            Some(c)
                        })
                    };
                    let (Some(mut winner), Some(mut loser)) = (current(*winner_id), current(*loser_id)) else {
                        continue;
                    };
                    if winner.lifecycle.can_become(Lifecycle::Consolidated) {
                        transition(
                            &mut winner,
                            Lifecycle::Consolidated,
                            now,
                            &format!("merged with {loser_id}"),
                            audit,
                        );
                    }
                    transition(&mut loser, Lifecycle::Archived, now, &format!("merged into {winner_id}"), audit);
                    loser.parent_id = Some(*winner_id);
                    changed.insert(winner.id, winner);
                    changed.insert(loser.id, loser);
                    taken.insert(*winner_id);
                    taken.insert(*loser_id);
                    merged += 1;
                    break;
                }
            }
        }
        merged
    }
}

fn transition(c: &mut Crystal, to: Lifecycle, now: UnixMillis, why: &str, audit: &mut Vec<AuditEntry>) {
    audit.push(super::audit(c, "consolidation", now, c.lifecycle.as_str(), to.as_str(), why));
    c.lifecycle = to;
}
