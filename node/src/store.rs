//! The node's durable state, in sled: skills, peers, small named state records (weather,
//! seqs), and the signed envelopes anti-entropy serves to peers. Records are JSON so an
//! operator can read them with any sled tool; envelopes are kept as the exact bytes signed.
//!
//! Ingestion writes through [`Writes`]: what a batch of messages changes is read back by the
//! later messages of the batch and then committed in one sled transaction over every tree it
//! touched, so a message's writes land all together or not at all, and readers never see half
//! of one. Committed writes are in sled's log at once; `flush` makes them survive `kill -9`, and
//! every write the API acknowledges is flushed first.

use std::collections::HashMap;
use std::path::Path;

use sled::Transactional;

use druse_protocol::sync::{self, Key};
use druse_protocol::{ContentId, Kind};
use serde::{Serialize, de::DeserializeOwned};

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("database: {0}")]
    Db(#[from] sled::Error),
    #[error("record {key} is corrupt: {source}")]
    Corrupt { key: String, source: serde_json::Error },
    #[error("encoding a record: {0}")]
    Encode(serde_json::Error),
    #[error("the batch this write belonged to could not be committed")]
    NotCommitted,
}

impl From<sled::transaction::TransactionError<()>> for Error {
    fn from(error: sled::transaction::TransactionError<()>) -> Self {
        match error {
            sled::transaction::TransactionError::Storage(error) => Error::Db(error),
            // Commits never abort: they only write.
            sled::transaction::TransactionError::Abort(()) => {
                Error::Db(sled::Error::ReportableBug("a write-only transaction aborted".into()))
            }
        }
    }
}

/// One sled tree of JSON records; cheap to clone.
#[derive(Debug, Clone)]
pub struct Table {
    tree: sled::Tree,
    /// Its place in [`Store::trees`], which names it in [`Writes`].
    index: usize,
}

impl Table {
    /// Reads the record under `key`.
    pub fn get<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, Error> {
        self.tree.get(key)?.map(|b| decode(key, &b)).transpose()
    }

    /// Writes the record under `key`.
    pub fn put<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), Error> {
        self.tree.insert(key, encode(value)?)?;
        Ok(())
    }

    /// Writes the record unless one is there; false (and nothing written) if it was.
    pub fn insert_new<T: Serialize>(&self, key: &[u8], value: &T) -> Result<bool, Error> {
        let bytes = encode(value)?;
        Ok(self.tree.compare_and_swap(key, None as Option<&[u8]>, Some(bytes))?.is_ok())
    }

    /// Rewrites the record through `change`, atomically; `None` if there is none. `change`
    /// may run more than once if another writer got there first.
    pub fn update<T, F>(&self, key: &[u8], change: F) -> Result<Option<T>, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(&mut T),
    {
        self.rewrite(key, || None, change)
    }

    /// Like `update`, starting from `T::default()` when there is no record.
    pub fn upsert<T, F>(&self, key: &[u8], change: F) -> Result<T, Error>
    where
        T: Serialize + DeserializeOwned + Default,
        F: FnMut(&mut T),
    {
        let written = self.rewrite(key, || Some(T::default()), change)?;
        // `rewrite` always writes when `start` yields a value.
        Ok(written.unwrap_or_default())
    }

    /// Compare-and-swap loop behind `update` and `upsert`: `start` gives the value to change
    /// when there is no record (`None`: leave it absent).
    fn rewrite<T, F>(&self, key: &[u8], start: impl Fn() -> Option<T>, mut change: F) -> Result<Option<T>, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(&mut T),
    {
        loop {
            let old = self.tree.get(key)?;
            let mut value: T = match &old {
                Some(bytes) => decode(key, bytes)?,
                None => match start() {
                    Some(value) => value,
                    None => return Ok(None),
                },
            };
            change(&mut value);
            if self.tree.compare_and_swap(key, old, Some(encode(&value)?))?.is_ok() {
                return Ok(Some(value));
            }
        }
    }

    /// Removes the record under `key`.
    pub fn remove(&self, key: &[u8]) -> Result<(), Error> {
        self.tree.remove(key)?;
        Ok(())
    }

    /// Every record with its key, in key order.
    pub fn iter<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<(Vec<u8>, T), Error>> + '_ {
        self.tree.iter().map(|entry| {
            let (key, value) = entry?;
            Ok((key.to_vec(), decode(&key, &value)?))
        })
    }

    /// The last `n` records, newest key first.
    pub fn last<T: DeserializeOwned>(&self, n: usize) -> Result<Vec<T>, Error> {
        self.tree
            .iter()
            .rev()
            .take(n)
            .map(|entry| {
                let (key, value) = entry?;
                decode(&key, &value)
            })
            .collect()
    }

    /// How many records there are (walks the tree).
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }
}

