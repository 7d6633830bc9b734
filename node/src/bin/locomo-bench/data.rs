//! Reading a LoCoMo-format file into the turns to store and the questions to ask, shared by
//! `locomo-bench` and the recall floor test (`node/tests/locomo.rs`).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use druse_memory::dates::MONTHS;

#[derive(Debug, Deserialize)]
struct Sample {
    sample_id: String,
    conversation: serde_json::Map<String, Value>,
    qa: Vec<Qa>,
}

#[derive(Debug, Deserialize)]
struct Qa {
    question: String,
    #[serde(default)]
    evidence: Vec<String>,
    #[serde(default)]
    category: u32,
}

/// One turn to store.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub(crate) dia_id: String,
    pub(crate) namespace: String,
    pub(crate) session: String,
    pub(crate) turn_at: String,
    pub(crate) text: String,
}

/// One question to ask, with the evidence turns that answer it.
#[derive(Debug, Clone)]
pub(crate) struct Question {
    pub(crate) namespace: String,
    pub(crate) text: String,
    pub(crate) evidence: Vec<String>,
    pub(crate) category: u32,
}

/// `"1:56 pm on 8 May, 2023"` as `(year, month, day, minutes into the day)`.
fn session_date(text: &str) -> Option<(u32, u32, u32, u32)> {
    let (time, date) = text.split_once(" on ")?;
    let (clock, meridiem) = time.trim().split_once(' ')?;
    let (hour, minute) = clock.split_once(':')?;
    let (mut hour, minute): (u32, u32) = (hour.parse().ok()?, minute.parse().ok()?);
    match meridiem.trim().to_lowercase().as_str() {
        "pm" if hour < 12 => hour += 12,
        "am" if hour == 12 => hour = 0,
        _ => {}
    }
    let parts: Vec<&str> = date.split([' ', ',']).filter(|p| !p.is_empty()).collect();
    let [day, month, year] = parts.as_slice() else { return None };
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as u32 + 1;
    Some((year.parse().ok()?, month, day.parse().ok()?, hour * 60 + minute))
}

/// Days from 1970-01-01 to a civil date (Howard Hinnant's days-from-civil); 0 before 1970.
fn days_from_civil(year: u32, month: u32, day: u32) -> u64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(month) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    u64::try_from(era * 146_097 + doe - 719_468).unwrap_or(0)
}

pub(crate) fn load(path: &Path, captions: bool) -> anyhow::Result<(Vec<Turn>, Vec<Question>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let samples: Vec<Sample> = serde_json::from_str(&text).context("not a LoCoMo-format file")?;
    let mut turns = Vec::new();
    let mut questions = Vec::new();
    for sample in samples {
        let namespace = format!("user:{}", sample.sample_id.replace(char::is_whitespace, "_"));
        let mut n = 1;
        while let Some(Value::Array(session)) = sample.conversation.get(&format!("session_{n}")) {
            let date = sample.conversation.get(&format!("session_{n}_date_time")).and_then(Value::as_str);
            let Some((year, month, day, minutes)) = date.and_then(session_date) else {
                bail!("{}: session_{n} has no readable date", sample.sample_id);
            };
            for (index, turn) in session.iter().enumerate() {
                let (Some(speaker), Some(said), Some(dia_id)) =
                    (turn["speaker"].as_str(), turn["text"].as_str(), turn["dia_id"].as_str())
                else {
                    continue;
                };
                let mut text = format!("{speaker}: {said}");
                if let (true, Some(caption)) = (captions, turn["blip_caption"].as_str()) {
                    text.push_str(&format!(" [shares a photo: {caption}]"));
                }
                let seconds = days_from_civil(year, month, day) * 86_400 + u64::from(minutes) * 60 + index as u64 * 30;
                let at = std::time::UNIX_EPOCH + Duration::from_secs(seconds);
                let turn_at = humantime::format_rfc3339_seconds(at).to_string();
                turns.push(Turn {
                    dia_id: format!("{}/{dia_id}", sample.sample_id),
                    namespace: namespace.clone(),
                    session: format!("session_{n}"),
                    turn_at,
                    text,
                });
            }
            n += 1;
        }
        for qa in sample.qa.into_iter().filter(|qa| qa.category != 5) {
            let evidence = qa
                .evidence
                .iter()
                .flat_map(|e| e.split([';', ',', ' ']))
                .filter(|e| !e.is_empty())
                .map(|e| format!("{}/{e}", sample.sample_id))
                .collect();
            questions.push(Question {
                namespace: namespace.clone(),
                text: qa.question,
                evidence,
                category: qa.category,
            });
        }
    }
    Ok((turns, questions))
}

/// The `POST /v1/memories` body that stores `turn`.
pub(crate) fn new_memory(turn: &Turn) -> Value {
    json!({
        "text": turn.text, "namespace": turn.namespace, "session": turn.session,
        "turn_at": turn.turn_at, "kind": "interaction",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_count_from_1970() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2023, 5, 8), 19_485);
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
    }

    #[test]
    fn session_dates_read_as_locomo_writes_them() {
        assert_eq!(session_date("1:56 pm on 8 May, 2023"), Some((2023, 5, 8, 13 * 60 + 56)));
        assert_eq!(session_date("12:09 am on 13 September, 2023"), Some((2023, 9, 13, 9)));
        assert_eq!(session_date("10:37 am on 27 June, 2023"), Some((2023, 6, 27, 10 * 60 + 37)));
        assert_eq!(session_date("sometime in May"), None);
    }
}
