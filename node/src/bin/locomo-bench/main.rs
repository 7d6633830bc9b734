//! Recall on a LoCoMo-format benchmark (Maharana et al., 2024): long multi-session
//! conversations whose questions name the turns that hold their evidence.
//!
//! `cargo run --release -p druse-node --bin locomo-bench -- <file.json> [--via api|engine]`
//!
//! Every turn is stored as a conversation memory (`namespace` = `user:<sample_id>`, `session`
//! = the session's name, `turn_at` = the session's date plus 30 s a turn, as ISO 8601,
//! `kind` = `interaction`, text `"Speaker: text"`), then every question (category 5, the
//! adversarial one, left out) is asked in its conversation's namespace with k = 10. A question
//! counts as found at k when any of its evidence turns is among the first k hits
//! (recall_any@k). The figures print overall, per category and per conversation, with add and
//! search latency. With `--sweep`, the questions are asked again under each setting, and the
//! leave-one-conversation-out figures follow: each conversation measured under the setting
//! that found the most in the others.
//!
//! `--via api` (the default) starts a real node on loopback in a temporary directory and goes
//! through its HTTP API, as a user would: one `POST /v1/memories` per turn (or
//! `POST /v1/memories/batch` with `--batch N`) and one `GET /v1/memories` per question. The
//! node picks its embedder as any node does: MiniLM when `DRUSE_MINILM_DIR` names the model,
//! hashing otherwise (run with `env -u DRUSE_MINILM_DIR` for hashing). `--via engine` drives
//! [`Memory`] directly through the same calls the API handlers make (`add`/`add_many`,
//! `search`), with `--embedder hashing|minilm`.
//!
//! `--repeat` asks every question a second time and reports that pass too: asking again must
//! not lower recall. To study misses, `LOCOMO_MISSES=1` prints every question whose evidence
//! is not in the top 10, with the turns found instead, and `LOCOMO_SHOW=<words>` (with `--via
//! engine`) prints the hits, with their vector and text ranks, of each question containing
//! those words.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use druse_memory::Memory;
use druse_memory::crystal::{CrystalId, Namespace};
use druse_memory::embed::{self, Embedder, Hashing, MiniLm};
use druse_memory::engine::{Config as EngineConfig, Fusion, NewMemory, Query, Tuning};
use druse_memory::governance::Caller;
use serde_json::{Value, json};

use data::{Question, Turn, load, new_memory};
use tally::{Pass, print_leave_one_out};

mod data;
mod tally;

#[global_allocator]
static ALLOCATOR: druse_node::Allocator = druse_node::Allocator;

