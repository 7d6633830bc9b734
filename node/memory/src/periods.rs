//! The spans of time a question names ("on 7 July 2023", "in May", "last week", "two weeks
//! before 11 August 2023"), so recall can prefer, and look among, what was said then.
//!
//! A memory of a conversation is said at its `turn_at`; a question that names when something
//! happened is most often answered by what was said in that span or just after it (a thing is
//! told the day it happens or soon after). Only calendar words are read (month names, day
//! and year numbers, ISO dates, and a few relative phrases measured from the time of the
//! search); nothing here knows any data set.

use druse_protocol::UnixMillis;

use crate::dates::MONTHS;

const DAY: UnixMillis = 86_400_000;
const WEEK: UnixMillis = 7 * DAY;

/// The most periods read from one question.
const MAX_PERIODS: usize = 4;

/// A span of time `[start, end)` in Unix milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Period {
    pub(crate) start: UnixMillis,
    pub(crate) end: UnixMillis,
}

impl Period {
    /// How long after the period a memory may still be telling of it: the period's own
    /// length, at most a week (a thing is told when it happens or soon after).
    fn lag(&self) -> UnixMillis {
        self.end.saturating_sub(self.start).min(WEEK)
    }

    /// Whether something said at `at` was said in this period or soon after it.
    #[cfg(test)]
    fn tells(&self, at: UnixMillis) -> bool {
        at >= self.start && at <= self.told_until()
    }

    /// The last instant a memory telling of this period may be said at (for a time filter).
    pub(crate) fn told_until(&self) -> UnixMillis {
        self.end.saturating_add(self.lag()).saturating_sub(1)
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's days-from-civil).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (i64::from(month) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix milliseconds at the start of a civil date; `None` before 1970.
fn at(year: i64, month: u32, day: u32) -> Option<UnixMillis> {
    UnixMillis::try_from(days_from_civil(year, month, day)).ok().map(|d| d * DAY)
}

/// The year and month of a Unix time.
fn year_month(at: UnixMillis) -> (i64, u32) {
    let (year, month, _) = crate::dates::civil_date(at);
    (year, month)
}

fn days_in(year: i64, month: u32) -> u32 {
    let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    (days_from_civil(next_year, next_month, 1) - days_from_civil(year, month, 1)) as u32
}

fn day_period(year: i64, month: u32, day: u32) -> Option<Period> {
    if day == 0 || day > days_in(year, month) {
        return None;
    }
    let start = at(year, month, day)?;
    Some(Period { start, end: start + DAY })
}

fn month_period(year: i64, month: u32) -> Option<Period> {
    let start = at(year, month, 1)?;
    let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    Some(Period { start, end: at(next_year, next_month, 1)? })
}

fn year_period(year: i64) -> Option<Period> {
    Some(Period { start: at(year, 1, 1)?, end: at(year + 1, 1, 1)? })
}

/// A question's words, lowercased, with ordinal suffixes taken off numbers ("7th" → "7").
fn words(q: &str) -> Vec<String> {
    q.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let w = w.to_lowercase();
            let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let suffix = &w[digits.len()..];
            if !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && ["st", "nd", "rd", "th"].contains(&suffix)
            {
                digits.to_owned()
            } else {
                w
            }
        })
        .collect()
}

fn month_of(word: &str) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| {
            m.eq_ignore_ascii_case(word) || (word.len() == 3 && m[..3].eq_ignore_ascii_case(word) && word != "may")
        })
        .map(|i| i as u32 + 1)
}

fn day_of(word: Option<&String>) -> Option<u32> {
    word.filter(|w| w.len() <= 2).and_then(|w| w.parse().ok()).filter(|d| (1..=31).contains(d))
}

fn year_of(word: Option<&String>) -> Option<i64> {
    word.filter(|w| w.len() == 4).and_then(|w| w.parse().ok()).filter(|y| (1970..=2200).contains(y))
}

fn count_of(word: &str) -> Option<u64> {
    let small = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];
    match small.iter().position(|n| *n == word) {
        Some(i) => Some(i as u64 + 1),
        None => word.parse().ok().filter(|n| (1..=60).contains(n)),
    }
}

/// The span a unit word names ("day", "weekend", "weeks", ...).
fn unit_of(word: &str) -> Option<UnixMillis> {
    match word.trim_end_matches('s') {
        "day" | "night" => Some(DAY),
        "week" | "weekend" => Some(WEEK),
        "month" => Some(30 * DAY),
        "year" => Some(365 * DAY),
        _ => None,
    }
}

