//! What the agent keeps across restarts, in the node's database (tree `agent`): the
//! notifications it has handled (so none is answered twice), who consented to be tagged,
//! the pending approval requests, and how often each tool sequence succeeded.

use druse_protocol::UnixMillis;

use super::rules::Gate;

const HANDLED: &[u8] = b"h/";
const CONSENT: &[u8] = b"c/";
const SEQUENCE: &[u8] = b"s/";
const GATE: &[u8] = b"gate";
const PATTERN: &[u8] = b"p/";
const PUBLISHED: &[u8] = b"u/";
const SCHEDULE: &[u8] = b"schedule";

/// Handled notifications are forgotten after this long (they are long out of the feed).
const HANDLED_KEEP_MS: u64 = 14 * 24 * 3600 * 1000;

/// The agent's persistent state.
#[derive(Debug, Clone)]
pub(crate) struct State {
    tree: sled::Tree,
}

fn key(prefix: &[u8], rest: &str) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(rest.as_bytes());
    k
}

impl State {
    pub(crate) fn open(db: &sled::Db) -> Result<Self, sled::Error> {
        Ok(Self { tree: db.open_tree("agent")? })
    }

    /// Whether the notification `uri` (with its reason) was handled before.
    pub(crate) fn handled(&self, id: &str) -> bool {
        self.tree.contains_key(key(HANDLED, id)).unwrap_or(false)
    }

    /// Records that `id` was handled, durably (a restart must not answer it again).
    pub(crate) fn mark_handled(&self, id: &str, now: UnixMillis) -> Result<(), sled::Error> {
        self.tree.insert(key(HANDLED, id), &now.to_be_bytes())?;
        self.tree.flush()?;
        Ok(())
    }

    /// Forgets handled notifications older than two weeks; returns how many.
    pub(crate) fn prune(&self, now: UnixMillis) -> usize {
        let old: Vec<sled::IVec> = self
            .tree
            .scan_prefix(HANDLED)
            .filter_map(Result::ok)
            .filter(|(_, v)| {
                v.as_ref().try_into().map(u64::from_be_bytes).is_ok_and(|at| now.saturating_sub(at) > HANDLED_KEEP_MS)
            })
            .map(|(k, _)| k)
            .collect();
        for k in &old {
            let _ = self.tree.remove(k);
        }
        old.len()
    }

    /// Whether `did` consented to be tagged.
    pub(crate) fn consented(&self, did: &str) -> bool {
        self.tree.contains_key(key(CONSENT, did)).unwrap_or(false)
    }

    pub(crate) fn set_consent(&self, did: &str, yes: bool) -> Result<(), sled::Error> {
        if yes {
            self.tree.insert(key(CONSENT, did), &[1])?;
        } else {
            self.tree.remove(key(CONSENT, did))?;
        }
        self.tree.flush()?;
        Ok(())
    }

    /// The pending approval requests.
    pub(crate) fn gate(&self) -> Gate {
        self.tree.get(GATE).ok().flatten().and_then(|v| serde_json::from_slice(&v).ok()).unwrap_or_default()
    }

    pub(crate) fn save_gate(&self, gate: &Gate) -> Result<(), sled::Error> {
        let bytes = serde_json::to_vec(gate).unwrap_or_default();
        self.tree.insert(GATE, bytes)?;
        self.tree.flush()?;
        Ok(())
    }

    /// Counts one more success of a tool sequence; returns the new count.
    pub(crate) fn count_sequence(&self, sequence: &str) -> Result<u64, sled::Error> {
        let k = key(SEQUENCE, sequence);
        let next = self.tree.update_and_fetch(&k, |old| {
            let n = old.and_then(|v| v.try_into().ok()).map(u64::from_be_bytes).unwrap_or(0);
            Some((n + 1).to_be_bytes().to_vec())
        })?;
        self.tree.flush()?;
        Ok(next.and_then(|v| v.as_ref().try_into().ok()).map(u64::from_be_bytes).unwrap_or(0))
    }
}

impl State {
    /// What the schedule of the entry points remembers.
    pub(crate) fn schedule(&self) -> super::schedule::Schedule {
        self.tree.get(SCHEDULE).ok().flatten().and_then(|v| serde_json::from_slice(&v).ok()).unwrap_or_default()
    }

    pub(crate) fn save_schedule(&self, schedule: &super::schedule::Schedule) -> Result<(), sled::Error> {
        let bytes = serde_json::to_vec(schedule).unwrap_or_default();
        self.tree.insert(SCHEDULE, bytes)?;
        self.tree.flush()?;
        Ok(())
    }

    /// How often a tool sequence succeeded so far.
    pub(crate) fn count_of(&self, sequence: &str) -> u64 {
        self.tree
            .get(key(SEQUENCE, sequence))
            .ok()
            .flatten()
            .and_then(|v| v.as_ref().try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0)
    }

    /// Records that the task-pattern crystal `crystal` stands for `sequence`.
    pub(crate) fn set_pattern(&self, crystal: u64, sequence: &str) -> Result<(), sled::Error> {
        self.tree.insert(key(PATTERN, &crystal.to_string()), sequence.as_bytes())?;
        self.tree.flush()?;
        Ok(())
    }

    /// The tool sequence a task-pattern crystal stands for.
    pub(crate) fn pattern(&self, crystal: u64) -> Option<String> {
        let v = self.tree.get(key(PATTERN, &crystal.to_string())).ok()??;
        String::from_utf8(v.to_vec()).ok()
    }

    /// Records the swarm listing of a tool sequence's skill.
    pub(crate) fn set_published(&self, sequence: &str, content_id: &str) -> Result<(), sled::Error> {
        self.tree.insert(key(PUBLISHED, sequence), content_id.as_bytes())?;
        self.tree.flush()?;
        Ok(())
    }

    /// The swarm listing of a tool sequence's skill, once published.
    pub(crate) fn published(&self, sequence: &str) -> Option<String> {
        let v = self.tree.get(key(PUBLISHED, sequence)).ok()??;
        String::from_utf8(v.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = crate::store::reopen(|| sled::open(dir.path()));
            let state = State::open(&db).unwrap();
            assert!(!state.handled("at://a#mention"));
            state.mark_handled("at://a#mention", 1_000).unwrap();
            state.set_consent("did:plc:x", true).unwrap();
            assert_eq!(state.count_sequence("reply").unwrap(), 1);
            assert_eq!(state.count_sequence("reply").unwrap(), 2);
        }
        let db = crate::store::reopen(|| sled::open(dir.path()));
        let state = State::open(&db).unwrap();
        assert!(state.handled("at://a#mention"));
        assert!(state.consented("did:plc:x") && !state.consented("did:plc:y"));
        assert_eq!(state.count_sequence("reply").unwrap(), 3);
        assert_eq!(state.prune(1_000 + HANDLED_KEEP_MS), 0);
        assert_eq!(state.prune(1_001 + HANDLED_KEEP_MS), 1);
        assert!(!state.handled("at://a#mention"));
    }
}
