//! A sealed segment: an HNSW graph over a fixed set of vectors, built once and then only read.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use instant_distance::{Builder, HnswMap, Search};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::kernel::dot_q14;
use super::persist::{self, Header, ReadError};
use super::topk::{Hit, TopK};

/// Search scratch kept per segment; more than this many concurrent searches allocate afresh.
const SEARCH_POOL: usize = 8;

/// A stored unit vector, in Q14 fixed point (see `kernel`). The vector is shared, not copied,
/// between the tail and the segment built from it, so a build in flight does not double the
/// index's memory.
#[derive(Clone, Debug)]
pub(super) struct Point(pub(super) Arc<[i16]>);

/// On disk a point is its values' little-endian bytes, one byte string.
impl Serialize for Point {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = self.0.iter().flat_map(|x| x.to_le_bytes()).collect();
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for Point {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl Visitor<'_> for Bytes {
            type Value = Point;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a vector's bytes")
            }
            fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Point, E> {
                if !bytes.len().is_multiple_of(2) {
                    return Err(E::invalid_length(bytes.len(), &self));
                }
                Ok(Point(bytes.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect()))
            }
        }
        deserializer.deserialize_bytes(Bytes)
    }
}

impl instant_distance::Point for Point {
    fn distance(&self, other: &Self) -> f32 {
        // Cosine distance; integer arithmetic, so never NaN.
        1.0 - dot_q14(&self.0, &other.0)
    }
}

/// Which version of which id a stored vector is: a hit counts only while `seq` is the id's live one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Entry {
    pub(super) id: u64,
    pub(super) seq: u64,
}

/// How a segment's graph is built; `ef_search` is fixed into the graph at build time.
#[derive(Clone, Copy, Debug)]
pub(super) struct BuildParams {
    pub(super) ef_construction: usize,
    pub(super) ef_search: usize,
    pub(super) heuristic: bool,
    pub(super) seed: u64,
}

impl BuildParams {
    /// The file header of a segment built with these parameters.
    fn header(&self, dim: usize, uid: u64, len: usize, took: Duration, at: SystemTime) -> Header {
        Header::new(dim, self.ef_construction, self.ef_search, self.heuristic, uid, len, took, at)
    }
}

/// One sealed segment.
pub(super) struct Segment {
    /// Names the segment across swaps (stable while segments are added and removed).
    pub(super) uid: u64,
    map: HnswMap<Point, Entry>,
    len: usize,
    /// Entries whose id was since removed or re-inserted; kept in the graph until a rebuild.
    dead: AtomicUsize,
    build_time: Duration,
    built_at: SystemTime,
    pool: Mutex<Vec<Search>>,
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("uid", &self.uid)
            .field("len", &self.len)
            .field("dead", &self.dead())
            .field("build_time", &self.build_time)
            .finish_non_exhaustive()
    }
}

impl Segment {
    /// Builds the graph: the expensive call, made only on the builder thread.
    pub(super) fn build(uid: u64, entries: Vec<Entry>, points: Vec<Point>, params: BuildParams) -> Self {
        let started = Instant::now();
        let len = entries.len();
        let heuristic = params.heuristic.then(instant_distance::Heuristic::default);
        let map = Builder::default()
            .ef_construction(params.ef_construction)
            .ef_search(params.ef_search)
            .select_heuristic(heuristic)
            .seed(params.seed ^ uid)
            .build(points, entries);
        Self {
            uid,
            map,
            len,
            dead: AtomicUsize::new(0),
            build_time: started.elapsed(),
            built_at: SystemTime::now(),
            pool: Mutex::new(Vec::new()),
        }
    }

    /// Writes the segment's file into `dir` (see [`persist`]).
    pub(super) fn save(&self, dir: &Path, dim: usize, params: BuildParams) -> std::io::Result<()> {
        persist::write(dir, &params.header(dim, self.uid, self.len, self.build_time, self.built_at), &self.map)
    }

