//! What a crystal is recalled by besides its own text (the crystal it corrects, the turns
//! said around it, its day), as its BM25 document and its context vector.

use std::collections::HashMap;

use druse_protocol::UnixMillis;

use super::{Error, Memory, kind_tag, read, said_at, semantic_tag};
use crate::crystal::{Crystal, CrystalId, Namespace};
use crate::{dates, text};

impl Memory {
    /// The turn said just before `turn_at` in the same conversation.
    pub(super) fn previous_turn(&self, namespace: &Namespace, session: &str, turn_at: UnixMillis) -> Option<Crystal> {
        let id = read(&self.scopes).before(namespace, session, turn_at)?;
        self.get(id)
    }

    /// The turn said just after `turn_at` in the same conversation.
    pub(super) fn next_turn(&self, namespace: &Namespace, session: &str, turn_at: UnixMillis) -> Option<Crystal> {
        let id = read(&self.scopes).after(namespace, session, turn_at)?;
        self.get(id)
    }

    /// What a crystal is recalled by besides its own text: the crystal it superseded (a
    /// correction is recalled by what it corrects) and, for a conversation turn when context
    /// indexing is on, the turn before it (and after it, with `next_turn_context`) and the
    /// day it was said.
    pub(super) fn context(&self, crystal: &Crystal) -> (Vec<Crystal>, Option<String>) {
        let mut parts = Vec::new();
        let mut day = None;
        if let Some(old) = crystal.supersedes.and_then(|s| self.get(s)) {
            parts.push(old);
        }
        if self.context_indexing()
            && let (Some(session), Some(turn_at)) = (&crystal.session, crystal.turn_at)
        {
            parts.extend(self.previous_turn(&crystal.namespace, session, turn_at));
            if self.tuning().next_turn_context {
                parts.extend(self.next_turn(&crystal.namespace, session, turn_at));
            }
            day = Some(dates::describe(turn_at));
        }
        (parts, day)
    }

    /// What a crystal is indexed as for BM25: its text, and as context the texts of the
    /// crystals it is recalled by and its day (see [`Memory::context`]).
    pub(super) fn document(&self, crystal: &Crystal) -> text::Document {
        let (parts, day) = self.context(crystal);
        self.document_of(crystal, parts, day)
    }

    pub(super) fn document_of(&self, crystal: &Crystal, parts: Vec<Crystal>, day: Option<String>) -> text::Document {
        let tags = text::Tags {
            namespace: crystal.namespace.as_string(),
            kind: kind_tag(crystal.kind),
            semantic_type: semantic_tag(crystal.semantic_type),
            session: crystal.session.clone(),
            at: said_at(crystal),
        };
        let context = parts.into_iter().map(|c| c.text).collect();
        text::Document { text: crystal.text.clone(), context, day, tags }
    }

    /// A crystal's context vector: the mean direction of its own vector and the stored vectors
    /// of the crystals it is recalled by (with the day's vector when
    /// [`Tuning::day_in_context_vector`]), or `None` when there is nothing to add to its own.
    /// Summing stored vectors costs no forward pass of the model, where embedding the joined
    /// texts cost a second, longer one per add: on the LoCoMo dev split with MiniLM both give
    /// the same recall (see `node/README.md`), and an add embeds one text instead of two.
    pub(super) fn context_vector(
        &self,
        own: &[f32],
        parts: &[Crystal],
        day: Option<&str>,
        fresh: &HashMap<CrystalId, Vec<f32>>,
    ) -> Result<Option<Vec<f32>>, Error> {
        let mut others: Vec<Vec<f32>> = parts
            .iter()
            .filter_map(|c| fresh.get(&c.id).cloned().or_else(|| self.embedding(c.id)))
            .filter(|v| v.len() == own.len())
            .collect();
        if let Some(day) = day.filter(|_| self.tuning().day_in_context_vector) {
            others.push(self.embed_one(day)?);
        }
        if others.is_empty() {
            return Ok(None);
        }
        let mut sum = own.to_vec();
        for other in &others {
            for (s, x) in sum.iter_mut().zip(other) {
                *s += x;
            }
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !norm.is_finite() || norm <= f32::EPSILON {
            return Ok(None);
        }
        Ok(Some(sum.into_iter().map(|x| x / norm).collect()))
    }
}
