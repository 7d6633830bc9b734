use proptest::prelude::*;
use serde::Serialize;

use super::*;
use crate::body::{
    Attest, Ban, Bounty, CrystalListing, Endorsement, EndorsementVerdict, ExecutionStats, Report, ReportEvent,
    SemanticType, TrustLevel, Weather,
};
use crate::keys::Keypair;
use crate::topic;

const NOW: UnixMillis = 1_700_000_000_000;

fn mgmt() -> Keypair {
    Keypair::from_seed([1; 32])
}

fn edge() -> Keypair {
    Keypair::from_seed([2; 32])
}

fn outsider() -> Keypair {
    Keypair::from_seed([3; 32])
}

fn view() -> TrustView {
    TrustView::new(Config::default(), TrustList::new([mgmt().public()]))
}

fn listing(issued_at: UnixMillis, name: &str) -> CrystalListing {
    CrystalListing {
        issued_at,
        name: name.into(),
        text: "Parse RFC 3339 timestamps with chrono and fall back to RFC 2822.".into(),
        semantic_type: SemanticType::Skill,
        tags: vec!["rust".into(), "time".into()],
        category: Some("code-generation".into()),
        skill_id: format!("{name}-id"),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 4, successes: 3, avg_reward: 0.5 },
        asking_price: 10_000,
    }
}

fn weather(seq: u64, level: f64) -> Weather {
    Weather { issued_at: NOW, seq, level, duration_ms: 300_000, reason: "sybil burst".into() }
}

fn endorsement(seq: u64) -> Endorsement {
    Endorsement {
        issued_at: NOW,
        seq,
        content_id: ContentId::of(b"skill"),
        skill_id: "skill-id".into(),
        version: 1,
        verdict: EndorsementVerdict::Endorse,
        note: "passes review".into(),
    }
}

fn bounty(seq: u64) -> Bounty {
    Bounty {
        issued_at: NOW,
        seq,
        id: "b-1".into(),
        description: "a parser for ISO 8601 durations".into(),
        tags: vec!["time".into()],
        priority: 0.5,
        reward_multiplier: 2.0,
        expires_at: NOW + 3_600_000,
    }
}

fn ban(seq: u64) -> Ban {
    Ban { issued_at: NOW, seq, peer: outsider().public(), reason: "spam".into(), expires_at: NOW + 60_000 }
}

fn attest(seq: u64) -> Attest {
    Attest {
        issued_at: NOW,
        seq,
        peer: edge().public(),
        level: TrustLevel::Trusted,
        reason: "known operator".into(),
        expires_at: NOW + 60_000,
    }
}

fn report(by: &Keypair) -> Report {
    Report {
        issued_at: NOW,
        reporter: by.public(),
        content_id: ContentId::of(b"skill"),
        event: ReportEvent::Execution { success: true, reward: 0.7 },
    }
}

fn seal(key: &Keypair, body: Body) -> Vec<u8> {
    Envelope::seal(key, body.kind(), &body.encode().expect("test bodies are valid"))
}

/// One valid envelope of every kind, each with the source it must arrive from.
fn one_of_each() -> Vec<(Vec<u8>, PeerId)> {
    let m = mgmt();
    let e = edge();
    vec![
        (seal(&e, Body::Crystal(listing(NOW, "parse-dates"))), e.peer_id()),
        (seal(&m, Body::Endorsement(endorsement(1))), e.peer_id()),
        (seal(&m, Body::Weather(weather(2, 0.9))), e.peer_id()),
        (seal(&m, Body::Bounty(bounty(3))), e.peer_id()),
        (seal(&e, Body::Report(report(&e))), e.peer_id()),
        (seal(&m, Body::Ban(ban(4))), e.peer_id()),
        (seal(&m, Body::Attest(attest(5))), e.peer_id()),
    ]
}

/// The envelope's wire form, written by hand so tests can build what honest code never would.
#[derive(Serialize)]
struct RawWire<'a> {
    v: u64,
    kind: &'a str,
    #[serde(with = "serde_bytes")]
    body: &'a [u8],
    #[serde(with = "serde_bytes")]
    signer: &'a [u8],
    #[serde(with = "serde_bytes")]
    sig: &'a [u8],
}

