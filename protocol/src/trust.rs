//! The trust list: the management keys every node accepts weather, endorsements, bounties,
//! bans and attestations from.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::keys::PublicKey;

/// Why a trust list could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("reading trust list {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("trust list line {line}: {reason}")]
    Line { line: usize, reason: String },
}

/// The set of management keys this node trusts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustList {
    keys: HashSet<PublicKey>,
}

impl TrustList {
    /// A list holding exactly `keys`.
    pub fn new(keys: impl IntoIterator<Item = PublicKey>) -> Self {
        Self { keys: keys.into_iter().collect() }
    }

    /// Parses the text of a trust list: one key per line (hex, base64 or PeerId), with
    /// `#` starting a comment anywhere on a line. Blank lines are allowed.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut keys = HashSet::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.split('#').next().unwrap_or_default().trim();
            if content.is_empty() {
                continue;
            }
            let mut words = content.split_whitespace();
            let first = words.next().unwrap_or_default();
            if let Some(extra) = words.next() {
                return Err(Error::Line {
                    line,
                    reason: format!("unexpected {extra:?} after the key (start a comment with '#')"),
                });
            }
            let key = first.parse::<PublicKey>().map_err(|e| Error::Line { line, reason: e.to_string() })?;
            keys.insert(key);
        }
        Ok(Self { keys })
    }

    /// Reads and parses a trust list file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
        Self::parse(&text)
    }

    /// Whether `key` may sign management messages.
    pub fn contains(&self, key: &PublicKey) -> bool {
        self.keys.contains(key)
    }

    /// Adds a key (an operator's inline config, or a management node trusting itself).
    pub fn insert(&mut self, key: PublicKey) {
        self.keys.insert(key);
    }

    /// The trusted keys.
    pub fn iter(&self) -> impl Iterator<Item = &PublicKey> {
        self.keys.iter()
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is trusted (then no management message is ever accepted).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keypair;

    #[test]
    fn trust_list_accepts_comments_blank_lines_and_every_key_form() {
        let a = Keypair::from_seed([1; 32]).public();
        let b = Keypair::from_seed([2; 32]).public();
        let c = Keypair::from_seed([3; 32]).public();
        let text = format!(
            "# management keys\n\n{a}   # primary\n{}\n  {}\n",
            data_encoding::BASE64.encode(&b.to_bytes()),
            c.peer_id()
        );
        let list = TrustList::parse(&text).unwrap();
        assert_eq!(list.len(), 3);
        assert!(list.contains(&a) && list.contains(&b) && list.contains(&c));
    }

    #[test]
    fn bad_trust_list_line_names_its_line_number() {
        let a = Keypair::from_seed([1; 32]).public();
        let text = format!("# keys\n{a}\nnot-a-key\n");
        match TrustList::parse(&text) {
            Err(Error::Line { line, .. }) => assert_eq!(line, 3),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn trailing_words_without_a_comment_marker_are_an_error() {
        let a = Keypair::from_seed([1; 32]).public();
        let err = TrustList::parse(&format!("{a} primary\n")).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
