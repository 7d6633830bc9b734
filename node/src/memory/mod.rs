//! The agent's long-term memory (seeds 000, 003, 004; DESIGN §8): crystals that decay,
//! consolidate, supersede, and are found again fast.

pub mod consolidation;
pub mod correction;
pub mod crystal;
pub mod dates;
pub mod decay;
pub mod embed;
pub mod engine;
pub mod hormones;
mod scopes;
pub mod sentences;
pub mod skills;
pub mod text;
pub mod vector;
pub mod workflow;

pub use engine::Memory;

#[cfg(test)]
mod recall_tests;
#[cfg(test)]
mod tests;
