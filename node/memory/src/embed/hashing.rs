//! The feature-hashing embedder: the fallback that needs no files and no network.
//!
//! A text becomes lowercase words (split on anything not alphanumeric). Each word, each pair of
//! neighbouring words, and each character 3-gram of a word (with boundary marks, so "eating" and
//! "eats" still share "<ea" and "eat") is hashed with FNV-1a into one of `dim` buckets, with a sign
//! from the same hash so collisions cancel on average instead of piling up. Buckets are damped
//! sublinearly (`sign · ln(1 + |x|)`, so a repeated stopword does not drown the rest) and the vector is
//! L2-normalised. The hash is fixed, so a vector is the same in every process, on every machine, forever:
//! vectors stored by one node stay comparable to those computed by another.

use super::{Embedder, Error, normalize};

/// Feature kinds, mixed into the hash so "ab" the word and "ab" the 3-gram land apart.
const WORD: u8 = b'w';
const PAIR: u8 = b'p';
const TRIGRAM: u8 = b't';

/// A word counts fully; a word pair half (order matters, but less than vocabulary).
const WORD_WEIGHT: f32 = 1.0;
const PAIR_WEIGHT: f32 = 0.5;
/// The squared weight all 3-grams of one word share, so long words do not outweigh short ones.
const TRIGRAM_ENERGY: f32 = 0.5;

/// Texts in one call from which embedding them is spread over the compute pool.
const PARALLEL_TEXTS: usize = 32;

/// Marks a word's start and end inside its 3-grams (control characters never occur inside a word).
const WORD_START: char = '\u{2}';
const WORD_END: char = '\u{3}';

/// Feature-hashing embedder: deterministic, file-free, microseconds per text; matches words, not meaning.
#[derive(Debug, Clone)]
pub struct Hashing {
    dim: usize,
    name: String,
}

impl Hashing {
    /// An embedder into `dim` buckets (at least 1: 0 is taken as 1, so no input can make it fail).
    pub fn new(dim: usize) -> Self {
        let dim = dim.max(1);
        Self { dim, name: format!("hashing-{dim}") }
    }

    /// One text's vector; always finite and of unit length.
    fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        let lower = text.to_lowercase();
        let mut previous: Option<&str> = None;
        let mut chars: Vec<char> = Vec::with_capacity(32);
        for word in lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            self.add(&mut v, Fnv::new(WORD).bytes(word.as_bytes()).finish(), WORD_WEIGHT);
            if let Some(previous) = previous {
                let hash = Fnv::new(PAIR).bytes(previous.as_bytes()).bytes(b" ").bytes(word.as_bytes()).finish();
                self.add(&mut v, hash, PAIR_WEIGHT);
            }
            previous = Some(word);

            chars.clear();
            chars.push(WORD_START);
            chars.extend(word.chars());
            chars.push(WORD_END);
            // A word has at least one char, so there are at least 3 chars and 1 window.
            let windows = chars.len().saturating_sub(2).max(1);
            let weight = (TRIGRAM_ENERGY / windows as f32).sqrt();
            for window in chars.windows(3) {
                let hash = window.iter().fold(Fnv::new(TRIGRAM), |h, c| h.char(*c));
                self.add(&mut v, hash.finish(), weight);
            }
        }
        for x in &mut v {
            *x = x.signum() * x.abs().ln_1p();
        }
        if normalize(&mut v) { v } else { self.no_words() }
    }

    /// Adds `weight` to the bucket `hash` picks, with the sign it picks.
    fn add(&self, v: &mut [f32], hash: u64, weight: f32) {
        let mixed = mix(hash);
        // `% dim` is below `dim`, so the index is in bounds and fits usize.
        let bucket = (mixed % self.dim as u64) as usize;
        if let Some(slot) = v.get_mut(bucket) {
            // The top bit is the sign, applied without a branch (half of them go each way, so
            // a branch would be mispredicted half the time); `x + -w` is exactly `x - w`.
            let sign = ((mixed >> 63) as u32) << 31;
            *slot += f32::from_bits(weight.to_bits() ^ sign);
        }
    }

    /// The vector of a text without words (empty, whitespace, punctuation): a zero vector has no
    /// direction, so all of them share one fixed unit vector spread evenly over every bucket with
    /// pseudo-random signs, whose cosine to any real text is small (about 1/sqrt(dim)).
    fn no_words(&self) -> Vec<f32> {
        let magnitude = 1.0 / (self.dim as f32).sqrt();
        (0..self.dim as u64)
            .map(|i| if mix(i ^ 0x6e6f_2d77_6f72_6473) >> 63 == 0 { magnitude } else { -magnitude })
            .collect()
    }
}

