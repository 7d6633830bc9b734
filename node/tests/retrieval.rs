#![allow(clippy::unwrap_used)]
//! Recall@5 on a labelled set of multi-session conversations (`tests/data/retrieval.json`):
//! every turn goes through the real memory engine on a real fjall store as a conversation
//! memory with its session and time, then each question is asked in its user's namespace and
//! scores 1 when its labelled turn is among the first five hits.
//!
//! Measured for the hashing embedder and, when `DRUSE_MINILM_DIR` names the weights (CI sets
//! it), for all-MiniLM-L6-v2, each with context indexing on and off. The table prints with
//! `cargo test -p druse-node --release --test retrieval -- --nocapture`. The floors below sit
//! under the measured figures with room to spare, so only a real regression trips them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use druse_memory::Memory;
use druse_memory::crystal::{CrystalId, MemoryKind, Namespace};
use druse_memory::embed::{self, Embedder, Hashing, MiniLm};
use druse_memory::engine::{Config, NewMemory, Query};
use druse_memory::governance::Caller;
use serde::Deserialize;

/// Recall@5 with the default context setting must not fall below these. They
/// sit under what was measured (hashing 0.645, MiniLM 0.806 through `search` with the default
/// tuning: a turn indexed as its window of turns, irregular forms at their base's term; MiniLM
/// read 0.823 when a turn was indexed with the turn before it only), so only a real regression
/// trips them; raise them when retrieval gets better.
const HASHING_FLOOR: f64 = 0.60;
const MINILM_FLOOR: f64 = 0.76;

#[derive(Debug, Deserialize)]
struct Set {
    turn_gap_seconds: u64,
    conversations: Vec<Conversation>,
    questions: Vec<Question>,
}

#[derive(Debug, Deserialize)]
struct Conversation {
    user: String,
    sessions: Vec<Session>,
}

#[derive(Debug, Deserialize)]
struct Session {
    id: String,
    /// `YYYY-MM-DD HH:MM`, UTC.
    start: String,
    /// `[speaker, text]`.
    turns: Vec<(String, String)>,
}

#[derive(Debug, Deserialize)]
struct Question {
    q: String,
    session: String,
    turn: usize,
    needs: String,
}