fn raw(kind: &str, body: &[u8], signer: &PublicKey, sig: &[u8]) -> Vec<u8> {
    serde_ipld_dagcbor::to_vec(&RawWire { v: 1, kind, body, signer: &signer.to_bytes(), sig }).unwrap()
}

fn domain_sig(key: &Keypair, kind: &str, body: &[u8]) -> [u8; 64] {
    key.sign_raw(&[b"druse/v1/".as_slice(), kind.as_bytes(), &[0], body].concat())
}

/// The topic an envelope belongs on (garbage gets the crystal topic; it is refused anyway).
fn topic_of(bytes: &[u8]) -> &'static str {
    Envelope::peek_kind(bytes).map_or(topic::CRYSTALS, Kind::topic)
}

/// Validates `bytes` arriving on their own topic at `NOW`.
fn run(bytes: &[u8], source: &PeerId, view: &mut TrustView) -> Verdict {
    run_at(bytes, source, NOW, view)
}

fn run_at(bytes: &[u8], source: &PeerId, now: UnixMillis, view: &mut TrustView) -> Verdict {
    validate(bytes, source, topic_of(bytes), now, view)
}

fn assert_rejected(verdict: Verdict, reason: Reason) {
    match verdict {
        Verdict::Reject(r) => assert_eq!(r, reason),
        other => panic!("expected Reject({reason:?}), got {other:?}"),
    }
}

fn assert_ignored(verdict: Verdict, reason: Reason) {
    match verdict {
        Verdict::Ignore(r) => assert_eq!(r, reason),
        other => panic!("expected Ignore({reason:?}), got {other:?}"),
    }
}

#[test]
fn every_kind_signed_by_the_right_key_is_accepted() {
    let mut view = view();
    for (bytes, source) in one_of_each() {
        let verdict = run(&bytes, &source, &mut view);
        assert!(verdict.is_accept(), "{verdict:?}");
    }
}

#[test]
fn forged_signature_is_rejected() {
    let body = Body::Weather(weather(1, 0.9)).encode().unwrap();
    // The outsider signs, but the envelope names the management key as signer.
    let sig = domain_sig(&outsider(), "weather", &body);
    let bytes = raw("weather", &body, &mgmt().public(), &sig);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::BadSignature);
}

#[test]
fn forged_signature_is_rejected_after_the_signer_was_heard_from() {
    // The first message leaves the management key decoded in the view; a forgery naming the
    // same key must still have its signature checked.
    let mut view = view();
    let genuine = seal(&mgmt(), Body::Weather(weather(1, 0.5)));
    assert!(run(&genuine, &edge().peer_id(), &mut view).is_accept());
    let body = Body::Weather(weather(2, 0.9)).encode().unwrap();
    let bytes = raw("weather", &body, &mgmt().public(), &domain_sig(&outsider(), "weather", &body));
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view), Reason::BadSignature);
}

#[test]
fn signature_made_for_another_kind_is_rejected() {
    // A genuine management signature over an endorsement body, replayed as if it were weather.
    let body = Body::Endorsement(endorsement(1)).encode().unwrap();
    let sig = domain_sig(&mgmt(), "endorsement", &body);
    let bytes = raw("weather", &body, &mgmt().public(), &sig);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::BadSignature);
}

#[test]
fn tampered_body_is_rejected() {
    let body = Body::Weather(weather(1, 0.1)).encode().unwrap();
    let sig = domain_sig(&mgmt(), "weather", &body);
    let tampered = Body::Weather(weather(1, 0.9)).encode().unwrap();
    let bytes = raw("weather", &tampered, &mgmt().public(), &sig);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::BadSignature);
}

#[test]
fn trailing_bytes_after_the_envelope_are_rejected() {
    let mut bytes = seal(&mgmt(), Body::Weather(weather(1, 0.9)));
    bytes.push(0);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::Malformed);
}

