//! Trust-based supersession (seed 003) and reconciliation (seed 000).
//!
//! A new value for the same subject and attribute supersedes the old one: with confidence 0.7
//! when nothing signals a correction (recency bias, the conflict is logged), and with 1.0 when
//! the user explicitly corrects ("wait", "actually", "I meant", "sorry, it's").
//! Reconciliation compares a new observation with the three most similar active ones and
//! returns ADD, UPDATE, DELETE or NOOP, behind a trait an LLM reconciler can implement later.

use std::sync::LazyLock;

use regex::RegexSet;
use serde::{Deserialize, Serialize};

use crate::crystal::CrystalId;

static CORRECTION: LazyLock<RegexSet> = LazyLock::new(|| {
    // Proof of impossibility: the patterns are fixed and valid.
    #[allow(clippy::unwrap_used)]
    RegexSet::new([
        r"(?i)^\s*(wait|oops|nope|correction)\b[,.!: ]",
        r"(?i)^\s*no\s*[,.!:;-]",
        r"(?i)\bactually\b",
        r"(?i)\bi meant\b",
        r"(?i)\bsorry,? (it'?s|it is|i meant|that'?s|that was)\b",
        r"(?i)\bi got (the|that|it) \w* ?wrong\b",
        r"(?i)\bnot \S+(\s\S+)?,? but\b",
        r"(?i)\bscratch that\b",
        r"(?i)\b(let me|i need to) correct\b",
    ])
    .unwrap()
});

static NEGATION: LazyLock<RegexSet> = LazyLock::new(|| {
    // Proof of impossibility: the patterns are fixed and valid.
    #[allow(clippy::unwrap_used)]
    RegexSet::new([
        r"(?i)\b(no longer|not anymore|any ?more)\b",
        r"(?i)\b(forget|disregard|ignore) (that|what i said|it)\b",
        r"(?i)\bisn'?t true\b",
        r"(?i)\b(quit|stopped|left|cancel+ed)\b",
    ])
    .unwrap()
});

/// Compiles the signals above now rather than on the first memory added (see
/// [`crate::compile_patterns`]).
pub fn compile() {
    LazyLock::force(&CORRECTION);
    LazyLock::force(&NEGATION);
}

/// Whether `text` explicitly corrects something said before (seed 003's signals).
pub fn is_explicit_correction(text: &str) -> bool {
    CORRECTION.is_match(text)
}

/// Whether `text` retracts something said before ("not anymore", "forget that").
pub fn is_retraction(text: &str) -> bool {
    NEGATION.is_match(text)
}

/// The confidence a superseding value gets (seed 003): 1.0 for an explicit correction,
/// 0.7 for a plain newer value.
pub fn supersession_confidence(text: &str, config: &Config) -> f64 {
    if is_explicit_correction(text) { config.explicit_correction_confidence } else { config.supersede_confidence }
}

/// Thresholds of supersession and reconciliation; `Default` holds the seeds' numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Seed 003: confidence of a value that supersedes without a correction signal (0.7).
    pub supersede_confidence: f64,
    /// Seed 003: confidence of an explicit correction (1.0).
    pub explicit_correction_confidence: f64,
    /// Seed 000: how many similar active observations reconciliation compares against (3).
    pub candidates: usize,
    /// At or above this similarity a new observation says nothing new (NOOP).
    pub duplicate_similarity: f64,
    /// At or above this similarity a new observation is about the same thing (UPDATE).
    pub same_topic_similarity: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            supersede_confidence: 0.7,
            explicit_correction_confidence: 1.0,
            candidates: 3,
            duplicate_similarity: 0.97,
            same_topic_similarity: 0.55,
        }
    }
}

/// An active observation reconciliation may compare against.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: CrystalId,
    pub text: String,
    pub similarity: f64,
    pub subject: Option<String>,
    pub attribute: Option<String>,
    pub created_at: u64,
}

/// What to do with a new observation (seed 000).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum Decision {
    /// Store it as a new row.
    Add,
    /// Store it and supersede `target` with it.
    Update { target: CrystalId, confidence: f64 },
    /// Supersede `target` and store nothing new.
    Delete { target: CrystalId },
    /// It says nothing new; `target` is reinforced instead.
    Noop { target: CrystalId },
}

/// Decides how a new observation relates to what is stored; the agent's LLM implements it too.
pub trait Reconciler: Send + Sync + std::fmt::Debug {
    /// `candidates` are the most similar active observations in the same namespace, best first.
    fn reconcile(
        &self,
        text: &str,
        subject: Option<&str>,
        attribute: Option<&str>,
        candidates: &[Candidate],
    ) -> Decision;
}