fn load_set() -> Set {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/retrieval.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Unix milliseconds of `YYYY-MM-DD HH:MM` (UTC).
fn parse_time(s: &str) -> u64 {
    let at = humantime::parse_rfc3339_weak(&format!("{s}:00")).unwrap();
    at.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A turn to store: where it sits in the set, who said it to whom, when, and what.
struct Turn {
    session: String,
    index: usize,
    user: String,
    at: u64,
    text: String,
}

fn turns(set: &Set) -> Vec<Turn> {
    let mut turns = Vec::new();
    for conversation in &set.conversations {
        for session in &conversation.sessions {
            let start = parse_time(&session.start);
            for (index, (speaker, text)) in session.turns.iter().enumerate() {
                turns.push(Turn {
                    session: session.id.clone(),
                    index,
                    user: conversation.user.clone(),
                    at: start + index as u64 * set.turn_gap_seconds * 1000,
                    text: format!("{speaker}: {text}"),
                });
            }
        }
    }
    // Stored as they were said, across every conversation.
    turns.sort_by_key(|t| t.at);
    turns
}

fn namespace(user: &str) -> Namespace {
    Namespace::try_from(format!("user:{user}")).unwrap()
}

/// What one embedder and setting scored.
struct Measured {
    recall: f64,
    by_need: BTreeMap<String, (usize, usize)>,
    misses: Vec<String>,
}

fn measure(set: &Set, embedder: Arc<dyn Embedder>, context: bool) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let db = druse_node::store::open_database(&dir.path().join("db"), 64 << 20).unwrap();
    let turns = turns(set);
    let first = turns.first().map_or(0, |t| t.at);
    let memory = Memory::open(&db, &dir.path().join("index"), Config::default(), embedder, first).unwrap();
    memory.set_context_indexing(context);
    let mut ids: HashMap<(String, usize), CrystalId> = HashMap::new();
    for turn in &turns {
        let new = NewMemory {
            namespace: namespace(&turn.user),
            kind: MemoryKind::Interaction,
            session: Some(turn.session.clone()),
            turn_at: Some(turn.at),
            ..serde_json::from_value(serde_json::json!({ "text": turn.text })).unwrap()
        };
        let added = memory.add(new, "agent", turn.at).unwrap();
        ids.insert((turn.session.clone(), turn.index), added.crystal.id);
    }
    let users: HashMap<&str, &str> = set
        .conversations
        .iter()
        .flat_map(|c| c.sessions.iter().map(move |s| (s.id.as_str(), c.user.as_str())))
        .collect();
    // The questions come a while after the last conversation.
    let asked_at = turns.last().map_or(0, |t| t.at) + 7 * 86_400_000;
    let mut found = 0;
    let mut by_need: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut misses = Vec::new();
    for question in &set.questions {
        let want = ids[&(question.session.clone(), question.turn)];
        let query = Query {
            q: question.q.clone(),
            k: 5,
            namespace: Some(namespace(users[question.session.as_str()])),
            ..Query::default()
        };
        // Through `search`, as `GET /v1/memories` asks: each question's hits are recorded as
        // accessed, and access only orders matches of equal relevance, so the figure does not
        // depend on the questions' order.
        let hits = memory.search(&query, Caller::LocalAgent, asked_at).unwrap();
        let tally = by_need.entry(question.needs.clone()).or_default();
        tally.1 += 1;
        if hits.iter().any(|h| h.crystal.id == want) {
            found += 1;
            tally.0 += 1;
        } else {
            // Peeking to explain the miss leaves no access behind.
            let deeper = memory.peek(&Query { k: 50, ..query }, Caller::LocalAgent, asked_at).unwrap();
            let rank =
                deeper.iter().position(|h| h.crystal.id == want).map_or("over 50".into(), |r| (r + 1).to_string());
            misses.push(format!("{} ({}; the turn ranked {rank})", question.q, question.needs));
        }
    }
    Measured { recall: found as f64 / set.questions.len() as f64, by_need, misses }
}

fn row(name: &str, on: &Measured, off: &Measured) -> String {
    let needs: Vec<String> = on
        .by_need
        .iter()
        .map(|(need, (hit, all))| {
            let (off_hit, _) = off.by_need.get(need).copied().unwrap_or_default();
            format!("{need} {hit}/{off_hit} of {all}")
        })
        .collect();
    format!("{name:<18} {:>10.3} {:>11.3}   ({}; on/off)", on.recall, off.recall, needs.join(", "))
}

fn minilm() -> Option<Arc<dyn Embedder>> {
    let dir = std::env::var(embed::MINILM_DIR_ENV).ok().filter(|d| !d.is_empty())?;
    Some(Arc::new(MiniLm::load(std::path::Path::new(&dir)).unwrap()))
}

#[test]
fn labelled_turns_are_recalled_in_the_top_5() {
    let set = load_set();
    let turns = set.conversations.iter().flat_map(|c| &c.sessions).map(|s| s.turns.len()).sum::<usize>();
    assert!(set.questions.len() >= 40 && turns >= 120, "the set is too small to measure anything");

    let hashing: Arc<dyn Embedder> = Arc::new(Hashing::new(embed::DEFAULT_HASHING_DIM));
    let mut rows =
        vec![("hashing-384", measure(&set, hashing.clone(), true), measure(&set, hashing, false), HASHING_FLOOR)];
    let minilm = minilm();
    if let Some(model) = &minilm {
        rows.push((
            "all-MiniLM-L6-v2",
            measure(&set, model.clone(), true),
            measure(&set, model.clone(), false),
            MINILM_FLOOR,
        ));
    }

    println!("recall@5 over {} questions on {turns} turns", set.questions.len());
    println!("{:<18} {:>10} {:>11}", "embedder", "context on", "context off");
    for (name, on, off, _) in &rows {
        println!("{}", row(name, on, off));
    }
    if minilm.is_none() {
        println!("all-MiniLM-L6-v2   skipped: set {} to the model folder to measure it", embed::MINILM_DIR_ENV);
    }
    for (name, on, off, _) in &rows {
        let default = if Memory::DEFAULT_CONTEXT_INDEXING { on } else { off };
        println!("{name} with the default setting missed:");
        for miss in &default.misses {
            println!("  {miss}");
        }
    }

    for (name, on, off, floor) in &rows {
        let (default, other) = if Memory::DEFAULT_CONTEXT_INDEXING { (on, off) } else { (off, on) };
        assert!(default.recall >= *floor, "{name}: recall@5 {:.3} is under its floor {floor}", default.recall);
        // The default is whichever setting the set shows helps; if that changes, so should it.
        assert!(
            default.recall >= other.recall,
            "{name}: the default context setting scores {:.3}, the other {:.3}",
            default.recall,
            other.recall
        );
    }
}