#[test]
fn trailing_bytes_after_a_signed_body_are_rejected() {
    let mut body = Body::Weather(weather(1, 0.9)).encode().unwrap();
    body.push(0);
    let bytes = Envelope::seal(&mgmt(), Kind::Weather, &body);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::Malformed);
}

#[test]
fn oversize_envelope_is_rejected_before_decoding() {
    let bytes = vec![0u8; envelope::MAX_ENVELOPE_LEN + 1];
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::TooLarge);
}

#[test]
fn body_over_its_kind_cap_is_rejected() {
    // 3 KiB is fine for a crystal but over the 2 KiB weather cap.
    let body = vec![0u8; 3 * 1024];
    let bytes = Envelope::seal(&mgmt(), Kind::Weather, &body);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::TooLarge);
}

#[test]
fn future_dated_message_is_ignored() {
    let e = edge();
    let mut early = listing(NOW + 60_001, "from-the-future");
    let bytes = seal(&e, Body::Crystal(early.clone()));
    assert_ignored(run(&bytes, &e.peer_id(), &mut view()), Reason::FutureDated);
    early.issued_at = NOW + 60_000;
    let bytes = seal(&e, Body::Crystal(early));
    assert!(run(&bytes, &e.peer_id(), &mut view()).is_accept(), "60 s of skew is allowed");
}

#[test]
fn stale_message_is_ignored() {
    let e = edge();
    let bytes = seal(&e, Body::Crystal(listing(NOW - 300_001, "old")));
    assert_ignored(run(&bytes, &e.peer_id(), &mut view()), Reason::Stale);
    let bytes = seal(&e, Body::Crystal(listing(NOW - 300_000, "just-in-time")));
    assert!(run(&bytes, &e.peer_id(), &mut view()).is_accept(), "300 s of age is allowed");
}

#[test]
fn replayed_seq_with_a_new_body_is_ignored() {
    let mut view = view();
    let source = edge().peer_id();
    assert!(run(&seal(&mgmt(), Body::Weather(weather(5, 0.9))), &source, &mut view).is_accept());
    let reused = seal(&mgmt(), Body::Weather(weather(5, 0.2)));
    assert_ignored(run(&reused, &source, &mut view), Reason::ReplayedSeq);
}

#[test]
fn seq_older_than_the_window_is_ignored() {
    let mut view = view();
    let source = edge().peer_id();
    assert!(run(&seal(&mgmt(), Body::Weather(weather(500, 0.9))), &source, &mut view).is_accept());
    let old = seal(&mgmt(), Body::Weather(weather(500 - SEQ_WINDOW, 0.9)));
    assert_ignored(run(&old, &source, &mut view), Reason::ReplayedSeq);
}

#[test]
fn equal_seq_redelivered_is_ignored_idempotently() {
    let mut view = view();
    let source = edge().peer_id();
    let bytes = seal(&mgmt(), Body::Weather(weather(7, 0.9)));
    assert!(run(&bytes, &source, &mut view).is_accept());
    assert_ignored(run(&bytes, &source, &mut view), Reason::Duplicate);
    assert_ignored(run(&bytes, &source, &mut view), Reason::Duplicate);
}

#[test]
fn seqs_reordered_by_gossip_within_the_window_are_accepted() {
    let mut view = view();
    let source = edge().peer_id();
    assert!(run(&seal(&mgmt(), Body::Weather(weather(10, 0.9))), &source, &mut view).is_accept());
    assert!(run(&seal(&mgmt(), Body::Endorsement(endorsement(9))), &source, &mut view).is_accept());
    assert_ignored(run(&seal(&mgmt(), Body::Bounty(bounty(9))), &source, &mut view), Reason::ReplayedSeq);
}

