//! Recall: the vector and BM25 halves, their fusion and scoring, and what benchmarks and
//! operators read of the vector index.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use druse_protocol::UnixMillis;

use super::{CONTEXT_BIT, CRYSTAL, Error, Hit, Memory, Query, key, read, write};
use crate::governance::Caller;
use crate::memory::crystal::{Crystal, CrystalId};
use crate::memory::vector;

/// How recall weighs what it finds. The defaults were measured on the LoCoMo dev split
/// (`locomo-bench`, recall_any@5 / @10) and on `tests/data/retrieval.json` (recall@5): against
/// plain RRF (text weight 1, no neighbours, k = 60) at 0.600 / 0.730 (MiniLM) and 0.504 / 0.629
/// (hashing) on LoCoMo, text weight 2, neighbour weight 0.3 and k = 10 give 0.678 / 0.777 and
/// 0.670 / 0.756, and 0.758 and 0.581 on the labelled set (plain RRF: 0.742 and 0.581). Text
/// weight 4 with k = 20 scored as well on LoCoMo but lost 0.05 on the labelled set with MiniLM.
/// The BM25 list, over a turn with its neighbour and its date, is the stronger of the two in
/// conversation; the vector list finds the paraphrases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// The weight of the BM25 list against the vector list in reciprocal rank fusion.
    pub text_weight: f64,
    /// How much of a neighbouring turn's fused relevance a turn takes on: the answer is often
    /// said just before or after the turn that shares the question's words.
    pub neighbour_weight: f64,
    /// Whether a turn is indexed for text search with the turn that follows it, as well as
    /// the one before it.
    pub next_turn_context: bool,
    /// Reciprocal rank fusion's constant: a hit at rank r scores `weight / (rrf_k + r)`.
    pub rrf_k: f64,
    /// Whether a turn's context vector embeds the day it was said as well as the turn before
    /// it (the BM25 document always holds the day). Off: on the LoCoMo dev split with MiniLM
    /// the day's words dilute the vector, and leaving them out raised recall_any@5 / @10 from
    /// 0.678 / 0.777 to 0.694 / 0.790 (hashing: 0.670 / 0.756 to 0.670 / 0.753).
    pub day_in_context_vector: bool,
}

