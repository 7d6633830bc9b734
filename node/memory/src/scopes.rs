//! Where each crystal sits: every crystal by namespace, so a search scoped to one namespace
//! reads only its memories; the conversation turns by session in the order they were
//! said, so a turn's predecessor is one ordered lookup instead of a scan of every crystal;
//! and the crystal of each skill the node holds.
//! Derived from the crystals (it holds no state of its own) and rebuilt from them when the
//! engine opens.

use std::collections::{BTreeSet, HashMap};

use rustc_hash::FxHashSet;
use std::ops::Bound::{Excluded, Unbounded};

use druse_protocol::{ContentId, UnixMillis};

use crate::crystal::{Crystal, CrystalId, Namespace};

/// Every crystal by namespace, every crystal that has both a session and a turn time by
/// (namespace, session), and every skill's crystal by the skill's content id.
#[derive(Debug, Default)]
pub(crate) struct Scopes {
    members: HashMap<Namespace, FxHashSet<CrystalId>>,
    sessions: HashMap<(Namespace, String), BTreeSet<(UnixMillis, CrystalId)>>,
    skills: HashMap<ContentId, CrystalId>,
}

impl Scopes {
    /// Records `crystal` in its namespace, and in its session if it is a conversation turn.
    pub(crate) fn insert(&mut self, crystal: &Crystal) {
        // The namespace is cloned only for the first of its crystals: a start files every one.
        match self.members.get_mut(&crystal.namespace) {
            Some(members) => _ = members.insert(crystal.id),
            None => _ = self.members.insert(crystal.namespace.clone(), FxHashSet::from_iter([crystal.id])),
        }
        if let (Some(session), Some(at)) = (&crystal.session, crystal.turn_at) {
            let key = (crystal.namespace.clone(), session.clone());
            self.sessions.entry(key).or_default().insert((at, crystal.id));
        }
        if let Some(skill) = crystal.skill {
            self.skills.insert(skill, crystal.id);
        }
    }

    /// Forgets `crystal` (purged, or about to be recorded under another place).
    pub(crate) fn remove(&mut self, crystal: &Crystal) {
        if let Some(members) = self.members.get_mut(&crystal.namespace) {
            members.remove(&crystal.id);
            if members.is_empty() {
                self.members.remove(&crystal.namespace);
            }
        }
        if let (Some(session), Some(at)) = (&crystal.session, crystal.turn_at) {
            let key = (crystal.namespace.clone(), session.clone());
            if let Some(turns) = self.sessions.get_mut(&key) {
                turns.remove(&(at, crystal.id));
                if turns.is_empty() {
                    self.sessions.remove(&key);
                }
            }
        }
        if let Some(skill) = crystal.skill
            && self.skills.get(&skill) == Some(&crystal.id)
        {
            self.skills.remove(&skill);
        }
    }

    /// Replaces what is recorded for `old` (if anything) with `new`.
    pub(crate) fn update(&mut self, old: Option<&Crystal>, new: &Crystal) {
        if let Some(old) = old {
            if old.namespace == new.namespace
                && old.session == new.session
                && old.turn_at == new.turn_at
                && old.skill == new.skill
            {
                return;
            }
            self.remove(old);
        }
        self.insert(new);
    }

    /// The crystals of `namespace`; none is an empty namespace.
    pub(crate) fn members(&self, namespace: &Namespace) -> Option<&FxHashSet<CrystalId>> {
        self.members.get(namespace)
    }

    /// The crystal that indexes skill `skill`.
    pub(crate) fn skill(&self, skill: &ContentId) -> Option<CrystalId> {
        self.skills.get(skill).copied()
    }

