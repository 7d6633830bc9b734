//! Cortisol weather (DESIGN §7, seed 004's network cortisol override): the last valid weather
//! from a management key, the effective cortisol it implies, and the halt gate.

use druse_protocol::body::Weather;
use druse_protocol::{PublicKey, UnixMillis};
use serde::{Deserialize, Serialize};

/// The weather currently in force (possibly expired or lifted), as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Current {
    pub level: f64,
    pub reason: String,
    pub issued_at: UnixMillis,
    pub expires_at: UnixMillis,
    pub seq: u64,
    pub signer: PublicKey,
    /// When this node applied it (Unix ms, the node's clock): how long a node has been halted,
    /// and how long weather took to reach it. 0 for weather stored before nodes stamped it.
    #[serde(default)]
    pub received_at: UnixMillis,
}

impl Current {
    /// Whether `other` is the same signed weather (signer, seq, issue time, level, duration and
    /// reason), whenever and wherever each was applied: `received_at` is each node's own.
    pub fn same_message(&self, other: &Current) -> bool {
        Current { received_at: other.received_at, ..self.clone() } == *other
    }
}

/// What applying a weather message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It is now the weather in force.
    Replaced,
    /// It lifted the weather (level 0).
    Lifted,
    /// It is older than the weather in force, which stays.
    Older,
}

/// The node's weather state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WeatherState {
    current: Option<Current>,
}

impl WeatherState {
    /// Applies a validated weather message, received at `now`. A newer seq from the same key,
    /// or a later issue time from another key, replaces the current weather; gossip may deliver
    /// an older one late, and that changes nothing.
    pub fn apply(&mut self, signer: PublicKey, weather: &Weather, now: UnixMillis) -> Applied {
        if let Some(current) = &self.current {
            let older = if current.signer == signer {
                weather.seq <= current.seq
            } else {
                weather.issued_at < current.issued_at
            };
            if older {
                return Applied::Older;
            }
        }
        self.current = Some(Current {
            level: weather.level,
            reason: weather.reason.clone(),
            issued_at: weather.issued_at,
            expires_at: weather.expires_at(),
            seq: weather.seq,
            signer,
            received_at: now,
        });
        if weather.level <= 0.0 { Applied::Lifted } else { Applied::Replaced }
    }

    /// The weather in force at `now`, if any: level above 0 and not expired.
    pub fn active(&self, now: UnixMillis) -> Option<&Current> {
        self.current.as_ref().filter(|c| c.level > 0.0 && now < c.expires_at)
    }

    /// The last weather applied, active or not.
    pub fn last(&self) -> Option<&Current> {
        self.current.as_ref()
    }

    /// Whether ingestion from peers below `trusted` is halted.
    pub fn halted(&self, now: UnixMillis) -> bool {
        self.active(now).is_some()
    }

    /// The network cortisol override (0 without active weather).
    pub fn override_level(&self, now: UnixMillis) -> f64 {
        self.active(now).map_or(0.0, |c| c.level)
    }

    /// Effective cortisol: `max(local, override)`.
    pub fn effective_cortisol(&self, local: f64, now: UnixMillis) -> f64 {
        local.max(self.override_level(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use druse_protocol::Keypair;

    fn weather(seq: u64, issued_at: UnixMillis, level: f64) -> Weather {
        Weather { issued_at, seq, level, duration_ms: 1000, reason: "test".into() }
    }

    #[test]
    fn weather_halts_until_it_expires() {
        let key = Keypair::from_seed([1; 32]).public();
        let mut state = WeatherState::default();
        assert_eq!(state.apply(key, &weather(1, 10_000, 0.9), 10_000), Applied::Replaced);
        assert!(state.halted(10_500));
        assert_eq!(state.effective_cortisol(0.02, 10_500), 0.9);
        assert!(!state.halted(11_000), "expires at issued_at + duration");
        assert_eq!(state.effective_cortisol(0.02, 11_000), 0.02);
    }

    #[test]
    fn weather_keeps_when_this_node_applied_it_and_older_state_still_reads() {
        let key = Keypair::from_seed([1; 32]).public();
        let mut state = WeatherState::default();
        state.apply(key, &weather(1, 10_000, 0.9), 10_250);
        assert_eq!(state.active(10_300).map(|c| c.received_at), Some(10_250));
        // A late, older message does not move the stamp.
        assert_eq!(state.apply(key, &weather(0, 9_000, 0.5), 10_400), Applied::Older);
        assert_eq!(state.last().map(|c| c.received_at), Some(10_250));
        // Another node that applied the same message later holds the same weather.
        let mut elsewhere = WeatherState::default();
        elsewhere.apply(key, &weather(1, 10_000, 0.9), 12_000);
        let (here, there) = (state.last().expect("applied"), elsewhere.last().expect("applied"));
        assert!(here.same_message(there) && here != there);
        elsewhere.apply(key, &weather(2, 10_000, 0.9), 12_000);
        assert!(!here.same_message(elsewhere.last().expect("applied")), "another seq is another message");
        // State persisted before the stamp existed reads with 0.
        let mut stored = serde_json::to_value(&state).expect("weather state serialises");
        stored["current"].as_object_mut().expect("a current weather").remove("received_at");
        let read: WeatherState = serde_json::from_value(stored).expect("older weather state reads");
        assert_eq!(read.last().map(|c| (c.seq, c.received_at)), Some((1, 0)));
    }

    #[test]
    fn level_zero_lifts_the_weather() {
        let key = Keypair::from_seed([1; 32]).public();
        let mut state = WeatherState::default();
        state.apply(key, &weather(1, 10_000, 0.9), 10_000);
        assert_eq!(state.apply(key, &weather(2, 10_100, 0.0), 10_100), Applied::Lifted);
        assert!(!state.halted(10_200));
    }

    #[test]
    fn older_seq_delivered_late_changes_nothing() {
        let key = Keypair::from_seed([1; 32]).public();
        let mut state = WeatherState::default();
        state.apply(key, &weather(5, 10_000, 0.0), 10_000);
        assert_eq!(state.apply(key, &weather(4, 9_000, 0.9), 9_000), Applied::Older);
        assert!(!state.halted(10_100));
    }

    #[test]
    fn local_cortisol_above_the_override_wins() {
        let key = Keypair::from_seed([1; 32]).public();
        let mut state = WeatherState::default();
        state.apply(key, &weather(1, 10_000, 0.3), 10_000);
        assert_eq!(state.effective_cortisol(0.5, 10_100), 0.5);
    }
}
