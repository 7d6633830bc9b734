//! Marketplace math (seed 004, DESIGN §9): the price of a listed skill and the quality gate
//! it must pass before listing. Every node computes these for itself from signed reports.

/// Micro-USDC per USDC: prices travel as integers of micro-USDC.
pub const MICROS_PER_USDC: u64 = 1_000_000;

/// The pricing knobs; `Default` holds seed 004's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceConfig {
    /// Base price in USDC (0.01).
    pub base_usdc: f64,
    /// Weight of ln(adopters + bounty matches + 1) in the demand multiplier (0.1).
    pub demand_weight: f64,
    /// Multiplier for a rare skill (1.5).
    pub rare: f64,
    /// Multiplier for an uncommon skill (1.2).
    pub uncommon: f64,
    /// At most this many similar skills known: rare (0).
    pub rare_max_similar: usize,
    /// At most this many similar skills known: uncommon (3); more is common (1.0).
    pub uncommon_max_similar: usize,
}

impl Default for PriceConfig {
    fn default() -> Self {
        Self {
            base_usdc: 0.01,
            demand_weight: 0.1,
            rare: 1.5,
            uncommon: 1.2,
            rare_max_similar: 0,
            uncommon_max_similar: 3,
        }
    }
}

/// What a node has seen of one skill, from signed reports and its own index.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PriceInputs {
    pub executions: u64,
    pub successes: u64,
    /// Mean reward of the executions, in [-1, 1].
    pub avg_reward: f64,
    pub unique_adopters: u64,
    pub bounty_matches: u64,
    /// The publisher's reputation, in [0, 1].
    pub reputation: f64,
    /// Other skills the node knows that are similar to this one.
    pub similar_skills: usize,
}

impl PriceInputs {
    /// Successes over executions; 0 with no executions.
    pub fn success_rate(&self) -> f64 {
        if self.executions == 0 { 0.0 } else { self.successes.min(self.executions) as f64 / self.executions as f64 }
    }
}

/// The factors of a price, shown beside it so an operator can see why it is what it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub quality: f64,
    pub demand: f64,
    pub reputation: f64,
    pub scarcity: f64,
    /// The price in USDC.
    pub usdc: f64,
}

impl Price {
    /// The price in whole micro-USDC, rounded down.
    pub fn micros(&self) -> u64 {
        (self.usdc * MICROS_PER_USDC as f64).floor().max(0.0) as u64
    }
}

/// `base × quality × demand × reputation × scarcity`, each factor as seed 004 gives it.
///
/// Quality is success rate × average reward; a negative average reward counts as 0, so a
/// price is never negative. Reputation is clamped to [0, 1].
pub fn price(config: &PriceConfig, inputs: &PriceInputs) -> Price {
    let quality = inputs.success_rate() * clamp_unit(inputs.avg_reward);
    let demand = 1.0 + ((inputs.unique_adopters + inputs.bounty_matches + 1) as f64).ln() * config.demand_weight;
    let reputation = clamp_unit(inputs.reputation);
    let scarcity = if inputs.similar_skills <= config.rare_max_similar {
        config.rare
    } else if inputs.similar_skills <= config.uncommon_max_similar {
        config.uncommon
    } else {
        1.0
    };
    let usdc = config.base_usdc * quality * demand * reputation * scarcity;
    Price { quality, demand, reputation, scarcity, usdc }
}

fn clamp_unit(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

/// The quality gate before listing (seed 004): at least 3 executions and 60% success.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QualityGate {
    pub min_executions: u64,
    pub min_success_rate: f64,
}

impl Default for QualityGate {
    fn default() -> Self {
        Self { min_executions: 3, min_success_rate: 0.6 }
    }
}