#[test]
fn restored_seq_refuses_everything_up_to_it_after_a_restart() {
    let mut view = view();
    view.restore_seq(mgmt().public(), 20);
    let source = edge().peer_id();
    assert_ignored(run(&seal(&mgmt(), Body::Weather(weather(20, 0.9))), &source, &mut view), Reason::ReplayedSeq);
    assert_ignored(run(&seal(&mgmt(), Body::Weather(weather(15, 0.9))), &source, &mut view), Reason::ReplayedSeq);
    assert!(run(&seal(&mgmt(), Body::Weather(weather(21, 0.9))), &source, &mut view).is_accept());
    assert_eq!(view.last_seqs().collect::<Vec<_>>(), vec![(mgmt().public(), 21)]);
}

#[test]
fn unknown_kind_is_rejected() {
    let body = b"\xa0".to_vec();
    let sig = domain_sig(&edge(), "episode", &body);
    let bytes = raw("episode", &body, &edge().public(), &sig);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::UnknownKind);
}

#[test]
fn unsupported_envelope_version_is_rejected() {
    let body = Body::Weather(weather(1, 0.9)).encode().unwrap();
    let sig = domain_sig(&mgmt(), "weather", &body);
    let bytes = serde_ipld_dagcbor::to_vec(&RawWire {
        v: 2,
        kind: "weather",
        body: &body,
        signer: &mgmt().public().to_bytes(),
        sig: &sig,
    })
    .unwrap();
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::UnsupportedVersion);
}

#[test]
fn weather_signed_by_a_key_not_on_the_trust_list_is_rejected() {
    let bytes = seal(&outsider(), Body::Weather(weather(1, 0.9)));
    assert_rejected(run(&bytes, &outsider().peer_id(), &mut view()), Reason::UntrustedSigner);
}

#[test]
fn endorsement_signed_by_a_key_not_on_the_trust_list_is_rejected() {
    let bytes = seal(&outsider(), Body::Endorsement(endorsement(1)));
    assert_rejected(run(&bytes, &outsider().peer_id(), &mut view()), Reason::UntrustedSigner);
}

#[test]
fn ban_signed_by_a_key_not_on_the_trust_list_is_rejected() {
    let bytes = seal(&outsider(), Body::Ban(ban(1)));
    assert_rejected(run(&bytes, &outsider().peer_id(), &mut view()), Reason::UntrustedSigner);
}

#[test]
fn bounty_signed_by_a_key_not_on_the_trust_list_is_rejected() {
    let bytes = seal(&outsider(), Body::Bounty(bounty(1)));
    assert_rejected(run(&bytes, &outsider().peer_id(), &mut view()), Reason::UntrustedSigner);
}

#[test]
fn attestation_signed_by_a_key_not_on_the_trust_list_is_rejected() {
    let bytes = seal(&outsider(), Body::Attest(attest(1)));
    assert_rejected(run(&bytes, &outsider().peer_id(), &mut view()), Reason::UntrustedSigner);
}

#[test]
fn untrusted_signer_does_not_advance_the_seq() {
    let mut view = view();
    let source = edge().peer_id();
    let _ = run(&seal(&outsider(), Body::Weather(weather(100, 0.9))), &source, &mut view);
    assert_eq!(view.last_seqs().count(), 0);
}

#[test]
fn listing_whose_signer_is_not_the_gossip_source_is_rejected() {
    let bytes = seal(&edge(), Body::Crystal(listing(NOW, "relayed")));
    assert_rejected(run(&bytes, &outsider().peer_id(), &mut view()), Reason::AuthorMismatch);
}

#[test]
fn report_whose_signer_is_not_the_gossip_source_is_rejected() {
    let bytes = seal(&edge(), Body::Report(report(&edge())));
    assert_rejected(run(&bytes, &outsider().peer_id(), &mut view()), Reason::AuthorMismatch);
}

#[test]
fn report_naming_another_reporter_than_its_signer_is_rejected() {
    let e = edge();
    let bytes = seal(&e, Body::Report(report(&outsider())));
    assert_rejected(run(&bytes, &e.peer_id(), &mut view()), Reason::AuthorMismatch);
}

