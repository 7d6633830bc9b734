//! Storing memories: validation, hormones, reconciliation against what is stored, and the
//! changes one memory makes.

use std::collections::HashMap;

use druse_protocol::body::SemanticType;
use druse_protocol::{ContentId, UnixMillis};

use super::vectors::ScopedSearch;
use super::{
    Added, CONTEXT, Changes, EMBEDDING, Error, MAX_EXTERNAL_ID, MAX_METADATA, MAX_SESSION, MAX_TEXT, Memory, NewMemory,
    SENTENCES, TextPending, audit, is_own, lock, read,
};
use crate::correction::{self, Candidate, Decision};
use crate::crystal::{Crystal, CrystalId, Governance, Lifecycle, Lifespan, MemoryKind, Origin, ProvenanceNode, Status};
use crate::decay;
use crate::governance::{self, Sensitivity};
use crate::hormones;

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
    if new.external_id.as_ref().is_some_and(|id| id.len() > MAX_EXTERNAL_ID) {
        return Err(Error::Invalid(format!("external_id is over the cap of {MAX_EXTERNAL_ID} bytes")));
    }
    if new.session.as_ref().is_some_and(|s| s.is_empty() || s.len() > MAX_SESSION) {
        return Err(Error::Invalid(format!("session must be 1 to {MAX_SESSION} bytes")));
    }
    if let Some(metadata) = &new.metadata {
        let size = serde_json::to_vec(metadata).map_or(usize::MAX, |b| b.len());
        if size > MAX_METADATA {
            return Err(Error::Invalid(format!("metadata is {size} bytes, over the cap of {MAX_METADATA}")));
        }
    }
    Ok(())
}

/// How many memories [`Memory::add_many`] embeds in one call (each with its context).
const EMBED_BATCH: usize = 256;

/// How many text documents adds leave for the next search to commit before an add commits
/// them itself. A BM25 commit syncs a new segment to disk, several times the cost of the rest
/// of an add; the store holds every acknowledged write durably, and a restart re-indexes from it
/// whatever the last commit did not hold, so this bounds that work.
pub(super) const TEXT_COMMIT_DOCS: usize = 4096;

/// From this many memories in a chunk, analysing their texts is spread over the compute pool.
const PARALLEL_ANALYSIS: usize = 32;

/// What [`Memory::analyse`] found in one memory's text.
pub(super) struct Analysed {
    embedding: Vec<f32>,
    sentences: Vec<f32>,
    events: Vec<hormones::Event>,
    sensitivity: Sensitivity,
}

/// One memory of a batch, with the peer it came from (if from the swarm), the skill it
/// indexes (if it is a skill's) and who stores it.
#[derive(Debug, Clone)]
pub(super) struct Incoming {
    pub new: NewMemory,
    pub peer: Option<String>,
    pub skill: Option<ContentId>,
    pub actor: String,
}

impl Incoming {
    /// A memory stored by `actor`, neither from a peer nor a skill's.
    fn own(new: NewMemory, actor: &str) -> Self {
        Self { new, peer: None, skill: None, actor: actor.to_owned() }
    }
}

/// When an add's writes must survive a power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durable {
    /// Before the add returns.
    Now,
    /// With the next sync of the store (a later add, the next text commit, consolidation or
    /// shutdown): for memories that can be stored again from elsewhere, as a skill's crystal is
    /// from the skill the store keeps. Every write still reaches the operating system before
    /// the add returns, so it survives the process being killed; and the store's one journal
    /// keeps writes in order, so a power cut loses only the last of them, never an earlier
    /// one. An fsync here would also hold the store's journal, which ingestion writes to.
    WithNextSync,
}

impl Memory {
    /// Stores a memory: tags its sensitivity, stamps its hormones, reconciles it against the
    /// most similar active observations, and commits it, any supersession and their audit
    /// entries in one batch, made durable before returning.
    pub fn add(&self, new: NewMemory, actor: &str, now: UnixMillis) -> Result<Added, Error> {
        let (mut added, outcome) = self.add_incoming(vec![Incoming::own(new, actor)], now, Durable::Now);
        outcome?;
        added.pop().ok_or_else(|| Error::Invalid("the memory was not stored".into()))
    }

