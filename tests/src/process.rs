//! The real binaries as child processes: building them once per test process, spawning
//! `druse-node run` / `druse-mgmt run` on loopback with every port chosen by the OS (the bound
//! addresses are read from the node's startup line) and kill-on-drop, running CLI subcommands,
//! and reading a child's log when something fails.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use druse_protocol::net::{Multiaddr, PeerId};
use serde_json::Value;

use crate::{WAIT, eventually, wait_for};

/// How long one CLI subcommand may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);

/// Lines of a child's log quoted in a failure message.
const LOG_TAIL_LINES: usize = 40;

/// Paths of the built binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub node: PathBuf,
    pub mgmt: PathBuf,
}

static BINARIES: OnceLock<Result<Binaries, String>> = OnceLock::new();

/// Builds `druse-node` and `druse-mgmt` (once per process, in the profile this test binary was
/// built with) and returns their paths. Blocks while cargo runs; call it from
/// `spawn_blocking` in async code.
///
/// Cargo holds the build-directory lock only while it compiles, not while the test binaries
/// run, so this nested `cargo build` does not deadlock under `cargo test`; it waits like any
/// other build when another cargo holds the lock.
pub fn binaries() -> Result<&'static Binaries> {
    BINARIES.get_or_init(|| build().map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow!("{e}"))
}

/// The `target/<profile>` directory this binary runs from (`.../deps/<test binary>` for tests).
fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test binary")?;
    let mut dir = exe.parent().context("the test binary has no directory")?;
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir = dir.parent().context("deps has no parent")?;
    }
    Ok(dir.to_owned())
}

