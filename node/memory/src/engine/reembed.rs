//! Vectors follow the embedder: a store whose vectors another embedder made (a node that
//! moved from hashing to MiniLM) is re-embedded when the engine opens, so recall never
//! compares a query with vectors of another model.

use std::collections::HashMap;
use std::time::Instant;

use super::codec::encode_vector;
use super::{CONTEXT, EMBEDDING, Error, Memory, SENTENCES, key, read};
use crate::crystal::{Crystal, CrystalId};

/// Where the store records which embedder made its vectors.
const EMBEDDER: &[u8] = b"s/embedder";

/// Crystals embedded per call while re-embedding.
const CHUNK: usize = 256;

impl Memory {
    /// Re-embeds every stored crystal, and recomputes its context vector, when the store's
    /// vectors were made by another embedder than this one, or by one it did not record (a
    /// store written before it recorded one). Runs before the vectors are indexed; returns how
    /// many crystals were re-embedded. The embedder's name is written last, so a start
    /// interrupted halfway re-embeds again.
    pub(super) fn reembed_if_changed(&self) -> Result<usize, Error> {
        let name = self.embedder.name();
        let stored = self.tree.get(EMBEDDER)?;
        if stored.as_deref() == Some(name.as_bytes()) {
            return Ok(0);
        }
        let mut crystals: Vec<Crystal> = read(&self.crystals).values().cloned().collect();
        if crystals.is_empty() {
            self.tree.insert(EMBEDDER, name.as_bytes())?;
            return Ok(0);
        }
        crystals.sort_by_key(|c| c.id);
        let started = Instant::now();
        let was = stored.map(|b| String::from_utf8_lossy(&b).into_owned());
        tracing::info!(from = ?was, to = name, crystals = crystals.len(), "re-embedding memory for a new embedder");
        // Own vectors first, then context vectors from them: a context may name a later crystal.
        for chunk in crystals.chunks(CHUNK) {
            let texts: Vec<&str> = chunk.iter().map(|c| c.text.as_str()).collect();
            let vectors = self.embed_with_sentences(&texts)?;
            let mut batch = self.batch();
            for (c, (vector, sentences)) in chunk.iter().zip(&vectors) {
                self.put(&mut batch, &key(EMBEDDING, c.id), encode_vector(vector));
                match sentences.is_empty() {
                    true => self.delete(&mut batch, &key(SENTENCES, c.id)),
                    false => self.put(&mut batch, &key(SENTENCES, c.id), encode_vector(sentences)),
                }
            }
            self.apply(batch)?;
        }
        let none: HashMap<CrystalId, Vec<f32>> = HashMap::new();
        for chunk in crystals.chunks(CHUNK) {
            let mut batch = self.batch();
            for c in chunk {
                let Some(own) = self.embedding(c.id) else { continue };
                match self.context_vector(&own, &self.context(c), &none)? {
                    Some(vector) => self.put(&mut batch, &key(CONTEXT, c.id), encode_vector(&vector)),
                    None => self.delete(&mut batch, &key(CONTEXT, c.id)),
                }
            }
            self.apply(batch)?;
        }
        self.tree.insert(EMBEDDER, name.as_bytes())?;
        self.sync()?;
        tracing::info!(crystals = crystals.len(), elapsed = ?started.elapsed(), "memory re-embedded");
        Ok(crystals.len())
    }
}

#[cfg(test)]
mod tests;
