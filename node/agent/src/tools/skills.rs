//! The tools of the skill market: search the swarm's skills, use one (adopting it within the
//! owner's budget and approval, `swarm.rs`), and propose publishing one of the agent's own.

use serde::Deserialize;

use super::{CrystalArg, Hands, QueryArg, Room, ToolError, args};
use crate::llm::ToolCall;
use crate::rules::Gated;
use crate::swarm::{self, Used};

#[derive(Deserialize)]
struct SkillArg {
    skill: String,
}

impl Hands {
    pub(super) async fn search_skills(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: QueryArg = args(call)?;
        let lines = self.agent.swarm_skills(&a.query, 10).await;
        Ok(if lines.is_empty() {
            "no skill matches".into()
        } else {
            crate::context::skills_block(&lines, &Default::default())
        })
    }

    /// A swarm skill's procedure, adopted if need be, or the agent's own skill's.
    pub(super) async fn use_skill(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: SkillArg = args(call)?;
        // A local conversation posts no approval request: it says one is needed.
        let lead = (self.room != Room::Chat).then(|| self.lead());
        match self.agent.use_skill(&a.skill, lead).await {
            Ok(Used::Procedure { skill, paid }) => {
                if !skill.own {
                    self.used_skill = Some(skill.id.to_string());
                }
                Ok(swarm::procedure(&skill, paid))
            }
            Ok(Used::Own { crystal, text }) => Ok(swarm::framed(&format!("your own skill, crystal {crystal}"), &text)),
            Ok(Used::AskedOwner(asked)) => {
                Ok(format!("{asked}. Its price is above what you may spend alone; answer without it for now."))
            }
            Ok(Used::NeedsApproval { price }) => Ok(format!(
                "not adopted: it costs {price} micro-USDC, above what you may spend without the owner's approval, and \
                 this conversation posts no approval request. Tell the operator the owner's approval is needed \
                 (`druse-node skill adopt {} --max-price {price}` adopts it at that price); answer without it.",
                a.skill.trim()
            )),
            Err(e) => Err(ToolError::Refused(format!("{e}"))),
        }
    }

    pub(super) async fn publish_skill(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: CrystalArg = args(call)?;
        let (_, skill) = self.agent.publishable(a.crystal).await.map_err(ToolError::refused)?;
        let name = skill.name;
        self.ask(Gated::PublishSkill { crystal: a.crystal, name }).await
    }
}
