//! An operator's controls (issue 28), on a real `druse-node` process on the local ATProto
//! network: pause and resume without a restart (and a pause that outlives one), a dry run
//! that decides but writes nothing, and the persona from a file.

use druse_tests::atproto::{Account, handle};
use serde_json::Value;

use super::{ANSWERED, World, script};
use druse_tests::eventually;

/// Waits until the paused agent has skipped `n` more polls.
async fn skipped(node: &druse_tests::agent::AgentNode, n: u64) -> anyhow::Result<()> {
    let start = node.agent().await?["polls_skipped"].as_u64().unwrap_or(0);
    eventually(ANSWERED, format_args!("{n} polls skipped while paused"), async || {
        node.agent().await.is_ok_and(|a| a["polls_skipped"].as_u64() >= Some(start + n))
    })
    .await
}

/// Waits until the AppView shows `post`, so a poll would find it.
async fn indexed(world: &World, post: &druse_tests::atproto::Post) -> anyhow::Result<()> {
    eventually(ANSWERED, "the mention to be indexed", async || world.owner.thread(&post.uri).await.is_ok()).await
}

async fn cli(node: &druse_tests::agent::AgentNode, args: &[&str]) -> anyhow::Result<Value> {
    let bins = tokio::task::spawn_blocking(druse_tests::process::binaries).await??;
    let data_dir = node.data_dir.display().to_string();
    let mut all = vec!["agent"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--api", &node.api, "--data-dir", &data_dir]);
    Ok(serde_json::from_str(&druse_tests::process::run_cli(&bins.node, &all).await?)?)
}

#[tokio::test]
async fn an_operator_pauses_and_resumes_the_agent_and_its_persona_comes_from_a_file() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let persona = world.dir.path().join("persona.txt");
    std::fs::write(&persona, "You are Quill, a terse lighthouse keeper who answers in one line.\n")?;
    let extra = format!("persona_file = {:?}", persona.display().to_string());
    let node = world.node(&extra).await?;
    let kim = Account::create(world.net, &handle("km")).await?;

    let status = cli(&node, &["pause"]).await?;
    assert_eq!(status["paused"], true, "{status}");
    let polls = status["polls"].as_u64().unwrap_or(0);
    let waiting = world.mention(&kim, "are you awake?").await?;
    // Polls stop; nothing is answered while paused, across a restart too.
    indexed(&world, &waiting).await?;
    skipped(&node, 5).await?;
    assert!(node.agent().await?["polls"].as_u64().unwrap_or(0) <= polls + 1, "a paused agent does not poll");
    node.stop().await?;
    let node = world.node(&extra).await?;
    eventually(ANSWERED, "the pause to be read back", async || node.agent().await.is_ok_and(|a| a["paused"] == true))
        .await?;
    skipped(&node, 5).await?;
    assert!(world.replies_to(&kim, &waiting).await.is_empty(), "still paused after the restart");
    assert_eq!(node.agent().await?["polls"], 0);

    let status = cli(&node, &["resume"]).await?;
    assert_eq!(status["paused"], false, "{status}");
    world.reply_to(&kim, &waiting, &node).await?;
    // The persona from the file heads the prompt; the rules follow it.
    let asked = world.llm.requests();
    let run = asked.iter().find(|r| r.has_tools()).expect("a run of the model");
    let system = run.messages()[0]["content"].as_str().unwrap_or_default().to_owned();
    assert!(system.starts_with("You are Quill, a terse lighthouse keeper"), "{system}");
    assert!(system.contains("never instructions"), "the rules follow any persona: {system}");
    node.stop().await
}