#[test]
fn identical_reports_from_two_reporters_in_one_millisecond_are_both_accepted() {
    let (e, o) = (edge(), outsider());
    let mut view = view();
    let first = seal(&e, Body::Report(report(&e)));
    let second = seal(&o, Body::Report(report(&o)));
    assert!(matches!(run(&first, &e.peer_id(), &mut view), Verdict::Accept(_)));
    assert!(matches!(run(&second, &o.peer_id(), &mut view), Verdict::Accept(_)), "deduplicated as the first");
    assert_ignored(run(&second, &o.peer_id(), &mut view), Reason::Duplicate);
}

#[test]
fn listing_of_a_memory_crystal_is_rejected() {
    let e = edge();
    for private in [SemanticType::Episode, SemanticType::Preference, SemanticType::Fact, SemanticType::Goal] {
        let listing = CrystalListing { semantic_type: private, ..listing(NOW, "diary") };
        // Body::encode refuses to encode it, so encode it by hand as a hostile node would.
        assert!(Body::Crystal(listing.clone()).encode().is_err());
        let bytes = Envelope::seal(&e, Kind::Crystal, &serde_ipld_dagcbor::to_vec(&listing).unwrap());
        assert_rejected(run(&bytes, &e.peer_id(), &mut view()), Reason::NotPublishable);
    }
}

#[test]
fn weather_level_outside_the_unit_interval_is_rejected() {
    let body = serde_ipld_dagcbor::to_vec(&weather(1, 1.5)).unwrap();
    let bytes = Envelope::seal(&mgmt(), Kind::Weather, &body);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::InvalidField);
}

#[test]
fn report_reward_outside_minus_one_to_one_is_rejected() {
    let e = edge();
    let bad = Report { event: ReportEvent::Execution { success: true, reward: -1.5 }, ..report(&e) };
    let bytes = Envelope::seal(&e, Kind::Report, &serde_ipld_dagcbor::to_vec(&bad).unwrap());
    assert_rejected(run(&bytes, &e.peer_id(), &mut view()), Reason::InvalidField);
}

#[test]
fn over_long_tag_list_is_rejected() {
    let e = edge();
    let tags = (0..17).map(|i| format!("t{i}")).collect();
    let bad = CrystalListing { tags, ..listing(NOW, "tagged") };
    let bytes = Envelope::seal(&e, Kind::Crystal, &serde_ipld_dagcbor::to_vec(&bad).unwrap());
    assert_rejected(run(&bytes, &e.peer_id(), &mut view()), Reason::InvalidField);
}

#[test]
fn body_with_an_unknown_field_is_rejected() {
    #[derive(Serialize)]
    struct Extra {
        issued_at: u64,
        seq: u64,
        level: f64,
        duration_ms: u64,
        reason: String,
        extra: u8,
    }
    let body = serde_ipld_dagcbor::to_vec(&Extra {
        issued_at: NOW,
        seq: 1,
        level: 0.5,
        duration_ms: 1000,
        reason: String::new(),
        extra: 1,
    })
    .unwrap();
    let bytes = Envelope::seal(&mgmt(), Kind::Weather, &body);
    assert_rejected(run(&bytes, &edge().peer_id(), &mut view()), Reason::Malformed);
}

#[test]
fn listings_over_the_per_peer_rate_are_ignored_until_the_window_passes() {
    let e = edge();
    let mut view = view();
    for i in 0..10 {
        let bytes = seal(&e, Body::Crystal(listing(NOW, &format!("s{i}"))));
        assert!(run(&bytes, &e.peer_id(), &mut view).is_accept(), "listing {i}");
    }
    let eleventh = seal(&e, Body::Crystal(listing(NOW, "s10")));
    assert_ignored(run(&eleventh, &e.peer_id(), &mut view), Reason::RateLimited);
    // Another peer has its own budget.
    let o = outsider();
    let theirs = seal(&o, Body::Crystal(listing(NOW, "theirs")));
    assert!(run(&theirs, &o.peer_id(), &mut view).is_accept());
    // Sixty seconds later the budget is back.
    assert!(run_at(&eleventh, &e.peer_id(), NOW + 60_000, &mut view).is_accept());
}

