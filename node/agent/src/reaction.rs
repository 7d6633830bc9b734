//! What an answer to the agent's reply says about it (issue 38): thanks, a correction, a
//! complaint, or nothing clear. A run's reward, and the execution report a node signs with it,
//! follow from this reading, so "that was not helpful" must never read as thanks.
//!
//! A small classifier, not a list of sentences:
//! - the text is cut into *clauses* at sentence punctuation and at "but", "though", "however",
//!   "yet" ("thanks, but it didn't work" is two verdicts);
//! - a clause is read as tokens (words and emoji); known idioms are read first ("can't thank you
//!   enough" is thanks, "thanks for nothing" a complaint);
//! - each cue has a kind: *gratitude* ("thanks"), *success* ("worked", "helpful", 👍),
//!   *claim* ("help", "work", "right": a cue only when negated), *failure* ("wrong", "broken"),
//!   *complaint* ("useless", "spam");
//! - a negator ("not", "no", "never", any "n't") negates a cue that starts within
//!   [`NEGATION_SCOPE`] tokens after it in the same clause: a negated success or claim is a
//!   failure ("still hasn't worked"), negated gratitude is nothing ("no thanks"), a negated
//!   failure or complaint is nothing ("not wrong");
//! - a clause that asks ("did it work?") states no success or failure; a complaint still counts;
//! - the verdicts of all clauses combine: a complaint outweighs a failure, which outweighs
//!   thanks; no cue at all is [`Reading::Unclear`], which is no success.

/// What a reply to the agent's answer says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Thanks or praise: it helped.
    Thanked,
    /// The answer was wrong or did not work.
    Corrected,
    /// A complaint about the agent (useless, spam, stop).
    Complained,
    /// No clear signal either way: a question, small talk, a refusal.
    Unclear,
}

/// Tokens after a negator that it still negates ("not really that helpful").
pub const NEGATION_SCOPE: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cue {
    Gratitude,
    Success,
    /// A word that says the answer was good only when negated ("didn't help", "not right"):
    /// alone it is too common to mean anything ("I work at a bakery", "right, and then?").
    Claim,
    Failure,
    Complaint,
}

/// Phrases read as a whole before any word: each is replaced by the word of its meaning.
const IDIOMS: [(&str, &str); 14] = [
    ("can't thank you enough", "thanks"),
    ("cannot thank you enough", "thanks"),
    ("couldn't have done it without you", "thanks"),
    ("thanks for nothing", "useless"),
    ("no thanks to you", "useless"),
    ("did the trick", "worked"),
    ("does the trick", "worked"),
    ("spot on", "perfect"),
    ("like a charm", "perfectly"),
    ("made things worse", "wrong"),
    ("made it worse", "wrong"),
    ("that's not what", "wrong"),
    ("not what i asked", "wrong"),
    ("not what i meant", "wrong"),
];

/// Words and two-word phrases that carry a verdict, with their kind.
const CUES: [(&str, Cue); 56] = [
    ("thanks", Cue::Gratitude),
    ("thank you", Cue::Gratitude),
    ("thank", Cue::Gratitude),
    ("thx", Cue::Gratitude),
    ("ty", Cue::Gratitude),
    ("tysm", Cue::Gratitude),
    ("cheers", Cue::Gratitude),
    ("appreciate", Cue::Gratitude),
    ("appreciated", Cue::Gratitude),
    ("grateful", Cue::Gratitude),
    ("🙏", Cue::Gratitude),
    ("❤", Cue::Gratitude),
    ("helpful", Cue::Success),
    ("helped", Cue::Success),
    ("helps", Cue::Success),
    ("useful", Cue::Success),
    ("worked", Cue::Success),
    ("works", Cue::Success),
    ("perfect", Cue::Success),
    ("perfectly", Cue::Success),
    ("brilliant", Cue::Success),
    ("awesome", Cue::Success),
    ("fixed", Cue::Success),
    ("solved", Cue::Success),
    ("exactly", Cue::Success),
    ("👍", Cue::Success),
    ("🙌", Cue::Success),
    ("🎉", Cue::Success),
    ("✅", Cue::Success),
    ("💯", Cue::Success),
    ("help", Cue::Claim),
    ("work", Cue::Claim),
    ("working", Cue::Claim),
    ("right", Cue::Claim),
    ("correct", Cue::Claim),
    ("true", Cue::Claim),
    ("accurate", Cue::Claim),
    ("wrong", Cue::Failure),
    ("incorrect", Cue::Failure),
    ("mistaken", Cue::Failure),
    ("mistake", Cue::Failure),
    ("broken", Cue::Failure),
    ("broke", Cue::Failure),
    ("fails", Cue::Failure),
    ("failed", Cue::Failure),
    ("worse", Cue::Failure),
    ("👎", Cue::Failure),
    ("❌", Cue::Failure),
    ("useless", Cue::Complaint),
    ("spam", Cue::Complaint),
    ("annoying", Cue::Complaint),
    ("garbage", Cue::Complaint),
    ("stop replying", Cue::Complaint),
    ("go away", Cue::Complaint),
    ("shut up", Cue::Complaint),
    ("bad bot", Cue::Complaint),
];

