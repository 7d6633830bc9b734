//! The memory worker: puts the skills ingestion stored into the memory engine and applies
//! bounty boosts to their crystals, in batches; and the sweep that makes up for work the
//! worker's queue dropped or that failed, until it is done. Both run their work on the
//! `druse-index` background thread and its pool, at a lower CPU priority
//! ([`druse_memory::background`]): under a flood of gossip, ingestion keeps the CPU and indexing
//! catches up when it is free. That thread runs one job at a time and is the only caller of
//! `remember` and `boost`: it is what keeps a skill from being indexed, or a boost applied, twice.

use std::sync::atomic::Ordering;

use druse_protocol::ContentId;
use tokio::sync::mpsc;

use super::{Error, Node};
use crate::ingest::Effect;
use crate::market;
use crate::skill::{Provenance, Skill};
use druse_memory::Memory;
use druse_memory::crystal::CrystalId;
use druse_memory::skills::SkillMemory;
use druse_protocol::now_ms;

/// How often, at most, skills missed by a full effects queue are swept into memory.
const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Skills indexed in memory together: the effects waiting at once, up to this many, share one
/// embedding call, one durable write and one text commit. More at once indexes faster but
/// takes more of the CPU from ingestion while a flood of gossip arrives.
const INDEX_BATCH: usize = 256;

/// Skills a sweep indexes in one call: the memory engine embeds them in chunks, each analysed
/// while the one before is written, so a backlog keeps both stages busy.
const SWEEP_BATCH: usize = 1024;

impl Node {
    /// Puts skills into memory and applies bounty boosts, taking whatever waits (up to
    /// `INDEX_BATCH`) as one batch.
    pub(super) async fn effects_loop(self, mut effects: mpsc::Receiver<Effect>) {
        let mut batch = Vec::with_capacity(INDEX_BATCH);
        while effects.recv_many(&mut batch, INDEX_BATCH).await > 0 {
            let node = self.clone();
            let work = std::mem::take(&mut batch);
            let done = self
                .inner
                .memory
                .background(move |memory| {
                    let (mut new, mut boosts) = (Vec::new(), Vec::new());
                    for effect in work {
                        match effect {
                            Effect::NewSkill(skill) => new.push(*skill),
                            Effect::Boost(id) => boosts.push(id),
                        }
                    }
                    if node.remember(memory, &new).iter().any(Option::is_none) {
                        tracing::warn!(skills = new.len(), "could not index every skill in memory; the sweep retries");
                        node.inner.owed.store(true, Ordering::Relaxed);
                    }
                    for id in boosts {
                        if let Err(error) = node.boost(memory, id) {
                            tracing::warn!(%error, skill = %id, "could not boost a skill's crystal; the sweep retries");
                            node.inner.owed.store(true, Ordering::Relaxed);
                        }
                    }
                })
                .await;
            if let Err(error) = done {
                tracing::warn!(%error, "the memory worker failed");
            }
            // What a full queue dropped is swept as soon as the queue runs dry, not at the
            // sweep's next tick: a flood of gossip is indexed without a pause after it.
            if effects.is_empty() {
                self.sweep_owed().await;
            }
        }
    }

    /// Sweeps if work was dropped or failed since the last sweep, and owes it again if the
    /// sweep fails too.
    async fn sweep_owed(&self) {
        if self.inner.owed.swap(false, Ordering::Relaxed) && !self.sweep().await {
            self.inner.owed.store(true, Ordering::Relaxed);
        }
    }

