//! The ingest actor: the one owner of the [`Ingestor`] and of the store's ingestion writes.
//!
//! Follow a gossip message from the swarm to the disk here:
//!
//! 1. The network actor hands the node an [`Event::Message`]; the node's event task puts it in
//!    this actor's bounded inbox as [`Command::Gossip`] (a full inbox waits: backpressure reaches
//!    the network actor's event queue, which drops and counts what does not fit).
//! 2. A verify thread takes the inbox in order, up to [`BATCH`] commands at a time, and opens
//!    each peer's envelope: size, strict decode and the Ed25519 signature, the costly part that
//!    needs no state, then decodes its body and scans a listing for secrets ([`Prepared`]: the
//!    actor is one thread, so what needs no state is done here). The envelopes of a batch are
//!    opened in parallel, one worker per core, and handed on in inbox order, with their results,
//!    through a second bounded queue: signatures are checked while the actor applies the
//!    messages before. The next batch is taken and opening while one is handed on, so the
//!    workers do not wait for the hand-over.
//! 3. The actor runs on its own OS thread, so the store never runs on the async executor. It takes
//!    whatever waits, up to [`BATCH`] commands, and runs each message through the rest of
//!    validation, the trust and weather gate, and applying it ([`Ingestor::ingest_opened`]).
//!    Every write goes to the ingestor's pending writes, where later messages of the batch
//!    read it.
//! 4. [`Actor::finish`] commits the batch's writes in one batch of the store: each message's
//!    writes land whole or not at all. Only then is the memory worker handed its work and the
//!    read snapshot refreshed, and then verdicts are sent to gossipsub (fire and forget: nobody
//!    waits for them), replies answered and metrics counted, so a caller told that its message
//!    is stored reads it. A failed commit turns every accepted message of the batch into
//!    `store_failed`.
//!
//! Readers never go through the actor: the trust book is behind a read-write lock the actor
//! takes only to change a record, and the weather, the management seqs and the trust list are
//! published as a [`Snapshot`] after every batch that changed them.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use druse_protocol::net::{self, MessageId, PeerId};
use druse_protocol::validate::{Reason, SignerKeys};
use druse_protocol::{ContentId, Envelope, Kind, PublicKey};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::{Activity, Effect, Gossiped, Ingestor, Outcome, Prepared, count, count_synced};
use crate::market::{self, Totals};
use crate::metrics::Metrics;
use crate::peers::Book;
use crate::store;
use crate::weather;
use druse_protocol::now_ms;

/// Commands the actor takes in one batch, at most: one commit and one snapshot for all.
pub const BATCH: usize = 256;

/// Commands that may wait in the inbox, and again between the verify thread and the actor.
pub const INBOX: usize = 1024;

/// Signer keys each verify worker keeps decoded per share of a batch (the protocol crate keeps
/// recently decoded keys per thread too).
const SIGNER_KEYS: usize = 64;

/// What the node asks the actor to do.
#[derive(Debug)]
pub enum Command {
    /// A gossip message; its verdict goes back to gossipsub and nobody waits for it.
    Gossip { id: MessageId, propagation_source: PeerId, source: Option<PeerId>, topic: String, data: Vec<u8> },
    /// A message run as if it arrived over gossip from `source` (tests and benchmarks).
    Message { bytes: Vec<u8>, source: PeerId, topic: String, reply: oneshot::Sender<Outcome> },
    /// Signed messages a peer relayed by anti-entropy, in order.
    Synced { envelopes: Vec<Vec<u8>>, reply: oneshot::Sender<Vec<(Option<Kind>, Outcome)>> },
    /// A message this node signed, for `topic`; gossiped by the caller once accepted.
    Local { bytes: Vec<u8>, topic: &'static str, reply: oneshot::Sender<Outcome> },
    /// This node pays for an adoption: the debit, the day's budgeted spending and the signed
    /// report are committed together before the report is published, unless the ledger cannot
    /// pay `entry.amount` out of `starting` credits or it would pass `budget`. An adoption of
    /// the same skill paid before is answered with what was paid then, and nothing is debited
    /// again.
    Spend {
        entry: market::Entry,
        starting: u64,
        budget: Option<market::DayBudget>,
        adoption: market::PaidAdoption,
        reply: oneshot::Sender<Result<Spent, store::Error>>,
    },
    /// The maintenance tick.
    Tick { connected: Vec<PeerId>, reply: oneshot::Sender<Tick> },
    /// Commit what waits and stop.
    Stop { reply: oneshot::Sender<()> },
}

/// What a [`Command::Spend`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spent {
    /// Debited (now or before); the ledger's totals, the adoption paid for, and what the
    /// budget's day has spent with it.
    Debited(Totals, market::PaidAdoption, u64),
    /// Not enough credits: the balance, and nothing was written.
    Short(i128),
    /// Over the day's budget: what the day has spent already, and nothing was written.
    OverBudget(u64),
}

