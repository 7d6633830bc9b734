//! The memory engine end to end on a real store and tantivy index, with the hashing
//! embedder: correction, supersession and history, consolidation rules, TTL, merge, purge,
//! governance in recall, and restart.

use std::sync::Arc;

use crate::correction::Decision;
use crate::crystal::{Crystal, CrystalId, Governance, Lifecycle, Lifespan, MemoryKind, Namespace, Origin, Status};
use crate::decay::DecayClass;
use crate::embed::Hashing;
use crate::engine::{Added, Config, Error, Memory, NewMemory, Query};
use crate::governance::{Caller, Scope, Sensitivity};
use crate::hormones::Influence;

const NOW: u64 = 1_795_305_600_000;
const DAY: u64 = 86_400_000;

fn open(dir: &std::path::Path) -> Memory {
    open_at(dir, NOW)
}

/// Opens the engine in `dir` as of `now`.
fn open_at(dir: &std::path::Path, now: druse_protocol::UnixMillis) -> Memory {
    let db = crate::testing::database(&dir.join("db"));
    Memory::open(&db, &dir.join("index"), Config::default(), Arc::new(Hashing::new(384)), now).unwrap()
}

/// A plain stored crystal, for tests of the parts around the engine.
pub(crate) fn crystal(id: CrystalId, text: &str) -> Crystal {
    Crystal {
        id,
        text: text.into(),
        namespace: Namespace::Episodic,
        kind: MemoryKind::Interaction,
        semantic_type: druse_protocol::body::SemanticType::Fact,
        origin: Origin::UserInput,
        lifecycle: Lifecycle::Generated,
        status: Status::Active,
        supersedes: None,
        superseded_by: None,
        subject: None,
        attribute: None,
        confidence: 0.9,
        decay_class: DecayClass::Default,
        event_at: None,
        governance: Governance {
            scope: Scope::Private,
            lifespan: Lifespan::Decay,
            ttl_ms: None,
            priority: 0.5,
            sensitivity: Sensitivity::Normal,
            provenance: Vec::new(),
            peer_origin: None,
        },
        hormones: Influence { dopamine: 0.15, cortisol: 0.02, oxytocin: 0.1 },
        emotional_valence: 0.0,
        emotional_weight: 0.0,
        importance: 0.1,
        access_count: 0,
        last_access: NOW,
        created_at: NOW,
        parent_id: None,
        session: None,
        turn_at: None,
        curiosity_boost: 0.0,
        steering_reward: 0.0,
        external_id: None,
        metadata: None,
        skill: None,
    }
}

fn memory(text: &str) -> NewMemory {
    serde_json::from_value(serde_json::json!({ "text": text, "namespace": "user:alice" })).unwrap()
}

fn search(m: &Memory, q: &str) -> Vec<String> {
    let query = Query { q: q.into(), k: 5, ..Query::default() };
    m.search(&query, Caller::LocalAgent, NOW + 1000).unwrap().into_iter().map(|h| h.crystal.text).collect()
}

/// Sets the access counts of crystals in memory, as if they had been recalled that often.
fn accessed(m: &Memory, counts: &[(CrystalId, u64)]) {
    for &(id, accesses) in counts {
        m.change(id, "test", NOW, "recalled", |c| c.access_count = accesses).unwrap();
    }
}

#[test]
fn explicit_correction_is_recalled_and_the_old_value_stays_in_history() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let first = m.add(memory("Dad's surgery is March 15"), "user", NOW).unwrap();
    let fix = m.add(memory("Wait, actually it's March 22 - I got the date wrong"), "user", NOW + 10).unwrap();
    assert_eq!(fix.decision, Decision::Update { target: first.crystal.id, confidence: 1.0 });
    assert_eq!(fix.crystal.confidence, 1.0);
    let hits = search(&m, "when is dad's surgery?");
    assert_eq!(hits.first().map(String::as_str), Some("Wait, actually it's March 22 - I got the date wrong"));
    assert!(!hits.iter().any(|t| t.contains("March 15")), "superseded rows are never recalled: {hits:?}");
    let history = m.history(fix.crystal.id).unwrap();
    let chain: Vec<_> = history.chain.iter().map(|c| (c.text.as_str(), c.status)).collect();
    assert_eq!(
        chain,
        vec![
            ("Dad's surgery is March 15", Status::Superseded),
            ("Wait, actually it's March 22 - I got the date wrong", Status::Active)
        ]
    );
    assert!(history.audit.iter().any(|a| a.to == "superseded" && a.why.contains("explicit correction")));
}

