//! The node's durable ingest state: skills, peers, small named state records (weather, seqs),
//! the market's records and the signed envelopes anti-entropy serves to peers. Records are
//! JSON so an operator can read them with any tool; envelopes are kept as the exact bytes
//! signed.
//!
//! These tables live in fjall 3, an LSM tree: a commit appends one batch to its journal and
//! inserts into memtables, and sorted runs are written and merged by fjall's own threads. Its
//! keyspaces replaced sled trees for this state because ingestion writes three random keys a
//! message, and sled 0.34 rewrote whole 16-entry leaves on every split and every tenth change:
//! about 27 KB written a listing against 7 KB of records, and most of the ingest actor's time
//! (see `tests/README.md`, "Ingest"). Everything the node keeps is in this one database
//! ([`Store::database`]): these tables, the memory engine's keyspace and the agent's. A data
//! directory of an earlier version (fjall 2 and sled, or only sled) is moved into it on its
//! first open ([`Store::open`], `store/migrate.rs`); fjall 2 and sled are kept only to read
//! it.
//!
//! Ingestion is the one writer, through [`Writes`]: what a batch of messages changes is read
//! back by the later messages of the batch and then committed in one fjall batch over every
//! keyspace it touched, so a message's writes land all together or not at all, and readers
//! (which read at the last committed batch) never see half of one. A committed batch is in the
//! operating system's hands at once, so it survives `kill -9`; [`Store::flush`] makes it
//! survive a power cut, and every write the API acknowledges is flushed first.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable, UserKey, UserValue};

use druse_protocol::sync::{self, Key};
use druse_protocol::{ContentId, Kind};
use serde::{Serialize, de::DeserializeOwned};

mod migrate;

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store.
    #[error("store: {0}")]
    Engine(#[from] fjall::Error),
    /// Moving the data directory of an earlier version into the store.
    #[error("moving an earlier version's data into the store: {0}")]
    Migrate(#[from] migrate::Error),
    #[error("record {key} is corrupt: {source}")]
    Corrupt { key: String, source: serde_json::Error },
    #[error("encoding a record: {0}")]
    Encode(serde_json::Error),
    #[error("the batch this write belonged to could not be committed")]
    NotCommitted,
}

/// One keyspace of JSON records; cheap to clone. Readers read it at the last committed batch;
/// only [`Store::commit`] writes it.
#[derive(Clone)]
pub struct Table {
    keyspace: Keyspace,
    db: Database,
    /// Its place in [`Store::tables`], which names it in [`Writes`].
    index: usize,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &&**self.keyspace.name()).field("index", &self.index).finish()
    }
}

/// A table as one committed batch left it.
struct View<'a> {
    snapshot: fjall::Snapshot,
    keyspace: &'a Keyspace,
}

type Entry = Result<(UserKey, UserValue), fjall::Error>;

impl View<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<UserValue>, fjall::Error> {
        self.snapshot.get(self.keyspace, key)
    }

    fn contains_key(&self, key: &[u8]) -> Result<bool, fjall::Error> {
        self.snapshot.contains_key(self.keyspace, key)
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = Entry> + use<> {
        self.snapshot.iter(self.keyspace).map(fjall::Guard::into_inner)
    }

    fn prefix(&self, prefix: &[u8]) -> impl Iterator<Item = Entry> + use<> {
        self.snapshot.prefix(self.keyspace, prefix).map(fjall::Guard::into_inner)
    }

    fn after(&self, start: Bound<Vec<u8>>) -> impl Iterator<Item = Entry> + use<> {
        self.snapshot.range::<Vec<u8>, _>(self.keyspace, (start, Bound::Unbounded)).map(fjall::Guard::into_inner)
    }

    fn len(&self) -> Result<usize, fjall::Error> {
        self.snapshot.len(self.keyspace)
    }

    fn is_empty(&self) -> Result<bool, fjall::Error> {
        self.snapshot.is_empty(self.keyspace)
    }
}

