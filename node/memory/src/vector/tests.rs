use std::collections::HashSet;
use std::time::Duration;

use super::{Config, Error, Prepared, VectorIndex};

/// Every wait on the builder has this bound.
const IDLE: Duration = Duration::from_secs(120);

/// A fixed-seed xorshift, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vector(&mut self, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim).map(|_| self.next()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect()
    }

    fn vectors(&mut self, n: usize, dim: usize) -> Vec<Vec<f32>> {
        (0..n).map(|_| self.vector(dim)).collect()
    }

    /// Standard normal, Box–Muller.
    fn gauss(&mut self) -> f32 {
        let u = (self.next() + 1.0) / 2.0 + f32::EPSILON;
        let v = (self.next() + 1.0) / 2.0;
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }

    /// `n` unit vectors in `clusters` clusters: a random unit centroid plus Gaussian noise of
    /// norm about `noise`, normalised. Structured like real embeddings, unlike uniform vectors.
    fn clustered(&mut self, n: usize, dim: usize, clusters: usize, noise: f32) -> Vec<Vec<f32>> {
        let centroids = self.vectors(clusters, dim);
        (0..n)
            .map(|i| {
                let scale = noise / (dim as f32).sqrt();
                let v: Vec<f32> = centroids[i % clusters].iter().map(|c| c + scale * self.gauss()).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }
}

fn config(dim: usize, seal_threshold: usize, ef_search: usize) -> Config {
    Config { dim, seal_threshold, ef_search, ef_construction: 100, merge_factor: 0, ..Config::default() }
}

fn index_with(config: Config, vectors: &[Vec<f32>]) -> VectorIndex {
    let index = VectorIndex::new(config).expect("index");
    for (id, v) in vectors.iter().enumerate() {
        index.insert(id as u64, v).expect("insert");
    }
    index
}

/// An index whose first `sealed` vectors are in a segment and the rest in the tail.
fn segment_and_tail(config: Config, vectors: &[Vec<f32>], sealed: usize) -> VectorIndex {
    let index = sealed_index(config, &vectors[..sealed]);
    for (id, v) in vectors.iter().enumerate().skip(sealed) {
        index.insert(id as u64, v).expect("insert");
    }
    index
}

/// An index with every one of `vectors` sealed into a segment.
fn sealed_index(config: Config, vectors: &[Vec<f32>]) -> VectorIndex {
    let index = index_with(config, vectors);
    index.seal();
    assert!(index.wait_idle(IDLE));
    index
}

fn ids(hits: &[(u64, f32)]) -> Vec<u64> {
    hits.iter().map(|&(id, _)| id).collect()
}

fn assert_search_matches_exact(index: &VectorIndex, queries: &[Vec<f32>], k: usize) {
    for q in queries {
        let found = index.search(q, k).expect("search");
        let truth = index.exact(q, k).expect("exact");
        assert_eq!(ids(&found), ids(&truth));
    }
}

#[test]
fn index_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<VectorIndex>();
    let index = std::sync::Arc::new(index_with(config(8, 100, 16), &Rng(13).vectors(50, 8)));
    let searchers: Vec<_> = (0..2)
        .map(|_| {
            let index = std::sync::Arc::clone(&index);
            std::thread::spawn(move || index.search(&[1.0; 8], 5).expect("search").len())
        })
        .collect();
    for searcher in searchers {
        assert_eq!(searcher.join().expect("searcher"), 5);
    }
}

#[test]
fn dropping_the_index_stops_its_builder() {
    let index = index_with(config(16, 500, 16), &Rng(14).vectors(500, 16));
    // The last insert woke the builder; drop stops and joins it, so returning proves it ended.
    // The drop runs on its own thread so a builder that never stops fails the test, not hangs it.
    let (done, dropped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(index);
        let _ = done.send(());
    });
    assert!(dropped.recv_timeout(IDLE).is_ok(), "dropping the index did not stop its builder within {IDLE:?}");
}

#[test]
fn search_finds_an_inserted_vector_as_top_hit() {
    let vectors = Rng(1).vectors(300, 64);
    let index = index_with(config(64, 10_000, 64), &vectors);
    for (id, v) in vectors.iter().enumerate() {
        let hits = index.search(v, 1).expect("search");
        assert_eq!(hits[0].0, id as u64);
        assert!((hits[0].1 - 1.0).abs() < 1e-3);
    }
}

