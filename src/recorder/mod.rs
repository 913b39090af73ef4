//! The recorder: a recording's lifecycle and its flush (docs/architecture.md).
//!
//! Module map: `chunk` (the chunk writer: live chunk, constant pools, which constants a segment
//! defines; no I/O), `flush` (the flush sources: event buffers, sampler-style sources, the
//! recorder's own events; what they write into), and here `settings` (builder, validation,
//! errors), `state` (what L protects and the steps L holders run on it), `storage` (files,
//! retention, compression, dump reading), `resolve` (symbols and thread names, without L) and
//! `lock` (L, with hold-time diagnostics). The commit path (`commit`, `event`, `buffer`) knows
//! nothing of this module.
//!
//! Lifecycle: [`Recorder::start`] opens the repository, starts the sources and the two threads,
//! publishes a first segment and makes the recording current; the flusher thread flushes every
//! flush interval (earlier when buffers fill up), writes the periodic events and rotates chunks;
//! the recorder thread drains full sampler buffers and discovers threads; [`Recorder::stop`]
//! waits for commits in flight, joins both threads, stops the sources, flushes once more and
//! finishes the last chunk with the final flag. With feature `push`, a third thread posts
//! finished chunks to Pyroscope (`crate::push`); it never takes L, retention asks it which
//! chunks are unposted (`storage`), and stop gives it a grace period after the last chunk.
//!
//! L is [`lock::L`]: every flusher, dump and stop step runs under it; application threads never
//! take it. Slow work happens with L released: names of new addresses and threads (`resolve`),
//! compression of finished chunks and reading the files of a dump (`storage`), `/proc` readings
//! of periodic events (`state`).

mod atfork;
mod lock;
mod resolve;
mod settings;
mod state;
mod storage;

pub use lock::{Holder, LockHold};
pub use settings::{AllocationSampling, Error, RecorderBuilder, Settings};

use crate::clock::ClockPair;
use crate::commit::{CommitShared, CURRENT, GENERATION, STARTING};
use crate::flush::alloc::AllocSamples;
use crate::flush::periodic;
use crate::flush::samples::CpuAndWallSamples;
use crate::flush::LossReport;
use crate::fork::ForkSafeMutex as Mutex;
use crate::metadata_registry::{self, EventSettings};
use crate::repository;
use crate::sampler::{Sampler, SamplerConfig, SamplerStats};
use crate::scope::ScopeReport;
use crate::stack::StackTable;
use crate::sync::statics::{AtomicBool, AtomicU64, Ordering};
use lock::{Held, L};
use state::State;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Counters for tests and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Event records copied into chunks.
    pub events_written: u64,
    /// Events lost (memory budget, write failures, commits in flight at stop).
    pub events_lost: u64,
    /// Flushes published.
    pub flushes: u64,
    /// Chunks finished.
    pub chunks_finished: u64,
    /// Write failures seen.
    pub write_failures: u64,
    /// Stack frames cut because the stack table was full.
    pub stack_table_overflow: u64,
    /// CPU samples written into chunks.
    pub samples_written: u64,
    /// CPU samples lost (sampler buffers full, write failures).
    pub samples_lost: u64,
}

/// What a stopped recording did.
#[derive(Debug, Clone, Default)]
pub struct FinalReport {
    /// The recorder's counters.
    pub stats: RecorderStats,
    /// The sampler's final counters, if it sampled.
    pub sampler: Option<SamplerStats>,
    /// The allocation sampler's final counters, if it sampled allocations.
    pub allocation: Option<crate::alloc::AllocationStats>,
    /// The scope tree of the whole recording, all threads merged.
    pub scopes: ScopeReport,
    /// The Pyroscope uploader's final counters, if it pushed.
    #[cfg(feature = "push")]
    pub push: Option<crate::push::PushStats>,
}

