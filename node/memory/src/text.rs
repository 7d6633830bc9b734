//! Full-text recall: a tantivy BM25 index derived from the crystal store. The store is the
//! source of truth; the index records the highest crystal id it holds in its commit payload
//! and catches up (or rebuilds) at start-up when it lags.
//!
//! Text is analysed for conversational English: lowercased, stripped of the words every
//! question and every turn share (pronouns, auxiliaries, question words), and stemmed, so
//! "What's my tutor's name?" matches "italki tutors" on "tutor" rather than every turn on
//! "what", "my" and "s". On the labelled conversations of `node/tests/retrieval.rs` (context
//! indexing on) this raised hybrid recall@5 from 0.419 to 0.565 with the hashing embedder and
//! from 0.710 to 0.790 with MiniLM, against tantivy's default analyser.

use std::ops::Bound;
use std::path::Path;
use std::sync::Mutex;

use tantivy::collector::TopDocs;
use tantivy::directory::MmapDirectory;
use tantivy::indexer::IndexWriterOptions;
use tantivy::query::{BooleanQuery, ConstScoreQuery, Occur, Query, QueryParser, RangeQuery, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{
    LowerCaser, RemoveLongFilter, SimpleTokenizer, StopWordFilter, TextAnalyzer, TokenizerManager,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Term, doc};

use crate::background::{LOW, run_lowered};
use crate::crystal::CrystalId;

mod stem;

/// Why the text index failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("text index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("text index directory: {0}")]
    Directory(#[from] tantivy::directory::error::OpenDirectoryError),
    #[error("text index: {0}")]
    Io(#[from] std::io::Error),
}

/// What a crystal is indexed as: its own text, and what it is recalled by besides (the text it
/// superseded; for a conversation turn, the turns said around it and the day it was said).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Document {
    pub text: String,
    /// Texts it is also found by, counted for less than its own words ([`CONTEXT_BOOST`]):
    /// the text a correction superseded.
    pub context: Vec<String>,
    /// For a conversation turn: the turns around it and its day. A turn is indexed as its
    /// window, one text, in place of its own text alone.
    pub window: Option<Window>,
    /// What recall filters on, indexed beside the text so a filter applies inside the search.
    pub tags: Tags,
}

/// A conversation turn's window: what was said around it, and when.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Window {
    /// The turns said just before it, in the order said.
    pub before: Vec<String>,
    /// The turns said just after it, in the order said.
    pub after: Vec<String>,
    /// The day it was said, in words and as a date.
    pub day: String,
}

/// A crystal's filterable attributes, as the text index holds them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tags {
    pub namespace: String,
    pub kind: String,
    pub semantic_type: String,
    pub session: Option<String>,
    /// When it was said (a turn's time, else when it was stored), Unix milliseconds.
    pub at: u64,
}

/// Which documents a search may return; `None` accepts anything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Filter {
    pub namespace: Option<String>,
    pub kind: Option<String>,
    pub semantic_type: Option<String>,
    pub session: Option<String>,
    /// `at` at or after this.
    pub since: Option<u64>,
    /// `at` at or before this.
    pub until: Option<u64>,
}

/// The BM25 index: one document per crystal, keyed by crystal id, with its own text and its
/// context in separate fields so a match on the crystal's own words ranks above a match on
/// its context alone.
pub(crate) struct TextIndex {
    index: Index,
    writer: Mutex<IndexWriter>,
    reader: IndexReader,
    id: Field,
    text: Field,
    context: Field,
    window: Field,
    namespace: Field,
    kind: Field,
    semantic_type: Field,
    session: Field,
    at: Field,
}

impl std::fmt::Debug for TextIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextIndex").field("docs", &self.reader.searcher().num_docs()).finish()
    }
}

