//! A node's memory as the `/memory` page shows it: a fixed corpus of labelled crystals (people,
//! topics, every kind, several decay classes, corrections that supersede earlier values, and a
//! private namespace), stored through the node's API in batches.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The topics crystals are about, each with the words that make its cluster.
const TOPICS: [(&str, [&str; 6]); 6] = [
    ("sailing", ["harbour", "mast", "tide", "keel", "regatta", "jib"]),
    ("gardening", ["tomatoes", "compost", "seedlings", "trellis", "mulch", "basil"]),
    ("astronomy", ["telescope", "nebula", "Jupiter", "eclipse", "comet", "observatory"]),
    ("cooking", ["risotto", "saffron", "sourdough", "braise", "skillet", "umami"]),
    ("music", ["cello", "sonata", "rehearsal", "metronome", "chord", "choir"]),
    ("climbing", ["belay", "crimp", "boulder", "carabiner", "chalk", "overhang"]),
];

const PEOPLE: [&str; 5] = ["Ana", "Ben", "Cleo", "Dev", "Eli"];

const DECAY: [&str; 8] =
    ["never", "location", "employment", "long_term_goal", "active_project", "health", "emotional_state", "default"];

/// The word every private crystal carries, so a test can look for it.
/// Starts a real `druse-node` (no management keys) in `root`; returns it with its API token.
pub async fn start_node(root: &std::path::Path) -> Result<(crate::process::ProcNode, String)> {
    let bins = tokio::task::spawn_blocking(crate::process::binaries).await??;
    let trust_list = root.join("trust.list");
    std::fs::write(&trust_list, "")?;
    let data_dir = root.join("node");
    let node = crate::process::ProcNode::start("druse-node", &bins.node, &data_dir, &trust_list, &[]).await?;
    let token = std::fs::read_to_string(data_dir.join("api.token"))?.trim().to_owned();
    Ok((node, token))
}

pub const PRIVATE_WORD: &str = "zeppelin";

/// Public crystals and the corrections among them.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// `POST /v1/memories` bodies, in the order to store them.
    pub memories: Vec<Value>,
    /// How many of them correct an earlier one (same subject and attribute, new value).
    pub corrections: usize,
}

/// `count` public memories: observations (each about its own subject and attribute), turns of
/// conversations, exploration notes and summaries, in per-person namespaces and the episodic
/// one; every tenth memory corrects an observation stored before it.
pub fn corpus(count: usize) -> Corpus {
    let mut memories: Vec<Value> = Vec::with_capacity(count);
    let mut observations: Vec<(String, String, String, String)> = Vec::new();
    let mut corrections = 0;
    for i in 0..count {
        let person = PEOPLE[i % PEOPLE.len()];
        let (topic, words) = TOPICS[(i / PEOPLE.len() + i) % TOPICS.len()];
        let (a, b) = (words[i % 6], words[(i / 6 + 1 + i) % 6]);
        let namespace = if i % 7 == 6 { "episodic".to_owned() } else { format!("user:{}", person.to_lowercase()) };
        let decay = DECAY[i % DECAY.len()];
        if i % 10 == 9
            && let Some(index) = observations.iter().rposition(|o| o.0 == namespace)
        {
            // A new value for an earlier observation: the same subject and attribute.
            let (namespace, subject, attribute, text) = observations.remove(index);
            memories.push(json!({
                "text": format!("Actually, {}", text.replacen(" the ", " the new ", 1)),
                "namespace": namespace, "kind": "observation", "subject": subject, "attribute": attribute,
                "scope": "public", "decay_class": decay,
            }));
            corrections += 1;
            continue;
        }
        let mut memory = match i % 8 {
            0..=3 => {
                let text = format!("{person} keeps the {topic} notes about the {a} next to the {b} ({i})");
                let attribute = format!("{topic} {i}");
                observations.push((namespace.clone(), person.to_lowercase(), attribute.clone(), text.clone()));
                json!({ "text": text, "namespace": namespace, "kind": "observation",
                        "subject": person.to_lowercase(), "attribute": attribute })
            }
            4 | 5 => json!({
                "text": format!("{person}: we talked about {topic}, the {a} and the {b}, for a while ({i})"),
                "namespace": namespace, "kind": "interaction", "session": format!("{}-{}", person.to_lowercase(), i / 40),
                "turn_at": 1_740_000_000_000u64 + i as u64 * 60_000,
            }),
            6 => json!({
                "text": format!("Background on {person}: posts often about {topic}, {a} and {b} ({i})"),
                "namespace": namespace, "kind": "exploration_note",
            }),
            _ => json!({
                "text": format!("Summary: {person} and the agent share an interest in {topic} and {a} ({i})"),
                "namespace": namespace, "kind": "summary",
            }),
        };
        memory["scope"] = json!("public");
        memory["decay_class"] = json!(decay);
        memories.push(memory);
    }
    Corpus { memories, corrections }
}

/// `count` private memories (the default scope) in `user:pat`, each naming [`PRIVATE_WORD`].
pub fn private_memories(count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| {
            json!({
                "text": format!("Pat's {PRIVATE_WORD} diary, entry {i}: the airship hangar code changes weekly"),
                "namespace": "user:pat", "kind": "exploration_note",
            })
        })
        .collect()
}

/// Stores `memories` through `POST /v1/memories/batch`, in batches of up to `batch`, and
/// returns the ids stored.
pub async fn store(api: &str, token: &str, memories: &[Value], batch: usize) -> Result<Vec<u64>> {
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(300)).build()?;
    let mut ids = Vec::with_capacity(memories.len());
    for chunk in memories.chunks(batch.max(1)) {
        let response = http
            .post(format!("{api}/v1/memories/batch"))
            .bearer_auth(token)
            .json(&json!({ "memories": chunk }))
            .send()
            .await
            .context("POST /v1/memories/batch")?;
        let status = response.status();
        let body: Value = response.json().await.context("the batch's answer")?;
        if !status.is_success() {
            bail!("storing a batch answered {status}: {body}");
        }
        for added in body.as_array().context("the batch's answer is a list")? {
            ids.push(added["crystal"]["id"].as_u64().context("an added crystal's id")?);
        }
    }
    Ok(ids)
}
