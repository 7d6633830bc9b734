#![allow(clippy::unwrap_used)]
//! A node's memory over MCP, as an agent developer's client sees it: the official Python MCP
//! SDK (`tests/mcp/client.py`) against a real `druse-node` process, over streamable HTTP at
//! `/mcp` and over stdio through `druse-node mcp`. The script runs a plan and prints what
//! happened as JSON lines; the assertions are here.
//!
//! Needs the SDK's venv (`bash tests/mcp/setup.sh`, which `tests/setup.sh` runs); without it a
//! test fails with a clear message when `CI` is set and skips with a printed reason otherwise.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use druse_protocol::ContentId;
use druse_tests::process::{ProcNode, binaries};
use druse_tests::swarm::mgmt_key;
use druse_tests::{WAIT, eventually};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

#[path = "mcp/skills.rs"]
mod skills;

/// How long one run of the client script may take.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The venv `tests/mcp/setup.sh` installs the SDK into.
fn venv() -> PathBuf {
    match std::env::var_os("DRUSE_MCP_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/druse/mcp-venv"),
    }
}

/// The venv's python when it can import the SDK; otherwise fails the test when `CI` is set,
/// or prints why it skips and returns `None`.
fn python_or_skip(test: &str) -> Option<PathBuf> {
    let python = venv().join("bin/python");
    let works = std::process::Command::new(&python)
        .args(["-c", "import mcp, httpx2"])
        .output()
        .is_ok_and(|output| output.status.success());
    if works {
        return Some(python);
    }
    let reason = format!("the Python MCP SDK is not installed in {} (run `bash tests/mcp/setup.sh`)", venv().display());
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {reason}");
    }
    eprintln!("SKIPPED {test}: {reason}");
    None
}

/// What the client script reported.
#[derive(Debug)]
struct Run {
    events: Vec<Value>,
    stderr: String,
}

impl Run {
    /// The event of step `name`; fails quoting the whole run when there is none.
    fn step(&self, name: &str) -> &Value {
        self.events
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no event for step {name:?} in this run:\n{self}"))
    }

    /// The structured answer of a tool call that succeeded.
    fn answer(&self, name: &str) -> &Value {
        let event = self.step(name);
        assert!(
            event["event"] == "call" && event["is_error"] == false,
            "step {name:?} did not succeed: {event}\n{self}"
        );
        &event["structured"]
    }

    /// The structured refusal of a tool call that was refused (`isError`).
    fn refusal(&self, name: &str) -> &Value {
        let event = self.step(name);
        assert!(
            event["event"] == "call" && event["is_error"] == true,
            "step {name:?} was not refused: {event}\n{self}"
        );
        &event["structured"]
    }

    fn connected(&self) -> bool {
        self.events.iter().any(|e| e["event"] == "connected")
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for event in &self.events {
            writeln!(f, "{event}")?;
        }
        write!(f, "--- client stderr ---\n{}", self.stderr)
    }
}

/// Runs the client script with `plan` on its stdin.
async fn drive(python: &Path, plan: &Value) -> Run {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/client.py");
    let mut child = tokio::process::Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {} {}: {e}", python.display(), script.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(plan.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the MCP client script did not finish within {SCRIPT_TIMEOUT:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let events = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\n{stdout}")))
        .collect();
    let run = Run { events, stderr: String::from_utf8_lossy(&output.stderr).into_owned() };
    assert!(output.status.success(), "the client script failed ({}):\n{run}", output.status);
    run
}

/// A node on loopback with no peers, and a skill it published.
async fn node_with_a_skill(root: &Path) -> (ProcNode, String) {
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let trust_list = root.join("trust.list");
    std::fs::write(&trust_list, format!("{}  # druse-mgmt\n", mgmt_key().public())).unwrap();
    let node = ProcNode::start("druse-node", &bins.node, &root.join("node"), &trust_list, &[]).await.unwrap();
    let cid = node
        .cli(
            &bins.node,
            &[
                "skill",
                "publish",
                "--name",
                "retry-backoff",
                "--text",
                "Retry failed calls with exponential backoff and jitter",
                "--tags",
                "net,resilience",
            ],
        )
        .await
        .unwrap();
    (node, cid.trim().to_owned())
}