#[test]
fn seen_set_forgets_the_oldest_beyond_its_capacity() {
    let mut view = TrustView::new(Config { seen_capacity: 2, ..Config::default() }, TrustList::default());
    let ids: Vec<_> = (0..3u8).map(|i| ContentId::of(&[i])).collect();
    for id in &ids {
        view.mark_seen(*id);
    }
    assert!(!view.has_seen(&ids[0]));
    assert!(view.has_seen(&ids[1]) && view.has_seen(&ids[2]));
}

#[test]
fn rate_table_stays_bounded_when_many_peers_send() {
    let mut view = TrustView::new(Config { rate_peers: 8, ..Config::default() }, TrustList::default());
    for seed in 10..40u8 {
        let key = Keypair::from_seed([seed; 32]);
        let bytes = seal(&key, Body::Crystal(listing(NOW, &format!("s{seed}"))));
        assert!(run(&bytes, &key.peer_id(), &mut view).is_accept());
    }
    assert!(view.rates.len() <= 8);
}

#[test]
fn flipping_any_single_bit_of_any_kind_never_yields_accept() {
    for (bytes, source) in one_of_each() {
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let verdict = run(&flipped, &source, &mut view());
            assert!(!verdict.is_accept(), "bit {bit} of a {:?} envelope", Envelope::open(&bytes).map(|e| e.kind()));
        }
    }
}

fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..max).prop_map(|c| c.into_iter().collect())
}

fn arb_listing() -> impl Strategy<Value = CrystalListing> {
    (
        "[a-z][a-z0-9-]{0,30}",
        text(300),
        prop_oneof![Just(SemanticType::Skill), Just(SemanticType::TaskPattern)],
        proptest::collection::vec("[a-z]{1,10}", 0..16),
        proptest::option::of("[a-z-]{1,20}"),
        (any::<u32>(), 0u64..1000, 0.0f64..=1.0, -1.0f64..=1.0, any::<u64>(), any::<bool>()),
    )
        .prop_map(
            |(name, text, semantic_type, tags, category, (version, executions, rate, avg_reward, price, prev))| {
                CrystalListing {
                    issued_at: NOW,
                    skill_id: format!("{name}-id"),
                    name,
                    text,
                    semantic_type,
                    tags,
                    category,
                    version,
                    previous_version: prev.then(|| ContentId::of(&version.to_le_bytes())),
                    stats: ExecutionStats { executions, successes: (executions as f64 * rate) as u64, avg_reward },
                    asking_price: price,
                }
            },
        )
}

fn arb_body() -> impl Strategy<Value = Body> {
    prop_oneof![
        arb_listing().prop_map(Body::Crystal),
        (any::<u64>(), 0.0f64..=1.0, 0u64..limits_weather(), text(100)).prop_map(
            |(seq, level, duration_ms, reason)| Body::Weather(Weather {
                issued_at: NOW,
                seq,
                level,
                duration_ms,
                reason
            })
        ),
        (any::<u64>(), any::<bool>(), -1.0f64..=1.0, any::<u64>()).prop_map(|(seq, success, reward, paid)| {
            Body::Report(Report {
                issued_at: NOW,
                reporter: mgmt().public(),
                content_id: ContentId::of(&seq.to_le_bytes()),
                event: if success && reward > 0.5 {
                    ReportEvent::Adoption { price_paid: paid }
                } else {
                    ReportEvent::Execution { success, reward }
                },
            })
        }),
        any::<u64>().prop_map(|seq| Body::Endorsement(endorsement(seq))),
        any::<u64>().prop_map(|seq| Body::Bounty(bounty(seq))),
        any::<u64>().prop_map(|seq| Body::Ban(ban(seq))),
        any::<u64>().prop_map(|seq| Body::Attest(attest(seq))),
    ]
}

fn limits_weather() -> u64 {
    crate::body::limits::WEATHER_DURATION_MS
}

