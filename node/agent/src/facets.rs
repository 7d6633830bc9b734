//! Facets built by the agent: `@handle` mentions and `http(s)://` links found in the text,
//! with UTF-8 byte offsets (what ATProto's facet index counts); a mention is resolved to a
//! DID through the agent's own PDS by the caller.

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

/// One link in a text: its byte range and the URI it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub byte_start: usize,
    pub byte_end: usize,
    pub uri: String,
}

/// Longest URI made a link.
const MAX_URI: usize = 2048;

/// Every `http://` or `https://` URI in `text` that stands at the start, after whitespace or
/// after `(`, up to the next whitespace; punctuation that ends a sentence or closes a
/// parenthesis after it is not part of it.
pub fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("http") {
        let at = from + found;
        from = at + 4;
        let before_ok = at == 0 || text[..at].chars().next_back().is_some_and(|c| c.is_whitespace() || c == '(');
        let rest = &text[at..];
        if !before_ok || !(rest.starts_with("https://") || rest.starts_with("http://")) {
            continue;
        }
        let mut end = at + rest.find(char::is_whitespace).unwrap_or(rest.len());
        while text[..end].ends_with(['.', ',', ';', ':', '!', '?', ')', '"', '\'']) {
            end -= 1;
        }
        let uri = &text[at..end];
        let host = uri.split_once("://").map_or("", |(_, r)| r.split(['/', '?', '#']).next().unwrap_or(""));
        if host.contains('.') && uri.len() <= MAX_URI {
            out.push(Link { byte_start: at, byte_end: end, uri: uri.to_owned() });
        }
        from = end.max(from);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_found_with_byte_offsets_and_without_trailing_punctuation() {
        let text = "héllo, see https://example.com/a?b=1. And (http://x.test/p) or https://nohost or xhttps://a.b";
        let found = links(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(&text[found[0].byte_start..found[0].byte_end], "https://example.com/a?b=1");
        assert_eq!(found[0].uri, "https://example.com/a?b=1");
        assert_eq!(found[1].uri, "http://x.test/p");
        assert!(links("").is_empty() && links("http").is_empty() && links("https://").is_empty());
    }

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