impl Table {
    /// The table as the last committed batch left it: a batch being committed is not half seen.
    fn view(&self) -> View<'_> {
        View { snapshot: self.db.snapshot(), keyspace: &self.keyspace }
    }

    /// Reads the record under `key`.
    pub fn get<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, Error> {
        self.view().get(key)?.map(|b| decode(key, &b)).transpose()
    }

    /// Every record with its key, in key order.
    pub fn iter<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<(Vec<u8>, T), Error>> + '_ {
        self.view().iter().map(|entry| {
            let (key, value) = entry?;
            Ok((key.to_vec(), decode(&key, &value)?))
        })
    }

    /// The last `n` records, newest key first.
    pub fn last<T: DeserializeOwned>(&self, n: usize) -> Result<Vec<T>, Error> {
        self.view()
            .iter()
            .rev()
            .take(n)
            .map(|entry| {
                let (key, value) = entry?;
                decode(&key, &value)
            })
            .collect()
    }

    /// How many records there are (walks the table).
    pub fn len(&self) -> Result<usize, Error> {
        Ok(self.view().len()?)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.view().is_empty()?)
    }
}

/// Handle to the open database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Database,
    /// Every keyspace below, in `Table::index` order, for commits.
    tables: Vec<Keyspace>,
    pub(crate) skills: Table,
    pub(crate) peers: Table,
    pub(crate) state: Table,
    /// Per skill: what signed reports say (executions, adopters, bounty matches).
    pub market: Table,
    /// Open bounties by id, with their matches and claims.
    pub bounties: Table,
    /// Per author and stable skill id: every version known.
    pub versions: Table,
    /// The credit ledger, append-only, keyed by a big-endian sequence.
    pub ledger: Table,
    /// Every signed message the node applied, as received, by `sync::Key`: what anti-entropy
    /// offers peers (only the weather in force is kept of its kind). Raw bytes, not JSON.
    pub(crate) envelopes: Table,
}

/// The tables, by name: the order of [`Store`]'s fields, and the names earlier versions gave
/// their fjall 2 partitions and, before that, their sled trees.
const TABLES: [&str; 8] = ["skills", "peers", "state", "market", "bounties", "versions", "ledger", "envelopes"];

// fjall 2 also capped every memtable together (`max_write_buffer_size`, 128 MiB here: writers
// waited 100 ms at a time once 90% of it was taken, about 18,000 listings ahead of the
// flushes). fjall 3.1 keeps the option only as a hidden, deprecated setter that nothing reads;
// what holds writers back now is per keyspace: a writer waits 100 ms at a time while a keyspace
// has four sealed memtables not yet flushed, and is slowed, then halted, at 20 and 30 sorted
// runs in its first level. So at most about five memtables of a busy keyspace are in memory.

/// A keyspace's memtable is sealed and flushed to a sorted run at this size (fjall 3 keeps it
/// with the keyspace when it is created; its default is 64 MiB, fjall 2's was 16 MiB). Smaller
/// ones flushed more often, each flush taking the CPU from ingestion: in single swarm-bench
/// runs on the 2-core development machine, on fjall 2, a 20,000-listing flood was stored at 31%
/// of the raw verify rate with 8 MiB memtables, 50% with 16 MiB and 59–66% with 32 MiB.
const MEMTABLE: u64 = 32 << 20;

/// Journals kept on disk (fjall's default, in 2 and 3 alike): what a restart replays, at most.
/// fjall 2 made writers wait 500 ms once 90% of it was taken (at 64 MiB a flood of 20,000
/// listings stalled indexing for a second); fjall 3 does not wait on it, but once the journals
/// reach it, it seals the memtables that keep the oldest journal alive so it can be dropped.
const JOURNALS: u64 = 512 << 20;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("tables", &TABLES).finish_non_exhaustive()
    }
}

fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes)
        .map_err(|source| Error::Corrupt { key: String::from_utf8_lossy(key).into_owned(), source })
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(Error::Encode)
}

impl Store {
    /// Opens (or creates) the store at `store`, with `cache_bytes` of block cache. A data
    /// directory of an earlier version is moved into it first, once: a fjall 2 store at
    /// `store`, and the sled database at `sled` (the agent's state, or in older versions
    /// everything); see `store/migrate.rs`. sled is opened only if `sled` holds a database.
    pub fn open(store: &Path, sled: &Path, cache_bytes: u64) -> Result<Self, Error> {
        let open = |path: &Path| open_database(path, cache_bytes);
        let owners = migrate::Owners {
            open: &open,
            keyspace: &open_for_migration,
            memory: druse_memory::KEYSPACE,
            memory_ids: druse_memory::engine::IDS,
        };
        migrate::run(store, sled, &owners)?;
        let db = open(store)?;
        let mut tables = Vec::with_capacity(TABLES.len());
        for name in TABLES {
            tables.push(open_table(&db, name)?);
        }
        let table = |index: usize| Table { keyspace: tables[index].clone(), db: db.clone(), index };
        Ok(Self {
            skills: table(0),
            peers: table(1),
            state: table(2),
            market: table(3),
            bounties: table(4),
            versions: table(5),
            ledger: table(6),
            envelopes: table(7),
            tables,
            db,
        })
    }

