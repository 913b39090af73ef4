//! The sources of a flush (docs/architecture.md, data paths 1 and 2) and what they drain into.
//!
//! A flush drains, in this order and holding L: the event buffers ([`events::EventBuffers`]),
//! then every sampler-style source ([`SampleSource`]: CPU samples today), then the scope tree
//! ([`scopes`]: what changed, as `recorder.ScopeTiming`), then the recorder's own events ([`own`]); then the metadata if it changed, one checkpoint, and the publish. The
//! order is the contract (docs/sampler-protocol.md I7): samples after the event buffers, under L,
//! never skipped. `recorder/mod.rs` runs it; each source only writes into a [`Segment`], and every
//! event it writes reports the threads and stacks it references to the chunk writer.
//!
//! A new sampler-style source implements [`SampleSource`] and is added to the recorder's list of
//! sources when the recording starts; nothing else changes. Allocation samples ([`alloc`]) are
//! one. The periodic events ([`periodic`]: thread CPU, CPU load, RSS) are a list of their own,
//! written at the periodic interval from a reading taken without L.

#[cfg(not(loom))]
pub mod alloc;
#[cfg(not(loom))]
pub mod events;
pub mod own;
#[cfg(not(loom))]
pub mod periodic;
pub mod samples;
#[cfg(not(loom))]
pub mod scopes;

use crate::chunk::ChunkWriter;
use crate::stack::StackTable;
use std::collections::BTreeMap;

/// What a source drains into: the chunk writer, the stack table samples are interned in, and
/// the tally of the open segment.
#[derive(Debug)]
pub struct Segment<'a> {
    /// The live chunk and its constants.
    pub chunk: &'a mut ChunkWriter,
    /// The recording's stack table.
    pub stacks: &'a StackTable,
    /// What the open segment holds.
    pub tally: &'a mut Tally,
}

/// What the open (not yet published) segment holds: the statistics once it is published, the
/// loss count if its write fails.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Event records copied from event buffers.
    pub events: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Samples written, per sampled thread.
    pub samples: BTreeMap<u32, u64>,
    /// Other counts a failed write loses, by what they count (named in the loss's reason) and
    /// thread: not samples of the CPU sampler, whose taken = written + lost they would spoil
    /// (the wall-clock periods a `profiler.WallClockSample` stands for).
    pub other: BTreeMap<(&'static str, u32), u64>,
}

impl Tally {
    /// Counts `n` of `what` written for `thread` (see [`Tally::other`]).
    pub fn count_other(&mut self, what: &'static str, thread: u32, n: u64) {
        *self.other.entry((what, thread)).or_insert(0) += n;
    }

    /// Samples written in the segment.
    pub fn total_samples(&self) -> u64 {
        self.samples.values().sum()
    }
}

/// Data that could not be recorded, reported as `recorder.DataLoss` (and `jdk.DataLoss` for
/// bytes) at the next flush.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LossReport {
    /// Why.
    pub reason: String,
    /// Events lost.
    pub events: u64,
    /// Samples lost.
    pub samples: u64,
    /// Bytes lost.
    pub bytes: u64,
    /// The thread whose samples were lost (0: not one thread's).
    pub thread: u32,
}

/// One `jdk.ActiveSetting`: the event type it applies to, name and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingRow {
    /// The id of an event type the chunk declares (JMC looks it up and fails on any other, 0
    /// included): the recording's own settings belong to `recorder.Recording`
    /// ([`crate::builtin::RECORDING`]).
    pub event_type: u64,
    /// Setting name, as the JDK names it (`enabled`, `threshold`, `stackTrace`, ...).
    pub name: String,
    /// Its value as text.
    pub value: String,
}

impl SettingRow {
    /// A row.
    pub fn new(event_type: u64, name: impl Into<String>, value: impl Into<String>) -> SettingRow {
        SettingRow { event_type, name: name.into(), value: value.into() }
    }
}

/// A sampler-style source: records taken outside L (by a signal handler, an allocator hook, a
/// timer) and turned into events by L holders. Every method runs with L held.
#[cfg(not(loom))]
pub trait SampleSource: Send + std::fmt::Debug {
    /// The flush pass, after the event buffers: every record taken so far. Never skipped.
    fn drain(&mut self, seg: &mut Segment<'_>);
    /// The recorder thread's pass between flushes: records that are ready without a flush
    /// (full buffers), so that buffers come back to the pool early.
    fn drain_ready(&mut self, seg: &mut Segment<'_>);
    /// The recorder thread's periodic housekeeping (a source may tell `chunk` the names of the
    /// threads it sees, while they run); returns the losses to report.
    fn maintain(&mut self, chunk: &mut ChunkWriter) -> Vec<LossReport>;
    /// Losses to report at this flush (with the recorder's own events), for sources whose
    /// losses do not wait for the recorder thread's housekeeping.
    fn losses(&mut self) -> Vec<LossReport> {
        Vec::new()
    }
    /// The `jdk.ActiveSetting` rows that describe the source.
    fn settings(&self) -> Vec<SettingRow>;
    /// The source's statistics event, once per flush, with the recorder's own events.
    fn write_statistics(&mut self, chunk: &mut ChunkWriter, now: i64);
    /// Stops the source: nothing is taken after this, the last records go into `seg`.
    fn stop(&mut self, seg: &mut Segment<'_>) -> Stopped;
}

/// What a stopped source leaves behind.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub struct Stopped {
    /// Losses not reported yet.
    pub losses: Vec<LossReport>,
    /// The source's final counters (the recorder's final report picks them by their type).
    pub stats: Option<Box<dyn std::any::Any + Send>>,
}
