//! Posts that fit: Bluesky counts a post's length in graphemes (at most 300), not bytes or
//! characters, so an answer is measured with Unicode's grapheme clusters and, when it is
//! longer, split into a thread of parts or shortened, at a sentence or a word where it can.

use unicode_segmentation::UnicodeSegmentation;

/// The most graphemes Bluesky takes in one post.
pub const MAX_GRAPHEMES: usize = 300;

/// The ellipsis that ends a shortened text.
const ELLIPSIS: &str = "…";

/// How many graphemes `text` has.
pub fn graphemes(text: &str) -> usize {
    text.graphemes(true).count()
}

/// `text` cut into parts of at most `max` graphemes each (`max` at least 2), at most
/// `max_parts` of them: each part ends at the last sentence end that fits, else at the last
/// whitespace, else inside a word. When the parts cannot hold all of it, the last part ends
/// with an ellipsis. Whitespace around the parts is trimmed; an empty text gives no part.
pub fn split(text: &str, max: usize, max_parts: usize) -> Vec<String> {
    let max = max.max(2);
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() && parts.len() < max_parts {
        if graphemes(rest) <= max {
            parts.push(rest.to_owned());
            return parts;
        }
        let last = parts.len() + 1 == max_parts;
        // The last part keeps a grapheme for the ellipsis.
        let room = if last { max - 1 } else { max };
        let cut = cut_at(rest, room);
        let (head, tail) = rest.split_at(cut);
        if last {
            parts.push(format!("{}{ELLIPSIS}", head.trim_end()));
            return parts;
        }
        parts.push(head.trim_end().to_owned());
        rest = tail.trim_start();
    }
    parts
}

/// `text` in one post of at most `max` graphemes, cut at a sentence or word with an ellipsis.
pub fn shorten(text: &str, max: usize) -> String {
    split(text, max, 1).into_iter().next().unwrap_or_default()
}

/// The byte offset at which to cut `text` so the head has at most `room` graphemes (and at
/// least one): after the last sentence end in the second half of the room, else at the last
/// whitespace, else at the room's end.
fn cut_at(text: &str, room: usize) -> usize {
    let bounds: Vec<(usize, &str)> = text.grapheme_indices(true).take(room + 1).collect();
    let end = bounds.get(room).map_or(text.len(), |(i, _)| *i);
    let head = &text[..end];
    let sentence = head
        .grapheme_indices(true)
        .filter(|(i, g)| {
            matches!(*g, "." | "!" | "?" | "…")
                && head[i + g.len()..].starts_with(char::is_whitespace)
                && graphemes(&head[..*i]) >= room / 2
        })
        .map(|(i, g)| i + g.len())
        .next_back();
    if let Some(at) = sentence {
        return at;
    }
    match head.rfind(char::is_whitespace) {
        Some(at) if at > 0 => at,
        _ => end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_is_counted_in_graphemes_not_bytes_or_chars() {
        // A family emoji is one grapheme of 7 chars and 25 bytes; é written as e + accent is one.
        let family = "👨‍👩‍👧‍👦";
        assert_eq!(graphemes(family), 1);
        assert_eq!(graphemes("e\u{301}"), 1);
        let text = family.repeat(300);
        assert_eq!(graphemes(&text), 300);
        assert!(text.len() > 3000, "over the old byte limit, yet it fits");
        assert_eq!(split(&text, MAX_GRAPHEMES, 4), vec![text.clone()]);
    }

    #[test]
    fn a_long_answer_is_split_at_sentences_then_words_and_nothing_is_lost() {
        let sentence = "The swarm keeps what its nodes learn, and shares what proves itself. ";
        let text = sentence.repeat(10);
        let parts = split(&text, MAX_GRAPHEMES, 4);
        assert_eq!(parts.len(), 3);
        for p in &parts {
            assert!(graphemes(p) <= MAX_GRAPHEMES, "{} graphemes", graphemes(p));
            assert!(p.ends_with('.'), "cut at a sentence end: {p:?}");
        }
        let joined = parts.join(" ");
        assert_eq!(joined.split_whitespace().collect::<Vec<_>>(), text.split_whitespace().collect::<Vec<_>>());

        let words = "word ".repeat(200);
        let parts = split(&words, 50, 30);
        assert!(parts.iter().all(|p| graphemes(p) <= 50 && !p.ends_with(' ') && p.ends_with("word")));
    }

    #[test]
    fn what_the_parts_cannot_hold_ends_with_an_ellipsis() {
        let text = "a ".repeat(1000);
        let parts = split(&text, 20, 3);
        assert_eq!(parts.len(), 3);
        assert!(parts[2].ends_with(ELLIPSIS) && graphemes(&parts[2]) <= 20, "{:?}", parts[2]);
        let short = shorten(&"stone ".repeat(100), MAX_GRAPHEMES);
        assert!(graphemes(&short) <= MAX_GRAPHEMES && short.ends_with("stone…"), "{short}");
    }

    #[test]
    fn one_unbroken_word_is_cut_inside_and_never_inside_a_grapheme() {
        let text = "🌱".repeat(25);
        let parts = split(&text, 10, 5);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.concat(), text);
        assert!(split("", 10, 3).is_empty() && split("   ", 10, 3).is_empty());
        assert_eq!(split("ab", 2, 1), vec!["ab"]);
    }
}
