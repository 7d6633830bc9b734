//! Room in a skill's evidence tables, so that no table can be frozen. Without it, the first
//! keys to report on a skill would hold every slot: a thousand free keys would keep out a
//! vouched adopter that came later, and which keys held the slots would depend on the order
//! messages arrived in, so nodes would disagree.
//!
//! - **Vouched keys** (something vouches for them now: see `peers::Book::weight`) have room of
//!   their own, [`Config::max_vouched_reporters`], that unvouched keys never take.
//! - **Unvouched keys**, reporters and adopters together, have [`Config::max_reporters`].
//!   Each has a rank, the hash of the skill and the key, and past the room the highest ranks
//!   are let go, executions and adoption together. Once a rank has been let go, the bound
//!   only falls: a key ranked at or above it is refused. So the kept keys are the lowest ranks
//!   of all the unvouched keys seen, whatever order they came in; a let-go key never comes
//!   back with half its reports, and every kept key was kept from its first message.
//! - **A key vouched for later** (an attestation arrives after its reports) moves into the
//!   vouched room at its next message, or when it would be let go, whichever is first; its
//!   earlier reports stay. If it was let go before anything vouched for it, what it sent
//!   then is gone on this node; what it sends after counts. A key whose vouching ended goes
//!   back to competing for unvouched room at its next message.
//!
//! What is kept is serialised with the stats; records written before the rooms read as
//! every key unvouched with no bound, and settle at the next message.

use std::collections::BTreeSet;

use druse_protocol::ContentId;

use super::{Config, Counted, Stats};

/// What admitting a key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// Held already, or in the vouched room: nothing to settle.
    Kept,
    /// New to the unvouched room, or moved out of the vouched one: the room must be settled.
    Unvouched,
    /// Unvouched and ranked at or past the bound.
    Refused,
}

impl Admit {
    /// The key has no room: its message is not counted.
    pub(super) fn refused(self) -> bool {
        self == Self::Refused
    }
}

/// A key's rank for unvouched room on `skill`: the hash of the skill's id and the key. The
/// lowest are kept; salted by the skill, a key that ranks low on one skill has no edge on
/// another.
pub(super) fn rank(skill: &ContentId, key: &str) -> [u8; 32] {
    let mut bytes = Vec::with_capacity(32 + key.len());
    bytes.extend_from_slice(skill.digest());
    bytes.extend_from_slice(key.as_bytes());
    *ContentId::of(&bytes).digest()
}

impl Stats {
    /// Whether the stats hold anything of `key`.
    fn holds(&self, key: &str) -> bool {
        self.executions.contains_key(key) || self.adopters.contains_key(key)
    }

    /// Finds `key` a place before its message is counted: a vouched key takes vouched room
    /// while there is some; an unvouched key already held keeps its place; a new one is
    /// refused if it ranks at or past the bound.
    pub(super) fn admit(
        &mut self,
        config: &Config,
        skill: &ContentId,
        key: &str,
        vouched: &dyn Fn(&str) -> bool,
    ) -> Admit {
        if vouched(key) {
            if self.vouched.contains(key) || self.take_vouched_room(config, key, vouched) {
                return Admit::Kept;
            }
        } else if self.vouched.remove(key) {
            return Admit::Unvouched;
        }
        if self.holds(key) {
            Admit::Kept
        } else if self.unvouched_bound.is_some_and(|bound| rank(skill, key) >= bound) {
            Admit::Refused
        } else {
            Admit::Unvouched
        }
    }

    /// Puts `key` in the vouched room if there is room, first dropping keys nothing vouches
    /// for any more; returns whether it did.
    fn take_vouched_room(&mut self, config: &Config, key: &str, vouched: &dyn Fn(&str) -> bool) -> bool {
        if self.vouched.len() >= config.max_vouched_reporters {
            self.vouched.retain(|k| vouched(k));
        }
        if self.vouched.len() >= config.max_vouched_reporters {
            return false;
        }
        self.vouched.insert(key.to_owned());
        true
    }

    /// After a message of `key` was counted: while unvouched keys overflow their room, lets the
    /// highest-ranked go (or moves it to the vouched room if something vouches for it now).
    /// Returns whether `key`'s message still counts.
    pub(super) fn settle_room(
        &mut self,
        config: &Config,
        skill: &ContentId,
        key: &str,
        admitted: Admit,
        vouched: &dyn Fn(&str) -> bool,
    ) -> Counted {
        if admitted == Admit::Unvouched {
            loop {
                let unvouched = self.unvouched_keys();
                if unvouched.len() <= config.max_reporters {
                    break;
                }
                let Some((worst_rank, worst)) = unvouched.into_iter().map(|k| (rank(skill, k), k.to_owned())).max()
                else {
                    break;
                };
                if vouched(&worst) && self.take_vouched_room(config, &worst, vouched) {
                    continue;
                }
                self.executions.remove(&worst);
                self.adopters.remove(&worst);
                self.unvouched_bound = Some(self.unvouched_bound.map_or(worst_rank, |b| b.min(worst_rank)));
            }
        }
        if self.holds(key) { Counted::Yes } else { Counted::Full }
    }

    /// The keys of both tables outside the vouched room.
    fn unvouched_keys(&self) -> BTreeSet<&str> {
        self.executions
            .keys()
            .chain(self.adopters.keys())
            .map(String::as_str)
            .filter(|k| !self.vouched.contains(*k))
            .collect()
    }
}

#[cfg(test)]
impl Stats {
    /// How many keys hold unvouched room.
    pub(super) fn unvouched_keys_held(&self) -> usize {
        self.unvouched_keys().len()
    }
}
