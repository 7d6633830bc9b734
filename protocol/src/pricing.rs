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
///
/// Quality and adopters arrive already weighed: the node decides how much each reporter's and
/// adopter's word counts (`druse_node::market` weighs them by what vouches for their keys), and
/// passes the results here.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PriceInputs {
    /// Success rate × average reward of the counted executions, in [0, 1] (see [`quality`]).
    pub quality: f64,
    /// Adopters that paid for the skill, each counted by the weight of its key.
    pub adopters: f64,
    pub bounty_matches: u64,
    /// The publisher's reputation, in [0, 1].
    pub reputation: f64,
    /// Other skills the node knows that are similar to this one.
    pub similar_skills: usize,
}

/// Seed 004's quality of a run of executions: success rate × average reward, in [0, 1]. A
/// negative average reward counts as 0, so a price is never negative.
pub fn quality(success_rate: f64, avg_reward: f64) -> f64 {
    clamp_unit(success_rate) * clamp_unit(avg_reward)
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

/// `base × quality × demand × reputation × scarcity`, each factor as seed 004 gives it, with
/// demand = 1 + ln(adopters + bounty matches + 1) × `demand_weight`.
///
/// Quality and reputation are clamped to [0, 1], and a negative (or not finite) adopter
/// weight counts as 0, so a price is never negative.
pub fn price(config: &PriceConfig, inputs: &PriceInputs) -> Price {
    let quality = clamp_unit(inputs.quality);
    let adopters = if inputs.adopters.is_finite() { inputs.adopters.max(0.0) } else { 0.0 };
    let demand = 1.0 + (adopters + inputs.bounty_matches as f64 + 1.0).ln() * config.demand_weight;
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

/// The quality gate before listing (seed 004: at least 3 executions at 60% success), as druse
/// reads it against fake and laundered evidence. The node decides whose reports count (see
/// `druse_node::market`); the gate then asks three things of them:
/// - **counted successes**: at least `min_executions` successful executions, each reporter's
///   counted up to `runs_per_reporter` (2), so one node, however many of its users reacted,
///   never lifts a skill alone (2 < 3): it takes at least two independent reporters. Trust
///   never multiplies this count: three trusted reporters with one success each are 3;
/// - **success rate**: the reporters' weighted mean success rate at least `min_success_rate`;
/// - **vouched weight**: the reporters that report a success weigh at least
///   `min_reporter_weight` together (1.0: one verified reporter, or two trusted ones).
///
/// Counting successes, not executions, against the minimum is what makes the gate monotone:
/// under "3 executions at 60%", two successes and a later failure make 2 of 3 and would pass,
/// so bad news would list a skill. Here a failure adds no success and no success weight and
/// only lowers a success rate, so **adding a failure never makes a skill pass**; and a success
/// never makes one fail (it raises all three).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QualityGate {
    pub min_executions: u64,
    pub min_success_rate: f64,
    /// Weight of the vouched reporters with a success (1.0: one verified reporter, or two
    /// trusted ones).
    pub min_reporter_weight: f64,
    /// Executions (and so successes) of one reporter the gate counts (2): fewer than
    /// `min_executions`, so one reporter never passes the gate alone.
    pub runs_per_reporter: u64,
}

impl Default for QualityGate {
    fn default() -> Self {
        Self { min_executions: 3, min_success_rate: 0.6, min_reporter_weight: 1.0, runs_per_reporter: 2 }
    }
}

/// Slack for sums of weights (0.75 + 0.25 must reach 1.0).
const EPSILON: f64 = 1e-9;

impl QualityGate {
    /// Whether a skill with these stats may be listed, counting executions one by one (seed
    /// 004's gate, for one reporter's or unweighed evidence).
    pub fn passes(&self, executions: u64, successes: u64) -> bool {
        if executions < self.min_executions || executions == 0 {
            return false;
        }
        // Compare in integers so 3 of 5 is exactly 60%.
        let needed = (self.min_success_rate * executions as f64 - 1e-9).ceil().max(0.0) as u64;
        successes.min(executions) >= needed
    }

    /// Whether a skill may be listed on counted evidence: `successes` is the counted
    /// reporters' successes, each reporter's capped at `runs_per_reporter`; `success_rate`
    /// their weighted mean success rate; `success_weight` the vouched weight of the
    /// reporters with at least one success.
    pub fn passes_counted(&self, successes: u64, success_rate: f64, success_weight: f64) -> bool {
        let at_least = |x: f64, min: f64| x.is_finite() && x >= min - EPSILON;
        successes > 0
            && successes >= self.min_executions
            && at_least(success_rate, self.min_success_rate)
            && at_least(success_weight, self.min_reporter_weight)
    }

    /// The successes of one reporter that the gate counts.
    pub fn counted(&self, successes: u64) -> u64 {
        successes.min(self.runs_per_reporter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inputs() -> impl Strategy<Value = PriceInputs> {
        (0.0f64..=1.0, 0.0f64..1000.0, 0u64..100, 0.0f64..=1.0, 0usize..20).prop_map(
            |(quality, adopters, bounty_matches, reputation, similar_skills)| PriceInputs {
                quality,
                adopters,
                bounty_matches,
                reputation,
                similar_skills,
            },
        )
    }

    #[test]
    fn price_matches_seed_formula_for_a_known_skill() {
        let inputs = PriceInputs {
            quality: quality(0.8, 0.5),
            adopters: 3.0,
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
    fn quality_is_rate_times_reward_and_never_negative() {
        assert_eq!(quality(0.5, 0.5), 0.25);
        assert_eq!(quality(1.0, -0.5), 0.0);
        assert_eq!(quality(f64::NAN, 1.0), 0.0);
        assert_eq!(quality(2.0, 2.0), 1.0);
    }

    #[test]
    fn a_fraction_of_an_adopter_is_a_fraction_of_demand() {
        let cfg = PriceConfig::default();
        let at = |adopters| price(&cfg, &PriceInputs { adopters, ..Default::default() }).demand;
        assert_eq!(at(0.0), 1.0);
        assert!((at(0.2) - (1.0 + 1.2f64.ln() * 0.1)).abs() < 1e-12);
        assert_eq!(at(-5.0), 1.0, "negative weight is no demand");
        assert_eq!(at(f64::NAN), 1.0);
    }

    #[test]
    fn counted_gate_needs_successes_success_rate_and_success_weight() {
        let gate = QualityGate::default();
        assert!(gate.passes_counted(3, 0.6, 1.0));
        assert!(gate.passes_counted(3, 1.0, 0.75 * 3.0), "three trusted reporters, one success each");
        assert!(gate.passes_counted(3, 1.0, 0.75 + 0.25), "sums reach the bounds");
        assert!(!gate.passes_counted(2, 1.0, 1.0), "too few successes");
        assert!(!gate.passes_counted(3, 0.59, 1.0), "too little success");
        assert!(!gate.passes_counted(30, 1.0, 0.99), "too little weight behind the successes");
        assert!(!gate.passes_counted(3, f64::NAN, 1.0));
        assert!(!gate.passes_counted(3, 1.0, f64::NAN));
        let lax =
            QualityGate { min_executions: 0, min_success_rate: 0.0, min_reporter_weight: 0.0, runs_per_reporter: 2 };
        assert!(!lax.passes_counted(0, 0.0, 0.0), "no success never passes");
    }

    #[test]
    fn one_reporter_gives_the_gate_at_most_two_runs() {
        let gate = QualityGate::default();
        assert_eq!((gate.counted(0), gate.counted(1), gate.counted(2), gate.counted(10)), (0, 1, 2, 2));
        assert!(gate.counted(u64::MAX) < gate.min_executions, "one reporter alone never passes");
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
        fn price_rises_with_quality_demand_and_reputation(i in inputs(), bump in 1u64..50, r in 0.0f64..0.5) {
            let cfg = PriceConfig::default();
            let base = price(&cfg, &i).usdc;
            let more_quality = PriceInputs { quality: (i.quality + r).min(1.0), ..i };
            let more_adopters = PriceInputs { adopters: i.adopters + r, ..i };
            let more_bounties = PriceInputs { bounty_matches: i.bounty_matches + bump, ..i };
            let more_rep = PriceInputs { reputation: (i.reputation + r).min(1.0), ..i };
            for bigger in [more_quality, more_adopters, more_bounties, more_rep] {
                prop_assert!(price(&cfg, &bigger).usdc >= base);
            }
        }

        #[test]
        fn extra_adopter_weight_moves_demand_by_at_most_its_log(i in inputs(), extra in 0.0f64..=0.2) {
            let cfg = PriceConfig::default();
            let more = PriceInputs { adopters: i.adopters + extra, ..i };
            let (before, after) = (price(&cfg, &i).demand, price(&cfg, &more).demand);
            prop_assert!(after >= before && after - before <= (1.0 + extra).ln() * cfg.demand_weight + 1e-12);
        }

        #[test]
        fn a_failure_never_makes_the_counted_gate_pass(successes in 0u64..10, rate in 0.0f64..=1.0, weight in 0.0f64..3.0, drop in 0.0f64..=1.0) {
            // A failure adds no success and no success weight, and lowers the rate.
            let gate = QualityGate::default();
            let after = gate.passes_counted(successes, rate * (1.0 - drop), weight);
            prop_assert!(!after || gate.passes_counted(successes, rate, weight));
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