#[test]
fn results_come_best_first() {
    let mut rng = Rng(2);
    let vectors = rng.vectors(600, 32);
    let index = index_with(config(32, 200, 64), &vectors);
    assert!(index.wait_idle(IDLE));
    for q in rng.vectors(20, 32) {
        let hits = index.search(&q, 25).expect("search");
        assert_eq!(hits.len(), 25);
        assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "{hits:?}");
    }
}

#[test]
fn tail_only_search_equals_exact() {
    let mut rng = Rng(3);
    let index = index_with(config(48, 10_000, 64), &rng.vectors(500, 48));
    assert_eq!(index.stats().segments.len(), 0);
    assert_search_matches_exact(&index, &rng.vectors(30, 48), 10);
}

#[test]
fn segment_only_search_equals_exact_with_high_ef() {
    let mut rng = Rng(4);
    let index = sealed_index(config(48, 10_000, 512), &rng.vectors(500, 48));
    let stats = index.stats();
    assert_eq!((stats.segments.len(), stats.tail), (1, 0));
    assert_search_matches_exact(&index, &rng.vectors(30, 48), 10);
}

#[test]
fn mixed_segments_and_tail_search_equals_exact() {
    let mut rng = Rng(5);
    let index = index_with(config(48, 200, 256), &rng.vectors(700, 48));
    assert!(index.wait_idle(IDLE));
    let stats = index.stats();
    assert_eq!((stats.segments.len(), stats.tail), (3, 100));
    assert_search_matches_exact(&index, &rng.vectors(30, 48), 10);
}

#[test]
fn search_during_a_background_build_sees_every_vector() {
    let dim = 64;
    let n = 3000;
    let vectors = Rng(6).vectors(n, dim);
    let config = Config { ef_construction: 200, ..config(dim, n, 200) };
    // The last insert fills the tail and wakes the builder.
    let index = index_with(config, &vectors);
    let (mut before_swap, mut searches) = (0, 0);
    loop {
        let swapped = index.stats().segments.len() == 1;
        let id = searches % n;
        let hits = index.search(&vectors[id], 5).expect("search");
        assert!(ids(&hits).contains(&(id as u64)), "vector {id} missing after {searches} searches");
        searches += 1;
        if !swapped {
            before_swap += 1;
        } else if searches >= n {
            break;
        }
    }
    assert!(before_swap > 0, "the build finished before the first search");
    let stats = index.stats();
    assert_eq!((stats.tail, stats.segments[0].len), (0, n));
}

#[test]
fn removed_vector_is_hidden_from_tail_and_segment() {
    let mut rng = Rng(7);
    let vectors = rng.vectors(400, 32);
    let index = segment_and_tail(config(32, 10_000, 128), &vectors, 300);
    // id 10 is in the segment, id 350 in the tail.
    for id in [10usize, 350] {
        assert!(index.remove(id as u64));
        assert!(!index.remove(id as u64));
        assert!(!index.contains(id as u64));
        let hits = index.search(&vectors[id], 10).expect("search");
        assert!(!ids(&hits).contains(&(id as u64)));
        assert!(!ids(&index.exact(&vectors[id], 10).expect("exact")).contains(&(id as u64)));
    }
    assert_eq!(index.len(), 398);
}

#[test]
fn reinserting_an_id_replaces_its_vector() {
    let mut rng = Rng(8);
    let vectors = rng.vectors(300, 32);
    let index = sealed_index(config(32, 10_000, 128), &vectors);
    let replacement = rng.vector(32);
    index.insert(5, &replacement).expect("insert");
    assert_eq!(index.len(), 300);
    let hits = index.search(&replacement, 1).expect("search");
    assert_eq!(hits[0].0, 5);
    assert!((hits[0].1 - 1.0).abs() < 1e-3);
    // The old vector is gone: id 5 appears at most once, with its new vector's score.
    let hits = index.search(&vectors[5], 300).expect("search");
    let fives: Vec<_> = hits.iter().filter(|(id, _)| *id == 5).collect();
    assert_eq!(fives.len(), 1);
    assert!(fives[0].1 < 0.99);
    assert_eq!(hits.len(), 300);
}

