//! Reading a Prometheus / OpenMetrics exposition body, so scenarios can assert on the numbers
//! a node exports, exactly as a scraper would see them.

use std::collections::BTreeMap;

use prometheus_parse::Value;

/// One sample line: a series name, its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample in `text`, read by `prometheus-parse`; comments and lines that do not parse
/// are skipped. A histogram comes back as its `_bucket` samples (with their `le` label) and
/// its `_sum` and `_count`; a summary as its samples with their `quantile` label.
///
/// Label values are read as the node writes them: no label value it exports holds a comma, an
/// equals sign or an escaped quote, which this reader does not unescape.
pub fn parse(text: &str) -> Vec<Sample> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let Ok(scrape) = prometheus_parse::Scrape::parse(lines) else { return Vec::new() };
    let mut samples = Vec::new();
    for sample in scrape.samples {
        let labels: BTreeMap<String, String> = sample.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut push = |name: String, labels: BTreeMap<String, String>, value: f64| {
            samples.push(Sample { name, labels, value });
        };
        match sample.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => push(sample.metric, labels, v),
            Value::Histogram(buckets) => {
                for bucket in buckets {
                    let mut labels = labels.clone();
                    labels.insert("le".into(), bound(bucket.less_than));
                    push(format!("{}_bucket", sample.metric), labels, bucket.count);
                }
            }
            Value::Summary(quantiles) => {
                for quantile in quantiles {
                    let mut labels = labels.clone();
                    labels.insert("quantile".into(), bound(quantile.quantile));
                    push(sample.metric.clone(), labels, quantile.count);
                }
            }
        }
    }
    samples
}

/// A bucket bound or quantile as the exposition format writes it.
fn bound(value: f64) -> String {
    if value == f64::INFINITY { "+Inf".into() } else { value.to_string() }
}

/// The sum of the samples named `name` whose labels include every pair of `labels`; `None`
/// if no sample matches (the series was never created).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> =
        parse(text).into_iter().filter(|s| s.name == name && has_labels(&s.labels, labels)).map(|s| s.value).collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

/// Whether a series' `labels` include every pair of `wanted`.
pub fn has_labels(labels: &BTreeMap<String, String>, wanted: &[(&str, &str)]) -> bool {
    wanted.iter().all(|(k, v)| labels.get(*k).is_some_and(|x| x == v))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "# HELP druse_halted 1 while halted.\n# TYPE druse_halted gauge\ndruse_halted 1\n\
        # TYPE druse_ingest_outcomes counter\n\
        druse_ingest_outcomes_total{kind=\"weather\",outcome=\"untrusted_signer\"} 3\n\
        druse_ingest_outcomes_total{kind=\"crystal\",outcome=\"untrusted_signer\"} 2\n\
        druse_messages_total{topic=\"druse/weather/1\",verdict=\"reject\"} 1 1700000000\n\
        # HELP druse_ingest_seconds Time to ingest one message.\n# TYPE druse_ingest_seconds histogram\n\
        druse_ingest_seconds_sum 0.75\ndruse_ingest_seconds_count 4\n\
        druse_ingest_seconds_bucket{le=\"0.1\"} 1\ndruse_ingest_seconds_bucket{le=\"+Inf\"} 4\n# EOF\n";

    #[test]
    fn values_are_found_by_name_and_label_subset() {
        assert_eq!(value(BODY, "druse_halted", &[]), Some(1.0));
        assert_eq!(value(BODY, "druse_ingest_outcomes_total", &[("outcome", "untrusted_signer")]), Some(5.0));
        assert_eq!(value(BODY, "druse_ingest_outcomes_total", &[("kind", "weather")]), Some(3.0));
        assert_eq!(value(BODY, "druse_messages_total", &[("topic", "druse/weather/1")]), Some(1.0));
        assert_eq!(value(BODY, "druse_missing", &[]), None);
    }

    #[test]
    fn a_histogram_reads_as_its_buckets_sum_and_count() {
        assert_eq!(value(BODY, "druse_ingest_seconds_count", &[]), Some(4.0));
        assert_eq!(value(BODY, "druse_ingest_seconds_sum", &[]), Some(0.75));
        assert_eq!(value(BODY, "druse_ingest_seconds_bucket", &[("le", "0.1")]), Some(1.0));
        assert_eq!(value(BODY, "druse_ingest_seconds_bucket", &[("le", "+Inf")]), Some(4.0));
    }

    #[test]
    fn lines_that_are_not_samples_are_skipped() {
        let samples = parse("# EOF\nnot a sample\ndruse_halted one\n\ndruse_halted 0\n");
        assert_eq!(samples, vec![Sample { name: "druse_halted".into(), labels: BTreeMap::new(), value: 0.0 }]);
    }
}
