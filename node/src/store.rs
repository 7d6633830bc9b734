//! The node's durable ingest state: skills, peers, small named state records (weather, seqs),
//! the market's records and the signed envelopes anti-entropy serves to peers. Records are
//! JSON so an operator can read them with any tool; envelopes are kept as the exact bytes
//! signed.
//!
//! These tables live in fjall, an LSM tree: a commit appends one batch to its journal and
//! inserts into memtables, and sorted runs are written and merged by fjall's own threads. Its
//! partitions replaced sled trees for this state because ingestion writes three random keys a
//! message, and sled 0.34 rewrote whole 16-entry leaves on every split and every tenth change:
//! about 27 KB written a listing against 7 KB of records, and most of the ingest actor's time
//! (see `tests/README.md`, "Ingest"). The memory engine keeps its partition in the same
//! keyspace ([`Store::keyspace`]); only the agent's small state stays in the sled database
//! beside it ([`Store::db`]). A data directory of an earlier version, with all of it in sled, is
//! moved over on its first open ([`Store::open`]).
//!
//! Ingestion is the one writer, through [`Writes`]: what a batch of messages changes is read
//! back by the later messages of the batch and then committed in one fjall batch over every
//! partition it touched, so a message's writes land all together or not at all, and readers
//! (which read at the last committed batch) never see half of one. A committed batch is in the
//! operating system's hands at once, so it survives `kill -9`; [`Store::flush`] makes it
//! survive a power cut, and every write the API acknowledges is flushed first.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;

use fjall::{PartitionCreateOptions, PartitionHandle, PersistMode};

use druse_protocol::sync::{self, Key};
use druse_protocol::{ContentId, Kind};
use serde::{Serialize, de::DeserializeOwned};

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The sled database (the memory engine's, and where earlier versions kept these tables).
    #[error("database: {0}")]
    Db(#[from] sled::Error),
    /// The ingest store.
    #[error("store: {0}")]
    Engine(#[from] fjall::Error),
    #[error("record {key} is corrupt: {source}")]
    Corrupt { key: String, source: serde_json::Error },
    #[error("encoding a record: {0}")]
    Encode(serde_json::Error),
    #[error("the batch this write belonged to could not be committed")]
    NotCommitted,
}

impl From<fjall::LsmError> for Error {
    fn from(error: fjall::LsmError) -> Self {
        Error::Engine(error.into())
    }
}

/// One partition of JSON records; cheap to clone. Readers read it at the last committed batch;
/// only [`Store::commit`] writes it.
#[derive(Clone)]
pub struct Table {
    partition: PartitionHandle,
    keyspace: fjall::Keyspace,
    /// Its place in [`Store::tables`], which names it in [`Writes`].
    index: usize,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.partition.name).field("index", &self.index).finish()
    }
}

