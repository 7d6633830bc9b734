//! The signed envelope every gossip message travels in.
//!
//! Wire form (DAG-CBOR): `{ v: 1, kind, body: bytes, signer: 32 bytes, sig: 64 bytes }`.
//! The signature covers `"druse/v1/" ‖ kind ‖ 0x00 ‖ body`, so a signature made for one kind
//! can never be valid for another. An envelope is opened in a fixed order: size cap, strict
//! decode, canonical form, then `verify_strict` over the exact received body bytes. Only a
//! verified body is ever decoded.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cid::ContentId;
use crate::keys::{Keypair, PublicKey};

/// The only envelope version this code speaks.
pub const VERSION: u64 = 1;

/// Prefix of every signed message; the kind and a 0x00 separator follow it.
pub const DOMAIN: &[u8] = b"druse/v1/";

/// Upper bound on an envelope's encoded size: the largest body cap plus the envelope's own fields.
pub const MAX_ENVELOPE_LEN: usize = 64 * 1024 + 256;

/// What a message is; fixes its topic, its size cap and who may sign it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A knowledge crystal listing (a skill or task pattern), signed by its author.
    Crystal,
    /// A management verdict on a skill.
    Endorsement,
    /// Management cortisol weather.
    Weather,
    /// A management bounty.
    Bounty,
    /// An execution report, adoption or bounty claim, signed by the reporting node.
    Report,
    /// A management ban of a peer.
    Ban,
    /// A management attestation of a peer's trust level.
    Attest,
}

impl Kind {
    /// Every kind, for metrics and tests.
    pub const ALL: [Kind; 7] =
        [Kind::Crystal, Kind::Endorsement, Kind::Weather, Kind::Bounty, Kind::Report, Kind::Ban, Kind::Attest];

    /// The name signed into the domain string and carried on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Crystal => "crystal",
            Kind::Endorsement => "endorsement",
            Kind::Weather => "weather",
            Kind::Bounty => "bounty",
            Kind::Report => "report",
            Kind::Ban => "ban",
            Kind::Attest => "attest",
        }
    }

    /// The kind named `s`, if this version knows it.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The largest body this kind may carry.
    pub fn max_body_len(self) -> usize {
        match self {
            Kind::Crystal => 64 * 1024,
            Kind::Bounty => 8 * 1024,
            Kind::Endorsement | Kind::Weather | Kind::Ban | Kind::Attest => 2 * 1024,
            Kind::Report => 1024,
        }
    }

    /// Whether only a trust-listed management key may sign this kind.
    pub fn is_management(self) -> bool {
        !matches!(self, Kind::Crystal | Kind::Report)
    }

    /// The gossip topic this kind is published on.
    pub fn topic(self) -> &'static str {
        use crate::topic;
        match self {
            Kind::Crystal => topic::CRYSTALS,
            Kind::Endorsement => topic::ENDORSEMENTS,
            Kind::Weather => topic::WEATHER,
            Kind::Bounty => topic::BOUNTIES,
            Kind::Report => topic::REPORTS,
            Kind::Ban | Kind::Attest => topic::TRUST,
        }
    }

    /// Whether a message of this kind belongs on `topic` (a message on the wrong topic is
    /// malformed).
    pub fn is_carried_on(self, topic: &str) -> bool {
        self.topic() == topic
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an envelope could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("envelope is {len} bytes, over the {max}-byte cap")]
    TooLarge { len: usize, max: usize },
    #[error("envelope is not well-formed DAG-CBOR: {0}")]
    Malformed(String),
    #[error("envelope version {0} is not supported")]
    Version(u64),
    #[error("unknown message kind {0:?}")]
    UnknownKind(String),
    #[error("{kind} body is {len} bytes, over the {max}-byte cap")]
    BodyTooLarge { kind: Kind, len: usize, max: usize },
    #[error("signer is not a valid 32-byte Ed25519 public key")]
    BadSigner,
    #[error("signature is not 64 bytes")]
    BadSignatureLength,
    #[error("envelope is not in canonical DAG-CBOR form")]
    NonCanonical,
    #[error("signature does not verify")]
    BadSignature,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    v: u64,
    kind: &'a str,
    #[serde(with = "serde_bytes")]
    body: &'a [u8],
    #[serde(with = "serde_bytes")]
    signer: &'a [u8],
    #[serde(with = "serde_bytes")]
    sig: &'a [u8],
}

/// An envelope whose signature has been verified over its exact body bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Envelope {
    kind: Kind,
    body: Vec<u8>,
    signer: PublicKey,
    sig: [u8; 64],
}

impl fmt::Debug for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envelope")
            .field("kind", &self.kind)
            .field("body_len", &self.body.len())
            .field("signer", &self.signer)
            .finish()
    }
}

/// The bytes a signature covers: the domain, the kind, a separator, then the body.
fn signed_message(kind: Kind, body: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(DOMAIN.len() + kind.as_str().len() + 1 + body.len());
    message.extend_from_slice(DOMAIN);
    message.extend_from_slice(kind.as_str().as_bytes());
    message.push(0);
    message.extend_from_slice(body);
    message
}