#[derive(Debug, Parser)]
struct Cli {
    /// A LoCoMo-format JSON file (a list of conversations with `conversation` and `qa`).
    file: PathBuf,
    /// Through a real node's HTTP API, or the engine directly.
    #[arg(long, value_enum, default_value_t = Via::Api)]
    via: Via,
    /// The embedder, with `--via engine` (the API node picks its own).
    #[arg(long, value_enum, default_value_t = EmbedderArg::Hashing)]
    embedder: EmbedderArg,
    /// Memories per add request: 1 is one `POST /v1/memories` per turn.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Ask every question a second time and report that pass as well.
    #[arg(long)]
    repeat: bool,
    /// Append each shared photo's caption to its turn's text ("[shares a photo: ...]").
    #[arg(long)]
    captions: bool,
    /// Override recall's fusion (see `Tuning`): `score:VECTOR_SHARE` or `rank:TEXT_WEIGHT:K`.
    #[arg(long, value_parser = parse_fusion)]
    fusion: Option<Fusion>,
    /// Override recall's neighbour weight.
    #[arg(long)]
    neighbour_weight: Option<f64>,
    /// Override recall's speaker weight (0 turns the lift of a named speaker's turns off).
    #[arg(long)]
    speaker_weight: Option<f64>,
    /// Override recall's session weight (0 turns the lift from a session's best match off).
    #[arg(long)]
    session_weight: Option<f64>,
    /// Override recall's time weight (0 turns the lift and search of a named time off).
    #[arg(long)]
    time_weight: Option<f64>,
    /// Override how many turns on each side a turn's text document holds (0: its own text).
    #[arg(long)]
    window: Option<usize>,
    /// Override whether a turn's context vector embeds its day.
    #[arg(long)]
    day_in_vector: Option<bool>,
    /// Override whether turns are indexed with their context at all.
    #[arg(long)]
    context: Option<bool>,
    /// After the first pass, ask everything again under each of these query-time settings
    /// (`FUSION/NEIGHBOUR_WEIGHT[/session=W][/speaker=W][/time=W]`, comma separated, FUSION as for
    /// `--fusion`): a sweep over one stored set, followed by the leave-one-conversation-out
    /// figures over the first pass and these.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<String>,
    /// Instead of the run, time the embedder (`--embedder`) alone on the first N turns and
    /// questions: a turn with the turn before it in one call, and a question, so the add and
    /// search latencies can be split into embedding and the rest.
    #[arg(long)]
    profile_embedder: Option<usize>,
    /// Only the first N questions of each conversation (a quick run).
    #[arg(long)]
    max_questions: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Via {
    Api,
    Engine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EmbedderArg {
    Hashing,
    Minilm,
}

/// Where memories go and questions are asked.
enum Target {
    Api { base: String, token: String, http: reqwest::Client, running: druse_node::daemon::Running },
    Engine { memory: Arc<Memory> },
}

impl Target {
    /// Stores `turns`, returning each one's crystal id.
    async fn add(&self, turns: &[Turn]) -> anyhow::Result<Vec<CrystalId>> {
        let ids: Vec<Value> = match self {
            Target::Api { base, token, http, .. } => {
                let (path, body) = if turns.len() == 1 {
                    ("/v1/memories", new_memory(&turns[0]))
                } else {
                    ("/v1/memories/batch", json!({ "memories": turns.iter().map(new_memory).collect::<Vec<_>>() }))
                };
                let response = http.post(format!("{base}{path}")).bearer_auth(token).json(&body).send().await?;
                let status = response.status();
                let body: Value = response.json().await?;
                if !status.is_success() {
                    bail!("add answered {status}: {body}");
                }
                if turns.len() == 1 { vec![body] } else { body.as_array().cloned().unwrap_or_default() }
            }
            Target::Engine { memory, .. } => {
                let news = turns
                    .iter()
                    .map(|t| serde_json::from_value::<NewMemory>(new_memory(t)))
                    .collect::<Result<Vec<_>, _>>()?;
                let memory = Arc::clone(memory);
                let added = tokio::task::spawn_blocking(move || memory.add_many(news, "api", now())).await??;
                added.into_iter().map(|a| serde_json::to_value(a).unwrap_or(Value::Null)).collect()
            }
        };
        ids.iter().map(|added| added["crystal"]["id"].as_u64().context("an add answer without a crystal id")).collect()
    }

    /// The ids of the first `k` hits for `question`.
    async fn search(&self, question: &Question, k: usize) -> anyhow::Result<Vec<CrystalId>> {
        match self {
            Target::Api { base, token, http, .. } => {
                let response = http
                    .get(format!("{base}/v1/memories"))
                    .query(&[("q", question.text.as_str()), ("namespace", &question.namespace), ("k", &k.to_string())])
                    .bearer_auth(token)
                    .send()
                    .await?;
                let status = response.status();
                let body: Value = response.json().await?;
                if !status.is_success() {
                    bail!("search answered {status}: {body}");
                }
                Ok(body.as_array().into_iter().flatten().filter_map(|h| h["crystal"]["id"].as_u64()).collect())
            }
            Target::Engine { memory, .. } => {
                let namespace = Namespace::try_from(question.namespace.clone()).map_err(anyhow::Error::msg)?;
                let query = Query { namespace: Some(namespace), ..Query::new(question.text.clone(), k) };
                let memory = Arc::clone(memory);
                let hits =
                    tokio::task::spawn_blocking(move || memory.search(&query, Caller::LocalAgent, now())).await??;
                if std::env::var("LOCOMO_SHOW").is_ok_and(|s| question.text.contains(&s)) {
                    for h in &hits {
                        println!(
                            "  {:.4} v{:?} t{:?} {}",
                            h.score,
                            h.vector_rank,
                            h.text_rank,
                            h.crystal.text.chars().take(90).collect::<String>()
                        );
                    }
                }
                Ok(hits.into_iter().map(|h| h.crystal.id).collect())
            }
        }
    }

    async fn stop(self) {
        if let Target::Api { running, .. } = self {
            running.stop().await;
        }
    }
}

/// A fresh directory under the system's temporary folder, removed when the run ends.
fn scratch_dir() -> anyhow::Result<PathBuf> {
    let dir = scratch_dir_path();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn now() -> u64 {
    druse_protocol::now_ms()
}

async fn start(cli: &Cli) -> anyhow::Result<(Target, String)> {
    let dir = scratch_dir()?;
    let dir = dir.as_path();
    match cli.via {
        Via::Api => {
            let mut config = druse_node::config::Config::default();
            config.store.data_dir = dir.to_owned();
            config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".parse()?];
            config.p2p.mdns = false;
            config.api.listen = "127.0.0.1:0".parse()?;
            config.metrics.listen = "127.0.0.1:0".parse()?;
            config.api.max_body_bytes = config.api.max_body_bytes.max(8 * 1024 * 1024);
            let running = druse_node::daemon::start(config, druse_node::Role::Edge, |_| axum::Router::new()).await?;
            let embedder = running.node.memory().embedder_name().to_owned();
            let base = format!("http://{}", running.api_addr);
            let token = running.node.token().to_owned();
            Ok((Target::Api { base, token, http: reqwest::Client::new(), running }, embedder))
        }
        Via::Engine => {
            let embedder = bench_embedder(cli)?;
            let name = embedder.name().to_owned();
            let db = druse_node::store::open_database(&dir.join("db"), 64 << 20)?;
            let memory = Memory::open(&db, &dir.join("index"), EngineConfig::default(), embedder, now())?;
            Ok((Target::Engine { memory: Arc::new(memory) }, name))
        }
    }
}

fn percentiles(samples: &[Duration]) -> String {
    if samples.is_empty() {
        return "n/a".into();
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0;
    format!("p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  (n = {})", at(0.5), at(0.95), at(0.99), sorted.len())
}

async fn ask(target: &Target, questions: &[Question], ids: &HashMap<String, CrystalId>) -> anyhow::Result<Pass> {
    let mut pass = Pass::default();
    let misses = std::env::var_os("LOCOMO_MISSES").is_some();
    let names: HashMap<CrystalId, &str> = match misses {
        true => ids.iter().map(|(name, id)| (*id, name.as_str())).collect(),
        false => HashMap::new(),
    };
    for question in questions {
        let evidence: Vec<CrystalId> = question.evidence.iter().filter_map(|e| ids.get(e).copied()).collect();
        let started = Instant::now();
        let hits = target.search(question, 10).await?;
        pass.latency.push(started.elapsed());
        pass.record(&question.namespace, question.category, &hits, &evidence);
        if misses && !hits.iter().any(|h| evidence.contains(h)) {
            let found: Vec<&str> = hits.iter().map(|h| names.get(h).copied().unwrap_or("?")).collect();
            println!("MISS [{}] {} <- {:?}; found {found:?}", question.category, question.text, question.evidence);
        }
    }
    Ok(pass)
}

fn main() -> anyhow::Result<()> {
    druse_node::cli::block_on(run(Cli::parse()))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if cli.batch == 0 || cli.batch > druse_node::api::MAX_MEMORY_BATCH {
        bail!("--batch must be 1 to {}", druse_node::api::MAX_MEMORY_BATCH);
    }
    let (turns, mut questions) = load(&cli.file, cli.captions)?;
    if let Some(max) = cli.max_questions {
        let mut asked: HashMap<String, usize> = HashMap::new();
        questions.retain(|q| {
            let n = asked.entry(q.namespace.clone()).or_default();
            *n += 1;
            *n <= max
        });
    }
    if let Some(n) = cli.profile_embedder {
        return profile_embedder(&cli, &turns, &questions, n);
    }
    let (target, embedder) = start(&cli).await?;
    let memory = match &target {
        Target::Api { running, .. } => Arc::clone(running.node.memory().engine()),
        Target::Engine { memory } => Arc::clone(memory),
    };
    let mut tuning = memory.tuning();
    tuning.fusion = cli.fusion.unwrap_or(tuning.fusion);
    tuning.neighbour_weight = cli.neighbour_weight.unwrap_or(tuning.neighbour_weight);
    tuning.speaker_weight = cli.speaker_weight.unwrap_or(tuning.speaker_weight);
    tuning.session_weight = cli.session_weight.unwrap_or(tuning.session_weight);
    tuning.time_weight = cli.time_weight.unwrap_or(tuning.time_weight);
    tuning.window_turns = cli.window.unwrap_or(tuning.window_turns);
    tuning.day_in_context_vector = cli.day_in_vector.unwrap_or(tuning.day_in_context_vector);
    memory.set_tuning(tuning);
    if let Some(context) = cli.context {
        memory.set_context_indexing(context);
    }
    println!("{tuning:?}, context indexing {}", memory.context_indexing());
    println!(
        "{}: {} turns, {} questions (category 5 left out); via {:?}, embedder {embedder}, batch {}",
        cli.file.display(),
        turns.len(),
        questions.len(),
        cli.via,
        cli.batch
    );
    let mut ids = HashMap::with_capacity(turns.len());
    let mut add_latency = Vec::new();
    let started = Instant::now();
    for chunk in turns.chunks(cli.batch) {
        let began = Instant::now();
        let stored = target.add(chunk).await?;
        add_latency.push(began.elapsed());
        for (turn, id) in chunk.iter().zip(stored) {
            ids.insert(turn.dia_id.clone(), id);
        }
    }
    let add_total = started.elapsed();
    let unresolved = questions.iter().filter(|q| !q.evidence.iter().any(|e| ids.contains_key(e))).count();
    println!(
        "added in {:.1} s ({:.0} turns/s); add request latency {}",
        add_total.as_secs_f64(),
        turns.len() as f64 / add_total.as_secs_f64().max(1e-9),
        percentiles(&add_latency)
    );
    if unresolved > 0 {
        println!("{unresolved} questions name no stored evidence turn; they count as misses");
    }
    memory.wait_indexed(Duration::from_secs(600));
    if let Some(path) = std::env::var_os("LOCOMO_DUMP") {
        dump(&cli, &memory, &turns, &questions, &ids, Path::new(&path))?;
    }
    let first = ask(&target, &questions, &ids).await?;
    first.print("first pass");
    if cli.repeat {
        ask(&target, &questions, &ids).await?.print("asked again");
    }
    let defaults = memory.tuning();
    let mut settings = vec![("the defaults (first pass)".to_owned(), first)];
    for setting in &cli.sweep {
        let tuning = parse_setting(setting, defaults)?;
        memory.set_tuning(tuning);
        let pass = ask(&target, &questions, &ids).await?;
        pass.print(setting);
        settings.push((setting.clone(), pass));
    }
    memory.set_tuning(defaults);
    print_leave_one_out(&settings);
    target.stop().await;
    let _ = std::fs::remove_dir_all(scratch_dir_path());
    Ok(())
}

/// Times the embedder on its own, as an add and a search call it: each of the first `n` turns
/// alone (an add embeds only its text; its context vector is made from stored vectors), and
/// each of the first `n` questions.
fn profile_embedder(cli: &Cli, turns: &[Turn], questions: &[Question], n: usize) -> anyhow::Result<()> {
    let embedder = bench_embedder(cli)?;
    let time = |texts: Vec<&str>| -> anyhow::Result<Vec<Duration>> {
        let mut samples = Vec::with_capacity(texts.len());
        for text in texts {
            let started = Instant::now();
            embedder.embed(&[text])?;
            samples.push(started.elapsed());
        }
        Ok(samples)
    };
    let turn = time(turns.iter().take(n).map(|t| t.text.as_str()).collect())?;
    let question = time(questions.iter().take(n).map(|q| q.text.as_str()).collect())?;
    println!("embedder {}: a turn {}", embedder.name(), percentiles(&turn));
    println!("embedder {}: a question {}", embedder.name(), percentiles(&question));
    Ok(())
}

/// The embedder `--embedder` names, loaded on its own.
fn bench_embedder(cli: &Cli) -> anyhow::Result<Arc<dyn Embedder>> {
    Ok(match cli.embedder {
        EmbedderArg::Hashing => Arc::new(Hashing::new(embed::DEFAULT_HASHING_DIM)),
        EmbedderArg::Minilm => {
            let folder = std::env::var(embed::MINILM_DIR_ENV)
                .with_context(|| format!("set {} to the MiniLM folder", embed::MINILM_DIR_ENV))?;
            Arc::new(MiniLm::load(Path::new(&folder))?)
        }
    })
}

/// Writes what recall's two halves see, for studying fusion offline: each turn with its
/// embedding and its context embedding (the turn before it in its session), and each question
/// with its embedding, its evidence and its BM25 candidates (JSON lines).
fn dump(
    cli: &Cli,
    memory: &Memory,
    turns: &[Turn],
    questions: &[Question],
    ids: &HashMap<String, CrystalId>,
    path: &Path,
) -> anyhow::Result<()> {
    use std::io::Write;
    let embedder = bench_embedder(cli)?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut previous: Option<&Turn> = None;
    for chunk in turns.chunks(64) {
        let mut texts = Vec::new();
        for turn in chunk {
            let before = previous.filter(|p| p.session == turn.session && p.namespace == turn.namespace);
            texts.push(turn.text.clone());
            texts.push(match before {
                Some(p) => format!("{}\n{}", turn.text, p.text),
                None => turn.text.clone(),
            });
            previous = Some(turn);
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = embedder.embed(&refs)?;
        for (i, turn) in chunk.iter().enumerate() {
            let line = json!({"turn": ids.get(&turn.dia_id), "dia": turn.dia_id, "ns": turn.namespace,
                "session": turn.session, "text": turn.text, "vec": vectors[2 * i], "ctx": vectors[2 * i + 1]});
            writeln!(out, "{line}")?;
        }
    }
    for question in questions {
        let namespace = Namespace::try_from(question.namespace.clone()).map_err(anyhow::Error::msg)?;
        let query = Query { namespace: Some(namespace), ..Query::new(question.text.clone(), 10) };
        let text = memory.text_hits(&query, 200)?;
        let vector = embedder.embed(&[question.text.as_str()])?;
        let evidence: Vec<CrystalId> = question.evidence.iter().filter_map(|e| ids.get(e).copied()).collect();
        let line = json!({"q": question.text, "ns": question.namespace, "cat": question.category,
            "evidence": evidence, "bm25": text, "vec": vector.first()});
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// A `--sweep` setting, `FUSION/NEIGHBOUR_WEIGHT` then any of `/session=W`, `/speaker=W`,
/// `/time=W`, over `base`.
fn parse_setting(setting: &str, base: Tuning) -> anyhow::Result<Tuning> {
    let mut parts = setting.split('/');
    let (Some(fusion), Some(neighbour)) = (parts.next(), parts.next()) else {
        bail!("--sweep takes FUSION/NEIGHBOUR_WEIGHT[/KEY=VALUE...], not {setting:?}");
    };
    let mut tuning = Tuning {
        fusion: parse_fusion(fusion).map_err(anyhow::Error::msg)?,
        neighbour_weight: neighbour.parse().with_context(|| format!("neighbour weight in {setting:?}"))?,
        ..base
    };
    for part in parts {
        let (key, value) = part.split_once('=').with_context(|| format!("{part:?} in {setting:?} is not KEY=VALUE"))?;
        let value: f64 = value.parse().with_context(|| format!("{part:?} in {setting:?}"))?;
        match key {
            "session" => tuning.session_weight = value,
            "speaker" => tuning.speaker_weight = value,
            "time" => tuning.time_weight = value,
            _ => bail!("{key:?} in {setting:?}: the keys are session, speaker, time"),
        }
    }
    Ok(tuning)
}

/// `score:VECTOR_SHARE` or `rank:TEXT_WEIGHT:K`.
fn parse_fusion(text: &str) -> Result<Fusion, String> {
    let numbers = |rest: &str| -> Result<Vec<f64>, String> {
        rest.split(':').map(|n| n.parse::<f64>().map_err(|e| format!("{n:?}: {e}"))).collect()
    };
    match text.split_once(':') {
        Some(("score", rest)) => match numbers(rest)?[..] {
            [vector_share] if (0.0..=1.0).contains(&vector_share) => Ok(Fusion::Score { vector_share }),
            _ => Err(format!("score fusion takes one share in [0, 1], not {rest:?}")),
        },
        Some(("rank", rest)) => match numbers(rest)?[..] {
            [text_weight, k] => Ok(Fusion::Rank { text_weight, k }),
            _ => Err(format!("rank fusion takes TEXT_WEIGHT:K, not {rest:?}")),
        },
        _ => Err(format!("a fusion is score:SHARE or rank:TEXT_WEIGHT:K, not {text:?}")),
    }
}

fn scratch_dir_path() -> PathBuf {
    std::env::temp_dir().join(format!("druse-locomo-bench-{}", std::process::id()))
}
