//! The agent's long-term memory (seeds 000, 003, 004; DESIGN §8): crystals that decay,
//! consolidate, supersede, and are found again fast.
//!
//! The node opens one fjall keyspace for everything it stores and hands it to
//! [`Memory::open`], which keeps its records in the partition [`PARTITION`]. Around the engine
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
mod scopes;
mod sentences;
pub mod skills;
mod text;
pub mod vector;
pub mod workflow;

pub use engine::Memory;
/// Why the text index failed (inside [`engine::Error`]).
pub use text::Error as TextError;

/// The memory engine's partition in the node's keyspace (and the name of its sled tree in
/// versions before the store moved to fjall).
pub const PARTITION: &str = "memory";

/// The memtable of the memory partition: large enough that a bulk load of memories flushes
/// rarely, as the node's own partitions do.
const MEMTABLE: u32 = 32 << 20;

/// Opens (or creates) the memory engine's partition in `keyspace`.
pub fn open_partition(keyspace: &fjall::Keyspace) -> Result<fjall::PartitionHandle, fjall::Error> {
    keyspace.open_partition(PARTITION, fjall::PartitionCreateOptions::default().max_memtable_size(MEMTABLE))
}

#[cfg(test)]
mod testing {
    /// A keyspace for a test, with a small cache. A keyspace dropped just before may still hold
    /// its directory for a moment while its background threads wind down, so opening retries
    /// for up to ten seconds.
    pub(crate) fn keyspace(path: &std::path::Path) -> fjall::Keyspace {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match fjall::Config::new(path).cache_size(8 << 20).open() {
                Ok(keyspace) => return keyspace,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                Err(e) => panic!("opening the keyspace: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod recall_tests;
#[cfg(test)]
mod tests;
