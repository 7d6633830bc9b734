//! Opening an index on the segments a previous run left, and what the store then says
//! is live (see [`VectorIndex::open`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::segment::Segment;
use super::{Config, Error, Loaded, State, VectorIndex, persist};

impl VectorIndex {
    /// An index that keeps its segments in `dir`: it reads the graphs a previous run left
    /// there (those built with this config's dimension and graph parameters; any other file is
    /// removed), and writes each segment it builds.
    ///
    /// Every stored vector is then inserted again, from the store, before
    /// [`VectorIndex::restored`]: one a loaded graph holds under the same id is live in that
    /// graph at once, and any other goes to the tail. The same means equal to within one Q14
    /// step in every value, what a store that keeps its vectors in 16 bits gives back. `restored` then drops what
    /// no insert claimed. Searches meanwhile see only what was inserted.
    pub fn open(config: Config, dir: &Path) -> Result<Self, Error> {
        config.check()?;
        let dir_error = |error| Error::Dir(dir.to_path_buf(), error);
        std::fs::create_dir_all(dir).map_err(dir_error)?;
        let started = Instant::now();
        let files = persist::list(dir).map_err(dir_error)?;
        let params = config.params();
        let read: Vec<Option<Segment>> = files
            .par_iter()
            .map(|(uid, file)| match Segment::read(file, *uid, config.dim, params) {
                Ok(segment) => Some(segment),
                Err(error) => {
                    tracing::warn!(file = %file.display(), %error, "vector segment file unusable; removing it, its vectors are indexed again");
                    let _ = std::fs::remove_file(file);
                    None
                }
            })
            .collect();
        let mut state = State::default();
        let mut restoring = FxHashMap::default();
        let mut last_uid = 0;
        for segment in read.into_iter().flatten() {
            last_uid = last_uid.max(segment.uid);
            for (entry, point) in segment.stored() {
                state.next_seq = state.next_seq.max(entry.seq + 1);
                let newer = restoring.get(&entry.id).is_none_or(|known: &Loaded| known.seq < entry.seq);
                if newer {
                    restoring.insert(entry.id, Loaded { seq: entry.seq, uid: segment.uid, point: point.clone() });
                }
            }
            state.segments.push(Arc::new(segment));
        }
        // Nearly every loaded vector is claimed: the map of live ones grows to about this.
        state.live.reserve(restoring.len());
        state.restoring = Some(Arc::new(restoring));
        tracing::info!(
            segments = state.segments.len(),
            vectors = state.segments.iter().map(|s| s.len()).sum::<usize>(),
            ms = started.elapsed().as_millis() as u64,
            "vector graphs read"
        );
        Self::start(config, Some(dir.to_path_buf()), state, last_uid)
    }

    /// Ends the restoring [`VectorIndex::open`] began: the loaded vectors no insert claimed are
    /// dead, graphs left with none are dropped (and their files removed), and the builder may
    /// compact the rest. Does nothing on an index not restoring.
    pub fn restored(&self) {
        let emptied: Vec<Arc<Segment>> = {
            let mut state = self.shared.write();
            if state.restoring.take().is_none() {
                return;
            }
            let live: Vec<usize> = state
                .segments
                .iter()
                .map(|segment| segment.stored().filter(|(entry, _)| state.is_live(**entry)).count())
                .collect();
            let mut live = live.into_iter();
            let mut emptied = Vec::new();
            state.segments.retain(|segment| {
                let live = live.next().unwrap_or(0);
                segment.set_dead(segment.len() - live);
                if live == 0 {
                    emptied.push(Arc::clone(segment));
                }
                live > 0
            });
            emptied
        };
        if let Some(dir) = &self.shared.dir {
            for segment in &emptied {
                self.shared.remove_file(dir, segment.uid);
            }
        }
        self.shared.want();
    }
}
