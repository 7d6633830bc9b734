//! Knowledge that flows (issue 26), on real processes: a management node and two agent nodes
//! on the real local ATProto network, each agent with a chat-completions server scripted for
//! it. Node A earns a skill from conversations that went well and publishes it; node B's agent
//! finds it by meaning, pays for it, follows it, and reports what followed; every node prices
//! it from what really happened, not from its publisher's word or from fresh keys.

use std::time::Duration;

use anyhow::{Context, Result};
use druse_protocol::body::{Body, Report, ReportEvent};
use druse_protocol::{ContentId, Keypair, topic};
use druse_tests::agent::{AgentNode, AgentSetup};
use druse_tests::atproto::{Account, Network, Post, handle};
use druse_tests::llm::{Answer, Request, ScriptedLlm};
use druse_tests::process::{ProcNode, binaries};
use druse_tests::swarm::{Sniffer, mgmt_key, seal};
use druse_tests::{eventually, wait_for};
use serde_json::{Value, json};

/// Indexing by the AppView, a few 300 ms polls, and a run's quiet time.
const ANSWERED: Duration = Duration::from_secs(45);

/// What the users of node A tell it: each conversation is full of personal facts.
const ASKED: [&str; 3] = [
    "hi, I'm Annika from Lyon, 34, annika.rossi@example.org. My sourdough bread did not rise overnight, why?",
    "Bob Okafor here, Marseille baker since 1998. Why did my sourdough bread not rise in the oven?",
    "Cyrille again (from Nantes). My sourdough bread did not rise at all, any idea why?",
];

/// The facts no skill may carry.
const PERSONAL: [&str; 10] =
    ["Annika", "Lyon", "34", "annika.rossi", "example.org", "Bob", "Okafor", "Marseille", "1998", "Nantes"];

/// The procedure node A's model writes from its episodes.
fn procedure() -> Value {
    json!({
        "name": "Diagnose sourdough bread that did not rise",
        "when": "A user asks why their sourdough bread did not rise",
        "steps": [
            {"tool": "search_memory", "arguments": "the baking problem in a few words",
             "purpose": "recall what the user said before"},
            {"tool": "reply", "arguments": "the post's URI and the two likeliest causes",
             "purpose": "answer briefly: starter activity, then proofing time and warmth"}
        ],
        "avoid": ["long lectures", "blaming the user"],
        "example": {"situation": "A user says their loaf stayed flat after a night of proofing",
                    "response": "Check that the starter doubles within hours, then proof longer somewhere warm."}
    })
}

const A_ANSWER: &str = "Check that your starter doubles within a few hours, then proof longer somewhere warm.";
const B_ANSWER: &str = "From a proven procedure: the starter first, then a longer, warmer proof.";

/// The URIs of a request's batch, with each notification's text.
fn listed(request: &Request) -> Vec<(String, String)> {
    let text = request.text();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(uri) = line.trim().strip_prefix("- uri: ") {
            let said = lines.get(i + 2).and_then(|l| l.trim().strip_prefix("text: ")).unwrap_or_default();
            out.push((uri.trim().to_owned(), said.to_owned()));
        }
    }
    out
}

/// Extraction keeps nothing; reconciliation adds.
fn memory_calls(request: &Request) -> Option<Answer> {
    match request.schema_name().as_deref() {
        Some("reconciliation") => {
            Some(Answer::Text(json!({"action": "add", "target": null, "reason": "new"}).to_string()))
        }
        Some("skill") => Some(Answer::Text(procedure().to_string())),
        Some(_) => Some(Answer::Text(json!({"observations": []}).to_string())),
        None => None,
    }
}