/// Phrases of a complaint that are longer than two words.
const LONG_COMPLAINTS: [&str; 2] = ["leave me alone", "stop it"];

/// Words that negate what follows them.
const NEGATORS: [&str; 9] = ["not", "no", "never", "nothing", "nope", "hardly", "barely", "cannot", "without"];

/// Words that end one clause and start another.
const TURNS: [&str; 5] = ["but", "though", "although", "however", "yet"];

/// Whether `token` negates what follows: a negator word, or any "n't" form written with or
/// without its apostrophe ("didn't", "didnt").
fn negates(token: &str) -> bool {
    const BARE: [&str; 14] = [
        "didnt", "doesnt", "dont", "isnt", "wasnt", "hasnt", "havent", "hadnt", "wont", "cant", "couldnt", "arent",
        "werent", "aint",
    ];
    NEGATORS.contains(&token) || token.ends_with("n't") || BARE.contains(&token)
}

/// Reads a reply to the agent's answer.
pub fn read(text: &str) -> Reading {
    let mut lower = text.to_lowercase().replace(['’', '‘'], "'").replace('\u{fe0f}', "");
    for (idiom, meaning) in IDIOMS {
        lower = replace_words(&lower, idiom, meaning);
    }
    let (mut thanked, mut failed, mut complained) = (false, false, false);
    for clause in clauses(&lower) {
        if LONG_COMPLAINTS.iter().any(|p| clause.text.contains(p)) {
            complained = true;
        }
        let tokens = &clause.tokens;
        let mut i = 0;
        while i < tokens.len() {
            let (cue, width) = match cue_at(tokens, i) {
                Some(found) => found,
                None => {
                    i += 1;
                    continue;
                }
            };
            let negated = tokens[i.saturating_sub(NEGATION_SCOPE)..i].iter().any(|t| negates(t));
            match (cue, negated, clause.asks) {
                (Cue::Complaint, false, _) => complained = true,
                (Cue::Success | Cue::Claim | Cue::Failure, _, true) => {}
                (Cue::Success | Cue::Claim, true, false) | (Cue::Failure, false, false) => failed = true,
                (Cue::Gratitude, false, _) | (Cue::Success, false, false) => thanked = true,
                // Negated thanks ("no thanks"), a claim word alone ("right, and then?"),
                // a negated failure ("not wrong") or complaint: nothing clear.
                _ => {}
            }
            i += width;
        }
    }
    if complained {
        Reading::Complained
    } else if failed {
        Reading::Corrected
    } else if thanked {
        Reading::Thanked
    } else {
        Reading::Unclear
    }
}

/// The cue that starts at token `i`, and how many tokens it spans (two-word cues first).
fn cue_at(tokens: &[String], i: usize) -> Option<(Cue, usize)> {
    if let Some(next) = tokens.get(i + 1) {
        let pair = format!("{} {next}", tokens[i]);
        if let Some((_, cue)) = CUES.iter().find(|(p, _)| *p == pair) {
            return Some((*cue, 2));
        }
    }
    CUES.iter().find(|(p, _)| *p == tokens[i]).map(|(_, cue)| (*cue, 1))
}

/// One clause of a reply: its text, its tokens, and whether its sentence asks.
#[derive(Debug, Default)]
struct Clause {
    text: String,
    tokens: Vec<String>,
    asks: bool,
}

