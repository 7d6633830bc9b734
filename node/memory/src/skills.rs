//! Skills in memory: a skill the node holds (its own or one from the swarm) is a frozen crystal
//! of the memory engine, so recall finds it, the market can count similar skills for scarcity,
//! and a bounty match can raise its curiosity.
//!
//! This module holds what a skill brings to memory; storing it is the engine's
//! (`Memory::add_skills`).

use druse_protocol::ContentId;
use druse_protocol::body::SemanticType;

/// A skill to remember.
#[derive(Debug, Clone)]
pub struct SkillMemory<'a> {
    /// The skill's content id: its crystal is found by it ([`crate::Memory::skill_crystal`]).
    pub id: ContentId,
    pub name: &'a str,
    pub text: &'a str,
    pub semantic_type: SemanticType,
    /// The publishing peer, for a skill from the swarm; `None` for this node's own.
    pub peer: Option<String>,
}
