//! Recall's guarantees on a real store and tantivy index with the hashing embedder:
//! filters apply inside candidate generation, ranking signals never reorder matches of
//! different strength, asking again changes nothing, a turn's neighbours share its relevance,
//! and conversation turns neither reconcile nor stress the agent.

use std::sync::Arc;

use crate::crystal::{CrystalId, MemoryKind, Namespace};
use crate::embed::{Embedder, Hashing};
use crate::engine::{Config, Error, Memory, NewMemory, Query, Tuning};
use crate::governance::Caller;

const NOW: u64 = 1_795_305_600_000;
const MINUTE: u64 = 60_000;

fn open(dir: &std::path::Path) -> Memory {
    let db = crate::testing::database(&dir.join("db"));
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
fn a_match_said_in_the_session_of_the_best_match_outranks_an_equal_one_said_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.set_context_indexing(false);
    m.set_tuning(Tuning { neighbour_weight: 0.0, ..m.tuning() });
    let add = |text: &str, session: &str, minute: u64| -> CrystalId {
        m.add(turn(text, "mel", session, NOW + minute * MINUTE), "u", NOW).unwrap().crystal.id
    };
    // The same words said in two sessions; the one said first wins a tie on its rank.
    for minute in 0..4 {
        add(&format!("Mel: the train was late again, {minute} minutes"), "commute", minute);
    }
    let elsewhere = add("Jo: the cabin has a fireplace", "commute", 5);
    add("Mel: we booked the lake cabin for the family reunion in July", "trip", 10);
    add("Jo: lovely, who is coming along?", "trip", 11);
    add("Mel: my aunt and both cousins, I think", "trip", 12);
    let in_session = add("Jo: the cabin has a fireplace", "trip", 13);
    let order = |m: &Memory| -> Vec<CrystalId> {
        let query = Query { namespace: Some(user("mel")), ..Query::new("lake cabin reunion fireplace", 10) };
        let hits = m.peek(&query, Caller::LocalAgent, NOW).unwrap();
        hits.into_iter().map(|h| h.crystal.id).filter(|id| [in_session, elsewhere].contains(id)).collect()
    };
    m.set_tuning(Tuning { session_weight: 0.0, ..m.tuning() });
    assert_eq!(order(&m), [elsewhere, in_session], "equal matches, the first said first");
    m.set_tuning(Tuning { session_weight: 0.3, ..m.tuning() });
    assert_eq!(order(&m), [in_session, elsewhere], "the session of the best match lifts its own");
}

/// The crystals `q` finds in mel's namespace by their text (BM25) alone.
fn found_by_text(m: &Memory, q: &str) -> Vec<CrystalId> {
    let query = Query { namespace: Some(user("mel")), ..Query::new(q, 10) };
    m.peek(&query, Caller::LocalAgent, NOW)
        .unwrap()
        .into_iter()
        .filter(|h| h.text_rank.is_some())
        .map(|h| h.crystal.id)
        .collect()
}

/// Stores `text` as a turn of mel's session `session`, said at `at`.
fn said(m: &Memory, text: &str, session: &str, at: u64) -> CrystalId {
    m.add(turn(text, "mel", session, at), "u", NOW).unwrap().crystal.id
}

#[test]
fn a_turn_is_found_by_the_reply_it_got_and_the_question_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let asked = said(&m, "Mel: guess what I made yesterday", "s1", NOW);
    let answered = said(&m, "Jo: a ceramic bowl, beautiful", "s1", NOW + MINUTE);
    let later = said(&m, "Mel: thanks, glazing took ages", "s1", NOW + 2 * MINUTE);
    let elsewhere = said(&m, "Jo: the bus was late", "s2", NOW + 3 * MINUTE);
    let found = found_by_text(&m, "ceramic");
    assert!(found.contains(&asked) && found.contains(&answered) && found.contains(&later), "{found:?}");
    assert!(!found.contains(&elsewhere), "another session's turn is not in the window: {found:?}");
    // A window is the turns on each side, no further.
    let found = found_by_text(&m, "glazing");
    assert!(found.contains(&answered) && !found.contains(&asked), "{found:?}");
}