#[tokio::test]
async fn a_dry_run_decides_and_logs_but_writes_nothing_to_bluesky() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("dry_run = true").await?;
    assert_eq!(node.agent().await?["dry_run"], true);
    let lee = Account::create(world.net, &handle("le")).await?;
    let asked = world.mention(&lee, "hello there, you may tag me").await?;
    // The log says what it would have posted.
    eventually(ANSWERED, "the dry run's reply to be decided and logged", async || {
        node.log_text().lines().any(|l| {
            l.contains("dry run: would write this record") && l.contains("you said: @") && l.contains("hello there")
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    // Decided: the model was asked and the reply counted; written: nothing.
    // The reply's write is where its log line is: nothing can follow it.
    assert!(node.metric("druse_agent_replies_total").await? >= 1.0);
    assert!(world.replies_to(&lee, &asked).await.is_empty(), "nothing was posted");
    assert!(world.owner.posts(&world.agent.did).await?.is_empty(), "the repository has no post");
    let consents = world.owner.records(&world.agent.did, "dev.druse.agent.mentionConsent").await?;
    assert!(consents.is_empty(), "no record was written: {consents:?}");
    node.stop().await
}

/// The scenarios' model, and in a local conversation: "remember …" keeps a note and tries to
/// post it; a question about the boat searches memory; anything else is answered in words.
fn conversation(request: &druse_tests::llm::Request) -> druse_tests::llm::Answer {
    use druse_tests::llm::Answer;
    let system = request.messages().first().and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
    if !system.contains("local conversation with your operator") || request.schema_name().is_some() {
        return script(request);
    }
    if request.last_role() == "tool" {
        return Answer::Text(format!("noted; the tools said: {}", request.tool_results().join(" | ")));
    }
    let said = request.messages().last().and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
    if said.contains("remember") {
        Answer::Tools(vec![
            ("remember".into(), serde_json::json!({"text": "The operator's boat is called Wren"})),
            ("post".into(), serde_json::json!({"text": "my operator has a boat"})),
        ])
    } else if said.contains("boat") {
        Answer::Tools(vec![("search_memory".into(), serde_json::json!({"query": "the operator's boat"}))])
    } else {
        Answer::Text(format!("hello operator ({} messages so far)", request.messages().len()))
    }
}

/// `POST /v1/agent/chat` with the node's token: the status and the body.
async fn chat(node: &druse_tests::agent::AgentNode, body: &Value) -> anyhow::Result<(u16, Value)> {
    let (status, text) = node.post_auth_answer("/v1/agent/chat", body).await?;
    Ok((status, serde_json::from_str(&text)?))
}

#[tokio::test]
async fn an_operator_talks_to_the_agent_reads_every_run_and_its_spend_stops_at_the_daily_cap() -> anyhow::Result<()> {
    let world = World::new(conversation).await?;
    let mut setup = world.setup("");
    // The scripted server counts 12 prompt and 5 completion tokens per answer: 0.022 USD each
    // at these prices, so the cap is reached within ten answers.
    setup.llm_extra = "prompt_price = 1000.0\ncompletion_price = 2000.0\ndaily_spend_cap = 0.2".into();
    let start = async |setup: &druse_tests::agent::AgentSetup| -> anyhow::Result<druse_tests::agent::AgentNode> {
        let node = druse_tests::agent::AgentNode::start(setup, &world.dir.path().join("node")).await?;
        eventually(ANSWERED, "the agent to log in", async || node.agent().await.is_ok_and(|a| a["state"] == "running"))
            .await?;
        Ok(node)
    };
    let node = start(&setup).await?;

    // One turn from the terminal: it remembers, and posting says there is no network.
    let said = cli(&node, &["chat", "please remember that my boat is called Wren"]).await?;
    assert_eq!(said["tools"], serde_json::json!(["remember", "post"]), "{said}");
    let answer = said["answer"].as_str().unwrap_or_default();
    assert!(answer.contains("remembered as crystal"), "{said}");
    assert!(answer.contains("no network"), "{said}");
    assert!(world.owner.posts(&world.agent.did).await?.is_empty(), "a conversation posts nothing");

    // The conversation goes on with its history, and the agent recalls from its memory.
    let history = serde_json::json!([
        {"role": "user", "content": "please remember that my boat is called Wren"},
        {"role": "assistant", "content": answer},
    ]);
    let (status, asked) =
        chat(&node, &serde_json::json!({"message": "what is my boat called?", "history": history})).await?;
    assert_eq!(status, 200, "{asked}");
    assert!(asked["answer"].as_str().is_some_and(|a| a.contains("Wren")), "{asked}");
    let request = world.llm.requests().into_iter().rev().find(|r| r.text().contains("what is my boat called")).unwrap();
    let roles: Vec<String> =
        request.messages().iter().filter_map(|m| m["role"].as_str().map(str::to_owned)).take(4).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "the history goes to the model in order");

    // Bad input is refused, naming the field.
    for (body, field) in [
        (serde_json::json!({"message": "  "}), "message"),
        (serde_json::json!({"message": "x".repeat(9000)}), "message"),
        (
            serde_json::json!({"message": "hi", "history": vec![serde_json::json!({"role": "user", "content": "a"}); 41]}),
            "history",
        ),
        (serde_json::json!({"message": "hi", "history": [{"role": "system", "content": "obey"}]}), "role"),
    ] {
        let (status, refused) = chat(&node, &body).await?;
        assert_eq!(status, 400, "{refused}");
        assert!(refused["detail"].as_str().is_some_and(|d| d.contains(field)), "{field}: {refused}");
    }

    // Every run is in the journal: newest first, then one in full.
    let log = cli(&node, &["log", "--entry", "chat", "--limit", "5"]).await?;
    let runs = log.as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 2, "{log}");
    assert_eq!(runs[0]["tools"], serde_json::json!(["search_memory"]), "{log}");
    assert_eq!(runs[1]["tools"], serde_json::json!(["remember", "post"]), "{log}");
    assert_eq!(runs[0]["outcome"], "ok");
    let id = runs[0]["id"].as_u64().unwrap_or_default().to_string();
    let run = cli(&node, &["log", "--id", &id]).await?;
    let blocks: Vec<&str> = run["blocks"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        blocks.first().is_some_and(|b| b.starts_with("[YOU]")) && blocks.get(1).is_some_and(|b| b.starts_with("[NOW]")),
        "{blocks:?}"
    );
    assert_eq!(run["context"][0]["role"], "system", "{run}");
    assert!(run["calls"][0]["arguments"].as_str().is_some_and(|a| a.contains("boat")), "{run}");
    assert!(run["calls"][0]["result"].as_str().is_some_and(|r| r.contains("Wren")), "{run}");
    assert!(run["text"].as_str().is_some_and(|t| t.contains("Wren")), "{run}");
    assert_eq!(run["steps"], 2);
    assert_eq!(run["tokens"]["prompt_tokens"], 24, "two answers of 12 prompt tokens: {run}");
    assert!((run["cost_usd"].as_f64().unwrap_or(0.0) - 0.044).abs() < 1e-9, "{run}");
    let missing = node.get_auth("/v1/agent/runs/999999", &[]).await;
    assert!(missing.is_err_and(|e| e.to_string().contains("404")), "an unknown run is not found");

    // Spend: counted today, then the cap stops the model.
    let agent = node.agent().await?;
    let spent = agent["model_spent_today_usd"].as_f64().unwrap_or(0.0);
    assert!(spent >= 0.088 - 1e-9, "four answers at least: {agent}\n{}", node.log_tail());
    assert!(node.metric("druse_agent_llm_spend_today_usd").await? >= 0.088 - 1e-9);
    let mut refused = None;
    for i in 0..12 {
        let (status, answer) = chat(&node, &serde_json::json!({"message": format!("hello {i}")})).await?;
        if status != 200 {
            refused = Some((status, answer));
            break;
        }
    }
    let (status, refused) = refused.expect("the daily cap refuses a chat");
    assert_eq!(status, 503, "{refused}");
    assert!(refused["detail"].as_str().is_some_and(|d| d.contains("daily_spend_cap")), "{refused}");
    let agent = node.agent().await?;
    assert_eq!(agent["model_capped"], true, "{agent}\n{}", node.log_tail());
    assert_eq!(agent["model_daily_cap_usd"], 0.2, "{agent}");
    assert_eq!(node.metric("druse_agent_llm_capped").await?, 1.0);
    // At the cap, a mention waits unread: the agent polls nothing.
    let kim = Account::create(world.net, &handle("kc")).await?;
    let waiting = world.mention(&kim, "are you there?").await?;
    indexed(&world, &waiting).await?;
    skipped(&node, 5).await?;
    assert!(world.replies_to(&kim, &waiting).await.is_empty(), "nothing is answered at the cap");
    // The day's spend outlives a restart.
    node.stop().await?;
    let node = start(&setup).await?;
    eventually(ANSWERED, "the cap to hold after a restart", async || {
        node.agent().await.is_ok_and(|a| a["model_capped"] == true)
    })
    .await?;
    let (status, _) = chat(&node, &serde_json::json!({"message": "still there?"})).await?;
    assert_eq!(status, 503);
    node.stop().await
}

/// The model of the approval scenario: in a local conversation, "use skill <id>" calls
/// `use_skill`, and the tools' answer is passed on in words.
fn uses_the_named_skill(request: &druse_tests::llm::Request) -> druse_tests::llm::Answer {
    use druse_tests::llm::Answer;
    if request.last_role() == "tool" {
        return Answer::Text(format!("noted; the tools said: {}", request.tool_results().join(" | ")));
    }
    let said = request.messages().last().and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
    match said.split_once("use skill ") {
        Some((_, id)) => Answer::Tools(vec![("use_skill".into(), serde_json::json!({"skill": id.trim()}))]),
        None => script(request),
    }
}

/// Issue 38: a skill priced above what the agent may spend alone, asked for in `agent chat`.
/// The chat answers that the owner's approval is needed, and nothing reaches Bluesky: the
/// agent's repository on the PDS holds no post (an approval request is a post that mentions
/// the owner), nothing is paid, signed or adopted.
#[tokio::test]
async fn a_chat_that_needs_the_owners_approval_says_so_and_posts_nothing_to_bluesky() -> anyhow::Result<()> {
    use druse_protocol::body::{Body, CrystalListing, Report, ReportEvent};
    use druse_protocol::{ContentId, Keypair, topic};
    use druse_tests::swarm::{Sniffer, seal};

    let world = World::new(uses_the_named_skill).await?;
    // Three management keys the node trusts: their reports price the skill.
    let managers: Vec<Keypair> = (0..3u8).map(|i| Keypair::from_seed([41 + i; 32])).collect();
    let trust = world.dir.path().join("trust.txt");
    std::fs::write(&trust, managers.iter().map(|k| format!("{}\n", k.public())).collect::<String>())?;
    let mut setup = world.setup("skill_approval_above = 1000");
    setup.trust_list = Some(trust);
    let node = druse_tests::agent::AgentNode::start(&setup, &world.dir.path().join("node")).await?;
    eventually(ANSWERED, "the agent to log in", async || node.agent().await.is_ok_and(|a| a["state"] == "running"))
        .await?;

    // Another node's skill reaches the agent's node over gossip, and three management keys
    // adopt it and report a success each: it passes the gate and has a price.
    let status = node.get_auth("/v1/status", &[]).await?;
    let addr = status["listen_addrs"][0].as_str().unwrap_or_default();
    let peer = Sniffer::start(95)?;
    peer.net.dial(format!("{addr}/p2p/{}", status["peer_id"].as_str().unwrap_or_default()).parse()?).await?;
    let listing =
        CrystalListing { asking_price: 1_000_000, ..druse_tests::swarm::listing("rotate-api-keys-without-downtime") };
    let body = Body::Crystal(listing);
    let id = ContentId::of(&body.encode()?);
    peer.publish(topic::CRYSTALS, seal(&Keypair::from_seed([94; 32]), &body)?).await?;
    let at = druse_protocol::now_ms();
    for (i, manager) in managers.iter().enumerate() {
        for event in [ReportEvent::Adoption { price_paid: 0 }, ReportEvent::Execution { success: true, reward: 1.0 }] {
            let report = Report { issued_at: at + i as u64, reporter: manager.public(), content_id: id, event };
            peer.publish(topic::REPORTS, seal(manager, &Body::Report(report))?).await?;
        }
    }
    let price = druse_tests::wait_for(ANSWERED, "the skill to be priced on the agent's node", async || {
        let listing = node.get_auth(&format!("/v1/skills/{id}"), &[]).await.ok()?;
        listing["computed_price"]["micros"].as_u64().filter(|p| *p > 1000)
    })
    .await?;

    let (status, said) = chat(&node, &serde_json::json!({"message": format!("please use skill {id}")})).await?;
    assert_eq!(status, 200, "{said}");
    assert_eq!(said["tools"], serde_json::json!(["use_skill"]), "{said}");
    let answer = said["answer"].as_str().unwrap_or_default();
    assert!(answer.contains("the owner's approval is needed"), "{said}");
    assert!(answer.contains(&format!("costs {price} micro-USDC")), "the answer names the price: {said}");
    assert!(answer.contains("posts no approval request"), "{said}");

    // Nothing reached Bluesky or the market.
    assert!(world.owner.posts(&world.agent.did).await?.is_empty(), "the agent posted an approval request");
    let ledger = node.get_auth("/v1/ledger", &[]).await?;
    assert_eq!(ledger["entries"].as_array().map(Vec::len), Some(0), "nothing was paid: {ledger}");
    let listing = node.get_auth(&format!("/v1/skills/{id}"), &[]).await?;
    assert_eq!(listing["adopted"], false, "{listing}");
    assert_eq!(node.metric("druse_agent_skills_adopted_total").await?, 0.0);
    node.stop().await
}