/// Handle to the open database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    db: sled::Db,
    /// Every tree below, in `Table::index` order, for commits.
    trees: Vec<sled::Tree>,
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

fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes)
        .map_err(|source| Error::Corrupt { key: String::from_utf8_lossy(key).into_owned(), source })
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(Error::Encode)
}

impl Store {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path, cache_bytes: u64) -> Result<Self, Error> {
        let db = sled::Config::new().path(path).cache_capacity(cache_bytes).open()?;
        let mut trees = Vec::new();
        let mut table = |name: &str| -> Result<Table, Error> {
            let tree = db.open_tree(name)?;
            trees.push(tree.clone());
            Ok(Table { tree, index: trees.len() - 1 })
        };
        Ok(Self {
            skills: table("skills")?,
            peers: table("peers")?,
            state: table("state")?,
            market: table("market")?,
            bounties: table("bounties")?,
            versions: table("versions")?,
            ledger: table("ledger")?,
            envelopes: table("envelopes")?,
            trees,
            db,
        })
    }

    /// The underlying database, for engines that keep trees of their own.
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Makes every write so far durable.
    pub async fn flush(&self) -> Result<(), Error> {
        self.db.flush_async().await?;
        Ok(())
    }

    /// Makes every write so far durable, from blocking code.
    pub fn flush_blocking(&self) -> Result<(), Error> {
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
        self.skills.tree.iter().filter_map(move |entry| {
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

    /// How many skills are stored.
    pub fn skill_count(&self) -> usize {
        self.skills.len()
    }

    /// Reads a named state record.
    pub fn state<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, Error> {
        self.state.get(key.as_bytes())
    }

    /// Writes a named state record at once (records only one writer owns, outside ingestion).
    pub fn put_state<T: Serialize>(&self, key: &str, value: &T) -> Result<(), Error> {
        self.state.put(key.as_bytes(), value)
    }

    /// Commits `writes` in one transaction over the trees they touch, and empties them. On an
    /// error nothing of them is written.
    pub fn commit(&self, writes: &mut Writes) -> Result<(), Error> {
        if writes.ops.is_empty() {
            return Ok(());
        }
        let mut batches: Vec<(usize, sled::Batch)> = Vec::new();
        for ((index, key), value) in writes.ops.drain() {
            let at = match batches.iter().position(|(i, _)| *i == index) {
                Some(at) => at,
                None => {
                    batches.push((index, sled::Batch::default()));
                    batches.len() - 1
                }
            };
            match value {
                Some(value) => batches[at].1.insert(key, value),
                None => batches[at].1.remove(key),
            }
        }
        let trees: Vec<sled::Tree> = batches.iter().map(|(index, _)| self.trees[*index].clone()).collect();
        trees.as_slice().transaction(|views| {
            for (view, (_, batch)) in views.iter().zip(&batches) {
                view.apply_batch(batch)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Keeps a signed message for anti-entropy, in `writes`. Weather replaces the one kept
    /// before it (committed: a batch commits before it applies weather).
    pub fn keep_envelope(&self, writes: &mut Writes, key: &Key, bytes: &[u8]) -> Result<(), Error> {
        if key.kind() == Kind::Weather {
            for old in self.envelopes.tree.scan_prefix(Key::prefix(Kind::Weather)).keys() {
                writes.remove(&self.envelopes, &old?);
            }
        }
        writes.put_raw(&self.envelopes, key.as_bytes(), bytes.to_vec());
        Ok(())
    }

    /// Whether a signed message is kept.
    pub fn has_envelope(&self, key: &Key) -> Result<bool, Error> {
        Ok(self.envelopes.tree.contains_key(key.as_bytes())?)
    }

    /// Whether a signed message is kept, or about to be in `writes`.
    pub fn keeps_envelope(&self, writes: &Writes, key: &Key) -> Result<bool, Error> {
        writes.contains(&self.envelopes, key.as_bytes())
    }

    /// A kept signed message's bytes.
    pub fn envelope(&self, key: &Key) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.envelopes.tree.get(key.as_bytes())?.map(|b| b.to_vec()))
    }

    /// The kept weather envelope (the weather in force, or the last one applied), if any.
    pub fn weather_envelope(&self) -> Result<Option<(Key, Vec<u8>)>, Error> {
        let Some((key, bytes)) = self.envelopes.tree.scan_prefix(Key::prefix(Kind::Weather)).next().transpose()? else {
            return Ok(None);
        };
        // Only `keep_envelope` writes the tree, always under a well-formed key.
        Ok(Key::from_bytes(&key).map(|key| (key, bytes.to_vec())))
    }

    /// Up to `n` keys of kept messages after `after` (from the first without it), and whether
    /// more follow.
    pub fn envelope_keys(&self, after: Option<&Key>, n: usize) -> Result<(Vec<Key>, bool), Error> {
        let range = match after {
            Some(after) => self
                .envelopes
                .tree
                .range::<&[u8], _>((std::ops::Bound::Excluded(&after.as_bytes()[..]), std::ops::Bound::Unbounded)),
            None => self.envelopes.tree.iter(),
        };
        let mut keys = Vec::with_capacity(n.min(sync::PAGE));
        for entry in range.keys() {
            let key = entry?;
            if keys.len() == n {
                return Ok((keys, true));
            }
            // Only this module writes the tree, always under a well-formed key.
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

/// Writes not yet committed: what a batch of messages changes, read back by the later messages
/// of the batch (reads look here first, then in the store), then committed by
/// [`Store::commit`] all at once. The last write to a key wins.
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
            None => Ok(table.tree.contains_key(key)?),
        }
    }

    fn put_raw(&mut self, table: &Table, key: &[u8], value: Vec<u8>) {
        self.ops.insert((table.index, key.to_vec()), Some(value));
    }

    /// Reads the record under `key`, as this batch leaves it (decoded in place, not copied).
    pub fn get<T: DeserializeOwned>(&self, table: &Table, key: &[u8]) -> Result<Option<T>, Error> {
        match self.ops.get(&(table.index, key.to_vec())) {
            Some(value) => value.as_deref().map(|b| decode(key, b)).transpose(),
            None => table.tree.get(key)?.map(|b| decode(key, &b)).transpose(),
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
            let store = reopen(|| Store::open(dir.path(), 1 << 20));
            let mut writes = Writes::default();
            assert!(writes.insert_new(&store.skills, id.digest(), &"first".to_string()).unwrap());
            assert!(!writes.insert_new(&store.skills, id.digest(), &"second".to_string()).unwrap(), "kept");
            writes.put(&store.state, b"weather", &42u64).unwrap();
            store.commit(&mut writes).unwrap();
            assert!(writes.is_empty(), "a commit empties the writes");
            store.flush_blocking().unwrap();
        }
        let store = reopen(|| Store::open(dir.path(), 1 << 20));
        assert_eq!(store.skill::<String>(&id).unwrap().as_deref(), Some("first"));
        assert_eq!(store.state::<u64>("weather").unwrap(), Some(42));
    }

    #[test]
    fn writes_are_read_back_before_they_commit_and_seen_by_others_only_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = reopen(|| Store::open(dir.path(), 1 << 20));
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
        let store = reopen(|| Store::open(dir.path(), 1 << 20));
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
        let store = reopen(|| Store::open(dir.path(), 1 << 20));
        let ids: Vec<ContentId> = (0..4u8).map(|n| ContentId::of(&[n])).collect();
        for (n, id) in ids.iter().enumerate() {
            store.skills.tree.insert(id.digest(), serde_json::to_vec(&(n as u64)).unwrap()).unwrap();
        }
        // A record that does not decode is skipped when unwanted, and reported when wanted.
        let corrupt = ContentId::of(b"corrupt");
        store.skills.tree.insert(corrupt.digest(), b"{not json".to_vec()).unwrap();
        let wanted = |id: &ContentId| *id == ids[1] || *id == ids[3];
        let mut found: Vec<u64> = store.skills_where(wanted).collect::<Result<_, _>>().unwrap();
        found.sort_unstable();
        assert_eq!(found, vec![1, 3]);
        let err = store.skills_where::<u64>(|id| *id == corrupt).find_map(Result::err).expect("reported");
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        // A key that is no digest cannot be asked about: it is decoded, so it is not missed.
        store.skills.tree.insert(b"short", serde_json::to_vec(&9u64).unwrap()).unwrap();
        let found: Vec<u64> = store.skills_where(|_| false).collect::<Result<_, _>>().unwrap();
        assert_eq!(found, vec![9]);
    }

    #[test]
    fn corrupt_record_is_a_clear_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = reopen(|| Store::open(dir.path(), 1 << 20));
        store.state.tree.insert("weather", b"{not json".to_vec()).unwrap();
        let err = store.state::<u64>("weather").unwrap_err();
        assert!(err.to_string().contains("weather"), "{err}");
    }
}
