//! Anti-entropy: what two nodes exchange when they (re)connect, so that a message published
//! while they could not hear each other still reaches them.
//!
//! Gossip delivers a message only when it is first seen. A node that was partitioned, offline
//! or not yet born when a skill, an endorsement or weather went out would never hear of it.
//! So on every new connection each side asks the other for its *inventory* (the keys of the
//! signed envelopes it holds, in pages), fetches the envelopes it lacks, and runs each through
//! [`crate::validate::check_synced`]: signature, body rules, authority and ordering, but not the
//! gossip freshness window, since a relayed message is old by nature.
//!
//! A key is one byte naming the kind, then the body's 32-byte content digest. Keys sort by
//! kind in the order a receiver wants them applied: skills before what refers to them.

use serde::{Deserialize, Serialize};
/// Byte strings on the wire, re-exported so both sides use one type.
pub use serde_bytes::ByteBuf;

use crate::cid::ContentId;
use crate::envelope::Kind;

/// The request-response protocol name.
pub const PROTOCOL: &str = "/druse/sync/1";

/// Keys in one inventory page.
pub const PAGE: usize = 2048;

/// Envelopes asked for in one fetch.
pub const MAX_FETCH: usize = 128;

/// How many envelope bytes one fetch answer may carry (a fetch of 128 crystals at their 64 KiB
/// cap would be 8 MiB; the server stops early and the client asks again for the rest).
pub const MAX_ANSWER_BYTES: usize = 2 * 1024 * 1024;

/// Inventory pages one sync reads from a peer at most: 256 pages of 2048 keys is half a
/// million messages, far above what a node holds, and it bounds a peer that never ends.
pub const MAX_PAGES: usize = 256;

/// The length of a key: kind code and content digest.
pub const KEY_LEN: usize = 33;

/// A stored envelope's name in an inventory: kind code, then content digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key([u8; KEY_LEN]);

impl Key {
    /// The key of a message of `kind` whose body has content id `id`.
    pub fn new(kind: Kind, id: &ContentId) -> Self {
        let mut key = [0u8; KEY_LEN];
        key[0] = code(kind);
        key[1..].copy_from_slice(id.digest());
        Self(key)
    }

    /// The first byte of every key of `kind`, to scan one kind.
    pub fn prefix(kind: Kind) -> [u8; 1] {
        [code(kind)]
    }

    /// Parses a key received from a peer; `None` for a wrong length or an unknown kind code.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let key: [u8; KEY_LEN] = bytes.try_into().ok()?;
        kind_of(key[0])?;
        Some(Self(key))
    }

    /// The key's bytes, as stored and sent.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The kind it names.
    pub fn kind(&self) -> Kind {
        // Every constructor checked the code.
        kind_of(self.0[0]).unwrap_or(Kind::Crystal)
    }

    /// The body's content id.
    pub fn content_id(&self) -> ContentId {
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&self.0[1..]);
        ContentId::from_digest(digest)
    }
}

/// The code a kind's keys start with: the order a receiver applies them in.
fn code(kind: Kind) -> u8 {
    match kind {
        Kind::Crystal => 0,
        Kind::Endorsement => 1,
        Kind::Report => 2,
        Kind::Bounty => 3,
        Kind::Ban => 4,
        Kind::Attest => 5,
        Kind::Weather => 6,
    }
}

fn kind_of(code: u8) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| self::code(*k) == code)
}

/// What one node asks another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// The next page of keys, after `after` (from the start when absent).
    Inventory { after: Option<ByteBuf> },
    /// The envelopes under these keys (at most [`MAX_FETCH`]).
    Fetch { keys: Vec<ByteBuf> },
    /// "I now hold messages I did not have when we last synced": the receiver syncs with the
    /// sender. A node sends it to its other peers after a sync brought it something new, so
    /// what crosses one link reaches the whole connected swarm, not just the two ends.
    Announce,
}

/// What it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Up to [`PAGE`] keys in key order; `more` when the inventory goes on.
    Inventory { keys: Vec<ByteBuf>, more: bool },
    /// The envelopes it still holds among those asked for, within [`MAX_ANSWER_BYTES`].
    Envelopes { items: Vec<ByteBuf> },
    /// The request broke a bound (too many keys, a malformed key).
    Refused { reason: String },
    /// An announcement was taken note of.
    Noted,
}

impl Request {
    /// The keys of a fetch, checked: too many, or one malformed, refuses the whole request.
    pub fn fetch_keys(keys: &[ByteBuf]) -> Result<Vec<Key>, String> {
        if keys.len() > MAX_FETCH {
            return Err(format!("a fetch asks for at most {MAX_FETCH} keys, not {}", keys.len()));
        }
        keys.iter().map(|k| Key::from_bytes(k).ok_or_else(|| "a malformed key".to_owned())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_skills_before_what_refers_to_them_and_weather_last() {
        let id = ContentId::of(b"body");
        let mut keys: Vec<Key> = Kind::ALL.iter().map(|k| Key::new(*k, &id)).collect();
        keys.sort();
        let kinds: Vec<Kind> = keys.iter().map(Key::kind).collect();
        assert_eq!(kinds.first(), Some(&Kind::Crystal));
        assert_eq!(kinds[1], Kind::Endorsement);
        assert_eq!(kinds.last(), Some(&Kind::Weather));
    }

    #[test]
    fn a_key_round_trips_and_a_malformed_one_is_refused() {
        let id = ContentId::of(b"body");
        let key = Key::new(Kind::Bounty, &id);
        let back = Key::from_bytes(key.as_bytes()).expect("a well-formed key");
        assert_eq!(back.kind(), Kind::Bounty);
        assert_eq!(back.content_id(), id);
        assert!(Key::from_bytes(&key.as_bytes()[..32]).is_none(), "short key");
        let mut unknown = *key.as_bytes();
        unknown[0] = 99;
        assert!(Key::from_bytes(&unknown).is_none(), "unknown kind code");
    }

    #[test]
    fn a_fetch_over_its_bound_is_refused_whole() {
        let key = ByteBuf::from(Key::new(Kind::Crystal, &ContentId::of(b"x")).as_bytes().to_vec());
        assert!(Request::fetch_keys(&vec![key.clone(); MAX_FETCH]).is_ok());
        assert!(Request::fetch_keys(&vec![key.clone(); MAX_FETCH + 1]).is_err());
        assert!(Request::fetch_keys(&[key, ByteBuf::from(vec![0u8; 3])]).is_err());
    }
}