#[test]
fn new_value_for_the_same_subject_and_attribute_supersedes_at_0_7_and_logs_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let keyed =
        |text: &str| NewMemory { subject: Some("dad".into()), attribute: Some("surgery".into()), ..memory(text) };
    let old = m.add(keyed("Dad's surgery is March 15"), "user", NOW).unwrap();
    let new = m.add(keyed("Dad's surgery is March 29"), "user", NOW + 1).unwrap();
    assert_eq!(new.decision, Decision::Update { target: old.crystal.id, confidence: 0.7 });
    assert_eq!(m.get(old.crystal.id).unwrap().status, Status::Superseded);
    let audit = m.history(new.crystal.id).unwrap().audit;
    assert!(audit.iter().any(|a| a.why.starts_with("conflict")), "{audit:?}");
}

#[test]
fn saying_the_same_thing_again_reinforces_it() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let first = m.add(memory("Alice likes crows"), "user", NOW).unwrap();
    let again = m.add(memory("Alice likes crows"), "user", NOW + DAY).unwrap();
    assert_eq!(again.decision, Decision::Noop { target: first.crystal.id });
    let c = m.get(first.crystal.id).unwrap();
    assert!((c.confidence - (first.crystal.confidence + 0.05)).abs() < 1e-9);
    assert_eq!(c.last_access, NOW + DAY, "the decay clock restarts");
}

#[test]
fn everything_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = {
        let m = open(dir.path());
        let old = m.add(memory("Dad's surgery is March 15"), "user", NOW).unwrap();
        let new = m.add(memory("actually, it's March 22"), "user", NOW + 1).unwrap();
        (old.crystal.id, new.crystal.id)
    };
    let m = open(dir.path());
    assert_eq!(m.get(old).unwrap().status, Status::Superseded);
    assert_eq!(m.get(new).unwrap().supersedes, Some(old));
    assert_eq!(search(&m, "surgery").first().map(String::as_str), Some("actually, it's March 22"));
}

#[test]
fn opening_reserves_the_first_window_of_ids_before_any_memory_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = crate::testing::database(&dir.path().join("db"));
    let bound = || {
        let stored = crate::open_keyspace(&db).unwrap().get(crate::engine::IDS).unwrap();
        stored.map(|bytes| u64::from_be_bytes(bytes[..].try_into().unwrap()))
    };
    let open = || Memory::open(&db, &dir.path().join("index"), Config::default(), Arc::new(Hashing::new(384)), NOW);
    assert_eq!(bound(), None, "a new store holds no id bound");
    let first = open().unwrap();
    let reserved = bound().expect("the engine reserved ids as it opened");
    let id = first.add(memory("the first note"), "user", NOW).unwrap().crystal.id;
    assert!(id < reserved, "the first memory takes an id of the window reserved at open: {id} < {reserved}");
    assert_eq!(bound(), Some(reserved), "storing it reserved nothing more");
    drop(first);
    let _second = open().unwrap();
    assert!(bound().unwrap() > reserved, "a reopening reserves the window past the last one");
}

#[test]
fn ids_handed_out_before_a_restart_are_never_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let m = open(dir.path());
        let a = m.add(memory("the first note"), "user", NOW).unwrap().crystal.id;
        let b = m.add(memory("a second, unrelated entry about gardening"), "user", NOW).unwrap().crystal.id;
        assert!(b > a, "ids rise: {a} then {b}");
        b
    };
    let m = open(dir.path());
    let after = m.add(memory("a third one, after the restart, on sailing"), "user", NOW).unwrap().crystal.id;
    assert!(after > first, "an id after a restart is above every earlier one: {after} after {first}");
    assert_eq!(m.get(first).unwrap().text, "a second, unrelated entry about gardening");
    assert_eq!(m.history(after).unwrap().audit.len(), 1, "its audit entry is its own");
}