#[test]
fn a_question_in_the_present_finds_what_was_told_in_the_past_tense_of_an_irregular_verb() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let bought = said(&m, "Mel: I bought a red kayak last weekend", "s1", NOW);
    let taught = said(&m, "Mel: my aunt taught the children to swim", "s2", NOW + 10 * MINUTE);
    let neither = said(&m, "Mel: the weather turned cold", "s3", NOW + 20 * MINUTE);
    assert_eq!(found_by_text(&m, "What did she buy?"), vec![bought]);
    assert_eq!(found_by_text(&m, "Who teaches a child?"), vec![taught]);
    assert_eq!(found_by_text(&m, "the weather is turning"), vec![neither], "regular forms stem as before");
}

#[test]
fn a_turn_stored_between_two_others_joins_both_their_windows() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let first = said(&m, "Mel: what did the vet say", "s1", NOW);
    let third = said(&m, "Mel: poor thing, give her a treat", "s1", NOW + 2 * MINUTE);
    assert!(found_by_text(&m, "sprained paw").is_empty());
    // Stored late, said between them: both windows now hold it.
    let second = said(&m, "Jo: a sprained paw, rest for a week", "s1", NOW + MINUTE);
    let found = found_by_text(&m, "sprained paw");
    for id in [first, second, third] {
        assert!(found.contains(&id), "{id} not in {found:?}");
    }
    // And the windows hold after a restart, when the index is read back.
    drop(m);
    let m = open(dir.path());
    assert_eq!(found_by_text(&m, "sprained paw").len(), 3);
}

#[test]
fn a_purged_turn_leaves_its_neighbours_windows_and_they_close_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let first = said(&m, "Mel: what did the vet say", "s1", NOW);
    let brief = turn("Jo: a sprained paw, rest", "mel", "s1", NOW + MINUTE);
    let new = NewMemory { lifespan: crate::crystal::Lifespan::Ttl, ttl_ms: Some(DAY), ..brief };
    let second = m.add(new, "u", NOW).unwrap().crystal.id;
    let third = said(&m, "Mel: poor thing, give her a treat", "s1", NOW + 2 * MINUTE);
    assert_eq!(found_by_text(&m, "sprained paw").len(), 3);
    assert!(!found_by_text(&m, "treat").contains(&first), "two turns away: not in its window");
    assert_eq!(m.consolidate(NOW + DAY).unwrap().expired, 1);
    assert_eq!(m.consolidate(NOW + DAY + 1).unwrap().purged, 1);
    assert!(m.get(second).is_none());
    let check = |m: &Memory| {
        assert!(found_by_text(m, "sprained paw").is_empty(), "the purged turn's words are gone from every window");
        // The turns on each side of it are now next to each other.
        let found = found_by_text(m, "treat");
        assert!(found.contains(&first) && found.contains(&third), "{found:?}");
    };
    check(&m);
    drop(m);
    check(&open(dir.path()));
}

#[test]
fn with_no_window_a_turn_is_found_by_its_own_words_and_its_day_alone() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.set_tuning(Tuning { window_turns: 0, ..m.tuning() });
    let asked = said(&m, "Mel: guess what I made yesterday", "s1", NOW);
    let answered = said(&m, "Jo: a ceramic bowl, beautiful", "s1", NOW + MINUTE);
    assert_eq!(found_by_text(&m, "ceramic"), [answered]);
    let described = crate::dates::describe(NOW);
    let day = described.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    assert!(found_by_text(&m, &day).contains(&asked), "a turn is found by its day: {day}");
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

/// The hashing embedder, with every call it was asked to make recorded.
#[derive(Debug)]
struct Recording {
    inner: Hashing,
    calls: std::sync::Mutex<Vec<Vec<String>>>,
}

impl Embedder for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::embed::Error> {
        self.calls.lock().unwrap().push(texts.iter().map(|t| (*t).to_owned()).collect());
        self.inner.embed(texts)
    }
}

/// The cosine of `query` with each crystal's nearer vector (its own or its context's), as
/// recall's vector half sees it.
fn vector_scores(m: &Memory, query: &str) -> std::collections::HashMap<CrystalId, f32> {
    m.vector_hits_exact(query, 10).unwrap().into_iter().collect()
}

