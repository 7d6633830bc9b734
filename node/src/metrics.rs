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

/// Labels of one ingestion outcome.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

/// One label: a trust level, a lifecycle state, a kind or a verdict.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabel {
    pub level: &'static str,
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

/// Every metric the node exports; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Gossip messages by topic and the verdict gossipsub was told.
    pub messages: Family<MessageLabels, Counter>,
    /// Ingestion outcomes by kind and reason (`accepted`, or why not).
    pub ingest: Family<OutcomeLabels, Counter>,
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
    /// Time from receiving a gossip message to its verdict.
    pub ingest_seconds: Histogram,
}

impl Metrics {
    /// Registers every metric; libp2p's are added to `registry()` by the network layer.
    pub fn new(version: &'static str, role: &'static str) -> Self {
        let mut registry = Registry::default();
        let metrics = Self {
            messages: Family::default(),
            ingest: Family::default(),
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
            ingest_seconds: Histogram::new(exponential_buckets(0.00001, 2.0, 18)),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("druse_messages", "Gossip messages by topic and verdict", metrics.messages.clone());
        r.register("druse_ingest_outcomes", "Ingestion outcomes by kind and reason", metrics.ingest.clone());
        r.register("druse_published", "Messages this node published, by kind", metrics.published.clone());
        r.register("druse_weather_cortisol", "Effective network cortisol from weather", metrics.weather_cortisol.clone());
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
        r.register_with_unit(
            "druse_ingest_duration",
            "Time from receiving a gossip message to its verdict",
            prometheus_client::registry::Unit::Seconds,
            metrics.ingest_seconds.clone(),
        );
        r.register(
            "druse_build",
            "Build information",
            Info::new(vec![("version", version), ("role", role)]),
        );
        for level in druse_protocol::body::TrustLevel::ALL {
            let _ = metrics.peers.get_or_create(&LevelLabel { level: level.as_str() });
        }
        Self { registry, ..metrics }
    }

    /// The registry, for the network layer to add libp2p's metrics to.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The whole exposition body.
    pub fn render(&self) -> String {
        let mut body = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut body, &self.registry);
        body
    }
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
