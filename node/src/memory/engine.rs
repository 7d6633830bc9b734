//! The memory engine: one place that stores, indexes, reconciles, recalls and consolidates
//! crystals. sled is the source of truth (crystals, embeddings and the audit log share one
//! tree so a change and its audit entry commit together); the vector and text indexes are
//! derived from it and rebuilt at start-up.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use druse_protocol::UnixMillis;
use druse_protocol::body::SemanticType;
use serde::{Deserialize, Serialize};

use crate::governance::{self, Caller, Scope};
use crate::memory::correction::{self, Candidate, Decision, Reconciler};
use crate::memory::crystal::{
    Crystal, CrystalId, Governance, Lifecycle, Lifespan, MemoryKind, Namespace, Origin, ProvenanceNode, Status,
};
use crate::memory::decay::{self, DecayClass};
use crate::memory::embed::{self, Embedder};
use crate::memory::hormones;
use crate::memory::text::{self, TextIndex};
use crate::memory::turns::Turns;
use crate::memory::vector::{self, VectorIndex};
use crate::memory::{consolidation, dates};

/// Why the memory engine failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    #[error("no crystal {0}")]
    NotFound(CrystalId),
    #[error("store: {0}")]
    Db(#[from] sled::Error),
    #[error("record {0} is corrupt: {1}")]
    Corrupt(String, serde_json::Error),
    #[error(transparent)]
    Embed(#[from] embed::Error),
    #[error(transparent)]
    Vector(#[from] vector::Error),
    #[error(transparent)]
    Text(#[from] text::Error),
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
    #[serde(default)]
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
    #[serde(default)]
    pub turn_at: Option<UnixMillis>,
}

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

/// A recall request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Query {
    pub q: String,
    #[serde(default = "ten")]
    pub k: usize,
    #[serde(default)]
    pub namespace: Option<Namespace>,
    #[serde(default)]
    pub kind: Option<MemoryKind>,
    #[serde(default)]
    pub semantic_type: Option<SemanticType>,
}

fn ten() -> usize {
    10
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
const AUDIT: u8 = b'a';
const HORMONES: &[u8] = b"s/hormones";

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

/// Vector-index keys: a crystal alone, or a crystal with its conversation context.
const CONTEXT_BIT: u64 = 1 << 63;

fn encode_vector(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode_vector(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Refuses a memory the engine must not store.
fn check(new: &NewMemory) -> Result<(), Error> {
    if new.text.trim().is_empty() {
        return Err(Error::Invalid("text must not be empty".into()));
    }
    if new.text.len() > MAX_TEXT {
        return Err(Error::Invalid(format!("text is {} bytes, over the cap of {MAX_TEXT}", new.text.len())));
    }
    if !(0.0..=1.0).contains(&new.emotional_weight) {
        return Err(Error::Invalid("emotional_weight must be in [0, 1]".into()));
    }
    if new.lifespan == Lifespan::Ttl && new.ttl_ms.is_none() {
        return Err(Error::Invalid("a ttl lifespan needs ttl_ms".into()));
    }
    Ok(())
}

/// Changes to commit together: crystals, embeddings and audit entries.
#[derive(Default)]
pub(crate) struct Changes {
    pub(crate) crystals: Vec<Crystal>,
    pub(crate) vectors: Vec<(u8, CrystalId, Vec<f32>)>,
    /// Full-text documents to (re)index: a crystal's text with its context.
    pub(crate) texts: Vec<(CrystalId, text::Document)>,
    pub(crate) audit: Vec<AuditEntry>,
    pub(crate) purge: Vec<CrystalId>,
}

/// The memory engine. Share it behind an `Arc`; its methods block (embedding, disk), so async
/// callers use `spawn_blocking`.
pub struct Memory {
    db: sled::Db,
    tree: sled::Tree,
    pub(crate) crystals: RwLock<HashMap<CrystalId, Crystal>>,
    /// The conversation turns among `crystals`, changed under `crystals`' write lock.
    turns: RwLock<Turns>,
    vectors: VectorIndex,
    text: TextIndex,
    embedder: Arc<dyn Embedder>,
    hormones: Mutex<hormones::State>,
    reconciler: Box<dyn Reconciler>,
    pub(crate) config: Config,
    network_cortisol: AtomicU64,
    /// Whether new conversation turns are also indexed with their context.
    context: AtomicBool,
    /// Serialises writers so reconciliation sees every earlier write.
    pub(crate) write: Mutex<()>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("embedder", &self.embedder.name()).field("text", &self.text).finish()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
}

impl TextPending {
    fn and(self, other: TextPending) -> TextPending {
        TextPending { up_to: self.up_to.max(other.up_to), removed: self.removed || other.removed }
    }
}

/// How many texts [`Memory::add_many`] embeds in one call.
const EMBED_BATCH: usize = 256;

impl Memory {
    /// Whether conversation turns are indexed with their context unless
    /// [`Memory::set_context_indexing`] says otherwise. On: on the labelled conversations of
    /// `node/tests/retrieval.rs` it raises hybrid recall@5 with both embedders, hashing from
    /// 0.532 to 0.597 and MiniLM from 0.726 to 0.774, almost all of it on questions that need
    /// the turn before the answer (6 → 12 and 10 → 14 of 19), for one more embedding per turn.
    pub const DEFAULT_CONTEXT_INDEXING: bool = true;

    /// Opens the engine on `db` (tree `memory`) with its text index in `index_dir`, and
    /// rebuilds the derived indexes from the store.
    pub fn open(
        db: &sled::Db,
        index_dir: &Path,
        config: Config,
        embedder: Arc<dyn Embedder>,
        now: UnixMillis,
    ) -> Result<Self, Error> {
        let tree = db.open_tree("memory")?;
        let vectors = VectorIndex::new(vector::Config { dim: embedder.dim(), ..vector::Config::default() })?;
        let text = match TextIndex::open(index_dir) {
            Ok(text) => text,
            Err(error) => {
                tracing::warn!(%error, "text index unreadable; rebuilding it from the store");
                let _ = std::fs::remove_dir_all(index_dir);
                TextIndex::open(index_dir)?
            }
        };
        let hormones = match tree.get(HORMONES)? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt("hormones".into(), e))?,
            None => hormones::State::new(&config.hormones, now),
        };
        let memory = Self {
            db: db.clone(),
            tree,
            crystals: RwLock::new(HashMap::new()),
            turns: RwLock::new(Turns::default()),
            vectors,
            text,
            embedder,
            hormones: Mutex::new(hormones),
            reconciler: Box::new(correction::Rules { config: config.correction.clone() }),
            config,
            network_cortisol: AtomicU64::new(0),
            context: AtomicBool::new(Self::DEFAULT_CONTEXT_INDEXING),
            write: Mutex::new(()),
        };
        memory.load()?;
        Ok(memory)
    }

    fn load(&self) -> Result<(), Error> {
        let indexed_up_to = self.text.indexed_up_to();
        let mut max_id = 0;
        let mut map = HashMap::new();
        for entry in self.tree.scan_prefix([CRYSTAL]) {
            let (k, v) = entry?;
            let crystal: Crystal =
                serde_json::from_slice(&v).map_err(|e| Error::Corrupt(format!("crystal {k:?}"), e))?;
            max_id = max_id.max(crystal.id);
            map.insert(crystal.id, crystal);
        }
        let mut turns = Turns::default();
        for crystal in map.values() {
            turns.insert(crystal);
        }
        *write(&self.turns) = turns;
        *write(&self.crystals) = map;
        let lagging: Vec<Crystal> =
            read(&self.crystals).values().filter(|c| indexed_up_to.is_none_or(|up_to| c.id > up_to)).cloned().collect();
        for crystal in &lagging {
            self.text.upsert(crystal.id, &self.document(crystal))?;
        }
        for prefix in [EMBEDDING, CONTEXT] {
            for entry in self.tree.scan_prefix([prefix]) {
                let (k, v) = entry?;
                let Some(id) = k.get(1..9).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes) else { continue };
                if self.get(id).is_some_and(|c| c.status == Status::Active) {
                    let vkey = if prefix == CONTEXT { id | CONTEXT_BIT } else { id };
                    self.vectors.insert(vkey, &decode_vector(&v))?;
                }
            }
        }
        if indexed_up_to != Some(max_id) && max_id > 0 {
            self.text.commit(max_id)?;
        }
        Ok(())
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

    /// Whether new conversation turns are indexed with their context.
    pub fn context_indexing(&self) -> bool {
        self.context.load(Ordering::Relaxed)
    }

    /// Sets the network cortisol override that weather drives.
    pub fn set_network_cortisol(&self, level: f64) {
        self.network_cortisol.store(level.to_bits(), Ordering::Relaxed);
    }

    pub(crate) fn network_cortisol(&self) -> f64 {
        f64::from_bits(self.network_cortisol.load(Ordering::Relaxed))
    }

    /// The hormone levels now.
    pub fn hormones(&self, now: UnixMillis) -> hormones::Influence {
        lock(&self.hormones).levels_at(&self.config.hormones, now)
    }

    pub(crate) fn hormone_state(&self) -> hormones::State {
        lock(&self.hormones).clone()
    }

    /// One crystal.
    pub fn get(&self, id: CrystalId) -> Option<Crystal> {
        read(&self.crystals).get(&id).cloned()
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

    /// Stores a memory: tags its sensitivity, stamps its hormones, reconciles it against the
    /// most similar active observations, and commits it, any supersession and their audit
    /// entries in one batch, made durable before returning.
    pub fn add(&self, new: NewMemory, actor: &str, now: UnixMillis) -> Result<Added, Error> {
        check(&new)?;
        let embedding = self.embed_one(&new.text)?;
        let _writer = lock(&self.write);
        let (added, changes) = self.prepare(new, embedding, actor, now)?;
        self.commit(changes, true)?;
        self.persist_hormones()?;
        Ok(added)
    }

    /// Stores many memories exactly as [`Memory::add`] would, one after another (each is
    /// reconciled against all before it), but embeds them in batches and makes them durable
    /// and searchable by text once, at the end: an import, or a conversation's backlog.
    ///
    /// Nothing is stored unless every memory is valid. If one fails later (the embedder, the
    /// disk), those before it stay stored and durable, and the error is returned.
    pub fn add_many(&self, news: Vec<NewMemory>, actor: &str, now: UnixMillis) -> Result<Vec<Added>, Error> {
        for new in &news {
            check(new)?;
        }
        let mut added = Vec::with_capacity(news.len());
        let mut pending = TextPending::default();
        let outcome = (|| -> Result<(), Error> {
            let mut rest = news;
            while !rest.is_empty() {
                let tail = rest.split_off(rest.len().min(EMBED_BATCH));
                let chunk = std::mem::replace(&mut rest, tail);
                let texts: Vec<&str> = chunk.iter().map(|n| n.text.as_str()).collect();
                let embeddings = self.embedder.embed(&texts)?;
                if embeddings.len() != chunk.len() {
                    return Err(Error::Invalid("the embedder returned the wrong number of vectors".into()));
                }
                let _writer = lock(&self.write);
                for (new, embedding) in chunk.into_iter().zip(embeddings) {
                    let (one, changes) = self.prepare(new, embedding, actor, now)?;
                    self.store(&changes)?;
                    pending = pending.and(self.index(changes)?);
                    added.push(one);
                }
            }
            Ok(())
        })();
        let settled = (|| -> Result<(), Error> {
            let _writer = lock(&self.write);
            self.db.flush()?;
            self.commit_text(pending)?;
            self.persist_hormones()
        })();
        outcome.and(settled).map(|()| added)
    }

    /// Decides what storing `new` (embedded as `embedding`) changes. The caller holds the
    /// writer lock and commits the changes before releasing it.
    fn prepare(
        &self,
        new: NewMemory,
        embedding: Vec<f32>,
        actor: &str,
        now: UnixMillis,
    ) -> Result<(Added, Changes), Error> {
        let influence = {
            let mut state = lock(&self.hormones);
            for event in hormones::detect(&new.text) {
                state.spike(&self.config.hormones, event, now);
            }
            state.crystal_influence(&self.config.hormones, &new.text, new.origin == Origin::Session, now)
        };
        let decision = if new.kind == MemoryKind::Observation {
            let candidates = self.candidates(&new, &embedding)?;
            self.reconciler.reconcile(&new.text, new.subject.as_deref(), new.attribute.as_deref(), &candidates)
        } else {
            Decision::Add
        };
        let mut changes = Changes::default();
        let (crystal, superseded) = match decision {
            Decision::Noop { target } => {
                let mut old = self.get(target).ok_or(Error::NotFound(target))?;
                let (confidence, clock) = self.config.decay.reinforce(old.confidence, now);
                old.confidence = confidence;
                old.last_access = clock;
                changes.audit.push(audit(&old, actor, now, "active", "active", "reinforced: said again"));
                changes.crystals.push(old.clone());
                (old, None)
            }
            Decision::Delete { target } => {
                let mut old = self.get(target).ok_or(Error::NotFound(target))?;
                old.status = Status::Superseded;
                changes.audit.push(audit(
                    &old,
                    actor,
                    now,
                    "active",
                    "superseded",
                    &format!("retracted: {}", new.text),
                ));
                changes.crystals.push(old.clone());
                (old, Some(target))
            }
            Decision::Add | Decision::Update { .. } => {
                let id = self.db.generate_id()? + 1;
                let mut crystal = self.new_crystal(id, &new, influence, actor, now)?;
                if let Decision::Update { target, confidence } = decision {
                    let mut old = self.get(target).ok_or(Error::NotFound(target))?;
                    crystal.confidence = confidence;
                    crystal.supersedes = Some(target);
                    crystal.subject = crystal.subject.or_else(|| old.subject.clone());
                    crystal.attribute = crystal.attribute.or_else(|| old.attribute.clone());
                    crystal.governance.provenance.push(ProvenanceNode {
                        crystal_id: id,
                        operation: "superseded".into(),
                        actor: actor.into(),
                        timestamp: now,
                        parent_ids: vec![target],
                    });
                    old.status = Status::Superseded;
                    old.superseded_by = Some(id);
                    let why = if correction::is_explicit_correction(&new.text) {
                        format!("explicit correction by {id} (confidence 1.0)")
                    } else {
                        tracing::info!(
                            old = target,
                            new = id,
                            "memory conflict: a new value supersedes without a correction signal"
                        );
                        format!(
                            "conflict: newer value {id} supersedes without a correction signal (confidence {confidence})"
                        )
                    };
                    changes.audit.push(audit(&old, actor, now, "active", "superseded", &why));
                    changes.crystals.push(old);
                }
                let document = self.document(&crystal);
                if !document.context.is_empty() {
                    changes.vectors.push((CONTEXT, id, self.embed_one(&document.joined())?));
                }
                changes.vectors.push((EMBEDDING, id, embedding));
                changes.texts.push((id, document));
                changes.audit.push(audit(&crystal, actor, now, "none", crystal.lifecycle.as_str(), "created"));
                changes.crystals.push(crystal.clone());
                let superseded = crystal.supersedes;
                (crystal, superseded)
            }
        };
        Ok((Added { crystal, decision, superseded }, changes))
    }

    fn new_crystal(
        &self,
        id: CrystalId,
        new: &NewMemory,
        influence: hormones::Influence,
        actor: &str,
        now: UnixMillis,
    ) -> Result<Crystal, Error> {
        let sensitivity = governance::tag_sensitivity(&new.text);
        let lifecycle = if new.semantic_type == SemanticType::Skill { Lifecycle::Frozen } else { Lifecycle::Generated };
        Ok(Crystal {
            id,
            text: new.text.clone(),
            namespace: new.namespace.clone(),
            kind: new.kind,
            semantic_type: new.semantic_type,
            origin: new.origin,
            lifecycle,
            status: Status::Active,
            supersedes: None,
            superseded_by: None,
            subject: new.subject.clone(),
            attribute: new.attribute.clone(),
            confidence: 0.9,
            decay_class: new.decay_class,
            event_at: new.event_at,
            governance: Governance {
                scope: new.scope,
                lifespan: new.lifespan,
                ttl_ms: new.ttl_ms,
                priority: 0.5,
                sensitivity,
                provenance: vec![ProvenanceNode {
                    crystal_id: id,
                    operation: "created".into(),
                    actor: actor.into(),
                    timestamp: now,
                    parent_ids: Vec::new(),
                }],
                peer_origin: None,
            },
            hormones: influence,
            emotional_valence: influence.valence(),
            emotional_weight: new.emotional_weight,
            importance: decay::frequency(0),
            access_count: 0,
            last_access: now,
            created_at: now,
            parent_id: None,
            session: new.session.clone(),
            turn_at: new.turn_at,
            curiosity_boost: 0.0,
            steering_reward: 0.0,
        })
    }

    /// The three most similar active observations in the namespace (seed 000), plus any with
    /// the same subject and attribute.
    fn candidates(&self, new: &NewMemory, embedding: &[f32]) -> Result<Vec<Candidate>, Error> {
        let crystals = read(&self.crystals);
        let usable = |c: &Crystal| {
            c.status == Status::Active && c.kind == MemoryKind::Observation && c.namespace == new.namespace
        };
        let to_candidate = |c: &Crystal, similarity: f32| Candidate {
            id: c.id,
            text: c.text.clone(),
            similarity: f64::from(similarity),
            subject: c.subject.clone(),
            attribute: c.attribute.clone(),
            created_at: c.created_at,
        };
        let mut out = Vec::new();
        if let (Some(s), Some(a)) = (&new.subject, &new.attribute) {
            out.extend(
                crystals
                    .values()
                    .filter(|c| usable(c))
                    .filter(|c| correction::same_key(c.subject.as_deref(), c.attribute.as_deref(), s, a))
                    .map(|c| to_candidate(c, 1.0)),
            );
        }
        for (key, similarity) in self.vectors.search(embedding, self.vector_depth(64))? {
            if key & CONTEXT_BIT != 0 || out.len() >= self.config.correction.candidates {
                continue;
            }
            if let Some(c) = crystals.get(&key).filter(|c| usable(c) && !out.iter().any(|o| o.id == c.id)) {
                out.push(to_candidate(c, similarity));
            }
        }
        Ok(out)
    }

    /// The turn said just before `turn_at` in the same conversation.
    fn previous_turn(&self, namespace: &Namespace, session: &str, turn_at: UnixMillis) -> Option<Crystal> {
        let id = read(&self.turns).before(namespace, session, turn_at)?;
        self.get(id)
    }

    /// Writes a set of changes in one sled batch (one atomic commit), then updates the
    /// in-memory map and the derived indexes.
    pub(crate) fn commit(&self, changes: Changes, durable: bool) -> Result<(), Error> {
        let t = std::time::Instant::now();
        let n = changes.crystals.len();
        self.store(&changes)?;
        let t1 = t.elapsed();
        if durable {
            self.db.flush()?;
        }
        let t2 = t.elapsed();
        let pending = self.index(changes)?;
        let t3 = t.elapsed();
        self.commit_text(pending)?;
        if n > 1000 { eprintln!("PROF commit n={n} store {t1:?} flush {:?} index {:?} text {:?}", t2 - t1, t3 - t2, t.elapsed() - t3); }
        Ok(())
    }

    /// Writes a set of changes to sled in one batch (one atomic commit), not yet flushed.
    fn store(&self, changes: &Changes) -> Result<(), Error> {
        let t = std::time::Instant::now();
        let mut batch = sled::Batch::default();
        for crystal in &changes.crystals {
            let bytes =
                serde_json::to_vec(crystal).map_err(|e| Error::Corrupt(format!("crystal {}", crystal.id), e))?;
            batch.insert(&key(CRYSTAL, crystal.id), bytes);
        }
        for (prefix, id, vector) in &changes.vectors {
            batch.insert(&key(*prefix, *id), encode_vector(vector));
        }
        for entry in &changes.audit {
            let seq = self.db.generate_id()?;
            let bytes = serde_json::to_vec(entry).map_err(|e| Error::Corrupt("audit".into(), e))?;
            batch.insert(&audit_key(entry.crystal_id, seq), bytes);
        }
        for id in &changes.purge {
            for prefix in [CRYSTAL, EMBEDDING, CONTEXT] {
                batch.remove(&key(prefix, *id));
            }
        }
        let t1 = t.elapsed();
        self.tree.apply_batch(batch)?;
        if changes.crystals.len() > 1000 { eprintln!("PROF store build {t1:?} apply {:?}", t.elapsed() - t1); }
        Ok(())
    }

    /// Brings the in-memory map and the derived indexes up to date with stored changes; the
    /// text documents are added but not yet committed.
    fn index(&self, changes: Changes) -> Result<TextPending, Error> {
        let Changes { crystals, vectors, texts, audit: _, purge } = changes;
        let mut unrecallable = Vec::new();
        {
            let mut map = write(&self.crystals);
            let mut turns = write(&self.turns);
            for id in &purge {
                if let Some(old) = map.remove(id) {
                    turns.remove(&old);
                }
            }
            for crystal in crystals {
                if crystal.status == Status::Superseded || !crystal.lifecycle.is_recallable() {
                    unrecallable.push(crystal.id);
                }
                turns.update(map.get(&crystal.id), &crystal);
                map.insert(crystal.id, crystal);
            }
        }
        for (prefix, id, vector) in &vectors {
            let vkey = if *prefix == CONTEXT { id | CONTEXT_BIT } else { *id };
            self.vectors.insert(vkey, vector)?;
        }
        for id in unrecallable {
            self.vectors.remove(id);
            self.vectors.remove(id | CONTEXT_BIT);
        }
        let mut pending = TextPending { up_to: None, removed: !purge.is_empty() };
        for (id, indexed) in &texts {
            self.text.upsert(*id, indexed)?;
            pending.up_to = pending.up_to.max(Some(*id));
        }
        for id in &purge {
            self.vectors.remove(*id);
            self.vectors.remove(*id | CONTEXT_BIT);
            self.text.remove(*id);
        }
        Ok(pending)
    }

    /// Commits the text documents indexed since the last commit, making them searchable.
    fn commit_text(&self, pending: TextPending) -> Result<(), Error> {
        if let Some(max_id) = pending.up_to {
            let up_to = self.text.indexed_up_to().unwrap_or(0).max(max_id);
            self.text.commit(up_to)?;
        } else if pending.removed {
            self.text.commit(self.text.indexed_up_to().unwrap_or(0))?;
        }
        Ok(())
    }

    /// What a crystal is indexed as: its text, and as context the text it superseded (a
    /// correction is recalled by what it corrects) and, for a conversation turn when context
    /// indexing is on, the turn before it and the day it was said. The context embedding and
    /// the BM25 document are both made from this.
    fn document(&self, crystal: &Crystal) -> text::Document {
        let mut context = Vec::new();
        if let Some(old) = crystal.supersedes.and_then(|s| self.get(s)) {
            context.push(old.text);
        }
        if self.context_indexing()
            && let (Some(session), Some(turn_at)) = (&crystal.session, crystal.turn_at)
        {
            if let Some(previous) = self.previous_turn(&crystal.namespace, session, turn_at) {
                context.push(previous.text);
            }
            context.push(dates::describe(turn_at));
        }
        text::Document { text: crystal.text.clone(), context }
    }

    /// How many vector candidates to ask for: at most the index's `ef_search`, beyond which
    /// every segment would be scanned exactly.
    fn vector_depth(&self, wanted: usize) -> usize {
        wanted.min(self.vectors.config().ef_search)
    }

    /// The crystals whose vectors (alone or with context, whichever is nearer) are nearest to
    /// `embedding`, best first, as recall takes them: from the index, or by an exact scan.
    fn vector_candidates(&self, embedding: &[f32], depth: usize, exact: bool) -> Result<Vec<(CrystalId, f32)>, Error> {
        let hits = if exact {
            self.vectors.exact(embedding, depth)?
        } else {
            self.vectors.search(embedding, self.vector_depth(depth))?
        };
        let mut seen = std::collections::HashSet::with_capacity(hits.len());
        Ok(hits
            .into_iter()
            .map(|(key, score)| (key & !CONTEXT_BIT, score))
            .filter(|(id, _)| seen.insert(*id))
            .collect())
    }

    /// The `k` crystals whose vectors are nearest to `q`, as recall's vector half finds them:
    /// what a benchmark measures that half's latency and recall with (against
    /// [`Memory::vector_hits_exact`]). Lifecycle and scope are not applied.
    pub fn vector_hits(&self, q: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let mut hits = self.vector_candidates(&self.embed_one(q)?, candidate_depth(k), false)?;
        hits.truncate(k);
        Ok(hits)
    }

    /// [`Memory::vector_hits`] by an exact scan of every stored vector.
    pub fn vector_hits_exact(&self, q: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let mut hits = self.vector_candidates(&self.embed_one(q)?, candidate_depth(k), true)?;
        hits.truncate(k);
        Ok(hits)
    }

    /// The vector index's shape and build history, for operators and benchmarks.
    pub fn vector_stats(&self) -> vector::Stats {
        self.vectors.stats()
    }

    /// Blocks until the vector index has no build left to run, or `timeout` passes; true when
    /// idle. For tests, benchmarks and orderly shutdown; never call it from an async task.
    pub fn wait_indexed(&self, timeout: Duration) -> bool {
        self.vectors.wait_idle(timeout)
    }

    fn persist_hormones(&self) -> Result<(), Error> {
        let state = self.hormone_state();
        let bytes = serde_json::to_vec(&state).map_err(|e| Error::Corrupt("hormones".into(), e))?;
        self.tree.insert(HORMONES, bytes)?;
        Ok(())
    }

    /// Hybrid recall: vector and BM25 candidates fused by reciprocal rank (k = 60), then
    /// scaled by importance, recency and hormones, filtered to what `caller` may see.
    ///
    /// `score = rrf × (1 + importance × importance_boost) × (1 + 0.25 × recency × recency_bias)`,
    /// with `importance` computed live by the decay rules, `recency = e^(−days since last
    /// access / 7)`, and the boosts from seed 004's retrieval modulation (dopamine raises the
    /// weight of importance, cortisol — local or from weather — the weight of recency).
    ///
    /// Recall counts as access (seed 004): every crystal returned has its access count raised
    /// and its decay clock restarted.
    pub fn search(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        let hits = self.peek(query, caller, now)?;
        self.record_access(&hits, now)?;
        Ok(hits)
    }

    /// What [`Memory::search`] would return, without counting it as access: nothing changes,
    /// so inspecting memory, or measuring recall question by question, leaves no trace.
    pub fn peek(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        let k = query.k.clamp(1, 100);
        if query.q.len() > MAX_TEXT {
            return Err(Error::Invalid("query too long".into()));
        }
        let depth = candidate_depth(k);
        let embedding = self.embed_one(&query.q)?;
        let vector_hits = self.vector_candidates(&embedding, depth, false)?;
        let text_hits = self.text.search(&query.q, depth)?;
        const RRF_K: f64 = 60.0;
        let mut fused: HashMap<CrystalId, (f64, Option<usize>, Option<usize>)> = HashMap::new();
        for (rank, (id, _)) in vector_hits.into_iter().enumerate() {
            fused.insert(id, (1.0 / (RRF_K + rank as f64 + 1.0), Some(rank + 1), None));
        }
        for (rank, (id, _)) in text_hits.into_iter().enumerate() {
            let entry = fused.entry(id).or_insert((0.0, None, None));
            entry.0 += 1.0 / (RRF_K + rank as f64 + 1.0);
            entry.2 = Some(rank + 1);
        }
        let modulation = self.hormone_state().retrieval(&self.config.hormones, self.network_cortisol(), now);
        let crystals = read(&self.crystals);
        let mut hits: Vec<Hit> = fused
            .into_iter()
            .filter_map(|(id, (rrf, vector_rank, text_rank))| {
                let c = crystals.get(&id)?;
                if !c.is_recallable(now) || !c.can_access(caller, now) {
                    return None;
                }
                if query.namespace.as_ref().is_some_and(|n| n != &c.namespace)
                    || query.kind.is_some_and(|k| k != c.kind)
                    || query.semantic_type.is_some_and(|t| t != c.semantic_type)
                {
                    return None;
                }
                let importance = self.config.decay.importance(&decay_inputs(c), now, 0.0);
                let days = now.saturating_sub(c.last_access) as f64 / 86_400_000.0;
                let recency = (-days / 7.0).exp();
                let score = rrf
                    * (1.0 + importance * modulation.importance_boost)
                    * (1.0 + 0.25 * recency * modulation.recency_bias);
                Some(Hit { crystal: c.clone(), score, vector_rank, text_rank })
            })
            .collect();
        drop(crystals);
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.crystal.id.cmp(&a.crystal.id)));
        hits.truncate(k);
        Ok(hits)
    }

    /// Retrieval counts as access (seed 004): the count rises and the decay clock restarts.
    fn record_access(&self, hits: &[Hit], now: UnixMillis) -> Result<(), Error> {
        if hits.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let mut map = write(&self.crystals);
        for hit in hits {
            if let Some(c) = map.get_mut(&hit.crystal.id) {
                c.access_count += 1;
                c.last_access = now;
                let bytes = serde_json::to_vec(&*c).map_err(|e| Error::Corrupt(format!("crystal {}", c.id), e))?;
                batch.insert(&key(CRYSTAL, c.id), bytes);
            }
        }
        drop(map);
        self.tree.apply_batch(batch)?;
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
            for entry in self.tree.scan_prefix(key(AUDIT, crystal.id)) {
                let (_, v) = entry?;
                audit.push(serde_json::from_slice(&v).map_err(|e| Error::Corrupt("audit".into(), e))?);
            }
        }
        audit.sort_by_key(|e: &AuditEntry| e.at);
        Ok(History { chain, audit })
    }

    /// Makes every write durable.
    pub fn flush(&self) -> Result<(), Error> {
        self.db.flush()?;
        Ok(())
    }

    /// The nearest vectors to `embedding` (crystal ids, context vectors left out), best first.
    pub(crate) fn nearest(&self, embedding: &[f32], k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let hits = self.vectors.search(embedding, self.vector_depth(k))?;
        Ok(hits.into_iter().filter(|(key, _)| key & CONTEXT_BIT == 0).take(k).collect())
    }

    /// The stored embedding of a crystal.
    pub(crate) fn embedding(&self, id: CrystalId) -> Option<Vec<f32>> {
        self.tree.get(key(EMBEDDING, id)).ok().flatten().map(|b| decode_vector(&b))
    }
}

/// How many candidates each half of recall gathers for `k` results.
fn candidate_depth(k: usize) -> usize {
    (k * 5).max(50)
}

/// The decay view of a crystal.
pub(crate) fn decay_inputs(c: &Crystal) -> decay::Inputs {
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
pub(crate) fn audit(crystal: &Crystal, who: &str, at: UnixMillis, from: &str, to: &str, why: &str) -> AuditEntry {
    AuditEntry { crystal_id: crystal.id, who: who.into(), at, from: from.into(), to: to.into(), why: why.into() }
}
