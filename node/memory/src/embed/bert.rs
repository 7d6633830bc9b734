//! A BERT encoder on the CPU, as sentence embedders use it (all-MiniLM-L6-v2 is one): token,
//! position and segment embeddings, then layers of self-attention and a GELU feed-forward block,
//! each closed by a residual sum and a layer norm; the output is the mean of the last layer's
//! token vectors for each text.
//!
//! Texts are not padded: a batch's tokens are laid end to end, every linear layer runs over all
//! of them in one product ([`kernel::Linear`]), and attention looks only within each text's own
//! tokens. That gives what a padded batch with an attention mask gives (a masked key's weight is
//! 0 there), without computing the padding.
//!
//! Weights come from a safetensors file with the names Hugging Face's `BertModel` writes (with or
//! without a `bert.` prefix), in f32, f16 or bf16; the pooler, if present, is not used.

use std::ops::Range;

use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};

mod kernel;
#[cfg(test)]
mod tests;

use kernel::Linear;

/// Attention work (multiply-adds) above which a batch's rows are attended on several threads.
const PARALLEL_ATTENTION: usize = 1 << 19;
/// Bounds on a config's sizes, so that a broken config.json fails with a message instead of
/// asking for terabytes.
const MAX_WIDTH: usize = 1 << 14;
const MAX_LAYERS: usize = 128;
const MAX_VOCAB: usize = 1 << 22;

/// The part of a Hugging Face BERT config.json the forward pass needs.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub(super) struct Config {
    pub(super) vocab_size: usize,
    pub(super) hidden_size: usize,
    pub(super) num_hidden_layers: usize,
    pub(super) num_attention_heads: usize,
    pub(super) intermediate_size: usize,
    #[serde(default = "Config::gelu")]
    pub(super) hidden_act: String,
    pub(super) max_position_embeddings: usize,
    #[serde(default = "Config::two")]
    pub(super) type_vocab_size: usize,
    #[serde(default = "Config::epsilon")]
    pub(super) layer_norm_eps: f64,
    #[serde(default = "Config::absolute")]
    pub(super) position_embedding_type: String,
}

impl Config {
    fn gelu() -> String {
        "gelu".into()
    }
    fn two() -> usize {
        2
    }
    fn epsilon() -> f64 {
        1e-12
    }
    fn absolute() -> String {
        "absolute".into()
    }

