#![allow(clippy::unwrap_used)]
//! The real binaries, driven through their CLI: `druse-mgmt run` and two `druse-node run`
//! processes publish, endorse and obey weather, and export it all in `/metrics`; a node stops
//! cleanly on SIGTERM and keeps every write across a restart; and its JSON log is one object
//! per line with a startup line that names where to reach it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use druse_tests::metrics;
use druse_tests::process::{ProcNode, Startup, binaries, run_cli, trio};
use druse_tests::swarm::{key, mgmt_key};
use druse_tests::{WAIT, eventually, wait_for};

/// The value of one series in a scrape; fails the test if the series is missing.
fn series(scrape: &str, who: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics::value(scrape, name, labels).unwrap_or_else(|| panic!("{who} exports no {name}{labels:?}:\n{scrape}"))
}

/// Runs a CLI subcommand pointed at `node`; fails the test quoting the node's log.
async fn cli(program: &Path, args: &[&str], node: &ProcNode) -> String {
    node.cli(program, args).await.unwrap_or_else(|e| panic!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn binaries_publish_endorse_and_obey_weather_through_the_cli_and_export_it_in_metrics() {
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (mgmt_dir, a_dir, b_dir) = (root.path().join("mgmt"), root.path().join("a"), root.path().join("b"));
    mgmt_key().save(&mgmt_dir.join("node.key")).unwrap();
    key(1).save(&a_dir.join("node.key")).unwrap();
    key(2).save(&b_dir.join("node.key")).unwrap();

    let id = run_cli(&bins.node, &["id", "--data-dir", &mgmt_dir.display().to_string()]).await.unwrap();
    let mgmt_public = mgmt_key().public().to_string();
    assert!(id.contains(&mgmt_public), "`druse-node id` printed another key:\n{id}");
    let trust_list = root.path().join("trust.list");
    std::fs::write(&trust_list, format!("# the test swarm's management key\n{mgmt_public}  # druse-mgmt\n")).unwrap();

    let [mgmt, a, b] = trio(bins, [&mgmt_dir, &a_dir, &b_dir], &trust_list).await.unwrap();
    let logs = || [&mgmt, &a, &b].map(|n| n.process.log_tail()).join("\n");

    let skill = cli(
        &bins.node,
        &[
            "skill",
            "publish",
            "--name",
            "parse-iso-durations",
            "--text",
            "Split on T, then parse each unit.",
            "--tags",
            "time,parsing",
        ],
        &a,
    )
    .await;
    let skill = skill.trim().to_owned();
    let crystal = format!("/v1/crystals/{skill}");
    for node in [&mgmt, &b] {
        eventually(WAIT, format_args!("{} to store {skill}", node.process.name), async || {
            node.get_json(&crystal).await.is_ok_and(|c| c.is_some())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    }

    cli(&bins.mgmt, &["endorse", &skill, "--note", "reviewed"], &mgmt).await;
    let verified = wait_for(WAIT, "b to show the skill verified", async || {
        let c = b.get_json(&crystal).await.ok()??;
        (c["is_verified"] == true).then_some(c)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert_eq!(verified["verified_by"], mgmt_public.as_str());

    cli(&bins.mgmt, &["weather", "--level", "0.9", "--duration", "60s", "--reason", "drill"], &mgmt).await;
    eventually(WAIT, "b to halt", async || {
        b.get_json("/v1/weather").await.ok().flatten().is_some_and(|w| w["halted"] == true)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let status: serde_json::Value = serde_json::from_str(&cli(&bins.node, &["status"], &b).await).unwrap();
    assert_eq!(status["halted"], true, "`druse-node status` on b: {status}");

    let a_scrape = a.scrape().await.unwrap();
    assert_eq!(series(&a_scrape, "a", "druse_published_total", &[("kind", "crystal")]), 1.0);
    let b_scrape = b.scrape().await.unwrap();
    assert_eq!(series(&b_scrape, "b", "druse_endorsements_applied_total", &[("verdict", "endorse")]), 1.0);
    assert_eq!(series(&b_scrape, "b", "druse_halted", &[]), 1.0);
    assert_eq!(series(&b_scrape, "b", "druse_weather_cortisol", &[]), 0.9);
    assert!(
        series(&b_scrape, "b", "druse_ingest_outcomes_total", &[("kind", "crystal"), ("outcome", "accepted")]) >= 1.0
    );
    let m_scrape = mgmt.scrape().await.unwrap();
    assert_eq!(series(&m_scrape, "mgmt", "druse_published_total", &[("kind", "endorsement")]), 1.0);
    assert_eq!(series(&m_scrape, "mgmt", "druse_published_total", &[("kind", "weather")]), 1.0);

    match which("promtool") {
        Some(promtool) => {
            for (who, scrape) in [("a", &a_scrape), ("b", &b_scrape), ("mgmt", &m_scrape)] {
                promtool_check(&promtool, scrape).await.unwrap_or_else(|e| panic!("{who}'s scrape: {e}"));
            }
        }
        None => eprintln!("promtool is not on PATH; skipping `promtool check metrics`"),
    }

    for mut node in [b, a, mgmt] {
        let status = node.process.terminate().await.unwrap();
        assert!(
            status.success(),
            "{} exited with {status} after SIGTERM\n{}",
            node.process.name,
            node.process.log_tail()
        );
    }
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// Pipes a scrape through `promtool check metrics`; fails with promtool's complaints.
async fn promtool_check(promtool: &Path, scrape: &str) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin.write_all(scrape.as_bytes()).await.map_err(|e| e.to_string())?;
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .map_err(|_| "promtool hung".to_owned())?
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The lines `daemon::run` logs when SIGTERM stops it.
const STOPPING: &str = "stopping: leaving the swarm and flushing the store";
const STOPPED: &str = "stopped";

/// A data directory holding `key(1)`, and a trust list naming the management key.
fn edge_dir(root: &Path) -> (PathBuf, PathBuf) {
    let dir = root.join("edge");
    key(1).save(&dir.join("node.key")).unwrap();
    let trust_list = root.join("trust.list");
    std::fs::write(&trust_list, format!("{}  # druse-mgmt\n", mgmt_key().public())).unwrap();
    (dir, trust_list)
}

/// The id (a number) a JSON answer gives a memory crystal, as the CLI takes it.
fn crystal_id(added: &serde_json::Value) -> String {
    let id = &added["crystal"]["id"];
    id.as_u64().unwrap_or_else(|| panic!("the answer has no crystal id ({id}): {added}")).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_the_node_cleanly_and_a_restart_keeps_every_write() {
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (dir, trust_list) = edge_dir(root.path());
    let mut node = ProcNode::start("druse-node", &bins.node, &dir, &trust_list, &[]).await.unwrap();

    let mut memories = Vec::new();
    for text in ["Sam's sister is called Ana", "Sam moved to Lisbon in May", "Sam prefers tea to coffee"] {
        let added: serde_json::Value =
            serde_json::from_str(&cli(&bins.node, &["memory", "add", text, "--namespace", "user:sam"], &node).await)
                .unwrap();
        memories.push((crystal_id(&added), text));
    }
    let mut skills = Vec::new();
    for name in ["retry-with-backoff", "parse-iso-durations"] {
        let args = [
            "skill",
            "publish",
            "--name",
            name,
            "--text",
            "Read the input, validate it, answer.",
            "--stats",
            "5,4,0.8",
        ];
        skills.push(cli(&bins.node, &args, &node).await.trim().to_owned());
    }

    let status = node.process.terminate().await.unwrap();
    let log = node.process.log_tail();
    assert!(status.success(), "druse-node exited with {status} after SIGTERM\n{log}");
    assert!(log.contains(STOPPING), "no line saying the node leaves the swarm and flushes:\n{log}");
    assert!(log.lines().any(|l| l.trim_end().ends_with(STOPPED)), "no final `stopped` line:\n{log}");

    let mut node = ProcNode::start("druse-node (restarted)", &bins.node, &dir, &trust_list, &[]).await.unwrap();
    for (id, text) in &memories {
        let crystal: serde_json::Value = serde_json::from_str(&cli(&bins.node, &["memory", "get", id], &node).await)
            .unwrap_or_else(|e| panic!("memory {id} after the restart: {e}"));
        assert_eq!(crystal["text"], *text, "memory {id} after the restart");
    }
    for id in &skills {
        let skill = node.get_json(&format!("/v1/crystals/{id}")).await.unwrap();
        let skill =
            skill.unwrap_or_else(|| panic!("skill {id} is gone after the restart\n{}", node.process.log_tail()));
        assert_eq!(skill["id"], id.as_str());
    }
    assert!(node.process.terminate().await.unwrap().success());
}

/// Writes memories through the CLI (pointed by `flags`) until stopped; returns the writes the
/// node acknowledged.
async fn write_until_stopped(
    program: PathBuf,
    log: PathBuf,
    data_dir: PathBuf,
    round: usize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<(String, String)> {
    let mut acknowledged = Vec::new();
    let mut flags = None;
    for i in 0.. {
        if *stop.borrow_and_update() {
            break;
        }
        // The API's port is the one the node names in its startup line.
        if flags.is_none() {
            flags = Startup::find(&std::fs::read_to_string(&log).unwrap_or_default()).map(|startup| {
                vec!["--api".to_owned(), startup.api, "--data-dir".to_owned(), data_dir.display().to_string()]
            });
        }
        let written = match &flags {
            Some(flags) => {
                let text = format!("round {round} write {i}: Sam keeps a notebook of every trip");
                let mut args = vec!["memory", "add", text.as_str(), "--namespace", "user:sam"];
                args.extend(flags.iter().map(String::as_str));
                run_cli(&program, &args).await.map(|out| (out, text))
            }
            None => Err(anyhow::anyhow!("not started yet")),
        };
        match written {
            Ok((out, text)) => {
                let added: serde_json::Value =
                    serde_json::from_str(&out).unwrap_or_else(|e| panic!("an acknowledged write printed {out}: {e}"));
                acknowledged.push((crystal_id(&added), text));
            }
            // Not up yet, or already stopping: nothing was acknowledged. Try again shortly,
            // unless the round ends first.
            Err(_) => {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_at_any_moment_after_start_exits_cleanly_and_keeps_every_acknowledged_write() {
    use rand::{Rng, SeedableRng};
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (dir, trust_list) = edge_dir(root.path());
    let mut rng = rand::rngs::StdRng::seed_from_u64(10);
    let mut acknowledged = Vec::new();
    // Moments from just after the process runs (an exec'd program that has not reached its
    // first instruction can catch nothing) to well into its work, with writes arriving all along.
    for round in 0..8 {
        let after = Duration::from_millis(rng.random_range(20..2_500));
        let name = format!("druse-node (SIGTERM {after:?} after start)");
        let mut node = ProcNode::spawn_with(&name, &bins.node, &dir, &trust_list, &[], &[]).unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let log = node.process.log_path().to_owned();
        let writer = tokio::spawn(write_until_stopped(bins.node.clone(), log, dir.clone(), round, stopped));
        tokio::time::sleep(after).await;
        let status = node.process.terminate().await.unwrap();
        stop.send(true).unwrap();
        acknowledged.extend(writer.await.unwrap());
        let log = node.process.log_tail();
        assert!(status.success(), "{name} exited with {status}\n{log}");
        let stopped_line = node.process.log().lines().any(|l| l.trim_end().ends_with(STOPPED));
        assert!(stopped_line, "{name}: no `stopped` line\n{log}");
    }
    assert!(!acknowledged.is_empty(), "no write was acknowledged in any round");
    let mut node = ProcNode::start("druse-node (after the stops)", &bins.node, &dir, &trust_list, &[]).await.unwrap();
    for (id, text) in &acknowledged {
        let crystal: serde_json::Value = serde_json::from_str(&cli(&bins.node, &["memory", "get", id], &node).await)
            .unwrap_or_else(|e| panic!("acknowledged memory {id} after the stops: {e}"));
        assert_eq!(crystal["text"], text.as_str(), "memory {id}");
    }
    assert!(node.process.terminate().await.unwrap().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_and_the_startup_line_names_every_address() {
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (dir, trust_list) = edge_dir(root.path());
    let mut node = ProcNode::start_with(
        "druse-node --log-format json",
        &bins.node,
        &dir,
        &trust_list,
        &[],
        &["--log-format", "json"],
    )
    .await
    .unwrap();
    let startup = wait_for(WAIT, "the startup line", async || {
        node.process.log().lines().find(|l| l.contains(" started: ")).map(str::to_owned)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", node.process.log_tail()));
    let status = node.status().await.unwrap();
    // The node was told to bind port 0: the line names the ports the OS chose, and they answer
    // (`node.api` and `node.metrics` are the ones the startup line named).
    for url in [&node.api, &node.metrics] {
        let port: u16 = url.rsplit_once(':').unwrap().1.parse().unwrap();
        assert_ne!(port, 0, "the startup line names port 0: {startup}");
    }
    assert!(node.scrape().await.unwrap().contains("druse_build_info"), "the metrics listener answers");

    let stopped = node.process.terminate().await.unwrap();
    assert!(stopped.success(), "exited with {stopped} after SIGTERM\n{}", node.process.log_tail());
    let text = node.process.log();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON object ({e}): {l}")))
        .collect();
    assert!(lines.iter().all(serde_json::Value::is_object), "{text}");
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["fields"]["message"].as_str()).collect();
    assert!(messages.contains(&STOPPING) && messages.contains(&STOPPED), "{messages:#?}");

    let startup: serde_json::Value = serde_json::from_str(&startup).unwrap();
    let message = startup["fields"]["message"].as_str().unwrap();
    assert_eq!(startup["level"], "INFO", "{startup}");
    let peer_id = key(1).peer_id().to_string();
    assert!(message.starts_with(&format!("druse edge node {peer_id} started")), "{message}");
    let listen = status["listen_addrs"].as_array().unwrap();
    assert!(!listen.is_empty(), "{status}");
    for addr in listen {
        assert!(message.contains(addr.as_str().unwrap()), "the startup line misses {addr}: {message}");
    }
    assert!(message.contains(&format!("API {}", node.api)), "{message}");
    assert!(message.contains(&format!("metrics {}/metrics", node.metrics)), "{message}");
    let embedder = status["embedder"].as_str().unwrap();
    assert!(message.contains(&format!("embedder {embedder}")), "{message}");
}