proptest! {
    #[test]
    fn encode_then_decode_round_trips(body in arb_body()) {
        let key = mgmt();
        let bytes = Envelope::seal(&key, body.kind(), &body.encode().unwrap());
        let envelope = Envelope::open(&bytes).unwrap();
        prop_assert_eq!(envelope.kind(), body.kind());
        prop_assert_eq!(Body::decode(envelope.kind(), envelope.body()).unwrap(), body);
        prop_assert_eq!(envelope.to_bytes(), bytes);
    }

    #[test]
    fn flipping_a_random_bit_of_a_random_envelope_never_yields_accept(body in arb_body(), bit in any::<prop::sample::Index>()) {
        let key = mgmt();
        let bytes = Envelope::seal(&key, body.kind(), &body.encode().unwrap());
        let source = key.peer_id();
        prop_assert!(run(&bytes, &source, &mut view()).is_accept());
        let mut flipped = bytes.clone();
        let at = bit.index(bytes.len() * 8);
        flipped[at / 8] ^= 1 << (at % 8);
        prop_assert!(!run(&flipped, &source, &mut view()).is_accept());
    }

    #[test]
    fn arbitrary_bytes_never_panic_or_accept(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert!(!run(&bytes, &edge().peer_id(), &mut view()).is_accept());
    }
}

#[test]
fn non_minimal_integer_encoding_is_rejected() {
    // The same envelope with `v` written as a two-byte integer: equal in value, not in bytes.
    let bytes = seal(&mgmt(), Body::Weather(weather(1, 0.9)));
    assert_eq!(&bytes[..4], &[0xa5, 0x61, b'v', 0x01]);
    let padded = [&[0xa5, 0x61, b'v', 0x18, 0x01][..], &bytes[4..]].concat();
    assert_rejected(run(&padded, &edge().peer_id(), &mut view()), Reason::Malformed);
}

#[test]
fn map_keys_out_of_canonical_order_are_rejected() {
    // The same five entries, with `v` moved from first to last.
    let bytes = seal(&mgmt(), Body::Weather(weather(1, 0.9)));
    let reordered = [&[0xa5][..], &bytes[4..], &[0x61, b'v', 0x01]].concat();
    let verdict = run(&reordered, &edge().peer_id(), &mut view());
    assert!(matches!(verdict, Verdict::Reject(Reason::NonCanonical | Reason::Malformed)), "{verdict:?}");
}

#[test]
fn a_copy_on_the_wrong_topic_is_rejected_and_the_genuine_message_still_accepted() {
    for (bytes, source) in one_of_each() {
        let mut view = view();
        let right = topic_of(&bytes);
        for wrong in topic::ALL.into_iter().filter(|t| *t != right) {
            assert_rejected(validate(&bytes, &source, wrong, NOW, &mut view), Reason::WrongTopic);
        }
        assert!(run(&bytes, &source, &mut view).is_accept(), "genuine copy on {right} after wrong-topic copies");
        assert_ignored(run(&bytes, &source, &mut view), Reason::Duplicate);
    }
}

#[test]
fn a_tampered_copy_blocks_nothing() {
    for (bytes, source) in one_of_each() {
        let mut view = view();
        // The same body under a broken signature: the same content id, refused.
        let mut tampered = bytes.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 0x01;
        assert!(!run(&tampered, &source, &mut view).is_accept());
        assert!(run(&bytes, &source, &mut view).is_accept(), "genuine copy after a tampered one");
    }
}

#[test]
fn a_checked_message_changes_nothing_until_it_is_committed() {
    for (bytes, source) in one_of_each() {
        let mut view = view();
        let right = topic_of(&bytes);
        // Checked again and again (as if a later gate refused it each time), never committed.
        for _ in 0..12 {
            assert!(check(&bytes, &source, right, NOW, &mut view).is_ok());
        }
        let accepted = check(&bytes, &source, right, NOW, &mut view).expect("still acceptable");
        assert!(!view.has_seen(&accepted.content_id));
        view.commit(&accepted, NOW);
        assert!(view.has_seen(&accepted.content_id));
        assert_eq!(check(&bytes, &source, right, NOW, &mut view).err(), Some(Reason::Duplicate));
    }
}

