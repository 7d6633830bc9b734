//! What the agent keeps across restarts, in the store's database (keyspace `agent`): the
//! notifications it has handled (so none is answered twice), who consented to be tagged,
//! the pending approval requests, what its schedule remembers, and how often each tool
//! sequence succeeded.
//!
//! Every write is one fjall batch (a prune of many records lands whole or not at all) and
//! blocks on the journal, so the agent runs them off the async threads. A write is in the
//! operating system's hands when it returns, so it survives the process being killed; those
//! the agent must not lose to a power cut before it acts are synced too: a handled mark (or a
//! restart answers the notification again) and the gate a like changed before the approved
//! action runs. The journal is one log, so a sync takes every earlier write with it: a
//! notification's consent, counted sequence or schedule change is durable once the
//! notification is marked handled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use druse_protocol::UnixMillis;
use fjall::{Database, Keyspace, PersistMode};

use super::rules::Gate;
use super::schedule::Schedule;

/// The agent's keyspace in the store's database (and the name of its sled tree in the
/// versions that kept it there).
pub(crate) const KEYSPACE: &str = "agent";

const HANDLED: &[u8] = b"h/";
const CONSENT: &[u8] = b"c/";
const SEQUENCE: &[u8] = b"s/";
const GATE: &[u8] = b"gate";
const PATTERN: &[u8] = b"p/";
const PUBLISHED: &[u8] = b"u/";
const SCHEDULE: &[u8] = b"schedule";

/// Handled notifications are forgotten after this long (they are long out of the feed).
const HANDLED_KEEP_MS: u64 = 14 * 24 * 3600 * 1000;

/// The agent's persistent state; cheap to clone.
#[derive(Clone)]
pub(crate) struct AgentState {
    db: Database,
    tree: Keyspace,
    /// Stamps copies of a record in the order they are taken.
    stamps: Arc<AtomicU64>,
    /// Held by every write, so a count is read and written as one step; the stamp of the last
    /// copy written of each whole record (the gate, the schedule).
    written: Arc<Mutex<HashMap<&'static [u8], u64>>>,
}

impl std::fmt::Debug for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentState").field("keyspace", &KEYSPACE).finish_non_exhaustive()
    }
}

/// A copy of a whole record (the gate, the schedule) taken under the lock of what it copies,
/// to be written later off the async threads. A copy taken earlier than the one last written
/// is not written: the record never goes back.
#[derive(Debug)]
pub(crate) struct Copy {
    key: &'static [u8],
    stamp: u64,
    bytes: Vec<u8>,
}

fn key(prefix: &[u8], rest: &str) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(rest.as_bytes());
    k
}

fn count(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_be_bytes)
}

impl AgentState {
    /// Opens (or creates) the agent's keyspace in the store's database; blocks.
    pub(crate) fn open(db: &Database) -> Result<Self, fjall::Error> {
        Ok(Self {
            db: db.clone(),
            tree: crate::store::open_table(db, KEYSPACE)?,
            stamps: Arc::new(AtomicU64::new(0)),
            written: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<&'static [u8], u64>> {
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A batch of this state's writes: in the journal when it commits, not yet synced.
    fn batch(&self) -> fjall::OwnedWriteBatch {
        self.db.batch().durability(Some(PersistMode::Buffer))
    }

    fn put(&self, k: &[u8], value: &[u8]) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        batch.insert(&self.tree, k, value);
        batch.commit()
    }

    /// Syncs every write so far (of the whole database: the journal is one log).
    pub(crate) fn sync(&self) -> Result<(), fjall::Error> {
        self.db.persist(PersistMode::SyncAll)
    }

    /// Whether the notification `uri` (with its reason) was handled before.
    pub(crate) fn handled(&self, id: &str) -> bool {
        self.tree.contains_key(key(HANDLED, id)).unwrap_or(false)
    }

    /// Records that `id` was handled, synced (a restart must not answer it again); blocks.
    pub(crate) fn mark_handled(&self, id: &str, now: UnixMillis) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(&self.tree, key(HANDLED, id), now.to_be_bytes());
        batch.commit()
    }

    /// Forgets handled notifications older than two weeks, in one batch; returns how many.
    pub(crate) fn prune(&self, now: UnixMillis) -> Result<usize, fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        for entry in self.tree.prefix(HANDLED) {
            let (k, v) = entry.into_inner()?;
            if count(&v).is_some_and(|at| now.saturating_sub(at) > HANDLED_KEEP_MS) {
                batch.remove(&self.tree, k);
            }
        }
        let pruned = batch.len();
        batch.commit()?;
        Ok(pruned)
    }

    /// Whether `did` consented to be tagged.
    pub(crate) fn consented(&self, did: &str) -> bool {
        self.tree.contains_key(key(CONSENT, did)).unwrap_or(false)
    }