/// A running recording. Dropping it stops the recording cleanly (the last chunk gets the final
/// flag). In a forked child, every method leaves the parent's recording alone (see
/// [`Error::ForkedChild`]).
#[derive(Debug)]
pub struct Recorder {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<CommitShared>,
    l: L,
    stopping: AtomicBool,
    flusher: Mutex<Option<JoinHandle<()>>>,
    sampler_thread: Mutex<Option<JoinHandle<()>>>,
    /// The CPU sampler, for registrations and statistics without L.
    sampler: Mutex<Option<Arc<Sampler>>>,
    /// The Pyroscope uploader thread (it never takes L).
    #[cfg(feature = "push")]
    push: Mutex<Option<crate::push::Handle>>,
    dir: PathBuf,
    /// The last chunk is not the final one: another recording continues the directory
    /// ([`Recorder::stop_for_exec`]).
    continued: AtomicBool,
    /// The process that started the recording (a forked child has none of its
    /// threads, files or locks and must touch none of them).
    pid: u32,
    flushes: AtomicU64,
}

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Resident pages of the recorder's own shared library, when it is one (`recorder.Footprint`):
/// `mincore` over its segments, no `/proc` file read (an open in the shared descriptor table can
/// make a program's `dup2` over that number fail: cli/tests/record_fds.rs).
fn own_code_bytes() -> u64 {
    static SEGMENTS: std::sync::OnceLock<Vec<(usize, usize)>> = std::sync::OnceLock::new();
    let segments = SEGMENTS.get_or_init(crate::sampler::own_library_segments);
    segments.iter().map(|&(start, len)| crate::resident::resident_range(start, len) as u64).sum()
}

impl Recorder {
    /// A builder with default settings.
    pub fn builder() -> RecorderBuilder {
        RecorderBuilder::default()
    }

    fn start(mut settings: Settings) -> Result<Recorder, Error> {
        // The recorder's own allocations are not sampled (src/alloc: honest attribution).
        let _own = crate::alloc::suspend();
        settings::validate(&settings)?;
        // What the symbolizer may hold (`symbolize/memory.rs`).
        crate::symbolize::set_memory_limit(settings.symbol_memory.unwrap_or(usize::MAX));
        // Before anything takes a lock the fork hooks take (`recorder/atfork.rs`).
        atfork::install();
        crate::threads::prepare_process_barrier();
        let reservation = Reservation::take()?;
        let wall = ClockPair::now();
        let start = if settings.deterministic { ClockPair::logical(0) } else { wall };
        let dir = match &settings.continue_in {
            Some(dir) => {
                let (dir, image) = open_recording_dir(dir)?;
                // Keys of each recording in the directory in a range of their own (2^32 keys).
                settings.constant_key_base = image << 32;
                dir
            }
            None => create_recording_dir(&settings.repository, wall)?,
        };
        for (name, s) in &settings.events {
            metadata_registry::set_settings(name, *s);
        }
        crate::diagnostics::recording_started(settings.sampling.as_ref().map(|s| s.unwinder));
        let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
        // Scopes of this recording start with empty trees (before the first flush, which would
        // otherwise write the previous recording's).
        crate::scope::start(generation, settings.deterministic, settings.scope_clock);
        crate::builtin::set_sample_span_ids(settings.sample_span_ids);
        let shared = Arc::new(CommitShared {
            generation,
            stacks: StackTable::with_key_base(settings.stack_table_capacity, settings.constant_key_base),
            depth: settings.depth,
            new_buffers: Default::default(),
            thread_notes: Default::default(),
            thread_refs: Default::default(),
            buffer_bytes: settings.buffer_size,
            memory_budget: settings.memory_budget,
            allocated: Default::default(),
            spare_buffers: crossbeam_queue::ArrayQueue::new((settings.memory_budget / settings.buffer_size).max(1)),
            spares_taken: Default::default(),
            spares_trimmed: Default::default(),
            lost_events: Default::default(),
            lost_bytes: Default::default(),
            wakeup: Default::default(),
            logical: settings.deterministic.then(crate::commit::LogicalClock::default),
            in_flight: Default::default(),
        });
        let mut state = State::new(Arc::clone(&shared), settings.clone(), dir.clone(), start);
        #[cfg(feature = "push")]
        let push = settings.push.clone().map(|target| {
            // Declared only by recordings that push: the others' metadata stays the same.
            metadata_registry::declare_builtin(crate::builtin::push_statistics_class());
            let link = Arc::default();
            state.storage.push_to(crate::push::Link::new(Arc::clone(&link), &target));
            (target, link)
        });
        let mut sampler = None;
        let sampler_config = match (&settings.sampling, settings.wall_clock) {
            (Some(c), wall) if c.cpu || wall.is_some() => Some(SamplerConfig { wall, ..c.clone() }),
            (None, Some(wall)) => Some(SamplerConfig { cpu: false, wall: Some(wall), ..SamplerConfig::default() }),
            _ => None,
        };
        if let Some(config) = &sampler_config {
            // No lock of the fork hooks is held here: the sampler registers an atfork hook of its
            // own, which waits for a fork in progress (see `fork.rs`).
            #[cfg(test)]
            tests::hooks::sampler_starting();
            // Samples keep the same frames as event stacks: innermost N, outermost M, or both.
            let (s, locked) = Sampler::start_with_depth(config.clone(), settings.depth).map_err(Error::Sampler)?;
            if settings.sample_threads_from_start {
                // Before the hook is installed: a thread that the hook sees registers.
                s.register_new_threads(true);
                crate::thread_hooks::install();
            }
            let s = Arc::new(s);
            state.add_sample_source(Box::new(CpuAndWallSamples::new(Arc::clone(&s), locked)));
            sampler = Some(s);
        }
        if let Some(a) = settings.allocation {
            let config = crate::alloc::AllocConfig {
                interval: a.interval,
                live_set: a.live_set,
                inner: settings.depth.inner,
                outer: settings.depth.outer,
                records: crate::alloc::records_for(a.interval),
            };
            let wake = Arc::clone(&shared);
            let sampling = crate::alloc::Sampling::start(config, Box::new(move || wake.wakeup.notify()))
                .map_err(|crate::alloc::StartError::NotInstalled| Error::AllocatorNotInstalled)?;
            state.add_sample_source(Box::new(AllocSamples::new(sampling, config)));
        }
        let inner = Arc::new(Inner {
            shared: Arc::clone(&shared),
            l: L::new(state, settings.log_lock_holds),
            stopping: AtomicBool::new(false),
            flusher: Mutex::new(None),
            sampler_thread: Mutex::new(None),
            sampler: Mutex::new(sampler.clone()),
            #[cfg(feature = "push")]
            push: Mutex::new(None),
            dir,
            continued: AtomicBool::new(false),
            pid: std::process::id(),
            flushes: AtomicU64::new(0),
        });
        // The first segment: metadata and the recording's settings, published at once so that a
        // consumer sees the chunk immediately.
        inner.flush();
        let spawned = inner.spawn_threads(sampler);
        #[cfg(feature = "push")]
        let spawned = spawned.and_then(|()| push.map_or(Ok(()), |(target, link)| inner.start_push(target, link)));
        if let Err(e) = spawned {
            // Nothing of a failed start keeps running (no flusher, no armed
            // timer), and a later start works.
            let _ = inner.shut_down();
            // A continued directory holds the chunks of the recording it continues.
            if settings.continue_in.is_none() {
                let _ = std::fs::remove_dir_all(&inner.dir);
            }
            return Err(e);
        }
        reservation.publish(shared);
        crate::control::start(generation, &inner.dir, control_dump(Arc::downgrade(&inner)), inner.own_thread_start()); // control hook
        Ok(Recorder { inner })
    }

