//! The ingest figures: one node fed pre-signed listings directly, and one flooded over
//! gossipsub, against the raw single-core signature check.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use druse_node::Role;
use druse_node::ingest::Outcome;
use druse_protocol::body::{Body, CrystalListing, ExecutionStats, SemanticType};
use druse_protocol::net::PeerId;
use druse_protocol::now_ms;
use druse_protocol::{Keypair, topic};
use druse_tests::swarm::{Sniffer, TestNode, connect, mgmt_key, seal, wait_connected};
use ed25519_dalek::Signer;
use rand::Rng;
use rand::rngs::StdRng;

use crate::{Args, unlimited, verdict};

/// The key seed of the flooding peer (no node of the swarm uses it).
const FLOODER_SEED: u8 = 250;

/// A flooded node whose stored and indexed counts have not grown for this long is done.
const SETTLED: Duration = Duration::from_secs(3);

pub(crate) struct Ingest {
    pub(crate) count: usize,
    pub(crate) stored: usize,
    /// Decoded, verified, validated and stored.
    pub(crate) ingest_rate: f64,
    /// Also indexed in memory (embedded, written, searchable by vector and text).
    pub(crate) indexed_rate: f64,
    pub(crate) raw_rate: f64,
    pub(crate) flood: Flood,
}

impl Ingest {
    /// Prints the ingest table.
    pub(crate) fn print(&self, args: &Args) {
        println!();
        println!("| ingest on one node                         | value            | target      |");
        println!("|--------------------------------------------|------------------|-------------|");
        println!("| {:<42} | {:>10.0} sig/s | {:<11} |", "raw verify_strict, one core", self.raw_rate, "");
        println!(
            "| {:<42} | {:>10.0} msg/s | {:<11} |",
            format!("{} listings of 1 KiB, {} authors: stored", self.count, args.authors),
            self.ingest_rate,
            ""
        );
        println!("| {:<42} | {:>10.0} msg/s | {:<11} |", "  ... and indexed in memory", self.indexed_rate, "");
        let stored_ratio = self.ingest_rate / self.raw_rate;
        println!(
            "| {:<42} | {:>14.1} % | {:<11} |",
            "stored / raw verify",
            stored_ratio * 100.0,
            verdict(stored_ratio >= 0.7, ">= 70%")
        );
        let ratio = self.indexed_rate / self.raw_rate;
        println!(
            "| {:<42} | {:>14.1} % | {:<11} |",
            "stored and indexed / raw verify",
            ratio * 100.0,
            verdict(ratio >= 0.4, ">= 40%")
        );
        println!("| {:<42} | {:>16} | {:<11} |", "stored after ingest", format!("{}/{}", self.stored, self.count), "");
        let flood = &self.flood;
        println!(
            "| {:<42} | {:>10.0} msg/s | {:<11} |",
            "flooded over gossipsub by one peer: stored", flood.stored_rate, ""
        );
        println!("| {:<42} | {:>10.0} msg/s | {:<11} |", "  ... and indexed in memory", flood.indexed_rate, "");
        println!(
            "| {:<42} | {:>14.1} % | {:<11} |",
            "flood stored / raw verify",
            flood.stored_rate / self.raw_rate * 100.0,
            ""
        );
        println!(
            "| {:<42} | {:>14.1} % | {:<11} |",
            "flood stored and indexed / raw verify",
            flood.indexed_rate / self.raw_rate * 100.0,
            ""
        );
        println!(
            "| {:<42} | {:>16} | {:<11} |",
            "flood: stored / sent (the rest shed)",
            format!("{}/{}", flood.stored, self.count - flood.queue_full),
            ""
        );
        println!("| {:<42} | {:>16} | {:<11} |", "flood: events the node dropped", flood.dropped, "");
        println!("| {:<42} | {:>16} | {:<11} |", "flood: not sent, the flooder's queue full", flood.queue_full, "");
    }
}

