//! What Bluesky users can do to a price through an agent (issue 38), on real processes: a
//! management node and three agent nodes it attests `verified`, all on the real local ATProto
//! network. Three accounts liking three replies that used a swarm skill on ONE node move no
//! gate anywhere (one node is one voice, whatever its users do); one like on each of THREE
//! nodes passes it everywhere. A fourth node runs dry: it decides to adopt, and adopts, pays,
//! signs and gossips nothing.

use std::time::Duration;

use anyhow::{Context, Result};
use druse_protocol::body::{Body, CrystalListing, ExecutionStats, SemanticType};
use druse_protocol::{ContentId, Keypair, topic};
use druse_tests::agent::{AgentNode, AgentSetup};
use druse_tests::atproto::{Account, Network, Post, handle};
use druse_tests::llm::{Answer, Request, ScriptedLlm};
use druse_tests::process::{ProcNode, binaries};
use druse_tests::swarm::{Sniffer, mgmt_key, seal};
use druse_tests::{eventually, wait_for};
use serde_json::{Value, json};

/// Indexing by the AppView, a few 300 ms polls, a run's quiet time and gossip.
const SETTLED: Duration = Duration::from_secs(45);

/// The two skills, by the word that picks each.
const SKILLS: [(&str, &str); 2] = [
    ("sourdough", "Diagnose sourdough bread that did not rise"),
    ("chain", "Fix a bicycle chain that skips under load"),
];

/// A skill listing another node published, priced below what the agents may pay alone.
fn listing(name: &str) -> CrystalListing {
    CrystalListing {
        issued_at: druse_protocol::now_ms(),
        name: name.to_owned(),
        text: format!("Skill: {name}\nSteps:\n1. reply (the post's URI): name the likeliest cause, then the fix"),
        semantic_type: SemanticType::Skill,
        tags: vec!["howto".to_owned()],
        category: Some("howto".to_owned()),
        skill_id: name.to_lowercase().replace(' ', "-"),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 0, successes: 0, avg_reward: 0.0 },
        asking_price: 10_000,
    }
}

/// Every agent's model: takes the offered swarm skill whose name holds the question's topic,
/// then replies with its procedure.
fn script(request: &Request) -> Answer {
    match request.schema_name().as_deref() {
        Some("reconciliation") => {
            return Answer::Text(json!({"action": "add", "target": null, "reason": "new"}).to_string());
        }
        Some(_) => return Answer::Text(json!({"observations": []}).to_string()),
        None => {}
    }
    if !request.tool_names().iter().any(|t| t == "reply") {
        return Answer::Text("done".into());
    }
    let results = request.tool_results();
    if results.iter().any(|r| r.starts_with("ok: replied")) {
        return Answer::Text("done".into());
    }
    let text = request.text();
    let lines: Vec<&str> = text.lines().collect();
    let asked = lines.iter().enumerate().find_map(|(i, l)| {
        let uri = l.trim().strip_prefix("- uri: ")?;
        let said = lines.get(i + 2)?.trim().strip_prefix("text: ")?;
        Some((uri.trim().to_owned(), said.to_owned()))
    });
    let Some((uri, said)) = asked else { return Answer::Tools(vec![("do_nothing".into(), json!({}))]) };
    if results.iter().any(|r| r.contains("[PROCEDURE]")) {
        let answer = "From a proven procedure: the likeliest cause first, then the fix.";
        return Answer::Tools(vec![("reply".into(), json!({"uri": uri, "text": answer}))]);
    }
    if !results.is_empty() {
        return Answer::Text("done".into());
    }
    let topic = SKILLS.iter().find(|(word, _)| said.contains(word)).map(|(_, name)| *name);
    let offered = topic.and_then(|name| {
        lines.iter().find_map(|l| {
            let rest = l.trim().strip_prefix("- skill ")?;
            rest.contains(name).then(|| rest.split(' ').next().unwrap_or_default().to_owned())
        })
    });
    match offered {
        Some(id) => Answer::Tools(vec![("use_skill".into(), json!({"skill": id}))]),
        None => Answer::Tools(vec![("reply".into(), json!({"uri": uri, "text": "No idea, sorry."}))]),
    }
}