/// The rule-based reconciler.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub config: Config,
}

impl Reconciler for Rules {
    /// 1. The same subject and attribute: a new value supersedes (UPDATE), the same text is
    ///    NOOP. 2. Near-identical text: NOOP. 3. An explicit correction or a retraction targets
    ///    the most similar candidate by the same speaker that shares at least one word (the
    ///    newest on ties): UPDATE at 1.0, or DELETE. 4. The most similar candidate, when it is
    ///    by the same speaker, shares a word and is on the same topic: UPDATE at 0.7.
    ///    5. Otherwise ADD.
    fn reconcile(
        &self,
        text: &str,
        subject: Option<&str>,
        attribute: Option<&str>,
        candidates: &[Candidate],
    ) -> Decision {
        let candidates = &candidates[..candidates.len().min(self.config.candidates)];
        let confidence = supersession_confidence(text, &self.config);
        if let (Some(s), Some(a)) = (subject, attribute) {
            let keyed = candidates.iter().find(|c| same_key(c.subject.as_deref(), c.attribute.as_deref(), s, a));
            return match keyed {
                Some(c) if normalise(&c.text) == normalise(text) => Decision::Noop { target: c.id },
                Some(c) => Decision::Update { target: c.id, confidence },
                None => Decision::Add,
            };
        }
        if let Some(best) = candidates.first().filter(|c| c.similarity >= self.config.duplicate_similarity) {
            return Decision::Noop { target: best.id };
        }
        // A correction, a retraction or a newer value replaces only what the same speaker
        // said about the same thing: never another person's words.
        let related = |c: &&Candidate| same_speaker(&c.text, text) && shares_a_word(&c.text, text);
        if is_explicit_correction(text) || is_retraction(text) {
            let target = candidates
                .iter()
                .filter(related)
                .max_by(|a, b| a.similarity.total_cmp(&b.similarity).then(a.created_at.cmp(&b.created_at)));
            if let Some(target) = target {
                return if is_retraction(text) && !is_explicit_correction(text) {
                    Decision::Delete { target: target.id }
                } else {
                    Decision::Update { target: target.id, confidence }
                };
            }
        }
        match candidates.first().filter(related) {
            Some(best) if best.similarity >= self.config.same_topic_similarity => {
                Decision::Update { target: best.id, confidence }
            }
            _ => Decision::Add,
        }
    }
}

/// Whether a stored subject and attribute name the same thing as `subject` and `attribute`
/// (case does not matter): then a new value supersedes the old one.
pub fn same_key(stored_subject: Option<&str>, stored_attribute: Option<&str>, subject: &str, attribute: &str) -> bool {
    stored_subject.is_some_and(|s| s.eq_ignore_ascii_case(subject))
        && stored_attribute.is_some_and(|a| a.eq_ignore_ascii_case(attribute))
}

/// Who said `text`, when it names its speaker the way a transcript does ("Melanie: ...").
pub fn speaker(text: &str) -> Option<String> {
    let (name, rest) = text.split_once(':')?;
    let name = name.trim();
    let plausible = !name.is_empty()
        && name.len() <= 40
        && name.split_whitespace().count() <= 3
        && name.chars().all(|c| c.is_alphanumeric() || c == ' ' || c == '-' || c == '_' || c == '.' || c == '\'')
        && !rest.starts_with("//");
    plausible.then(|| name.to_lowercase())
}

/// Whether two texts come from the same speaker: both name the same one, or neither names one.
fn same_speaker(a: &str, b: &str) -> bool {
    speaker(a) == speaker(b)
}

fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "is", "it", "it's", "its", "i", "to", "of", "and", "or", "in", "on", "at", "my", "was", "be",
    "wait", "actually", "sorry", "meant", "that", "this", "not", "no",
];

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
}

