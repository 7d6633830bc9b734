//! Whose a memory is (issue 39 item 5), on a real `druse-node` process on the local ATProto
//! network: what a stranger asks the agent to `remember` is kept as theirs, never as the
//! agent's own note; what the operator says in `agent chat` never reaches a stranger's thread;
//! and an agent without a Bluesky account answers its operator alone.

use druse_tests::agent::AgentNode;
use druse_tests::atproto::{Account, handle};
use druse_tests::llm::{Answer, Request};
use serde_json::{Value, json};

use super::{ANSWERED, World, script};
use druse_tests::eventually;

/// The model: in a local conversation, "remember …" keeps the operator's boat and "boat"
/// searches for it; in a thread, "remember that X" keeps X and searches memory for the
/// operator's boat, then replies "noted"; anything else as the scenarios' model.
fn model(request: &Request) -> Answer {
    let system = request.messages().first().and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
    let said = request.messages().last().and_then(|m| m["content"].as_str().map(str::to_owned)).unwrap_or_default();
    if request.schema_name().is_some() {
        return script(request);
    }
    if system.contains("local conversation with your operator") {
        if request.last_role() == "tool" {
            return Answer::Text(format!("the tools said: {}", request.tool_results().join(" | ")));
        }
        return if said.contains("remember") {
            Answer::Tools(vec![("remember".into(), json!({"text": "The operator's boat is called Wren"}))])
        } else if said.contains("boat") {
            Answer::Tools(vec![("search_memory".into(), json!({"query": "the operator's boat"}))])
        } else {
            Answer::Text("hello operator".into())
        };
    }
    let uris = request.batch_uris();
    let text = request.text();
    if request.tool_names().iter().any(|t| t == "reply")
        && let Some(rest) = text.split("remember that ").nth(1)
    {
        if request.last_role() == "tool" {
            let uri = uris.first().cloned().unwrap_or_default();
            return Answer::Tools(vec![("reply".into(), json!({"uri": uri, "text": "noted"}))]);
        }
        let note: String = rest.chars().take_while(|c| *c != '"' && *c != '\n').collect();
        return Answer::Tools(vec![
            ("remember".into(), json!({"text": note})),
            ("search_memory".into(), json!({"query": "the operator's boat is called"})),
        ]);
    }
    script(request)
}

async fn chat(node: &AgentNode, message: &str) -> anyhow::Result<(u16, Value)> {
    let (status, text) = node.post_auth_answer("/v1/agent/chat", &json!({"message": message})).await?;
    Ok((status, serde_json::from_str(&text)?))
}

/// The texts of the memories in `namespace` that match `q`.
async fn texts(node: &AgentNode, namespace: &str, q: &str) -> anyhow::Result<Vec<(String, Value)>> {
    let hits = node.get_auth("/v1/memories", &[("q", q), ("namespace", namespace), ("k", "20")]).await?;
    Ok(hits
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|h| (h["crystal"]["text"].as_str().unwrap_or_default().to_owned(), h["crystal"]["metadata"].clone()))
        .collect())
}

#[tokio::test]
async fn a_strangers_note_is_theirs_and_what_the_operator_said_never_reaches_a_stranger() -> anyhow::Result<()> {
    let world = World::new(model).await?;
    let node = world.node("").await?;

    // The operator tells the agent something in a local conversation: it is the operator's.
    let (status, said) = chat(&node, "please remember that my boat is called Wren").await?;
    assert_eq!(status, 200, "{said}");
    assert!(said["answer"].as_str().is_some_and(|a| a.contains("(operator)")), "{said}");
    let operator = texts(&node, "operator", "boat Wren").await?;
    assert!(operator.iter().any(|(t, _)| t.contains("Wren")), "{operator:?}");
    let own = texts(&node, "episodic", "boat Wren").await?;
    assert!(own.iter().all(|(t, _)| !t.contains("Wren")), "not the agent's own note: {own:?}");
    // The operator's next conversation finds it.
    let (_, asked) = chat(&node, "what is my boat called?").await?;
    assert!(asked["answer"].as_str().is_some_and(|a| a.contains("Wren")), "{asked}");

    // A stranger asks the agent to remember something, and the model also searches memory
    // for the operator's boat.
    let kim = Account::create(world.net, &handle("kr")).await?;
    let post = world.mention(&kim, "remember that the harbour meeting moved to Friday").await?;
    let (reply, _) = world.reply_to(&kim, &post, &node).await?;
    assert_eq!(reply, "noted");

    // Kept as kim's, labelled as what kim asked; not among the agent's own notes. Kim's
    // namespace also holds the thread itself, which says the same words: the note is the one
    // the agent wrote down as asked, whichever of the two ranks first.
    let theirs = texts(&node, &format!("user:{}", kim.handle), "harbour meeting Friday").await?;
    let asked = format!("@{} asked me to remember:", kim.handle);
    let (_, metadata) = theirs
        .iter()
        .find(|(t, _)| t.starts_with(&asked) && t.contains("harbour meeting moved to Friday"))
        .ok_or_else(|| anyhow::anyhow!("kim's note in kim's namespace: {theirs:?}\n{}", node.log_tail()))?;
    assert_eq!(metadata["asked_by"], kim.did.as_str(), "{metadata}");
    assert_eq!(metadata["trust"], "low", "{metadata}");
    let own = texts(&node, "episodic", "harbour meeting Friday").await?;
    assert!(own.iter().all(|(t, _)| !t.contains("harbour")), "a stranger never writes the agent's notes: {own:?}");

    // Nothing the operator said reached kim's thread: not in its context, not in the
    // search's result.
    let kims: Vec<Request> =
        world.llm.requests().into_iter().filter(|r| r.text().contains("harbour meeting moved")).collect();
    assert!(kims.len() >= 2, "the thread's run and its tool round: {}", kims.len());
    for request in &kims {
        assert!(!request.text().contains("Wren"), "the operator's words reached a stranger: {}", request.text());
    }
    let results: Vec<String> = kims.iter().flat_map(Request::tool_results).collect();
    assert!(results.iter().any(|r| r.contains("user:") || r.contains("nothing found")), "the search ran: {results:?}");
    node.stop().await
}

#[tokio::test]
async fn an_agent_without_a_bluesky_account_answers_its_operator_alone() -> anyhow::Result<()> {
    let world = World::new(model).await?;
    let mut setup = world.setup("");
    setup.handle = String::new();
    let node = AgentNode::start(&setup, &world.dir.path().join("chat-only")).await?;
    eventually(ANSWERED, "the chat-only agent to run", async || {
        node.agent().await.is_ok_and(|a| a["state"] == "running" && a["chat_only"] == true)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", node.log_tail()))?;

    let (status, said) = chat(&node, "please remember that my boat is called Wren").await?;
    assert_eq!(status, 200, "{said}");
    let (_, asked) = chat(&node, "what is my boat called?").await?;
    assert!(asked["answer"].as_str().is_some_and(|a| a.contains("Wren")), "{asked}");

    // The entry points that would reach Bluesky are refused, saying why.
    let (status, refused) = node.post_auth_answer("/v1/agent/run", &json!({"entry": "musing"})).await?;
    assert_ne!(status, 200, "{refused}");
    assert!(refused.contains("no Bluesky account"), "{refused}");
    let agent = node.agent().await?;
    assert_eq!(agent["did"], Value::Null, "{agent}");
    assert_eq!(agent["polls"], 0, "it polls nothing: {agent}");
    assert!(world.llm.requests().iter().all(|r| !r.tool_names().iter().any(|t| t == "reply")), "no batch was ever run");
    node.stop().await
}