/// The agent's reply to `post`, as a post its author can like.
async fn reply_of(viewer: &Account, post: &Post, agent: &Account, node: &AgentNode) -> Result<Post> {
    wait_for(SETTLED, format_args!("{}'s reply to {}", agent.handle, post.uri), async || {
        let thread = viewer.thread(&post.uri).await.ok()?;
        thread["thread"]["replies"].as_array()?.iter().find_map(|r| {
            let p = &r["post"];
            (p["author"]["handle"] == agent.handle.as_str()).then(|| Post {
                uri: p["uri"].as_str().unwrap_or_default().to_owned(),
                cid: p["cid"].as_str().unwrap_or_default().to_owned(),
            })
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))
}

/// A skill as the node at `api` lists it.
async fn skill_on(api: &str, id: &str) -> Option<Value> {
    let response = reqwest::get(format!("{api}/v1/skills/{id}")).await.ok()?;
    response.status().is_success().then_some(())?;
    response.json().await.ok()
}

/// Each node's listing of `id` once every node holds at least `executions` of its reports.
async fn seen_everywhere(apis: &[(&str, String)], id: &str, executions: u64) -> Result<Vec<Value>> {
    wait_for(SETTLED, format_args!("{executions} execution reports of {id} on every node"), async || {
        let mut listings = Vec::new();
        for (_, api) in apis {
            let listing = skill_on(api, id).await?;
            (listing["stats"]["executions"].as_u64()? >= executions).then_some(())?;
            listings.push(listing);
        }
        Some(listings)
    })
    .await
}

/// Waits until every node's trust book holds each of `peers` at `level`.
async fn attested_everywhere(apis: &[(&str, String)], peers: &[String], level: &str) -> Result<()> {
    eventually(SETTLED, format_args!("the {level} attestations on every node"), async || {
        for (_, api) in apis {
            let Ok(response) = reqwest::get(format!("{api}/v1/peers")).await else { return false };
            let Ok(known) = response.json::<Value>().await else { return false };
            let known = known.as_array().cloned().unwrap_or_default();
            let held = |peer: &String| known.iter().any(|p| p["peer_id"] == peer.as_str() && p["trust_level"] == level);
            if !peers.iter().all(held) {
                return false;
            }
        }
        true
    })
    .await
}

/// `user` asks `agent` about a topic and likes the answer; returns once `node` reported the run.
async fn asked_and_liked(user: &Account, agent: &Account, node: &AgentNode, text: &str, reported: f64) -> Result<()> {
    let post = user.post(&format!("@{} {text}", agent.handle), &[(&agent.handle, &agent.did)], None).await?;
    let answer = reply_of(user, &post, agent, node).await?;
    user.like(&answer).await?;
    wait_for(SETTLED, format_args!("{}'s execution report", agent.handle), async || {
        (node.metric("druse_agent_rewards_reported_total{label=\"success\"}").await.ok()? >= reported).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))
}

#[tokio::test]
async fn likes_on_one_node_pass_no_gate_but_likes_on_three_attested_nodes_do() -> Result<()> {
    let net = Network::shared().await?;
    let dir = tempfile::tempdir()?;
    let bins = tokio::task::spawn_blocking(binaries).await??;

    let mgmt_dir = dir.path().join("mgmt");
    std::fs::create_dir_all(&mgmt_dir)?;
    mgmt_key().save(&mgmt_dir.join("node.key"))?;
    let trust = dir.path().join("trust.txt");
    std::fs::write(&trust, format!("{}\n", mgmt_key().public()))?;
    let mgmt = ProcNode::start_with("druse-mgmt", &bins.mgmt, &mgmt_dir, &trust, &[], &[]).await?;
    let mgmt_addr = mgmt.p2p_addr().await?.to_string();

    // Six users, each on the allow list of every agent: their likes are reactions an agent
    // stands behind, so what is bounded here is the node, not who may back a report.
    let owner = Account::create(net, &handle("oo")).await?;
    let mut users = Vec::new();
    for i in 0..7 {
        users.push(Account::create(net, &handle(&format!("o{i}"))).await?);
    }
    let allow: Vec<String> = users.iter().map(|u| format!("{:?}", u.handle)).collect();
    let extra = format!(
        "outcome_quiet = \"1s\"\noutcome_window = \"5m\"\ndistill_after = 100\nswarm_skills = 3\n\
         outcome_from = [\"allow_list\"]\noutcome_allow = [{}]",
        allow.join(", ")
    );
    let llm = ScriptedLlm::start(script).await?;
    let mut agents = Vec::new();
    let mut nodes = Vec::new();
    for name in ["ox", "oy", "oz", "ow"] {
        let agent = Account::create(net, &handle(name)).await?;
        let extra = if name == "ow" { format!("{extra}\ndry_run = true") } else { extra.clone() };
        let setup = AgentSetup {
            pds: net.pds.clone(),
            handle: agent.handle.clone(),
            password: agent.password.clone(),
            owner: owner.handle.clone(),
            llm: llm.base_url(),
            extra,
            bootstrap: vec![mgmt_addr.clone()],
            trust_list: Some(trust.clone()),
            llm_timeout: None,
            llm_extra: String::new(),
        };
        nodes.push(AgentNode::start(&setup, &dir.path().join(name)).await?);
        agents.push(agent);
    }
    let logs = |nodes: &[AgentNode]| nodes.iter().map(AgentNode::log_tail).collect::<Vec<_>>().join("\n");
    for node in &nodes {
        eventually(SETTLED, "the agent to log in and join the swarm", async || {
            let running = node.agent().await.is_ok_and(|s| s["state"] == "running");
            let status = node.get_auth("/v1/status", &[]).await.ok();
            running && status.and_then(|s| s["connected_peers"].as_u64()).unwrap_or(0) >= 1
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs(&nodes)))?;
    }
    let mut apis = vec![("mgmt", mgmt.api.clone())];
    for (name, node) in ["x", "y", "z", "w"].into_iter().zip(&nodes) {
        apis.push((name, node.api.clone()));
    }

    // The management node vouches for the three agent nodes that run for real: each weighs 1.
    let mut peers = Vec::new();
    for node in &nodes[..3] {
        let peer = node.get_auth("/v1/status", &[]).await?["peer_id"].as_str().context("peer id")?.to_owned();
        mgmt.cli(&bins.mgmt, &["attest", &peer, "--level", "verified", "--duration", "1h", "--reason", "our node"])
            .await?;
        peers.push(peer);
    }
    attested_everywhere(&apis, &peers, "verified").await.map_err(|e| anyhow::anyhow!("{e}\n{}", logs(&nodes)))?;

    // Another node publishes the two skills.
    let sniffer = Sniffer::start(93)?;
    sniffer.net.dial(mgmt_addr.parse()?).await?;
    let publisher = Keypair::from_seed([94; 32]);
    let mut ids = Vec::new();
    for (_, name) in SKILLS {
        let body = Body::Crystal(listing(name));
        ids.push(ContentId::of(&body.encode()?).to_string());
        sniffer.publish(topic::CRYSTALS, seal(&publisher, &body)?).await?;
    }
    for id in &ids {
        seen_everywhere(&apis, id, 0).await.map_err(|e| anyhow::anyhow!("{e}\n{}", logs(&nodes)))?;
    }

    // 0. The dry-running node W decides to adopt the sourdough skill, and only logs it.
    let dry = &nodes[3];
    let asked = "my sourdough bread did not rise overnight, why?";
    users[6].post(&format!("@{} {asked}", agents[3].handle), &[(&agents[3].handle, &agents[3].did)], None).await?;
    eventually(SETTLED, "the dry run's adoption to be logged", async || {
        dry.log_text().contains("dry run: would have adopted a swarm skill")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", dry.log_tail()))?;
    let ledger = dry.get_auth("/v1/ledger", &[]).await?;
    assert_eq!(ledger["entries"].as_array().map(Vec::len), Some(0), "a dry run writes no ledger entry: {ledger}");
    assert_eq!(dry.metric("druse_agent_skills_adopted_total").await?, 0.0);
    assert_eq!(skill_on(&dry.api, &ids[0]).await.context("W's listing")?["adopted"], false);

    // 1. Three accounts each ask node X about sourdough and like its answer: X signs three
    // execution reports with its full weight, and still no node passes the gate.
    for (n, user) in users[..3].iter().enumerate() {
        let asked = "my sourdough bread did not rise overnight, why?";
        asked_and_liked(user, &agents[0], &nodes[0], asked, (n + 1) as f64)
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", logs(&nodes)))?;
    }
    let one_node = seen_everywhere(&apis, &ids[0], 3).await.map_err(|e| anyhow::anyhow!("{e}\n{}", logs(&nodes)))?;
    for ((name, _), listing) in apis.iter().zip(&one_node) {
        println!(
            "one node, three likes: {name} gate_passed={} price={} stats={}",
            listing["gate_passed"], listing["computed_price"]["micros"], listing["stats"]
        );
        assert_eq!(listing["gate_passed"], false, "{name}: one node's users passed the gate: {listing}");
        assert_eq!(listing["computed_price"]["micros"], 0, "{name}: {listing}");
        // X adopted it; W's dry run signed and gossiped no adoption.
        assert_eq!(listing["stats"]["unique_adopters"], 1, "{name}: {listing}");
    }

    // 2. One account on each of the three nodes asks about the bicycle chain and likes the
    // answer: three independent attested nodes, and the gate passes on every node.
    for (i, user) in users[3..6].iter().enumerate() {
        let reported = if i == 0 { 4.0 } else { 1.0 };
        asked_and_liked(user, &agents[i], &nodes[i], "my bicycle chain skips under load, what now?", reported)
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", logs(&nodes)))?;
    }
    let three_nodes = wait_for(SETTLED, "the gate of the second skill to pass on every node", async || {
        let listings = seen_everywhere(&apis, &ids[1], 3).await.ok()?;
        listings.iter().all(|l| l["gate_passed"] == true).then_some(listings)
    })
    .await;
    let three_nodes = match three_nodes {
        Ok(listings) => listings,
        Err(error) => {
            for (name, api) in &apis {
                let listing = skill_on(api, &ids[1]).await.unwrap_or(Value::Null);
                eprintln!("{name}: gate_passed={} stats={}", listing["gate_passed"], listing["stats"]);
            }
            return Err(anyhow::anyhow!("{error}\n{}", logs(&nodes)));
        }
    };
    for ((name, _), listing) in apis.iter().zip(&three_nodes) {
        println!(
            "three nodes, one like each: {name} gate_passed={} price={} stats={}",
            listing["gate_passed"], listing["computed_price"]["micros"], listing["stats"]
        );
        assert!(listing["computed_price"]["micros"].as_u64() > Some(0), "{name}: {listing}");
    }
    for node in nodes {
        node.stop().await?;
    }
    Ok(())
}
