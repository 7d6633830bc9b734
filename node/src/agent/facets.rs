//! Mention facets built by the agent: `@handle` found in the text, with UTF-8 byte offsets
//! (what ATProto's facet index counts), each resolved to a DID through the agent's own PDS
//! by the caller.

/// One `@handle` in a text: its byte range (the `@` included) and the handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    pub byte_start: usize,
    pub byte_end: usize,
    pub handle: String,
}

/// Every `@handle` in `text` that stands at the start, after whitespace or after `(`, with a
/// handle of at least two dot-separated labels. A trailing `.` (end of sentence) is not part
/// of the handle.
pub fn mentions(text: &str) -> Vec<Mention> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for (at, _) in text.match_indices('@') {
        let before_ok = at == 0 || text[..at].chars().next_back().is_some_and(|c| c.is_whitespace() || c == '(');
        if !before_ok {
            continue;
        }
        let mut end = at + 1;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'.' || bytes[end] == b'-') {
            end += 1;
        }
        let mut handle = &text[at + 1..end];
        while handle.ends_with('.') || handle.ends_with('-') {
            handle = &handle[..handle.len() - 1];
        }
        let labels: Vec<&str> = handle.split('.').collect();
        let valid = handle.len() <= 253
            && labels.len() >= 2
            && labels.iter().all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-'))
            && labels.last().is_some_and(|tld| tld.starts_with(|c: char| c.is_ascii_alphabetic()));
        if valid {
            out.push(Mention { byte_start: at, byte_end: at + 1 + handle.len(), handle: handle.to_ascii_lowercase() });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_utf8_bytes() {
        let text = "héllo 🌱 @alice.test, and (@bob.test).";
        let found = mentions(text);
        assert_eq!(found.len(), 2);
        assert_eq!(&text[found[0].byte_start..found[0].byte_end], "@alice.test");
        assert_eq!(found[0].byte_start, "héllo 🌱 ".len());
        assert_eq!(found[0].byte_start, 12, "é is 2 bytes and 🌱 is 4");
        assert_eq!(&text[found[1].byte_start..found[1].byte_end], "@bob.test");
    }

    #[test]
    fn emails_bare_words_and_trailing_dots_are_not_handles() {
        assert!(mentions("mail me at me@example.com").is_empty());
        assert!(mentions("hi @bob").is_empty(), "a handle has a dot");
        assert!(mentions("@1.2").is_empty(), "a numeric top-level label is no handle");
        let m = mentions("thanks @carol.test.");
        assert_eq!(m[0].handle, "carol.test");
        assert_eq!(m[0].byte_end, "thanks @carol.test".len());
        assert_eq!(mentions("@Dave.Test")[0].handle, "dave.test");
        assert!(mentions("@").is_empty() && mentions("").is_empty());
    }
}
