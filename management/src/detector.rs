//! The anomaly detector's state: [`Detector`], the IO-free state machine that counts new peers
//! and listings per peer over a sliding window and says when to fire, and [`Watch`], the handle
//! the management node keeps to read it. `anomaly.rs` runs it on the node's activity.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use druse_node::ingest::Activity;
use druse_node::ingest::Outcome;
use druse_protocol::net::PeerId;
use druse_protocol::now_ms;
use druse_protocol::validate::Reason;
use druse_protocol::{Kind, UnixMillis};
use serde::{Deserialize, Serialize};

use crate::config::Anomaly as Config;

/// PeerIds remembered as seen; past this the longest-known are forgotten (and would count as
/// new again, which only a burst far above any threshold can cause).
const KNOWN_PEERS: usize = 16_384;

/// Peers whose recent listings are tracked at once; past this the quietest is forgotten.
const TRACKED_LISTERS: usize = 4_096;

/// What made the detector raise weather.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A burst of new peers.
    NewPeers,
    /// A burst of listings from one peer.
    ListingBurst,
}

impl Trigger {
    /// Every trigger, for pre-creating metric series.
    pub const ALL: [Trigger; 2] = [Trigger::NewPeers, Trigger::ListingBurst];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::NewPeers => "new_peers",
            Trigger::ListingBurst => "listing_burst",
        }
    }
}

/// A threshold met: what, how many, and (for a listing burst) whose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    pub trigger: Trigger,
    pub count: usize,
    pub threshold: u32,
    pub window: Duration,
    pub peer: Option<PeerId>,
}

impl Firing {
    /// The weather's reason: what fired, with its figures.
    pub fn reason(&self) -> String {
        let window = humantime::format_duration(self.window);
        match (self.trigger, &self.peer) {
            (Trigger::ListingBurst, Some(peer)) => format!(
                "suspicious skill burst from peer cluster: peer {peer} offered {} listings within {window} \
                 (threshold {})",
                self.count, self.threshold
            ),
            _ => format!(
                "possible Sybil attack: {} new peers first seen within {window} (threshold {})",
                self.count, self.threshold
            ),
        }
    }
}

/// Whether a listing with this outcome was really offered by its signer: accepted, or refused
/// only for being over the rate or during weather (a duplicate or a forgery is not).
/// Whether a message's author is proven: gossip is anonymous, so the author is the signer the
/// envelope names, and a message refused before its signature was checked only claims one.
fn authored(outcome: Outcome) -> bool {
    !matches!(
        outcome,
        Outcome::Protocol(
            Reason::TooLarge
                | Reason::Malformed
                | Reason::UnsupportedVersion
                | Reason::UnknownKind
                | Reason::NonCanonical
                | Reason::BadSignature
        )
    )
}

fn offered(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Accepted | Outcome::Halted | Outcome::Protocol(Reason::RateLimited))
}

/// The detector's state: who it has seen, and the recent events in each window.
#[derive(Debug)]
pub struct Detector {
    pub(crate) config: Config,
    /// New peers are counted from this time on (start + warm-up).
    armed_at: UnixMillis,
    pub(crate) known: HashSet<PeerId>,
    /// `known` in the order it was learned, to forget the oldest.
    known_order: VecDeque<PeerId>,
    /// When each recent new peer was first seen (at most `new_peers` entries).
    new_peers: VecDeque<UnixMillis>,
    /// When each peer recently offered a listing (at most `listings_per_peer` per peer).
    listings: HashMap<PeerId, VecDeque<UnixMillis>>,
    /// The last weather raised on a firing.
    pub(crate) last_fired: Option<Fired>,
    /// Decisions carried out so far: each time the detector was asked whether to fire, by its
    /// tick or by an event it counted (held off by weather in force or not).
    pub(crate) decisions: u64,
}

impl Detector {
    /// A detector started at `now` that already knows `known` (the trust book and the
    /// connected peers).
    pub fn new(config: Config, now: UnixMillis, known: impl IntoIterator<Item = PeerId>) -> Self {
        let armed_at = now.saturating_add(millis(config.warmup));
        let mut detector = Self {
            config,
            armed_at,
            known: HashSet::new(),
            known_order: VecDeque::new(),
            new_peers: VecDeque::new(),
            listings: HashMap::new(),
            last_fired: None,
            decisions: 0,
        };
        for peer in known {
            detector.learn(peer);
        }
        detector
    }

    fn window_ms(&self) -> u64 {
        millis(self.config.window)
    }

    /// Remembers `peer`; true if it was not known.
    pub(crate) fn learn(&mut self, peer: PeerId) -> bool {
        if !self.known.insert(peer) {
            return false;
        }
        self.known_order.push_back(peer);
        while self.known_order.len() > KNOWN_PEERS {
            if let Some(oldest) = self.known_order.pop_front() {
                self.known.remove(&oldest);
            }
        }
        true
    }