#[test]
fn ttl_crystal_expires_at_consolidation_then_is_purged() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let new = NewMemory { lifespan: Lifespan::Ttl, ttl_ms: Some(DAY), ..memory("parking spot is B12") };
    let id = m.add(new, "user", NOW).unwrap().crystal.id;
    assert_eq!(m.consolidate(NOW + DAY - 1).unwrap().expired, 0);
    assert_eq!(m.consolidate(NOW + DAY).unwrap().expired, 1);
    assert_eq!(m.get(id).unwrap().lifecycle, Lifecycle::Expired);
    assert!(search(&m, "parking").is_empty());
    assert_eq!(m.consolidate(NOW + DAY + 1).unwrap().purged, 1);
    assert!(m.get(id).is_none());
    assert!(m.history(id).is_err());
}

#[test]
fn forgotten_crystals_expire_but_skills_and_permanent_ones_never_do() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let plain = m.add(memory("the cafe was busy"), "user", NOW).unwrap().crystal.id;
    let skill = NewMemory {
        semantic_type: druse_protocol::body::SemanticType::Skill,
        ..memory("retry failed calls with exponential backoff")
    };
    let skill = m.add(skill, "user", NOW).unwrap().crystal.id;
    let permanent = NewMemory { lifespan: Lifespan::Permanent, ..memory("Alice was born in Lisbon") };
    let permanent = m.add(permanent, "user", NOW).unwrap().crystal.id;
    // With seed 004's rate (about 16 days), 0.095 falls below 0.02 after about 36 days.
    let report = m.consolidate(NOW + 60 * DAY).unwrap();
    assert_eq!(report.expired, 1);
    assert_eq!(m.get(plain).unwrap().lifecycle, Lifecycle::Expired);
    assert_eq!(m.get(skill).unwrap().lifecycle, Lifecycle::Frozen);
    assert_eq!(m.get(permanent).unwrap().lifecycle, Lifecycle::Generated);
}

#[test]
fn overlapping_promoted_crystals_merge_into_the_more_important_one() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let kind = |text: &str| NewMemory { kind: MemoryKind::Interaction, ..memory(text) };
    let a = m.add(kind("deploy the api with blue green switching"), "user", NOW).unwrap().crystal.id;
    let b = m.add(kind("deploy the api with blue green switching!"), "user", NOW).unwrap().crystal.id;
    let c = m.add(kind("crows remember faces"), "user", NOW).unwrap().crystal.id;
    accessed(&m, &[(a, 40), (b, 20), (c, 40)]);
    let report = m.consolidate(NOW).unwrap();
    assert_eq!(report.merged, 1);
    assert_eq!(m.get(a).unwrap().lifecycle, Lifecycle::Consolidated);
    let loser = m.get(b).unwrap();
    assert_eq!((loser.lifecycle, loser.parent_id), (Lifecycle::Archived, Some(a)));
    assert_ne!(m.get(c).unwrap().lifecycle, Lifecycle::Archived);
    let audit = m.history(b).unwrap().audit;
    assert!(audit.iter().any(|e| e.to == "archived" && e.why.contains(&format!("merged into {a}"))));
}

#[test]
fn overlapping_promoted_crystals_of_different_users_never_merge() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let of = |user: &str| NewMemory {
        kind: MemoryKind::Interaction,
        namespace: Namespace::User(user.into()),
        ..memory("deploy the api with blue green switching")
    };
    let a = m.add(of("alice"), "user", NOW).unwrap().crystal.id;
    let b = m.add(of("bob"), "user", NOW).unwrap().crystal.id;
    accessed(&m, &[(a, 40), (b, 40)]);
    assert_eq!(m.consolidate(NOW).unwrap().merged, 0);
    assert!([a, b].iter().all(|id| m.get(*id).unwrap().lifecycle != Lifecycle::Archived));
}

