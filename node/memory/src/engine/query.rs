//! A recall request: what it asks, the filters it applies inside candidate generation, and
//! the bounds it must keep.

use druse_protocol::UnixMillis;
use druse_protocol::body::SemanticType;
use serde::{Deserialize, Serialize};

use super::{Error, MAX_K, MAX_TEXT};
use crate::crystal::{Crystal, MemoryKind, Namespace};
use crate::{dates, text};

/// A recall request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Query {
    pub q: String,
    #[serde(default = "ten")]
    pub k: usize,
    #[serde(default)]
    pub namespace: Option<Namespace>,
    #[serde(default)]
    pub kind: Option<MemoryKind>,
    #[serde(default)]
    pub semantic_type: Option<SemanticType>,
    /// Only turns of this conversation.
    #[serde(default)]
    pub session: Option<String>,
    /// Only memories said (a turn's time, else stored) at or after this: Unix milliseconds or
    /// an ISO 8601 date-time.
    #[serde(default, deserialize_with = "dates::optional")]
    pub since: Option<UnixMillis>,
    /// Only memories said at or before this.
    #[serde(default, deserialize_with = "dates::optional")]
    pub until: Option<UnixMillis>,
}

impl Query {
    /// A query for `q`'s best `k`, unfiltered.
    pub fn new(q: impl Into<String>, k: usize) -> Self {
        Self { q: q.into(), k, ..Self::default() }
    }

    /// Whether `c` passes the query's filters (not its access check).
    pub fn admits(&self, c: &Crystal) -> bool {
        let at = said_at(c);
        self.namespace.as_ref().is_none_or(|n| n == &c.namespace)
            && self.kind.is_none_or(|k| k == c.kind)
            && self.semantic_type.is_none_or(|t| t == c.semantic_type)
            && self.session.as_ref().is_none_or(|s| c.session.as_ref() == Some(s))
            && self.since.is_none_or(|since| at >= since)
            && self.until.is_none_or(|until| at <= until)
    }

    /// The query's filters, as the text index applies them.
    pub(crate) fn text_filter(&self) -> text::Filter {
        text::Filter {
            namespace: self.namespace.as_ref().map(Namespace::as_string),
            kind: self.kind.map(kind_tag),
            semantic_type: self.semantic_type.map(semantic_tag),
            session: self.session.clone(),
            since: self.since,
            until: self.until,
        }
    }

    /// Refuses a query recall cannot answer: an empty or over-long `q`, `k` outside
    /// 1..=[`MAX_K`], an empty time range.
    pub fn check(&self) -> Result<(), Error> {
        if self.q.trim().is_empty() {
            return Err(Error::BadQuery("q must not be empty".into()));
        }
        if self.q.len() > MAX_TEXT {
            return Err(Error::BadQuery(format!("q is {} bytes, over the cap of {MAX_TEXT}", self.q.len())));
        }
        if !(1..=MAX_K).contains(&self.k) {
            return Err(Error::BadQuery(format!("k is {}; it must be between 1 and {MAX_K}", self.k)));
        }
        if let (Some(since), Some(until)) = (self.since, self.until)
            && since > until
        {
            return Err(Error::BadQuery("since is after until".into()));
        }
        Ok(())
    }
}

/// When a crystal was said: a turn's time, else when it was stored.
pub(crate) fn said_at(c: &Crystal) -> UnixMillis {
    c.turn_at.unwrap_or(c.created_at)
}

pub fn kind_tag(kind: MemoryKind) -> String {
    serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

pub(crate) fn semantic_tag(t: SemanticType) -> String {
    serde_json::to_value(t).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

fn ten() -> usize {
    10
}
