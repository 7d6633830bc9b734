//! Embedders: text to unit vectors, so the memory engine can find crystals by meaning (DESIGN §3, §8).
//!
//! Three implementations sit behind one blocking trait, [`Embedder`]:
//!
//! - [`Hashing`]: feature hashing. Zero files, always there, microseconds per text; it matches
//!   shared words and word pieces, not meaning.
//! - [`MiniLm`]: all-MiniLM-L6-v2 (384-d) on the CPU, when its weights are on disk.
//! - [`OpenAi`]: any OpenAI-compatible `POST /v1/embeddings` endpoint.
//!
//! [`from_config`] picks one; [`for_node`] does the same for a node, which may also find or
//! fetch MiniLM in its data directory ([`fetch`]). Every vector that leaves this module is L2-normalised and finite, so the
//! cosine of two of them is their dot product ([`cosine`]).
//!
//! Embedding is blocking (CPU-bound or blocking HTTP): async callers wrap it in
//! `tokio::task::spawn_blocking`.

use std::path::PathBuf;
use std::time::Duration;

mod bert;
mod choose;
pub mod fetch;
mod hashing;
mod minilm;
mod openai;
#[cfg(test)]
mod tests;

pub use choose::{for_node, from_config};
pub use hashing::Hashing;
pub use minilm::MiniLm;
pub use openai::OpenAi;

/// The environment variable naming a folder with the MiniLM weights, so CI and operators need no config file.
pub const MINILM_DIR_ENV: &str = "DRUSE_MINILM_DIR";

/// The hashing embedder's dimension when the config names none: the same as MiniLM's, so indexes are alike.
pub const DEFAULT_HASHING_DIM: usize = 384;

/// The environment variable rayon reads for the size of its pool.
const COMPUTE_THREADS_ENV: &str = "RAYON_NUM_THREADS";

/// Sizes the compute pool (rayon's global pool, where the model's products and the verify
/// workers run) once, for the whole process: one thread per physical core, but no more than the
/// CPUs this process may use, so a container's quota holds. Two hyperthreads of one core share its
/// vector units, so a second thread there only contends. A size the operator set in
/// `RAYON_NUM_THREADS` is left to rayon.
///
/// Call it before anything uses the pool (the node's binaries do, in their `block_on`); once the
/// pool exists, it keeps its size and this does nothing.
pub fn settle_compute_threads() {
    if std::env::var_os(COMPUTE_THREADS_ENV).is_some() {
        return;
    }
    let usable = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let threads = num_cpus::get_physical().clamp(1, usable);
    // The only error is a pool that already exists, which keeps the size it was built with.
    let _ = rayon::ThreadPoolBuilder::new().num_threads(threads).build_global();
}

/// Text → unit-length vector. Implementations are blocking; async callers use spawn_blocking.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Names the model, so stored vectors can be told apart from another model's (e.g. "hashing-384").
    fn name(&self) -> &str;
    /// The length of every vector this embedder returns, so indexes can be sized before the first text.
    fn dim(&self) -> usize;
    /// One L2-normalised vector per text, in the order of `texts`.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error>;
    /// Whether its vectors match words rather than meaning (feature hashing): recall then
    /// indexes a turn's context vector with the words of its day, which only words can match.
    fn matches_words(&self) -> bool {
        false
    }
}

