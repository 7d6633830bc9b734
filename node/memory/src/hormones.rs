//! The hormonal system (seed 004): dopamine, cortisol and oxytocin decay toward a
//! homeostasis, spike on events found in text, are stamped on each crystal at ingestion, and
//! modulate consolidation and retrieval. Weather from management nodes sets a network cortisol
//! override on top (`max(local, override)`).

use druse_protocol::UnixMillis;
use serde::{Deserialize, Serialize};

const MINUTE_MS: f64 = 60_000.0;

/// One snapshot of the three hormones, each in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Influence {
    pub dopamine: f64,
    pub cortisol: f64,
    pub oxytocin: f64,
}

impl Influence {
    /// Seed 004's emotional valence: `(dopamine + oxytocin − cortisol) / 2`.
    pub fn valence(&self) -> f64 {
        ((self.dopamine + self.oxytocin - self.cortisol) / 2.0).clamp(-1.0, 1.0)
    }
}

/// Events that spike hormones (seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Reward,
    Error,
    Social,
    Achievement,
    Urgency,
}

impl Event {
    /// The spike an event adds (seed 004's table).
    pub fn spike(self) -> Influence {
        let (dopamine, cortisol, oxytocin) = match self {
            Event::Reward => (0.3, 0.0, 0.0),
            Event::Error => (0.0, 0.3, 0.0),
            Event::Social => (0.0, 0.0, 0.3),
            Event::Achievement => (0.4, 0.0, 0.2),
            Event::Urgency => (0.0, 0.4, 0.0),
        };
        Influence { dopamine, cortisol, oxytocin }
    }
}

/// Seed 004's trigger words, by event.
const TRIGGERS: &[(Event, &[&str])] = &[
    (Event::Achievement, &["shipped", "deployed", "milestone"]),
    (Event::Reward, &["success", "succeeded", "fixed", "solved"]),
    (Event::Urgency, &["urgent", "deadline", "asap"]),
    (Event::Error, &["fail", "failed", "failure", "error", "bug", "crash", "crashed"]),
    (Event::Social, &["thank", "thanks", "help", "appreciate", "team", "collaborate"]),
];

/// The longest trigger word, in bytes.
const LONGEST_TRIGGER: usize = 16;

/// Every trigger word, lowercase, with the index of its event in [`TRIGGERS`].
static TRIGGER_WORDS: std::sync::LazyLock<rustc_hash::FxHashMap<&'static [u8], usize>> =
    std::sync::LazyLock::new(|| {
        let words =
            TRIGGERS.iter().enumerate().flat_map(|(n, (_, words))| words.iter().map(move |w| (w.as_bytes(), n)));
        words.collect()
    });

/// The events whose trigger words appear in `text` (whole words, any case), each once.
pub fn detect(text: &str) -> Vec<Event> {
    let mut found = [false; TRIGGERS.len()];
    let mut lowered = [0u8; LONGEST_TRIGGER];
    // Every trigger is ASCII, so a word's ASCII lowercase is looked up as it is: a word with
    // other characters in it matches none.
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        let Some(lowered) = lowered.get_mut(..word.len()).filter(|w| !w.is_empty()) else { continue };
        for (l, b) in lowered.iter_mut().zip(word.as_bytes()) {
            *l = b.to_ascii_lowercase();
        }
        if let Some(&event) = TRIGGER_WORDS.get(&*lowered)
            && let Some(seen) = found.get_mut(event)
        {
            *seen = true;
        }
    }
    TRIGGERS.iter().zip(found).filter(|(_, seen)| *seen).map(|((event, _), _)| *event).collect()
}

/// Seed 004's numbers; `Default` holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub dopamine_half_life_minutes: f64,
    pub cortisol_half_life_minutes: f64,
    pub oxytocin_half_life_minutes: f64,
    pub homeostasis: Influence,
    /// Extra oxytocin stamped on session-origin content (0.1).
    pub session_oxytocin: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            dopamine_half_life_minutes: 30.0,
            cortisol_half_life_minutes: 60.0,
            oxytocin_half_life_minutes: 45.0,
            homeostasis: Influence { dopamine: 0.15, cortisol: 0.02, oxytocin: 0.10 },
            session_oxytocin: 0.1,
        }
    }
}

/// How hormones shape consolidation (seed 004's `getConsolidationModulation`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ConsolidationModulation {
    /// `effectiveCortisol·0.3 + dopamine·0.2 + oxytocin·0.2`, at most 0.5.
    pub decay_resistance: f64,
    /// `base + effectiveCortisol·0.03`.
    pub merge_threshold: f64,
    /// True while a network cortisol override is active.
    pub halt_untrusted_ingestion: bool,
}

