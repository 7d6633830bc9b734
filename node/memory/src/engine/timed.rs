//! Recall of a question that names a time ("in May", "on 7 July 2023", "last week"): what was
//! said then is looked for by BM25 among everything said then, not only among what matched
//! the words best overall, and counts for more (see [`super::Tuning::time_weight`]).

use std::collections::HashMap;

use druse_protocol::UnixMillis;
use rustc_hash::FxHashMap;

use super::{Memory, read, said_at};
use crate::crystal::{Crystal, CrystalId, Namespace};
use crate::periods::Period;
use crate::text::{self, Filter, TextIndex};

/// How many BM25 hits said within each named period are taken.
const PER_PERIOD: usize = 10;

/// The BM25 hits for `q` among what `filter` admits, `depth` of them, best first; and the best
/// [`PER_PERIOD`] of those said within each of `periods` or soon after (see [`Period::told_until`]),
/// best first, each once. A time range adds nothing to a BM25 score, so both lists score alike.
pub(super) type TextLists = (Vec<(CrystalId, f32)>, Vec<(CrystalId, f32)>);

/// See [`TextLists`].
pub(super) fn text_hits(
    index: &TextIndex,
    q: &str,
    depth: usize,
    filter: &Filter,
    periods: &[Period],
) -> Result<TextLists, text::Error> {
    let hits = index.search_where(q, depth, filter)?;
    let mut within: HashMap<CrystalId, f32> = HashMap::new();
    for period in periods {
        let since = filter.since.map_or(period.start, |since| since.max(period.start));
        let until = filter.until.map_or(period.told_until(), |until| until.min(period.told_until()));
        if since > until {
            continue;
        }
        let filter = Filter { since: Some(since), until: Some(until), ..filter.clone() };
        for (id, score) in index.search_where(q, PER_PERIOD, &filter)? {
            let best = within.entry(id).or_insert(score);
            *best = best.max(score);
        }
    }
    let mut within: Vec<(CrystalId, f32)> = within.into_iter().collect();
    within.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok((hits, within))
}

impl Memory {
    /// When the newest memory of `namespace` said at or before `now` was said (`now` when it
    /// has none, or for a search of every namespace): what a month named without its year is
    /// read against.
    pub(super) fn latest_said(
        &self,
        namespace: Option<&Namespace>,
        crystals: &FxHashMap<CrystalId, Crystal>,
        now: UnixMillis,
    ) -> UnixMillis {
        let Some(namespace) = namespace else { return now };
        let scopes = read(&self.scopes);
        let members = scopes.members(namespace).into_iter().flatten();
        members.filter_map(|id| crystals.get(id)).map(said_at).filter(|at| *at <= now).max().unwrap_or(now)
    }
}
