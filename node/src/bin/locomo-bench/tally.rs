//! What a pass over the questions found, per conversation and category, and the
//! leave-one-conversation-out figures over several settings: for each conversation, the setting
//! that did best on the others, measured on it. A setting tuned on the conversations it is
//! measured on reads higher than it will on conversations it never saw; leaving the measured
//! one out of the choice shows by how much.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use druse_memory::crystal::CrystalId;

/// Found at 5, found at 10, asked.
type Count = [usize; 3];

/// recall_any@5 and @10 per conversation and category, with the latency of each search.
#[derive(Debug, Default, Clone)]
pub(crate) struct Pass {
    found: BTreeMap<(String, u32), Count>,
    pub(crate) latency: Vec<Duration>,
}

/// A category's name in LoCoMo's numbering.
fn label(category: u32) -> &'static str {
    match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        _ => "other",
    }
}

fn ratio(n: usize, of: usize) -> f64 {
    if of == 0 { 0.0 } else { n as f64 / of as f64 }
}

fn add(a: Count, b: Count) -> Count {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

impl Pass {
    /// Counts one question of `conversation`: found at k when any evidence turn is in the first k hits.
    pub(crate) fn record(&mut self, conversation: &str, category: u32, hits: &[CrystalId], evidence: &[CrystalId]) {
        let at = |k: usize| hits.iter().take(k).any(|h| evidence.contains(h));
        let tally = self.found.entry((conversation.to_owned(), category)).or_default();
        *tally = add(*tally, [usize::from(at(5)), usize::from(at(10)), 1]);
    }

    /// The conversations asked about.
    fn conversations(&self) -> BTreeSet<&str> {
        self.found.keys().map(|(c, _)| c.as_str()).collect()
    }

    /// The counts per category over the conversations `keep` admits.
    fn by_category(&self, keep: impl Fn(&str) -> bool) -> BTreeMap<u32, Count> {
        let mut out: BTreeMap<u32, Count> = BTreeMap::new();
        for ((conversation, category), count) in &self.found {
            if keep(conversation) {
                let entry = out.entry(*category).or_default();
                *entry = add(*entry, *count);
            }
        }
        out
    }

    /// Questions found at 5 and at 10 together, over the conversations `keep` admits: what a
    /// setting is chosen by.
    fn score(&self, keep: impl Fn(&str) -> bool) -> usize {
        self.by_category(keep).values().map(|c| c[0] + c[1]).sum()
    }

    /// Prints the overall and per-category figures, each conversation's, and the latency.
    pub(crate) fn print(&self, name: &str) {
        print_table(name, &self.by_category(|_| true));
        for conversation in self.conversations() {
            let total = self.by_category(|c| c == conversation).values().fold([0; 3], |a, c| add(a, *c));
            println!(
                "  {conversation:<22} @5 {:.3}  @10 {:.3}  ({})",
                ratio(total[0], total[2]),
                ratio(total[1], total[2]),
                total[2]
            );
        }
        println!("  search latency {}", super::percentiles(&self.latency));
    }
}

fn print_table(name: &str, categories: &BTreeMap<u32, Count>) {
    let total = categories.values().fold([0; 3], |a, c| add(a, *c));
    println!(
        "{name}: recall_any@5 {:.3}  @10 {:.3}  over {} questions",
        ratio(total[0], total[2]),
        ratio(total[1], total[2]),
        total[2]
    );
    for (category, [at5, at10, of]) in categories {
        println!(
            "  category {category} {:<12} @5 {:.3}  @10 {:.3}  ({of})",
            label(*category),
            ratio(*at5, *of),
            ratio(*at10, *of)
        );
    }
}

/// For each conversation, the index of the setting (of `passes`, the same questions asked under
/// each) that found the most on the other conversations, the first on a tie; and the counts per
/// category of each conversation under the setting chosen for it.
pub(crate) fn leave_one_out(passes: &[Pass]) -> (Vec<(String, usize)>, BTreeMap<u32, Count>) {
    let Some(first) = passes.first() else { return (Vec::new(), BTreeMap::new()) };
    let mut chosen = Vec::new();
    let mut counts: BTreeMap<u32, Count> = BTreeMap::new();
    for held_out in first.conversations() {
        let others = |c: &str| c != held_out;
        let mut best = 0;
        for (i, pass) in passes.iter().enumerate() {
            if pass.score(others) > passes[best].score(others) {
                best = i;
            }
        }
        for (category, count) in passes[best].by_category(|c| c == held_out) {
            let entry = counts.entry(category).or_default();
            *entry = add(*entry, count);
        }
        chosen.push((held_out.to_owned(), best));
    }
    (chosen, counts)
}

/// Prints the leave-one-conversation-out figures over `settings` (a name and its pass each).
pub(crate) fn print_leave_one_out(settings: &[(String, Pass)]) {
    if settings.len() < 2 {
        println!(
            "leave-one-out: the same as the first pass; one setting was run (no --sweep), so nothing is chosen \
             per held-out conversation"
        );
        return;
    }
    let passes: Vec<Pass> = settings.iter().map(|(_, p)| p.clone()).collect();
    let (chosen, counts) = leave_one_out(&passes);
    print_table(
        &format!("leave-one-out over {} settings (chosen on two, measured on the third)", settings.len()),
        &counts,
    );
    for (conversation, index) in chosen {
        println!("  {conversation:<22} measured under {}", settings[index].0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass where each conversation's questions are found (at 5 and 10) as `found` says.
    fn pass(found: &[(&str, bool)]) -> Pass {
        let mut pass = Pass::default();
        for (conversation, hit) in found {
            let hits: &[CrystalId] = if *hit { &[7] } else { &[8] };
            pass.record(conversation, 1, hits, &[7]);
        }
        pass
    }

    #[test]
    fn each_conversation_is_measured_under_the_setting_best_on_the_others() {
        // Setting 0 is best on a and b, setting 1 only on c.
        let zero = pass(&[("a", true), ("a", true), ("b", true), ("c", false)]);
        let one = pass(&[("a", false), ("a", false), ("b", false), ("c", true)]);
        let (chosen, counts) = leave_one_out(&[zero, one]);
        // Leaving c out, 0 wins (3 found against 0) and misses c; leaving a out, 0 finds b and
        // 1 finds c: a tie, so the first (0) finds a; leaving b out, 0 wins and finds b.
        assert_eq!(chosen, vec![("a".to_owned(), 0), ("b".to_owned(), 0), ("c".to_owned(), 0)]);
        assert_eq!(counts[&1], [3, 3, 4]);
    }

    #[test]
    fn one_setting_gives_the_plain_figures() {
        let only = pass(&[("a", true), ("b", false)]);
        let (chosen, counts) = leave_one_out(std::slice::from_ref(&only));
        assert_eq!(chosen.len(), 2);
        assert_eq!(counts, only.by_category(|_| true));
    }

    #[test]
    fn a_question_counts_at_ten_when_its_evidence_is_sixth() {
        let mut pass = Pass::default();
        pass.record("a", 2, &[1, 2, 3, 4, 5, 6], &[6, 99]);
        assert_eq!(pass.by_category(|_| true)[&2], [0, 1, 1]);
    }
}