/// Why an embedder could not be built or could not embed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file the model needs is not in its folder.
    #[error("embedding model file not found: {}", path.display())]
    MissingFile {
        /// The file that was looked for.
        path: PathBuf,
    },
    /// A model file exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file that failed.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The model's config.json is not a BERT config.
    #[error("invalid model config {}: {source}", path.display())]
    ModelConfig {
        /// The config file.
        path: PathBuf,
        /// What the parser found wrong.
        #[source]
        source: serde_json::Error,
    },
    /// tokenizer.json could not be loaded.
    #[error("cannot load tokenizer {}: {source}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What the tokenizers crate reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The tokenizer failed on an input text.
    #[error("tokenizing input failed: {0}")]
    Tokenize(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The weights file does not fit the model.
    #[error("cannot load model weights {}: {reason}", path.display())]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// What is missing or wrong in it.
        reason: String,
    },
    /// The model's forward pass failed.
    #[error("model inference failed: {0}")]
    Inference(String),
    /// The embedding endpoint could not be reached, or did not answer in time.
    #[error("embedding request to {endpoint} failed: {}", http_failure(source))]
    Http {
        /// The URL that was requested.
        endpoint: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The embedding endpoint answered with a non-success status.
    #[error("embedding endpoint {endpoint} answered HTTP {status}: {body}")]
    Status {
        /// The URL that was requested.
        endpoint: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the response body, for the operator.
        body: String,
    },
    /// The embedding endpoint answered 2xx with something that is not an embeddings response.
    #[error("malformed response from embedding endpoint {endpoint}: {reason}")]
    Malformed {
        /// The URL that was requested.
        endpoint: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The embedding endpoint returned vectors of another length than configured or than before.
    #[error("embedding endpoint {endpoint} returned {got}-dimensional vectors, expected {expected}")]
    Dim {
        /// The URL that was requested.
        endpoint: String,
        /// The configured or first-seen dimension.
        expected: usize,
        /// The dimension in this answer.
        got: usize,
    },
    /// The embedder configuration is inconsistent.
    #[error("invalid embedder configuration: {0}")]
    Config(String),
    /// The worker thread that keeps a blocking request off the async runtime failed.
    #[error("embedding worker thread failed: {0}")]
    Worker(String),
    /// `embedder = "minilm"` was asked for and the model could not be fetched.
    #[error("all-MiniLM-L6-v2 is required (memory.embed.embedder = \"minilm\") but {0}; {how}", how = fetch::HOW_TO_FIX)]
    Fetch(#[source] fetch::Error),
}

/// Which embedder a node uses (`memory.embed.embedder`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    /// An OpenAI-compatible endpoint when `openai_url` is set; else MiniLM from a folder, the data
    /// directory or a download; else the hashing embedder, with one warning that says why.
    #[default]
    Auto,
    /// The hashing embedder, whatever else is configured; nothing is downloaded.
    Hashing,
    /// MiniLM (from a folder, the data directory or a download), or the node refuses to start.
    Minilm,
    /// The OpenAI-compatible endpoint `openai_url` names, or the node refuses to start.
    Openai,
}

/// Which embedder a node uses (the `[memory.embed]` part of its config), so operators choose without code.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `auto` (the default), `hashing`, `minilm` or `openai`: see [`Choice`].
    pub embedder: Choice,
    /// A folder holding model.safetensors and tokenizer.json (and config.json) of all-MiniLM-L6-v2.
    /// When set, it must be valid; when unset, `DRUSE_MINILM_DIR` is tried.
    pub minilm_dir: Option<PathBuf>,
    /// Base URL of an OpenAI-compatible server (e.g. `http://127.0.0.1:11434`); takes precedence over MiniLM.
    pub openai_url: Option<String>,
    /// The model the OpenAI-compatible server should use; required with `openai_url`.
    pub openai_model: Option<String>,
    /// The name of the environment variable holding the API key (never the key itself, which is never logged).
    pub openai_api_key_env: Option<String>,
    /// Vector dimension: the hashing embedder's bucket count (default 384), or the dimension the
    /// OpenAI-compatible endpoint must return (learned from a probe request when unset). MiniLM ignores it.
    pub dim: Option<usize>,
    /// Whether a node with no model folder downloads all-MiniLM-L6-v2 from the Hugging Face hub (or
    /// `HF_ENDPOINT`) into its data directory. Off in `Config::default()`, so library code and tests
    /// never reach the network; `druse-node run` and `druse-mgmt run` turn it on.
    pub download: bool,
    /// Bound on the hub's first answer; an unreachable hub costs a start no more than this.
    #[serde(with = "humantime_serde")]
    pub download_connect_timeout: Duration,
    /// Bound on the whole download (about 90 MB).
    #[serde(with = "humantime_serde")]
    pub download_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            embedder: Choice::Auto,
            minilm_dir: None,
            openai_url: None,
            openai_model: None,
            openai_api_key_env: None,
            dim: None,
            download: false,
            download_connect_timeout: fetch::DEFAULT_CONNECT_TIMEOUT,
            download_timeout: fetch::DEFAULT_TIMEOUT,
        }
    }
}

/// A transport error's kind in words; the details stay in the error's source chain.
fn http_failure(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else if error.is_body() || error.is_decode() {
        "the response broke off"
    } else if error.is_builder() {
        "the request could not be built"
    } else {
        "transport error"
    }
}

/// Dot product of unit vectors, i.e. their cosine: the similarity every part of the memory engine uses.
///
/// Vectors of different lengths come from different embedders and are unrelated: the result is 0.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Scales `v` to unit length; false (and `v` untouched) when it has no direction or is not finite.
pub(crate) fn normalize(v: &mut [f32]) -> bool {
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if !norm.is_finite() || norm <= f64::from(f32::MIN_POSITIVE) {
        return false;
    }
    for x in v.iter_mut() {
        *x = (f64::from(*x) / norm) as f32;
    }
    true
}
