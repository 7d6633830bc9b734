//! Pricing, pure: a skill's stats, the trust book's weight for each key, the publisher's
//! signed reputation and how many similar skills the node holds go in; the figures, the gate
//! and the price come out. Nothing here reads the store, the book or the vector index, so a
//! price can be worked out, and tested, from its inputs alone (`desk` gathers them).

use druse_protocol::PublicKey;

use super::{Config, Listing, PriceView, Stats, Summary, Weight, price};
use crate::skill::Skill;

/// A skill's price and what it rests on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quote {
    /// The stats, summed with each key's weight.
    pub summary: Summary,
    /// The skill passed the quality gate (below it, the price is 0).
    pub gate_passed: bool,
    pub price: PriceView,
}

/// Prices a skill published by `author` whose stats are `stats`: `weight` says how much a key
/// (its string form in the stats) counts, `reputation` is the publisher's signed reputation
/// and `similar` how many similar skills the node holds.
pub fn quote(
    config: &Config,
    author: &PublicKey,
    stats: &Stats,
    weight: impl Fn(&str) -> Weight,
    reputation: f64,
    similar: usize,
) -> Quote {
    let summary = stats.summary(config, author, weight);
    let gate_passed = summary.passes(&config.gate);
    let price = PriceView::new(&price(config, &summary, reputation, similar), similar, gate_passed);
    Quote { summary, gate_passed, price }
}

impl Quote {
    /// The listing of `skill` at this quote; `adopter` is this node's key.
    pub fn listing(self, skill: Skill, stats: Stats, adopter: &PublicKey) -> Listing {
        let asking_price = skill.listing.asking_price;
        Listing {
            asking_price,
            asking_supported: asking_price <= self.price.micros,
            computed_price: self.price,
            gate_passed: self.gate_passed,
            stats: self.summary,
            adopted: stats.adopters.contains_key(&adopter.to_string()),
            bounties_matched: stats.bounty_matches.into_iter().collect(),
            skill,
        }
    }
}

#[cfg(test)]
mod tests {
    use druse_protocol::body::TrustLevel;
    use druse_protocol::{ContentId, Keypair};

    use super::*;

    fn key(seed: u8) -> PublicKey {
        Keypair::from_seed([seed; 32]).public()
    }

    /// `adopters` each adopt and report `runs` (success, reward).
    fn stats(config: &Config, adopters: &[PublicKey], runs: &[(bool, f64)]) -> Stats {
        let skill = ContentId::of(b"skill");
        let mut stats = Stats::default();
        for adopter in adopters {
            stats.adoption(config, &skill, adopter, 0, |_| true);
            for (success, reward) in runs {
                stats.execution(config, &skill, adopter, *success, *reward, |_| true);
            }
        }
        stats
    }

    #[test]
    fn no_evidence_is_free_and_three_trusted_successes_price_a_skill() {
        let config = Config::default();
        let author = key(1);
        let trusted = |_: &str| config.weights.of_attested(TrustLevel::Trusted);
        let none = quote(&config, &author, &Stats::default(), trusted, 0.5, 0);
        assert!(!none.gate_passed);
        assert_eq!(none.price.micros, 0);

        let adopters = [key(2), key(3), key(4)];
        let priced = quote(&config, &author, &stats(&config, &adopters, &[(true, 0.8)]), trusted, 0.5, 0);
        assert!(priced.gate_passed, "{:?}", priced.summary);
        assert!(priced.price.micros > 0);
        assert_eq!(priced.summary.gate_successes, 3);
    }

    #[test]
    fn the_same_inputs_give_the_same_price_and_failures_and_similar_skills_only_lower_it() {
        let config = Config::default();
        let author = key(1);
        let trusted = |_: &str| config.weights.of_attested(TrustLevel::Trusted);
        let adopters = [key(2), key(3), key(4)];
        let good = stats(&config, &adopters, &[(true, 0.8)]);
        let first = quote(&config, &author, &good, trusted, 0.5, 0);
        assert_eq!(first, quote(&config, &author, &good, trusted, 0.5, 0));

        let mut mixed = good.clone();
        mixed.execution(&config, &ContentId::of(b"skill"), &adopters[0], false, 0.0, |_| true);
        let lower = quote(&config, &author, &mixed, trusted, 0.5, 0);
        assert!(lower.gate_passed && lower.price.micros < first.price.micros, "{lower:?} vs {first:?}");

        let crowded = quote(&config, &author, &good, trusted, 0.5, 20);
        assert!(crowded.price.micros < first.price.micros, "similar skills lower scarcity");
        assert_eq!(crowded.price.similar_skills, 20);
    }

    #[test]
    fn unvouched_keys_never_open_the_gate_whatever_they_report() {
        let config = Config::default();
        let author = key(1);
        let fresh: Vec<PublicKey> = (10..60).map(key).collect();
        let unvouched = |_: &str| config.weights.of_unattested(0);
        let q = quote(&config, &author, &stats(&config, &fresh, &[(true, 1.0)]), unvouched, 1.0, 0);
        assert!(!q.gate_passed);
        assert_eq!(q.price.micros, 0);
        assert!(q.summary.unvouched_weight <= config.weights.unvouched_cap + 1e-12);
    }
}