/// One node flooded by a peer over gossipsub.
pub(crate) struct Flood {
    pub(crate) stored: usize,
    /// Stored per second, from the first send to the last listing stored.
    pub(crate) stored_rate: f64,
    /// Indexed in memory per second, from the first send to the last listing indexed.
    pub(crate) indexed_rate: f64,
    /// Gossip events the node's swarm task could not hand on (`druse_net_events_dropped_total`).
    pub(crate) dropped: f64,
    /// Listings the flooder could not send because gossipsub's queue to the node was full.
    pub(crate) queue_full: usize,
}

/// A listing with about 1 KiB of text; `n` makes it unique.
pub(crate) fn bench_listing(n: usize, rng: &mut StdRng) -> CrystalListing {
    const WORDS: [&str; 16] = [
        "parse", "validate", "retry", "stream", "buffer", "decode", "schema", "index", "merge", "cache", "token",
        "window", "batch", "queue", "route", "shard",
    ];
    let mut text = format!("Skill {n}: ");
    while text.len() < 1024 {
        text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        text.push(' ');
    }
    text.truncate(1024);
    CrystalListing {
        issued_at: now_ms(),
        name: format!("ingest-skill-{n}"),
        text,
        semantic_type: SemanticType::Skill,
        tags: vec!["bench".into(), "ingest".into()],
        category: Some("benchmark".into()),
        skill_id: format!("ingest-skill-{n}"),
        version: 1,
        previous_version: None,
        stats: ExecutionStats { executions: 10, successes: 8, avg_reward: 0.5 },
        asking_price: 5_000,
    }
}

/// Verifies raw signatures of the listings' size on one core while nothing else runs, then
/// feeds the pre-signed listings from many authors to one fresh node's ingest actor, as
/// gossip would, and waits until every one is also indexed in the node's memory.
pub(crate) async fn measure_ingest(args: &Args, rng: &mut StdRng) -> Result<Ingest> {
    let authors: Vec<(Keypair, PeerId)> = (0..args.authors)
        .map(|_| {
            let key = Keypair::from_seed(rng.random());
            let peer = key.peer_id();
            (key, peer)
        })
        .collect();
    let mut messages = Vec::with_capacity(args.listings);
    let mut raw = Vec::with_capacity(args.listings);
    for n in 0..args.listings {
        let (key, peer) = &authors[n % authors.len()];
        let body = Body::Crystal(bench_listing(n, rng));
        let bytes = seal(key, &body)?;
        let encoded = body.encode()?;
        // The same domain-separated message an envelope signs, signed by a dalek key of the
        // same kind, for the raw verify rate.
        let signing = ed25519_dalek::SigningKey::from_bytes(&rng.random());
        let message = [b"druse/v1/crystal\0".as_slice(), &encoded].concat();
        let signature = signing.sign(&message);
        raw.push((signing.verifying_key(), message, signature));
        messages.push((bytes, *peer));
    }
    let flood_messages: Vec<Vec<u8>> = messages.iter().map(|(bytes, _)| bytes.clone()).collect();
    println!(
        "signed {} listings ({} bytes each on the wire)",
        messages.len(),
        messages.first().map_or(0, |m| m.0.len())
    );

    // The raw rate first, before any node runs: nothing else competes for the cores.
    let (raw_elapsed, valid) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let valid =
            raw.iter().filter(|(key, message, signature)| key.verify_strict(message, signature).is_ok()).count();
        (started.elapsed(), valid)
    })
    .await?;
    ensure!(valid == args.listings, "only {valid} of {} raw signatures verified", args.listings);

    let node = TestNode::start("ingest", 1, Role::Edge, &[mgmt_key().public()], unlimited).await?;
    // Every listing is queued as gossip delivers it, without waiting for the one before: the
    // node's ingest actor takes them in batches, and its bounded inbox pushes back.
    let node_ref = node.node.clone();
    let started = Instant::now();
    let outcomes = tokio::spawn(async move {
        let mut outcomes = Vec::with_capacity(messages.len());
        for (bytes, peer) in messages {
            outcomes.push(node_ref.submit_bytes(bytes, peer, topic::CRYSTALS).await?);
        }
        anyhow::Ok(outcomes)
    })
    .await??;
    let mut refused = Vec::new();
    for outcome in outcomes {
        let outcome = outcome.await.context("the ingest actor stopped")?;
        if outcome != Outcome::Accepted {
            refused.push(outcome.label());
        }
    }
    let elapsed = started.elapsed();
    ensure!(refused.is_empty(), "{} listings were refused, first: {:?}", refused.len(), refused.first());
    let stored = node.store().skill_count()?;
    let indexed = || node.memory().len();
    druse_tests::eventually(Duration::from_secs(300), "every listing to be indexed in memory", async || {
        indexed() >= args.listings
    })
    .await?;
    let indexed_elapsed = started.elapsed();
    node.stop().await;
    let flood = measure_flood(flood_messages).await?;
    Ok(Ingest {
        count: args.listings,
        stored,
        ingest_rate: args.listings as f64 / elapsed.as_secs_f64(),
        indexed_rate: args.listings as f64 / indexed_elapsed.as_secs_f64(),
        raw_rate: args.listings as f64 / raw_elapsed.as_secs_f64(),
        flood,
    })
}

