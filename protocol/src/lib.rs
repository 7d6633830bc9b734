//! The contract between druse nodes.
//!
//! Everything two nodes must agree on lives here: the signed envelope every gossip message
//! travels in, the body of each message kind, the validation rules an ingesting node applies
//! before it stores or forwards anything, the topic names, and the pure pricing and reputation
//! math that every node recomputes for itself. The core is IO-free and is tested without
//! sockets; the libp2p layer sits behind the default `net` feature.

pub mod api;
pub mod body;
pub mod cid;
pub mod envelope;
pub mod keys;
#[cfg(feature = "net")]
pub mod net;
pub mod pricing;
pub mod reputation;
pub mod scan;
pub mod skill_folder;
pub mod sync;
pub mod topic;
pub mod trust;
pub mod validate;

pub use body::Body;
pub use cid::ContentId;
pub use envelope::{Envelope, Kind};
pub use keys::{Keypair, PublicKey};
pub use validate::{Reason, TrustView, Verdict};

/// Wall-clock milliseconds since the Unix epoch: the unit of every `issued_at` on the wire.
pub type UnixMillis = u64;

/// The wall clock now, in [`UnixMillis`] (0 for a clock set before 1970).
pub fn now_ms() -> UnixMillis {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
