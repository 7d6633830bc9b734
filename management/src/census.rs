//! The census (DESIGN §7): every peer the management node knows, with its trust and what it
//! has contributed, and a summary of the node's health. `GET /v1/census` serves it as JSON and
//! `druse-mgmt census` prints it as a table.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use druse_node::store::Store;
use druse_node::task::blocking;
use druse_protocol::UnixMillis;
use druse_protocol::body::TrustLevel;
use druse_protocol::now_ms;
use serde::{Deserialize, Serialize};

use crate::{Error, Management, anomaly};

/// The census: the node's health, then every peer it knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Census {
    pub taken_at: UnixMillis,
    pub health: Health,
    /// Connected peers first, then by listings held, most first.
    pub peers: Vec<Peer>,
}

/// How the management node and its swarm are doing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// The management node's own PeerId.
    pub peer_id: String,
    pub connected_peers: usize,
    /// Peers in the census: connected, or remembered in the trust book.
    pub known_peers: usize,
    /// Connected peers by trust level (every level present).
    pub connected_by_trust_level: BTreeMap<String, usize>,
    /// Known peers by trust level (every level present).
    pub known_by_trust_level: BTreeMap<String, usize>,
    /// Whether this node halts ingestion from peers below `trusted` now.
    pub halted: bool,
    pub weather: Weather,
    /// Skills this node holds, its own and its peers'.
    pub skills_held: usize,
    /// The anomaly detector's counts; `None` when it is off.
    pub anomaly: Option<anomaly::Snapshot>,
}

/// The weather in force on the management node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weather {
    pub effective_cortisol: f64,
    /// The active weather's level, reason, expiry and signer; all `None` without weather.
    pub level: Option<f64>,
    pub reason: Option<String>,
    pub expires_at: Option<UnixMillis>,
    pub signer: Option<String>,
}

/// One known peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peer {
    pub peer_id: String,
    pub trust_level: TrustLevel,
    pub reputation: f64,
    pub connected: bool,
    /// When this node first heard from it (`None` if it has connected but sent nothing yet).
    pub first_seen: Option<UnixMillis>,
    /// Its messages this node accepted and rejected.
    pub accepted: u64,
    pub rejected: u64,
    /// Listings it authored that this node holds.
    pub listings: u64,
}

/// The part of a stored skill the census reads.
#[derive(Debug, Deserialize)]
struct Authored {
    author_peer: String,
}

/// Walks the stored skills once: how many each author has.
fn listings_by_author(store: &Store) -> Result<HashMap<String, u64>, druse_node::store::Error> {
    let mut by_author: HashMap<String, u64> = HashMap::new();
    for skill in store.skills::<Authored>() {
        *by_author.entry(skill?.author_peer).or_default() += 1;
    }
    Ok(by_author)
}

fn by_level<'a>(levels: impl Iterator<Item = &'a TrustLevel>) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = TrustLevel::ALL.iter().map(|l| (l.as_str().to_owned(), 0)).collect();
    for level in levels {
        *counts.entry(level.as_str().to_owned()).or_default() += 1;
    }
    counts
}

