//! all-MiniLM-L6-v2 from the Hugging Face hub: a fresh node fetches the model into its data
//! directory on its first start, so it embeds by meaning with no manual step.
//!
//! The files come through `hf-hub` from `https://huggingface.co`, or from the mirror `HF_ENDPOINT`
//! names, at a pinned revision. Before anything uses them they are checked against that
//! revision's sha256: each file is copied out of hf-hub's download cache into a temporary name
//! while it is hashed, and the three are renamed into the model folder only when all of them
//! match. A crash, a truncated transfer or a wrong byte never leaves a file in the model folder
//! that looks good. A later start finds the verified files (and checks them again) and does not
//! download.
//!
//! A start must never hang on the hub: the first answer is bounded by a connect timeout and the
//! whole attempt by an overall one. The download runs on its own thread and runtime, which is
//! dropped (cancelling hf-hub's chunk tasks) when the attempt ends, however it ends.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hf_hub::api::tokio::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};
use sha2::{Digest, Sha256};

/// The model's repository on the hub.
pub const REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";
/// The pinned revision: `main` moves, a commit does not, so the hashes below stay true.
pub const REVISION: &str = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41";
/// The environment variable naming a hub mirror (read by hf-hub's own tools too).
pub const ENDPOINT_ENV: &str = "HF_ENDPOINT";
/// The hub itself, when `HF_ENDPOINT` names no mirror.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// How long the first answer from the hub may take by default (DNS, connect, TLS, headers).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a whole download may take by default (about 90 MB).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Each file the embedder needs, with its sha256 at [`REVISION`] (for an LFS file, the hub's
/// ETag). The smallest first: its request is the one the connect timeout bounds.
pub const PINS: [(&str, &str); 3] = [
    ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
];

/// What an operator can do when the model is not there, for every message that says so.
pub const HOW_TO_FIX: &str = "run `druse-node model fetch` where the hub is reachable, set HF_ENDPOINT to a \
     Hugging Face mirror, or point DRUSE_MINILM_DIR (or memory.embed.minilm_dir) at a folder holding \
     model.safetensors, tokenizer.json and config.json";

/// What an operator can do when `druse-node model fetch` itself failed.
pub const FETCH_HINT: &str = "check that the hub is reachable from here, set HF_ENDPOINT to a Hugging Face \
     mirror, or fetch the files elsewhere and point DRUSE_MINILM_DIR (or memory.embed.minilm_dir) at them";

/// Why the model could not be fetched or is not verified.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No connection to the hub, or no answer before the connect timeout.
    #[error("cannot reach the model hub at {endpoint}: {reason}")]
    Unreachable {
        /// The hub or mirror that was tried.
        endpoint: String,
        /// What went wrong, with the transport's own words.
        reason: String,
    },
    /// The hub answered with an error status.
    #[error("the model hub at {endpoint} answered HTTP {status} for {file}")]
    Status {
        /// The hub or mirror that was tried.
        endpoint: String,
        /// The file requested.
        file: String,
        /// The HTTP status.
        status: u16,
    },
    /// The transfer broke off, or the answer was not what a hub sends.
    #[error("downloading {file} from {endpoint} failed: {reason}")]
    Transfer {
        /// The hub or mirror that was tried.
        endpoint: String,
        /// The file being downloaded.
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// The whole attempt took longer than its bound.
    #[error("the download from {endpoint} did not finish within {}", humantime::format_duration(*after))]
    TimedOut {
        /// The hub or mirror that was tried.
        endpoint: String,
        /// The bound.
        after: Duration,
    },
    /// A downloaded file's bytes are not the pinned revision's.
    #[error("{file} from {endpoint} fails its check: sha256 {actual}, expected {expected} (revision {REVISION})")]
    Mismatch {
        /// The hub or mirror that served it.
        endpoint: String,
        /// The file.
        file: String,
        /// The pinned sha256.
        expected: String,
        /// The sha256 of what arrived.
        actual: String,
    },
    /// A file the model folder should hold is not there.
    #[error("{} is missing", path.display())]
    Missing {
        /// The file looked for.
        path: PathBuf,
    },
    /// A file in the model folder is not the pinned revision's.
    #[error("{} fails its check: sha256 {actual}, expected {expected}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The pinned sha256.
        expected: String,
        /// Its sha256.
        actual: String,
    },
    /// Reading or writing the data directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Where the model goes and how long fetching it may take.