/// Node A's model: answers baking questions, publishes its skill when the owner asks.
fn script_a(request: &Request) -> Answer {
    if let Some(answer) = memory_calls(request) {
        return answer;
    }
    if request.last_role() == "tool" || !request.tool_names().iter().any(|t| t == "reply") {
        return Answer::Text("done".into());
    }
    let mut calls = Vec::new();
    for (uri, said) in listed(request) {
        if said.contains("publish your skill") {
            let crystal = request.listed_crystal();
            if let Some(id) = crystal {
                calls.push(("publish_skill".to_owned(), json!({"crystal": id})));
            }
        } else if said.contains("rise") {
            calls.push(("reply".to_owned(), json!({"uri": uri, "text": A_ANSWER})));
        }
    }
    if calls.is_empty() { Answer::Tools(vec![("do_nothing".into(), json!({}))]) } else { Answer::Tools(calls) }
}

/// Node B's model: uses the swarm skill its context offers, then answers with its procedure.
fn script_b(request: &Request) -> Answer {
    if let Some(answer) = memory_calls(request) {
        return answer;
    }
    if !request.tool_names().iter().any(|t| t == "reply") {
        return Answer::Text("done".into());
    }
    let results = request.tool_results();
    if results.iter().any(|r| r.starts_with("ok: replied")) {
        return Answer::Text("done".into());
    }
    let Some((uri, _)) = listed(request).into_iter().find(|(_, said)| said.contains("rise")) else {
        return Answer::Tools(vec![("do_nothing".into(), json!({}))]);
    };
    if results.iter().any(|r| r.contains("[PROCEDURE]")) {
        return Answer::Tools(vec![("reply".into(), json!({"uri": uri, "text": B_ANSWER}))]);
    }
    if !results.is_empty() {
        return Answer::Text("done".into());
    }
    let offered = request
        .text()
        .lines()
        .find_map(|l| l.trim().strip_prefix("- skill ").and_then(|r| r.split([':', ' ']).next()).map(str::to_owned));
    match offered {
        Some(id) => Answer::Tools(vec![("use_skill".into(), json!({"skill": id}))]),
        None => Answer::Tools(vec![("reply".into(), json!({"uri": uri, "text": "No idea, sorry."}))]),
    }
}