fn encode_wire(wire: &Wire<'_>) -> Vec<u8> {
    // Proof of impossibility: a struct of an integer, a string and byte strings always encodes.
    #[allow(clippy::unwrap_used)]
    serde_ipld_dagcbor::to_vec(wire).unwrap()
}

impl Envelope {
    /// Signs `body` (already-encoded bytes) as `kind` and returns the wire bytes.
    pub fn seal(key: &Keypair, kind: Kind, body: &[u8]) -> Vec<u8> {
        let sig = key.sign_raw(&signed_message(kind, body));
        let signer = key.public().to_bytes();
        encode_wire(&Wire { v: VERSION, kind: kind.as_str(), body, signer: &signer, sig: &sig })
    }

    /// Opens wire bytes: size cap, strict decode, canonical form, then `verify_strict`.
    pub fn open(bytes: &[u8]) -> Result<Self, Error> {
        Self::open_with(bytes, |_| None)
    }

    /// Like [`Envelope::open`], asking `known` first for a signer key decoded before, which
    /// saves decompressing its curve point again.
    pub(crate) fn open_with(bytes: &[u8], known: impl FnOnce(&[u8; 32]) -> Option<PublicKey>) -> Result<Self, Error> {
        if bytes.len() > MAX_ENVELOPE_LEN {
            return Err(Error::TooLarge { len: bytes.len(), max: MAX_ENVELOPE_LEN });
        }
        let wire: Wire<'_> = serde_ipld_dagcbor::from_slice(bytes).map_err(|e| Error::Malformed(e.to_string()))?;
        if wire.v != VERSION {
            return Err(Error::Version(wire.v));
        }
        let kind = Kind::parse(wire.kind).ok_or_else(|| Error::UnknownKind(truncate(wire.kind, 64)))?;
        if wire.body.len() > kind.max_body_len() {
            return Err(Error::BodyTooLarge { kind, len: wire.body.len(), max: kind.max_body_len() });
        }
        let signer: &[u8; 32] = wire.signer.try_into().map_err(|_| Error::BadSigner)?;
        let signer = known(signer).or_else(|| PublicKey::from_bytes(signer)).ok_or(Error::BadSigner)?;
        let sig: [u8; 64] = wire.sig.try_into().map_err(|_| Error::BadSignatureLength)?;
        // One byte string per envelope: re-encoding must give back exactly what was received.
        if encode_wire(&wire) != bytes {
            return Err(Error::NonCanonical);
        }
        let signature = ed25519_dalek::Signature::from_bytes(&sig);
        signer
            .verifying()
            .verify_strict(&signed_message(kind, wire.body), &signature)
            .map_err(|_| Error::BadSignature)?;
        Ok(Self { kind, body: wire.body.to_vec(), signer, sig })
    }

    /// The kind an envelope claims, without verifying it: a metric label for refused messages.
    pub fn peek_kind(bytes: &[u8]) -> Option<Kind> {
        if bytes.len() > MAX_ENVELOPE_LEN {
            return None;
        }
        let wire: Wire<'_> = serde_ipld_dagcbor::from_slice(bytes).ok()?;
        Kind::parse(wire.kind)
    }

    /// What the envelope carries.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The exact body bytes that were signed.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Who signed it.
    pub fn signer(&self) -> PublicKey {
        self.signer
    }

    /// The signature, for re-encoding a stored envelope.
    pub fn signature(&self) -> &[u8; 64] {
        &self.sig
    }

    /// The content id of the body: what dedupe and gossip message ids use.
    pub fn content_id(&self) -> ContentId {
        ContentId::of(&self.body)
    }

    /// The wire bytes again, exactly as they were received (the encoding is canonical).
    pub fn to_bytes(&self) -> Vec<u8> {
        let signer = self.signer.to_bytes();
        encode_wire(&Wire { v: VERSION, kind: self.kind.as_str(), body: &self.body, signer: &signer, sig: &self.sig })
    }
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_envelope_opens_and_re_encodes_to_the_same_bytes() {
        let key = Keypair::from_seed([1; 32]);
        let bytes = Envelope::seal(&key, Kind::Weather, b"body");
        let env = Envelope::open(&bytes).unwrap();
        assert_eq!(env.kind(), Kind::Weather);
        assert_eq!(env.body(), b"body");
        assert_eq!(env.signer(), key.public());
        assert_eq!(env.to_bytes(), bytes);
    }

    #[test]
    fn envelope_map_keys_are_in_dag_cbor_canonical_order() {
        // DAG-CBOR sorts map keys by length, then bytewise, so other languages encode alike.
        let bytes = Envelope::seal(&Keypair::from_seed([1; 32]), Kind::Weather, b"body");
        let position = |key: &str| {
            let needle = [&[0x60 + key.len() as u8][..], key.as_bytes()].concat();
            bytes.windows(needle.len()).position(|w| w == needle).unwrap()
        };
        let order = ["v", "sig", "body", "kind", "signer"].map(position);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }

    #[test]
    fn every_kind_name_parses_back() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(Kind::parse("episode"), None);
    }
}
