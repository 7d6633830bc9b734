//! Tests of the embedder choice, the config and the shared helpers.

use std::sync::Arc;

use super::choose::select;
use super::*;

/// No environment at all: what a node sees with nothing configured.
fn no_env(_: &str) -> Option<String> {
    None
}

/// The MiniLM folder CI provides, if any.
fn minilm_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(MINILM_DIR_ENV).map(PathBuf::from);
    if dir.is_none() {
        println!("skipped: {MINILM_DIR_ENV} is not set");
    }
    dir
}

#[test]
fn from_config_falls_back_to_hashing_without_model_files() {
    let embedder = select(&Config::default(), None, no_env).unwrap();
    assert_eq!(embedder.name(), "hashing-384");
    assert_eq!(embedder.dim(), DEFAULT_HASHING_DIM);
}

#[test]
fn from_config_sizes_the_hashing_embedder_from_dim() {
    let embedder = select(&Config { dim: Some(128), ..Config::default() }, None, no_env).unwrap();
    assert_eq!((embedder.name(), embedder.dim()), ("hashing-128", 128));
}

#[test]
fn from_config_falls_back_to_hashing_when_env_dir_lacks_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_string_lossy().into_owned();
    let embedder = select(&Config::default(), None, |name| (name == MINILM_DIR_ENV).then(|| path.clone())).unwrap();
    assert_eq!(embedder.name(), "hashing-384");
}

#[test]
fn from_config_errors_when_explicit_minilm_dir_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { minilm_dir: Some(dir.path().to_path_buf()), ..Config::default() };
    let err = select(&config, None, no_env).unwrap_err();
    let missing = dir.path().join("model.safetensors");
    assert!(matches!(&err, Error::MissingFile { path } if *path == missing), "{err:?}");
    assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
}

#[test]
fn from_config_picks_minilm_from_an_explicit_dir() {
    let Some(dir) = minilm_dir() else { return };
    let embedder = select(&Config { minilm_dir: Some(dir), ..Config::default() }, None, no_env).unwrap();
    assert_eq!((embedder.name(), embedder.dim()), ("all-MiniLM-L6-v2", 384));
}

#[test]
fn from_config_picks_minilm_from_the_env_var() {
    let Some(dir) = minilm_dir() else { return };
    let dir = dir.to_string_lossy().into_owned();
    let embedder = select(&Config::default(), None, |name| (name == MINILM_DIR_ENV).then(|| dir.clone())).unwrap();
    assert_eq!(embedder.name(), "all-MiniLM-L6-v2");
}

#[test]
fn from_config_rejects_half_an_openai_config() {
    let url_only = Config { openai_url: Some("http://127.0.0.1:9".into()), ..Config::default() };
    let model_only = Config { openai_model: Some("m".into()), ..Config::default() };
    for config in [url_only, model_only] {
        let err = select(&config, None, no_env).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err:?}");
    }
}

#[test]
fn from_config_names_an_unset_api_key_variable() {
    let config = Config {
        openai_url: Some("http://127.0.0.1:9".into()),
        openai_model: Some("m".into()),
        openai_api_key_env: Some("DRUSE_TEST_EMBED_KEY".into()),
        dim: Some(8),
        ..Config::default()
    };
    let err = select(&config, None, no_env).unwrap_err();
    assert!(err.to_string().contains("DRUSE_TEST_EMBED_KEY"), "{err}");
}

#[test]
fn from_config_rejects_dim_zero() {
    let err = select(&Config { dim: Some(0), ..Config::default() }, None, no_env).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

#[test]
fn config_rejects_unknown_fields_and_defaults_missing_ones() {
    assert!(serde_json::from_str::<Config>(r#"{"minlm_dir": "/x"}"#).is_err(), "a typo must not pass silently");
    let config: Config = serde_json::from_str(r#"{"dim": 256}"#).unwrap();
    assert_eq!(config.dim, Some(256));
    assert!(config.minilm_dir.is_none() && config.openai_url.is_none());
}

#[test]
fn cosine_of_unit_vectors_is_their_dot_product() {
    let a = [0.6, 0.8];
    assert!((cosine(&a, &a) - 1.0).abs() < 1e-6);
    assert!((cosine(&a, &[0.8, -0.6])).abs() < 1e-6);
    assert!((cosine(&a, &[-0.6, -0.8]) + 1.0).abs() < 1e-6);
}

#[test]
fn cosine_of_vectors_of_different_lengths_is_zero() {
    assert_eq!(cosine(&[1.0, 0.0], &[1.0, 0.0, 0.0]), 0.0);
}

#[test]
fn normalize_refuses_zero_and_non_finite_vectors() {
    let mut zero = vec![0.0f32; 4];
    assert!(!normalize(&mut zero));
    let mut nan = vec![f32::NAN, 1.0];
    assert!(!normalize(&mut nan));
    let mut tiny = vec![1e-30f32, 0.0];
    assert!(normalize(&mut tiny));
    assert!((tiny[0] - 1.0).abs() < 1e-6);
}

#[test]
fn embedders_and_errors_cross_threads() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Error>();
    assert_send_sync::<Hashing>();
    assert_send_sync::<MiniLm>();
    assert_send_sync::<OpenAi>();
    assert_send_sync::<Arc<dyn Embedder>>();
}
