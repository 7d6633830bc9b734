//! Consent to be tagged, as the user said it: "you may tag me" opts in, "stop tagging me",
//! "never tag me again" or "I don't want you to tag me" opt out. What a user says is kept as a
//! record on the agent's own PDS (phi keeps its `mentionConsent` records there), so a node
//! with a new data directory reads it back; the local state is its cache.

use serde_json::{Value, json};

/// The collection of consent records in the agent's repository; each record's key is the
/// user's DID.
pub const COLLECTION: &str = "dev.druse.agent.mentionConsent";

/// Consent records read back at most.
pub const MAX_RECORDS: usize = 10_000;

/// Phrases that ask to be tagged (or, after a negation, not to be).
const ASKS: &[&str] = &["tag me", "tagging me", "tags me", "mention me", "mentioning me", "@ me", "ping me"];
/// Phrases that refuse tagging on their own.
const REFUSES: &[&str] = &["untag me", "no tagging", "no tags", "no mentions", "no more tags", "no more mentions"];
/// Words that turn the phrase after them into a refusal.
const NEGATIONS: &[&str] = &[
    "don't",
    "dont",
    "do not",
    "never",
    "stop",
    "quit",
    "not",
    "no more",
    "no longer",
    "won't",
    "wont",
    "can't",
    "cant",
    "cannot",
    "shouldn't",
    "didn't",
    "did not",
    "refrain",
    "rather you didn't",
];
/// Negated phrases that still ask ("I don't mind if you tag me").
const STILL_ASKS: &[&str] = &[
    "don't mind",
    "dont mind",
    "do not mind",
    "wouldn't mind",
    "never mind",
    "don't hesitate",
    "dont hesitate",
    "do not hesitate",
    "never hesitate",
    "don't forget",
    "dont forget",
    "do not forget",
    "don't be afraid",
    "don't worry",
    "dont worry",
    "not afraid",
];
/// Words before the phrase that a negation must be among.
const WINDOW: usize = 8;

/// What `text` says about being tagged: `Some(true)` asks to be, `Some(false)` asks not to
/// be, `None` says nothing of it. Each sentence is read on its own, and the last one that
/// says something wins ("tag me. Actually, don't tag me" opts out).
pub fn said(text: &str) -> Option<bool> {
    let lower = text.to_lowercase().replace(['’', '‘', '`'], "'");
    let mut verdict = None;
    for clause in lower.split(['.', '!', '?', ';', '\n']).flat_map(|c| c.split(" but ")) {
        let words: Vec<&str> =
            clause.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '@')).filter(|w| !w.is_empty()).collect();
        let padded = format!(" {} ", words.join(" "));
        if REFUSES.iter().any(|r| padded.contains(&format!(" {r} "))) {
            verdict = Some(false);
            continue;
        }
        let Some(at) = ASKS.iter().filter_map(|a| padded.find(&format!(" {a} "))).min() else { continue };
        let before: Vec<&str> = padded[..at].split_whitespace().collect();
        let window = format!(" {} ", before[before.len().saturating_sub(WINDOW)..].join(" "));
        let has = |list: &[&str]| list.iter().any(|p| window.contains(&format!(" {p} ")));
        verdict = Some(!has(NEGATIONS) || has(STILL_ASKS));
    }
    verdict
}

/// The consent record of `did` (handle `handle`): whether they may be tagged, and the post
/// in which they said so.
pub fn record(did: &str, handle: &str, yes: bool, post: &str, at: &str) -> Value {
    json!({
        "$type": COLLECTION,
        "subject": did,
        "handle": handle,
        "consent": yes,
        "post": post,
        "createdAt": at,
    })
}

/// The DID and consent a record read back holds, if it is a well-formed one.
pub fn parse(rkey: &str, value: &Value) -> Option<(String, bool)> {
    let did = value.get("subject")?.as_str()?;
    let yes = value.get("consent")?.as_bool()?;
    (did == rkey && did.starts_with("did:") && did.len() <= 2048).then(|| (did.to_owned(), yes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consent_means_what_the_user_said() {
        let table: &[(&str, Option<bool>)] = &[
            ("you may tag me", Some(true)),
            ("Tag me please!", Some(true)),
            ("please tag me in your replies", Some(true)),
            ("feel free to mention me", Some(true)),
            ("I don't mind if you tag me", Some(true)),
            ("don't hesitate to tag me", Some(true)),
            ("you can @-mention me anytime", Some(true)),
            ("stop tagging me", Some(false)),
            ("Stop tagging me.", Some(false)),
            ("never tag me again please", Some(false)),
            ("I don't want you to tag me", Some(false)),
            ("I do not want you to tag me", Some(false)),
            ("don't tag me", Some(false)),
            ("do not tag me", Some(false)),
            ("dont tag me", Some(false)),
            ("Don’t tag me", Some(false)),
            ("please no more tagging me", Some(false)),
            ("untag me", Some(false)),
            ("no tags please", Some(false)),
            ("I'd rather you didn't tag me", Some(false)),
            ("you shouldn't mention me", Some(false)),
            ("tag me. Actually, don't tag me", Some(false)),
            ("don't tag me. ok fine, tag me", Some(true)),
            ("hello there", None),
            ("what's a tag? me neither", None),
            ("hashtag meetup tonight", None),
            ("", None),
        ];
        for (text, expected) in table {
            assert_eq!(said(text), *expected, "{text:?}");
        }
    }

    #[test]
    fn a_record_reads_back_and_a_forged_one_does_not() {
        let r = record("did:plc:abc", "a.test", true, "at://x/app.bsky.feed.post/1", "2026-11-26T00:00:00Z");
        assert_eq!(parse("did:plc:abc", &r), Some(("did:plc:abc".into(), true)));
        assert_eq!(parse("did:plc:other", &r), None, "the key is the subject");
        assert_eq!(parse("did:plc:abc", &json!({"subject": "did:plc:abc"})), None);
        assert_eq!(parse("x", &json!({"subject": "x", "consent": true})), None);
    }
}
