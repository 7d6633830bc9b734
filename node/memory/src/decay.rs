//! Decay and reinforcement: seed 003's fact classes unified with seed 004's Ebbinghaus
//! importance.
//!
//! Seed 004 scores a crystal as `I(t) = S · f(n) · e^(−λ_eff · Δt)` with `S = 1`,
//! `f(n) = 1 − e^(−0.1 (n + 1))` for `n` accesses, `Δt` the time since the last access, and
//! `λ_eff = decayRate · (1 − |valence| · emotionDecayResistance)`.
//!
//! Seed 003 gives each class of fact its own half-life instead of one `decayRate`. The two
//! combine by letting the class choose the base rate, `λ_class = ln 2 / half-life` (a class
//! that never decays has `λ = 0`; a crystal with no class keeps seed 004's `decayRate`, about a
//! 16-day half-life), and then applying every protection as a multiplier on that rate:
//! - seed 004's emotional term `(1 − |valence| · emotionDecayResistance)`;
//! - seed 003's emotional weight: 0.9 or more means "almost no decay", a rate of 1% of normal;
//! - seed 004's hormonal decay resistance (stress slows forgetting), `(1 − resistance)`.
//!
//! So `e^(−λ_class · Δt)` alone halves a 30-day fact in exactly 30 days, and every protection
//! only ever slows that. Event-bound memories are a step instead: full weight until the event,
//! then 0.1 of it. Reinforcement (mentioning a fact again) adds 0.05 confidence and resets
//! the clock `Δt` to zero.

use druse_protocol::UnixMillis;
use serde::{Deserialize, Serialize};

const DAY_MS: f64 = 86_400_000.0;

/// Seed 003's classes of facts, each with a half-life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DecayClass {
    /// Identity facts, relationships, emotional anchors.
    Never,
    /// Location: 365 days.
    Location,
    /// Employment: 180 days.
    Employment,
    /// Long-term goals: 90 days.
    LongTermGoal,
    /// Active projects: 45 days.
    ActiveProject,
    /// Health status: 30 days.
    Health,
    /// Emotional state: 7 days.
    EmotionalState,
    /// Temporary location: 3 days.
    TemporaryLocation,
    /// Event anticipation: 0.1 after the event.
    EventBound,
    /// No class given: seed 004's decay rate.
    #[default]
    Default,
}

/// The numbers of decay; `Default` holds seeds 003 and 004's values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Seed 004's decay rate per millisecond (5e-10, about a 16-day half-life).
    pub decay_rate: f64,
    /// Seed 004's emotion decay resistance (0.5).
    pub emotion_decay_resistance: f64,
    /// Seed 003: at or above this emotional weight there is almost no decay (0.9).
    pub emotional_protection_weight: f64,
    /// The fraction of the rate left under emotional protection (0.01).
    pub protected_rate_fraction: f64,
    /// Seed 003: confidence added by reinforcement (0.05).
    pub reinforcement: f64,
    /// Seed 003: what an event-bound memory keeps after its event (0.1).
    pub after_event: f64,
    /// Half-lives in days, by class.
    pub location_days: f64,
    pub employment_days: f64,
    pub long_term_goal_days: f64,
    pub active_project_days: f64,
    pub health_days: f64,
    pub emotional_state_days: f64,
    pub temporary_location_days: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            decay_rate: 5e-10,
            emotion_decay_resistance: 0.5,
            emotional_protection_weight: 0.9,
            protected_rate_fraction: 0.01,
            reinforcement: 0.05,
            after_event: 0.1,
            location_days: 365.0,
            employment_days: 180.0,
            long_term_goal_days: 90.0,
            active_project_days: 45.0,
            health_days: 30.0,
            emotional_state_days: 7.0,
            temporary_location_days: 3.0,
        }
    }
}

/// What decay needs to know of one crystal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    pub class: DecayClass,
    pub access_count: u64,
    pub last_access: UnixMillis,
    pub emotional_valence: f64,
    pub emotional_weight: f64,
    pub event_at: Option<UnixMillis>,
}

impl Config {
    /// The class's base decay rate per millisecond (0 for classes that never decay).
    pub fn base_rate(&self, class: DecayClass) -> f64 {
        let days = match class {
            DecayClass::Never => return 0.0,
            DecayClass::Default | DecayClass::EventBound => return self.decay_rate,
            DecayClass::Location => self.location_days,
            DecayClass::Employment => self.employment_days,
            DecayClass::LongTermGoal => self.long_term_goal_days,
            DecayClass::ActiveProject => self.active_project_days,
            DecayClass::Health => self.health_days,
            DecayClass::EmotionalState => self.emotional_state_days,
            DecayClass::TemporaryLocation => self.temporary_location_days,
        };
        std::f64::consts::LN_2 / (days * DAY_MS)
    }

    /// The effective rate after every protection (see the module docs).
    pub fn effective_rate(&self, inputs: &Inputs, hormonal_resistance: f64) -> f64 {
        let mut rate = self.base_rate(inputs.class);
        rate *= 1.0 - inputs.emotional_valence.abs().min(1.0) * self.emotion_decay_resistance;
        if inputs.emotional_weight >= self.emotional_protection_weight {
            rate *= self.protected_rate_fraction;
        }
        rate * (1.0 - hormonal_resistance.clamp(0.0, 1.0))
    }

