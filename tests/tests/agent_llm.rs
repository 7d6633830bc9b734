//! The agent's LLM client against a server that speaks the chat-completions protocol:
//! the tool loop and its bound, retries on 429 and 5xx, timeouts, garbage, and JSON-schema
//! extraction.

use std::time::Duration;

use druse_node::agent::Secret;
use druse_node::agent::llm::{Error, Llm, Message, Tool, ToolCall, Tools, Trace};
use druse_node::agent::metrics::Metrics;
use druse_node::config::AgentLlm;
use druse_tests::llm::{Answer, ScriptedLlm};
use serde_json::json;

fn config(server: &ScriptedLlm) -> AgentLlm {
    AgentLlm {
        base_url: server.base_url(),
        model: "scripted".into(),
        timeout: Duration::from_millis(800),
        max_retries: 2,
        retry_backoff: Duration::from_millis(10),
        ..AgentLlm::default()
    }
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new("reply", "Reply.", json!({"type": "object", "properties": {"uri": {"type": "string"}}})),
        Tool::new("do_nothing", "Nothing.", json!({"type": "object"})),
    ]
}

#[derive(Default)]
struct Recorder {
    calls: Vec<ToolCall>,
}

impl Tools for Recorder {
    async fn call(&mut self, call: &ToolCall) -> String {
        self.calls.push(call.clone());
        format!("ok: did {}", call.function.name)
    }
}

fn reply(uri: &str) -> Answer {
    Answer::Tools(vec![("reply".into(), json!({"uri": uri}))])
}

#[tokio::test]
async fn the_tool_loop_runs_tools_and_sends_their_results_back() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Text("all done".into())).await?;
    server.push([reply("at://a"), Answer::Tools(vec![("do_nothing".into(), json!({}))])]);
    let llm = Llm::new(&config(&server), None, Metrics::default())?;
    let mut recorder = Recorder::default();
    let mut trace = Trace::default();
    let run = llm.run(vec![Message::user("hi")], &tools(), 6, &mut recorder, &mut trace).await?;
    assert_eq!(run.steps, 3);
    // The trace the journal keeps: each call with its arguments and result, the final text,
    // and the tokens of all three answers (the scripted server counts 12 and 5 per answer).
    assert_eq!(trace.steps, 3);
    let traced: Vec<(&str, &str, &str)> =
        trace.calls.iter().map(|c| (c.tool.as_str(), c.arguments.as_str(), c.result.as_str())).collect();
    assert_eq!(traced, [("reply", r#"{"uri":"at://a"}"#, "ok: did reply"), ("do_nothing", "{}", "ok: did do_nothing")]);
    assert_eq!(trace.text.as_deref(), Some("all done"));
    assert_eq!((trace.tokens.prompt_tokens, trace.tokens.completion_tokens), (36, 15));
    assert_eq!(run.calls, ["reply", "do_nothing"]);
    assert_eq!(run.summary.as_deref(), Some("all done"));
    assert!(!run.exhausted);
    assert_eq!(recorder.calls.len(), 2);
    assert_eq!(recorder.calls[0].function.arguments, r#"{"uri":"at://a"}"#);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].has_tools(), "tools are offered");
    assert_eq!(requests[0].body["tools"][0]["function"]["name"], "reply");
    // The second request carries the assistant's call and the tool's answer, by id.
    let second = requests[1].messages();
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["tool_calls"][0]["id"], "call_0");
    assert_eq!(second[2]["role"], "tool");
    assert_eq!(second[2]["tool_call_id"], "call_0");
    assert_eq!(second[2]["content"], "ok: did reply");
    Ok(())
}

#[tokio::test]
async fn the_tool_loop_stops_at_its_step_limit() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| reply("at://again")).await?;
    let llm = Llm::new(&config(&server), None, Metrics::default())?;
    let mut recorder = Recorder::default();
    let run = llm.run(vec![Message::user("loop")], &tools(), 6, &mut recorder, &mut Trace::default()).await?;
    assert!(run.exhausted);
    assert_eq!(run.steps, 6);
    assert_eq!(server.requests().len(), 6, "no seventh call");
    assert_eq!(recorder.calls.len(), 6);
    Ok(())
}

