//! Posts that fit: Bluesky counts a post's length in graphemes (at most 300), and the PDS
//! also refuses a text of more than 3,000 UTF-8 bytes (300 family emoji are 7.5 KB). An answer
//! is measured both ways and, when it is longer, split into a thread of parts or shortened,
//! at a sentence or a word where it can.

use unicode_segmentation::UnicodeSegmentation;

/// The most graphemes Bluesky takes in one post.
pub const MAX_GRAPHEMES: usize = 300;

/// The most UTF-8 bytes the PDS takes in one post's text.
pub const MAX_BYTES: usize = 3000;

/// The ellipsis that ends a shortened text.
const ELLIPSIS: &str = "…";

/// How many graphemes `text` has.
pub fn graphemes(text: &str) -> usize {
    text.graphemes(true).count()
}

/// `text` cut into parts of at most `max` graphemes (`max` at least 2) and [`MAX_BYTES`]
/// bytes each, at most `max_parts` of them: each part ends at the last sentence end that fits, else at the last
/// whitespace, else inside a word. When the parts cannot hold all of it, the last part ends
/// with an ellipsis. Whitespace around the parts is trimmed; an empty text gives no part.
pub fn split(text: &str, max: usize, max_parts: usize) -> Vec<String> {
    let max = max.max(2);
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() && parts.len() < max_parts {
        if graphemes(rest) <= max && rest.len() <= MAX_BYTES {
            parts.push(rest.to_owned());
            return parts;
        }
        let last = parts.len() + 1 == max_parts;
        // The last part keeps a grapheme (and its bytes) for the ellipsis.
        let (room, bytes) = if last { (max - 1, MAX_BYTES - ELLIPSIS.len()) } else { (max, MAX_BYTES) };
        let cut = cut_at(rest, room, bytes);
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

/// `text` in one post of at most `max` graphemes and [`MAX_BYTES`] bytes, cut at a sentence or word with an ellipsis.
pub fn shorten(text: &str, max: usize) -> String {
    split(text, max, 1).into_iter().next().unwrap_or_default()
}

/// The byte offset at which to cut `text` so the head has at most `room` graphemes and
/// `bytes` bytes (and at least one character): after the last sentence end in the second half
/// of the room, else at the last whitespace, else at the room's end.
fn cut_at(text: &str, room: usize, bytes: usize) -> usize {
    // The end of the last whole grapheme that fits both bounds.
    let mut end = 0;
    for (i, (at, g)) in text.grapheme_indices(true).enumerate() {
        if i >= room || at + g.len() > bytes {
            break;
        }
        end = at + g.len();
    }
    if end == 0 {
        // One grapheme longer than the byte room (a pile of combining marks): cut inside it.
        end = bytes.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            end = text.chars().next().map_or(text.len(), char::len_utf8);
        }
    }
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
    fn length_is_counted_in_graphemes_and_a_part_also_fits_in_bytes() {
        // A family emoji is one grapheme of 7 chars and 25 bytes; é written as e + accent is one.
        let family = "👨‍👩‍👧‍👦";
        assert_eq!(graphemes(family), 1);
        assert_eq!(graphemes("e\u{301}"), 1);
        // 300 of them are 300 graphemes but 7,500 bytes: the PDS refuses that in one post, so
        // they go out in three parts of at most 3,000 bytes, whole emoji each.
        let text = family.repeat(300);
        assert_eq!(graphemes(&text), 300);
        assert_eq!(text.len(), 7500);
        let parts = split(&text, MAX_GRAPHEMES, 4);
        assert_eq!(parts.len(), 3, "{:?}", parts.iter().map(String::len).collect::<Vec<_>>());
        assert!(parts.iter().all(|p| p.len() <= MAX_BYTES && graphemes(p) <= MAX_GRAPHEMES));
        assert!(parts.iter().all(|p| p.len() % family.len() == 0), "no emoji is cut");
        assert_eq!(parts.concat(), text);
        let short = shorten(&text, MAX_GRAPHEMES);
        assert!(short.len() <= MAX_BYTES && short.ends_with(ELLIPSIS), "{} bytes", short.len());
        // 120 of them (3,000 bytes) still fit in one.
        assert_eq!(split(&family.repeat(120), MAX_GRAPHEMES, 4).len(), 1);
    }

    #[test]
    fn a_grapheme_longer_than_a_post_is_cut_inside_and_nothing_is_lost() {
        // One grapheme of 1 + 2,000 combining marks (4,001 bytes).
        let zalgo = format!("a{}", "\u{301}".repeat(2000));
        let parts = split(&zalgo, MAX_GRAPHEMES, 4);
        assert!(parts.len() == 2 && parts.iter().all(|p| p.len() <= MAX_BYTES), "{parts:?}");
        assert_eq!(parts.concat(), zalgo);
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

    mod fits {
        use super::*;
        use proptest::prelude::*;

        /// Pieces of text from many scripts: ASCII words, accents (composed and combining),
        /// CJK, ZWJ emoji sequences, flags, sentence ends and spaces.
        fn piece() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z]{1,12}",
                Just("café".to_owned()),
                Just("e\u{301}te\u{301}".to_owned()),
                Just("日本語の文章".to_owned()),
                Just("한국어".to_owned()),
                Just("👨‍👩‍👧‍👦".to_owned()),
                Just("🏳️‍🌈".to_owned()),
                Just("🇫🇷".to_owned()),
                Just("👩🏽‍💻".to_owned()),
                Just(". ".to_owned()),
                Just("! ".to_owned()),
                Just(" ".to_owned()),
                Just("\n".to_owned()),
            ]
        }

        fn text() -> impl Strategy<Value = String> {
            prop::collection::vec(piece(), 0..1500).prop_map(|p| p.concat())
        }

        fn without_space(text: &str) -> String {
            text.chars().filter(|c| !c.is_whitespace()).collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 200, rng_seed: proptest::test_runner::RngSeed::Fixed(39), ..ProptestConfig::default() })]

            #[test]
            fn every_part_fits_both_bounds_and_the_parts_join_back(text in text(), max in 2usize..=MAX_GRAPHEMES) {
                let parts = split(&text, max, usize::MAX);
                for part in &parts {
                    prop_assert!(graphemes(part) <= max, "{} graphemes over {max}", graphemes(part));
                    prop_assert!(part.len() <= MAX_BYTES, "{} bytes", part.len());
                    prop_assert!(!part.is_empty());
                }
                prop_assert_eq!(without_space(&parts.concat()), without_space(&text));
            }

            #[test]
            fn a_shortened_post_fits_both_bounds(text in text()) {
                let short = shorten(&text, MAX_GRAPHEMES);
                prop_assert!(graphemes(&short) <= MAX_GRAPHEMES && short.len() <= MAX_BYTES);
            }
        }
    }
}
