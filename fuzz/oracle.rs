//! The fuzz target's checks on one input, shared by the libFuzzer target and by the corpus test
//! in `protocol/tests/fuzz_corpus.rs`, so the corpus runs as an ordinary test on every build.
//!
//! Nothing a peer sends may panic a node, and nothing unsigned may be accepted.

use druse_protocol::topic;
use druse_protocol::trust::TrustList;
use druse_protocol::validate::{self, Config, TrustView, Verdict};
use druse_protocol::{Body, Envelope, Keypair, Kind};

const NOW: u64 = 1_700_000_000_000;

/// Runs every decoder and the full validator on `data`; panics on a broken rule.
pub(crate) fn check(data: &[u8]) {
    let management = Keypair::from_seed([1; 32]);
    let source = Keypair::from_seed([2; 32]).peer_id();
    let mut view = TrustView::new(Config::default(), TrustList::new([management.public()]));

    // Every body decoder, on the raw bytes, as if they had been signed.
    for kind in Kind::ALL {
        let _ = Body::decode(kind, data);
    }
    if let Ok(envelope) = Envelope::open(data) {
        // An envelope that opens re-encodes to exactly the received bytes.
        assert_eq!(envelope.to_bytes(), data);
    }
    for on in topic::ALL {
        if let Verdict::Accept(accepted) = validate::validate(data, &source, on, NOW, &mut view) {
            // Only a real signature can be accepted; the fuzzer cannot forge one.
            panic!("fuzzer produced an accepted {:?} message", accepted.body.kind());
        }
    }
    // A message relayed by anti-entropy skips the gossip-only rules (age, origin), so a genuine
    // envelope among the corpus seeds may be accepted; whatever is accepted must stand on its
    // own signature.
    if let Ok(accepted) = validate::check_synced(data, NOW, &mut view) {
        match Envelope::open(data) {
            Ok(opened) => assert_eq!(opened.content_id(), accepted.content_id),
            Err(error) => panic!("a synced {:?} message was accepted unsigned: {error}", accepted.body.kind()),
        }
    }
    // A sync key from a peer parses or is refused, never panics.
    if let Some(key) = druse_protocol::sync::Key::from_bytes(data) {
        assert_eq!(key.as_bytes().as_slice(), data);
    }
}
