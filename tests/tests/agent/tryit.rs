//! "Try it in five minutes" (issue 28): the real `deploy/try-agent.sh`, end to end, with the
//! scenarios' scripted model. The script starts its own local ATProto network (beside the
//! shared one, on free ports), creates the accounts, starts `druse-node` with its agent, and
//! its subcommands post as the user, show the thread and approve as the owner; SIGTERM stops
//! the node and the network and leaves nothing listening.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use druse_tests::llm::{Answer, Request, ScriptedLlm};
use druse_tests::process::{binaries, free_port};
use druse_tests::{eventually, wait_for};
use serde_json::{Value, json};

use super::script;

/// The whole start: installing (a check, here), the network, three accounts and the node.
const READY: Duration = Duration::from_secs(300);
/// One subcommand, waiting for the agent's answer included.
const SUBCOMMAND: Duration = Duration::from_secs(120);
/// The script's stop: the node, then the network and its PostgreSQL.
const STOPPED: Duration = Duration::from_secs(120);
/// Indexing by the AppView plus a few polls of the agent.
const ANSWERED: Duration = Duration::from_secs(60);

/// What the scripted model answers about tide pools.
const ANSWER: &str = "Tide pools hold anemones, crabs and sea stars; visit them at low tide.";

/// The scenarios' model, and a fixed answer to a batch that asks about tide pools.
fn model(request: &Request) -> Answer {
    let batch = request
        .messages()
        .last()
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .filter(|t| t.starts_with("[NEW NOTIFICATIONS]"))
        .unwrap_or_default();
    if request.schema_name().is_none()
        && request.last_role() != "tool"
        && request.tool_names().iter().any(|t| t == "reply")
        && batch.contains("tide pools")
        && let Some(uri) = request.batch_uris().into_iter().next()
    {
        return Answer::Tools(vec![("reply".into(), json!({"uri": uri, "text": ANSWER}))]);
    }
    script(request)
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/try-agent.sh")
}

/// `bash deploy/try-agent.sh args…` with `env`, and none of the variables the script reads
/// leaking in from the test's environment (the ATProto install's home excepted).
fn command(args: &[&str], env: &[(&str, String)]) -> Command {
    let mut command = Command::new("bash");
    command.arg(script_path()).args(args);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        let read_by_script = matches!(
            name.as_str(),
            "LLM_URL"
                | "LLM_MODEL"
                | "LLM_API_KEY_ENV"
                | "LLM_TIMEOUT"
                | "TRY_DIR"
                | "BIN_DIR"
                | "TRY_HOST"
                | "API_PORT"
                | "METRICS_PORT"
                | "P2P_PORT"
                | "AGENT_HANDLE"
                | "OWNER_HANDLE"
                | "USER_HANDLE"
                | "POLL_INTERVAL"
                | "PERSONA_FILE"
                | "AGENT_EXTRA"
                | "MODEL_DOWNLOAD"
                | "REPLY_TIMEOUT"
                | "RUST_LOG"
        );
        if read_by_script || (name.starts_with("DRUSE_") && name != "DRUSE_ATPROTO_HOME") {
            command.env_remove(&name);
        }
    }
    command.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    command
}

/// The running script, in its own process group. Dropped while it runs (a failed test), the
/// group gets SIGTERM, so the script stops the node and the network (and its PostgreSQL), then
/// SIGKILL for whatever is left.
struct Session {
    child: Child,
    log: PathBuf,
}

impl Session {
    fn start(env: &[(&str, String)], log: PathBuf) -> Result<Self> {
        let file = std::fs::File::create(&log)?;
        let child = command(&[], env)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0)
            .spawn()
            .context("starting deploy/try-agent.sh")?;
        Ok(Self { child, log })
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        let text = self.output();
        let lines: Vec<&str> = text.lines().collect();
        format!("--- the end of the script's output ---\n{}", lines[lines.len().saturating_sub(60)..].join("\n"))
    }

    fn signal_group(&self, signal: &str) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args([signal, "--", &group]).stderr(Stdio::null()).status();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        self.signal_group("-TERM");
        let started = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && started.elapsed() < STOPPED {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.signal_group("-KILL");
        let _ = self.child.wait();
    }
}

/// A subcommand of the running session, to completion.
async fn run(args: &[&str], env: &[(&str, String)]) -> Result<Output> {
    let mut command = tokio::process::Command::from(command(args, env));
    command.stdin(Stdio::null()).kill_on_drop(true);
    tokio::time::timeout(SUBCOMMAND, command.output())
        .await
        .with_context(|| format!("deploy/try-agent.sh {args:?} did not finish within {SUBCOMMAND:?}"))?
        .context("running deploy/try-agent.sh")
}