    /// Stores many memories exactly as [`Memory::add`] would, one after another (each is
    /// reconciled against all before it), but embeds them in batches and makes them durable
    /// and searchable by text once, at the end: an import, or a conversation's backlog.
    ///
    /// Nothing is stored unless every memory is valid. If one fails later (the embedder, the
    /// disk), those before it stay stored and durable, and the error is returned.
    pub fn add_many(&self, news: Vec<NewMemory>, actor: &str, now: UnixMillis) -> Result<Vec<Added>, Error> {
        let items = news.into_iter().map(|new| Incoming::own(new, actor)).collect();
        let (added, outcome) = self.add_incoming(items, now, Durable::Now);
        outcome.map(|()| added)
    }

    /// [`Memory::add_many`] for memories that each name their peer and actor. Returns what
    /// was stored, in order, beside whether everything was: after a failure, the memories
    /// before it are stored and returned.
    pub(super) fn add_incoming(
        &self,
        items: Vec<Incoming>,
        now: UnixMillis,
        durable: Durable,
    ) -> (Vec<Added>, Result<(), Error>) {
        self.add_incoming_with(items, now, &*self.reconciler, durable)
    }

    /// Stores `new` exactly as [`Memory::add`] does, with `reconciler` deciding instead of the
    /// engine's own rules (the agent's LLM reconciler, whose decision was asked beforehand so
    /// that no model call holds the writer lock).
    pub fn add_with(
        &self,
        new: NewMemory,
        reconciler: &dyn correction::Reconciler,
        actor: &str,
        now: UnixMillis,
    ) -> Result<Added, Error> {
        let items = vec![Incoming::own(new, actor)];
        let (mut added, outcome) = self.add_incoming_with(items, now, reconciler, Durable::Now);
        outcome?;
        added.pop().ok_or_else(|| Error::Invalid("the memory was not stored".into()))
    }

    /// The active observations `new` would be reconciled against now (seed 000's top 3, plus
    /// any with its subject and attribute), best first.
    pub fn reconciliation_candidates(&self, new: &NewMemory) -> Result<Vec<Candidate>, Error> {
        check(new)?;
        let embedding = self.embedder.embed(&[new.text.as_str()])?.pop().unwrap_or_default();
        self.candidates(new, &embedding)
    }

    fn add_incoming_with(
        &self,
        items: Vec<Incoming>,
        now: UnixMillis,
        reconciler: &dyn correction::Reconciler,
        durable: Durable,
    ) -> (Vec<Added>, Result<(), Error>) {
        if items.is_empty() {
            // Nothing to make durable or searchable: no flush, no commit.
            return (Vec::new(), Ok(()));
        }
        if let Err(error) = items.iter().try_for_each(|item| check(&item.new)) {
            return (Vec::new(), Err(error));
        }
        let mut added = Vec::with_capacity(items.len());
        let mut pending = TextPending { unsynced: durable == Durable::WithNextSync, ..TextPending::default() };
        let outcome = self.add_chunks(&items, now, &mut added, &mut pending, reconciler);
        let outcome = outcome.and(self.settle(pending));
        (added, outcome)
    }

    /// Stores `items` chunk by chunk. On a compute pool's thread, while one chunk is written
    /// (one thread, under the writer lock), the next is analysed on the pool's other threads,
    /// so a bulk load keeps every core busy.
    fn add_chunks(
        &self,
        items: &[Incoming],
        now: UnixMillis,
        added: &mut Vec<Added>,
        pending: &mut TextPending,
        reconciler: &dyn correction::Reconciler,
    ) -> Result<(), Error> {
        let mut chunks = items.chunks(EMBED_BATCH);
        let Some(first) = chunks.next() else { return Ok(()) };
        let (mut chunk, mut analysed) = (first, self.analyse(first)?);
        // Only on a pool's thread (the memory worker's `druse-index` pool, which runs one job
        // at a time): a call from elsewhere (an API import, on a blocking thread) would hand
        // the whole join to the global pool, where a thread waiting inside a chunk's writer
        // lock (a conversation turn's day is embedded there) could pick up another import's
        // chunk and wait for the lock it holds itself.
        let overlap = rayon::current_thread_index().is_some();
        loop {
            let Some(next) = chunks.next() else {
                return self.add_chunk(chunk, analysed, now, added, pending, reconciler);
            };
            let (written, upcoming) = if overlap {
                rayon::join(|| self.add_chunk(chunk, analysed, now, added, pending, reconciler), || self.analyse(next))
            } else {
                (self.add_chunk(chunk, analysed, now, added, pending, reconciler), self.analyse(next))
            };
            written?;
            (chunk, analysed) = (next, upcoming?);
        }
    }