#[tokio::test]
async fn an_unknown_tool_is_not_run_and_the_model_is_told() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Text("ok".into())).await?;
    server.push([Answer::Tools(vec![("rm_rf".into(), json!({}))])]);
    let metrics = Metrics::default();
    let llm = Llm::new(&config(&server), None, metrics.clone())?;
    let mut recorder = Recorder::default();
    llm.run(vec![Message::user("x")], &tools(), 6, &mut recorder, &mut Trace::default()).await?;
    assert!(recorder.calls.is_empty());
    let results = server.requests()[1].tool_results();
    assert!(results[0].contains("no tool named \"rm_rf\""), "{results:?}");
    let label = |label| druse_node::agent::metrics::Label { label };
    assert_eq!(metrics.tool_errors.get_or_create(&label("unknown_tool")).get(), 1);
    assert_eq!(metrics.tool_calls.get_or_create(&label("unknown")).get(), 0, "an error, not a call");
    Ok(())
}

#[tokio::test]
async fn arguments_that_are_no_json_object_run_nothing_and_count_as_errors() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Text("ok".into())).await?;
    server.push([Answer::RawTools(vec![
        ("reply".into(), "{\"uri\": \"cut".into()),
        ("reply".into(), "[\"a list\"]".into()),
        ("reply".into(), "{\"uri\": \"whole\"}".into()),
    ])]);
    let metrics = Metrics::default();
    let llm = Llm::new(&config(&server), None, metrics.clone())?;
    let mut recorder = Recorder::default();
    let mut trace = Trace::default();
    let run = llm.run(vec![Message::user("x")], &tools(), 6, &mut recorder, &mut trace).await?;
    assert_eq!(recorder.calls.len(), 1, "only the whole call ran: {:?}", recorder.calls);
    assert_eq!(trace.calls.len(), 3, "the journal keeps the refused calls too");
    assert!(trace.calls[0].result.contains("bad arguments"), "{:?}", trace.calls);
    assert_eq!((run.errors, run.calls.len()), (2, 1));
    let results = server.requests()[1].tool_results();
    assert!(results[0].contains("bad arguments for reply") && results[1].contains("array"), "{results:?}");
    let label = |label| druse_node::agent::metrics::Label { label };
    assert_eq!(metrics.tool_errors.get_or_create(&label("bad_arguments")).get(), 2);
    assert_eq!(metrics.tool_calls.get_or_create(&label("reply")).get(), 1);
    Ok(())
}

/// Qwen2.5-Coder-1.5B's answer to a mention under llama-server: the call as fenced JSON in
/// the text, with no `tool_calls`.
const QWEN_FENCED: &str =
    "```json\n{\"name\": \"reply\", \"arguments\": {\"uri\": \"at://a\", \"text\": \"hi!\"}}\n```";

#[tokio::test]
async fn a_call_written_in_the_text_runs_and_its_result_goes_back_as_a_user_turn() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Text("all done".into())).await?;
    server.push([
        Answer::Text(QWEN_FENCED.into()),
        Answer::Text("<tool_call>\n{\"name\": \"do_nothing\", \"arguments\": {}}\n</tool_call>".into()),
    ]);
    let metrics = Metrics::default();
    let llm = Llm::new(&config(&server), None, metrics.clone())?;
    let mut recorder = Recorder::default();
    let mut trace = Trace::default();
    let run = llm.run(vec![Message::user("hi")], &tools(), 6, &mut recorder, &mut trace).await?;
    assert_eq!(run.calls, ["reply", "do_nothing"]);
    assert_eq!(run.summary.as_deref(), Some("all done"));
    assert_eq!(recorder.calls[0].function.arguments, r#"{"text":"hi!","uri":"at://a"}"#);
    assert_eq!(trace.calls[0].result, "ok: did reply");
    // The next request is one any chat template takes: the assistant's text as written, then
    // the results in a user turn, and no tool message with an id the model never gave.
    let second = server.requests()[1].messages();
    assert_eq!(second.len(), 3, "{second:?}");
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["content"], QWEN_FENCED);
    assert!(second[1].get("tool_calls").is_none(), "{:?}", second[1]);
    assert_eq!(second[2]["role"], "user");
    let results = second[2]["content"].as_str().unwrap_or_default();
    assert!(results.starts_with("[TOOL RESULTS]") && results.contains("- reply: ok: did reply"), "{results}");
    assert!(second.iter().all(|m| m["role"] != "tool"));
    let label = |label| druse_node::agent::metrics::Label { label };
    assert_eq!(metrics.tool_call_format.get_or_create(&label("content_json")).get(), 1);
    assert_eq!(metrics.tool_call_format.get_or_create(&label("tagged")).get(), 1);
    assert_eq!(metrics.tool_call_format.get_or_create(&label("native")).get(), 0);
    assert_eq!(metrics.tool_calls.get_or_create(&label("reply")).get(), 1);
    assert_eq!(metrics.tool_call_format.get_or_create(&label("prose")).get(), 0, "the run made calls");
    Ok(())
}