    /// [`Store::open`] of a data directory `dir` laid out as the node's (`store`, and `db` for
    /// an earlier version's sled database), for tests.
    #[cfg(test)]
    pub(crate) fn open_in(dir: &Path) -> Result<Self, Error> {
        Self::open(&dir.join("store"), &dir.join("db"), 4 << 20)
    }

    /// The store's database, where the memory engine and the agent keep their keyspaces.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Makes every write so far durable, off the async threads.
    pub async fn flush(&self) -> Result<(), Error> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.flush_blocking())
            .await
            .map_err(|error| Error::Engine(fjall::Error::Io(std::io::Error::other(error))))?
    }

    /// Makes every write so far durable, from blocking code.
    pub fn flush_blocking(&self) -> Result<(), Error> {
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    /// Reads a skill record.
    pub fn skill<T: DeserializeOwned>(&self, id: &ContentId) -> Result<Option<T>, Error> {
        self.skills.get(id.digest())
    }

    /// Every skill record, in content-id order.
    pub fn skills<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<T, Error>> + '_ {
        self.skills.iter().map(|entry| entry.map(|(_, value)| value))
    }

    /// The skill records whose id passes `wanted`, in content-id order; the others are not
    /// decoded.
    pub fn skills_where<'a, T: DeserializeOwned>(
        &'a self,
        wanted: impl Fn(&ContentId) -> bool + 'a,
    ) -> impl Iterator<Item = Result<T, Error>> + 'a {
        self.skills.view().iter().filter_map(move |entry| {
            let (key, value) = match entry {
                Ok(entry) => entry,
                Err(error) => return Some(Err(error.into())),
            };
            // A key that is no digest is decoded, so a corrupt record is reported.
            let id = <[u8; 32]>::try_from(key.as_ref()).ok().map(ContentId::from_digest);
            match id {
                Some(id) if !wanted(&id) => None,
                _ => Some(decode(&key, &value)),
            }
        })
    }

    /// How many skills are stored (walks the table).
    pub fn skill_count(&self) -> Result<usize, Error> {
        self.skills.len()
    }

    /// Reads a named state record.
    pub fn state<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, Error> {
        self.state.get(key.as_bytes())
    }

    /// Writes a named state record at once: only for a record that one writer outside
    /// ingestion owns (the management role's seq), which no message's writes touch.
    pub fn put_state<T: Serialize>(&self, key: &str, value: &T) -> Result<(), Error> {
        self.state.keyspace.insert(key.as_bytes(), encode(value)?)?;
        Ok(())
    }

    /// Commits `writes` in one batch over the tables they touch, and empties them. On an
    /// error nothing of them is written. The batch is handed to the operating system before
    /// this returns.
    pub fn commit(&self, writes: &mut Writes) -> Result<(), Error> {
        if writes.ops.is_empty() {
            return Ok(());
        }
        // Buffer: the batch is written to the journal file before this returns (survives the
        // process, not a power cut); `flush` syncs it.
        let mut batch = self.db.batch().durability(Some(PersistMode::Buffer));
        for ((index, key), value) in writes.ops.drain() {
            let table = &self.tables[index];
            match value {
                Some(value) => batch.insert(table, key, value),
                None => batch.remove(table, key),
            }
        }
        batch.commit()?;
        Ok(())
    }

    /// Keeps a signed message for anti-entropy, in `writes`. Weather replaces the one kept
    /// before it (committed: a batch commits before it applies weather).
    pub fn keep_envelope(&self, writes: &mut Writes, key: &Key, bytes: &[u8]) -> Result<(), Error> {
        if key.kind() == Kind::Weather {
            for old in self.envelopes.view().prefix(&Key::prefix(Kind::Weather)) {
                writes.remove(&self.envelopes, &old?.0);
            }
        }
        writes.put_raw(&self.envelopes, key.as_bytes(), bytes.to_vec());
        Ok(())
    }

    /// Whether a signed message is kept.
    pub fn has_envelope(&self, key: &Key) -> Result<bool, Error> {
        Ok(self.envelopes.view().contains_key(key.as_bytes())?)
    }

    /// Whether a signed message is kept, or about to be in `writes`.
    pub fn keeps_envelope(&self, writes: &Writes, key: &Key) -> Result<bool, Error> {
        writes.contains(&self.envelopes, key.as_bytes())
    }

    /// A kept signed message's bytes.
    pub fn envelope(&self, key: &Key) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.envelopes.view().get(key.as_bytes())?.map(|b| b.to_vec()))
    }

    /// The kept weather envelope (the weather in force, or the last one applied), if any.
    pub fn weather_envelope(&self) -> Result<Option<(Key, Vec<u8>)>, Error> {
        let Some((key, bytes)) = self.envelopes.view().prefix(&Key::prefix(Kind::Weather)).next().transpose()? else {
            return Ok(None);
        };
        // Only `keep_envelope` writes the table, always under a well-formed key.
        Ok(Key::from_bytes(&key).map(|key| (key, bytes.to_vec())))
    }

    /// Up to `n` keys of kept messages after `after` (from the first without it), and whether
    /// more follow.
    pub fn envelope_keys(&self, after: Option<&Key>, n: usize) -> Result<(Vec<Key>, bool), Error> {
        let view = self.envelopes.view();
        let start = match after {
            Some(after) => Bound::Excluded(after.as_bytes().to_vec()),
            None => Bound::Unbounded,
        };
        let mut keys = Vec::with_capacity(n.min(sync::PAGE));
        for entry in view.after(start) {
            let (key, _) = entry?;
            if keys.len() == n {
                return Ok((keys, true));
            }
            // Only this module writes the table, always under a well-formed key.
            if let Some(key) = Key::from_bytes(&key) {
                keys.push(key);
            }
        }
        Ok((keys, false))
    }

    /// Reads a peer record.
    pub fn peer<T: DeserializeOwned>(&self, peer: &[u8]) -> Result<Option<T>, Error> {
        self.peers.get(peer)
    }

    /// Every peer record with its key.
    pub fn peers<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<(Vec<u8>, T), Error>> + '_ {
        self.peers.iter()
    }
}

