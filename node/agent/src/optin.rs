//! Opt-in posting through the same gates (issue 39 item 5). A musing or a reflection is the
//! agent speaking in public from what it remembers of the day, strangers' messages included:
//! before it posts, the text passes the privacy check a skill passes before it leaves the node
//! (names, places, handles, dates and facts from the day's memories), and it may not quote a
//! stranger's words. What passes still waits for the owner's like unless the owner set
//! `autopost = true`.

use std::collections::BTreeSet;

use druse_memory::crystal::{MemoryKind, Namespace, Status};

use super::privacy;

/// Words in a row shared with a stranger's message that make a quote.
const QUOTE_WORDS: usize = 5;

/// The day's memories read for the check, at most.
const MOST_MEMORIES: usize = 500;

/// Where a musing's or a reflection's post goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Posted at once (`autopost = true`).
    Post,
    /// Asked of the owner first, as any gated post.
    AskOwner,
}

/// Why a musing's or a reflection's post is refused, with its metric label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) label: &'static str,
    pub(crate) why: String,
}

/// One remembered line: who said it (a handle; `None` for the agent's own notes) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Said {
    pub(crate) by: Option<String>,
    pub(crate) text: String,
}

/// Where `text` may go, given what the day's memories hold (`said`), the agent's and the
/// owner's handles, and `autopost`.
pub(crate) fn route(text: &str, said: &[Said], agent: &str, owner: &str, autopost: bool) -> Result<Route, Refusal> {
    let agent = agent.trim_start_matches('@').to_lowercase();
    let owner = owner.trim_start_matches('@').to_lowercase();
    let texts: Vec<String> = said.iter().map(|s| s.text.clone()).collect();
    let mut handles: Vec<String> = said.iter().filter_map(|s| s.by.clone()).collect();
    handles.push(owner.clone());
    let terms = privacy::personal_terms(&texts, &handles, &agent);
    if let Some(why) = privacy::leaks(text, &terms) {
        return Err(Refusal { label: "optin_privacy", why: format!("not posted: {why}") });
    }
    let strangers = said.iter().filter(|s| s.by.as_deref().is_some_and(|h| h != agent && h != owner));
    for s in strangers {
        if let Some(words) = quoted(text, &s.text) {
            return Err(Refusal {
                label: "optin_quote",
                why: format!("not posted: it quotes a stranger's words (\"{words}\")"),
            });
        }
    }
    Ok(if autopost { Route::Post } else { Route::AskOwner })
}

/// The first run of [`QUOTE_WORDS`] words of `source` that `text` repeats, if any (case,
/// punctuation and spacing aside).
fn quoted(text: &str, source: &str) -> Option<String> {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !(c.is_alphanumeric() || c == '\''))
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let (text, source) = (words(text), words(source));
    let runs: BTreeSet<&[String]> = source.windows(QUOTE_WORDS).collect();
    text.windows(QUOTE_WORDS).find(|w| runs.contains(w)).map(|w| w.join(" "))
}

/// What the memory holds from the last `since_ms`: each conversation's lines by who wrote
/// them (`@handle: text`, or the namespace's person when a line names nobody), and the
/// agent's own notes.
pub(crate) fn said_since(memory: &druse_memory::Memory, since_ms: u64) -> Vec<Said> {
    let mut crystals = memory.crystals_where(|c| {
        matches!(c.namespace, Namespace::Episodic | Namespace::User(_))
            && c.created_at >= since_ms
            && c.status == Status::Active
            && matches!(c.kind, MemoryKind::Observation | MemoryKind::Interaction | MemoryKind::Summary)
    });
    crystals.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    crystals.truncate(MOST_MEMORIES);
    let mut said = Vec::new();
    for c in crystals {
        let person = match &c.namespace {
            Namespace::User(h) => Some(h.trim_start_matches('@').to_lowercase()),
            _ => None,
        };
        for line in c.text.lines().filter(|l| !l.trim().is_empty()) {
            let named = line
                .strip_prefix('@')
                .and_then(|rest| rest.split_once(": "))
                .filter(|(h, _)| !h.contains(char::is_whitespace));
            match named {
                Some((h, text)) => said.push(Said { by: Some(h.to_lowercase()), text: text.to_owned() }),
                None => said.push(Said { by: person.clone(), text: line.to_owned() }),
            }
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = "ag.test";
    const OWNER: &str = "ow.test";

    fn day() -> Vec<Said> {
        vec![
            Said { by: Some("annika.test".into()), text: "i'm annika from lyon, a nurse with celiac disease".into() },
            Said { by: Some("sam.test".into()), text: "the harbour lights go dark at midnight every winter".into() },
            Said { by: Some(OWNER.into()), text: "remember the swarm meets every thursday evening".into() },
            Said { by: Some(AGENT.into()), text: "glad to help with the lighthouse question".into() },
            Said { by: None, text: "I answered two questions about lighthouses today".into() },
        ]
    }

    #[test]
    fn a_plain_thought_waits_for_the_owner_unless_autopost() {
        let text = "Quiet evening. Thinking about how a swarm learns from small kindnesses.";
        assert_eq!(route(text, &day(), AGENT, OWNER, false), Ok(Route::AskOwner));
        assert_eq!(route(text, &day(), AGENT, OWNER, true), Ok(Route::Post));
    }

    #[test]
    fn what_a_stranger_said_about_themselves_never_leaves() {
        for text in [
            "Met annika today, she had great questions.",
            "Someone from lyon asked me about bread.",
            "Talked with a nurse with celiac disease about recipes.",
            "A long chat with @annika.test about lights.",
        ] {
            let refused = route(text, &day(), AGENT, OWNER, true).unwrap_err();
            assert_eq!(refused.label, "optin_privacy", "{text}: {refused:?}");
        }
    }

    #[test]
    fn a_strangers_words_are_never_quoted_even_with_autopost() {
        let text = "Today I learned: The harbour lights go dark at midnight, every winter.";
        let refused = route(text, &day(), AGENT, OWNER, true).unwrap_err();
        assert_eq!(refused.label, "optin_quote", "{refused:?}");
        assert!(refused.why.contains("harbour lights go dark"), "{}", refused.why);
        // Four words in a row are a topic, not a quote; the agent's own words are its own.
        assert!(route("the harbour lights go on soon", &day(), AGENT, OWNER, true).is_ok());
        assert!(route("glad to help with the lighthouse question", &day(), AGENT, OWNER, true).is_ok());
    }

    #[test]
    fn the_days_lines_are_read_by_who_wrote_them() {
        assert_eq!(quoted("a b c d e", "x a b c d e y"), Some("a b c d e".into()));
        assert_eq!(quoted("a b c d", "a b c d"), None);
        assert_eq!(quoted("A, B. c! d? E", "a b c d e"), Some("a b c d e".into()));
    }
}
