//! A druse edge node.
//!
//! The node library holds everything an edge node runs: its config, its store, the ingestion
//! pipeline that applies the protocol's rules to gossip, the weather and trust state, the HTTP
//! API and the metrics. The `druse-node` binary and the management node (`druse-mgmt`) are
//! both built on it.

pub mod api;
pub mod cli;
pub mod client;
pub mod config;
pub mod daemon;
pub mod ingest;
pub mod market;
pub mod mcp;
pub mod memory_map;
pub mod metrics;
pub mod node;
pub mod peers;
pub mod skill;
pub mod store;
pub mod task;
pub mod weather;

pub use config::Config;
/// The agent every node runs (crate `druse-agent`), under the name the node has always given it.
pub use druse_agent as agent;
/// The allocator every druse binary runs on (mimalloc, with transparent huge pages off, which
/// would otherwise fill an idle node's arenas): ingestion and indexing allocate many small
/// records per message, where glibc's malloc took a fifth of their time. A binary installs it
/// with `#[global_allocator] static ALLOCATOR: druse_node::Allocator =
/// druse_node::Allocator;`.
pub use mimalloc::MiMalloc as Allocator;
pub use node::{Node, Role};
