//! Gossip topic names. The trailing number is the topic's protocol version.

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
