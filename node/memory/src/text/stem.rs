//! English stemming with a memo: the Snowball stemmer tantivy's own `Stemmer` filter runs, on
//! each distinct word once, after an irregular form is put at its base ([`base_form`]). Words
//! repeat (a handful make up most of any text), and stemming is most of what indexing a
//! document costs, so a text index that remembers the stems it made indexes several times
//! fewer words through the stemmer. But for the irregular forms, the stems are tantivy's.

use std::mem;

use rustc_hash::FxHashMap;
use tantivy::tokenizer::{Token, TokenFilter, TokenStream, Tokenizer};

/// Distinct words remembered per analyser; past this the memo starts again, so it stays
/// within a few hundred KiB whatever it is fed.
const MEMO_WORDS: usize = 16 * 1024;

/// The token filter: stems lowercased tokens as `tantivy::tokenizer::Stemmer` does for English,
/// an irregular form as its base.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MemoStemmer;

impl TokenFilter for MemoStemmer {
    type Tokenizer<T: Tokenizer> = MemoStemmerFilter<T>;

    fn transform<T: Tokenizer>(self, tokenizer: T) -> MemoStemmerFilter<T> {
        MemoStemmerFilter { inner: tokenizer, memo: Memo::default() }
    }
}

/// Each copy of an analyser (tantivy gives every indexing thread and query its own) has a
/// memo of its own, so no lock is taken per word.
pub(super) struct MemoStemmerFilter<T> {
    inner: T,
    memo: Memo,
}

impl<T: Clone> Clone for MemoStemmerFilter<T> {
    /// A copy starts with an empty memo: copying the words would cost more than it saves.
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), memo: Memo::default() }
    }
}

struct Memo {
    stemmer: frostem::Stemmer,
    stems: FxHashMap<String, String>,
}

impl Default for Memo {
    fn default() -> Self {
        Self { stemmer: frostem::Stemmer::new(frostem::Algorithm::English), stems: FxHashMap::default() }
    }
}

impl Memo {
    /// Replaces `word` with its stem: the stem of its base form when it is an irregular
    /// form ([`base_form`]).
    fn stem(&mut self, word: &mut String) {
        if let Some(stem) = self.stems.get(word.as_str()) {
            word.clear();
            word.push_str(stem);
            return;
        }
        let stem = self.stemmer.stem(base_form(word).unwrap_or(word)).into_owned();
        if self.stems.len() >= MEMO_WORDS {
            self.stems.clear();
        }
        let original = mem::replace(word, stem.clone());
        self.stems.insert(original, stem);
    }
}

/// The base form of an irregular English verb's past tense or participle ("bought" is "buy",
/// "went" and "gone" are "go"), or of an irregular plural ("children" is "child"), which
/// suffix stripping cannot find. A question asks "what did she buy?" of a memory that says
/// "I bought a bike", so both must come to the same term. Forms that are as often another word
/// ("rose", "bound", "lay", "bit", "shot", "ground", "wound") are left as they are, and so
/// are the auxiliaries the stop words already drop ("did", "had", "was"). "won" is left too:
/// the tokenizer splits "won't" into "won" and "t", and a conversation says "won't" as often
/// as "won".
fn base_form(word: &str) -> Option<&'static str> {
    Some(match word {
        "arose" | "arisen" => "arise",
        "awoke" | "awoken" => "awake",
        "beaten" => "beat",
        "became" => "become",
        "began" | "begun" => "begin",
        "bent" => "bend",
        "bitten" => "bite",
        "bled" => "bleed",
        "blew" | "blown" => "blow",
        "broke" | "broken" => "break",
        "bred" => "breed",
        "brought" => "bring",
        "built" => "build",
        "burnt" => "burn",
        "bought" => "buy",
        "caught" => "catch",
        "chose" | "chosen" => "choose",
        "came" => "come",
        "crept" => "creep",
        "dealt" => "deal",
        "dug" => "dig",
        "drew" | "drawn" => "draw",
        "dreamt" => "dream",
        "drank" | "drunk" => "drink",
        "drove" | "driven" => "drive",
        "ate" | "eaten" => "eat",
        "fell" | "fallen" => "fall",
        "fed" => "feed",
        "felt" => "feel",
        "fought" => "fight",
        "found" => "find",
        "fled" => "flee",
        "flew" | "flown" => "fly",
        "forbade" | "forbidden" => "forbid",
        "forgot" | "forgotten" => "forget",
        "forgave" | "forgiven" => "forgive",
        "froze" | "frozen" => "freeze",
        "got" | "gotten" => "get",
        "gave" | "given" => "give",
        "went" | "gone" => "go",
        "grew" | "grown" => "grow",
        "hung" => "hang",
        "heard" => "hear",
        "hid" | "hidden" => "hide",
        "held" => "hold",
        "kept" => "keep",
        "knelt" => "kneel",
        "knew" | "known" => "know",
        "laid" => "lay",
        "led" => "lead",
        "leapt" => "leap",
        "learnt" => "learn",
        "left" => "leave",
        "lent" => "lend",
        "lit" => "light",
        "lost" => "lose",
        "made" => "make",
        "meant" => "mean",
        "met" => "meet",
        "paid" => "pay",
        "rode" | "ridden" => "ride",
        "rang" | "rung" => "ring",
        "risen" => "rise",
        "ran" => "run",
        "said" => "say",
        "saw" | "seen" => "see",
        "sought" => "seek",
        "sold" => "sell",
        "sent" => "send",
        "sewn" => "sew",
        "shook" | "shaken" => "shake",
        "shone" => "shine",
        "shown" => "show",
        "shrank" | "shrunk" => "shrink",
        "sang" | "sung" => "sing",
        "sank" | "sunk" => "sink",
        "sat" => "sit",
        "slept" => "sleep",
        "slid" => "slide",
        "spoke" | "spoken" => "speak",
        "spent" => "spend",
        "spun" => "spin",
        "stood" => "stand",
        "stole" | "stolen" => "steal",
        "stuck" => "stick",
        "stung" => "sting",
        "struck" => "strike",
        "swore" | "sworn" => "swear",
        "swept" => "sweep",
        "swam" | "swum" => "swim",
        "swung" => "swing",
        "took" | "taken" => "take",
        "taught" => "teach",
        "tore" | "torn" => "tear",
        "told" => "tell",
        "thought" => "think",
        "threw" | "thrown" => "throw",
        "understood" => "understand",
        "woke" | "woken" => "wake",
        "wore" | "worn" => "wear",
        "wept" => "weep",
        "wrote" | "written" => "write",
        "children" => "child",
        "men" => "man",
        "women" => "woman",
        "feet" => "foot",
        "teeth" => "tooth",
        "mice" => "mouse",
        "geese" => "goose",
        _ => return None,
    })
}

