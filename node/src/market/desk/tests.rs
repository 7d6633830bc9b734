//! The desk on a real node: adoptions cut off half-way, bound to a price, held to a day's
//! budget, and priced once per tick through the agent's port.
use druse_protocol::body::CrystalListing;
use druse_protocol::{Envelope, Keypair, topic};

use druse_protocol::api::Code;
use druse_protocol::body::{Body, Report, ReportEvent};
use druse_protocol::{ContentId, now_ms};

use super::*;
use crate::Role;
use crate::config::Config;
use crate::ingest::Outcome;
use crate::node::{Error, Node};

/// A node's config in `dir`: loopback on a port the OS picks, no mDNS, the hashing embedder.
fn config(dir: &tempfile::TempDir) -> Config {
    let mut config = Config::default();
    config.store.data_dir = dir.path().to_owned();
    config.p2p.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()];
    config.p2p.mdns = false;
    config.memory.embed.embedder = druse_memory::embed::Choice::Hashing;
    config
}

async fn start() -> (Node, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Node::start(config(&dir), Role::Edge).await.unwrap(), dir)
}

/// A skill by another author, priced so the gate's computed price is not needed.
async fn foreign_skill(node: &Node) -> ContentId {
    let author = Keypair::from_seed([7; 32]);
    let listing = CrystalListing {
        asking_price: 0,
        ..crate::skill::sample_listing("retry-backoff", "Retry failed calls with backoff", now_ms())
    };
    let body = Body::Crystal(listing);
    let encoded = body.encode().unwrap();
    let bytes = Envelope::seal(&author, body.kind(), &encoded);
    assert_eq!(node.ingest_bytes(&bytes, &author.peer_id(), topic::CRYSTALS).await, Outcome::Accepted);
    ContentId::of(&encoded)
}

/// The first half of an adoption only: the debit committed, the report not published.
async fn pay_only(node: &Node, id: ContentId) -> super::super::PaidAdoption {
    let market = node.market();
    let listing = market.listing(id).await.unwrap();
    market.pay_for_adoption(&listing, Terms::default()).await.unwrap().0
}

fn at_most(max: u64) -> Terms {
    Terms { max_price: Some(max), daily_budget: None }
}

#[tokio::test]
async fn an_adoption_cut_off_after_paying_is_finished_by_a_retry_that_pays_nothing_more() {
    let (node, _dir) = start().await;
    let id = foreign_skill(&node).await;
    // The caller went away once the debit was committed, before the report was published.
    let paid = pay_only(&node, id).await;
    let after_first = node.market().ledger(10).unwrap();
    assert_eq!(after_first.entries.len(), 1, "the debit is in the ledger");
    assert!(!node.market().listing(id).await.unwrap().adopted, "no report was applied yet");

    let adoption = node.market().adopt(id).await.unwrap();
    assert_eq!(adoption.report, paid.report_id, "the retry publishes the report signed with the debit");
    let ledger = node.market().ledger(10).unwrap();
    assert_eq!(ledger.entries.len(), 1, "one debit, not two");
    assert_eq!(ledger.spent, after_first.spent);
    assert!(node.market().listing(id).await.unwrap().adopted);
    let again = node.market().adopt(id).await.unwrap_err();
    assert!(matches!(again, Error::Market(Code::Conflict, _)), "{again}");
    node.shutdown().await;
}

#[tokio::test]
async fn a_dropped_adoption_request_never_leaves_a_report_without_its_debit() {
    let (node, _dir) = start().await;
    let id = foreign_skill(&node).await;
    // Requests dropped at whatever point they reached, then one that completes.
    for wait_us in [0u64, 50, 200, 1_000, 5_000] {
        let attempt = tokio::spawn({
            let node = node.clone();
            async move { node.market().adopt(id).await }
        });
        tokio::time::sleep(std::time::Duration::from_micros(wait_us)).await;
        attempt.abort();
        let _ = attempt.await;
        let ledger = node.market().ledger(10).unwrap();
        let adopted = node.market().listing(id).await.unwrap().adopted;
        assert!(ledger.entries.len() <= 1, "never two debits");
        assert!(!adopted || ledger.entries.len() == 1, "a report is never without its debit");
    }
    let finished = node.market().adopt(id).await;
    let ledger = node.market().ledger(10).unwrap();
    assert_eq!(ledger.entries.len(), 1, "exactly one debit after all the attempts: {finished:?}");
    assert!(node.market().listing(id).await.unwrap().adopted);
    node.shutdown().await;
}

/// A node for which three management keys (each weighs 1) vouch.
async fn managed() -> (Node, Vec<Keypair>, tempfile::TempDir) {
    let managers: Vec<Keypair> = (0..3u8).map(|i| Keypair::from_seed([40 + i; 32])).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir);
    config.trust.management_keys = managers.iter().map(|k| k.public().to_string()).collect();
    (Node::start(config, Role::Edge).await.unwrap(), managers, dir)
}

