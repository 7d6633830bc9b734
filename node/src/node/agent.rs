//! The node as its agent sees it: the port `druse_agent::node::Node`, which the agent crate
//! defines and the node implements, so the agent never names the node's types.

use druse_agent::node::{self as port, Adopted, Pending, SwarmSkill, Terms};
use druse_protocol::ContentId;
use druse_protocol::body::{Body, CrystalListing, ReportEvent};

use super::Node;
use crate::market::Listing;
use crate::skill::Provenance;

fn refused(error: super::Error) -> port::Error {
    match error {
        super::Error::PriceAboveMax { id, price, max } => port::Error::PriceAboveMax { id, price, max },
        super::Error::OverBudget { id, price, left } => port::Error::OverBudget { id, price, left },
        error => port::Error::Refused(error.to_string()),
    }
}

impl port::Node for Node {
    fn memory(&self) -> &druse_memory::Handle {
        Node::memory(self)
    }

    fn database(&self) -> &fjall::Database {
        self.store().database()
    }

    fn keyspace(&self, name: &str) -> Result<fjall::Keyspace, fjall::Error> {
        crate::store::open_table(self.store().database(), name)
    }

    fn spawn(&self, name: &'static str, task: Pending<'static, ()>) {
        self.spawn_to_end(name, task);
    }

    fn stopped(&self) -> Pending<'static, ()> {
        Box::pin(self.stopping().clone().cancelled_owned())
    }

    fn skill(&self, id: ContentId) -> Pending<'_, Result<SwarmSkill, port::Error>> {
        Box::pin(async move { Ok(swarm_skill(self.market().listing_for_tick(id).await.map_err(refused)?)) })
    }

    fn adopt(&self, id: ContentId, terms: Terms) -> Pending<'_, Result<Adopted, port::Error>> {
        Box::pin(async move {
            let terms = crate::market::desk::Terms { max_price: terms.max_price, daily_budget: terms.daily_budget };
            let adoption = self.market().adopt_for_tick(id, terms).await.map_err(refused)?;
            Ok(Adopted {
                paid: adoption.settlement.paid,
                balance: adoption.balance,
                spent_today: adoption.spent_today,
                skill: swarm_skill(*adoption.listing),
            })
        })
    }

    fn spent_today(&self) -> u64 {
        self.market().spent_today().unwrap_or_else(|error| {
            tracing::warn!(%error, "could not read today's spending on skills");
            0
        })
    }

    fn report(&self, id: ContentId, event: ReportEvent) -> Pending<'_, Result<ContentId, port::Error>> {
        Box::pin(async move { self.market().report(id, event).await.map_err(refused) })
    }

    fn publish(&self, listing: CrystalListing) -> Pending<'_, Result<ContentId, port::Error>> {
        Box::pin(async move { Node::publish(self, &Body::Crystal(listing)).await.map_err(refused) })
    }
}

/// A listing as the agent sees it: the price is what adopting it would pay.
fn swarm_skill(listing: Listing) -> SwarmSkill {
    SwarmSkill {
        id: listing.skill.id,
        price: crate::market::settle(listing.asking_price, listing.computed_price.micros).paid,
        reputation: listing.computed_price.reputation,
        own: listing.skill.origin == Provenance::Local,
        adopted: listing.adopted,
        deprecated: listing.skill.deprecated,
        deprecated_by: listing.skill.deprecated_by,
        verified: listing.skill.is_verified,
        publisher: listing.skill.author_peer,
        name: listing.skill.listing.name,
        text: listing.skill.listing.text,
    }
}