impl Table {
    /// The table as the last committed batch left it: a batch being committed is not half seen.
    fn view(&self) -> fjall::Snapshot {
        self.partition.snapshot_at(self.keyspace.instant())
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
    /// The sled database the agent keeps its state in.
    db: sled::Db,
    keyspace: fjall::Keyspace,
    /// Every partition below, in `Table::index` order, for commits.
    tables: Vec<PartitionHandle>,
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
/// their sled trees.
const TABLES: [&str; 8] = ["skills", "peers", "state", "market", "bounties", "versions", "ledger", "envelopes"];

/// What the store holds in memtables, at most, before a writer waits for fjall's flush
/// thread (100 ms at a time, once 90% of it is taken). A listing writes about 3.5 KB in the
/// ingest tables and about as much again when the memory engine indexes it, so this is about
/// 18,000 listings ahead of the flushes.
const WRITE_BUFFER: u64 = 128 << 20;

/// A partition's memtable is sealed and flushed to a sorted run at this size. Smaller ones
/// flushed more often, each flush taking the CPU from ingestion: in single swarm-bench runs on
/// the 2-core development machine a 20,000-listing flood was stored at 31% of the raw verify
/// rate with 8 MiB memtables, 50% with 16 MiB (fjall's default) and 59–66% with 32 MiB.
const MEMTABLE: u32 = 32 << 20;

/// Journals kept on disk before writers wait for the flushes that free them (fjall's default):
/// what a restart replays, at most. Writers wait 500 ms once 90% of it is taken, so it must
/// hold a flood's writes while the memtables it covers are flushed; at 64 MiB a flood of
/// 20,000 listings stalled indexing for a second.
const JOURNALS: u64 = 512 << 20;

/// sled's page cache: it holds only the agent's state now.
const SLED_CACHE: u64 = 8 << 20;

/// Records moved from sled in one batch when a store of an earlier version is opened.
const MIGRATION_BATCH: usize = 4096;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("db", &self.db).field("tables", &TABLES).finish_non_exhaustive()
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
    /// Opens (or creates) the store at `store`, with `cache_bytes` of block cache, and the
    /// sled database at `db` (the agent's state), and moves into the store what an earlier
    /// version kept in sled: the ingest tables and the memory engine's tree.
    pub fn open(db: &Path, store: &Path, cache_bytes: u64) -> Result<Self, Error> {
        let db = sled::Config::new().path(db).cache_capacity(SLED_CACHE).open()?;
        let keyspace = open_keyspace(store, cache_bytes)?;
        let mut tables = Vec::with_capacity(TABLES.len());
        for name in TABLES {
            tables.push(open_partition(&keyspace, name)?);
        }
        migrate_from_sled(&db, &keyspace, &tables)?;
        let table = |index: usize| Table { partition: tables[index].clone(), keyspace: keyspace.clone(), index };
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
            keyspace,
            db,
        })
    }

    /// [`Store::open`] with both in `dir`, for tests.
    #[cfg(test)]
    pub(crate) fn open_in(dir: &Path) -> Result<Self, Error> {
        Self::open(&dir.join("db"), &dir.join("store"), 4 << 20)
    }

    /// The sled database, where the agent keeps its state.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// The store's keyspace, where the memory engine keeps its partition.
    pub fn keyspace(&self) -> &fjall::Keyspace {
        &self.keyspace
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
        self.keyspace.persist(PersistMode::SyncAll)?;
        self.db.flush()?;
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
        self.state.partition.insert(key.as_bytes(), encode(value)?)?;
        Ok(())
    }

    /// Commits `writes` in one batch over the tables they touch, and empties them. On an
    /// error nothing of them is written. The batch is handed to the operating system before
    /// this returns.
    pub fn commit(&self, writes: &mut Writes) -> Result<(), Error> {
        if writes.ops.is_empty() {
            return Ok(());
        }
        let mut batch = self.keyspace.batch().durability(Some(PersistMode::Buffer));
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
            for old in self.envelopes.view().prefix(Key::prefix(Kind::Weather)) {
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
        let Some((key, bytes)) = self.envelopes.view().prefix(Key::prefix(Kind::Weather)).next().transpose()? else {
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
        for entry in view.range::<Vec<u8>, _>((start, Bound::Unbounded)) {
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

/// Opens (or creates) a keyspace at `path` as the node's store does, with `cache_bytes` of
/// block cache: for the memory engine on its own (benchmarks, tests).
pub fn open_keyspace(path: &Path, cache_bytes: u64) -> Result<fjall::Keyspace, Error> {
    Ok(fjall::Config::new(path)
        .cache_size(cache_bytes.max(1 << 20))
        .max_write_buffer_size(WRITE_BUFFER)
        .max_journaling_size(JOURNALS)
        .open()?)
}

/// Opens (or creates) a partition with the store's memtable size.
pub(crate) fn open_partition(keyspace: &fjall::Keyspace, name: &str) -> Result<PartitionHandle, fjall::Error> {
    keyspace.open_partition(name, PartitionCreateOptions::default().max_memtable_size(MEMTABLE))
}

/// Moves the tables an earlier version kept as sled trees into the store: each one's records
/// are copied, the store is made durable, and only then are the trees dropped from sled (and
/// that made durable, so they never come back to overwrite newer records). A crash on the way
/// leaves the trees in sled, and the next open copies them again, the same records over the
/// same.
fn migrate_from_sled(db: &sled::Db, keyspace: &fjall::Keyspace, tables: &[PartitionHandle]) -> Result<(), Error> {
    let held: Vec<sled::IVec> = db.tree_names();
    let held = |name: &str| held.iter().any(|h| h == name.as_bytes());
    let mut old: Vec<(&str, PartitionHandle)> =
        TABLES.iter().zip(tables).filter(|(name, _)| held(name)).map(|(name, table)| (*name, table.clone())).collect();
    if held(druse_memory::PARTITION) {
        let memory = druse_memory::open_partition(keyspace)?;
        // The memory engine's ids went on from sled's counter: its next value is above every
        // id sled handed out.
        if memory.get(druse_memory::engine::IDS)?.is_none() {
            memory.insert(druse_memory::engine::IDS, db.generate_id()?.to_be_bytes())?;
        }
        old.push((druse_memory::PARTITION, memory));
    }
    if old.is_empty() {
        return Ok(());
    }
    let mut moved = 0usize;
    for (name, table) in &old {
        let tree = db.open_tree(name)?;
        let mut batch = keyspace.batch();
        for entry in tree.iter() {
            let (key, value) = entry?;
            batch.insert(table, key.to_vec(), value.to_vec());
            moved += 1;
            if batch.len() >= MIGRATION_BATCH {
                std::mem::replace(&mut batch, keyspace.batch()).commit()?;
            }
        }
        batch.commit()?;
    }
    keyspace.persist(PersistMode::SyncAll)?;
    for (name, _) in &old {
        db.drop_tree(name)?;
    }
    db.flush()?;
    tracing::info!(
        records = moved,
        tables = old.len(),
        "moved the tables of an earlier version from sled into the store"
    );
    Ok(())
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
            None => Ok(table.partition.contains_key(key)?),
        }
    }

    fn put_raw(&mut self, table: &Table, key: &[u8], value: Vec<u8>) {
        self.ops.insert((table.index, key.to_vec()), Some(value));
    }

    /// Reads the record under `key`, as this batch leaves it (decoded in place, not copied).
    pub fn get<T: DeserializeOwned>(&self, table: &Table, key: &[u8]) -> Result<Option<T>, Error> {
        match self.ops.get(&(table.index, key.to_vec())) {
            Some(value) => value.as_deref().map(|b| decode(key, b)).transpose(),
            None => table.partition.get(key)?.map(|b| decode(key, &b)).transpose(),
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

/// Opens again a database a handle dropped just before held. sled's flusher thread winds
/// down on its own and keeps the file lock for a moment after the last handle goes, so a test
/// that reopens at once retries `open` for up to ten seconds, then fails with its last error.
#[cfg(test)]
pub(crate) fn reopen<T, E: std::fmt::Display>(mut open: impl FnMut() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Ok(opened) => return opened,
            Err(_) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => panic!("reopening the database: {e}"),
        }
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
            let store = reopen(|| Store::open_in(dir.path()));
            let mut writes = Writes::default();
            assert!(writes.insert_new(&store.skills, id.digest(), &"first".to_string()).unwrap());
            assert!(!writes.insert_new(&store.skills, id.digest(), &"second".to_string()).unwrap(), "kept");
            writes.put(&store.state, b"weather", &42u64).unwrap();
            store.commit(&mut writes).unwrap();
            assert!(writes.is_empty(), "a commit empties the writes");
            store.flush_blocking().unwrap();
        }
        let store = reopen(|| Store::open_in(dir.path()));
        assert_eq!(store.skill::<String>(&id).unwrap().as_deref(), Some("first"));
        assert_eq!(store.state::<u64>("weather").unwrap(), Some(42));
    }

    #[test]
    fn writes_are_read_back_before_they_commit_and_seen_by_others_only_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = reopen(|| Store::open_in(dir.path()));
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
        let store = reopen(|| Store::open_in(dir.path()));
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
        let store = reopen(|| Store::open_in(dir.path()));
        let ids: Vec<ContentId> = (0..4u8).map(|n| ContentId::of(&[n])).collect();
        for (n, id) in ids.iter().enumerate() {
            store.skills.partition.insert(id.digest(), serde_json::to_vec(&(n as u64)).unwrap()).unwrap();
        }
        // A record that does not decode is skipped when unwanted, and reported when wanted.
        let corrupt = ContentId::of(b"corrupt");
        store.skills.partition.insert(corrupt.digest(), b"{not json".to_vec()).unwrap();
        let wanted = |id: &ContentId| *id == ids[1] || *id == ids[3];
        let mut found: Vec<u64> = store.skills_where(wanted).collect::<Result<_, _>>().unwrap();
        found.sort_unstable();
        assert_eq!(found, vec![1, 3]);
        let err = store.skills_where::<u64>(|id| *id == corrupt).find_map(Result::err).expect("reported");
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        // A key that is no digest cannot be asked about: it is decoded, so it is not missed.
        store.skills.partition.insert(b"short", serde_json::to_vec(&9u64).unwrap()).unwrap();
        let found: Vec<u64> = store.skills_where(|_| false).collect::<Result<_, _>>().unwrap();
        assert_eq!(found, vec![9]);
    }

    #[test]
    fn tables_an_earlier_version_kept_in_sled_move_into_the_store_once() {
        let dir = tempfile::tempdir().unwrap();
        let id = ContentId::of(b"skill");
        let envelope = Key::new(Kind::Crystal, &id);
        let handed_out = {
            // A data directory as earlier versions left it: every table a sled tree.
            let db = reopen(|| sled::open(dir.path().join("db")));
            db.open_tree("skills").unwrap().insert(id.digest(), serde_json::to_vec("old skill").unwrap()).unwrap();
            db.open_tree("state").unwrap().insert("weather", serde_json::to_vec(&7u64).unwrap()).unwrap();
            db.open_tree("envelopes").unwrap().insert(envelope.as_bytes(), b"signed".to_vec()).unwrap();
            // The memory engine's tree, with ids sled's counter handed out.
            db.open_tree("memory").unwrap().insert("crystal", b"moved".to_vec()).unwrap();
            let handed_out = db.generate_id().unwrap();
            // The agent's tree, which stays in sled.
            db.open_tree("agent").unwrap().insert("gate", b"kept".to_vec()).unwrap();
            db.flush().unwrap();
            handed_out
        };
        {
            let store = reopen(|| Store::open_in(dir.path()));
            assert_eq!(store.skill::<String>(&id).unwrap().as_deref(), Some("old skill"));
            assert_eq!(store.state::<u64>("weather").unwrap(), Some(7));
            assert_eq!(store.envelope(&envelope).unwrap().as_deref(), Some(&b"signed"[..]));
            let names = store.db().tree_names();
            assert!(!names.iter().any(|n| n == b"skills" || n == b"state" || n == b"memory"), "moved trees leave sled");
            let agent = store.db().open_tree("agent").unwrap();
            assert_eq!(agent.get("gate").unwrap().as_deref(), Some(&b"kept"[..]), "sled keeps the rest");
            let memory = druse_memory::open_partition(store.keyspace()).unwrap();
            assert_eq!(memory.get("crystal").unwrap().as_deref(), Some(&b"moved"[..]));
            let bound = memory.get(druse_memory::engine::IDS).unwrap().expect("the id bound is set");
            let bound = u64::from_be_bytes(bound[..].try_into().unwrap());
            assert!(bound > handed_out, "ids go on above sled's: {bound} after {handed_out}");
            // A newer write, not flushed: a committed batch is the operating system's already.
            let mut writes = Writes::default();
            writes.put(&store.state, b"weather", &8u64).unwrap();
            store.commit(&mut writes).unwrap();
        }
        let store = reopen(|| Store::open_in(dir.path()));
        assert_eq!(store.state::<u64>("weather").unwrap(), Some(8), "the move is not done again over newer records");
        assert_eq!(store.skill::<String>(&id).unwrap().as_deref(), Some("old skill"));
    }

    #[test]
    fn corrupt_record_is_a_clear_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = reopen(|| Store::open_in(dir.path()));
        store.state.partition.insert("weather", b"{not json".to_vec()).unwrap();
        let err = store.state::<u64>("weather").unwrap_err();
        assert!(err.to_string().contains("weather"), "{err}");
    }
}