#[tokio::test]
async fn a_call_in_the_text_with_bad_arguments_is_refused_and_prose_alone_is_silence() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Text("I would rather not answer.".into())).await?;
    server.push([Answer::Text(r#"{"name": "reply", "arguments": "uri=at://a"}"#.into())]);
    let metrics = Metrics::default();
    let llm = Llm::new(&config(&server), None, metrics.clone())?;
    let mut recorder = Recorder::default();
    let run = llm.run(vec![Message::user("x")], &tools(), 6, &mut recorder, &mut Trace::default()).await?;
    assert!(recorder.calls.is_empty());
    assert_eq!(run.errors, 1);
    let told = server.requests()[1].messages().last().and_then(|m| m["content"].as_str().map(str::to_owned));
    assert!(told.is_some_and(|t| t.contains("bad arguments for reply")));
    let label = |label| druse_node::agent::metrics::Label { label };
    assert_eq!(metrics.tool_errors.get_or_create(&label("bad_arguments")).get(), 1);
    assert_eq!(metrics.tool_call_format.get_or_create(&label("prose")).get(), 0, "it tried a call");

    // Prose naming a tool, or JSON that is no call of a tool offered, is no call: silence.
    let run = llm.run(vec![Message::user("y")], &tools(), 6, &mut recorder, &mut Trace::default()).await?;
    assert!(run.calls.is_empty() && recorder.calls.is_empty());
    assert_eq!(run.summary.as_deref(), Some("I would rather not answer."));
    assert_eq!(metrics.tool_call_format.get_or_create(&label("prose")).get(), 1);
    server.push([Answer::Text("```json\n{\"name\": \"send_email\", \"arguments\": {\"to\": \"x\"}}\n```".into())]);
    let run = llm.run(vec![Message::user("z")], &tools(), 6, &mut recorder, &mut Trace::default()).await?;
    assert!(run.calls.is_empty() && recorder.calls.is_empty() && run.steps == 1);
    assert_eq!(metrics.tool_call_format.get_or_create(&label("prose")).get(), 2);
    Ok(())
}

#[tokio::test]
async fn a_429_and_a_500_are_retried_with_backoff() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Text("fine".into())).await?;
    server.push([Answer::TooMany(0), Answer::Status(503, "overloaded".into())]);
    let metrics = Metrics::default();
    let llm = Llm::new(&config(&server), None, metrics.clone())?;
    let answer = llm.chat(&[Message::user("x")], &[], None).await?;
    assert_eq!(answer.content.as_deref(), Some("fine"));
    assert_eq!(server.requests().len(), 3);
    let label = |l| druse_node::agent::metrics::Label { label: l };
    assert_eq!(metrics.llm_calls.get_or_create(&label("retryable")).get(), 2);
    assert_eq!(metrics.llm_calls.get_or_create(&label("ok")).get(), 1);
    assert_eq!(metrics.llm_tokens.get_or_create(&label("prompt")).get(), 12, "usage is counted");
    Ok(())
}