/// A skill `name` by another author that the three managers adopt and report one success on
/// each: the gate passes and it has a price; answers its id and price.
async fn priced_skill(node: &Node, managers: &[Keypair], name: &str) -> (ContentId, u64) {
    let author = Keypair::from_seed([7; 32]);
    let listing = CrystalListing {
        asking_price: 1_000_000,
        ..crate::skill::sample_listing(name, "Retry failed calls with backoff", now_ms())
    };
    let ingest = |key: &Keypair, body: Body| {
        let encoded = body.encode().unwrap();
        (Envelope::seal(key, body.kind(), &encoded), key.peer_id(), ContentId::of(&encoded))
    };
    let (bytes, peer, id) = ingest(&author, Body::Crystal(listing));
    assert_eq!(node.ingest_bytes(&bytes, &peer, topic::CRYSTALS).await, Outcome::Accepted);
    for (i, manager) in managers.iter().enumerate() {
        for event in [ReportEvent::Adoption { price_paid: 0 }, ReportEvent::Execution { success: true, reward: 1.0 }] {
            let report = Report { issued_at: now_ms() + i as u64, reporter: manager.public(), content_id: id, event };
            let (bytes, peer, _) = ingest(manager, Body::Report(report));
            assert_eq!(node.ingest_bytes(&bytes, &peer, topic::REPORTS).await, Outcome::Accepted);
        }
    }
    let price = node.market().listing(id).await.unwrap().computed_price.micros;
    assert!(price > 0, "three vouched successes price the skill");
    (id, price)
}

#[tokio::test]
async fn an_adoption_bound_to_a_maximum_is_refused_above_it_with_the_new_price_and_pays_nothing() {
    let (node, managers, _dir) = managed().await;
    let (id, price) = priced_skill(&node, &managers, "retry-backoff").await;

    let refused = node.market().adopt_with(id, at_most(price - 1)).await.unwrap_err();
    match &refused {
        Error::PriceAboveMax { price: now, max, .. } => assert_eq!((*now, *max), (price, price - 1)),
        other => panic!("refused for another reason: {other}"),
    }
    assert!(refused.to_string().contains(&price.to_string()), "the error names the new price: {refused}");
    assert!(node.market().ledger(10).unwrap().entries.is_empty(), "nothing was paid");
    assert!(!node.market().listing(id).await.unwrap().adopted, "nothing was signed or published");

    let adoption = node.market().adopt_with(id, at_most(price)).await.unwrap();
    assert_eq!(adoption.settlement.paid, price, "at the maximum it adopts");
    assert_eq!(node.market().ledger(10).unwrap().entries.len(), 1);
    node.shutdown().await;
}

#[tokio::test]
async fn an_adoption_past_the_days_budget_is_refused_in_the_same_step_that_pays_and_nothing_is_written() {
    let (node, managers, _dir) = managed().await;
    let (first, _) = priced_skill(&node, &managers, "retry-backoff").await;
    let (second, _) = priced_skill(&node, &managers, "merge-sorted-logs").await;
    let market = node.market();
    // Each skill makes the other less rare: their prices as they stand with both held.
    let price = market.listing(first).await.unwrap().computed_price.micros;
    let budget = |limit| Terms { max_price: None, daily_budget: Some(limit) };
    assert_eq!(market.spent_today().unwrap(), 0);

    let refused = market.adopt_with(first, budget(price - 1)).await.unwrap_err();
    match &refused {
        Error::OverBudget { price: p, left, .. } => assert_eq!((*p, *left), (price, price - 1)),
        other => panic!("refused for another reason: {other}"),
    }
    assert!(market.ledger(10).unwrap().entries.is_empty(), "nothing was paid");
    assert!(!market.listing(first).await.unwrap().adopted, "nothing was signed or published");
    assert_eq!(market.spent_today().unwrap(), 0, "nothing was reserved");

    let adopted = market.adopt_with(first, budget(price)).await.unwrap();
    assert_eq!((adopted.settlement.paid, adopted.spent_today), (price, price));
    assert_eq!(market.spent_today().unwrap(), price);

    // The day's budget is spent: the second skill does not fit in it, whatever is left.
    let refused = market.adopt_with(second, budget(price)).await.unwrap_err();
    assert!(matches!(refused, Error::OverBudget { left: 0, .. }), "{refused}");
    assert_eq!(market.ledger(10).unwrap().entries.len(), 1);

    // An approved adoption counts toward the day without being held to it; one without a
    // budget (the API's) does not count at all.
    let approved = market.adopt_with(second, budget(u64::MAX)).await.unwrap();
    let second_price = approved.settlement.paid;
    assert!(second_price > 0);
    assert_eq!(approved.spent_today, price + second_price);
    let (third, _) = priced_skill(&node, &managers, "parse-rfc3339-dates").await;
    assert!(market.adopt(third).await.unwrap().settlement.paid > 0);
    assert_eq!(market.spent_today().unwrap(), price + second_price);
    assert_eq!(market.ledger(10).unwrap().entries.len(), 3);
    node.shutdown().await;
}

#[tokio::test]
async fn the_agents_port_prices_a_listing_once_to_read_and_adopt_it() {
    use druse_agent::node::{Node as Port, Terms as PortTerms};
    let (node, managers, _dir) = managed().await;
    let mut measured = false;
    // A maintenance tick between the two calls ends the tick's prices: try again then.
    for name in ["retry-backoff", "merge-sorted-logs", "parse-rfc3339-dates"] {
        let (id, price) = priced_skill(&node, &managers, name).await;
        let ticks = node.metrics().maintenance_ticks.get();
        let before = node.market().priced();
        let skill = Port::skill(&node, id).await.unwrap();
        assert!(!skill.adopted);
        let adopted = Port::adopt(&node, id, PortTerms { max_price: Some(skill.price), daily_budget: Some(u64::MAX) })
            .await
            .unwrap();
        if node.metrics().maintenance_ticks.get() != ticks {
            continue;
        }
        assert_eq!(node.market().priced() - before, 1, "read and adopted with one pricing");
        assert_eq!(adopted.paid, price);
        assert!(adopted.skill.adopted, "the adoption answers the skill as adopted");
        measured = true;
        break;
    }
    assert!(measured, "a maintenance tick came between every read and adoption");
    node.shutdown().await;
}
