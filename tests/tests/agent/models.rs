//! The models people really run (issue 39): a model that writes its tool calls as fenced JSON
//! in its text is answered on Bluesky; a distilled skill that names people is refused at
//! distill time and again when the owner asks to publish it; and the owner is answered while
//! strangers' threads hang at the model.

use std::time::Duration;

use druse_tests::atproto::{Account, Post, handle};
use druse_tests::llm::{Answer, Request};
use druse_tests::{eventually, wait_for};
use serde_json::json;

use super::{ANSWERED, World, script};

/// Whether the request's last message gives back the results of calls read from the text.
fn after_text_calls(request: &Request) -> bool {
    request
        .messages()
        .last()
        .is_some_and(|m| m["role"] == "user" && m["content"].as_str().is_some_and(|t| t.starts_with("[TOOL RESULTS]")))
}

/// Qwen2.5-Coder's way: each reply written as a fenced JSON block in the answer's text, with a
/// line of prose before it and no `tool_calls`.
fn fenced(request: &Request) -> Answer {
    if request.schema_name().is_some() || !request.tool_names().iter().any(|t| t == "reply") {
        return script(request);
    }
    if after_text_calls(request) {
        return Answer::Text("done".into());
    }
    let blocks: Vec<String> = request
        .batch_uris()
        .into_iter()
        .map(|uri| {
            let call = json!({"name": "reply", "arguments": {"uri": uri, "text": "fenced: the starter first"}});
            format!("```json\n{call}\n```")
        })
        .collect();
    Answer::Text(format!("I'll reply to the mention.\n{}", blocks.join("\n")))
}

#[tokio::test]
async fn a_call_the_model_writes_as_fenced_json_is_answered_on_bluesky() -> anyhow::Result<()> {
    let world = World::new(fenced).await?;
    let node = world.node("").await?;
    let ann = Account::create(world.net, &handle("fj")).await?;
    let post = world.mention(&ann, "why did my bread not rise?").await?;
    let (text, record) = world.reply_to(&ann, &post, &node).await?;
    assert_eq!(text, "fenced: the starter first");
    assert_eq!(record["reply"]["parent"]["uri"], post.uri.as_str());
    assert!(node.metric("druse_agent_tool_call_format_total{label=\"content_json\"}").await? >= 1.0);
    assert!(node.metric("druse_agent_tool_calls_total{label=\"reply\"}").await? >= 1.0);
    // The results went back as a user turn after the model's own text, which it then ended.
    let asked = world.llm.requests();
    let followed = asked.iter().find(|r| after_text_calls(r)).expect("the results went back to the model");
    let messages = followed.messages();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert!(assistant["content"].as_str().is_some_and(|t| t.contains("```json")), "{assistant}");
    assert!(followed.text().contains("- reply: ok"), "{}", followed.text());
    node.stop().await
}

/// What the three users tell the agent.
const ASKED: [&str; 3] = [
    "hi, i'm annika from lyon. my sourdough bread did not rise overnight, why?",
    "my sourdough bread did not rise in the oven, why?",
    "my sourdough bread did not rise at all, any idea why?",
];

/// A procedure with a lowercase name, a city and a third-person fact in it.
fn leaky_procedure() -> serde_json::Value {
    json!({
        "name": "Diagnose sourdough bread that did not rise",
        "when": "A user asks why their sourdough bread did not rise",
        "steps": [
            {"tool": "search_memory", "arguments": "the baking problem in a few words",
             "purpose": "recall what the user said before"},
            {"tool": "reply", "arguments": "the post's URI and the two likeliest causes",
             "purpose": "answer briefly: starter activity, then proofing time"}
        ],
        "avoid": ["long lectures"],
        "example": {"situation": "annika from lyon, a nurse with celiac disease, says her loaf stayed flat",
                    "response": "Check that the starter doubles within hours, then proof longer."}
    })
}

/// The scenarios' model, distilling the procedure above.
fn leaky(request: &Request) -> Answer {
    if request.schema_name().as_deref() == Some("skill") {
        return Answer::Text(leaky_procedure().to_string());
    }
    script(request)
}

/// The agent's reply to `post`, as a post the user can like.
async fn reply_post(world: &World, viewer: &Account, post: &Post) -> anyhow::Result<Post> {
    let agent = world.agent.handle.clone();
    wait_for(ANSWERED, format_args!("the agent's reply to {}", post.uri), async || {
        let thread = viewer.thread(&post.uri).await.ok()?;
        thread["thread"]["replies"].as_array()?.iter().find_map(|r| {
            let p = &r["post"];
            (p["author"]["handle"] == agent.as_str()).then(|| Post {
                uri: p["uri"].as_str().unwrap_or_default().to_owned(),
                cid: p["cid"].as_str().unwrap_or_default().to_owned(),
            })
        })
    })
    .await
}

