//! The anomaly detector: seed 004's network cortisol override, raised by the management node
//! itself. When it sees a Sybil-like burst of new peers, or a flood of listings from one peer,
//! it broadcasts weather (by default seed 004's level 0.9 for 5 minutes), so every edge stops
//! ingesting from peers below `trusted` until the burst is over.
//!
//! What it counts, over a sliding window (`[management.anomaly]`, defaults in brackets):
//!
//! - **New peers** [20 in 60 s]: PeerIds this node has never seen (not in its trust book, not
//!   connected or heard from since it started), first seen connecting to it or originating a
//!   gossip message. Reconnecting peers are not new, so ordinary churn never counts. Peers
//!   first seen during the warm-up after start [2 min] are learned without being counted, so a
//!   restarted management node does not take its swarm reconnecting for an attack.
//! - **Listings offered by one peer** [30 in 60 s]: crystal listings a peer signed that reached
//!   ingestion here and were accepted, or refused only because the peer was over its listing
//!   rate or weather was halting it. A well-behaved peer stays within the per-peer rate (10 per
//!   minute by default), so it can never reach 30; the listings a flooding peer sends past its
//!   rate are still counted. Seed 004 speaks of a burst "from a peer cluster"; this detector
//!   approximates the cluster by one peer, and a cluster of fresh identities shows up as a
//!   burst of new peers instead.
//!
//! On firing it raises weather, counts it in `druse_anomaly_weather_total{trigger}` and starts
//! both counts over. It then holds off while any weather is in force: the swarm is already
//! halted, and a burst that goes on through the weather raises it again once it ends.
//!
//! [`Detector`] is the IO-free state machine; [`Watch`] runs it on the node's activity.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use druse_node::ingest::Activity;
use druse_node::metrics::TriggerLabel;
use druse_protocol::net::PeerId;
use druse_protocol::now_ms;
use tokio::sync::broadcast::error::RecvError;

use crate::Management;
use crate::detector::lock;
pub use crate::detector::{Detector, Fired, Firing, Snapshot, Trigger, Watch};

/// How often the detector checks its counts when no event arrives.
const TICK: Duration = Duration::from_secs(1);

/// Starts the detector on `management`'s node if its config enables it; the node owns the task.
/// Starting it twice keeps the first.
pub fn spawn(management: &Arc<Management>) -> Option<Arc<Watch>> {
    management.anomaly_slot().get_or_init(|| start(management)).clone()
}

fn start(management: &Arc<Management>) -> Option<Arc<Watch>> {
    let node = management.node();
    for trigger in Trigger::ALL {
        let _ = node.metrics().anomaly_weather.get_or_create(&TriggerLabel { trigger: trigger.as_str() });
    }
    let config = management.config().anomaly.clone();
    if !config.enabled {
        tracing::info!("anomaly detector off (management.anomaly.enabled = false)");
        return None;
    }
    // Subscribe before reading who is known, so no peer falls between the two.
    let activity = node.activity();
    let watch = Arc::new(Watch { detector: Mutex::new(Detector::new(config, now_ms(), [])) });
    node.spawn_task("anomaly", run(Arc::clone(management), Arc::clone(&watch), activity));
    Some(watch)
}

async fn run(management: Arc<Management>, watch: Arc<Watch>, mut activity: tokio::sync::broadcast::Receiver<Activity>) {
    let node = management.node().clone();
    let known: Vec<PeerId> = node.peers().await.iter().filter_map(|p| p.peer_id.parse().ok()).collect();
    {
        let mut detector = lock(&watch.detector);
        for peer in known {
            detector.learn(peer);
        }
        let config = &detector.config;
        tracing::info!(
            window = %humantime::format_duration(config.window),
            new_peers = config.new_peers,
            listings_per_peer = config.listings_per_peer,
            warmup = %humantime::format_duration(config.warmup),
            known_peers = detector.known.len(),
            "anomaly detector watching"
        );
    }
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let check = tokio::select! {
            biased;
            _ = tick.tick() => true,
            event = activity.recv() => match event {
                Ok(event) => lock(&watch.detector).observe(&event, now_ms()),
                Err(RecvError::Lagged(missed)) => {
                    node.metrics().anomaly_events_dropped.inc_by(missed);
                    tracing::warn!(missed, "the anomaly detector fell behind and missed peer events");
                    false
                }
                Err(RecvError::Closed) => break,
            },
        };
        if !check {
            continue;
        }
        // Hold off while weather is in force: the swarm is already halted.
        let firing = if node.halted() { None } else { lock(&watch.detector).due(now_ms()) };
        if let Some(firing) = firing {
            raise(&management, &watch, firing).await;
        }
        // Counted once the decision is carried out, so a reader that sees it sees its weather.
        lock(&watch.detector).decisions += 1;
    }
}

async fn raise(management: &Management, watch: &Watch, firing: Firing) {
    let config = &management.config().anomaly;
    let reason = firing.reason();
    lock(&watch.detector).reset();
    match management.weather(config.level, config.duration, reason.clone()).await {
        Ok(id) => {
            let trigger = firing.trigger.as_str();
            management.node().metrics().anomaly_weather.get_or_create(&TriggerLabel { trigger }).inc();
            tracing::warn!(%id, trigger, level = config.level, %reason, "anomaly detector raised weather");
            lock(&watch.detector).last_fired = Some(Fired { at: now_ms(), trigger: firing.trigger, reason });
        }
        Err(error) => tracing::error!(%error, %reason, "the anomaly detector could not raise weather"),
    }
}
