//! What a crystal is recalled by besides its own text (the crystal it corrects, the turns
//! said around it, its day), as its BM25 document and its context vector.

use std::collections::HashMap;

use super::{Error, Memory, Tuning, kind_tag, read, said_at, semantic_tag};
use crate::crystal::{Crystal, CrystalId};
use crate::{dates, text};

/// What a crystal is recalled by besides its own text.
#[derive(Debug, Default)]
pub(super) struct Around {
    /// The crystal it superseded: a correction is recalled by what it corrects.
    superseded: Option<Crystal>,
    /// For a conversation turn (when context indexing is on), the turns said just before it,
    /// nearest last: the window's ([`Tuning::window_turns`]), and at least the one before it,
    /// which its context vector holds.
    before: Vec<Crystal>,
    /// The turns of its window said just after it, nearest first.
    after: Vec<Crystal>,
    /// The day a conversation turn was said, in words and as a date.
    day: Option<String>,
}

impl Around {
    /// The day a conversation turn was said, in words and as a date.
    pub(super) fn day(&self) -> Option<&str> {
        self.day.as_deref()
    }

    /// What a crystal's context vector is made of besides its own: the crystal it superseded
    /// and the turn said just before it.
    pub(super) fn vector_parts(&self) -> Vec<&Crystal> {
        self.superseded.iter().chain(self.before.last()).collect()
    }
}

impl Memory {
    /// What a crystal is recalled by besides its own text: the crystal it superseded and, for
    /// a conversation turn when context indexing is on, the turns said around it and its day.
    pub(super) fn context(&self, crystal: &Crystal) -> Around {
        let mut around = Around { superseded: crystal.supersedes.and_then(|s| self.get(s)), ..Around::default() };
        if self.context_indexing()
            && let (Some(session), Some(turn_at)) = (&crystal.session, crystal.turn_at)
        {
            let n = self.window_turns();
            let (before, after) = read(&self.scopes).around(&crystal.namespace, session, turn_at, n.max(1));
            around.before = before.into_iter().filter_map(|id| self.get(id)).collect();
            around.after = after.into_iter().take(n).filter_map(|id| self.get(id)).collect();
            around.day = Some(dates::describe(turn_at));
        }
        around
    }

    /// How many turns on each side of a conversation turn its text document holds.
    fn window_turns(&self) -> usize {
        self.tuning().window_turns.min(Tuning::MAX_WINDOW_TURNS)
    }

    /// The turns whose windows hold `crystal` (the [`Tuning::window_turns`] said on each side
    /// of it): when it is stored, their text documents change too.
    pub(super) fn windows_holding(&self, crystal: &Crystal) -> Vec<CrystalId> {
        let n = self.window_turns();
        match (&crystal.session, crystal.turn_at) {
            (Some(session), Some(turn_at)) if n > 0 && self.context_indexing() => {
                let (before, after) = read(&self.scopes).around(&crystal.namespace, session, turn_at, n);
                before.into_iter().chain(after).filter(|id| *id != crystal.id).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Indexes the text documents of `turns` again (their windows changed), those still
    /// stored; returns which were.
    pub(super) fn index_windows(&self, turns: Vec<CrystalId>) -> Result<Vec<CrystalId>, Error> {
        let mut indexed = Vec::with_capacity(turns.len());
        for id in turns {
            if let Some(turn) = self.get(id) {
                self.text.upsert(id, &self.document(&turn))?;
                indexed.push(id);
            }
        }
        Ok(indexed)
    }

    /// The turns said just before and just after `crystal` in its conversation.
    pub(super) fn neighbours(&self, crystal: &Crystal) -> [Option<CrystalId>; 2] {
        let (Some(session), Some(at)) = (&crystal.session, crystal.turn_at) else { return [None, None] };
        let (before, after) = read(&self.scopes).around(&crystal.namespace, session, at, 1);
        [before.last().copied(), after.first().copied()]
    }

    /// What a crystal is indexed as for BM25: its text, and what it is recalled by (see
    /// [`Memory::context`]).
    pub(super) fn document(&self, crystal: &Crystal) -> text::Document {
        self.document_of(crystal, &self.context(crystal))
    }

    /// [`Memory::document`] from what [`Memory::context`] found.
    pub(super) fn document_of(&self, crystal: &Crystal, around: &Around) -> text::Document {
        let tags = text::Tags {
            namespace: crystal.namespace.as_string(),
            kind: kind_tag(crystal.kind),
            semantic_type: semantic_tag(crystal.semantic_type),
            session: crystal.session.clone(),
            at: said_at(crystal),
        };
        let context = around.superseded.iter().map(|c| c.text.clone()).collect();
        let window = around.day.as_ref().map(|day| {
            let n = self.window_turns();
            let before = &around.before[around.before.len().saturating_sub(n)..];
            text::Window {
                before: before.iter().map(|c| c.text.clone()).collect(),
                after: around.after.iter().map(|c| c.text.clone()).collect(),
                day: day.clone(),
            }
        });
        text::Document { text: crystal.text.clone(), context, window, tags }
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
        around: &Around,
        fresh: &HashMap<CrystalId, Vec<f32>>,
    ) -> Result<Option<Vec<f32>>, Error> {
        let mut others: Vec<Vec<f32>> = around
            .vector_parts()
            .into_iter()
            .filter_map(|c| fresh.get(&c.id).cloned().or_else(|| self.embedding(c.id)))
            .filter(|v| v.len() == own.len())
            .collect();
        if let Some(day) = around.day().filter(|_| self.tuning().day_in_context_vector) {
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