    /// Indexes skills that have no crystal and applies the boosts owed: once at start (a crash
    /// may have come between storing a skill and indexing it), then whenever work was dropped
    /// or failed, at most every `SWEEP_INTERVAL`, until it is done.
    pub(super) async fn sweep_loop(self) {
        self.sweep().await;
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            self.sweep_owed().await;
        }
    }

    /// Indexes every skill that has no crystal yet, then applies every bounty boost owed;
    /// false if something failed (it is tried again).
    async fn sweep(&self) -> bool {
        let node = self.clone();
        let swept = self
            .inner
            .memory
            .background(move |memory| -> Result<(usize, usize), Error> {
                // Only the records of skills the memory engine has no crystal for are read.
                let mut waiting = node.inner.store.skills_where(|id| memory.skill_crystal(id).is_none());
                let mut swept = 0;
                loop {
                    let chunk: Vec<Skill> = waiting
                        .by_ref()
                        .filter(|skill| !skill.as_ref().is_ok_and(|s: &Skill| s.crystal.is_some()))
                        .take(SWEEP_BATCH)
                        .collect::<Result<_, _>>()?;
                    if chunk.is_empty() {
                        break;
                    }
                    swept += chunk.len();
                    node.remember(memory, &chunk);
                }
                Ok((swept, node.boost_owed(memory)?))
            })
            .await;
        match swept.map_err(Error::from).and_then(|r| r) {
            Ok((0, 0)) => true,
            Ok((skills, boosted)) => {
                tracing::info!(skills, boosted, "swept skills and bounty boosts into memory");
                true
            }
            Err(error) => {
                tracing::warn!(%error, "could not sweep skills into memory");
                false
            }
        }
    }

    /// The crystal of a stored skill, storing the skill as one first if it has none (see
    /// [`Node::remember`]); `None`: no such skill, or memory could not store it.
    fn index_skill(&self, memory: &Memory, id: ContentId) -> Result<Option<CrystalId>, Error> {
        let Some(skill) = self.skill(&id)? else { return Ok(None) };
        Ok(self.remember(memory, &[skill]).pop().flatten())
    }

    /// Stores skills as memory crystals, with one embedding call, one durable write and one
    /// text commit for all that have no crystal yet, and returns each one's crystal, in order.
    /// The memory engine keeps which crystal each skill became, in the crystal's own write. A
    /// skill the memory refuses, or that a failure of the embedder or the disk left out, is
    /// logged and gets `None`; the others are indexed.
    fn remember(&self, memory: &Memory, skills: &[Skill]) -> Vec<Option<CrystalId>> {
        let memories = skills
            .iter()
            .filter(|skill| skill.crystal.is_none())
            .map(|skill| SkillMemory {
                id: skill.id,
                name: &skill.listing.name,
                text: &skill.listing.text,
                semantic_type: skill.listing.semantic_type,
                peer: (skill.origin == Provenance::Peer).then(|| skill.author_peer.clone()),
            })
            .collect();
        let mut stored = memory.add_skills(memories, now_ms()).into_iter();
        skills
            .iter()
            .map(|skill| {
                if skill.crystal.is_some() {
                    return skill.crystal;
                }
                match stored.next()? {
                    Ok(crystal) => Some(crystal),
                    Err(error) => {
                        tracing::warn!(%error, skill = %skill.id, "could not index a skill in memory");
                        None
                    }
                }
            })
            .collect()
    }

    /// Raises the curiosity of a skill's crystal by the boost of each matched bounty it has
    /// not had yet (indexing it first if the match came before the skill reached memory), and
    /// records them as had on the crystal, in the same write ([`market::BOUNTIES_BOOSTED`]):
    /// a boost is applied once even when the worker's queue dropped it and a sweep finds it
    /// owed, and no second message to the ingest actor is needed. Answers whether it boosted.
    fn boost(&self, memory: &Memory, id: ContentId) -> Result<bool, Error> {
        let stats = self.market().stats(&id)?;
        let matched = stats.boosts_owed();
        if matched.is_empty() {
            return Ok(false);
        }
        let crystal = match memory.skill_crystal(&id) {
            Some(crystal) => crystal,
            None => match self.index_skill(memory, id)? {
                Some(crystal) => crystal,
                None => return Ok(false),
            },
        };
        let had = memory.get(crystal).map(|c| market::bounties_boosted(&c)).unwrap_or_default();
        let owed: Vec<String> = matched.into_iter().filter(|b| !had.contains(b)).collect();
        if owed.is_empty() {
            return Ok(false);
        }
        let amount = self.inner.market.config.bounty_curiosity_boost * owed.len() as f64;
        let why = format!("bounty match ({}): curiosity boost", owed.join(", "));
        memory.change(crystal, "market", now_ms(), &why, |c| {
            c.curiosity_boost = (c.curiosity_boost + amount).clamp(0.0, 1.0);
            market::record_boosts(c, &owed);
        })?;
        Ok(true)
    }

    /// Applies every boost owed to a skill's crystal: the sweep's half for dropped boosts.
    fn boost_owed(&self, memory: &Memory) -> Result<usize, Error> {
        let matched = self.market().skills_with_evidence(|stats| !stats.boosts_owed().is_empty())?;
        let mut boosted = 0;
        for id in matched {
            boosted += usize::from(self.boost(memory, id)?);
        }
        Ok(boosted)
    }
}