fn token(node: &ProcNode) -> String {
    std::fs::read_to_string(node.data_dir.join("api.token")).unwrap().trim().to_owned()
}

/// A content id no node holds.
fn unknown_skill() -> String {
    ContentId::of(b"a skill nobody published").to_string()
}

/// Every tool called as an agent would, a memory corrected, and each kind of bad argument.
fn scenario(skill: &str) -> Vec<Value> {
    let call = |name: &str, tool: &str, arguments: Value| json!({"name": name, "tool": tool, "arguments": arguments});
    vec![
        json!({"name": "tools", "list_tools": true}),
        call("first", "memory_add", json!({"text": "Dad's surgery is March 15", "namespace": "user:sam"})),
        call("correction", "memory_add", json!({"text": "Wait, actually it's March 22", "namespace": "user:sam"})),
        call("search", "memory_search", json!({"query": "when is the surgery", "namespace": "user:sam", "k": 3})),
        call(
            "search_full",
            "memory_search",
            json!({"query": "when is the surgery", "namespace": "user:sam", "k": 3, "full": true}),
        ),
        call("get", "memory_get", json!({"id": "${correction.crystal.id}"})),
        call("history", "memory_history", json!({"id": "${correction.crystal.id}"})),
        call("skills", "skill_search", json!({"query": "backoff retries"})),
        call("no_skills", "skill_search", json!({"query": "quantum", "verified_only": true})),
        call("read", "skill_get", json!({"id": skill})),
        call("adopt_own", "skill_adopt", json!({"id": skill, "max_price": 1000})),
        call("adopt_unknown", "skill_adopt", json!({"id": unknown_skill()})),
        call("report", "skill_report", json!({"id": skill, "success": true, "reward": 0.9})),
        call("empty_query", "memory_search", json!({"query": ""})),
        call("k_zero", "memory_search", json!({"query": "surgery", "k": 0})),
        call("k_not_a_number", "memory_search", json!({"query": "surgery", "k": "five"})),
        call("no_text", "memory_add", json!({"namespace": "user:sam"})),
        call("bad_namespace", "memory_add", json!({"text": "x", "namespace": "people"})),
        call("bad_id", "memory_get", json!({"id": "../v1/status"})),
        call("unknown_crystal", "memory_get", json!({"id": 999_999})),
        call("unknown_history", "memory_history", json!({"id": 999_999})),
        call("bad_reward", "skill_report", json!({"id": skill, "success": true, "reward": 3})),
        call("unknown_skill", "skill_report", json!({"id": unknown_skill(), "success": false})),
        call("empty_chat", "agent_chat", json!({"message": "  "})),
        call("chat_without_agent", "agent_chat", json!({"message": "hello"})),
    ]
}