    /// The `n` turns of `session` said just before `at` (strictly earlier, nearest last) and
    /// the `n` said just after it (strictly later, nearest first): a turn's window. Among turns
    /// said at the same moment, the one stored last is nearest.
    pub(crate) fn around(
        &self,
        namespace: &Namespace,
        session: &str,
        at: UnixMillis,
        n: usize,
    ) -> (Vec<CrystalId>, Vec<CrystalId>) {
        let Some(turns) = self.sessions.get(&(namespace.clone(), session.to_owned())) else {
            return (Vec::new(), Vec::new());
        };
        let mut before: Vec<CrystalId> = turns.range(..(at, 0)).rev().take(n).map(|&(_, id)| id).collect();
        before.reverse();
        let after = turns.range((Excluded((at, CrystalId::MAX)), Unbounded)).take(n).map(|&(_, id)| id).collect();
        (before, after)
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
            ..crate::tests::crystal(id, "a turn")
        }
    }

    /// The nearest turn said before `at`, as a window of one holds it.
    fn before(scopes: &Scopes, namespace: &Namespace, session: &str, at: UnixMillis) -> Option<CrystalId> {
        scopes.around(namespace, session, at, 1).0.last().copied()
    }

    /// The nearest turn said after `at`, as a window of one holds it.
    fn after(scopes: &Scopes, namespace: &Namespace, session: &str, at: UnixMillis) -> Option<CrystalId> {
        scopes.around(namespace, session, at, 1).1.first().copied()
    }

    #[test]
    fn before_is_the_latest_earlier_turn_of_the_same_session_and_namespace() {
        let mut scopes = Scopes::default();
        let alice = Namespace::User("alice".into());
        for c in [
            turn(1, "user:alice", "s1", 100),
            turn(2, "user:alice", "s1", 300),
            turn(3, "user:alice", "s2", 200),
            turn(4, "user:bob", "s1", 250),
            turn(5, "user:alice", "s1", 200),
        ] {
            scopes.insert(&c);
        }
        assert_eq!(before(&scopes, &alice, "s1", 300), Some(5));
        assert_eq!(before(&scopes, &alice, "s1", 301), Some(2));
        assert_eq!(before(&scopes, &alice, "s1", 200), Some(1));
        assert_eq!(before(&scopes, &alice, "s1", 100), None);
        assert_eq!(scopes.around(&alice, "s1", 200, 1), (vec![1], vec![2]));
        assert_eq!(scopes.around(&alice, "s1", 300, 2), (vec![1, 5], vec![]));
        assert_eq!(scopes.around(&alice, "s1", 100, 0), (vec![], vec![]));
        assert_eq!(scopes.around(&alice, "s3", 100, 1), (vec![], vec![]));
        assert_eq!(before(&scopes, &alice, "s3", 1000), None);
        assert_eq!(after(&scopes, &alice, "s1", 100), Some(5));
        assert_eq!(after(&scopes, &alice, "s1", 200), Some(2));
        assert_eq!(after(&scopes, &alice, "s1", 300), None);
        assert_eq!(after(&scopes, &alice, "s3", 0), None);
    }

    #[test]
    fn a_crystal_is_a_member_of_its_namespace_until_it_moves_or_goes() {
        let mut scopes = Scopes::default();
        let (alice, bob) = (Namespace::User("alice".into()), Namespace::User("bob".into()));
        let note = Crystal { namespace: alice.clone(), ..crate::tests::crystal(7, "not a turn") };
        scopes.insert(&turn(1, "user:alice", "s1", 100));
        scopes.insert(&note);
        scopes.insert(&turn(2, "user:bob", "s1", 100));
        let members = |scopes: &Scopes, ns: &Namespace| {
            let mut ids: Vec<CrystalId> = scopes.members(ns).into_iter().flatten().copied().collect();
            ids.sort_unstable();
            ids
        };
        assert_eq!(members(&scopes, &alice), [1, 7], "a memory that is not a turn is a member too");
        assert_eq!(members(&scopes, &bob), [2]);
        let moved = Crystal { namespace: bob.clone(), ..note.clone() };
        scopes.update(Some(&note), &moved);
        assert_eq!(members(&scopes, &alice), [1]);
        assert_eq!(members(&scopes, &bob), [2, 7]);
        scopes.remove(&turn(1, "user:alice", "s1", 100));
        assert!(scopes.members(&alice).is_none(), "an emptied namespace is forgotten");
    }

    #[test]
    fn a_removed_or_moved_turn_is_no_longer_found() {
        let mut scopes = Scopes::default();
        let alice = Namespace::User("alice".into());
        let first = turn(1, "user:alice", "s1", 100);
        scopes.insert(&first);
        let moved = turn(1, "user:alice", "s2", 100);
        scopes.update(Some(&first), &moved);
        assert_eq!(before(&scopes, &alice, "s1", 500), None);
        assert_eq!(before(&scopes, &alice, "s2", 500), Some(1));
        scopes.remove(&moved);
        assert_eq!(before(&scopes, &alice, "s2", 500), None);
    }

    #[test]
    fn a_skill_is_found_by_its_crystal_until_that_crystal_goes() {
        let mut scopes = Scopes::default();
        let (one, two) = (ContentId::of(b"skill one"), ContentId::of(b"skill two"));
        let first = Crystal { skill: Some(one), ..crate::tests::crystal(3, "a skill") };
        scopes.insert(&first);
        scopes.insert(&crate::tests::crystal(4, "not a skill"));
        assert_eq!(scopes.skill(&one), Some(3));
        assert_eq!(scopes.skill(&two), None);
        let relinked = Crystal { skill: Some(two), ..first.clone() };
        scopes.update(Some(&first), &relinked);
        assert_eq!((scopes.skill(&one), scopes.skill(&two)), (None, Some(3)));
        scopes.remove(&relinked);
        assert_eq!(scopes.skill(&two), None);
    }
}