/// What the maintenance tick found.
#[derive(Debug, Default)]
pub struct Tick {
    /// The gossipsub application score of each connected peer.
    pub scores: Vec<(PeerId, f64)>,
    /// Skills whose market evidence changed since the last tick.
    pub repriced: Vec<ContentId>,
}

/// What readers see of the actor's state, refreshed after every batch that changed it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub weather: weather::WeatherState,
    /// The highest seq accepted from each management key.
    pub seqs: Vec<(PublicKey, u64)>,
    /// The management keys in force.
    pub management_keys: Vec<PublicKey>,
    /// Skills the store holds.
    pub skills: usize,
}

/// The node's side of the actor.
#[derive(Debug, Clone)]
pub struct Handle {
    inbox: mpsc::Sender<Command>,
    snapshot: watch::Receiver<Arc<Snapshot>>,
    book: Arc<RwLock<Book>>,
}

/// Why the actor could not answer.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the ingest actor has stopped")]
pub struct Stopped;

impl Handle {
    /// Queues a command, waiting for room in the inbox.
    pub async fn send(&self, command: Command) -> Result<(), Stopped> {
        self.inbox.send(command).await.map_err(|_| Stopped)
    }

    /// Queues a command and waits for its answer.
    pub async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Stopped> {
        let (reply, answer) = oneshot::channel();
        self.send(make(reply)).await?;
        answer.await.map_err(|_| Stopped)
    }

    /// Queues a command from a thread outside the runtime, and waits for its answer there.
    pub fn ask_blocking<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Stopped> {
        let (reply, answer) = oneshot::channel();
        self.inbox.blocking_send(make(reply)).map_err(|_| Stopped)?;
        answer.blocking_recv().map_err(|_| Stopped)
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }

