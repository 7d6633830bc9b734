//! The management role's config: the `[management]` table of the node's TOML file.
//!
//! The node library keeps that table unread (`druse_node::config::Config::management`), so an
//! edge node and a management node share one file format; this module gives it its types and
//! checks them. Unknown keys are errors that name them, as everywhere else in the file.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why the `[management]` table was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("config [management]: {0}")]
    Parse(String),
    #[error("config: {0}")]
    Invalid(String),
}

/// The management role (`[management]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// How often active weather is broadcast again, so nodes that join late obey it.
    #[serde(with = "humantime_serde")]
    pub weather_reannounce: Duration,
    /// The anomaly detector that raises weather by itself (`[management.anomaly]`).
    pub anomaly: Anomaly,
    /// The automatic endorsement policy (`[management.endorsement]`).
    pub endorsement: EndorsementPolicy,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            weather_reannounce: Duration::from_secs(30),
            anomaly: Anomaly::default(),
            endorsement: EndorsementPolicy::default(),
        }
    }
}

impl Config {
    /// Reads and checks the `[management]` table a node config carries.
    pub fn from_node(node: &druse_node::config::Config) -> Result<Self, Error> {
        Self::from_table(node.management.clone())
    }

    /// Reads and checks a `[management]` table.
    pub fn from_table(table: toml::Table) -> Result<Self, Error> {
        let config: Self =
            toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| Error::Parse(e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    /// Checks what TOML types cannot.
    pub fn check(&self) -> Result<(), Error> {
        if self.weather_reannounce.is_zero() {
            return Err(Error::Invalid("management.weather_reannounce must be positive".into()));
        }
        let weight = self.endorsement.min_independent_reporters;
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(Error::Invalid("management.endorsement.min_independent_reporters must be a weight ≥ 0".into()));
        }
        self.anomaly.check()
    }
}

/// When the management node endorses by itself: off by default (endorsement is manual); when
/// on, a skill is endorsed once it passes the quality gate on the reports of vouched reporters
/// other than its publisher that adopted it, and the reporters with a success weigh at least
/// `min_independent_reporters` together (3.0: three verified reporters, or four trusted ones;
/// see `druse_node::market::Weights`). The name is kept from when it counted reporters.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EndorsementPolicy {
    pub auto: bool,
    pub min_independent_reporters: f64,
}

impl Default for EndorsementPolicy {
    fn default() -> Self {
        Self { auto: false, min_independent_reporters: 3.0 }
    }
}

/// The management node's anomaly detector (seed 004's network cortisol override): a burst of
/// new peers, or of listings from one peer, within `window` raises weather at `level` for
/// `duration`. The defaults are seed 004's weather (0.9 for 5 minutes).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Anomaly {
    /// Whether the detector runs.
    pub enabled: bool,
    /// The sliding window both bursts are counted in.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// New peers (PeerIds never seen before) within `window` that raise weather.
    pub new_peers: u32,
    /// Listings one peer offers within `window` that raise weather.
    pub listings_per_peer: u32,
    /// After start, peers are learned but not counted as new for this long, so a restarted
    /// management node does not take its swarm reconnecting for an attack.
    #[serde(with = "humantime_serde")]
    pub warmup: Duration,
    /// Cortisol level of the weather raised.
    pub level: f64,
    /// How long the weather raised lasts.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
}

impl Default for Anomaly {
    fn default() -> Self {
        Self {
            enabled: true,
            window: Duration::from_secs(60),
            new_peers: 20,
            listings_per_peer: 30,
            warmup: Duration::from_secs(120),
            level: 0.9,
            duration: Duration::from_secs(300),
        }
    }
}

