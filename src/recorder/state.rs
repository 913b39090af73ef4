//! Everything L protects, and the steps L holders run on it. `recorder/mod.rs` puts the steps in
//! order; each one here is short and does no slow work (docs/architecture.md, "Who may touch what").

use super::resolve::UnderLock;
use super::settings::Settings;
use super::storage::{Policy, Storage};
use super::RecorderStats;
use crate::builtin;
use crate::chunk::{ChunkWriter, Resolved, Unresolved};
use crate::clock::{self, ClockPair};
use crate::commit::{CommitShared, NoteKind, ThreadNote};
use crate::flush::events::EventBuffers;
use crate::flush::own::{self, Losses, RecordingInfo};
use crate::flush::periodic::{self, PeriodicSource, Reading};
use crate::flush::scopes::ScopeTimings;
use crate::flush::{LossReport, SampleSource, Segment, SettingRow, Tally};
use crate::metadata_registry;
use crate::sync::statics::Ordering;
use std::collections::HashSet;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything L protects.
#[derive(Debug)]
pub(super) struct State {
    pub shared: Arc<CommitShared>,
    pub settings: Settings,
    recording_start: ClockPair,
    /// The live chunk and the recording's constants.
    pub chunk: ChunkWriter,
    /// The recording's files.
    pub storage: Storage,
    /// Where the next chunk starts: where the last one ended.
    next_start: Option<ClockPair>,
    /// Flush source 1: the event buffers.
    events: EventBuffers,
    /// Flush source 2: sampler-style sources, drained in this order after the event buffers.
    samplers: Vec<Box<dyn SampleSource>>,
    /// Flush source 3: the merged scope tree.
    scopes: ScopeTimings,
    /// Flush source 4 (with thread notes and settings): loss reports.
    losses: Losses,
    pending_notes: Vec<ThreadNote>,
    reported_events: u64,
    reported_bytes: u64,
    /// Write the settings events at the next flush (new chunk, or a settings change).
    pub settings_changed: bool,
    /// Event types whose `jdk.ActiveSetting` rows the live chunk has.
    settings_of: HashSet<u64>,
    /// The registry version whose every event type has its rows in the live chunk.
    settings_version: u64,
    /// What the open segment holds.
    tally: Tally,
    pub stats: RecorderStats,
    /// Flush source 5: the periodic events, written at their own interval.
    periodic: Vec<Box<dyn PeriodicSource>>,
    /// The stopped sources' final counters.
    final_stats: Vec<Box<dyn std::any::Any + Send>>,
    write_error_reported: bool,
    /// Flush source 3: the Pyroscope uploader's statistics.
    #[cfg(feature = "push")]
    push_report: own::PushReport,
}

impl State {
    pub fn new(shared: Arc<CommitShared>, settings: Settings, dir: PathBuf, start: ClockPair) -> State {
        let policy = Policy {
            max_size: settings.max_size,
            max_age: settings.max_age,
            max_chunk_size: settings.max_chunk_size,
            compress: settings.compress_finished_chunks,
        };
        let (depth, key_base) = (settings.depth, settings.constant_key_base);
        State {
            events: EventBuffers::new(Arc::clone(&shared)),
            shared,
            settings,
            recording_start: start,
            chunk: ChunkWriter::with_key_base(depth, key_base),
            storage: Storage::new(dir, policy),
            next_start: Some(start),
            samplers: Vec::new(),
            scopes: ScopeTimings::default(),
            losses: Losses::default(),
            pending_notes: Vec::new(),
            reported_events: 0,
            reported_bytes: 0,
            settings_changed: true,
            settings_of: HashSet::new(),
            settings_version: 0,
            tally: Tally::default(),
            stats: RecorderStats::default(),
            periodic: periodic::sources(),
            final_stats: Vec::new(),
            write_error_reported: false,
            #[cfg(feature = "push")]
            push_report: own::PushReport::default(),
        }
    }

