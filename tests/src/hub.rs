//! A local Hugging Face hub: serves model files in the hub's layout and with the headers
//! huggingface.co sends, so a node's MiniLM download is tested against the protocol hf-hub
//! really speaks, with no route to the internet.
//!
//! What hf-hub (0.4, tokio API) asks and reads, and what this server answers:
//! - `GET /{repo}/resolve/{revision}/{file}` with `Range: bytes=0-0` first, for metadata: the
//!   commit in `x-repo-commit`, the cache key in `x-linked-etag` or `etag`, and the size from
//!   `content-range: bytes 0-0/{size}`. Then the same URL with `Range: bytes={start}-{stop}` per
//!   10 MB chunk (the last range may end past the file; it is clamped, as HTTP says).
//! - A large (LFS) file is, as on the hub, a `302` to a CDN on another host name
//!   (`localhost` instead of `127.0.0.1`) carrying `x-linked-etag` (its sha256), `x-linked-size`
//!   and `x-repo-commit`; hf-hub stops at a redirect to another host, reads those headers, and
//!   fetches the ranges from `Location`.
//! - A small file is answered directly; its `etag` is the hub's git blob id there, here its
//!   sha256 (hf-hub uses it only to name the cache entry).
//!
//! Faults make the failures a node must survive: a body that breaks off after half its bytes
//! (a truncated download), and a file whose bytes are not the ones pinned (a wrong hash).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;

/// The model files a hub serves, as `.ci/fetch-minilm.sh` leaves them in a folder.
pub const FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Files at least this large are LFS files: redirected to the CDN, as on the hub.
const LFS_FROM: usize = 10 * 1024 * 1024;

/// What goes wrong on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A faithful hub.
    None,
    /// Every body of this file longer than one byte breaks off after half its bytes.
    Truncate(&'static str),
    /// This file's middle byte is flipped (a file whose sha256 is not the pinned one).
    Corrupt(&'static str),
}

/// One served file.
#[derive(Debug)]
struct Served {
    bytes: Bytes,
    sha256: String,
    truncate: bool,
}

#[derive(Debug)]
struct Hub {
    repo: String,
    revision: String,
    files: HashMap<String, Served>,
    /// By sha256, for the CDN.
    blobs: HashMap<String, String>,
    cdn: String,
    requests: AtomicUsize,
}

/// A running local hub; stops when dropped.
#[derive(Debug)]
pub struct LocalHub {
    /// What `HF_ENDPOINT` should say, like `http://127.0.0.1:41234`.
    pub url: String,
    hub: Arc<Hub>,
    task: JoinHandle<()>,
}

impl Drop for LocalHub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LocalHub {
    /// Serves the files of `weights` (a folder holding [`FILES`]) as `repo` at `revision`, on
    /// 127.0.0.1 and a port the OS picks.
    pub async fn start(weights: &Path, repo: &str, revision: &str, fault: Fault) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the local hub")?;
        let port = listener.local_addr()?.port();
        let mut files = HashMap::new();
        let mut blobs = HashMap::new();
        for name in FILES {
            let path = weights.join(name);
            let mut bytes = tokio::fs::read(&path).await.with_context(|| format!("reading {}", path.display()))?;
            if fault == Fault::Corrupt(name) {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x20;
            }
            let sha256 = format!("{:x}", Sha256::digest(&bytes));
            blobs.insert(sha256.clone(), name.to_owned());
            files.insert(
                name.to_owned(),
                Served { bytes: Bytes::from(bytes), sha256, truncate: fault == Fault::Truncate(name) },
            );
        }
        let hub = Arc::new(Hub {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
            files,
            blobs,
            cdn: format!("http://localhost:{port}/cdn"),
            requests: AtomicUsize::new(0),
        });
        let router = axum::Router::new()
            .route("/{org}/{name}/resolve/{revision}/{*file}", axum::routing::get(resolve))
            .route("/cdn/{sha256}", axum::routing::get(cdn))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .with_state(hub.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { url: format!("http://127.0.0.1:{port}"), hub, task })
    }

    /// How many requests the hub (and its CDN) have answered.
    pub fn requests(&self) -> usize {
        self.hub.requests.load(Ordering::SeqCst)
    }
}

/// An address where nothing listens: connections are refused.
pub fn down() -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    let addr: SocketAddr = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{addr}"))
}

