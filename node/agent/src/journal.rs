//! The record of every run of the model (`druse-node agent log`, `GET /v1/agent/runs`): the
//! entry point, the context it was shown (its blocks by heading, and the messages in full),
//! every tool call with its arguments and result, the final text, the tokens, the cost and
//! the time. Kept in the store's database (keyspace `agent_runs`), the newest
//! `agent.run_log_keep` runs; each is bounded, so the journal is too.

use std::sync::Mutex;

use druse_protocol::UnixMillis;
use fjall::{Database, Keyspace, PersistMode};
use serde::{Deserialize, Serialize};

use super::llm::{CallTrace, Message, Trace, Usage, truncate};

/// The journal's keyspace.
pub(crate) const KEYSPACE: &str = "agent_runs";

/// A message of a run's context longer than this is cut in the record.
const MAX_MESSAGE: usize = 64 * 1024;

/// The longest final text a summary shows.
const SUMMARY_TEXT: usize = 280;

/// One run of the model, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Increasing with each run.
    pub id: u64,
    /// When it started.
    pub at: UnixMillis,
    /// `notifications`, `musing`, `reflection`, `review` or `chat`.
    pub entry: String,
    /// `ok`, `step_limit`, `deadline` or `failed`.
    pub outcome: String,
    /// Why it failed, if it did.
    #[serde(default)]
    pub error: Option<String>,
    /// How long it took, in milliseconds.
    pub ms: u64,
    /// The context blocks of its system prompt, by heading, in order.
    pub blocks: Vec<String>,
    /// The messages it was shown, as sent (each cut at 64 KiB).
    pub context: Vec<Message>,
    /// Round trips made.
    pub steps: usize,
    pub calls: Vec<CallTrace>,
    /// The model's last words, when it stopped by itself.
    pub text: Option<String>,
    pub tokens: Usage,
    /// What its tokens cost at the configured prices, in USD.
    pub cost_usd: f64,
}

/// A run in a listing: what it was and how it went, without its context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: u64,
    pub at: UnixMillis,
    pub entry: String,
    pub outcome: String,
    pub ms: u64,
    pub steps: usize,
    /// The tools called, in order.
    pub tools: Vec<String>,
    /// The start of the final text.
    pub text: Option<String>,
    pub tokens: Usage,
    pub cost_usd: f64,
}

impl RunRecord {
    /// The record of a run shown `context` that did what `trace` says.
    pub(crate) fn new(entry: &str, at: UnixMillis, context: &[Message], trace: Trace) -> Self {
        let context: Vec<Message> = context
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if let Some(text) = m.content.as_mut() {
                    truncate(text, MAX_MESSAGE);
                }
                m
            })
            .collect();
        Self {
            id: 0,
            at,
            entry: entry.to_owned(),
            outcome: String::new(),
            error: None,
            ms: 0,
            blocks: context.iter().filter(|m| m.role == "system" || m.role == "user").flat_map(blocks).collect(),
            context,
            steps: trace.steps,
            calls: trace.calls,
            text: trace.text,
            tokens: trace.tokens,
            cost_usd: 0.0,
        }
    }

    fn summary(&self) -> RunSummary {
        let text = self.text.as_ref().map(|t| {
            let mut t = t.clone();
            truncate(&mut t, SUMMARY_TEXT);
            t
        });
        RunSummary {
            id: self.id,
            at: self.at,
            entry: self.entry.clone(),
            outcome: self.outcome.clone(),
            ms: self.ms,
            steps: self.steps,
            tools: self.calls.iter().map(|c| c.tool.clone()).collect(),
            text,
            tokens: self.tokens,
            cost_usd: self.cost_usd,
        }
    }
}

/// The headings of a message's context blocks: its lines that open with `[NAME]`.
fn blocks(message: &Message) -> Vec<String> {
    message
        .content
        .as_deref()
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            // `[NAME …]`: a first word in capitals.
            l.strip_prefix('[').and_then(|rest| rest.split_once(']')).is_some_and(|(name, _)| {
                let head = name.split_whitespace().next().unwrap_or_default();
                head.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && !head.chars().any(char::is_lowercase)
            })
        })
        .map(|l| l.chars().take(120).collect())
        .collect()
}

/// The journal of runs.
pub struct Journal {
    db: Database,
    tree: Keyspace,
    keep: usize,
    /// Held by every write: the next id and the count are read and written as one step.
    writing: Mutex<(u64, usize)>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("keyspace", &KEYSPACE).field("keep", &self.keep).finish_non_exhaustive()
    }
}

fn id_of(key: &[u8]) -> Option<u64> {
    key.try_into().ok().map(u64::from_be_bytes)
}

