//! Prometheus metrics (DESIGN §11). The node's own metrics and libp2p's live in one
//! prometheus-client registry and are rendered as one body, which `promtool check metrics`
//! accepts.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Labels of a gossip message's fate.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MessageLabels {
    pub topic: String,
    pub verdict: &'static str,
}

/// Every verdict a gossip message can get from ingestion: `druse_messages_total`'s `verdict`.
pub const VERDICTS: [&str; 3] = ["accept", "ignore", "reject"];

/// Labels of one ingestion outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

/// Labels of a refused skill: why (`skill_scan`) and the scanner's rule.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub label: &'static str,
    pub rule: String,
}

/// One label: a trust level.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabel {
    pub level: &'static str,
}

/// One label: how an operation ended.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// One label: a lifecycle state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LifecycleLabel {
    pub lifecycle: &'static str,
}

/// One label: a message kind.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// One label: an endorsement verdict.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabel {
    pub verdict: &'static str,
}

/// One label: what made the management node's anomaly detector raise weather.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabel {
    pub trigger: &'static str,
}

/// Labels of a signed report: what it says happened, and for executions whether it worked.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReportLabels {
    pub event: &'static str,
    pub outcome: &'static str,
}

/// One label: how an endorsement was decided (`manual` or `auto`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabel {
    pub policy: &'static str,
}

/// Every metric the node exports; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Gossip messages by topic and the verdict gossipsub was told.
    pub messages: Family<MessageLabels, Counter>,
    /// Ingestion outcomes by kind and reason (`accepted`, or why not).
    pub ingest: Family<OutcomeLabels, Counter>,
    /// Skill listings refused for their content, by why and the scanner's rule.
    pub refused: Family<RefusedLabels, Counter>,
    /// Messages this node published, by kind.
    pub published: Family<KindLabel, Counter>,
    /// Effective network cortisol from weather.
    pub weather_cortisol: Gauge<f64, AtomicU64>,
    /// 1 while untrusted ingestion is halted.
    pub halted: Gauge,
    /// When the active weather expires (Unix seconds), 0 without weather.
    pub weather_expires: Gauge<f64, AtomicU64>,
    /// Connected peers by trust level.
    pub peers: Family<LevelLabel, Gauge>,
    /// Endorsements and revocations applied to stored skills.
    pub endorsements_applied: Family<VerdictLabel, Counter>,
    /// Endorsements waiting for their skill.
    pub endorsements_pending: Gauge,
    /// Crystals by lifecycle state.
    pub crystals: Family<LifecycleLabel, Gauge>,
    /// Skills listed on the market.
    pub listings: Gauge,
    /// Asking prices of ingested listings, in USDC.
    pub listing_price: Histogram,
    /// Time to answer a retrieval query.
    pub retrieval_seconds: Histogram,
    /// Time of one consolidation pass.
    pub consolidation_seconds: Histogram,
    /// Consolidation passes that failed.
    pub consolidation_failures: Counter,
    /// Maintenance ticks completed (scores, gauges and expiries refreshed).
    pub maintenance_ticks: Counter,
    /// Time from receiving a gossip message to its verdict.
    pub ingest_seconds: Histogram,
    /// Signed reports applied, by event and outcome.
    pub reports: Family<ReportLabels, Counter>,
    /// Prices this node computed when a skill's evidence changed, in USDC.
    pub computed_price: Histogram,
    /// Bounties open (not expired).
    pub bounties_open: Gauge,
    /// Skill–bounty matches found.
    pub bounty_matches: Counter,
    /// Bounty claims recorded.
    pub bounty_claims: Counter,
    /// Endorsements this (management) node signed, by policy.
    pub endorsements_issued: Family<PolicyLabel, Counter>,
    /// The credit ledger's balance, in USDC.
    pub credits: Gauge<f64, AtomicU64>,
    /// Weather the management node's anomaly detector raised, by trigger (its series are
    /// created when the detector starts).
    pub anomaly_weather: Family<TriggerLabel, Counter>,
    /// Peer events the anomaly detector fell too far behind to see.
    pub anomaly_events_dropped: Counter,
    /// Messages received by anti-entropy sync, by kind and outcome.
    pub synced: Family<OutcomeLabels, Counter>,
    /// Syncs with a peer, by how they ended (`complete`, `failed`, `skipped`).
    pub syncs: Family<ResultLabel, Counter>,
}