fn build() -> Result<Binaries> {
    let dir = profile_dir()?;
    let profile = dir.file_name().and_then(OsStr::to_str).context("profile directory name")?.to_owned();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("workspace root")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(&cargo);
    command.current_dir(workspace).args(["build", "-p", "druse-node", "-p", "druse-management", "--bins"]);
    scrub_test_env(&mut command, dir.parent().unwrap_or(dir.as_path()));
    match profile.as_str() {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    let started = std::time::Instant::now();
    let output = command.output().with_context(|| format!("running {cargo:?} build"))?;
    eprintln!("cargo build of druse-node and druse-mgmt ({profile}) took {:?}", started.elapsed());
    if !output.status.success() {
        bail!("cargo build of the binaries failed ({}):\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    }
    let binaries = Binaries {
        node: dir.join(format!("druse-node{}", std::env::consts::EXE_SUFFIX)),
        mgmt: dir.join(format!("druse-mgmt{}", std::env::consts::EXE_SUFFIX)),
    };
    for path in [&binaries.node, &binaries.mgmt] {
        if !path.is_file() {
            bail!("cargo build succeeded but {} does not exist (a --target build?)", path.display());
        }
    }
    Ok(binaries)
}

/// Gives a nested cargo the environment of a cargo started from a shell.
///
/// Cargo sets `CARGO_MANIFEST_DIR`, `CARGO_PKG_*` and friends, and prepends its library paths
/// to `LD_LIBRARY_PATH`, only for the test binary it runs. Build scripts track some of these
/// (ring reruns when `CARGO_MANIFEST_DIR` or `CARGO_PKG_NAME` changes in cargo's environment),
/// so a nested cargo that inherited them would rebuild ring, rustls, libp2p and every druse
/// crate, and the next ordinary build would rebuild them all again.
fn scrub_test_env(command: &mut std::process::Command, target_dir: &Path) {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let test_only = name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || matches!(
                name.as_ref(),
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
                    | "OUT_DIR"
            );
        if test_only {
            command.env_remove(name.as_ref());
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        let kept: Vec<PathBuf> = std::env::split_paths(&paths)
            .filter(|p| !p.starts_with(target_dir) && !p.components().any(|c| c.as_os_str() == "toolchains"))
            .collect();
        match std::env::join_paths(&kept) {
            Ok(joined) if !kept.is_empty() => command.env("LD_LIBRARY_PATH", joined),
            _ => command.env_remove("LD_LIBRARY_PATH"),
        };
    }
}

/// A free TCP port on loopback (free when asked; a child binds it a moment later, so another
/// process may take it first: prefer port 0 and [`Startup`] where the child reports its ports).
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// A command with no `DRUSE_*` variable leaking in from the test's environment, and with the
/// MiniLM download off: a test node never reaches the Hugging Face hub (CI has no route to it).
/// A test of the download turns it on with `--model-download true`.
fn command(program: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DRUSE_") {
            command.env_remove(name);
        }
    }
    command.env("DRUSE_MODEL_DOWNLOAD", "false");
    command
}

/// A child process, killed when dropped, logging to a file.
#[derive(Debug)]
pub struct Process {
    pub name: String,
    child: tokio::process::Child,
    log: PathBuf,
}

impl Process {
    /// Spawns `program args`, with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: PathBuf) -> Result<Self> {
        Self::spawn_env(name, program, args, &[], log)
    }

    /// [`Process::spawn`] with `env` set in the child's environment.
    pub fn spawn_env(name: &str, program: &Path, args: &[String], env: &[(&str, &str)], log: PathBuf) -> Result<Self> {
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = command(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning {}", program.display()))?;
        Ok(Self { name: name.to_owned(), child, log })
    }

    /// The operating system's id of the child; `None` once it has been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The file the child logs to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The child's whole log so far (empty if it cannot be read yet).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of the child's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(cannot read the log: {e})"));
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        format!("--- last lines of {} ({}) ---\n{tail}", self.name, self.log.display())
    }

    /// Fails, quoting the log, if the child has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!("{} exited with {status}\n{}", self.name, self.log_tail()),
            Err(error) => bail!("{}: {error}", self.name),
        }
    }

    /// Kills the child with SIGKILL, so no shutdown path runs, and waits for it to go.
    pub async fn kill9(&mut self) -> Result<()> {
        tokio::time::timeout(WAIT, self.child.kill())
            .await
            .with_context(|| format!("{} did not go within {WAIT:?} of SIGKILL", self.name))?
            .with_context(|| format!("killing {}", self.name))
    }

    /// Asks the child to stop with SIGTERM and waits for it to exit.
    pub async fn terminate(&mut self) -> Result<ExitStatus> {
        let pid = self.child.id().with_context(|| format!("{} has already exited", self.name))?;
        let status = tokio::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().await?;
        if !status.success() {
            bail!("kill -TERM {pid} failed");
        }
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .with_context(|| format!("{} did not exit within {WAIT:?} of SIGTERM\n{}", self.name, self.log_tail()))?
            .context("waiting for the child")
    }
}

