//! The node's side of the marketplace: listings with computed prices, reports, adoptions,
//! versions, bounties and the ledger.

use druse_protocol::api::Code;
use druse_protocol::body::{Body, Report, ReportEvent, SemanticType};
use std::sync::atomic::Ordering;

use druse_protocol::{ContentId, Kind, UnixMillis};
use serde::Serialize;
use tokio::sync::broadcast;

use super::{Error, Node};
use crate::ingest::actor::{Command, Spent};
use crate::market::{self, BountyRecord, Listing, PriceView, Settlement, Stats, Versions};
use crate::peers::Book;
use crate::skill::Skill;
use crate::task::blocking;
use druse_protocol::now_ms;

/// Similar skills looked at when pricing scarcity; more than the uncommon bound is common.
const SIMILAR_LOOKED_AT: usize = 16;

/// What an adoption did.
#[derive(Debug, Clone, Serialize)]
pub struct Adoption {
    /// The signed adoption report.
    pub report: ContentId,
    pub settlement: Settlement,
    /// The ledger balance after paying, in micro-USDC.
    pub balance: i128,
}

/// The ledger as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LedgerView {
    /// In micro-USDC: starting credits + earned − spent.
    pub balance: i128,
    pub starting: u64,
    pub earned: u64,
    pub spent: u64,
    /// What adopters nothing vouches for said they paid: recorded, not in the balance.
    pub claimed: u64,
    /// The newest entries, newest first.
    pub entries: Vec<market::Entry>,
}

impl Node {
    /// A skill with its market view: stats from signed reports, the computed price beside the
    /// asking price, and the gate.
    pub async fn listing(&self, id: ContentId) -> Result<Listing, Error> {
        let node = self.clone();
        blocking(move || node.price_listing(node.skill(&id)?.ok_or(Error::NoSkill(id))?)).await?
    }

    /// Every skill the node holds, priced, newest first; at most `limit`.
    pub async fn listings(&self, limit: usize) -> Result<Vec<Listing>, Error> {
        let node = self.clone();
        blocking(move || {
            let mut skills = node.skills()?;
            skills.sort_by(|a, b| b.received_at.cmp(&a.received_at).then(a.id.digest().cmp(b.id.digest())));
            skills.truncate(limit);
            skills.into_iter().map(|s| node.price_listing(s)).collect()
        })
        .await?
    }

    /// Every version of the skill `key` names (a content id of any version, or a stable
    /// skill id), oldest first.
    pub async fn versions(&self, key: &str) -> Result<Vec<Listing>, Error> {
        let node = self.clone();
        let key = key.to_owned();
        blocking(move || node.versions_blocking(&key)).await?
    }

    fn versions_blocking(&self, key: &str) -> Result<Vec<Listing>, Error> {
        let ids: Vec<ContentId> = match key.parse::<ContentId>() {
            Ok(id) => {
                let skill = self.skill(&id)?.ok_or(Error::NoSkill(id))?;
                let key = market::version_key(&skill.author, &skill.listing.skill_id);
                let versions: Versions = self.inner.store.versions.get(&key)?.unwrap_or_default();
                versions.ids().collect()
            }
            Err(_) => {
                let mut found: Vec<Skill> = self.skills()?.into_iter().filter(|s| s.listing.skill_id == key).collect();
                found.sort_by_key(|s| (s.listing.version, s.received_at));
                found.into_iter().map(|s| s.id).collect()
            }
        };
        if ids.is_empty() {
            return Err(Error::Market(Code::NotFound, format!("no skill with id {key:?}")));
        }
        ids.into_iter()
            .filter_map(|id| self.skill(&id).transpose())
            .map(|skill| skill.and_then(|s| self.price_listing(s)))
            .collect()
    }

    /// What signed reports say about skill `id` (empty stats if nothing yet).
    pub fn stats(&self, id: &ContentId) -> Result<Stats, Error> {
        Ok(self.inner.store.market.get(id.digest())?.unwrap_or_default())
    }

    /// The skills with market evidence whose stats satisfy `keep`.
    pub fn skills_with_evidence(&self, keep: impl Fn(&Stats) -> bool) -> Result<Vec<ContentId>, Error> {
        let mut ids = Vec::new();
        for entry in self.inner.store.market.iter::<Stats>() {
            let (key, stats) = entry?;
            if keep(&stats)
                && let Ok(digest) = <[u8; 32]>::try_from(key.as_slice())
            {
                ids.push(ContentId::from_digest(digest));
            }
        }
        Ok(ids)
    }

