//! Node identity: one Ed25519 key per node, from which both its libp2p `PeerId` and the
//! signatures on what it authors derive, so a crystal's author is bound to the gossip peer
//! that originated it.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use libp2p_identity::PeerId;
use zeroize::Zeroizing;

/// Why a key could not be made, read, written or parsed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("reading key file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("writing key file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("key file {path} is readable by other users (mode {mode:o}); run `chmod 600` on it")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("key file {path} does not hold a druse secret key (expected 64 hex characters)")]
    Malformed { path: PathBuf },
    #[error("the operating system could not provide randomness: {0}")]
    Random(String),
    #[error("{0:?} is not an Ed25519 public key (expected 64 hex characters, base64, or an Ed25519 PeerId)")]
    BadPublicKey(String),
}

/// A node's signing key; the secret never leaves this type except into its key file.
#[derive(Clone)]
pub struct Keypair {
    signing: SigningKey,
}

impl fmt::Debug for Keypair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("Keypair").field("public", &self.public()).finish()
    }
}

impl Keypair {
    /// A fresh key from the operating system's randomness.
    pub fn generate() -> Result<Self, Error> {
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut()).map_err(|e| Error::Random(e.to_string()))?;
        Ok(Self::from_seed(*seed))
    }

    /// A key from a 32-byte seed; tests use fixed seeds so failures reproduce.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self { signing: SigningKey::from_bytes(&seed) }
    }

    /// The public half, which is what trust lists and envelopes carry.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.signing.verifying_key())
    }

    /// The libp2p PeerId of this key (the same key drives the libp2p identity).
    pub fn peer_id(&self) -> PeerId {
        self.public().peer_id()
    }

    /// The same key as a libp2p identity, for building the swarm.
    pub fn to_libp2p(&self) -> libp2p_identity::Keypair {
        let mut seed = self.signing.to_bytes();
        // Proof of impossibility: any 32 bytes are a valid Ed25519 secret key.
        #[allow(clippy::unwrap_used)]
        libp2p_identity::Keypair::ed25519_from_bytes(&mut seed).unwrap()
    }

    /// Signs `message` as is; envelopes add their domain separation before calling this.
    pub(crate) fn sign_raw(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }

    /// Loads the key at `path`, or creates one there (mode 0600) if there is none.
    pub fn load_or_generate(path: &Path) -> Result<Self, Error> {
        match Self::load(path) {
            Err(Error::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                let key = Self::generate()?;
                key.save(path)?;
                Ok(key)
            }
            other => other,
        }
    }

    /// Reads a key file; refuses one that other users can read.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let read_err = |source| Error::Read { path: path.to_owned(), source };
        let meta = fs::metadata(path).map_err(read_err)?;
        check_private(path, &meta)?;
        let text = Zeroizing::new(fs::read_to_string(path).map_err(read_err)?);
        let malformed = || Error::Malformed { path: path.to_owned() };
        let bytes =
            Zeroizing::new(data_encoding::HEXLOWER_PERMISSIVE.decode(text.trim().as_bytes()).map_err(|_| malformed())?);
        let seed: [u8; 32] = bytes.as_slice().try_into().map_err(|_| malformed())?;
        Ok(Self::from_seed(seed))
    }

    /// Writes the key atomically with mode 0600: a crash leaves the old file or the new one.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let write_err = |source| Error::Write { path: path.to_owned(), source };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(write_err)?;
        }
        let tmp = path.with_extension("tmp");
        let text = Zeroizing::new(format!("{}\n", data_encoding::HEXLOWER.encode(&self.signing.to_bytes())));
        let mut options = fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp).map_err(write_err)?;
        file.write_all(text.as_bytes()).map_err(write_err)?;
        file.sync_all().map_err(write_err)?;
        fs::rename(&tmp, path).map_err(write_err)?;
        Ok(())
    }
}

#[cfg(unix)]
fn check_private(path: &Path, meta: &fs::Metadata) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::Permissions { path: path.to_owned(), mode });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_: &Path, _: &fs::Metadata) -> Result<(), Error> {
    Ok(())
}

/// An Ed25519 public key: who signed an envelope, or who a trust list trusts.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(VerifyingKey);

