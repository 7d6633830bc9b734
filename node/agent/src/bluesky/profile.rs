//! What the network shows of an account the agent meets for the first time (seed 002's
//! `[FIRST INTERACTION WITH @x]`): its public profile and its latest posts, read through the
//! AppView as any viewer would.

use std::str::FromStr;

use atrium_api::app::bsky;
use atrium_api::types::LimitedNonZeroU8;
use atrium_api::types::string::AtIdentifier;

use super::{Bluesky, Error, capped, str_at, xrpc};

/// An account's public face.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    pub handle: String,
    pub display_name: String,
    pub description: String,
    pub followers: i64,
    pub posts: i64,
    /// Its latest posts (not reposts), newest first.
    pub recent: Vec<String>,
}

/// What decides whether the agent stands behind an account's reactions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    pub handle: String,
    /// The agent follows it.
    pub followed: bool,
    /// When the account was created (Unix ms), as its profile says.
    pub created_at: Option<u64>,
}

impl Bluesky {
    /// `actor` (a DID or handle) as the AppView shows it to the agent.
    async fn profile_view(&self, actor: &str) -> Result<(AtIdentifier, bsky::actor::defs::ProfileViewDetailed), Error> {
        let actor = AtIdentifier::from_str(actor).map_err(|e| Error::Invalid(format!("{actor}: {e}")))?;
        let profile = self
            .agent
            .api
            .app
            .bsky
            .actor
            .get_profile(bsky::actor::get_profile::ParametersData { actor: actor.clone() }.into())
            .await
            .map_err(xrpc)?;
        Ok((actor, profile))
    }

    /// Whether the account `did` blocks the agent.
    pub async fn blocks_me(&self, did: &str) -> Result<bool, Error> {
        let (_, profile) = self.profile_view(did).await?;
        Ok(profile.data.viewer.as_ref().and_then(|v| v.blocked_by).unwrap_or(false))
    }

    /// Whether the agent follows `did`, and how old the account is.
    pub async fn standing(&self, did: &str) -> Result<Standing, Error> {
        let (_, profile) = self.profile_view(did).await?;
        let p = profile.data;
        Ok(Standing {
            handle: p.handle.as_str().to_owned(),
            followed: p.viewer.as_ref().is_some_and(|v| v.following.is_some()),
            created_at: p.created_at.as_ref().and_then(|at| u64::try_from(at.as_ref().timestamp_millis()).ok()),
        })
    }

    /// The profile of `actor` (a DID or handle) and its latest `posts` posts.
    pub async fn profile(&self, actor: &str, posts: u8) -> Result<Profile, Error> {
        let (actor, profile) = self.profile_view(actor).await?;
        let limit =
            LimitedNonZeroU8::<100>::try_from(posts.clamp(1, 100)).map_err(|e| Error::Invalid(e.to_string()))?;
        let feed = self
            .agent
            .api
            .app
            .bsky
            .feed
            .get_author_feed(
                bsky::feed::get_author_feed::ParametersData {
                    actor,
                    cursor: None,
                    filter: Some("posts_no_replies".into()),
                    include_pins: None,
                    limit: Some(limit),
                }
                .into(),
            )
            .await
            .map_err(xrpc)?;
        let recent = feed
            .data
            .feed
            .iter()
            .filter(|item| item.reason.is_none())
            .filter_map(|item| serde_json::to_value(&item.post).ok())
            .map(|post| capped(str_at(&post, &["record", "text"])))
            .filter(|text| !text.trim().is_empty())
            .collect();
        let p = profile.data;
        Ok(Profile {
            handle: p.handle.as_str().to_owned(),
            display_name: capped(p.display_name.unwrap_or_default()),
            description: capped(p.description.unwrap_or_default()),
            followers: p.followers_count.unwrap_or(0),
            posts: p.posts_count.unwrap_or(0),
            recent,
        })
    }
}
