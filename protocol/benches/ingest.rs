//! Ingest throughput against the raw signature check (DESIGN §12): in one run, raw
//! `verify_strict` per second and full decode + verify + validate per second for a 1 KiB
//! crystal listing, and their ratio. The target is a ratio of at least 70%. Beside them, the
//! skill scanner over a 1 KiB procedure (every listing's text passes it at ingest), as a
//! fraction of one signature check's time.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput};
use druse_protocol::body::{Body, CrystalListing, ExecutionStats, SemanticType};
use druse_protocol::trust::TrustList;
use druse_protocol::validate::{self, Config, Rate, TrustView};
use druse_protocol::{Envelope, Keypair, Kind};
use ed25519_dalek::{Signature, Signer, SigningKey};

const NOW: u64 = 1_700_000_000_000;

/// A listing whose encoded body is 1 KiB.
fn listing(key: &Keypair, n: u64) -> Vec<u8> {
    let mut listing = CrystalListing {
        issued_at: NOW,
        name: format!("skill-{n}"),
        text: String::new(),
        semantic_type: SemanticType::Skill,
        tags: vec!["rust".into(), "parsing".into()],
        category: Some("code-generation".into()),
        skill_id: format!("skill-{n}"),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 10, successes: 9, avg_reward: 0.8 },
        asking_price: 10_000,
    };
    let overhead = Body::Crystal(listing.clone()).encode().expect("valid listing").len();
    listing.text = "x".repeat(1024 - overhead - 2);
    let body = Body::Crystal(listing).encode().expect("valid listing");
    Envelope::seal(key, Kind::Crystal, &body)
}

fn view() -> TrustView {
    let unlimited = Rate { count: u32::MAX, per_ms: 1 };
    TrustView::new(Config { listing_rate: unlimited, ..Config::default() }, TrustList::default())
}

fn mean_ns(group: &str, bench: &str) -> Option<f64> {
    let path = format!("{}/criterion/{group}/{bench}/new/estimates.json", target_dir());
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["mean"]["point_estimate"].as_f64()
}

fn target_dir() -> String {
    std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| format!("{}/../target", env!("CARGO_MANIFEST_DIR")))
}

fn main() {
    let key = Keypair::from_seed([42; 32]);
    let source = key.peer_id();
    let message = listing(&key, 0);
    assert!(message.len() < 1200, "listing envelope is {} bytes", message.len());

    // The raw check: verify_strict over a 1 KiB message with the same key.
    let dalek = SigningKey::from_bytes(&[42; 32]);
    let raw = vec![7u8; 1024];
    let sig: Signature = dalek.sign(&raw);
    let verifying = dalek.verifying_key();

    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(1));
    group.bench_function("verify_strict", |b| {
        b.iter(|| verifying.verify_strict(black_box(&raw), black_box(&sig)).is_ok())
    });
    group.bench_function("decode_verify_validate", |b| {
        b.iter_batched(
            view,
            |mut view| {
                let verdict =
                    validate::validate(black_box(&message), &source, druse_protocol::topic::CRYSTALS, NOW, &mut view);
                assert!(verdict.is_accept());
                (verdict, view)
            },
            BatchSize::SmallInput,
        )
    });
    let procedure = "# Retry with backoff\n\n## When\nA call to a remote service failed with a timeout or a \
        5xx status (see https://docs.rs/backoff).\n\n## Steps\n1. Wait 1 s, then 2 s, then 4 s between tries, at most \
        5 tries.\n2. Add up to 20% jitter so that clients do not retry together.\n3. Give up on 4xx statuses.\n\n\
        ## Avoid\nRetrying writes that are not idempotent; retrying forever.\n\n## Example\n```sh\nfor i in 1 2 4; do \
        curl -fsS https://api.github.com/ && break; sleep $i; done\n```\n"
        .repeat(4);
    let procedure = &procedure[..1024];
    group.bench_function("skill_scan", |b| b.iter(|| druse_protocol::scan::scan_text_only(black_box(procedure))));
    group.finish();
    c.final_summary();

    match (mean_ns("ingest", "verify_strict"), mean_ns("ingest", "decode_verify_validate")) {
        (Some(raw_ns), Some(full_ns)) => {
            println!("verify_strict:            {:>10.0} msg/s", 1e9 / raw_ns);
            println!("decode+verify+validate:   {:>10.0} msg/s", 1e9 / full_ns);
            println!("ratio (target >= 70%):    {:>9.1}%", 100.0 * raw_ns / full_ns);
            if let Some(scan_ns) = mean_ns("ingest", "skill_scan") {
                println!(
                    "skill scan, 1 KiB:        {:>10.0} msg/s ({:.1}% of a verify_strict)",
                    1e9 / scan_ns,
                    100.0 * scan_ns / raw_ns
                );
            }
        }
        _ => println!("ratio: not available (run with `cargo bench -p druse-protocol`)"),
    }
}
