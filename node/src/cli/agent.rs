//! `druse-node agent …`: the agent of a running node, through its API.

use druse_agent::{Entry, RUN_TIMEOUT, chat};

use super::{ApiArgs, percent_encode};
use crate::client::Error;

/// `druse-node agent …`: the agent of a running node.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Cli {
    /// Show the agent's status (`GET /v1/agent`): its account, session, polls and replies.
    Status,
    /// Run an entry point now (`POST /v1/agent/run`), with its rules, and print what it did.
    Run {
        /// musing, reflection, review or notifications.
        #[arg(value_enum)]
        entry: Entry,
    },
    /// Pause the agent (`POST /v1/agent/pause`): it reads, answers and runs nothing until
    /// resumed, across restarts too.
    Pause,
    /// Resume a paused agent (`POST /v1/agent/resume`).
    Resume,
    /// Talk to the agent in the terminal (`POST /v1/agent/chat`), without Bluesky: with a
    /// message, one turn; without, a conversation until end of input (Ctrl-D).
    Chat {
        /// One message to send; leave it out to converse.
        message: Option<String>,
    },
    /// The newest runs of the model (`GET /v1/agent/runs`), or one run in full with `--id`:
    /// what it was shown, its tool calls, its answer, tokens, cost and time.
    Log {
        /// One run in full, by its id.
        #[arg(long)]
        id: Option<u64>,
        /// How many runs, newest first.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Only this entry point's runs: notifications, musing, reflection, review or chat.
        #[arg(long)]
        entry: Option<String>,
    },
}

impl Cli {
    /// Runs the subcommand against the node `api` points at.
    pub async fn run(self, api: &ApiArgs) -> Result<serde_json::Value, Error> {
        match self {
            Cli::Status => api.reader().get("/v1/agent").await,
            Cli::Run { entry } => {
                api.writer()?.waiting(RUN_TIMEOUT).post("/v1/agent/run", &serde_json::json!({ "entry": entry })).await
            }
            Cli::Chat { message: Some(message) } => {
                let body = chat::ChatBody { message, history: Vec::new() };
                api.writer()?.waiting(RUN_TIMEOUT).post("/v1/agent/chat", &body).await
            }
            Cli::Chat { message: None } => chat_in_terminal(api).await.map(|()| serde_json::Value::Null),
            Cli::Pause => api.writer()?.post("/v1/agent/pause", &serde_json::json!({})).await,
            Cli::Resume => api.writer()?.post("/v1/agent/resume", &serde_json::json!({})).await,
            Cli::Log { id: Some(id), .. } => api.writer()?.get(&format!("/v1/agent/runs/{id}")).await,
            Cli::Log { id: None, limit, entry } => {
                let mut path = format!("/v1/agent/runs?limit={limit}");
                if let Some(entry) = entry {
                    path += &format!("&entry={}", percent_encode(&entry));
                }
                api.writer()?.get(&path).await
            }
        }
    }
}

/// `druse-node agent chat` without a message: a conversation on standard input and output,
/// the turns kept here and sent with each message.
async fn chat_in_terminal(api: &ApiArgs) -> Result<(), Error> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let client = api.writer()?.waiting(RUN_TIMEOUT);
    let status: serde_json::Value = client.get("/v1/agent").await?;
    eprintln!(
        "talking to @{} (nothing here is posted; end with Ctrl-D)",
        status["handle"].as_str().unwrap_or("the agent").trim_start_matches('@')
    );
    let mut history: Vec<chat::Turn> = Vec::new();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        eprint!("> ");
        let Ok(Some(line)) = lines.next_line().await else { break };
        let message = line.trim().to_owned();
        if message.is_empty() {
            continue;
        }
        let body = chat::ChatBody { message: message.clone(), history: history.clone() };
        match client.post::<_, chat::ChatAnswer>("/v1/agent/chat", &body).await {
            Ok(answer) => {
                if !answer.tools.is_empty() {
                    eprintln!("[tools: {}]", answer.tools.join(", "));
                }
                println!("{}", if answer.answer.is_empty() { "(no answer)" } else { answer.answer.as_str() });
                chat::remember(&mut history, message, answer.answer);
            }
            Err(error @ Error::Unreachable { .. }) => return Err(error),
            Err(error) => eprintln!("{error}"),
        }
    }
    Ok(())
}
