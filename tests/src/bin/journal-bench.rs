//! `journal-bench`: how long a batch commit waits while another thread syncs the same store.
//!
//! A node keeps its gossip store and its memory in one fjall database, so one journal: the
//! ingest actor commits each batch of gossip with `PersistMode::Buffer` (written to the OS, not
//! synced), and gossip is forwarded only once its batch is committed; memory adds through the API
//! sync the journal (`PersistMode::SyncAll`) before they answer. This runs both at once on a
//! database in `--dir`: one thread inserts a 512-byte value and syncs, back to back, while the
//! main thread commits a 1 KiB batch every `--pause-us`, and it prints the commits' p50, p99,
//! p99.9 and max, and how many syncs ran. `--sync-beside false` measures the commits alone.
//!
//! `cargo run --release -p druse-tests --bin journal-bench -- --dir /var/tmp --secs 10`
//!
//! The database must be on a real disk: on tmpfs a sync costs nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use fjall::{Database, KeyspaceCreateOptions, PersistMode};

#[derive(Parser)]
struct Args {
    /// Where the database is made (a temporary folder inside it, removed at the end).
    #[arg(long, default_value = ".")]
    dir: std::path::PathBuf,
    /// How long commits are timed.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// The pause between two commits, in microseconds.
    #[arg(long, default_value_t = 500)]
    pause_us: u64,
    /// Whether a second thread syncs the journal meanwhile.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    sync_beside: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir_in(&args.dir).with_context(|| format!("a folder in {}", args.dir.display()))?;
    let db = Database::builder(dir.path()).open()?;
    let gossip = db.keyspace("gossip", KeyspaceCreateOptions::default)?;
    let memory = db.keyspace("memory", KeyspaceCreateOptions::default)?;
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = args.sync_beside.then(|| {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || -> Result<u64> {
            let mut syncs = 0u64;
            while !stop.load(Ordering::Relaxed) {
                memory.insert(syncs.to_be_bytes(), [7u8; 512])?;
                db.persist(PersistMode::SyncAll)?;
                syncs += 1;
            }
            Ok(syncs)
        })
    });
    let mut waits = Vec::new();
    let started = Instant::now();
    let mut key = 0u64;
    while started.elapsed() < Duration::from_secs(args.secs) {
        let at = Instant::now();
        let mut batch = db.batch().durability(Some(PersistMode::Buffer));
        batch.insert(&gossip, key.to_be_bytes(), [1u8; 1024]);
        batch.commit()?;
        waits.push(at.elapsed());
        key += 1;
        std::thread::sleep(Duration::from_micros(args.pause_us));
    }
    stop.store(true, Ordering::Relaxed);
    let syncs = match syncer {
        Some(thread) => thread.join().map_err(|_| anyhow::anyhow!("the syncing thread panicked"))??,
        None => 0,
    };
    ensure!(!waits.is_empty(), "no commit was timed: --secs must be at least 1");
    waits.sort_unstable();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    println!(
        "{} commits beside {syncs} syncs: p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        waits.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        at(1.0)
    );
    Ok(())
}
