//! The market's front desk: everything a caller does with the market goes through
//! [`Market`], which `Node::market` hands out — listings priced on demand, reports, adoptions,
//! versions, bounties, the ledger. The API, the CLI (through the API), MCP and the agent's port
//! all call it; `Node` itself keeps no trading methods.
//!
//! A price is worked out by `quote` (pure) from what this desk gathers: the stats from the
//! store, each key's weight and the publisher's reputation from the trust book, and the
//! number of similar skills from the vector index.
//!
//! An adoption is one step in the ingest actor, the single writer of the ledger: the paid
//! adoption seen before, the owner's daily budget (when the caller brings one), the balance,
//! then the debit, the day's spending and the signed report written together. Nothing is
//! reserved ahead or given back after.

use std::sync::atomic::Ordering;

use druse_protocol::api::Code;
use druse_protocol::body::{Body, Report, ReportEvent, SemanticType};
use druse_protocol::{ContentId, Kind, now_ms};
use serde::Serialize;
use tokio::sync::broadcast;

use super::{BountyRecord, Listing, Settlement, Stats, Summary, Versions, quote};
use crate::ingest::actor::{Command, Spent};
use crate::node::{Error, Node};
use crate::skill::Skill;
use crate::task::blocking;

/// Similar skills looked at when pricing scarcity; more than the uncommon bound is common.
const SIMILAR_LOOKED_AT: usize = 16;

/// The market of one node; get one with [`Node::market`], cheap to make and to clone.
#[derive(Debug, Clone)]
pub struct Market {
    node: Node,
}

impl Node {
    /// The node's market.
    pub fn market(&self) -> Market {
        Market { node: self.clone() }
    }
}

/// What an adoption may pay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Terms {
    /// Never more than this (what the owner approved): above it the adoption is refused with
    /// the new price ([`Error::PriceAboveMax`]).
    pub max_price: Option<u64>,
    /// The owner's daily budget, for the agent's adoptions: with it, the adoption counts
    /// toward the UTC day's spending and is refused ([`Error::OverBudget`]) if the day's
    /// spending would pass it. `u64::MAX` counts without a limit (an approved adoption).
    pub daily_budget: Option<u64>,
}

/// What an adoption did.
#[derive(Debug, Clone, Serialize)]
pub struct Adoption {
    /// The signed adoption report.
    pub report: ContentId,
    pub settlement: Settlement,
    /// The ledger balance after paying, in micro-USDC.
    pub balance: i128,
    /// What the day's budgeted adoptions have spent with this one (0 for an adoption
    /// without a budget).
    #[serde(skip)]
    pub spent_today: u64,
    /// The skill's listing as priced for the adoption, adopted now.
    #[serde(skip)]
    pub listing: Box<Listing>,
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
    pub entries: Vec<super::Entry>,
}

impl Market {
    fn config(&self) -> &super::Config {
        &self.node.market_state().config
    }

    /// A skill with its market view: stats from signed reports, the computed price beside the
    /// asking price, and the gate.
    pub async fn listing(&self, id: ContentId) -> Result<Listing, Error> {
        let market = self.clone();
        blocking(move || market.price_listing(market.node.skill(&id)?.ok_or(Error::NoSkill(id))?)).await?
    }

    /// [`Market::listing`], priced once per maintenance tick: a second call within the tick
    /// answers the first one's price (the agent's port reads through it, so one `use_skill`
    /// prices a listing once).
    pub async fn listing_for_tick(&self, id: ContentId) -> Result<Listing, Error> {
        if let Some(listing) = self.node.market_state().cached(&id) {
            return Ok(listing);
        }
        let listing = self.listing(id).await?;
        self.node.market_state().cache(&listing);
        Ok(listing)
    }

    /// Every skill the node holds, priced, newest first; at most `limit`.
    pub async fn listings(&self, limit: usize) -> Result<Vec<Listing>, Error> {
        let market = self.clone();
        blocking(move || {
            let mut skills = market.node.skills()?;
            skills.sort_by(|a, b| b.received_at.cmp(&a.received_at).then(a.id.digest().cmp(b.id.digest())));
            skills.truncate(limit);
            skills.into_iter().map(|s| market.price_listing(s)).collect()
        })
        .await?
    }