#[test]
fn importance_is_refreshed_by_a_pass_and_recomputed_when_the_engine_opens() {
    let dir = tempfile::tempdir().unwrap();
    let later = NOW + 10 * DAY;
    let (id, before, refreshed) = {
        let m = open(dir.path());
        let id = m.add(memory("the cafe was busy"), "user", NOW).unwrap().crystal.id;
        let before = m.get(id).unwrap().importance;
        m.consolidate(later).unwrap();
        (id, before, m.get(id).unwrap().importance)
    };
    assert!(before - refreshed > 0.01, "ten days of decay: {before} → {refreshed}");
    let m = open_at(dir.path(), later);
    assert!((m.get(id).unwrap().importance - refreshed).abs() < 1e-9);
}

#[test]
fn stress_raises_the_merge_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let calm = m.consolidate(NOW).unwrap().merge_threshold;
    m.set_network_cortisol(0.9);
    let stressed = m.consolidate(NOW).unwrap().merge_threshold;
    assert!((stressed - (0.92 + 0.9 * 0.03)).abs() < 1e-9 && stressed > calm, "{calm} → {stressed}");
}

#[test]
fn recall_respects_scope_and_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    m.add(memory("Alice's favourite bird is the crow"), "user", NOW).unwrap();
    let public = NewMemory { scope: Scope::Public, ..memory("crows are corvids") };
    m.add(public, "user", NOW).unwrap();
    let bob = NewMemory { namespace: Namespace::User("bob".into()), ..memory("Bob's favourite bird is the crow") };
    m.add(bob, "user", NOW).unwrap();
    let query = Query { q: "crow".into(), k: 10, ..Query::default() };
    let anyone: Vec<_> = m.search(&query, Caller::Anyone, NOW).unwrap().into_iter().map(|h| h.crystal.text).collect();
    assert_eq!(anyone, vec!["crows are corvids"]);
    let alice = Query { namespace: Some(Namespace::User("alice".into())), ..query };
    let hits = m.search(&alice, Caller::LocalAgent, NOW).unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.crystal.namespace == Namespace::User("alice".into())));
}

#[test]
fn bad_input_is_a_clear_error_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    assert!(m.add(memory("   "), "user", NOW).is_err());
    assert!(m.add(memory(&"x".repeat(20_000)), "user", NOW).is_err());
    let ttl_without_ttl = NewMemory { lifespan: Lifespan::Ttl, ..memory("x") };
    assert!(m.add(ttl_without_ttl, "user", NOW).is_err());
    assert!(m.counts().is_empty() && m.is_empty());
}

#[test]
fn a_workflow_retrieves_filters_augments_and_stores() {
    use crate::workflow::Workflow;
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let turn = |text: &str| NewMemory { kind: MemoryKind::Interaction, ..memory(text) };
    let crows = m.add(turn("Alice likes crows"), "user", NOW).unwrap().crystal.id;
    m.add(turn("Alice likes crow documentaries"), "user", NOW).unwrap();
    let out = Workflow::new(&m)
        .retrieve(Query { q: "crows".into(), k: 10, ..Query::default() })
        .filter(|c| c.id == crows)
        .augment(|mut c| {
            c.curiosity_boost += 0.25;
            c.text = "cannot be rewritten".into();
            c
        })
        .store()
        .execute(Caller::LocalAgent, NOW)
        .unwrap();
    assert_eq!(out.iter().map(|c| c.id).collect::<Vec<_>>(), vec![crows]);
    let stored = m.get(crows).unwrap();
    assert_eq!(stored.curiosity_boost, 0.25);
    assert_eq!(stored.text, "Alice likes crows");
    assert_eq!(stored.access_count, 1, "the recall it started from still counts");
    assert!(m.history(crows).unwrap().audit.iter().any(|a| a.why == "augmented"));
}

#[test]
fn a_lost_text_index_is_rebuilt_and_recall_still_finds_the_correction() {
    let dir = tempfile::tempdir().unwrap();
    {
        let m = open(dir.path());
        m.add(memory("Dad's surgery is March 15"), "user", NOW).unwrap();
        m.add(memory("actually, it's March 22"), "user", NOW + 1).unwrap();
    }
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let m = open(dir.path());
    // "surgery" appears only in the superseded text: the rebuilt document carries it as context.
    assert_eq!(search(&m, "surgery").first().map(String::as_str), Some("actually, it's March 22"));
}

