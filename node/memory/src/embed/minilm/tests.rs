//! MiniLM tests. They need the weights: CI exports DRUSE_MINILM_DIR (see .ci/fetch-minilm.sh); without
//! it, each test that needs the model says it skipped and passes.

use std::path::Path;
use std::sync::OnceLock;

use super::*;
use crate::embed::{MINILM_DIR_ENV, cosine};

/// The model, loaded once for all tests (loading reads 90 MB).
fn model() -> Option<&'static MiniLm> {
    static MODEL: OnceLock<Option<MiniLm>> = OnceLock::new();
    let model = MODEL.get_or_init(|| {
        let dir = std::env::var_os(MINILM_DIR_ENV)?;
        Some(MiniLm::load(Path::new(&dir)).unwrap())
    });
    if model.is_none() {
        println!("skipped: {MINILM_DIR_ENV} is not set");
    }
    model.as_ref()
}

fn one(model: &MiniLm, text: &str) -> Vec<f32> {
    model.embed(&[text]).unwrap().remove(0)
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[test]
fn minilm_gives_384_dim_unit_vectors() {
    let Some(model) = model() else { return };
    assert_eq!(model.dim(), 384);
    assert_eq!(model.name(), "all-MiniLM-L6-v2");
    let vectors = model.embed(&["A man is eating food.", "", "Ünïcödé and emoji 🦀 survive."]).unwrap();
    assert_eq!(vectors.len(), 3);
    for v in vectors {
        assert_eq!(v.len(), 384);
        assert!((norm(&v) - 1.0).abs() < 1e-4, "norm {}", norm(&v));
        assert!(v.iter().all(|x| x.is_finite()));
    }
}

#[test]
fn minilm_ranks_paraphrase_above_unrelated_sentence() {
    let Some(model) = model() else { return };
    let eating = one(model, "A man is eating food.");
    let bread = cosine(&eating, &one(model, "A man is eating a piece of bread."));
    let movie = cosine(&eating, &one(model, "The new movie is awesome."));
    assert!(bread > 0.6, "paraphrase cosine {bread}");
    assert!(bread > movie, "paraphrase {bread} vs unrelated {movie}");
}

#[test]
fn minilm_matches_an_independent_numpy_reference() {
    // Computed with a hand-written float64 numpy BERT forward over the same safetensors and the
    // `tokenizers` PyPI package (mean pooling, L2 norm). It gives cos(eating food, eating bread) =
    // 0.75534, the figure sentence-transformers publishes for this pair.
    const FIRST_8: [f32; 8] = [0.033242, 0.004406, -0.006277, 0.048379, -0.138702, -0.033617, 0.101128, -0.054385];
    const AT_100: [f32; 4] = [-0.006087, -0.060053, -0.076056, 0.047162];
    let Some(model) = model() else { return };
    let v = one(model, "A man is eating food.");
    for (i, want) in FIRST_8.iter().enumerate().chain(AT_100.iter().enumerate().map(|(i, w)| (i + 100, w))) {
        assert!((v[i] - want).abs() < 2e-4, "dim {i}: got {}, numpy {want}", v[i]);
    }
    let bread = cosine(&v, &one(model, "A man is eating a piece of bread."));
    assert!((bread - 0.75534).abs() < 1e-3, "cosine {bread}");
}

#[test]
fn minilm_batching_and_padding_do_not_change_vectors() {
    let Some(model) = model() else { return };
    let texts = [
        "A man is eating food.",
        "Short.",
        "A considerably longer sentence, so that the shorter ones in the same batch must be padded to its length.",
    ];
    let batch = model.embed(&texts).unwrap();
    for (text, batched) in texts.iter().zip(&batch) {
        let alone = one(model, text);
        let diff = alone.iter().zip(batched).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff < 1e-4, "{text:?}: batched and alone differ by {diff}");
    }
}

#[test]
fn minilm_keeps_input_order_across_batches() {
    let Some(model) = model() else { return };
    // More texts than one forward pass holds, of varied lengths, so sorting by length reorders them.
    let texts: Vec<String> = (0..(BATCH + 5)).map(|i| format!("item {i} {}", "word ".repeat(i % 7))).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let batch = model.embed(&refs).unwrap();
    assert_eq!(batch.len(), texts.len());
    for i in [0, 6, BATCH - 1, BATCH, BATCH + 4] {
        assert!(cosine(&batch[i], &one(model, &texts[i])) > 0.9999, "text {i} out of place");
    }
}

#[test]
fn minilm_truncates_long_texts_instead_of_failing() {
    let Some(model) = model() else { return };
    let long = "memory crystals consolidate overnight ".repeat(2_000);
    let v = one(model, &long);
    assert_eq!(v.len(), 384);
    assert!((norm(&v) - 1.0).abs() < 1e-4);
}

#[test]
fn minilm_embeds_an_empty_batch_as_nothing() {
    let Some(model) = model() else { return };
    assert!(model.embed(&[]).unwrap().is_empty());
}

#[test]
fn minilm_load_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = MiniLm::load(dir.path()).unwrap_err();
    let path = dir.path().join("model.safetensors");
    assert!(matches!(&err, Error::MissingFile { path: p } if *p == path), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");

    std::fs::write(dir.path().join("model.safetensors"), b"not weights").unwrap();
    let err = MiniLm::load(dir.path()).unwrap_err();
    let path = dir.path().join("tokenizer.json");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

#[test]
fn minilm_load_rejects_corrupt_weights_with_the_path() {
    let Some(model) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(model.dir.join("tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), b"\x08\0\0\0\0\0\0\0not json").unwrap();
    let err = MiniLm::load(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Weights { .. }), "{err:?}");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

#[test]
fn minilm_loads_without_config_json() {
    let Some(model) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    for file in ["tokenizer.json", "model.safetensors"] {
        std::fs::copy(model.dir.join(file), dir.path().join(file)).unwrap();
    }
    let bare = MiniLm::load(dir.path()).unwrap();
    assert_eq!(bare.dim(), 384);
    let text = "A man is eating food.";
    assert!(cosine(&one(&bare, text), &one(model, text)) > 0.9999);
}

#[test]
#[ignore = "timing, not correctness: run with --release --ignored --nocapture to quote the figure"]
fn minilm_single_sentence_latency() {
    let Some(model) = model() else { return };
    let sentence = "The agent remembers that the user prefers short answers in the morning.";
    for _ in 0..5 {
        model.embed(&[sentence]).unwrap();
    }
    let mut times: Vec<std::time::Duration> = (0..100)
        .map(|_| {
            let start = std::time::Instant::now();
            std::hint::black_box(model.embed(&[sentence]).unwrap());
            start.elapsed()
        })
        .collect();
    times.sort();
    println!("all-MiniLM-L6-v2, one sentence: p50 {:?}, p90 {:?}, min {:?}", times[50], times[90], times[0]);

    let mut tokenize: Vec<std::time::Duration> = (0..100)
        .map(|_| {
            let start = std::time::Instant::now();
            std::hint::black_box(model.tokenizer.encode_batch(vec![sentence], true).unwrap());
            start.elapsed()
        })
        .collect();
    tokenize.sort();
    println!("  of which tokenizing: p50 {:?}", tokenize[50]);

    let batch: Vec<&str> = std::iter::repeat_n(sentence, 32).collect();
    let start = std::time::Instant::now();
    model.embed(&batch).unwrap();
    println!("all-MiniLM-L6-v2, batch of 32: {:?}", start.elapsed());
}