#[tokio::test]
async fn a_skill_that_names_people_is_refused_and_publish_skill_says_why() -> anyhow::Result<()> {
    let world = World::new(leaky).await?;
    let extra = "distill_after = 3\ndistill_similarity = 0.35\noutcome_quiet = \"1s\"\noutcome_window = \"5m\"";
    let node = world.node(extra).await?;
    for (i, asked) in ASKED.iter().enumerate() {
        let user = Account::create(world.net, &handle(&format!("p{i}"))).await?;
        let post = world.mention(&user, asked).await?;
        let answer = reply_post(&world, &user, &post).await.map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
        user.like(&answer).await?;
    }
    // Distilled, checked, kept private and counted.
    eventually(ANSWERED, "the skill to be refused for privacy", async || {
        node.metric("druse_agent_skills_refused_total{label=\"privacy\"}").await.is_ok_and(|n| n >= 1.0)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let skill = wait_for(ANSWERED, "the distilled skill in memory", async || {
        let hits = node.get_auth("/v1/memories", &[("q", "sourdough bread rise"), ("semantic_type", "task_pattern")]);
        hits.await
            .ok()?
            .as_array()?
            .iter()
            .find(|h| h["crystal"]["text"].as_str().is_some_and(|t| t.starts_with("Skill:")))
            .cloned()
    })
    .await?;
    assert_eq!(skill["crystal"]["governance"]["scope"], "private", "{skill}");
    // The distill pass's call of the model is in the journal like every other.
    let runs = node.get_auth("/v1/agent/runs", &[("entry", "distill")]).await?;
    assert!(runs.as_array().is_some_and(|r| r.iter().any(|run| run["outcome"] == "ok")), "{runs}");
    let refused_at_distill = node.metric("druse_agent_skills_refused_total{label=\"privacy\"}").await?;

    // The owner asks to publish it: publish_skill refuses, saying why, and nothing is requested.
    world.mention(&world.owner, "publish your skill please").await?;
    let told = wait_for(ANSWERED, "publish_skill's answer to the model", async || {
        world.llm.requests().into_iter().flat_map(|r| r.tool_results()).find(|t| t.contains("may not leave the node"))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    assert!(told.contains("fact about a person (a nurse with)"), "publish_skill says why: {told}");
    assert!(node.metric("druse_agent_skills_refused_total{label=\"privacy\"}").await? > refused_at_distill);
    assert_eq!(node.metric("druse_agent_gate_requests_total").await?, 0.0, "no approval is asked for");
    node.stop().await
}

/// Strangers whose mentions say "please hang" get a model that never answers them in time.
fn hangs_for_strangers(request: &Request) -> Answer {
    if request.text().contains("please hang") {
        return Answer::Slow(Duration::from_secs(600), Box::new(Answer::Text("too late".into())));
    }
    script(request)
}

#[tokio::test]
async fn the_owner_is_answered_while_strangers_threads_hang() -> anyhow::Result<()> {
    let world = World::new(hangs_for_strangers).await?;
    let mut setup = world.setup("concurrent_batches = 3\nbatch_deadline = \"10m\"");
    setup.llm_timeout = Some("600s".into());
    let node = druse_tests::agent::AgentNode::start(&setup, &world.dir.path().join("node")).await?;
    eventually(ANSWERED, "the agent to log in", async || node.agent().await.is_ok_and(|a| a["state"] == "running"))
        .await?;
    // Three strangers' threads take every slot and hang there.
    let mut hung = Vec::new();
    for i in 0..3 {
        let stranger = Account::create(world.net, &handle(&format!("h{i}"))).await?;
        hung.push(world.mention(&stranger, &format!("please hang, thread {i}")).await?.uri);
    }
    eventually(ANSWERED, "three hung threads at the model", async || {
        let asked: Vec<String> = world.llm.requests().iter().flat_map(|r| r.batch_uris()).collect();
        hung.iter().all(|uri| asked.contains(uri))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;

    // The owner's mention still has a slot: the model is asked within a few polls (the
    // AppView's indexing included), long before any hung thread's deadline.
    let post = world.mention(&world.owner, "say hi to the swarm").await?;
    wait_for(Duration::from_secs(10), "the owner's thread at the model", async || {
        world.llm.requests().iter().any(|r| r.batch_uris().contains(&post.uri)).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let (text, _) = world.reply_to(&world.owner, &post, &node).await?;
    assert_eq!(text, "hi the swarm!");
    node.stop().await
}