fn turn(text: &str, session: &str, at: u64) -> NewMemory {
    NewMemory { kind: MemoryKind::Interaction, session: Some(session.into()), turn_at: Some(at), ..memory(text) }
}

/// The hits for `q` that matched through BM25 (with what they were indexed with).
fn text_matches(m: &Memory, q: &str) -> Vec<String> {
    let query = Query { q: q.into(), k: 10, ..Query::default() };
    let hits = m.peek(&query, Caller::LocalAgent, NOW + DAY).unwrap();
    hits.into_iter().filter(|h| h.text_rank.is_some()).map(|h| h.crystal.text).collect()
}

#[test]
fn a_turn_is_found_by_the_turn_before_it_even_when_that_was_stored_before_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let m = open(dir.path());
        m.add(turn("which hotel should we book in Alfama", "trip", NOW), "user", NOW).unwrap();
        m.add(turn("the crows were loud today", "other", NOW + 1), "user", NOW + 1).unwrap();
    }
    let m = open(dir.path());
    m.add(turn("Casa do Largo, eight minutes from the cathedral", "trip", NOW + 2), "user", NOW + 2).unwrap();
    let found = text_matches(&m, "hotel");
    assert!(found.contains(&"Casa do Largo, eight minutes from the cathedral".to_owned()), "{found:?}");
    assert!(!text_matches(&m, "crows").contains(&"Casa do Largo, eight minutes from the cathedral".to_owned()));
}

#[test]
fn with_context_indexing_off_a_turn_is_found_by_its_own_words_only() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    assert!(m.context_indexing(), "on by default");
    m.set_context_indexing(false);
    m.add(turn("which hotel should we book in Alfama", "trip", NOW), "user", NOW).unwrap();
    m.add(turn("Casa do Largo, eight minutes from the cathedral", "trip", NOW + 2), "user", NOW + 2).unwrap();
    assert_eq!(text_matches(&m, "hotel"), vec!["which hotel should we book in Alfama"]);
    assert!(text_matches(&m, "2026").is_empty(), "the date is context too");
}

#[test]
fn peek_returns_what_search_would_and_leaves_no_access_behind() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let id = m.add(memory("Alice likes crows"), "user", NOW).unwrap().crystal.id;
    let query = Query { q: "crows".into(), k: 5, ..Query::default() };
    let peeked: Vec<_> =
        m.peek(&query, Caller::LocalAgent, NOW + DAY).unwrap().into_iter().map(|h| h.crystal.id).collect();
    assert_eq!(m.get(id).unwrap().access_count, 0);
    let searched: Vec<_> =
        m.search(&query, Caller::LocalAgent, NOW + DAY).unwrap().into_iter().map(|h| h.crystal.id).collect();
    assert_eq!(peeked, searched);
    assert_eq!(m.get(id).unwrap().access_count, 1);
}

#[test]
fn add_many_reconciles_each_memory_against_those_before_it_and_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let added = m
        .add_many(
            vec![
                memory("Dad's surgery is March 15"),
                memory("Wait, actually it's March 22"),
                memory("Alice likes crows"),
            ],
            "user",
            NOW,
        )
        .unwrap();
    assert_eq!(added[1].decision, Decision::Update { target: added[0].crystal.id, confidence: 1.0 });
    assert_eq!(m.get(added[0].crystal.id).unwrap().status, Status::Superseded);
    assert_eq!(search(&m, "surgery").first().map(String::as_str), Some("Wait, actually it's March 22"));
    // The superseded crystal is kept beside the one that replaced it.
    assert_eq!(m.len(), 3);
    drop(m);
    let m = open(dir.path());
    assert_eq!(m.len(), 3);
    assert_eq!(search(&m, "crows").first().map(String::as_str), Some("Alice likes crows"));
}

