//! What the sampler reports: statistics, the stop report, a discovery's report, and the state
//! only the chunk-writer lock's holders may touch.

use super::buffer::LockedState;
use super::wall::{WallBatch, WallStats};
use std::time::Duration;

#[cfg(doc)]
use super::Sampler;

/// Per-thread statistics (live or exited-but-not-yet-reaped slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadStats {
    /// Kernel thread id.
    pub tid: u32,
    /// Samples the handler attempted for this thread.
    pub taken: u64,
    /// Samples handed to a drain callback.
    pub written: u64,
    /// Samples counted lost.
    pub lost: u64,
}

/// Totals; `taken == written + lost` once everything is drained (I6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Samples attempted (all slots ever, including reaped ones).
    pub taken: u64,
    /// Samples handed to a drain callback.
    pub written: u64,
    /// Samples lost (no spare buffer, the thread's slot retired meanwhile).
    pub lost: u64,
    /// Signals that reached no slot (stale timer signal after unregistration, foreign thread).
    pub unattributed: u64,
    /// Signals of a perf event that was disarmed before they were delivered (dropped: they
    /// are no sample of a recorded thread).
    pub stale: u64,
    /// Recorder wakeups posted (handlers and retirements asking for `drain_full`).
    pub wakeups: u64,
    /// Threads refused a slot when they started or registered (every slot taken): each is
    /// also reported by [`Sampler::take_refused`] (discovery may still sample it later).
    pub refused: u64,
    /// Slots not FREE (live or awaiting reaping).
    pub slots_in_use: usize,
    /// Per thread, for slots not FREE.
    pub threads: Vec<ThreadStats>,
    /// The wall-clock sampler's counters, if it runs (its served requests are also counted
    /// in `taken`, `written` and `lost` above, as one sample each).
    pub wall: Option<WallStats>,
    /// Wall-clock samples among `taken` (served requests that reached their slot).
    pub wall_taken: u64,
    /// Wall-clock samples among `written`. Once everything is drained, the wall samples
    /// lost in the sampler's buffers are `wall_taken - wall_written` (I6).
    pub wall_written: u64,
}

/// State only holders of the chunk-writer lock L may touch (reassembly, order, scratch space).
/// Keep it inside the Mutex that is L.
#[derive(Debug)]
pub struct SamplerLocked {
    pub(super) inner: LockedState,
}

/// What [`Sampler::stop`] leaves behind.
#[derive(Debug, Clone, Default)]
pub struct StopReport {
    /// Lost samples not yet reported through `take_lost`, per thread.
    pub lost: Vec<(u32, u64)>,
    /// The wall sampler's last batches, to write after the final records.
    pub wall_batches: Vec<WallBatch>,
    /// Wall periods lost not yet reported through `take_wall_lost`.
    pub wall_lost: u64,
    /// The wall sampler's final counters.
    pub wall: Option<WallStats>,
    /// Final statistics.
    pub stats: SamplerStats,
    /// A handler never left (it was abandoned half-way): the sampler's memory was kept, not
    /// freed, for the life of the process.
    pub handlers_abandoned: bool,
}

/// What one thread discovery did ([`Sampler::discover_threads_unlocked`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryReport {
    /// Threads in the /proc/self/task listing.
    pub listed: usize,
    /// The listing was read to its end (false: EMFILE, ENOMEM, ...; nothing was inferred from
    /// what is missing).
    pub listing_complete: bool,
    /// Threads that started being sampled.
    pub armed: usize,
    /// Slots retired on behalf of threads proven dead.
    pub retired: usize,
    /// Threads missing from the listing that are not proven dead (kept).
    pub kept_unproven: usize,
    /// Retirements waiting for a handler to leave the slot (retried next time).
    pub retire_pending: usize,
    /// Whole discovery, wall time.
    pub elapsed: Duration,
    /// Time the registry lock was held, in all.
    pub registry_held: Duration,
    /// Longest single hold of the registry lock.
    pub registry_held_max: Duration,
    /// The kernel's name (`comm`) of every listed thread whose stat could be read, from the
    /// read that gave its start time: for the recorder to name threads while they run.
    pub names: Vec<(u32, String)>,
}
