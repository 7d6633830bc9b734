//! phi's whole mind in a real run (issue 28 item 1), on a real `druse-node` process on the
//! local ATProto network: the blocks of the model request and their order; a stranger looked
//! up once and then known by an exploration note; episodic memories synthesized; a goal
//! changed only through the owner's like; reflection across every namespace, posted when the
//! config says so; and the review writing a person's summary again.

use druse_tests::atproto::{Account, Post, handle};
use druse_tests::llm::Request;
use druse_tests::wait_for;
use serde_json::{Value, json};

use super::{ANSWERED, World, script};

const GOAL: &str = "dev.druse.agent.goal";

/// The system prompt of the batch run that answered a post saying `said`.
async fn system_of(world: &World, said: &str) -> anyhow::Result<String> {
    let run: Request = wait_for(ANSWERED, format_args!("the run that saw {said:?}"), async || {
        world.llm.requests().into_iter().find(|r| r.has_tools() && r.last_role() == "user" && r.text().contains(said))
    })
    .await?;
    Ok(run.messages()[0]["content"].as_str().unwrap_or_default().to_owned())
}

/// Where each heading opens in `text`, which must hold all of them in this order.
fn assert_in_order(text: &str, headings: &[&str]) {
    let mut last = 0;
    for h in headings {
        let at = text[last..].find(h).map(|i| i + last);
        assert!(at.is_some(), "{h} missing, or out of order, in:\n{text}");
        last = at.unwrap_or(last);
    }
}

