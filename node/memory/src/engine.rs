//! The memory engine: one place that stores, indexes, reconciles, recalls and consolidates
//! crystals. The store's `memory` keyspace is the source of truth (crystals, embeddings and
//! the audit log share it, so a change and its audit entry commit in one batch); the vector and
//! text indexes are derived from it and rebuilt at start-up.

use std::collections::HashMap;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use druse_protocol::UnixMillis;
use druse_protocol::body::SemanticType;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::correction::{self, Decision, Reconciler};
use crate::crystal::{Crystal, CrystalId, Lifecycle, Lifespan, MemoryKind, Namespace, Origin, Status};
use crate::decay::{self, DecayClass};
use crate::embed::{self, Embedder};
use crate::governance::Scope;
use crate::hormones;
use crate::record;
use crate::scopes::Scopes;
use crate::text::{self, TextIndex};
use crate::vector::{self, VectorIndex};
use crate::{consolidation, dates};

mod add;
mod codec;
mod consolidate;
mod context;
mod load;
mod query;
mod recall;
mod reembed;
mod skills;
mod storage;
mod timed;
mod vectors;

use codec::{decode_vector, is_own};
pub use query::Query;
pub use query::kind_tag;
pub(crate) use query::{said_at, semantic_tag};
pub use recall::{Fusion, Tuning};

/// Ids handed out by the engine (crystals and audit entries): unique and rising across
/// restarts. A window of them is reserved durably before the first is used, and a restart
/// starts past the last window, so an id handed out before a crash is never handed out again.
#[derive(Debug)]
struct Ids {
    next: u64,
    reserved: u64,
}

/// Why the memory engine failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    /// A recall request that cannot be answered as asked (empty `q`, `k` out of bounds).
    #[error("{0}")]
    BadQuery(String),
    /// Recall matched only memories the caller may not read.
    #[error("{0}")]
    Private(String),
    #[error("no crystal {0}")]
    NotFound(CrystalId),
    #[error("store: {0}")]
    Db(#[from] fjall::Error),
    #[error("record {0} is corrupt: {1}")]
    Corrupt(String, String),
    #[error(transparent)]
    Embed(#[from] embed::Error),
    #[error(transparent)]
    Vector(#[from] vector::Error),
    #[error(transparent)]
    Text(#[from] text::Error),
    /// The memory service stopped before it answered (see [`crate::Handle`]).
    #[error("the memory service has stopped")]
    Stopped,
}

/// The memory engine's knobs (`[memory]` in the node config); defaults are the seeds'.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub decay: decay::Config,
    pub hormones: hormones::Config,
    pub correction: correction::Config,
    pub consolidation: consolidation::Config,
}

/// Largest memory text accepted.
pub const MAX_TEXT: usize = 16 * 1024;

/// What an agent developer stores.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMemory {
    pub text: String,
    #[serde(default = "episodic")]
    pub namespace: Namespace,
    #[serde(default)]
    pub kind: MemoryKind,
    #[serde(default = "fact")]
    pub semantic_type: SemanticType,
    #[serde(default)]
    pub origin: Origin,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub attribute: Option<String>,
    #[serde(default)]
    pub decay_class: DecayClass,
    /// Unix milliseconds or an ISO 8601 date-time.
    #[serde(default, deserialize_with = "dates::optional")]
    pub event_at: Option<UnixMillis>,
    #[serde(default)]
    pub emotional_weight: f64,
    #[serde(default)]
    pub scope: Scope,
    #[serde(default)]
    pub lifespan: Lifespan,
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// The conversation this memory came from; with `turn_at` it is indexed with its context.
    #[serde(default)]
    pub session: Option<String>,
    /// When the turn was said: Unix milliseconds or an ISO 8601 date-time.
    #[serde(default, deserialize_with = "dates::optional")]
    pub turn_at: Option<UnixMillis>,
    /// The caller's own id for this memory (at most [`MAX_EXTERNAL_ID`] bytes).
    #[serde(default)]
    pub external_id: Option<String>,
    /// The caller's own metadata, a JSON object of at most [`MAX_METADATA`] bytes.
    #[serde(default)]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// The user explicitly corrected an earlier value with this one (seed 003): the value it
    /// supersedes is replaced at confidence 1.0, without relying on the text's wording.
    #[serde(default)]
    pub correction: bool,
}

impl NewMemory {
    /// A memory of `text` with every other field at its default.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            namespace: Namespace::Episodic,
            kind: MemoryKind::default(),
            semantic_type: SemanticType::Fact,
            origin: Origin::default(),
            subject: None,
            attribute: None,
            decay_class: DecayClass::default(),
            event_at: None,
            emotional_weight: 0.0,
            scope: Scope::default(),
            lifespan: Lifespan::default(),
            ttl_ms: None,
            session: None,
            turn_at: None,
            external_id: None,
            metadata: None,
            correction: false,
        }
    }

    /// Whether this is a turn of a conversation (an interaction, or anything said in a
    /// session or at a turn time) rather than an extracted fact: turns are never reconciled
    /// against each other, and what people say to each other does not spike the agent's
    /// hormones.
    pub fn is_conversation_turn(&self) -> bool {
        self.kind == MemoryKind::Interaction || self.session.is_some() || self.turn_at.is_some()
    }
}