    /// The figures of `stats` for `skill`, each reporter and adopter weighed by what vouches
    /// for its key now (see [`market`]).
    pub fn summary(&self, skill: &Skill, stats: &Stats) -> market::Summary {
        let config = &self.inner.market;
        self.inner.ingest.book(|book| weighed(book, config, skill, stats, now_ms()))
    }

    /// Prices one skill (blocking: it reads the vector index).
    fn price_listing(&self, skill: Skill) -> Result<Listing, Error> {
        let stats = self.stats(&skill.id)?;
        self.price_with(skill, stats)
    }

    /// Prices one skill whose stats are `stats`.
    fn price_with(&self, skill: Skill, stats: Stats) -> Result<Listing, Error> {
        let config = &self.inner.market;
        let (reputation, summary) = self.inner.ingest.book(|book| {
            (book.market_reputation(&skill.author.peer_id()), weighed(book, config, &skill, &stats, now_ms()))
        });
        let similar = self.similar_skills(&skill, config)?;
        let price = market::price(config, &summary, reputation, similar);
        let gate_passed = summary.passes(&config.gate);
        let computed = PriceView::new(&price, similar, gate_passed);
        let asking_price = skill.listing.asking_price;
        Ok(Listing {
            asking_price,
            asking_supported: asking_price <= computed.micros,
            computed_price: computed,
            gate_passed,
            stats: summary,
            adopted: stats.adopters.contains_key(&self.inner.key.public().to_string()),
            bounties_matched: stats.bounty_matches.into_iter().collect(),
            skill,
        })
    }

    /// How many other skills in the vector index are similar to this one (its own other
    /// versions left out).
    fn similar_skills(&self, skill: &Skill, config: &market::Config) -> Result<usize, Error> {
        let Some(crystal) = skill.crystal else { return Ok(0) };
        let key = market::version_key(&skill.author, &skill.listing.skill_id);
        let versions: Versions = self.inner.store.versions.get(&key)?.unwrap_or_default();
        let mut except = Vec::new();
        for id in versions.ids().filter(|id| *id != skill.id) {
            if let Some(c) = self.skill(&id)?.and_then(|s| s.crystal) {
                except.push(c);
            }
        }
        let types = [SemanticType::Skill, SemanticType::TaskPattern];
        Ok(self.inner.memory.similar(crystal, &types, config.similar_cosine, &except, SIMILAR_LOOKED_AT)?.len())
    }

    /// Signs and publishes a report about a skill this node holds. Its issue time is the
    /// clock's, or one millisecond past the node's previous report if the clock has not moved
    /// on: two runs with the same outcome in the same millisecond are two reports, not one
    /// message seen twice.
    pub async fn report(&self, id: ContentId, event: ReportEvent) -> Result<ContentId, Error> {
        self.skill(&id)?.ok_or(Error::NoSkill(id))?;
        let now = now_ms();
        let previous = self.inner.last_report.fetch_max(now, Ordering::SeqCst);
        let issued_at = if previous >= now {
            // Another report took this millisecond: take the next one free.
            self.inner.last_report.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            now
        };
        self.publish(&Body::Report(Report { issued_at, reporter: self.inner.key.public(), content_id: id, event }))
            .await
    }

    /// Adopts a skill: pays what the node's own computation supports (the asking price, or the
    /// computed price when the asking price is higher), signs an adoption report saying so,
    /// and writes the ledger. Refused for the node's own skills, a skill already adopted, or
    /// without the credits.
    ///
    /// The debit is committed, together with the signed report, before the report is
    /// published: a caller that goes away leaves a paid adoption whose report a retry
    /// publishes, never a report without a debit or a second debit.
    pub async fn adopt(&self, id: ContentId) -> Result<Adoption, Error> {
        self.adopt_at_most(id, None).await
    }

    /// [`Node::adopt`] bound to what was approved: with `max_price`, an adoption whose price
    /// settles above it is refused ([`Error::PriceAboveMax`], carrying the new price) and
    /// nothing is paid, signed or published.
    pub async fn adopt_at_most(&self, id: ContentId, max_price: Option<u64>) -> Result<Adoption, Error> {
        let _one_at_a_time = self.inner.adopting.lock().await;
        let (paid, totals) = self.pay_for_adoption(id, max_price).await?;
        self.inner.store.flush().await?;
        let settlement = paid.settlement;
        let report = self.publish_sealed(Kind::Report, paid.report_id, paid.report, true).await?;
        if !settlement.asking_supported {
            tracing::info!(skill = %id, asking = settlement.asking, paid = settlement.paid, "adopted below an unsupported asking price");
        }
        Ok(Adoption { report, settlement, balance: totals.balance(self.inner.market.starting_credits) })
    }

