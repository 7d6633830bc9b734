//! What followed a run (issue 26): a run's reward comes from how the people it answered
//! reacted within a window, never from the agent's own view of what it did.
//!
//! A *run* is one batch that replied to someone. The agent keeps it pending with the replies it
//! posted, watches the notifications for reactions to those replies from the people they
//! answered, and closes it:
//! - once it has a signal and none came for `outcome_quiet` (a like then a thank-you are one
//!   verdict, not two), or
//! - when `outcome_window` (24 h) has passed since the run.
//!
//! A run that closes with no clear signal is not reported: silence, or a conversation going on,
//! is no evidence either way. Replies are read by [`super::reaction`], which understands
//! negation ("not helpful", "still hasn't worked" are corrections, "no thanks" is no thanks).
//!
//! | signal | weight | seen as |
//! |---|---|---|
//! | liked | +1.0 | the person answered liked the agent's reply |
//! | thanked | +1.0 | they answered the reply with thanks |
//! | went on | none | they answered the reply with no clear signal (a question, small talk, "no thanks") |
//! | corrected | −0.7 | they answered that the reply was wrong |
//! | complained | −1.0 | they answered with a complaint (useless, spam, stop) |
//! | blocked | −1.0 | they blocked the agent (seen on their profile when the run closes) |
//!
//! The reward is the sum, clamped to [−1, 1]; a run is a success when it is above 0. Muting is
//! private on Bluesky, so the agent cannot see it; a mute counts as silence.

use serde::{Deserialize, Serialize};

use druse_protocol::UnixMillis;

use super::reaction::Reading;

/// A reaction to one of a run's replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    Liked,
    Thanked,
    WentOn,
    Corrected,
    Complained,
    Blocked,
}

impl Signal {
    /// The signal's weight in a run's reward (the module's table).
    pub fn weight(self) -> f64 {
        match self {
            Signal::Liked | Signal::Thanked => 1.0,
            Signal::WentOn => 0.0,
            Signal::Corrected => -0.7,
            Signal::Complained | Signal::Blocked => -1.0,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Liked => "liked",
            Signal::Thanked => "thanked",
            Signal::WentOn => "went_on",
            Signal::Corrected => "corrected",
            Signal::Complained => "complained",
            Signal::Blocked => "blocked",
        }
    }
}

/// What an answer to the agent's reply says about it (see [`super::reaction`]): a complaint
/// outweighs a correction, which outweighs thanks ("thanks, but that's wrong" is a
/// correction); an answer with no clear signal is the conversation going on.
pub fn classify(text: &str) -> Signal {
    match super::reaction::read(text) {
        Reading::Thanked => Signal::Thanked,
        Reading::Corrected => Signal::Corrected,
        Reading::Complained => Signal::Complained,
        Reading::Unclear => Signal::WentOn,
    }
}

/// A run's reward from its signals: their weights summed and clamped to [−1, 1]; `None`
/// without a clear signal (a conversation going on says nothing of the answer). Each kind
/// counts once (two likes are one like).
pub fn reward(signals: &[Signal]) -> Option<f64> {
    let mut seen: Vec<Signal> = Vec::new();
    for s in signals.iter().filter(|s| **s != Signal::WentOn) {
        if !seen.contains(s) {
            seen.push(*s);
        }
    }
    if seen.is_empty() {
        return None;
    }
    Some(seen.iter().map(|s| s.weight()).sum::<f64>().clamp(-1.0, 1.0))
}

/// One reply a run posted, and who it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    /// The agent's reply post.
    pub reply: String,
    /// The DID of the person answered: only their reactions count.
    pub person: String,
}

/// A run waiting for its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Watched {
    pub id: String,
    pub at: UnixMillis,
    pub answered: Vec<Answered>,
    /// The stored exchange(s) of the run (episode crystals), for the distill pass.
    pub episodes: Vec<u64>,
    /// The swarm skill the run used (its content id), reported with the run's reward.
    #[serde(default)]
    pub skill: Option<String>,
    #[serde(default)]
    pub signals: Vec<Signal>,
    /// The signals from people the agent stands behind (`outcome_from`): the only ones an
    /// execution report may rest on.
    #[serde(default)]
    pub backed: Vec<Signal>,
    /// When the last signal came.
    #[serde(default)]
    pub last_signal_at: Option<UnixMillis>,
}

