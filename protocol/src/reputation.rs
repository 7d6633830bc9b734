//! Peer reputation (DESIGN §7): a number in [0, 1] that live outcomes move, and the trust
//! level it maps to.

use crate::body::TrustLevel;

/// Where a peer nobody knows starts.
pub const INITIAL: f64 = 0.5;

/// The reputation thresholds; `Default` holds DESIGN §7's numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub verified: f64,
    pub trusted: f64,
    pub provisional: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self { verified: 0.85, trusted: 0.6, provisional: 0.3 }
    }
}

impl Thresholds {
    /// The trust level a reputation earns: ≥ 0.85 verified, ≥ 0.6 trusted, ≥ 0.3 provisional.
    pub fn level(&self, reputation: f64) -> TrustLevel {
        if reputation >= self.verified {
            TrustLevel::Verified
        } else if reputation >= self.trusted {
            TrustLevel::Trusted
        } else if reputation >= self.provisional {
            TrustLevel::Provisional
        } else {
            TrustLevel::Untrusted
        }
    }
}

/// What a node has observed of one peer; the reputation is computed from it, never stored.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Evidence {
    /// Messages from the peer this node accepted.
    pub accepted: u64,
    /// Messages from the peer this node rejected as provably bad.
    pub rejected: u64,
    /// The peer's skills a management node endorsed.
    pub endorsed_skills: u64,
    /// Execution reports about the peer's skills, from others, that succeeded, each counted by
    /// the weight the node gives its reporter (so a fraction of a report is possible).
    pub report_successes: f64,
    /// Execution reports about the peer's skills, from others, that failed, weighed the same.
    pub report_failures: f64,
    /// How long this node has known the peer, in days.
    pub age_days: f64,
}

/// Reputation from evidence, in [0, 1], starting at 0.5.
///
/// Each kind of evidence moves the score through a saturating curve, so no one kind can carry
/// a peer to the top alone. Provably bad messages weigh heaviest, so a peer that keeps sending
/// them falls to `untrusted` however much else it did:
/// - accepted messages: +0.15 × tanh(accepted / 50)
/// - rejected messages: −0.5 × (1 − e^(−rejected / 10))
/// - endorsements: +0.2 × (1 − e^(−endorsed / 2))
/// - reports: ±0.15 × tanh((successes − failures) / 10)
/// - age: +0.05 × (1 − e^(−days / 30))
pub fn score(e: &Evidence) -> f64 {
    let messages = 0.15 * (e.accepted as f64 / 50.0).tanh() - 0.5 * (1.0 - (-(e.rejected as f64) / 10.0).exp());
    let endorsements = 0.2 * (1.0 - (-(e.endorsed_skills as f64) / 2.0).exp());
    let reports = (e.report_successes - e.report_failures) / 10.0;
    let reports = if reports.is_finite() { 0.15 * reports.tanh() } else { 0.0 };
    let age = 0.05 * (1.0 - (-e.age_days.max(0.0) / 30.0).exp());
    (INITIAL + messages + endorsements + reports + age).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn thresholds_map_reputation_to_levels() {
        let t = Thresholds::default();
        assert_eq!(t.level(0.85), TrustLevel::Verified);
        assert_eq!(t.level(0.849), TrustLevel::Trusted);
        assert_eq!(t.level(0.6), TrustLevel::Trusted);
        assert_eq!(t.level(0.599), TrustLevel::Provisional);
        assert_eq!(t.level(0.3), TrustLevel::Provisional);
        assert_eq!(t.level(0.299), TrustLevel::Untrusted);
        assert_eq!(t.level(0.0), TrustLevel::Untrusted);
    }

    #[test]
    fn a_new_peer_is_provisional() {
        assert_eq!(score(&Evidence::default()), INITIAL);
        assert_eq!(Thresholds::default().level(INITIAL), TrustLevel::Provisional);
    }

    #[test]
    fn repeated_rejections_make_a_peer_untrusted() {
        let e = Evidence { accepted: 1000, rejected: 30, endorsed_skills: 1, ..Default::default() };
        assert_eq!(Thresholds::default().level(score(&e)), TrustLevel::Untrusted);
    }

    #[test]
    fn endorsed_skills_and_good_reports_make_a_peer_trusted() {
        let e = Evidence { accepted: 40, endorsed_skills: 2, report_successes: 10.0, ..Default::default() };
        assert!(Thresholds::default().level(score(&e)) >= TrustLevel::Trusted, "{}", score(&e));
    }

    proptest! {
        #[test]
        fn score_stays_in_unit_interval(a in 0u64..10_000, r in 0u64..10_000, en in 0u64..100, s in 0.0f64..1000.0, f in 0.0f64..1000.0, d in 0.0f64..1000.0) {
            let e = Evidence { accepted: a, rejected: r, endorsed_skills: en, report_successes: s, report_failures: f, age_days: d };
            let x = score(&e);
            prop_assert!((0.0..=1.0).contains(&x));
        }

        #[test]
        fn more_rejections_never_raise_the_score(a in 0u64..1000, r in 0u64..1000, more in 1u64..100) {
            let e = Evidence { accepted: a, rejected: r, ..Default::default() };
            let worse = Evidence { rejected: r + more, ..e };
            prop_assert!(score(&worse) <= score(&e));
        }
    }
}