/// The id of the document that starts the next segment as soon as the index opens and after
/// each commit, on the writer's indexing thread at background priority: a segment's start
/// (its files, each registered in `.managed.json` by an atomic rewrite, and its arenas) costs
/// a node 2–3 ms and its disk a few fsyncs, and without it the first memory after a commit
/// paid that, on every node of a swarm at the same moment when that memory is a listing
/// (tests/README, "Where the first listing's time goes"). The document has only this id, so no
/// query matches it, and it is deleted in the commit that would make it searchable. No crystal
/// has this id: crystal ids count up from 1.
const NEXT_SEGMENT: u64 = u64::MAX;

/// Hands the writer's indexing thread the [`NEXT_SEGMENT`] document. Only a writer whose thread
/// has died refuses it, and then the next add or commit says so: what was committed stands.
fn start_next_segment(writer: &IndexWriter, id: Field) {
    if let Err(error) = writer.add_document(doc!(id => NEXT_SEGMENT)) {
        tracing::debug!(%error, "the text index could not start its next segment ahead");
    }
}

/// Memory the index writer may use before it flushes a segment.
const WRITER_HEAP: usize = 32 * 1024 * 1024;

/// The analyser's name in the schema: an index written with another analyser (or before the
/// filter fields, before turns were indexed as windows, or with the sstable term dictionaries
/// an earlier build used in place of FSTs, or before irregular forms came to their base's
/// term) has another schema, so opening it fails and the engine rebuilds it from the store.
const ANALYSER: &str = "druse_en_conversation_v5";

/// Words that carry no topic in a conversation: pronouns, auxiliaries, articles, common
/// prepositions, question words and contraction tails ("what's" splits into "what" and "s").
/// Words about time ("before", "after", "now", "again") are kept: questions lean on them.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "being",
    "both",
    "but",
    "by",
    "can",
    "could",
    "d",
    "did",
    "do",
    "does",
    "doing",
    "don",
    "each",
    "for",
    "from",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "ll",
    "m",
    "many",
    "me",
    "more",
    "most",
    "much",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "of",
    "off",
    "on",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "own",
    "re",
    "s",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "to",
    "too",
    "very",
    "ve",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// The weight of a match on a crystal's context against one on its own text: a turn is
/// found by its own words before its neighbour is. On the labelled conversations 0.5 scored
/// as well as 1.0 with MiniLM (recall@5 0.774) and one question better with hashing (0.597
/// against 0.581); 0.3 was worse with both.
const CONTEXT_BOOST: f32 = 0.5;

fn analyser() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::remove(STOP_WORDS.iter().map(|w| (*w).to_owned())))
        .filter(stem::MemoStemmer)
        .build()
}