    /// How much of a memory is retained at `now`, in [0, 1], before the frequency factor.
    pub fn retention(&self, inputs: &Inputs, now: UnixMillis, hormonal_resistance: f64) -> f64 {
        if inputs.class == DecayClass::EventBound {
            return match inputs.event_at {
                Some(at) if now >= at => self.after_event,
                _ => 1.0,
            };
        }
        let elapsed = now.saturating_sub(inputs.last_access) as f64;
        (-self.effective_rate(inputs, hormonal_resistance) * elapsed).exp()
    }

    /// Seed 004's importance: `f(n) · retention`.
    pub fn importance(&self, inputs: &Inputs, now: UnixMillis, hormonal_resistance: f64) -> f64 {
        frequency(inputs.access_count) * self.retention(inputs, now, hormonal_resistance)
    }

    /// Reinforcement: +0.05 confidence (capped at 1) and the clock reset to `now`.
    pub fn reinforce(&self, confidence: f64, now: UnixMillis) -> (f64, UnixMillis) {
        ((confidence + self.reinforcement).min(1.0), now)
    }
}

/// Seed 004's saturating frequency factor `1 − e^(−0.1 (n + 1))`.
pub fn frequency(access_count: u64) -> f64 {
    1.0 - (-0.1 * (access_count as f64 + 1.0)).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(class: DecayClass) -> Inputs {
        Inputs { class, access_count: 0, last_access: 0, emotional_valence: 0.0, emotional_weight: 0.0, event_at: None }
    }

    fn days(n: f64) -> UnixMillis {
        (n * DAY_MS) as UnixMillis
    }

    #[test]
    fn each_class_halves_in_its_half_life() {
        let c = Config::default();
        for (class, half_life) in [
            (DecayClass::Location, 365.0),
            (DecayClass::Employment, 180.0),
            (DecayClass::LongTermGoal, 90.0),
            (DecayClass::ActiveProject, 45.0),
            (DecayClass::Health, 30.0),
            (DecayClass::EmotionalState, 7.0),
            (DecayClass::TemporaryLocation, 3.0),
        ] {
            let r = c.retention(&inputs(class), days(half_life), 0.0);
            assert!((r - 0.5).abs() < 1e-6, "{class:?}: {r}");
        }
    }

    #[test]
    fn a_30_day_fact_halves_its_importance_in_30_days() {
        let c = Config::default();
        let i = inputs(DecayClass::Health);
        let ratio = c.importance(&i, days(30.0), 0.0) / c.importance(&i, 0, 0.0);
        assert!((ratio - 0.5).abs() < 1e-6, "{ratio}");
    }

    #[test]
    fn never_class_does_not_decay() {
        let c = Config::default();
        assert_eq!(c.retention(&inputs(DecayClass::Never), days(10_000.0), 0.0), 1.0);
    }

    #[test]
    fn default_class_uses_the_seed_004_rate_of_about_16_days() {
        let c = Config::default();
        let half_life_days = std::f64::consts::LN_2 / 5e-10 / DAY_MS;
        assert!((half_life_days - 16.0).abs() < 0.1, "{half_life_days}");
        let r = c.retention(&inputs(DecayClass::Default), days(half_life_days), 0.0);
        assert!((r - 0.5).abs() < 1e-6);
    }

    #[test]
    fn event_bound_memory_drops_to_a_tenth_after_the_event() {
        let c = Config::default();
        let i = Inputs { event_at: Some(days(5.0)), ..inputs(DecayClass::EventBound) };
        assert_eq!(c.retention(&i, days(4.9), 0.0), 1.0);
        assert_eq!(c.retention(&i, days(5.0), 0.0), 0.1);
    }

    #[test]
    fn emotional_weight_of_0_9_means_almost_no_decay() {
        let c = Config::default();
        let weighted = Inputs { emotional_weight: 0.9, ..inputs(DecayClass::EmotionalState) };
        let r = c.retention(&weighted, days(7.0), 0.0);
        assert!(r > 0.99, "a 7-day fact with weight 0.9 keeps {r} after 7 days");
        let light = Inputs { emotional_weight: 0.89, ..inputs(DecayClass::EmotionalState) };
        assert!((c.retention(&light, days(7.0), 0.0) - 0.5).abs() < 1e-6);
    }

    #[test]
    fn emotional_valence_and_stress_slow_decay_but_never_speed_it() {
        let c = Config::default();
        let plain = c.retention(&inputs(DecayClass::Health), days(30.0), 0.0);
        let valenced = Inputs { emotional_valence: -0.8, ..inputs(DecayClass::Health) };
        assert!(c.retention(&valenced, days(30.0), 0.0) > plain);
        assert!(c.retention(&inputs(DecayClass::Health), days(30.0), 0.5) > plain);
    }

    #[test]
    fn reinforcement_adds_0_05_and_resets_the_clock() {
        let c = Config::default();
        assert_eq!(c.reinforce(0.7, 1234), (0.75, 1234));
        assert_eq!(c.reinforce(0.98, 1).0, 1.0);
        let before = Inputs { last_access: 0, ..inputs(DecayClass::Health) };
        let after = Inputs { last_access: days(30.0), ..before };
        assert!((c.retention(&before, days(30.0), 0.0) - 0.5).abs() < 1e-6);
        assert_eq!(c.retention(&after, days(30.0), 0.0), 1.0);
    }

    #[test]
    fn frequency_factor_saturates() {
        assert!((frequency(0) - (1.0 - (-0.1f64).exp())).abs() < 1e-12);
        assert!(frequency(100) > 0.99);
        assert!(frequency(5) > frequency(4));
    }
}