    /// The directory this recording writes its chunks into.
    pub fn repository_dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Writes and publishes everything committed so far now.
    pub fn flush(&self) {
        let _own = crate::alloc::suspend();
        if self.inner.owner().is_ok() {
            self.inner.flush();
        }
    }

    /// Writes one valid `.jfr` file with everything the repository holds, the live chunk included
    /// up to now, without stopping the recording.
    pub fn dump(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let _own = crate::alloc::suspend();
        self.inner.owner()?;
        let path = path.as_ref();
        let write_error = |source| Error::Write { path: path.to_owned(), source };
        let bytes = self.inner.dump_bytes().map_err(write_error)?;
        storage::write_file_atomically(path, &bytes).map_err(write_error)
    }

    /// Changes an event type's settings while recording.
    pub fn set_event_settings(&self, name: &str, settings: EventSettings) {
        if self.inner.owner().is_ok() {
            metadata_registry::set_settings(name, settings);
            self.inner.l.lock(Holder::Lifecycle, 0).settings_changed = true;
        }
    }

    /// Starts sampling the calling thread at once, with exact stack bounds (threads are also
    /// discovered automatically, within about 100 ms, with bounds from `/proc/self/maps`).
    pub fn register_current_thread(&self) -> io::Result<()> {
        let _own = crate::alloc::suspend();
        self.inner.owner().map_err(io::Error::other)?;
        // The thread's name now, while it runs (and a ThreadStart, and a ThreadEnd at its exit).
        crate::commit::attach_current_thread();
        let sampler = self.inner.sampler.lock().clone();
        match sampler {
            Some(s) => s.register_current_thread(),
            None => Ok(()),
        }
    }

    /// The CPU sampler's counters (taken = written + lost per thread once drained), if sampling.
    pub fn sampler_stats(&self) -> Option<SamplerStats> {
        self.inner.owner().ok()?;
        let sampler = self.inner.sampler.lock().clone();
        sampler.map(|s| s.stats())
    }

    /// Stops the recording like [`Recorder::stop`] and returns the final counters.
    pub fn stop_with_report(self) -> Result<FinalReport, Error> {
        self.stop_reporting(false)
    }

