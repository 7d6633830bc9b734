//! Nothing personal leaves the node: the check a distilled skill passes before it may be
//! published, made when it is distilled and again on the final text at publish time, with
//! the terms of the episodes it came from.
//!
//! Two halves:
//! - [`personal_terms`]: what the episodes say about their people: handles and DIDs, names
//!   and places (capitalised inside a sentence, or after a cue such as "i'm", "my name is",
//!   "from", "lives in", "named", "here,"), numbers (any digit a person wrote), domains.
//! - [`leaks`]: whether a text names one of those terms, or on its own holds an email, a
//!   handle, a domain, a date, an age, an address, a third-person fact (an illness, a family
//!   tie, a belief, a job given as who someone is) or what the governance scan finds personal.
//!
//! It errs toward keeping a skill private: a skill that names its topic with a word a person
//! used as a name is refused too. A refused skill stays in memory, private.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use druse_memory::crystal::Namespace;
use druse_memory::governance::{self, Sensitivity, fixed};

// The patterns are fixed; `every_pattern_builds` builds each.
static EMAIL: LazyLock<Regex> = LazyLock::new(|| fixed(r"(?i)[a-z0-9._%+\-]+@[a-z0-9.\-]+\.[a-z]{2,}"));
static HANDLE: LazyLock<Regex> = LazyLock::new(|| fixed(r"(?i)(?:^|[^\w])@[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)+"));
static DATE: LazyLock<Regex> = LazyLock::new(|| {
    fixed(concat!(
        r"(?i)\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b",
        r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?\b",
        r"|\b\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:january|february|march|april|june|july|august|september|october|november|december)\b"
    ))
});
/// A bare domain: labels, a dot, and a top-level domain people use.
static DOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    fixed(concat!(
        r"(?i)\b[a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)*\.(?:com|org|net|edu|gov|io|ai|app|dev|me|info|biz|xyz",
        r"|social|blog|site|online|shop|tech|fr|de|uk|co|es|it|nl|be|ch|at|se|no|dk|fi|pl|pt|br|ca|au|jp",
        r"|cn|ru|in|eu|us|ly|tv|gg|sh|nz|ie|mx|ar|za|kr)\b"
    ))
});
/// An age, an address, where someone lives, or someone named.
static IDENTIFYING: LazyLock<Regex> = LazyLock::new(|| {
    fixed(concat!(
        r"(?i)\b\d+[- ]?(?:years?|yrs?)[- ]old\b|\byear[- ]old\b|\baged? \d+\b|\b\d+ ?(?:yo|y/o)\b",
        r"|\b\d+ [a-z]+ (?:street|st|avenue|ave|road|rd|lane|boulevard|blvd)\b",
        r"|\b(?:lives|living|live|based|born|grew up|resides|residing) (?:in|at|near)\b|\bmoved to\b",
        r"|\b(?:named|my name is|name's)\b",
    ))
});
/// Facts about a person: health, family ties, beliefs and identity, money and the law, and
/// a job given as who someone is ("a nurse with …", "works as a …").
static FACT: LazyLock<Regex> = LazyLock::new(|| {
    let jobs = "(?:nurse|doctor|teacher|lawyer|firefighter|police officer|officer|pilot|soldier|veteran|priest\
                |pastor|rabbi|imam|surgeon|dentist|pharmacist|midwife|cashier|waiter|waitress|farmer|plumber\
                |electrician|accountant|architect|journalist|professor|retiree)";
    fixed(&format!(
        "{}|{}|{}|{}|{}",
        concat!(
            r"(?i)\b(?:disease|diabetes|diabetic|celiac|coeliac|cancer|tumou?r|hiv|asthma|epilep\w*|depression",
            r"|depressed|anxiety|adhd|autism|autistic|bipolar|schizophreni\w*|pregnan\w*|miscarriage|allerg\w*",
            r"|diagnosed|diagnosis|illness|disability|disabilities|chemo\w*|medication|therapy|therapist|surgery",
            r"|hospital\w*|addict\w*|alcoholic|rehab|dementia|alzheimer\w*|infertil\w*|ivf)\b",
        ),
        concat!(
            r"(?i)\b(?:his|her|their|my|our) (?:wife|husband|partner|boyfriend|girlfriend|son|daughter|kids?",
            r"|children|child|mother|father|mom|mum|dad|sister|brother|baby|grandmother|grandfather|grandma",
            r"|grandpa|ex)\b|\b(?:with|has|have) (?:\w+ )?(?:kids|children|sons|daughters|grandchildren)\b",
        ),
        concat!(
            r"(?i)\b(?:muslim|christian|jewish|hindu|buddhist|atheist|catholic|mormon|gay|lesbian|bisexual",
            r"|transgender|queer|undocumented|refugee|asylum|divorced|widowed|bankrupt\w*|unemployed|arrested",
            r"|convicted|prison|jail|salary|in debt)\b",
        ),
        format_args!(r"(?i)\b(?:is|as) an? {jobs}\b|\b(?:works|working|job) as\b"),
        format_args!(r"(?i)\ban? {jobs} (?:with|who|from|in|at|whose|living|of)\b"),
    ))
});
/// A numbered step at the start of a line, as a rendered skill has them.
static STEP_NUMBER: LazyLock<Regex> = LazyLock::new(|| fixed(r"(?m)^\s*\d+\. "));