/// A subcommand that must succeed: its standard output.
async fn run_ok(args: &[&str], env: &[(&str, String)], session: &Session) -> Result<String> {
    let out = run(args, env).await?;
    if !out.status.success() {
        bail!(
            "deploy/try-agent.sh {args:?} failed ({}):\n{}{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            session.tail()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The session's variables, as the script wrote them (shell-quoted) in `session.env`.
fn session_vars(file: &Path) -> Result<HashMap<String, String>> {
    let out = Command::new("bash")
        .args(["-c", r#"source "$1" && for v in $(compgen -v TRY_); do printf '%s=%s\n' "$v" "${!v}"; done"#, "_"])
        .arg(file)
        .output()?;
    if !out.status.success() {
        bail!("reading {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect())
}

/// The port of `http://host:port`.
fn port_of(url: &str) -> Result<u16> {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .with_context(|| format!("no port in {url}"))
}

/// Whether something accepts connections on 127.0.0.1:`port`.
fn listening(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_ok()
}

/// Whether process `pid` exists (and is not a zombie waiting for its parent).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

/// Processes whose command line mentions `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains(needle) && alive(e.file_name().to_string_lossy().parse().ok()?))
                .then(|| format!("{}: {cmdline}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// The local network, read as the user reads it (independently of the script's Python).
struct Reader {
    pds: String,
    http: reqwest::Client,
    jwt: String,
}

impl Reader {
    async fn login(pds: &str, handle: &str, password: &str) -> Result<Self> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
        let session: Value = http
            .post(format!("{pds}/xrpc/com.atproto.server.createSession"))
            .json(&json!({"identifier": handle, "password": password}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let jwt = session["accessJwt"].as_str().context("no accessJwt")?.to_owned();
        Ok(Self { pds: pds.to_owned(), http, jwt })
    }

    async fn get(&self, nsid: &str, query: &[(&str, &str)]) -> Result<Value> {
        Ok(self
            .http
            .get(format!("{}/xrpc/{nsid}", self.pds))
            .bearer_auth(&self.jwt)
            .query(query)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }

    /// The replies to `uri` by `did`, as the AppView shows the thread.
    async fn replies_by(&self, uri: &str, did: &str) -> Vec<Value> {
        let Ok(thread) = self.get("app.bsky.feed.getPostThread", &[("uri", uri), ("depth", "5")]).await else {
            return Vec::new();
        };
        thread["thread"]["replies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["post"]["author"]["did"] == did)
            .map(|r| r["post"].clone())
            .collect()
    }

    async fn records(&self, repo: &str, collection: &str) -> Result<Vec<Value>> {
        let out = self
            .get("com.atproto.repo.listRecords", &[("repo", repo), ("collection", collection), ("limit", "100")])
            .await?;
        Ok(out["records"].as_array().cloned().unwrap_or_default())
    }
}

#[tokio::test]
async fn tryit_a_new_user_talks_to_the_agent_on_a_local_bluesky_and_sigterm_stops_everything() -> Result<()> {
    let started = Instant::now();
    let llm = ScriptedLlm::start(model).await?;
    let node_bin = tokio::task::spawn_blocking(binaries).await??.node.clone();
    let bin_dir = node_bin.parent().context("the binary's directory")?.display().to_string();
    let dir = tempfile::tempdir()?;
    let try_dir = dir.path().join("try");
    let (api_port, metrics_port, p2p_port) = (free_port()?, free_port()?, free_port()?);
    let env: Vec<(&str, String)> = vec![
        ("LLM_URL", llm.base_url()),
        ("LLM_MODEL", "scripted".into()),
        ("LLM_TIMEOUT", "10s".into()),
        ("TRY_DIR", try_dir.display().to_string()),
        ("BIN_DIR", bin_dir),
        ("API_PORT", api_port.to_string()),
        ("METRICS_PORT", metrics_port.to_string()),
        ("P2P_PORT", p2p_port.to_string()),
        ("POLL_INTERVAL", "300ms".into()),
        ("REPLY_TIMEOUT", ANSWERED.as_secs().to_string()),
        ("MODEL_DOWNLOAD", "false".into()),
        // Each of the script's two waits (the API, then the agent's login) may take most of
        // this test's own deadline on a loaded machine.
        ("READY_TIMEOUT", (READY.as_secs() * 4 / 5).to_string()),
    ];
    let mut session = Session::start(&env, dir.path().join("try-agent.out"))?;

    // Ready: the session file appears once the agent is logged in.
    let session_file = try_dir.join("session.env");
    let mut exited = None;
    let ready = wait_for(READY, "deploy/try-agent.sh to be ready", async || {
        if let Ok(Some(status)) = session.child.try_wait() {
            exited = Some(status);
            return Some(false);
        }
        session_file.is_file().then_some(true)
    })
    .await;
    match (ready, exited) {
        (Ok(true), _) => {}
        (_, Some(status)) => bail!("deploy/try-agent.sh exited with {status} before it was ready\n{}", session.tail()),
        (Err(e), _) => bail!("{e}\n{}", session.tail()),
        (Ok(false), None) => unreachable!(),
    }
    let ready_in = started.elapsed();
    let vars = session_vars(&session_file)?;
    let var = |k: &str| vars.get(k).cloned().with_context(|| format!("no {k} in {}", session_file.display()));
    let (pds, api, node_pid) = (var("TRY_PDS")?, var("TRY_API")?, var("TRY_NODE_PID")?.parse::<u32>()?);
    let (agent_did, user_did) = (var("TRY_AGENT_DID")?, var("TRY_USER_DID")?);
    assert_eq!(var("TRY_AGENT_HANDLE")?, "agent.test");
    assert_eq!(api, format!("http://127.0.0.1:{api_port}"));
    assert!(alive(node_pid), "druse-node runs");
    let out = session.output();
    assert!(out.contains("The druse agent is up") && out.contains("say \""), "it says what to do next:\n{out}");
    for role in ["AGENT", "OWNER", "USER"] {
        let password = var(&format!("TRY_{role}_PASSWORD"))?;
        assert!(out.contains(&password), "the password of {role} is printed");
    }
    // The config names the password's variable, never the password.
    let config = std::fs::read_to_string(try_dir.join("node.toml"))?;
    assert!(!config.contains(&var("TRY_AGENT_PASSWORD")?), "{config}");
    assert!(
        config.contains("password_env = \"DRUSE_TRY_AGENT_PASSWORD\"") && config.contains("mdns = false"),
        "{config}"
    );
    let http = reqwest::Client::new();
    let status: Value = http.get(format!("{api}/v1/agent")).send().await?.error_for_status()?.json().await?;
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["handle"], "agent.test", "{status}");
    assert_eq!(status["owner"], "theowner.test", "{status}");

    // `say`: posted as the user with a mention facet; it waits for and prints the answer.
    let said = run_ok(&["say", "hello @agent.test, what do you know about tide pools?"], &env, &session).await?;
    assert!(said.contains(ANSWER), "say prints the agent's answer:\n{said}");
    let uri = said
        .lines()
        .find_map(|l| l.strip_prefix("posted as @human.test: "))
        .with_context(|| format!("say prints the post's URI:\n{said}"))?
        .trim()
        .to_owned();
    assert!(uri.starts_with(&format!("at://{user_did}/app.bsky.feed.post/")), "{uri}");

    // On the network itself: the post mentions the agent, and the agent's reply is in its thread.
    let user = Reader::login(&pds, "human.test", &var("TRY_USER_PASSWORD")?).await?;
    let rkey = uri.rsplit('/').next().unwrap_or_default();
    let posted = user
        .get("com.atproto.repo.getRecord", &[("repo", &user_did), ("collection", "app.bsky.feed.post"), ("rkey", rkey)])
        .await?;
    let text = posted["value"]["text"].as_str().unwrap_or_default().to_owned();
    let facet = &posted["value"]["facets"][0];
    assert_eq!(facet["features"][0]["did"], agent_did.as_str(), "{posted}");
    let (start, end) = (facet["index"]["byteStart"].as_u64(), facet["index"]["byteEnd"].as_u64());
    assert_eq!(text.as_bytes().get(start.unwrap_or(0) as usize..end.unwrap_or(0) as usize), Some(&b"@agent.test"[..]));
    let replies = wait_for(ANSWERED, "the agent's reply in the thread", async || {
        Some(user.replies_by(&uri, &agent_did).await).filter(|r| !r.is_empty())
    })
    .await?;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0]["record"]["text"], ANSWER);
    assert_eq!(replies[0]["record"]["reply"]["parent"]["uri"], uri.as_str());
    assert!(llm.requests().iter().any(|r| r.has_tools() && r.text().contains("tide pools")), "the model was asked");

    // `replies`: the thread, the question and the answer.
    let shown = run_ok(&["replies"], &env, &session).await?;
    assert!(shown.contains(&uri) && shown.contains("what do you know about tide pools?"), "{shown}");
    assert!(shown.contains("@agent.test") && shown.contains(ANSWER), "{shown}");

    // A gated action: the agent asks its owner, and `approve` likes the request as the owner.
    let asked = run_ok(&["say", "--no-wait", "please follow @human.test"], &env, &session).await?;
    assert!(asked.contains("posted as @human.test"), "{asked}");
    eventually(ANSWERED, "an approval request waiting for the owner", async || {
        let status: Option<Value> =
            async { http.get(format!("{api}/v1/agent")).send().await.ok()?.json().await.ok() }.await;
        status.is_some_and(|s| s["pending"].as_array().is_some_and(|p| !p.is_empty()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", session.tail()))?;
    let follows = async || {
        user.records(&agent_did, "app.bsky.graph.follow")
            .await
            .map(|rs| rs.iter().filter(|r| r["value"]["subject"] == user_did.as_str()).count())
    };
    assert_eq!(follows().await?, 0, "nothing is followed before the owner approves");
    let approved = run_ok(&["approve"], &env, &session).await?;
    assert!(approved.contains("approving:") && approved.contains("may I follow"), "{approved}");
    eventually(ANSWERED, "the approved follow", async || follows().await.is_ok_and(|n| n == 1))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", session.tail()))?;
    let none = run(&["approve"], &env).await?;
    assert!(!none.status.success(), "nothing is left to approve");
    assert!(String::from_utf8_lossy(&none.stderr).contains("no approval request"), "{none:?}");

    // SIGTERM to the script: the node and the network stop, and nothing is left.
    let net_log = std::fs::read_to_string(try_dir.join("atproto.log"))?;
    let pg_port: u16 = net_log
        .lines()
        .find_map(|l| l.strip_prefix("[atproto] postgresql on 127.0.0.1:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("the network's log names PostgreSQL's port:\n{net_log}"))?;
    let mut ports = vec![api_port, metrics_port, p2p_port, pg_port];
    for k in ["TRY_PDS", "TRY_APPVIEW", "TRY_PLC"] {
        ports.push(port_of(&var(k)?)?);
    }
    for port in &ports {
        assert!(listening(*port), "port {port} is in use while the session runs");
    }
    let net_pid: u32 = var("TRY_NET_PID")?.parse()?;
    let stopping = Instant::now();
    let pid = session.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status()?.success());
    let status = wait_for(STOPPED, "deploy/try-agent.sh to exit after SIGTERM", async || {
        session.child.try_wait().ok().flatten()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", session.tail()))?;
    let stopped_in = stopping.elapsed();
    let out = session.output();
    assert_eq!(status.code(), Some(143), "{status}\n{}", session.tail());
    assert!(out.contains("druse-node exited with status 0"), "the node stopped on SIGTERM:\n{}", session.tail());
    assert!(out.contains(&format!("the node's data dir is {}", try_dir.join("node").display())), "{}", session.tail());
    assert!(!alive(node_pid), "druse-node (pid {node_pid}) is gone");
    assert!(!alive(net_pid), "the network's start script (pid {net_pid}) is gone");
    let left = processes_naming(&try_dir.display().to_string());
    assert!(left.is_empty(), "no process of the session is left: {left:?}");
    for port in &ports {
        assert!(!listening(*port), "nothing listens on port {port} any more");
    }
    assert!(!session_file.exists(), "the session file is removed");
    assert!(try_dir.join("node.log").is_file() && try_dir.join("node").is_dir(), "the data and the log are kept");
    eprintln!("try-agent.sh: ready in {ready_in:?}, stopped in {stopped_in:?}, whole scenario {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn tryit_refuses_to_start_without_a_model_and_names_what_is_missing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let try_dir = dir.path().join("try");
    let env = vec![("LLM_URL", "http://127.0.0.1:9/v1".to_owned()), ("TRY_DIR", try_dir.display().to_string())];
    let out = run(&[], &env).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("LLM_MODEL"), "the message names LLM_MODEL: {stderr}");
    assert!(!stderr.contains("set LLM_URL"), "LLM_URL was given: {stderr}");
    assert!(!try_dir.exists(), "nothing was started or written");

    let out = run(&[], &[("TRY_DIR", try_dir.display().to_string())]).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("LLM_URL") && stderr.contains("LLM_MODEL"), "{stderr}");

    // A subcommand without a running session says so.
    let out = run(&["say", "hello"], &[("TRY_DIR", try_dir.display().to_string())]).await?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no running session"), "{out:?}");
    Ok(())
}
