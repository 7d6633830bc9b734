//! The agent's language model: any OpenAI-compatible `/v1/chat/completions` server, with
//! tool calling, a bounded tool loop, timeouts, retries with backoff on 429 and 5xx, and
//! JSON-schema answers for extraction.

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::metrics::Metrics;
use super::secret::Secret;
use super::spend::Spend;
use super::toolcall::{self, Format};
use crate::config::AgentLlm;

/// The largest answer body read from the server.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// The longest wait a `Retry-After` header may ask for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A tool result longer than this is cut before it goes back to the model.
const MAX_TOOL_RESULT: usize = 8 * 1024;

/// Why the model gave no usable answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("the LLM server could not be reached: {0}")]
    Transport(String),
    #[error("the LLM server took longer than {0:?} to answer")]
    Timeout(Duration),
    #[error("the LLM server answered {status}: {detail}")]
    Status { status: u16, detail: String },
    #[error("the LLM server's answer is not a chat completion: {0}")]
    Invalid(String),
    #[error("the model's answer does not match the schema {schema}: {detail}")]
    Schema { schema: String, detail: String },
    #[error("the run passed its deadline of {0:?} (agent.batch_deadline)")]
    Deadline(Duration),
    #[error(transparent)]
    SpendCap(#[from] super::spend::Capped),
    #[error(transparent)]
    Budget(#[from] super::spend::OverBudget),
}

impl Error {
    /// Worth asking again: a transport failure, a timeout, 429 or a 5xx.
    fn retryable(&self) -> bool {
        match self {
            Error::Transport(_) | Error::Timeout(_) => true,
            Error::Status { status, .. } => *status == 429 || *status >= 500,
            Error::Invalid(_) | Error::Schema { .. } | Error::Deadline(_) | Error::SpendCap(_) | Error::Budget(_) => {
                false
            }
        }
    }
}

/// One chat message, in the wire form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "null_as_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ToolCall>, D::Error> {
    Ok(Option::<Vec<ToolCall>>::deserialize(d)?.unwrap_or_default())
}

impl Message {
    pub fn system(text: impl Into<String>) -> Self {
        Self { role: "system".into(), content: Some(text.into()), ..Self::default() }
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self { role: "user".into(), content: Some(text.into()), ..Self::default() }
    }
    fn tool(id: &str, text: String) -> Self {
        Self { role: "tool".into(), content: Some(text), tool_call_id: Some(id.to_owned()), ..Self::default() }
    }
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function() -> String {
    "function".into()
}

/// The function a tool call names, with its arguments as the model wrote them (JSON text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, Serialize)]
pub struct Tool {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ToolFunction,
}

#[derive(Debug, Clone, Serialize)]
struct ToolFunction {
    name: &'static str,
    description: &'static str,
    parameters: Value,
}

impl Tool {
    pub fn new(name: &'static str, description: &'static str, parameters: Value) -> Self {
        Self { kind: "function", function: ToolFunction { name, description, parameters } }
    }
    pub fn name(&self) -> &'static str {
        self.function.name
    }
}

/// Tokens one answer used, as the server counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

#[derive(Debug, Deserialize)]
struct Completion {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: Message,
}

/// What a tool handler gives back for one call: the text the model sees.
pub trait Tools {
    /// Runs one call; whatever it returns (a result or a refusal) goes back to the model.
    fn call(&mut self, call: &ToolCall) -> impl std::future::Future<Output = String> + Send;
}

/// How a tool loop ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The model's last words (a summary for the log), if it stopped by itself.
    pub summary: Option<String>,
    /// Round trips made.
    pub steps: usize,
    /// The names of the tools called, in order.
    pub calls: Vec<String>,
    /// The step limit was reached while the model still wanted to call tools.
    pub exhausted: bool,
    /// Tool calls refused before any tool ran: an unknown tool, or arguments that are no
    /// JSON object.
    pub errors: usize,
}

/// One tool call of a run, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTrace {
    pub tool: String,
    pub arguments: String,
    /// What went back to the model: the tool's result, or why the call was refused.
    pub result: String,
}

/// What a tool loop did, filled as it goes, so a run cut off by its deadline still shows how
/// far it got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub steps: usize,
    pub calls: Vec<CallTrace>,
    /// The model's last words, when it stopped by itself.
    pub text: Option<String>,
    /// Tokens over every answer of the run.
    pub tokens: Usage,
}