    /// Records one activity seen at `now`; true if a threshold is met now.
    pub fn observe(&mut self, activity: &Activity, now: UnixMillis) -> bool {
        let (peer, listing) = match *activity {
            Activity::Connected(peer) => (peer, false),
            // A forgery names whoever it likes: no peer was seen.
            Activity::Message { outcome, .. } if !authored(outcome) => return false,
            Activity::Message { source, kind, outcome } => (source, kind == Some(Kind::Crystal) && offered(outcome)),
        };
        let mut met = false;
        if self.learn(peer) && now >= self.armed_at {
            push_capped(&mut self.new_peers, now, self.config.new_peers);
            met |= self.count_within(&self.new_peers, now) >= self.config.new_peers as usize;
        }
        if listing {
            if !self.listings.contains_key(&peer) && self.listings.len() >= TRACKED_LISTERS {
                self.make_room_for_a_lister(now);
            }
            push_capped(self.listings.entry(peer).or_default(), now, self.config.listings_per_peer);
            let offered = self.listings.get(&peer).map_or(0, |times| self.count_within(times, now));
            met |= offered >= self.config.listings_per_peer as usize;
        }
        met
    }

    fn count_within(&self, times: &VecDeque<UnixMillis>, now: UnixMillis) -> usize {
        let window = self.window_ms();
        times.iter().filter(|t| now.saturating_sub(**t) < window).count()
    }

    /// Forgets listers whose listings have all left the window and, if that is not enough, the
    /// quietest eighth at once, so a flood of identities costs little per listing.
    fn make_room_for_a_lister(&mut self, now: UnixMillis) {
        let window = self.window_ms();
        self.listings.retain(|_, times| times.back().is_some_and(|t| now.saturating_sub(*t) < window));
        if self.listings.len() < TRACKED_LISTERS {
            return;
        }
        let mut newest: Vec<(UnixMillis, PeerId)> =
            self.listings.iter().map(|(peer, times)| (times.back().copied().unwrap_or(0), *peer)).collect();
        let cut = TRACKED_LISTERS / 8;
        newest.select_nth_unstable_by_key(cut, |(at, _)| *at);
        for (_, peer) in &newest[..cut] {
            self.listings.remove(peer);
        }
    }

    /// Forgets what has left the window, and returns the firing due now, if any (new peers
    /// first, then the busiest lister).
    pub fn due(&mut self, now: UnixMillis) -> Option<Firing> {
        let window = self.window_ms();
        let expired = |t: &UnixMillis| now.saturating_sub(*t) >= window;
        while self.new_peers.front().is_some_and(expired) {
            self.new_peers.pop_front();
        }
        self.listings.retain(|_, times| {
            while times.front().is_some_and(expired) {
                times.pop_front();
            }
            !times.is_empty()
        });
        if self.new_peers.len() >= self.config.new_peers as usize {
            return Some(Firing {
                trigger: Trigger::NewPeers,
                count: self.new_peers.len(),
                threshold: self.config.new_peers,
                window: self.config.window,
                peer: None,
            });
        }
        let (peer, times) = self.listings.iter().max_by_key(|(_, times)| times.len())?;
        (times.len() >= self.config.listings_per_peer as usize).then_some(Firing {
            trigger: Trigger::ListingBurst,
            count: times.len(),
            threshold: self.config.listings_per_peer,
            window: self.config.window,
            peer: Some(*peer),
        })
    }

    /// Starts both counts over once weather is raised, so one burst raises it once.
    pub fn reset(&mut self) {
        self.new_peers.clear();
        self.listings.clear();
    }

    /// What the detector sees now, for the census.
    pub fn snapshot(&self, now: UnixMillis) -> Snapshot {
        let busiest = self
            .listings
            .iter()
            .map(|(peer, times)| (peer, self.count_within(times, now)))
            .max_by_key(|(_, n)| *n)
            .filter(|(_, n)| *n > 0);
        Snapshot {
            armed: now >= self.armed_at,
            window: self.config.window,
            new_peers: self.count_within(&self.new_peers, now),
            new_peers_threshold: self.config.new_peers,
            busiest_lister: busiest.map(|(peer, _)| peer.to_string()),
            busiest_lister_listings: busiest.map_or(0, |(_, n)| n),
            listings_threshold: self.config.listings_per_peer,
            known_peers: self.known.len(),
            level: self.config.level,
            duration: self.config.duration,
            last_fired: self.last_fired.clone(),
            decisions: self.decisions,
        }
    }
}

