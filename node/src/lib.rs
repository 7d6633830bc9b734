//! A druse edge node.
//!
//! The node library holds everything an edge node runs: its config, its store, the ingestion
//! pipeline that applies the protocol's rules to gossip, the market, the HTTP API and the
//! metrics. The `druse-node` binary and the management node (`druse-mgmt`) are built on it.