/// Opens (or creates) a database at `path` as the node's store does, with `cache_bytes` of
/// block cache: for the memory engine on its own (benchmarks, tests).
pub fn open_database(path: &Path, cache_bytes: u64) -> Result<Database, fjall::Error> {
    // fjall's flush and compaction workers: one per core up to four, or the node's pool size
    // when a process of many nodes set it (`druse_memory::background::set_pool_threads`).
    let workers = druse_memory::background::pool_threads().min(4);
    Database::builder(path)
        .cache_size(cache_bytes.max(1 << 20))
        .max_journaling_size(JOURNALS)
        .worker_threads(workers.max(1))
        .open()
}

/// Opens (or creates) a keyspace of the store with the store's memtable size: a table, or the
/// agent's keyspace.
pub(crate) fn open_table(db: &Database, name: &str) -> Result<Keyspace, fjall::Error> {
    db.keyspace(name, || KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE))
}

/// Creates a keyspace an earlier version's data is moved into as its owner would: the memory
/// engine's with its options, every other one as a table.
fn open_for_migration(db: &Database, name: &str) -> Result<Keyspace, fjall::Error> {
    match name {
        druse_memory::KEYSPACE => druse_memory::open_keyspace(db),
        _ => open_table(db, name),
    }
}

/// Writes not yet committed: what a batch of messages changes, read back by the later messages
/// of the batch (reads look here first, then in the store), then committed by
/// [`Store::commit`] all at once. The last write to a key wins. Only the one writer reads
/// through it, so it reads the tables as they are, with no snapshot.
#[derive(Debug, Default)]
pub struct Writes {
    ops: HashMap<(usize, Vec<u8>), Option<Vec<u8>>>,
}

impl Writes {
    /// Whether nothing waits to be committed.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Forgets every write (the batch failed, or is rolled back).
    pub fn clear(&mut self) {
        self.ops.clear();
    }

    /// Whether a record is under `key`, as this batch leaves it.
    pub fn contains(&self, table: &Table, key: &[u8]) -> Result<bool, Error> {
        match self.ops.get(&(table.index, key.to_vec())) {
            Some(value) => Ok(value.is_some()),
            None => Ok(table.keyspace.contains_key(key)?),
        }
    }

    fn put_raw(&mut self, table: &Table, key: &[u8], value: Vec<u8>) {
        self.ops.insert((table.index, key.to_vec()), Some(value));
    }