#[test]
fn wrong_dimension_and_degenerate_vectors_are_refused() {
    let index = VectorIndex::new(config(16, 100, 16)).expect("index");
    assert!(matches!(index.search(&[1.0; 15], 3), Err(Error::Dimension { expected: 16, got: 15 })));
    assert!(matches!(index.exact(&[1.0; 17], 3), Err(Error::Dimension { expected: 16, got: 17 })));
    assert!(matches!(index.insert(1, &[1.0; 3]), Err(Error::Dimension { .. })));
    assert!(matches!(index.insert(1, &[0.0; 16]), Err(Error::Degenerate)));
    let mut nan = [1.0; 16];
    nan[3] = f32::NAN;
    assert!(matches!(index.insert(1, &nan), Err(Error::Degenerate)));
    assert!(matches!(index.search(&nan, 3), Err(Error::Degenerate)));
    assert!(index.is_empty());
}

#[test]
fn empty_index_and_zero_k_return_nothing() {
    let index = VectorIndex::new(config(8, 100, 16)).expect("index");
    assert!(index.search(&[1.0; 8], 10).expect("search").is_empty());
    index.insert(1, &[1.0; 8]).expect("insert");
    assert!(index.search(&[1.0; 8], 0).expect("search").is_empty());
}

#[test]
fn k_above_ef_search_still_returns_k_results() {
    let mut rng = Rng(9);
    let index = sealed_index(config(32, 10_000, 8), &rng.vectors(200, 32));
    assert_search_matches_exact(&index, &rng.vectors(5, 32), 50);
    assert_eq!(index.search(&rng.vector(32), 500).expect("search").len(), 200);
}

#[test]
fn small_segments_merge_into_one() {
    let mut rng = Rng(10);
    let config = Config { merge_factor: 4, ..config(32, 100, 512) };
    let index = index_with(config, &rng.vectors(400, 32));
    assert!(index.wait_idle(IDLE));
    let stats = index.stats();
    assert_eq!(stats.segments.iter().map(|s| s.len).collect::<Vec<_>>(), [400]);
    assert_eq!(stats.builds, 5);
    assert_search_matches_exact(&index, &rng.vectors(20, 32), 10);
}

#[test]
fn mostly_dead_segment_is_rebuilt_without_its_dead() {
    let mut rng = Rng(11);
    let index = sealed_index(config(32, 10_000, 128), &rng.vectors(100, 32));
    for id in 0..40 {
        index.remove(id);
    }
    assert!(index.wait_idle(IDLE));
    // The rebuild starts once 31 are dead; removals that land while it runs are dead on
    // arrival in the new graph, which stays under the compaction threshold.
    let segments = index.segments();
    assert_eq!(segments.len(), 1);
    let (len, dead) = (segments[0].len, segments[0].dead);
    assert!(len < 100 && len - dead == 60, "rebuilt segment holds {len} with {dead} dead");
    assert!(dead as f64 <= len as f64 * 0.3, "{dead} of {len} dead after compaction");
    let live: HashSet<u64> = ids(&index.exact(&rng.vector(32), 100).expect("exact")).into_iter().collect();
    assert_eq!(live, (40..100).collect());
}

/// The recall DESIGN §12 asks for, on 20k clustered vectors (1000 clusters, as in the
/// benchmark), queried with fresh points from the same clusters. Uniformly random 384-d vectors
/// have no neighbourhood structure and reach only ~0.66 at the default `ef_search`; embeddings
/// are not like that. Debug builds run the kernel unoptimised, so this runs in release only.
#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimised; run with --release")]
fn recall_at_10_reaches_95_percent_on_20k_clustered_vectors() {
    let dim = 384;
    let mut rng = Rng(12);
    let mut data = rng.clustered(20_200, dim, 1000, 0.8);
    let queries = data.split_off(20_000);
    let index = index_with(Config { dim, ..Config::default() }, &data);
    assert!(index.wait_idle(IDLE));
    assert!(!index.stats().segments.is_empty());
    let mut hits = 0;
    for q in &queries {
        let found: HashSet<u64> = ids(&index.search(q, 10).expect("search")).into_iter().collect();
        hits += ids(&index.exact(q, 10).expect("exact")).iter().filter(|id| found.contains(id)).count();
    }
    let recall = hits as f64 / (10 * queries.len()) as f64;
    assert!(recall >= 0.95, "recall@10 {recall}");
}

