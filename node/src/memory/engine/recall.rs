//! Recall: the vector and BM25 halves, their fusion and scoring, and what benchmarks and
//! operators read of the vector index.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use druse_protocol::UnixMillis;

use super::{CONTEXT_BIT, CRYSTAL, Error, Hit, MAX_TEXT, Memory, Query, key, read, write};
use crate::governance::Caller;
use crate::memory::crystal::CrystalId;
use crate::memory::vector;

/// How many candidates each half of recall gathers for `k` results.
fn candidate_depth(k: usize) -> usize {
    (k * 5).max(50)
}

impl Memory {
    /// How many vector candidates to ask for: at most the index's `ef_search`, beyond which
    /// every segment would be scanned exactly.
    pub(super) fn vector_depth(&self, wanted: usize) -> usize {
        wanted.min(self.vectors.config().ef_search)
    }

    /// The crystals whose vectors (alone or with context, whichever is nearer) are nearest to
    /// `embedding`, best first, as recall takes them: from the index, or by an exact scan.
    fn vector_candidates(&self, embedding: &[f32], depth: usize, exact: bool) -> Result<Vec<(CrystalId, f32)>, Error> {
        let hits = if exact {
            self.vectors.exact(embedding, depth)?
        } else {
            self.vectors.search(embedding, self.vector_depth(depth))?
        };
        let mut seen = HashSet::with_capacity(hits.len());
        Ok(hits
            .into_iter()
            .map(|(key, score)| (key & !CONTEXT_BIT, score))
            .filter(|(id, _)| seen.insert(*id))
            .collect())
    }

    /// The `k` crystals whose vectors are nearest to `q`, as recall's vector half finds them:
    /// what a benchmark measures that half's latency and recall with (against
    /// [`Memory::vector_hits_exact`]). Lifecycle and scope are not applied.
    pub fn vector_hits(&self, q: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let mut hits = self.vector_candidates(&self.embed_one(q)?, candidate_depth(k), false)?;
        hits.truncate(k);
        Ok(hits)
    }

    /// [`Memory::vector_hits`] by an exact scan of every stored vector.
    pub fn vector_hits_exact(&self, q: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let mut hits = self.vector_candidates(&self.embed_one(q)?, candidate_depth(k), true)?;
        hits.truncate(k);
        Ok(hits)
    }

    /// The vector index's shape and build history, for operators and benchmarks.
    pub fn vector_stats(&self) -> vector::Stats {
        self.vectors.stats()
    }

    /// Blocks until the vector index has no build left to run, or `timeout` passes; true when
    /// idle. For tests, benchmarks and orderly shutdown; never call it from an async task.
    pub fn wait_indexed(&self, timeout: Duration) -> bool {
        self.vectors.wait_idle(timeout)
    }

    /// Hybrid recall: vector and BM25 candidates fused by reciprocal rank (k = 60), then
    /// scaled by importance, recency and hormones, filtered to what `caller` may see.
    ///
    /// `score = rrf × (1 + importance × importance_boost) × (1 + 0.25 × recency × recency_bias)`,
    /// with `importance` computed live by the decay rules, `recency = e^(−days since last
    /// access / 7)`, and the boosts from seed 004's retrieval modulation (dopamine raises the
    /// weight of importance, cortisol — local or from weather — the weight of recency).
    ///
    /// Recall counts as access (seed 004): every crystal returned has its access count raised
    /// and its decay clock restarted.
    pub fn search(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        let hits = self.peek(query, caller, now)?;
        self.record_access(&hits, now)?;
        Ok(hits)
    }

    /// What [`Memory::search`] would return, without counting it as access: nothing changes,
    /// so inspecting memory, or measuring recall question by question, leaves no trace.
    pub fn peek(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        let k = query.k.clamp(1, 100);
        if query.q.len() > MAX_TEXT {
            return Err(Error::Invalid("query too long".into()));
        }
        let depth = candidate_depth(k);
        let embedding = self.embed_one(&query.q)?;
        let vector_hits = self.vector_candidates(&embedding, depth, false)?;
        let text_hits = self.text.search(&query.q, depth)?;
        const RRF_K: f64 = 60.0;
        let mut fused: HashMap<CrystalId, (f64, Option<usize>, Option<usize>)> = HashMap::new();
        for (rank, (id, _)) in vector_hits.into_iter().enumerate() {
            fused.insert(id, (1.0 / (RRF_K + rank as f64 + 1.0), Some(rank + 1), None));
        }
        for (rank, (id, _)) in text_hits.into_iter().enumerate() {
            let entry = fused.entry(id).or_insert((0.0, None, None));
            entry.0 += 1.0 / (RRF_K + rank as f64 + 1.0);
            entry.2 = Some(rank + 1);
        }
        let modulation = self.hormone_state().retrieval(&self.config.hormones, self.network_cortisol(), now);
        let crystals = read(&self.crystals);
        let mut hits: Vec<Hit> = fused
            .into_iter()
            .filter_map(|(id, (rrf, vector_rank, text_rank))| {
                let c = crystals.get(&id)?;
                if !c.is_recallable(now) || !c.can_access(caller, now) {
                    return None;
                }
                if query.namespace.as_ref().is_some_and(|n| n != &c.namespace)
                    || query.kind.is_some_and(|k| k != c.kind)
                    || query.semantic_type.is_some_and(|t| t != c.semantic_type)
                {
                    return None;
                }
                let importance = self.importance(c, now, 0.0);
                let days = now.saturating_sub(c.last_access) as f64 / 86_400_000.0;
                let recency = (-days / 7.0).exp();
                let score = rrf
                    * (1.0 + importance * modulation.importance_boost)
                    * (1.0 + 0.25 * recency * modulation.recency_bias);
                Some(Hit { crystal: c.clone(), score, vector_rank, text_rank })
            })
            .collect();
        drop(crystals);
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.crystal.id.cmp(&a.crystal.id)));
        hits.truncate(k);
        Ok(hits)
    }

    /// Retrieval counts as access (seed 004): the count rises and the decay clock restarts.
    fn record_access(&self, hits: &[Hit], now: UnixMillis) -> Result<(), Error> {
        if hits.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let mut map = write(&self.crystals);
        for hit in hits {
            if let Some(c) = map.get_mut(&hit.crystal.id) {
                c.access_count += 1;
                c.last_access = now;
                let bytes = serde_json::to_vec(&*c).map_err(|e| Error::Corrupt(format!("crystal {}", c.id), e))?;
                batch.insert(&key(CRYSTAL, c.id), bytes);
            }
        }
        drop(map);
        self.tree.apply_batch(batch)?;
        Ok(())
    }
}