    /// The first half of [`Node::adopt`]: checks the adoption, signs its report and commits
    /// the debit with it, or finds the adoption of `id` paid for before.
    async fn pay_for_adoption(
        &self,
        id: ContentId,
        max_price: Option<u64>,
    ) -> Result<(market::PaidAdoption, market::Totals), Error> {
        let listing = self.listing(id).await?;
        if listing.skill.author == self.inner.key.public() {
            return Err(Error::Market(Code::Invalid, "a node cannot adopt its own skill".into()));
        }
        if listing.adopted {
            return Err(Error::Market(Code::Conflict, format!("skill {id} is already adopted")));
        }
        let settlement = market::settle(listing.asking_price, listing.computed_price.micros);
        if let Some(max) = max_price
            && settlement.paid > max
        {
            return Err(Error::PriceAboveMax { id, price: settlement.paid, max });
        }
        let (report_id, report) = self.seal(&Body::Report(Report {
            issued_at: now_ms(),
            reporter: self.inner.key.public(),
            content_id: id,
            event: ReportEvent::Adoption { price_paid: settlement.paid },
        }))?;
        let entry = market::Entry {
            at: now_ms(),
            direction: market::Direction::Spent,
            skill: id,
            counterparty: listing.skill.author_peer.clone(),
            amount: settlement.paid,
        };
        let adoption = market::PaidAdoption { report_id, report, settlement };
        let starting = self.inner.market.starting_credits;
        let spend = |reply| Command::Spend { entry, starting, adoption, reply };
        match self.inner.ingest.ask(spend).await?? {
            Spent::Debited(totals, paid) => Ok((paid, totals)),
            Spent::Short(balance) => Err(Error::Market(
                Code::Conflict,
                format!("adopting costs {} micro-USDC; the ledger holds {balance}", settlement.paid),
            )),
        }
    }

    /// Open bounties with their matches and claims.
    pub fn bounties(&self) -> Result<Vec<BountyRecord>, Error> {
        let now = now_ms();
        let records: Vec<(Vec<u8>, BountyRecord)> = self.inner.store.bounties.iter().collect::<Result<_, _>>()?;
        Ok(records.into_iter().map(|(_, r)| r).filter(|r| r.bounty.expires_at > now).collect())
    }

    /// The credit ledger: totals and the newest `limit` entries.
    pub fn ledger(&self, limit: usize) -> Result<LedgerView, Error> {
        let starting = self.inner.market.starting_credits;
        let totals = market::totals(&self.inner.store)?;
        Ok(LedgerView {
            balance: totals.balance(starting),
            starting,
            earned: totals.earned,
            spent: totals.spent,
            claimed: totals.claimed,
            entries: self.inner.store.ledger.last(limit)?,
        })
    }

    /// Skills whose market evidence (reports, adoptions, bounty matches) changed, a batch per
    /// maintenance tick from now on. A receiver that falls 64 batches behind is told it lagged.
    pub fn evidence_changes(&self) -> broadcast::Receiver<Vec<ContentId>> {
        self.inner.evidence.subscribe()
    }

    /// Observes the computed price of every skill whose evidence changed, and the balance, and
    /// tells evidence observers which skills changed.
    pub(super) async fn observe_market(&self, changed: Vec<ContentId>) {
        if !changed.is_empty() {
            // An error only means nobody is observing.
            let _ = self.inner.evidence.send(changed.clone());
        }
        let node = self.clone();
        let observed = blocking(move || -> Result<(), Error> {
            let gate = node.inner.market.gate;
            for id in changed {
                let Some(skill) = node.skill(&id)? else { continue };
                // Below the quality gate the price is 0 whatever the other factors are, so
                // the similarity search behind scarcity is skipped: a burst of new listings
                // would otherwise cost one vector search each.
                let stats = node.stats(&id)?;
                let price = match node.summary(&skill, &stats).passes(&gate) {
                    true => node.price_with(skill, stats)?.computed_price.usdc,
                    false => 0.0,
                };
                node.inner.metrics.computed_price.observe(price);
            }
            let starting = node.inner.market.starting_credits;
            let balance = market::totals(&node.inner.store)?.balance(starting);
            node.inner.metrics.credits.set(balance as f64 / 1e6);
            Ok(())
        })
        .await;
        if let Err(error) = observed.map_err(Error::from).and_then(|r| r) {
            tracing::warn!(%error, "could not observe market prices");
        }
    }
}

/// `stats` summed with the weights `book` gives at `now`.
fn weighed(book: &Book, config: &market::Config, skill: &Skill, stats: &Stats, now: UnixMillis) -> market::Summary {
    stats.summary(config, &skill.author, |key| book.weight(key, now, &config.weights))
}