#[test]
fn refused_listings_spend_no_rate() {
    let e = edge();
    let mut view = view();
    // Eleven listings checked on the wrong topic: none of them counts against the budget.
    for i in 0..11 {
        let bytes = seal(&e, Body::Crystal(listing(NOW, &format!("w{i}"))));
        assert_rejected(validate(&bytes, &e.peer_id(), topic::REPORTS, NOW, &mut view), Reason::WrongTopic);
    }
    for i in 0..10 {
        let bytes = seal(&e, Body::Crystal(listing(NOW, &format!("s{i}"))));
        assert!(run(&bytes, &e.peer_id(), &mut view).is_accept(), "listing {i}");
    }
}

#[test]
fn weather_stays_fresh_for_gossip_while_in_force_and_goes_stale_once_expired() {
    let m = mgmt();
    let long = Weather { issued_at: NOW - 400_000, seq: 1, level: 0.9, duration_ms: 600_000, reason: "storm".into() };
    let bytes = seal(&m, Body::Weather(long));
    assert!(run(&bytes, &edge().peer_id(), &mut view()).is_accept(), "in force for 200 s more");
    assert_ignored(run_at(&bytes, &edge().peer_id(), NOW + 200_000, &mut view()), Reason::Stale);
    let short = Weather { issued_at: NOW - 400_000, seq: 2, level: 0.9, duration_ms: 1_000, reason: "over".into() };
    assert_ignored(run(&seal(&m, Body::Weather(short)), &edge().peer_id(), &mut view()), Reason::Stale);
}

#[test]
fn a_synced_message_of_any_age_from_any_relay_is_accepted_on_its_signature_and_authority() {
    let (m, e) = (mgmt(), edge());
    let day = 86_400_000;
    let mut old_weather = weather(1, 0.5);
    old_weather.issued_at = NOW - day;
    let mut old_report = report(&e);
    old_report.issued_at = NOW - day;
    for body in [
        Body::Crystal(listing(NOW - day, "old-skill")),
        Body::Endorsement(Endorsement { issued_at: NOW - day, ..endorsement(1) }),
        Body::Weather(old_weather),
        Body::Report(old_report),
    ] {
        let key = if body.kind().is_management() { &m } else { &e };
        let accepted = check_synced(&seal(key, body.clone()), NOW, &mut view()).expect("a relayed message");
        assert_eq!(accepted.body, body);
    }
}

#[test]
fn a_synced_message_still_needs_a_valid_signature_the_right_signer_and_no_future_date() {
    let (m, e, o) = (mgmt(), edge(), outsider());
    let forged = seal(&o, Body::Weather(weather(1, 0.9)));
    assert_eq!(check_synced(&forged, NOW, &mut view()).err(), Some(Reason::UntrustedSigner));
    let foreign_report = seal(&o, Body::Report(report(&e)));
    assert_eq!(check_synced(&foreign_report, NOW, &mut view()).err(), Some(Reason::AuthorMismatch));
    let mut tampered = seal(&e, Body::Crystal(listing(NOW, "tampered")));
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(check_synced(&tampered, NOW, &mut view()).is_err(), "a broken signature is refused");
    let future = seal(&m, Body::Weather(Weather { issued_at: NOW + 60_001, ..weather(1, 0.9) }));
    assert_eq!(check_synced(&future, NOW, &mut view()).err(), Some(Reason::FutureDated));
}

#[test]
fn a_synced_message_already_accepted_is_a_duplicate_but_an_old_seq_is_not_a_replay() {
    let m = mgmt();
    let mut view = view();
    let newest = seal(&m, Body::Bounty(bounty(500)));
    assert!(run(&newest, &edge().peer_id(), &mut view).is_accept());
    assert_eq!(check_synced(&newest, NOW, &mut view).err(), Some(Reason::Duplicate));
    let missed = seal(&m, Body::Bounty(Bounty { id: "b-0".into(), ..bounty(3) }));
    assert_ignored(run(&missed, &edge().peer_id(), &mut view), Reason::ReplayedSeq);
    assert!(check_synced(&missed, NOW, &mut view).is_ok(), "a message missed during a partition still arrives");
}
