//! Conversation turns by session, in the order they were said, so a turn's predecessor is one
//! ordered lookup instead of a scan of every crystal. Derived from the crystals (it holds no
//! state of its own) and rebuilt from them when the engine opens.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Unbounded};

use druse_protocol::UnixMillis;

use crate::memory::crystal::{Crystal, CrystalId, Namespace};

/// Every crystal that has both a session and a turn time, grouped by (namespace, session).
#[derive(Debug, Default)]
pub(crate) struct Turns {
    sessions: HashMap<(Namespace, String), BTreeSet<(UnixMillis, CrystalId)>>,
}

impl Turns {
    /// Records `crystal` if it is a conversation turn.
    pub(crate) fn insert(&mut self, crystal: &Crystal) {
        if let (Some(session), Some(at)) = (&crystal.session, crystal.turn_at) {
            let key = (crystal.namespace.clone(), session.clone());
            self.sessions.entry(key).or_default().insert((at, crystal.id));
        }
    }

    /// Forgets `crystal` (purged, or about to be recorded under another session or time).
    pub(crate) fn remove(&mut self, crystal: &Crystal) {
        if let (Some(session), Some(at)) = (&crystal.session, crystal.turn_at) {
            let key = (crystal.namespace.clone(), session.clone());
            if let Some(turns) = self.sessions.get_mut(&key) {
                turns.remove(&(at, crystal.id));
                if turns.is_empty() {
                    self.sessions.remove(&key);
                }
            }
        }
    }

    /// Replaces what is recorded for `old` (if anything) with `new`.
    pub(crate) fn update(&mut self, old: Option<&Crystal>, new: &Crystal) {
        if let Some(old) = old {
            if old.namespace == new.namespace && old.session == new.session && old.turn_at == new.turn_at {
                return;
            }
            self.remove(old);
        }
        self.insert(new);
    }

    /// The first turn of `session` said strictly after `at`.
    pub(crate) fn after(&self, namespace: &Namespace, session: &str, at: UnixMillis) -> Option<CrystalId> {
        let turns = self.sessions.get(&(namespace.clone(), session.to_owned()))?;
        turns.range((Excluded((at, CrystalId::MAX)), Unbounded)).next().map(|&(_, id)| id)
    }

    /// The last turn of `session` said strictly before `at` (among turns said at the same
    /// moment, the one stored last).
    pub(crate) fn before(&self, namespace: &Namespace, session: &str, at: UnixMillis) -> Option<CrystalId> {
        let turns = self.sessions.get(&(namespace.clone(), session.to_owned()))?;
        turns.range(..(at, 0)).next_back().map(|&(_, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: CrystalId, namespace: &str, session: &str, at: UnixMillis) -> Crystal {
        Crystal {
            namespace: Namespace::try_from(namespace.to_owned()).unwrap(),
            session: Some(session.into()),
            turn_at: Some(at),
            ..crate::memory::tests::crystal(id, "a turn")
        }
    }

    #[test]
    fn before_is_the_latest_earlier_turn_of_the_same_session_and_namespace() {
        let mut turns = Turns::default();
        let alice = Namespace::User("alice".into());
        for c in [
            turn(1, "user:alice", "s1", 100),
            turn(2, "user:alice", "s1", 300),
            turn(3, "user:alice", "s2", 200),
            turn(4, "user:bob", "s1", 250),
            turn(5, "user:alice", "s1", 200),
        ] {
            turns.insert(&c);
        }
        assert_eq!(turns.before(&alice, "s1", 300), Some(5));
        assert_eq!(turns.before(&alice, "s1", 301), Some(2));
        assert_eq!(turns.before(&alice, "s1", 200), Some(1));
        assert_eq!(turns.before(&alice, "s1", 100), None);
        assert_eq!(turns.before(&alice, "s3", 1000), None);
        assert_eq!(turns.after(&alice, "s1", 100), Some(5));
        assert_eq!(turns.after(&alice, "s1", 200), Some(2));
        assert_eq!(turns.after(&alice, "s1", 300), None);
        assert_eq!(turns.after(&alice, "s3", 0), None);
    }

    #[test]
    fn a_removed_or_moved_turn_is_no_longer_found() {
        let mut turns = Turns::default();
        let alice = Namespace::User("alice".into());
        let first = turn(1, "user:alice", "s1", 100);
        turns.insert(&first);
        let moved = turn(1, "user:alice", "s2", 100);
        turns.update(Some(&first), &moved);
        assert_eq!(turns.before(&alice, "s1", 500), None);
        assert_eq!(turns.before(&alice, "s2", 500), Some(1));
        turns.remove(&moved);
        assert_eq!(turns.before(&alice, "s2", 500), None);
    }
}