/// A client of one OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct Llm {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<Secret>,
    max_tokens: u32,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
    metrics: Metrics,
    /// What the answers cost, and the daily cap.
    spend: std::sync::Arc<Spend>,
}

impl Llm {
    /// A client for `config`, with the key read from the environment variable it names.
    pub fn new(config: &AgentLlm, key: Option<Secret>, metrics: Metrics) -> Result<Self, Error> {
        let spend = std::sync::Arc::new(Spend::new(config, metrics.clone(), None));
        Self::with_spend(config, key, metrics, spend)
    }

    /// A client that counts what it spends in `spend`.
    pub(crate) fn with_spend(
        config: &AgentLlm,
        key: Option<Secret>,
        metrics: Metrics,
        spend: std::sync::Arc<Spend>,
    ) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| Error::Transport(e.to_string()))?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            model: config.model.clone(),
            key,
            max_tokens: config.max_tokens,
            timeout: config.timeout,
            retries: config.max_retries,
            backoff: config.retry_backoff,
            metrics,
            spend,
        })
    }

    /// What the answers cost today, and the cap.
    pub(crate) fn spend(&self) -> &Spend {
        &self.spend
    }

    /// One completion, retried on 429, 5xx, timeouts and transport errors with exponential
    /// backoff (a `Retry-After` header wins, up to a minute).
    pub async fn chat(&self, messages: &[Message], tools: &[Tool], format: Option<&Value>) -> Result<Message, Error> {
        self.chat_counted(messages, tools, format, &mut Usage::default()).await
    }

    /// [`Llm::chat`], adding the tokens the answer used to `used` (estimated when the server
    /// reports none). Refused while today's spend is over the daily cap, or today's tokens over
    /// the budget or the paying stranger's share.
    async fn chat_counted(
        &self,
        messages: &[Message],
        tools: &[Tool],
        format: Option<&Value>,
        used: &mut Usage,
    ) -> Result<Message, Error> {
        self.spend.check()?;
        self.spend.check_tokens()?;
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
        });
        if !tools.is_empty() {
            body["tools"] = json!(tools);
        }
        if let Some(format) = format {
            body["response_format"] = format.clone();
        }
        let mut attempt = 0;
        loop {
            let started = Instant::now();
            let result = self.once(&body).await;
            let outcome = match &result {
                Ok(_) => "ok",
                Err((e, _)) if e.retryable() => "retryable",
                Err(_) => "error",
            };
            self.metrics.llm_call(outcome, started.elapsed());
            match result {
                Ok((message, usage)) => {
                    let usage = usage.unwrap_or_else(|| estimate(&body, &message));
                    self.spend.add_tokens(usage.prompt_tokens.saturating_add(usage.completion_tokens));
                    self.metrics.llm_tokens(usage.prompt_tokens, usage.completion_tokens);
                    used.prompt_tokens += usage.prompt_tokens;
                    used.completion_tokens += usage.completion_tokens;
                    self.spend.add(usage.prompt_tokens, usage.completion_tokens).await;
                    return Ok(message);
                }
                Err((error, retry_after)) if error.retryable() && attempt < self.retries => {
                    let wait = retry_after.unwrap_or(self.backoff * 2u32.saturating_pow(attempt)).min(MAX_RETRY_AFTER);
                    tracing::warn!(%error, attempt = attempt + 1, wait_ms = wait.as_millis() as u64, "LLM call failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err((error, _)) => return Err(error),
            }
        }
    }

    async fn once(&self, body: &Value) -> Result<(Message, Option<Usage>), (Error, Option<Duration>)> {
        let mut request = self.http.post(&self.url).json(body).timeout(self.timeout);
        if let Some(key) = &self.key {
            request = request.bearer_auth(key.expose());
        }
        let response = request.send().await.map_err(|e| (self.transport(e), None))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = read_capped(response).await.map_err(|e| (self.transport(e), None))?;
        if !status.is_success() {
            let detail = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            return Err((Error::Status { status: status.as_u16(), detail }, retry_after));
        }
        let completion: Completion =
            serde_json::from_slice(&bytes).map_err(|e| (Error::Invalid(e.to_string()), None))?;
        let usage = completion.usage;
        let message = completion
            .choices
            .into_iter()
            .next()
            .map(|c| c.message)
            .ok_or_else(|| (Error::Invalid("no choices".into()), None))?;
        Ok((message, usage))
    }

    fn transport(&self, error: reqwest::Error) -> Error {
        if error.is_timeout() { Error::Timeout(self.timeout) } else { Error::Transport(without_url(&error)) }
    }

    /// Asks for an answer that follows `schema` (a JSON-schema `response_format`) and parses
    /// it. A model that wraps the JSON in prose or a code fence is read past it.
    pub async fn extract<T: DeserializeOwned>(
        &self,
        messages: &[Message],
        name: &str,
        schema: Value,
    ) -> Result<T, Error> {
        let text = self.extract_counted(messages, name, schema, &mut Usage::default()).await?;
        parse_json(&text).map_err(|e| Error::Schema { schema: name.to_owned(), detail: e.to_string() })
    }

    /// The text of an answer that should follow `schema`, adding the tokens it used to `used`.
    pub(crate) async fn extract_counted(
        &self,
        messages: &[Message],
        name: &str,
        schema: Value,
        used: &mut Usage,
    ) -> Result<String, Error> {
        let format = json!({
            "type": "json_schema",
            "json_schema": { "name": name, "strict": true, "schema": schema },
        });
        let message = self.chat_counted(messages, &[], Some(&format), used).await?;
        Ok(message.content.unwrap_or_default())
    }

    /// The tool loop: asks, runs the tools the model calls, gives their results back, and
    /// asks again, at most `max_steps` times. Calls come from `tool_calls` or, when the
    /// server gives none, from the answer's text ([`toolcall`]); they are counted by name and
    /// by form, and `trace` records each step as it happens.
    pub async fn run<T: Tools + Send>(
        &self,
        mut messages: Vec<Message>,
        tools: &[Tool],
        max_steps: usize,
        handler: &mut T,
        trace: &mut Trace,
    ) -> Result<Finished, Error> {
        let mut run = Finished { summary: None, steps: 0, calls: Vec::new(), exhausted: false, errors: 0 };
        while run.steps < max_steps {
            run.steps += 1;
            trace.steps = run.steps;
            let answer = self.chat_counted(&messages, tools, None, &mut trace.tokens).await?;
            let (format, calls) = if answer.tool_calls.is_empty() {
                let known: Vec<&str> = tools.iter().map(Tool::name).collect();
                match answer.content.as_deref().and_then(|text| toolcall::from_content(text, &known)) {
                    Some((format, found)) => {
                        let calls = found.into_iter().enumerate().map(|(i, c)| ToolCall {
                            id: format!("content_call_{i}"),
                            kind: "function".into(),
                            function: FunctionCall { name: c.name, arguments: c.arguments },
                        });
                        (format, calls.collect())
                    }
                    None => {
                        if !tools.is_empty() && run.calls.is_empty() && run.errors == 0 {
                            Metrics::count(&self.metrics.tool_call_format, toolcall::PROSE);
                        }
                        trace.text = answer.content.clone();
                        run.summary = answer.content;
                        return Ok(run);
                    }
                }
            } else {
                (Format::Native, answer.tool_calls.clone())
            };
            // A call read from the text is answered in a user turn after the text as written.
            let native = format == Format::Native;
            let tool_calls = if native { answer.tool_calls } else { Vec::new() };
            messages.push(Message { role: "assistant".into(), tool_calls, ..answer });
            let mut results = Vec::with_capacity(calls.len());
            for call in &calls {
                Metrics::count(&self.metrics.tool_call_format, format.label());
                let name: String = call.function.name.chars().take(64).collect();
                // A call the model got wrong is an error of the model's, not a call of the tool.
                let checked = match tools.iter().find(|t| t.name() == call.function.name).map(Tool::name) {
                    None => Err(("unknown_tool", format!("error: there is no tool named {name:?}"))),
                    Some(tool) => match arguments_error(&call.function.arguments) {
                        Some(e) => {
                            Err(("bad_arguments", format!("error: bad arguments for {name}: {e}; send a JSON object")))
                        }
                        None => Ok(tool),
                    },
                };
                let mut result = match checked {
                    Ok(tool) => {
                        self.metrics.tool_call(tool);
                        run.calls.push(name.clone());
                        handler.call(call).await
                    }
                    Err((why, text)) => {
                        Metrics::count(&self.metrics.tool_errors, why);
                        tracing::warn!(tool = %name, why, detail = %text, "the model's tool call was refused");
                        run.errors += 1;
                        text
                    }
                };
                truncate(&mut result, MAX_TOOL_RESULT);
                let mut arguments = call.function.arguments.clone();
                truncate(&mut arguments, MAX_TOOL_RESULT);
                trace.calls.push(CallTrace { tool: name.clone(), arguments, result: result.clone() });
                if native {
                    messages.push(Message::tool(&call.id, result));
                } else {
                    results.push((name, result));
                }
            }
            if !native {
                messages.push(Message::user(toolcall::results_message(&results)));
            }
        }
        run.exhausted = true;
        Ok(run)
    }
}

