//! `POST /v1/skills/{id}/adopt`: an adoption under the owner's rules, the same rules the
//! agent's adoptions follow (`[agent] skill_budget_per_day` and `skill_approval_above`).
//!
//! Every adoption through the API counts toward the UTC day's spending on skills, which the
//! desk keeps in the ledger and shares with the agent. Two kinds:
//! - **under the rules** (MCP's `skill_adopt`, or any caller without `approved_price`): a price
//!   above `skill_approval_above` is refused with `needs_approval` (naming the price and the
//!   owner's command), and one past what is left of the day's budget with `over_budget`;
//!   `max_price` lowers the most it pays further;
//! - **the owner's** (`?approved_price=N`, which `druse-node skill adopt ID --max-price N`
//!   sends): pays at most N whatever the threshold and the budget, as an approval given to the
//!   agent does.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use druse_protocol::ContentId;
use druse_protocol::api::Code;
use serde::{Deserialize, Serialize};

use super::{Error, parse_id};
use crate::market::desk::{Adoption, Terms};
use crate::node::{self, Node};

/// The query of `POST /v1/skills/{id}/adopt`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdoptQuery {
    /// Under the owner's rules, pay at most this (micro-USDC): above it, 409 with the new price.
    #[serde(default)]
    pub max_price: Option<u64>,
    /// The owner's own adoption: pay at most this, past the approval threshold and the budget.
    #[serde(default)]
    pub approved_price: Option<u64>,
}

/// The owner's rules for adoptions, from `[agent]` in the node's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rules {
    /// What adoptions may spend in one UTC day, in micro-USDC.
    pub budget_per_day: u64,
    /// Above this price an adoption needs the owner.
    pub approval_above: u64,
}

impl Rules {
    /// The rules the node's config sets.
    pub fn of(node: &Node) -> Self {
        let agent = &node.config().agent;
        Self { budget_per_day: agent.skill_budget_per_day, approval_above: agent.skill_approval_above }
    }
}

/// What an adoption through the API did: the desk's answer, what it paid, and the day's
/// budget after it.
#[derive(Debug, Serialize)]
pub struct Adopted {
    #[serde(flatten)]
    pub adoption: Adoption,
    /// What was paid, in micro-USDC.
    pub paid: u64,
    /// Whether the owner approved the price (`approved_price`) rather than the rules.
    pub approved: bool,
    pub budget: Budget,
}

/// The day's budget as an adoption leaves it.
#[derive(Debug, Serialize)]
pub struct Budget {
    pub per_day: u64,
    /// What adoptions spent this UTC day, this one included.
    pub spent_today: u64,
    /// What is left of the day's budget.
    pub left_today: u64,
    pub approval_above: u64,
}

/// The owner's command that adopts `id` at `price`.
pub fn owner_command(id: ContentId, price: u64) -> String {
    format!("druse-node skill adopt {id} --max-price {price}")
}

/// Adopts `id` under `rules`, or as the owner approved (see the module doc).
pub async fn adopt(node: &Node, id: ContentId, query: &AdoptQuery, rules: Rules) -> Result<Adopted, Error> {
    let terms = match (query.approved_price, query.max_price) {
        (Some(_), Some(_)) => {
            return Err(Error::bad_request(
                "max_price and approved_price do not go together: approved_price is the owner's own adoption",
            ));
        }
        (Some(approved), None) => Terms { max_price: Some(approved), daily_budget: Some(u64::MAX) },
        (None, max) => Terms {
            max_price: Some(max.map_or(rules.approval_above, |max| max.min(rules.approval_above))),
            daily_budget: Some(rules.budget_per_day),
        },
    };
    let adoption = match node.market().adopt_with(id, terms).await {
        Ok(adoption) => adoption,
        Err(node::Error::PriceAboveMax { price, .. })
            if query.approved_price.is_none() && price > rules.approval_above =>
        {
            return Err(Error::new(
                Code::NeedsApproval,
                format!(
                    "adopting skill {id} costs {price} micro-USDC, above the owner's approval threshold of {} \
                     ([agent] skill_approval_above); nothing was paid. The owner adopts it with `{}`",
                    rules.approval_above,
                    owner_command(id, price)
                ),
            ));
        }
        Err(node::Error::OverBudget { price, left, .. }) => {
            return Err(Error::new(
                Code::OverBudget,
                format!(
                    "adopting skill {id} costs {price} micro-USDC; {left} of today's {} are left \
                     ([agent] skill_budget_per_day, the UTC day); nothing was paid. The owner adopts it with `{}`",
                    rules.budget_per_day,
                    owner_command(id, price)
                ),
            ));
        }
        Err(error) => return Err(error.into()),
    };
    let paid = adoption.settlement.paid;
    let spent_today = adoption.spent_today;
    Ok(Adopted {
        paid,
        approved: query.approved_price.is_some(),
        budget: Budget {
            per_day: rules.budget_per_day,
            spent_today,
            left_today: rules.budget_per_day.saturating_sub(spent_today),
            approval_above: rules.approval_above,
        },
        adoption,
    })
}

/// The adopt route, behind the token; the daemon merges it with the core API's.
pub fn routes(node: &Node) -> Router {
    let writes = Router::new().route("/v1/skills/{id}/adopt", post(adopt_skill));
    super::require_token(writes, node.token()).with_state(node.clone())
}

/// `POST /v1/skills/{id}/adopt[?max_price=N | ?approved_price=N]`.
async fn adopt_skill(
    State(node): State<Node>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<AdoptQuery>, QueryRejection>,
) -> Result<(StatusCode, Json<Adopted>), Error> {
    let Path(id) = id?;
    let Query(query) = query.map_err(|e| Error::bad_request(e.body_text()))?;
    let rules = Rules::of(&node);
    Ok((StatusCode::CREATED, Json(adopt(&node, parse_id(&id)?, &query, rules).await?)))
}