#[tokio::test]
async fn retries_end_and_the_error_says_why() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Status(500, "model crashed".into())).await?;
    let llm = Llm::new(&config(&server), None, Metrics::default())?;
    let err = llm.chat(&[Message::user("x")], &[], None).await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 500, .. }), "{err}");
    assert!(err.to_string().contains("model crashed"), "{err}");
    assert_eq!(server.requests().len(), 3, "one call and max_retries = 2 retries");
    Ok(())
}

#[tokio::test]
async fn a_client_error_is_not_retried() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Status(400, "bad model".into())).await?;
    let llm = Llm::new(&config(&server), None, Metrics::default())?;
    let err = llm.chat(&[Message::user("x")], &[], None).await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 400, .. }), "{err}");
    assert_eq!(server.requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn a_slow_answer_times_out() -> anyhow::Result<()> {
    let server =
        ScriptedLlm::start(|_| Answer::Slow(Duration::from_secs(3), Box::new(Answer::Text("late".into())))).await?;
    let llm = Llm::new(&AgentLlm { max_retries: 0, ..config(&server) }, None, Metrics::default())?;
    let started = std::time::Instant::now();
    let err = llm.chat(&[Message::user("x")], &[], None).await.unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3), "the client gave up at its timeout");
    Ok(())
}

#[tokio::test]
async fn garbage_is_an_error_not_a_panic() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Garbage("<html>proxy error</html>".into())).await?;
    let llm = Llm::new(&config(&server), None, Metrics::default())?;
    let err = llm.chat(&[Message::user("x")], &[], None).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    assert_eq!(server.requests().len(), 1, "garbage is not retried");
    Ok(())
}

#[tokio::test]
async fn extraction_asks_for_a_json_schema_and_parses_the_answer() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|r| {
        if r.is_extraction() {
            Answer::Text("```json\n{\"color\": \"green\"}\n```".into())
        } else {
            Answer::Text("?".into())
        }
    })
    .await?;
    let llm = Llm::new(&config(&server), None, Metrics::default())?;
    let schema = json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]});
    let out: serde_json::Value = llm.extract(&[Message::user("I love green")], "color", schema.clone()).await?;
    assert_eq!(out["color"], "green");
    let request = &server.requests()[0];
    assert_eq!(request.body["response_format"]["type"], "json_schema");
    assert_eq!(request.body["response_format"]["json_schema"]["schema"], schema);
    server.push([Answer::Text("I think it is green".into())]);
    let err =
        llm.extract::<serde_json::Value>(&[Message::user("x")], "color", schema).await.expect_err("prose is refused");
    assert!(matches!(err, Error::Schema { .. }), "{err}");
    Ok(())
}

#[tokio::test]
async fn the_key_is_sent_as_a_bearer_and_never_printed() -> anyhow::Result<()> {
    let server = ScriptedLlm::start(|_| Answer::Text("ok".into())).await?;
    let llm = Llm::new(&config(&server), Some(Secret::new("sk-very-secret".into())), Metrics::default())?;
    llm.chat(&[Message::user("x")], &[], None).await?;
    assert_eq!(server.requests()[0].authorization.as_deref(), Some("Bearer sk-very-secret"));
    assert!(!format!("{llm:?}").contains("sk-very-secret"));
    let unreachable = AgentLlm { base_url: "http://127.0.0.1:9/v1".into(), max_retries: 0, ..config(&server) };
    let err = Llm::new(&unreachable, Some(Secret::new("sk-very-secret".into())), Metrics::default())?
        .chat(&[Message::user("x")], &[], None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transport(_)), "{err}");
    assert!(!err.to_string().contains("sk-very-secret"));
    Ok(())
}

// The LLM reconciler (seed 000): ADD, UPDATE, DELETE or NOOP against the top similar
// memories of a real memory engine, with the rule-based reconciler as the fallback.

mod reconciler {
    use std::sync::Arc;

    use druse_memory::Memory;
    use druse_memory::correction::Decision;
    use druse_memory::crystal::{Crystal, MemoryKind, Namespace, Status};
    use druse_memory::embed::Hashing;
    use druse_memory::engine::{Config, NewMemory};
    use druse_node::agent::metrics::Metrics;
    use druse_node::agent::reconcile::{self, By};
    use druse_tests::llm::{Answer, Request, ScriptedLlm};
    use serde_json::json;