impl Embedder for Hashing {
    fn name(&self) -> &str {
        &self.name
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        // A batch (skills indexed from the swarm, an imported conversation) is split over the
        // compute pool; a few texts are not worth waking it.
        if texts.len() < PARALLEL_TEXTS {
            return Ok(texts.iter().map(|text| self.embed_one(text)).collect());
        }
        use rayon::prelude::*;
        Ok(texts.par_iter().with_min_len(PARALLEL_TEXTS / 2).map(|text| self.embed_one(text)).collect())
    }

    fn matches_words(&self) -> bool {
        true
    }
}

/// 64-bit FNV-1a: fixed, portable and fast on short keys (std's hasher is randomly keyed per process).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new(kind: u8) -> Self {
        Self(Self::OFFSET).bytes(&[kind])
    }

    /// `PRIME` to the fourth power: FNV-1a over a byte and three zero bytes is one XOR and
    /// this multiplication (XOR with zero changes nothing).
    const PRIME_4: u64 = Self::PRIME.wrapping_pow(4);

    fn bytes(self, bytes: &[u8]) -> Self {
        Self(bytes.iter().fold(self.0, |h, b| (h ^ u64::from(*b)).wrapping_mul(Self::PRIME)))
    }

    /// A char's four little-endian bytes; for a char below 256 (all of ASCII and Latin-1),
    /// the three zero bytes in one step.
    fn char(self, c: char) -> Self {
        let c = u32::from(c);
        if c < 256 { Self((self.0 ^ u64::from(c)).wrapping_mul(Self::PRIME_4)) } else { self.bytes(&c.to_le_bytes()) }
    }

    fn finish(self) -> u64 {
        self.0
    }
}