    /// Adds a sampler-style source; flushes drain the sources in the order they were added.
    pub fn add_sample_source(&mut self, source: Box<dyn SampleSource>) {
        self.samplers.push(source);
    }

    /// The tick clock: real, or the logical one in deterministic mode.
    pub fn now_ticks(&self) -> i64 {
        match &self.shared.logical {
            Some(l) => l.now(),
            None => clock::ticks_ordered(),
        }
    }

    /// Opens a chunk if none is live: it starts where the last one ended.
    pub fn open_chunk_if_needed(&mut self) {
        if self.chunk.is_open() {
            return;
        }
        let now = self.now_ticks();
        let start = self.next_start.take().unwrap_or_else(|| {
            if self.shared.logical.is_some() {
                ClockPair::logical(now)
            } else {
                ClockPair::now()
            }
        });
        self.chunk.open(start);
        self.settings_changed = true;
    }

    /// Flush source 1: `[flushed, committed)` of every event buffer.
    pub fn drain_event_buffers(&mut self) {
        let State { chunk, shared, tally, events, .. } = self;
        events.drain(&mut Segment { chunk, stacks: &shared.stacks, tally });
    }

    /// Flush source 2: every sampler-style source, in order; never skipped.
    pub fn drain_sample_sources(&mut self) {
        // The names threads reported first: a sample is named by the name its thread had when
        // it was taken, which a thread's own report may give in full (the kernel keeps 15 bytes).
        self.take_thread_notes();
        let State { chunk, shared, tally, samplers, .. } = self;
        for source in samplers {
            source.drain(&mut Segment { chunk, stacks: &shared.stacks, tally });
        }
    }

    /// The recorder thread's pass between flushes (full sampler buffers).
    pub fn drain_ready(&mut self) {
        self.open_chunk_if_needed();
        // As in `drain_sample_sources`.
        self.take_thread_notes();
        let State { chunk, shared, tally, samplers, .. } = self;
        for source in samplers {
            source.drain_ready(&mut Segment { chunk, stacks: &shared.stacks, tally });
        }
    }

    /// The recorder thread's housekeeping: the kernel's names of the threads a discovery (run
    /// before, without L) listed — first names of new threads, renames of others — then each
    /// source's lost samples.
    pub fn maintain_sources(&mut self, thread_names: Vec<(u32, String)>) {
        for (tid, comm) in thread_names {
            self.chunk.observe_thread(tid, &comm, None);
        }
        for source in &mut self.samplers {
            for loss in source.maintain(&mut self.chunk) {
                self.losses.note(loss);
            }
        }
    }

    /// Flush source 3: the scope tree's changed nodes (`recorder.ScopeTiming`).
    pub fn write_scope_timings(&mut self, now: i64) {
        self.scopes.write(&mut self.chunk, now);
    }

    /// Flush source 4: the recorder's own events — thread starts and ends, data loss, the
    /// uploader's statistics, the settings (new chunk or changed), the sources' statistics.
    pub fn write_own_events(&mut self, now: i64) {
        self.take_thread_notes();
        for note in std::mem::take(&mut self.pending_notes) {
            match note.kind {
                NoteKind::Start => own::write_thread_start(&mut self.chunk, note.ticks, note.tid),
                NoteKind::End => own::write_thread_end(&mut self.chunk, note.ticks, note.tid),
                NoteKind::Name => {}
            }
        }
        // Relaxed: statistics.
        let events = self.shared.lost_events.load(Ordering::Relaxed);
        let bytes = self.shared.lost_bytes.load(Ordering::Relaxed);
        if events > self.reported_events {
            self.losses.note(LossReport {
                reason: "event buffers full (memory budget reached)".into(),
                events: events - self.reported_events,
                bytes: bytes - self.reported_bytes,
                ..LossReport::default()
            });
            self.reported_events = events;
            self.reported_bytes = bytes;
        }
        for source in &mut self.samplers {
            for loss in source.losses() {
                self.losses.note(loss);
            }
        }
        self.losses.write(&mut self.chunk, now);
        // A new chunk repeats the uploader's statistics (so does a settings change).
        #[cfg(feature = "push")]
        self.push_report.write(&mut self.chunk, now, self.storage.push(), self.settings_changed);
        crate::diagnostics::write_pending(&mut self.chunk, now);
        // Read before the settings: a type registered after this read changes the version again.
        let version = metadata_registry::version();
        if self.settings_changed {
            self.write_settings(now, false);
            self.settings_changed = false;
        } else if version != self.settings_version {
            // Types registered since (a type configured in the builder may register any time):
            // their rows, in the segment whose metadata (written after these events) declares them.
            self.write_settings(now, true);
        }
        self.settings_version = version;
        for source in &mut self.samplers {
            source.write_statistics(&mut self.chunk, now);
        }
    }