/// Largest `external_id` accepted, in bytes.
pub const MAX_EXTERNAL_ID: usize = 256;
/// Largest `metadata` accepted, serialised, in bytes.
pub const MAX_METADATA: usize = 4096;
/// Largest `session` accepted, in bytes.
pub const MAX_SESSION: usize = 256;
/// Most results one recall returns.
pub const MAX_K: usize = 100;

fn episodic() -> Namespace {
    Namespace::Episodic
}
fn fact() -> SemanticType {
    SemanticType::Fact
}

/// What storing a memory did.
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    /// The stored (or reinforced) crystal.
    pub crystal: Crystal,
    pub decision: Decision,
    /// The crystal this one superseded, if any.
    pub superseded: Option<CrystalId>,
}

/// One recalled crystal and why it ranked where it did.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub crystal: Crystal,
    pub score: f64,
    pub vector_rank: Option<usize>,
    pub text_rank: Option<usize>,
}

/// One lifecycle transition or supersession, as the audit log keeps it (append-only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub crystal_id: CrystalId,
    pub who: String,
    pub at: UnixMillis,
    pub from: String,
    pub to: String,
    pub why: String,
}

/// A crystal's story: its supersession chain (oldest first) and its audit entries.
#[derive(Debug, Clone, Serialize)]
pub struct History {
    pub chain: Vec<Crystal>,
    pub audit: Vec<AuditEntry>,
}

const CRYSTAL: u8 = b'c';
const EMBEDDING: u8 = b'e';
const CONTEXT: u8 = b'x';
/// A crystal's sentence vectors, one after another (see [`crate::sentences`]).
const SENTENCES: u8 = b'z';
const AUDIT: u8 = b'a';
const HORMONES: &[u8] = b"s/hormones";
/// The bound below which ids were handed out (see [`Ids`]).
pub const IDS: &[u8] = b"s/ids";

/// Audit entries sort by crystal, then by write order, so a crystal's log is one prefix scan.
fn audit_key(crystal: CrystalId, seq: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[..9].copy_from_slice(&key(AUDIT, crystal));
    k[9..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn key(prefix: u8, id: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = prefix;
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

/// The stored form of each crystal, in order. A large set (a consolidation pass) is encoded
/// on every core: it is a third of the pass's time on one.
fn encode_crystals(crystals: &[Crystal]) -> Result<Vec<Vec<u8>>, Error> {
    let encode = |c: &Crystal| record::encode(c).map_err(|e| Error::Corrupt(format!("crystal {}", c.id), e));
    if crystals.len() < 4096 {
        return crystals.iter().map(encode).collect();
    }
    // Asked only for a large set: the answer is read from the cgroup's files each time.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 {
        return crystals.iter().map(encode).collect();
    }
    let chunk = crystals.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = crystals
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(encode).collect::<Vec<_>>()))
            .collect();
        let mut out = Vec::with_capacity(crystals.len());
        for worker in workers {
            // A worker only encodes; a panic there is a bug, passed on as such.
            let part = worker.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for bytes in part {
                out.push(bytes?);
            }
        }
        Ok(out)
    })
}