#[cfg(test)]
mod tests {
    use druse_protocol::body::CrystalListing;
    use druse_protocol::{Envelope, Keypair, topic};

    use super::*;
    use crate::Role;
    use crate::config::Config;
    use crate::ingest::Outcome;

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

    #[tokio::test]
    async fn an_adoption_cut_off_after_paying_is_finished_by_a_retry_that_pays_nothing_more() {
        let (node, _dir) = start().await;
        let id = foreign_skill(&node).await;
        // The caller went away once the debit was committed, before the report was published.
        let (paid, _) = node.pay_for_adoption(id, None).await.unwrap();
        let after_first = node.ledger(10).unwrap();
        assert_eq!(after_first.entries.len(), 1, "the debit is in the ledger");
        assert!(!node.listing(id).await.unwrap().adopted, "no report was applied yet");

        let adoption = node.adopt(id).await.unwrap();
        assert_eq!(adoption.report, paid.report_id, "the retry publishes the report signed with the debit");
        let ledger = node.ledger(10).unwrap();
        assert_eq!(ledger.entries.len(), 1, "one debit, not two");
        assert_eq!(ledger.spent, after_first.spent);
        assert!(node.listing(id).await.unwrap().adopted);
        let again = node.adopt(id).await.unwrap_err();
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
                async move { node.adopt(id).await }
            });
            tokio::time::sleep(std::time::Duration::from_micros(wait_us)).await;
            attempt.abort();
            let _ = attempt.await;
            let ledger = node.ledger(10).unwrap();
            let adopted = node.listing(id).await.unwrap().adopted;
            assert!(ledger.entries.len() <= 1, "never two debits");
            assert!(!adopted || ledger.entries.len() == 1, "a report is never without its debit");
        }
        let finished = node.adopt(id).await;
        let ledger = node.ledger(10).unwrap();
        assert_eq!(ledger.entries.len(), 1, "exactly one debit after all the attempts: {finished:?}");
        assert!(node.listing(id).await.unwrap().adopted);
        node.shutdown().await;
    }

    #[tokio::test]
    async fn an_adoption_bound_to_a_maximum_is_refused_above_it_with_the_new_price_and_pays_nothing() {
        // Three management keys (each weighs 1) adopt the skill and report one success each:
        // the gate passes and the skill has a price.
        let managers: Vec<Keypair> = (0..3u8).map(|i| Keypair::from_seed([40 + i; 32])).collect();
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(&dir);
        config.trust.management_keys = managers.iter().map(|k| k.public().to_string()).collect();
        let node = Node::start(config, Role::Edge).await.unwrap();
        let author = Keypair::from_seed([7; 32]);
        let listing = CrystalListing {
            asking_price: 1_000_000,
            ..crate::skill::sample_listing("retry-backoff", "Retry failed calls with backoff", now_ms())
        };
        let ingest = |key: &Keypair, body: Body| {
            let encoded = body.encode().unwrap();
            (Envelope::seal(key, body.kind(), &encoded), key.peer_id(), ContentId::of(&encoded))
        };
        let (bytes, peer, id) = ingest(&author, Body::Crystal(listing));
        assert_eq!(node.ingest_bytes(&bytes, &peer, topic::CRYSTALS).await, Outcome::Accepted);
        for (i, manager) in managers.iter().enumerate() {
            for event in
                [ReportEvent::Adoption { price_paid: 0 }, ReportEvent::Execution { success: true, reward: 1.0 }]
            {
                let report =
                    Report { issued_at: now_ms() + i as u64, reporter: manager.public(), content_id: id, event };
                let (bytes, peer, _) = ingest(manager, Body::Report(report));
                assert_eq!(node.ingest_bytes(&bytes, &peer, topic::REPORTS).await, Outcome::Accepted);
            }
        }
        let price = node.listing(id).await.unwrap().computed_price.micros;
        assert!(price > 0, "three vouched successes price the skill");

        let refused = node.adopt_at_most(id, Some(price - 1)).await.unwrap_err();
        match &refused {
            Error::PriceAboveMax { price: now, max, .. } => assert_eq!((*now, *max), (price, price - 1)),
            other => panic!("refused for another reason: {other}"),
        }
        assert!(refused.to_string().contains(&price.to_string()), "the error names the new price: {refused}");
        assert!(node.ledger(10).unwrap().entries.is_empty(), "nothing was paid");
        assert!(!node.listing(id).await.unwrap().adopted, "nothing was signed or published");

        let adoption = node.adopt_at_most(id, Some(price)).await.unwrap();
        assert_eq!(adoption.settlement.paid, price, "at the maximum it adopts");
        assert_eq!(node.ledger(10).unwrap().entries.len(), 1);
        node.shutdown().await;
    }
}
