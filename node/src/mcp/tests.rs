//! Argument validation of the MCP tools: every refusal names the argument at fault, and what
//! passes becomes the API request the HTTP API documents.

use serde_json::{Map, Value, json};

use super::*;

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn search(value: Value) -> Result<Request, Invalid> {
    parse::<SearchArgs>(args(value))?.request()
}

fn add(value: Value) -> Result<Request, Invalid> {
    parse::<AddArgs>(args(value))?.request()
}

fn report(value: Value) -> Result<Request, Invalid> {
    parse::<ReportArgs>(args(value))?.request()
}

fn field(result: Result<Request, Invalid>) -> String {
    let invalid = result.expect_err("the arguments were accepted");
    invalid.field.unwrap_or_else(|| panic!("the refusal names no argument: {}", invalid.detail))
}

/// A content id of real bytes (a skill's id has this form).
fn cid() -> String {
    druse_protocol::ContentId::of(b"a skill listing").to_string()
}

#[test]
fn a_search_becomes_the_api_query_with_every_filter_encoded() {
    let request = search(json!({
        "query": "when is the surgery?", "k": 3, "namespace": "user:sam", "kind": "observation",
        "semantic_type": "fact", "session": "s 1", "since": "2023-05-01", "until": 1_700_000_000_000u64,
    }))
    .unwrap();
    assert_eq!(
        request,
        Request::Get(
            "/v1/memories?q=when%20is%20the%20surgery%3F&k=3&namespace=user:sam&kind=observation\
             &semantic_type=fact&session=s%201&since=1682899200000&until=1700000000000"
                .into()
        )
    );
    assert_eq!(
        search(json!({"query": "x"})).unwrap(),
        Request::Get("/v1/memories?q=x&k=10".into()),
        "k defaults to 10"
    );
}

#[test]
fn an_empty_query_is_refused_naming_query() {
    assert_eq!(field(search(json!({"query": "  "}))), "query");
    let detail = search(json!({"query": ""})).expect_err("an empty query").detail;
    assert!(
        detail.starts_with("query ") && !detail.contains(" q "),
        "the sentence names the tool's argument: {detail}"
    );
    assert_eq!(field(search(json!({}))), "query", "a missing query");
    assert_eq!(field(search(json!({"query": 5}))), "query", "a query that is not text");
}

#[test]
fn a_renamed_word_is_only_the_whole_word() {
    assert_eq!(
        crate::mcp::tools::rename_word("q must not be empty; q2 and sq stay", "q", "query"),
        "query must not be empty; q2 and sq stay"
    );
}

#[test]
fn k_outside_one_to_a_hundred_is_refused_naming_k() {
    for k in [json!(0), json!(101), json!(-1), json!("five"), json!(2.5)] {
        assert_eq!(field(search(json!({"query": "x", "k": k}))), "k", "k = {k}");
    }
    assert!(search(json!({"query": "x", "k": 100})).is_ok());
}

#[test]
fn search_filters_the_engine_cannot_read_are_refused_by_name() {
    assert_eq!(field(search(json!({"query": "x", "namespace": "people"}))), "namespace");
    assert_eq!(field(search(json!({"query": "x", "kind": "rumour"}))), "kind");
    assert_eq!(field(search(json!({"query": "x", "semantic_type": "gossip"}))), "semantic_type");
    assert_eq!(field(search(json!({"query": "x", "since": "last tuesday"}))), "since");
    assert_eq!(field(search(json!({"query": "x", "since": "2024-01-02", "until": "2024-01-01"}))), "since");
    assert_eq!(field(search(json!({"query": "x", "top": 3}))), "top", "an unknown argument is named");
}

#[test]
fn a_memory_becomes_the_engines_new_memory() {
    let request = add(json!({
        "text": "Dad's surgery is March 15", "namespace": "user:sam", "subject": "dad",
        "turn_at": "2023-05-08T13:56:00Z", "metadata": {"channel": "sms"},
    }))
    .unwrap();
    let Request::Post(path, body) = request else { panic!("not a POST") };
    assert_eq!(path, "/v1/memories");
    assert_eq!(body["text"], "Dad's surgery is March 15");
    assert_eq!(body["namespace"], "user:sam");
    assert_eq!(body["kind"], "observation", "defaults are the engine's");
    assert_eq!(body["scope"], "private");
    assert_eq!(body["turn_at"], 1_683_554_160_000u64, "dates are read as the API reads them");
    assert_eq!(body["metadata"]["channel"], "sms");
}

#[test]
fn a_memory_the_engine_would_refuse_is_refused_naming_the_argument() {
    assert_eq!(field(add(json!({}))), "text");
    assert_eq!(field(add(json!({"text": " "}))), "text");
    assert_eq!(field(add(json!({"text": "x".repeat(16 * 1024 + 1)}))), "text");
    assert_eq!(field(add(json!({"text": "x", "namespace": "user:"}))), "namespace");
    assert_eq!(field(add(json!({"text": "x", "kind": "gossip"}))), "kind");
    assert_eq!(field(add(json!({"text": "x", "scope": "everyone"}))), "scope");
    assert_eq!(field(add(json!({"text": "x", "decay_class": "forever"}))), "decay_class");
    assert_eq!(field(add(json!({"text": "x", "emotional_weight": 2.0}))), "emotional_weight");
    assert_eq!(field(add(json!({"text": "x", "lifespan": "ttl"}))), "lifespan");
    assert_eq!(field(add(json!({"text": "x", "session": ""}))), "session");
    assert_eq!(field(add(json!({"text": "x", "external_id": "e".repeat(257)}))), "external_id");
    assert_eq!(field(add(json!({"text": "x", "metadata": "sms"}))), "metadata");
    assert_eq!(field(add(json!({"text": "x", "turn_at": "soon"}))), "turn_at");
    assert_eq!(field(add(json!({"text": "x", "supersedes": 3}))), "supersedes");
}