impl<T: Tokenizer> Tokenizer for MemoStemmerFilter<T> {
    type TokenStream<'a> = MemoStemmerStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        MemoStemmerStream { tail: self.inner.token_stream(text), memo: &mut self.memo }
    }
}

pub(super) struct MemoStemmerStream<'a, T> {
    tail: T,
    memo: &'a mut Memo,
}

impl<T: TokenStream> TokenStream for MemoStemmerStream<'_, T> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        self.memo.stem(&mut self.tail.token_mut().text);
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

#[cfg(test)]
mod tests {
    use tantivy::tokenizer::{Language, LowerCaser, SimpleTokenizer, Stemmer, TextAnalyzer};

    use super::*;

    /// Words, lowercased, through the memo.
    fn memo() -> TextAnalyzer {
        TextAnalyzer::builder(SimpleTokenizer::default()).filter(LowerCaser).filter(MemoStemmer).build()
    }

    /// Words, lowercased, through tantivy's own English stemmer.
    fn plain() -> TextAnalyzer {
        TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(Stemmer::new(Language::English))
            .build()
    }

    fn tokens(analyser: &mut TextAnalyzer, text: &str) -> Vec<String> {
        let mut stream = analyser.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }

    #[test]
    fn stems_as_tantivys_stemmer_does_for_every_word_repeated_or_not() {
        let text = "Running runners run; the tutors' tutoring was generously generous. Running again, \
                    caresses ponies ties caress cats running generously relational conditional";
        let (mut memo, mut plain) = (memo(), plain());
        let expected = tokens(&mut plain, text);
        assert!(expected.contains(&"run".to_owned()) && expected.contains(&"poni".to_owned()));
        for _ in 0..3 {
            assert_eq!(tokens(&mut memo, text), expected);
        }
        let mut copy = memo.clone();
        assert_eq!(tokens(&mut copy, text), expected);
    }

    #[test]
    fn an_irregular_form_comes_to_the_term_of_its_base_and_words_that_could_be_others_do_not() {
        let (mut memo, mut plain) = (memo(), plain());
        for _ in 0..2 {
            assert_eq!(
                tokens(&mut memo, "Bought went gone children taught thought MET"),
                tokens(&mut plain, "buying go going child teaches thinking meeting")
            );
        }
        let others = "rose bound lay bit shot ground wound won't buy running";
        assert_eq!(tokens(&mut memo, others), tokens(&mut plain, others));
    }

    #[test]
    fn a_full_memo_starts_again_and_still_stems_right() {
        let mut memo = Memo::default();
        let stemmer = frostem::Stemmer::new(frostem::Algorithm::English);
        for n in 0..(MEMO_WORDS + 10) {
            let original = format!("word{n}ing");
            let mut word = original.clone();
            memo.stem(&mut word);
            assert_eq!(word, stemmer.stem(&original));
            assert!(memo.stems.len() <= MEMO_WORDS);
        }
        let mut again = "runnings".to_owned();
        memo.stem(&mut again);
        memo.stem(&mut again);
        assert_eq!(again, stemmer.stem(&stemmer.stem("runnings")));
    }
}
