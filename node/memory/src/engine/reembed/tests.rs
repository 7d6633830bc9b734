use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::crystal::{MemoryKind, Namespace};
use crate::embed::{self, Embedder, Hashing};
use crate::engine::{Config, NewMemory};

const NOW: u64 = 1_795_305_600_000;

/// The hashing embedder under another name and size, counting the texts it embeds.
#[derive(Debug)]
struct Counting {
    inner: Hashing,
    texts: AtomicUsize,
}

impl Counting {
    fn new(dim: usize) -> Arc<Self> {
        Arc::new(Self { inner: Hashing::new(dim), texts: AtomicUsize::new(0) })
    }
}

impl Embedder for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, embed::Error> {
        self.texts.fetch_add(texts.len(), Ordering::Relaxed);
        self.inner.embed(texts)
    }
}

/// The store in `dir`.
fn db(dir: &Path) -> fjall::Database {
    crate::testing::database(&dir.join("db"))
}

fn open(dir: &Path, embedder: Arc<dyn Embedder>) -> Memory {
    Memory::open(&db(dir), &dir.join("index"), Config::default(), embedder, NOW).unwrap()
}

fn turn(text: &str, minute: u64) -> NewMemory {
    NewMemory {
        kind: MemoryKind::Interaction,
        namespace: Namespace::User("mel".into()),
        session: Some("s1".into()),
        turn_at: Some(NOW + minute * 60_000),
        ..NewMemory::text(text)
    }
}

/// Stores two turns with the 384-d hashing embedder and closes the store.
fn stored(dir: &Path) -> [CrystalId; 2] {
    let m = open(dir, Arc::new(Hashing::new(384)));
    let a = m.add(turn("Mel: what did you paint last week?", 0), "user", NOW).unwrap().crystal.id;
    let b = m.add(turn("Jo: a sunset over the lake", 1), "user", NOW).unwrap().crystal.id;
    [a, b]
}

#[test]
fn a_store_opened_with_another_embedder_is_re_embedded_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b] = stored(dir.path());
    let embedder = Counting::new(256);
    let m = open(dir.path(), embedder.clone());
    assert_eq!(embedder.texts.load(Ordering::Relaxed), 2, "each stored text embedded once");
    assert_eq!(m.embedding(a).map(|v| v.len()), Some(256));
    let expected = embedder.inner.embed(&["Jo: a sunset over the lake"]).unwrap().pop().unwrap();
    let stored = m.embedding(b).unwrap();
    assert_eq!(stored.len(), expected.len());
    assert!(stored.iter().zip(&expected).all(|(s, e)| (s - e).abs() < 1e-4), "stored as the new embedder made it");
    let context = m.tree.get(key(CONTEXT, b)).unwrap().map(|v| crate::engine::decode_vector(&v).len());
    assert_eq!(context, Some(256), "the context vector is remade from the new vectors");
    let hits = m.vector_hits("sunset over the lake", 1).unwrap();
    assert_eq!(hits.first().map(|h| h.0), Some(b));
}

#[test]
fn a_store_reopened_with_its_own_embedder_is_not_re_embedded() {
    let dir = tempfile::tempdir().unwrap();
    stored(dir.path());
    let embedder = Counting::new(384);
    let m = open(dir.path(), embedder.clone());
    assert_eq!(m.reembed_if_changed().unwrap(), 0);
    assert_eq!(embedder.texts.load(Ordering::Relaxed), 0);
}

#[test]
fn a_store_that_never_recorded_its_embedder_is_re_embedded_once() {
    let dir = tempfile::tempdir().unwrap();
    stored(dir.path());
    {
        let db = db(dir.path());
        crate::open_keyspace(&db).unwrap().remove(EMBEDDER).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let embedder = Counting::new(384);
    let m = open(dir.path(), embedder.clone());
    assert_eq!(embedder.texts.load(Ordering::Relaxed), 2);
    assert_eq!(m.reembed_if_changed().unwrap(), 0, "recorded now: the next open does nothing");
}
