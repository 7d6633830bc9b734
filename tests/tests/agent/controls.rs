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