/// The periods `q` names: relative phrases ("yesterday", "last week") are read against `now`
/// (the time of the search), and a month or day named without its year is the last one at or
/// before `latest()`, the time of the newest memory the question is asked of (a conversation
/// recorded years ago reads "in June" as its own last June; for a memory kept as it is lived,
/// that is now). At most [`MAX_PERIODS`]; none for a question that names no time.
pub(crate) fn periods(q: &str, now: UnixMillis, latest: &dyn Fn() -> UnixMillis) -> Vec<Period> {
    let w = words(q);
    let mut found: Vec<(usize, Period)> = Vec::new();
    let (this_year, this_month) = year_month(now);
    let mut anchor: Option<(i64, u32)> = None;
    let today = now - now % DAY;
    let mut i = 0;
    while i < w.len() && found.len() < MAX_PERIODS {
        let mut start = i;
        let mut period = None;
        if let Some(month) = month_of(&w[i]) {
            // "7 July 2023", "July 7, 2023", "July 2023", "in July", "July 7".
            let day_before = i.checked_sub(1).and_then(|j| day_of(w.get(j)));
            let day_after = day_of(w.get(i + 1));
            let day = day_after.or(day_before);
            let year_at = if day_after.is_some() { i + 2 } else { i + 1 };
            let year = year_of(w.get(year_at));
            let introduced = i.checked_sub(1).is_some_and(|j| {
                ["in", "during", "of", "since", "early", "late", "mid", "last", "this", "until"]
                    .contains(&w[j].as_str())
            });
            // "may" is a month only with a day or a year beside it.
            let named = day.is_some() || year.is_some() || (introduced && w[i] != "may");
            if named {
                if day_after.is_none() && day_before.is_some() {
                    start = i - 1;
                }
                let year = year.unwrap_or_else(|| {
                    let (latest_year, latest_month) = *anchor.get_or_insert_with(|| year_month(latest()));
                    if month <= latest_month { latest_year } else { latest_year - 1 }
                });
                period = match day {
                    Some(day) => day_period(year, month, day),
                    None => month_period(year, month),
                };
                i = if year_of(w.get(year_at)).is_some() {
                    year_at
                } else if day_after.is_some() {
                    i + 1
                } else {
                    i
                };
            }
        } else if let Some(year) = year_of(w.get(i)) {
            // "2023-07-07", or "in 2023".
            let month = day_of(w.get(i + 1)).filter(|m| *m <= 12);
            let day = day_of(w.get(i + 2));
            let iso = month.zip(day).filter(|(m, d)| q.contains(&format!("{year}-{m:02}-{d:02}")));
            if let Some((month, day)) = iso {
                period = day_period(year, month, day);
                i += 2;
            } else if i.checked_sub(1).is_some_and(|j| ["in", "during", "of", "since"].contains(&w[j].as_str())) {
                period = year_period(year);
            }
        } else {
            period = match (w[i].as_str(), w.get(i + 1).map(String::as_str)) {
                ("today", _) | ("tonight", _) => Some(Period { start: today, end: today + DAY }),
                ("yesterday", _) => Some(Period { start: today.saturating_sub(DAY), end: today }),
                ("last" | "past", Some("week" | "weekend")) => {
                    Some(Period { start: today.saturating_sub(WEEK + 6 * DAY), end: today })
                }
                ("this", Some("week")) => Some(Period { start: today.saturating_sub(6 * DAY), end: today + DAY }),
                ("last", Some("month")) => {
                    let (year, month) = if this_month == 1 { (this_year - 1, 12) } else { (this_year, this_month - 1) };
                    month_period(year, month)
                }
                ("this", Some("month")) => month_period(this_year, this_month),
                ("last", Some("year")) => year_period(this_year - 1),
                ("this", Some("year")) => year_period(this_year),
                _ => None,
            };
            if period.is_some() && w[i] != "today" && w[i] != "tonight" && w[i] != "yesterday" {
                i += 1;
            }
            // "3 days ago", "two weeks ago".
            if period.is_none()
                && let (Some(n), Some(unit), Some("ago")) =
                    (count_of(&w[i]), w.get(i + 1).and_then(|u| unit_of(u)), w.get(i + 2).map(String::as_str))
            {
                let back = n.saturating_mul(unit);
                period =
                    Some(Period { start: today.saturating_sub(back + unit), end: today.saturating_sub(back) + unit });
                i += 2;
            }
        }
        if let Some(mut p) = period {
            // "the week before 3 August 2023", "two weeks before ...": the span before the date,
            // to the date's end.
            if let Some(span) = span_before(&w, start) {
                p.start = p.start.saturating_sub(span);
            }
            found.push((start, p));
        }
        i += 1;
    }
    found.into_iter().map(|(_, p)| p).collect()
}

