//! Feeds arbitrary bytes through envelope decoding, body decoding and the full validator (the
//! checks are in `fuzz/oracle.rs`, which the corpus test shares).
#![no_main]

#[path = "../oracle.rs"]
mod oracle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle::check(data));