/// The agent's reply to `post`, as a post the user can like or answer.
async fn reply_of(viewer: &Account, post: &Post, agent: &str, node: &AgentNode) -> Result<Post> {
    wait_for(ANSWERED, format_args!("{agent}'s reply to {}", post.uri), async || {
        let thread = viewer.thread(&post.uri).await.ok()?;
        thread["thread"]["replies"].as_array()?.iter().find_map(|r| {
            let p = &r["post"];
            (p["author"]["handle"] == agent).then(|| Post {
                uri: p["uri"].as_str().unwrap_or_default().to_owned(),
                cid: p["cid"].as_str().unwrap_or_default().to_owned(),
            })
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))
}

async fn mention(who: &Account, agent: &Account, text: &str) -> Result<Post> {
    who.post(&format!("@{} {text}", agent.handle), &[(&agent.handle, &agent.did)], None).await
}

/// A skill as one node lists it.
async fn skill_on(api: &str, id: &str) -> Option<Value> {
    let body = reqwest::get(format!("{api}/v1/skills/{id}")).await.ok()?;
    body.status().is_success().then_some(())?;
    body.json().await.ok()
}

/// The computed price of skill `id` (as the last of `apis` computes it) once `check` holds on
/// every node and they all agree on the factors signed messages decide (quality, demand and
/// the publisher's reputation; scarcity comes from each node's own index).
async fn agreed_price(apis: &[(&str, String)], id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Result<u64> {
    let agreed = agree(apis, id, what, check).await;
    if agreed.is_err() {
        for (name, api) in apis {
            let listing = skill_on(api, id).await.unwrap_or(Value::Null);
            eprintln!("{name}: {} {}", listing["computed_price"], listing["stats"]);
        }
    }
    agreed
}

async fn agree(apis: &[(&str, String)], id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Result<u64> {
    wait_for(ANSWERED, format_args!("every node to agree on {what}"), async || {
        let mut factors = Vec::new();
        let mut last = 0;
        for (_, api) in apis {
            let listing = skill_on(api, id).await?;
            if !check(&listing) {
                return None;
            }
            let p = &listing["computed_price"];
            factors.push([p["quality"].as_f64()?, p["demand"].as_f64()?, p["reputation"].as_f64()?]);
            last = p["micros"].as_u64()?;
        }
        factors.windows(2).all(|w| w[0] == w[1]).then_some(last)
    })
    .await
}

/// Waits until every node's trust book holds each of `peers` at `level`.
async fn attested_everywhere(apis: &[(&str, String)], peers: &[String], level: &str) -> Result<()> {
    eventually(ANSWERED, format_args!("the {level} attestations on every node"), async || {
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

/// Signs and gossips a report about `skill` by `key`.
async fn report(sniffer: &Sniffer, key: &Keypair, skill: ContentId, event: ReportEvent) -> Result<()> {
    let body =
        Body::Report(Report { issued_at: druse_protocol::now_ms(), reporter: key.public(), content_id: skill, event });
    sniffer.publish(topic::REPORTS, seal(key, &body)?).await?;
    // Two reports of one key in the same millisecond would be one message.
    tokio::time::sleep(Duration::from_millis(2)).await;
    Ok(())
}

#[tokio::test]
async fn a_skill_earned_on_one_node_is_paid_for_used_and_priced_by_what_followed() -> Result<()> {
    let net = Network::shared().await?;
    let dir = tempfile::tempdir()?;
    let bins = tokio::task::spawn_blocking(binaries).await??;

    // The management node: auto-endorsement once the independent reporters weigh 2.
    let mgmt_dir = dir.path().join("mgmt");
    std::fs::create_dir_all(&mgmt_dir)?;
    mgmt_key().save(&mgmt_dir.join("node.key"))?;
    let trust = dir.path().join("trust.txt");
    std::fs::write(&trust, format!("{}\n", mgmt_key().public()))?;
    let mgmt_config = dir.path().join("mgmt.toml");
    // The anomaly detector would take twenty new keys in a minute for an attack and halt them
    // (tests/tests/anomaly.rs); here their reports must arrive, to measure what they can do.
    std::fs::write(
        &mgmt_config,
        "[management.endorsement]\nauto = true\nmin_independent_reporters = 2\n[management.anomaly]\nenabled = false\n",
    )?;
    let config_flag = mgmt_config.display().to_string();
    let mgmt =
        ProcNode::start_with("druse-mgmt", &bins.mgmt, &mgmt_dir, &trust, &[], &["--config", &config_flag]).await?;
    let mgmt_addr = mgmt.p2p_addr().await?.to_string();

    let (agent_a, agent_b) = (Account::create(net, &handle("ka")).await?, Account::create(net, &handle("kb")).await?);
    let owner = Account::create(net, &handle("ko")).await?;
    let (llm_a, llm_b) = (ScriptedLlm::start(script_a).await?, ScriptedLlm::start(script_b).await?);
    let extra = "distill_after = 3\ndistill_similarity = 0.35\noutcome_quiet = \"1s\"\noutcome_window = \"5m\"\nswarm_skills = 3";
    // B's reports rest only on reactions it stands behind (`outcome_from`): the two users it
    // answers below are on its allow list.
    let (dee, eve) = (Account::create(net, &handle("u4")).await?, Account::create(net, &handle("u5")).await?);
    let extra_b = format!(
        "{extra}\noutcome_from = [\"owner\", \"allow_list\"]\noutcome_allow = [{:?}, {:?}]",
        dee.handle, eve.handle
    );
    let setup = |agent: &Account, llm: &ScriptedLlm, extra: &str| AgentSetup {
        pds: net.pds.clone(),
        handle: agent.handle.clone(),
        password: agent.password.clone(),
        owner: owner.handle.clone(),
        llm: llm.base_url(),
        extra: extra.to_owned(),
        bootstrap: vec![mgmt_addr.clone()],
        trust_list: Some(trust.clone()),
        llm_timeout: None,
        llm_extra: String::new(),
    };
    let a = AgentNode::start(&setup(&agent_a, &llm_a, extra), &dir.path().join("a")).await?;
    let b = AgentNode::start(&setup(&agent_b, &llm_b, &extra_b), &dir.path().join("b")).await?;
    let logs = || format!("{}\n{}\n{}", a.log_tail(), b.log_tail(), mgmt.process.log_tail());
    for node in [&a, &b] {
        eventually(ANSWERED, "the agent to log in and join the swarm", async || {
            let running = node.agent().await.is_ok_and(|s| s["state"] == "running");
            let status = node.get_auth("/v1/status", &[]).await.ok();
            running && status.and_then(|s| s["connected_peers"].as_u64()).unwrap_or(0) >= 1
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    }
    let apis = [("a", a.api.clone()), ("b", b.api.clone()), ("mgmt", mgmt.api.clone())];

    // 1. Three conversations of one kind go well on A: each user likes A's answer.
    let users = [
        Account::create(net, &handle("u1")).await?,
        Account::create(net, &handle("u2")).await?,
        Account::create(net, &handle("u3")).await?,
    ];
    for (user, asked) in users.iter().zip(ASKED) {
        let post = mention(user, &agent_a, asked).await?;
        let answer = reply_of(user, &post, &agent_a.handle, &a).await?;
        user.like(&answer).await?;
    }
    let skill = wait_for(ANSWERED, "A's distilled skill", async || {
        let hits = a
            .get_auth("/v1/memories", &[("q", "sourdough bread rise"), ("semantic_type", "task_pattern")])
            .await
            .ok()?;
        hits.as_array()?
            .iter()
            .find(|h| h["crystal"]["text"].as_str().is_some_and(|t| t.starts_with("Skill:")))
            .cloned()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    let text = skill["crystal"]["text"].as_str().unwrap_or_default().to_owned();
    for part in ["When: A user asks why their sourdough", "Steps:\n1. search_memory", "2. reply", "Avoid:", "Example:"]
    {
        assert!(text.contains(part), "the skill holds the procedure ({part:?}):\n{text}");
    }
    for fact in PERSONAL {
        assert!(!text.contains(fact), "the skill carries {fact:?}:\n{text}");
    }
    // The distill pass stores the skill's crystal, then records the skill and counts it.
    eventually(ANSWERED, "the distilled skill to be counted", async || {
        a.metric("druse_agent_skills_distilled_total{label=\"new\"}").await.is_ok_and(|n| n >= 1.0)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    assert_eq!(a.metric("druse_agent_skills_distilled_total{label=\"new\"}").await?, 1.0);
    assert!(a.metric("druse_agent_runs_closed_total{label=\"good\"}").await? >= 3.0);
    let distill =
        llm_a.requests().into_iter().find(|r| r.schema_name().as_deref() == Some("skill")).context("distill")?;
    assert!(distill.text().contains("NO personal data"), "the distill prompt forbids personal data");
    assert!(distill.text().contains("Annika"), "the model saw the episodes themselves");

    // The owner approves, and A publishes it.
    mention(&owner, &agent_a, "publish your skill please").await?;
    let request = wait_for(ANSWERED, "the publish approval request", async || {
        let posts = owner.posts(&agent_a.did).await.ok()?;
        posts.into_iter().find(|p| p["value"]["text"].as_str().is_some_and(|t| t.contains("publish the skill")))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    owner
        .like(&Post {
            uri: request["uri"].as_str().unwrap_or_default().into(),
            cid: request["cid"].as_str().unwrap_or_default().into(),
        })
        .await?;
    let listed_on_b = wait_for(ANSWERED, "A's skill on B", async || {
        let skills: Value = reqwest::get(format!("{}/v1/skills", b.api)).await.ok()?.json().await.ok()?;
        skills
            .as_array()?
            .iter()
            .find(|s| s["listing"]["name"] == "Diagnose sourdough bread that did not rise")
            .cloned()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    let id = listed_on_b["id"].as_str().context("skill id")?.to_owned();
    let skill_id: ContentId = id.parse()?;
    assert_eq!(listed_on_b["listing"]["text"].as_str(), Some(text.as_str()), "the listing carries the procedure");

    // The /memory page can colour skills by origin: A's own, and the swarm's on B.
    for (node, origin) in [(&a, "skill"), (&b, "peer")] {
        eventually(ANSWERED, format_args!("a {origin} skill on the memory map"), async || {
            let map = node.get_auth("/v1/memory/map", &[]).await.unwrap_or(Value::Null);
            map["points"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["origin"] == origin && p["semantic_type"] == "task_pattern"))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    }

    // The publisher's own word is worth nothing: A's key reports ten successes.
    let sniffer = Sniffer::start(90)?;
    sniffer.net.dial(mgmt_addr.parse()?).await?;
    let a_key = Keypair::load(&dir.path().join("a").join("node.key"))?;
    for _ in 0..10 {
        report(&sniffer, &a_key, skill_id, ReportEvent::Execution { success: true, reward: 1.0 }).await?;
    }
    let own_only = agreed_price(&apis, &id, "no price on the publisher's own reports", |l| {
        l["stats"]["executions"].as_u64() >= Some(10)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    assert_eq!(own_only, 0, "a skill with only its publisher's reports has no price");

    // Two adopters the management node vouches for use it and report success.
    let vouched = [Keypair::from_seed([91; 32]), Keypair::from_seed([92; 32])];
    for key in &vouched {
        let peer = key.peer_id().to_string();
        mgmt.cli(
            &bins.mgmt,
            &["attest", &peer, "--level", "trusted", "--duration", "1h", "--reason", "known operator"],
        )
        .await?;
    }
    // The attestations reach every node before the reports.
    attested_everywhere(&apis, &vouched.iter().map(|k| k.peer_id().to_string()).collect::<Vec<_>>(), "trusted")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    for key in &vouched {
        report(&sniffer, key, skill_id, ReportEvent::Adoption { price_paid: 0 }).await?;
        for _ in 0..3 {
            report(&sniffer, key, skill_id, ReportEvent::Execution { success: true, reward: 0.8 }).await?;
        }
    }
    let before_b = agreed_price(&apis, &id, "a price from the vouched adopters", |l| l["gate_passed"] == true)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    assert!(before_b > 0, "the vouched adopters' evidence prices it");

    // 2. On B, a user asks for the same kind of help. B is vouched for as well.
    let b_peer = b.get_auth("/v1/status", &[]).await?["peer_id"].as_str().unwrap_or_default().to_owned();
    mgmt.cli(&bins.mgmt, &["attest", &b_peer, "--level", "verified", "--duration", "1h", "--reason", "our node"])
        .await?;
    attested_everywhere(&apis, std::slice::from_ref(&b_peer), "verified")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    let ledger_before = b.get_auth("/v1/ledger", &[]).await?;
    let asked = mention(&dee, &agent_b, "my sourdough bread did not rise, what went wrong?").await?;
    let answer = reply_of(&dee, &asked, &agent_b.handle, &b).await?;
    let requests = llm_b.requests();
    let first = requests.iter().find(|r| r.text().contains("[SWARM SKILLS]")).context("B's context")?;
    assert!(
        first.text().contains(&format!("- skill {id} published by node ")),
        "B's context offers A's skill:\n{}",
        first.text()
    );
    let followed = requests
        .iter()
        .find(|r| r.tool_results().iter().any(|t| t.contains("[PROCEDURE]")))
        .context("B's request after use_skill")?;
    assert!(followed.text().contains("Steps:\n1. search_memory"), "B's next model request holds the procedure");
    let ledger_after = b.get_auth("/v1/ledger", &[]).await?;
    let spent = ledger_after["spent"].as_u64().unwrap_or(0) - ledger_before["spent"].as_u64().unwrap_or(0);
    assert!(spent > 0 && spent <= before_b, "B paid at most its computed price ({spent} of {before_b})");
    assert_eq!(b.metric("druse_agent_skills_adopted_total").await?, 1.0);
    // The user likes B's answer: B signs an execution report with that reward.
    dee.like(&answer).await?;
    wait_for(ANSWERED, "B's execution report", async || {
        (b.metric("druse_agent_rewards_reported_total{label=\"success\"}").await.ok()? >= 1.0).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;

    // 3. Every node's price reflects B's report, and with it the vouched reporters weigh enough
    // for the management node's automatic endorsement: every node shows the skill verified.
    let after_b = agreed_price(&apis, &id, "B's report in the price, and the endorsement", |l| {
        l["stats"]["executions"].as_u64() >= Some(10 + 6 + 1) && l["is_verified"] == true
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    assert_ne!(after_b, before_b, "B's report and paid adoption move the price");
    let listing = skill_on(&mgmt.api, &id).await.context("listing")?;
    assert_eq!(listing["stats"]["paid_adopters"], 1, "B paid; the vouched adopters who paid nothing are no demand");
    assert!(listing["stats"]["vouched_weight"].as_f64() >= Some(2.5), "{}", listing["stats"]);

    // 4. Twenty fresh keys adopt it and report success: the price moves within the bound.
    let fresh: Vec<Keypair> = (0..20u8)
        .map(|n| {
            let mut seed = [7u8; 32];
            seed[1] = n;
            Keypair::from_seed(seed)
        })
        .collect();
    for key in &fresh {
        report(&sniffer, key, skill_id, ReportEvent::Adoption { price_paid: 50_000 }).await?;
        report(&sniffer, key, skill_id, ReportEvent::Execution { success: true, reward: 1.0 }).await?;
    }
    let after_fresh = agreed_price(&apis, &id, "the fresh keys' reports counted", |l| {
        l["stats"]["executions"].as_u64() >= Some(10 + 6 + 1 + 20)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    let moved = after_fresh.abs_diff(after_b) as f64 / after_b.max(1) as f64;
    assert!(moved <= FRESH_BOUND, "twenty fresh keys moved the price by {:.1}%", moved * 100.0);
    // A's ledger credits what B, a vouched key, paid; what the fresh keys say they paid is
    // recorded as claimed and never reaches A's balance.
    let asking = skill_on(&a.api, &id).await.context("A's listing")?["asking_price"].as_u64().unwrap_or(0);
    let claimed = 20 * asking.min(50_000);
    let a_ledger = wait_for(ANSWERED, "the fresh keys' claims in A's ledger", async || {
        let ledger = a.get_auth("/v1/ledger", &[]).await.ok()?;
        (ledger["claimed"].as_u64() == Some(claimed)).then_some(ledger)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    assert_eq!(a_ledger["earned"].as_u64(), Some(spent), "A earned what B paid, no more: {a_ledger}");
    let starting = a_ledger["starting"].as_i64().unwrap_or(0);
    assert_eq!(a_ledger["balance"].as_i64(), Some(starting + spent as i64), "{a_ledger}");

    // 5. A conversation that goes badly: the user corrects B, and the quality falls everywhere.
    let asked = mention(&eve, &agent_b, "why did my sourdough bread not rise this time?").await?;
    let answer = reply_of(&eve, &asked, &agent_b.handle, &b).await?;
    let quality = |l: &Value| l["computed_price"]["quality"].as_f64().unwrap_or(0.0);
    let quality_before = quality(&skill_on(&b.api, &id).await.context("listing")?);
    eve.post("that's wrong, my starter was fine and it still did not rise", &[], Some((&asked, &answer))).await?;
    wait_for(ANSWERED, "B's failure report", async || {
        (b.metric("druse_agent_rewards_reported_total{label=\"failure\"}").await.ok()? >= 1.0).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    let after_bad = agreed_price(&apis, &id, "the correction in the quality", |l| quality(l) < quality_before)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", logs()))?;
    println!(
        "price of A's skill (micro-USDC): own reports only {own_only}; vouched adopters {before_b}; \
         after B's report {after_b}; after twenty fresh keys {after_fresh} ({:+.1}%); after a correction {after_bad}",
        (after_fresh as f64 - after_b as f64) / after_b.max(1) as f64 * 100.0
    );
    a.stop().await?;
    b.stop().await
}

/// How far twenty fresh keys may move the price here: the marketplace's bound (node/README.md)
/// with 2.5 of vouched reporter weight is about +3% (quality +1%, demand +1.6%).
const FRESH_BOUND: f64 = 0.05;