    /// Reads the record under `key`, as this batch leaves it (decoded in place, not copied).
    pub fn get<T: DeserializeOwned>(&self, table: &Table, key: &[u8]) -> Result<Option<T>, Error> {
        match self.ops.get(&(table.index, key.to_vec())) {
            Some(value) => value.as_deref().map(|b| decode(key, b)).transpose(),
            None => table.keyspace.get(key)?.map(|b| decode(key, &b)).transpose(),
        }
    }

    /// Writes the record under `key`.
    pub fn put<T: Serialize>(&mut self, table: &Table, key: &[u8], value: &T) -> Result<(), Error> {
        self.put_raw(table, key, encode(value)?);
        Ok(())
    }

    /// Writes the record unless one is there; false (and nothing written) if it was.
    pub fn insert_new<T: Serialize>(&mut self, table: &Table, key: &[u8], value: &T) -> Result<bool, Error> {
        if self.contains(table, key)? {
            return Ok(false);
        }
        self.put(table, key, value)?;
        Ok(true)
    }

    /// Rewrites the record through `change`; `None` (and nothing written) if there is none.
    pub fn update<T, F>(&mut self, table: &Table, key: &[u8], change: F) -> Result<Option<T>, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(&mut T),
    {
        let Some(mut value) = self.get::<T>(table, key)? else { return Ok(None) };
        change(&mut value);
        self.put(table, key, &value)?;
        Ok(Some(value))
    }

    /// Like `update`, starting from `T::default()` when there is no record.
    pub fn upsert<T, F>(&mut self, table: &Table, key: &[u8], change: F) -> Result<T, Error>
    where
        T: Serialize + DeserializeOwned + Default,
        F: FnOnce(&mut T),
    {
        let mut value = self.get::<T>(table, key)?.unwrap_or_default();
        change(&mut value);
        self.put(table, key, &value)?;
        Ok(value)
    }

    /// Removes the record under `key`.
    pub fn remove(&mut self, table: &Table, key: &[u8]) {
        self.ops.insert((table.index, key.to_vec()), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let id = ContentId::of(b"skill");
        {
            let store = Store::open_in(dir.path()).unwrap();
            let mut writes = Writes::default();
            assert!(writes.insert_new(&store.skills, id.digest(), &"first".to_string()).unwrap());
            assert!(!writes.insert_new(&store.skills, id.digest(), &"second".to_string()).unwrap(), "kept");
            writes.put(&store.state, b"weather", &42u64).unwrap();
            store.commit(&mut writes).unwrap();
            assert!(writes.is_empty(), "a commit empties the writes");
            store.flush_blocking().unwrap();
        }
        let store = Store::open_in(dir.path()).unwrap();
        assert_eq!(store.skill::<String>(&id).unwrap().as_deref(), Some("first"));
        assert_eq!(store.state::<u64>("weather").unwrap(), Some(42));
    }

    /// The journal is synced outside its writer lock (vendor/fjall): batches committed while
    /// other threads sync all land, and what was synced reads back after the store reopens.
    #[test]
    fn batches_committed_while_other_threads_sync_all_read_back_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let (threads, batches) = (4u8, 200u16);
        {
            let store = Store::open_in(dir.path()).unwrap();
            std::thread::scope(|scope| {
                for thread in 0..threads {
                    let store = &store;
                    scope.spawn(move || {
                        for n in 0..batches {
                            let mut writes = Writes::default();
                            writes.put(&store.market, &[&[thread][..], &n.to_be_bytes()].concat(), &n).unwrap();
                            store.commit(&mut writes).unwrap();
                            // Half the threads sync after every batch, as memory adds do.
                            if thread % 2 == 0 {
                                store.flush_blocking().unwrap();
                            }
                        }
                    });
                }
            });
            store.flush_blocking().unwrap();
        }
        let store = Store::open_in(dir.path()).unwrap();
        for thread in 0..threads {
            for n in 0..batches {
                let key = [&[thread][..], &n.to_be_bytes()].concat();
                assert_eq!(store.market.get::<u16>(&key).unwrap(), Some(n), "thread {thread}, batch {n}");
            }
        }
    }

