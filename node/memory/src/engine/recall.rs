//! Recall: the vector and BM25 halves, their fusion and scoring, and what benchmarks and
//! operators read of the vector index.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::time::Duration;

use druse_protocol::UnixMillis;
use rustc_hash::FxHashMap;

use super::codec::crystal_of;
use super::vectors::ScopedSearch;
use super::{CRYSTAL, Error, Hit, Memory, Query, key, read, timed, write};
use crate::correction::speaker;
use crate::crystal::{Crystal, CrystalId};
use crate::governance::Caller;
use crate::periods;
use crate::record;
use crate::vector;

/// How recall weighs what it finds. Measured on the LoCoMo dev split (`locomo-bench`,
/// recall_any@5 / @10) and on `node/tests/data/retrieval.json` (recall@5); the figures are in
/// `node/README.md`, "Recall on LoCoMo". The BM25 list, over a turn with its neighbour and its date, is
/// the stronger of the two in conversation; the vector list finds the paraphrases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// How the two candidate lists are combined.
    pub fusion: Fusion,
    /// How much of a neighbouring turn's fused relevance a turn takes on: the answer is often
    /// said just before or after the turn that shares the question's words.
    pub neighbour_weight: f64,
    /// How many turns said on each side of a conversation turn its BM25 document holds (at
    /// most [`Tuning::MAX_WINDOW_TURNS`]): a turn is indexed as the window of turns around it
    /// and the day it was said, one text, so a question matches the exchange rather than one
    /// side of it ("what did you make?" / "a ceramic bowl"). A turn stored next to others
    /// changes their windows, and they are indexed again with it. On the LoCoMo dev split
    /// (recall_any@5 / @10), where a turn was indexed with the turn before it as context
    /// counted at half weight, 1 raised MiniLM from 0.782 / 0.868 to 0.805 / 0.886 and hashing
    /// from 0.745 / 0.818 to 0.774 / 0.849; 2 gave MiniLM 0.805 / 0.878. On
    /// `tests/data/retrieval.json` MiniLM fell from 0.823 to 0.790 (hashing stays at 0.581):
    /// where the answer is the reply to the turn that shares the question's words, the two now
    /// tie. 0 indexes a turn's own text and its day. It applies to turns indexed after it is
    /// set (the whole index is built again when the engine opens one written without windows).
    pub window_turns: usize,
    /// Whether a turn's context vector embeds the day it was said as well as the turn before
    /// it (the BM25 document always holds the day). Off for an embedder of meaning: on the
    /// LoCoMo dev split with MiniLM the day's words dilute the vector, and leaving them out
    /// raised recall_any@5 / @10 from 0.678 / 0.777 to 0.694 / 0.790. On for one that matches
    /// words: on `tests/data/retrieval.json` hashing's recall@5 falls from 0.581 to 0.548
    /// without them.
    pub day_in_context_vector: bool,
    /// How much more a memory counts when its text names its speaker the way a transcript
    /// does ("Melanie: ...") and the question names that speaker: its relevance is multiplied
    /// by `1 + speaker_weight`. A question about someone is most often answered by what they
    /// said; a memory of the other speaker still wins when it matches clearly better. On the
    /// LoCoMo dev split (MiniLM, recall_any@5 / @10) 1.0 raised 0.694 / 0.803 to 0.74 / 0.84;
    /// 0.5 and 2.0 give within 0.01 of it. Of the speakers a question names, only the ones it
    /// is about are lifted (see `Words::asked_about`): with windows and session weight 0.5,
    /// that moved MiniLM from 0.810 / 0.888 to 0.816 / 0.886 and hashing from 0.782 / 0.852 to
    /// 0.792 / 0.849.
    pub speaker_weight: f64,
    /// How much of the relevance of the best match said in its conversation session a
    /// candidate takes on (before the speaker lift): a conversation keeps to its topic. On the
    /// LoCoMo dev split (recall_any@5 / @10) 0.3 raised MiniLM from 0.753 / 0.849 to
    /// 0.777 / 0.862 (0.2: 0.771 / 0.852; 0.5: 0.782 / 0.857) and hashing from 0.727 / 0.795
    /// to 0.740 / 0.810; `tests/data/retrieval.json` is unchanged (0.823 and 0.581). Once turns
    /// were indexed as windows, 0.5 was the setting every leave-one-conversation-out fold chose
    /// for both embedders (MiniLM 0.805 / 0.886 → 0.810 / 0.888, hashing 0.774 / 0.849 →
    /// 0.782 / 0.852), and is the default.
    pub session_weight: f64,
    /// How much the BM25 matches said in a time the question names count (a day, a month, a
    /// year, "last week", "two weeks before 3 August"): the best matches said in it or soon
    /// after are searched for apart, scored as the text list is, and `time_weight` of that
    /// score is added to their relevance, before the neighbour and session lifts. A question
    /// that names no time is not affected; 0 turns it off.
    pub time_weight: f64,
}