impl Anomaly {
    /// Checks what TOML types cannot.
    pub fn check(&self) -> Result<(), Error> {
        if self.window.is_zero() {
            return Err(Error::Invalid("management.anomaly.window must be positive".into()));
        }
        if self.new_peers == 0 || self.listings_per_peer == 0 {
            return Err(Error::Invalid("management.anomaly thresholds must be positive".into()));
        }
        if !(self.level > 0.0 && self.level <= 1.0) {
            return Err(Error::Invalid("management.anomaly.level must be in (0, 1]".into()));
        }
        if self.duration.is_zero() || self.duration > Duration::from_secs(7 * 24 * 3600) {
            return Err(Error::Invalid("management.anomaly.duration must be positive and at most 7 days".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use druse_node::config::Config as NodeConfig;

    use super::*;

    fn parse(text: &str) -> Result<Config, Error> {
        Config::from_node(&NodeConfig::parse(text).map_err(Error::Parse)?)
    }

    #[test]
    fn no_table_is_the_default_policy() {
        let config = parse("[api]\nlisten = \"127.0.0.1:7710\"\n").unwrap();
        assert_eq!(config.weather_reannounce, Duration::from_secs(30));
        assert!(config.anomaly.enabled && !config.endorsement.auto);
        assert_eq!(config.endorsement.min_independent_reporters, 3.0);
    }

    #[test]
    fn anomaly_section_reads_durations_and_refuses_nonsense() {
        let config = parse("[management.anomaly]\nwindow = \"30s\"\nnew_peers = 5\nenabled = false\n").unwrap();
        let anomaly = &config.anomaly;
        assert_eq!((anomaly.window, anomaly.new_peers, anomaly.enabled), (Duration::from_secs(30), 5, false));
        assert_eq!(anomaly.level, 0.9, "unset keys keep their defaults");
        for bad in ["level = 0.0", "level = 1.5", "new_peers = 0", "window = \"0s\"", "duration = \"8days\""] {
            let err = parse(&format!("[management.anomaly]\n{bad}\n")).unwrap_err();
            assert!(matches!(err, Error::Invalid(_)), "{bad}: {err}");
        }
        let err = parse("[management]\nweather_reannounce = \"0s\"\n").unwrap_err();
        assert!(err.to_string().contains("weather_reannounce"), "{err}");
    }

    #[test]
    fn unknown_keys_are_an_error_that_names_them() {
        let err = parse("[management.anomaly]\nthreshold = 3\n").unwrap_err();
        assert!(err.to_string().contains("threshold"), "{err}");
        let err = parse("[management]\nweather = \"30s\"\n").unwrap_err();
        assert!(err.to_string().contains("weather"), "{err}");
        let err = parse("[management.endorsement]\nmin_independent_reporters = -1\n").unwrap_err();
        assert!(err.to_string().contains("min_independent_reporters"), "{err}");
        let config = parse("[management.endorsement]\nmin_independent_reporters = 1.5\n").unwrap();
        assert_eq!(config.endorsement.min_independent_reporters, 1.5, "a weight may be fractional");
        let err = parse("[management.endorsement]\nauto = \"yes\"\n").unwrap_err();
        assert!(err.to_string().contains("auto") || err.to_string().contains("bool"), "{err}");
    }

    #[test]
    fn a_file_over_the_binarys_defaults_keeps_unnamed_keys() {
        let mut base = NodeConfig::default();
        base.api.listen = ([127, 0, 0, 1], 7710).into();
        let node = NodeConfig::parse_over("[management.endorsement]\nauto = true\n", &base).unwrap();
        let config = Config::from_node(&node).unwrap();
        assert!(config.endorsement.auto);
        assert_eq!(config.endorsement.min_independent_reporters, 3.0, "a key the file does not name keeps its default");
        assert_eq!(config.weather_reannounce, Config::default().weather_reannounce);
        assert_eq!(node.api.listen, base.api.listen);
    }

    #[test]
    fn the_sample_management_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/management.toml");
        let node = NodeConfig::load(&path).unwrap();
        let config = Config::from_node(&node).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(config.anomaly.enabled);
    }
}