#[test]
fn crystal_ids_are_numbers_or_content_ids() {
    let get = |value: Value| parse::<GetArgs>(args(value))?.get();
    let history = |value: Value| parse::<GetArgs>(args(value))?.history();
    assert_eq!(get(json!({"id": 7})).unwrap(), Request::Get("/v1/crystals/7".into()));
    assert_eq!(get(json!({"id": "7"})).unwrap(), Request::Get("/v1/crystals/7".into()));
    assert_eq!(get(json!({"id": cid()})).unwrap(), Request::Get(format!("/v1/crystals/{}", cid())));
    assert_eq!(history(json!({"id": 7})).unwrap(), Request::Get("/v1/crystals/7/history".into()));
    assert_eq!(field(get(json!({"id": "../status"}))), "id");
    assert_eq!(field(get(json!({"id": -3}))), "id");
    assert_eq!(field(get(json!({}))), "id");
    assert_eq!(field(history(json!({"id": cid()}))), "id", "a skill has no supersession history");
}

#[test]
fn a_report_is_the_apis_report_and_a_reward_outside_its_range_is_refused() {
    let Request::Post(path, body) = report(json!({"id": cid(), "success": true, "reward": 0.5})).unwrap() else {
        panic!("not a POST")
    };
    assert_eq!(path, format!("/v1/skills/{}/reports", cid()));
    assert_eq!(body, json!({"success": true, "reward": 0.5, "claim": null}));
    assert_eq!(field(report(json!({"id": cid(), "success": true, "reward": 3}))), "reward");
    assert_eq!(field(report(json!({"id": cid(), "success": true, "reward": -1.5}))), "reward");
    assert_eq!(field(report(json!({"id": cid()}))), "success");
    assert_eq!(field(report(json!({"id": "not-a-cid", "success": true}))), "id");
}

fn listing(name: &str, text: &str, tags: &[&str], verified: bool) -> Value {
    json!({"id": name, "is_verified": verified, "listing": {"name": name, "text": text, "tags": tags, "skill_id": name}})
}

fn names(skills: &[Value]) -> Vec<&str> {
    skills.iter().map(|s| s["id"].as_str().unwrap()).collect()
}

#[test]
fn skill_search_keeps_matching_skills_most_matched_first_then_newest() {
    let market = vec![
        listing("csv-parse", "Parse CSV files", &["data"], false),
        listing("http-retry", "Retry failed HTTP calls with backoff", &["net"], true),
        listing("dns-cache", "Cache DNS answers", &["net"], false),
    ];
    let search = |value: Value| parse::<SkillSearchArgs>(args(value)).unwrap();
    assert_eq!(names(&search(json!({"query": "net"})).select(market.clone())), ["http-retry", "dns-cache"]);
    assert_eq!(
        names(&search(json!({"query": "NET retry"})).select(market.clone())),
        ["http-retry", "dns-cache"],
        "two words beat one, case aside"
    );
    assert_eq!(names(&search(json!({"query": "net", "verified_only": true})).select(market.clone())), ["http-retry"]);
    assert_eq!(names(&search(json!({"limit": 2})).select(market.clone())), ["csv-parse", "http-retry"]);
    assert!(search(json!({"query": "quantum"})).select(market).is_empty());
}

#[test]
fn skill_search_bounds_are_refused_by_name() {
    let search = |value: Value| parse::<SkillSearchArgs>(args(value))?.request();
    assert_eq!(field(search(json!({"limit": 0}))), "limit");
    assert_eq!(field(search(json!({"limit": 101}))), "limit");
    assert_eq!(field(search(json!({"query": "q".repeat(MAX_SKILL_QUERY + 1)}))), "query");
    assert_eq!(field(search(json!({"verified_only": "yes"}))), "verified_only");
}

#[test]
fn every_tool_has_an_object_schema_with_described_properties() {
    let tools = crate::mcp::tool_list();
    assert_eq!(tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>(), crate::mcp::TOOLS);
    for tool in tools {
        let schema = &tool.input_schema;
        assert_eq!(schema["type"], "object", "{}: {schema:?}", tool.name);
        let properties = schema["properties"].as_object().unwrap_or_else(|| panic!("{}: no properties", tool.name));
        assert!(!properties.is_empty(), "{}", tool.name);
        for (name, property) in properties {
            assert!(
                property["description"].as_str().is_some_and(|d| d.len() > 10),
                "{}.{name} has no description: {property}",
                tool.name
            );
        }
        assert!(tool.description.as_deref().is_some_and(|d| d.len() > 80), "{}", tool.name);
    }
}

#[test]
fn the_search_schema_states_the_bounds_of_k() {
    let tool = crate::mcp::tool_list().into_iter().find(|t| t.name == "memory_search").unwrap();
    let k = &tool.input_schema["properties"]["k"];
    assert_eq!(k["minimum"], 1, "{k}");
    assert_eq!(k["maximum"], 100, "{k}");
    assert_eq!(tool.input_schema["required"], json!(["query"]));
}