impl Tuning {
    /// The defaults for an embedder: one that matches words (the hashing embedder) also
    /// embeds a turn's day in its context vector, where the day's words find date questions
    /// (on `tests/data/retrieval.json` hashing's recall@5 falls from 0.581 to 0.548 without
    /// them); one that matches meaning does not (see [`Tuning::day_in_context_vector`]).
    pub fn for_embedder(name: &str) -> Self {
        Self { day_in_context_vector: name.starts_with("hashing"), ..Self::default() }
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            text_weight: 2.0,
            neighbour_weight: 0.3,
            next_turn_context: false,
            rrf_k: 10.0,
            day_in_context_vector: false,
        }
    }
}

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

    /// Hybrid recall: vector and BM25 candidates, each gathered among the memories the
    /// query's filters and `caller`'s access admit (so `k` come back whenever `k` exist),
    /// fused by reciprocal rank.
    ///
    /// `score` is the fused relevance, `Σ w / (rrf_k + rank)` over the two lists (weighted by
    /// [`Tuning`](super::Tuning)), plus a share of the relevance of the more relevant turn said next to it. Importance, recency, hormones and access only order memories of equal
    /// relevance: a strong match is never pushed below a weak one by how often it was
    /// recalled, so asking the same question again cannot lower its recall.
    ///
    /// Recall counts as access (seed 004): every crystal returned has its access count raised
    /// and its decay clock restarted.
    pub fn search(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        let hits = self.peek(query, caller, now)?;
        self.record_access(&hits, now)?;
        Ok(hits)
    }

    /// What [`Memory::search`] would return, without counting it as access: nothing changes,
    /// so inspecting memory leaves no trace.
    pub fn peek(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        query.check()?;
        let k = query.k;
        let depth = candidate_depth(k);
        let embedding = self.embed_one(&query.q)?;
        self.publish_text()?;
        let text_hits = self.text.search_where(&query.q, depth, &query.text_filter())?;
        let crystals = read(&self.crystals);
        let admits = |c: &Crystal| c.is_recallable(now) && query.admits(c) && c.can_access(caller, now);
        let keep = |key: u64| crystals.get(&(key & !CONTEXT_BIT)).is_some_and(admits);
        let vector_hits = {
            let hits = self.vectors.search_where(&embedding, self.vector_depth(depth), &keep)?;
            let mut seen = HashSet::with_capacity(hits.len());
            hits.into_iter().map(|(key, _)| key & !CONTEXT_BIT).filter(|id| seen.insert(*id)).collect::<Vec<_>>()
        };
        let tuning = self.tuning();
        let mut fused: HashMap<CrystalId, (f64, Option<usize>, Option<usize>)> = HashMap::new();
        for (rank, id) in vector_hits.into_iter().enumerate() {
            fused.insert(id, (1.0 / (tuning.rrf_k + rank as f64 + 1.0), Some(rank + 1), None));
        }
        for (rank, (id, _)) in text_hits.into_iter().enumerate() {
            let entry = fused.entry(id).or_insert((0.0, None, None));
            entry.0 += tuning.text_weight / (tuning.rrf_k + rank as f64 + 1.0);
            entry.2 = Some(rank + 1);
        }
        if tuning.neighbour_weight > 0.0 {
            // A turn takes a share of the relevance of the more relevant of the turns said
            // just before and after it; a neighbour of a candidate becomes one.
            let found: HashMap<CrystalId, f64> = fused.iter().map(|(id, entry)| (*id, entry.0)).collect();
            let mut lifted: HashMap<CrystalId, f64> = HashMap::new();
            for (id, relevance) in &found {
                let Some(c) = crystals.get(id) else { continue };
                for neighbour in self.neighbours(c).into_iter().flatten() {
                    if crystals.get(&neighbour).is_some_and(admits) {
                        let best = lifted.entry(neighbour).or_insert(0.0);
                        *best = best.max(*relevance);
                    }
                }
            }
            for (id, relevance) in lifted {
                fused.entry(id).or_insert((0.0, None, None)).0 += tuning.neighbour_weight * relevance;
            }
        }
        let modulation = self.hormone_state().retrieval(&self.config.hormones, self.network_cortisol(), now);
        let mut hits: Vec<(f64, Hit)> = fused
            .into_iter()
            .filter_map(|(id, (rrf, vector_rank, text_rank))| {
                // The text half filters by the query; access and lifecycle are checked here.
                let c = crystals.get(&id).filter(|c| admits(c))?;
                let importance = self.importance(c, now, 0.0);
                let days = now.saturating_sub(c.last_access) as f64 / 86_400_000.0;
                let recency = (-days / 7.0).exp();
                let signal =
                    (1.0 + importance * modulation.importance_boost) * (1.0 + 0.25 * recency * modulation.recency_bias);
                Some((signal, Hit { crystal: c.clone(), score: rrf, vector_rank, text_rank }))
            })
            .collect();
        let withheld = hits.is_empty() && caller != Caller::LocalAgent && self.withholds(query, caller, now, &crystals);
        drop(crystals);
        if withheld {
            return Err(Error::Private(
                "the memories this search matches are private: send `Authorization: Bearer <token>`".into(),
            ));
        }
        // Relevance first; among equals, the better rank in either list (still relevance);
        // only then importance, recency and hormones; then the newest.
        let best_rank = |h: &Hit| h.vector_rank.into_iter().chain(h.text_rank).min().unwrap_or(usize::MAX);
        hits.sort_by(|(sa, a), (sb, b)| {
            b.score
                .total_cmp(&a.score)
                .then(best_rank(a).cmp(&best_rank(b)))
                .then(sb.total_cmp(sa))
                .then(b.crystal.id.cmp(&a.crystal.id))
        });
        Ok(hits.into_iter().take(k).map(|(_, hit)| hit).collect())
    }

    /// Whether a memory passes `query`'s filters but is hidden from `caller`.
    fn withholds(
        &self,
        query: &Query,
        caller: Caller,
        now: UnixMillis,
        crystals: &HashMap<CrystalId, Crystal>,
    ) -> bool {
        crystals.values().any(|c| c.is_recallable(now) && query.admits(c) && !c.can_access(caller, now))
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