#[test]
fn a_turn_is_embedded_alone_once_and_found_by_the_turn_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::testing::database(&dir.path().join("db"));
    let recording = Arc::new(Recording { inner: Hashing::new(384), calls: std::sync::Mutex::default() });
    let m = Memory::open(&db, &dir.path().join("index"), Config::default(), recording.clone(), NOW).unwrap();
    m.add(turn("Mel: which hotel should we book in Alfama?", "mel", "s1", NOW), "u", NOW).unwrap();
    recording.calls.lock().unwrap().clear();
    let answer = m.add(turn("Jo: Casa do Largo, by the cathedral", "mel", "s1", NOW + MINUTE), "u", NOW).unwrap();
    let calls = recording.calls.lock().unwrap().clone();
    assert_eq!(calls, vec![vec!["Jo: Casa do Largo, by the cathedral".to_owned()]], "one text, one call");
    // Its context vector, made from the stored vectors of both turns, finds it by the words
    // said before it, which its own vector does not hold.
    let query = "Alfama hotel";
    let own = m.embedding(answer.crystal.id).unwrap();
    let q = recording.inner.embed(&[query]).unwrap().pop().unwrap();
    let own_cosine: f32 = own.iter().zip(&q).map(|(a, b)| a * b).sum();
    let score = vector_scores(&m, query)[&answer.crystal.id];
    assert!(own_cosine < 0.05 && score > 0.2, "own {own_cosine}, with context {score}");
}

#[test]
fn a_batch_of_turns_is_embedded_in_one_call_each_turn_in_context_of_the_one_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::testing::database(&dir.path().join("db"));
    let recording = Arc::new(Recording { inner: Hashing::new(384), calls: std::sync::Mutex::default() });
    let m = Memory::open(&db, &dir.path().join("index"), Config::default(), recording.clone(), NOW).unwrap();
    let turns = vec![
        turn("Mel: guess what I painted", "mel", "s1", NOW),
        turn("Jo: a lighthouse?", "mel", "s1", NOW + MINUTE),
        turn("Mel: no, a sunrise over the lake", "mel", "s1", NOW + 2 * MINUTE),
    ];
    let ids: Vec<CrystalId> = m.add_many(turns, "u", NOW).unwrap().into_iter().map(|a| a.crystal.id).collect();
    let calls = recording.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "the whole batch in one call: {calls:?}");
    assert_eq!(calls[0].len(), 3, "each turn once, no context texts: {calls:?}");
    let q = recording.inner.embed(&["lighthouse"]).unwrap().pop().unwrap();
    let own = |id: CrystalId| -> f32 { m.embedding(id).unwrap().iter().zip(&q).map(|(a, b)| a * b).sum() };
    let scores = vector_scores(&m, "lighthouse");
    assert!(scores[&ids[2]] > own(ids[2]) + 0.1, "the third turn holds the second as context: {scores:?}");
    assert!((scores[&ids[0]] - own(ids[0])).abs() < 1e-4, "the first has no context: {scores:?} {}", own(ids[0]));
}

#[test]
fn an_acknowledged_add_is_found_by_text_by_the_very_next_search() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    for i in 0..3 {
        let id = m.add(fact(&format!("the parcel locker code is {i}417"), "jo"), "u", NOW).unwrap().crystal.id;
        let query = Query { namespace: Some(user("jo")), ..Query::new(format!("{i}417"), 5) };
        let hits = m.peek(&query, Caller::LocalAgent, NOW).unwrap();
        let hit = hits.iter().find(|h| h.crystal.id == id);
        assert!(hit.is_some_and(|h| h.text_rank == Some(1)), "add {i} is searchable by text at once: {hits:?}");
    }
}

#[test]
fn text_documents_no_search_committed_before_a_crash_are_found_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::testing::database(&dir.path().join("db"));
    let open_on = |db: &fjall::Database| {
        Memory::open(db, &dir.path().join("index"), Config::default(), Arc::new(Hashing::new(384)), NOW).unwrap()
    };
    let m = open_on(&db);
    let id = m.add(fact("the parcel locker code is 4417", "jo"), "u", NOW).unwrap().crystal.id;
    // As after kill -9: no search and no shutdown commits the text index.
    std::mem::forget(m);
    let m = open_on(&db);
    let query = Query { namespace: Some(user("jo")), ..Query::new("4417", 5) };
    let hits = m.peek(&query, Caller::LocalAgent, NOW).unwrap();
    assert!(hits.iter().any(|h| h.crystal.id == id && h.text_rank.is_some()), "{hits:?}");
}