#[test]
fn a_scorer_scores_each_live_id_in_tail_or_segment_and_nothing_else() {
    let mut rng = Rng(11);
    let vectors = rng.vectors(300, 32);
    let index = segment_and_tail(config(32, 10_000, 64), &vectors, 200);
    assert!(index.remove(20));
    let replacement = rng.vector(32);
    index.insert(30, &replacement).expect("insert");
    let query = rng.vector(32);
    let cosine = |v: &[f32]| -> f32 { v.iter().zip(&query).map(|(a, b)| a * b).sum() };
    let scorer = index.scorer(&query).expect("scorer");
    // id 10 sits in the segment, id 250 in the tail.
    for id in [10usize, 250] {
        let score = scorer.score(id as u64).expect("a live id scores");
        assert!((score - cosine(&vectors[id])).abs() < 1e-3, "id {id}: {score}");
    }
    assert_eq!(scorer.score(20), None, "a removed id");
    assert_eq!(scorer.score(300), None, "an id never stored");
    let replaced = scorer.score(30).expect("a replaced id scores its new vector");
    assert!((replaced - cosine(&replacement)).abs() < 1e-3);
    // Many at once, as a scoped search asks: the live ones, in the order asked, each as alone.
    let asked = [250, 20, 10, 300, 30, 10];
    let mut many = Vec::new();
    scorer.score_many(&asked, &mut many);
    let alone: Vec<(u64, f32)> = asked.iter().filter_map(|&id| Some((id, scorer.score(id)?))).collect();
    assert_eq!(many, alone);
    assert_eq!(many.iter().map(|&(id, _)| id).collect::<Vec<_>>(), [250, 10, 30, 10]);
    drop(scorer);
    assert!(matches!(index.scorer(&[1.0; 31]), Err(Error::Dimension { expected: 32, got: 31 })));
}

#[test]
fn a_filtered_search_returns_at_least_what_it_was_asked_for_whenever_that_many_pass() {
    let mut rng = Rng(12);
    let vectors = rng.vectors(2000, 32);
    let index = sealed_index(config(32, 10_000, 32), &vectors);
    let query = rng.vector(32);
    // Half the ids pass: the graph's candidates hold enough, and every hit passes.
    let even = |id: u64| id.is_multiple_of(2);
    let hits = index.search_where(&query, 32, 5, &even).expect("search");
    assert!(hits.len() >= 5 && hits.iter().all(|&(id, _)| even(id)), "{hits:?}");
    assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "best first: {hits:?}");
    // One id passes, far from the query: the graph misses it, and the exact scan finds it.
    let far = (0..2000u64)
        .min_by(|&a, &b| {
            let cos = |id: u64| -> f32 { vectors[id as usize].iter().zip(&query).map(|(x, y)| x * y).sum() };
            cos(a).total_cmp(&cos(b))
        })
        .expect("ids");
    let only = |id: u64| id == far;
    assert_eq!(ids(&index.search_where(&query, 32, 1, &only).expect("search")), [far]);
    // Asking for none at least gives what the graph found and nothing more: the far id only
    // if the graph's own candidates (an unfiltered search's) hold it.
    let graph_found_far = ids(&index.search(&query, 32).expect("search")).contains(&far);
    let expected: Vec<u64> = if graph_found_far { vec![far] } else { Vec::new() };
    assert_eq!(ids(&index.search_where(&query, 32, 0, &only).expect("search")), expected);
}

/// The segment files in `dir`.
fn segment_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "hnsw"))
        .collect();
    files.sort();
    files
}

/// An index on `dir` holding `vectors` in sealed segments of `seal` each, then dropped.
fn write_segments(dir: &std::path::Path, config: &Config, vectors: &[Vec<f32>]) -> Vec<Vec<u64>> {
    let index = VectorIndex::open(config.clone(), dir).expect("open");
    index.restored();
    for (id, v) in vectors.iter().enumerate() {
        index.insert(id as u64, v).expect("insert");
    }
    index.seal();
    assert!(index.wait_idle(IDLE));
    assert_eq!(index.stats().tail, 0);
    let answers = vectors.iter().step_by(97).map(|q| ids(&index.search(q, 10).expect("search"))).collect();
    drop(index);
    answers
}