impl TextIndex {
    /// Opens the index in `dir`, creating it if missing.
    pub(crate) fn open(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir)?;
        let mut builder = Schema::builder();
        let id = builder.add_u64_field("id", INDEXED | STORED | FAST);
        let indexing = TextFieldIndexing::default()
            .set_tokenizer(ANALYSER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions);
        let text = builder.add_text_field("text", TextOptions::default().set_indexing_options(indexing.clone()));
        let context = builder.add_text_field("context", TextOptions::default().set_indexing_options(indexing.clone()));
        let window = builder.add_text_field("window", TextOptions::default().set_indexing_options(indexing));
        let namespace = builder.add_text_field("namespace", STRING);
        let kind = builder.add_text_field("kind", STRING);
        let semantic_type = builder.add_text_field("semantic_type", STRING);
        let session = builder.add_text_field("session", STRING);
        let at = builder.add_u64_field("at", INDEXED | FAST);
        let schema = builder.build();
        let tokenizers = TokenizerManager::default();
        tokenizers.register(ANALYSER, analyser());
        let index = Index::builder().schema(schema).tokenizers(tokenizers).open_or_create(MmapDirectory::open(dir)?)?;
        // The writer's indexing, merging and updating threads are started here and by each
        // commit: both run at background priority, so indexing yields to ingestion and to
        // the API while it catches up. One merge thread, not tantivy's four: a node's
        // segments are small and merge in milliseconds, and a host running hundreds of
        // nodes would otherwise hold three idle threads for each of them.
        let options = IndexWriterOptions::builder()
            .num_worker_threads(1)
            .num_merge_threads(1)
            .memory_budget_per_thread(WRITER_HEAP)
            .build();
        let writer = run_lowered(LOW, || index.writer_with_options(options))??;
        start_next_segment(&writer, id);
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Self {
            index,
            writer: Mutex::new(writer),
            reader,
            id,
            text,
            context,
            window,
            namespace,
            kind,
            semantic_type,
            session,
            at,
        })
    }

    /// The highest crystal id committed, from the last commit's payload.
    pub(crate) fn indexed_up_to(&self) -> Option<CrystalId> {
        self.index.load_metas().ok()?.payload?.parse().ok()
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, IndexWriter> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or replaces) a crystal's document.
    pub(crate) fn upsert(&self, id: CrystalId, document: &Document) -> Result<(), Error> {
        let writer = self.writer();
        writer.delete_term(Term::from_field_u64(self.id, id));
        let tags = &document.tags;
        let mut doc = doc!(
            self.id => id,
            self.namespace => tags.namespace.as_str(),
            self.kind => tags.kind.as_str(),
            self.semantic_type => tags.semantic_type.as_str(),
            self.at => tags.at,
        );
        if let Some(session) = &tags.session {
            doc.add_text(self.session, session);
        }
        match &document.window {
            // One text, so BM25 weighs the window's words as one document's.
            Some(window) => {
                let said = window.before.iter().chain([&document.text]).chain(&window.after).chain([&window.day]);
                doc.add_text(self.window, said.map(String::as_str).collect::<Vec<_>>().join("\n"));
            }
            None => doc.add_text(self.text, &document.text),
        }
        for part in &document.context {
            doc.add_text(self.context, part);
        }
        writer.add_document(doc)?;
        Ok(())
    }

    /// Removes a crystal's document.
    pub(crate) fn remove(&self, id: CrystalId) {
        self.writer().delete_term(Term::from_field_u64(self.id, id));
    }

    /// Commits what was added, recording `up_to` as the highest id indexed, and makes it
    /// searchable.
    pub(crate) fn commit(&self, up_to: CrystalId) -> Result<(), Error> {
        run_lowered(LOW, || -> Result<(), Error> {
            let mut writer = self.writer();
            writer.delete_term(Term::from_field_u64(self.id, NEXT_SEGMENT));
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&up_to.to_string());
            prepared.commit()?;
            start_next_segment(&writer, self.id);
            Ok(())
        })??;
        self.reader.reload()?;
        Ok(())
    }

    /// The best `k` crystals for `query` by BM25, best first. Query syntax errors are
    /// forgiven: whatever parses is searched.
    #[cfg(test)]
    pub(crate) fn search(&self, query: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        self.search_where(query, k, &Filter::default())
    }

    /// [`TextIndex::search`] among the documents `filter` accepts: the filter is part of the
    /// query, so `k` hits come back whenever `k` matching documents pass it.
    pub(crate) fn search_where(&self, query: &str, k: usize, filter: &Filter) -> Result<Vec<(CrystalId, f32)>, Error> {
        let searcher = self.reader.searcher();
        let mut parser = QueryParser::for_index(&self.index, vec![self.text, self.context, self.window]);
        parser.set_field_boost(self.context, CONTEXT_BOOST);
        let (parsed, _) = parser.parse_query_lenient(query);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, parsed)];
        for (field, value) in [
            (self.namespace, &filter.namespace),
            (self.kind, &filter.kind),
            (self.semantic_type, &filter.semantic_type),
            (self.session, &filter.session),
        ] {
            if let Some(value) = value {
                let term = Term::from_field_text(field, value);
                clauses.push((Occur::Must, Box::new(TermQuery::new(term, IndexRecordOption::Basic))));
            }
        }
        if filter.since.is_some() || filter.until.is_some() {
            let bound =
                |v: Option<u64>| v.map_or(Bound::Unbounded, |v| Bound::Included(Term::from_field_u64(self.at, v)));
            // A time range only filters: it adds nothing to a score, so the scores of a search
            // within a time are those of the same documents in a search without it.
            let range = RangeQuery::new(bound(filter.since), bound(filter.until));
            clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(Box::new(range), 0.0))));
        }
        let query = BooleanQuery::new(clauses);
        let top = searcher.search(&query, &TopDocs::with_limit(k.max(1)).order_by_score())?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let ids = searcher.segment_reader(address.segment_ord).fast_fields().u64("id")?;
            if let Some(id) = ids.first(address.doc_id) {
                hits.push((id, score));
            }
        }
        Ok(hits)
    }

    /// How many documents are searchable.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn doc(text: &str) -> Document {
        Document { text: text.into(), ..Document::default() }
    }

    /// An index in a fresh directory holding `docs`, committed.
    fn indexed(docs: &[(CrystalId, Document)]) -> (tempfile::TempDir, TextIndex) {
        let dir = tempfile::tempdir().unwrap();
        let index = TextIndex::open(dir.path()).unwrap();
        for (id, document) in docs {
            index.upsert(*id, document).unwrap();
        }
        index.commit(docs.iter().map(|(id, _)| *id).max().unwrap_or(0)).unwrap();
        (dir, index)
    }

    /// The ids `query` finds, best first.
    fn ids(index: &TextIndex, query: &str) -> Vec<CrystalId> {
        index.search(query, 5).unwrap().into_iter().map(|h| h.0).collect()
    }

    #[test]
    fn bm25_finds_the_document_that_shares_rare_words() {
        let (_dir, index) = indexed(&[
            (1, doc("Dad's surgery is on March 15")),
            (2, doc("Alice likes crows and ravens")),
            (3, doc("The team shipped the release")),
        ]);
        let hits = index.search("when is the surgery?", 2).unwrap();
        assert_eq!(hits.first().map(|h| h.0), Some(1));
        assert_eq!(ids(&index, "crows").first(), Some(&2));
    }

    #[test]
    fn a_segment_with_more_terms_than_its_first_table_finds_every_one() {
        // A segment's term table starts at 4,096 slots and doubles when half full
        // (vendor/tantivy-stacker): 6,000 distinct words in one segment make it grow twice.
        let word = |n: u32| format!("w{n}q{}", n * 7919 % 6007);
        let docs: Vec<_> =
            (1..=6_000).map(|n| (u64::from(n), doc(&format!("{} and the shared words", word(n))))).collect();
        let (_dir, index) = indexed(&docs);
        assert_eq!(index.len(), 6_000);
        for n in (1..=6_000).step_by(13) {
            assert_eq!(ids(&index, &word(n)), vec![u64::from(n)], "word {n}");
        }
        assert_eq!(index.search("shared", 10).unwrap().len(), 10);
    }

    /// The names of this process's threads.
    #[cfg(target_os = "linux")]
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|name| name.trim_end().to_owned())
            .collect()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_open_index_merges_on_one_thread() {
        let (_dir, index) = indexed(&[(1, doc("one memory"))]);
        let names = thread_names();
        assert!(names.iter().any(|n| n == "merge_thread_0"), "no merge thread among {names:?}");
        // Every index in this process is opened the same way, so no second merge thread
        // exists while this one is open.
        assert!(!names.iter().any(|n| n.starts_with("merge_thread_") && n != "merge_thread_0"), "{names:?}");
        drop(index);
    }

    /// The segments whose files are in `dir` and that no commit has made searchable yet.
    fn started_segments(dir: &Path, index: &TextIndex) -> BTreeSet<String> {
        let committed: BTreeSet<String> =
            index.index.searchable_segment_ids().unwrap().iter().map(|s| s.uuid_string()).collect();
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter_map(|name| name.split_once('.').map(|(uuid, _)| uuid.to_owned()))
            .filter(|uuid| uuid.len() == 32 && uuid.bytes().all(|b| b.is_ascii_hexdigit()) && !committed.contains(uuid))
            .collect()
    }

    /// Waits (up to 10 s) for the writer's indexing thread to start a segment no commit has
    /// made searchable and that is not in `before`, and returns it.
    fn next_segment(dir: &Path, index: &TextIndex, before: &BTreeSet<String>) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(started) = started_segments(dir, index).into_iter().find(|s| !before.contains(s)) {
                return started;
            }
            assert!(std::time::Instant::now() < deadline, "no segment was started ahead of the next memory");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn the_next_segment_starts_at_open_and_after_each_commit_and_nothing_finds_what_starts_it() {
        let dir = tempfile::tempdir().unwrap();
        let index = TextIndex::open(dir.path()).unwrap();
        let none = BTreeSet::new();
        let first = next_segment(dir.path(), &index, &none);
        index.upsert(1, &doc("the boat is called Wren")).unwrap();
        index.commit(1).unwrap();
        // The memory went into the segment started at open, which the commit made searchable.
        assert!(index.index.searchable_segment_ids().unwrap().iter().any(|s| s.uuid_string() == first));
        assert_eq!(index.len(), 1, "only the memory is searchable");
        let second = next_segment(dir.path(), &index, &none);
        assert_ne!(first, second);
        // A commit with nothing new, and one with a removal, keep the count right too.
        index.commit(1).unwrap();
        index.upsert(2, &doc("the garden has three apple trees")).unwrap();
        index.commit(2).unwrap();
        index.remove(1);
        index.commit(2).unwrap();
        assert_eq!(index.len(), 1);
        assert_eq!(ids(&index, "garden apple"), vec![2]);
        assert!(index.search("boat Wren", 5).unwrap().is_empty());
        // The segment the closed writer had started may be left on disk until a commit
        // collects it: the reopened index must start one of its own.
        let left = started_segments(dir.path(), &index);
        drop(index);
        let index = TextIndex::open(dir.path()).unwrap();
        assert_eq!((index.len(), index.indexed_up_to()), (1, Some(2)), "reopened");
        next_segment(dir.path(), &index, &left);
    }

    #[test]
    fn upsert_replaces_and_commit_payload_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = TextIndex::open(dir.path()).unwrap();
            index.upsert(7, &doc("old words")).unwrap();
            index.upsert(7, &doc("new words")).unwrap();
            index.commit(7).unwrap();
            assert_eq!(index.len(), 1);
        }
        let index = TextIndex::open(dir.path()).unwrap();
        assert_eq!(index.indexed_up_to(), Some(7));
        assert!(index.search("old", 5).unwrap().is_empty());
        assert_eq!(ids(&index, "new").first(), Some(&7));
    }

    #[test]
    fn an_index_written_with_another_analyser_is_refused_so_the_engine_rebuilds_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut builder = Schema::builder();
        builder.add_u64_field("id", INDEXED | STORED | FAST);
        builder.add_text_field("text", tantivy::schema::TEXT);
        Index::create_in_dir(dir.path(), builder.build()).unwrap();
        assert!(TextIndex::open(dir.path()).is_err());
    }

    #[test]
    fn questions_match_on_topic_words_and_their_stems_not_on_question_words() {
        let (_dir, index) = indexed(&[
            (1, doc("What do you think? I'd like that.")),
            (2, doc("italki tutors start at about £15 an hour")),
        ]);
        assert_eq!(ids(&index, "What's my tutor's name?"), vec![2]);
    }

    #[test]
    fn a_match_on_its_own_text_outranks_a_match_on_context() {
        let with_context = Document {
            text: "Casa do Largo, eight minutes away".into(),
            context: vec!["which hotel".into()],
            ..Document::default()
        };
        let (_dir, index) = indexed(&[(1, with_context), (2, doc("which hotel should we book"))]);
        assert_eq!(ids(&index, "hotel"), vec![2, 1]);
    }

    #[test]
    fn malformed_query_syntax_does_not_fail() {
        let (_dir, index) = indexed(&[(1, doc("rust parsing"))]);
        assert!(index.search("rust AND (OR \"unbalanced", 5).is_ok());
        assert!(index.search("", 5).is_ok());
    }
}