#[test]
fn a_question_that_names_a_speaker_prefers_what_they_said_but_not_over_a_clearly_better_match() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let melanie = m.add(fact("Melanie: I love painting sunsets by the lake", "pair"), "user", NOW).unwrap().crystal.id;
    let caroline =
        m.add(fact("Caroline: I love painting sunsets by the lake", "pair"), "user", NOW).unwrap().crystal.id;
    assert_eq!(ask(&m, "What does Caroline love painting?", "pair", 2), [caroline, melanie]);
    assert_eq!(ask(&m, "What does Melanie love painting?", "pair", 2), [melanie, caroline]);
    // A name is matched as whole words: "Carol" is not "Caroline".
    m.set_tuning(Tuning { speaker_weight: 0.0, ..m.tuning() });
    let unlifted = ask(&m, "What does Carol love painting?", "pair", 2);
    m.set_tuning(Tuning { speaker_weight: 1.0, ..m.tuning() });
    assert_eq!(ask(&m, "What does Carol love painting?", "pair", 2), unlifted);

    let pottery =
        m.add(fact("Melanie: my pottery class moved to Friday evening", "pair"), "user", NOW).unwrap().crystal.id;
    m.add(fact("Caroline: music helps me relax", "pair"), "user", NOW).unwrap();
    assert_eq!(ask(&m, "When is Caroline's pottery class?", "pair", 1), [pottery]);
}

#[test]
fn a_question_about_one_speaker_and_anothers_doings_prefers_what_the_first_said() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let bens = m.add(fact("Ben: my trip to Lisbon, the whole trip, was my decision", "pair"), "user", NOW).unwrap();
    let anas = m.add(fact("Ana: I think Lisbon alone takes courage", "pair"), "user", NOW).unwrap();
    let (bens, anas) = (bens.crystal.id, anas.crystal.id);
    // Others of the conversation that match a word or two, so the two above are not merely
    // the best and worst of a list of two.
    for other in ["Cy: Lisbon has steep hills and old trams", "Di: a trip by train takes a day", "Ana: a day off"] {
        m.add(fact(other, "pair"), "user", NOW).unwrap();
    }
    let question = "What does Ana think about Ben's trip to Lisbon?";
    m.set_tuning(Tuning { speaker_weight: 0.0, ..m.tuning() });
    assert_eq!(ask(&m, question, "pair", 2), [bens, anas], "by their words alone, Ben's turn matches better");
    m.set_tuning(Tuning { speaker_weight: 1.0, ..m.tuning() });
    assert_eq!(ask(&m, question, "pair", 2), [anas, bens], "the question is about what Ana thinks");
    // Asked about Ben, his own turn comes first.
    assert_eq!(ask(&m, "What did Ben say about Ana's view of his trip to Lisbon?", "pair", 2), [bens, anas]);
}

/// The hashing embedder, presented as an embedder of meaning, so the engine stores sentence
/// vectors with it as it does with MiniLM.
#[derive(Debug)]
struct ByMeaning(Hashing);

impl Embedder for ByMeaning {
    fn name(&self) -> &str {
        "hashing-as-meaning"
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, crate::embed::Error> {
        self.0.embed(texts)
    }
}

/// The engine on `dir` with an embedder of meaning, which gives a memory of several sentences
/// a vector for each.
fn open_by_meaning(dir: &std::path::Path) -> Memory {
    let db = crate::testing::database(&dir.join("db"));
    Memory::open(&db, &dir.join("index"), Config::default(), Arc::new(ByMeaning(Hashing::new(384))), NOW).unwrap()
}

#[test]
fn a_memory_of_several_sentences_is_found_by_one_of_them_and_keeps_its_vectors_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let reopen = || open_by_meaning(dir.path());
    let m = reopen();
    let long = "Melanie: We drove north for the weekend. The cabin had no heating at all. \
                Still, the kids adored the frozen waterfall behind it.";
    let id = m.add(fact(long, "trip"), "user", NOW).unwrap().crystal.id;
    let one = m.add(fact("Melanie: the waterfall trail was closed", "trip"), "user", NOW).unwrap().crystal.id;
    // Its own vector, and one for each of its three sentences; the one-sentence memory has one.
    assert_eq!(m.vector_stats().live, 5);
    let scores = vector_scores(&m, "Melanie: the kids adored the frozen waterfall");
    assert!(scores[&id] > scores[&one], "the sentence is nearer than the whole: {scores:?}");
    drop(m);
    let m = reopen();
    assert_eq!(m.vector_stats().live, 5, "sentence vectors are stored, and indexed again on open");
    assert_eq!(ask(&m, "who adored the frozen waterfall", "trip", 1), [id]);
}

