//! What the model costs: tokens priced as configured (`agent.llm.prompt_price` and
//! `completion_price`, USD per million tokens), summed per UTC day in the agent's state so a
//! restart keeps the day's figure, and a daily cap (`daily_spend_cap`) past which the model is
//! asked nothing more until the next day.
//!
//! Tokens are bounded too, by default: a daily token budget (`daily_token_budget`) over every
//! answer, a share of it (`stranger_share`) that no single stranger may pass, and a share
//! (`strangers_share`) that all strangers together may not pass, so that the rest of the day
//! is kept for the owner and the agent's own entries however many strangers write. The tokens
//! are the server's `usage`, or an estimate of a token per four bytes of the request and the
//! answer when it reports none. A call is paid by the strangers whose notifications it
//! answers ([`paid_by`], split evenly between them); the owner and the agent's own entries
//! pay no share, and count against the budget only. The token count lives in memory: a
//! restart starts the day's count again.

use std::collections::HashMap;
use std::sync::Mutex;

use druse_protocol::now_ms;

use super::metrics::Metrics;
use super::state::AgentState;
use crate::config::AgentLlm;

const DAY_MS: u64 = 86_400_000;

/// Today's spend reached the daily cap.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "the model is paused until the next UTC day: today's spend, {spent_usd:.4} USD, reached \
     agent.llm.daily_spend_cap ({cap_usd} USD)"
)]
pub struct Capped {
    pub spent_usd: f64,
    pub cap_usd: f64,
}

/// The most strangers whose tokens are counted apart in one day; past it, a new stranger is
/// taken as over its share (the budget runs out long before, at any share that bounds).
const MAX_PAYERS: usize = 4096;

tokio::task_local! {
    /// The strangers who pay for the model calls of the task running now.
    static PAYERS: Vec<String>;
}

/// Runs `work` with its model calls paid by `payers` (strangers' DIDs; empty: no share).
pub(crate) async fn paid_by<F: std::future::Future>(payers: Vec<String>, work: F) -> F::Output {
    PAYERS.scope(payers, work).await
}

/// Today's token budget, or a stranger's share of it, is used up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OverBudget {
    #[error(
        "the model is paused until the next UTC day: today's {used} tokens reached \
         agent.llm.daily_token_budget ({budget})"
    )]
    Daily { used: u64, budget: u64 },
    #[error("{payer} used {used} tokens today, its share of the budget (agent.llm.stranger_share: {share} tokens)")]
    Share { payer: String, used: u64, share: u64 },
    #[error(
        "strangers used {used} tokens today, their share of the budget (agent.llm.strangers_share: {share} tokens); \
         the rest is kept for the owner"
    )]
    Strangers { used: u64, share: u64 },
}

impl OverBudget {
    /// Its label in `druse_agent_refused_total`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            OverBudget::Daily { .. } => "token_budget",
            OverBudget::Share { .. } => "stranger_share",
            OverBudget::Strangers { .. } => "strangers_share",
        }
    }
}

/// Tokens used on one UTC day, in all, by strangers together and by each paying stranger.
#[derive(Debug, Default)]
struct Tokens {
    day: u64,
    total: u64,
    strangers: u64,
    by_payer: HashMap<String, u64>,
}

/// The model's spend today and its cap; shared by every clone of the client.
#[derive(Debug)]
pub(crate) struct Spend {
    /// Micro-USD per token (the same number as USD per million tokens).
    prompt_price: f64,
    completion_price: f64,
    /// Micro-USD per day; `None`: no cap.
    cap: Option<u64>,
    /// The UTC day counted, and the micro-USD spent on it.
    today: Mutex<(u64, u64)>,
    /// The daily token budget (`None`: none), one stranger's share of it and all strangers'
    /// share, in tokens.
    budget: Option<u64>,
    share: Option<u64>,
    strangers_share: Option<u64>,
    tokens: Mutex<Tokens>,
    state: Option<AgentState>,
    metrics: Metrics,
}

fn micros(usd: f64) -> u64 {
    (usd * 1e6).round().max(0.0) as u64
}

fn usd(micros: u64) -> f64 {
    micros as f64 / 1e6
}

