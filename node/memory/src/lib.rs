//! The agent's long-term memory (seeds 000, 003, 004; DESIGN §8): crystals that decay,
//! consolidate, supersede, and are found again fast.
//!
//! The node opens one fjall database for everything it stores and hands it to
//! [`Memory::open`], which keeps its records in the keyspace [`KEYSPACE`], then serves the
//! engine through a [`Handle`] (`service.rs`): a bounded queue to one writer thread, another to
//! a pool of readers, and a background writer of low priority, so no caller of the node, its
//! API or its agent runs an engine call on an async thread. Around the engine
//! live what it needs and the node shares: the governance rules every stored text passes
//! ([`governance`]) and the background workers that run at low priority ([`background`]).

pub mod background;
pub mod consolidation;
pub mod correction;
pub mod crystal;
pub mod dates;
pub mod decay;
pub mod embed;
pub mod engine;
pub mod governance;
pub mod hormones;
mod periods;
mod record;
mod scopes;
mod sentences;
mod service;
pub mod skills;
mod text;
mod vector;
pub mod workflow;

pub use engine::Memory;
pub use service::Handle;

/// Compiles the fixed patterns every memory added is read against (secrets and personal
/// details, corrections) now: a node's memory writer does it when it starts, so its first
/// memory does not pay for it (about 5 ms of a core, once a process).
pub fn compile_patterns() {
    governance::compile();
    correction::compile();
}

/// The vector index on its own, for measuring it apart from the engine (the `memory-bench`
/// example's `index` mode): its configuration, its statistics, and the dot product it ranks by.
/// The engine owns the one it uses; nothing else reaches the index's segments or graphs.
pub mod index {
    pub use crate::vector::kernel::dot;
    pub use crate::vector::{BuildStats, Config, Error, SegmentStats, Stats, VectorIndex};
}
/// Why the text index failed (inside [`engine::Error`]).
pub use text::Error as TextError;

/// The memory engine's keyspace in the node's database (a partition of the fjall 2 keyspace,
/// and before that a sled tree, of the same name in earlier versions).
pub const KEYSPACE: &str = "memory";

/// The memtable of the memory keyspace: large enough that a bulk load of memories flushes
/// rarely, as the node's own keyspaces do. fjall keeps it with the keyspace when it is created.
const MEMTABLE: u64 = 32 << 20;

/// Opens (or creates) the memory engine's keyspace in `db`.
pub fn open_keyspace(db: &fjall::Database) -> Result<fjall::Keyspace, fjall::Error> {
    db.keyspace(KEYSPACE, || fjall::KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE))
}

#[cfg(test)]
mod testing {
    /// A database for a test, with a small cache. fjall 3 releases its lock when the last
    /// handle is dropped (its drop waits for its own threads), so a test reopens at once.
    pub(crate) fn database(path: &std::path::Path) -> fjall::Database {
        match fjall::Database::builder(path).cache_size(8 << 20).open() {
            Ok(db) => db,
            Err(e) => panic!("opening the database: {e}"),
        }
    }
}

#[cfg(test)]
mod recall_tests;
#[cfg(test)]
mod tests;
