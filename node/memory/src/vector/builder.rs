//! The builder thread: it seals the tail into segments, merges segments of a size and
//! compacts mostly dead ones, each build without a lock and swapped in under a short one.

use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use super::segment::{Entry, Segment};
use super::{
    BULK_INSERTS, BULK_PAUSE, BULK_TAIL, BuildStats, Config, Home, Job, RECENT_BUILDS, Shared, Source, persist,
};

impl Shared {
    /// Waits while a bulk load is arriving and the tail is full: a build then would take the
    /// CPU from the inserts (a lower priority does not keep it off the cores between their
    /// batches), and seal graphs that the next seals soon merge again. It watches the tail for
    /// [`BULK_PAUSE`] and seals once fewer than [`BULK_INSERTS`] arrived meanwhile, or once the
    /// tail, which every search scans exactly, holds [`BULK_TAIL`] seals' worth, or a seal is
    /// asked for. False when told to stop.
    fn wait_for_a_pause(&self) -> bool {
        // When the watch began, and the tail's length then.
        let mut watch: Option<(Instant, usize)> = None;
        loop {
            let (tail, full) = {
                let state = self.read();
                let forced = state.tail.first().is_some_and(|t| t.entry.seq < state.seal_below);
                let tail = state.tail.len();
                let cap = self.config.seal_threshold.saturating_mul(BULK_TAIL);
                (tail, tail >= self.config.seal_threshold && tail < cap && !forced)
            };
            if !full {
                return true;
            }
            let now = Instant::now();
            let (began, then) = *watch.get_or_insert((now, tail));
            let watched = now.duration_since(began);
            if watched >= BULK_PAUSE {
                if tail.saturating_sub(then) < BULK_INSERTS {
                    return true;
                }
                watch = Some((now, tail));
                continue;
            }
            let mut control = self.control();
            if control.stop {
                return false;
            }
            // Marked as told, so inserts meanwhile do not wake it (see `want`); a seal asked
            // for or a stop does. The work is planned after the watch either way.
            control.wanted = true;
            drop(self.wake.wait_timeout(control, BULK_PAUSE - watched).unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// The builder thread: sleeps until there may be work, then runs jobs until there is none.
    pub(super) fn run_builder(&self, last_uid: u64) {
        // Segment uids, after those of the loaded segments; only this thread makes segments.
        let mut next_uid = last_uid;
        loop {
            {
                let mut control = self.control();
                loop {
                    if control.stop {
                        return;
                    }
                    if control.wanted {
                        control.wanted = false;
                        control.busy = true;
                        break;
                    }
                    control.busy = false;
                    self.idle.notify_all();
                    control = self.wake.wait(control).unwrap_or_else(PoisonError::into_inner);
                }
            }
            if !self.wait_for_a_pause() {
                return;
            }
            while let Some(job) = self.plan() {
                if self.control().stop {
                    return;
                }
                next_uid += 1;
                self.run(job, next_uid);
            }
        }
    }

    /// The next build worth doing, by priority: seal the tail (searches scan it exactly),
    /// compact a mostly dead segment, merge a size class.
    fn plan(&self) -> Option<Job> {
        let config = &self.config;
        let state = self.read();
        if state.builder_failed {
            return None;
        }
        let live = |entry: Entry| state.is_live(entry);

        let forced = state.tail.first().is_some_and(|t| t.entry.seq < state.seal_below);
        if state.tail.len() >= config.seal_threshold || forced {
            let consumed = state.tail.len().min(config.seal_threshold);
            let (entries, points) =
                state.tail[..consumed].iter().filter(|t| live(t.entry)).map(|t| (t.entry, t.point.clone())).unzip();
            return Some(Job { source: Source::Tail(consumed), entries, points });
        }

        // While restoring, a graph's live entries are not known yet.
        if state.restoring.is_some() {
            return None;
        }
        let dead = state.segments.iter().find(|s| s.dead() as f64 > s.len() as f64 * config.compact_dead_fraction);
        let inputs: Vec<&Arc<Segment>> = match dead {
            Some(segment) => vec![segment],
            None => merge_candidates(&state.segments, config)?,
        };
        let mut entries = Vec::new();
        let mut points = Vec::new();
        for segment in &inputs {
            segment.live_entries(&live, &mut entries, &mut points);
        }
        Some(Job { source: Source::Segments(inputs.iter().map(|s| s.uid).collect()), entries, points })
    }

    /// Builds the job's segment without any lock, then swaps it in for its source.
    fn run(&self, job: Job, uid: u64) {
        let Job { source, entries, points } = job;
        let segment = if entries.is_empty() {
            None
        } else {
            let params = self.config.params();
            match panic::catch_unwind(AssertUnwindSafe(|| Segment::build(uid, entries, points, params))) {
                Ok(segment) => Some(Arc::new(segment)),
                Err(_) => {
                    tracing::error!(uid, "vector segment build panicked; the index stops building");
                    self.write().builder_failed = true;
                    return;
                }
            }
        };

        let mut state = self.write();
        let (inputs, replaced) = match &source {
            Source::Tail(consumed) => {
                state.tail.drain(..*consumed);
                (0, Vec::new())
            }
            Source::Segments(uids) => {
                let (replaced, kept) =
                    std::mem::take(&mut state.segments).into_iter().partition(|s| uids.contains(&s.uid));
                state.segments = kept;
                (uids.len(), replaced)
            }
        };
        let saved = segment.clone();
        if let Some(segment) = segment {
            // Vectors removed or replaced while the graph was built are dead on arrival.
            for &entry in segment.entries() {
                match state.live.get_mut(&entry.id) {
                    Some(slot) if slot.seq == entry.seq => slot.home = Home::Segment(uid),
                    _ => segment.kill_one(),
                }
            }
            let took = segment.build_time();
            tracing::debug!(uid, inputs, len = segment.len(), ?took, "vector segment built");
            state.builds += 1;
            state.build_time_total += took;
            if state.recent_builds.len() >= RECENT_BUILDS {
                state.recent_builds.pop_front();
            }
            state.recent_builds.push_back(BuildStats { inputs, len: segment.len(), took });
            state.segments.push(segment);
        }
        drop(state);
        if let Some(dir) = &self.dir {
            // The new file first: until it is whole, the replaced ones still hold the vectors.
            if let Some(segment) = saved
                && let Err(error) = segment.save(dir, self.config.dim, self.config.params())
            {
                tracing::warn!(uid = segment.uid, %error, "vector segment not written; the next start builds it again");
            }
            for old in &replaced {
                self.remove_file(dir, old.uid);
            }
        }
        // Freeing the replaced graphs can take a while; searches need not wait for it.
        drop(replaced);
    }

    /// Removes segment `uid`'s file, if it has one.
    pub(super) fn remove_file(&self, dir: &Path, uid: u64) {
        match std::fs::remove_file(persist::path(dir, uid)) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(uid, %error, "replaced vector segment file not removed"),
        }
    }
}

/// The segments to merge next, if any: `merge_factor` of the smallest size class that has as
/// many, where class `c` holds segments of up to `seal_threshold × merge_factor^c` live vectors.
fn merge_candidates<'a>(segments: &'a [Arc<Segment>], config: &Config) -> Option<Vec<&'a Arc<Segment>>> {
    if config.merge_factor < 2 {
        return None;
    }
    let class = |segment: &Segment| {
        let live = segment.len().saturating_sub(segment.dead());
        let (mut class, mut cap) = (0u32, config.seal_threshold);
        while live > cap {
            class += 1;
            cap = cap.saturating_mul(config.merge_factor);
        }
        class
    };
    let mut sized: Vec<(u32, usize, &Arc<Segment>)> =
        segments.iter().map(|s| (class(s), s.len().saturating_sub(s.dead()), s)).collect();
    sized.sort_by_key(|&(class, live, _)| (class, live));
    sized.chunk_by(|a, b| a.0 == b.0).find_map(|group| {
        let group = group.get(..config.merge_factor)?;
        let total: usize = group.iter().map(|&(_, live, _)| live).sum();
        (total <= config.max_segment_len).then(|| group.iter().map(|&(_, _, s)| s).collect())
    })
}
