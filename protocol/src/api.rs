//! The error codes of a node's HTTP API, shared by the node, the management role and every
//! client. An error answer is `{ "error": code, "detail": text }`: the code is stable and meant
//! for programs, the detail is a sentence for people. Each code has the HTTP status it is
//! normally sent with ([`Code::status`]); a request body that is valid JSON of the wrong shape
//! is the one exception (422 with `bad_request`, where malformed JSON is 400).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A stable error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// The request itself is wrong: a bad parameter, a malformed body or path.
    BadRequest,
    /// A write route without the node's bearer token, or a private namespace read without it.
    Unauthorized,
    /// No such route, skill, crystal or version.
    NotFound,
    /// The state forbids it: already adopted, not enough credits.
    Conflict,
    /// The message was already published, byte for byte.
    Duplicate,
    /// The body is over the node's cap (`api.max_body_bytes`).
    TooLarge,
    /// Well-formed, but refused by validation.
    Invalid,
    /// Tagged confidential: never published.
    Confidential,
    /// The governance gate refused to publish it.
    NotPublishable,
    /// Over the per-peer rate; try later.
    RateLimited,
    /// The agent is turned off in the config.
    AgentDisabled,
    /// The agent is not running yet, or is busy.
    AgentUnavailable,
    /// Above the owner's approval threshold: only the owner's explicit adoption pays it.
    NeedsApproval,
    /// Past what is left of the owner's daily budget for skills.
    OverBudget,
    /// The node failed; the detail says where.
    Internal,
}

impl Code {
    /// Every code, for documentation and tests.
    pub const ALL: [Code; 15] = [
        Code::BadRequest,
        Code::Unauthorized,
        Code::NotFound,
        Code::Conflict,
        Code::Duplicate,
        Code::TooLarge,
        Code::Invalid,
        Code::Confidential,
        Code::NotPublishable,
        Code::RateLimited,
        Code::AgentDisabled,
        Code::AgentUnavailable,
        Code::NeedsApproval,
        Code::OverBudget,
        Code::Internal,
    ];

    /// The code as it appears in the `error` field.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::BadRequest => "bad_request",
            Code::Unauthorized => "unauthorized",
            Code::NotFound => "not_found",
            Code::Conflict => "conflict",
            Code::Duplicate => "duplicate",
            Code::TooLarge => "too_large",
            Code::Invalid => "invalid",
            Code::Confidential => "confidential",
            Code::NotPublishable => "not_publishable",
            Code::RateLimited => "rate_limited",
            Code::AgentDisabled => "agent_disabled",
            Code::AgentUnavailable => "agent_unavailable",
            Code::NeedsApproval => "needs_approval",
            Code::OverBudget => "over_budget",
            Code::Internal => "internal",
        }
    }

    /// The HTTP status the code is sent with.
    pub const fn status(self) -> u16 {
        match self {
            Code::BadRequest => 400,
            Code::Unauthorized => 401,
            Code::NotFound => 404,
            Code::NeedsApproval => 403,
            Code::Conflict | Code::Duplicate | Code::AgentDisabled | Code::OverBudget => 409,
            Code::TooLarge => 413,
            Code::Invalid | Code::Confidential | Code::NotPublishable => 422,
            Code::RateLimited => 429,
            Code::Internal => 500,
            Code::AgentUnavailable => 503,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A code this version does not know (a newer node may send one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown API error code {0:?}")]
pub struct UnknownCode(pub String);

impl FromStr for Code {
    type Err = UnknownCode;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Code::ALL.into_iter().find(|code| code.as_str() == text).ok_or_else(|| UnknownCode(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_from_its_text_and_its_json() {
        for code in Code::ALL {
            assert_eq!(code.as_str().parse::<Code>(), Ok(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{code}\""));
            assert_eq!(serde_json::from_str::<Code>(&json).unwrap(), code);
        }
        assert_eq!("teapot".parse::<Code>(), Err(UnknownCode("teapot".into())));
    }

    #[test]
    fn codes_are_distinct_and_statuses_are_errors() {
        let texts: std::collections::HashSet<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(texts.len(), Code::ALL.len());
        for code in Code::ALL {
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }
}
