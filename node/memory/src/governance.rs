//! Governance rules that decide what may leave the node (seed 004): sensitivity tagging and
//! the publish check. Memory crystals and confidential content never leave.

use std::sync::LazyLock;

use druse_protocol::body::SemanticType;
use regex::Regex;
use serde::{Deserialize, Serialize};

/// How sensitive a piece of content is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sensitivity {
    Normal,
    Personal,
    Confidential,
}

/// Who may see a crystal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    #[default]
    Private,
    Shared,
    Public,
}

/// Who is asking for a crystal (seed 004's access model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Caller {
    /// The node's own agent (an API call with the node's bearer token).
    LocalAgent,
    /// An authenticated session of the agent's counterpart.
    Session,
    /// Anyone else.
    Anyone,
}

/// Seed 004's `canAccess`: confidential content and private crystals only to the local agent,
/// shared ones also to authenticated sessions, public ones to anyone; expired ones to no one.
pub fn can_access(scope: Scope, sensitivity: Sensitivity, expired: bool, caller: Caller) -> bool {
    if expired {
        return false;
    }
    if sensitivity == Sensitivity::Confidential {
        return caller == Caller::LocalAgent;
    }
    match scope {
        Scope::Private => caller == Caller::LocalAgent,
        Scope::Shared => matches!(caller, Caller::LocalAgent | Caller::Session),
        Scope::Public => true,
    }
}

/// Builds one of the fixed patterns below.
/// A fixed pattern, compiled: for `LazyLock` statics whose patterns a test builds.
pub fn fixed(pattern: &str) -> Regex {
    // Proof of impossibility: the patterns are fixed and valid (a test builds each).
    #[allow(clippy::unwrap_used)]
    Regex::new(pattern).unwrap()
}

/// Secrets written in a fixed form, where case matters (key headers, provider prefixes):
/// matched against the text as it is.
static SECRET_FORMS: LazyLock<Regex> = LazyLock::new(|| {
    fixed(concat!(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        r"|\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}",
        r"|\bAKIA[0-9A-Z]{16}\b",
        r"|\bgh[pousr]_[A-Za-z0-9]{20,}",
        r"|\bxox[baprs]-[A-Za-z0-9\-]{10,}",
    ))
});

/// Secrets named by a word in any case (a password, a key, a token given a value): matched
/// against the text's ASCII lowercase, which one case-sensitive pattern scans several times
/// faster than a case-insensitive set (the words are ASCII).
static SECRET_WORDS: LazyLock<Regex> = LazyLock::new(|| {
    fixed(concat!(
        r"\b(?:password|passwd|passphrase|pwd|secret|token|bearer)\b\s*[:=]",
        r"|\bapi[_\- ]?key\b",
        r"|\b(?:access|auth|refresh|session)[_\- ]?token\b",
        r"|\bclient[_\- ]?secret\b",
    ))
});

/// Names, emails, phone numbers, opinions and feelings: matched against the text's ASCII
/// lowercase, like [`SECRET_WORDS`].
static PERSONAL: LazyLock<Regex> = LazyLock::new(|| {
    fixed(concat!(
        r"[a-z0-9._%+\-]+@[a-z0-9.\-]+\.[a-z]{2,}",
        r"|\bmy name is\b",
        r"|\bi(?:'m| am) feeling\b",
        r"|\bi feel\b",
        r"|\b(?:i think|in my opinion|i believe)\b",
        r"|\b(?:my|our) (?:wife|husband|partner|son|daughter|mother|father|mom|dad|friend)\b",
        r"|\+?\d{1,3}[\s\-]?\(?\d{3}\)?[\s\-]?\d{3}[\s\-]?\d{4}\b",
    ))
});

/// Compiles the patterns above now rather than on the first text classified: a few
/// milliseconds of a core, once a process, that would otherwise fall on a node's first memory
/// or first listing.
pub fn compile() {
    for pattern in [&SECRET_FORMS, &SECRET_WORDS, &PERSONAL] {
        LazyLock::force(pattern);
    }
}

/// Whether `text`, and `lower` (its ASCII lowercase), hold a secret.
fn holds_secret(text: &str, lower: &str) -> bool {
    SECRET_FORMS.is_match(text) || SECRET_WORDS.is_match(lower)
}

/// Classifies text by regex (seed 004's `tagSensitivity`): secrets are confidential; names,
/// emails, opinions and feelings are personal; everything else is normal. Letters match in
/// either case where seed 004's patterns ignore case (ASCII case: every pattern word is ASCII).
pub fn tag_sensitivity(text: &str) -> Sensitivity {
    let lower = text.to_ascii_lowercase();
    if holds_secret(text, &lower) {
        Sensitivity::Confidential
    } else if PERSONAL.is_match(&lower) {
        Sensitivity::Personal
    } else {
        Sensitivity::Normal
    }
}

