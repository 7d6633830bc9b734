//! The agent's scenarios (issue 11), each on a real `druse-node` process whose agent talks
//! to a real local ATProto network (PLC, PDS, AppView) and to a chat-completions server
//! scripted per scenario.

use std::time::Duration;

use druse_tests::agent::{AgentNode, AgentSetup};
use druse_tests::atproto::{Account, Network, Post, handle, replies};
use druse_tests::llm::{Answer, Request, ScriptedLlm};
use druse_tests::{eventually, wait_for};
use serde_json::{Value, json};

/// Indexing by the AppView plus a few 300 ms polls of the agent.
const ANSWERED: Duration = Duration::from_secs(30);

#[path = "agent/script.rs"]
mod script;
use script::script;

#[path = "agent/safety.rs"]
mod safety;

#[path = "agent/controls.rs"]
mod controls;

#[path = "agent/real.rs"]
mod real;

#[path = "agent/mind.rs"]
mod mind;

#[path = "agent/tryit.rs"]
mod tryit;

#[path = "agent/models.rs"]
mod models;

#[path = "agent/local.rs"]
mod local;
#[path = "agent/outcomes.rs"]
mod outcomes;
#[path = "agent/whose.rs"]
mod whose;

struct World {
    net: &'static Network,
    agent: Account,
    owner: Account,
    llm: ScriptedLlm,
    dir: tempfile::TempDir,
}