fn shares_a_word(a: &str, b: &str) -> bool {
    let a: std::collections::HashSet<String> = words(a).collect();
    words(b).any(|w| a.contains(&w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_corrections_are_detected() {
        for text in [
            "Wait, actually it's March 22 - I got the date wrong",
            "actually, it's March 22",
            "I meant Tuesday",
            "sorry, it's Sarah not Sara",
            "no, the meeting is at 3",
            "scratch that, we fly Friday",
            "I got the date wrong",
        ] {
            assert!(is_explicit_correction(text), "{text}");
        }
    }

    #[test]
    fn ordinary_statements_are_not_corrections() {
        for text in [
            "Dad's surgery is March 29",
            "I waited for the bus",
            "the actual cost was high",
            "no problem at all",
            "I mean it when I say thanks",
            "she is sorry for the delay",
        ] {
            assert!(!is_explicit_correction(text), "{text}");
        }
    }

    #[test]
    fn correction_supersedes_at_one_and_a_plain_update_at_point_seven() {
        let c = Config::default();
        assert_eq!(supersession_confidence("wait, actually it's March 22", &c), 1.0);
        assert_eq!(supersession_confidence("Dad's surgery is March 29", &c), 0.7);
    }

    fn candidate(id: CrystalId, text: &str, similarity: f64) -> Candidate {
        Candidate { id, text: text.into(), similarity, subject: None, attribute: None, created_at: id }
    }

    #[test]
    fn same_subject_and_attribute_is_an_update() {
        let r = Rules::default();
        let old = Candidate {
            subject: Some("dad".into()),
            attribute: Some("surgery date".into()),
            ..candidate(1, "Dad's surgery is March 15", 0.3)
        };
        let d = r.reconcile("Dad's surgery is March 29", Some("Dad"), Some("surgery date"), std::slice::from_ref(&old));
        assert_eq!(d, Decision::Update { target: 1, confidence: 0.7 });
        let d = r.reconcile("Dad's surgery is March 15", Some("dad"), Some("surgery date"), &[old]);
        assert_eq!(d, Decision::Noop { target: 1 });
    }

    #[test]
    fn explicit_correction_targets_the_most_similar_related_candidate() {
        let r = Rules::default();
        let candidates = [candidate(1, "Dad's surgery is March 15", 0.2), candidate(2, "likes crows", 0.25)];
        let d = r.reconcile("Wait, actually it's March 22 - I got the date wrong", None, None, &candidates);
        assert_eq!(d, Decision::Update { target: 1, confidence: 1.0 });
    }

    #[test]
    fn retraction_is_a_delete() {
        let r = Rules::default();
        let d = r.reconcile("I don't work at Acme anymore", None, None, &[candidate(4, "works at Acme", 0.4)]);
        assert_eq!(d, Decision::Delete { target: 4 });
    }

    #[test]
    fn duplicates_are_noop_and_unrelated_facts_are_added() {
        let r = Rules::default();
        assert_eq!(
            r.reconcile("likes rust", None, None, &[candidate(3, "likes rust", 0.99)]),
            Decision::Noop { target: 3 }
        );
        assert_eq!(r.reconcile("has a cat", None, None, &[candidate(3, "likes rust", 0.1)]), Decision::Add);
        assert_eq!(r.reconcile("has a cat", None, None, &[]), Decision::Add);
    }

    #[test]
    fn a_correction_never_replaces_another_speakers_words() {
        let r = Rules::default();
        let caroline = candidate(1, "Caroline: I went to the LGBTQ support group yesterday", 0.6);
        let d = r.reconcile(
            "Melanie: Actually I went to a pottery class yesterday",
            None,
            None,
            std::slice::from_ref(&caroline),
        );
        assert_eq!(d, Decision::Add);
        let d =
            r.reconcile("Melanie: I stopped going to the support group", None, None, std::slice::from_ref(&caroline));
        assert_eq!(d, Decision::Add, "a retraction by someone else deletes nothing");
        let d = r.reconcile("Caroline: Actually I went to the support group on Monday", None, None, &[caroline]);
        assert_eq!(d, Decision::Update { target: 1, confidence: 1.0 }, "the same speaker may correct herself");
    }

    #[test]
    fn a_similar_text_about_something_else_is_not_an_update() {
        let r = Rules::default();
        let d = r.reconcile("enjoys pottery", None, None, &[candidate(2, "likes painting sunsets", 0.7)]);
        assert_eq!(d, Decision::Add);
    }

    #[test]
    fn speakers_are_read_from_transcript_prefixes_only() {
        assert_eq!(speaker("Melanie: hi").as_deref(), Some("melanie"));
        assert_eq!(speaker("Dr. Jo Smith: hi").as_deref(), Some("dr. jo smith"));
        assert_eq!(speaker("see https://example.com"), None);
        assert_eq!(speaker("the meeting is at 3: bring notes, and the long agenda too"), None);
        assert_eq!(speaker("no speaker here"), None);
    }

    #[test]
    fn only_three_candidates_are_considered() {
        let r = Rules::default();
        let mut candidates: Vec<_> = (0..3).map(|i| candidate(i, "unrelated words here", 0.1)).collect();
        candidates.push(candidate(9, "Dad's surgery is March 15", 0.05));
        assert_eq!(r.reconcile("actually it's March 22", None, None, &candidates), Decision::Add);
    }
}
