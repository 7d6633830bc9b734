//! Writing the engine's keyspace: batches of changes, made durable, and the ids the engine
//! hands out.

use super::codec::encode_vector;
use super::{
    CONTEXT, CRYSTAL, Changes, EMBEDDING, Error, IDS, Ids, Memory, SENTENCES, audit_key, encode_crystals, key, lock,
};

/// Ids reserved with one durable write.
const ID_WINDOW: u64 = 1 << 20;

impl Ids {
    /// The ids of a store, from the end of its last window: a restart starts past it.
    pub(super) fn stored(tree: &fjall::Keyspace) -> Result<Self, Error> {
        let reserved = match tree.get(IDS)? {
            Some(bytes) => <[u8; 8]>::try_from(&bytes[..])
                .map(u64::from_be_bytes)
                .map_err(|_| Error::Invalid("the stored id bound is not 8 bytes".into()))?,
            None => 0,
        };
        Ok(Self { next: reserved, reserved })
    }
}

impl Memory {
    /// Writes a set of changes in one batch (one atomic commit), not yet made durable.
    pub(super) fn store(&self, changes: &Changes) -> Result<(), Error> {
        let mut batch = self.batch();
        self.add_to_batch(changes, &mut batch)?;
        self.apply(batch)
    }

    /// A batch of writes to the engine's keyspace, to fill with [`Memory::put`] and
    /// [`Memory::delete`] and commit with [`Memory::apply`].
    pub(super) fn batch(&self) -> fjall::OwnedWriteBatch {
        self.db.batch()
    }

    pub(super) fn put(&self, batch: &mut fjall::OwnedWriteBatch, key: &[u8], value: Vec<u8>) {
        batch.insert(&self.tree, key, value);
    }

    pub(super) fn delete(&self, batch: &mut fjall::OwnedWriteBatch, key: &[u8]) {
        batch.remove(&self.tree, key);
    }

    /// Commits a batch, all of it or none; it reaches the operating system before this
    /// returns, so it survives the process being killed ([`Memory::sync`] makes it survive a
    /// power cut).
    pub(super) fn apply(&self, batch: fjall::OwnedWriteBatch) -> Result<(), Error> {
        batch.durability(Some(fjall::PersistMode::Buffer)).commit()?;
        Ok(())
    }

    /// Makes every committed batch durable.
    pub(super) fn sync(&self) -> Result<(), Error> {
        self.db.persist(fjall::PersistMode::SyncAll)?;
        Ok(())
    }

    /// A new id, unique across restarts (see [`Ids`]).
    pub(super) fn next_id(&self) -> Result<u64, Error> {
        let mut ids = lock(&self.ids);
        if ids.next >= ids.reserved {
            self.reserve(&mut ids)?;
        }
        ids.next += 1;
        Ok(ids.next - 1)
    }

    /// Reserves the first window of ids when the engine opens, so the first memory stored
    /// (on a node, the first skill gossip brings) waits for no sync of its own.
    pub(super) fn reserve_ids(&self) -> Result<(), Error> {
        self.reserve(&mut lock(&self.ids))
    }

    /// Makes the window after `ids.next` durable, then hands it out.
    fn reserve(&self, ids: &mut Ids) -> Result<(), Error> {
        let reserved = ids.next + ID_WINDOW;
        self.tree.insert(IDS, reserved.to_be_bytes())?;
        self.sync()?;
        ids.reserved = reserved;
        Ok(())
    }

    /// Adds a set of changes to a batch.
    pub(super) fn add_to_batch(&self, changes: &Changes, batch: &mut fjall::OwnedWriteBatch) -> Result<(), Error> {
        for (crystal, bytes) in changes.crystals.iter().zip(encode_crystals(&changes.crystals)?) {
            self.put(batch, &key(CRYSTAL, crystal.id), bytes);
        }
        for (prefix, id, vector) in &changes.vectors {
            self.put(batch, &key(*prefix, *id), encode_vector(vector));
        }
        for entry in &changes.audit {
            let seq = self.next_id()?;
            let bytes = serde_json::to_vec(entry).map_err(|e| Error::Corrupt("audit".into(), e.to_string()))?;
            self.put(batch, &audit_key(entry.crystal_id, seq), bytes);
        }
        for id in &changes.purge {
            for prefix in [CRYSTAL, EMBEDDING, CONTEXT, SENTENCES] {
                self.delete(batch, &key(prefix, *id));
            }
        }
        Ok(())
    }
}