    /// Why the forward pass cannot run this config, if it cannot.
    fn check(&self) -> Result<(), String> {
        if self.hidden_act != "gelu" {
            return Err(format!("hidden_act {:?} is not supported (only \"gelu\")", self.hidden_act));
        }
        if self.position_embedding_type != "absolute" {
            return Err(format!(
                "position_embedding_type {:?} is not supported (only \"absolute\")",
                self.position_embedding_type
            ));
        }
        let sizes = [
            ("hidden_size", self.hidden_size, MAX_WIDTH),
            ("intermediate_size", self.intermediate_size, 4 * MAX_WIDTH),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_WIDTH),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("max_position_embeddings", self.max_position_embeddings, MAX_WIDTH),
            ("type_vocab_size", self.type_vocab_size, MAX_WIDTH),
        ];
        for (name, value, max) in sizes {
            if value == 0 || value > max {
                return Err(format!("{name} is {value}; it must be between 1 and {max}"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(format!("layer_norm_eps {} must be a positive number", self.layer_norm_eps));
        }
        Ok(())
    }
}

/// One text's tokens, as the tokenizer gave them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Text<'a> {
    pub(super) ids: &'a [u32],
    pub(super) types: &'a [u32],
}

/// A layer norm's scale and shift.
#[derive(Debug)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

/// One encoder layer.
#[derive(Debug)]
struct Layer {
    /// The query, key and value projections as one product: each row's output is q | k | v.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    up: Linear,
    down: Linear,
    output_norm: Norm,
}

/// The encoder, its weights packed for [`kernel::Linear`].
#[derive(Debug)]
pub(super) struct Bert {
    hidden: usize,
    heads: usize,
    intermediate: usize,
    vocab: usize,
    types: usize,
    positions: usize,
    epsilon: f32,
    /// `vocab × hidden`, `positions × hidden`, `types × hidden`.
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: Norm,
    layers: Vec<Layer>,
}

impl Bert {
    /// The encoder from a safetensors file's bytes; the error says what is missing or wrong.
    pub(super) fn load(bytes: &[u8], config: &Config) -> Result<Self, String> {
        config.check()?;
        let file = SafeTensors::deserialize(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
        let weights = Weights { file };
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let norm = |prefix: &str| -> Result<Norm, String> {
            Ok(Norm {
                weight: weights.get(&format!("{prefix}.LayerNorm.weight"), &[h])?,
                bias: weights.get(&format!("{prefix}.LayerNorm.bias"), &[h])?,
            })
        };
        let linear = |name: &str, outputs: usize, inputs: usize| -> Result<Linear, String> {
            let weight = weights.get(&format!("{name}.weight"), &[outputs, inputs])?;
            let bias = weights.get(&format!("{name}.bias"), &[outputs])?;
            Ok(Linear::new(&weight, &bias, outputs, inputs))
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for n in 0..config.num_hidden_layers {
            let at = format!("encoder.layer.{n}");
            let (mut weight, mut bias) = (Vec::with_capacity(3 * h * h), Vec::with_capacity(3 * h));
            for part in ["query", "key", "value"] {
                weight.extend(weights.get(&format!("{at}.attention.self.{part}.weight"), &[h, h])?);
                bias.extend(weights.get(&format!("{at}.attention.self.{part}.bias"), &[h])?);
            }
            layers.push(Layer {
                qkv: Linear::new(&weight, &bias, 3 * h, h),
                attention_out: linear(&format!("{at}.attention.output.dense"), h, h)?,
                attention_norm: norm(&format!("{at}.attention.output"))?,
                up: linear(&format!("{at}.intermediate.dense"), i, h)?,
                down: linear(&format!("{at}.output.dense"), h, i)?,
                output_norm: norm(&format!("{at}.output"))?,
            });
        }
        Ok(Self {
            hidden: h,
            heads: config.num_attention_heads,
            intermediate: i,
            vocab: config.vocab_size,
            types: config.type_vocab_size,
            positions: config.max_position_embeddings,
            epsilon: config.layer_norm_eps as f32,
            word: weights.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position: weights.get("embeddings.position_embeddings.weight", &[config.max_position_embeddings, h])?,
            token_type: weights.get("embeddings.token_type_embeddings.weight", &[config.type_vocab_size, h])?,
            embedding_norm: norm("embeddings")?,
            layers,
        })
    }

    /// The width of the vectors [`Bert::embed`] returns.
    pub(super) fn hidden(&self) -> usize {
        self.hidden
    }

    /// The mean of the last layer's token vectors, for each text (not normalised).
    pub(super) fn embed(&self, texts: &[Text<'_>]) -> Result<Vec<Vec<f32>>, String> {
        let mut spans = Vec::with_capacity(texts.len());
        let mut rows = 0;
        for (n, text) in texts.iter().enumerate() {
            self.check(n, text)?;
            spans.push(rows..rows + text.ids.len());
            rows += text.ids.len();
        }
        let h = self.hidden;
        let mut x = vec![0.0f32; rows * h];
        for (text, span) in texts.iter().zip(&spans) {
            let tokens = x[span.start * h..span.end * h].chunks_exact_mut(h);
            for (position, (row, (&id, &kind))) in tokens.zip(text.ids.iter().zip(text.types)).enumerate() {
                let word = &self.word[id as usize * h..][..h];
                let at = &self.position[position * h..][..h];
                let kind = &self.token_type[kind as usize * h..][..h];
                for (((v, a), b), c) in row.iter_mut().zip(word).zip(at).zip(kind) {
                    *v = a + b + c;
                }
                self.norm(row, &self.embedding_norm);
            }
        }

        // Which keys each row attends to (its own text's), and whether attention is worth the
        // compute pool's threads: the same for every layer.
        let keys: Vec<Range<usize>> =
            spans.iter().flat_map(|span| std::iter::repeat_n(span.clone(), span.len())).collect();
        let work: usize = spans.iter().map(|span| span.len() * span.len()).sum::<usize>() * 2 * h;
        let parallel = work >= PARALLEL_ATTENTION;

        let mut qkv = vec![0.0f32; rows * 3 * h];
        let mut context = vec![0.0f32; rows * h];
        let mut projected = vec![0.0f32; rows * h];
        let mut inner = vec![0.0f32; rows * self.intermediate];
        for layer in &self.layers {
            layer.qkv.forward(&x, rows, &mut qkv);
            self.attend(&qkv, &keys, parallel, &mut context);
            layer.attention_out.forward(&context, rows, &mut projected);
            self.add_and_norm(&mut x, &projected, &layer.attention_norm);
            layer.up.forward(&x, rows, &mut inner);
            kernel::gelu(&mut inner);
            layer.down.forward(&inner, rows, &mut projected);
            self.add_and_norm(&mut x, &projected, &layer.output_norm);
        }

        Ok(spans
            .iter()
            .map(|span| {
                let mut mean = vec![0.0f32; h];
                for row in x[span.start * h..span.end * h].chunks_exact(h) {
                    for (m, v) in mean.iter_mut().zip(row) {
                        *m += v;
                    }
                }
                let count = span.len() as f32;
                mean.iter_mut().for_each(|m| *m /= count);
                mean
            })
            .collect())
    }

    /// Why text `n` cannot be embedded, if it cannot: ids and segments from another vocabulary,
    /// or more tokens than positions.
    fn check(&self, n: usize, text: &Text<'_>) -> Result<(), String> {
        if text.ids.is_empty() {
            return Err(format!("text {n} has no tokens"));
        }
        if text.types.len() != text.ids.len() {
            return Err(format!("text {n} has {} token ids but {} segment ids", text.ids.len(), text.types.len()));
        }
        if text.ids.len() > self.positions {
            return Err(format!("text {n} has {} tokens; the model holds {}", text.ids.len(), self.positions));
        }
        if let Some(id) = text.ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(format!("text {n} has token id {id}, outside the vocabulary of {}", self.vocab));
        }
        if let Some(kind) = text.types.iter().find(|&&kind| kind as usize >= self.types) {
            return Err(format!("text {n} has segment id {kind}; the model has {}", self.types));
        }
        Ok(())
    }

    /// Self-attention: each row's query against the keys of its own text (`keys`, by row), every
    /// head, into `context` (`rows × hidden`, the heads side by side).
    fn attend(&self, qkv: &[f32], keys: &[Range<usize>], parallel: bool, context: &mut [f32]) {
        let h = self.hidden;
        let row = |(n, out): (usize, &mut [f32]), scores: &mut Vec<f32>| self.attend_row(qkv, n, &keys[n], out, scores);
        if parallel {
            context.par_chunks_exact_mut(h).enumerate().for_each_init(Vec::new, |scores, item| row(item, scores));
        } else {
            let mut scores = Vec::new();
            context.chunks_exact_mut(h).enumerate().for_each(|item| row(item, &mut scores));
        }
    }

    fn attend_row(&self, qkv: &[f32], n: usize, keys: &Range<usize>, out: &mut [f32], scores: &mut Vec<f32>) {
        let h = self.hidden;
        let d = h / self.heads;
        let scale = 1.0 / (d as f32).sqrt();
        for head in 0..self.heads {
            let query = &qkv[n * 3 * h + head * d..][..d];
            scores.clear();
            scores.extend(keys.clone().map(|j| dot(query, &qkv[j * 3 * h + h + head * d..][..d]) * scale));
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum = kernel::exp_shifted(scores, max);
            let out = &mut out[head * d..][..d];
            out.fill(0.0);
            for (j, weight) in keys.clone().zip(scores.iter()) {
                let value = &qkv[j * 3 * h + 2 * h + head * d..][..d];
                let weight = weight / sum;
                for (o, v) in out.iter_mut().zip(value) {
                    *o += weight * v;
                }
            }
        }
    }

    /// `x = norm(x + y)`, row by row.
    fn add_and_norm(&self, x: &mut [f32], y: &[f32], norm: &Norm) {
        for (row, add) in x.chunks_exact_mut(self.hidden).zip(y.chunks_exact(self.hidden)) {
            row.iter_mut().zip(add).for_each(|(v, a)| *v += a);
            self.norm(row, norm);
        }
    }

    fn norm(&self, row: &mut [f32], norm: &Norm) {
        let n = row.len() as f32;
        let mean = row.iter().sum::<f32>() / n;
        let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let inverse = 1.0 / (variance + self.epsilon).sqrt();
        for ((v, w), b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
            *v = (*v - mean) * inverse * w + b;
        }
    }
}

/// The dot product of two equal-length slices, in eight lanes so that it vectorises.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a8.zip(b8) {
        for ((l, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *l += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A safetensors file's tensors, read as f32.
struct Weights<'a> {
    file: SafeTensors<'a>,
}

impl Weights<'_> {
    /// The tensor `name` (or `bert.{name}`), which must have `shape`, as f32 values.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let prefixed = format!("bert.{name}");
        let tensor = self
            .file
            .tensor(name)
            .or_else(|_| self.file.tensor(&prefixed))
            .map_err(|_| format!("the file has no tensor {name}"))?;
        if tensor.shape() != shape {
            return Err(format!("tensor {name} has shape {:?}; the config needs {shape:?}", tensor.shape()));
        }
        let data = tensor.data();
        let values: Vec<f32> = match tensor.dtype() {
            Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
                .collect(),
            Dtype::F16 => data.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect(),
            other => return Err(format!("tensor {name} is {other:?}; only F32, F16 and BF16 are read")),
        };
        if values.iter().any(|v| !v.is_finite()) {
            return Err(format!("tensor {name} holds a value that is not finite"));
        }
        Ok(values)
    }
}

/// An IEEE half-precision float's value.
fn f16_to_f32(bits: u16) -> f32 {
    let sign = if bits & 0x8000 == 0 { 1.0 } else { -1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = f32::from(bits & 0x3ff);
    match exponent {
        0 => sign * mantissa * 2f32.powi(-24),
        31 if mantissa == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        _ => sign * (1.0 + mantissa / 1024.0) * 2f32.powi(exponent - 15),
    }
}
