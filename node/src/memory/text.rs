//! Full-text recall: a tantivy BM25 index derived from the crystal store. The store is the
//! source of truth; the index records the highest crystal id it holds in its commit payload
//! and catches up (or rebuilds) at start-up when it lags.

use std::path::Path;
use std::sync::Mutex;

use tantivy::collector::TopDocs;
use tantivy::directory::MmapDirectory;
use tantivy::query::QueryParser;
use tantivy::schema::{FAST, Field, INDEXED, STORED, Schema, TEXT, Value};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};

use crate::memory::crystal::CrystalId;

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

/// The BM25 index: one document per crystal (its text and, for conversation turns, its
/// context), keyed by crystal id.
pub struct TextIndex {
    index: Index,
    writer: Mutex<IndexWriter>,
    reader: IndexReader,
    id: Field,
    text: Field,
}

impl std::fmt::Debug for TextIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextIndex").field("docs", &self.reader.searcher().num_docs()).finish()
    }
}

/// Memory the index writer may use before it flushes a segment.
const WRITER_HEAP: usize = 32 * 1024 * 1024;

impl TextIndex {
    /// Opens the index in `dir`, creating it if missing.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir)?;
        let mut builder = Schema::builder();
        let id = builder.add_u64_field("id", INDEXED | STORED | FAST);
        let text = builder.add_text_field("text", TEXT);
        let schema = builder.build();
        let index = Index::open_or_create(MmapDirectory::open(dir)?, schema)?;
        let writer = index.writer_with_num_threads(1, WRITER_HEAP)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Self { index, writer: Mutex::new(writer), reader, id, text })
    }

    /// The highest crystal id committed, from the last commit's payload.
    pub fn indexed_up_to(&self) -> Option<CrystalId> {
        self.index.load_metas().ok()?.payload?.parse().ok()
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, IndexWriter> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or replaces) a crystal's document.
    pub fn upsert(&self, id: CrystalId, text: &str) -> Result<(), Error> {
        let writer = self.writer();
        writer.delete_term(Term::from_field_u64(self.id, id));
        writer.add_document(doc!(self.id => id, self.text => text))?;
        Ok(())
    }

    /// Removes a crystal's document.
    pub fn remove(&self, id: CrystalId) {
        self.writer().delete_term(Term::from_field_u64(self.id, id));
    }

    /// Commits what was added, recording `up_to` as the highest id indexed, and makes it
    /// searchable.
    pub fn commit(&self, up_to: CrystalId) -> Result<(), Error> {
        {
            let mut writer = self.writer();
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&up_to.to_string());
            prepared.commit()?;
        }
        self.reader.reload()?;
        Ok(())
    }

    /// The best `k` crystals for `query` by BM25, best first. Query syntax errors are
    /// forgiven: whatever parses is searched.
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<(CrystalId, f32)>, Error> {
        let searcher = self.reader.searcher();
        let parser = QueryParser::for_index(&self.index, vec![self.text]);
        let (query, _) = parser.parse_query_lenient(query);
        let top = searcher.search(&query, &TopDocs::with_limit(k.max(1)).order_by_score())?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let document: TantivyDocument = searcher.doc(address)?;
            if let Some(id) = document.get_first(self.id).and_then(|v| v.as_u64()) {
                hits.push((id, score));
            }
        }
        Ok(hits)
    }

    /// How many documents are searchable.
    pub fn len(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Whether nothing is searchable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bm25_finds_the_document_that_shares_rare_words() {
        let dir = tempfile::tempdir().unwrap();
        let index = TextIndex::open(dir.path()).unwrap();
        index.upsert(1, "Dad's surgery is on March 15").unwrap();
        index.upsert(2, "Alice likes crows and ravens").unwrap();
        index.upsert(3, "The team shipped the release").unwrap();
        index.commit(3).unwrap();
        let hits = index.search("when is the surgery?", 2).unwrap();
        assert_eq!(hits.first().map(|h| h.0), Some(1));
        assert_eq!(index.search("crows", 5).unwrap().first().map(|h| h.0), Some(2));
    }

    #[test]
    fn upsert_replaces_and_commit_payload_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = TextIndex::open(dir.path()).unwrap();
            index.upsert(7, "old words").unwrap();
            index.upsert(7, "new words").unwrap();
            index.commit(7).unwrap();
            assert_eq!(index.len(), 1);
        }
        let index = TextIndex::open(dir.path()).unwrap();
        assert_eq!(index.indexed_up_to(), Some(7));
        assert!(index.search("old", 5).unwrap().is_empty());
        assert_eq!(index.search("new", 5).unwrap().first().map(|h| h.0), Some(7));
    }

    #[test]
    fn malformed_query_syntax_does_not_fail() {
        let dir = tempfile::tempdir().unwrap();
        let index = TextIndex::open(dir.path()).unwrap();
        index.upsert(1, "rust parsing").unwrap();
        index.commit(1).unwrap();
        assert!(index.search("rust AND (OR \"unbalanced", 5).is_ok());
        assert!(index.search("", 5).is_ok());
    }
}