impl Journal {
    /// Opens the journal in `tree` (the store's keyspace [`KEYSPACE`]), keeping at most `keep`
    /// runs; blocks.
    pub(crate) fn open(db: &Database, tree: Keyspace, keep: usize) -> Result<Self, fjall::Error> {
        let next = match tree.last_key_value() {
            Some(last) => id_of(&last.key()?).map_or(1, |id| id + 1),
            None => 1,
        };
        let len = tree.len()?;
        Ok(Self { db: db.clone(), tree, keep: keep.max(1), writing: Mutex::new((next, len)) })
    }

    /// Records `run` under the next id (which it returns), forgetting the oldest runs past
    /// the journal's bound, in one batch. Blocks.
    pub(crate) fn put(&self, run: &mut RunRecord) -> Result<u64, fjall::Error> {
        let mut writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let (next, len) = *writing;
        run.id = next;
        let bytes = serde_json::to_vec(run).unwrap_or_default();
        let mut batch = self.db.batch().durability(Some(PersistMode::Buffer));
        batch.insert(&self.tree, next.to_be_bytes(), bytes);
        let over = (len + 1).saturating_sub(self.keep);
        for entry in self.tree.iter().take(over) {
            batch.remove(&self.tree, entry.key()?);
        }
        batch.commit()?;
        *writing = (next + 1, len + 1 - over);
        Ok(next)
    }

    /// The newest `limit` runs, newest first, of entry point `entry` if given.
    pub fn recent(&self, limit: usize, entry: Option<&str>) -> Vec<RunSummary> {
        self.tree
            .iter()
            .rev()
            .filter_map(|e| e.value().ok())
            .filter_map(|v| serde_json::from_slice::<RunRecord>(&v).ok())
            .filter(|r| entry.is_none_or(|e| r.entry == e))
            .take(limit)
            .map(|r| r.summary())
            .collect()
    }

    /// The run `id` in full, if the journal still has it.
    pub fn get(&self, id: u64) -> Option<RunRecord> {
        let bytes = self.tree.get(id.to_be_bytes()).ok()??;
        serde_json::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(entry: &str, text: &str) -> RunRecord {
        let context = vec![
            Message::system(
                "persona\n\n[YOU] @a\n[MEMORY ABOUT @b] (trust: high)\nx\n[RELEVANT — merged]\n[not a block]\n[NOW] t",
            ),
            Message::user("[NEW NOTIFICATIONS] (data)\n- [not a block"),
        ];
        let trace = Trace {
            steps: 2,
            calls: vec![CallTrace { tool: "reply".into(), arguments: "{}".into(), result: "ok".into() }],
            text: Some(text.into()),
            tokens: Usage { prompt_tokens: 10, completion_tokens: 5 },
        };
        let mut r = RunRecord::new(entry, 1, &context, trace);
        r.outcome = "ok".into();
        r
    }

    #[test]
    fn runs_are_kept_newest_first_bounded_and_across_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Database::builder(dir.path()).open().expect("db");
        let tree = || db.keyspace(KEYSPACE, fjall::KeyspaceCreateOptions::default).expect("keyspace");
        let journal = Journal::open(&db, tree(), 3).expect("journal");
        for i in 0..5 {
            let id = journal
                .put(&mut record(if i % 2 == 0 { "notifications" } else { "chat" }, &format!("run {i}")))
                .expect("put");
            assert_eq!(id, i + 1);
        }
        let recent = journal.recent(10, None);
        assert_eq!(recent.iter().map(|r| r.id).collect::<Vec<_>>(), vec![5, 4, 3], "the newest 3, newest first");
        assert!(journal.get(1).is_none() && journal.get(2).is_none(), "the oldest are forgotten");
        assert_eq!(journal.recent(10, Some("chat")).iter().map(|r| r.id).collect::<Vec<_>>(), vec![4]);
        let full = journal.get(5).expect("run 5");
        assert_eq!(
            full.blocks,
            vec![
                "[YOU] @a",
                "[MEMORY ABOUT @b] (trust: high)",
                "[RELEVANT — merged]",
                "[NOW] t",
                "[NEW NOTIFICATIONS] (data)"
            ]
        );
        assert_eq!(full.calls[0].tool, "reply");
        assert_eq!(full.text.as_deref(), Some("run 4"));
        drop(journal);
        let journal = Journal::open(&db, tree(), 3).expect("reopen");
        assert_eq!(journal.put(&mut record("chat", "after")).expect("put"), 6, "ids go on after a reopen");
        assert_eq!(journal.recent(10, None).len(), 3);
    }
}