    /// Records that `did` consented to be tagged, or withdrew; blocks.
    pub(crate) fn set_consent(&self, did: &str, yes: bool) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        match yes {
            true => batch.insert(&self.tree, key(CONSENT, did), [1u8]),
            false => batch.remove(&self.tree, key(CONSENT, did)),
        }
        batch.commit()
    }

    /// The pending approval requests.
    pub(crate) fn gate(&self) -> Gate {
        self.tree.get(GATE).ok().flatten().and_then(|v| serde_json::from_slice(&v).ok()).unwrap_or_default()
    }

    /// A copy of the gate to write with [`AgentState::save`]; take it under the gate's lock.
    pub(crate) fn gate_copy(&self, gate: &Gate) -> Copy {
        self.copy(GATE, serde_json::to_vec(gate).unwrap_or_default())
    }

    /// What the schedule of the entry points remembers.
    pub(crate) fn schedule(&self) -> Schedule {
        self.tree.get(SCHEDULE).ok().flatten().and_then(|v| serde_json::from_slice(&v).ok()).unwrap_or_default()
    }

    /// A copy of the schedule to write with [`AgentState::save`]; take it under the
    /// schedule's lock.
    pub(crate) fn schedule_copy(&self, schedule: &Schedule) -> Copy {
        self.copy(SCHEDULE, serde_json::to_vec(schedule).unwrap_or_default())
    }

    fn copy(&self, key: &'static [u8], bytes: Vec<u8>) -> Copy {
        Copy { key, stamp: self.stamps.fetch_add(1, Ordering::Relaxed), bytes }
    }

    /// Writes a copy of a whole record unless a later copy was written already, and syncs it
    /// (with every write before it) if `durable`; blocks.
    pub(crate) fn save(&self, copy: Copy, durable: bool) -> Result<(), fjall::Error> {
        let mut written = self.lock();
        if written.get(copy.key).is_none_or(|last| *last < copy.stamp) {
            let mut batch = self.batch();
            batch.insert(&self.tree, copy.key, copy.bytes);
            batch.commit()?;
            written.insert(copy.key, copy.stamp);
        }
        drop(written);
        if durable {
            self.sync()?;
        }
        Ok(())
    }

    /// Counts one more success of a tool sequence; returns the new count; blocks.
    pub(crate) fn count_sequence(&self, sequence: &str) -> Result<u64, fjall::Error> {
        let _writing = self.lock();
        let k = key(SEQUENCE, sequence);
        let next = self.tree.get(&k)?.and_then(|v| count(&v)).unwrap_or(0) + 1;
        let mut batch = self.batch();
        batch.insert(&self.tree, k, next.to_be_bytes());
        batch.commit()?;
        Ok(next)
    }

    /// How often a tool sequence succeeded so far.
    pub(crate) fn count_of(&self, sequence: &str) -> u64 {
        self.tree.get(key(SEQUENCE, sequence)).ok().flatten().and_then(|v| count(&v)).unwrap_or(0)
    }

    /// Records that the task-pattern crystal `crystal` stands for `sequence`; blocks.
    pub(crate) fn set_pattern(&self, crystal: u64, sequence: &str) -> Result<(), fjall::Error> {
        self.put(&key(PATTERN, &crystal.to_string()), sequence.as_bytes())
    }

    /// The tool sequence a task-pattern crystal stands for.
    pub(crate) fn pattern(&self, crystal: u64) -> Option<String> {
        let v = self.tree.get(key(PATTERN, &crystal.to_string())).ok()??;
        String::from_utf8(v.to_vec()).ok()
    }

    /// Records the swarm listing of a tool sequence's skill; blocks.
    pub(crate) fn set_published(&self, sequence: &str, content_id: &str) -> Result<(), fjall::Error> {
        self.put(&key(PUBLISHED, sequence), content_id.as_bytes())
    }

    /// The swarm listing of a tool sequence's skill, once published.
    pub(crate) fn published(&self, sequence: &str) -> Option<String> {
        let v = self.tree.get(key(PUBLISHED, sequence)).ok()??;
        String::from_utf8(v.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path) -> (Database, AgentState) {
        let db = crate::store::open_database(dir, 4 << 20).unwrap();
        let state = AgentState::open(&db).unwrap();
        (db, state)
    }

    #[test]
    fn state_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (_db, state) = open(dir.path());
            assert!(!state.handled("at://a#mention"));
            state.set_consent("did:plc:x", true).unwrap();
            state.set_consent("did:plc:z", true).unwrap();
            state.set_consent("did:plc:z", false).unwrap();
            assert_eq!(state.count_sequence("reply").unwrap(), 1);
            assert_eq!(state.count_sequence("reply").unwrap(), 2);
            state.set_pattern(7, "reply").unwrap();
            state.set_published("reply", "skill-id").unwrap();
            // The last write, synced: it takes every earlier one with it.
            state.mark_handled("at://a#mention", 1_000).unwrap();
        }
        let (_db, state) = open(dir.path());
        assert!(state.handled("at://a#mention"));
        assert!(state.consented("did:plc:x") && !state.consented("did:plc:y") && !state.consented("did:plc:z"));
        assert_eq!(state.count_of("reply"), 2);
        assert_eq!(state.count_sequence("reply").unwrap(), 3);
        assert_eq!(state.pattern(7).as_deref(), Some("reply"));
        assert_eq!(state.published("reply").as_deref(), Some("skill-id"));
        state.mark_handled("at://b#reply", 2_000).unwrap();
        assert_eq!(state.prune(1_000 + HANDLED_KEEP_MS).unwrap(), 0);
        assert_eq!(state.prune(1_001 + HANDLED_KEEP_MS).unwrap(), 1);
        assert!(!state.handled("at://a#mention") && state.handled("at://b#reply"));
    }

    #[test]
    fn an_earlier_copy_of_a_record_never_overwrites_a_later_one() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, state) = open(dir.path());
        let older = state.schedule_copy(&Schedule { mused_at: 1, ..Schedule::default() });
        let newer = state.schedule_copy(&Schedule { mused_at: 2, ..Schedule::default() });
        state.save(newer, false).unwrap();
        state.save(older, true).unwrap();
        assert_eq!(state.schedule().mused_at, 2);
        let gate = state.gate_copy(&Gate::default());
        state.save(gate, true).unwrap();
        assert_eq!(state.schedule().mused_at, 2, "each record has its own order");
    }
}
