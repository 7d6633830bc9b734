//! Seed 004's fluent memory pipeline (`MemoryPipeline` there): a recall workflow,
//! `retrieve → filter → augment → store`, for custom memory work on top of recall. Named a
//! workflow here so it is not mistaken for the ingest pipeline of gossip messages.
//!
//! ```ignore
//! let boosted = Workflow::new(&memory)
//!     .retrieve(Query { q: "deploy".into(), semantic_type: Some(SemanticType::Skill), k: 20, ..Default::default() })
//!     .filter(|c| c.importance > 0.5)
//!     .augment(|mut c| { c.curiosity_boost += 0.1; c })
//!     .store()
//!     .execute(Caller::LocalAgent, now)?;
//! ```

use druse_protocol::UnixMillis;

use crate::crystal::{Crystal, CrystalId};
use crate::engine::{Error, Memory, Query};
use crate::governance::Caller;

type Filter<'a> = Box<dyn Fn(&Crystal) -> bool + 'a>;
type Augment<'a> = Box<dyn Fn(Crystal) -> Crystal + 'a>;

/// A recall followed by in-process steps; nothing runs until `execute`.
pub struct Workflow<'a> {
    memory: &'a Memory,
    query: Option<Query>,
    filters: Vec<Filter<'a>>,
    augments: Vec<Augment<'a>>,
    store: bool,
}

impl std::fmt::Debug for Workflow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow")
            .field("query", &self.query)
            .field("filters", &self.filters.len())
            .field("augments", &self.augments.len())
            .field("store", &self.store)
            .finish()
    }
}

impl<'a> Workflow<'a> {
    /// An empty workflow over `memory`.
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
    /// crystal's scores and boosts: its id, text, lifecycle and status are kept as they were.
    /// Filters and augments see each crystal as stored after the recall counted as access;
    /// with `store`, they run under the engine's writer lock (see `Memory::rewrite`).
    pub fn execute(self, caller: Caller, now: UnixMillis) -> Result<Vec<Crystal>, Error> {
        let Some(query) = &self.query else { return Ok(Vec::new()) };
        let ids: Vec<CrystalId> =
            self.memory.search(query, caller, now)?.into_iter().map(|hit| hit.crystal.id).collect();
        let steps = |original: Crystal| {
            self.filters
                .iter()
                .all(|keep| keep(&original))
                .then(|| self.augments.iter().fold(original, |c, change| change(c)))
        };
        if self.store {
            self.memory.rewrite(&ids, "workflow", "augmented", now, steps)
        } else {
            Ok(self.memory.edited(&ids, steps))
        }
    }
}