#[test]
fn a_reopened_index_reads_its_graphs_back_instead_of_building_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(32, 1000, 64);
    let vectors = Rng(41).clustered(3000, 32, 30, 0.6);
    let before = write_segments(dir.path(), &config, &vectors);
    assert_eq!(segment_files(dir.path()).len(), 3, "one file per sealed segment");

    let index = VectorIndex::open(config, dir.path()).expect("reopen");
    assert_eq!(index.len(), 0, "nothing is live before the store says so");
    for (id, v) in vectors.iter().enumerate() {
        index.insert(id as u64, v).expect("insert");
    }
    index.restored();
    let stats = index.stats();
    assert_eq!((stats.live, stats.tail, stats.segments.len()), (3000, 0, 3));
    assert!(stats.segments.iter().all(|s| s.dead == 0), "{:?}", stats.segments);
    let after: Vec<Vec<u64>> = vectors.iter().step_by(97).map(|q| ids(&index.search(q, 10).expect("search"))).collect();
    assert_eq!(after, before, "the same graphs give the same answers");
    assert!(index.wait_idle(IDLE));
    assert_eq!(index.stats().builds, 0, "nothing was built again");
}

#[test]
fn the_store_decides_what_a_reopened_index_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(32, 1000, 64);
    let mut rng = Rng(43);
    let vectors = rng.clustered(2000, 32, 20, 0.6);
    write_segments(dir.path(), &config, &vectors);

    // Since the files were written, the store replaced id 5's vector, lost ids 10..20 and
    // gained id 5000.
    let replacement = rng.vector(32);
    let added = rng.vector(32);
    let index = VectorIndex::open(config, dir.path()).expect("reopen");
    for (id, v) in vectors.iter().enumerate().filter(|(id, _)| !(10..20).contains(id)) {
        index.insert(id as u64, if id == 5 { &replacement } else { v }).expect("insert");
    }
    index.insert(5000, &added).expect("insert");
    index.restored();

    let stats = index.stats();
    assert_eq!((stats.live, stats.tail), (1991, 2), "the new vectors wait in the tail: {stats:?}");
    assert_eq!(stats.segments.iter().map(|s| s.dead).sum::<usize>(), 11);
    assert_eq!(ids(&index.search(&replacement, 1).expect("search")), [5]);
    assert_eq!(ids(&index.search(&added, 1).expect("search")), [5000]);
    let old_five = index.exact(&vectors[5], 2000).expect("exact");
    assert!(old_five.iter().all(|&(id, _)| !(10..20).contains(&id)), "a lost id never comes back");
    let five = old_five.iter().find(|&&(id, _)| id == 5).expect("5 is live");
    assert!(five.1 < 0.99, "id 5 answers with its new vector, not the one in the file");
    for id in 0..2000u64 {
        assert_eq!(index.contains(id), !(10..20).contains(&id), "id {id}");
    }
}