    /// Stops the recording like [`Recorder::stop_with_report`], except that its last chunk does
    /// not carry the final flag: the process is about to `exec` a program whose recording
    /// continues in this directory ([`RecorderBuilder::continue_recording_in`]), and a stream
    /// following the directory must not end here. Every timer and perf event of the sampler is
    /// disarmed and its threads joined on return, so no new SIGPROF of the recorder is raised
    /// (one may still be pending on a thread that blocks it).
    pub fn stop_for_exec(self) -> Result<FinalReport, Error> {
        self.stop_reporting(true)
    }

    fn stop_reporting(self, continued: bool) -> Result<FinalReport, Error> {
        let _own = crate::alloc::suspend();
        self.inner.owner()?;
        // Relaxed: read by `shut_down`, which the same thread runs below.
        self.inner.continued.store(continued, Ordering::Relaxed);
        self.inner.stop()?;
        let state = self.inner.l.lock(Holder::Lifecycle, 0);
        let (stats, sampler, allocation) =
            (state.stats, state.final_stats::<SamplerStats>(), state.final_stats::<crate::alloc::AllocationStats>());
        #[cfg(feature = "push")]
        let push = self.inner.push_stats();
        drop(state);
        Ok(FinalReport {
            stats,
            sampler,
            allocation,
            #[cfg(feature = "push")]
            push,
            scopes: crate::scope::absorb(|m| m.report()),
        })
    }

    /// The scope tree so far ([`scope!`](crate::scope), `#[recorder::profile]`,
    /// [`scope_at`](crate::scope_at), spans of the tracing layer): the trees of all threads, those
    /// that exited included, merged into one report. Empty in a forked child.
    pub fn scope_report(&self) -> ScopeReport {
        if self.inner.owner().is_err() {
            return ScopeReport::default();
        }
        crate::scope::absorb(|m| m.report())
    }

    /// The Pyroscope uploader's counters, if the recording pushes.
    #[cfg(feature = "push")]
    pub fn push_stats(&self) -> Option<crate::push::PushStats> {
        self.inner.owner().ok()?;
        self.inner.push_stats()
    }

    /// Counters so far (zero in a forked child: the recording is the parent's).
    pub fn stats(&self) -> RecorderStats {
        if self.inner.owner().is_err() {
            return RecorderStats::default();
        }
        let mut stats = self.inner.l.lock(Holder::Lifecycle, 0).stats;
        stats.stack_table_overflow = self.inner.shared.stacks.overflow();
        stats
    }

    /// Diagnostics: every time L was held, if the builder asked for the log
    /// (`log_lock_holds`); `examples/lock_hold.rs` reads it.
    #[doc(hidden)]
    pub fn lock_holds(&self) -> Vec<LockHold> {
        self.inner.l.holds()
    }

    /// Stops the recording: flushes, finishes the last chunk with the final flag, stops the
    /// flusher thread. In a forked child, does nothing.
    pub fn stop(self) -> Result<(), Error> {
        self.inner.stop()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.inner.stop();
    }
}

/// A start in progress: no other recording starts until it is published or dropped. (Not a
/// lock the fork hooks could wait for: a flag, cleared in a forked child.)
struct Reservation;

impl Reservation {
    fn take() -> Result<Reservation, Error> {
        let current = CURRENT.lock();
        // AcqRel: pairs with the Release store of `Drop`, ordering the previous start's work.
        if current.is_some() || STARTING.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyRunning);
        }
        Ok(Reservation)
    }

    /// Makes `shared` the current recording: application threads attach to it from now on.
    fn publish(self, shared: Arc<CommitShared>) {
        let generation = shared.generation;
        *CURRENT.lock() = Some(shared);
        // Release: publishes `CURRENT` (and everything set up before); pairs with the Acquire
        // load in `CommitThreadState::record`.
        GENERATION.store(generation, Ordering::Release);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // Release: pairs with the AcqRel swap in `take`.
        STARTING.store(false, Ordering::Release);
    }
}

/// Creates `<base>/<yyyy_MM_dd_HH_mm_ss>_<pid>[_N]` and closes the recordings of dead processes.
fn create_recording_dir(base: &Path, wall: ClockPair) -> Result<PathBuf, Error> {
    let dir_name =
        repository::layout::recording_dir_name(&repository::timestamp_name(wall.epoch_nanos), std::process::id());
    let mut dir = base.join(&dir_name);
    let mut n = 1;
    while dir.exists() {
        dir = base.join(format!("{dir_name}_{n}"));
        n += 1;
    }
    repository::prepare_dir(base)
        .and_then(|()| repository::prepare_dir(&dir))
        .map_err(|source| Error::Repository { path: dir.clone(), source })?;
    // Reliability: recordings of processes that died without finishing them (kill -9, crash)
    // are closed so that every reader accepts them; see `repository::repair`.
    for (path, result) in repository::repair_dead_recordings(base) {
        if let Err(e) = result {
            eprintln!("recorder: repairing the recording of a dead process in {} failed: {e}", path.display());
        }
    }
    Ok(dir)
}