/// Words a person writes after a cue ("i'm …", "from …") that name no one and nowhere.
const NOT_NAMES: &[&str] = &[
    "a",
    "an",
    "the",
    "not",
    "so",
    "very",
    "really",
    "just",
    "also",
    "still",
    "here",
    "there",
    "back",
    "new",
    "sure",
    "sorry",
    "glad",
    "happy",
    "sad",
    "tired",
    "fine",
    "ok",
    "okay",
    "good",
    "great",
    "from",
    "in",
    "at",
    "on",
    "with",
    "to",
    "for",
    "of",
    "about",
    "like",
    "kinda",
    "pretty",
    "quite",
    "too",
    "always",
    "never",
    "able",
    "unable",
    "stuck",
    "lost",
    "done",
    "ready",
    "afraid",
    "worried",
    "curious",
    "confused",
    "new",
    "beginner",
    "total",
    "complete",
    "gonna",
    "my",
    "your",
    "our",
    "their",
    "his",
    "her",
    "its",
    "it",
    "this",
    "that",
    "these",
    "those",
    "what",
    "which",
    "who",
    "someone",
    "somewhere",
    "anywhere",
    "scratch",
    "home",
    "work",
    "school",
    "time",
    "now",
    "then",
    "memory",
    "today",
    "yesterday",
    "tomorrow",
    "last",
    "next",
    "one",
    "all",
    "me",
    "you",
    "them",
    "us",
    "him",
    "no",
    "any",
    "some",
    "every",
    "each",
    "way",
    "start",
    "and",
    "or",
    "but",
    "if",
    "when",
    "because",
    "i",
    "is",
    "was",
    "be",
    "am",
    "are",
    "bit",
    "little",
    "lot",
    "big",
    "fan",
    "trying",
    "going",
    "having",
    "getting",
    "looking",
    "doing",
    "feeling",
    "thinking",
    "asking",
];

/// Words that may start a sentence or be capitalised without naming anyone.
const COMMON: &[&str] = &[
    "I",
    "I'm",
    "I've",
    "I'd",
    "I'll",
    "The",
    "A",
    "An",
    "My",
    "Hi",
    "Hello",
    "Hey",
    "Thanks",
    "Please",
    "What",
    "How",
    "Why",
    "When",
    "Where",
    "Can",
    "Could",
    "Is",
    "Do",
    "Does",
    "Sure",
    "Yes",
    "No",
    "Ok",
    "Okay",
    "Well",
    "So",
    "Also",
    "Anyway",
    "Again",
    "Btw",
    "Oh",
    "Ah",
    "Hmm",
    "Sorry",
    "Dear",
    "Good",
    "Great",
    "Cool",
    "Wow",
    "Update",
    "Edit",
    "Question",
    "Quick",
    "Honestly",
    "Actually",
    "Yesterday",
    "Today",
    "Tomorrow",
    "Now",
    "Then",
    "First",
    "Second",
    "Finally",
    "Plus",
    "Note",
    "Morning",
    "Evening",
    "Night",
    "This",
    "That",
    "It",
    "We",
    "You",
    "Our",
    "Your",
    "Any",
    "Some",
    "Just",
    "But",
    "And",
    "Or",
    "If",
    "Any",
    "Help",
    "Thank",
];