#[test]
fn a_search_scoped_to_a_namespace_ranks_its_vectors_as_an_exact_search_of_everything_would() {
    let dir = tempfile::tempdir().unwrap();
    let reopen = || open_by_meaning(dir.path());
    let m = reopen();
    let words = ["lake", "boat", "kiln", "vase", "trail", "cabin", "choir", "violin", "garden", "roses"];
    // Turns of several sentences in three namespaces: own, context and sentence vectors.
    let turns: Vec<NewMemory> = (0..90)
        .map(|i| {
            let text = format!(
                "Mel: the {} was {i} minutes away. We took the {} there. Then the {}.",
                words[i % 10],
                words[(i / 3) % 10],
                words[(i * 7) % 10]
            );
            turn(&text, &format!("u{}", i % 3), "s1", NOW + i as u64 * MINUTE)
        })
        .collect();
    m.add_many(turns, "user", NOW).unwrap();
    let scoped_ranks = |m: &Memory, q: &str| -> Vec<CrystalId> {
        let query = Query { namespace: Some(user("u1")), ..Query::new(q, 40) };
        let mut hits: Vec<(usize, CrystalId)> = m
            .peek(&query, Caller::LocalAgent, NOW)
            .unwrap()
            .into_iter()
            .filter_map(|h| Some((h.vector_rank?, h.crystal.id)))
            .collect();
        hits.sort_unstable();
        assert!(hits.iter().enumerate().all(|(i, (rank, _))| *rank == i + 1), "ranks without gaps: {hits:?}");
        hits.into_iter().map(|(_, id)| id).collect()
    };
    let members: std::collections::HashSet<CrystalId> = ask(&m, "minutes away", "u1", 100).into_iter().collect();
    assert_eq!(members.len(), 30);
    for q in ["a boat to the lake", "the violin in the cabin", "roses by the kiln"] {
        let exact: Vec<CrystalId> = m
            .vector_hits_exact(q, 90)
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .filter(|id| members.contains(id))
            .collect();
        let scoped = scoped_ranks(&m, q);
        assert!(scoped.len() >= 10, "{q}: {scoped:?}");
        assert_eq!(scoped, exact[..scoped.len()], "{q}");
    }
    drop(m);
    let m = reopen();
    let exact: Vec<CrystalId> = m
        .vector_hits_exact("a boat to the lake", 90)
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| members.contains(id))
        .collect();
    let scoped = scoped_ranks(&m, "a boat to the lake");
    // An engine that forgot its namespaces would find no vectors in this one.
    assert!(scoped.len() >= 10, "the namespaces are known again after a reopen: {scoped:?}");
    assert_eq!(scoped, exact[..scoped.len()]);
}

#[test]
fn every_vector_of_a_memory_leaves_the_index_when_it_expires_and_none_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let reopen = || open_by_meaning(dir.path());
    let m = reopen();
    let fleeting = |new: NewMemory| NewMemory { lifespan: crate::crystal::Lifespan::Ttl, ttl_ms: Some(MINUTE), ..new };
    // Turns of several sentences, each after the one before: own, context and sentence
    // vectors. Only the last memory lasts, with its own vector alone.
    let turns = (0..4u64).map(|i| {
        let text = format!("Mel: we drove north for {i} hours. The cabin was cold. The kids loved the waterfall.");
        fleeting(turn(&text, "u1", "s1", NOW + i * MINUTE))
    });
    let lasting = fact("the parcel locker code is 4417", "u1");
    let added = m.add_many(turns.chain([lasting]).collect(), "user", NOW).unwrap();
    let kept = added.last().unwrap().crystal.id;
    let before = m.vector_stats().live;
    assert!(before > 4 * 4, "sentence and context vectors beside the own ones: {before}");
    let later = NOW + 10 * MINUTE;
    assert_eq!(m.consolidate(later).unwrap().expired, 4);
    assert_eq!(m.vector_stats().live, 1, "only the lasting memory's vector is left");
    assert_eq!(m.consolidate(later + MINUTE).unwrap().purged, 4);
    assert_eq!(m.vector_stats().live, 1);
    assert_eq!(ask(&m, "the kids loved the waterfall", "u1", 5), [kept], "a scoped search finds only what lasts");
    drop(m);
    let m = reopen();
    assert_eq!(m.vector_stats().live, 1, "and a start indexes nothing of the purged memories");
    assert_eq!(ask(&m, "the kids loved the waterfall", "u1", 5), [kept]);
}

const DAY: u64 = 24 * 60 * MINUTE;

/// Asks in `namespace` at `now`, the ids best first.
fn ask_at(m: &Memory, q: &str, namespace: &str, k: usize, now: u64) -> Vec<CrystalId> {
    let query = Query { namespace: Some(user(namespace)), ..Query::new(q, k) };
    m.peek(&query, Caller::LocalAgent, now).unwrap().into_iter().map(|h| h.crystal.id).collect()
}