    /// Takes the threads' reports of themselves: their names now (a thread may be gone by the
    /// time its samples are defined, and its name with it), their start and end events at the
    /// next flush.
    fn take_thread_notes(&mut self) {
        while let Some(note) = self.shared.thread_notes.pop() {
            if note.kind == NoteKind::Start {
                // A new thread, possibly with the id of one that ended.
                self.chunk.forget_thread(note.tid);
            }
            if note.kind != NoteKind::End {
                self.chunk.observe_thread(note.tid, &note.comm, Some(&note.name));
            }
            self.pending_notes.push(note);
        }
    }

    /// Notes a loss for the next flush.
    pub fn note_loss(&mut self, loss: LossReport) {
        self.losses.note(loss);
    }

    /// `jdk.ActiveRecording` and the `jdk.ActiveSetting`s, named after the flushing thread; with
    /// `only_new_types`, just the rows of the event types registered since the chunk last got
    /// settings.
    ///
    /// Every `jdk.ActiveSetting.id` is the id of an event type the chunk declares (JMC looks it
    /// up and fails on any other): the recording's own settings belong to `recorder.Recording`,
    /// and a type configured in the builder but not registered yet gets its rows when it
    /// registers. The events name the thread through `EventOut`, so the segment's checkpoint
    /// defines it.
    fn write_settings(&mut self, now: i64, only_new_types: bool) {
        if !only_new_types {
            self.settings_of.clear();
        }
        let mut rows = if only_new_types { Vec::new() } else { self.recording_rows() };
        // Registered types only (id 0: configured, not registered yet).
        for (_, id, e) in metadata_registry::all_settings() {
            if id == 0 || !self.settings_of.insert(id) {
                continue;
            }
            rows.push(SettingRow::new(id, "enabled", e.enabled.to_string()));
            rows.push(SettingRow::new(id, "threshold", format!("{} ns", e.threshold.as_nanos())));
            rows.push(SettingRow::new(id, "stackTrace", e.stack_trace.to_string()));
        }
        if rows.is_empty() {
            return;
        }
        let deterministic = self.shared.logical.is_some();
        let tid = if deterministic { 0 } else { crate::threads::current_tid() };
        if tid != 0 && self.chunk.thread_name(tid).is_none() {
            // The flushing thread names itself (one prctl).
            let (name, comm) = crate::threads::current_thread_name();
            self.chunk.observe_thread(tid, &comm, Some(&name));
        }
        if only_new_types {
            return own::write_setting_rows(&mut self.chunk, now, tid, &rows);
        }
        let millis = |d: Option<Duration>| d.map_or(i64::MAX, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let recording = RecordingInfo {
            name: self.settings.name.clone(),
            // The repository is a setting of recorder.Recording; no file is written at the stop.
            destination: None,
            max_age_ms: millis(self.settings.max_age),
            flush_interval_ms: millis(Some(self.settings.flush_interval)),
            max_size: i64::try_from(self.settings.max_size).unwrap_or(i64::MAX),
            start_ms: self.recording_start.epoch_nanos / 1_000_000,
            // The recording runs until stopped: no configured duration.
            duration_ms: millis(None),
        };
        own::write_settings(&mut self.chunk, now, tid, &recording, &rows);
    }

    /// The rows that describe the recording (`recorder.Recording`'s) and each source.
    fn recording_rows(&self) -> Vec<SettingRow> {
        let s = &self.settings;
        let recording = |name: &str, value: String| SettingRow::new(builtin::RECORDING, name, value);
        let mut rows = vec![
            recording("flushInterval", format!("{} ms", s.flush_interval.as_millis())),
            recording("maxChunkSize", s.max_chunk_size.to_string()),
            recording("maxChunkAge", format!("{} s", s.max_chunk_age.as_secs())),
            recording("maxSize", s.max_size.to_string()),
            recording("memoryBudget", s.memory_budget.to_string()),
            recording("stackDepth", s.depth.inner.to_string()),
            recording("stackDepthOuter", s.depth.outer.to_string()),
        ];
        if self.shared.logical.is_none() {
            rows.push(recording("repository", self.storage.dir().display().to_string()));
        }
        if s.sampling.is_none() {
            rows.push(SettingRow::new(builtin::EXECUTION_SAMPLE, "enabled", "false"));
        }
        for source in &self.samplers {
            rows.extend(source.settings());
        }
        rows
    }

    /// What the next checkpoint needs that only slow work gives (resolve it without L).
    pub fn unresolved(&mut self) -> Unresolved {
        // Samples drained since the own events were written may be of threads that reported
        // their names meanwhile.
        self.take_thread_notes();
        self.chunk.unresolved(&self.shared.stacks)
    }

    /// Takes the answers resolved without L.
    pub fn resolved(&mut self, resolved: Resolved) {
        self.chunk.resolved(resolved);
    }

    /// Ends the open segment: the metadata if the registry changed (after the events, so it
    /// covers every type they use), then one checkpoint with every constant the segment
    /// references that the chunk lacks.
    pub fn close_segment(&mut self, now: i64) {
        self.take_thread_notes();
        self.chunk.metadata(metadata_registry::descriptor_version(), now, metadata_registry::metadata);
        self.chunk.checkpoint(&self.shared.stacks, &mut UnderLock, now);
    }

    /// Writes the segment and publishes the header; applies retention.
    pub fn publish(&mut self, now: i64) {
        let Some(start) = self.chunk.start() else { return };
        if let Some(p) = self.chunk.publish(start.nanos_until(now)) {
            if let Err(e) = self.storage.publish(start, &p) {
                return self.write_failed(e);
            }
        }
        // Retention against the live chunk's real size, at every flush: the repository stays
        // under its limit even when flushes are late and the chunk outgrows its rotation size.
        self.storage.apply_retention(self.chunk.position());
        self.stats.flushes += 1;
        self.segment_written();
    }

    /// The open segment reached the disk: count it.
    fn segment_written(&mut self) {
        let tally = std::mem::take(&mut self.tally);
        self.stats.events_written += tally.events;
        self.stats.samples_written += tally.total_samples();
        let (events, samples) = self.losses.confirm();
        self.stats.events_lost += events;
        self.stats.samples_lost += samples;
    }

    /// Rotates the chunk when it reached its size or age limit.
    pub fn rotate_if_due(&mut self) {
        let Some(start) = self.chunk.start() else { return };
        let age = Duration::from_nanos(start.nanos_until(self.now_ticks()).max(0) as u64);
        if self.chunk.position() >= self.settings.max_chunk_size || age >= self.settings.max_chunk_age {
            let _ = self.finish_chunk(false);
        }
    }

    /// Finishes the live chunk (state 0; the final flag at the end of the recording); the next
    /// chunk starts exactly where this one ends. A write failure is counted and reported.
    pub fn finish_chunk(&mut self, final_chunk: bool) -> io::Result<()> {
        let Some(start) = self.chunk.start() else { return Ok(()) };
        if self.chunk.has_open_references() {
            // Never close a chunk with a reference its checkpoints do not define.
            let now = self.now_ticks();
            self.close_segment(now);
        }
        let duration = start.nanos_until(self.now_ticks()).max(1);
        self.next_start = Some(start.plus(duration));
        let Some(p) = self.chunk.finish(duration, final_chunk) else { return Ok(()) };
        match self.storage.finish(start, &p, final_chunk) {
            Ok(()) => {
                self.stats.chunks_finished += 1;
                self.segment_written();
                Ok(())
            }
            Err(e) => {
                self.storage.close_failed(start, duration);
                self.count_write_failure(&e);
                self.losses.unconfirm();
                Err(e)
            }
        }
    }

    /// A write failed: count the segment as lost, close the chunk at its last published state
    /// and start a new one at the next flush.
    fn write_failed(&mut self, e: io::Error) {
        self.count_write_failure(&e);
        // The loss reports of the failed segment did not reach the disk either: report them again.
        self.losses.unconfirm();
        let tally = std::mem::take(&mut self.tally);
        let Some(start) = self.chunk.start() else { return };
        let reason = format!("write failed: {e}");
        self.losses.note(LossReport {
            reason: reason.clone(),
            events: tally.events,
            bytes: tally.bytes,
            ..LossReport::default()
        });
        for (thread, samples) in tally.samples {
            self.losses.note(LossReport { reason: reason.clone(), samples, thread, ..LossReport::default() });
        }
        for ((what, thread), samples) in tally.other {
            let reason = format!("{reason} ({what})");
            self.losses.note(LossReport { reason, samples, thread, ..LossReport::default() });
        }
        let duration = start.nanos_until(self.now_ticks()).max(1);
        self.chunk.abandon();
        self.storage.close_failed(start, duration);
        self.next_start = Some(start.plus(duration));
    }

    fn count_write_failure(&mut self, e: &io::Error) {
        self.stats.write_failures += 1;
        if !self.write_error_reported {
            self.write_error_reported = true;
            eprintln!(
                "recorder: writing to {} failed ({e}); the application continues, lost data is counted \
                 and recording resumes when writing works again",
                self.storage.dir().display()
            );
        }
    }

    /// Stops every sampler-style source; their last records go into the open segment.
    pub fn stop_sources(&mut self) {
        self.open_chunk_if_needed();
        // As in `drain_sample_sources`.
        self.take_thread_notes();
        let State { chunk, shared, tally, samplers, losses, final_stats, .. } = self;
        for source in samplers.iter_mut() {
            let stopped = source.stop(&mut Segment { chunk, stacks: &shared.stacks, tally });
            for loss in stopped.losses {
                losses.note(loss);
            }
            final_stats.extend(stopped.stats);
        }
    }

    /// The final counters of type `T` a stopped source left (the last one, if several did).
    pub fn final_stats<T: Clone + 'static>(&self) -> Option<T> {
        self.final_stats.iter().rev().find_map(|s| s.downcast_ref::<T>()).cloned()
    }

    /// The periodic events: every periodic source, in order, from a reading taken without L.
    pub fn write_periodic(&mut self, reading: Reading) {
        self.open_chunk_if_needed();
        for source in &mut self.periodic {
            source.write(&mut self.chunk, &reading);
        }
    }

    /// The last `recorder.Footprint` of a recording, taken as it stops (the periodic ones miss
    /// what its last flushes named).
    pub fn write_final_footprint(&mut self, footprint: &crate::flush::periodic::Footprint) {
        // Deterministic recordings write no periodic events.
        if self.shared.logical.is_some() {
            return;
        }
        self.open_chunk_if_needed();
        crate::flush::periodic::write_footprint(&mut self.chunk, crate::clock::ticks_ordered(), footprint);
    }
}