/// Appends `now`, keeping at most `cap` entries: only whether the count reaches the threshold
/// matters, and the newest entries are the ones still in the window.
fn push_capped(times: &mut VecDeque<UnixMillis>, now: UnixMillis, cap: u32) {
    times.push_back(now);
    while times.len() > cap.max(1) as usize {
        times.pop_front();
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The last weather the detector raised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fired {
    pub at: UnixMillis,
    pub trigger: Trigger,
    pub reason: String,
}

/// What the detector sees now: its counts against its thresholds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Past the warm-up: new peers count.
    pub armed: bool,
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// New peers first seen within the window (capped at the threshold).
    pub new_peers: usize,
    pub new_peers_threshold: u32,
    /// The peer that offered the most listings within the window.
    pub busiest_lister: Option<String>,
    /// How many (capped at the threshold).
    pub busiest_lister_listings: usize,
    pub listings_threshold: u32,
    /// PeerIds the detector remembers as seen.
    pub known_peers: usize,
    /// The weather it raises.
    pub level: f64,
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    pub last_fired: Option<Fired>,
    /// Decisions made so far (whether to fire); a test waits for one more instead of sleeping.
    pub decisions: u64,
}

/// A running detector: the state the census reads, shared with the task that feeds it.
#[derive(Debug)]
pub struct Watch {
    pub(crate) detector: Mutex<Detector>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep watching.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Watch {
    /// What the detector sees now.
    pub fn snapshot(&self) -> Snapshot {
        lock(&self.detector).snapshot(now_ms())
    }
}

#[cfg(test)]
mod tests {
    use druse_protocol::Keypair;

    use super::*;

    const T0: UnixMillis = 1_700_000_000_000;

    fn peer(n: u32) -> PeerId {
        let mut seed = [7u8; 32];
        seed[..4].copy_from_slice(&n.to_be_bytes());
        Keypair::from_seed(seed).peer_id()
    }

    fn config() -> Config {
        Config { warmup: Duration::ZERO, ..Config::default() }
    }

    fn listing(source: PeerId, outcome: Outcome) -> Activity {
        Activity::Message { source, kind: Some(Kind::Crystal), outcome }
    }

    #[test]
    fn defaults_are_the_seeds_weather_and_documented_thresholds() {
        let config = Config::default();
        assert!(config.enabled);
        assert_eq!((config.level, config.duration), (0.9, Duration::from_secs(300)));
        assert_eq!((config.new_peers, config.listings_per_peer, config.window), (20, 30, Duration::from_secs(60)));
    }

    #[test]
    fn twenty_new_peers_within_the_window_fire_and_nineteen_do_not() {
        let mut d = Detector::new(config(), T0, []);
        for n in 0..19 {
            assert!(!d.observe(&Activity::Connected(peer(n)), T0 + u64::from(n) * 1000));
        }
        assert_eq!(d.due(T0 + 19_000), None);
        assert!(d.observe(&Activity::Connected(peer(19)), T0 + 19_000));
        let firing = d.due(T0 + 19_000).unwrap();
        assert_eq!((firing.trigger, firing.count, firing.threshold), (Trigger::NewPeers, 20, 20));
        assert!(firing.reason().contains("20 new peers first seen within 1m (threshold 20)"), "{}", firing.reason());
    }

    #[test]
    fn forged_messages_naming_new_authors_are_no_new_peers() {
        let mut d = Detector::new(config(), T0, []);
        for n in 0..40 {
            let forged = Activity::Message {
                source: peer(n),
                kind: Some(Kind::Crystal),
                outcome: Outcome::Protocol(Reason::BadSignature),
            };
            assert!(!d.observe(&forged, T0 + u64::from(n)));
        }
        assert_eq!(d.due(T0 + 100), None, "claimed authors were counted as new peers");
        // The same peers, once they send what they signed, are new.
        for n in 0..20 {
            d.observe(&listing(peer(n), Outcome::Accepted), T0 + 200 + u64::from(n));
        }
        assert_eq!(d.due(T0 + 300).map(|f| f.trigger), Some(Trigger::NewPeers));
    }

    #[test]
    fn known_peers_reconnecting_are_never_new() {
        let known: Vec<PeerId> = (0..5).map(peer).collect();
        let mut d = Detector::new(config(), T0, known.clone());
        for round in 0..10u64 {
            for p in &known {
                assert!(!d.observe(&Activity::Connected(*p), T0 + round));
            }
        }
        // One peer seen for the first time, then seen again and again, is one new peer.
        for round in 0..30u64 {
            d.observe(&Activity::Connected(peer(99)), T0 + round);
        }
        assert_eq!(d.snapshot(T0 + 30).new_peers, 1);
        assert_eq!(d.due(T0 + 30), None);
    }

    #[test]
    fn new_peers_spread_wider_than_the_window_do_not_fire() {
        let mut d = Detector::new(config(), T0, []);
        // One new peer every 4 s: 15 per minute, below 20.
        for n in 0..100 {
            let now = T0 + u64::from(n) * 4_000;
            assert!(!d.observe(&Activity::Connected(peer(n)), now), "fired at peer {n}");
            assert_eq!(d.due(now), None);
        }
    }

    #[test]
    fn peers_first_seen_during_warmup_are_learned_not_counted() {
        let config = Config { warmup: Duration::from_secs(120), ..Config::default() };
        let mut d = Detector::new(config, T0, []);
        for n in 0..50 {
            assert!(!d.observe(&Activity::Connected(peer(n)), T0 + 1_000));
        }
        assert_eq!(d.due(T0 + 1_000), None);
        assert!(!d.snapshot(T0 + 1_000).armed);
        // After the warm-up the same peers are known, and fresh ones count.
        let after = T0 + 121_000;
        for n in 0..50 {
            assert!(!d.observe(&Activity::Connected(peer(n)), after));
        }
        for n in 50..70 {
            d.observe(&Activity::Connected(peer(n)), after);
        }
        assert_eq!(d.due(after).map(|f| f.trigger), Some(Trigger::NewPeers));
    }

    #[test]
    fn a_peer_offering_listings_past_its_rate_fires_naming_it() {
        let flooder = peer(1);
        let mut d = Detector::new(config(), T0, [flooder, peer(2)]);
        // Ten accepted, then refused by the rate limit: all offered.
        for i in 0..29u64 {
            let outcome = if i < 10 { Outcome::Accepted } else { Outcome::Protocol(Reason::RateLimited) };
            assert!(!d.observe(&listing(flooder, outcome), T0 + i * 100));
        }
        // Another peer's listings are its own count.
        for i in 0..5u64 {
            d.observe(&listing(peer(2), Outcome::Accepted), T0 + i);
        }
        assert_eq!(d.due(T0 + 3_000), None);
        assert!(d.observe(&listing(flooder, Outcome::Halted), T0 + 3_000));
        let firing = d.due(T0 + 3_000).unwrap();
        assert_eq!((firing.trigger, firing.count, firing.peer), (Trigger::ListingBurst, 30, Some(flooder)));
        let reason = firing.reason();
        assert!(reason.starts_with("suspicious skill burst from peer cluster"), "{reason}");
        assert!(reason.contains(&flooder.to_string()) && reason.contains("30 listings within 1m"), "{reason}");
    }

    #[test]
    fn duplicates_forgeries_and_other_kinds_are_not_listings_offered() {
        let p = peer(1);
        let mut d = Detector::new(config(), T0, [p]);
        for i in 0..100u64 {
            d.observe(&listing(p, Outcome::Protocol(Reason::Duplicate)), T0 + i);
            d.observe(&listing(p, Outcome::Protocol(Reason::BadSignature)), T0 + i);
            d.observe(&Activity::Message { source: p, kind: Some(Kind::Report), outcome: Outcome::Accepted }, T0 + i);
        }
        assert_eq!(d.due(T0 + 100), None);
        assert_eq!(d.snapshot(T0 + 100).busiest_lister, None);
    }

    #[test]
    fn listings_spread_wider_than_the_window_do_not_fire() {
        let p = peer(1);
        let mut d = Detector::new(config(), T0, [p]);
        // Ten a minute for ten minutes: a peer using its whole rate, never more.
        for i in 0..100u64 {
            let now = T0 + i * 6_000;
            assert!(!d.observe(&listing(p, Outcome::Accepted), now));
            assert_eq!(d.due(now), None);
        }
    }

    #[test]
    fn reset_starts_both_counts_over() {
        let mut d = Detector::new(config(), T0, []);
        for n in 0..20 {
            d.observe(&Activity::Connected(peer(n)), T0);
        }
        for _ in 0..30 {
            d.observe(&listing(peer(0), Outcome::Accepted), T0);
        }
        assert!(d.due(T0).is_some());
        d.reset();
        assert_eq!(d.due(T0), None);
        // The peers stay known: seeing them again is not a new burst.
        for n in 0..20 {
            assert!(!d.observe(&Activity::Connected(peer(n)), T0 + 1));
        }
        assert_eq!(d.due(T0 + 1), None);
    }

    #[test]
    fn memory_stays_bounded_under_a_flood_of_identities() {
        let config = Config { new_peers: 5, listings_per_peer: 3, ..config() };
        let mut d = Detector::new(config, T0, []);
        for n in 0..(KNOWN_PEERS as u32 + 500) {
            d.observe(&listing(peer(n), Outcome::Accepted), T0 + u64::from(n));
        }
        assert!(d.known.len() <= KNOWN_PEERS && d.known_order.len() <= KNOWN_PEERS);
        assert!(d.listings.len() <= TRACKED_LISTERS);
        assert!(d.new_peers.len() <= 5);
        assert!(d.listings.values().all(|times| times.len() <= 3));
    }
}
