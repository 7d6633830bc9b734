//! A `druse-node run` child with its agent enabled: a config file with an `[agent]` section
//! pointing at the local ATProto network and a scripted LLM, and the app password in the
//! environment variable the config names.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::process::{Startup, binaries};
use crate::{WAIT, eventually, wait_for};

/// The environment variable the scenarios' configs name for the app password.
pub const PASSWORD_ENV: &str = "DRUSE_TEST_AGENT_PASSWORD";

/// The agent's settings in a scenario.
#[derive(Debug, Clone)]
pub struct AgentSetup {
    pub pds: String,
    pub handle: String,
    pub password: String,
    pub owner: String,
    pub llm: String,
    /// Extra lines for the `[agent]` table (e.g. `per_author_replies = 3`).
    pub extra: String,
    /// Peers to dial at start (`[p2p] bootstrap`).
    pub bootstrap: Vec<String>,
    /// The management keys' trust list (`[trust] trust_list`), if any.
    pub trust_list: Option<PathBuf>,
    /// The longest wait for one answer of the model (`[agent.llm] timeout`; 5 s when none).
    pub llm_timeout: Option<String>,
    /// More lines for `[agent.llm]` (prices, the daily cap).
    pub llm_extra: String,
}

/// A running node with its agent.
#[derive(Debug)]
pub struct AgentNode {
    pub data_dir: PathBuf,
    pub api: String,
    pub metrics: String,
    pub log: PathBuf,
    child: tokio::process::Child,
    http: reqwest::Client,
}

/// The config file of a scenario's node: every listener on a port the OS picks.
pub fn config(setup: &AgentSetup, data_dir: &Path) -> String {
    let (api, metrics) = ("127.0.0.1:0", "127.0.0.1:0");
    let trust = setup.trust_list.as_ref().map(|p| format!("[trust]\ntrust_list = {:?}\n", p.display().to_string()));
    // The daily reflection's timer stays off unless a scenario sets its hour: at the default
    // hour (23 UTC) it would fire in the background and spend the day's one reflection.
    let reflection = if setup.extra.contains("reflection_hour") { "" } else { "reflection_hour = \"off\"\n" };
    // Without a handle the agent is chat-only: no account at all.
    let bluesky = (!setup.handle.is_empty()).then(|| {
        format!(
            "[agent.bluesky]\nservice = {:?}\nhandle = {:?}\npassword_env = {PASSWORD_ENV:?}\nowner = {:?}\n",
            setup.pds, setup.handle, setup.owner
        )
    });
    format!(
        "[store]\ndata_dir = {data:?}\n{trust}[p2p]\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\nmdns = false\nheartbeat = \"100ms\"\n\
         bootstrap = {bootstrap:?}\n[api]\nlisten = {api:?}\n[metrics]\nlisten = {metrics:?}\n\
         [agent]\nenabled = true\npoll_interval = \"300ms\"\n{reflection}{extra}\n{bluesky}\
         [agent.llm]\nbase_url = {llm:?}\nmodel = \"scripted\"\ntimeout = {timeout:?}\nmax_retries = 2\nretry_backoff = \"50ms\"\n{llm_extra}\n",
        data = data_dir.display().to_string(),
        trust = trust.unwrap_or_default(),
        bootstrap = setup.bootstrap,
        extra = setup.extra,
        bluesky = bluesky.unwrap_or_default(),
        llm = setup.llm,
        timeout = setup.llm_timeout.as_deref().unwrap_or("5s"),
        llm_extra = setup.llm_extra,
    )
}