/// How recall combines its vector and BM25 candidate lists into one relevance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion: a hit at rank r of a list scores `weight / (k + r)`, the vector
    /// list with weight 1 and the BM25 list with `text_weight`. It sees only ranks, so a
    /// list's clear winner counts no more than a near tie.
    Rank { text_weight: f64, k: f64 },
    /// A convex combination of the two lists' scores, each min-max normalised over its own
    /// candidates (cosine for the vector list, BM25 for the text list): `vector_share` of the
    /// vector score plus the rest of the text score; a crystal absent from a list scores 0
    /// there. Unlike ranks, it keeps how far ahead a candidate is.
    Score { vector_share: f64 },
}

impl Tuning {
    /// The defaults for an embedder. One that matches words (the hashing embedder) embeds a
    /// turn's day in its context vector (see [`Tuning::day_in_context_vector`]), and its
    /// vector list, which mostly repeats what BM25 matched, gets a smaller share of the
    /// fusion ([`Tuning::WORD_VECTOR_SHARE`]).
    pub fn for_embedder(embedder: &dyn crate::embed::Embedder) -> Self {
        if embedder.matches_words() {
            Self {
                fusion: Fusion::Score { vector_share: Self::WORD_VECTOR_SHARE },
                day_in_context_vector: true,
                ..Self::default()
            }
        } else {
            Self::default()
        }
    }

    /// The vector list's share of score fusion for an embedder of meaning (MiniLM). On the
    /// LoCoMo dev split (recall_any@5 / @10, MiniLM) 0.3 to 0.45 all beat rank fusion's
    /// 0.691 / 0.792 (0.4: 0.70–0.71 / 0.80–0.81); on `tests/data/retrieval.json`, whose
    /// questions paraphrase, 0.4 gives 0.823 against 0.774 (rank fusion) and 0.726 (0.3).
    pub const MEANING_VECTOR_SHARE: f64 = 0.4;

    /// The vector list's share for an embedder that matches words: with the hashing embedder,
    /// 0.3 gives 0.681 / 0.756 on the LoCoMo dev split (rank fusion 0.670 / 0.756, 0.4 about
    /// 0.66 / 0.74) and 0.581 on the labelled set (0.4: 0.597).
    pub const WORD_VECTOR_SHARE: f64 = 0.3;

    /// The most turns on each side a turn's window may hold.
    pub const MAX_WINDOW_TURNS: usize = 4;
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            fusion: Fusion::Score { vector_share: Self::MEANING_VECTOR_SHARE },
            neighbour_weight: 0.4,
            window_turns: 1,
            day_in_context_vector: false,
            speaker_weight: 1.0,
            session_weight: 0.5,
            time_weight: 0.5,
        }
    }
}

/// A question's words, lowercased, to find the speakers it names as whole words.
struct Words(Vec<String>);

impl Words {
    fn of(text: &str) -> Self {
        Self(
            text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect(),
        )
    }

    /// Where `name` (any case and punctuation) appears as whole words: each place as the
    /// range of word positions it takes, first to last.
    fn places(&self, name: &str) -> Vec<Range<usize>> {
        let name = Self::of(name).0;
        if name.is_empty() || name.len() > self.0.len() {
            return Vec::new();
        }
        (0..=self.0.len() - name.len())
            .filter(|&at| self.0[at..at + name.len()] == name[..])
            .map(|at| at..at + name.len())
            .collect()
    }