/// A bare peer connects to one fresh node and publishes every listing over gossipsub without
/// pacing: it pauses only when gossipsub's queue to the node is full (the listing it was
/// sending is then lost at the flooder, and counted). The node takes them as
/// it would from any peer; whatever its swarm task cannot hand on is shed and counted. Ends
/// once every listing is stored and indexed, or the counts stop growing for [`SETTLED`].
async fn measure_flood(messages: Vec<Vec<u8>>) -> Result<Flood> {
    let count = messages.len();
    let node = TestNode::start("flooded", 2, Role::Edge, &[mgmt_key().public()], unlimited).await?;
    let flooder = Sniffer::start(FLOODER_SEED)?;
    connect(&flooder.net, node.net()).await?;
    wait_connected(&flooder.net, &[node.peer_id()]).await?;
    let mut messages = messages.into_iter();
    let first = messages.next().context("no listings to flood")?;
    // The first one waits until the node has subscribed; the clock starts after it.
    flooder.publish(topic::CRYSTALS, first).await?;
    let started = Instant::now();
    let net = flooder.net.clone();
    let sender = tokio::spawn(async move {
        let mut queue_full = 0;
        for bytes in messages {
            match net.publish(topic::CRYSTALS, bytes).await {
                Ok(_) => {}
                // Gossipsub has already taken its id: sent again it would be a duplicate. It
                // is lost at the flooder, which pauses a moment for its queue to drain.
                Err(druse_protocol::net::Error::Publish(_)) => {
                    queue_full += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => return Err(anyhow::Error::from(e).context("flooding")),
            }
        }
        Ok(queue_full)
    });

    let (mut stored, mut indexed) = (0, 0);
    let (mut stored_at, mut indexed_at) = (Duration::ZERO, Duration::ZERO);
    let mut last_growth = Instant::now();
    while (stored < count || indexed < count) && last_growth.elapsed() < SETTLED {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = (node.store().skill_count()?, node.memory().len());
        if now.0 > stored {
            (stored, stored_at) = (now.0, started.elapsed());
            last_growth = Instant::now();
        }
        if now.1 > indexed {
            (indexed, indexed_at) = (now.1, started.elapsed());
            last_growth = Instant::now();
        }
    }
    let queue_full = sender.await??;
    let dropped = node.metric("druse_net_events_dropped_total", &[]);
    drop(flooder);
    node.stop().await;
    ensure!(stored > 0 && indexed > 0, "the flooded node stored {stored} and indexed {indexed} listings");
    Ok(Flood {
        stored,
        stored_rate: stored as f64 / stored_at.as_secs_f64(),
        indexed_rate: indexed as f64 / indexed_at.as_secs_f64(),
        dropped,
        queue_full,
    })
}