/// SplitMix64's finaliser: spreads FNV's weak high bits so bucket and sign are both well mixed.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::super::cosine;
    use super::*;

    fn one(embedder: &Hashing, text: &str) -> Vec<f32> {
        embedder.embed(&[text]).unwrap().remove(0)
    }

    fn norm(v: &[f32]) -> f32 {
        v.iter().map(|x| x * x).sum::<f32>().sqrt()
    }

    #[test]
    fn hashing_is_deterministic_across_calls_and_instances() {
        let texts = ["The quick brown fox jumps over the lazy dog.", "Ünïcödé wörds, ÇAPS and 42 numbers"];
        let first = Hashing::new(384).embed(&texts).unwrap();
        let again = Hashing::new(384).embed(&texts).unwrap();
        let same_instance = Hashing::new(384);
        assert_eq!(first, again);
        assert_eq!(same_instance.embed(&texts).unwrap(), same_instance.embed(&texts).unwrap());
    }

    #[test]
    fn a_char_hashes_as_its_four_little_endian_bytes() {
        for c in ['a', 'Z', '0', WORD_START, WORD_END, 'é', 'ÿ', 'Ā', '语', '🦀'] {
            let start = Fnv::new(TRIGRAM).bytes(b"xy");
            assert_eq!(start.char(c).finish(), start.bytes(&u32::from(c).to_le_bytes()).finish(), "{c}");
        }
    }

    #[test]
    fn hashing_output_is_pinned_across_processes_and_versions() {
        // Stored vectors must stay comparable with new ones: these buckets may only change with a new name.
        const PINNED: [f32; 16] = [
            0.15540336,
            0.0,
            -0.15540336,
            0.5739915,
            -0.1840551,
            0.0,
            0.0,
            0.12482059,
            0.15540336,
            -0.27095866,
            0.0,
            0.1840551,
            -0.21100527,
            0.27095866,
            0.0,
            -0.5686739,
        ];
        let v = one(&Hashing::new(16), "The cat sat on the mat");
        assert_eq!(v.len(), PINNED.len());
        for (got, want) in v.iter().zip(PINNED) {
            assert!((got - want).abs() < 1e-6, "{v:?}");
        }
    }

    #[test]
    fn hashing_vectors_are_unit_length() {
        let embedder = Hashing::new(384);
        for text in ["a", "hello world", "The mitochondria is the powerhouse of the cell.", "x y z x y z x y z"] {
            let v = one(&embedder, text);
            assert!((norm(&v) - 1.0).abs() < 1e-5, "{text}: {}", norm(&v));
        }
    }

    #[test]
    fn hashing_scores_paraphrase_above_unrelated_text() {
        let embedder = Hashing::new(384);
        let anchor = one(&embedder, "The weather in Paris is sunny and warm today");
        let paraphrase = one(&embedder, "Today Paris has warm, sunny weather");
        let unrelated = one(&embedder, "Quarterly revenue grew by twelve percent");
        let related = cosine(&anchor, &paraphrase);
        let other = cosine(&anchor, &unrelated);
        assert!(related > 0.5 && related > other + 0.3, "paraphrase {related}, unrelated {other}");
    }

    #[test]
    fn hashing_links_inflections_through_character_trigrams() {
        let embedder = Hashing::new(384);
        let eating = one(&embedder, "eating");
        assert!(cosine(&eating, &one(&embedder, "eats")) > cosine(&eating, &one(&embedder, "table")) + 0.1);
    }

    #[test]
    fn hashing_is_case_and_punctuation_insensitive() {
        let embedder = Hashing::new(384);
        assert_eq!(one(&embedder, "Hello, World!"), one(&embedder, "hello world"));
    }

    #[test]
    fn hashing_gives_texts_without_words_one_fixed_unit_vector() {
        let embedder = Hashing::new(384);
        let empty = one(&embedder, "");
        assert!((norm(&empty) - 1.0).abs() < 1e-5);
        assert!(empty.iter().all(|x| x.is_finite()));
        assert_eq!(empty, one(&embedder, "   \n\t"));
        assert_eq!(empty, one(&embedder, "?!… —"));
        assert!(cosine(&empty, &one(&embedder, "hello world")).abs() < 0.3);
    }

    #[test]
    fn hashing_handles_huge_inputs() {
        let embedder = Hashing::new(384);
        let long_text = "lorem ipsum dolor sit amet ".repeat(40_000);
        let long_word = "a".repeat(1 << 20);
        let vectors = embedder.embed(&[&long_text, &long_word]).unwrap();
        for v in vectors {
            assert!((norm(&v) - 1.0).abs() < 1e-5);
            assert!(v.iter().all(|x| x.is_finite()));
        }
    }

    #[test]
    fn hashing_respects_dim_and_names_it() {
        for dim in [1, 7, 384, 1024] {
            let embedder = Hashing::new(dim);
            assert_eq!(embedder.dim(), dim);
            assert_eq!(embedder.name(), format!("hashing-{dim}"));
            for v in embedder.embed(&["some text", ""]).unwrap() {
                assert_eq!(v.len(), dim);
                assert!((norm(&v) - 1.0).abs() < 1e-5);
            }
        }
        assert_eq!(Hashing::new(0).dim(), 1, "dim 0 is taken as 1 rather than failing");
    }

    #[test]
    fn hashing_returns_one_vector_per_text_in_order() {
        let embedder = Hashing::new(64);
        let batch = embedder.embed(&["alpha", "beta", "gamma"]).unwrap();
        assert_eq!(batch, vec![one(&embedder, "alpha"), one(&embedder, "beta"), one(&embedder, "gamma")]);
        assert!(embedder.embed(&[]).unwrap().is_empty());
        // A batch large enough to be split over the compute pool keeps its order too.
        let texts: Vec<String> = (0..3 * PARALLEL_TEXTS).map(|i| format!("text number {i}")).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let singles: Vec<Vec<f32>> = texts.iter().map(|t| one(&embedder, t)).collect();
        assert_eq!(embedder.embed(&texts).unwrap(), singles);
    }

    #[test]
    #[ignore = "timing, not correctness: run with --release --ignored --nocapture to quote the figure"]
    fn hashing_1kib_text_latency() {
        let embedder = Hashing::new(384);
        let text = "Crystals decay, consolidate and supersede one another as the agent learns. ".repeat(14);
        assert!(text.len() >= 1024);
        let mut times: Vec<std::time::Duration> = (0..2000)
            .map(|_| {
                let start = std::time::Instant::now();
                std::hint::black_box(embedder.embed(&[&text]).unwrap());
                start.elapsed()
            })
            .collect();
        times.sort();
        println!("hashing-384, {} byte text: p50 {:?}, p99 {:?}", text.len(), times[1000], times[1980]);
    }
}
