//! The consolidation pass (see [`crate::consolidation`] for its phases and knobs): the
//! engine's own, since it reads and rewrites the store under the writer lock.

use std::collections::{HashMap, HashSet};

use druse_protocol::UnixMillis;

use super::{AuditEntry, Changes, Error, Memory, audit, is_live, lock, read};
use crate::consolidation::Report;
use crate::crystal::{Crystal, CrystalId, Lifecycle, Namespace};
use crate::vector::kernel::dot;

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
        let modulation = self.consolidation_modulation(now);
        let cfg = &self.config.consolidation;
        let mut report = Report { merge_threshold: modulation.merge_threshold, ..Report::default() };
        let mut changes = Changes::default();
        // Crystals this pass changes, by id: phase 3 reads and changes them again.
        let mut changed: HashMap<CrystalId, Crystal> = HashMap::new();
        // New importance of crystals that otherwise stay as they are.
        let mut refreshed: HashMap<CrystalId, f64> = HashMap::new();
        let mut promoted: Vec<Promoted> = Vec::new();
        {
            let crystals = read(&self.crystals);
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
                if !is_live(c) {
                    continue;
                }
                report.scored += 1;
                let importance = self.importance(c, now, modulation.decay_resistance);
                let to = if c.ttl_passed(now) && c.lifecycle.can_become(Lifecycle::Expired) {
                    report.expired += 1;
                    Some((Lifecycle::Expired, "ttl elapsed"))
                } else if importance < cfg.forget_threshold
                    && !c.is_decay_immune()
                    && c.lifecycle.can_become(Lifecycle::Expired)
                {
                    report.expired += 1;
                    Some((Lifecycle::Expired, "importance below the forget threshold"))
                } else {
                    if importance > cfg.promote_threshold && !c.is_decay_immune() {
                        promoted.push(Promoted { id: c.id, importance, namespace: c.namespace.clone() });
                    }
                    if c.lifecycle == Lifecycle::Generated
                        && c.access_count >= cfg.activate_after_accesses
                        && importance >= cfg.promote_threshold
                    {
                        report.activated += 1;
                        Some((Lifecycle::Activated, "accessed often, high importance"))
                    } else {
                        None
                    }
                };
                if let Some((to, why)) = to {
                    let mut next = c.clone();
                    next.importance = importance;
                    transition(&mut next, to, now, why, &mut changes.audit);
                    changed.insert(next.id, next);
                } else if importance != c.importance {
                    refreshed.insert(c.id, importance);
                }
            }
        }
        report.merged =
            self.merge(promoted, modulation.merge_threshold, now, &refreshed, &mut changed, &mut changes.audit);
        report.purged = changes.purge.len();
        changes.importance = refreshed.into_iter().filter(|(id, _)| !changed.contains_key(id)).collect();
        changes.crystals = changed.into_values().collect();
        self.commit(changes)?;
        Ok(report)
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