/// Counts the recordings written into one directory (`RecorderBuilder::continue_recording_in`).
const RECORDINGS_FILE: &str = ".recordings";

/// An existing recording directory of ours that a recording continues (it must be there: a
/// missing one is not created, the recording it stood for is gone), and how many recordings
/// wrote into it before (at least 1), which this one's constant keys lie above.
fn open_recording_dir(dir: &Path) -> Result<(PathBuf, u64), Error> {
    let fail = |source| Error::Repository { path: dir.to_owned(), source };
    if !std::fs::symlink_metadata(dir).map_err(fail)?.is_dir() {
        return Err(fail(io::Error::new(io::ErrorKind::InvalidInput, "not a directory")));
    }
    repository::prepare_dir(dir).map_err(fail)?;
    let count = dir.join(RECORDINGS_FILE);
    let before: u64 = std::fs::read_to_string(&count).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(1).max(1);
    storage::write_file_atomically(&count, format!("{}\n", before + 1).as_bytes()).map_err(fail)?;
    Ok((dir.to_owned(), before))
}

impl Inner {
    /// The recording belongs to the process that started it (`tests/fork.rs`).
    fn owner(&self) -> Result<(), Error> {
        if std::process::id() == self.pid {
            Ok(())
        } else {
            Err(Error::ForkedChild { owner: self.pid })
        }
    }

    /// One flush: everything committed and sampled so far, published.
    fn flush(&self) {
        let id = self.flushes.fetch_add(1, Ordering::Relaxed) + 1;
        let l = self.l.lock(Holder::Flush, id);
        drop(self.flush_locked(l, id));
    }

    /// The flush (docs/architecture.md, data paths 1 and 2). The order is the contract: the event
    /// buffers, then the sampler-style sources (after the events, under L, never skipped:
    /// docs/sampler-protocol.md I7), then the recorder's own events; then the metadata if it changed, one checkpoint,
    /// and the publish. Every source reports the threads and stacks it references to the chunk
    /// writer, whose checkpoint defines them in this segment.
    fn flush_locked<'a>(&'a self, mut l: Held<'a>, id: u64) -> Held<'a> {
        // Committing threads check their names once after each flush (a rename shows up).
        crate::commit::next_name_epoch();
        l.open_chunk_if_needed();
        let now = l.now_ticks();
        l.drain_event_buffers(); // 1. application events
        l.drain_sample_sources(); // 2. CPU samples (wall-clock, allocation: more sources)
        l.write_scope_timings(now); // 3. the scope tree's changed nodes
        l.write_own_events(now); // 4. thread starts/ends, data loss, settings, statistics
        let mut l = self.resolve_without_l(l, id); // names of new addresses and threads
        l.open_chunk_if_needed(); // (a write failed meanwhile: the chunk was closed)
        let now = l.now_ticks();
        l.close_segment(now); // 5-6. metadata if changed, one checkpoint
        l.publish(now); // 7. the segment, then the header (guard protocol); retention
        l
    }

    /// Symbolizes the segment's new addresses and reads its new threads' names with L released
    /// (the first address of a module parses its debug info). The segment
    /// stays unpublished meanwhile and its references stay in the chunk writer, so any L holder
    /// that closes it defines them. What arrives meanwhile (samples the recorder thread drains)
    /// gets another round; after three, the checkpoint resolves the rest under L.
    fn resolve_without_l<'a>(&'a self, mut l: Held<'a>, id: u64) -> Held<'a> {
        for _ in 0..3 {
            let missing = l.unresolved();
            if missing.is_empty() {
                break;
            }
            drop(l);
            let resolved = resolve::resolve(&missing);
            l = self.l.lock(Holder::FlushClose, id);
            l.resolved(resolved);
        }
        l
    }

    /// Compresses the chunks that finished since the last call, with L released.
    fn compress_finished(&self, chunks: Vec<PathBuf>) {
        for plain in chunks {
            let result = crate::compress::compress_chunk_file(&plain);
            self.l.lock(Holder::Lifecycle, 0).storage.compressed(&plain, result);
        }
    }