/// A hub that accepts connections and never answers; stops when dropped.
#[derive(Debug)]
pub struct SilentHub {
    /// What `HF_ENDPOINT` should say.
    pub url: String,
    task: JoinHandle<()>,
}

impl Drop for SilentHub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SilentHub {
    /// Listens on 127.0.0.1 and a port the OS picks; holds every connection open, silent.
    pub async fn start() -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the silent hub")?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                // Bounded: a test opens a handful of connections at most.
                if held.len() < 64 {
                    held.push(socket);
                }
            }
        });
        Ok(Self { url, task })
    }
}

async fn resolve(
    State(hub): State<Arc<Hub>>,
    UrlPath((org, name, revision, file)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    hub.requests.fetch_add(1, Ordering::SeqCst);
    if format!("{org}/{name}") != hub.repo {
        return not_found("RepoNotFound");
    }
    if revision != hub.revision {
        return not_found("RevisionNotFound");
    }
    let Some(served) = hub.files.get(&file) else { return not_found("EntryNotFound") };
    let mut response = if served.bytes.len() >= LFS_FROM {
        let mut redirect = StatusCode::FOUND.into_response();
        let location = format!("{}/{}", hub.cdn, served.sha256);
        set(redirect.headers_mut(), header::LOCATION, &location);
        set(redirect.headers_mut(), "x-linked-etag", &format!("\"{}\"", served.sha256));
        set(redirect.headers_mut(), "x-linked-size", &served.bytes.len().to_string());
        redirect
    } else {
        let mut direct = ranged(served, &headers);
        set(direct.headers_mut(), header::ETAG, &format!("\"{}\"", served.sha256));
        direct
    };
    set(response.headers_mut(), "x-repo-commit", &hub.revision);
    response
}

async fn cdn(State(hub): State<Arc<Hub>>, UrlPath(sha256): UrlPath<String>, headers: HeaderMap) -> Response {
    hub.requests.fetch_add(1, Ordering::SeqCst);
    match hub.blobs.get(&sha256).and_then(|name| hub.files.get(name)) {
        Some(served) => ranged(served, &headers),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The file, or the range of it the request names (`206` with `content-range`).
fn ranged(served: &Served, headers: &HeaderMap) -> Response {
    let len = served.bytes.len();
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok()).and_then(|v| parse_range(v, len));
    let (status, start, end) = match range {
        Some((start, end)) => (StatusCode::PARTIAL_CONTENT, start, end),
        None if headers.contains_key(header::RANGE) => {
            let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            set(response.headers_mut(), header::CONTENT_RANGE, &format!("bytes */{len}"));
            return response;
        }
        None => (StatusCode::OK, 0, len.saturating_sub(1)),
    };
    let body = served.bytes.slice(start..=end);
    let length = body.len();
    let body = if served.truncate && length > 1 {
        // Half the bytes, then the connection breaks: the length promised is never delivered.
        let half = body.slice(..length / 2);
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            vec![Ok(half), Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "the hub broke off"))];
        Body::from_stream(futures::stream::iter(chunks))
    } else {
        Body::from(body)
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    set(response.headers_mut(), header::CONTENT_LENGTH, &length.to_string());
    set(response.headers_mut(), header::ACCEPT_RANGES, "bytes");
    if status == StatusCode::PARTIAL_CONTENT {
        set(response.headers_mut(), header::CONTENT_RANGE, &format!("bytes {start}-{end}/{len}"));
    }
    response
}

/// `bytes=a-b` (or `bytes=a-`) within a file of `len` bytes, its end clamped to the last byte.
fn parse_range(value: &str, len: usize) -> Option<(usize, usize)> {
    let (start, end) = value.strip_prefix("bytes=")?.split_once('-')?;
    let start: usize = start.trim().parse().ok()?;
    let last = len.checked_sub(1)?;
    let end = match end.trim() {
        "" => last,
        end => end.parse::<usize>().ok()?.min(last),
    };
    (start <= end).then_some((start, end))
}

fn not_found(code: &str) -> Response {
    let mut response = (StatusCode::NOT_FOUND, format!("{code}\n")).into_response();
    set(response.headers_mut(), "x-error-code", code);
    response
}

fn set<K: header::IntoHeaderName>(headers: &mut HeaderMap, name: K, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}
