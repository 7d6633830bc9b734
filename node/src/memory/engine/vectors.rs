//! A memory's vectors: its own, its context's and its sentences', each a key of its own in the
//! vector index, and how they are embedded and indexed.

use rustc_hash::FxHashMap;

use super::{CONTEXT, Error, Memory, SENTENCES, read};
use crate::memory::crystal::{Crystal, CrystalId, Namespace};
use crate::memory::embed;
use crate::memory::sentences::{MAX_SENTENCES, sentence_texts};

/// A memory's own vector, and its sentence vectors one after another (empty for one sentence).
pub(super) type Embedded = (Vec<f32>, Vec<f32>);

/// Vector-index keys. A crystal's id (the engine's counter) stays far below 2^56, so the top byte of
/// a key says which of its vectors it holds: none set, its own; the top bit, its conversation
/// context; 1 to [`MAX_SENTENCES`] in the bits from 56, one of its sentences.
pub(super) const CONTEXT_BIT: u64 = 1 << 63;
const SENTENCE_SHIFT: u32 = 56;
const ID_BITS: u64 = (1 << SENTENCE_SHIFT) - 1;

/// A namespace of up to this many memories has its vectors scored one by one (about 1–2 ms for
/// memories of a few vectors each); a larger one only when the index's graphs could not serve
/// it (see [`Memory::scoped_vector_hits`]).
const SCOPED_SCORING_ALWAYS: usize = 4096;

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

/// The crystal a vector-index key belongs to.
pub(super) fn crystal_of(vkey: u64) -> CrystalId {
    vkey & ID_BITS
}

/// Whether a vector-index key holds its crystal's own vector.
pub(super) fn is_own(vkey: u64) -> bool {
    vkey & !ID_BITS == 0
}