/// Changes to commit together: crystals, embeddings and audit entries.
#[derive(Default)]
struct Changes {
    crystals: Vec<Crystal>,
    /// Importance recomputed for crystals that otherwise stay as they are: applied in memory,
    /// not written (it is derived, and recomputed when the engine opens).
    importance: Vec<(CrystalId, f64)>,
    vectors: Vec<(u8, CrystalId, Vec<f32>)>,
    /// Full-text documents to (re)index: a crystal's text with its context.
    texts: Vec<(CrystalId, text::Document)>,
    /// Turns whose windows now hold a turn stored with these changes: their documents are
    /// made again once the crystals are in place.
    rewindow: Vec<CrystalId>,
    audit: Vec<AuditEntry>,
    purge: Vec<CrystalId>,
}

/// How long each step of a commit took (see [`Memory::commit_timed`]).
struct CommitTimes {
    write: std::time::Duration,
    sync: std::time::Duration,
    index: std::time::Duration,
}

/// The memory engine. Its methods block (embedding, disk): a node serves it through
/// [`crate::Handle`], whose threads run them.
pub struct Memory {
    db: fjall::Database,
    tree: fjall::Keyspace,
    ids: Mutex<Ids>,
    /// Keyed by a fast hash: recall looks up every candidate here, and ids are the engine's
    /// own counter, not chosen by a peer.
    crystals: RwLock<FxHashMap<CrystalId, Crystal>>,
    /// The crystals by namespace, and the conversation turns among them by session; changed
    /// under `crystals`' write lock.
    scopes: RwLock<Scopes>,
    /// The crystals with vectors in the index beside their own (context, sentences), and
    /// which: a scoped search looks up no key a crystal does not have.
    extras: RwLock<FxHashMap<CrystalId, codec::Extra>>,
    vectors: VectorIndex,
    text: TextIndex,
    embedder: Arc<dyn Embedder>,
    hormones: Mutex<hormones::State>,
    reconciler: Box<dyn Reconciler>,
    config: Config,
    network_cortisol: AtomicU64,
    /// Whether new conversation turns are also indexed with their context.
    context: AtomicBool,
    tuning: RwLock<Tuning>,
    /// Text documents of acknowledged adds not yet committed to the BM25 index: the next
    /// search commits them first (see `add::TEXT_COMMIT_DOCS`).
    text_pending: Mutex<TextPending>,
    /// Serialises writers so reconciliation sees every earlier write.
    write: Mutex<()>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("embedder", &self.embedder.name()).field("text", &self.text).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// What indexing a set of changes left for the BM25 commit that makes them searchable.
#[derive(Debug, Default, Clone, Copy)]
struct TextPending {
    /// The highest crystal id given a new document.
    up_to: Option<CrystalId>,
    /// Whether any document was removed.
    removed: bool,
    /// How many documents were added or replaced.
    docs: usize,
    /// Whether an add since the last commit left its writes for a later sync
    /// ([`add::Durable::WithNextSync`]): the store is synced before the text index commits, so
    /// the text index never holds a document the store could lose.
    unsynced: bool,
}

impl TextPending {
    fn and(self, other: TextPending) -> TextPending {
        TextPending {
            up_to: self.up_to.max(other.up_to),
            removed: self.removed || other.removed,
            docs: self.docs + other.docs,
            unsynced: self.unsynced || other.unsynced,
        }
    }
}

impl Memory {
    /// Whether conversation turns are indexed with their context unless
    /// [`Memory::set_context_indexing`] says otherwise. On: on the labelled conversations of
    /// `node/tests/retrieval.rs` it raises hybrid recall@5 with both embedders, hashing from
    /// 0.532 to 0.597 and MiniLM from 0.726 to 0.774, almost all of it on questions that need
    /// the turn before the answer (6 → 12 and 10 → 14 of 19), for one more embedding per turn.
    pub const DEFAULT_CONTEXT_INDEXING: bool = true;