    /// What needs no other memory to be found, found for every memory of `chunk` at once: the
    /// vectors (one embedding call), the hormone events of the text and its sensitivity.
    fn analyse(&self, chunk: &[Incoming]) -> Result<Vec<Analysed>, Error> {
        let texts: Vec<&str> = chunk.iter().map(|item| item.new.text.as_str()).collect();
        let read = |text: &&str| (hormones::detect(text), governance::tag_sensitivity(text));
        let (embedded, read) = if texts.len() < PARALLEL_ANALYSIS {
            (self.embed_with_sentences(&texts), texts.iter().map(read).collect::<Vec<_>>())
        } else {
            use rayon::prelude::*;
            rayon::join(|| self.embed_with_sentences(&texts), || texts.par_iter().map(read).collect::<Vec<_>>())
        };
        Ok(embedded?
            .into_iter()
            .zip(read)
            .map(|((embedding, sentences), (events, sensitivity))| Analysed {
                embedding,
                sentences,
                events,
                sensitivity,
            })
            .collect())
    }

    /// Whether the engine would store `new`, and if not, why.
    pub fn check(new: &NewMemory) -> Result<(), Error> {
        check(new)
    }

    /// Makes what [`Memory::add_many`] stored durable (unless it may wait: [`Durable`]), and
    /// its text documents searchable by the next search (see [`TEXT_COMMIT_DOCS`]).
    fn settle(&self, pending: TextPending) -> Result<(), Error> {
        let _writer = lock(&self.write);
        if !pending.unsynced {
            self.sync()?;
        }
        self.defer_text(pending)?;
        self.persist_hormones()
    }

    /// Leaves text documents for the next search to commit, unless enough are waiting that
    /// committing now bounds what a restart must re-index.
    fn defer_text(&self, pending: TextPending) -> Result<(), Error> {
        let mut waiting = lock(&self.text_pending);
        *waiting = waiting.and(pending);
        if waiting.docs >= TEXT_COMMIT_DOCS {
            self.commit_text(*waiting)?;
            *waiting = TextPending::default();
        }
        Ok(())
    }

    /// Commits the text documents acknowledged adds left waiting, so a search sees every
    /// memory stored before it began. Held under the waiting list's lock, so a concurrent
    /// search waits for the commit instead of searching before it.
    pub(super) fn publish_text(&self) -> Result<(), Error> {
        let mut waiting = lock(&self.text_pending);
        if waiting.up_to.is_some() || waiting.removed {
            self.commit_text(*waiting)?;
            *waiting = TextPending::default();
        }
        Ok(())
    }

    /// One chunk of [`Memory::add_many`]: embedded in one call, each memory prepared and
    /// indexed at once (so the next is reconciled against it), and the chunk written to the
    /// store in one batch, whatever happens to the memories after the first that fails.
    fn add_chunk(
        &self,
        chunk: &[Incoming],
        analysed: Vec<Analysed>,
        now: UnixMillis,
        added: &mut Vec<Added>,
        pending: &mut TextPending,
        reconciler: &dyn correction::Reconciler,
    ) -> Result<(), Error> {
        let _writer = lock(&self.write);
        let mut batch = self.batch();
        // The vectors of this chunk's crystals, not yet in the store: a turn's context vector may
        // need the turn stored just before it.
        let mut fresh: HashMap<CrystalId, Vec<f32>> = HashMap::new();
        let indexed = chunk.iter().zip(analysed).try_for_each(|(item, analysed)| {
            let (one, changes) = self.prepare(item, analysed, &fresh, now, reconciler)?;
            for (prefix, id, vector) in &changes.vectors {
                if *prefix == EMBEDDING {
                    fresh.insert(*id, vector.clone());
                }
            }
            self.add_to_batch(&changes, &mut batch)?;
            *pending = pending.and(self.index(changes)?);
            added.push(one);
            Ok(())
        });
        self.apply(batch)?;
        indexed
    }