/// The multihash code of an identity hash: a PeerId of a small key inlines the key.
const IDENTITY_MULTIHASH: u8 = 0x00;
/// The protobuf fields before an Ed25519 key's 32 bytes: key type 1 (Ed25519), then data of
/// length 32.
const PEER_ID_PREFIX: [u8; 4] = [0x08, 0x01, 0x12, 0x20];

/// Keys this thread decoded lately, at most this many: decoding decompresses a curve point,
/// which costs about a fifth of a signature check, and stored records name the same authors
/// again and again. Only valid keys are kept.
const DECODED_KEYS: usize = 1024;

thread_local! {
    static DECODED: std::cell::RefCell<std::collections::HashMap<[u8; 32], VerifyingKey>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

impl PublicKey {
    /// Parses 32 bytes; fails on a point that is not a valid key.
    pub fn from_bytes(bytes: &[u8; 32]) -> Option<Self> {
        if let Some(key) = DECODED.with(|decoded| decoded.borrow().get(bytes).copied()) {
            return Some(Self(key));
        }
        let key = VerifyingKey::from_bytes(bytes).ok()?;
        DECODED.with(|decoded| {
            let mut decoded = decoded.borrow_mut();
            if decoded.len() >= DECODED_KEYS {
                decoded.clear();
            }
            decoded.insert(*bytes, key);
        });
        Some(Self(key))
    }

    /// The 32 bytes an envelope carries.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The raw dalek key, for verification.
    pub(crate) fn verifying(&self) -> &VerifyingKey {
        &self.0
    }

    /// The libp2p PeerId of the node that owns this key: the identity multihash of the key's
    /// protobuf encoding, written out directly. Going through libp2p's key type would
    /// decompress the curve point again, which costs as much as a fifth of a signature check.
    pub fn peer_id(&self) -> PeerId {
        let mut bytes = [0u8; 2 + PEER_ID_PREFIX.len() + 32];
        bytes[..2].copy_from_slice(&[IDENTITY_MULTIHASH, (PEER_ID_PREFIX.len() + 32) as u8]);
        bytes[2..2 + PEER_ID_PREFIX.len()].copy_from_slice(&PEER_ID_PREFIX);
        bytes[2 + PEER_ID_PREFIX.len()..].copy_from_slice(self.0.as_bytes());
        PeerId::from_bytes(&bytes).unwrap_or_else(|_| self.to_libp2p().to_peer_id())
    }

    /// The same key as a libp2p public key.
    pub fn to_libp2p(&self) -> libp2p_identity::PublicKey {
        // Proof of impossibility: the bytes come from a valid VerifyingKey.
        #[allow(clippy::unwrap_used)]
        let key = libp2p_identity::ed25519::PublicKey::try_from_bytes(&self.to_bytes()).unwrap();
        key.into()
    }

    /// The Ed25519 key behind a PeerId, when the PeerId inlines one (every druse PeerId does).
    pub fn from_peer_id(peer: &PeerId) -> Option<Self> {
        let multihash = peer.as_ref();
        if multihash.code() != u64::from(IDENTITY_MULTIHASH) {
            return None;
        }
        // The encoding libp2p writes: one point decompression instead of two.
        if let Some(key) = multihash.digest().strip_prefix(&PEER_ID_PREFIX[..]) {
            return <&[u8; 32]>::try_from(key).ok().and_then(Self::from_bytes);
        }
        let public = libp2p_identity::PublicKey::try_decode_protobuf(multihash.digest()).ok()?;
        let ed = public.try_into_ed25519().ok()?;
        Self::from_bytes(&ed.to_bytes())
    }
}

impl fmt::Display for PublicKey {
    /// Lowercase hex: the form trust lists and the CLI print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&data_encoding::HEXLOWER.encode(&self.to_bytes()))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl FromStr for PublicKey {
    type Err = Error;

    /// Accepts 64 hex characters, standard base64 of the 32 bytes, or an Ed25519 PeerId.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || Error::BadPublicKey(s.to_owned());
        let bytes = if s.len() == 64 {
            data_encoding::HEXLOWER_PERMISSIVE.decode(s.as_bytes()).ok()
        } else if s.len() == 44 {
            data_encoding::BASE64.decode(s.as_bytes()).ok()
        } else {
            let peer = s.parse::<PeerId>().map_err(|_| bad())?;
            return Self::from_peer_id(&peer).ok_or_else(bad);
        };
        let bytes: [u8; 32] = bytes.as_deref().and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
        Self::from_bytes(&bytes).ok_or_else(bad)
    }
}