/// Whether text looks like a secret (a password, key, token): [`tag_sensitivity`]'s
/// confidential class, without the personal class's patterns.
pub fn is_confidential(text: &str) -> bool {
    holds_secret(text, &text.to_ascii_lowercase())
}

/// Why something may not be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    #[error("a {} crystal is private memory; only skills and task patterns may be published", .0.as_str())]
    MemoryCrystal(SemanticType),
    #[error("a private crystal may not leave the node; use scope shared or public")]
    PrivateScope(Scope),
    #[error("the content is confidential (it looks like a password, key, token or secret)")]
    Confidential,
}

/// Whether a crystal may be published to the swarm: a knowledge crystal, shared or public,
/// neither confidential nor derived from a confidential crystal.
pub fn check_publishable(
    semantic_type: SemanticType,
    scope: Scope,
    declared: Sensitivity,
    texts: &[&str],
) -> Result<(), Refusal> {
    if !semantic_type.is_publishable() {
        return Err(Refusal::MemoryCrystal(semantic_type));
    }
    if scope == Scope::Private {
        return Err(Refusal::PrivateScope(scope));
    }
    if declared == Sensitivity::Confidential || texts.iter().any(|t| is_confidential(t)) {
        return Err(Refusal::Confidential);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use regex::RegexSet;

    use super::*;

    #[test]
    fn secrets_are_confidential() {
        for text in [
            "the password: hunter2",
            "set API_KEY in the env",
            "token = abc123",
            "use sk-abcdefghijklmnopqrstuv to call it",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "AKIAABCDEFGHIJKLMNOP",
        ] {
            assert_eq!(tag_sensitivity(text), Sensitivity::Confidential, "{text}");
        }
    }

    #[test]
    fn names_emails_and_feelings_are_personal() {
        for text in ["mail me at ada@example.org", "my name is Ada", "I feel tired today", "my wife likes jazz"] {
            assert_eq!(tag_sensitivity(text), Sensitivity::Personal, "{text}");
        }
    }

    #[test]
    fn ordinary_skill_text_is_normal() {
        for text in ["Parse RFC 3339 timestamps with chrono", "retry with exponential backoff", "tokenize the input"] {
            assert_eq!(tag_sensitivity(text), Sensitivity::Normal, "{text}");
        }
    }

    #[test]
    fn each_pattern_matches_in_any_case_where_seed_004_ignores_case() {
        for text in [
            "PASSWORD: hunter2",
            "Passphrase = x",
            "pwd:x",
            "Bearer: abc",
            "SECRET =",
            "api key",
            "Api-Key",
            "REFRESH_TOKEN",
            "session token",
            "Client Secret",
            "ghp_abcdefghijklmnopqrstuvwx",
            "xoxb-1234567890ab",
        ] {
            assert_eq!(tag_sensitivity(text), Sensitivity::Confidential, "{text}");
            assert!(is_confidential(text), "{text}");
        }
        for text in ["MY NAME IS Ada", "I'm Feeling fine", "In My Opinion", "OUR Mom", "call +1 (555) 123-4567"] {
            assert_eq!(tag_sensitivity(text), Sensitivity::Personal, "{text}");
        }
        // Forms whose case matters keep it.
        for text in ["-----begin rsa private key-----", "akiaabcdefghijklmnop", "SK-abcdefghijklmnopqrstuv"] {
            assert_eq!(tag_sensitivity(text), Sensitivity::Normal, "{text}");
        }
    }

    /// Seed 004's patterns as first written, one case-insensitive set per class: the reference
    /// the faster matchers are held to.
    fn reference() -> impl Fn(&str) -> Sensitivity {
        let confidential = RegexSet::new([
            r"(?i)\b(password|passwd|passphrase|pwd)\b\s*[:=]",
            r"(?i)\bapi[_\- ]?key\b",
            r"(?i)\b(secret|token|bearer)\b\s*[:=]",
            r"(?i)\b(access|auth|refresh|session)[_\- ]?token\b",
            r"(?i)\bclient[_\- ]?secret\b",
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
            r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{16,}",
            r"\bAKIA[0-9A-Z]{16}\b",
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",
            r"\bxox[baprs]-[A-Za-z0-9\-]{10,}",
        ])
        .unwrap();
        let personal = RegexSet::new([
            r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}",
            r"(?i)\bmy name is\b",
            r"(?i)\bi(?:'m| am) feeling\b",
            r"(?i)\bi feel\b",
            r"(?i)\b(i think|in my opinion|i believe)\b",
            r"(?i)\b(my|our) (wife|husband|partner|son|daughter|mother|father|mom|dad|friend)\b",
            r"\+?\d{1,3}[\s\-]?\(?\d{3}\)?[\s\-]?\d{3}[\s\-]?\d{4}\b",
        ])
        .unwrap();
        move |text| {
            if confidential.is_match(text) {
                Sensitivity::Confidential
            } else if personal.is_match(text) {
                Sensitivity::Personal
            } else {
                Sensitivity::Normal
            }
        }
    }

    #[test]
    fn the_matchers_classify_as_seed_004s_patterns_do() {
        // Texts pieced together from the patterns' words in mixed case, their separators,
        // near misses and non-ASCII letters, by a fixed pseudo-random sequence.
        let pieces: Vec<&str> = concat!(
            "password,PassWd,passphrase,PWD,secret,Token,BEARER,api,Key,_,-, ,:,=,  =,access,",
            "Auth,refresh,SESSION,client,tokenize,-----BEGIN ,RSA ,PRIVATE KEY-----,sk-,pk-,",
            "abcdefghij,KLMNOPQRST,AKIA,0123456789,ghp_,xoxb-,@,example,.org,ada,my name is,",
            "My ,name ,is,I'm ,i am ,feeling,I feel,I think,in my opinion,I believe,our ,",
            "wife,Mom,friend,+1 ,(555) ,123-4567,é,ß,ǅ,x,.,\n",
        )
        .split(',')
        .collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        let reference = reference();
        let mut differ = Vec::new();
        let mut seen = [0usize; 3];
        for _ in 0..20_000 {
            let text: String = (0..1 + next(8)).map(|_| pieces[next(pieces.len())]).collect();
            let expected = reference(&text);
            seen[expected as usize] += 1;
            if tag_sensitivity(&text) != expected || is_confidential(&text) != (expected == Sensitivity::Confidential) {
                differ.push(text);
            }
        }
        assert!(differ.is_empty(), "{} texts classified differently, first: {:?}", differ.len(), differ.first());
        assert!(seen.iter().all(|&n| n > 300), "every class is exercised: {seen:?}");
    }

    #[test]
    fn access_matrix_matches_seed_004() {
        use Caller::*;
        let cases = [
            // (scope, sensitivity, expired) → [local agent, session, anyone]
            ((Scope::Private, Sensitivity::Normal, false), [true, false, false]),
            ((Scope::Shared, Sensitivity::Normal, false), [true, true, false]),
            ((Scope::Public, Sensitivity::Normal, false), [true, true, true]),
            ((Scope::Public, Sensitivity::Personal, false), [true, true, true]),
            ((Scope::Public, Sensitivity::Confidential, false), [true, false, false]),
            ((Scope::Shared, Sensitivity::Confidential, false), [true, false, false]),
            ((Scope::Public, Sensitivity::Normal, true), [false, false, false]),
            ((Scope::Private, Sensitivity::Normal, true), [false, false, false]),
        ];
        for ((scope, sensitivity, expired), expected) in cases {
            let got = [LocalAgent, Session, Anyone].map(|caller| can_access(scope, sensitivity, expired, caller));
            assert_eq!(got, expected, "{scope:?} {sensitivity:?} expired={expired}");
        }
    }

    #[test]
    fn memory_crystals_are_never_publishable() {
        for t in [SemanticType::Episode, SemanticType::Preference, SemanticType::Relationship, SemanticType::Fact] {
            assert_eq!(
                check_publishable(t, Scope::Public, Sensitivity::Normal, &["x"]),
                Err(Refusal::MemoryCrystal(t))
            );
        }
    }

    #[test]
    fn private_and_confidential_skills_are_not_publishable() {
        let skill = SemanticType::Skill;
        assert!(check_publishable(skill, Scope::Private, Sensitivity::Normal, &["x"]).is_err());
        assert_eq!(
            check_publishable(skill, Scope::Shared, Sensitivity::Confidential, &["x"]),
            Err(Refusal::Confidential)
        );
        assert_eq!(
            check_publishable(skill, Scope::Public, Sensitivity::Normal, &["password: x"]),
            Err(Refusal::Confidential)
        );
        assert!(check_publishable(skill, Scope::Shared, Sensitivity::Normal, &["retry"]).is_ok());
    }
}
