//! Opening the engine: the crystals and their vectors read from the store, the derived
//! indexes brought up to date with it.

use rayon::iter::{IntoParallelRefIterator, ParallelIterator};
use rustc_hash::FxHashMap;

use super::codec::decode_vector;
use super::{CONTEXT, CRYSTAL, EMBEDDING, Error, Memory, SENTENCES, Scopes, is_live, read, write};
use crate::crystal::Crystal;
use druse_protocol::UnixMillis;

impl Memory {
    /// Reads every crystal and stored vector into memory and the indexes, and brings the text
    /// index up to the store.
    pub(super) fn load(&self, now: UnixMillis) -> Result<(), Error> {
        let started = std::time::Instant::now();
        let indexed_up_to = self.text.indexed_up_to();
        let resistance = self.consolidation_modulation(now).decay_resistance;
        let mut max_id = 0;
        let mut map = FxHashMap::default();
        self.each_batch(
            CRYSTAL,
            |k, v| {
                let mut crystal: Crystal =
                    serde_json::from_slice(v).map_err(|e| Error::Corrupt(format!("crystal {k:?}"), e))?;
                if is_live(&crystal) {
                    crystal.importance = self.importance(&crystal, now, resistance);
                }
                Ok(crystal)
            },
            |crystals| {
                for crystal in crystals {
                    max_id = max_id.max(crystal.id);
                    map.insert(crystal.id, crystal);
                }
                Ok(())
            },
        )?;
        let mut scopes = Scopes::default();
        for crystal in map.values() {
            scopes.insert(crystal);
        }
        *write(&self.scopes) = scopes;
        *write(&self.crystals) = map;
        self.reembed_if_changed()?;
        let lagging: Vec<Crystal> =
            read(&self.crystals).values().filter(|c| indexed_up_to.is_none_or(|up_to| c.id > up_to)).cloned().collect();
        for crystal in &lagging {
            self.text.upsert(crystal.id, &self.document(crystal))?;
        }
        let crystals = read(&self.crystals);
        let crystals_took = started.elapsed();
        for prefix in [EMBEDDING, CONTEXT, SENTENCES] {
            self.each_batch(
                prefix,
                |k, v| {
                    let id = k.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
                    // As `index` keeps it: only live crystals have vectors in the index.
                    Ok(id.filter(|id| crystals.get(id).is_some_and(is_live)).map(|id| (id, decode_vector(v))))
                },
                |records| {
                    let keys: Vec<(u64, &[f32])> = records
                        .iter()
                        .flatten()
                        .flat_map(|(id, vector)| self.index_keys(prefix, *id, vector))
                        .collect();
                    Ok(self.vectors.insert_many(&keys)?)
                },
            )?;
        }
        let count = crystals.len();
        drop(crystals);
        self.vectors.restored();
        let vectors = self.vectors.stats();
        tracing::info!(
            crystals = count,
            crystals_ms = crystals_took.as_millis() as u64,
            vectors = vectors.live,
            from_graphs = vectors.live - vectors.tail.min(vectors.live),
            vectors_ms = (started.elapsed() - crystals_took).as_millis() as u64,
            "memory loaded"
        );
        if indexed_up_to != Some(max_id) && max_id > 0 {
            self.text.commit(max_id)?;
        }
        Ok(())
    }

    /// Reads every record under `prefix` in key order, in batches that `decode` turns into
    /// values on every core and `take` then consumes in order (the vectors go into the index
    /// under one lock a batch). Reading the store, not decoding, is most of a start: at 100k
    /// memories the batching did not make it faster.
    fn each_batch<T: Send>(
        &self,
        prefix: u8,
        decode: impl Fn(&[u8], &[u8]) -> Result<T, Error> + Sync,
        mut take: impl FnMut(Vec<T>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        const BATCH: usize = 4096;
        let mut records = self.tree.prefix([prefix]);
        loop {
            let batch =
                records.by_ref().take(BATCH).map(|entry| Ok(entry.into_inner()?)).collect::<Result<Vec<_>, Error>>()?;
            if batch.is_empty() {
                return Ok(());
            }
            take(batch.par_iter().map(|(k, v)| decode(k, v)).collect::<Result<_, _>>()?)?;
        }
    }
}
