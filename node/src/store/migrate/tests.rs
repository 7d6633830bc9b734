//! Data directories as earlier versions wrote them, written here with the engines they used
//! (fjall 2 and sled) and the same keys and values, opened by the store.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use druse_memory::Memory;
use druse_memory::embed::Hashing;
use druse_memory::engine::{Config as MemoryConfig, NewMemory};
use druse_protocol::sync::Key;
use druse_protocol::{ContentId, Kind};

use crate::store::{Store, Writes};
use druse_agent::rules::{Gate, Gated};
use druse_agent::schedule::Schedule;
use druse_agent::state::{self, AgentState};

const NOW: u64 = 1_795_305_600_000;

type Records = BTreeMap<Vec<u8>, Vec<u8>>;

/// What a data directory of an earlier version held, by keyspace.
#[derive(Debug, Default)]
struct Old {
    keyspaces: BTreeMap<String, Records>,
    /// The crystal the memory engine stored, and its text.
    crystal: (u64, String),
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// The ingest tables as `Store` and `Writes` encode them: JSON records (the ledger under a
/// big-endian sequence), kept envelopes as raw bytes under their `sync::Key`.
fn ingest_tables() -> BTreeMap<String, Records> {
    let skill = ContentId::of(b"skill");
    let mut tables: BTreeMap<String, Records> = BTreeMap::new();
    let mut put = |table: &str, key: &[u8], value: Vec<u8>| {
        tables.entry(table.to_owned()).or_default().insert(key.to_vec(), value);
    };
    put("skills", skill.digest(), json(&serde_json::json!({"name": "old skill", "version": 1})));
    put("peers", b"12D3KooWpeer", json(&serde_json::json!({"score": 3})));
    put("state", b"weather", json(&7u64));
    put("state", b"mgmt_seq", json(&41u64));
    put("market", skill.digest(), json(&serde_json::json!({"executions": 2})));
    put("bounties", b"b-1", json(&serde_json::json!({"reward": 10})));
    put("versions", b"author/skill", json(&vec![skill.to_string()]));
    put("ledger", &1u64.to_be_bytes(), json(&serde_json::json!({"amount": -5})));
    put("envelopes", Key::new(Kind::Crystal, &skill).as_bytes(), b"signed bytes".to_vec());
    put("envelopes", Key::new(Kind::Weather, &ContentId::of(b"w")).as_bytes(), b"weather bytes".to_vec());
    tables
}

/// The memory engine's records, written by the engine itself (its encoding is not this
/// change's) into a scratch database, with one crystal and its id bound.
fn memory_records(scratch: &Path) -> (Records, (u64, String)) {
    let db = crate::store::open_database(scratch, 4 << 20).unwrap();
    let text = "the parcel locker code is 4417".to_owned();
    let memory =
        Memory::open(&db, &scratch.join("index"), MemoryConfig::default(), Arc::new(Hashing::new(384)), NOW).unwrap();
    let id = memory.add(NewMemory::text(text.clone()), "user", NOW).unwrap().crystal.id;
    memory.flush().unwrap();
    drop(memory);
    let keyspace = druse_memory::open_keyspace(&db).unwrap();
    let records: Records = keyspace
        .iter()
        .map(|entry| {
            let (k, v) = entry.into_inner().unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    assert!(records.contains_key(druse_memory::engine::IDS), "the engine keeps its id bound");
    (records, (id, text))
}

/// The agent's tree as `agent::state` wrote it in sled.
fn agent_records() -> Records {
    let mut gate = Gate::default();
    gate.open(
        "at://owner/request".into(),
        Gated::Post { text: "hello".into() },
        Vec::new(),
        NOW,
        Duration::from_secs(3600),
    );
    let schedule = Schedule { mused_at: NOW - 5, reflected_day: 20_000, ..Schedule::default() };
    [
        (b"h/at://a#mention".to_vec(), NOW.to_be_bytes().to_vec()),
        (b"c/did:plc:x".to_vec(), vec![1]),
        (b"gate".to_vec(), json(&gate)),
        (b"schedule".to_vec(), json(&schedule)),
        (b"s/search > reply".to_vec(), 3u64.to_be_bytes().to_vec()),
        (b"p/12".to_vec(), b"search > reply".to_vec()),
        (b"u/search > reply".to_vec(), b"bafy-skill".to_vec()),
    ]
    .into_iter()
    .collect()
}

/// A data directory as the last version left it: the ingest tables and the memory engine's
/// partition in a fjall 2 store at `store`, the agent's tree in sled at `db`.
fn last_version(dir: &Path) -> Old {
    let scratch = tempfile::tempdir().unwrap();
    let (memory, crystal) = memory_records(scratch.path());
    let mut old = Old { keyspaces: ingest_tables(), crystal };
    old.keyspaces.insert(druse_memory::KEYSPACE.into(), memory);
    {
        let keyspace = fjall2::Config::new(dir.join("store")).open().unwrap();
        for (name, records) in &old.keyspaces {
            let partition = keyspace
                .open_partition(name, fjall2::PartitionCreateOptions::default().max_memtable_size(32 << 20))
                .unwrap();
            for (k, v) in records {
                partition.insert(k.clone(), v.clone()).unwrap();
            }
        }
        keyspace.persist(fjall2::PersistMode::SyncAll).unwrap();
    }
    {
        let db = sled::Config::new().path(dir.join("db")).cache_capacity(8 << 20).open().unwrap();
        let tree = db.open_tree(state::KEYSPACE).unwrap();
        for (k, v) in agent_records() {
            tree.insert(k, v).unwrap();
        }
        db.flush().unwrap();
    }
    old.keyspaces.insert(state::KEYSPACE.into(), agent_records());
    old
}

/// Every record of the old directory is in the store, byte for byte, and reads back through
/// its owner: the store's tables, the memory engine, the agent's state.
fn check_moved(dir: &Path, store: &Store, old: &Old) {
    let db = store.database();
    for (name, records) in &old.keyspaces {
        let keyspace = db.keyspace(name, fjall::KeyspaceCreateOptions::default).unwrap();
        for (k, v) in records {
            let got = keyspace.get(k).unwrap();
            assert_eq!(got.as_deref(), Some(&v[..]), "{name}: {}", String::from_utf8_lossy(k));
        }
        assert_eq!(keyspace.len().unwrap(), records.len(), "{name} has no other records");
    }
    // Through the store's own readers.
    let skill = ContentId::of(b"skill");
    let record: serde_json::Value = store.skill(&skill).unwrap().unwrap();
    assert_eq!(record["name"], "old skill");
    assert_eq!(store.state::<u64>("weather").unwrap(), Some(7));
    assert_eq!(store.envelope(&Key::new(Kind::Crystal, &skill)).unwrap().as_deref(), Some(&b"signed bytes"[..]));
    assert_eq!(store.weather_envelope().unwrap().map(|(_, b)| b), Some(b"weather bytes".to_vec()));
    assert_eq!(store.ledger.len().unwrap(), 1);
    // Through the agent's.
    let agent = AgentState::open(db, crate::store::open_table(db, state::KEYSPACE).unwrap()).unwrap();
    assert!(agent.handled("at://a#mention") && !agent.handled("at://b#mention"));
    assert!(agent.consented("did:plc:x"));
    assert_eq!(agent.gate().pending().map(|r| r.post.as_str()).collect::<Vec<_>>(), ["at://owner/request"]);
    assert_eq!(agent.schedule().mused_at, NOW - 5);
    // Through the memory engine, whose ids go on above the bound it kept.
    let memory =
        Memory::open(db, &dir.join("index"), MemoryConfig::default(), Arc::new(Hashing::new(384)), NOW).unwrap();
    let (id, text) = &old.crystal;
    assert_eq!(memory.get(*id).map(|c| c.text), Some(text.clone()));
    let next = memory.add(NewMemory::text("a later memory"), "user", NOW).unwrap().crystal.id;
    assert!(next > *id, "{next} after {id}");
}

/// The directory holds the new store and nothing of the old data.
fn check_switched(dir: &Path) {
    assert_eq!(super::fjall_format(&dir.join("store")).unwrap(), Some(3));
    for gone in ["db", "store.fjall2", "store.migrating"] {
        assert!(!dir.join(gone).exists(), "{gone} is removed");
    }
}

#[test]
fn a_data_directory_of_the_last_version_moves_into_the_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let old = last_version(dir.path());
    {
        let store = Store::open_in(dir.path()).unwrap();
        check_switched(dir.path());
        check_moved(dir.path(), &store, &old);
        // A newer write, not synced: a committed batch is the operating system's already.
        let mut writes = Writes::default();
        writes.put(&store.state, b"weather", &8u64).unwrap();
        store.commit(&mut writes).unwrap();
    }
    let store = Store::open_in(dir.path()).unwrap();
    assert_eq!(store.state::<u64>("weather").unwrap(), Some(8), "the move is not done again over newer records");
    assert_eq!(store.state::<u64>("mgmt_seq").unwrap(), Some(41));
}

#[test]
fn a_move_interrupted_before_the_switch_runs_again_from_the_untouched_old_data() {
    let dir = tempfile::tempdir().unwrap();
    let old = last_version(dir.path());
    // As a crash left it: the fjall 2 store set aside, the new database half written (a record
    // of it wrong, one that is in no old keyspace), no switch.
    std::fs::rename(dir.path().join("store"), dir.path().join("store.fjall2")).unwrap();
    {
        let half = crate::store::open_database(&dir.path().join("store.migrating"), 4 << 20).unwrap();
        let state = crate::store::open_table(&half, "state").unwrap();
        state.insert("weather", json(&99u64)).unwrap();
        state.insert("half", json(&1u64)).unwrap();
        half.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let store = Store::open_in(dir.path()).unwrap();
    check_switched(dir.path());
    check_moved(dir.path(), &store, &old);
    assert_eq!(store.state::<u64>("half").unwrap(), None, "nothing of the half-written database is kept");
}

#[test]
fn old_data_a_crash_left_beside_a_finished_move_is_removed_not_moved_again() {
    let dir = tempfile::tempdir().unwrap();
    let old = last_version(dir.path());
    // Kept aside to stand for the old data a crash after the switch left behind.
    let copy = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .args(["-a", "store", "db"])
        .arg(copy.path())
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    drop(Store::open_in(dir.path()).unwrap());
    std::fs::rename(copy.path().join("store"), dir.path().join("store.fjall2")).unwrap();
    std::fs::rename(copy.path().join("db"), dir.path().join("db")).unwrap();
    {
        let store = Store::open_in(dir.path()).unwrap();
        let mut writes = Writes::default();
        writes.put(&store.state, b"weather", &8u64).unwrap();
        store.commit(&mut writes).unwrap();
    }
    let store = Store::open_in(dir.path()).unwrap();
    check_switched(dir.path());
    assert_eq!(store.state::<u64>("weather").unwrap(), Some(8));
    let db = store.database();
    let agent = AgentState::open(db, crate::store::open_table(db, state::KEYSPACE).unwrap()).unwrap();
    assert!(agent.handled("at://a#mention"));
    drop(old);
}

#[test]
fn a_data_directory_of_an_older_version_all_in_sled_moves_into_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let id = ContentId::of(b"skill");
    let envelope = Key::new(Kind::Crystal, &id);
    let handed_out = {
        // Every table a sled tree, the memory engine's too, with ids sled's counter handed out.
        let db = sled::open(dir.path().join("db")).unwrap();
        db.open_tree("skills").unwrap().insert(id.digest(), json(&"old skill")).unwrap();
        db.open_tree("state").unwrap().insert("weather", json(&7u64)).unwrap();
        db.open_tree("envelopes").unwrap().insert(envelope.as_bytes(), b"signed".to_vec()).unwrap();
        db.open_tree("memory").unwrap().insert("crystal", b"moved".to_vec()).unwrap();
        let handed_out = db.generate_id().unwrap();
        db.open_tree("agent").unwrap().insert("c/did:plc:x", vec![1]).unwrap();
        db.flush().unwrap();
        handed_out
    };
    let store = Store::open_in(dir.path()).unwrap();
    check_switched(dir.path());
    assert_eq!(store.skill::<String>(&id).unwrap().as_deref(), Some("old skill"));
    assert_eq!(store.state::<u64>("weather").unwrap(), Some(7));
    assert_eq!(store.envelope(&envelope).unwrap().as_deref(), Some(&b"signed"[..]));
    let db = store.database();
    assert!(
        AgentState::open(db, crate::store::open_table(db, state::KEYSPACE).unwrap()).unwrap().consented("did:plc:x")
    );
    let memory = druse_memory::open_keyspace(store.database()).unwrap();
    assert_eq!(memory.get("crystal").unwrap().as_deref(), Some(&b"moved"[..]));
    let bound = memory.get(druse_memory::engine::IDS).unwrap().expect("the id bound is set");
    let bound = u64::from_be_bytes(bound[..].try_into().unwrap());
    assert!(bound > handed_out, "ids go on above sled's: {bound} after {handed_out}");
}

#[test]
fn a_fresh_data_directory_opens_without_sled() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open_in(dir.path()).unwrap();
        let mut writes = Writes::default();
        writes.put(&store.state, b"weather", &1u64).unwrap();
        store.commit(&mut writes).unwrap();
    }
    assert_eq!(Store::open_in(dir.path()).unwrap().state::<u64>("weather").unwrap(), Some(1));
    assert!(!dir.path().join("db").exists(), "no sled database is made");
    check_switched(dir.path());
}
