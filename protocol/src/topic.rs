//! Gossip topic names. The trailing number is the topic's protocol version.

use crate::envelope::Kind;

/// Crystal listings.
pub const CRYSTALS: &str = "druse/crystals/1";
/// Management endorsements and revocations.
pub const ENDORSEMENTS: &str = "druse/endorsements/1";
/// Management cortisol weather.
pub const WEATHER: &str = "druse/weather/1";
/// Management bounties.
pub const BOUNTIES: &str = "druse/bounties/1";
/// Execution reports, adoptions and bounty claims.
pub const REPORTS: &str = "druse/reports/1";
/// Management bans and attestations.
pub const TRUST: &str = "druse/trust/1";

/// Every topic a node subscribes to.
pub const ALL: [&str; 6] = [CRYSTALS, ENDORSEMENTS, WEATHER, BOUNTIES, REPORTS, TRUST];

/// The topic a kind is published on.
pub fn for_kind(kind: Kind) -> &'static str {
    match kind {
        Kind::Crystal => CRYSTALS,
        Kind::Endorsement => ENDORSEMENTS,
        Kind::Weather => WEATHER,
        Kind::Bounty => BOUNTIES,
        Kind::Report => REPORTS,
        Kind::Ban | Kind::Attest => TRUST,
    }
}

/// Whether a message of `kind` belongs on `topic` (a message on the wrong topic is malformed).
pub fn carries(topic: &str, kind: Kind) -> bool {
    for_kind(kind) == topic
}
