//! The automatic endorsement policy (DESIGN §7, off by default): endorse a skill once it
//! passes the quality gate on the reports of at least N reporters other than its publisher.
//! A skill this node has already ruled on (endorsed, or revoked by hand) is left alone, and so
//! is a deprecated version.

use std::sync::Arc;

use druse_node::market::Stats;
use druse_node::metrics::PolicyLabel;
use druse_protocol::ContentId;
use druse_protocol::body::EndorsementVerdict;

use crate::{Error, Management};

impl Management {
    /// One pass of the policy: endorses every skill that qualifies now; returns their ids.
    pub async fn auto_endorse_pass(&self) -> Result<Vec<ContentId>, Error> {
        let policy = self.node().config().management.endorsement.clone();
        let gate = self.node().config().market.engine().gate;
        let me = self.node().key().public();
        let mut candidates = Vec::new();
        for entry in self.node().store().market.iter::<Stats>() {
            let (key, stats) = entry?;
            let Ok(digest) = <[u8; 32]>::try_from(key.as_slice()) else { continue };
            let id = ContentId::from_digest(digest);
            let Some(skill) = self.node().skill(&id)? else { continue };
            let ruled = skill.endorsement.as_ref().is_some_and(|e| e.by == me);
            if ruled || skill.deprecated {
                continue;
            }
            let summary = stats.summary(&skill.author);
            if summary.passes_independently(&gate, policy.min_independent_reporters) {
                candidates.push((id, summary.independent_reporters, summary.independent_executions));
            }
        }
        let mut endorsed = Vec::new();
        for (id, reporters, executions) in candidates {
            let note = format!(
                "auto: passed the quality gate with {executions} executions from {reporters} independent reporters"
            );
            self.sign_endorsement(id, EndorsementVerdict::Endorse, note, "auto").await?;
            tracing::info!(skill = %id, reporters, executions, "auto-endorsed");
            endorsed.push(id);
        }
        Ok(endorsed)
    }

    /// Runs the policy on its interval when `management.endorsement.auto` is on; the node owns
    /// the task. Returns whether it started.
    pub fn spawn_auto_endorse(self: &Arc<Self>) -> bool {
        let policy = self.node().config().management.endorsement.clone();
        if !policy.auto {
            return false;
        }
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(policy.interval.max(std::time::Duration::from_millis(100)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(error) = this.auto_endorse_pass().await {
                    tracing::warn!(%error, "automatic endorsement pass failed");
                }
            }
        });
        self.node().own_task(task);
        true
    }

    /// Counts an endorsement this node signed.
    pub(crate) fn count_endorsement(&self, policy: &'static str) {
        self.node().metrics().endorsements_issued.get_or_create(&PolicyLabel { policy }).inc();
    }
}