    /// Reads the trust book.
    pub fn book<T>(&self, read: impl FnOnce(&Book) -> T) -> T {
        read(&self.book.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// What the actor needs besides the ingestor.
#[derive(Debug)]
pub struct Outlets {
    pub net: net::Handle,
    pub metrics: Arc<Metrics>,
    /// Work for the memory worker; a full queue drops it and sets `owed`.
    pub effects: mpsc::Sender<Effect>,
    /// Set when work for the memory worker was dropped or failed: its sweep makes up for it.
    pub owed: Arc<std::sync::atomic::AtomicBool>,
    pub activity: broadcast::Sender<Activity>,
}

/// The actor's two threads.
#[derive(Debug)]
pub struct Threads {
    verify: std::thread::JoinHandle<()>,
    actor: std::thread::JoinHandle<()>,
}

impl Threads {
    /// Waits for both threads to end; false if one panicked.
    pub fn join(self) -> bool {
        let verified = self.verify.join().is_ok();
        self.actor.join().is_ok() && verified
    }
}

/// Starts the verify thread and the actor. They stop when every [`Handle`] is dropped or on
/// [`Command::Stop`], committing what waits.
pub fn spawn(ingestor: Ingestor, outlets: Outlets) -> std::io::Result<(Handle, Threads)> {
    let (inbox, commands) = mpsc::channel(INBOX);
    let (verified, staged) = mpsc::channel(INBOX);
    let book = Arc::clone(&ingestor.book);
    let (publish, snapshot) = watch::channel(Arc::new(snapshot_of(&ingestor)));
    let actor = Actor { ingestor, outlets, staged, publish, waiting: Vec::with_capacity(BATCH), changed: false };
    let span = tracing::info_span!("ingest");
    let verify_span = span.clone();
    let verify = std::thread::Builder::new().name("druse-verify".into()).spawn(move || {
        let _entered = verify_span.enter();
        let cores = druse_memory::background::pool_threads();
        let workers = (cores > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(cores)
                    .thread_name(|i| format!("druse-verify-{i}"))
                    .build()
                    .inspect_err(
                        |error| tracing::warn!(%error, "no verify workers; envelopes are opened on one thread"),
                    )
                    .ok()
            })
            .flatten();
        verify_loop(commands, verified, workers);
    })?;
    let actor = std::thread::Builder::new().name("druse-ingest".into()).spawn(move || {
        let _entered = span.enter();
        actor.run();
    })?;
    Ok((Handle { inbox, snapshot, book }, Threads { verify, actor }))
}

/// What the verify thread found of a command's envelopes, in order: none for a command with
/// none to open (or one the actor opens itself: this node's own messages).
type Envelopes = Vec<Prepared>;

/// A command with its envelopes opened.
struct Staged {
    command: Command,
    opened: Envelopes,
}

/// Opens the envelopes peers sent, a batch at a time on `workers`, and hands each command on
/// in inbox order. The next batch is opening while the last one is handed on, so the workers
/// never wait for the hand-over, and the end of one batch overlaps the start of the next.
fn verify_loop(
    mut commands: mpsc::Receiver<Command>,
    verified: mpsc::Sender<Staged>,
    workers: Option<rayon::ThreadPool>,
) {
    super::Content::compile();
    let mut keys = SignerKeys::new(SIGNER_KEYS);
    let mut opening: Option<Opening> = None;
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        if opening.is_some() {
            // A batch is opening: take what already waits, and wait for nothing.
            while batch.len() < BATCH {
                let Ok(command) = commands.try_recv() else { break };
                batch.push(command);
            }
        } else if commands.blocking_recv_many(&mut batch, BATCH) == 0 {
            return;
        }
        let next = match &workers {
            _ if batch.is_empty() => None,
            Some(workers) if batch.len() > 1 => Some(Opening::on(workers, batch)),
            _ => Some(Opening::here(batch, &mut keys)),
        };
        if let Some(previous) = opening.take()
            && !previous.hand_on(&verified)
        {
            return;
        }
        opening = next;
    }
}

/// A batch of commands whose envelopes are being opened, or are open.
enum Opening {
    /// Prepared on the verify thread.
    Open(Vec<Command>, Vec<Envelopes>),
    /// Opening on the workers: the batch and its envelopes come back here.
    Pending { commands: usize, done: std::sync::mpsc::Receiver<(Vec<Command>, Vec<Envelopes>)> },
}

/// Commands a verify worker takes at a time: small, so the workers finish a batch together.
const PIECE: usize = 4;

impl Opening {
    fn here(batch: Vec<Command>, keys: &mut SignerKeys) -> Self {
        let opened = batch.iter().map(|command| open_all(command, keys)).collect();
        Self::Open(batch, opened)
    }

    fn on(workers: &rayon::ThreadPool, batch: Vec<Command>) -> Self {
        use rayon::prelude::*;
        let (opened, done) = std::sync::mpsc::sync_channel(1);
        let commands = batch.len();
        workers.spawn(move || {
            // A panic here would abort the process: it fails only this batch instead.
            let open = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let open = |keys: &mut SignerKeys, command: &Command| open_all(command, keys);
                batch.par_iter().with_max_len(PIECE).map_init(|| SignerKeys::new(SIGNER_KEYS), open).collect()
            }));
            if let Ok(envelopes) = open {
                let _ = opened.send((batch, envelopes));
            }
        });
        Self::Pending { commands, done }
    }

    /// Hands each command on to the actor, in order, once it is open; false once the actor is
    /// gone or a command asked to stop.
    fn hand_on(self, verified: &mpsc::Sender<Staged>) -> bool {
        let (batch, opened) = match self {
            Self::Open(batch, opened) => (batch, opened),
            Self::Pending { commands, done } => match done.recv() {
                Ok(open) => open,
                Err(_) => {
                    // Its callers see the actor stop answering; the next batch goes on.
                    tracing::error!(commands, "a verify worker panicked; a batch of commands is dropped");
                    return true;
                }
            },
        };
        for (command, opened) in batch.into_iter().zip(opened) {
            let stop = matches!(command, Command::Stop { .. });
            if verified.blocking_send(Staged { command, opened }).is_err() || stop {
                return false;
            }
        }
        true
    }
}

/// Opens a command's envelopes: none for a command with none to open, or one the actor opens
/// itself (this node's own messages).
fn open_all(command: &Command, keys: &mut SignerKeys) -> Envelopes {
    match command {
        Command::Gossip { source: Some(_), data, .. } => vec![Prepared::new(data, keys)],
        Command::Message { bytes, .. } => vec![Prepared::new(bytes, keys)],
        Command::Synced { envelopes, .. } => envelopes.iter().map(|bytes| Prepared::new(bytes, keys)).collect(),
        _ => Vec::new(),
    }
}