/// How hormones shape retrieval (seed 004's `getRetrievalModulation`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RetrievalModulation {
    /// `1 + dopamine·0.2`.
    pub importance_boost: f64,
    /// `1 + cortisol·0.3`.
    pub recency_bias: f64,
}

/// The node's hormone levels, as of `at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub levels: Influence,
    pub at: UnixMillis,
}

fn decay_toward(level: f64, home: f64, half_life_minutes: f64, elapsed_ms: f64) -> f64 {
    let value = home + (level - home) * 0.5f64.powf(elapsed_ms / (half_life_minutes * MINUTE_MS));
    if value < 0.001 { 0.0 } else { value.min(1.0) }
}

impl State {
    /// Resting levels at `now`.
    pub fn new(config: &Config, now: UnixMillis) -> Self {
        Self { levels: config.homeostasis, at: now }
    }

    /// The levels at `now`: each decays toward homeostasis with its half-life
    /// (`h(t) = home + (h(t₀) − home) · 0.5^((t − t₀)/halflife)`; below 0.001 is 0).
    pub fn levels_at(&self, config: &Config, now: UnixMillis) -> Influence {
        let elapsed = now.saturating_sub(self.at) as f64;
        let home = config.homeostasis;
        Influence {
            dopamine: decay_toward(self.levels.dopamine, home.dopamine, config.dopamine_half_life_minutes, elapsed),
            cortisol: decay_toward(self.levels.cortisol, home.cortisol, config.cortisol_half_life_minutes, elapsed),
            oxytocin: decay_toward(self.levels.oxytocin, home.oxytocin, config.oxytocin_half_life_minutes, elapsed),
        }
    }

    /// Adds an event's spike at `now`, clamped to [0, 1].
    pub fn spike(&mut self, config: &Config, event: Event, now: UnixMillis) {
        let current = self.levels_at(config, now);
        let s = event.spike();
        self.levels = Influence {
            dopamine: (current.dopamine + s.dopamine).clamp(0.0, 1.0),
            cortisol: (current.cortisol + s.cortisol).clamp(0.0, 1.0),
            oxytocin: (current.oxytocin + s.oxytocin).clamp(0.0, 1.0),
        };
        self.at = now;
    }

    /// Seed 004's `computeCrystalInfluence`: the current levels plus the spikes of `events`
    /// (those [`detect`] found in the crystal's text), with +0.1 oxytocin for session content.
    /// Stored on the crystal.
    pub fn crystal_influence(
        &self,
        config: &Config,
        events: &[Event],
        from_session: bool,
        now: UnixMillis,
    ) -> Influence {
        let mut levels = self.levels_at(config, now);
        for event in events {
            let s = event.spike();
            levels.dopamine += s.dopamine;
            levels.cortisol += s.cortisol;
            levels.oxytocin += s.oxytocin;
        }
        if from_session {
            levels.oxytocin += config.session_oxytocin;
        }
        Influence {
            dopamine: levels.dopamine.clamp(0.0, 1.0),
            cortisol: levels.cortisol.clamp(0.0, 1.0),
            oxytocin: levels.oxytocin.clamp(0.0, 1.0),
        }
    }

    /// Consolidation modulation, with the network override folded into cortisol.
    pub fn consolidation(
        &self,
        config: &Config,
        network_override: f64,
        base_merge_threshold: f64,
        now: UnixMillis,
    ) -> ConsolidationModulation {
        let levels = self.levels_at(config, now);
        let cortisol = levels.cortisol.max(network_override);
        ConsolidationModulation {
            decay_resistance: (cortisol * 0.3 + levels.dopamine * 0.2 + levels.oxytocin * 0.2).min(0.5),
            merge_threshold: base_merge_threshold + cortisol * 0.03,
            halt_untrusted_ingestion: network_override > 0.0,
        }
    }