/// `text` (lowercase) cut into clauses at punctuation and at turning words; the clauses of a
/// sentence that ends with "?" ask ("did it work, or not?" asks as a whole).
fn clauses(text: &str) -> Vec<Clause> {
    let mut out: Vec<Clause> = Vec::new();
    let mut sentence_from = 0;
    let mut current = Clause::default();
    let mut word = String::new();
    let end_word = |word: &mut String, current: &mut Clause, out: &mut Vec<Clause>| {
        if TURNS.contains(&word.as_str()) {
            out.push(std::mem::take(current));
        } else if !word.is_empty() {
            current.tokens.push(word.clone());
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || c == '\'' {
            word.push(c);
            current.text.push(c);
            continue;
        }
        end_word(&mut word, &mut current, &mut out);
        match c {
            ',' | ':' => out.push(std::mem::take(&mut current)),
            '.' | '!' | '?' | ';' | '\n' => {
                out.push(std::mem::take(&mut current));
                if c == '?' {
                    out[sentence_from..].iter_mut().for_each(|clause| clause.asks = true);
                }
                sentence_from = out.len();
            }
            c if c.is_whitespace() || c.is_ascii_punctuation() => current.text.push(' '),
            // Anything else (an emoji, a symbol) is a token of its own.
            c => {
                current.tokens.push(c.to_string());
                current.text.push(c);
            }
        }
    }
    end_word(&mut word, &mut current, &mut out);
    out.push(current);
    out.retain(|c| !c.tokens.is_empty());
    out
}

/// `text` with each whole-word occurrence of `phrase` replaced by `with`.
fn replace_words(text: &str, phrase: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(phrase) {
        let end = at + phrase.len();
        let before =
            rest[..at].chars().next_back().or_else(|| out.chars().next_back()).is_none_or(|c| !c.is_alphanumeric());
        let after = rest[end..].chars().next().is_none_or(|c| !c.is_alphanumeric());
        out.push_str(&rest[..at]);
        out.push_str(if before && after { with } else { phrase });
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replies as people write them, each with what it says.
    const REPLIES: [(&str, Reading); 46] = [
        ("thanks, that helped!", Reading::Thanked),
        ("Thank you so much", Reading::Thanked),
        ("ty", Reading::Thanked),
        ("this worked perfectly, cheers", Reading::Thanked),
        ("It works now 🎉", Reading::Thanked),
        ("🙏🙏", Reading::Thanked),
        ("❤️", Reading::Thanked),
        ("can't thank you enough!!", Reading::Thanked),
        ("that did the trick, appreciate it", Reading::Thanked),
        ("worked like a charm", Reading::Thanked),
        ("Spot on.", Reading::Thanked),
        ("not bad at all, thanks", Reading::Thanked),
        ("it didn't help at all", Reading::Corrected),
        ("I need help with rye bread", Reading::Unclear),
        ("did it work, or not?", Reading::Unclear),
        ("that was not helpful", Reading::Corrected),
        ("Not helpful.", Reading::Corrected),
        ("didn't work", Reading::Corrected),
        ("it still hasn't worked", Reading::Corrected),
        ("still doesnt work for me", Reading::Corrected),
        ("tried it twice and it never worked", Reading::Corrected),
        ("thanks but it didn't work", Reading::Corrected),
        ("thanks, but that's wrong", Reading::Corrected),
        ("that's wrong, the oven should be hotter", Reading::Corrected),
        ("That’s not what I asked", Reading::Corrected),
        ("hmm, I don't think that's right", Reading::Corrected),
        ("this isn't really that helpful tbh", Reading::Corrected),
        ("nope, still broken 👎", Reading::Corrected),
        ("following your steps made it worse", Reading::Corrected),
        ("this is useless, stop replying", Reading::Complained),
        ("thanks for nothing", Reading::Complained),
        ("please leave me alone", Reading::Complained),
        ("bad bot", Reading::Complained),
        ("thanks but this is spam", Reading::Complained),
        ("no thanks", Reading::Unclear),
        ("No thanks, I'll figure it out myself", Reading::Unclear),
        ("and what about rye flour?", Reading::Unclear),
        ("what type of flour?", Reading::Unclear),
        ("did that work for you?", Reading::Unclear),
        ("is that right?", Reading::Unclear),
        ("ok", Reading::Unclear),
        ("I'll try it tomorrow", Reading::Unclear),
        ("right, and then what", Reading::Unclear),
        ("it's not wrong, just slow", Reading::Unclear),
        ("lol", Reading::Unclear),
        ("interesting, never thought of that", Reading::Unclear),
    ];

    #[test]
    fn replies_are_read_with_negation_clauses_questions_and_emoji() {
        let wrong: Vec<String> = REPLIES
            .iter()
            .filter(|(text, want)| read(text) != *want)
            .map(|(text, want)| format!("{text:?}: want {want:?}, read {:?}", read(text)))
            .collect();
        assert!(wrong.is_empty(), "misread:\n{}", wrong.join("\n"));
    }

    #[test]
    fn negation_reaches_a_few_tokens_and_stops_at_the_clause() {
        assert_eq!(read("not at all helpful"), Reading::Corrected, "within the scope");
        assert_eq!(read("no, I mean the other recipe. helpful anyway"), Reading::Thanked, "a new clause");
        assert_eq!(read("no idea why, but whatever it was, it worked"), Reading::Thanked, "a turn ends the scope");
        assert_eq!(read("not what I expected, in a lot of ways, but it worked"), Reading::Thanked);
    }

    #[test]
    fn whole_words_only() {
        assert_eq!(read("what type of flour?"), Reading::Unclear, "\"type\" holds \"ty\"");
        assert_eq!(read("the wrongly named file"), Reading::Unclear, "\"wrongly\" is not \"wrong\"");
        assert_eq!(read("the spammer is back"), Reading::Unclear);
    }
}