#[test]
fn a_question_that_names_a_time_prefers_what_was_said_then() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    // The same words said a month ago and yesterday, in sessions of their own.
    let month_ago =
        m.add(turn("Mel: we went hiking up the hills", "mel", "s1", NOW - 30 * DAY), "u", NOW).unwrap().crystal.id;
    let yesterday =
        m.add(turn("Mel: we went hiking up the hills", "mel", "s2", NOW - DAY / 2), "u", NOW).unwrap().crystal.id;
    m.add(turn("Mel: the bakery opens at seven", "mel", "s3", NOW - 10 * DAY), "u", NOW).unwrap();
    let both = [month_ago, yesterday];
    let order = |m: &Memory, q: &str| -> Vec<CrystalId> {
        ask_at(m, q, "mel", 10, NOW + MINUTE).into_iter().filter(|id| both.contains(id)).collect()
    };
    assert_eq!(order(&m, "where did Mel go hiking yesterday?"), [yesterday, month_ago]);
    let a_month_back = crate::dates::describe(NOW - 30 * DAY);
    let named_day = a_month_back.split(" (").next().unwrap_or_default();
    assert_eq!(order(&m, &format!("where did Mel go hiking on {named_day}?")), [month_ago, yesterday], "{named_day}");
    // With the time weight at 0, which day "yesterday" is changes nothing.
    m.set_tuning(Tuning { time_weight: 0.0, ..m.tuning() });
    let q = "where did Mel go hiking yesterday?";
    assert_eq!(ask_at(&m, q, "mel", 10, NOW + MINUTE), ask_at(&m, q, "mel", 10, NOW + 29 * DAY));
}

#[test]
fn what_was_said_in_the_named_time_is_found_behind_many_better_matches() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    // 120 turns that match the words better, said long ago, and one said yesterday.
    let crowd: Vec<NewMemory> = (0..120)
        .map(|i| turn(&format!("Mel: hiking hiking hiking trail {i}"), "mel", &format!("old{i}"), NOW - 300 * DAY))
        .collect();
    m.add_many(crowd, "u", NOW).unwrap();
    let target = m.add(turn("Mel: a short hiking walk", "mel", "new", NOW - DAY / 2), "u", NOW).unwrap().crystal.id;
    m.set_tuning(Tuning { time_weight: 0.0, ..m.tuning() });
    assert!(!ask_at(&m, "hiking yesterday", "mel", 10, NOW + MINUTE).contains(&target), "words alone miss it");
    m.set_tuning(Tuning { time_weight: 2.0, ..m.tuning() });
    assert_eq!(ask_at(&m, "hiking yesterday", "mel", 10, NOW + MINUTE).first(), Some(&target));
    // A question that names no time, or a time when nothing matching was said, is unchanged.
    let plain = ask_at(&m, "hiking trail", "mel", 10, NOW + MINUTE);
    let nothing_then = ask_at(&m, "hiking trail in March 1999", "mel", 10, NOW + MINUTE);
    m.set_tuning(Tuning { time_weight: 0.0, ..m.tuning() });
    assert_eq!(ask_at(&m, "hiking trail", "mel", 10, NOW + MINUTE), plain);
    assert_eq!(ask_at(&m, "hiking trail in March 1999", "mel", 10, NOW + MINUTE), nothing_then);
}

#[test]
fn a_month_without_its_year_is_the_last_one_the_conversation_holds() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    // A conversation recorded three years before the search.
    let at = |date: &str| crate::dates::parse(date).unwrap();
    let june = m.add(turn("Mel: we went camping by the lake", "mel", "s1", at("2023-06-10")), "u", NOW).unwrap();
    let sept = m.add(turn("Mel: we went camping by the lake", "mel", "s2", at("2023-09-02")), "u", NOW).unwrap();
    m.add(turn("Mel: the bakery opens at seven", "mel", "s3", at("2023-10-01")), "u", NOW).unwrap();
    let both = [june.crystal.id, sept.crystal.id];
    let order = |q: &str| -> Vec<CrystalId> {
        ask_at(&m, q, "mel", 10, NOW + MINUTE).into_iter().filter(|id| both.contains(id)).collect()
    };
    assert_eq!(order("when did Mel go camping in June?"), both);
    assert_eq!(order("when did Mel go camping in September?"), [both[1], both[0]]);
}