    /// Of `speakers`, the ones the question asks about. A question names the one it is about
    /// before the others it names ("What does Melanie think about Caroline's decision?",
    /// "What did Jon tell Gina?"), and a speaker named only as a possessive ("Caroline's
    /// decision") is not that one; speakers joined by "and" or "or" ("Did Jon and Gina both
    /// ...?") are asked about together. When it names every speaker only as a possessive
    /// ("When is Caroline's class?"), it asks about each of them.
    fn asked_about<'a>(&self, speakers: &HashSet<&'a str>) -> HashSet<&'a str> {
        let possessive = |place: &Range<usize>| self.0.get(place.end).is_some_and(|next| next == "s");
        let named: Vec<(&str, Vec<Range<usize>>)> =
            speakers.iter().map(|who| (*who, self.places(who))).filter(|(_, places)| !places.is_empty()).collect();
        // Each speaker at the first place it is named other than as a possessive, in order.
        let mut subjects: Vec<(Range<usize>, &str)> = named
            .iter()
            .filter_map(|(who, places)| Some((places.iter().find(|place| !possessive(place))?.clone(), *who)))
            .collect();
        if subjects.is_empty() {
            return named.into_iter().map(|(who, _)| who).collect();
        }
        subjects.sort_by_key(|(place, _)| place.start);
        let mut asked = HashSet::new();
        let mut end = subjects[0].0.start;
        for (place, who) in subjects {
            let joined = place.start == end + 1 && matches!(self.0.get(end).map(String::as_str), Some("and" | "or"));
            if !asked.is_empty() && !joined {
                break;
            }
            end = place.end;
            asked.insert(who);
        }
        asked
    }
}

/// A candidate as recall orders it: relevance, the crystal, the signal that orders equals,
/// and its rank in the vector and BM25 lists.
type Ranked<'a> = (f64, &'a Crystal, f64, Option<usize>, Option<usize>);

/// One crystal's fused relevance and its rank (1-based) in each list that found it.
type Fused = (f64, Option<usize>, Option<usize>);

/// Fuses the vector and BM25 candidate lists (each best first, with its score) by `fusion`.
fn fuse(vector: &[(CrystalId, f32)], text: &[(CrystalId, f32)], fusion: Fusion) -> HashMap<CrystalId, Fused> {
    let mut fused: HashMap<CrystalId, Fused> = HashMap::with_capacity(vector.len() + text.len());
    let (vector_weights, text_weights): (Vec<f64>, Vec<f64>) = match fusion {
        Fusion::Rank { text_weight, k } => (
            (0..vector.len()).map(|rank| 1.0 / (k + rank as f64 + 1.0)).collect(),
            (0..text.len()).map(|rank| text_weight / (k + rank as f64 + 1.0)).collect(),
        ),
        Fusion::Score { vector_share } => {
            let share = vector_share.clamp(0.0, 1.0);
            (
                normalised(vector).into_iter().map(|v| share * v).collect(),
                normalised(text).into_iter().map(|v| (1.0 - share) * v).collect(),
            )
        }
    };
    for (rank, ((id, _), relevance)) in vector.iter().zip(vector_weights).enumerate() {
        let entry = fused.entry(*id).or_insert((0.0, None, None));
        entry.0 += relevance;
        entry.1 = Some(rank + 1);
    }
    for (rank, ((id, _), relevance)) in text.iter().zip(text_weights).enumerate() {
        let entry = fused.entry(*id).or_insert((0.0, None, None));
        entry.0 += relevance;
        entry.2 = Some(rank + 1);
    }
    fused
}