    #[test]
    fn writes_are_read_back_before_they_commit_and_seen_by_others_only_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let id = ContentId::of(b"skill");
        let mut writes = Writes::default();
        assert_eq!(writes.update::<u64, _>(&store.skills, id.digest(), |v| *v += 1).unwrap(), None);
        writes.put(&store.skills, id.digest(), &1u64).unwrap();
        assert_eq!(writes.update::<u64, _>(&store.skills, id.digest(), |v| *v += 1).unwrap(), Some(2));
        assert_eq!(writes.upsert::<u64, _>(&store.market, b"m", |v| *v += 5).unwrap(), 5);
        assert_eq!(store.skill::<u64>(&id).unwrap(), None, "nothing is visible before the commit");
        assert_eq!(store.market.get::<u64>(b"m").unwrap(), None);
        store.commit(&mut writes).unwrap();
        assert_eq!(store.skill::<u64>(&id).unwrap(), Some(2));
        assert_eq!(store.market.get::<u64>(b"m").unwrap(), Some(5));

        writes.remove(&store.market, b"m");
        assert_eq!(writes.get::<u64>(&store.market, b"m").unwrap(), None, "a removal is read back");
        writes.clear();
        store.commit(&mut writes).unwrap();
        assert_eq!(store.market.get::<u64>(b"m").unwrap(), Some(5), "cleared writes never land");
    }

    #[test]
    fn kept_envelopes_page_in_key_order_and_weather_keeps_only_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let key = |kind, n: u8| Key::new(kind, &ContentId::of(&[n]));
        let mut writes = Writes::default();
        for n in 0..5 {
            store.keep_envelope(&mut writes, &key(Kind::Crystal, n), &[n]).unwrap();
        }
        assert!(store.keeps_envelope(&writes, &key(Kind::Crystal, 1)).unwrap(), "read back before the commit");
        assert!(!store.has_envelope(&key(Kind::Crystal, 1)).unwrap(), "not kept before the commit");
        store.keep_envelope(&mut writes, &key(Kind::Weather, 1), b"old weather").unwrap();
        store.commit(&mut writes).unwrap();
        store.keep_envelope(&mut writes, &key(Kind::Weather, 2), b"new weather").unwrap();
        store.commit(&mut writes).unwrap();
        assert!(!store.has_envelope(&key(Kind::Weather, 1)).unwrap(), "the older weather is dropped");
        let (kept, bytes) = store.weather_envelope().unwrap().unwrap();
        assert_eq!((kept, bytes.as_slice()), (key(Kind::Weather, 2), &b"new weather"[..]));

        let (first, more) = store.envelope_keys(None, 4).unwrap();
        assert_eq!((first.len(), more), (4, true));
        let (rest, more) = store.envelope_keys(first.last(), 4).unwrap();
        assert_eq!((rest.len(), more), (2, false), "one crystal and the weather");
        assert_eq!(rest.last().map(Key::kind), Some(Kind::Weather), "weather sorts last");
        assert_eq!(store.envelope(&key(Kind::Crystal, 3)).unwrap(), Some(vec![3]));
    }

    #[test]
    fn skills_where_decodes_only_the_wanted_records_and_reports_a_corrupt_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let ids: Vec<ContentId> = (0..4u8).map(|n| ContentId::of(&[n])).collect();
        for (n, id) in ids.iter().enumerate() {
            store.skills.keyspace.insert(id.digest(), serde_json::to_vec(&(n as u64)).unwrap()).unwrap();
        }
        // A record that does not decode is skipped when unwanted, and reported when wanted.
        let corrupt = ContentId::of(b"corrupt");
        store.skills.keyspace.insert(corrupt.digest(), b"{not json".to_vec()).unwrap();
        let wanted = |id: &ContentId| *id == ids[1] || *id == ids[3];
        let mut found: Vec<u64> = store.skills_where(wanted).collect::<Result<_, _>>().unwrap();
        found.sort_unstable();
        assert_eq!(found, vec![1, 3]);
        let err = store.skills_where::<u64>(|id| *id == corrupt).find_map(Result::err).expect("reported");
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        // A key that is no digest cannot be asked about: it is decoded, so it is not missed.
        store.skills.keyspace.insert(b"short", serde_json::to_vec(&9u64).unwrap()).unwrap();
        let found: Vec<u64> = store.skills_where(|_| false).collect::<Result<_, _>>().unwrap();
        assert_eq!(found, vec![9]);
    }

    #[test]
    fn corrupt_record_is_a_clear_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        store.state.keyspace.insert("weather", b"{not json".to_vec()).unwrap();
        let err = store.state::<u64>("weather").unwrap_err();
        assert!(err.to_string().contains("weather"), "{err}");
    }
}
