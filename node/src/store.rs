//! The node's durable state, in sled: skills, peers, and small named state records
//! (weather, seqs). Records are JSON so an operator can read them with any sled tool.
//!
//! Writes land in sled's log at once; `flush` makes them survive `kill -9`, and every write the
//! API acknowledges is flushed first.

use std::path::Path;

use druse_protocol::ContentId;
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
}

/// Handle to the open database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    db: sled::Db,
    skills: sled::Tree,
    peers: sled::Tree,
    state: sled::Tree,
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
        Ok(Self { skills: db.open_tree("skills")?, peers: db.open_tree("peers")?, state: db.open_tree("state")?, db })
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
        self.skills.get(id.digest())?.map(|b| decode(id.digest(), &b)).transpose()
    }

    /// Writes a skill record; returns false (and writes nothing) if one was already there.
    pub fn insert_skill<T: Serialize>(&self, id: &ContentId, value: &T) -> Result<bool, Error> {
        let bytes = encode(value)?;
        let inserted = self.skills.compare_and_swap(id.digest(), None as Option<&[u8]>, Some(bytes))?.is_ok();
        Ok(inserted)
    }

    /// Rewrites a skill record through `change`, atomically; `None` if there is no such skill.
    pub fn update_skill<T, F>(&self, id: &ContentId, mut change: F) -> Result<Option<T>, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(&mut T),
    {
        loop {
            let Some(old) = self.skills.get(id.digest())? else { return Ok(None) };
            let mut value: T = decode(id.digest(), &old)?;
            change(&mut value);
            let new = encode(&value)?;
            if self.skills.compare_and_swap(id.digest(), Some(old), Some(new))?.is_ok() {
                return Ok(Some(value));
            }
        }
    }

    /// Every skill record, in content-id order.
    pub fn skills<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<T, Error>> + '_ {
        self.skills.iter().map(|entry| {
            let (key, value) = entry?;
            decode(&key, &value)
        })
    }

    /// How many skills are stored.
    pub fn skill_count(&self) -> usize {
        self.skills.len()
    }

    /// Reads a named state record.
    pub fn state<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, Error> {
        self.state.get(key)?.map(|b| decode(key.as_bytes(), &b)).transpose()
    }

    /// Writes a named state record.
    pub fn put_state<T: Serialize>(&self, key: &str, value: &T) -> Result<(), Error> {
        self.state.insert(key, encode(value)?)?;
        Ok(())
    }

    /// Reads a peer record.
    pub fn peer<T: DeserializeOwned>(&self, peer: &[u8]) -> Result<Option<T>, Error> {
        self.peers.get(peer)?.map(|b| decode(peer, &b)).transpose()
    }

    /// Writes a peer record.
    pub fn put_peer<T: Serialize>(&self, peer: &[u8], value: &T) -> Result<(), Error> {
        self.peers.insert(peer, encode(value)?)?;
        Ok(())
    }

    /// Every peer record with its key.
    pub fn peers<T: DeserializeOwned>(&self) -> impl Iterator<Item = Result<(Vec<u8>, T), Error>> + '_ {
        self.peers.iter().map(|entry| {
            let (key, value) = entry?;
            Ok((key.to_vec(), decode(&key, &value)?))
        })
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
            let store = Store::open(dir.path(), 1 << 20).unwrap();
            assert!(store.insert_skill(&id, &"first".to_string()).unwrap());
            assert!(!store.insert_skill(&id, &"second".to_string()).unwrap(), "an existing skill is kept");
            store.put_state("weather", &42u64).unwrap();
            store.flush_blocking().unwrap();
        }
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.skill::<String>(&id).unwrap().as_deref(), Some("first"));
        assert_eq!(store.state::<u64>("weather").unwrap(), Some(42));
    }

    #[test]
    fn update_skill_changes_only_an_existing_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let id = ContentId::of(b"skill");
        assert_eq!(store.update_skill::<u64, _>(&id, |v| *v += 1).unwrap(), None);
        store.insert_skill(&id, &1u64).unwrap();
        assert_eq!(store.update_skill::<u64, _>(&id, |v| *v += 1).unwrap(), Some(2));
    }

    #[test]
    fn corrupt_record_is_a_clear_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        store.state.insert("weather", b"{not json".to_vec()).unwrap();
        let err = store.state::<u64>("weather").unwrap_err();
        assert!(err.to_string().contains("weather"), "{err}");
    }
}
