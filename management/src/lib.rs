//! The management role of a druse node.
//!
//! A management node is an ordinary node (the `druse-node` library) whose key is on every
//! node's trust list. This crate adds what only it does: sign endorsements, cortisol weather,
//! bounties, bans and attestations with a persisted, strictly rising `seq`; re-announce
//! active weather so late joiners obey it; raise weather by itself when its anomaly detector
//! sees a burst; take a census of the peers it knows; and serve the routes the `druse-mgmt` CLI
//! drives.

pub mod anomaly;
pub mod api;
pub mod census;
pub mod config;
mod detector;
mod policy;

use std::time::Duration;

use druse_node::node;
use druse_node::skill::Skill;
use druse_node::skill::folder::Located;
use druse_node::{Node, Role};
use druse_protocol::body::{Attest, Ban, Body, Bounty, Endorsement, EndorsementVerdict, TrustLevel, Weather, limits};
use druse_protocol::now_ms;
use druse_protocol::scan::Severity;
use druse_protocol::{ContentId, PublicKey};
use tokio::sync::Mutex;

/// The state record holding the last seq this node signed.
const SEQ_KEY: &str = "management_seq";

/// Why a management action failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("this node has no skill {0}; it can only endorse what it has received")]
    UnknownSkill(ContentId),
    #[error("{0}")]
    Invalid(String),
    /// A high scanner finding refused an endorsement.
    #[error("{0}")]
    Findings(String),
    #[error(transparent)]
    Node(Box<node::Error>),
    #[error(transparent)]
    Store(#[from] druse_node::store::Error),
    #[error(transparent)]
    Task(#[from] druse_node::task::Failed),
}

/// The management role, on top of a running node.
#[derive(Debug)]
pub struct Management {
    node: Node,
    /// The role's own config (`[management]`).
    config: config::Config,
    /// The last seq signed; held across the flush so no seq is ever used twice.
    seq: Mutex<u64>,
    /// The anomaly detector, once asked to start (`None` inside when the config turns it off).
    anomaly: std::sync::OnceLock<Option<std::sync::Arc<detector::Watch>>>,
}

impl Management {
    /// Takes the management role on `node` (which must run as `Role::Management`), with the
    /// role's `config` (read with [`config::Config::from_node`]).
    pub fn new(node: Node, config: config::Config) -> Result<std::sync::Arc<Self>, Error> {
        if node.role() != Role::Management {
            return Err(Error::Invalid("the node was not started in the management role".into()));
        }
        let seq = node.store().state::<u64>(SEQ_KEY)?.unwrap_or(0);
        Ok(std::sync::Arc::new(Self { node, config, seq: Mutex::new(seq), anomaly: std::sync::OnceLock::new() }))
    }

    /// The node this role runs on.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The role's config.
    pub fn config(&self) -> &config::Config {
        &self.config
    }

    /// The last seq this node signed.
    pub async fn last_seq(&self) -> u64 {
        *self.seq.lock().await
    }

    /// Allocates the next seq and makes it durable before anyone sees it.
    async fn next_seq(&self) -> Result<u64, Error> {
        let mut seq = self.seq.lock().await;
        let next = *seq + 1;
        let store = self.node.store().clone();
        druse_node::task::blocking(move || {
            store.put_state(SEQ_KEY, &next)?;
            store.flush_blocking()
        })
        .await??;
        *seq = next;
        Ok(next)
    }

    /// Endorses (or revokes) a skill this node holds, by hand; an endorsement of a skill the
    /// scanner finds something high in is refused ([`Management::endorse_reviewed`]).
    pub async fn endorse(&self, id: ContentId, verdict: EndorsementVerdict, note: String) -> Result<ContentId, Error> {
        Ok(self.endorse_reviewed(id, verdict, note, false).await?.0)
    }

    /// Endorses (or revokes) a skill by hand after the reviewer saw what the skill scanner
    /// finds in it, answered beside the endorsement. A high finding refuses the endorsement
    /// unless `despite_findings`; a revocation is never refused.
    pub async fn endorse_reviewed(
        &self,
        id: ContentId,
        verdict: EndorsementVerdict,
        note: String,
        despite_findings: bool,
    ) -> Result<(ContentId, Vec<Located>), Error> {
        let findings = self.findings(id).await?;
        if verdict == EndorsementVerdict::Endorse
            && !despite_findings
            && let Some(high) = findings.iter().find(|f| f.finding.severity == Severity::High)
        {
            return Err(Error::Findings(format!(
                "skill {id} has a high scanner finding ({high}); endorse it despite the findings to go on"
            )));
        }
        Ok((self.sign_endorsement(id, verdict, note, "manual").await?, findings))
    }

    /// What the skill scanner finds in a skill this node holds, each with its file and line.
    pub async fn findings(&self, id: ContentId) -> Result<Vec<Located>, Error> {
        let node = self.node.clone();
        let skill: Skill = druse_node::task::blocking(move || node.skill(&id).map_err(Error::from))
            .await??
            .ok_or(Error::UnknownSkill(id))?;
        Ok(druse_node::skill::folder::findings(&skill.listing))
    }

    /// Signs and publishes an endorsement or revocation, counted under `policy`.
    async fn sign_endorsement(
        &self,
        id: ContentId,
        verdict: EndorsementVerdict,
        note: String,
        policy: &'static str,
    ) -> Result<ContentId, Error> {
        let node = self.node.clone();
        let skill: Skill = druse_node::task::blocking(move || node.skill(&id).map_err(Error::from))
            .await??
            .ok_or(Error::UnknownSkill(id))?;
        let seq = self.next_seq().await?;
        let body = Body::Endorsement(Endorsement {
            issued_at: now_ms(),
            seq,
            content_id: id,
            skill_id: skill.listing.skill_id,
            version: skill.listing.version,
            verdict,
            note,
        });
        let id = self.node.publish(&body).await?;
        if verdict == EndorsementVerdict::Endorse {
            self.count_endorsement(policy);
        }
        Ok(id)
    }

    /// Broadcasts cortisol weather; a level of 0 lifts it.
    pub async fn weather(&self, level: f64, duration: Duration, reason: String) -> Result<ContentId, Error> {
        let duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        if duration_ms > limits::WEATHER_DURATION_MS {
            return Err(Error::Invalid("weather lasts at most 7 days".into()));
        }
        let seq = self.next_seq().await?;
        let body = Body::Weather(Weather { issued_at: now_ms(), seq, level, duration_ms, reason });
        Ok(self.node.publish(&body).await?)
    }

    /// Bans a peer until `duration` has passed.
    pub async fn ban(&self, peer: PublicKey, reason: String, duration: Duration) -> Result<ContentId, Error> {
        let seq = self.next_seq().await?;
        let issued_at = now_ms();
        let body = Body::Ban(Ban { issued_at, seq, peer, reason, expires_at: expiry(issued_at, duration) });
        Ok(self.node.publish(&body).await?)
    }

    /// Sets a peer's trust level until `duration` has passed.
    pub async fn attest(
        &self,
        peer: PublicKey,
        level: TrustLevel,
        reason: String,
        duration: Duration,
    ) -> Result<ContentId, Error> {
        let seq = self.next_seq().await?;
        let issued_at = now_ms();
        let body =
            Body::Attest(Attest { issued_at, seq, peer, level, reason, expires_at: expiry(issued_at, duration) });
        Ok(self.node.publish(&body).await?)
    }

    /// Posts a bounty.
    pub async fn bounty(&self, mut bounty: Bounty) -> Result<ContentId, Error> {
        bounty.seq = self.next_seq().await?;
        Ok(self.node.publish(&Body::Bounty(bounty)).await?)
    }

    /// Broadcasts this node's active weather again, the very message it signed (same seq,
    /// same issue time), so a node that missed it obeys it too, and weather from another
    /// management key that is newer stays newer everywhere.
    pub async fn reannounce_weather(&self) -> Result<Option<ContentId>, Error> {
        if self.node.weather().active.filter(|w| w.signer == self.node.key().public()).is_none() {
            return Ok(None);
        }
        Ok(self.node.republish_weather().await?)
    }

    /// The running anomaly detector, if any ([`anomaly::spawn`] starts it).
    pub fn anomaly(&self) -> Option<&std::sync::Arc<detector::Watch>> {
        self.anomaly.get().and_then(Option::as_ref)
    }

    /// Where [`anomaly::spawn`] keeps the detector it starts.
    pub(crate) fn anomaly_slot(&self) -> &std::sync::OnceLock<Option<std::sync::Arc<detector::Watch>>> {
        &self.anomaly
    }

    /// Starts the periodic weather re-announcement; the node owns the task.
    pub fn spawn_reannounce(self: &std::sync::Arc<Self>, every: Duration) {
        let this = std::sync::Arc::clone(self);
        self.node.spawn_task("reannounce", async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                match this.reannounce_weather().await {
                    Ok(Some(id)) => tracing::debug!(%id, "weather re-announced"),
                    Ok(None) => {}
                    Err(error) => tracing::warn!(%error, "re-announcing weather failed"),
                }
            }
        });
    }
}

impl From<node::Error> for Error {
    fn from(error: node::Error) -> Self {
        Error::Node(Box::new(error))
    }
}

fn expiry(issued_at: u64, duration: Duration) -> u64 {
    issued_at.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}