impl AgentNode {
    /// Writes the config and starts `druse-node run --config …`; returns once the node has
    /// logged the addresses it bound and its API answers (the agent logs in in the background).
    pub async fn start(setup: &AgentSetup, data_dir: &Path) -> Result<Self> {
        let bins = tokio::task::spawn_blocking(binaries).await??;
        std::fs::create_dir_all(data_dir)?;
        let config_path = data_dir.with_extension("toml");
        std::fs::write(&config_path, config(setup, data_dir))?;
        let log = data_dir.with_extension("log");
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
        // The log is appended to: this start's startup line is after what is there now.
        let offset = file.metadata()?.len() as usize;
        let mut command = tokio::process::Command::new(&bins.node);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("DRUSE_") {
                command.env_remove(name);
            }
        }
        let child = command
            .args(["run", "--config", &config_path.display().to_string()])
            // A test node never reaches the Hugging Face hub.
            .env("DRUSE_MODEL_DOWNLOAD", "false")
            .env(PASSWORD_ENV, &setup.password)
            .env("RUST_LOG", "info,druse_agent=debug")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .context("spawning druse-node")?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build()?;
        let mut node =
            Self { data_dir: data_dir.to_owned(), api: String::new(), metrics: String::new(), log, child, http };
        let mut exited = None;
        let startup = wait_for(WAIT, "the agent node's startup line", async || {
            if let Ok(Some(status)) = node.child.try_wait() {
                exited = Some(status);
                return Some(None);
            }
            let text = std::fs::read(&node.log).ok()?;
            Startup::find(&String::from_utf8_lossy(text.get(offset..)?)).map(Some)
        })
        .await;
        let startup = match (startup, exited) {
            (Ok(Some(startup)), _) => startup,
            (_, Some(status)) => bail!("druse-node exited with {status}\n{}", node.log_tail()),
            (Err(error), None) => bail!("{error}\n{}", node.log_tail()),
            (Ok(None), None) => bail!("druse-node logged no startup line\n{}", node.log_tail()),
        };
        node.api = startup.api;
        node.metrics = startup.metrics;
        let url = format!("{}/healthz", node.api);
        let http = node.http.clone();
        let healthy = eventually(WAIT, "the agent node's API", async || {
            http.get(&url).send().await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        if let Err(error) = healthy {
            bail!("{error}\n{}", node.log_tail());
        }
        if let Ok(Some(status)) = node.child.try_wait() {
            bail!("druse-node exited with {status}\n{}", node.log_tail());
        }
        Ok(node)
    }

    /// The `druse-node` process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// `GET /v1/agent`.
    pub async fn agent(&self) -> Result<Value> {
        Ok(self.http.get(format!("{}/v1/agent", self.api)).send().await?.error_for_status()?.json().await?)
    }

    /// A scrape of `/metrics`.
    pub async fn scrape(&self) -> Result<String> {
        Ok(self.http.get(format!("{}/metrics", self.metrics)).send().await?.error_for_status()?.text().await?)
    }

    /// The value of one series in `/metrics` (0 when absent).
    pub async fn metric(&self, series: &str) -> Result<f64> {
        let body = self.scrape().await?;
        Ok(body
            .lines()
            .find_map(|l| {
                l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0.0))
    }

    /// A GET with the node's token (the agent's memories are private to it).
    pub async fn get_auth(&self, path: &str, query: &[(&str, &str)]) -> Result<Value> {
        let token = std::fs::read_to_string(self.data_dir.join("api.token"))?;
        Ok(self
            .http
            .get(format!("{}{path}", self.api))
            .bearer_auth(token.trim())
            .query(query)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// A POST with the node's token; an answer other than 2xx is an error.
    pub async fn post_auth(&self, path: &str, body: &Value) -> Result<Value> {
        let (status, text) = self.post_auth_answer(path, body).await?;
        if !(200..300).contains(&status) {
            bail!("POST {path}: {status} {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// A POST with the node's token: the status and the body, whatever the status.
    pub async fn post_auth_answer(&self, path: &str, body: &Value) -> Result<(u16, String)> {
        let token = std::fs::read_to_string(self.data_dir.join("api.token"))?;
        let response =
            self.http.post(format!("{}{path}", self.api)).bearer_auth(token.trim()).json(body).send().await?;
        Ok((response.status().as_u16(), response.text().await?))
    }

    /// `POST /v1/agent/run {"entry": entry}`: what the entry point did.
    pub async fn run_entry(&self, entry: &str) -> Result<Value> {
        self.post_auth("/v1/agent/run", &serde_json::json!({ "entry": entry })).await
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        format!("--- last lines of {} ---\n{}", self.log.display(), lines[lines.len().saturating_sub(40)..].join("\n"))
    }

    /// Stops the node with SIGTERM.
    pub async fn stop(mut self) -> Result<()> {
        if self.terminate().await?.is_none() {
            let _ = self.child.kill().await;
        }
        Ok(())
    }

    /// Sends SIGTERM and waits for the node to exit: its exit status, or `None` if it still
    /// ran after the wait (its log stays readable).
    pub async fn terminate(&mut self) -> Result<Option<std::process::ExitStatus>> {
        if let Some(pid) = self.child.id() {
            tokio::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().await?;
        }
        Ok(tokio::time::timeout(WAIT, self.child.wait()).await.ok().transpose()?)
    }
}