fn snapshot_of(ingestor: &Ingestor) -> Snapshot {
    Snapshot {
        weather: ingestor.weather.clone(),
        seqs: ingestor.view.last_seqs().collect(),
        management_keys: ingestor.trust_list().iter().copied().collect(),
        skills: ingestor.skill_count(),
    }
}

/// An answer owed once the batch is committed.
enum Owed {
    Verdict {
        id: MessageId,
        propagation_source: PeerId,
        source: Option<PeerId>,
        topic: String,
        kind: Option<Kind>,
        outcome: Outcome,
        received: Instant,
    },
    Outcome(oneshot::Sender<Outcome>, Outcome, String, Option<Kind>),
    Local(oneshot::Sender<Outcome>, Outcome),
    Synced(oneshot::Sender<Vec<(Option<Kind>, Outcome)>>, Vec<(Option<Kind>, Outcome)>),
    Spent(oneshot::Sender<Result<Spent, store::Error>>, Result<Spent, store::Error>),
}

struct Actor {
    ingestor: Ingestor,
    outlets: Outlets,
    staged: mpsc::Receiver<Staged>,
    publish: watch::Sender<Arc<Snapshot>>,
    /// Answers owed for the batch being built.
    waiting: Vec<Owed>,
    /// Whether the batch changed what the snapshot shows.
    changed: bool,
}

/// Management kinds whose application reads whole tables (bounties match every skill, weather
/// replaces the kept weather envelope): they start from a committed store.
fn reads_tables(bytes: &[u8]) -> bool {
    matches!(Envelope::peek_kind(bytes), Some(Kind::Bounty | Kind::Weather))
}

impl Actor {
    fn run(mut self) {
        let mut batch = Vec::with_capacity(BATCH);
        while self.staged.blocking_recv_many(&mut batch, BATCH) > 0 {
            for staged in batch.drain(..) {
                if let Some(reply) = self.handle(staged) {
                    self.finish();
                    let _ = reply.send(());
                    return;
                }
            }
            self.finish();
        }
        // Every handle is gone: keep what the last batch and the peers' counters wrote.
        self.ingestor.persist_peers();
        self.finish();
    }

    /// Runs one command into the batch; `Some` when it asked the actor to stop.
    fn handle(&mut self, staged: Staged) -> Option<oneshot::Sender<()>> {
        let metrics = Arc::clone(&self.outlets.metrics);
        let Staged { command, opened } = staged;
        let mut opened = opened.into_iter();
        match command {
            Command::Gossip { id, propagation_source, source, topic, data } => {
                let received = Instant::now();
                if reads_tables(&data) {
                    self.finish();
                }
                let (kind, outcome) = match (source, opened.next()) {
                    (Some(source), Some(opened)) => {
                        let gossip =
                            Gossiped { source: &source, propagation_source: &propagation_source, topic: &topic };
                        self.ingestor.ingest_opened(opened, &data, gossip, now_ms(), &metrics)
                    }
                    // Bytes that name no signer (the net layer found no envelope author).
                    _ => (None, Outcome::Protocol(Reason::Malformed)),
                };
                self.note(kind, outcome);
                self.waiting.push(Owed::Verdict { id, propagation_source, source, topic, kind, outcome, received });
            }
            Command::Message { bytes, source, topic, reply } => {
                if reads_tables(&bytes) {
                    self.finish();
                }
                let gossip = Gossiped { source: &source, propagation_source: &source, topic: &topic };
                let (kind, outcome) = match opened.next() {
                    Some(opened) => self.ingestor.ingest_opened(opened, &bytes, gossip, now_ms(), &metrics),
                    None => self.ingestor.ingest(&bytes, &source, &source, &topic, now_ms(), &metrics),
                };
                self.note(kind, outcome);
                self.waiting.push(Owed::Outcome(reply, outcome, topic, kind));
            }
            Command::Synced { envelopes, reply } => {
                let mut outcomes = Vec::with_capacity(envelopes.len());
                for bytes in &envelopes {
                    if reads_tables(bytes) {
                        self.finish();
                    }
                    let (kind, outcome) = match opened.next() {
                        Some(opened) => self.ingestor.ingest_synced_opened(opened, bytes, now_ms(), &metrics),
                        None => self.ingestor.ingest_synced(bytes, now_ms(), &metrics),
                    };
                    self.note(kind, outcome);
                    outcomes.push((kind, outcome));
                }
                self.waiting.push(Owed::Synced(reply, outcomes));
            }
            Command::Local { bytes, topic, reply } => {
                if reads_tables(&bytes) {
                    self.finish();
                }
                let me = self.outlets.net.local_peer_id();
                let outcome = self.ingestor.admit_local(&bytes, &me, topic, now_ms(), &metrics);
                self.note(Envelope::peek_kind(&bytes), outcome);
                self.waiting.push(Owed::Local(reply, outcome));
            }
            Command::Spend { entry, starting, budget, adoption, reply } => {
                let result = self.ingestor.spend(&entry, starting, budget, adoption);
                self.waiting.push(Owed::Spent(reply, result));
            }
            Command::Tick { connected, reply } => {
                let now = now_ms();
                self.ingestor.persist_peers();
                self.ingestor.refresh_gauges(now, &metrics);
                self.ingestor.count_peers(connected.iter(), now, &metrics);
                let scores =
                    self.ingestor.book(|book| connected.iter().map(|p| (*p, book.application_score(p, now))).collect());
                let repriced = self.ingestor.take_repriced().into_iter().collect();
                self.changed = true;
                let _ = reply.send(Tick { scores, repriced });
            }
            Command::Stop { reply } => {
                self.ingestor.persist_peers();
                return Some(reply);
            }
        }
        None
    }

