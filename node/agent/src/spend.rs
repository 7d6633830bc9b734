//! What the model costs: tokens priced as configured (`agent.llm.prompt_price` and
//! `completion_price`, USD per million tokens), summed per UTC day in the agent's state so a
//! restart keeps the day's figure, and a daily cap (`daily_spend_cap`) past which the model is
//! asked nothing more until the next day.

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

    /// Whether today's spend has reached the cap.
    pub(crate) fn capped(&self) -> bool {
        self.cap.is_some_and(|cap| self.spent() >= cap)
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
