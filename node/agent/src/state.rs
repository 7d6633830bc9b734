//! What the agent keeps across restarts, in the store's database (keyspace `agent`): the
//! notifications it has handled (so none is answered twice), who consented to be tagged,
//! the pending approval requests, what its schedule remembers, the runs waiting for their
//! outcome, the episodes that went well, the skills it distilled, and what it spent on the
//! swarm's skills each day.
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
use serde::{Deserialize, Serialize};

use super::outcome::Watched;
use super::rules::Gate;
use super::schedule::Schedule;

/// An episode whose run went well.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Good {
    pub(crate) reward: f64,
    pub(crate) at: UnixMillis,
}

/// A skill the agent distilled from episodes that went well.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OwnSkill {
    /// The stable id its versions share in the swarm.
    pub(crate) skill_id: String,
    pub(crate) version: u32,
    pub(crate) name: String,
    /// The episodes it was distilled from.
    pub(crate) episodes: Vec<u64>,
    /// The crystal of the version it replaces.
    #[serde(default)]
    pub(crate) replaces: Option<u64>,
    /// Why it may not leave the node (it failed the privacy scan), if so.
    #[serde(default)]
    pub(crate) private: Option<String>,
    /// Its listing's content id, once published.
    #[serde(default)]
    pub(crate) published: Option<String>,
    /// A later distill replaced it.
    #[serde(default)]
    pub(crate) superseded: bool,
}

fn json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

fn crystal_key(prefix: &[u8], crystal: u64) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&crystal.to_be_bytes());
    k
}

fn crystal_of(k: &[u8], prefix: &[u8]) -> Option<u64> {
    k.strip_prefix(prefix).and_then(count)
}

/// The agent's keyspace in the store's database (and the name of its sled tree in the
/// versions that kept it there).
pub const KEYSPACE: &str = "agent";

const HANDLED: &[u8] = b"h/";
const CONSENT: &[u8] = b"c/";
const GATE: &[u8] = b"gate";
const SCHEDULE: &[u8] = b"schedule";
/// Runs waiting for their outcome, by run id.
const RUN: &[u8] = b"r/";
/// The run of each reply the agent posted, by the reply's URI.
const REPLY: &[u8] = b"y/";
/// Episodes (exchange crystals) whose run went well, by crystal id.
const GOOD: &[u8] = b"g/";
/// The skills the agent distilled, by crystal id.
const SKILL: &[u8] = b"k/";
// `b/` held the micro-USDC spent on the swarm's skills, by UTC day, before the node's market
// kept the day's spending with its ledger (`market::desk` in druse-node); those records are
// left as they were, unread, and the prefix is not reused.
/// Posts the agent answered (seen on the account or replied to here), by URI.
const ANSWERED: &[u8] = b"a/";
/// The accounts whose history was taken as handled, by DID.
const ADOPTED: &[u8] = b"boot/";
/// The per-author limit's reply times, by author DID.
const LIMIT: &[u8] = b"l/";
/// Approval requests a stranger's messages led to, by UTC day and author DID.
const GATED: &[u8] = b"q/";
/// Set while an operator has the agent paused.
const PAUSED: &[u8] = b"paused";
/// `m/<day>`: micro-USD the model cost on that UTC day.
const MODEL_SPENT: &[u8] = b"m/";

/// Runs kept waiting for their outcome at most; the oldest closes unreported past it.
pub(crate) const MAX_RUNS: usize = 10_000;
/// Episodes that went well kept at most (the oldest are forgotten first).
pub(crate) const MAX_GOOD: usize = 10_000;

/// Handled notifications are forgotten after this long (they are long out of the feed).
const HANDLED_KEEP_MS: u64 = 14 * 24 * 3600 * 1000;