    /// Everything recorded so far as one file: a flush, the plan under L, the reading without.
    fn dump_bytes(&self) -> io::Result<Vec<u8>> {
        let id = self.flushes.fetch_add(1, Ordering::Relaxed) + 1;
        let l = self.flush_locked(self.l.lock(Holder::Dump, id), id);
        let plan = l.storage.dump_plan();
        drop(l);
        plan?.read()
    }

    fn spawn_threads(self: &Arc<Self>, sampler: Option<Arc<Sampler>>) -> Result<(), Error> {
        let me = Arc::clone(self);
        let handle = spawn("recorder-flush", move || me.flusher_loop()).map_err(Error::Thread)?;
        self.shared.wakeup.set_thread(handle.thread().clone());
        *self.flusher.lock() = Some(handle);
        if let Some(sampler) = sampler {
            let me = Arc::clone(self);
            let handle = spawn("recorder-sampler", move || me.sampler_loop(&sampler)).map_err(Error::Thread)?;
            *self.sampler_thread.lock() = Some(handle);
        }
        Ok(())
    }

    fn stop(&self) -> Result<(), Error> {
        let _own = crate::alloc::suspend();
        if self.owner().is_err() || self.stopping.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        crate::control::stop(self.shared.generation); // control hook
        {
            let mut current = CURRENT.lock();
            if current.as_ref().is_some_and(|s| Arc::ptr_eq(s, &self.shared)) {
                *current = None;
                // Release: later commits see no recording and return at once.
                GENERATION.store(0, Ordering::Release);
            }
        }
        // A commit that found the recording running is in its buffer before
        // the final flush, or (a field encoder blocked for a second) counted lost.
        let stuck = self.shared.wait_for_commits(Duration::from_secs(1));
        if stuck > 0 {
            self.l.lock(Holder::Lifecycle, 0).note_loss(LossReport {
                reason: "commit still in progress when the recording stopped".into(),
                events: stuck,
                ..LossReport::default()
            });
        }
        self.shut_down()
    }

    /// Joins the threads, stops the sources, writes the last segment and finishes the chunk.
    fn shut_down(&self) -> Result<(), Error> {
        self.stopping.store(true, Ordering::Release);
        if let Some(handle) = self.flusher.lock().take() {
            handle.thread().unpark();
            let _ = handle.join();
        }
        if let Some(handle) = self.sampler_thread.lock().take() {
            let _ = handle.join();
        }
        // The sampler can only stop once its last other handle is gone. The flushes below are
        // the recorder's own work (symbolizing, for hundreds of ms in a debug build) on the
        // caller's thread: it is not sampled for them, as the recorder's threads never are.
        let mut footprint = self.footprint();
        if let Some(sampler) = self.sampler.lock().take() {
            sampler.exclude_current_thread();
        }
        self.flush();
        footprint.symbolizer = Some(crate::symbolize::process_usage());
        self.l.lock(Holder::Lifecycle, 0).write_final_footprint(&footprint);
        self.l.lock(Holder::Lifecycle, 0).stop_sources();
        self.flush();
        let mut l = self.l.lock(Holder::Lifecycle, 0);
        // Relaxed: set by `stop_reporting` on this thread before the stop.
        let finished = l.finish_chunk(!self.continued.load(Ordering::Relaxed));
        let chunks = l.storage.take_compression();
        drop(l);
        self.compress_finished(chunks);
        // Without L: the uploader may post the last chunks within its grace period.
        #[cfg(feature = "push")]
        if let Some(push) = self.push.lock().as_mut() {
            push.finish();
        }
        finished.map_err(|source| Error::Write { path: self.dir.clone(), source })
    }

    /// What a thread of the recorder's own (the uploader, the control listener) runs first: like
    /// the flusher, it is not sampled, and its allocations are not the application's.
    fn own_thread_start(&self) -> Box<dyn FnOnce() + Send> {
        let sampler = self.sampler.lock().clone();
        Box::new(move || {
            if let Some(s) = sampler {
                s.exclude_current_thread();
            }
        })
    }

    /// Starts the Pyroscope uploader thread (the recording directory is its queue; `link` is
    /// what retention shares with it).
    #[cfg(feature = "push")]
    fn start_push(&self, target: crate::push::PushTarget, link: Arc<crate::push::UploaderShared>) -> Result<(), Error> {
        let handle =
            crate::push::start(target, self.dir.clone(), link, self.own_thread_start()).map_err(Error::Thread)?;
        *self.push.lock() = Some(handle);
        Ok(())
    }

    #[cfg(feature = "push")]
    fn push_stats(&self) -> Option<crate::push::PushStats> {
        self.push.lock().as_ref().map(|h| h.stats())
    }