/// How far back "the week before", "two weeks before", "the weekend before" reaches from the
/// date that starts at word `at`; `None` when the date has no such words before it.
fn span_before(w: &[String], at: usize) -> Option<UnixMillis> {
    let before = at.checked_sub(1).map(|j| w[j].as_str())?;
    let prep = match before {
        "before" => at - 1,
        "on" | "in" if at >= 2 && w[at - 2] == "before" => at - 2,
        _ => return None,
    };
    let unit = prep.checked_sub(1).and_then(|j| unit_of(&w[j]))?;
    let count = prep.checked_sub(2).and_then(|j| count_of(&w[j])).unwrap_or(1);
    Some(count.saturating_mul(unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-27 15:00 UTC, a Friday.
    const NOW: UnixMillis = 1_795_791_600_000;

    fn day(year: i64, month: u32, d: u32) -> UnixMillis {
        at(year, month, d).unwrap_or_default()
    }

    #[test]
    fn civil_dates_round_trip() {
        assert_eq!(at(1970, 1, 1), Some(0));
        assert_eq!(at(2026, 11, 22), Some(1_795_305_600_000));
        assert_eq!(crate::dates::describe(day(2000, 2, 29)), "Tuesday 29 February 2000 (2000-02-29)");
        assert_eq!(days_in(2024, 2), 29);
        assert_eq!(days_in(2023, 2), 28);
        assert_eq!(at(1969, 12, 31), None);
    }

    #[test]
    fn a_named_day_is_that_day_in_any_common_spelling() {
        let seventh = Period { start: day(2023, 7, 7), end: day(2023, 7, 8) };
        for q in [
            "What happened on 7 July 2023?",
            "What happened on July 7, 2023?",
            "What happened on 7 July, 2023?",
            "What happened on July 7th 2023?",
            "What happened on 2023-07-07?",
            "what happened on 7 jul 2023",
        ] {
            assert_eq!(periods(q, NOW, &|| NOW), vec![seventh], "{q}");
        }
    }

    #[test]
    fn a_month_a_year_and_a_month_without_its_year() {
        assert_eq!(
            periods("What did she do in May 2023?", NOW, &|| NOW),
            vec![Period { start: day(2023, 5, 1), end: day(2023, 6, 1) }]
        );
        assert_eq!(
            periods("Where did we travel in 2024?", NOW, &|| NOW),
            vec![Period { start: day(2024, 1, 1), end: day(2025, 1, 1) }]
        );
        // The last such month at or before the search: November is this year's, December last year's.
        assert_eq!(
            periods("what did I buy in November", NOW, &|| NOW),
            vec![Period { start: day(2026, 11, 1), end: day(2026, 12, 1) }]
        );
        assert_eq!(
            periods("what did I buy in December", NOW, &|| NOW),
            vec![Period { start: day(2025, 12, 1), end: day(2026, 1, 1) }]
        );
    }

    #[test]
    fn words_that_are_not_times_name_none() {
        for q in ["What may John do next?", "Who won the 2000 meters?", "How many books did she read?", "March on!", ""]
        {
            assert_eq!(periods(q, NOW, &|| NOW), Vec::new(), "{q}");
        }
        assert_eq!(
            periods("Is 31 February real in 2023?", NOW, &|| NOW).len(),
            1,
            "an impossible day is dropped, the year kept"
        );
    }

    #[test]
    fn relative_phrases_count_back_from_the_search() {
        let today = day(2026, 11, 27);
        assert_eq!(periods("what did I eat yesterday", NOW, &|| NOW), vec![Period { start: today - DAY, end: today }]);
        assert_eq!(
            periods("plans from last month?", NOW, &|| NOW),
            vec![Period { start: day(2026, 10, 1), end: day(2026, 11, 1) }]
        );
        assert_eq!(
            periods("who called two weeks ago", NOW, &|| NOW),
            vec![Period { start: today - 3 * WEEK, end: today - WEEK }]
        );
        let last_week = periods("what did we decide last week", NOW, &|| NOW);
        assert!(last_week.len() == 1 && last_week[0].tells(today - 5 * DAY) && !last_week[0].tells(today - 30 * DAY));
    }

    #[test]
    fn a_span_before_a_date_reaches_back_from_it() {
        assert_eq!(
            periods("What did he do the week before August 3, 2023?", NOW, &|| NOW),
            vec![Period { start: day(2023, 8, 3) - WEEK, end: day(2023, 8, 4) }]
        );
        assert_eq!(
            periods("the puppy she got two weeks before 11 August 2023", NOW, &|| NOW),
            vec![Period { start: day(2023, 8, 11) - 2 * WEEK, end: day(2023, 8, 12) }]
        );
    }

    #[test]
    fn a_period_tells_what_was_said_in_it_or_soon_after() {
        let july = Period { start: day(2023, 7, 1), end: day(2023, 8, 1) };
        assert!(july.tells(day(2023, 7, 15)));
        assert!(july.tells(day(2023, 8, 3)), "told within a week after");
        assert!(!july.tells(day(2023, 8, 9)));
        assert!(!july.tells(day(2023, 6, 30)));
        let one_day = Period { start: day(2023, 7, 7), end: day(2023, 7, 8) };
        assert!(one_day.tells(day(2023, 7, 8) + 1000), "a day is told until the next day ends");
        assert!(!one_day.tells(day(2023, 7, 9)));
        assert_eq!(one_day.told_until(), day(2023, 7, 9) - 1);
    }
}
