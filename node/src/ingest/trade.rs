//! How accepted market messages change the store: a listing's place among its versions,
//! bounties and the listings they match, and execution, adoption and claim reports.

use std::sync::PoisonError;

use druse_protocol::body::{Bounty, CrystalListing, Report, ReportEvent};
use druse_protocol::{ContentId, PublicKey, UnixMillis};

use super::actor::Spent;
use super::{Effect, Ingestor};
use crate::market::{self, BountyRecord, Counted, Stats, Versions};
use crate::metrics::{Metrics, ReportLabels};
use crate::skill::Skill;
use crate::store;

impl Ingestor {
    /// Pays for an adoption in one step: unless it was paid before (then answers what was
    /// paid), checks the day's budgeted spending against `budget` and the balance against the
    /// debit, then writes the debit, the day's spending and the adoption together.
    pub(super) fn spend(
        &mut self,
        entry: &market::Entry,
        starting: u64,
        budget: Option<market::DayBudget>,
        adoption: market::PaidAdoption,
    ) -> Result<Spent, store::Error> {
        let key = market::paid_adoption_key(&entry.skill);
        let totals = market::totals_in(&self.store, &self.writes)?;
        let day = budget.map(|b| b.day);
        let spent_today = match day {
            Some(day) => market::day_spent_in(&self.store, &self.writes, day)?,
            None => 0,
        };
        if let Some(paid) = self.writes.get::<market::PaidAdoption>(&self.store.state, key.as_bytes())? {
            return Ok(Spent::Debited(totals, paid, spent_today));
        }
        if let Some(budget) = budget
            && spent_today.checked_add(entry.amount).is_none_or(|total| total > budget.limit)
        {
            return Ok(Spent::OverBudget(spent_today));
        }
        let balance = totals.balance(starting);
        if balance < i128::from(entry.amount) {
            return Ok(Spent::Short(balance));
        }
        let max = self.me.market.max_ledger_entries;
        let totals = market::record(&self.store, &mut self.writes, entry, max)?;
        let spent_today = match day {
            Some(day) => market::add_day_spent(&self.store, &mut self.writes, day, entry.amount)?,
            None => spent_today,
        };
        self.writes.put(&self.store.state, key.as_bytes(), &adoption)?;
        Ok(Spent::Debited(totals, adoption, spent_today))
    }

    /// Records a version and marks every version but the newest deprecated, whatever order
    /// they arrive in. Only the same author's listings with the same `skill_id` are versions of
    /// one skill, so nobody can deprecate someone else's skill.
    pub(super) fn place_version(
        &mut self,
        id: ContentId,
        listing: &CrystalListing,
        author: PublicKey,
    ) -> Result<(), store::Error> {
        let key = market::version_key(&author, &listing.skill_id);
        let versions: Versions = self
            .writes
            .upsert(&self.store.versions, &key, |v: &mut Versions| v.add(listing.version, listing.issued_at, id))?;
        let Some(newest) = versions.newest() else { return Ok(()) };
        if versions.known.len() == 1 {
            // A skill's first version: nothing to deprecate, and a new skill is current.
            return Ok(());
        }
        for version in versions.ids() {
            let deprecated = version != newest;
            let current = self.writes.get::<Skill>(&self.store.skills, version.digest())?;
            if current.is_some_and(|s| s.deprecated != deprecated || (deprecated && s.deprecated_by != Some(newest))) {
                self.writes.update::<Skill, _>(&self.store.skills, version.digest(), |s| {
                    s.deprecated = deprecated;
                    s.deprecated_by = deprecated.then_some(newest);
                })?;
            }
        }
        Ok(())
    }

    /// Notes that `skill` matches a bounty, on the bounty and in the skill's stats.
    pub(super) fn record_match(&mut self, bounty: &Bounty, skill: ContentId) -> Result<(), store::Error> {
        self.writes.update(&self.store.bounties, bounty.id.as_bytes(), |r: &mut BountyRecord| {
            if !r.matches.contains(&skill) && r.matches.len() < market::MAX_BOUNTY_ENTRIES {
                r.matches.push(skill);
            }
        })?;
        self.writes.upsert(&self.store.market, skill.digest(), |s: &mut Stats| {
            s.bounty_matches.insert(bounty.id.clone());
        })?;
        self.effects.push(Effect::Boost(skill));
        self.reprice(skill);
        Ok(())
    }

