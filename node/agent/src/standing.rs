//! Whose reactions the agent stands behind (issue 38). A node signs an execution report with
//! its own attested key, so the report may rest only on reactions the agent can vouch for:
//! otherwise one person with a few Bluesky accounts, liking replies, launders the node's
//! weight into a skill's price. `[agent] outcome_from` says which reactions qualify; the rest
//! still count toward the agent's own reward and memory, never toward a report.

use druse_protocol::{UnixMillis, now_ms};

use super::core::Agent;
use crate::config::{self, OutcomeSource};

/// What the agent knows of the account that reacted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reactor {
    pub did: String,
    /// Its handle, when known (the allow list may name handles).
    pub handle: Option<String>,
    /// It is the owner's account.
    pub owner: bool,
    /// The agent follows it.
    pub followed: bool,
    /// When the account was created, as its profile says.
    pub created_at: Option<UnixMillis>,
}

/// Why the agent stands behind a reaction: the first of `outcome_from` the reactor meets, or
/// `None` when it meets none.
pub fn stands_behind(config: &config::Config, reactor: &Reactor, now: UnixMillis) -> Option<OutcomeSource> {
    let min_age = config.outcome_min_account_age.as_millis() as u64;
    config.outcome_from.iter().copied().find(|source| match source {
        OutcomeSource::Owner => reactor.owner,
        OutcomeSource::Follows => reactor.followed,
        OutcomeSource::AllowList => config.outcome_allow.iter().any(|a| names(a, reactor)),
        OutcomeSource::OlderThan => reactor.created_at.is_some_and(|at| at <= now && now - at >= min_age),
    })
}

/// Whether the reactor needs its profile read to decide (a follow or an age is asked for,
/// and neither the owner nor a DID on the allow list settles it).
pub fn needs_profile(config: &config::Config, did: &str, owner: bool) -> bool {
    let settled = (owner && config.outcome_from.contains(&OutcomeSource::Owner))
        || (config.outcome_from.contains(&OutcomeSource::AllowList) && config.outcome_allow.iter().any(|a| a == did));
    !settled
        && config
            .outcome_from
            .iter()
            .any(|s| matches!(s, OutcomeSource::Follows | OutcomeSource::OlderThan | OutcomeSource::AllowList))
}

/// Whether `entry` of a list (a DID, or a handle with or without its `@`) names the reactor.
fn names(entry: &str, reactor: &Reactor) -> bool {
    let entry = entry.trim().trim_start_matches('@');
    entry == reactor.did || reactor.handle.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(entry))
}

impl Agent {
    /// Whether the agent stands behind a reaction of account `did`: reads its profile only
    /// when `outcome_from` needs it; a profile it cannot read backs nothing.
    pub(crate) async fn stands_behind(&self, did: &str) -> bool {
        let owner = did == self.owner_did;
        let mut reactor = Reactor { did: did.to_owned(), owner, ..Reactor::default() };
        if needs_profile(&self.config, did, owner) {
            match self.bsky.standing(did).await {
                Ok(standing) => {
                    reactor.handle = Some(standing.handle);
                    reactor.followed = standing.followed;
                    reactor.created_at = standing.created_at;
                }
                Err(error) => tracing::debug!(%error, did, "could not read a reacting account's profile"),
            }
        }
        let why = stands_behind(&self.config, &reactor, now_ms());
        tracing::debug!(did, ?why, "whether the agent stands behind a reaction");
        why.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const DAY: u64 = 86_400_000;
    const NOW: u64 = 1_000 * DAY;

    fn stranger() -> Reactor {
        Reactor {
            did: "did:plc:stranger".into(),
            handle: Some("stranger.test".into()),
            created_at: Some(NOW - DAY),
            ..Reactor::default()
        }
    }

    #[test]
    fn by_default_only_the_owner_and_followed_accounts_back_a_report() {
        let config = config::Config::default();
        assert_eq!(config.outcome_from, vec![OutcomeSource::Owner, OutcomeSource::Follows]);
        assert_eq!(stands_behind(&config, &stranger(), NOW), None, "a fresh stranger's like backs nothing");
        let old = Reactor { created_at: Some(0), ..stranger() };
        assert_eq!(stands_behind(&config, &old, NOW), None, "age alone is not asked for by default");
        let owner = Reactor { owner: true, ..stranger() };
        assert_eq!(stands_behind(&config, &owner, NOW), Some(OutcomeSource::Owner));
        let followed = Reactor { followed: true, ..stranger() };
        assert_eq!(stands_behind(&config, &followed, NOW), Some(OutcomeSource::Follows));
    }

    #[test]
    fn the_allow_list_names_handles_or_dids_and_age_needs_its_threshold() {
        let config = config::Config {
            outcome_from: vec![OutcomeSource::AllowList, OutcomeSource::OlderThan],
            outcome_allow: vec!["@Friend.test".into(), "did:plc:pal".into()],
            outcome_min_account_age: Duration::from_secs(90 * 86_400),
            ..config::Config::default()
        };
        let friend = Reactor { handle: Some("friend.test".into()), ..stranger() };
        assert_eq!(stands_behind(&config, &friend, NOW), Some(OutcomeSource::AllowList));
        let pal = Reactor { did: "did:plc:pal".into(), handle: None, ..stranger() };
        assert_eq!(stands_behind(&config, &pal, NOW), Some(OutcomeSource::AllowList));
        assert_eq!(stands_behind(&config, &stranger(), NOW), None, "a day old, not listed");
        let young = Reactor { created_at: Some(NOW - 89 * DAY), ..stranger() };
        assert_eq!(stands_behind(&config, &young, NOW), None);
        let old = Reactor { created_at: Some(NOW - 90 * DAY), ..stranger() };
        assert_eq!(stands_behind(&config, &old, NOW), Some(OutcomeSource::OlderThan));
        let unknown_age = Reactor { created_at: None, ..stranger() };
        assert_eq!(stands_behind(&config, &unknown_age, NOW), None, "an age it cannot read is no age");
        let from_the_future = Reactor { created_at: Some(NOW + DAY), ..stranger() };
        assert_eq!(stands_behind(&config, &from_the_future, NOW), None);
        let owner = Reactor { owner: true, ..stranger() };
        assert_eq!(stands_behind(&config, &owner, NOW), None, "the owner too only when `owner` is listed");
    }

    #[test]
    fn an_empty_list_backs_no_report_and_reads_no_profile() {
        let config = config::Config { outcome_from: Vec::new(), ..config::Config::default() };
        assert_eq!(stands_behind(&config, &Reactor { owner: true, followed: true, ..stranger() }, NOW), None);
        assert!(!needs_profile(&config, "did:plc:x", true));
        let default = config::Config::default();
        assert!(!needs_profile(&default, "did:plc:owner", true), "the owner is settled without a lookup");
        assert!(needs_profile(&default, "did:plc:x", false), "a follow is read from the profile");
    }
}