/// Takes the census of `management`'s node now.
pub async fn take(management: &Management) -> Result<Census, Error> {
    let node = management.node();
    let views = node.peers().await;
    let store = node.store().clone();
    let listings = blocking(move || listings_by_author(&store)).await??;
    let skills_held = listings.values().sum::<u64>() as usize;
    let mut peers: Vec<Peer> = views
        .into_iter()
        .map(|view| Peer {
            first_seen: view.first_seen,
            listings: listings.get(&view.peer_id).copied().unwrap_or(0),
            peer_id: view.peer_id,
            trust_level: view.trust_level,
            reputation: view.reputation,
            connected: view.connected,
            accepted: view.accepted,
            rejected: view.rejected,
        })
        .collect();
    peers.sort_by(|a, b| {
        b.connected.cmp(&a.connected).then(b.listings.cmp(&a.listings)).then_with(|| a.peer_id.cmp(&b.peer_id))
    });
    let weather = node.weather();
    let active = weather.active.as_ref();
    let health = Health {
        peer_id: node.peer_id().to_string(),
        connected_peers: peers.iter().filter(|p| p.connected).count(),
        known_peers: peers.len(),
        connected_by_trust_level: by_level(peers.iter().filter(|p| p.connected).map(|p| &p.trust_level)),
        known_by_trust_level: by_level(peers.iter().map(|p| &p.trust_level)),
        halted: weather.halted,
        weather: Weather {
            effective_cortisol: weather.effective_cortisol,
            level: active.map(|w| w.level),
            reason: active.map(|w| w.reason.clone()),
            expires_at: active.map(|w| w.expires_at),
            signer: active.map(|w| w.signer.to_string()),
        },
        skills_held,
        anomaly: management.anomaly().map(|watch| watch.snapshot()),
    };
    Ok(Census { taken_at: now_ms(), health, peers })
}

