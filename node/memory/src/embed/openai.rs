//! A client of any OpenAI-compatible `POST /v1/embeddings` endpoint (OpenAI, Ollama, llama.cpp, vLLM,
//! text-embeddings-inference, LiteLLM …), for nodes that want a bigger model than MiniLM.
//!
//! [`Embedder::embed`] blocks, so the client drives reqwest's async client on a small runtime of its
//! own. Its calls must not run on an async runtime's thread: callers use `tokio::task::spawn_blocking`;
//! should one forget, each request hops to a short-lived plain thread rather than panicking (it still
//! blocks the caller until the answer comes).

use std::time::Duration;

use reqwest::Client;
use reqwest::header::{AUTHORIZATION, HeaderValue};

use super::{Embedder, Error, normalize};

/// How long one request may take in all: a stuck server must not stall ingestion forever.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Inputs per request: well under every known server's limit (OpenAI's is 2048).
const BATCH: usize = 64;
/// The largest response body read: 64 texts × 4096 floats in JSON is about 6 MiB.
const MAX_BODY: u64 = 64 << 20;
/// How much of an error body goes into the error message.
const BODY_EXCERPT: usize = 300;
/// The text sent to learn the endpoint's dimension when none is configured.
const PROBE: &str = "dimension probe";

/// Embeddings from an OpenAI-compatible HTTP endpoint, for models too big to run in the node.
pub struct OpenAi {
    client: Client,
    /// The runtime requests run on (one thread; the connections it pools live on it).
    runtime: Option<tokio::runtime::Runtime>,
    endpoint: String,
    model: String,
    name: String,
    dim: usize,
    /// Per-request limit (a field, so tests can shorten it).
    timeout: Duration,
    /// `Bearer <key>`, marked sensitive; never printed.
    authorization: Option<HeaderValue>,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAi")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("api_key", &self.authorization.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl OpenAi {
    /// A client of `{url}/v1/embeddings` (a `url` already ending in `/v1` or `/v1/embeddings` is used as
    /// is) for `model`, sending `api_key` as a bearer token. With `dim` unset, this sends one probe
    /// request to learn the dimension (so it blocks: call it where blocking is allowed); with `dim` set it
    /// does no I/O, and every answer of another dimension is an error.
    pub fn new(url: &str, model: &str, api_key: Option<String>, dim: Option<usize>) -> Result<Self, Error> {
        let endpoint = endpoint_for(url)?;
        if model.trim().is_empty() {
            return Err(Error::Config("the OpenAI-compatible model name is empty".into()));
        }
        if dim == Some(0) {
            return Err(Error::Config("dim must be at least 1".into()));
        }
        let authorization = api_key
            .map(|key| {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| Error::Config("the API key holds characters an HTTP header cannot carry".into()))?;
                value.set_sensitive(true);
                Ok::<_, Error>(value)
            })
            .transpose()?;
        let client = Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|source| Error::Http { endpoint: endpoint.clone(), source })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("druse-embed-http")
            .build()
            .map_err(|e| Error::Worker(format!("cannot start the request runtime: {e}")))?;
        let mut this = Self {
            client,
            runtime: Some(runtime),
            name: format!("openai:{model}"),
            model: model.to_string(),
            endpoint,
            dim: dim.unwrap_or(0),
            timeout: TIMEOUT,
            authorization,
        };
        if dim.is_none() {
            let probe = off_runtime(|| this.request(&[PROBE], None))?;
            this.dim = probe.first().map_or(0, Vec::len);
        }
        Ok(this)
    }

    /// The full URL requests go to, for logs and error messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// One request for at most [`BATCH`] texts; every vector must have `expected` dimensions (or, when
    /// unknown, the first vector's).
    fn request(&self, texts: &[&str], expected: Option<usize>) -> Result<Vec<Vec<f32>>, Error> {
        let endpoint = &self.endpoint;
        let malformed = |reason: String| Error::Malformed { endpoint: endpoint.clone(), reason };
        let runtime = self.runtime.as_ref().ok_or_else(|| Error::Worker("the request runtime is gone".into()))?;
        let (status, body) = runtime.block_on(self.send(texts))?;
        if !status.is_success() {
            return Err(Error::Status { endpoint: endpoint.clone(), status: status.as_u16(), body: excerpt(&body) });
        }
        if body.len() as u64 > MAX_BODY {
            return Err(malformed(format!("the body exceeds {MAX_BODY} bytes")));
        }
        let answer: Answer =
            serde_json::from_slice(&body).map_err(|e| malformed(format!("{e} (body starts: {})", excerpt(&body))))?;

        let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for item in answer.data {
            let slot = slots
                .get_mut(item.index)
                .ok_or_else(|| malformed(format!("index {} is out of range for {} inputs", item.index, texts.len())))?;
            if slot.is_some() {
                return Err(malformed(format!("index {} appears twice", item.index)));
            }
            *slot = Some(item.embedding);
        }
        let mut expected = expected;
        slots
            .into_iter()
            .enumerate()
            .map(|(index, slot)| {
                let mut v = slot.ok_or_else(|| malformed(format!("no embedding for input {index}")))?;
                let want = *expected.get_or_insert(v.len());
                if v.len() != want {
                    return Err(Error::Dim { endpoint: endpoint.clone(), expected: want, got: v.len() });
                }
                if !normalize(&mut v) {
                    return Err(malformed(format!("the embedding for input {index} is empty or all zeros")));
                }
                Ok(v)
            })
            .collect()
    }
}