/// A list's scores mapped onto [0, 1]: its best to 1, its worst to 0 (all to 1 when they are
/// equal, as one alone is); a score that is not a number counts as the worst.
fn normalised(list: &[(CrystalId, f32)]) -> Vec<f64> {
    let scores: Vec<f64> = list.iter().map(|(_, s)| f64::from(*s)).collect();
    let finite = scores.iter().copied().filter(|s| s.is_finite());
    let (low, high) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), s| (lo.min(s), hi.max(s)));
    scores
        .into_iter()
        .map(|s| match s.is_finite() {
            false => 0.0,
            true if high > low => (s - low) / (high - low),
            true => 1.0,
        })
        .collect()
}

/// Vector-index hits (best first) as crystals: each at its best key, the first one listed.
fn by_crystal(hits: Vec<(u64, f32)>) -> Vec<(CrystalId, f32)> {
    let mut seen = HashSet::with_capacity(hits.len());
    hits.into_iter().map(|(key, score)| (crystal_of(key), score)).filter(|(id, _)| seen.insert(*id)).collect()
}

/// How many candidates each half of recall gathers for `k` results.
fn candidate_depth(k: usize) -> usize {
    (k * 5).max(50)
}

impl Memory {
    /// How many vector candidates to ask for: at most the index's `ef_search`, beyond which
    /// every segment would be scanned exactly.
    pub(super) fn vector_depth(&self, wanted: usize) -> usize {
        wanted.min(self.vectors.config().ef_search)
    }

    /// The crystals whose vectors (alone or with context, whichever is nearer) are nearest to
    /// `embedding`, best first, as recall takes them: from the index, or by an exact scan.
    fn vector_candidates(&self, embedding: &[f32], depth: usize, exact: bool) -> Result<Vec<(CrystalId, f32)>, Error> {
        let hits = if exact {
            self.vectors.exact(embedding, depth)?
        } else {
            self.vectors.search(embedding, self.vector_depth(depth))?
        };
        Ok(by_crystal(hits))
    }

    /// The `k` crystals whose vectors are nearest to `q`, as recall's vector half finds them:
    /// what a benchmark measures that half's latency and recall with (against
    /// [`Memory::vector_hits_exact`]). Lifecycle and scope are not applied.
    pub fn vector_hits(&self, q: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let mut hits = self.vector_candidates(&self.embed_one(q)?, candidate_depth(k), false)?;
        hits.truncate(k);
        Ok(hits)
    }

    /// [`Memory::vector_hits`] by an exact scan of every stored vector.
    pub fn vector_hits_exact(&self, q: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let mut hits = self.vector_candidates(&self.embed_one(q)?, candidate_depth(k), true)?;
        hits.truncate(k);
        Ok(hits)
    }

    /// The `k` best crystals for `query` by BM25 alone, among those its filters admit, as
    /// recall's text half finds them: what a benchmark studies that half with. Scope and
    /// lifecycle are not applied.
    pub fn text_hits(&self, query: &Query, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        query.check()?;
        self.publish_text()?;
        Ok(self.text.search_where(&query.q, k, &query.text_filter())?)
    }

    /// The vector index's shape and build history, for operators and benchmarks.
    pub fn vector_stats(&self) -> vector::Stats {
        self.vectors.stats()
    }

    /// Blocks until the vector index has no build left to run, or `timeout` passes; true when
    /// idle. For tests, benchmarks and orderly shutdown; never call it from an async task.
    pub fn wait_indexed(&self, timeout: Duration) -> bool {
        self.vectors.wait_idle(timeout)
    }

    /// Hybrid recall: vector and BM25 candidates, each gathered among the memories the
    /// query's filters and `caller`'s access admit (so `k` come back whenever `k` exist),
    /// fused into one relevance (see [`Fusion`]).
    ///
    /// `score` is that relevance, plus a share of the relevance of the more relevant turn said
    /// next to it. Importance, recency, hormones and access only order memories of equal
    /// relevance: a strong match is never pushed below a weak one by how often it was
    /// recalled, so asking the same question again cannot lower its recall.
    ///
    /// Recall counts as access (seed 004): every crystal returned has its access count raised
    /// and its decay clock restarted.
    pub fn search(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        let hits = self.peek(query, caller, now)?;
        self.record_access(&hits, now)?;
        Ok(hits)
    }

