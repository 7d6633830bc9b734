//! A memory's vectors: its own, its context's and its sentences', each a key of its own in the
//! vector index, and how they are embedded and indexed.

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::codec::{CONTEXT_BIT, ID_BITS, SENTENCE_SHIFT};
use super::codec::{crystal_of, note_extras};
use super::{CONTEXT, Error, Memory, SENTENCES, read, write};
use crate::crystal::{Crystal, CrystalId, Namespace};
use crate::embed;
use crate::sentences::{MAX_SENTENCES, sentence_texts};

/// A memory's own vector, and its sentence vectors one after another (empty for one sentence).
pub(super) type Embedded = (Vec<f32>, Vec<f32>);

/// A namespace of up to this many memories has its vectors scored one by one (about 1–2 ms for
/// memories of a few vectors each); a larger one only when the index's graphs could not serve
/// it (see [`Memory::scoped_vector_hits`]).
const SCOPED_SCORING_ALWAYS: usize = 4096;

/// Members of a namespace scored by one task of a scoped search: larger ones are split
/// across the cores. Tests split their few members too, so the split is what they check.
const SCORED_PER_TASK: usize = if cfg!(test) { 8 } else { 4096 };

/// Members of a namespace whose keys one step of a scoped search looks up together, before it
/// scores any of them (see [`crate::vector::Scorer::score_many`]).
const LOOKED_UP_TOGETHER: usize = 64;

/// What a vector search scoped to one namespace looks for (see [`Memory::scoped_vector_hits`]).
pub(super) struct ScopedSearch<'a> {
    pub(super) namespace: &'a Namespace,
    /// How many keys come back, at most.
    pub(super) depth: usize,
    /// How many the index's own search would have to find for it to serve instead.
    pub(super) at_least: usize,
    /// Only each crystal's own vector (reconciliation), not its context's or sentences'.
    pub(super) own_only: bool,
}

impl Memory {
    /// Each text's own vector, and its sentence vectors one after another, embedded in one call.
    ///
    /// A text of several sentences is embedded as its sentences only, and its own vector is
    /// their normalised mean: that costs about what embedding the whole did, where embedding
    /// both cost 2.5 times as much for 0.013 more at @5 and 0.002 less at @10 on the LoCoMo dev
    /// split (MiniLM). An embedder that matches words gets no sentence vectors: the hashing
    /// embedder's vector of a text already is the sum of its words', and its sentence vectors
    /// moved recall_any@5 / @10 by −0.008 / +0.010, not worth several keys a memory.
    pub(super) fn embed_with_sentences(&self, texts: &[&str]) -> Result<Vec<Embedded>, Error> {
        let by_sentence = !self.embedder.matches_words();
        let sentences: Vec<Vec<String>> =
            texts.iter().map(|text| if by_sentence { sentence_texts(text) } else { Vec::new() }).collect();
        let all: Vec<&str> = texts
            .iter()
            .zip(&sentences)
            .flat_map(|(text, sentences)| match sentences.is_empty() {
                true => vec![*text],
                false => sentences.iter().map(String::as_str).collect(),
            })
            .collect();
        let vectors = self.embedder.embed(&all)?;
        if vectors.len() != all.len() {
            return Err(Error::Invalid("the embedder returned the wrong number of vectors".into()));
        }
        let mut vectors = vectors.into_iter();
        let mut out = Vec::with_capacity(texts.len());
        for sentences in &sentences {
            if sentences.is_empty() {
                out.push((vectors.next().unwrap_or_default(), Vec::new()));
                continue;
            }
            let parts: Vec<Vec<f32>> = vectors.by_ref().take(sentences.len()).collect();
            let mut own = vec![0f32; self.embedder.dim()];
            for part in &parts {
                own.iter_mut().zip(part).for_each(|(sum, x)| *sum += x);
            }
            if !embed::normalize(&mut own) {
                return Err(Error::Invalid("the sentences' vectors sum to zero".into()));
            }
            out.push((own, parts.concat()));
        }
        Ok(out)
    }

    /// Puts a stored vector record (`prefix` says which) into the vector index under its keys.
    pub(super) fn index_vector(&self, prefix: u8, id: CrystalId, vector: &[f32]) -> Result<(), Error> {
        let keys = Self::index_keys(self.embedder.dim(), prefix, id, vector);
        for &(key, one) in &keys {
            self.vectors.insert(key, one)?;
        }
        note_extras(&mut write(&self.extras), keys.iter().map(|&(key, _)| key));
        Ok(())
    }

