//! Calendar dates for context-aware indexing: a turn is indexed with the day it was said.

use druse_protocol::UnixMillis;

/// The months' names, January first.
pub const MONTHS: [&str; 12] = [
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

/// `(year, month 1–12, day)` of a Unix time, in UTC.
pub(crate) fn civil_date(at: UnixMillis) -> (i64, u32, u32) {
    civil((at / 86_400_000) as i64)
}

/// "Sunday 22 November 2026 (2026-11-22)": words a question about a date will share.
pub fn describe(at: UnixMillis) -> String {
    let days = (at / 86_400_000) as i64;
    let (year, month, day) = civil(days);
    let weekday = WEEKDAYS[days.rem_euclid(7) as usize];
    let name = MONTHS[(month as usize).saturating_sub(1).min(11)];
    format!("{weekday} {day} {name} {year} ({year:04}-{month:02}-{day:02})")
}

/// A time as a caller may send it: Unix milliseconds (a number or a string of digits) or an
/// ISO 8601 / RFC 3339 date-time (`2023-05-08T13:56:00Z`, `2023-05-08 13:56:00`, UTC when it
/// names no offset).
pub fn parse(text: &str) -> Result<UnixMillis, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| format!("{text:?} is too large for Unix milliseconds"));
    }
    let invalid = || format!("{text:?} is neither Unix milliseconds nor an ISO 8601 date-time");
    let (local, offset_ms) = split_offset(text).ok_or_else(invalid)?;
    let parsed = humantime::parse_rfc3339_weak(local)
        .or_else(|_| humantime::parse_rfc3339_weak(&format!("{local} 00:00:00")))
        .map_err(|_| invalid())?;
    let local_ms = parsed.duration_since(std::time::UNIX_EPOCH).map_err(|_| format!("{text:?} is before 1970"))?;
    let utc = i128::try_from(local_ms.as_millis()).map_err(|_| invalid())? - i128::from(offset_ms);
    UnixMillis::try_from(utc).map_err(|_| format!("{text:?} is before 1970"))
}

/// A date-time without its UTC offset (`Z`, `+HH:MM`, `-HH:MM`), and the offset in
/// milliseconds; `None` when the offset is malformed.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(local) = text.strip_suffix('Z').or_else(|| text.strip_suffix('z')) {
        return Some((local, 0));
    }
    // An offset follows the time, so it comes after a 'T' or a space.
    let Some(time_at) = text.find(['T', 't', ' ']) else { return Some((text, 0)) };
    let Some(sign_at) = text[time_at..].rfind(['+', '-']).map(|i| i + time_at) else { return Some((text, 0)) };
    let (local, offset) = text.split_at(sign_at);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let digits: String = offset[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = digits[2..].parse().ok()?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some((local, sign * (hours * 60 + minutes) * 60_000))
}

/// Serde: an optional time in any form [`parse`] reads, from JSON or a query string.
pub fn optional<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<UnixMillis>, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Option<UnixMillis>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("Unix milliseconds or an ISO 8601 date-time")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v).map(Some).map_err(|_| E::custom(format!("time {v} is before 1970")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse(v).map(Some).map_err(E::custom)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Visitor)
        }
    }
    deserializer.deserialize_any(Visitor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_milliseconds_or_iso_8601() {
        assert_eq!(parse("1795305600000"), Ok(1_795_305_600_000));
        assert_eq!(parse("2026-11-22T00:00:00Z"), Ok(1_795_305_600_000));
        assert_eq!(parse("2026-11-22 00:00:00"), Ok(1_795_305_600_000));
        assert_eq!(parse("2026-11-22T01:30:00+01:30"), Ok(1_795_305_600_000));
        assert_eq!(parse("2026-11-22"), Ok(1_795_305_600_000));
        for bad in ["", "yesterday", "2026-13-01T00:00:00Z", "99999999999999999999999"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn describes_known_dates() {
        assert_eq!(describe(0), "Thursday 1 January 1970 (1970-01-01)");
        assert_eq!(describe(1_795_305_600_000), "Sunday 22 November 2026 (2026-11-22)");
        assert_eq!(describe(951_782_400_000), "Tuesday 29 February 2000 (2000-02-29)");
    }
}
