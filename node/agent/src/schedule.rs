//! When the entry points beside notification batches run (seed 001): musing on its interval
//! when `[agent] musing` is on, the daily reflection once per UTC day from its hour, and
//! review on demand only. The times are kept in the agent's state, so a restart neither
//! repeats nor forgets them. Musing also obeys seed 003's proactive rules: never
//! mid-conversation, and at most one per session, a session being activity without a gap
//! longer than `session_gap`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use druse_memory::crystal::CrystalId;
use druse_protocol::UnixMillis;

use crate::config;

/// An entry point of the one agent loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// Poll the notifications now and run their batches.
    Notifications,
    /// An original post, if the model wants one (at most one per session).
    Musing,
    /// The day's episodic memories become one `summary` crystal (once per UTC day).
    Reflection,
    /// A pass over recent observations: keep, update, or archive each.
    Review,
}

impl Entry {
    pub fn as_str(self) -> &'static str {
        match self {
            Entry::Notifications => "notifications",
            Entry::Musing => "musing",
            Entry::Reflection => "reflection",
            Entry::Review => "review",
        }
    }
}

pub const DAY_MS: u64 = 24 * 3600 * 1000;

/// The UTC day number of `at`.
pub fn day(at: UnixMillis) -> u64 {
    at / DAY_MS
}

/// The UTC hour (0–23) of `at`.
pub fn hour(at: UnixMillis) -> u8 {
    ((at % DAY_MS) / 3_600_000) as u8
}

/// What the schedule remembers, persisted in the agent's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Schedule {
    /// The last notification batch handled (a conversation).
    pub last_conversation: UnixMillis,
    /// The last activity of any kind: a conversation or a musing.
    pub last_activity: UnixMillis,
    /// When the current session began (the first activity after a gap).
    pub session_start: UnixMillis,
    /// The last musing posted.
    pub mused_at: UnixMillis,
    /// The last time the musing timer fired (posted or not).
    pub musing_tried_at: UnixMillis,
    /// The UTC day of the last reflection, plus one (0: never).
    pub reflected_day: u64,
    /// When a reflection last failed (the model down): it is tried again after a pause.
    pub reflection_failed_at: UnixMillis,
}

/// The pause before a failed reflection is tried again.
pub const REFLECTION_RETRY_MS: u64 = 10 * 60 * 1000;

/// Why a musing may not run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoMusing {
    /// A conversation went on within the session gap.
    MidConversation,
    /// The current session already had its musing.
    AlreadyThisSession,
}

impl NoMusing {
    pub fn sentence(self) -> &'static str {
        match self {
            NoMusing::MidConversation => "never mid-conversation: a conversation went on within the session gap",
            NoMusing::AlreadyThisSession => "at most one musing per session: this session already had one",
        }
    }
}

impl Schedule {
    /// Records activity at `now`; a gap longer than `gap` starts a new session.
    pub fn active(&mut self, now: UnixMillis, gap: Duration, conversation: bool) {
        if self.last_activity == 0 || now.saturating_sub(self.last_activity) > gap.as_millis() as u64 {
            self.session_start = now;
        }
        self.last_activity = self.last_activity.max(now);
        if conversation {
            self.last_conversation = self.last_conversation.max(now);
        }
    }

    /// Whether a musing may post at `now` (seed 003's proactive rules).
    pub fn may_muse(&self, now: UnixMillis, gap: Duration) -> Result<(), NoMusing> {
        let gap = gap.as_millis() as u64;
        if self.last_conversation != 0 && now.saturating_sub(self.last_conversation) <= gap {
            return Err(NoMusing::MidConversation);
        }
        let same_session = self.last_activity != 0 && now.saturating_sub(self.last_activity) <= gap;
        if same_session && self.mused_at != 0 && self.mused_at >= self.session_start {
            return Err(NoMusing::AlreadyThisSession);
        }
        Ok(())
    }

    /// Whether today's reflection is done.
    pub fn reflected_today(&self, now: UnixMillis) -> bool {
        self.reflected_day == day(now) + 1
    }

    /// The entry points whose time has come at `now`.
    pub fn due(&self, config: &config::Config, now: UnixMillis) -> Vec<Entry> {
        let mut out = Vec::new();
        if config.musing && now.saturating_sub(self.musing_tried_at) >= config.musing_interval.as_millis() as u64 {
            out.push(Entry::Musing);
        }
        if config.reflection_hour.is_some_and(|h| hour(now) >= h)
            && !self.reflected_today(now)
            && now.saturating_sub(self.reflection_failed_at) >= REFLECTION_RETRY_MS
        {
            out.push(Entry::Reflection);
        }
        out
    }
}