fn timestamp(ms: UnixMillis) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn levels_line(counts: &BTreeMap<String, usize>) -> String {
    TrustLevel::ALL
        .iter()
        .rev()
        .map(|l| format!("{} {}", l.as_str(), counts.get(l.as_str()).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The census as an operator reads it: a health summary, then one row per peer.
pub fn table(census: &Census) -> String {
    let h = &census.health;
    let mut out = String::new();
    let _ = writeln!(out, "census of {} at {}", h.peer_id, timestamp(census.taken_at));
    let _ = writeln!(out, "peers     {} connected, {} known", h.connected_peers, h.known_peers);
    let _ = writeln!(out, "trust     connected: {}", levels_line(&h.connected_by_trust_level));
    let _ = writeln!(out, "          known:     {}", levels_line(&h.known_by_trust_level));
    match (h.weather.level, &h.weather.reason, h.weather.expires_at) {
        (Some(level), Some(reason), Some(expires_at)) => {
            let left = Duration::from_secs(expires_at.saturating_sub(census.taken_at) / 1000);
            let _ = writeln!(
                out,
                "weather   {} at cortisol {level:.2} until {} ({} left): {reason}",
                if h.halted { "HALTED" } else { "active" },
                timestamp(expires_at),
                humantime::format_duration(left),
            );
        }
        _ => {
            let _ = writeln!(out, "weather   clear (effective cortisol {:.2})", h.weather.effective_cortisol);
        }
    }
    let _ = writeln!(out, "skills    {} held", h.skills_held);
    match &h.anomaly {
        Some(a) => {
            let window = humantime::format_duration(a.window);
            let mut line = format!("anomaly   new peers {}/{} within {window}", a.new_peers, a.new_peers_threshold);
            if !a.armed {
                line.push_str(" (warming up: learning peers)");
            }
            match &a.busiest_lister {
                Some(peer) => {
                    let _ =
                        write!(line, "; busiest lister {peer} {}/{}", a.busiest_lister_listings, a.listings_threshold);
                }
                None => {
                    let _ = write!(line, "; no listings within {window} (threshold {})", a.listings_threshold);
                }
            }
            let _ = writeln!(out, "{line}");
            if let Some(fired) = &a.last_fired {
                let _ = writeln!(
                    out,
                    "          last raised weather at {} ({}): {}",
                    timestamp(fired.at),
                    fired.trigger.as_str(),
                    fired.reason
                );
            }
        }
        None => {
            let _ = writeln!(out, "anomaly   detector off");
        }
    }
    let _ = writeln!(out);
    let width = census.peers.iter().map(|p| p.peer_id.len()).max().unwrap_or(0).max("PEER".len());
    let _ = writeln!(
        out,
        "{:<width$}  {:<9}  {:<11}  {:>10}  {:>8}  {:>8}  {:>8}  FIRST SEEN",
        "PEER", "CONNECTED", "TRUST", "REPUTATION", "ACCEPTED", "REJECTED", "LISTINGS"
    );
    for p in &census.peers {
        let _ = writeln!(
            out,
            "{:<width$}  {:<9}  {:<11}  {:>10.2}  {:>8}  {:>8}  {:>8}  {}",
            p.peer_id,
            if p.connected { "yes" } else { "no" },
            p.trust_level.as_str(),
            p.reputation,
            p.accepted,
            p.rejected,
            p.listings,
            p.first_seen.map_or_else(|| "-".to_owned(), timestamp),
        );
    }
    if census.peers.is_empty() {
        let _ = writeln!(out, "(no peers known)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn census() -> Census {
        let levels = by_level([TrustLevel::Provisional, TrustLevel::Trusted].iter());
        Census {
            taken_at: 1_700_000_000_000,
            health: Health {
                peer_id: "12D3KooWmgmt".into(),
                connected_peers: 2,
                known_peers: 2,
                connected_by_trust_level: levels.clone(),
                known_by_trust_level: levels,
                halted: true,
                weather: Weather {
                    effective_cortisol: 0.9,
                    level: Some(0.9),
                    reason: Some("drill".into()),
                    expires_at: Some(1_700_000_300_000),
                    signer: Some("ab".into()),
                },
                skills_held: 5,
                anomaly: None,
            },
            peers: vec![
                Peer {
                    peer_id: "12D3KooWalpha".into(),
                    trust_level: TrustLevel::Trusted,
                    reputation: 0.64,
                    connected: true,
                    first_seen: Some(1_699_999_000_000),
                    accepted: 7,
                    rejected: 1,
                    listings: 3,
                },
                Peer {
                    peer_id: "12D3KooWbeta".into(),
                    trust_level: TrustLevel::Provisional,
                    reputation: 0.5,
                    connected: true,
                    first_seen: None,
                    accepted: 0,
                    rejected: 0,
                    listings: 0,
                },
            ],
        }
    }

    #[test]
    fn every_trust_level_is_counted_even_at_zero() {
        let counts = by_level([TrustLevel::Trusted, TrustLevel::Trusted].iter());
        assert_eq!(counts.len(), TrustLevel::ALL.len());
        assert_eq!(counts.get("trusted"), Some(&2));
        assert_eq!(counts.get("banned"), Some(&0));
    }

    #[test]
    fn table_has_one_row_per_peer_with_its_figures() {
        let text = table(&census());
        let alpha = text.lines().find(|l| l.starts_with("12D3KooWalpha")).unwrap();
        let cells: Vec<&str> = alpha.split_whitespace().collect();
        assert_eq!(cells[..7], ["12D3KooWalpha", "yes", "trusted", "0.64", "7", "1", "3"], "{text}");
        assert!(cells[7].starts_with("2023-11-14T"), "{alpha}");
        let beta = text.lines().find(|l| l.starts_with("12D3KooWbeta")).unwrap();
        assert!(beta.trim_end().ends_with('-'), "a peer never heard from has no first-seen time: {beta}");
    }

    #[test]
    fn table_summary_names_the_weather_and_the_levels() {
        let text = table(&census());
        assert!(text.contains("peers     2 connected, 2 known"), "{text}");
        assert!(text.contains("verified 0, trusted 1, provisional 1, untrusted 0, banned 0"), "{text}");
        assert!(text.contains("HALTED at cortisol 0.90"), "{text}");
        assert!(text.contains("(5m left): drill"), "{text}");
        assert!(text.contains("anomaly   detector off"), "{text}");
    }

    #[test]
    fn census_survives_a_json_round_trip() {
        let census = census();
        let json = serde_json::to_string(&census).unwrap();
        assert_eq!(serde_json::from_str::<Census>(&json).unwrap(), census);
    }
}