#[derive(Debug, Clone)]
pub struct Fetch {
    /// The `models` folder of a data directory: the model folder and hf-hub's cache live here.
    pub models: PathBuf,
    /// The hub or a mirror, without a trailing slash.
    pub endpoint: String,
    /// Bound on the first answer from the hub.
    pub connect_timeout: Duration,
    /// Bound on the whole attempt.
    pub timeout: Duration,
    /// Draw hf-hub's progress bars (on stderr, when it is a terminal).
    pub progress: bool,
}

impl Fetch {
    /// Fetching into `data_dir/models` from `endpoint` (the value of `HF_ENDPOINT`, if any),
    /// with the default bounds and no progress bars.
    pub fn new(data_dir: &Path, endpoint: Option<String>) -> Self {
        let endpoint = endpoint.filter(|e| !e.trim().is_empty()).unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        Self {
            models: data_dir.join("models"),
            endpoint: endpoint.trim().trim_end_matches('/').to_owned(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
            progress: false,
        }
    }

    /// The folder that holds the verified files (what [`MiniLm::load`](super::MiniLm::load) reads).
    pub fn model_dir(&self) -> PathBuf {
        self.models.join("all-MiniLM-L6-v2")
    }

    /// hf-hub's download cache (the hub's own layout), emptied once an attempt is settled.
    fn cache_dir(&self) -> PathBuf {
        self.models.join(".hub-cache")
    }

    /// Makes the model folder hold the verified files, downloading them unless they are already
    /// there; returns the folder. Blocking: the download runs on a thread of its own.
    pub fn fetch(&self) -> Result<PathBuf, Error> {
        let dir = self.model_dir();
        if verify(&dir).is_ok() {
            return Ok(dir);
        }
        create_dir(&dir)?;
        let this = self.clone();
        let downloaded = std::thread::Builder::new()
            .name("model-fetch".into())
            .spawn(move || this.download_blocking())
            .map_err(|source| Error::Io { path: dir.clone(), source })?
            .join()
            .map_err(|_| Error::Transfer {
                endpoint: self.endpoint.clone(),
                file: REPO.to_owned(),
                reason: "the download thread panicked".into(),
            })??;
        self.install(&downloaded)
    }

    /// Runs the download on a runtime of its own, bounded by `timeout`; the runtime (and every
    /// task hf-hub spawned on it) is gone when this returns.
    fn download_blocking(&self) -> Result<Vec<PathBuf>, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| Error::Io { path: self.models.clone(), source })?;
        let result = runtime.block_on(async { tokio::time::timeout(self.timeout, self.download()).await });
        runtime.shutdown_timeout(Duration::from_secs(1));
        result.unwrap_or_else(|_| Err(Error::TimedOut { endpoint: self.endpoint.clone(), after: self.timeout }))
    }

    /// Downloads every pinned file into hf-hub's cache; returns their paths, in [`PINS`] order.
    async fn download(&self) -> Result<Vec<PathBuf>, Error> {
        let api = ApiBuilder::from_cache(Cache::new(self.cache_dir()))
            .with_endpoint(self.endpoint.clone())
            // A public model: never send a token that happens to lie in the cache folder.
            .with_token(None)
            .with_progress(self.progress)
            .build()
            .map_err(|error| self.failure(REPO, error))?;
        let repo = api.repo(Repo::with_revision(REPO.to_owned(), RepoType::Model, REVISION.to_owned()));
        let mut paths = Vec::with_capacity(PINS.len());
        for (index, (file, _)) in PINS.iter().enumerate() {
            let download = repo.download(file);
            let path = if index == 0 {
                tokio::time::timeout(self.connect_timeout, download).await.map_err(|_| Error::Unreachable {
                    endpoint: self.endpoint.clone(),
                    reason: format!("no answer within {}", humantime::format_duration(self.connect_timeout)),
                })?
            } else {
                download.await
            };
            paths.push(path.map_err(|error| self.failure(file, error))?);
        }
        Ok(paths)
    }

    /// Copies the downloaded files into the model folder under temporary names, hashing them on
    /// the way; renames them into place only when every one matches its pin.
    fn install(&self, downloaded: &[PathBuf]) -> Result<PathBuf, Error> {
        let dir = self.model_dir();
        let mut staged = Vec::with_capacity(PINS.len());
        let mut failure = None;
        for ((file, expected), source) in PINS.iter().zip(downloaded) {
            let partial = dir.join(format!(".{file}.partial"));
            staged.push(partial.clone());
            match copy_hashing(source, &partial) {
                Ok(actual) if actual == *expected => {}
                Ok(actual) => {
                    failure = Some(Error::Mismatch {
                        endpoint: self.endpoint.clone(),
                        file: (*file).to_owned(),
                        expected: (*expected).to_owned(),
                        actual,
                    });
                    break;
                }
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        // Settled either way: what the cache holds is now in the model folder or known bad.
        let _ = std::fs::remove_dir_all(self.cache_dir());
        if let Some(error) = failure {
            for partial in &staged {
                let _ = std::fs::remove_file(partial);
            }
            return Err(error);
        }
        for ((file, _), partial) in PINS.iter().zip(&staged) {
            let path = dir.join(file);
            std::fs::rename(partial, &path).map_err(|source| Error::Io { path, source })?;
        }
        sync_dir(&dir);
        Ok(dir)
    }

    /// An hf-hub error in an operator's words.
    fn failure(&self, file: &str, error: ApiError) -> Error {
        let endpoint = self.endpoint.clone();
        let file = file.to_owned();
        match error {
            ApiError::TooManyRetries(inner) => self.failure(&file, *inner),
            ApiError::RequestError(error) => {
                if let Some(status) = error.status() {
                    Error::Status { endpoint, file, status: status.as_u16() }
                } else if error.is_connect() || error.is_timeout() {
                    Error::Unreachable { endpoint, reason: chain(&error) }
                } else {
                    Error::Transfer { endpoint, file, reason: chain(&error) }
                }
            }
            ApiError::MissingHeader(header) => Error::Transfer {
                reason: format!("the answer lacks the {header} header a Hugging Face hub sends (is {endpoint} a hub?)"),
                endpoint,
                file,
            },
            other => Error::Transfer { endpoint, file, reason: chain(&other) },
        }
    }
}

/// Checks that `dir` holds every pinned file with its pinned sha256.
pub fn verify(dir: &Path) -> Result<(), Error> {
    for (file, expected) in PINS {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(Error::Missing { path });
        }
        let actual = sha256_file(&path)?;
        if actual != expected {
            return Err(Error::Corrupt { path, expected: expected.to_owned(), actual });
        }
    }
    Ok(())
}

/// The sha256 of a file, in lowercase hex, read in bounded chunks.
pub fn sha256_file(path: &Path) -> Result<String, Error> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(data_encoding::HEXLOWER.encode(&hasher.finalize()))
}

/// Copies `from` to `to` (flushed to disk), returning the sha256 of the bytes written.
fn copy_hashing(from: &Path, to: &Path) -> Result<String, Error> {
    let mut source = std::fs::File::open(from).map_err(|source| Error::Io { path: from.to_owned(), source })?;
    let write_err = |source| Error::Io { path: to.to_owned(), source };
    let mut out = std::fs::File::create(to).map_err(write_err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = source.read(&mut buf).map_err(|source| Error::Io { path: from.to_owned(), source })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(write_err)?;
    }
    out.sync_all().map_err(write_err)?;
    Ok(data_encoding::HEXLOWER.encode(&hasher.finalize()))
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_owned(), source })
}

/// Makes the renames into `dir` durable where the platform allows it (best effort).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(handle) = std::fs::File::open(dir) {
        let _ = handle.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// An error with its causes, `a: b: c`, so "connection refused" reaches the operator.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
