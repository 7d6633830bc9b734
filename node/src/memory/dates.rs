//! Calendar dates for context-aware indexing: a turn is indexed with the day it was said.

use druse_protocol::UnixMillis;

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Thursday", "Friday", "Saturday", "Sunday", "Monday", "Tuesday", "Wednesday"];

/// `(year, month 1–12, day)` of a Unix day number (Howard Hinnant's civil-from-days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// "Sunday 22 November 2026 (2026-11-22)": words a question about a date will share.
pub fn describe(at: UnixMillis) -> String {
    let days = (at / 86_400_000) as i64;
    let (year, month, day) = civil(days);
    let weekday = WEEKDAYS[days.rem_euclid(7) as usize];
    let name = MONTHS[(month as usize).saturating_sub(1).min(11)];
    format!("{weekday} {day} {name} {year} ({year:04}-{month:02}-{day:02})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_known_dates() {
        assert_eq!(describe(0), "Thursday 1 January 1970 (1970-01-01)");
        assert_eq!(describe(1_795_305_600_000), "Sunday 22 November 2026 (2026-11-22)");
        assert_eq!(describe(951_782_400_000), "Tuesday 29 February 2000 (2000-02-29)");
    }
}
