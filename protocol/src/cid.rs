//! Content ids: the sha256 CID (v1, dag-cbor) of a body's bytes, the key gossip dedupes on.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// CIDv1 prefix: version 1, codec dag-cbor (0x71), multihash sha2-256 (0x12) of 32 bytes.
const PREFIX: [u8; 4] = [0x01, 0x71, 0x12, 0x20];

/// Identifies a message body by what it says, so the same body is stored and forwarded once.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId([u8; 32]);

/// A string that is not a druse content id.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a druse content id (expected a base32 CIDv1 dag-cbor sha2-256, like \"bafyrei…\")")]
pub struct ParseError;

impl ContentId {
    /// The content id of `body` (the exact bytes that were signed).
    pub fn of(body: &[u8]) -> Self {
        Self(Sha256::digest(body).into())
    }

    /// The sha256 digest.
    pub fn digest(&self) -> &[u8; 32] {
        &self.0
    }

    /// Builds an id from a digest, as stored on disk.
    pub fn from_digest(digest: [u8; 32]) -> Self {
        Self(digest)
    }

    /// The binary CID (prefix and digest).
    pub fn to_bytes(&self) -> [u8; 36] {
        let mut out = [0u8; 36];
        out[..4].copy_from_slice(&PREFIX);
        out[4..].copy_from_slice(&self.0);
        out
    }
}

fn base32_spec() -> data_encoding::Encoding {
    let mut spec = data_encoding::Specification::new();
    spec.symbols.push_str("abcdefghijklmnopqrstuvwxyz234567");
    // Proof of impossibility: the specification above is a fixed, valid base32 alphabet.
    #[allow(clippy::unwrap_used)]
    spec.encoding().unwrap()
}

thread_local! {
    static BASE32: data_encoding::Encoding = base32_spec();
}

impl fmt::Display for ContentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = BASE32.with(|b| b.encode(&self.to_bytes()));
        write!(f, "b{text}")
    }
}

impl fmt::Debug for ContentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentId({self})")
    }
}

impl FromStr for ContentId {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix('b').ok_or(ParseError)?;
        if rest.len() != 58 {
            return Err(ParseError);
        }
        let bytes = BASE32.with(|b| b.decode(rest.as_bytes())).map_err(|_| ParseError)?;
        if bytes.len() != 36 || bytes[..4] != PREFIX {
            return Err(ParseError);
        }
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&bytes[4..]);
        Ok(Self(digest))
    }
}

impl serde::Serialize for ContentId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ContentId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_id_is_a_dag_cbor_sha256_cid_that_round_trips_through_text() {
        let id = ContentId::of(b"hello");
        let text = id.to_string();
        assert!(text.starts_with("bafyrei"), "{text}");
        assert_eq!(text.parse::<ContentId>(), Ok(id));
    }

    #[test]
    fn content_id_rejects_other_cids_and_garbage() {
        assert_eq!("".parse::<ContentId>(), Err(ParseError));
        assert_eq!("bafyrei".parse::<ContentId>(), Err(ParseError));
        // A raw-codec CID of the same digest is a different thing.
        let raw = format!("b{}", BASE32.with(|b| b.encode(&[&[0x01, 0x55, 0x12, 0x20][..], &[0u8; 32]].concat())));
        assert_eq!(raw.parse::<ContentId>(), Err(ParseError));
    }
}