    fn flusher_loop(&self) {
        if let Some(sampler) = self.sampler.lock().as_ref() {
            sampler.exclude_current_thread();
        }
        let (flush_interval, periodic_interval) = {
            let s = &self.l.lock(Holder::Lifecycle, 0).settings;
            (s.flush_interval, s.periodic_interval)
        };
        if self.shared.logical.is_some() {
            // Deterministic mode: flushes happen only when asked (flush, dump, stop), so segment
            // boundaries do not depend on timing.
            // Relaxed: `stop` also unparks us.
            while !self.stopping.load(Ordering::Relaxed) {
                std::thread::park_timeout(Duration::from_millis(100));
            }
            return;
        }
        let mut next_flush = Instant::now() + flush_interval;
        let mut next_periodic = Instant::now();
        // Early flushes (buffers filling up) are spaced at least this far apart.
        let min_gap = flush_interval.min(Duration::from_millis(20));
        let mut last_flush = Instant::now();
        // Relaxed: `stop` also unparks us; a late observation costs one more round.
        while !self.stopping.load(Ordering::Relaxed) {
            let now = Instant::now();
            let deadline = next_flush.min(next_periodic);
            if deadline > now {
                std::thread::park_timeout(deadline - now);
            }
            if self.stopping.load(Ordering::Relaxed) {
                break;
            }
            let now = Instant::now();
            let woken = self.shared.wakeup.take();
            if now >= next_periodic {
                let mut reading = periodic::Reading::now();
                if let Some(sampler) = self.sampler.lock().as_ref() {
                    reading.exited = sampler.take_exited_cpu();
                }
                reading.footprint = Some(self.footprint());
                self.l.lock(Holder::Periodic, 0).write_periodic(reading);
                next_periodic = now + periodic_interval;
            }
            if now >= next_flush || (woken && now.duration_since(last_flush) >= min_gap) {
                let id = self.flushes.fetch_add(1, Ordering::Relaxed) + 1;
                let mut l = self.flush_locked(self.l.lock(Holder::Flush, id), id);
                l.rotate_if_due();
                let finished = l.storage.take_compression();
                drop(l);
                self.compress_finished(finished);
                last_flush = now;
                if now >= next_flush {
                    next_flush += flush_interval;
                    if next_flush < now {
                        next_flush = now + flush_interval;
                    }
                }
            }
        }
    }

    /// The recorder's own memory by part (without L; `recorder.Footprint`).
    fn footprint(&self) -> periodic::Footprint {
        // Not under the sampler's lock: registrations and statistics take it.
        let sampler = self.sampler.lock().clone();
        let (sampler_buffers, unwind_tables) = sampler.as_ref().map_or((0, 0), |s| s.memory());
        periodic::Footprint {
            // Relaxed: a statistic.
            event_buffers: self.shared.allocated.load(Ordering::Relaxed) as u64,
            sampler_buffers: sampler_buffers as u64,
            allocation_pool: crate::alloc::pool_bytes() as u64,
            stack_table: self.shared.stacks.resident_bytes() as u64,
            unwind_tables: unwind_tables as u64,
            own_code: own_code_bytes(),
            symbolizer: crate::symbolize::process_usage_if_idle(),
        }
    }

    /// The recorder thread (docs/sampler-protocol.md §4): woken by the handler when a buffer fills
    /// up, it drains the full queue under L, and every 100 ms discovers new threads and collects
    /// lost samples.
    fn sampler_loop(&self, sampler: &Sampler) {
        sampler.exclude_current_thread();
        let maintain = || {
            // Modules loaded since the last pass get their `pthread_create` interposed.
            crate::thread_hooks::rescan();
            // Discovery reads /proc for every thread: without L. Only the
            // names it read go to the chunk, under L.
            let names = sampler.discover_threads_unlocked().names;
            self.l.lock(Holder::Maintain, 0).maintain_sources(names);
        };
        // The threads running already are armed first: building the tables below takes a while
        // (a debug build's preload spent seconds on it beside a busy neighbour, while a thread
        // started before `main` burned its 600 ms unseen). Until they are built, samples in code
        // without frame pointers keep their innermost frames only.
        maintain();
        // The tables `start` left to this thread (`unwind_tables_in_background`), at once; a
        // check of the mapped modules otherwise.
        sampler.build_unwind_tables();
        // Another pass at once: threads started while the tables were built.
        let mut last_maintenance = Instant::now() - Duration::from_secs(1);
        // Relaxed: `stop` joins this thread after setting the flag; at worst one more round.
        while !self.stopping.load(Ordering::Relaxed) {
            let work = sampler.wait_pending(Duration::from_millis(50));
            if self.stopping.load(Ordering::Relaxed) {
                break;
            }
            if work {
                self.l.lock(Holder::DrainReady, 0).drain_ready();
            }
            if last_maintenance.elapsed() >= Duration::from_millis(100) {
                last_maintenance = Instant::now();
                maintain();
            }
        }
    }
}