#[test]
fn add_many_over_several_chunks_reconciles_across_them_in_order() {
    // Three chunks of the engine's batch. On a pool's thread (as the memory worker runs it),
    // each is analysed while the one before is written; elsewhere one after the other.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for on_pool in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let m = open(dir.path());
        let mut news: Vec<NewMemory> =
            (0..600).map(|n| memory(&format!("note {n}: item {n} sits on shelf {n}"))).collect();
        news[100] = memory("Dad's surgery is March 15");
        news[300] = memory("Wait, actually it's March 22");
        news[550] = memory("Alice likes crows");
        let added = match on_pool {
            true => pool.install(|| m.add_many(news, "user", NOW)).unwrap(),
            false => m.add_many(news, "user", NOW).unwrap(),
        };
        stored_across_chunks(&m, &added);
    }
}

fn stored_across_chunks(m: &Memory, added: &[Added]) {
    assert_eq!(added.len(), 600);
    assert_eq!(added[300].decision, Decision::Update { target: added[100].crystal.id, confidence: 1.0 });
    assert!(added.windows(2).all(|w| w[0].crystal.id < w[1].crystal.id), "stored in the order given");
    assert_eq!(added[427].crystal.text, "note 427: item 427 sits on shelf 427");
    assert_eq!(m.len(), 600);
    assert_eq!(search(m, "surgery").first().map(String::as_str), Some("Wait, actually it's March 22"));
    assert_eq!(search(m, "crows").first().map(String::as_str), Some("Alice likes crows"));
}

#[test]
fn add_many_stores_nothing_when_one_memory_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    assert!(m.add_many(vec![memory("Alice likes crows"), memory("  ")], "user", NOW).is_err());
    assert!(m.counts().is_empty());
}

#[test]
fn an_archived_crystal_stays_out_of_the_vector_index_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let text = "deploy the api with blue green switching";
    let loser = {
        let m = open(dir.path());
        let kind = |text: &str| NewMemory { kind: MemoryKind::Interaction, ..memory(text) };
        let a = m.add(kind(text), "user", NOW).unwrap().crystal.id;
        let b = m.add(kind("deploy the api with blue green switching!"), "user", NOW).unwrap().crystal.id;
        accessed(&m, &[(a, 40), (b, 20)]);
        assert_eq!(m.consolidate(NOW).unwrap().merged, 1);
        assert!(!m.vector_hits(text, 10).unwrap().iter().any(|(id, _)| *id == b));
        b
    };
    let m = open(dir.path());
    assert_eq!(m.get(loser).unwrap().lifecycle, Lifecycle::Archived);
    assert!(!m.vector_hits(text, 10).unwrap().iter().any(|(id, _)| *id == loser));
}

#[test]
fn a_skill_from_a_peer_is_stored_with_its_peer_in_one_audited_write() {
    use crate::skills::SkillMemory;
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let skill = SkillMemory {
        id: druse_protocol::ContentId::of(b"backoff"),
        name: "backoff",
        text: "retry failed calls with exponential backoff",
        semantic_type: druse_protocol::body::SemanticType::Skill,
        peer: Some("12D3KooWpeer".into()),
    };
    let id = m.add_skills(vec![skill], NOW).pop().unwrap().unwrap();
    let c = m.get(id).unwrap();
    assert_eq!((c.origin, c.governance.peer_origin.as_deref()), (Origin::Peer, Some("12D3KooWpeer")));
    assert_eq!(c.namespace, Namespace::Swarm, "a peer's skill is kept apart from the agent's own memories");
    assert_eq!(c.text, "backoff: retry failed calls with exponential backoff");
    let audit = m.history(id).unwrap().audit;
    assert_eq!(
        audit.iter().map(|e| (e.who.as_str(), e.why.as_str())).collect::<Vec<_>>(),
        [("peer:12D3KooWpeer", "created")]
    );
}

