//! The node's credit ledger: every credit spent, earned or claimed, its running totals, the
//! adoptions paid for (kept with their debit so a retry pays nothing more), and what the
//! owner's budgeted adoptions spent today, checked and debited in the same write.

use druse_protocol::{ContentId, UnixMillis};
use serde::{Deserialize, Serialize};

use super::Settlement;
use crate::store::{self, Store, Writes};

/// Which way credits moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// This node adopted someone's skill.
    Spent,
    /// Someone whose key something vouches for (management, an attestation, endorsed skills)
    /// adopted this node's skill.
    Earned,
    /// A key nothing vouches for said it adopted this node's skill and paid: recorded, but
    /// not credited, since the amount is only that key's word and fresh keys cost nothing.
    Claimed,
}

/// One ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub at: UnixMillis,
    pub direction: Direction,
    pub skill: ContentId,
    /// The other side's PeerId.
    pub counterparty: String,
    /// Micro-USDC.
    pub amount: u64,
}

/// The ledger's running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub earned: u64,
    pub spent: u64,
    /// What unvouched adopters said they paid ([`Direction::Claimed`]); not in the balance.
    #[serde(default)]
    pub claimed: u64,
    /// Entries written so far; the next entry's key.
    pub entries: u64,
}

impl Totals {
    /// The balance, in micro-USDC, from `starting` credits.
    pub fn balance(&self, starting: u64) -> i128 {
        i128::from(starting) + i128::from(self.earned) - i128::from(self.spent)
    }
}

/// The state record of the ledger's totals.
pub const TOTALS_KEY: &str = "ledger_totals";

/// Appends a ledger entry and updates the totals, trimming the oldest entries past
/// `max_entries` (the totals keep counting them).
pub fn record(store: &Store, writes: &mut Writes, entry: &Entry, max_entries: usize) -> Result<Totals, store::Error> {
    let mut totals: Totals = writes.get(&store.state, TOTALS_KEY.as_bytes())?.unwrap_or_default();
    writes.put(&store.ledger, &totals.entries.to_be_bytes(), entry)?;
    totals.entries += 1;
    match entry.direction {
        Direction::Earned => totals.earned = totals.earned.saturating_add(entry.amount),
        Direction::Spent => totals.spent = totals.spent.saturating_add(entry.amount),
        Direction::Claimed => totals.claimed = totals.claimed.saturating_add(entry.amount),
    }
    writes.put(&store.state, TOTALS_KEY.as_bytes(), &totals)?;
    // Keys are 0, 1, 2, …: the entry that falls out of the window is `entries − max − 1`.
    if let Some(old) = totals.entries.checked_sub(max_entries.max(1) as u64 + 1) {
        writes.remove(&store.ledger, &old.to_be_bytes());
    }
    Ok(totals)
}

/// The ledger's totals.
pub fn totals(store: &Store) -> Result<Totals, store::Error> {
    Ok(store.state(TOTALS_KEY)?.unwrap_or_default())
}

/// An adoption this node paid for: kept with its debit, so that a retry publishes the same
/// signed report instead of paying again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaidAdoption {
    pub report_id: ContentId,
    /// The signed adoption report.
    pub report: Vec<u8>,
    pub settlement: Settlement,
}

/// Where the paid adoption of `skill` is kept (in the state table).
pub fn paid_adoption_key(skill: &ContentId) -> String {
    format!("adoption/{skill}")
}

/// The ledger's totals as `writes` leave them.
pub fn totals_in(store: &Store, writes: &Writes) -> Result<Totals, store::Error> {
    Ok(writes.get(&store.state, TOTALS_KEY.as_bytes())?.unwrap_or_default())
}

/// UTC days are this long, in milliseconds.
pub const DAY_MS: u64 = 86_400_000;

/// What the owner's budgeted adoptions (the agent's) spent on one UTC day, in micro-USDC. One
/// record, replaced when a new day starts; an adoption checks it against its budget and
/// writes it in the same batch as its debit, so a budget is never passed and nothing is ever
/// given back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaySpent {
    /// Days since the Unix epoch.
    #[serde(default)]
    pub day: u64,
    #[serde(default)]
    pub spent: u64,
}

/// The state record of [`DaySpent`].
pub const DAY_SPENT_KEY: &str = "ledger_day_spent";

impl DaySpent {
    /// What was spent on `day` (0 if the record is of another day).
    pub fn on(&self, day: u64) -> u64 {
        if self.day == day { self.spent } else { 0 }
    }
}

/// What day `day`'s budgeted adoptions spent, as `writes` leave it.
pub fn day_spent_in(store: &Store, writes: &Writes, day: u64) -> Result<u64, store::Error> {
    let record: DaySpent = writes.get(&store.state, DAY_SPENT_KEY.as_bytes())?.unwrap_or_default();
    Ok(record.on(day))
}

/// What day `day`'s budgeted adoptions spent.
pub fn day_spent(store: &Store, day: u64) -> Result<u64, store::Error> {
    let record: DaySpent = store.state(DAY_SPENT_KEY)?.unwrap_or_default();
    Ok(record.on(day))
}

/// Adds `amount` to day `day`'s budgeted spending in `writes`; answers the day's new total.
pub fn add_day_spent(store: &Store, writes: &mut Writes, day: u64, amount: u64) -> Result<u64, store::Error> {
    let spent = day_spent_in(store, writes, day)?.saturating_add(amount);
    writes.put(&store.state, DAY_SPENT_KEY.as_bytes(), &DaySpent { day, spent })?;
    Ok(spent)
}

/// The owner's daily budget an adoption must fit in: what day `day`'s budgeted adoptions spent,
/// this one included, may reach at most `limit` (`u64::MAX` for an adoption the owner approved,
/// which counts toward the day but is not held to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayBudget {
    pub day: u64,
    pub limit: u64,
}