    /// The vector-index keys of a stored vector record (`prefix` says which) of vectors of
    /// `dim` values, each with its vector: a sentence record holds one vector per sentence.
    pub(super) fn index_keys(dim: usize, prefix: u8, id: CrystalId, vector: &[f32]) -> Vec<(u64, &[f32])> {
        match prefix {
            CONTEXT => vec![(id | CONTEXT_BIT, vector)],
            SENTENCES if id <= ID_BITS => {
                let dim = dim.max(1);
                (1..=MAX_SENTENCES as u64)
                    .zip(vector.chunks_exact(dim))
                    .map(|(n, one)| (id | (n << SENTENCE_SHIFT), one))
                    .collect()
            }
            SENTENCES => Vec::new(),
            _ => vec![(id, vector)],
        }
    }

    /// The `search.depth` vector-index keys nearest to `embedding` among the vectors of the
    /// crystals of `search.namespace` that `admits` accepts, best first (equal scores by key,
    /// as the index orders them), each scored exactly. A scoped search then reads only its own
    /// namespace's vectors, however many other users' memories the node holds.
    ///
    /// None when the index's own filtered search serves the namespace better: it is large
    /// (over [`SCOPED_SCORING_ALWAYS`]) and so large a share of all memories that a graph's
    /// `ef_search` candidates are expected to hold `search.at_least` of its memories (fewer,
    /// and each segment would be scanned exactly anyway).
    pub(super) fn scoped_vector_hits(
        &self,
        search: ScopedSearch<'_>,
        embedding: &[f32],
        crystals: &FxHashMap<CrystalId, Crystal>,
        admits: &(dyn Fn(&Crystal) -> bool + Sync),
    ) -> Result<Option<Vec<(u64, f32)>>, Error> {
        let ScopedSearch { namespace, depth, at_least, own_only } = search;
        let scopes = read(&self.scopes);
        let members = scopes.members(namespace);
        let count = members.map_or(0, |m| m.len());
        let graph_serves =
            count.saturating_mul(self.vectors.config().ef_search) >= crystals.len().saturating_mul(at_least.max(1));
        if count > SCOPED_SCORING_ALWAYS && graph_serves {
            return Ok(None);
        }
        if depth == 0 {
            return Ok(Some(Vec::new()));
        }
        let members: Vec<CrystalId> = members.into_iter().flatten().copied().collect();
        let scorer = self.vectors.scorer(embedding)?;
        let extras = read(&self.extras);
        // Each core scores a share of the members, keeping its best `depth` keys; a member is
        // checked only when one of its keys would make that share's best. Only the keys a
        // crystal has are looked up: most have none beside their own.
        let share = |chunk: &[CrystalId]| {
            let mut best: Vec<(u64, f32)> = Vec::with_capacity(2 * depth + MAX_SENTENCES + 2);
            let mut floor = f32::NEG_INFINITY;
            let mut keys: Vec<u64> = Vec::with_capacity(LOOKED_UP_TOGETHER * 2);
            let mut scored: Vec<(u64, f32)> = Vec::with_capacity(LOOKED_UP_TOGETHER * 2);
            for together in chunk.chunks(LOOKED_UP_TOGETHER) {
                keys.clear();
                for &id in together {
                    keys.push(id);
                    if !own_only && let Some(extra) = extras.get(&id) {
                        keys.extend(extra.keys(id));
                    }
                }
                scored.clear();
                scorer.score_many(&keys, &mut scored);
                for one in scored.chunk_by(|a, b| crystal_of(a.0) == crystal_of(b.0)) {
                    let id = crystal_of(one[0].0);
                    let top = one.iter().map(|&(_, score)| score).fold(f32::NEG_INFINITY, f32::max);
                    if top < floor || !crystals.get(&id).is_some_and(admits) {
                        continue;
                    }
                    best.extend(one.iter().filter(|&&(_, score)| score >= floor));
                    if best.len() >= 2 * depth {
                        floor = keep_best(&mut best, depth);
                    }
                }
            }
            best
        };
        let mut scored = members.par_chunks(SCORED_PER_TASK).map(share).reduce(Vec::new, |mut all, more| {
            all.extend(more);
            keep_best(&mut all, depth);
            all
        });
        drop((scorer, extras));
        keep_best(&mut scored, depth);
        scored.sort_unstable_by(best_first);
        Ok(Some(scored))
    }
}

/// Best first, equal scores by key, as the vector index orders them.
fn best_first(a: &(u64, f32), b: &(u64, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Keeps the best `depth` of `scored` (in no order), and says the score a key must reach to
/// be among them once `depth` are kept.
fn keep_best(scored: &mut Vec<(u64, f32)>, depth: usize) -> f32 {
    if depth == 0 || scored.len() < depth {
        scored.truncate(depth);
        return f32::NEG_INFINITY;
    }
    if scored.len() > depth {
        scored.select_nth_unstable_by(depth - 1, best_first);
        scored.truncate(depth);
    }
    scored.iter().map(|&(_, score)| score).fold(f32::INFINITY, f32::min)
}
