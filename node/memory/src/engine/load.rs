//! Opening the engine: the crystals and their vectors read from the store, the derived
//! indexes brought up to date with it.

use std::ops::Bound;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::codec::{decode_vector, note_extras};
use super::{CONTEXT, CRYSTAL, EMBEDDING, Error, Memory, SENTENCES, Scopes, is_live, key, read, write};
use crate::crystal::Crystal;
use crate::record;
use crate::vector::Prepared;
use druse_protocol::UnixMillis;

impl Memory {
    /// Every crystal in the store, by id, as stored. It needs nothing but the store, so a
    /// start reads it while the vector graphs are read from their files.
    pub(super) fn read_crystals(tree: &fjall::Keyspace) -> Result<FxHashMap<u64, Crystal>, Error> {
        let mut batches = Vec::new();
        each_batch(
            tree,
            CRYSTAL,
            |k, v| record::decode(v).map_err(|e| Error::Corrupt(format!("crystal {k:?}"), e)),
            |crystals| {
                batches.push(crystals);
                Ok(())
            },
        )?;
        // Sized once: a map grown a crystal at a time moves every crystal again at each doubling.
        let mut map = FxHashMap::with_capacity_and_hasher(batches.iter().map(Vec::len).sum(), Default::default());
        map.extend(batches.into_iter().flatten().map(|crystal| (crystal.id, crystal)));
        Ok(map)
    }

    /// Takes the crystals [`Memory::read_crystals`] read (their importance brought to `now`),
    /// reads every stored vector into the indexes, and brings the text index up to the store.
    pub(super) fn load(&self, mut map: FxHashMap<u64, Crystal>, now: UnixMillis) -> Result<(), Error> {
        let started = std::time::Instant::now();
        let indexed_up_to = self.text.indexed_up_to();
        let resistance = self.consolidation_modulation(now).decay_resistance;
        map.par_iter_mut().filter(|(_, crystal)| is_live(crystal)).for_each(|(_, crystal)| {
            crystal.importance = self.importance(crystal, now, resistance);
        });
        let max_id = map.keys().copied().max().unwrap_or(0);
        let mut scopes = Scopes::default();
        for crystal in map.values() {
            scopes.insert(crystal);
        }
        *write(&self.scopes) = scopes;
        *write(&self.crystals) = map;
        self.reembed_if_changed()?;
        let lagging: Vec<Crystal> =
            read(&self.crystals).values().filter(|c| indexed_up_to.is_none_or(|up_to| c.id > up_to)).cloned().collect();
        // Turns indexed before a lagging one whose windows hold it: each indexed again once.
        let mut rewindow = Vec::new();
        for crystal in &lagging {
            self.text.upsert(crystal.id, &self.document(crystal))?;
            let indexed = self.windows_holding(crystal).into_iter();
            rewindow.extend(indexed.filter(|id| indexed_up_to.is_some_and(|up_to| *id <= up_to)));
        }
        rewindow.sort_unstable();
        rewindow.dedup();
        self.index_windows(rewindow)?;
        let crystals = read(&self.crystals);
        let crystals_took = started.elapsed();
        let preparer = self.vectors.preparer();
        for prefix in [EMBEDDING, CONTEXT, SENTENCES] {
            each_batch(
                &self.tree,
                prefix,
                // Decoded, and compared with the copy a graph holds, on the reading threads: the
                // thread that takes the batches only files them.
                |k, v| {
                    let id = k.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
                    // As `index` keeps it: only live crystals have vectors in the index.
                    match id.filter(|id| crystals.get(id).is_some_and(is_live)) {
                        Some(id) => {
                            let vector = decode_vector(v);
                            Ok(preparer.prepare(&Self::index_keys(self.embedder.dim(), prefix, id, &vector))?)
                        }
                        None => Ok(Prepared::default()),
                    }
                },
                |records| {
                    note_extras(&mut write(&self.extras), records.iter().flat_map(Prepared::ids));
                    Ok(self.vectors.insert_prepared(records)?)
                },
            )?;
        }
        let count = crystals.len();
        drop((crystals, preparer));
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
}

/// Reads every record of `tree` under `prefix` (keys of a prefix byte and a big-endian id), in
/// batches that `decode` turns into values and `take` then consumes (the vectors go into the
/// index under one lock a batch). Reading the store is most of a start, so the ids are split
/// into one range per core, each read and decoded by a thread of its own; batches reach
/// `take` in no set order.
fn each_batch<T: Send>(
    tree: &fjall::Keyspace,
    prefix: u8,
    decode: impl Fn(&[u8], &[u8]) -> Result<T, Error> + Sync,
    mut take: impl FnMut(Vec<T>) -> Result<(), Error>,
) -> Result<(), Error> {
    const BATCH: usize = 4096;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ranges = id_ranges(tree, prefix, threads)?;
    let (sender, batches) = std::sync::mpsc::sync_channel::<Result<Vec<T>, Error>>(2 * threads);
    std::thread::scope(|scope| {
        for range in ranges {
            let (sender, decode) = (sender.clone(), &decode);
            scope.spawn(move || {
                let mut records = tree.range(range);
                loop {
                    let batch = records
                        .by_ref()
                        .take(BATCH)
                        .map(|entry| {
                            let (k, v) = entry.into_inner()?;
                            decode(&k, &v)
                        })
                        .collect::<Result<Vec<_>, Error>>();
                    match batch {
                        Ok(batch) if batch.is_empty() => return,
                        // A closed channel means the reader stopped at an error of its own.
                        Ok(batch) => {
                            if sender.send(Ok(batch)).is_err() {
                                return;
                            }
                        }
                        Err(error) => {
                            _ = sender.send(Err(error));
                            return;
                        }
                    }
                }
            });
        }
        drop(sender);
        batches.into_iter().try_for_each(|batch| take(batch?))
    })
}

/// `parts` ranges of keys of `tree` that together cover every key under `prefix`, split
/// evenly by id between the first and the last (ids rise as records are made, so the
/// records spread about evenly too); none when there is no key.
fn id_ranges(tree: &fjall::Keyspace, prefix: u8, parts: usize) -> Result<Vec<KeyRange>, Error> {
    let first = tree.prefix([prefix]).next().map(|entry| entry.key()).transpose()?;
    let last = tree.prefix([prefix]).next_back().map(|entry| entry.key()).transpose()?;
    let id =
        |key: &Option<fjall::Slice>| key.as_ref().and_then(|k| k.get(1..9)?.try_into().ok()).map(u64::from_be_bytes);
    let (Some(lo), Some(hi)) = (id(&first), id(&last)) else {
        if first.is_none() {
            return Ok(Vec::new());
        }
        // A key of another shape: one range over the whole prefix.
        let end = prefix.checked_add(1).map_or(Bound::Unbounded, |next| Bound::Excluded(vec![next]));
        return Ok(vec![(Bound::Included(vec![prefix]), end)]);
    };
    let span = u128::from(hi.saturating_sub(lo)) + 1;
    let parts = parts.clamp(1, usize::try_from(span).unwrap_or(usize::MAX));
    let bound = |i: usize| lo + u64::try_from(span * i as u128 / parts as u128).unwrap_or(u64::MAX);
    Ok((0..parts)
        .map(|i| {
            let end = match i + 1 == parts {
                true => Bound::Included(key(prefix, hi).to_vec()),
                false => Bound::Excluded(key(prefix, bound(i + 1)).to_vec()),
            };
            (Bound::Included(key(prefix, bound(i)).to_vec()), end)
        })
        .collect())
}

/// A range of keys in the engine's keyspace.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Config, Memory, key};
    use super::id_ranges;
    use crate::embed::Hashing;

