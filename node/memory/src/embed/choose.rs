//! Which embedder a node runs: the configured one, MiniLM from a folder, the environment or the
//! hub, or the hashing embedder when MiniLM cannot be had and the config allows it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::hashing::Hashing;
use super::minilm::{self, MiniLm};
use super::openai::OpenAi;
use super::{Choice, Config, DEFAULT_HASHING_DIM, Embedder, Error, MINILM_DIR_ENV, fetch};

/// Picks the embedder: an OpenAI-compatible endpoint if configured; else MiniLM from `minilm_dir` or the
/// `DRUSE_MINILM_DIR` env var if that folder holds model.safetensors + tokenizer.json (+ config.json if
/// present); else the hashing embedder, logging once (tracing::info!) that it is used and why.
/// It never downloads: [`for_node`] does, for a node with a data directory.
///
/// With `openai_url` and no `dim`, this sends one probe request to learn the dimension: call it off the
/// async runtime (spawn_blocking) or before starting one.
pub fn from_config(config: &Config) -> Result<Arc<dyn Embedder>, Error> {
    select(config, None, |name| std::env::var(name).ok())
}

/// [`from_config`] for a node whose data directory is `data_dir`: MiniLM may also come from the verified
/// files in `data_dir/models`, or, with `download` on, be fetched there first ([`fetch`]). A failed fetch
/// falls back to the hashing embedder with one warning that says what failed and how to fix it (or is an
/// error with `embedder = "minilm"`). Blocking: call it off the async runtime.
pub fn for_node(config: &Config, data_dir: &Path) -> Result<Arc<dyn Embedder>, Error> {
    select(config, Some(data_dir), |name| std::env::var(name).ok())
}

/// The selection, with the data directory and the environment passed in, so tests need not mutate the
/// process environment.
pub(super) fn select(
    config: &Config,
    data_dir: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Embedder>, Error> {
    if config.dim == Some(0) {
        return Err(Error::Config("dim must be at least 1".into()));
    }
    let openai = match (&config.openai_url, &config.openai_model) {
        (Some(url), Some(model)) => Some((url, model)),
        (Some(_), None) => return Err(Error::Config("openai_url is set but openai_model is not".into())),
        (None, Some(_)) => return Err(Error::Config("openai_model is set but openai_url is not".into())),
        (None, None) => None,
    };
    let dim = config.dim.unwrap_or(DEFAULT_HASHING_DIM);
    match (config.embedder, openai) {
        (Choice::Openai | Choice::Auto, Some((url, model))) => return openai_embedder(config, url, model, &env),
        (Choice::Openai, None) => {
            return Err(Error::Config("embedder = \"openai\" needs openai_url and openai_model".into()));
        }
        (Choice::Hashing, _) => return Ok(hashing(dim, "memory.embed.embedder = \"hashing\"")),
        (Choice::Auto | Choice::Minilm, _) => {}
    }
    let strict = config.embedder == Choice::Minilm;
    if let Some(dir) = &config.minilm_dir {
        // An explicit folder is a promise: failing to honour it is an error, not a silent downgrade.
        return Ok(Arc::new(MiniLm::load(dir)?));
    }
    let mut why = match env(MINILM_DIR_ENV).filter(|dir| !dir.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            match minilm::missing_file(&dir) {
                None => return Ok(Arc::new(MiniLm::load(&dir)?)),
                Some(missing) => format!("{MINILM_DIR_ENV} is set but {} is missing", missing.display()),
            }
        }
        None => format!("neither minilm_dir nor {MINILM_DIR_ENV} names a MiniLM model folder"),
    };
    if let Some(data_dir) = data_dir {
        let mut fetch = fetch::Fetch::new(data_dir, env(fetch::ENDPOINT_ENV));
        fetch.connect_timeout = config.download_connect_timeout;
        fetch.timeout = config.download_timeout;
        let dir = fetch.model_dir();
        match fetch::verify(&dir) {
            Ok(()) => return Ok(Arc::new(MiniLm::load(&dir)?)),
            Err(problem) if config.download => {
                tracing::info!(
                    from = %fetch.endpoint,
                    revision = fetch::REVISION,
                    into = %dir.display(),
                    "downloading the all-MiniLM-L6-v2 embedder (about 90 MB; once)"
                );
                tracing::debug!(%problem, "no verified model in the data directory yet");
                match fetch.fetch() {
                    Ok(dir) => return Ok(Arc::new(MiniLm::load(&dir)?)),
                    Err(error) if strict => return Err(Error::Fetch(error)),
                    Err(error) => {
                        let embedder = Hashing::new(dim);
                        tracing::warn!(
                            embedder = embedder.name(),
                            "all-MiniLM-L6-v2 could not be fetched: {error}. Embedding with the feature-hashing \
                             embedder instead, which matches shared words, not meaning. To fix it, {how}, then \
                             restart; memory.embed.embedder = \"hashing\" keeps the hashing embedder without trying",
                            how = fetch::HOW_TO_FIX,
                        );
                        return Ok(Arc::new(embedder));
                    }
                }
            }
            Err(problem) => why = format!("{why}; {problem} and memory.embed.download is off"),
        }
    }
    if strict {
        return Err(Error::Config(format!(
            "embedder = \"minilm\" but there is no model: {why}; {}",
            fetch::HOW_TO_FIX
        )));
    }
    Ok(hashing(dim, &why))
}

/// The hashing embedder, saying once why it is used.
fn hashing(dim: usize, why: &str) -> Arc<dyn Embedder> {
    let embedder = Hashing::new(dim);
    tracing::info!(
        embedder = embedder.name(),
        reason = %why,
        "using the feature-hashing embedder (it matches shared words, not meaning)"
    );
    Arc::new(embedder)
}

/// The OpenAI-compatible embedder the config names.
fn openai_embedder(
    config: &Config,
    url: &str,
    model: &str,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Embedder>, Error> {
    let api_key = match &config.openai_api_key_env {
        None => None,
        Some(var) => match env(var) {
            Some(key) if !key.is_empty() => Some(key),
            _ => {
                return Err(Error::Config(format!(
                    "environment variable {var} (named by openai_api_key_env) is not set or empty"
                )));
            }
        },
    };
    let embedder = OpenAi::new(url, model, api_key, config.dim)?;
    tracing::info!(
        endpoint = %embedder.endpoint(),
        model = %model,
        dim = embedder.dim(),
        "embedding with an OpenAI-compatible endpoint"
    );
    Ok(Arc::new(embedder))
}