    /// Decides what storing `item` (with what [`Memory::analyse`] found in it) changes.
    /// `fresh` holds the vectors of crystals stored by the same call and not yet written. The
    /// caller holds the writer lock and commits the changes before releasing it.
    fn prepare(
        &self,
        item: &Incoming,
        analysed: Analysed,
        fresh: &HashMap<CrystalId, Vec<f32>>,
        now: UnixMillis,
        reconciler: &dyn correction::Reconciler,
    ) -> Result<(Added, Changes), Error> {
        let (new, actor) = (&item.new, item.actor.as_str());
        let Analysed { embedding, sentences, events, sensitivity } = analysed;
        let turn = new.is_conversation_turn();
        let influence = {
            let mut state = lock(&self.hormones);
            // What people say to each other is stamped on its own crystal but is not an
            // event of the agent's: "failed" and "deadline" in a chat must not drive the
            // node's cortisol to saturation while a conversation is imported.
            if !turn {
                for event in &events {
                    state.spike(&self.config.hormones, *event, now);
                }
            }
            state.crystal_influence(&self.config.hormones, &events, new.origin == Origin::Session, now)
        };
        // Only extracted facts are reconciled: a conversation turn is what was said, and
        // stays, whatever its kind.
        let decision = if new.kind == MemoryKind::Observation && !turn {
            let candidates = self.candidates(new, &embedding)?;
            let decision =
                reconciler.reconcile(&new.text, new.subject.as_deref(), new.attribute.as_deref(), &candidates);
            match decision {
                // The caller says the user explicitly corrected this value (seed 003: 1.0).
                Decision::Update { target, .. } if new.correction => {
                    Decision::Update { target, confidence: self.config.correction.explicit_correction_confidence }
                }
                other => other,
            }
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
                let id = self.next_id()? + 1;
                let mut crystal = self.new_crystal(id, item, influence, sensitivity, now)?;
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
                    let why = if new.correction || correction::is_explicit_correction(&new.text) {
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
                let around = self.context(&crystal);
                if let Some(vector) = self.context_vector(&embedding, &around, fresh)? {
                    changes.vectors.push((CONTEXT, id, vector));
                }
                let document = self.document_of(&crystal, &around);
                changes.vectors.push((EMBEDDING, id, embedding));
                if !sentences.is_empty() {
                    changes.vectors.push((SENTENCES, id, sentences));
                }
                changes.texts.push((id, document));
                // The turns said around this one hold it in their windows now.
                changes.rewindow = self.windows_holding(&crystal);
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
        item: &Incoming,
        influence: hormones::Influence,
        sensitivity: Sensitivity,
        now: UnixMillis,
    ) -> Result<Crystal, Error> {
        let new = &item.new;
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
                    actor: item.actor.clone(),
                    timestamp: now,
                    parent_ids: Vec::new(),
                }],
                peer_origin: item.peer.clone(),
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
            external_id: new.external_id.clone(),
            metadata: new.metadata.clone(),
            skill: item.skill,
        })
    }

    /// The three most similar active observations in the namespace (seed 000), plus any with
    /// the same subject and attribute.
    fn candidates(&self, new: &NewMemory, embedding: &[f32]) -> Result<Vec<Candidate>, Error> {
        let crystals = read(&self.crystals);
        let usable = |c: &Crystal| {
            c.status == Status::Active
                && c.kind == MemoryKind::Observation
                && c.session.is_none()
                && c.turn_at.is_none()
                && c.namespace == new.namespace
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
        // The namespace's own vectors are scored one by one, or the namespace filter applies
        // inside the index's search, whichever serves it. Either way a namespace among
        // many still gets its nearest observations.
        let wanted = self.config.correction.candidates + out.len();
        let search = ScopedSearch { namespace: &new.namespace, depth: wanted, at_least: wanted, own_only: true };
        let nearest = match self.scoped_vector_hits(search, embedding, &crystals, &usable)? {
            Some(nearest) => nearest,
            None => {
                let keep = |key: u64| is_own(key) && crystals.get(&key).is_some_and(&usable);
                self.vectors.search_where(embedding, self.vector_depth(wanted), wanted, &keep)?
            }
        };
        for (id, similarity) in nearest {
            if out.len() >= self.config.correction.candidates {
                break;
            }
            if let Some(c) = crystals.get(&id).filter(|c| usable(c) && !out.iter().any(|o| o.id == c.id)) {
                out.push(to_candidate(c, similarity));
            }
        }
        Ok(out)
    }
}

impl Drop for Memory {
    /// Commits what searches have not yet committed, so a clean shutdown leaves no text
    /// documents for the next start to re-index.
    fn drop(&mut self) {
        if let Err(error) = self.publish_text() {
            tracing::warn!(%error, "text index not committed at close; it catches up from the store on reopening");
        }
    }
}