    /// A prefix no record of the engine's uses.
    const SPARE: u8 = b'#';

    fn read_all(m: &Memory, parts: usize) -> Vec<Vec<u8>> {
        let ranges = id_ranges(&m.tree, SPARE, parts).unwrap();
        assert!(ranges.len() <= parts.max(1), "{} ranges for {parts} parts", ranges.len());
        ranges.into_iter().flat_map(|range| m.tree.range(range).map(|entry| entry.key().unwrap().to_vec())).collect()
    }

    #[test]
    fn the_ranges_a_start_reads_in_parallel_cover_every_key_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::testing::database(&dir.path().join("db"));
        let m =
            Memory::open(&db, &dir.path().join("index"), Config::default(), Arc::new(Hashing::new(384)), 0).unwrap();
        assert!(id_ranges(&m.tree, SPARE, 4).unwrap().is_empty(), "no key, nothing to read");
        m.tree.insert(key(SPARE, 42), b"one").unwrap();
        assert_eq!(read_all(&m, 4), vec![key(SPARE, 42).to_vec()], "one key is one range");
        let ids = [0, 1, 2, 3, 1000, 1001, 77_777, u64::MAX - 1, u64::MAX];
        for id in ids {
            m.tree.insert(key(SPARE, id), b"v").unwrap();
        }
        // Neighbours on either side must stay out.
        m.tree.insert([SPARE - 1, 0xff], b"before").unwrap();
        m.tree.insert([SPARE + 1], b"after").unwrap();
        let mut want: Vec<u64> = ids.into_iter().chain([42]).collect();
        want.sort_unstable();
        let want: Vec<Vec<u8>> = want.into_iter().map(|id| key(SPARE, id).to_vec()).collect();
        for parts in [1, 2, 3, 8, 64] {
            assert_eq!(read_all(&m, parts), want, "{parts} parts");
        }
        // A key of another shape under the prefix: one range over all of it.
        m.tree.insert([SPARE], b"short").unwrap();
        let all = read_all(&m, 4);
        assert_eq!(all.len(), want.len() + 1);
        assert_eq!(all[0], vec![SPARE]);
    }
}