impl Spend {
    /// The spend of `config`'s prices, picking up today's figure from `state` if given.
    pub(crate) fn new(config: &AgentLlm, metrics: Metrics, state: Option<AgentState>) -> Self {
        let day = now_ms() / DAY_MS;
        let spent = state.as_ref().map_or(0, |s| s.model_spent(day));
        let cap = (config.daily_spend_cap > 0.0).then(|| micros(config.daily_spend_cap));
        metrics.llm_spend_cap.set(config.daily_spend_cap);
        let spend = Self {
            prompt_price: config.prompt_price,
            completion_price: config.completion_price,
            cap,
            today: Mutex::new((day, spent)),
            budget: (config.daily_token_budget > 0).then_some(config.daily_token_budget),
            share: (config.daily_token_budget > 0 && config.stranger_share < 1.0)
                .then(|| (config.daily_token_budget as f64 * config.stranger_share).floor() as u64),
            strangers_share: (config.daily_token_budget > 0 && config.strangers_share < 1.0)
                .then(|| (config.daily_token_budget as f64 * config.strangers_share).floor() as u64),
            tokens: Mutex::new(Tokens { day, ..Tokens::default() }),
            state,
            metrics,
        };
        spend.show(spent);
        spend
    }

    fn show(&self, spent: u64) {
        self.metrics.llm_spend_today.set(usd(spent));
        self.metrics.llm_capped.set(i64::from(self.cap.is_some_and(|cap| spent >= cap)));
    }

    /// Today's spend in micro-USD, the day turned over if it has.
    fn spent(&self) -> u64 {
        self.today().1
    }

    /// Today's (day, spend), locked; a new UTC day starts at zero.
    fn today(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        let day = now_ms() / DAY_MS;
        let mut today = self.today.lock().unwrap_or_else(|p| p.into_inner());
        if today.0 != day {
            *today = (day, 0);
            self.show(0);
        }
        today
    }

    /// Today's spend in USD.
    pub(crate) fn today_usd(&self) -> f64 {
        usd(self.spent())
    }

    /// The daily cap in USD, if there is one.
    pub(crate) fn cap_usd(&self) -> Option<f64> {
        self.cap.map(usd)
    }

    /// Whether today's spend has reached the cap, or today's tokens the budget.
    pub(crate) fn capped(&self) -> bool {
        self.cap.is_some_and(|cap| self.spent() >= cap) || self.budget.is_some_and(|b| self.tokens().total >= b)
    }