    /// Every version of the skill `key` names (a content id of any version, or a stable
    /// skill id), oldest first.
    pub async fn versions(&self, key: &str) -> Result<Vec<Listing>, Error> {
        let market = self.clone();
        let key = key.to_owned();
        blocking(move || market.versions_blocking(&key)).await?
    }

    fn versions_blocking(&self, key: &str) -> Result<Vec<Listing>, Error> {
        let ids: Vec<ContentId> = match key.parse::<ContentId>() {
            Ok(id) => {
                let skill = self.node.skill(&id)?.ok_or(Error::NoSkill(id))?;
                let key = super::version_key(&skill.author, &skill.listing.skill_id);
                let versions: Versions = self.node.store().versions.get(&key)?.unwrap_or_default();
                versions.ids().collect()
            }
            Err(_) => {
                let mut found: Vec<Skill> =
                    self.node.skills()?.into_iter().filter(|s| s.listing.skill_id == key).collect();
                found.sort_by_key(|s| (s.listing.version, s.received_at));
                found.into_iter().map(|s| s.id).collect()
            }
        };
        if ids.is_empty() {
            return Err(Error::Market(Code::NotFound, format!("no skill with id {key:?}")));
        }
        ids.into_iter()
            .filter_map(|id| self.node.skill(&id).transpose())
            .map(|skill| skill.and_then(|s| self.price_listing(s)))
            .collect()
    }

    /// What signed reports say about skill `id` (empty stats if nothing yet).
    pub fn stats(&self, id: &ContentId) -> Result<Stats, Error> {
        Ok(self.node.store().market.get(id.digest())?.unwrap_or_default())
    }