    /// What [`Memory::search`] would return, without counting it as access: nothing changes,
    /// so inspecting memory leaves no trace.
    pub fn peek(&self, query: &Query, caller: Caller, now: UnixMillis) -> Result<Vec<Hit>, Error> {
        query.check()?;
        let k = query.k;
        let depth = candidate_depth(k);
        let tuning = self.tuning();
        self.publish_text()?;
        let periods = match tuning.time_weight > 0.0 {
            true => periods::periods(&query.q, now, &|| {
                self.latest_said(query.namespace.as_ref(), &read(&self.crystals), now)
            }),
            false => Vec::new(),
        };
        let admits = |c: &Crystal| c.is_recallable(now) && query.admits(c) && c.can_access(caller, now);
        let vector_depth = self.vector_depth(depth);
        // The vector half embeds the question (most of a search's time with an embedder of
        // meaning), then takes the crystals' read lock for the rest of the search.
        let vector_half = || -> Result<_, Error> {
            let embedding = self.embed_one(&query.q)?;
            let crystals = read(&self.crystals);
            let scoped = match &query.namespace {
                Some(namespace) => {
                    let search = ScopedSearch { namespace, depth: vector_depth, at_least: k, own_only: false };
                    self.scoped_vector_hits(search, &embedding, &crystals, &admits)?
                }
                None => None,
            };
            let hits = match scoped {
                Some(hits) => hits,
                None => {
                    let keep = |key: u64| crystals.get(&crystal_of(key)).is_some_and(admits);
                    self.vectors.search_where(&embedding, vector_depth, k, &keep)?
                }
            };
            Ok((hits, crystals))
        };
        // The two halves at once, the text half from the start of the search (it needs no
        // vector) on a thread of its own, which takes no lock of the engine's, so that no pool
        // thread waits inside a lock this search holds.
        let text_half = || timed::text_hits(&self.text, &query.q, depth, &query.text_filter(), &periods);
        let (text_hits, vector_half) = std::thread::scope(|scope| {
            match std::thread::Builder::new().name("druse-recall".into()).spawn_scoped(scope, text_half) {
                Ok(text) => {
                    let vector_half = vector_half();
                    (text.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), vector_half)
                }
                // No thread to be had: one half after the other.
                Err(_) => (text_half(), vector_half()),
            }
        });
        let (vector_hits, crystals) = vector_half?;
        let (text_hits, within) = text_hits?;
        let vector_hits = by_crystal(vector_hits);
        let mut fused = fuse(&vector_hits, &text_hits, tuning.fusion);
        if tuning.time_weight > 0.0 {
            // Said in the time the question names: the text list's share of the match among
            // what was said then.
            for (id, (relevance, _, _)) in fuse(&[], &within, tuning.fusion) {
                fused.entry(id).or_insert((0.0, None, None)).0 += tuning.time_weight * relevance;
            }
        }
        // What each candidate matched by itself, before any lift.
        let found: HashMap<CrystalId, f64> = fused.iter().map(|(id, entry)| (*id, entry.0)).collect();
        if tuning.neighbour_weight > 0.0 {
            // A turn takes a share of the relevance of the more relevant of the turns said
            // just before and after it; a neighbour of a candidate becomes one.
            let mut lifted: HashMap<CrystalId, f64> = HashMap::new();
            for (id, relevance) in &found {
                let Some(c) = crystals.get(id) else { continue };
                for neighbour in self.neighbours(c).into_iter().flatten() {
                    if crystals.get(&neighbour).is_some_and(admits) {
                        let best = lifted.entry(neighbour).or_insert(0.0);
                        *best = best.max(*relevance);
                    }
                }
            }
            for (id, relevance) in lifted {
                fused.entry(id).or_insert((0.0, None, None)).0 += tuning.neighbour_weight * relevance;
            }
        }
        if tuning.session_weight > 0.0 {
            // A candidate takes a share of the relevance of the best match said in its session
            // (itself, when it is that match).
            let session_of =
                |id: &CrystalId| crystals.get(id).and_then(|c| Some((&c.namespace, c.session.as_deref()?)));
            let mut best: HashMap<_, f64> = HashMap::new();
            for (id, relevance) in &found {
                if let Some(session) = session_of(id) {
                    let best = best.entry(session).or_insert(0.0);
                    *best = best.max(*relevance);
                }
            }
            for (id, entry) in &mut fused {
                if let Some(lift) = session_of(id).and_then(|session| best.get(&session)) {
                    entry.0 += tuning.session_weight * lift;
                }
            }
        }
        if tuning.speaker_weight > 0.0 {
            // Each candidate's speaker, read from its text once.
            let speakers: HashMap<CrystalId, String> =
                fused.keys().filter_map(|id| Some((*id, speaker(&crystals.get(id)?.text)?))).collect();
            let asked = Words::of(&query.q).asked_about(&speakers.values().map(String::as_str).collect());
            for (id, entry) in &mut fused {
                if speakers.get(id).is_some_and(|who| asked.contains(who.as_str())) {
                    entry.0 *= 1.0 + tuning.speaker_weight;
                }
            }
        }
        let modulation = self.hormone_state().retrieval(&self.config.hormones, self.network_cortisol(), now);
        // Ranked by reference; only the `k` that come back are copied.
        let mut ranked: Vec<Ranked<'_>> = fused
            .into_iter()
            .filter_map(|(id, (relevance, vector_rank, text_rank))| {
                // The text half filters by the query; access and lifecycle are checked here.
                let c = crystals.get(&id).filter(|c| admits(c))?;
                let importance = self.importance(c, now, 0.0);
                let days = now.saturating_sub(c.last_access) as f64 / 86_400_000.0;
                let recency = (-days / 7.0).exp();
                let signal =
                    (1.0 + importance * modulation.importance_boost) * (1.0 + 0.25 * recency * modulation.recency_bias);
                Some((relevance, c, signal, vector_rank, text_rank))
            })
            .collect();
        if ranked.is_empty() && caller != Caller::LocalAgent && self.withholds(query, caller, now, &crystals) {
            return Err(Error::Private(
                "the memories this search matches are private: send `Authorization: Bearer <token>`".into(),
            ));
        }
        // Relevance first; among equals, the better rank in either list (still relevance);
        // only then importance, recency and hormones; then the newest.
        let best_rank = |v: Option<usize>, t: Option<usize>| v.into_iter().chain(t).min().unwrap_or(usize::MAX);
        ranked.sort_by(|(ra, a, sa, va, ta), (rb, b, sb, vb, tb)| {
            rb.total_cmp(ra)
                .then(best_rank(*va, *ta).cmp(&best_rank(*vb, *tb)))
                .then(sb.total_cmp(sa))
                .then(b.id.cmp(&a.id))
        });
        Ok(ranked
            .into_iter()
            .take(k)
            .map(|(score, c, _, vector_rank, text_rank)| Hit { crystal: c.clone(), score, vector_rank, text_rank })
            .collect())
    }

    /// Whether a memory passes `query`'s filters but is hidden from `caller`.
    fn withholds(
        &self,
        query: &Query,
        caller: Caller,
        now: UnixMillis,
        crystals: &FxHashMap<CrystalId, Crystal>,
    ) -> bool {
        crystals.values().any(|c| c.is_recallable(now) && query.admits(c) && !c.can_access(caller, now))
    }

    /// Retrieval counts as access (seed 004): the count rises and the decay clock restarts.
    fn record_access(&self, hits: &[Hit], now: UnixMillis) -> Result<(), Error> {
        if hits.is_empty() {
            return Ok(());
        }
        let mut batch = self.batch();
        let mut map = write(&self.crystals);
        for hit in hits {
            if let Some(c) = map.get_mut(&hit.crystal.id) {
                c.access_count += 1;
                c.last_access = now;
                let bytes = record::encode(c).map_err(|e| Error::Corrupt(format!("crystal {}", c.id), e))?;
                self.put(&mut batch, &key(CRYSTAL, c.id), bytes);
            }
        }
        drop(map);
        self.apply(batch)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_normalised_from_the_worst_to_the_best_of_their_list() {
        assert_eq!(normalised(&[(1, 8.0), (2, 5.0), (3, 2.0)]), vec![1.0, 0.5, 0.0]);
        assert_eq!(normalised(&[(1, 0.3), (2, 0.3)]), vec![1.0, 1.0]);
        assert_eq!(normalised(&[(1, 0.9), (2, f32::NAN), (3, 0.1)]), vec![1.0, 0.0, 0.0]);
        assert!(normalised(&[]).is_empty());
    }

    #[test]
    fn score_fusion_keeps_a_clear_winner_ahead_where_rank_fusion_ties_it() {
        // Crystal 1 leads the text list by far and is third of the vector list; crystal 2 is
        // first of the vector list by a hair and third of the text list.
        let vector = [(2, 0.61), (3, 0.60), (1, 0.59), (4, 0.10)];
        let text = [(1, 12.0), (3, 2.1), (2, 2.0), (4, 1.0)];
        let score = fuse(&vector, &text, Fusion::Score { vector_share: 0.5 });
        assert!(score[&1].0 > score[&2].0, "{score:?}");
        let rank = fuse(&vector, &text, Fusion::Rank { text_weight: 1.0, k: 10.0 });
        assert_eq!(rank[&1].0, rank[&2].0);
        assert_eq!((score[&1].1, score[&1].2), (Some(3), Some(1)));
    }

    /// `names`, lowercased, to compare with what [`asked`] returns.
    fn speakers(names: &[&str]) -> HashSet<String> {
        names.iter().map(|name| name.to_lowercase()).collect()
    }

    /// Which of `names`, passed as written, `question` asks about (lowercased).
    fn asked(question: &str, names: &[&str]) -> HashSet<String> {
        let asked = Words::of(question).asked_about(&names.iter().copied().collect());
        asked.into_iter().map(str::to_lowercase).collect()
    }

    #[test]
    fn a_speaker_is_named_only_by_whole_words_in_any_case() {
        let question = "When did Caroline's mom, Dr. Ruiz-Lopez, visit?";
        assert_eq!(asked(question, &["Caroline", "Dr Ruiz-Lopez"]), speakers(&["Dr Ruiz-Lopez"]));
        assert_eq!(asked(question, &["carol", "mel"]), speakers(&[]), "a prefix of a word is not the word");
        assert_eq!(asked(question, &[" - "]), speakers(&[]), "a name with no words names nothing");
        assert_eq!(asked("Where is Caroline?", &["CAROLINE", "Melanie"]), speakers(&["caroline"]));
    }

    #[test]
    fn a_question_is_about_the_speaker_it_names_first_and_not_one_it_names_as_a_possessive() {
        let pair = ["Melanie", "Caroline"];
        assert_eq!(asked("What does Melanie think about Caroline's decision?", &pair), speakers(&["Melanie"]));
        assert_eq!(asked("What did Caroline tell Melanie she would not do?", &pair), speakers(&["Caroline"]));
        assert_eq!(asked("What kind of book did Caroline's friend Melanie read?", &pair), speakers(&["Melanie"]));
        // Speakers joined by "and" or "or" are asked about together; others after them are not.
        let three = ["Jon", "Gina", "Maria"];
        assert_eq!(asked("Did Jon and Gina both meet Maria?", &three), speakers(&["Jon", "Gina"]));
        assert_eq!(asked("Was it Gina or Jon who called?", &three), speakers(&["Gina", "Jon"]));
        // Named only as possessives: each of them.
        assert_eq!(asked("When is Caroline's class, and Melanie's?", &pair), speakers(&pair));
        assert_eq!(asked("What is the weather like?", &pair), speakers(&[]));
    }

    #[test]
    fn a_crystal_found_by_one_list_only_scores_its_share_of_that_list() {
        let fused = fuse(&[(1, 0.9), (2, 0.1)], &[(3, 4.0), (4, 1.0)], Fusion::Score { vector_share: 0.3 });
        assert!((fused[&1].0 - 0.3).abs() < 1e-9);
        assert!((fused[&3].0 - 0.7).abs() < 1e-9);
        assert_eq!((fused[&2].0, fused[&4].0), (0.0, 0.0));
    }
}