    use super::config;
    use druse_node::agent::llm::Llm;

    struct Engine {
        memory: druse_memory::Handle,
        _dir: tempfile::TempDir,
    }

    fn engine() -> anyhow::Result<Engine> {
        let dir = tempfile::tempdir()?;
        let db = druse_node::store::open_database(&dir.path().join("db"), 64 << 20)?;
        let now = druse_protocol::now_ms();
        let memory = Memory::open(&db, &dir.path().join("index"), Config::default(), Arc::new(Hashing::new(384)), now)?;
        Ok(Engine { memory: druse_memory::Handle::new(memory, "test-bg")?, _dir: dir })
    }

    fn observation(text: &str, attribute: &str) -> NewMemory {
        NewMemory {
            namespace: Namespace::User("alice.test".into()),
            kind: MemoryKind::Observation,
            subject: Some("user".into()),
            attribute: Some(attribute.into()),
            ..NewMemory::text(text)
        }
    }

    /// A model that answers every reconciliation with `decide(ids listed)`.
    async fn model(
        decide: impl Fn(&[u64]) -> serde_json::Value + Send + Sync + 'static,
    ) -> anyhow::Result<ScriptedLlm> {
        ScriptedLlm::start(move |r: &Request| {
            let ids: Vec<u64> = r
                .text()
                .lines()
                .filter_map(|l| l.trim().strip_prefix("- id ")?.split([' ', ':']).next()?.parse().ok())
                .collect();
            Answer::Text(decide(&ids).to_string())
        })
        .await
    }

    async fn store(engine: &Engine, llm: &ScriptedLlm, new: NewMemory) -> anyhow::Result<(Crystal, Decision, By)> {
        let client = Llm::new(&config(llm), None, Metrics::default())?;
        let (added, by) = reconcile::store(&engine.memory, &client, &Metrics::default(), new, "test")
            .await
            .map_err(anyhow::Error::msg)?;
        Ok((added.crystal, added.decision, by))
    }

    /// How many crystals the engine holds, whatever their status.
    fn stored(engine: &Engine) -> usize {
        engine.memory.engine().counts().values().sum()
    }

    fn seed(engine: &Engine) -> anyhow::Result<Crystal> {
        Ok(engine
            .memory
            .engine()
            .add(observation("Lives in Lisbon", "city"), "test", druse_protocol::now_ms())?
            .crystal)
    }

