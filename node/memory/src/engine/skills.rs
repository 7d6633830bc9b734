//! Skills stored as crystals (see [`crate::skills`]), and the lookups the market makes
//! of them: the engine's own, since they write through its batch path and read its map.

use std::collections::HashMap;

use druse_protocol::body::SemanticType;
use druse_protocol::{ContentId, UnixMillis};

use super::add::Durable;
use super::add::Incoming;
use super::{Error, Memory, NewMemory, read};
use crate::crystal::{Crystal, CrystalId, Lifespan, MemoryKind, Namespace, Origin, Status};
use crate::governance::Scope;
use crate::skills::SkillMemory;

/// The memory a skill becomes.
fn incoming(skill: SkillMemory<'_>) -> Incoming {
    // A peer's skill lives in the `swarm` namespace: another node's text, never an episode.
    let (origin, actor, namespace) = match &skill.peer {
        Some(peer) => (Origin::Peer, format!("peer:{peer}"), Namespace::Swarm),
        None => (Origin::Skill, "local_agent".to_owned(), Namespace::Episodic),
    };
    let new = NewMemory {
        namespace,
        kind: MemoryKind::ExplorationNote,
        semantic_type: skill.semantic_type,
        origin,
        scope: Scope::Public,
        lifespan: Lifespan::Permanent,
        ..NewMemory::text(format!("{}: {}", skill.name, skill.text))
    };
    Incoming { new, peer: skill.peer, skill: Some(skill.id), actor }
}

impl Memory {
    /// Stores skills as crystals (origin `peer` with the peer recorded, or `skill` for this
    /// node's own) in one batch: embedded together, written in one batch and made searchable
    /// by one text commit. The batch is made durable with the store's next sync
    /// ([`Durable::WithNextSync`]): a power cut may lose the last skills stored, and the node
    /// indexes again, at start, every skill it keeps that has no crystal. Each crystal records its skill, in the same
    /// write, so [`Memory::skill_crystal`] finds it. Returns one result per skill, in order: a
    /// skill that already has a crystal (or comes twice) is not stored again, and gets that
    /// crystal. A skill the engine refuses (its text too long, say) gets its own error and
    /// holds up no other; after a failure of the embedder or the disk, the skills stored
    /// before it keep their ids and the rest get the error.
    ///
    /// Calls for the same skills must not run at once (the memory worker and its sweep take
    /// turns): the check for a crystal comes before the write.
    pub fn add_skills(&self, skills: Vec<SkillMemory<'_>>, now: UnixMillis) -> Vec<Result<CrystalId, Error>> {
        let mut results: Vec<Result<CrystalId, Error>> = Vec::with_capacity(skills.len());
        let mut items = Vec::new();
        let mut slots = Vec::new();
        let mut first: HashMap<ContentId, usize> = HashMap::new();
        let mut repeats = Vec::new();
        for skill in skills {
            if let Some(crystal) = self.skill_crystal(&skill.id) {
                results.push(Ok(crystal));
                continue;
            }
            if let Some(slot) = first.get(&skill.id) {
                repeats.push((results.len(), *slot));
                results.push(Err(Error::Invalid("not stored".into())));
                continue;
            }
            first.insert(skill.id, results.len());
            let item = incoming(skill);
            match Memory::check(&item.new) {
                Ok(()) => {
                    slots.push(results.len());
                    items.push(item);
                    results.push(Err(Error::Invalid("not stored".into())));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        let (added, outcome) = self.add_incoming(items, now, Durable::WithNextSync);
        let stored = added.len();
        for (slot, one) in slots.iter().zip(added) {
            results[*slot] = Ok(one.crystal.id);
        }
        if let Err(error) = outcome {
            // Past the last skill (making them durable and searchable) the stored ones keep
            // their ids; the failure is still worth an operator's attention.
            tracing::warn!(%error, stored, of = slots.len(), "storing skills in memory failed");
            let message = error.to_string();
            for slot in &slots[stored..] {
                results[*slot] = Err(Error::Invalid(format!("not stored: {message}")));
            }
        }
        for (slot, of) in repeats {
            results[slot] = match &results[of] {
                Ok(crystal) => Ok(*crystal),
                Err(error) => Err(Error::Invalid(error.to_string())),
            };
        }
        results
    }

    /// The crystal that indexes skill `skill`, once [`Memory::add_skills`] stored it.
    pub fn skill_crystal(&self, skill: &ContentId) -> Option<CrystalId> {
        read(&self.scopes).skill(skill)
    }

    /// Rewrites one crystal through `edit` (its id, text, lifecycle and status stay), audited.
    pub fn change(
        &self,
        id: CrystalId,
        actor: &str,
        now: UnixMillis,
        why: &str,
        mut edit: impl FnMut(&mut Crystal),
    ) -> Result<Crystal, Error> {
        let changed = self.rewrite(&[id], actor, why, now, |mut c| {
            edit(&mut c);
            Some(c)
        })?;
        changed.into_iter().next().ok_or(Error::NotFound(id))
    }

    /// Active crystals of one of `types` whose embedding is at least `min_cosine` similar to
    /// crystal `id`'s, leaving out `id` itself and `except`; at most `k` are looked at.
    pub fn similar(
        &self,
        id: CrystalId,
        types: &[SemanticType],
        min_cosine: f32,
        except: &[CrystalId],
        k: usize,
    ) -> Result<Vec<(CrystalId, f32)>, Error> {
        let Some(embedding) = self.embedding(id) else { return Ok(Vec::new()) };
        let nearest = self.nearest(&embedding, k + 1 + except.len())?;
        let crystals = read(&self.crystals);
        Ok(nearest
            .into_iter()
            .filter(|(other, cosine)| *other != id && !except.contains(other) && *cosine >= min_cosine)
            .filter(|(other, _)| {
                crystals.get(other).is_some_and(|c| c.status == Status::Active && types.contains(&c.semantic_type))
            })
            .take(k)
            .collect())
    }
}