    /// Retrieval modulation, with the network override folded into cortisol.
    pub fn retrieval(&self, config: &Config, network_override: f64, now: UnixMillis) -> RetrievalModulation {
        let levels = self.levels_at(config, now);
        RetrievalModulation {
            importance_boost: 1.0 + levels.dopamine * 0.2,
            recency_bias: 1.0 + levels.cortisol.max(network_override) * 0.3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minutes(n: f64) -> UnixMillis {
        (n * MINUTE_MS) as UnixMillis
    }

    #[test]
    fn each_hormone_halves_its_distance_to_homeostasis_in_its_half_life() {
        let c = Config::default();
        let mut s = State::new(&c, 0);
        s.levels = Influence { dopamine: 0.95, cortisol: 0.82, oxytocin: 0.9 };
        let d = s.levels_at(&c, minutes(30.0)).dopamine;
        assert!((d - (0.15 + 0.8 / 2.0)).abs() < 1e-9, "{d}");
        let co = s.levels_at(&c, minutes(60.0)).cortisol;
        assert!((co - (0.02 + 0.8 / 2.0)).abs() < 1e-9, "{co}");
        let o = s.levels_at(&c, minutes(45.0)).oxytocin;
        assert!((o - (0.10 + 0.8 / 2.0)).abs() < 1e-9, "{o}");
        let rest = s.levels_at(&c, minutes(100_000.0));
        assert!((rest.dopamine - 0.15).abs() < 1e-6 && (rest.cortisol - 0.02).abs() < 1e-6);
    }

    #[test]
    fn spikes_match_the_seed_table_and_clamp_at_one() {
        let c = Config::default();
        let mut s = State::new(&c, 0);
        s.spike(&c, Event::Achievement, 0);
        assert!((s.levels.dopamine - 0.55).abs() < 1e-9 && (s.levels.oxytocin - 0.30).abs() < 1e-9);
        for _ in 0..5 {
            s.spike(&c, Event::Urgency, 0);
        }
        assert_eq!(s.levels.cortisol, 1.0);
    }

    #[test]
    fn keywords_are_detected_as_whole_words() {
        assert_eq!(detect("We shipped it!"), vec![Event::Achievement]);
        assert_eq!(detect("the build crashed, urgent"), vec![Event::Urgency, Event::Error]);
        assert_eq!(detect("Thanks, team"), vec![Event::Social]);
        assert!(detect("the errorless terror").is_empty(), "substrings do not count");
        assert_eq!(
            detect("DEADLINE überall, Fixed"),
            vec![Event::Reward, Event::Urgency],
            "any case, beside other words"
        );
        assert_eq!(detect("fehler: failé, fail—then crash-proof"), vec![Event::Error], "only whole words");
        let long = "x".repeat(LONGEST_TRIGGER + 1);
        assert_eq!(detect(&format!("{long} failed {long}")), vec![Event::Error], "a long word is passed over");
        for (event, words) in TRIGGERS {
            for word in *words {
                assert!(word.len() <= LONGEST_TRIGGER && word.bytes().all(|b| b.is_ascii_lowercase()), "{word}");
                assert_eq!(detect(&format!("so {} now", word.to_uppercase())), vec![*event], "{word}");
            }
        }
    }

    #[test]
    fn crystal_influence_adds_detected_spikes_and_session_oxytocin() {
        let c = Config::default();
        let s = State::new(&c, 0);
        let i = s.crystal_influence(&c, &detect("fixed the bug"), true, 0);
        assert!((i.dopamine - 0.45).abs() < 1e-9, "reward: {i:?}");
        assert!((i.cortisol - 0.32).abs() < 1e-9, "error: {i:?}");
        assert!((i.oxytocin - 0.20).abs() < 1e-9, "session: {i:?}");
        assert!((i.valence() - (0.45 + 0.20 - 0.32) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn network_override_raises_cortisol_in_both_modulations() {
        let c = Config::default();
        let s = State::new(&c, 0);
        let calm = s.consolidation(&c, 0.0, 0.92, 0);
        assert!(!calm.halt_untrusted_ingestion);
        assert!((calm.merge_threshold - (0.92 + 0.02 * 0.03)).abs() < 1e-12);
        let storm = s.consolidation(&c, 0.9, 0.92, 0);
        assert!(storm.halt_untrusted_ingestion);
        assert!((storm.merge_threshold - (0.92 + 0.9 * 0.03)).abs() < 1e-12);
        assert!((storm.decay_resistance - (0.9 * 0.3 + 0.15 * 0.2 + 0.10 * 0.2)).abs() < 1e-12);
        assert!(s.consolidation(&c, 1.0, 0.92, 0).decay_resistance <= 0.5);
        let r = s.retrieval(&c, 0.9, 0);
        assert!((r.recency_bias - 1.27).abs() < 1e-12 && (r.importance_boost - 1.03).abs() < 1e-12);
    }
}