#[test]
fn a_start_that_prepares_on_its_reading_threads_decides_as_inserts_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(32, 1000, 64);
    let mut rng = Rng(47);
    let vectors = rng.clustered(2000, 32, 20, 0.6);
    write_segments(dir.path(), &config, &vectors);
    let replacement = rng.vector(32);
    let index = VectorIndex::open(config.clone(), dir.path()).expect("reopen");
    // As a start does it: batches prepared on two threads, filed by a third.
    let preparer = index.preparer();
    let items: Vec<(u64, &[f32])> = vectors
        .iter()
        .enumerate()
        .filter(|(id, _)| !(10..20).contains(id))
        .map(|(id, v)| (id as u64, if id == 5 { &replacement[..] } else { &v[..] }))
        .collect();
    let (first, second) = items.split_at(items.len() / 2);
    let prepared: Vec<Prepared> = std::thread::scope(|scope| {
        let threads: Vec<_> = [first, second]
            .into_iter()
            .map(|half| {
                scope.spawn(|| half.chunks(100).map(|c| preparer.prepare(c).expect("prepare")).collect::<Vec<_>>())
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().expect("thread")).collect()
    });
    assert_eq!(prepared.iter().map(Prepared::len).sum::<usize>(), 1990);
    index.insert_prepared(prepared).expect("insert");
    // The same vector again, as a plain insert while restoring: it is a new one, and the
    // graph's copy it replaces is dead.
    index.insert(7, &vectors[7]).expect("insert");
    drop(preparer);
    index.restored();

    let stats = index.stats();
    assert_eq!((stats.live, stats.tail), (1990, 2), "id 5's new vector and id 7's second: {stats:?}");
    assert_eq!(stats.segments.iter().map(|s| s.dead).sum::<usize>(), 12, "ids 5, 7 and 10..20");
    assert_eq!(ids(&index.search(&replacement, 1).expect("search")), [5]);
    assert_eq!(ids(&index.search(&vectors[7], 1).expect("search")), [7]);
    for id in 0..2000u64 {
        assert_eq!(index.contains(id), !(10..20).contains(&id), "id {id}");
    }
    // A batch prepared for another dimension is refused whole.
    let other = VectorIndex::new(Config { dim: 16, ..config }).expect("index");
    let foreign = other.preparer().prepare(&[(9000, &[0.5; 16][..])]).expect("prepare");
    assert!(matches!(index.insert_prepared(vec![foreign]), Err(Error::Dimension { expected: 32, got: 16 })));
    assert!(!index.contains(9000));
}

#[test]
fn an_unusable_file_is_removed_and_its_vectors_indexed_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(32, 1000, 64);
    let vectors = Rng(47).clustered(2000, 32, 20, 0.6);
    write_segments(dir.path(), &config, &vectors);
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 2);
    // One byte flipped in the middle of the first file, and a write cut short left behind.
    let mut bytes = std::fs::read(&files[0]).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&files[0], bytes).expect("write");
    std::fs::write(dir.path().join("seg-00000000000000ff.tmp"), b"half a graph").expect("write");

    let index = VectorIndex::open(config.clone(), dir.path()).expect("reopen");
    assert_eq!(segment_files(dir.path()), files[1..], "the damaged file is gone, the other kept");
    assert!(!dir.path().join("seg-00000000000000ff.tmp").exists());
    for (id, v) in vectors.iter().enumerate() {
        index.insert(id as u64, v).expect("insert");
    }
    index.restored();
    assert_eq!(index.len(), 2000);
    assert_search_matches_exact(&index, &vectors[..50], 10);
    assert!(index.wait_idle(IDLE));
    let stats = index.stats();
    assert_eq!((stats.builds, stats.segments.len()), (1, 2), "the damaged segment's vectors sealed again");
    drop(index);

    // Graphs built with other parameters are not used either.
    let other = Config { ef_search: 32, ..config };
    let index = VectorIndex::open(other, dir.path()).expect("reopen");
    assert!(segment_files(dir.path()).is_empty());
    for (id, v) in vectors.iter().enumerate() {
        index.insert(id as u64, v).expect("insert");
    }
    index.restored();
    assert_eq!((index.len(), index.stats().segments.len()), (2000, 0));
}

#[test]
fn merged_and_emptied_segments_leave_no_file_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Config { merge_factor: 3, ..config(16, 300, 64) };
    let vectors = Rng(53).vectors(900, 16);
    let index = VectorIndex::open(config.clone(), dir.path()).expect("open");
    index.restored();
    for (id, v) in vectors.iter().enumerate() {
        index.insert(id as u64, v).expect("insert");
    }
    assert!(index.wait_idle(IDLE));
    assert_eq!(index.stats().segments.len(), 1, "three seals merged into one");
    assert_eq!(segment_files(dir.path()).len(), 1, "the merged segments' files are removed");
    drop(index);

    // A store that lost everything: the graph holds nothing live, and its file goes.
    let index = VectorIndex::open(config, dir.path()).expect("reopen");
    index.restored();
    assert_eq!((index.len(), index.stats().segments.len()), (0, 0));
    assert!(segment_files(dir.path()).is_empty());
}

#[test]
fn a_directory_that_cannot_be_made_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").expect("write");
    let error = VectorIndex::open(config(8, 100, 16), &file.join("vectors")).expect_err("refused");
    assert!(matches!(error, Error::Dir(..)), "{error:?}");
    assert!(error.to_string().contains("a-file"), "{error}");
}
