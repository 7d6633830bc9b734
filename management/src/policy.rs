//! The automatic endorsement policy (DESIGN §7, off by default): endorse a skill once it
//! passes the quality gate on the reports of vouched reporters other than its publisher that
//! adopted it (counted successes, at most two per reporter, and the success rate), with the
//! reporters that report a success weighing at least `min_independent_reporters` together (a
//! verified reporter weighs 1, a trusted one 0.75; see `druse_node::market`): the gate's own
//! rule with a higher weight. Fresh keys never count toward it.
//! It looks at a skill when its evidence changes, not on a timer.
//! A skill this node has already ruled on (endorsed, or revoked by hand) is left alone, and so
//! is a deprecated version.

use std::sync::Arc;

use druse_node::metrics::PolicyLabel;
use druse_protocol::ContentId;
use druse_protocol::body::EndorsementVerdict;
use tokio::sync::broadcast;

use crate::{Error, Management};

impl Management {
    /// One pass of the policy over every skill with market evidence: endorses each that
    /// qualifies now; returns their ids.
    pub async fn auto_endorse_pass(&self) -> Result<Vec<ContentId>, Error> {
        let ids = self.node().market().skills_with_evidence(|_| true)?;
        self.auto_endorse(ids).await
    }

    /// Endorses each of `ids` that qualifies now: not ruled on by this node, not deprecated,
    /// and past the gate on independent reports.
    async fn auto_endorse(&self, ids: Vec<ContentId>) -> Result<Vec<ContentId>, Error> {
        let policy = &self.config().endorsement;
        let gate = self.node().config().market.engine().gate;
        let me = self.node().key().public();
        let mut endorsed = Vec::new();
        for id in ids {
            let Some(skill) = self.node().skill(&id)? else { continue };
            if skill.deprecated || skill.endorsement.as_ref().is_some_and(|e| e.by == me) {
                continue;
            }
            // The policy has no reviewer: a skill with a high scanner finding waits for one.
            if druse_node::skill::folder::scan_listing(&skill.listing).refused() {
                continue;
            }
            let stats = self.node().market().stats(&id)?;
            let summary = self.node().market().summary(&skill, &stats);
            if !summary.passes_independently(&gate, policy.min_independent_reporters) {
                continue;
            }
            let (reporters, weight, successes) =
                (summary.counted_reporters, summary.success_weight, summary.gate_successes);
            let note = format!(
                "auto: passed the quality gate with {successes} counted successes from {reporters} \
                 independent reporters, {weight:.2} of vouched weight behind the successes"
            );
            self.sign_endorsement(id, EndorsementVerdict::Endorse, note, "auto").await?;
            tracing::info!(skill = %id, reporters, weight, successes, "auto-endorsed");
            endorsed.push(id);
        }
        Ok(endorsed)
    }

    /// Runs the policy when `management.endorsement.auto` is on: one pass over everything at
    /// start, then on the skills whose evidence changed (another full pass if it fell behind).
    /// The node owns the task. Returns whether it started.
    pub fn spawn_auto_endorse(self: &Arc<Self>) -> bool {
        if !self.config().endorsement.auto {
            return false;
        }
        let this = Arc::clone(self);
        let mut changes = self.node().market().evidence_changes();
        self.node().spawn_task("auto-endorse", async move {
            let mut pass = this.auto_endorse_pass().await;
            loop {
                if let Err(error) = pass {
                    tracing::warn!(%error, "automatic endorsement failed");
                }
                pass = match changes.recv().await {
                    Ok(ids) => this.auto_endorse(ids).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => this.auto_endorse_pass().await,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
            }
        });
        true
    }

    /// Counts an endorsement this node signed.
    pub(crate) fn count_endorsement(&self, policy: &'static str) {
        self.node().metrics().endorsements_issued.get_or_create(&PolicyLabel { policy }).inc();
    }
}