#[tokio::test]
async fn a_run_sees_goals_self_state_a_stranger_and_synthesized_memories_in_order() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let goal = world
        .agent
        .create_record(
            GOAL,
            json!({"$type": GOAL, "title": "make 3 friends", "description": "three people who talk back",
                   "createdAt": "2026-11-01T00:00:00.000Z"}),
        )
        .await?;
    let rkey = goal.uri.rsplit('/').next().unwrap_or_default().to_owned();
    let node = world.node("post_reflection = true\nautopost = true").await?;
    node.post_auth(
        "/v1/memories/batch",
        &json!({"memories": [
            {"text": "The lighthouse lamp burns oil", "namespace": "episodic"},
            {"text": "The harbour opens at dawn for the lighthouse keepers", "namespace": "episodic"}
        ]}),
    )
    .await?;
    let sam = Account::create(world.net, &handle("sm")).await?;
    sam.post("I sail small boats past the lighthouse", &[], None).await?;

    // A stranger's first mention: every block, in seed 000's order.
    let first = world.mention(&sam, "what do you know about the lighthouse?").await?;
    world.reply_to(&sam, &first, &node).await?;
    let system = system_of(&world, "what do you know about the lighthouse").await?;
    assert_in_order(
        &system,
        &[
            "[YOU]",
            "[NOW]",
            "[GOALS]",
            "[SELF STATE]",
            &format!("[FIRST INTERACTION WITH @{}]", sam.handle),
            "[RELEVANT MEMORIES — synthesized for this query]",
            "[THREAD]",
        ],
    );
    assert!(system.contains(&format!("- rkey {rkey}: \"make 3 friends\"")), "the goal names its rkey:\n{system}");
    assert!(system.contains("I sail small boats"), "the stranger's recent posts:\n{system}");
    assert!(system.contains("The lighthouse lamp burns oil"), "the synthesized memories:\n{system}");
    assert!(!system.contains("[EPISODIC MEMORIES]"), "synthesized, not raw:\n{system}");
    // The journal shows the same blocks, in the same order.
    let runs = node.get_auth("/v1/agent/runs", &[("entry", "notifications"), ("limit", "20")]).await?;
    let mut run = Value::Null;
    for summary in runs.as_array().into_iter().flatten() {
        let full = node.get_auth(&format!("/v1/agent/runs/{}", summary["id"]), &[]).await?;
        if full["context"][1]["content"].as_str().is_some_and(|t| t.contains("what do you know about the lighthouse")) {
            run = full;
            break;
        }
    }
    let blocks: Vec<String> = run["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|b| b.split(']').next().unwrap_or_default().trim_start_matches('[').to_owned())
        .collect();
    let first_at = |name: &str| blocks.iter().position(|b| b.starts_with(name));
    let order =
        ["YOU", "NOW", "GOALS", "SELF STATE", "FIRST INTERACTION", "RELEVANT MEMORIES", "THREAD", "NEW NOTIFICATIONS"];
    let positions: Vec<Option<usize>> = order.iter().map(|n| first_at(n)).collect();
    assert!(positions.iter().all(Option::is_some) && positions.is_sorted(), "{blocks:?}");

    // The second time, the stranger is known: background research and past exchanges.
    let second = world.mention(&sam, "my favorite color is teal, by the way").await?;
    world.reply_to(&sam, &second, &node).await?;
    let system = system_of(&world, "my favorite color is teal").await?;
    assert!(!system.contains("[FIRST INTERACTION"), "looked up once:\n{system}");
    assert_in_order(
        &system,
        &[&format!("[BACKGROUND RESEARCH ON @{}]", sam.handle), &format!("[PAST EXCHANGES WITH @{}]", sam.handle)],
    );

    // A goal changes only through the owner's like of the request.
    world.mention(&world.owner, "new goal: learn the tides - know high water every day").await?;
    let request = wait_for(ANSWERED, "the goal's approval request", async || {
        let posts = world.owner.posts(&world.agent.did).await.ok()?;
        posts.into_iter().find(|p| p["value"]["text"].as_str().is_some_and(|t| t.contains("set my goal")))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    assert!(world.owner.records(&world.agent.did, GOAL).await?.len() == 1, "not before the owner approves");
    let request = Post {
        uri: request["uri"].as_str().unwrap_or_default().into(),
        cid: request["cid"].as_str().unwrap_or_default().into(),
    };
    world.owner.like(&request).await?;
    let goals = wait_for(ANSWERED, "the approved goal on the PDS", async || {
        let goals = world.owner.records(&world.agent.did, GOAL).await.ok()?;
        (goals.len() == 2).then_some(goals)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    assert!(goals.iter().any(|g| g["value"]["title"] == "learn the tides"), "{goals:?}");
    let third = world.mention(&sam, "any plans?").await?;
    world.reply_to(&sam, &third, &node).await?;
    assert!(system_of(&world, "any plans?").await?.contains("\"learn the tides\""), "the new goal is in [GOALS]");

    // The review writes the person's summary, which the next run shows as the impression.
    let review = node.run_entry("review").await?;
    assert!(review["summaries"].as_array().is_some_and(|s| !s.is_empty()), "{review}");
    let ns = format!("user:{}", sam.handle);
    let summaries = node.get_auth("/v1/memories", &[("q", "teal"), ("namespace", &ns), ("kind", "summary")]).await?;
    assert!(summaries[0]["crystal"]["text"].as_str().is_some_and(|t| t.contains("teal")), "{summaries}");
    // The single calls behind the synthesis and the summary are in the journal too.
    for entry in ["synthesis", "summary"] {
        let runs = node.get_auth("/v1/agent/runs", &[("entry", entry)]).await?;
        assert!(runs.as_array().is_some_and(|r| !r.is_empty()), "no {entry} run in the journal: {runs}");
    }
    let fourth = world.mention(&sam, "remember me?").await?;
    world.reply_to(&sam, &fourth, &node).await?;
    assert!(system_of(&world, "remember me?").await?.contains(&format!("[IMPRESSION OF @{}]", sam.handle)));

    // Reflection reads the day in every namespace, and posts it (post_reflection).
    let reflection = node.run_entry("reflection").await?;
    assert_eq!(reflection["result"], "done", "{reflection}");
    let asked = world.llm.requests();
    let reflected = asked.iter().find(|r| r.tool_names().iter().any(|t| t == "write_summary")).expect("a reflection");
    assert!(reflected.text().contains(&format!("[{ns}]")), "the day's conversations: {}", reflected.text());
    assert!(reflected.text().contains("[episodic]"), "and the agent's own notes");
    let posted = world.owner.posts(&world.agent.did).await?;
    assert!(posted.iter().any(|p| p["value"]["text"] == "a quiet day of tides and new faces"), "{posted:?}");
    node.stop().await
}