    /// The skills with market evidence whose stats satisfy `keep`.
    pub fn skills_with_evidence(&self, keep: impl Fn(&Stats) -> bool) -> Result<Vec<ContentId>, Error> {
        let mut ids = Vec::new();
        for entry in self.node.store().market.iter::<Stats>() {
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
    /// for its key now (see [`super`]).
    pub fn summary(&self, skill: &Skill, stats: &Stats) -> Summary {
        let config = self.config();
        let now = now_ms();
        self.node
            .ingest()
            .book(|book| stats.summary(config, &skill.author, |key| book.weight(key, now, &config.weights)))
    }

    /// Prices one skill for a caller, counted in [`Market::priced`] (blocking: it reads the
    /// vector index).
    fn price_listing(&self, skill: Skill) -> Result<Listing, Error> {
        let stats = self.stats(&skill.id)?;
        self.node.market_state().count_priced();
        self.price_with(skill, stats)
    }

    /// Prices one skill whose stats are `stats`: gathers the inputs and hands them to
    /// [`quote::quote`].
    fn price_with(&self, skill: Skill, stats: Stats) -> Result<Listing, Error> {
        let config = self.config();
        let similar = self.similar_skills(&skill)?;
        let now = now_ms();
        let quote = self.node.ingest().book(|book| {
            let reputation = book.market_reputation(&skill.author.peer_id());
            quote::quote(
                config,
                &skill.author,
                &stats,
                |key| book.weight(key, now, &config.weights),
                reputation,
                similar,
            )
        });
        Ok(quote.listing(skill, stats, &self.node.key().public()))
    }

    /// How many other skills in the vector index are similar to this one (its own other
    /// versions left out).
    fn similar_skills(&self, skill: &Skill) -> Result<usize, Error> {
        let Some(crystal) = skill.crystal else { return Ok(0) };
        let key = super::version_key(&skill.author, &skill.listing.skill_id);
        let versions: Versions = self.node.store().versions.get(&key)?.unwrap_or_default();
        let mut except = Vec::new();
        for id in versions.ids().filter(|id| *id != skill.id) {
            if let Some(c) = self.node.skill(&id)?.and_then(|s| s.crystal) {
                except.push(c);
            }
        }
        let types = [SemanticType::Skill, SemanticType::TaskPattern];
        let cosine = self.config().similar_cosine;
        let similar =
            self.node.memory().read_blocking(move |m| m.similar(crystal, &types, cosine, &except, SIMILAR_LOOKED_AT));
        Ok(similar??.len())
    }

    /// Signs and publishes a report about a skill this node holds. Its issue time is the
    /// clock's, or one millisecond past the node's previous report if the clock has not moved
    /// on: two runs with the same outcome in the same millisecond are two reports, not one
    /// message seen twice.
    pub async fn report(&self, id: ContentId, event: ReportEvent) -> Result<ContentId, Error> {
        self.node.skill(&id)?.ok_or(Error::NoSkill(id))?;
        let last_report = &self.node.market_state().last_report;
        let now = now_ms();
        let previous = last_report.fetch_max(now, Ordering::SeqCst);
        let issued_at = if previous >= now {
            // Another report took this millisecond: take the next one free.
            last_report.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            now
        };
        let reporter = self.node.key().public();
        self.node.publish(&Body::Report(Report { issued_at, reporter, content_id: id, event })).await
    }

    /// Adopts a skill with no maximum and no budget (see [`Market::adopt_with`]).
    pub async fn adopt(&self, id: ContentId) -> Result<Adoption, Error> {
        self.adopt_with(id, Terms::default()).await
    }

    /// Adopts a skill: pays what the node's own computation supports (the asking price, or the
    /// computed price when the asking price is higher), within `terms`, signs an adoption
    /// report saying so, and writes the ledger. Refused for the node's own skills, a skill
    /// already adopted, without the credits, above `terms.max_price`, or past the day's budget.
    ///
    /// The debit is committed, together with the signed report, before the report is
    /// published: a caller that goes away leaves a paid adoption whose report a retry
    /// publishes, never a report without a debit or a second debit.
    pub async fn adopt_with(&self, id: ContentId, terms: Terms) -> Result<Adoption, Error> {
        self.adopt_listing(id, terms, false).await
    }

    /// [`Market::adopt_with`] at the price of [`Market::listing_for_tick`]: the agent's port,
    /// which read that price a moment ago.
    pub async fn adopt_for_tick(&self, id: ContentId, terms: Terms) -> Result<Adoption, Error> {
        self.adopt_listing(id, terms, true).await
    }

    async fn adopt_listing(&self, id: ContentId, terms: Terms, for_tick: bool) -> Result<Adoption, Error> {
        let state = self.node.market_state();
        let _one_at_a_time = state.adopting.lock().await;
        let listing = if for_tick { self.listing_for_tick(id).await? } else { self.listing(id).await? };
        let (paid, totals, spent_today) = self.pay_for_adoption(&listing, terms).await?;
        state.forget(&id);
        self.node.store().flush().await?;
        let settlement = paid.settlement;
        let report = self.node.publish_sealed(Kind::Report, paid.report_id, paid.report, true).await?;
        if !settlement.asking_supported {
            tracing::info!(skill = %id, asking = settlement.asking, paid = settlement.paid, "adopted below an unsupported asking price");
        }
        let listing = Box::new(Listing { adopted: true, ..listing });
        let balance = totals.balance(state.config.starting_credits);
        Ok(Adoption { report, settlement, balance, spent_today, listing })
    }

    /// The first half of an adoption: checks it, signs its report and has the ingest actor
    /// commit the debit with it in one step (budget and balance checked there), or finds the
    /// adoption of the skill paid for before.
    async fn pay_for_adoption(
        &self,
        listing: &Listing,
        terms: Terms,
    ) -> Result<(super::PaidAdoption, super::Totals, u64), Error> {
        let id = listing.skill.id;
        let me = self.node.key().public();
        if listing.skill.author == me {
            return Err(Error::Market(Code::Invalid, "a node cannot adopt its own skill".into()));
        }
        if listing.adopted {
            return Err(Error::Market(Code::Conflict, format!("skill {id} is already adopted")));
        }
        let settlement = super::settle(listing.asking_price, listing.computed_price.micros);
        if let Some(max) = terms.max_price
            && settlement.paid > max
        {
            return Err(Error::PriceAboveMax { id, price: settlement.paid, max });
        }
        let now = now_ms();
        let (report_id, report) = self.node.seal(&Body::Report(Report {
            issued_at: now,
            reporter: me,
            content_id: id,
            event: ReportEvent::Adoption { price_paid: settlement.paid },
        }))?;
        let entry = super::Entry {
            at: now,
            direction: super::Direction::Spent,
            skill: id,
            counterparty: listing.skill.author_peer.clone(),
            amount: settlement.paid,
        };
        let adoption = super::PaidAdoption { report_id, report, settlement };
        let starting = self.config().starting_credits;
        let budget = terms.daily_budget.map(|limit| super::DayBudget { day: now / super::DAY_MS, limit });
        let spend = |reply| Command::Spend { entry, starting, budget, adoption, reply };
        match self.node.ingest().ask(spend).await?? {
            Spent::Debited(totals, paid, spent_today) => Ok((paid, totals, spent_today)),
            Spent::Short(balance) => Err(Error::Market(
                Code::Conflict,
                format!("adopting costs {} micro-USDC; the ledger holds {balance}", settlement.paid),
            )),
            Spent::OverBudget(spent) => {
                let left = terms.daily_budget.unwrap_or(0).saturating_sub(spent);
                Err(Error::OverBudget { id, price: settlement.paid, left })
            }
        }
    }

    /// What the owner's budgeted adoptions spent today (the UTC day), in micro-USDC.
    pub fn spent_today(&self) -> Result<u64, Error> {
        Ok(super::day_spent(self.node.store(), now_ms() / super::DAY_MS)?)
    }

    /// Open bounties with their matches and claims.
    pub fn bounties(&self) -> Result<Vec<BountyRecord>, Error> {
        let now = now_ms();
        let records: Vec<(Vec<u8>, BountyRecord)> = self.node.store().bounties.iter().collect::<Result<_, _>>()?;
        Ok(records.into_iter().map(|(_, r)| r).filter(|r| r.bounty.expires_at > now).collect())
    }

    /// The credit ledger: totals and the newest `limit` entries.
    pub fn ledger(&self, limit: usize) -> Result<LedgerView, Error> {
        let starting = self.config().starting_credits;
        let totals = super::totals(self.node.store())?;
        Ok(LedgerView {
            balance: totals.balance(starting),
            starting,
            earned: totals.earned,
            spent: totals.spent,
            claimed: totals.claimed,
            entries: self.node.store().ledger.last(limit)?,
        })
    }

    /// Skills whose market evidence (reports, adoptions, bounty matches) changed, a batch per
    /// maintenance tick from now on. A receiver that falls 64 batches behind is told it lagged.
    pub fn evidence_changes(&self) -> broadcast::Receiver<Vec<ContentId>> {
        self.node.market_state().evidence.subscribe()
    }

    /// Listings priced since the node started (each is one vector search).
    pub fn priced(&self) -> u64 {
        self.node.market_state().priced()
    }

    /// The end of a maintenance tick: forgets the tick's prices, observes the computed price
    /// of every skill whose evidence changed, and the balance, and tells evidence observers
    /// which skills changed.
    pub(crate) async fn end_tick(&self, changed: Vec<ContentId>) {
        self.node.market_state().new_tick();
        if !changed.is_empty() {
            // An error only means nobody is observing.
            let _ = self.node.market_state().evidence.send(changed.clone());
        }
        let market = self.clone();
        let observed = blocking(move || -> Result<(), Error> {
            let gate = market.config().gate;
            for id in changed {
                let Some(skill) = market.node.skill(&id)? else { continue };
                // Below the quality gate the price is 0 whatever the other factors are, so
                // the similarity search behind scarcity is skipped: a burst of new listings
                // would otherwise cost one vector search each.
                let stats = market.stats(&id)?;
                let price = match market.summary(&skill, &stats).passes(&gate) {
                    true => market.price_with(skill, stats)?.computed_price.usdc,
                    false => 0.0,
                };
                market.node.metrics().computed_price.observe(price);
            }
            let starting = market.config().starting_credits;
            let balance = super::totals(market.node.store())?.balance(starting);
            market.node.metrics().credits.set(balance as f64 / 1e6);
            Ok(())
        })
        .await;
        if let Err(error) = observed.map_err(Error::from).and_then(|r| r) {
            tracing::warn!(%error, "could not observe market prices");
        }
    }
}

#[cfg(test)]
mod tests;
