//! A memory's sentences, so recall can find a long turn by what one of its sentences says.
//!
//! A turn of several sentences embeds to the mean of its meanings; a question about one of
//! them is nearer that sentence alone. The engine stores a vector per sentence beside the
//! turn's own (DESIGN §8, several embeddings per crystal) and a crystal is as near to a query as
//! the nearest of them.

use std::ops::Range;

/// The most sentences of one memory that get vectors of their own; the rest are still found
/// through the memory's whole vector and its words.
pub(crate) const MAX_SENTENCES: usize = 8;

/// The byte ranges of `text`'s sentences, after a transcript's speaker prefix ("Melanie: ..."),
/// when it has at least two; none otherwise (the memory's own vector already is its one
/// sentence). A sentence ends at `.`, `!`, `?` or a line break followed by white space or
/// the end; a piece of fewer than two words joins the sentence after it (or before it, at the
/// end), so "Wow! That's great." is one sentence and "3.5" or "Dr. Smith" are not cut apart.
pub(crate) fn sentences(text: &str) -> Vec<Range<usize>> {
    let start = crate::correction::speaker(text).and_then(|_| text.find(':')).map_or(0, |colon| colon + 1);
    let mut pieces: Vec<Range<usize>> = Vec::new();
    let mut begin = start;
    let mut chars = text[start..].char_indices().map(|(i, c)| (i + start, c)).peekable();
    while let Some((i, c)) = chars.next() {
        let ends = matches!(c, '.' | '!' | '?' | '\n')
            && chars.peek().is_none_or(|(_, next)| next.is_whitespace())
            && !(c == '.' && abbreviation(&text[begin..i]));
        if ends {
            pieces.push(begin..i + c.len_utf8());
            begin = i + c.len_utf8();
        }
    }
    pieces.push(begin..text.len());
    let words = |range: &Range<usize>| text[range.clone()].split_whitespace().count();
    let mut merged: Vec<Range<usize>> = Vec::new();
    let mut pending: Option<usize> = None;
    for piece in pieces {
        let piece = pending.take().map_or(piece.clone(), |from| from..piece.end);
        if words(&piece) < 2 {
            pending = Some(piece.start);
        } else {
            merged.push(piece);
        }
    }
    if let (Some(from), Some(last)) = (pending, merged.last_mut())
        && words(&(from..text.len())) > 0
    {
        last.end = text.len();
    }
    let merged: Vec<Range<usize>> = merged.into_iter().map(|range| trim(text, range)).collect();
    if merged.len() < 2 {
        return Vec::new();
    }
    merged.into_iter().take(MAX_SENTENCES).collect()
}

/// The texts a memory's sentence vectors embed: each of its [`sentences`], said by its speaker
/// when the text names one ("Melanie: It was so relaxing!"), as the turn said it. Without the
/// name, a sentence is a less likely answer to a question that names its speaker: on the
/// LoCoMo dev split (MiniLM) the sentences with their speaker raised recall_any@5 / @10 by
/// about 0.015 each, and without it by nothing.
pub(crate) fn sentence_texts(text: &str) -> Vec<String> {
    let speaker = crate::correction::speaker(text).and_then(|_| text.split_once(':')).map(|(name, _)| name.trim());
    sentences(text)
        .into_iter()
        .map(|range| match speaker {
            Some(name) => format!("{name}: {}", &text[range]),
            None => text[range].to_owned(),
        })
        .collect()
}

/// Whether the word just before a full stop is a title's abbreviation ("Dr", "Mrs", "St"):
/// capitalised, and three letters at most.
fn abbreviation(before: &str) -> bool {
    let word = &before[before.trim_end_matches(char::is_alphabetic).len()..];
    (1..=3).contains(&word.chars().count()) && word.chars().next().is_some_and(char::is_uppercase)
}

/// `range` without the white space at either end.
fn trim(text: &str, range: Range<usize>) -> Range<usize> {
    let piece = &text[range.clone()];
    let start = range.start + (piece.len() - piece.trim_start().len());
    let end = range.end - (piece.len() - piece.trim_end().len());
    start..end.max(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<&str> {
        sentences(text).into_iter().map(|range| &text[range]).collect()
    }

    #[test]
    fn a_turn_splits_into_its_sentences_after_the_speaker() {
        assert_eq!(
            split("Melanie: I went to a pottery class yesterday. It was so relaxing! Have you tried it?"),
            ["I went to a pottery class yesterday.", "It was so relaxing!", "Have you tried it?"]
        );
    }

    #[test]
    fn sentence_texts_keep_the_speaker() {
        assert_eq!(
            sentence_texts("Melanie: I went to a pottery class. It was so relaxing!"),
            ["Melanie: I went to a pottery class.", "Melanie: It was so relaxing!"]
        );
        assert_eq!(
            sentence_texts("The lake froze early. Skating began in November."),
            ["The lake froze early.", "Skating began in November."]
        );
        assert!(sentence_texts("Melanie: one sentence only.").is_empty());
    }

    #[test]
    fn one_sentence_gives_no_parts() {
        assert!(sentences("Caroline: I went to the LGBTQ support group yesterday.").is_empty());
        assert!(sentences("").is_empty());
        assert!(sentences("no punctuation at all here").is_empty());
    }

    #[test]
    fn short_pieces_and_numbers_stay_with_their_sentence() {
        assert_eq!(
            split("Wow! That's great. The surgery is at 3.5 hours past noon with Dr. Smith present."),
            ["Wow! That's great.", "The surgery is at 3.5 hours past noon with Dr. Smith present."]
        );
        assert_eq!(split("We met at the lake. Lovely. Truly."), ["We met at the lake.", "Lovely. Truly."]);
    }

    #[test]
    fn ranges_are_character_boundaries_and_capped() {
        let text = "Zoë: Ça va très bien. Où est la bibliothèque? ".to_string() + &"Une phrase de plus. ".repeat(20);
        let ranges = sentences(&text);
        assert_eq!(ranges.len(), MAX_SENTENCES);
        for range in ranges {
            assert!(text.get(range).is_some());
        }
    }
}
