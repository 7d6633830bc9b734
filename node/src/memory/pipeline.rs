//! Seed 004's fluent pipeline: `retrieve → filter → augment → store`, for custom memory
//! workflows on top of recall.
//!
//! ```ignore
//! let boosted = Pipeline::new(&memory)
//!     .retrieve(Query { q: "deploy".into(), semantic_type: Some(SemanticType::Skill), k: 20, ..Default::default() })
//!     .filter(|c| c.importance > 0.5)
//!     .augment(|mut c| { c.curiosity_boost += 0.1; c })
//!     .store()
//!     .execute(Caller::LocalAgent, now)?;
//! ```

use druse_protocol::UnixMillis;

use crate::governance::Caller;
use crate::memory::crystal::Crystal;
use crate::memory::engine::{Changes, Error, Memory, Query, audit, lock};

type Filter<'a> = Box<dyn Fn(&Crystal) -> bool + 'a>;
type Augment<'a> = Box<dyn Fn(Crystal) -> Crystal + 'a>;

/// A recall followed by in-process steps; nothing runs until `execute`.
pub struct Pipeline<'a> {
    memory: &'a Memory,
    query: Option<Query>,
    filters: Vec<Filter<'a>>,
    augments: Vec<Augment<'a>>,
    store: bool,
}

impl std::fmt::Debug for Pipeline<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("query", &self.query)
            .field("filters", &self.filters.len())
            .field("augments", &self.augments.len())
            .field("store", &self.store)
            .finish()
    }
}

impl<'a> Pipeline<'a> {
    /// An empty pipeline over `memory`.
    pub fn new(memory: &'a Memory) -> Self {
        Self { memory, query: None, filters: Vec::new(), augments: Vec::new(), store: false }
    }

    /// Starts from a hybrid recall.
    pub fn retrieve(mut self, query: Query) -> Self {
        self.query = Some(query);
        self
    }

    /// Keeps only crystals for which `keep` is true.
    pub fn filter(mut self, keep: impl Fn(&Crystal) -> bool + 'a) -> Self {
        self.filters.push(Box::new(keep));
        self
    }

    /// Changes each crystal (importance, boosts, tags).
    pub fn augment(mut self, change: impl Fn(Crystal) -> Crystal + 'a) -> Self {
        self.augments.push(Box::new(change));
        self
    }

    /// Writes the augmented crystals back (one batch, audited).
    pub fn store(mut self) -> Self {
        self.store = true;
        self
    }

    /// Runs the steps and returns the resulting crystals. Augments may change only a
    /// crystal's scores and boosts: its id, text and lifecycle are kept as they were.
    pub fn execute(self, caller: Caller, now: UnixMillis) -> Result<Vec<Crystal>, Error> {
        let Some(query) = &self.query else { return Ok(Vec::new()) };
        let hits = self.memory.search(query, caller, now)?;
        let mut out = Vec::new();
        for hit in hits {
            // The stored crystal, which counts this recall as an access; the hit was copied
            // before it did, and storing a change to the copy would undo that.
            let original = self.memory.get(hit.crystal.id).unwrap_or(hit.crystal);
            if !self.filters.iter().all(|keep| keep(&original)) {
                continue;
            }
            let mut changed = self.augments.iter().fold(original.clone(), |c, change| change(c));
            changed.id = original.id;
            changed.text = original.text.clone();
            changed.lifecycle = original.lifecycle;
            changed.status = original.status;
            changed.importance = changed.importance.clamp(0.0, 1.0);
            out.push(changed);
        }
        if self.store && !out.is_empty() {
            let _writer = lock(&self.memory.write);
            let mut changes = Changes::default();
            for c in &out {
                changes.audit.push(audit(c, "pipeline", now, c.lifecycle.as_str(), c.lifecycle.as_str(), "augmented"));
                changes.crystals.push(c.clone());
            }
            self.memory.commit(changes, true)?;
        }
        Ok(out)
    }
}
