use super::*;

const AGENT: &str = "ag.test";

/// A rendered skill whose worked example's situation is `situation`.
fn skill(situation: &str) -> String {
    format!(
        "Skill: Answer a baking question\nWhen: A user asks why their bread did not rise\nSteps:\n\
         1. search_memory (the problem in a few words): recall what was said before\n\
         2. reply (the post's URI and two causes): answer briefly\nAvoid:\n- long lectures\nExample:\n  \
         Situation: {situation}\n  Response: Check the starter, then proof longer somewhere warm."
    )
}

/// The verdict for a skill with `situation`, distilled from one episode where a user said
/// `said` and the agent answered.
fn verdict(said: &str, situation: &str) -> Option<String> {
    let episode = format!("@ann.test: {said}\n@{AGENT}: Check the starter. Then proof longer somewhere warm.");
    let terms = personal_terms(&[episode], &["ann.test".into(), AGENT.into(), "owner.test".into()], AGENT);
    leaks(&skill(situation), &terms)
}

/// (what the user said, the situation the skill describes, whether it leaks).
const TABLE: &[(&str, &str, bool)] = &[
    // Generic procedures pass: a check that refuses everything is no check.
    ("hi, i'm annika from lyon, my bread failed", "A user says their loaf stayed flat", false),
    ("my starter died", "Retry failed calls with exponential backoff; check the status code first", false),
    ("my starter died", "A user asks how to feed a starter", false),
    ("my bread failed", "A user asks; retry 3 times with a warmer proof", false),
    ("i'm baking rye", "A user baking rye asks", false),
    ("i'm new to sourdough", "A user new to sourdough asks", false),
    ("i'm trying to bake from scratch", "A user baking from scratch asks", false),
    ("bread from the shop is better", "A user compares shop bread with their own", false),
    ("my bread failed", "Use the recipe from the pinned post", false),
    ("check out my blog sourdough.blog", "A user asks what went wrong", false),
    ("my bread failed", "A student asks how to cite sources", false),
    ("Sure, my bread failed. Thanks!", "Make sure the starter is active", false),
    ("My oven runs hot", "A user says the oven runs hot", false),
    // Lowercase names and places.
    ("hi, i'm annika from lyon, my bread failed", "annika says her loaf stayed flat", true),
    ("hi, i'm annika from lyon, my bread failed", "A user from lyon asks", true),
    ("im sofia, my crumb is dense", "sofia says the crumb is dense", true),
    ("my name is priya and my loaf is flat", "priya asks about a flat loaf", true),
    ("call me jo, the bread is flat", "jo asks about flat bread", true),
    ("i'm ted from leeds", "A baker in leeds asks", true),
    ("i moved to turin last year", "A user in turin asks", true),
    ("greetings from porto!", "A user from porto asks", true),
    ("my dog is called rex", "A user whose dog rex ate the dough", true),
    // A name that starts a sentence, and capitalised names and places.
    ("Annika here. my bread failed", "Annika asks why the loaf is flat", true),
    ("Annika, my bread failed again", "annika asks why the loaf is flat", true),
    ("Bob Okafor here, Marseille baker", "Bob asks about his oven", true),
    ("Bob Okafor here, Marseille baker", "A baker in Marseille asks", true),
    ("Cyrille again (from Nantes). my bread is flat", "Cyrille asks", true),
    ("my friend Carol bakes too", "carol asks about a flat loaf", true),
    // Bare domains, emails, handles, DIDs, dates.
    ("my site is annika-bakes.fr, bread failed", "A user with a blog at annika-bakes.fr asks", true),
    ("my bread failed", "A user who runs bakery.com asks", true),
    ("my bread failed", "A user (bob@example.org) asks", true),
    ("my bread failed", "@someone.bsky.social asks", true),
    ("hi from did:plc:abc123", "did:plc:abc123 asks", true),
    ("my bread failed", "A user asks on 2026-03-04", true),
    ("my bread failed", "A user asks on March 4th", true),
    // Numbers, single digits included, that a person wrote; ages.
    ("i have 3 kids and my bread failed", "A user asks; retry 3 times", true),
    ("my bread failed at 5am", "A user baking at 5am asks", true),
    ("my bread failed", "A 34-year-old user asks", true),
    ("my bread failed", "A user aged 7 asks", true),
    // Third-person facts.
    ("my bread failed", "A nurse with celiac disease asks", true),
    ("my bread failed", "A user with diabetes asks about sugar", true),
    ("my bread failed", "A teacher who bakes at night asks", true),
    ("my bread failed", "A user says her husband bakes", true),
    ("my bread failed", "A user with two kids asks", true),
    ("my bread failed", "A user who is pregnant asks about raw dough", true),
    ("i'm a muslim baker", "A muslim user asks", true),
    ("my bread failed", "A user recently divorced asks", true),
    ("my bread failed", "A user who works as a cashier asks", true),
    ("my bread failed", "A user who lives in a small flat asks", true),
    ("my bread failed", "A user named carol asks", true),
    ("my bread failed", "my name is Carol and I feel sad", true),
];

#[test]
fn every_planted_fact_is_found_and_generic_procedures_pass() {
    assert!(TABLE.len() >= 40);
    let mut wrong = Vec::new();
    for (said, situation, leaks) in TABLE {
        let found = verdict(said, situation);
        if found.is_some() != *leaks {
            wrong.push(format!("{said:?} / {situation:?}: expected leak {leaks}, got {found:?}"));
        }
    }
    assert!(wrong.is_empty(), "{} wrong verdicts:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn the_reason_names_what_was_found() {
    let why = verdict("hi, i'm annika from lyon", "annika asks").expect("refused");
    assert!(why.contains("\"annika\""), "{why}");
    let why = verdict("hi", "A nurse with celiac disease asks").expect("refused");
    assert!(why.contains("fact about a person (A nurse with)"), "{why}");
    let why = verdict("hi", "A user who runs bakery.com asks").expect("refused");
    assert!(why.contains("domain (bakery.com)"), "{why}");
}

#[test]
fn the_agents_own_words_are_not_taken_for_names() {
    let episode = format!("@ann.test: my bread failed\n@{AGENT}: Check the starter. Proof 12 hours, Ann.");
    let terms = personal_terms(&[episode], &[AGENT.into()], AGENT);
    assert!(!terms.contains("check") && !terms.contains("proof"), "{terms:?}");
    // Capitalised names and long numbers in the agent's lines still count.
    assert!(terms.contains("ann") && terms.contains("12"), "{terms:?}");
}

#[test]
fn every_pattern_builds() {
    for pattern in [&EMAIL, &HANDLE, &DATE, &DOMAIN, &IDENTIFYING, &FACT, &STEP_NUMBER] {
        assert!(!pattern.as_str().is_empty());
    }
}
