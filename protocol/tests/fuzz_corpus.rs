//! The fuzz target's corpus (`fuzz/corpus/decode_validate/`) run as an ordinary test through the
//! target's own checks, so every build replays what the fuzzer found without a sanitizer build.

#![allow(clippy::unwrap_used)]

#[path = "../../fuzz/oracle.rs"]
mod oracle;

use std::path::Path;

#[test]
fn every_corpus_input_passes_the_fuzz_targets_checks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/decode_validate");
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_file() {
            oracle::check(&std::fs::read(&path).unwrap());
            inputs += 1;
        }
    }
    assert!(inputs > 0, "the corpus in {} is empty", dir.display());
}
