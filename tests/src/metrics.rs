//! Reading a Prometheus / OpenMetrics exposition body, so scenarios can assert on the numbers
//! a node exports, exactly as a scraper would see them.

use std::collections::BTreeMap;

/// One sample line: a series name, its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample in `text`; comments and lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(mut inside) = rest.strip_prefix('{') {
        loop {
            inside = inside.trim_start_matches([',', ' ']);
            if let Some(tail) = inside.strip_prefix('}') {
                rest = tail;
                break;
            }
            let eq = inside.find('=')?;
            let key = inside[..eq].trim().to_owned();
            let (value, tail) = quoted(&inside[eq + 1..])?;
            labels.insert(key, value);
            inside = tail;
        }
    }
    // The value; an optional timestamp may follow it.
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample { name, labels, value })
}

/// Reads one `"..."` label value; returns it unescaped with the text after the closing quote.
fn quoted(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut value = String::new();
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match (escaped, c) {
            (true, 'n') => {
                value.push('\n');
                escaped = false;
            }
            (true, c) => {
                value.push(c);
                escaped = false;
            }
            (false, '\\') => escaped = true,
            (false, '"') => return Some((value, &body[i + 1..])),
            (false, c) => value.push(c),
        }
    }
    None
}

/// The sum of the samples named `name` whose labels include every pair of `labels`; `None`
/// if no sample matches (the series was never created).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = parse(text)
        .into_iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v)))
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "# HELP druse_halted 1 while halted.\n# TYPE druse_halted gauge\ndruse_halted 1\n\
        druse_ingest_outcomes_total{kind=\"weather\",outcome=\"untrusted_signer\"} 3\n\
        druse_ingest_outcomes_total{kind=\"crystal\",outcome=\"untrusted_signer\"} 2\n\
        druse_messages_total{topic=\"druse/weather/1\",verdict=\"reject\"} 1 1700000000\n\
        odd{a=\"x\\\"y,}\",b=\"z\"} 4.5\n# EOF\n";

    #[test]
    fn values_are_found_by_name_and_label_subset() {
        assert_eq!(value(BODY, "druse_halted", &[]), Some(1.0));
        assert_eq!(value(BODY, "druse_ingest_outcomes_total", &[("outcome", "untrusted_signer")]), Some(5.0));
        assert_eq!(value(BODY, "druse_ingest_outcomes_total", &[("kind", "weather")]), Some(3.0));
        assert_eq!(value(BODY, "druse_messages_total", &[("topic", "druse/weather/1")]), Some(1.0));
        assert_eq!(value(BODY, "druse_missing", &[]), None);
    }

    #[test]
    fn escaped_label_values_are_unescaped() {
        assert_eq!(value(BODY, "odd", &[("a", "x\"y,}"), ("b", "z")]), Some(4.5));
    }
}