/// What every transport must show for [`scenario`].
async fn assert_scenario(run: &Run, node: &ProcNode, skill: &str) {
    assert!(run.connected(), "{run}");
    let tools = run.step("tools")["tools"].as_array().unwrap_or_else(|| panic!("{run}"));
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "memory_search",
            "memory_add",
            "memory_get",
            "memory_history",
            "skill_search",
            "skill_get",
            "skill_adopt",
            "skill_publish",
            "skill_report",
            "agent_chat"
        ]
    );
    for tool in tools {
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
        assert!(tool["description"].as_str().is_some_and(|d| d.len() > 80), "{tool}");
    }
    let search_schema = &tools[0]["input_schema"];
    assert_eq!(search_schema["properties"]["k"]["maximum"], 100, "{search_schema}");

    // The correction supersedes the first memory: search finds only the new date, and the
    // history shows both, oldest first.
    let first = run.answer("first")["crystal"]["id"].as_u64().unwrap_or_else(|| panic!("{run}"));
    let correction = run.answer("correction");
    let corrected = correction["crystal"]["id"].as_u64().unwrap();
    assert_eq!(correction["superseded"], first, "{correction}");
    let hits = run.answer("search")["hits"].as_array().unwrap_or_else(|| panic!("{run}"));
    let texts: Vec<&str> = hits.iter().filter_map(|h| h["text"].as_str()).collect();
    // Compact by default: what a model uses, not the whole stored record.
    for hit in hits {
        let mut keys: Vec<&str> = hit.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["id", "kind", "namespace", "score", "text", "time"], "{hit}");
    }
    assert_eq!(hits[0]["id"], corrected, "{hits:?}");
    let full = run.answer("search_full")["hits"].as_array().unwrap_or_else(|| panic!("{run}"));
    assert_eq!(full[0]["crystal"]["id"], corrected, "the whole record on request: {full:?}");
    assert!(full[0]["crystal"]["governance"].is_object(), "{full:?}");
    assert!(texts.first().is_some_and(|t| t.contains("March 22")), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("March 15")), "a superseded memory was recalled: {texts:?}");
    assert_eq!(run.answer("get")["crystal"]["text"], "Wait, actually it's March 22");
    let history = run.answer("history");
    let chain: Vec<u64> = history["chain"].as_array().unwrap().iter().filter_map(|c| c["id"].as_u64()).collect();
    assert_eq!(chain, [first, corrected], "{history}");
    assert_eq!(history["chain"][0]["status"], "superseded", "{history}");
    assert!(!history["audit"].as_array().unwrap().is_empty(), "{history}");

    // The market, with verification state and the computed price; the report reaches it.
    let skills = run.answer("skills")["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 1, "{skills:?}");
    assert_eq!(skills[0]["id"], skill);
    assert_eq!(skills[0]["is_verified"], false);
    assert!(skills[0]["computed_price"]["micros"].is_u64(), "{}", skills[0]);
    assert_eq!(run.answer("no_skills")["skills"], json!([]));
    assert!(run.answer("report")["content_id"].is_string(), "{run}");
    eventually(WAIT, "the report to count in the skill's stats", async || {
        node.get_json(&format!("/v1/skills/{skill}"))
            .await
            .ok()
            .flatten()
            .is_some_and(|listing| listing["stats"]["executions"] == 1)
    })
    .await
    .unwrap();

    // Each bad argument is refused, naming it; unknown ids are not found.
    for (step, field) in [
        ("empty_query", "query"),
        ("k_zero", "k"),
        ("k_not_a_number", "k"),
        ("no_text", "text"),
        ("bad_namespace", "namespace"),
        ("bad_id", "id"),
        ("bad_reward", "reward"),
        ("empty_chat", "message"),
    ] {
        let refusal = run.refusal(step);
        assert_eq!(refusal["error"], "invalid_argument", "{step}: {refusal}");
        assert_eq!(refusal["field"], field, "{step}: {refusal}");
        let text = &run.step(step)["text"];
        assert!(text.as_str().is_some_and(|t| t.contains(&format!("`{field}`"))), "{step}: {text}");
    }
    for step in ["unknown_crystal", "unknown_history", "unknown_skill", "adopt_unknown"] {
        assert_eq!(run.refusal(step)["error"], "not_found", "{step}: {}", run.step(step));
    }
    // A skill read as its Agent Skills folder, with its provenance and price.
    let read = run.answer("read");
    assert_eq!(read["id"], skill, "{read}");
    assert_eq!(read["files"][0]["path"], "SKILL.md", "{read}");
    let skill_md = read["files"][0]["text"].as_str().unwrap_or_else(|| panic!("{read}"));
    assert!(skill_md.starts_with("---\nname: retry-backoff\n"), "{skill_md}");
    assert!(skill_md.contains("Retry failed calls with exponential backoff and jitter"), "{skill_md}");
    assert!(read["digest"].as_str().is_some_and(|d| d.starts_with("sha256:")), "{read}");
    assert!(read["publisher"].as_str().is_some_and(|k| !k.is_empty()), "{read}");
    assert!(read["computed_price"].is_u64() && read["reputation"].is_number(), "{read}");
    // The node's own skill is not bought: the refusal says why.
    let own = run.refusal("adopt_own");
    assert_eq!(own["error"], "invalid", "{own}");
    assert!(own["detail"].as_str().is_some_and(|d| d.contains("its own skill")), "{own}");
    // This node runs no agent: talking to it says so.
    assert_eq!(run.refusal("chat_without_agent")["error"], "agent_disabled", "{}", run.step("chat_without_agent"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_over_streamable_http_calls_every_tool_and_is_told_which_argument_is_wrong() {
    let Some(python) = python_or_skip("mcp over streamable HTTP") else { return };
    let root = tempfile::tempdir().unwrap();
    let (node, skill) = node_with_a_skill(root.path()).await;
    let plan = json!({
        "transport": "http",
        "url": format!("{}/mcp", node.api),
        "headers": {"Authorization": format!("Bearer {}", token(&node))},
        "steps": scenario(&skill),
    });
    let run = drive(&python, &plan).await;
    assert_scenario(&run, &node, &skill).await;
}

/// The plan of a client that runs `druse-node mcp` on stdio against `node`, its stderr in `log`.
fn stdio_plan(node: &ProcNode, log: &Path, steps: Value) -> Value {
    let bins = binaries().unwrap();
    let mut args = vec!["mcp".to_owned()];
    args.extend(node.cli_flags());
    json!({"transport": "stdio", "command": bins.node, "args": args, "stderr": log, "steps": steps})
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_over_stdio_reaches_a_running_node_with_its_token() {
    let Some(python) = python_or_skip("mcp over stdio") else { return };
    let root = tempfile::tempdir().unwrap();
    let (node, skill) = node_with_a_skill(root.path()).await;
    let plan = stdio_plan(&node, &root.path().join("mcp-stdio.log"), json!(scenario(&skill)));
    let run = drive(&python, &plan).await;
    assert_scenario(&run, &node, &skill).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_http_without_the_token_is_refused_with_401() {
    let Some(python) = python_or_skip("mcp over HTTP without the token") else { return };
    let root = tempfile::tempdir().unwrap();
    let (node, _) = node_with_a_skill(root.path()).await;
    let url = format!("{}/mcp", node.api);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}});
    let http = reqwest::Client::new();
    let post = |authorization: Option<String>| {
        let mut request = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(initialize.to_string());
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send()
    };
    for (authorization, challenge) in [
        (None, r#"Bearer realm="druse""#),
        (Some("Bearer not-the-token".to_owned()), r#"Bearer realm="druse", error="invalid_token""#),
    ] {
        let refused = post(authorization.clone()).await.unwrap();
        assert_eq!(refused.status(), 401, "{authorization:?}");
        assert_eq!(refused.headers()["www-authenticate"], challenge, "{authorization:?}");
        // A JSON-RPC error, which an MCP client shows, not the REST API's error body.
        let body: Value = refused.json().await.unwrap();
        assert_eq!((&body["jsonrpc"], &body["error"]["code"]), (&json!("2.0"), &json!(-32001)), "{body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("api.token")), "{body}");
    }
    let with_token = post(Some(format!("Bearer {}", token(&node)))).await.unwrap();
    assert_eq!(with_token.status(), 200, "the same request with the token");

    let run =
        drive(&python, &json!({"transport": "http", "url": url, "steps": [{"name": "tools", "list_tools": true}]}))
            .await;
    assert!(!run.connected(), "the SDK connected without the token:\n{run}");
    // The SDK shows the node's sentence, not a stand-in for the status.
    assert!(
        run.events.iter().any(|e| e["event"] == "connect_failed"
            && e["error"].as_str().is_some_and(|m| m.contains("unauthorized") && m.contains("api.token"))),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_over_the_cap_is_refused_as_a_json_rpc_error_the_sdk_shows() {
    let Some(python) = python_or_skip("mcp over HTTP with an oversized body") else { return };
    let root = tempfile::tempdir().unwrap();
    let (node, _) = node_with_a_skill(root.path()).await;
    // The default api.max_body_bytes is 256 KiB.
    let plan = json!({
        "transport": "http",
        "url": format!("{}/mcp", node.api),
        "headers": {"Authorization": format!("Bearer {}", token(&node))},
        "steps": [
            {"name": "huge", "tool": "memory_add", "arguments": {"text": "x".repeat(300 * 1024)}},
            {"name": "after", "tool": "memory_search", "arguments": {"query": "anything"}},
        ],
    });
    let run = drive(&python, &plan).await;
    assert!(run.connected(), "{run}");
    let huge = run.events.iter().find(|e| e["name"] == "huge").unwrap_or_else(|| panic!("{run}"));
    assert_eq!(huge["event"], "call_failed", "{run}");
    assert_eq!(huge["code"], -32600, "{run}");
    assert!(huge["error"].as_str().is_some_and(|m| m.contains("api.max_body_bytes")), "{run}");
    let after = run.events.iter().find(|e| e["name"] == "after").unwrap_or_else(|| panic!("{run}"));
    assert_eq!(after["event"], "call", "the session goes on after the refusal: {run}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_without_a_token_refuses_writes_and_reads_only_what_the_api_shows_without_one() {
    let Some(python) = python_or_skip("mcp over stdio without the token") else { return };
    let root = tempfile::tempdir().unwrap();
    let (node, skill) = node_with_a_skill(root.path()).await;
    let bins = binaries().unwrap();
    let add = |text: &str, namespace: &str, scope: &str| {
        let args = ["memory", "add", text, "--namespace", namespace, "--scope", scope].map(str::to_owned);
        let node = &node;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let added: Value = serde_json::from_str(&node.cli(&bins.node, &args).await.unwrap()).unwrap();
            added["crystal"]["id"].as_u64().unwrap()
        }
    };
    // A search in user:sam matches only the private memory; the public one is elsewhere.
    let private = add("Sam's locker code is 4417", "user:sam", "private").await;
    let public = add("Ada's public talk is on graph databases", "user:ada", "public").await;

    let no_token = root.path().join("elsewhere");
    std::fs::create_dir_all(&no_token).unwrap();
    let call = |name: &str, tool: &str, arguments: Value| json!({"name": name, "tool": tool, "arguments": arguments});
    let plan = json!({
        "transport": "stdio",
        "command": bins.node,
        "args": ["mcp", "--api", node.api, "--data-dir", no_token],
        "stderr": root.path().join("mcp-stdio.log"),
        "steps": [
            call("add", "memory_add", json!({"text": "Sam moved to Lisbon", "namespace": "user:sam"})),
            call("report", "skill_report", json!({"id": skill, "success": true})),
            call("private_search", "memory_search", json!({"query": "locker code", "namespace": "user:sam"})),
            call("public_search", "memory_search", json!({"query": "public talk graph databases"})),
            call("private_get", "memory_get", json!({"id": private})),
            call("public_get", "memory_get", json!({"id": public})),
            call("skills", "skill_search", json!({})),
        ],
    });
    let run = drive(&python, &plan).await;
    assert!(run.connected(), "{run}");

    for step in ["add", "report"] {
        let refusal = run.refusal(step);
        assert_eq!(refusal["error"], "unauthorized", "{step}: {refusal}");
        let detail = refusal["detail"].as_str().unwrap();
        assert!(detail.contains("token") && detail.contains("api.token"), "{step}: {detail}");
    }
    assert_eq!(run.refusal("private_search")["error"], "unauthorized", "the API answers 401 here too");
    let hits = run.answer("public_search")["hits"].as_array().unwrap();
    assert!(hits.iter().any(|h| h["id"] == public), "{hits:?}");
    assert!(!hits.iter().any(|h| h["id"] == private), "{hits:?}");
    assert_eq!(run.refusal("private_get")["error"], "not_found");
    assert_eq!(run.answer("public_get")["crystal"]["id"], public);
    assert_eq!(run.answer("skills")["skills"][0]["id"], skill);

    // The refused write stored nothing, and the refused report counted nowhere.
    let search = "/v1/memories?q=Lisbon&namespace=user:sam";
    let found = reqwest::Client::new()
        .get(format!("{}{search}", node.api))
        .bearer_auth(token(&node))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert!(!found.to_string().contains("Lisbon"), "{found}");
    let listing = node.get_json(&format!("/v1/skills/{skill}")).await.unwrap().unwrap();
    assert_eq!(listing["stats"]["executions"], 0, "{listing}");
}