#[test]
fn skills_added_in_one_batch_are_each_stored_and_one_refused_skill_holds_up_none() {
    use crate::skills::SkillMemory;
    let dir = tempfile::tempdir().unwrap();
    let too_long = "x".repeat(crate::engine::MAX_TEXT + 1);
    let texts = ["retry failed calls with exponential backoff", too_long.as_str(), "parse ISO dates in any zone"];
    let skills = texts
        .iter()
        .enumerate()
        .map(|(n, text)| SkillMemory {
            id: druse_protocol::ContentId::of(text.as_bytes()),
            name: ["backoff", "huge", "dates"][n],
            text,
            semantic_type: druse_protocol::body::SemanticType::Skill,
            peer: (n != 2).then(|| format!("12D3KooWpeer{n}")),
        })
        .collect();
    let ids = {
        let m = open(dir.path());
        let results = m.add_skills(skills, NOW);
        assert_eq!(results.len(), 3);
        assert!(matches!(results[1], Err(Error::Invalid(_))), "{:?}", results[1]);
        let ids: Vec<CrystalId> = [&results[0], &results[2]].iter().map(|r| *r.as_ref().unwrap()).collect();
        let first = m.get(ids[0]).unwrap();
        assert_eq!((first.origin, first.governance.peer_origin.as_deref()), (Origin::Peer, Some("12D3KooWpeer0")));
        assert_eq!(m.get(ids[1]).unwrap().origin, Origin::Skill);
        ids
    };
    // Durable and searchable by text after a reopen.
    let m = open(dir.path());
    let expected = ["backoff: retry failed calls with exponential backoff", "dates: parse ISO dates in any zone"];
    for ((id, words), text) in ids.iter().zip(["exponential backoff", "ISO dates"]).zip(expected) {
        assert_eq!(m.get(*id).unwrap().text, text);
        assert!(search(&m, words).iter().any(|t| t == text), "{words} did not recall {text}");
    }
}

#[test]
fn a_skill_keeps_its_one_crystal_through_repeats_and_a_reopen() {
    use crate::skills::SkillMemory;
    use druse_protocol::ContentId;
    let dir = tempfile::tempdir().unwrap();
    let (backoff, dates) = (ContentId::of(b"backoff"), ContentId::of(b"dates"));
    let skill = |id, name, text| SkillMemory {
        id,
        name,
        text,
        semantic_type: druse_protocol::body::SemanticType::Skill,
        peer: None,
    };
    let first = {
        let m = open(dir.path());
        assert_eq!(m.skill_crystal(&backoff), None);
        let results = m.add_skills(
            vec![
                skill(backoff, "backoff", "retry failed calls with exponential backoff"),
                skill(backoff, "backoff", "retry failed calls with exponential backoff"),
            ],
            NOW,
        );
        let ids: Vec<CrystalId> = results.into_iter().map(Result::unwrap).collect();
        assert_eq!(ids[0], ids[1], "a skill twice in one batch is stored once");
        assert_eq!(m.len(), 1);
        assert_eq!(m.skill_crystal(&backoff), Some(ids[0]));
        assert_eq!(m.get(ids[0]).unwrap().skill, Some(backoff));
        ids[0]
    };
    let m = open(dir.path());
    assert_eq!(m.skill_crystal(&backoff), Some(first), "the link is stored with the crystal");
    let again = m.add_skills(
        vec![
            skill(dates, "dates", "parse ISO dates in any zone"),
            skill(backoff, "backoff", "retry failed calls with exponential backoff"),
        ],
        NOW + 1,
    );
    let dated = *again[0].as_ref().unwrap();
    assert_eq!(*again[1].as_ref().unwrap(), first, "a skill already held is not stored again");
    assert_eq!((m.len(), m.skill_crystal(&dates)), (2, Some(dated)));
}

#[test]
fn change_keeps_a_crystals_identity_and_state_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let id = m.add(memory("Alice likes crows"), "user", NOW).unwrap().crystal.id;
    let changed = m
        .change(id, "market", NOW + 1, "bounty match: curiosity boost", |c| {
            c.curiosity_boost = 0.5;
            c.text = "cannot be rewritten".into();
            c.lifecycle = Lifecycle::Archived;
            c.status = Status::Superseded;
        })
        .unwrap();
    let stored = m.get(id).unwrap();
    assert_eq!(changed.curiosity_boost, 0.5);
    assert_eq!(
        (stored.curiosity_boost, stored.text.as_str(), stored.lifecycle, stored.status),
        (0.5, "Alice likes crows", Lifecycle::Generated, Status::Active)
    );
    let audit = m.history(id).unwrap().audit;
    assert!(audit.iter().any(|e| e.who == "market" && e.why == "bounty match: curiosity boost" && e.from == e.to));
    assert!(matches!(m.change(id + 1000, "market", NOW, "none", |_| {}), Err(Error::NotFound(_))));
}

