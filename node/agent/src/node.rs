//! What the agent asks of the node it runs in, and nothing more: its memory, a keyspace of
//! the node's store for the agent's own state, a task the node owns, and the market (a swarm
//! skill as the node prices it, an adoption, a signed execution report, a published skill).
//!
//! The agent defines this port and the node implements it (in `druse-node`'s `node/agent.rs`),
//! so the agent never names the node's types and the node's core knows nothing of the agent.

use std::future::Future;
use std::pin::Pin;

use druse_protocol::ContentId;
use druse_protocol::body::{CrystalListing, ReportEvent};

/// A future the node answers, boxed so the port can be a trait object.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why the node refused or could not do what the agent asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An adoption would settle at `price`, above the `max` agreed.
    #[error("adopting skill {id} costs {price} micro-USDC now, above the {max} agreed")]
    PriceAboveMax { id: ContentId, price: u64, max: u64 },
    /// An adoption would take the day's spending past the budget it was given: `left` is what
    /// the budget still allows.
    #[error("adopting skill {id} costs {price} micro-USDC, over what is left of today's budget ({left} micro-USDC)")]
    OverBudget { id: ContentId, price: u64, left: u64 },
    /// Anything else, in the node's words.
    #[error("{0}")]
    Refused(String),
}

/// One swarm skill as the node sees and prices it.
#[derive(Debug, Clone, PartialEq)]
pub struct SwarmSkill {
    /// The listing's content id: what `use_skill` takes.
    pub id: ContentId,
    pub name: String,
    /// The procedure.
    pub text: String,
    /// This node published it.
    pub own: bool,
    /// This node adopted it already.
    pub adopted: bool,
    /// A newer version replaces it.
    pub deprecated: bool,
    /// The newer version, when the node knows it.
    pub deprecated_by: Option<ContentId>,
    /// The publishing node's PeerId.
    pub publisher: String,
    /// A management key endorsed it.
    pub verified: bool,
    /// What adopting it costs this node now, in micro-USDC: the asking price when the node's
    /// own computation supports it, else the computed price (0 below the quality gate).
    pub price: u64,
    /// The publisher's reputation from signed evidence.
    pub reputation: f64,
}

/// What an adoption may pay: the node checks both in the same step that debits its ledger,
/// so the agent reserves nothing ahead and gives nothing back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Terms {
    /// Never more than this (the price the agent read, or the owner approved).
    pub max_price: Option<u64>,
    /// The owner's daily budget: the adoption counts toward the UTC day's spending and is
    /// refused ([`Error::OverBudget`]) if it would pass it; `u64::MAX` counts without a limit
    /// (an adoption the owner approved).
    pub daily_budget: Option<u64>,
}

/// What an adoption paid.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    /// Micro-USDC.
    pub paid: u64,
    /// The ledger's balance after it.
    pub balance: i128,
    /// What the day's budgeted adoptions have spent with this one, in micro-USDC.
    pub spent_today: u64,
    /// The skill, adopted now.
    pub skill: SwarmSkill,
}

/// The node, as the agent uses it.
pub trait Node: Send + Sync + std::fmt::Debug + 'static {
    /// The node's memory engine (its calls block: run them off the async threads).
    fn memory(&self) -> &druse_memory::Handle;

    /// The node's store, whose batches the agent's state and journal commit in.
    fn database(&self) -> &fjall::Database;

    /// A keyspace of the node's store (opened or created), for the agent's state and its
    /// journal.
    fn keyspace(&self, name: &str) -> Result<fjall::Keyspace, fjall::Error>;

    /// Runs `task` until it ends; the node owns it, and when it stops waits a bounded time for
    /// it to end, so the task must end soon after [`Node::stopped`] resolves (cancelling and
    /// awaiting what it started).
    fn spawn(&self, name: &'static str, task: Pending<'static, ()>);

    /// Resolves when the node begins to stop.
    fn stopped(&self) -> Pending<'static, ()>;

    /// Swarm skill `id`, priced as the node computes it (once per maintenance tick: a second
    /// read, or an adoption, within the tick uses the same price).
    fn skill(&self, id: ContentId) -> Pending<'_, Result<SwarmSkill, Error>>;

    /// Adopts skill `id` in one step: pays what the node's computation supports from its
    /// ledger, within `terms` ([`Error::PriceAboveMax`], [`Error::OverBudget`]), and signs an
    /// adoption report.
    fn adopt(&self, id: ContentId, terms: Terms) -> Pending<'_, Result<Adopted, Error>>;

    /// What the owner's budgeted adoptions spent today (the UTC day), in micro-USDC.
    fn spent_today(&self) -> u64;

    /// Signs and publishes a report about skill `id`; answers the report's content id.
    fn report(&self, id: ContentId, event: ReportEvent) -> Pending<'_, Result<ContentId, Error>>;

    /// Signs and publishes a skill listing; answers its content id.
    fn publish(&self, listing: CrystalListing) -> Pending<'_, Result<ContentId, Error>>;
}