    /// Segment `uid` read back from `file`, every entry counted live until told otherwise:
    /// refused unless built with `dim` and `params`, and its vectors all of `dim` values.
    pub(super) fn read(file: &Path, uid: u64, dim: usize, params: BuildParams) -> Result<Self, ReadError> {
        let expected = params.header(dim, uid, 0, Duration::ZERO, SystemTime::UNIX_EPOCH);
        let (header, map): (Header, HnswMap<Point, Entry>) = persist::read(file, &expected)?;
        let mut points = 0;
        for (_, point) in map.iter() {
            if point.0.len() != dim {
                return Err(ReadError::Format);
            }
            points += 1;
        }
        if header.uid != uid || points != header.len || map.values.len() as u64 != points {
            return Err(ReadError::Format);
        }
        Ok(Self {
            uid,
            len: map.values.len(),
            map,
            dead: AtomicUsize::new(0),
            build_time: header.build_time(),
            built_at: header.built_at(),
            pool: Mutex::new(Vec::new()),
        })
    }

    /// Each entry with its vector, in storage order (`iter` yields points in id order, the
    /// order `values` is stored in).
    pub(super) fn stored(&self) -> impl Iterator<Item = (&Entry, &Point)> {
        self.map.values.iter().zip(self.map.iter().map(|(_, point)| point))
    }

    /// Sets how many entries are dead; the caller holds the index's write lock.
    pub(super) fn set_dead(&self, dead: usize) {
        self.dead.store(dead, Ordering::Relaxed);
    }

    /// How many vectors the graph holds, live or dead.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many of them are dead.
    pub(super) fn dead(&self) -> usize {
        self.dead.load(Ordering::Relaxed)
    }

    /// Records that one more entry died; the caller holds the index's write lock.
    pub(super) fn kill_one(&self) {
        self.dead.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn build_time(&self) -> Duration {
        self.build_time
    }

    pub(super) fn built_at(&self) -> SystemTime {
        self.built_at
    }

    /// The segment's best `k` live hits for `query`, through the graph. When the graph's `ef`
    /// candidates hold fewer than `at_least` live ones although the segment has them (`k > ef`,
    /// many dead entries, or a filter that passes few), it scans the segment exactly instead,
    /// so a search never comes back shorter than `at_least`.
    pub(super) fn search(&self, query: &Point, k: usize, at_least: usize, live: &impl Fn(Entry) -> bool) -> Vec<Hit> {
        let mut top = TopK::new(k);
        let mut search = self.pool.lock().unwrap_or_else(PoisonError::into_inner).pop().unwrap_or_default();
        for item in self.map.search(query, &mut search) {
            let hit = Hit { score: dot_q14(&query.0, &item.point.0), id: item.value.id };
            if top.admits(hit) && live(*item.value) {
                top.offer(hit);
            }
        }
        {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            if pool.len() < SEARCH_POOL {
                pool.push(search);
            }
        }
        let hits = top.into_sorted();
        if hits.len() >= at_least || hits.len() >= self.len.saturating_sub(self.dead()) {
            return hits;
        }
        let mut top = TopK::new(k);
        self.scan(&query.0, live, &mut top);
        top.into_sorted()
    }

    /// Offers every live vector of the segment to `top`: the exact scan.
    pub(super) fn scan(&self, query: &[i16], live: &impl Fn(Entry) -> bool, top: &mut TopK) {
        for (entry, point) in self.stored() {
            let hit = Hit { score: dot_q14(query, &point.0), id: entry.id };
            if top.admits(hit) && live(*entry) {
                top.offer(hit);
            }
        }
    }

    /// The segment's live vectors, to rebuild them into a new segment.
    pub(super) fn live_entries(
        &self,
        live: &impl Fn(Entry) -> bool,
        entries: &mut Vec<Entry>,
        points: &mut Vec<Point>,
    ) {
        for (entry, point) in self.stored() {
            if live(*entry) {
                entries.push(*entry);
                points.push(point.clone());
            }
        }
    }

    /// Every entry of the segment, live or dead, in storage order.
    pub(super) fn entries(&self) -> &[Entry] {
        &self.map.values
    }
}