/// The tokens of an answer whose server reported no usage: a token per four bytes of the
/// request and of the answer's text and calls.
fn estimate(body: &Value, answer: &Message) -> Usage {
    let prompt = body.to_string().len() as u64;
    let calls: usize = answer.tool_calls.iter().map(|c| c.function.name.len() + c.function.arguments.len()).sum();
    let completion = (answer.content.as_deref().map_or(0, str::len) + calls) as u64;
    Usage { prompt_tokens: prompt.div_ceil(4), completion_tokens: completion.div_ceil(4) }
}

/// Reads a body, refusing one over [`MAX_RESPONSE_BYTES`].
async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, reqwest::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if out.len() + chunk.len() > MAX_RESPONSE_BYTES {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A transport error's text without its URL (which may carry credentials in odd setups).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(url.as_str(), "<llm>");
    }
    text
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// Why a tool call's arguments are not a JSON object, if they are not (an empty string is
/// taken as no arguments, as some servers send for a tool without parameters).
fn arguments_error(arguments: &str) -> Option<String> {
    if arguments.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(_)) => None,
        Ok(other) => Some(format!("a JSON {} where an object was expected", kind(&other))),
        Err(e) => Some(e.to_string()),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parses JSON the model wrote, past any prose or code fence around it.
pub fn parse_json<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let first = serde_json::from_str::<T>(text.trim());
    if first.is_ok() {
        return first;
    }
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return first;
    };
    if start >= end {
        return first;
    }
    serde_json::from_str::<T>(&text[start..=end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_past_prose_and_fences() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct A {
            a: u32,
        }
        assert_eq!(parse_json::<A>("{\"a\": 1}").ok(), Some(A { a: 1 }));
        assert_eq!(parse_json::<A>("Sure!\n```json\n{\"a\": 2}\n```").ok(), Some(A { a: 2 }));
        assert!(parse_json::<A>("no json here").is_err());
        assert!(parse_json::<A>("} {").is_err());
        assert!(parse_json::<A>("{\"b\": 1}").is_err());
    }

    #[test]
    fn tool_arguments_must_be_a_json_object() {
        assert_eq!(arguments_error(r#"{"uri": "at://x"}"#), None);
        assert_eq!(arguments_error(""), None, "no arguments");
        assert!(arguments_error(r#"{"uri": "at://x""#).is_some(), "cut off");
        assert!(arguments_error("[1]").is_some_and(|e| e.contains("array")));
        assert!(arguments_error("uri=at://x").is_some());
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        let mut s = "héllo".to_owned();
        truncate(&mut s, 2);
        assert_eq!(s, "h");
        let mut s = "abc".to_owned();
        truncate(&mut s, 10);
        assert_eq!(s, "abc");
    }

    #[test]
    fn tokens_are_estimated_at_four_bytes_when_no_usage_is_reported() {
        let body = json!({"messages": [{"role": "user", "content": "x".repeat(4000)}]});
        let answer = Message { role: "assistant".into(), content: Some("y".repeat(400)), ..Message::default() };
        let usage = estimate(&body, &answer);
        assert!((1000..1020).contains(&usage.prompt_tokens), "{usage:?}");
        assert_eq!(usage.completion_tokens, 100);
    }

    #[test]
    fn a_message_with_null_tool_calls_reads_as_none() {
        let m: Message = serde_json::from_str(r#"{"role":"assistant","content":"hi","tool_calls":null}"#).unwrap();
        assert!(m.tool_calls.is_empty());
        let text = serde_json::to_string(&Message::user("x")).unwrap();
        assert!(!text.contains("tool_calls"), "{text}");
    }
}