    /// A bounty from a management key: kept until it expires (a newer seq from the same key
    /// replaces its terms, keeping matches and claims), and matched against every skill held.
    pub(super) fn apply_bounty(
        &mut self,
        issuer: PublicKey,
        bounty: &Bounty,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Result<(), store::Error> {
        if bounty.expires_at <= now {
            return Ok(());
        }
        let key = bounty.id.as_bytes();
        let existing: Option<BountyRecord> = self.writes.get(&self.store.bounties, key)?;
        match existing {
            Some(old) if old.issuer != issuer || old.bounty.seq >= bounty.seq => return Ok(()),
            Some(mut old) => {
                old.bounty = bounty.clone();
                self.writes.put(&self.store.bounties, key, &old)?;
                self.bounties.retain(|b| b.id != bounty.id);
            }
            None => {
                self.make_room_for_a_bounty()?;
                let record = BountyRecord { bounty: bounty.clone(), issuer, matches: Vec::new(), claims: Vec::new() };
                self.writes.put(&self.store.bounties, key, &record)?;
            }
        }
        self.bounties.push(bounty.clone());
        let mut matched = 0u64;
        let skills: Vec<Skill> = self.store.skills::<Skill>().collect::<Result<_, _>>()?;
        for skill in skills.iter().filter(|s| !s.deprecated) {
            if market::matches(bounty, &skill.listing, self.me.market.bounty_text_overlap) {
                self.record_match(bounty, skill.id)?;
                matched += 1;
            }
        }
        metrics.bounty_matches.inc_by(matched);
        tracing::info!(bounty = %bounty.id, matched, "bounty");
        Ok(())
    }

    /// Drops the bounty that expires first when the table is full.
    fn make_room_for_a_bounty(&mut self) -> Result<(), store::Error> {
        if self.bounties.len() < self.me.market.max_bounties {
            return Ok(());
        }
        let Some(first) = self.bounties.iter().min_by_key(|b| b.expires_at).map(|b| b.id.clone()) else {
            return Ok(());
        };
        self.writes.remove(&self.store.bounties, first.as_bytes());
        self.bounties.retain(|b| b.id != first);
        Ok(())
    }

    /// Drops expired bounties; returns how many are open.
    pub fn expire_bounties(&mut self, now: UnixMillis) -> Result<usize, store::Error> {
        for bounty in self.bounties.iter().filter(|b| b.expires_at <= now) {
            self.writes.remove(&self.store.bounties, bounty.id.as_bytes());
            tracing::info!(bounty = %bounty.id, "bounty expired");
        }
        self.bounties.retain(|b| b.expires_at > now);
        Ok(self.bounties.len())
    }

    /// Counts a signed report about a stored skill.
    pub(super) fn apply_report(
        &mut self,
        skill: &Skill,
        reporter: PublicKey,
        report: &Report,
        now: UnixMillis,
        metrics: &Metrics,
    ) -> Result<(), store::Error> {
        let id = skill.id;
        let config = &self.me.market;
        let mut counted = Counted::Yes;
        // Whether something vouches for a key now: it decides the key's room in the stats.
        let book = self.book.read().unwrap_or_else(PoisonError::into_inner);
        let vouched = |key: &str| book.weight(key, now, &config.weights).vouched > 0.0;
        let (event, outcome) = match &report.event {
            ReportEvent::Execution { success, reward } => {
                let stats = self.writes.upsert(&self.store.market, id.digest(), |s: &mut Stats| {
                    counted = s.execution(config, &id, &reporter, *success, *reward, vouched);
                })?;
                drop(book);
                // The publisher's reputation takes a report by its reporter's vouched weight
                // (a fresh key's is 0), and only from a reporter that adopted the skill. Both
                // are judged as the report arrives: a report that came before its reporter's
                // adoption, attestation or endorsement never counts here, though it does count
                // toward quality once they arrive (quality is weighed at price time).
                let adopted = stats.adopters.contains_key(&reporter.to_string());
                if counted == Counted::Yes && skill.author != reporter && adopted {
                    let weight = self.read_book().weight_of(&reporter.peer_id(), now, &config.weights).vouched;
                    if weight > 0.0 {
                        self.note_peer(&skill.author.peer_id(), now, |r| {
                            if *success {
                                r.report_successes += weight;
                            } else {
                                r.report_failures += weight;
                            }
                        });
                    }
                }
                ("execution", if *success { "success" } else { "failure" })
            }
            ReportEvent::Adoption { price_paid } => {
                self.writes.upsert(&self.store.market, id.digest(), |s: &mut Stats| {
                    counted = s.adoption(config, &id, &reporter, *price_paid, vouched);
                })?;
                drop(book);
                if counted == Counted::Yes && skill.author == self.me.key && reporter != self.me.key {
                    let amount = (*price_paid).min(skill.listing.asking_price);
                    // The amount is the adopter's word: credited only when something vouches
                    // for its key, judged as the report arrives (like the reputation above).
                    let vouched = self.read_book().weight_of(&reporter.peer_id(), now, &config.weights).vouched > 0.0;
                    let entry = market::Entry {
                        at: now,
                        direction: if vouched { market::Direction::Earned } else { market::Direction::Claimed },
                        skill: id,
                        counterparty: reporter.peer_id().to_string(),
                        amount,
                    };
                    market::record(&self.store, &mut self.writes, &entry, config.max_ledger_entries)?;
                }
                ("adoption", "none")
            }
            ReportEvent::Claim { bounty_id } => {
                drop(book);
                self.writes.upsert(&self.store.market, id.digest(), |s: &mut Stats| {
                    if s.claims.len() < market::MAX_BOUNTY_ENTRIES {
                        s.claims.insert(bounty_id.clone());
                    }
                })?;
                let claimant = reporter.peer_id().to_string();
                let updated =
                    self.writes.update(&self.store.bounties, bounty_id.as_bytes(), |r: &mut BountyRecord| {
                        let known = r.claims.iter().any(|c| c.skill == id && c.claimant == claimant);
                        if !known && r.claims.len() < market::MAX_BOUNTY_ENTRIES {
                            let matched = r.matches.contains(&id);
                            r.claims.push(market::Claim { skill: id, claimant: claimant.clone(), at: now, matched });
                        }
                    })?;
                match updated {
                    Some(record) => {
                        metrics.bounty_claims.inc();
                        let matched = record.claims.iter().any(|c| c.skill == id && c.matched);
                        tracing::info!(bounty = %bounty_id, skill = %id, %claimant, matched, "bounty claimed");
                    }
                    None => {
                        tracing::info!(bounty = %bounty_id, skill = %id, "claim on a bounty this node does not hold")
                    }
                }
                ("claim", "none")
            }
        };
        metrics.reports.get_or_create(&ReportLabels { event, outcome }).inc();
        if counted == Counted::Yes {
            self.reprice(id);
        }
        Ok(())
    }
}