impl OpenAi {
    /// Sends one request and reads at most [`MAX_BODY`] + 1 bytes of its answer.
    async fn send(&self, texts: &[&str]) -> Result<(reqwest::StatusCode, Vec<u8>), Error> {
        let endpoint = &self.endpoint;
        let mut request = self
            .client
            .post(endpoint)
            .timeout(self.timeout)
            .json(&serde_json::json!({ "model": self.model, "input": texts }));
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let http = |source| Error::Http { endpoint: endpoint.clone(), source };
        let mut response = request.send().await.map_err(http)?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| Error::Malformed {
            endpoint: endpoint.clone(),
            reason: format!("reading the body failed: {e}"),
        })? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > MAX_BODY {
                break;
            }
        }
        Ok((status, body))
    }
}

impl Drop for OpenAi {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which an async caller's thread must not; this does not.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Embedder for OpenAi {
    fn name(&self) -> &str {
        &self.name
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        off_runtime(|| {
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(BATCH) {
                out.extend(self.request(chunk, Some(self.dim))?);
            }
            Ok(out)
        })
    }
}

/// The embeddings response, as far as we read it (other fields such as `usage` are ignored).
#[derive(serde::Deserialize)]
struct Answer {
    data: Vec<Item>,
}

/// One embedding; `index` says which input it belongs to, as servers need not keep the order.
#[derive(serde::Deserialize)]
struct Item {
    embedding: Vec<f32>,
    index: usize,
}

/// The embeddings URL for a configured base URL.
fn endpoint_for(url: &str) -> Result<String, Error> {
    let base = url.trim().trim_end_matches('/');
    let endpoint = if base.ends_with("/v1/embeddings") {
        base.to_string()
    } else if base.ends_with("/v1") {
        format!("{base}/embeddings")
    } else {
        format!("{base}/v1/embeddings")
    };
    let parsed =
        reqwest::Url::parse(&endpoint).map_err(|e| Error::Config(format!("openai_url {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::Config(format!("openai_url {url:?} is not an http(s) URL")));
    }
    Ok(endpoint)
}

/// The start of a body, as text, for an error message.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut cut: String = text.chars().take(BODY_EXCERPT).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

/// Runs blocking request work where it cannot panic: inline on a plain thread, or on a short-lived
/// plain thread when the caller is inside a tokio runtime (blocking on a runtime panics there).
fn off_runtime<T: Send>(work: impl FnOnce() -> Result<T, Error> + Send) -> Result<T, Error> {
    if tokio::runtime::Handle::try_current().is_err() {
        return work();
    }
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("druse-embed-http".into())
            .spawn_scoped(scope, work)
            .map_err(|e| Error::Worker(format!("cannot start the request thread: {e}")))?
            .join()
            .map_err(|_| Error::Worker("the request thread panicked".into()))?
    })
}

#[cfg(test)]
mod tests;