/// Every key a crystal's vectors may have in the index, to remove them all.
pub(super) fn vector_keys(id: CrystalId) -> impl Iterator<Item = u64> {
    let sentences = (1..=MAX_SENTENCES as u64).map(move |n| id | (n << SENTENCE_SHIFT));
    [id, id | CONTEXT_BIT].into_iter().chain(sentences)
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

    /// Puts a stored vector record (`prefix` says which) into the vector index under its key;
    /// a sentence record holds one vector per sentence.
    pub(super) fn index_vector(&self, prefix: u8, id: CrystalId, vector: &[f32]) -> Result<(), Error> {
        match prefix {
            CONTEXT => self.vectors.insert(id | CONTEXT_BIT, vector)?,
            SENTENCES if id <= ID_BITS => {
                let dim = self.embedder.dim().max(1);
                for (n, one) in (1..=MAX_SENTENCES as u64).zip(vector.chunks_exact(dim)) {
                    self.vectors.insert(id | (n << SENTENCE_SHIFT), one)?;
                }
            }
            SENTENCES => {}
            _ => self.vectors.insert(id, vector)?,
        }
        Ok(())
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
        admits: &dyn Fn(&Crystal) -> bool,
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
        let scorer = self.vectors.scorer(embedding)?;
        let mut scored = Vec::with_capacity(count * 3);
        for &id in members.into_iter().flatten() {
            if !crystals.get(&id).is_some_and(admits) {
                continue;
            }
            if own_only {
                scored.extend(scorer.score(id).map(|score| (id, score)));
                continue;
            }
            for vkey in [id, id | CONTEXT_BIT] {
                scored.extend(scorer.score(vkey).map(|score| (vkey, score)));
            }
            // Sentence keys are numbered from 1 without gaps.
            for n in 1..=MAX_SENTENCES as u64 {
                let vkey = id | (n << SENTENCE_SHIFT);
                let Some(score) = scorer.score(vkey) else { break };
                scored.push((vkey, score));
            }
        }
        drop(scorer);
        let best_first = |a: &(u64, f32), b: &(u64, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if scored.len() > depth && depth > 0 {
            scored.select_nth_unstable_by(depth - 1, best_first);
        }
        scored.truncate(depth);
        scored.sort_unstable_by(best_first);
        Ok(Some(scored))
    }
}

/// The first byte of a vector stored quantized. A record of the older form, f32s only, has a
/// length divisible by four; a quantized one (this byte, an f32 scale, an i16 per value) has
/// an odd length, so the two never mix up.
const QUANTIZED: u8 = b'q';

/// The steps on each side of zero a quantized value has.
const QUANTA: f32 = i16::MAX as f32;

/// A vector as stored: each value as an i16 step of the largest magnitude in the vector, half
/// the bytes of f32s, which keeps the store's writes and the disk small. Values come back
/// within 1/65,534 of that magnitude (for a unit vector, well under 1e-4 of its cosines; the
/// vector index keeps coarser i16s still). A vector with a value that is not finite is kept
/// as f32s, as it came.
pub(super) fn encode_vector(v: &[f32]) -> Vec<u8> {
    if v.iter().any(|x| !x.is_finite()) {
        return v.iter().flat_map(|x| x.to_le_bytes()).collect();
    }
    let scale = v.iter().fold(0f32, |max, x| max.max(x.abs()));
    let mut out = Vec::with_capacity(5 + 2 * v.len());
    out.push(QUANTIZED);
    out.extend_from_slice(&scale.to_le_bytes());
    let step = if scale > 0.0 { QUANTA / scale } else { 0.0 };
    for x in v {
        // Within ±QUANTA by the choice of scale; the cast saturates either way.
        out.extend_from_slice(&((x * step).round() as i16).to_le_bytes());
    }
    out
}

/// Reads a vector [`encode_vector`] wrote, or one of the older f32 form.
pub(super) fn decode_vector(bytes: &[u8]) -> Vec<f32> {
    match bytes {
        [QUANTIZED, a, b, c, d, values @ ..] if bytes.len() % 2 == 1 => {
            let unit = f32::from_le_bytes([*a, *b, *c, *d]) / QUANTA;
            values.chunks_exact(2).map(|q| f32::from(i16::from_le_bytes([q[0], q[1]])) * unit).collect()
        }
        _ => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u32, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> =
            (0..dim).map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 - 1000.0).collect();
        assert!(embed::normalize(&mut v));
        v
    }

    #[test]
    fn a_stored_vector_comes_back_within_its_quantum_in_half_the_bytes() {
        for seed in 0..8 {
            let v = unit(seed, 384);
            let bytes = encode_vector(&v);
            assert_eq!(bytes.len(), 5 + 2 * 384, "half of the f32 form, and odd");
            let back = decode_vector(&bytes);
            assert_eq!(back.len(), v.len());
            let scale = v.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (a, b) in v.iter().zip(&back) {
                assert!((a - b).abs() <= scale / QUANTA, "{a} came back as {b}");
            }
            let cosine: f32 = v.iter().zip(&back).map(|(a, b)| a * b).sum();
            assert!((cosine - 1.0).abs() < 1e-4, "{cosine}");
            // The largest value comes back as it went in: it sets the scale.
            let top = v.iter().zip(&back).max_by(|a, b| a.0.abs().total_cmp(&b.0.abs())).unwrap();
            assert!((top.0 - top.1).abs() < 1e-6);
        }
    }

    #[test]
    fn vectors_of_the_older_form_and_odd_ones_read_as_they_were_written() {
        let v = unit(3, 256);
        let older: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(decode_vector(&older), v, "a record of f32s, as earlier versions stored it");
        // Sentence vectors, several unit vectors one after another, share one scale.
        let sentences = [unit(1, 64), unit(2, 64)].concat();
        let back = decode_vector(&encode_vector(&sentences));
        assert!(sentences.iter().zip(&back).all(|(a, b)| (a - b).abs() < 1e-4));
        assert_eq!(decode_vector(&encode_vector(&[0.0; 8])), vec![0.0; 8], "all zeros");
        assert!(decode_vector(&encode_vector(&[])).is_empty());
        // A value that is not finite keeps the exact form rather than poisoning the scale.
        let odd = [1.0, f32::INFINITY, -0.5];
        assert_eq!(encode_vector(&odd).len(), 12);
        assert_eq!(decode_vector(&encode_vector(&odd)), odd);
        let nan = decode_vector(&encode_vector(&[0.5, f32::NAN]));
        assert!(nan[0] == 0.5 && nan[1].is_nan(), "NaN kept as it came: {nan:?}");
    }
}