/// Runs a CLI subcommand to completion; returns its stdout, or fails quoting its stderr.
pub async fn run_cli(program: &Path, args: &[&str]) -> Result<String> {
    let output = tokio::time::timeout(CLI_TIMEOUT, command(program).args(args).kill_on_drop(true).output())
        .await
        .with_context(|| format!("{} {args:?} did not finish within {CLI_TIMEOUT:?}", program.display()))?
        .with_context(|| format!("running {}", program.display()))?;
    if !output.status.success() {
        bail!(
            "{} {args:?} failed ({}):\n{}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8(output.stdout).context("the CLI printed non-UTF-8")
}

/// Runs `program args` with `env` set to completion, whatever its exit status; returns its output.
pub async fn run_cli_env(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<std::process::Output> {
    tokio::time::timeout(CLI_TIMEOUT, command(program).args(args).envs(env.iter().copied()).kill_on_drop(true).output())
        .await
        .with_context(|| format!("{} {args:?} did not finish within {CLI_TIMEOUT:?}", program.display()))?
        .with_context(|| format!("running {}", program.display()))
}

/// The addresses a node names in its startup line (`druse edge node <peer> started: p2p
/// <addrs>; API http://<addr>; metrics http://<addr>/metrics; ...`), which are the ones it
/// bound, so a node started on port 0 tells where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Startup {
    /// Base URL of the API, like `http://127.0.0.1:41234`.
    pub api: String,
    /// Base URL of the metrics listener.
    pub metrics: String,
    /// The P2P listen addresses, without `/p2p/<peer id>`.
    pub p2p: Vec<String>,
}

impl Startup {
    /// The startup line's addresses, from a log in the text or the JSON format; `None` while
    /// the log has no startup line.
    pub fn find(log: &str) -> Option<Self> {
        log.lines().find_map(Self::parse_line)
    }

    fn parse_line(line: &str) -> Option<Self> {
        let (_, rest) = line.split_once(" started: p2p ")?;
        let (p2p, rest) = rest.split_once("; API http://")?;
        let (api, rest) = rest.split_once("; metrics http://")?;
        let (metrics, _) = rest.split_once("/metrics")?;
        let p2p = p2p.split(", ").filter(|a| !a.is_empty()).map(str::to_owned).collect();
        Some(Self { api: format!("http://{api}"), metrics: format!("http://{metrics}"), p2p })
    }

    /// Waits until `process` logs its startup line; fails if it exits first or after `timeout`.
    pub async fn wait(process: &mut Process, timeout: Duration) -> Result<Self> {
        let name = process.name.clone();
        let mut exited = None;
        let found = wait_for(timeout, format_args!("{name} to log its startup line"), async || {
            if let Err(error) = process.check_running() {
                exited = Some(error);
                return Some(None);
            }
            Self::find(&process.log()).map(Some)
        })
        .await?;
        match (found, exited) {
            (Some(startup), _) => Ok(startup),
            (None, Some(error)) => Err(error),
            (None, None) => bail!("{name} logged no startup line"),
        }
    }
}

/// A `druse-node run` or `druse-mgmt run` child that may not have bound its listeners yet.
#[derive(Debug)]
pub struct Starting {
    pub process: Process,
    pub data_dir: PathBuf,
}

impl Starting {
    /// Waits for the startup line, then until the API answers.
    pub async fn ready(mut self) -> Result<ProcNode> {
        let startup = Startup::wait(&mut self.process, WAIT).await.with_context(|| self.process.log_tail())?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
        let mut node = ProcNode {
            process: self.process,
            data_dir: self.data_dir,
            api: startup.api,
            metrics: startup.metrics,
            http,
        };
        node.wait_healthy().await?;
        Ok(node)
    }

    /// The `--api` and `--data-dir` flags of a CLI subcommand pointed at this node, once
    /// its startup line has named the API's address; `None` before.
    pub fn cli_flags(&self) -> Option<Vec<String>> {
        let startup = Startup::find(&self.process.log())?;
        Some(cli_flags(&startup.api, &self.data_dir))
    }
}

fn cli_flags(api: &str, data_dir: &Path) -> Vec<String> {
    vec!["--api".into(), api.to_owned(), "--data-dir".into(), data_dir.display().to_string()]
}

/// A management process and two edges on 127.0.0.1, each keyed from the `node.key` in its
/// directory and trusting `trust_list`: `a` dials the management node, `b` both. Returns once
/// each is meshed with both others on every topic (or fails with the three logs' tails).
pub async fn trio(bins: &Binaries, dirs: [&Path; 3], trust_list: &Path) -> Result<[ProcNode; 3]> {
    trio_with(bins, dirs, trust_list, &[]).await
}

/// [`trio`], with more command-line arguments for `b` (its `--config`, say).
pub async fn trio_with(bins: &Binaries, dirs: [&Path; 3], trust_list: &Path, b_args: &[&str]) -> Result<[ProcNode; 3]> {
    let [mgmt_dir, a_dir, b_dir] = dirs;
    let mgmt = ProcNode::start("druse-mgmt", &bins.mgmt, mgmt_dir, trust_list, &[]).await?;
    let mgmt_addr = mgmt.p2p_addr().await?;
    let a = ProcNode::start("druse-node a", &bins.node, a_dir, trust_list, std::slice::from_ref(&mgmt_addr)).await?;
    let a_addr = a.p2p_addr().await?;
    let b = ProcNode::start_with("druse-node b", &bins.node, b_dir, trust_list, &[mgmt_addr, a_addr], b_args).await?;
    let nodes = [mgmt, a, b];
    for node in &nodes {
        let meshed = eventually(
            WAIT,
            format_args!("{} to mesh with both others on every topic", node.process.name),
            async || {
                node.status().await.is_ok_and(|s| {
                    s["connected_peers"].as_u64() == Some(2)
                        && s["mesh_peers"].as_object().is_some_and(|m| m.values().all(|n| n.as_u64() == Some(2)))
                })
            },
        )
        .await;
        if let Err(error) = meshed {
            bail!("{error}\n{}", nodes.iter().map(|n| n.process.log_tail()).collect::<Vec<_>>().join("\n"));
        }
    }
    Ok(nodes)
}

/// A `druse-node run` or `druse-mgmt run` child with its API and metrics listeners.
#[derive(Debug)]
pub struct ProcNode {
    pub process: Process,
    pub data_dir: PathBuf,
    /// Base URL of the API, like `http://127.0.0.1:7700`.
    pub api: String,
    /// Base URL of the metrics listener.
    pub metrics: String,
    http: reqwest::Client,
}

impl ProcNode {
    /// Spawns `program run` on loopback: P2P, API and metrics on ports the OS picks, mDNS off,
    /// 100 ms heartbeats; returns once the node has logged its startup line and its API answers.
    pub async fn start(
        name: &str,
        program: &Path,
        data_dir: &Path,
        trust_list: &Path,
        bootstrap: &[Multiaddr],
    ) -> Result<Self> {
        Self::start_with(name, program, data_dir, trust_list, bootstrap, &[]).await
    }

    /// Spawns `program run` as [`ProcNode::start`] does, with `extra` flags appended to its
    /// arguments, and returns at once: the API's address is known from the startup line
    /// ([`Startup`], [`Starting::ready`]).
    pub fn spawn_with(
        name: &str,
        program: &Path,
        data_dir: &Path,
        trust_list: &Path,
        bootstrap: &[Multiaddr],
        extra: &[&str],
    ) -> Result<Starting> {
        Self::spawn_env(name, program, data_dir, trust_list, bootstrap, extra, &[])
    }

    /// [`ProcNode::spawn_with`] with `env` set in the child's environment.
    pub fn spawn_env(
        name: &str,
        program: &Path,
        data_dir: &Path,
        trust_list: &Path,
        bootstrap: &[Multiaddr],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Starting> {
        let mut args: Vec<String> = [
            "run",
            "--data-dir",
            &data_dir.display().to_string(),
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--api-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--trust-list",
            &trust_list.display().to_string(),
            "--mdns",
            "false",
            "--heartbeat",
            "100ms",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        if !bootstrap.is_empty() {
            args.push("--bootstrap".into());
            args.push(bootstrap.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
        }
        args.extend(extra.iter().map(ToString::to_string));
        let log = data_dir.with_extension("log");
        let process = Process::spawn_env(name, program, &args, env, log)?;
        Ok(Starting { process, data_dir: data_dir.to_owned() })
    }

    /// [`ProcNode::spawn_with`], then waits for the startup line and until the API answers.
    pub async fn start_with(
        name: &str,
        program: &Path,
        data_dir: &Path,
        trust_list: &Path,
        bootstrap: &[Multiaddr],
        extra: &[&str],
    ) -> Result<Self> {
        Self::spawn_with(name, program, data_dir, trust_list, bootstrap, extra)?.ready().await
    }

    /// Waits until the API answers; fails, quoting the log, if the child exits first.
    pub async fn wait_healthy(&mut self) -> Result<()> {
        let url = format!("{}/healthz", self.api);
        let http = self.http.clone();
        let mut waited = eventually(WAIT, format_args!("{} to answer {url}", self.process.name), async || {
            http.get(&url).send().await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        if waited.is_err() {
            waited = waited.and(self.process.check_running());
        }
        waited.with_context(|| self.process.log_tail())
    }

    /// The `--api` and `--data-dir` flags that point a CLI subcommand at this node.
    pub fn cli_flags(&self) -> Vec<String> {
        cli_flags(&self.api, &self.data_dir)
    }

    /// Runs a CLI subcommand of `program` pointed at this node (its [`ProcNode::cli_flags`]
    /// appended); returns its stdout, or fails quoting its stderr and this node's log.
    pub async fn cli(&self, program: &Path, args: &[&str]) -> Result<String> {
        let flags = self.cli_flags();
        let all: Vec<&str> = args.iter().copied().chain(flags.iter().map(String::as_str)).collect();
        run_cli(program, &all).await.with_context(|| self.process.log_tail())
    }

    /// GETs a JSON document from the API; `None` on a non-success status.
    pub async fn get_json(&self, path: &str) -> Result<Option<Value>> {
        let response = self.http.get(format!("{}{path}", self.api)).send().await?;
        if !response.status().is_success() {
            return Ok(None);
        }
        Ok(Some(response.json().await?))
    }

    /// `/v1/status`.
    pub async fn status(&self) -> Result<Value> {
        self.get_json("/v1/status").await?.context("/v1/status answered an error")
    }

    /// The PeerId the node reports.
    pub async fn peer_id(&self) -> Result<PeerId> {
        let status = self.status().await?;
        status["peer_id"].as_str().context("status has no peer_id")?.parse().context("status peer_id")
    }

    /// A P2P address of the node, ending in `/p2p/<peer id>`.
    pub async fn p2p_addr(&self) -> Result<Multiaddr> {
        let addr = wait_for(WAIT, format_args!("{} to report a listen address", self.process.name), async || {
            let status = self.status().await.ok()?;
            status["listen_addrs"].as_array()?.first()?.as_str().map(str::to_owned)
        })
        .await?;
        let peer = self.peer_id().await?;
        format!("{addr}/p2p/{peer}").parse().with_context(|| format!("{addr}/p2p/{peer}"))
    }

    /// A scrape of the metrics listener's `/metrics`.
    pub async fn scrape(&self) -> Result<String> {
        let response = self.http.get(format!("{}/metrics", self.metrics)).send().await?;
        if !response.status().is_success() {
            bail!("{}/metrics answered {}", self.metrics, response.status());
        }
        Ok(response.text().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: &str = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN";

    #[test]
    fn the_startup_line_gives_the_bound_addresses_in_the_text_format() {
        let log = format!(
            "2026-11-23T21:00:00.000000Z  INFO druse_node::node: opening the store\n\
             2026-11-23T21:00:00.100000Z  INFO druse_node::daemon: druse edge node {PEER} started: p2p \
             /ip4/127.0.0.1/tcp/40001, /ip4/127.0.0.1/udp/40002/quic-v1; API http://127.0.0.1:40003; metrics \
             http://127.0.0.1:40004/metrics; embedder hashing-384; trusted management keys: 1\n"
        );
        let startup = Startup::find(&log).unwrap();
        assert_eq!(startup.api, "http://127.0.0.1:40003");
        assert_eq!(startup.metrics, "http://127.0.0.1:40004");
        assert_eq!(startup.p2p, ["/ip4/127.0.0.1/tcp/40001", "/ip4/127.0.0.1/udp/40002/quic-v1"]);
    }

    #[test]
    fn the_startup_line_gives_the_bound_addresses_in_the_json_format() {
        let line = format!(
            r#"{{"timestamp":"2026-11-23T21:00:00Z","level":"INFO","fields":{{"message":"druse management node {PEER} started: p2p /ip4/127.0.0.1/tcp/40001; API http://127.0.0.1:40003; metrics http://127.0.0.1:40004/metrics; embedder hashing-384; trusted management keys: 1"}},"target":"druse_node::daemon"}}"#
        );
        let startup = Startup::find(&line).unwrap();
        assert_eq!(startup.api, "http://127.0.0.1:40003");
        assert_eq!(startup.metrics, "http://127.0.0.1:40004");
        assert_eq!(startup.p2p, ["/ip4/127.0.0.1/tcp/40001"]);
    }

    #[test]
    fn a_log_without_the_startup_line_names_no_address() {
        assert_eq!(Startup::find("2026-11-23T21:00:00Z  INFO druse_node::node: opening the store\n"), None);
        assert_eq!(Startup::find(""), None);
    }
}
