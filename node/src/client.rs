//! The HTTP client the CLI subcommands use to act on a running node.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a CLI request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot reach the node at {url}: {source} (is it running?)")]
    Unreachable { url: String, source: reqwest::Error },
    #[error("the node answered {status}: {error}: {detail}")]
    Api { status: u16, error: String, detail: String },
    #[error("the node's answer was not JSON: {0}")]
    Decode(reqwest::Error),
    #[error("reading the API token from {path}: {source} (pass --token or set DRUSE_API_TOKEN)")]
    Token { path: String, source: std::io::Error },
}

/// A client of one node's API.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client for the API at `base` (like `http://127.0.0.1:7700`).
    pub fn new(base: &str, token: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self { base: base.trim_end_matches('/').to_owned(), token, http }
    }

    /// The same client, waiting up to `timeout` for an answer (an agent's run or chat takes
    /// minutes with a slow model).
    pub fn waiting(mut self, timeout: std::time::Duration) -> Self {
        if let Ok(http) = reqwest::Client::builder().timeout(timeout).build() {
            self.http = http;
        }
        self
    }

    /// Reads the token a node wrote into its data directory.
    pub fn token_from(data_dir: &Path) -> Result<String, Error> {
        let path = data_dir.join("api.token");
        std::fs::read_to_string(&path)
            .map(|t| t.trim().to_owned())
            .map_err(|source| Error::Token { path: path.display().to_string(), source })
    }

    /// GET a JSON document (with the token, if this client has one, so private reads work).
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let mut request = self.http.get(self.url(path));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        self.send(request).await
    }

    /// POST a JSON body with the bearer token.
    pub async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, Error> {
        let mut request = self.http.post(self.url(path)).json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        self.send(request).await
    }

    /// GET a plain-text body (the metrics).
    pub async fn get_text(&self, path: &str) -> Result<String, Error> {
        let url = self.url(path);
        let response = self.http.get(&url).send().await.map_err(|source| Error::Unreachable { url, source })?;
        response.text().await.map_err(Error::Decode)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send<T: DeserializeOwned>(&self, request: reqwest::RequestBuilder) -> Result<T, Error> {
        let url = self.base.clone();
        let response = request.send().await.map_err(|source| Error::Unreachable { url, source })?;
        let status = response.status();
        if !status.is_success() {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            return Err(Error::Api {
                status: status.as_u16(),
                error: body["error"].as_str().unwrap_or("unknown").to_owned(),
                detail: body["detail"].as_str().unwrap_or("").to_owned(),
            });
        }
        response.json().await.map_err(Error::Decode)
    }
}