#[test]
fn a_workflow_without_store_returns_its_augments_and_writes_nothing() {
    use crate::workflow::Workflow;
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path());
    let crows = m.add(memory("Alice likes crows"), "user", NOW).unwrap().crystal.id;
    let out = Workflow::new(&m)
        .retrieve(Query { q: "crows".into(), k: 10, ..Query::default() })
        .augment(|mut c| {
            c.curiosity_boost = 0.75;
            c
        })
        .execute(Caller::LocalAgent, NOW)
        .unwrap();
    assert_eq!(out.iter().map(|c| (c.id, c.curiosity_boost)).collect::<Vec<_>>(), vec![(crows, 0.75)]);
    assert_eq!(m.get(crows).unwrap().curiosity_boost, 0.0);
    assert!(!m.history(crows).unwrap().audit.iter().any(|e| e.why == "augmented"));
}

#[test]
fn a_restart_reads_the_vector_graphs_back_and_the_store_still_decides() {
    // More memories than one segment holds (8192 vectors), each of four made-up words, and two
    // near copies that consolidation merges once the graph holds both.
    let syllables = ["ka", "lo", "mi", "re", "su", "ta", "ne", "po", "vi", "da", "go", "hu"];
    let word = |k: usize| (0..5).map(|d| syllables[(k / 12usize.pow(d)) % 12]).collect::<String>();
    let text = |i: usize| (0..4).map(|j| word(i * 4 + j)).collect::<Vec<_>>().join(" ");
    let copy = "deploy the api with blue green switching";
    let dir = tempfile::tempdir().unwrap();
    let (loser, answers) = {
        let m = open(dir.path());
        let kind = |text: &str| NewMemory { kind: MemoryKind::Interaction, ..memory(text) };
        let mut news: Vec<NewMemory> = (0..9000).map(|i| memory(&text(i))).collect();
        news.insert(100, kind(copy));
        news.insert(200, kind(&format!("{copy}!")));
        let added = m.add_many(news, "user", NOW).unwrap();
        let (a, b) = (added[100].crystal.id, added[200].crystal.id);
        assert!(m.wait_indexed(std::time::Duration::from_secs(300)));
        assert_eq!(m.vector_stats().segments.len(), 1, "{:?}", m.vector_stats());
        accessed(&m, &[(a, 40), (b, 20)]);
        assert_eq!(m.consolidate(NOW).unwrap().merged, 1);
        let answers: Vec<_> = (0..9000).step_by(450).map(|i| m.vector_hits(&text(i), 5).unwrap()).collect();
        m.flush().unwrap();
        (b, answers)
    };
    let m = open(dir.path());
    assert_eq!(m.get(loser).unwrap().lifecycle, Lifecycle::Archived);
    let stats = m.vector_stats();
    assert_eq!((stats.live, stats.tail, stats.segments.len(), stats.builds), (9001, 810, 1, 0), "{stats:?}");
    assert_eq!(stats.segments[0].dead, 1, "the archived memory's vector is dead in the graph read back");
    // The same answers; the tail's vectors come back from the store's 16 bits, so scores may
    // move in the fourth decimal.
    for (i, before) in (0..9000).step_by(450).zip(answers) {
        let after = m.vector_hits(&text(i), 5).unwrap();
        let ids = |hits: &[(CrystalId, f32)]| hits.iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(ids(&after), ids(&before), "query {i}");
        assert!(after.iter().zip(&before).all(|(a, b)| (a.1 - b.1).abs() < 1e-3), "{after:?} vs {before:?}");
    }
    assert!(m.vector_hits(copy, 10).unwrap().iter().all(|&(id, _)| id != loser));
    assert!(m.wait_indexed(std::time::Duration::from_secs(60)));
    assert_eq!(m.vector_stats().builds, 0, "nothing needed building");
}