impl Metrics {
    /// Registers every metric; libp2p's are added to `registry()` by the network layer.
    pub fn new(version: &'static str, role: &'static str) -> Self {
        let mut registry = Registry::default();
        let metrics = Self {
            messages: Family::default(),
            ingest: Family::default(),
            refused: Family::default(),
            published: Family::default(),
            weather_cortisol: Gauge::default(),
            halted: Gauge::default(),
            weather_expires: Gauge::default(),
            peers: Family::default(),
            endorsements_applied: Family::default(),
            endorsements_pending: Gauge::default(),
            crystals: Family::default(),
            listings: Gauge::default(),
            listing_price: Histogram::new(exponential_buckets(0.0001, 4.0, 10)),
            retrieval_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            consolidation_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            consolidation_failures: Counter::default(),
            maintenance_ticks: Counter::default(),
            ingest_seconds: Histogram::new(exponential_buckets(0.00001, 2.0, 18)),
            reports: Family::default(),
            computed_price: Histogram::new(exponential_buckets(0.0001, 2.0, 12)),
            bounties_open: Gauge::default(),
            bounty_matches: Counter::default(),
            bounty_claims: Counter::default(),
            endorsements_issued: Family::default(),
            credits: Gauge::default(),
            anomaly_weather: Family::default(),
            anomaly_events_dropped: Counter::default(),
            synced: Family::default(),
            syncs: Family::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("druse_messages", "Gossip messages by topic and verdict", metrics.messages.clone());
        r.register("druse_ingest_outcomes", "Ingestion outcomes by kind and reason", metrics.ingest.clone());
        r.register(
            "druse_ingest_refused",
            "Skill listings refused for what they carry, by why and the skill scanner's rule",
            metrics.refused.clone(),
        );
        r.register("druse_published", "Messages this node published, by kind", metrics.published.clone());
        r.register(
            "druse_sync_messages",
            "Messages received by anti-entropy sync, by kind and outcome",
            metrics.synced.clone(),
        );
        r.register("druse_syncs", "Anti-entropy syncs with a peer, by how they ended", metrics.syncs.clone());
        r.register(
            "druse_weather_cortisol",
            "Effective network cortisol from weather",
            metrics.weather_cortisol.clone(),
        );
        r.register("druse_halted", "1 while ingestion from untrusted peers is halted", metrics.halted.clone());
        r.register(
            "druse_weather_expires_timestamp_seconds",
            "When the active weather expires (Unix seconds), 0 without weather",
            metrics.weather_expires.clone(),
        );
        r.register("druse_peers", "Connected peers by trust level", metrics.peers.clone());
        r.register(
            "druse_endorsements_applied",
            "Endorsements and revocations applied to stored skills",
            metrics.endorsements_applied.clone(),
        );
        r.register(
            "druse_endorsements_pending",
            "Endorsements waiting for their skill to arrive",
            metrics.endorsements_pending.clone(),
        );
        r.register("druse_crystals", "Crystals by lifecycle state", metrics.crystals.clone());
        r.register("druse_listings", "Skills listed on the market", metrics.listings.clone());
        r.register("druse_listing_price_usdc", "Asking prices of ingested listings", metrics.listing_price.clone());
        r.register_with_unit(
            "druse_retrieval_duration",
            "Time to answer a retrieval query",
            prometheus_client::registry::Unit::Seconds,
            metrics.retrieval_seconds.clone(),
        );
        r.register_with_unit(
            "druse_consolidation_duration",
            "Time of one consolidation pass",
            prometheus_client::registry::Unit::Seconds,
            metrics.consolidation_seconds.clone(),
        );
        r.register(
            "druse_consolidation_failures",
            "Consolidation passes that failed",
            metrics.consolidation_failures.clone(),
        );
        r.register(
            "druse_maintenance_ticks",
            "Maintenance ticks completed: peer scores, gauges and bounty expiries refreshed",
            metrics.maintenance_ticks.clone(),
        );
        r.register_with_unit(
            "druse_ingest_duration",
            "Time from receiving a gossip message to its verdict",
            prometheus_client::registry::Unit::Seconds,
            metrics.ingest_seconds.clone(),
        );
        r.register(
            "druse_anomaly_weather",
            "Weather the anomaly detector raised, by trigger",
            metrics.anomaly_weather.clone(),
        );
        r.register(
            "druse_anomaly_events_dropped",
            "Peer events the anomaly detector fell too far behind to see",
            metrics.anomaly_events_dropped.clone(),
        );
        r.register("druse_reports", "Signed skill reports applied, by event and outcome", metrics.reports.clone());
        r.register(
            "druse_computed_price_usdc",
            "Prices this node computed when a skill's evidence changed",
            metrics.computed_price.clone(),
        );
        r.register("druse_bounties_open", "Bounties open on this node", metrics.bounties_open.clone());
        r.register("druse_bounty_matches", "Skill-bounty matches found", metrics.bounty_matches.clone());
        r.register("druse_bounty_claims", "Bounty claims recorded", metrics.bounty_claims.clone());
        r.register(
            "druse_endorsements_issued",
            "Endorsements this management node signed, by policy",
            metrics.endorsements_issued.clone(),
        );
        r.register("druse_credits_balance_usdc", "The credit ledger's balance", metrics.credits.clone());
        r.register("druse_build", "Build information", Info::new(vec![("version", version), ("role", role)]));
        // Every series exists from the start, so rate() and increase() see the first event.
        for topic in druse_protocol::topic::ALL {
            for verdict in VERDICTS {
                let _ = metrics.messages.get_or_create(&MessageLabels { topic: topic.to_owned(), verdict });
            }
        }
        let outcomes = ["accepted", "halted", "banned", "confidential", "skill_scan", "store_failed"]
            .into_iter()
            .chain(druse_protocol::validate::Reason::ALL.map(|r| r.as_str()));
        for outcome in outcomes {
            for kind in druse_protocol::Kind::ALL {
                let _ = metrics.ingest.get_or_create(&OutcomeLabels { kind: kind.as_str(), outcome });
            }
        }
        for kind in druse_protocol::Kind::ALL {
            let _ = metrics.published.get_or_create(&KindLabel { kind: kind.as_str() });
        }
        for verdict in ["endorse", "revoke"] {
            let _ = metrics.endorsements_applied.get_or_create(&VerdictLabel { verdict });
        }
        for (event, outcome) in
            [("execution", "success"), ("execution", "failure"), ("adoption", "none"), ("claim", "none")]
        {
            let _ = metrics.reports.get_or_create(&ReportLabels { event, outcome });
        }
        for policy in ["manual", "auto"] {
            let _ = metrics.endorsements_issued.get_or_create(&PolicyLabel { policy });
        }
        for level in druse_protocol::body::TrustLevel::ALL {
            let _ = metrics.peers.get_or_create(&LevelLabel { level: level.as_str() });
        }
        Self { registry, ..metrics }
    }

    /// How many gossip messages arrived on `topic`, whatever their verdict. A read: it adds no
    /// series for a topic the node never counted.
    pub fn messages_on(&self, topic: &str) -> u64 {
        VERDICTS
            .into_iter()
            .filter_map(|verdict| {
                self.messages.get(&MessageLabels { topic: topic.to_owned(), verdict }).map(|c| c.get())
            })
            .sum()
    }

    /// The registry, for the network layer to add libp2p's metrics to.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Sets `druse_crystals` from the memory's counts by lifecycle (every state, zeros too).
    pub fn set_crystals(&self, counts: &std::collections::HashMap<druse_memory::crystal::Lifecycle, usize>) {
        for lifecycle in druse_memory::crystal::Lifecycle::ALL {
            let n = counts.get(&lifecycle).copied().unwrap_or(0);
            self.crystals
                .get_or_create(&LifecycleLabel { lifecycle: lifecycle.as_str() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The whole exposition body, in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut body = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut body, &self.registry);
        to_prometheus_text(&body)
    }
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Rewrites prometheus-client's OpenMetrics output as Prometheus text format 0.0.4, which
/// every scraper and `promtool check metrics` read: counter families take their `_total`
/// sample name, info families become `_info` gauges, and `# UNIT` and `# EOF` lines go.
pub fn to_prometheus_text(open_metrics: &str) -> String {
    let mut out = String::with_capacity(open_metrics.len());
    let mut help: Option<(&str, &str)> = None;
    for line in open_metrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (family, kind) = match kind {
                "counter" if !name.ends_with("_total") => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                other => (name.to_owned(), other),
            };
            if let Some((_, text)) = help.take().filter(|(n, _)| *n == name) {
                out.push_str(&format!("# HELP {family} {text}\n"));
            }
            out.push_str(&format!("# TYPE {family} {kind}\n"));
            continue;
        }
        if let Some((name, text)) = help.take() {
            out.push_str(&format!("# HELP {name} {text}\n"));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_body() -> String {
        let metrics = Metrics::new("0.0.0-test", "edge");
        metrics.messages.get_or_create(&MessageLabels { topic: "druse/crystals/1".into(), verdict: "accept" }).inc();
        metrics.retrieval_seconds.observe(0.003);
        metrics.render()
    }

    #[test]
    fn messages_on_a_topic_count_every_verdict_and_no_other_topic() {
        let metrics = Metrics::new("0.0.0-test", "edge");
        let count = |topic: &str, verdict: &'static str, n: u64| {
            metrics.messages.get_or_create(&MessageLabels { topic: topic.into(), verdict }).inc_by(n);
        };
        count("druse/crystals/1", "accept", 3);
        count("druse/crystals/1", "ignore", 2);
        count("druse/crystals/1", "reject", 1);
        count("druse/weather/1", "accept", 7);
        assert_eq!(metrics.messages_on("druse/crystals/1"), 6);
        assert_eq!(metrics.messages_on("druse/weather/1"), 7);
        assert_eq!(metrics.messages_on("druse/bans/1"), 0);
        assert_eq!(metrics.messages_on("no/such/topic"), 0);
        assert!(!metrics.render().contains("no/such/topic"), "reading a topic must not add its series");
    }

    #[test]
    fn counters_and_info_render_in_prometheus_text_format() {
        let body = sample_body();
        assert!(body.contains("# TYPE druse_messages_total counter"), "{body}");
        assert!(body.contains("druse_messages_total{topic=\"druse/crystals/1\",verdict=\"accept\"} 1"), "{body}");
        assert!(body.contains("# TYPE druse_build_info gauge"), "{body}");
        assert!(body.contains("druse_build_info{version=\"0.0.0-test\",role=\"edge\"} 1"), "{body}");
        assert!(!body.contains("# EOF") && !body.contains("# UNIT"), "{body}");
    }

    #[test]
    fn promtool_accepts_the_body() {
        let Ok(mut child) = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("promtool is not installed; CI installs it and runs this check");
            return;
        };
        use std::io::Write;
        child.stdin.take().unwrap().write_all(sample_body().as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