impl World {
    async fn new(script: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> anyhow::Result<Self> {
        let net = Network::shared().await?;
        Ok(Self {
            agent: Account::create(net, &handle("ag")).await?,
            owner: Account::create(net, &handle("ow")).await?,
            llm: ScriptedLlm::start(script).await?,
            dir: tempfile::tempdir()?,
            net,
        })
    }

    fn setup(&self, extra: &str) -> AgentSetup {
        AgentSetup {
            pds: self.net.pds.clone(),
            handle: self.agent.handle.clone(),
            password: self.agent.password.clone(),
            owner: self.owner.handle.clone(),
            llm: self.llm.base_url(),
            extra: extra.to_owned(),
            bootstrap: Vec::new(),
            trust_list: None,
            llm_timeout: None,
            llm_extra: String::new(),
        }
    }

    async fn node(&self, extra: &str) -> anyhow::Result<AgentNode> {
        self.node_in(extra, "node").await
    }

    /// A node on the data directory `name` under the scenario's directory.
    async fn node_in(&self, extra: &str, name: &str) -> anyhow::Result<AgentNode> {
        let node = AgentNode::start(&self.setup(extra), &self.dir.path().join(name)).await?;
        eventually(ANSWERED, "the agent to log in", async || node.agent().await.is_ok_and(|a| a["state"] == "running"))
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
        Ok(node)
    }

    /// `who` mentions the agent in a new post.
    async fn mention(&self, who: &Account, text: &str) -> anyhow::Result<Post> {
        who.post(&format!("@{} {text}", self.agent.handle), &[(&self.agent.handle, &self.agent.did)], None).await
    }

    /// The agent's replies to `post`, as the AppView shows them.
    async fn replies_to(&self, viewer: &Account, post: &Post) -> Vec<(String, Value)> {
        let Ok(thread) = viewer.thread(&post.uri).await else { return Vec::new() };
        replies(&thread).into_iter().filter(|(h, _, _)| *h == self.agent.handle).map(|(_, t, r)| (t, r)).collect()
    }

    async fn reply_to(&self, viewer: &Account, post: &Post, node: &AgentNode) -> anyhow::Result<(String, Value)> {
        wait_for(ANSWERED, format_args!("the agent's reply to {}", post.uri), async || {
            self.replies_to(viewer, post).await.into_iter().next()
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))
    }
}

async fn observations(node: &AgentNode, handle: &str, q: &str) -> anyhow::Result<Vec<Value>> {
    let ns = format!("user:{handle}");
    let hits = node.get_auth("/v1/memories", &[("q", q), ("namespace", &ns), ("kind", "observation")]).await?;
    Ok(hits.as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn a_mention_is_answered_in_its_thread_and_remembered_then_a_correction_supersedes() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("").await?;
    let alice = Account::create(world.net, &handle("al")).await?;

    // Scenario 1: the reply appears in the thread with correct refs; an observation is kept.
    let first = world.mention(&alice, "my favorite color is green").await?;
    let (text, record) = world.reply_to(&alice, &first, &node).await?;
    assert!(text.starts_with("you said:"), "{text}");
    assert_eq!(record["reply"]["root"]["uri"], first.uri.as_str());
    assert_eq!(record["reply"]["parent"]["uri"], first.uri.as_str());
    assert_eq!(record["reply"]["parent"]["cid"], first.cid.as_str());
    let green = wait_for(ANSWERED, "an observation about alice", async || {
        observations(&node, &alice.handle, "favorite color")
            .await
            .ok()?
            .into_iter()
            .find(|h| h["crystal"]["text"].as_str().is_some_and(|t| t.contains("green")))
    })
    .await?;
    assert_eq!(green["crystal"]["attribute"], "favorite_color");
    let exchanges = node
        .get_auth(
            "/v1/memories",
            &[("q", "favorite color"), ("namespace", &format!("user:{}", alice.handle)), ("kind", "interaction")],
        )
        .await?;
    assert!(exchanges.as_array().is_some_and(|a| !a.is_empty()), "the verbatim exchange is stored: {exchanges}");

    // Scenario 2: a correction supersedes the old value, which stays in the history.
    let second = world.mention(&alice, "wait, actually my favorite color is blue").await?;
    world.reply_to(&alice, &second, &node).await?;
    let blue = wait_for(ANSWERED, "the corrected observation", async || {
        observations(&node, &alice.handle, "favorite color")
            .await
            .ok()?
            .into_iter()
            .find(|h| h["crystal"]["text"].as_str().is_some_and(|t| t.contains("blue")))
    })
    .await?;
    let active = observations(&node, &alice.handle, "favorite color").await?;
    assert!(
        !active.iter().any(|h| h["crystal"]["text"].as_str().is_some_and(|t| t.contains("green"))),
        "the old value is no longer active: {active:?}"
    );
    let id = blue["crystal"]["id"].as_u64().expect("id");
    let history = node.get_auth(&format!("/v1/crystals/{id}/history"), &[]).await?;
    let chain: Vec<&str> =
        history["chain"].as_array().expect("chain").iter().filter_map(|c| c["text"].as_str()).collect();
    assert_eq!(chain.len(), 2, "{history}");
    assert!(chain[0].contains("green") && chain[1].contains("blue"), "{chain:?}");
    assert_eq!(history["chain"][0]["status"], "superseded");
    assert_eq!(history["chain"][1]["supersedes"], history["chain"][0]["id"], "{history}");
    assert_eq!(blue["crystal"]["confidence"].as_f64(), Some(1.0), "an explicit correction supersedes at 1.0");
    assert_eq!(blue["crystal"]["text"], "Their favorite color is blue", "the correction is a field, not a prefix");
    assert!(history["audit"].to_string().contains("explicit correction"), "{history}");
    // The LLM reconciler took the decision (the rules would have too, but it was asked).
    assert_eq!(node.metric("druse_agent_reconciled_total{label=\"update\"}").await?, 1.0);
    let asked = world.llm.requests();
    assert!(asked.iter().any(|r| r.schema_name().as_deref() == Some("reconciliation")));
    // Every call of the model is in the journal, labelled by what it was for.
    for entry in ["notifications", "extraction", "reconciliation"] {
        let runs = node.get_auth("/v1/agent/runs", &[("entry", entry)]).await?;
        let ok = runs.as_array().is_some_and(|r| r.iter().any(|run| run["outcome"] == "ok"));
        assert!(ok, "no {entry} call recorded as ok in the journal: {runs}");
    }

    let status = node.agent().await?;
    assert_eq!(status["replies"], 2, "{status}");
    assert!(node.metric("druse_agent_replies_total").await? >= 2.0);
    assert!(node.metric("druse_agent_tool_calls_total{label=\"reply\"}").await? >= 2.0);
    node.stop().await
}

#[tokio::test]
async fn the_per_author_limit_and_the_batch_scope_refuse_and_count() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("per_author_replies = 2").await?;
    let bob = Account::create(world.net, &handle("bo")).await?;
    let carol = Account::create(world.net, &handle("ca")).await?;

    // Scenario 3 (with a limit of 2): the third mention in the window gets no reply.
    let mut posts = Vec::new();
    for i in 0..3 {
        let post = world.mention(&bob, &format!("question {i}")).await?;
        world.reply_to(&bob, &post, &node).await.ok();
        posts.push(post);
    }
    eventually(ANSWERED, "the refusal to be counted", async || {
        node.metric("druse_agent_refused_total{label=\"rate_limit\"}").await.is_ok_and(|v| v >= 1.0)
    })
    .await?;
    let answered = futures_count(&world, &bob, &posts).await;
    assert_eq!(answered, 2, "two replies, the third refused");

    // Scenario 4: a reply to a URI outside the batch is refused and counted.
    let elsewhere = carol.post("an unrelated post", &[], None).await?;
    let bait = world.mention(&carol, &format!("reply elsewhere {}", elsewhere.uri)).await?;
    eventually(ANSWERED, "the outside-batch refusal", async || {
        node.metric("druse_agent_refused_total{label=\"outside_batch\"}").await.is_ok_and(|v| v >= 1.0)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    assert!(world.replies_to(&carol, &elsewhere).await.is_empty(), "nothing was posted under the other post");
    assert!(world.replies_to(&carol, &bait).await.is_empty());
    let results: Vec<String> = world.llm.requests().iter().flat_map(|r| r.tool_results()).collect();
    assert!(
        results.iter().any(|r| r.contains("not in the current batch") && r.contains(bait.uri.as_str())),
        "the model is told, with the batch's post it may name: {results:?}"
    );
    node.stop().await
}

async fn futures_count(world: &World, viewer: &Account, posts: &[Post]) -> usize {
    let mut n = 0;
    for p in posts {
        if !world.replies_to(viewer, p).await.is_empty() {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn only_the_owners_like_of_the_request_approves_and_only_once() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("").await?;
    let stranger = Account::create(world.net, &handle("st")).await?;
    // An ordinary reply of the agent's, for the owner to like.
    let hello = world.mention(&world.owner, "hello").await?;
    let (_, reply) = world.reply_to(&world.owner, &hello, &node).await?;
    let _ = reply;
    let thread = world.owner.thread(&hello.uri).await?;
    let ordinary = thread["thread"]["replies"][0]["post"].clone();
    let ordinary = Post {
        uri: ordinary["uri"].as_str().unwrap_or_default().into(),
        cid: ordinary["cid"].as_str().unwrap_or_default().into(),
    };

    let proposed = "the swarm is growing";
    world.mention(&world.owner, &format!("post for me: {proposed}")).await?;
    let request = wait_for(ANSWERED, "the approval request", async || {
        let posts = world.owner.posts(&world.agent.did).await.ok()?;
        posts.into_iter().find(|p| p["value"]["text"].as_str().is_some_and(|t| t.contains("approval request")))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let text = request["value"]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains(proposed) && text.contains(&format!("@{}", world.owner.handle)), "{text}");
    let tags_owner = request["value"]["facets"][0]["features"][0]["did"] == world.owner.did.as_str();
    assert!(tags_owner, "the request tags the owner: {request}");
    let request = Post {
        uri: request["uri"].as_str().unwrap_or_default().into(),
        cid: request["cid"].as_str().unwrap_or_default().into(),
    };
    let published = async || {
        world
            .owner
            .posts(&world.agent.did)
            .await
            .map(|ps| ps.iter().filter(|p| p["value"]["text"] == proposed && p["value"]["reply"].is_null()).count())
    };

    // The owner likes another of the agent's posts: nothing is approved (phi's gate opened here).
    world.owner.like(&ordinary).await?;
    eventually(ANSWERED, "the owner's like of another post to approve nothing", async || {
        node.metric("druse_agent_refused_total{label=\"gate_no_request\"}").await.is_ok_and(|v| v >= 1.0)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    // A stranger likes the request: nothing is approved.
    stranger.like(&request).await?;
    eventually(ANSWERED, "the stranger's like to approve nothing", async || {
        node.metric("druse_agent_refused_total{label=\"gate_not_owner\"}").await.is_ok_and(|v| v >= 1.0)
    })
    .await?;
    assert_eq!(published().await?, 0, "no like so far approved the post");
    assert_eq!(node.metric("druse_agent_gate_approvals_total").await?, 0.0);

    // The owner likes the request: the post is made, once.
    world.owner.like(&request).await?;
    eventually(ANSWERED, "the approved post", async || published().await.is_ok_and(|n| n == 1)).await?;
    assert_eq!(node.metric("druse_agent_gate_approvals_total").await?, 1.0);
    assert_eq!(node.metric("druse_agent_gate_requests_total").await?, 1.0);
    // More polls pass; the approval is not used again.
    let polls = node.agent().await?["polls"].as_u64().unwrap_or(0);
    eventually(ANSWERED, "more polls", async || {
        node.agent().await.is_ok_and(|a| a["polls"].as_u64() > Some(polls + 3))
    })
    .await?;
    assert_eq!(published().await?, 1);
    node.stop().await
}

#[tokio::test]
async fn a_mention_of_someone_who_did_not_consent_carries_no_facet() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("").await?;
    let dana = Account::create(world.net, &handle("dn")).await?;
    let erin = Account::create(world.net, &handle("er")).await?;
    let fay = Account::create(world.net, &handle("fa")).await?;
    // Fay opts in to being tagged.
    let optin = world.mention(&fay, "you may tag me").await?;
    world.reply_to(&fay, &optin, &node).await?;
    let post =
        world.mention(&dana, &format!("say hi to @{} and @{} and @{}", erin.handle, fay.handle, dana.handle)).await?;
    let (text, record) = world.reply_to(&dana, &post, &node).await?;
    assert!(text.contains(&format!("@{}", erin.handle)), "{text}");
    let tagged: Vec<&str> = record["facets"]
        .as_array()
        .map(|fs| fs.iter().filter_map(|f| f["features"][0]["did"].as_str()).collect())
        .unwrap_or_default();
    assert!(!tagged.contains(&erin.did.as_str()), "erin did not consent: {record}");
    assert!(tagged.contains(&fay.did.as_str()), "fay consented: {record}");
    assert!(tagged.contains(&dana.did.as_str()), "the author answered may be tagged: {record}");
    for f in record["facets"].as_array().into_iter().flatten() {
        let (s, e) = (
            f["index"]["byteStart"].as_u64().unwrap_or(0) as usize,
            f["index"]["byteEnd"].as_u64().unwrap_or(0) as usize,
        );
        assert!(text.as_bytes().get(s..e).is_some_and(|b| b.starts_with(b"@")), "facet {s}..{e} of {text:?}");
    }
    assert!(node.metric("druse_agent_refused_total{label=\"no_consent_facet\"}").await? >= 1.0);
    node.stop().await
}

#[tokio::test]
async fn an_llm_that_is_down_or_answers_garbage_loses_nothing() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, Ordering};
    const CRASHING: u8 = 0;
    const GARBAGE: u8 = 1;
    const HEALTHY: u8 = 2;
    let net = Network::shared().await?;
    let agent = Account::create(net, &handle("ag")).await?;
    let owner = Account::create(net, &handle("ow")).await?;
    let gus = Account::create(net, &handle("gu")).await?;
    let dir = tempfile::tempdir()?;
    // The model's address, where nothing listens yet: the model is down.
    let addr = format!("127.0.0.1:{}", druse_tests::process::free_port()?);
    let setup = AgentSetup {
        pds: net.pds.clone(),
        handle: agent.handle.clone(),
        password: agent.password.clone(),
        owner: owner.handle.clone(),
        llm: format!("http://{addr}/v1"),
        extra: String::new(),
        bootstrap: Vec::new(),
        trust_list: None,
        llm_timeout: None,
        llm_extra: String::new(),
    };
    let node = AgentNode::start(&setup, &dir.path().join("node")).await?;
    eventually(ANSWERED, "the agent to log in", async || node.agent().await.is_ok_and(|a| a["state"] == "running"))
        .await?;
    let post = gus.post(&format!("@{} are you there?", agent.handle), &[(&agent.handle, &agent.did)], None).await?;
    let failed =
        async |n: f64| node.metric("druse_agent_batches_total{label=\"llm_failed\"}").await.is_ok_and(|v| v >= n);
    let logged =
        |what: &str| node.log_text().lines().any(|l| l.contains("the LLM gave no usable answer") && l.contains(what));
    eventually(ANSWERED, "a batch failed on the model being down", async || failed(1.0).await)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    assert!(logged("could not be reached"), "the log says the model is down:\n{}", node.log_tail());

    // The model comes up, but answers 500, then garbage.
    let mode = Arc::new(AtomicU8::new(CRASHING));
    let now = Arc::clone(&mode);
    let llm = ScriptedLlm::start_on(&addr, move |r| match now.load(Ordering::SeqCst) {
        CRASHING => Answer::Status(500, "model crashed".into()),
        GARBAGE => Answer::Garbage("<html>bad gateway</html>".into()),
        _ => script(r),
    })
    .await?;
    eventually(Duration::from_secs(60), "a batch to fail on 500", async || logged("answered 500"))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    mode.store(GARBAGE, Ordering::SeqCst);
    eventually(Duration::from_secs(60), "a batch to fail on garbage", async || logged("not a chat completion"))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let polls = node.agent().await?["polls"].as_u64().unwrap_or(0);
    eventually(ANSWERED, "polling to go on", async || {
        node.agent().await.is_ok_and(|a| a["polls"].as_u64() > Some(polls + 2))
    })
    .await?;
    let status = node.agent().await?;
    assert!(status["last_error"].as_str().is_some_and(|e| e.starts_with("LLM:")), "{status}");
    let replies = async || {
        let thread = gus.thread(&post.uri).await.ok()?;
        Some(replies(&thread).into_iter().filter(|(h, _, _)| *h == agent.handle).count())
    };
    assert_eq!(replies().await, Some(0));

    // The model is back: the mention kept for later is answered, once.
    mode.store(HEALTHY, Ordering::SeqCst);
    wait_for(Duration::from_secs(60), "the kept mention to be answered", async || replies().await.filter(|n| *n > 0))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    assert_eq!(replies().await, Some(1));
    assert!(llm.requests().iter().any(|r| r.batch_uris().contains(&post.uri)));
    node.stop().await
}

#[tokio::test]
async fn after_a_restart_the_session_is_reused_and_nothing_is_answered_twice() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let hal = Account::create(world.net, &handle("ha")).await?;
    let node = world.node("").await?;
    assert_eq!(node.agent().await?["session"], "logged_in");
    let post = world.mention(&hal, "remember me").await?;
    world.reply_to(&hal, &post, &node).await?;
    node.stop().await?;

    let session_file = world.dir.path().join("node").join("agent-session.json");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&session_file)?)?;
    let node = world.node("").await?;
    assert_eq!(node.agent().await?["session"], "reused", "{}", node.log_tail());
    // No new createSession: the node counts no login, and the tokens on disk are the same.
    assert_eq!(node.metric("druse_agent_sessions_total{label=\"reused\"}").await?, 1.0);
    assert_eq!(node.metric("druse_agent_sessions_total{label=\"logged_in\"}").await?, 0.0);
    let logins = node.log_text().matches("(createSession)").count();
    assert_eq!(logins, 1, "only the first run logged in:\n{}", node.log_tail());
    let now: Value = serde_json::from_str(&std::fs::read_to_string(&session_file)?)?;
    assert_eq!(now["refreshJwt"], saved["refreshJwt"], "the saved session is the one in use");
    // The CLI shows the same status.
    let bins = tokio::task::spawn_blocking(druse_tests::process::binaries).await??;
    let out = druse_tests::process::run_cli(&bins.node, &["agent", "status", "--api", &node.api]).await?;
    let status: Value = serde_json::from_str(&out)?;
    assert_eq!(status["state"], "running", "{out}");
    assert_eq!(status["handle"], world.agent.handle.as_str(), "{out}");
    assert_eq!(status["did"], world.agent.did.as_str(), "{out}");
    assert!(!out.contains(&world.agent.password), "the status never shows the password");
    let later = world.mention(&hal, "a new question").await?;
    world.reply_to(&hal, &later, &node).await?;
    assert_eq!(world.replies_to(&hal, &post).await.len(), 1, "the first mention was not answered again");
    node.stop().await
}

/// The agent's posts in its repository: (URI, record), newest first.
async fn agent_posts(world: &World) -> anyhow::Result<Vec<(String, Value)>> {
    Ok(world
        .owner
        .posts(&world.agent.did)
        .await?
        .into_iter()
        .map(|p| (p["uri"].as_str().unwrap_or_default().to_owned(), p["value"].clone()))
        .collect())
}

/// The agent's posts that are not replies, with their text.
async fn own_posts(world: &World) -> anyhow::Result<Vec<String>> {
    Ok(agent_posts(world)
        .await?
        .into_iter()
        .filter(|(_, p)| p["reply"].is_null())
        .filter_map(|(_, p)| p["text"].as_str().map(str::to_owned))
        .collect())
}

#[tokio::test]
async fn musing_posts_on_its_schedule_at_most_once_per_session() -> anyhow::Result<()> {
    // musing_interval is 1 m: a fresh agent's first tick is due, so the timer fires at once.
    let world = World::new(script).await?;
    let node = world.node("musing = true\nmusing_interval = \"1m\"\nautopost = true").await?;
    let posted =
        wait_for(ANSWERED, "the scheduled musing", async || own_posts(&world).await.ok().filter(|p| !p.is_empty()))
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    assert_eq!(posted, ["a quiet thought from the swarm"], "an original post, outside any thread");
    // The post is on the PDS as soon as it is made; the run is counted when it returns.
    let musings_posted = async || node.metric("druse_agent_entries_total{label=\"musing_posted\"}").await;
    eventually(ANSWERED, "the musing to be counted", async || musings_posted().await.is_ok_and(|n| n >= 1.0)).await?;

    // The operator's trigger (the CLI) runs it again now: the session already had its musing.
    let bins = tokio::task::spawn_blocking(druse_tests::process::binaries).await??;
    let data_dir = node.data_dir.display().to_string();
    let out = druse_tests::process::run_cli(
        &bins.node,
        &["agent", "run", "musing", "--api", &node.api, "--data-dir", &data_dir],
    )
    .await?;
    let outcome: Value = serde_json::from_str(&out)?;
    assert_eq!(outcome["result"], "skipped", "{out}");
    assert!(outcome["detail"].as_str().is_some_and(|d| d.contains("one musing per session")), "{out}");
    assert_eq!(own_posts(&world).await?.len(), 1);
    assert_eq!(musings_posted().await?, 1.0, "a second musing was counted");
    let musings = world.llm.requests().iter().filter(|r| r.tool_names().iter().any(|t| t == "post")).count();
    assert!(musings >= 1);
    let asked = world.llm.requests();
    let first = asked.iter().find(|r| !r.tool_names().iter().any(|t| t == "reply")).expect("a musing request");
    assert!(first.text().contains("You have a moment"), "the musing prompt: {}", first.text());
    node.stop().await
}

#[tokio::test]
async fn a_musing_waits_while_a_conversation_goes_on() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("").await?;
    let kim = Account::create(world.net, &handle("ki")).await?;
    let post = world.mention(&kim, "hello there").await?;
    world.reply_to(&kim, &post, &node).await?;
    let outcome = node.run_entry("musing").await?;
    assert_eq!(outcome["result"], "skipped", "{outcome}");
    assert!(outcome["detail"].as_str().is_some_and(|d| d.contains("never mid-conversation")), "{outcome}");
    assert!(own_posts(&world).await?.is_empty());
    // A bad entry is refused with a sentence.
    let bad = node.post_auth("/v1/agent/run", &json!({"entry": "dance"})).await.unwrap_err().to_string();
    assert!(bad.contains("400") && bad.contains("musing"), "{bad}");
    node.stop().await
}

async fn summaries(node: &AgentNode) -> anyhow::Result<Vec<Value>> {
    let hits = node
        .get_auth("/v1/memories", &[("q", "reflection day"), ("namespace", "episodic"), ("kind", "summary")])
        .await?;
    Ok(hits.as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn the_daily_reflection_makes_one_summary_crystal_once_per_day() -> anyhow::Result<()> {
    // reflection_hour = 0: due at any hour of the day, so the timer fires at the next tick.
    let world = World::new(script).await?;
    let node = world.node("reflection_hour = 0").await?;
    let polls = node.agent().await?["polls"].as_u64().unwrap_or(0);
    eventually(ANSWERED, "a few polls", async || {
        node.agent().await.is_ok_and(|a| a["polls"].as_u64() > Some(polls + 2))
    })
    .await?;
    assert!(summaries(&node).await?.is_empty(), "nothing to reflect on yet");
    assert!(node.metric("druse_agent_entries_total{label=\"reflection_skipped\"}").await? >= 1.0);
    let added = node
        .post_auth(
            "/v1/memories/batch",
            &json!({"memories": [
                {"text": "Learned that crows remember faces", "namespace": "episodic"},
                {"text": "The swarm grew to twelve nodes today", "namespace": "episodic"}
            ]}),
        )
        .await?;
    let ids: Vec<u64> = added.as_array().into_iter().flatten().filter_map(|a| a["crystal"]["id"].as_u64()).collect();
    assert_eq!(ids.len(), 2, "{added}");
    let summary = wait_for(ANSWERED, "the summary crystal", async || {
        summaries(&node).await.ok().and_then(|s| s.into_iter().next())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let crystal = &summary["crystal"];
    assert_eq!(crystal["kind"], "summary", "{crystal}");
    assert!(crystal["text"].as_str().is_some_and(|t| t.starts_with("Reflection on ")), "{crystal}");
    let sources: Vec<u64> = crystal["metadata"]["reflection_of"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert!(!sources.is_empty() && sources.iter().all(|s| ids.contains(s)), "{crystal}");

    // Once per day: the timer does not fire again, and the operator's run is refused.
    let polls = node.agent().await?["polls"].as_u64().unwrap_or(0);
    eventually(ANSWERED, "more polls", async || {
        node.agent().await.is_ok_and(|a| a["polls"].as_u64() > Some(polls + 3))
    })
    .await?;
    let again = node.run_entry("reflection").await?;
    assert_eq!(again["result"], "skipped", "{again}");
    assert!(again["detail"].as_str().is_some_and(|d| d.contains("once per day")), "{again}");
    assert_eq!(summaries(&node).await?.len(), 1);
    let runs = world
        .llm
        .requests()
        .iter()
        .filter(|r| r.tool_names().iter().any(|t| t == "write_summary") && r.last_role() != "tool")
        .count();
    assert_eq!(runs, 1, "the model was asked for one reflection");
    assert_eq!(node.metric("druse_agent_entries_total{label=\"reflection_written\"}").await?, 1.0);
    node.stop().await
}

#[tokio::test]
async fn a_review_keeps_updates_and_archives_recent_observations_and_deletes_nothing() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("").await?;
    let ns = "user:lee.test";
    let observation = |text: &str, attribute: &str| json!({"text": text, "namespace": ns, "kind": "observation", "subject": "user", "attribute": attribute});
    let added = node
        .post_auth(
            "/v1/memories/batch",
            &json!({"memories": [
                observation("Lives in Lisbon", "city"),
                observation("Their favourite bird is the crwo", "favourite_bird"),
                observation("Is at a conference this week (stale)", "whereabouts"),
            ]}),
        )
        .await?;
    let ids: Vec<u64> = added.as_array().into_iter().flatten().filter_map(|a| a["crystal"]["id"].as_u64()).collect();
    let [city, bird, away] = ids[..] else { anyhow::bail!("three ids: {added}") };

    let outcome = node.run_entry("review").await?;
    assert_eq!(outcome["result"], "done", "{outcome}");
    assert_eq!(outcome["kept"], json!([city]), "{outcome}");
    assert_eq!(outcome["updated"], json!([bird]), "{outcome}");
    assert_eq!(outcome["archived"], json!([away]), "{outcome}");
    let results: Vec<String> = world.llm.requests().iter().flat_map(|r| r.tool_results()).collect();
    assert!(results.iter().any(|r| r.contains("not among the observations listed")), "{results:?}");

    // The archived one is superseded, not deleted: it and its story are still there.
    let archived = node.get_auth(&format!("/v1/crystals/{away}"), &[]).await?;
    assert_eq!(archived["status"], "superseded", "{archived}");
    let story = node.get_auth(&format!("/v1/crystals/{away}/history"), &[]).await?;
    assert!(story["audit"].to_string().contains("archived in review: stale"), "{story}");
    // The updated one is superseded by its new value, the old one kept in the chain.
    let new_id = outcome["crystals"][0].as_u64().expect("the new value's id");
    let chain = node.get_auth(&format!("/v1/crystals/{new_id}/history"), &[]).await?;
    let texts: Vec<&str> = chain["chain"].as_array().into_iter().flatten().filter_map(|c| c["text"].as_str()).collect();
    assert_eq!(texts, ["Their favourite bird is the crwo", "Their favourite bird is the crow"], "{chain}");
    let kept = node.get_auth(&format!("/v1/crystals/{city}"), &[]).await?;
    assert_eq!(kept["status"], "active");
    assert!(node.metric("druse_agent_refused_total{label=\"review_unlisted\"}").await? >= 1.0);
    node.stop().await
}

#[tokio::test]
async fn a_follow_waits_for_the_owners_like_of_its_exact_request() -> anyhow::Result<()> {
    let world = World::new(script).await?;
    let node = world.node("").await?;
    let stranger = Account::create(world.net, &handle("st")).await?;
    let target = Account::create(world.net, &handle("tg")).await?;
    world.mention(&world.owner, &format!("please follow @{}", target.handle)).await?;
    let request = wait_for(ANSWERED, "the follow approval request", async || {
        let posts = world.owner.posts(&world.agent.did).await.ok()?;
        posts.into_iter().find(|p| p["value"]["text"].as_str().is_some_and(|t| t.contains("may I follow")))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let text = request["value"]["text"].as_str().unwrap_or_default();
    assert!(text.contains(&target.did), "the request names exactly whom: {text}");
    let request = Post {
        uri: request["uri"].as_str().unwrap_or_default().into(),
        cid: request["cid"].as_str().unwrap_or_default().into(),
    };
    let follows = async || {
        world
            .owner
            .records(&world.agent.did, "app.bsky.graph.follow")
            .await
            .map(|rs| rs.iter().filter(|r| r["value"]["subject"] == target.did.as_str()).count())
    };
    stranger.like(&request).await?;
    eventually(ANSWERED, "the stranger's like to approve nothing", async || {
        node.metric("druse_agent_refused_total{label=\"gate_not_owner\"}").await.is_ok_and(|v| v >= 1.0)
    })
    .await?;
    assert_eq!(follows().await?, 0);
    world.owner.like(&request).await?;
    eventually(ANSWERED, "the approved follow", async || follows().await.is_ok_and(|n| n == 1))
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;
    let polls = node.agent().await?["polls"].as_u64().unwrap_or(0);
    eventually(ANSWERED, "more polls", async || {
        node.agent().await.is_ok_and(|a| a["polls"].as_u64() > Some(polls + 3))
    })
    .await?;
    assert_eq!(follows().await?, 1, "approved once");
    assert_eq!(node.metric("druse_agent_actions_total{label=\"follow\"}").await?, 1.0);
    node.stop().await
}
