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
//! A run that closes with no signal at all is not reported: silence is no evidence either way.
//!
//! | signal | weight | seen as |
//! |---|---|---|
//! | liked | +1.0 | the person answered liked the agent's reply |
//! | thanked | +1.0 | they answered the reply with thanks |
//! | went on | +0.3 | they answered the reply, and it was neither thanks nor a correction |
//! | corrected | −0.7 | they answered that the reply was wrong |
//! | complained | −1.0 | they answered with a complaint (useless, spam, stop) |
//! | blocked | −1.0 | they blocked the agent (seen on their profile when the run closes) |
//!
//! The reward is the sum, clamped to [−1, 1]; a run is a success when it is above 0. Muting is
//! private on Bluesky, so the agent cannot see it; a mute counts as silence.

use serde::{Deserialize, Serialize};

use druse_protocol::UnixMillis;

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
            Signal::WentOn => 0.3,
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

/// Words and phrases of a thank-you (lowercase; whole words).
const THANKS: [&str; 10] =
    ["thanks", "thank you", "thx", "ty", "appreciate it", "that helped", "helpful", "perfect", "worked", "brilliant"];

/// Words and phrases of a correction.
const CORRECTIONS: [&str; 12] = [
    "wrong",
    "incorrect",
    "not right",
    "not true",
    "that's not",
    "thats not",
    "that is not",
    "you're mistaken",
    "mistake",
    "didn't work",
    "did not work",
    "doesn't work",
];

/// Words and phrases of a complaint.
const COMPLAINTS: [&str; 9] =
    ["useless", "spam", "stop replying", "go away", "annoying", "leave me alone", "shut up", "bad bot", "stop it"];

/// Whether `phrase` occurs in `text` at word boundaries.
fn says(text: &str, phrase: &str) -> bool {
    let mut from = 0;
    while let Some(at) = text[from..].find(phrase) {
        let start = from + at;
        let end = start + phrase.len();
        let before = text[..start].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
        let after = text[end..].chars().next().is_none_or(|c| !c.is_alphanumeric());
        if before && after {
            return true;
        }
        from = end;
    }
    false
}

/// What an answer to the agent's reply says about it: a complaint outweighs a correction,
/// which outweighs thanks ("thanks, but that's wrong" is a correction).
pub fn classify(text: &str) -> Signal {
    let lower = text.to_lowercase().replace('’', "'");
    if COMPLAINTS.iter().any(|p| says(&lower, p)) {
        Signal::Complained
    } else if CORRECTIONS.iter().any(|p| says(&lower, p)) {
        Signal::Corrected
    } else if THANKS.iter().any(|p| says(&lower, p)) {
        Signal::Thanked
    } else {
        Signal::WentOn
    }
}

/// A run's reward from its signals: their weights summed and clamped to [−1, 1]; `None`
/// without any signal. Each kind counts once (two likes are one like).
pub fn reward(signals: &[Signal]) -> Option<f64> {
    if signals.is_empty() {
        return None;
    }
    let mut seen: Vec<Signal> = Vec::new();
    for s in signals {
        if !seen.contains(s) {
            seen.push(*s);
        }
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
pub struct Run {
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
    /// When the last signal came.
    #[serde(default)]
    pub last_signal_at: Option<UnixMillis>,
}

impl Run {
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
        assert_eq!(reward(&[Signal::WentOn]), Some(0.3));
        let corrected = reward(&[Signal::Corrected]).unwrap();
        assert!(corrected < 0.0);
        let mixed = reward(&[Signal::Liked, Signal::Corrected]).unwrap();
        assert!((mixed - 0.3).abs() < 1e-9, "a like then a correction: {mixed}");
        assert_eq!(reward(&[Signal::Blocked, Signal::Complained]), Some(-1.0));
    }

    fn run() -> Run {
        Run {
            id: "r".into(),
            at: 1_000,
            answered: vec![Answered { reply: "at://agent/post/1".into(), person: "did:plc:ann".into() }],
            episodes: vec![7],
            skill: None,
            signals: Vec::new(),
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