    #[tokio::test]
    async fn update_supersedes_the_target_and_keeps_it_in_the_history() -> anyhow::Result<()> {
        let engine = engine()?;
        let old = seed(&engine)?;
        let llm = model(|ids| json!({"action": "update", "target": ids[0], "reason": "moved"})).await?;
        let (new, decision, by) = store(&engine, &llm, observation("Lives in Porto", "city")).await?;
        assert_eq!(by, By::Llm);
        assert_eq!(decision, Decision::Update { target: old.id, confidence: 0.7 });
        let history = engine.memory.engine().history(new.id)?;
        let chain: Vec<&str> = history.chain.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(chain, ["Lives in Lisbon", "Lives in Porto"]);
        assert_eq!(history.chain[0].status, Status::Superseded);
        // The model saw the stored observation, and answered in the JSON schema asked for.
        let asked = llm.requests();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].body["response_format"]["json_schema"]["name"], "reconciliation");
        assert!(asked[0].text().contains(&format!("- id {} (user / city)", old.id)), "{}", asked[0].text());
        Ok(())
    }

    #[tokio::test]
    async fn a_correction_updates_at_full_confidence() -> anyhow::Result<()> {
        let engine = engine()?;
        let old = seed(&engine)?;
        let llm = model(|ids| json!({"action": "update", "target": ids[0], "reason": "corrected"})).await?;
        let new = NewMemory { correction: true, ..observation("Lives in Porto", "city") };
        let (crystal, decision, _) = store(&engine, &llm, new).await?;
        assert_eq!(decision, Decision::Update { target: old.id, confidence: 1.0 });
        assert_eq!(crystal.confidence, 1.0);
        assert!(llm.requests()[0].text().contains("corrects what they said before"));
        Ok(())
    }

    #[tokio::test]
    async fn delete_archives_the_target_and_stores_nothing_new() -> anyhow::Result<()> {
        let engine = engine()?;
        let old = seed(&engine)?;
        let llm = model(|ids| json!({"action": "delete", "target": ids[0], "reason": "no longer true"})).await?;
        let (_, decision, by) = store(&engine, &llm, observation("No longer lives in Lisbon", "city")).await?;
        assert_eq!((decision, by), (Decision::Delete { target: old.id }, By::Llm));
        let kept = engine.memory.engine().get(old.id).expect("nothing is hard-deleted");
        assert_eq!(kept.status, Status::Superseded);
        let history = engine.memory.engine().history(old.id)?;
        assert!(history.audit.iter().any(|a| a.to == "superseded" && a.why.contains("retracted")), "{history:?}");
        assert_eq!(stored(&engine), 1, "no new row was stored");
        Ok(())
    }

    #[tokio::test]
    async fn noop_reinforces_the_target_and_add_stores_a_new_row() -> anyhow::Result<()> {
        let engine = engine()?;
        let old = seed(&engine)?;
        let llm = model(|ids| json!({"action": "noop", "target": ids[0], "reason": "same"})).await?;
        let (crystal, decision, _) = store(&engine, &llm, observation("Lives in Lisbon, Portugal", "home")).await?;
        assert_eq!(decision, Decision::Noop { target: old.id });
        assert_eq!(crystal.id, old.id, "the stored one is reinforced, nothing new is written");
        assert_eq!(stored(&engine), 1);

        let llm = model(|_| json!({"action": "add", "target": null, "reason": "new"})).await?;
        let (crystal, decision, by) = store(&engine, &llm, observation("Lives near the river", "street")).await?;
        assert_eq!((decision, by), (Decision::Add, By::Llm));
        assert_ne!(crystal.id, old.id);
        assert_eq!(engine.memory.engine().get(old.id).map(|c| c.status), Some(Status::Active));
        Ok(())
    }

    #[tokio::test]
    async fn the_rules_decide_when_the_model_is_down_or_answers_no_valid_decision() -> anyhow::Result<()> {
        // Garbage, a decision on no listed candidate, and an unknown action: the rules decide
        // (same subject and attribute, a new value: UPDATE at 0.7).
        for answer in [
            json!("not a decision").to_string(),
            json!({"action": "delete", "target": 999_999, "reason": "x"}).to_string(),
            json!({"action": "merge", "target": null, "reason": "x"}).to_string(),
        ] {
            let engine = engine()?;
            let old = seed(&engine)?;
            let text = answer.clone();
            let llm = ScriptedLlm::start(move |_| Answer::Text(text.clone())).await?;
            let (_, decision, by) = store(&engine, &llm, observation("Lives in Porto", "city")).await?;
            assert_eq!(by, By::Rules, "{answer}");
            assert_eq!(decision, Decision::Update { target: old.id, confidence: 0.7 }, "{answer}");
        }
        // A model that is down.
        let engine = engine()?;
        let old = seed(&engine)?;
        let llm = ScriptedLlm::start(|_| Answer::Status(503, "down".into())).await?;
        let (_, decision, by) = store(&engine, &llm, observation("Lives in Porto", "city")).await?;
        assert_eq!((decision, by), (Decision::Update { target: old.id, confidence: 0.7 }, By::Rules));
        Ok(())
    }

    #[tokio::test]
    async fn with_nothing_similar_stored_the_model_is_not_asked() -> anyhow::Result<()> {
        let engine = engine()?;
        let llm = model(|_| json!({"action": "noop", "target": 1, "reason": "x"})).await?;
        let (_, decision, by) = store(&engine, &llm, observation("Lives in Lisbon", "city")).await?;
        assert_eq!((decision, by), (Decision::Add, By::Llm));
        assert!(llm.requests().is_empty());
        Ok(())
    }
}