impl QualityGate {
    /// Whether a skill with these stats may be listed.
    pub fn passes(&self, executions: u64, successes: u64) -> bool {
        if executions < self.min_executions || executions == 0 {
            return false;
        }
        // Compare in integers so 3 of 5 is exactly 60%.
        let needed = (self.min_success_rate * executions as f64 - 1e-9).ceil().max(0.0) as u64;
        successes.min(executions) >= needed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inputs() -> impl Strategy<Value = PriceInputs> {
        (0u64..1000, 0.0f64..=1.0, -1.0f64..=1.0, 0u64..1000, 0u64..100, 0.0f64..=1.0, 0usize..20).prop_map(
            |(executions, rate, avg_reward, unique_adopters, bounty_matches, reputation, similar_skills)| PriceInputs {
                executions,
                successes: (executions as f64 * rate).floor() as u64,
                avg_reward,
                unique_adopters,
                bounty_matches,
                reputation,
                similar_skills,
            },
        )
    }

    #[test]
    fn price_matches_seed_formula_for_a_known_skill() {
        let inputs = PriceInputs {
            executions: 10,
            successes: 8,
            avg_reward: 0.5,
            unique_adopters: 3,
            bounty_matches: 1,
            reputation: 0.8,
            similar_skills: 2,
        };
        let p = price(&PriceConfig::default(), &inputs);
        let expected = 0.01 * (0.8 * 0.5) * (1.0 + (5.0f64).ln() * 0.1) * 0.8 * 1.2;
        assert!((p.usdc - expected).abs() < 1e-12, "{} vs {expected}", p.usdc);
        assert_eq!(p.scarcity, 1.2);
    }

    #[test]
    fn scarcity_tiers_are_rare_uncommon_common() {
        let cfg = PriceConfig::default();
        let at = |similar_skills| price(&cfg, &PriceInputs { similar_skills, ..Default::default() }).scarcity;
        assert_eq!((at(0), at(1), at(3), at(4), at(50)), (1.5, 1.2, 1.2, 1.0, 1.0));
    }

    #[test]
    fn quality_gate_matches_seed_numbers() {
        let gate = QualityGate::default();
        assert!(!gate.passes(2, 2), "two executions are too few");
        assert!(gate.passes(3, 2), "2 of 3 is 67%");
        assert!(!gate.passes(3, 1), "1 of 3 is 33%");
        assert!(gate.passes(5, 3), "3 of 5 is exactly 60%");
        assert!(!gate.passes(10, 5), "5 of 10 is 50%");
        assert!(!gate.passes(0, 0));
    }

    proptest! {
        #[test]
        fn price_is_never_negative(i in inputs()) {
            prop_assert!(price(&PriceConfig::default(), &i).usdc >= 0.0);
        }

        #[test]
        fn price_rises_with_success_reward_demand_and_reputation(i in inputs(), bump in 1u64..50, r in 0.0f64..0.5) {
            let cfg = PriceConfig::default();
            let base = price(&cfg, &i).usdc;
            let more_success = PriceInputs { successes: (i.successes + bump).min(i.executions), ..i };
            let more_reward = PriceInputs { avg_reward: (i.avg_reward + r).min(1.0), ..i };
            let more_adopters = PriceInputs { unique_adopters: i.unique_adopters + bump, ..i };
            let more_bounties = PriceInputs { bounty_matches: i.bounty_matches + bump, ..i };
            let more_rep = PriceInputs { reputation: (i.reputation + r).min(1.0), ..i };
            for bigger in [more_success, more_reward, more_adopters, more_bounties, more_rep] {
                prop_assert!(price(&cfg, &bigger).usdc >= base);
            }
        }

        #[test]
        fn price_falls_as_similar_skills_grow(i in inputs(), more in 1usize..20) {
            let cfg = PriceConfig::default();
            let common = PriceInputs { similar_skills: i.similar_skills + more, ..i };
            prop_assert!(price(&cfg, &common).usdc <= price(&cfg, &i).usdc);
        }

        #[test]
        fn gate_passes_exactly_at_three_executions_and_sixty_percent(executions in 0u64..500, successes in 0u64..500) {
            let successes = successes.min(executions);
            let expected = executions >= 3 && (successes as f64) / (executions as f64) >= 0.6 - 1e-12;
            prop_assert_eq!(QualityGate::default().passes(executions, successes), expected);
        }
    }
}
