//! Recall's guarantees on a real sled store and tantivy index with the hashing embedder:
//! filters apply inside candidate generation, ranking signals never reorder matches of
//! different strength, asking again changes nothing, a turn's neighbours share its relevance,
//! and conversation turns neither reconcile nor stress the agent.

use std::sync::Arc;

use crate::governance::Caller;
use crate::memory::crystal::{CrystalId, MemoryKind, Namespace};
use crate::memory::embed::Hashing;
use crate::memory::engine::{Config, Error, Memory, NewMemory, Query, Tuning};

const NOW: u64 = 1_795_305_600_000;
const MINUTE: u64 = 60_000;

fn open(dir: &std::path::Path) -> Memory {
    let db = sled::open(dir.join("db")).unwrap();
    Memory::open(&db, &dir.join("index"), Config::default(), Arc::new(Hashing::new(384)), NOW).unwrap()
}

fn user(handle: &str) -> Namespace {
    Namespace::User(handle.into())
}

fn fact(text: &str, namespace: &str) -> NewMemory {
    NewMemory { namespace: user(namespace), kind: MemoryKind::Interaction, ..NewMemory::text(text) }
}

fn turn(text: &str, namespace: &str, session: &str, at: u64) -> NewMemory {
    NewMemory { session: Some(session.into()), turn_at: Some(at), ..fact(text, namespace) }
}

fn ask(m: &Memory, q: &str, namespace: &str, k: usize) -> Vec<CrystalId> {
    let query = Query { namespace: Some(user(namespace)), ..Query::new(q, k) };
    m.search(&query, Caller::LocalAgent, NOW + MINUTE).unwrap().into_iter().map(|h| h.crystal.id).collect()
}

#[test]
fn a_namespace_among_many_similar_ones_still_gets_k_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    // 300 memories elsewhere that match the query better than anything in the small namespace.
    let crowd: Vec<NewMemory> =
        (0..300).map(|i| fact(&format!("the garden birds sing at dawn, note {i}"), &format!("u{}", i % 30))).collect();
    m.add_many(crowd, "user", NOW).unwrap();
    let own: Vec<NewMemory> =
        (0..12).map(|i| fact(&format!("a morning walk with birds number {i}"), "small")).collect();
    let own_ids: Vec<CrystalId> = m.add_many(own, "user", NOW).unwrap().into_iter().map(|a| a.crystal.id).collect();
    let hits = ask(&m, "garden birds sing at dawn", "small", 10);
    assert_eq!(hits.len(), 10, "k in-namespace results: {hits:?}");
    assert!(hits.iter().all(|id| own_ids.contains(id)));
    let kinds = Query { kind: Some(MemoryKind::Observation), ..Query::new("garden birds", 10) };
    assert!(m.search(&kinds, Caller::LocalAgent, NOW).unwrap().is_empty(), "the kind filter applies as well");
}

#[test]
fn access_never_lifts_a_weak_match_over_a_strong_one_and_asking_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let strong = m.add(fact("Sam's dentist appointment is on Tuesday at nine", "sam"), "user", NOW).unwrap().crystal.id;
    let weak = m.add(fact("Sam walked past a dentist sign", "sam"), "user", NOW).unwrap().crystal.id;
    let other = m.add(fact("Sam likes crows and ravens", "sam"), "user", NOW).unwrap().crystal.id;
    let first = ask(&m, "when is Sam's dentist appointment on Tuesday", "sam", 3);
    assert_eq!(first.first(), Some(&strong), "{first:?}");
    // The weak match is recalled over and over by another question.
    for _ in 0..50 {
        assert!(ask(&m, "dentist sign walked past", "sam", 1).contains(&weak));
    }
    assert!(m.get(weak).unwrap().access_count >= 50);
    let again = ask(&m, "when is Sam's dentist appointment on Tuesday", "sam", 3);
    assert_eq!(again, first, "the same question, the same answer");
    for _ in 0..5 {
        assert_eq!(ask(&m, "when is Sam's dentist appointment on Tuesday", "sam", 3), first);
    }
    assert_eq!(first.len(), 3, "all three are candidates");
    assert!(first.contains(&other));
}

