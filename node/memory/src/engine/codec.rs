//! How the engine names and stores a memory's vectors: the vector-index keys of a crystal's
//! own, context and sentence vectors, and the bytes a vector is stored as.

use rustc_hash::FxHashMap;

use crate::crystal::CrystalId;

/// Vector-index keys. A crystal's id (the engine's counter) stays far below 2^56, so the top byte of
/// a key says which of its vectors it holds: none set, its own; the top bit, its conversation
/// context; 1 to [`MAX_SENTENCES`](crate::sentences::MAX_SENTENCES) in the bits from 56, one of its sentences.
pub(super) const CONTEXT_BIT: u64 = 1 << 63;
pub(super) const SENTENCE_SHIFT: u32 = 56;
pub(super) const ID_BITS: u64 = (1 << SENTENCE_SHIFT) - 1;

/// The crystal a vector-index key belongs to.
pub(super) fn crystal_of(vkey: u64) -> CrystalId {
    vkey & ID_BITS
}

/// Whether a vector-index key holds its crystal's own vector.
pub(super) fn is_own(vkey: u64) -> bool {
    vkey & !ID_BITS == 0
}

/// The keys a crystal has in the vector index beside its own vector's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Extra {
    /// Its conversation context's vector.
    pub(super) context: bool,
    /// How many sentence vectors, numbered from 1.
    pub(super) sentences: u8,
}

impl Extra {
    /// Its keys, for crystal `id`.
    pub(super) fn keys(self, id: CrystalId) -> impl Iterator<Item = u64> {
        let context = self.context.then_some(id | CONTEXT_BIT);
        context.into_iter().chain((1..=u64::from(self.sentences)).map(move |n| id | (n << SENTENCE_SHIFT)))
    }
}

/// Records in `extras` each of `keys` that is not its crystal's own vector's. What is
/// recorded only grows (a crystal's fewer sentences later leave its count as it was), so
/// every key a crystal has is among its recorded ones.
pub(super) fn note_extras(extras: &mut FxHashMap<CrystalId, Extra>, keys: impl IntoIterator<Item = u64>) {
    for key in keys.into_iter().filter(|&key| !is_own(key)) {
        let extra = extras.entry(crystal_of(key)).or_default();
        match key & CONTEXT_BIT != 0 {
            true => extra.context = true,
            false => extra.sentences = extra.sentences.max(((key & !CONTEXT_BIT) >> SENTENCE_SHIFT) as u8),
        }
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
    use crate::embed;
    use crate::sentences::MAX_SENTENCES;

    fn unit(seed: u32, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> =
            (0..dim).map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 - 1000.0).collect();
        assert!(embed::normalize(&mut v));
        v
    }

    #[test]
    fn the_extra_keys_noted_for_a_crystal_are_the_ones_it_has() {
        let mut extras = FxHashMap::default();
        let sentences = |id: CrystalId, n: u64| (1..=n).map(move |n| id | (n << SENTENCE_SHIFT));
        note_extras(&mut extras, [7, 8, 7 | CONTEXT_BIT].into_iter().chain(sentences(9, 3)));
        assert_eq!(extras.len(), 2, "no entry for a crystal with only its own vector: {extras:?}");
        assert_eq!(extras[&7], Extra { context: true, sentences: 0 });
        assert_eq!(extras[&9], Extra { context: false, sentences: 3 });
        let mut keys: Vec<u64> = extras[&9].keys(9).collect();
        keys.sort_unstable();
        assert_eq!(keys, sentences(9, 3).collect::<Vec<_>>());
        assert_eq!(extras[&7].keys(7).collect::<Vec<_>>(), [7 | CONTEXT_BIT]);
        // Fewer sentences later: the count stays, so no key is ever left out.
        note_extras(&mut extras, sentences(9, 1).chain(sentences(7, MAX_SENTENCES as u64)));
        assert_eq!(extras[&9].sentences, 3);
        assert_eq!(extras[&7], Extra { context: true, sentences: MAX_SENTENCES as u8 });
        assert!(extras[&7].keys(7).all(|key| crystal_of(key) == 7 && !is_own(key)));
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