/// The agent's persistent state; cheap to clone.
#[derive(Clone)]
pub struct AgentState {
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
    /// Opens the agent's state in `tree` (the store's keyspace [`KEYSPACE`]); blocks.
    pub fn open(db: &Database, tree: Keyspace) -> Result<Self, fjall::Error> {
        Ok(Self {
            db: db.clone(),
            tree,
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

    /// Syncs every write so far (of the whole database: the journal is one log).
    pub(crate) fn sync(&self) -> Result<(), fjall::Error> {
        self.db.persist(PersistMode::SyncAll)
    }

    /// Whether the notification `uri` (with its reason) was handled before.
    pub fn handled(&self, id: &str) -> bool {
        self.tree.contains_key(key(HANDLED, id)).unwrap_or(false)
    }

    /// Records that `id` was handled, synced (a restart must not answer it again); blocks.
    pub(crate) fn mark_handled(&self, id: &str, now: UnixMillis) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(&self.tree, key(HANDLED, id), now.to_be_bytes());
        batch.commit()
    }

    /// Forgets handled notifications and answered posts older than two weeks, and the
    /// approval counts of earlier days, in one batch; returns how many.
    pub(crate) fn prune(&self, now: UnixMillis) -> Result<usize, fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        for entry in self.tree.prefix(HANDLED).chain(self.tree.prefix(ANSWERED)) {
            let (k, v) = entry.into_inner()?;
            if count(&v).is_some_and(|at| now.saturating_sub(at) > HANDLED_KEEP_MS) {
                batch.remove(&self.tree, k);
            }
        }
        let today = now / (24 * 3600 * 1000);
        for entry in self.tree.prefix(GATED) {
            let k = entry.key()?;
            if k.get(GATED.len()..GATED.len() + 8).and_then(count).is_some_and(|day| day < today) {
                batch.remove(&self.tree, k);
            }
        }
        let pruned = batch.len();
        batch.commit()?;
        Ok(pruned)
    }

    /// Whether the agent answered the post `uri` (here, or before this data directory).
    pub(crate) fn answered(&self, uri: &str) -> bool {
        self.tree.contains_key(key(ANSWERED, uri)).unwrap_or(false)
    }

    /// Whether the history of the account `did` was taken as handled in this data directory.
    pub(crate) fn adopted(&self, did: &str) -> bool {
        self.tree.contains_key(key(ADOPTED, did)).unwrap_or(false)
    }

    /// Takes an account's history as handled, in one synced batch: the posts it answered and
    /// the notifications already read, and the mark that this was done. Blocks.
    pub(crate) fn adopt(
        &self,
        did: &str,
        answered: &[String],
        read: &[String],
        now: UnixMillis,
    ) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch().durability(Some(PersistMode::SyncAll));
        for uri in answered {
            batch.insert(&self.tree, key(ANSWERED, uri), now.to_be_bytes());
        }
        for id in read {
            batch.insert(&self.tree, key(HANDLED, id), now.to_be_bytes());
        }
        batch.insert(&self.tree, key(ADOPTED, did), now.to_be_bytes());
        batch.commit()
    }