    /// Today's tokens, locked; a new UTC day starts at zero.
    fn tokens(&self) -> std::sync::MutexGuard<'_, Tokens> {
        let day = now_ms() / DAY_MS;
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if tokens.day != day {
            *tokens = Tokens { day, ..Tokens::default() };
        }
        tokens
    }

    /// Tokens used today, in all.
    pub(crate) fn tokens_today(&self) -> u64 {
        self.tokens().total
    }

    /// Refuses a model call once today's tokens reached the budget, or once a stranger who
    /// pays for it (see [`paid_by`]) used its share.
    pub(crate) fn check_tokens(&self) -> Result<(), OverBudget> {
        let payers = PAYERS.try_with(Clone::clone).unwrap_or_default();
        let tokens = self.tokens();
        if let Some(budget) = self.budget.filter(|b| tokens.total >= *b) {
            return Err(OverBudget::Daily { used: tokens.total, budget });
        }
        for payer in payers {
            self.within_share(&tokens, &payer)?;
        }
        Ok(())
    }

    /// Whether stranger `payer` may still be answered today.
    pub(crate) fn stranger_allowed(&self, payer: &str) -> Result<(), OverBudget> {
        self.within_share(&self.tokens(), payer)
    }

    fn within_share(&self, tokens: &Tokens, payer: &str) -> Result<(), OverBudget> {
        if let Some(share) = self.strangers_share.filter(|s| tokens.strangers >= *s) {
            return Err(OverBudget::Strangers { used: tokens.strangers, share });
        }
        let Some(share) = self.share else { return Ok(()) };
        let used = match tokens.by_payer.get(payer) {
            Some(used) => *used,
            None if tokens.by_payer.len() >= MAX_PAYERS => share,
            None => 0,
        };
        if used >= share {
            return Err(OverBudget::Share { payer: payer.to_owned(), used, share });
        }
        Ok(())
    }

    /// Counts `used` tokens of one answer, split between the strangers who pay for it.
    pub(crate) fn add_tokens(&self, used: u64) {
        let payers = PAYERS.try_with(Clone::clone).unwrap_or_default();
        let mut tokens = self.tokens();
        tokens.total = tokens.total.saturating_add(used);
        if payers.is_empty() {
            return;
        }
        tokens.strangers = tokens.strangers.saturating_add(used);
        if self.share.is_none() {
            return;
        }
        let each = used.div_ceil(payers.len() as u64);
        for payer in payers {
            if tokens.by_payer.len() >= MAX_PAYERS && !tokens.by_payer.contains_key(&payer) {
                continue;
            }
            let spent = tokens.by_payer.entry(payer).or_default();
            *spent = spent.saturating_add(each);
        }
    }

    /// Refuses a model call once today's spend has reached the cap.
    pub(crate) fn check(&self) -> Result<(), Capped> {
        match self.cap {
            Some(cap) if self.spent() >= cap => Err(Capped { spent_usd: self.today_usd(), cap_usd: usd(cap) }),
            _ => Ok(()),
        }
    }

    /// What `prompt` and `completion` tokens cost at the configured prices, in USD.
    pub(crate) fn cost_usd(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.prompt_price + completion as f64 * self.completion_price) / 1e6
    }

    /// Counts what one answer of `prompt` and `completion` tokens cost, and keeps the day's
    /// total in the state.
    pub(crate) async fn add(&self, prompt: u64, completion: u64) {
        let cost = micros(self.cost_usd(prompt, completion));
        if cost == 0 {
            return;
        }
        self.metrics.llm_spend.inc_by(usd(cost));
        let (day, total) = {
            let mut today = self.today();
            today.1 = today.1.saturating_add(cost);
            *today
        };
        self.show(total);
        if self.cap.is_some_and(|cap| total >= cap && total - cost < cap) {
            tracing::warn!(
                spent_usd = usd(total),
                cap_usd = self.cap_usd(),
                "the model reached agent.llm.daily_spend_cap: the agent asks it nothing more until the next UTC day"
            );
        }
        if let Some(state) = self.state.clone() {
            let kept = crate::task::blocking(move || state.put_model_spent(day, total)).await;
            if let Err(error) = kept.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
                tracing::warn!(%error, "could not keep the model's spend for today");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(prompt: f64, completion: f64, cap: f64) -> AgentLlm {
        AgentLlm { prompt_price: prompt, completion_price: completion, daily_spend_cap: cap, ..AgentLlm::default() }
    }

    fn budget(tokens: u64, share: f64) -> Spend {
        let config = AgentLlm { daily_token_budget: tokens, stranger_share: share, ..AgentLlm::default() };
        Spend::new(&config, Metrics::default(), None)
    }

    #[test]
    fn the_defaults_bound_tokens_and_a_strangers_share() {
        let config = AgentLlm::default();
        assert!(config.daily_token_budget > 0, "a budget by default");
        assert!(config.stranger_share > 0.0 && config.stranger_share < 1.0);
        let spend = Spend::new(&config, Metrics::default(), None);
        assert_eq!(spend.budget, Some(config.daily_token_budget));
        assert!(spend.share.is_some_and(|s| s < config.daily_token_budget));
        assert!(spend.strangers_share.is_some_and(|s| s < config.daily_token_budget && Some(s) > spend.share));
    }

    #[tokio::test]
    async fn the_daily_token_budget_refuses_every_call_once_reached() {
        let spend = budget(1000, 1.0);
        spend.add_tokens(600);
        assert!(spend.check_tokens().is_ok() && !spend.capped());
        paid_by(vec!["did:plc:stranger".into()], async { spend.add_tokens(400) }).await;
        assert_eq!(spend.tokens_today(), 1000);
        assert!(spend.capped(), "the polls wait for the next day");
        let refused = spend.check_tokens().expect_err("over the budget");
        assert_eq!(refused, OverBudget::Daily { used: 1000, budget: 1000 });
        assert!(refused.to_string().contains("daily_token_budget"), "{refused}");
    }

    #[tokio::test]
    async fn strangers_together_leave_the_rest_of_the_day_to_the_owner() {
        // 20 % of 10,000 each, 80 % in all: four strangers fill the strangers' share.
        let spend = budget(10_000, 0.2);
        for i in 0..4 {
            let payer = format!("did:plc:s{i}");
            paid_by(vec![payer.clone()], async {
                assert!(spend.check_tokens().is_ok(), "stranger {i} is within every share");
                spend.add_tokens(2000);
            })
            .await;
        }
        let fifth = "did:plc:s4".to_owned();
        let refused = spend.stranger_allowed(&fifth).expect_err("the strangers' share is used up");
        assert_eq!(refused, OverBudget::Strangers { used: 8000, share: 8000 });
        assert!(refused.to_string().contains("strangers_share"), "{refused}");
        paid_by(vec![fifth], async { assert!(spend.check_tokens().is_err(), "nor is any call they pay for") }).await;
        // The owner is still answered: the budget has 2,000 tokens left.
        assert!(spend.check_tokens().is_ok() && !spend.capped());
        spend.add_tokens(1999);
        assert!(spend.check_tokens().is_ok());
    }

    #[tokio::test]
    async fn a_stranger_may_not_spend_more_than_its_share_and_others_go_on() {
        let spend = budget(10_000, 0.1);
        let (eve, bob) = ("did:plc:eve".to_owned(), "did:plc:bob".to_owned());
        paid_by(vec![eve.clone()], async {
            assert!(spend.check_tokens().is_ok());
            spend.add_tokens(999);
            assert!(spend.check_tokens().is_ok(), "one token under the share");
            spend.add_tokens(1);
            let refused = spend.check_tokens().expect_err("at the share");
            assert_eq!(refused, OverBudget::Share { payer: eve.clone(), used: 1000, share: 1000 });
        })
        .await;
        assert!(spend.stranger_allowed(&eve).is_err());
        assert!(spend.stranger_allowed(&bob).is_ok(), "another stranger has its own share");
        paid_by(vec![bob.clone()], async { assert!(spend.check_tokens().is_ok()) }).await;
        // The owner and the agent's own runs pay no share: only the budget bounds them.
        spend.add_tokens(5000);
        assert!(spend.check_tokens().is_ok());
        assert!(!spend.capped());
    }

    #[tokio::test]
    async fn a_call_for_several_strangers_is_split_between_them() {
        let spend = budget(10_000, 0.1);
        let payers = vec!["did:plc:a".to_owned(), "did:plc:b".to_owned()];
        paid_by(payers.clone(), async { spend.add_tokens(1500) }).await;
        // 750 each: both under their share of 1,000.
        assert!(payers.iter().all(|p| spend.stranger_allowed(p).is_ok()));
        paid_by(payers.clone(), async { spend.add_tokens(500) }).await;
        assert!(payers.iter().all(|p| spend.stranger_allowed(p).is_err()));
        assert_eq!(spend.tokens_today(), 2000);
    }

    #[test]
    fn no_budget_never_refuses() {
        let spend = budget(0, 0.1);
        spend.add_tokens(u64::MAX);
        assert!(spend.check_tokens().is_ok() && !spend.capped());
        assert!(spend.stranger_allowed("did:plc:x").is_ok());
    }

    #[tokio::test]
    async fn tokens_are_priced_per_million_and_the_cap_refuses_once_reached() {
        let spend = Spend::new(&config(3.0, 15.0, 0.01), Metrics::default(), None);
        assert!(spend.check().is_ok());
        // 1000 prompt tokens at 3 USD/M and 200 completion tokens at 15 USD/M: 0.006 USD.
        spend.add(1000, 200).await;
        assert!((spend.today_usd() - 0.006).abs() < 1e-9, "{}", spend.today_usd());
        assert!(spend.check().is_ok(), "under the cap");
        spend.add(1000, 200).await;
        assert!(spend.capped());
        let refused = spend.check().expect_err("over the cap");
        assert!(refused.to_string().contains("daily_spend_cap"), "{refused}");
    }

    #[tokio::test]
    async fn no_prices_no_spend_and_no_cap_never_refuses() {
        let spend = Spend::new(&config(0.0, 0.0, 0.0), Metrics::default(), None);
        spend.add(10_000_000, 10_000_000).await;
        assert_eq!(spend.today_usd(), 0.0);
        assert!(spend.check().is_ok() && !spend.capped() && spend.cap_usd().is_none());
    }
}