    /// Notes that an accepted message may have changed what the snapshot shows.
    fn note(&mut self, kind: Option<Kind>, outcome: Outcome) {
        if outcome == Outcome::Accepted && kind.is_some_and(|k| k.is_management() || k == Kind::Crystal) {
            self.changed = true;
        }
    }

    /// Commits the batch, then hands the memory worker its work, refreshes the snapshot and
    /// sends every answer it owes.
    fn finish(&mut self) {
        let committed = match self.ingestor.commit() {
            Ok(effects) => {
                self.dispatch(effects);
                true
            }
            Err(error) => {
                tracing::error!(%error, messages = self.waiting.len(), "committing a batch failed; none of it is stored");
                self.changed = true;
                false
            }
        };
        let stored =
            |outcome: Outcome| if committed || outcome != Outcome::Accepted { outcome } else { Outcome::StoreFailed };
        let metrics = &self.outlets.metrics;
        // Before any answer, so a caller that is told its weather or skill is stored reads it.
        if std::mem::take(&mut self.changed) {
            self.ingestor.refresh_weather_gauges(now_ms(), metrics);
            let _ = self.publish.send(Arc::new(snapshot_of(&self.ingestor)));
        }
        for owed in self.waiting.drain(..) {
            match owed {
                Owed::Verdict { id, propagation_source, source, topic, kind, outcome, received } => {
                    let outcome = stored(outcome);
                    count(metrics, &topic, kind, outcome);
                    metrics.ingest_seconds.observe(received.elapsed().as_secs_f64());
                    if let Some(source) = source {
                        // An error only means nobody is observing.
                        let _ = self.outlets.activity.send(Activity::Message { source, kind, outcome });
                    }
                    if let Err(error) = self.outlets.net.report_blocking(id, propagation_source, outcome.acceptance()) {
                        tracing::debug!(%error, "could not report a verdict");
                    }
                    tracing::debug!(?kind, %topic, outcome = outcome.label(), "ingested");
                }
                Owed::Outcome(reply, outcome, topic, kind) => {
                    let outcome = stored(outcome);
                    count(metrics, &topic, kind, outcome);
                    let _ = reply.send(outcome);
                }
                Owed::Local(reply, outcome) => {
                    let _ = reply.send(stored(outcome));
                }
                Owed::Synced(reply, outcomes) => {
                    let outcomes: Vec<_> = outcomes.into_iter().map(|(kind, o)| (kind, stored(o))).collect();
                    for (kind, outcome) in &outcomes {
                        count_synced(metrics, *kind, *outcome);
                    }
                    let _ = reply.send(outcomes);
                }
                Owed::Spent(reply, result) => {
                    let result = match (result, committed) {
                        (Ok(Spent::Debited(..)), false) => Err(store::Error::NotCommitted),
                        (result, _) => result,
                    };
                    let _ = reply.send(result);
                }
            }
        }
    }

    /// Hands committed work to the memory worker; what does not fit is owed to its sweep.
    fn dispatch(&self, effects: Vec<Effect>) {
        for effect in effects {
            if self.outlets.effects.try_send(effect).is_err() {
                self.outlets.owed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

impl Ingestor {
    /// Reads the trust book.
    fn book<T>(&self, read: impl FnOnce(&Book) -> T) -> T {
        read(&self.book.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}
