//! Keeping the best `k` hits of a scan without sorting everything.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// One candidate: a greater `Hit` is a better one (higher similarity, then lower id), so every
/// path that ranks hits (HNSW, tail scan, exact scan) breaks ties the same way.
#[derive(Clone, Copy, Debug)]
pub(super) struct Hit {
    pub(super) score: f32,
    pub(super) id: u64,
}

impl PartialEq for Hit {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Hit {}

impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Hit {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.id.cmp(&self.id))
    }
}

/// The best `k` hits offered so far; the worst of them sits on top of a min-heap.
#[derive(Debug)]
pub(super) struct TopK {
    k: usize,
    heap: BinaryHeap<Reverse<Hit>>,
}

impl TopK {
    pub(super) fn new(k: usize) -> Self {
        Self { k, heap: BinaryHeap::with_capacity(k.saturating_add(1).min(4096)) }
    }

    /// Whether `hit` would enter the top `k`: callers check this before any costlier test
    /// (liveness), which then runs only for the few hits that matter.
    pub(super) fn admits(&self, hit: Hit) -> bool {
        if self.k == 0 {
            return false;
        }
        match self.heap.peek() {
            Some(Reverse(worst)) if self.heap.len() >= self.k => hit > *worst,
            _ => true,
        }
    }

    /// Adds `hit` if it is among the best `k`.
    pub(super) fn offer(&mut self, hit: Hit) {
        if !self.admits(hit) {
            return;
        }
        if self.heap.len() >= self.k {
            self.heap.pop();
        }
        self.heap.push(Reverse(hit));
    }

    /// The hits, best first.
    pub(super) fn into_sorted(self) -> Vec<Hit> {
        // `into_sorted_vec` is ascending in `Reverse<Hit>`, i.e. best hit first.
        self.heap.into_sorted_vec().into_iter().map(|Reverse(hit)| hit).collect()
    }
}