impl serde::Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_decoded_again_is_the_same_key_and_a_bad_one_stays_bad() {
        let off_curve = (0..=255u8).map(|b| [b; 32]).find(|k| VerifyingKey::from_bytes(k).is_err()).unwrap();
        // Past the bound of decoded keys, so the kept ones are forgotten once on the way.
        for seed in 0..(DECODED_KEYS as u32 + 50) {
            let mut bytes = [0u8; 32];
            bytes[..4].copy_from_slice(&seed.to_le_bytes());
            let public = Keypair::from_seed(bytes).public();
            for _ in 0..2 {
                let decoded = PublicKey::from_bytes(&public.to_bytes()).unwrap();
                assert_eq!(decoded, public);
                assert_eq!(decoded.verifying().to_bytes(), public.to_bytes());
            }
            assert!(PublicKey::from_bytes(&off_curve).is_none(), "an invalid key was accepted after {seed}");
        }
        assert!(DECODED.with(|d| d.borrow().len()) <= DECODED_KEYS);
    }

    #[test]
    fn peer_id_equals_libp2p_own_derivation() {
        let key = Keypair::from_seed([7; 32]);
        let mut seed = [7u8; 32];
        let libp2p_key = libp2p_identity::Keypair::ed25519_from_bytes(&mut seed).unwrap();
        assert_eq!(key.peer_id(), libp2p_key.public().to_peer_id());
        assert_eq!(key.to_libp2p().public().to_peer_id(), key.peer_id());
    }

    #[test]
    fn public_key_is_recovered_from_its_peer_id() {
        for seed in 0..32u8 {
            let key = Keypair::from_seed([seed; 32]);
            assert_eq!(key.public().peer_id(), key.to_libp2p().public().to_peer_id());
            assert_eq!(PublicKey::from_peer_id(&key.peer_id()), Some(key.public()));
        }
    }

    #[test]
    fn a_peer_id_that_inlines_no_ed25519_key_has_no_public_key() {
        // A hashed PeerId (of a key too large to inline) and an inlined non-point.
        assert_eq!(PublicKey::from_peer_id(&PeerId::random()), None);
        let off_curve = (0..=255u8).map(|b| [b; 32]).find(|k| PublicKey::from_bytes(k).is_none()).unwrap();
        let mut not_a_point = vec![0x00, 36, 0x08, 0x01, 0x12, 0x20];
        not_a_point.extend(off_curve);
        let peer = PeerId::from_bytes(&not_a_point).unwrap();
        assert_eq!(PublicKey::from_peer_id(&peer), None);
    }

    #[test]
    fn saved_key_loads_back_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/node.key");
        let key = Keypair::load_or_generate(&path).unwrap();
        let again = Keypair::load_or_generate(&path).unwrap();
        assert_eq!(key.public(), again.public());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
    }

    #[cfg(unix)]
    #[test]
    fn world_readable_key_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        Keypair::from_seed([1; 32]).save(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(Keypair::load(&path), Err(Error::Permissions { .. })));
    }

    #[test]
    fn corrupt_key_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        Keypair::from_seed([1; 32]).save(&path).unwrap();
        fs::write(&path, "not a key\n").unwrap();
        let err = Keypair::load(&path).unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{err}");
    }

    #[test]
    fn public_key_parses_from_hex_base64_and_peer_id() {
        let key = Keypair::from_seed([3; 32]).public();
        let hex = key.to_string();
        let b64 = data_encoding::BASE64.encode(&key.to_bytes());
        assert_eq!(hex.parse::<PublicKey>().unwrap(), key);
        assert_eq!(b64.parse::<PublicKey>().unwrap(), key);
        assert_eq!(key.peer_id().to_string().parse::<PublicKey>().unwrap(), key);
        assert!("zz".parse::<PublicKey>().is_err());
    }
}