/// Spawns one of the recorder's threads.
fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    #[cfg(test)]
    if tests::hooks::spawn_fails(name) {
        return Err(io::Error::other(format!("injected failure to spawn {name}")));
    }
    crate::own_thread::spawn(name, f)
}

/// The event type names known to the recorder (built-in and registered so far).
pub fn known_event_types() -> Vec<String> {
    metadata_registry::event_names()
}

// ---- Control socket hook (src/control.rs) ----
/// The dump the control socket runs: a weak reference, so the listener never keeps the recording
/// alive; the same steps as [`Recorder::dump`].
fn control_dump(inner: std::sync::Weak<Inner>) -> crate::control::DumpFn {
    Box::new(move |path| {
        let _own = crate::alloc::suspend();
        let inner = inner.upgrade().filter(|i| !i.stopping.load(Ordering::Acquire));
        let inner = inner.ok_or_else(|| "the recording has stopped".to_owned())?;
        let bytes = inner.dump_bytes().map_err(|e| format!("dump failed: {e}"))?;
        storage::write_file_atomically(path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(bytes.len() as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test-only observation and fault injection points in `start`.
    pub(super) mod hooks {
        use std::cell::{Cell, RefCell};

        thread_local! {
            static FAIL_SPAWN: RefCell<Option<&'static str>> = const { RefCell::new(None) };
            pub(super) static CURRENT_HELD_AT_SAMPLER_START: Cell<Option<bool>> = const { Cell::new(None) };
        }

        /// `start` is about to start the sampler (which registers an atfork hook).
        pub fn sampler_starting() {
            CURRENT_HELD_AT_SAMPLER_START.with(|c| c.set(Some(crate::commit::CURRENT.is_locked())));
        }

        pub fn spawn_fails(name: &str) -> bool {
            FAIL_SPAWN.with(|f| *f.borrow() == Some(name))
        }

        pub fn fail_spawn(name: Option<&'static str>) {
            FAIL_SPAWN.with(|f| *f.borrow_mut() = name);
        }
    }

    static SERIAL: crate::fork::ForkSafeMutex<()> = crate::fork::ForkSafeMutex::new(());

    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            .map(|s| s.trim().to_owned())
            .collect()
    }

    /// `start` must not hold `CURRENT` (which the fork prepare hook takes)
    /// while the sampler registers its atfork hook: on glibc < 2.36 and musl, a concurrent fork
    /// holds the atfork lock while its prepare hook waits for `CURRENT`.
    #[test]
    fn the_sampler_registers_its_fork_hook_without_current_held() {
        let _serial = SERIAL.lock();
        let dir = tempfile::tempdir().unwrap();
        hooks::CURRENT_HELD_AT_SAMPLER_START.with(|c| c.set(None));
        let rec = Recorder::builder().repository(dir.path()).start().unwrap();
        let held = hooks::CURRENT_HELD_AT_SAMPLER_START.with(|c| c.get());
        rec.stop().unwrap();
        assert_eq!(held, Some(false), "CURRENT was held while the sampler started");
    }

    /// When the recorder thread cannot be spawned, `start` fails and leaves
    /// nothing running (no flusher, no sampler with armed timers), and the next start works.
    #[test]
    fn a_failed_start_leaves_nothing_running() {
        let _serial = SERIAL.lock();
        let dir = tempfile::tempdir().unwrap();
        hooks::fail_spawn(Some("recorder-sampler"));
        let failed = Recorder::builder().repository(dir.path()).start();
        hooks::fail_spawn(None);
        assert!(matches!(failed, Err(Error::Thread(_))), "{failed:?}");
        // Joined threads are gone from /proc at once.
        // (comm holds 15 bytes: "recorder-sampler" shows as "recorder-sample")
        let ours = |n: &String| n == "recorder-flush" || n == "recorder-sample";
        let left: Vec<String> = thread_names().into_iter().filter(ours).collect();
        assert!(left.is_empty(), "threads of the failed start still run: {left:?}");
        assert_eq!(GENERATION.load(Ordering::Acquire), 0);
        let rec = Recorder::builder().repository(dir.path()).start().expect("a start after a failed one works");
        rec.stop().unwrap();
    }
}