#[test]
fn queries_out_of_bounds_are_refused_not_clamped() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.add(fact("Sam likes crows", "sam"), "user", NOW).unwrap();
    for query in [Query::new("crows", 0), Query::new("crows", 101), Query::new("", 5), Query::new(" \n", 5)] {
        let refused = m.search(&query, Caller::LocalAgent, NOW);
        assert!(matches!(refused, Err(Error::BadQuery(_))), "{query:?}: {refused:?}");
    }
    assert_eq!(m.search(&Query::new("crows", 100), Caller::LocalAgent, NOW).unwrap().len(), 1);
}

#[test]
fn private_matches_hidden_from_an_anonymous_caller_are_an_error_not_an_empty_answer() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.add(fact("Sam likes crows", "sam"), "user", NOW).unwrap();
    let query = Query { namespace: Some(user("sam")), ..Query::new("crows", 5) };
    assert!(matches!(m.search(&query, Caller::Anyone, NOW), Err(Error::Private(_))));
    assert_eq!(m.search(&query, Caller::LocalAgent, NOW).unwrap().len(), 1);
    let elsewhere = Query { namespace: Some(user("nobody")), ..Query::new("crows", 5) };
    assert!(m.search(&elsewhere, Caller::Anyone, NOW).unwrap().is_empty());
}

#[test]
fn a_turns_neighbours_share_its_relevance_when_tuned_to() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.set_context_indexing(false);
    let question = m.add(turn("Mel: what did you paint last week?", "mel", "s1", NOW), "u", NOW).unwrap();
    let answer = m.add(turn("Jo: a lake at sunrise, all orange", "mel", "s1", NOW + MINUTE), "u", NOW).unwrap();
    for i in 0..20 {
        m.add(turn(&format!("Jo: unrelated chatter about trains {i}"), "mel", "s2", NOW + i * MINUTE), "u", NOW)
            .unwrap();
    }
    let query = Query { namespace: Some(user("mel")), ..Query::new("what did you paint", 3) };
    let peek = |m: &Memory| -> Vec<CrystalId> {
        m.peek(&query, Caller::LocalAgent, NOW).unwrap().into_iter().map(|h| h.crystal.id).collect()
    };
    assert_eq!(peek(&m).first(), Some(&question.crystal.id));
    m.set_tuning(Tuning { neighbour_weight: 0.5, ..m.tuning() });
    let hits = peek(&m);
    assert_eq!(hits.get(..2), Some(&[question.crystal.id, answer.crystal.id][..]), "{hits:?}");
}

#[test]
fn with_next_turn_context_a_turn_is_found_by_the_reply_it_got() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.set_tuning(Tuning { next_turn_context: true, ..m.tuning() });
    let asked = m.add(turn("Mel: guess what I made yesterday", "mel", "s1", NOW), "u", NOW).unwrap().crystal.id;
    m.add(turn("Jo: a ceramic bowl, beautiful", "mel", "s1", NOW + MINUTE), "u", NOW).unwrap();
    let query = Query { namespace: Some(user("mel")), ..Query::new("ceramic", 5) };
    let by_text: Vec<CrystalId> = m
        .peek(&query, Caller::LocalAgent, NOW)
        .unwrap()
        .into_iter()
        .filter(|h| h.text_rank.is_some())
        .map(|h| h.crystal.id)
        .collect();
    assert!(by_text.contains(&asked), "{by_text:?}");
}

#[test]
fn conversation_words_do_not_drive_the_agents_cortisol_to_saturation() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let baseline = m.hormones(NOW).cortisol;
    let turns: Vec<NewMemory> = (0..200)
        .map(|i| turn(&format!("Jo: the exam failed again, deadline is urgent, crash {i}"), "jo", "s1", NOW + i))
        .collect();
    let added = m.add_many(turns, "u", NOW).unwrap();
    assert!((m.hormones(NOW).cortisol - baseline).abs() < 1e-9, "turns leave the agent's state alone");
    assert!(added[0].crystal.hormones.cortisol > baseline, "each turn is still stamped with what it says");
    // The agent's own observations are events of its own.
    m.add(NewMemory::text("the deploy failed, urgent"), "agent", NOW).unwrap();
    assert!(m.hormones(NOW).cortisol > baseline + 0.3);
}