/// Cues after which a person names themselves or someone ("i'm annika", "my friend bo").
const NAME_CUES: &[&str] = &["i'm", "im", "i’m", "am", "called", "named", "name's", "name", "is", "me"];
/// Cues after which a person names a place ("from lyon", "lives in turin").
const PLACE_CUES: &[&str] = &["from", "near", "visiting", "moved", "based", "live", "living", "lives", "born"];

/// The word after a cue: `words[i]`, or after "to"/"in" for "moved to", "lives in".
fn after_cue<'a>(words: &[&'a str], i: usize) -> Option<&'a str> {
    let next = words.get(i)?;
    if matches!(*next, "in" | "to" | "at" | "near") { words.get(i + 1).copied() } else { Some(next) }
}

/// A word as written, without the punctuation around it.
fn bare(word: &str) -> &str {
    word.trim_matches(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
}

/// What the episodes say about their people: handles (and their first label), DIDs, domains,
/// the words the users wrote capitalised inside a sentence (names, places) or after a cue
/// ("i'm annika from lyon"), and every word with a digit (ages, dates, addresses). The
/// agent's own lines (`agent`'s) give only capitalised names and numbers of two digits.
pub(crate) fn personal_terms(episodes: &[String], handles: &[String], agent: &str) -> BTreeSet<String> {
    let mut terms = BTreeSet::new();
    for h in handles {
        let h = h.trim_start_matches('@').to_lowercase();
        if let Some(first) = h.split('.').next().filter(|f| f.chars().count() >= 3) {
            terms.insert(first.to_owned());
        }
        terms.insert(h);
    }
    let own = format!("@{}:", agent.trim_start_matches('@'));
    for text in episodes {
        for line in text.lines() {
            let agents = !agent.is_empty() && line.starts_with(&own);
            // The exchange's lines are "@handle: text"; the handle is known above.
            let said = line.split_once(": ").map_or(line, |(_, t)| t);
            for m in DOMAIN.find_iter(said) {
                terms.insert(m.as_str().to_lowercase());
            }
            let words: Vec<&str> = said.split_whitespace().collect();
            let lower: Vec<String> = words.iter().map(|w| bare(w).to_lowercase()).collect();
            let lower: Vec<&str> = lower.iter().map(String::as_str).collect();
            for (i, raw) in words.iter().enumerate() {
                let word = raw.trim_matches(|c: char| !c.is_alphanumeric());
                if word.is_empty() {
                    continue;
                }
                let sentence_start = i == 0 || words[i - 1].ends_with(['.', '!', '?']);
                let capitalised = word.chars().next().is_some_and(char::is_uppercase);
                let digits = word.chars().filter(char::is_ascii_digit).count();
                if (capitalised && !sentence_start && !COMMON.contains(&word) && word.chars().count() >= 3)
                    || digits >= 2
                    || (digits >= 1 && !agents)
                {
                    terms.insert(word.to_lowercase());
                }
                if word.starts_with("did:") {
                    terms.insert(word.to_lowercase());
                }
                if agents {
                    continue;
                }
                // "Annika here", "Annika, my starter …", "Bob Okafor": a name that starts a
                // sentence.
                let next = words.get(i + 1).copied().unwrap_or("");
                let next_capitalised = bare(next).chars().next().is_some_and(char::is_uppercase);
                if capitalised
                    && sentence_start
                    && !COMMON.contains(&word)
                    && (raw.ends_with(',')
                        || next_capitalised
                        || matches!(bare(next).to_lowercase().as_str(), "here" | "speaking" | "again"))
                {
                    terms.insert(word.to_lowercase());
                }
                let cue = lower[i];
                let named = if NAME_CUES.contains(&cue) {
                    // "name is …", "i am …", "call me …"; "is" only after "name", "me" after "call".
                    let previous = if i > 0 { lower[i - 1] } else { "" };
                    let wanted = match cue {
                        "is" => previous == "name",
                        "me" => previous == "call",
                        _ => true,
                    };
                    if wanted { after_cue(&lower, i + 1) } else { None }
                } else if PLACE_CUES.contains(&cue) {
                    after_cue(&lower, i + 1)
                } else {
                    None
                };
                if let Some(term) = named.filter(|t| is_name(t)) {
                    terms.insert(term.to_owned());
                }
            }
        }
    }
    terms
}

/// Whether a word after a cue may be a name: letters, not a common word, not a verb in -ing.
fn is_name(word: &str) -> bool {
    word.chars().count() >= 2
        && word.chars().all(|c| c.is_alphabetic() || c == '-')
        && !NOT_NAMES.contains(&word)
        && !(word.ends_with("ing") && word.chars().count() > 5)
}

/// Why `text` may not leave the node, if it may not: it names something personal from the
/// episodes (`terms`, whole words), or on its own holds an email, a handle, a domain, a date,
/// an age, an address, a fact about a person, or the governance scan finds it personal or
/// confidential.
pub(crate) fn leaks(text: &str, terms: &BTreeSet<String>) -> Option<String> {
    if let Some(m) = EMAIL.find(text) {
        return Some(format!("it holds an email address ({})", m.as_str()));
    }
    if HANDLE.is_match(text) {
        return Some("it holds a handle".into());
    }
    if let Some(m) = DATE.find(text) {
        return Some(format!("it holds a date ({})", m.as_str()));
    }
    if let Some(m) = DOMAIN.find(text) {
        return Some(format!("it holds a domain ({})", m.as_str()));
    }
    if let Some(m) = IDENTIFYING.find(text) {
        return Some(format!("it says who or where someone is ({})", m.as_str().trim()));
    }
    if let Some(m) = FACT.find(text) {
        return Some(format!("it states a fact about a person ({})", m.as_str().trim()));
    }
    // A rendered skill numbers its steps; those numbers are no one's.
    let lower = STEP_NUMBER.replace_all(text, "").to_lowercase();
    let words: BTreeSet<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '.' || c == ':' || c == '-' || c == '\''))
        .map(|w| w.trim_matches(['.', '\'', '-', ':']))
        .collect();
    if let Some(term) = terms.iter().find(|t| words.contains(t.as_str())) {
        return Some(format!("it names {term:?} from the episodes"));
    }
    match governance::tag_sensitivity(text) {
        Sensitivity::Normal => None,
        Sensitivity::Personal => Some("the sensitivity scan finds it personal".into()),
        Sensitivity::Confidential => Some("the sensitivity scan finds it confidential".into()),
    }
}

/// The personal terms of a skill's episodes as the memory holds them now, with the agent's
/// and the owner's handles: what the check at publish time looks for.
pub(crate) fn episode_terms(
    memory: &druse_memory::Memory,
    episodes: &[u64],
    agent: &str,
    owner: &str,
) -> BTreeSet<String> {
    let crystals: Vec<_> = episodes.iter().filter_map(|id| memory.get(*id)).collect();
    let texts: Vec<String> = crystals.iter().map(|c| c.text.clone()).collect();
    let mut handles: Vec<String> = crystals
        .iter()
        .filter_map(|c| match &c.namespace {
            Namespace::User(h) => Some(h.clone()),
            _ => None,
        })
        .collect();
    handles.push(agent.to_owned());
    handles.push(owner.to_owned());
    personal_terms(&texts, &handles, agent)
}

#[cfg(test)]
mod tests;