/// What running an entry point did (`POST /v1/agent/run`, `druse-node agent run`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub entry: Entry,
    /// `done`, `skipped` (a rule or the schedule said no) or `failed` (the model or Bluesky).
    pub result: String,
    pub detail: String,
    /// The post a musing made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<String>,
    /// The crystals written: the summary of a reflection, the new values of a review.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crystals: Vec<CrystalId>,
    /// A review's decisions: crystal ids kept, updated and archived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<CrystalId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updated: Vec<CrystalId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub archived: Vec<CrystalId>,
    /// The per-person summaries a review wrote again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summaries: Vec<CrystalId>,
}

impl RunReport {
    pub(crate) fn new(entry: Entry, result: &str, detail: impl Into<String>) -> Self {
        Self {
            entry,
            result: result.into(),
            detail: detail.into(),
            post: None,
            crystals: Vec::new(),
            kept: Vec::new(),
            updated: Vec::new(),
            archived: Vec::new(),
            summaries: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;
    const GAP: Duration = Duration::from_secs(30 * 60);
    /// A UTC midnight.
    const MIDNIGHT: u64 = 20_415 * DAY_MS;

    #[test]
    fn musing_is_off_by_default_and_fires_on_its_interval_when_on() {
        let mut config = config::Config { reflection_hour: None, ..config::Config::default() };
        let s = Schedule::default();
        assert!(s.due(&config, MIDNIGHT).is_empty(), "off by default");
        config.musing = true;
        assert_eq!(s.due(&config, MIDNIGHT), [Entry::Musing]);
        let tried = Schedule { musing_tried_at: MIDNIGHT, ..s };
        assert!(tried.due(&config, MIDNIGHT + 119 * MIN).is_empty(), "2 h between tries");
        assert_eq!(tried.due(&config, MIDNIGHT + 120 * MIN), [Entry::Musing]);
    }

    #[test]
    fn reflection_fires_once_per_day_from_its_hour() {
        let config = config::Config { reflection_hour: Some(23), ..config::Config::default() };
        let mut s = Schedule::default();
        assert!(s.due(&config, MIDNIGHT + 22 * 60 * MIN).is_empty(), "before the hour");
        assert_eq!(s.due(&config, MIDNIGHT + 23 * 60 * MIN), [Entry::Reflection]);
        s.reflected_day = day(MIDNIGHT + 23 * 60 * MIN) + 1;
        assert!(s.reflected_today(MIDNIGHT + 23 * 60 * MIN + 59 * MIN));
        assert!(s.due(&config, MIDNIGHT + 23 * 60 * MIN + 59 * MIN).is_empty(), "once per day");
        let tomorrow = MIDNIGHT + DAY_MS;
        assert!(s.due(&config, tomorrow).is_empty(), "the next day, before the hour");
        assert_eq!(s.due(&config, tomorrow + 23 * 60 * MIN), [Entry::Reflection]);
        // A reflection that failed (the model down) waits before it is tried again.
        let failed = Schedule { reflection_failed_at: tomorrow + 23 * 60 * MIN, ..s };
        assert!(failed.due(&config, tomorrow + 23 * 60 * MIN + 9 * MIN).is_empty());
        assert_eq!(failed.due(&config, tomorrow + 23 * 60 * MIN + 10 * MIN), [Entry::Reflection]);
        let off = config::Config { reflection_hour: None, ..config::Config::default() };
        assert!(Schedule::default().due(&off, tomorrow + 23 * 60 * MIN).is_empty());
    }

    #[test]
    fn musing_is_never_mid_conversation_and_once_per_session() {
        let mut s = Schedule::default();
        assert_eq!(s.may_muse(MIDNIGHT, GAP), Ok(()), "a fresh agent may muse");
        s.active(MIDNIGHT, GAP, true);
        assert_eq!(s.may_muse(MIDNIGHT + 10 * MIN, GAP), Err(NoMusing::MidConversation));
        assert_eq!(s.may_muse(MIDNIGHT + 31 * MIN, GAP), Ok(()), "the conversation ended");
        // It muses: that starts a session, which gets no second musing.
        let t = MIDNIGHT + 31 * MIN;
        s.active(t, GAP, false);
        s.mused_at = t;
        assert_eq!(s.may_muse(t + MIN, GAP), Err(NoMusing::AlreadyThisSession));
        assert_eq!(s.may_muse(t + 29 * MIN, GAP), Err(NoMusing::AlreadyThisSession));
        // After a gap longer than 30 min, a new session may have its one musing.
        assert_eq!(s.may_muse(t + 31 * MIN, GAP), Ok(()));
    }
}
