//! The node as its agent sees it: the port `druse_agent::node::Node`, which the agent crate
//! defines and the node implements, so the agent never names the node's types.

use std::sync::Arc;

use druse_agent::node::{self as port, Adopted, Pending, SwarmSkill};
use druse_protocol::ContentId;
use druse_protocol::body::{Body, CrystalListing, ReportEvent};

use super::Node;
use crate::skill::Provenance;

fn refused(error: super::Error) -> port::Error {
    match error {
        super::Error::PriceAboveMax { id, price, max } => port::Error::PriceAboveMax { id, price, max },
        error => port::Error::Refused(error.to_string()),
    }
}

impl port::Node for Node {
    fn memory(&self) -> &Arc<druse_memory::Memory> {
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
        Box::pin(async move {
            let listing = self.listing(id).await.map_err(refused)?;
            Ok(SwarmSkill {
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
            })
        })
    }

    fn adopt(&self, id: ContentId, max_price: Option<u64>) -> Pending<'_, Result<Adopted, port::Error>> {
        Box::pin(async move {
            let adoption = self.adopt_at_most(id, max_price).await.map_err(refused)?;
            Ok(Adopted { paid: adoption.settlement.paid, balance: adoption.balance })
        })
    }

    fn report(&self, id: ContentId, event: ReportEvent) -> Pending<'_, Result<ContentId, port::Error>> {
        Box::pin(async move { Node::report(self, id, event).await.map_err(refused) })
    }

    fn publish(&self, listing: CrystalListing) -> Pending<'_, Result<ContentId, port::Error>> {
        Box::pin(async move { Node::publish(self, &Body::Crystal(listing)).await.map_err(refused) })
    }
}