    /// Opens the engine on `db` (its keyspace [`crate::KEYSPACE`]) with its text index in
    /// `index_dir` and its vector graphs in [`vectors_dir`]`(index_dir)`, and brings both
    /// up to date with the store: both are derived from it, and can be deleted.
    pub fn open(
        db: &fjall::Database,
        index_dir: &Path,
        config: Config,
        embedder: Arc<dyn Embedder>,
        now: UnixMillis,
    ) -> Result<Self, Error> {
        let tree = crate::open_keyspace(db)?;
        let ids = Ids::stored(&tree)?;
        // The graphs come from their files and the crystals from the store: a start reads both
        // at once, so the slower of the two, not their sum, is what it waits for.
        let started = std::time::Instant::now();
        let (vectors, crystals) = std::thread::scope(|scope| {
            let graphs = scope.spawn(|| {
                VectorIndex::open(
                    vector::Config { dim: embedder.dim(), ..vector::Config::default() },
                    &vectors_dir(index_dir),
                )
            });
            let crystals = Self::read_crystals(&tree);
            (graphs.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), crystals)
        });
        let (vectors, crystals) = (vectors?, crystals?);
        tracing::info!(
            crystals = crystals.len(),
            ms = started.elapsed().as_millis() as u64,
            "crystals read from the store, beside the vector graphs"
        );
        let text = match TextIndex::open(index_dir) {
            Ok(text) => text,
            Err(error) => {
                tracing::warn!(%error, "text index unreadable; rebuilding it from the store");
                let _ = std::fs::remove_dir_all(index_dir);
                TextIndex::open(index_dir)?
            }
        };
        let hormones = match tree.get(HORMONES)? {
            Some(bytes) => {
                serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt("hormones".into(), e.to_string()))?
            }
            None => hormones::State::new(&config.hormones, now),
        };
        let tuning = Tuning::for_embedder(&*embedder);
        let memory = Self {
            db: db.clone(),
            tree,
            ids: Mutex::new(ids),
            crystals: RwLock::new(FxHashMap::default()),
            scopes: RwLock::new(Scopes::default()),
            extras: RwLock::new(FxHashMap::default()),
            vectors,
            text,
            embedder,
            hormones: Mutex::new(hormones),
            reconciler: Box::new(correction::Rules { config: config.correction.clone() }),
            config,
            network_cortisol: AtomicU64::new(0),
            context: AtomicBool::new(Self::DEFAULT_CONTEXT_INDEXING),
            tuning: RwLock::new(tuning),
            text_pending: Mutex::new(TextPending::default()),
            write: Mutex::new(()),
        };
        memory.reserve_ids()?;
        memory.load(crystals, now)?;
        Ok(memory)
    }

    /// The embedder in use (named in the node's startup line).
    pub fn embedder_name(&self) -> &str {
        self.embedder.name()
    }

    /// Whether conversation turns stored from now on are also indexed with their context:
    /// the turn before them and the day they were said (see `document`). Turns already
    /// stored keep the indexing they were stored with.
    pub fn set_context_indexing(&self, on: bool) {
        self.context.store(on, Ordering::Relaxed);
    }

    /// Sets how recall weighs what it finds (benchmarks sweep it); memories already stored
    /// keep the text documents they were indexed with.
    pub fn set_tuning(&self, tuning: Tuning) {
        *write(&self.tuning) = tuning;
    }

    /// How recall weighs what it finds.
    pub fn tuning(&self) -> Tuning {
        *read(&self.tuning)
    }

    /// Whether new conversation turns are indexed with their context.
    pub fn context_indexing(&self) -> bool {
        self.context.load(Ordering::Relaxed)
    }

    /// Sets the network cortisol override that weather drives.
    pub fn set_network_cortisol(&self, level: f64) {
        self.network_cortisol.store(level.to_bits(), Ordering::Relaxed);
    }

    fn network_cortisol(&self) -> f64 {
        f64::from_bits(self.network_cortisol.load(Ordering::Relaxed))
    }

    /// The hormone levels now.
    pub fn hormones(&self, now: UnixMillis) -> hormones::Influence {
        lock(&self.hormones).levels_at(&self.config.hormones, now)
    }

    fn hormone_state(&self) -> hormones::State {
        lock(&self.hormones).clone()
    }

    /// How hormones (and weather's cortisol) shape a consolidation pass at `now`.
    fn consolidation_modulation(&self, now: UnixMillis) -> hormones::ConsolidationModulation {
        self.hormone_state().consolidation(
            &self.config.hormones,
            self.network_cortisol(),
            self.config.consolidation.merge_threshold,
            now,
        )
    }

    /// The engine's knobs, as it was opened with them.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A copy of every stored crystal `keep` accepts (any order): how readers outside the
    /// engine (the memory map, the agent's reflection and review) see the store.
    pub fn crystals_where(&self, mut keep: impl FnMut(&Crystal) -> bool) -> Vec<Crystal> {
        read(&self.crystals).values().filter(|c| keep(c)).cloned().collect()
    }

    /// One crystal.
    pub fn get(&self, id: CrystalId) -> Option<Crystal> {
        read(&self.crystals).get(&id).cloned()
    }

    /// How many crystals the engine holds, in any lifecycle stage or status.
    pub fn len(&self) -> usize {
        read(&self.crystals).len()
    }

    /// Whether the engine holds no crystal.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many crystals are stored, by lifecycle.
    pub fn counts(&self) -> HashMap<Lifecycle, usize> {
        let mut counts = HashMap::new();
        for c in read(&self.crystals).values() {
            *counts.entry(c.lifecycle).or_insert(0) += 1;
        }
        counts
    }

    fn embed_one(&self, text: &str) -> Result<Vec<f32>, Error> {
        self.embedder
            .embed(&[text])?
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("the embedder returned nothing".into()))
    }

    /// Writes a set of changes in one batch (one atomic commit) and makes it durable, then
    /// updates the in-memory map and the derived indexes.
    fn commit(&self, changes: Changes) -> Result<(), Error> {
        self.commit_timed(changes).map(drop)
    }

    /// [`Memory::commit`], saying how long it took to write the changes to the store, to make
    /// them durable, and to bring the indexes up to date.
    fn commit_timed(&self, changes: Changes) -> Result<CommitTimes, Error> {
        let started = std::time::Instant::now();
        self.store(&changes)?;
        let written = started.elapsed();
        self.sync()?;
        let synced = started.elapsed();
        let pending = self.index(changes)?;
        self.commit_text(pending)?;
        Ok(CommitTimes { write: written, sync: synced - written, index: started.elapsed() - synced })
    }

    /// Brings the in-memory map and the derived indexes up to date with stored changes; the
    /// text documents are added but not yet committed.
    fn index(&self, changes: Changes) -> Result<TextPending, Error> {
        let Changes { crystals, importance, vectors, texts, mut rewindow, audit: _, purge } = changes;
        // A purged turn leaves the windows that held it: they are made again without it.
        if !purge.is_empty() {
            let map = read(&self.crystals);
            rewindow.extend(purge.iter().filter_map(|id| map.get(id)).flat_map(|c| self.windows_holding(c)));
            rewindow.sort_unstable();
            rewindow.dedup();
        }
        let mut unrecallable = Vec::new();
        {
            let mut map = write(&self.crystals);
            let mut scopes = write(&self.scopes);
            for id in &purge {
                if let Some(old) = map.remove(id) {
                    scopes.remove(&old);
                }
            }
            for crystal in crystals {
                if !is_live(&crystal) {
                    unrecallable.push(crystal.id);
                }
                scopes.update(map.get(&crystal.id), &crystal);
                map.insert(crystal.id, crystal);
            }
            for (id, importance) in importance {
                if let Some(c) = map.get_mut(&id) {
                    c.importance = importance;
                }
            }
        }
        for (prefix, id, vector) in &vectors {
            self.index_vector(*prefix, *id, vector)?;
        }
        // The keys each crystal has, and no other: its own, and those noted beside it.
        let keys_of = |ids: &[CrystalId]| -> Vec<u64> {
            let mut extras = write(&self.extras);
            let mut keys = Vec::with_capacity(ids.len());
            for &id in ids {
                keys.push(id);
                keys.extend(extras.remove(&id).into_iter().flat_map(|extra| extra.keys(id)));
            }
            keys
        };
        self.vectors.remove_many(keys_of(&unrecallable));
        let mut pending = TextPending { removed: !purge.is_empty(), docs: texts.len(), ..TextPending::default() };
        for (id, indexed) in &texts {
            self.text.upsert(*id, indexed)?;
            pending.up_to = pending.up_to.max(Some(*id));
        }
        for id in self.index_windows(rewindow)? {
            pending.docs += 1;
            pending.up_to = pending.up_to.max(Some(id));
        }
        self.vectors.remove_many(keys_of(&purge));
        for id in &purge {
            self.text.remove(*id);
        }
        Ok(pending)
    }

    /// Commits the text documents indexed since the last commit, making them searchable.
    fn commit_text(&self, pending: TextPending) -> Result<(), Error> {
        if pending.unsynced {
            self.sync()?;
        }
        if let Some(max_id) = pending.up_to {
            let up_to = self.text.indexed_up_to().unwrap_or(0).max(max_id);
            self.text.commit(up_to)?;
        } else if pending.removed {
            self.text.commit(self.text.indexed_up_to().unwrap_or(0))?;
        }
        Ok(())
    }

    /// Each of `ids` still stored, read as it is now and passed through `edit` (`None` leaves
    /// it out), with what no edit may change put back: its id, text, lifecycle and status. Its
    /// importance is kept in [0, 1].
    pub(crate) fn edited(&self, ids: &[CrystalId], mut edit: impl FnMut(Crystal) -> Option<Crystal>) -> Vec<Crystal> {
        ids.iter()
            .filter_map(|&id| {
                let original = self.get(id)?;
                let (text, lifecycle, status) = (original.text.clone(), original.lifecycle, original.status);
                let edited = edit(original)?;
                Some(Crystal { id, text, lifecycle, status, importance: edited.importance.clamp(0.0, 1.0), ..edited })
            })
            .collect()
    }

    /// [`Memory::edited`], written back: under the writer lock, so each edit starts from what
    /// is stored and no write lands in between, audited (by `actor`, because `why`) as a
    /// change that keeps the crystal's state, and committed in one durable batch. `edit` runs
    /// under that lock, so it must not write to memory itself.
    pub(crate) fn rewrite(
        &self,
        ids: &[CrystalId],
        actor: &str,
        why: &str,
        now: UnixMillis,
        edit: impl FnMut(Crystal) -> Option<Crystal>,
    ) -> Result<Vec<Crystal>, Error> {
        let _writer = lock(&self.write);
        let crystals = self.edited(ids, edit);
        if !crystals.is_empty() {
            let audit = crystals
                .iter()
                .map(|c| audit(c, actor, now, c.lifecycle.as_str(), c.lifecycle.as_str(), why))
                .collect();
            self.commit(Changes { crystals: crystals.clone(), audit, ..Changes::default() })?;
        }
        Ok(crystals)
    }

    fn persist_hormones(&self) -> Result<(), Error> {
        let state = self.hormone_state();
        let bytes = serde_json::to_vec(&state).map_err(|e| Error::Corrupt("hormones".into(), e.to_string()))?;
        self.tree.insert(HORMONES, bytes)?;
        Ok(())
    }

    /// The supersession chain through `id` (oldest first) and every audit entry about it.
    pub fn history(&self, id: CrystalId) -> Result<History, Error> {
        let start = self.get(id).ok_or(Error::NotFound(id))?;
        let mut chain = vec![start.clone()];
        let mut cursor = start.clone();
        while let Some(older) = cursor.supersedes.and_then(|s| self.get(s)) {
            if chain.len() > 1000 {
                break;
            }
            chain.insert(0, older.clone());
            cursor = older;
        }
        let mut cursor = start;
        while let Some(newer) = cursor.superseded_by.and_then(|s| self.get(s)) {
            if chain.len() > 2000 {
                break;
            }
            chain.push(newer.clone());
            cursor = newer;
        }
        let mut audit = Vec::new();
        for crystal in &chain {
            for entry in self.tree.prefix(key(AUDIT, crystal.id)) {
                let v = entry.value()?;
                audit.push(serde_json::from_slice(&v).map_err(|e| Error::Corrupt("audit".into(), e.to_string()))?);
            }
        }
        audit.sort_by_key(|e: &AuditEntry| e.at);
        Ok(History { chain, audit })
    }

    /// Seed 004's importance of `c` at `now`, with `resistance` the hormonal decay resistance.
    fn importance(&self, c: &Crystal, now: UnixMillis, resistance: f64) -> f64 {
        self.config.decay.importance(&decay_inputs(c), now, resistance)
    }

    /// Makes every write durable, and commits the text index.
    pub fn flush(&self) -> Result<(), Error> {
        self.sync()?;
        self.publish_text()
    }

    /// The nearest vectors to `embedding` (crystal ids, context vectors left out), best first.
    fn nearest(&self, embedding: &[f32], k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let hits = self.vectors.search(embedding, self.vector_depth(k))?;
        Ok(hits.into_iter().filter(|(key, _)| is_own(*key)).take(k).collect())
    }

    /// The stored embedding of a crystal.
    pub fn embedding(&self, id: CrystalId) -> Option<Vec<f32>> {
        self.tree.get(key(EMBEDDING, id)).ok().flatten().map(|b| decode_vector(&b))
    }
}

/// Where the engine whose text index is in `index_dir` keeps its vector graphs: the sibling
/// directory `vectors`.
pub fn vectors_dir(index_dir: &Path) -> std::path::PathBuf {
    index_dir.parent().unwrap_or(Path::new(".")).join("vectors")
}

/// Whether `c` is active and in a lifecycle that can be recalled (not archived or expired):
/// what consolidation scores, what has an importance to keep current, and what the vector
/// index holds.
fn is_live(c: &Crystal) -> bool {
    c.status == Status::Active && c.lifecycle.is_recallable()
}

/// The decay view of a crystal.
fn decay_inputs(c: &Crystal) -> decay::Inputs {
    decay::Inputs {
        class: c.decay_class,
        access_count: c.access_count,
        last_access: c.last_access,
        emotional_valence: c.emotional_valence,
        emotional_weight: c.emotional_weight,
        event_at: c.event_at,
    }
}

/// An audit entry for `crystal`.
fn audit(crystal: &Crystal, who: &str, at: UnixMillis, from: &str, to: &str, why: &str) -> AuditEntry {
    AuditEntry { crystal_id: crystal.id, who: who.into(), at, from: from.into(), to: to.into(), why: why.into() }
}
