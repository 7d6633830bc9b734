//! Governance rules that decide what may leave the node (seed 004): sensitivity tagging and
//! the publish check. Memory crystals and confidential content never leave.

use std::sync::LazyLock;

use druse_protocol::body::SemanticType;
use regex::RegexSet;
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

static CONFIDENTIAL: LazyLock<RegexSet> = LazyLock::new(|| {
    // Proof of impossibility: the patterns are fixed and valid.
    #[allow(clippy::unwrap_used)]
    RegexSet::new([
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
    .unwrap()
});

static PERSONAL: LazyLock<RegexSet> = LazyLock::new(|| {
    // Proof of impossibility: the patterns are fixed and valid.
    #[allow(clippy::unwrap_used)]
    RegexSet::new([
        r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}",
        r"(?i)\bmy name is\b",
        r"(?i)\bi(?:'m| am) feeling\b",
        r"(?i)\bi feel\b",
        r"(?i)\b(i think|in my opinion|i believe)\b",
        r"(?i)\b(my|our) (wife|husband|partner|son|daughter|mother|father|mom|dad|friend)\b",
        r"\+?\d{1,3}[\s\-]?\(?\d{3}\)?[\s\-]?\d{3}[\s\-]?\d{4}\b",
    ])
    .unwrap()
});

/// Classifies text by regex (seed 004's `tagSensitivity`): secrets are confidential; names,
/// emails, opinions and feelings are personal; everything else is normal.
pub fn tag_sensitivity(text: &str) -> Sensitivity {
    if CONFIDENTIAL.is_match(text) {
        Sensitivity::Confidential
    } else if PERSONAL.is_match(text) {
        Sensitivity::Personal
    } else {
        Sensitivity::Normal
    }
}

/// Whether text looks like a secret (a password, key, token): [`tag_sensitivity`]'s
/// confidential class, without the personal class's patterns.
pub fn is_confidential(text: &str) -> bool {
    CONFIDENTIAL.is_match(text)
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
