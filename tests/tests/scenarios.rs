//! The multi-node scenarios, one module a file beside this one, built as one test binary: the
//! scenarios share most of their code (the harness, the node, libp2p), and one binary compiles
//! and links it once where one binary a file did it twenty-seven times. Run one file's scenarios
//! with its module's name as the filter: `cargo test --release --workspace --test scenarios
//! silent::`. The source reader of `layers.rs` stays a binary of its own (it needs none of it).

pub mod agent;
pub mod agent_bluesky;
pub mod agent_llm;
pub mod anomaly;
pub mod census;
pub mod endorsement;
pub mod flood;
pub mod hostile;
pub mod interop;
pub mod kills;
pub mod knowledge;
pub mod limits;
pub mod market;
pub mod market_walk;
pub mod mcp;
pub mod memory_page;
pub mod model;
pub mod partition;
pub mod processes;
pub mod refused_copies;
pub mod restart;
pub mod settle;
pub mod silent;
pub mod skill_folders;
pub mod sync;
pub mod weather;
