//! A real local ATProto network (PLC, PDS, AppView) for the agent scenarios, started by
//! `tests/atproto/start.sh` (install it once with `tests/atproto/install.sh`), and plain
//! XRPC clients for the people who talk to the agent: they are written against the wire
//! protocol, independently of the agent's own atrium-based client.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long the network may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// A running network. The start script stops it, and removes its state, when its standard
/// input closes: when this value is dropped, or when the test process exits.
#[derive(Debug)]
pub struct Network {
    pub pds: String,
    pub appview: String,
    pub plc: String,
    /// How long the network took to start, as the start script measured it.
    pub startup: Duration,
    _child: tokio::process::Child,
}

static SHARED: tokio::sync::OnceCell<Result<Network, String>> = tokio::sync::OnceCell::const_new();

impl Network {
    /// Starts a network (about 5 s) and waits until it prints its URLs.
    pub async fn start() -> Result<Network> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("atproto/start.sh");
        let mut child = tokio::process::Command::new("bash")
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let started = Instant::now();
        let line = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(json) = line.strip_prefix("DRUSE_ATPROTO ") {
                    return Ok::<_, anyhow::Error>(json.to_owned());
                }
            }
            bail!("the start script exited before the network was up (run: bash tests/atproto/install.sh)")
        })
        .await
        .map_err(|_| anyhow!("the ATProto network did not start within {START_TIMEOUT:?}"))??;
        let urls: Value = serde_json::from_str(&line)?;
        let get = |k: &str| urls[k].as_str().map(str::to_owned).with_context(|| format!("no {k} in {line}"));
        eprintln!("ATProto network up in {:?} (services {} ms)", started.elapsed(), urls["startup_ms"]);
        Ok(Network {
            pds: get("pds")?,
            appview: get("appview")?,
            plc: get("plc")?,
            startup: started.elapsed(),
            _child: child,
        })
    }

    /// One network for the whole test process (accounts have unique handles, so scenarios
    /// share it without interfering).
    pub async fn shared() -> Result<&'static Network> {
        let started = SHARED.get_or_init(async || Network::start().await.map_err(|e| format!("{e:#}"))).await;
        started.as_ref().map_err(|e| anyhow!("{e}"))
    }
}

/// A unique handle ending in `.test`.
pub fn handle(prefix: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let salt = std::process::id() % 100_000;
    format!("{prefix}{salt}x{n}.test")
}

/// A post: its URI and CID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub uri: String,
    pub cid: String,
}

impl Post {
    fn json(&self) -> Value {
        json!({"uri": self.uri, "cid": self.cid})
    }
}

/// An account on the network's PDS.
#[derive(Debug, Clone)]
pub struct Account {
    pub handle: String,
    pub did: String,
    pub password: String,
    jwt: String,
    pds: String,
    http: reqwest::Client,
}

impl Account {
    /// Creates the account (the dev PDS needs no invite).
    pub async fn create(net: &Network, handle: &str) -> Result<Account> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
        let password = format!("pw-{handle}");
        let response = http
            .post(format!("{}/xrpc/com.atproto.server.createAccount", net.pds))
            .json(&json!({"handle": handle, "email": format!("{handle}@example.test"), "password": password}))
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if !status.is_success() {
            bail!("createAccount {handle}: {status} {body}");
        }
        Ok(Account {
            handle: handle.to_owned(),
            did: body["did"].as_str().context("no did")?.to_owned(),
            jwt: body["accessJwt"].as_str().context("no accessJwt")?.to_owned(),
            password,
            pds: net.pds.clone(),
            http,
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        nsid: &str,
        query: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<Value> {
        let mut request =
            self.http.request(method, format!("{}/xrpc/{nsid}", self.pds)).bearer_auth(&self.jwt).query(query);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("{nsid}: {status} {text}");
        }
        if text.is_empty() { Ok(Value::Null) } else { Ok(serde_json::from_str(&text)?) }
    }

    /// Creates `record` in `collection` of this account's repository.
    pub async fn create_record(&self, collection: &str, record: Value) -> Result<Post> {
        let out = self
            .call(
                reqwest::Method::POST,
                "com.atproto.repo.createRecord",
                &[],
                Some(json!({"repo": self.did, "collection": collection, "record": record})),
            )
            .await?;
        Ok(Post {
            uri: out["uri"].as_str().context("no uri")?.to_owned(),
            cid: out["cid"].as_str().context("no cid")?.to_owned(),
        })
    }

    /// Posts `text`, tagging each `(handle, did)` given at its first `@handle`, as a reply
    /// to `reply` (`(root, parent)`) if given.
    pub async fn post(&self, text: &str, mentions: &[(&str, &str)], reply: Option<(&Post, &Post)>) -> Result<Post> {
        let mut facets = Vec::new();
        for (handle, did) in mentions {
            let needle = format!("@{handle}");
            let start = text.find(&needle).with_context(|| format!("{needle} is not in {text:?}"))?;
            facets.push(json!({
                "index": {"byteStart": start, "byteEnd": start + needle.len()},
                "features": [{"$type": "app.bsky.richtext.facet#mention", "did": did}]
            }));
        }
        let mut record = json!({
            "$type": "app.bsky.feed.post",
            "text": text,
            "createdAt": now_iso(),
        });
        if !facets.is_empty() {
            record["facets"] = json!(facets);
        }
        if let Some((root, parent)) = reply {
            record["reply"] = json!({"root": root.json(), "parent": parent.json()});
        }
        self.create_record("app.bsky.feed.post", record).await
    }

    /// Likes `post`.
    pub async fn like(&self, post: &Post) -> Result<Post> {
        self.create_record(
            "app.bsky.feed.like",
            json!({"$type": "app.bsky.feed.like", "subject": post.json(), "createdAt": now_iso()}),
        )
        .await
    }

    /// The thread of `uri` as the AppView shows it (`app.bsky.feed.getPostThread`).
    pub async fn thread(&self, uri: &str) -> Result<Value> {
        self.call(reqwest::Method::GET, "app.bsky.feed.getPostThread", &[("uri", uri), ("depth", "10")], None).await
    }

    /// The posts of `of_did` (newest first), from its repository.
    pub async fn posts(&self, of_did: &str) -> Result<Vec<Value>> {
        self.records(of_did, "app.bsky.feed.post").await
    }

    /// The records of one collection in the repository of `of_did` (newest first).
    pub async fn records(&self, of_did: &str, collection: &str) -> Result<Vec<Value>> {
        let out = self
            .call(
                reqwest::Method::GET,
                "com.atproto.repo.listRecords",
                &[("repo", of_did), ("collection", collection), ("limit", "100")],
                None,
            )
            .await?;
        Ok(out["records"].as_array().cloned().unwrap_or_default())
    }
}

/// The replies to `uri` in a thread view, flattened: (author handle, text, record).
pub fn replies(thread: &Value) -> Vec<(String, String, Value)> {
    thread["thread"]["replies"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let post = &r["post"];
                    (
                        post["author"]["handle"].as_str().unwrap_or_default().to_owned(),
                        post["record"]["text"].as_str().unwrap_or_default().to_owned(),
                        post["record"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn now_iso() -> String {
    // RFC 3339 in UTC from the system clock, without a date crate.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{:03}Z", now.subsec_millis())
}