    /// Records that the agent answered `uri`, with the notification `handled` it answered,
    /// synced (a restart must not answer it again); blocks.
    pub(crate) fn mark_answered(&self, uri: &str, handled: &str, now: UnixMillis) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(&self.tree, key(ANSWERED, uri), now.to_be_bytes());
        batch.insert(&self.tree, key(HANDLED, handled), now.to_be_bytes());
        batch.commit()
    }

    /// The per-author limit's reply times of every author, as last written.
    pub(crate) fn limits(&self) -> Vec<(String, Vec<UnixMillis>)> {
        self.tree
            .prefix(LIMIT)
            .filter_map(|e| e.into_inner().ok())
            .filter_map(|(k, v)| Some((String::from_utf8(k.strip_prefix(LIMIT)?.to_vec()).ok()?, json(&v)?)))
            .collect()
    }

    /// Writes `author`'s reply times (none removes the record). Blocks.
    pub(crate) fn put_limit(&self, author: &str, times: &[UnixMillis]) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        match times.is_empty() {
            true => batch.remove(&self.tree, key(LIMIT, author)),
            false => batch.insert(&self.tree, key(LIMIT, author), to_json(&times)),
        }
        batch.commit()
    }

    /// Counts an approval request that `author`'s messages led to on UTC day `day` if fewer
    /// than `limit` were counted; returns whether it did. Read and written as one step. Blocks.
    pub(crate) fn count_gated(&self, day: u64, author: &str, limit: u32) -> Result<bool, fjall::Error> {
        let _writing = self.lock();
        let mut k = crystal_key(GATED, day);
        k.extend_from_slice(author.as_bytes());
        let counted = self.tree.get(&k)?.and_then(|v| count(&v)).unwrap_or(0);
        if counted >= u64::from(limit) {
            return Ok(false);
        }
        let mut batch = self.batch();
        batch.insert(&self.tree, k, (counted + 1).to_be_bytes());
        batch.commit()?;
        Ok(true)
    }

    /// Whether an operator left the agent paused.
    pub(crate) fn paused(&self) -> bool {
        self.tree.contains_key(PAUSED).unwrap_or(false)
    }

    /// Keeps the agent paused across restarts, or not; synced. Blocks.
    pub(crate) fn set_paused(&self, paused: bool) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch().durability(Some(PersistMode::SyncAll));
        match paused {
            true => batch.insert(&self.tree, PAUSED, [1u8]),
            false => batch.remove(&self.tree, PAUSED),
        }
        batch.commit()
    }

    /// What `did` said about being tagged: `Some(true)` yes, `Some(false)` no, `None` nothing.
    pub(crate) fn consent(&self, did: &str) -> Option<bool> {
        self.tree.get(key(CONSENT, did)).ok().flatten().map(|v| v.first() == Some(&1))
    }

    /// Whether `did` consented to be tagged.
    pub fn consented(&self, did: &str) -> bool {
        self.consent(did) == Some(true)
    }

    /// Records that `did` consented to be tagged, or refused; blocks.
    pub(crate) fn set_consent(&self, did: &str, yes: bool) -> Result<(), fjall::Error> {
        self.set_consents(&[(did.to_owned(), yes)])
    }

    /// Records many consents in one batch (read back from the agent's PDS); blocks.
    pub(crate) fn set_consents(&self, consents: &[(String, bool)]) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        for (did, yes) in consents {
            batch.insert(&self.tree, key(CONSENT, did), [u8::from(*yes)]);
        }
        batch.commit()
    }

    /// The pending approval requests.
    pub fn gate(&self) -> Gate {
        self.tree.get(GATE).ok().flatten().and_then(|v| serde_json::from_slice(&v).ok()).unwrap_or_default()
    }

    /// A copy of the gate to write with [`AgentState::save`]; take it under the gate's lock.
    pub(crate) fn gate_copy(&self, gate: &Gate) -> Copy {
        self.copy(GATE, serde_json::to_vec(gate).unwrap_or_default())
    }

    /// What the schedule of the entry points remembers.
    pub fn schedule(&self) -> Schedule {
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

    /// Keeps a run waiting for its outcome, with the index of its replies; past
    /// [`MAX_RUNS`] the oldest is dropped. Blocks.
    pub(crate) fn put_run(&self, run: &Watched) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        if !self.tree.contains_key(key(RUN, &run.id))? && self.tree.prefix(RUN).count() >= MAX_RUNS {
            let oldest =
                self.tree.prefix(RUN).filter_map(|e| e.into_inner().ok()).filter_map(|(_, v)| json::<Watched>(&v));
            if let Some(old) = oldest.min_by_key(|r| r.at) {
                tracing::info!(run = %old.id, "too many runs wait for their outcome; the oldest closes unreported");
                self.drop_run(&mut batch, &old);
            }
        }
        batch.insert(&self.tree, key(RUN, &run.id), to_json(run));
        for a in &run.answered {
            batch.insert(&self.tree, key(REPLY, &a.reply), run.id.as_bytes());
        }
        batch.commit()
    }

    fn drop_run(&self, batch: &mut fjall::OwnedWriteBatch, run: &Watched) {
        batch.remove(&self.tree, key(RUN, &run.id));
        for a in &run.answered {
            batch.remove(&self.tree, key(REPLY, &a.reply));
        }
    }

    /// The run that posted reply `uri`, if it still waits.
    pub(crate) fn run_of_reply(&self, uri: &str) -> Option<Watched> {
        let id = self.tree.get(key(REPLY, uri)).ok()??;
        json(&self.tree.get(key(RUN, std::str::from_utf8(&id).ok()?)).ok()??)
    }

    /// Every run waiting for its outcome.
    pub(crate) fn runs(&self) -> Vec<Watched> {
        self.tree.prefix(RUN).filter_map(|e| e.into_inner().ok()).filter_map(|(_, v)| json(&v)).collect()
    }

    /// Closes a run: it no longer waits, and its replies lead nowhere. Blocks.
    pub(crate) fn close_run(&self, run: &Watched) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        self.drop_run(&mut batch, run);
        batch.commit()
    }

    /// Records that `episode` went well; past [`MAX_GOOD`] the oldest is forgotten. Blocks.
    pub(crate) fn add_good(&self, episode: u64, good: &Good) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        if self.tree.prefix(GOOD).count() >= MAX_GOOD
            && let Some(Ok((k, _))) = self.tree.prefix(GOOD).next().map(|e| e.into_inner())
        {
            batch.remove(&self.tree, k);
        }
        batch.insert(&self.tree, crystal_key(GOOD, episode), to_json(good));
        batch.commit()
    }

    /// The episodes that went well, with how.
    pub(crate) fn good(&self) -> Vec<(u64, Good)> {
        self.tree
            .prefix(GOOD)
            .filter_map(|e| e.into_inner().ok())
            .filter_map(|(k, v)| Some((crystal_of(&k, GOOD)?, json(&v)?)))
            .collect()
    }

    /// Records a distilled skill (and marks the version it replaces superseded), in one
    /// batch. Blocks.
    pub(crate) fn put_skill(&self, crystal: u64, skill: &OwnSkill) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        if let Some(old) = skill.replaces
            && let Some(mut replaced) = self.skill(old)
        {
            replaced.superseded = true;
            batch.insert(&self.tree, crystal_key(SKILL, old), to_json(&replaced));
        }
        batch.insert(&self.tree, crystal_key(SKILL, crystal), to_json(skill));
        batch.commit()
    }

    /// A distilled skill, by its crystal.
    pub(crate) fn skill(&self, crystal: u64) -> Option<OwnSkill> {
        json(&self.tree.get(crystal_key(SKILL, crystal)).ok()??)
    }

    /// Every distilled skill, by crystal, oldest first.
    pub(crate) fn skills(&self) -> Vec<(u64, OwnSkill)> {
        self.tree
            .prefix(SKILL)
            .filter_map(|e| e.into_inner().ok())
            .filter_map(|(k, v)| Some((crystal_of(&k, SKILL)?, json(&v)?)))
            .collect()
    }

    /// What the model cost on UTC day `day`, in micro-USD.
    pub(crate) fn model_spent(&self, day: u64) -> u64 {
        self.tree.get(crystal_key(MODEL_SPENT, day)).ok().flatten().and_then(|v| count(&v)).unwrap_or(0)
    }

    /// Keeps `total` micro-USD as what the model cost on day `day`. Blocks.
    pub(crate) fn put_model_spent(&self, day: u64, total: u64) -> Result<(), fjall::Error> {
        let _writing = self.lock();
        let mut batch = self.batch();
        batch.insert(&self.tree, crystal_key(MODEL_SPENT, day), total.to_be_bytes());
        batch.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, at: u64, reply: &str) -> Watched {
        Watched {
            id: id.into(),
            at,
            answered: vec![super::super::outcome::Answered { reply: reply.into(), person: "did:plc:p".into() }],
            episodes: vec![],
            skill: None,
            signals: vec![],
            backed: vec![],
            last_signal_at: None,
        }
    }

    fn open(dir: &std::path::Path) -> (Database, AgentState) {
        let db = Database::builder(dir).open().unwrap();
        let state =
            AgentState::open(&db, db.keyspace(KEYSPACE, fjall::KeyspaceCreateOptions::default).unwrap()).unwrap();
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
            state.put_run(&run("r1", 5, "at://agent/1")).unwrap();
            state.put_run(&run("r2", 6, "at://agent/2")).unwrap();
            state.add_good(7, &Good { reward: 1.0, at: 5 }).unwrap();
            let skill = OwnSkill {
                skill_id: "s".into(),
                version: 1,
                name: "n".into(),
                episodes: vec![7],
                replaces: None,
                private: None,
                published: None,
                superseded: false,
            };
            state.put_skill(40, &skill).unwrap();
            state.put_skill(41, &OwnSkill { version: 2, replaces: Some(40), ..skill }).unwrap();
            // The last write, synced: it takes every earlier one with it.
            state.mark_handled("at://a#mention", 1_000).unwrap();
        }
        let (_db, state) = open(dir.path());
        assert!(state.handled("at://a#mention"));
        assert!(state.consented("did:plc:x") && !state.consented("did:plc:y") && !state.consented("did:plc:z"));
        assert_eq!(state.run_of_reply("at://agent/2").map(|r| r.id), Some("r2".into()));
        let r1 = state.run_of_reply("at://agent/1").unwrap();
        state.close_run(&r1).unwrap();
        assert_eq!(state.run_of_reply("at://agent/1"), None);
        assert_eq!(state.runs().len(), 1);
        assert_eq!(state.good().len(), 1);
        assert!(state.skill(40).unwrap().superseded, "v2 replaced it");
        assert_eq!(state.skills().len(), 2);
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