impl Watched {
    /// Notes a signal from `person` about `reply`; false if the run has no such reply to
    /// that person (a stranger's like of the agent's reply is not the answered person's).
    pub fn note(&mut self, reply: &str, person: &str, signal: Signal, now: UnixMillis) -> bool {
        if !self.answered.iter().any(|a| a.reply == reply && a.person == person) {
            return false;
        }
        self.signals.push(signal);
        self.signals.truncate(64);
        self.last_signal_at = Some(now);
        true
    }

    /// Notes that the agent stands behind a signal [`Watched::note`] took.
    pub fn back(&mut self, signal: Signal) {
        self.backed.push(signal);
        self.backed.truncate(64);
    }

    /// Whether the run closes now: quiet long enough after a signal, or past its window.
    pub fn closes(&self, now: UnixMillis, window_ms: u64, quiet_ms: u64) -> bool {
        now.saturating_sub(self.at) >= window_ms
            || self.last_signal_at.is_some_and(|at| now.saturating_sub(at) >= quiet_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_thanks_corrections_complaints_or_a_conversation_going_on() {
        for (text, want) in [
            ("thanks, that helped!", Signal::Thanked),
            ("Thank you so much", Signal::Thanked),
            ("ty", Signal::Thanked),
            ("that's wrong, the oven should be hotter", Signal::Corrected),
            ("That’s not what I asked", Signal::Corrected),
            ("thanks but it didn't work", Signal::Corrected),
            ("this is useless, stop replying", Signal::Complained),
            ("and what about rye flour?", Signal::WentOn),
            // Whole words only: "type" holds "ty", "wrongly" is not the word.
            ("what type of flour?", Signal::WentOn),
        ] {
            assert_eq!(classify(text), want, "{text}");
        }
    }

    #[test]
    fn a_reward_sums_distinct_signals_and_needs_one() {
        assert_eq!(reward(&[]), None, "silence is no evidence");
        assert_eq!(reward(&[Signal::Liked]), Some(1.0));
        assert_eq!(reward(&[Signal::Liked, Signal::Liked, Signal::Thanked]), Some(1.0), "clamped, each kind once");
        assert_eq!(reward(&[Signal::WentOn]), None, "a conversation going on is no evidence");
        assert_eq!(reward(&[Signal::WentOn, Signal::Liked]), Some(1.0));
        let corrected = reward(&[Signal::Corrected]).unwrap();
        assert!(corrected < 0.0);
        let mixed = reward(&[Signal::Liked, Signal::Corrected]).unwrap();
        assert!((mixed - 0.3).abs() < 1e-9, "a like then a correction: {mixed}");
        assert_eq!(classify("that was not helpful"), Signal::Corrected, "negation is read");
        assert_eq!(classify("no thanks"), Signal::WentOn);
        assert_eq!(reward(&[Signal::Blocked, Signal::Complained]), Some(-1.0));
    }

    fn run() -> Watched {
        Watched {
            id: "r".into(),
            at: 1_000,
            answered: vec![Answered { reply: "at://agent/post/1".into(), person: "did:plc:ann".into() }],
            episodes: vec![7],
            skill: None,
            signals: Vec::new(),
            backed: Vec::new(),
            last_signal_at: None,
        }
    }

    #[test]
    fn only_the_answered_persons_reactions_to_the_runs_replies_count() {
        let mut r = run();
        assert!(!r.note("at://agent/post/1", "did:plc:stranger", Signal::Liked, 2_000));
        assert!(!r.note("at://agent/post/2", "did:plc:ann", Signal::Liked, 2_000));
        assert!(r.signals.is_empty());
        assert!(r.note("at://agent/post/1", "did:plc:ann", Signal::Liked, 2_000));
        assert_eq!(r.signals, vec![Signal::Liked]);
    }

    #[test]
    fn a_run_closes_when_quiet_after_a_signal_or_when_its_window_ends() {
        let (window, quiet) = (10_000, 1_000);
        let mut r = run();
        assert!(!r.closes(5_000, window, quiet), "no signal yet: it waits for the window");
        assert!(r.closes(11_000, window, quiet), "the window closed");
        r.note("at://agent/post/1", "did:plc:ann", Signal::Liked, 2_000);
        assert!(!r.closes(2_500, window, quiet), "another reaction may follow");
        assert!(r.closes(3_000, window, quiet));
    }
}
