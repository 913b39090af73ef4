//! The recorder: settings, start/stop, the chunk writer behind the lock L, the flusher thread,
//! rotation, retention and dumps.
//!
//! L is `Inner::state`, a `parking_lot::Mutex<State>`. Every L holder (flusher thread, `dump`,
//! `stop`) runs whole steps under it: copy the event buffers, write the flusher's own events, one
//! checkpoint with every constant the segment references that the chunk has not defined yet, then
//! publish the header. Application threads never take L.
//!
//! Events carrying a stack or thread id across a rotation (design.md §6, first hard part): no
//! epochs. Every record in an event buffer starts with `startTime, duration, eventThread,
//! stackTrace`; while copying a buffer into the chunk the L holder reads those leading varints and
//! defines the referenced threads and stacks in the same segment's checkpoint. Whatever chunk a
//! record lands in, its constants are defined there, by construction.

use crate::buffer::EventBuffer;
use crate::builtin;
use crate::clock::{self, ClockPair};
use crate::commit::{Shared, ThreadNote, CURRENT, GENERATION};
use crate::compress;
use crate::metadata_registry::{self, EventSettings};
use crate::repository::{self, ChunkFile, FinishedChunk};
use crate::sampler::{SampleRecord, Sampler, SamplerConfig, SamplerLocked, SamplerStats, SamplingMode};
use crate::stack::{as_elided, DepthPolicy, Shown, StackKey, StackTable, MAX_DEPTH_PER_END};
use crate::symbolize::Symbolizer;
use crate::sync::statics::{AtomicBool, AtomicU64, Ordering};
use jfr_format::header::{ChunkHeader, FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, STATE_FINISHED};
use jfr_format::metadata::{
    ids, FRAME_TYPES, FRAME_TYPE_INLINED, FRAME_TYPE_NATIVE, THREAD_STATES, THREAD_STATE_RUNNABLE,
};
use jfr_format::varint;
use jfr_format::write::{self, put_bool, put_int, put_long, put_string, put_utf8, put_varint, Checkpoint, ChunkWriter};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Errors from starting, stopping or dumping a recording.
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// A setting is out of range.
    InvalidSetting(String),
    /// Another recording runs in this process.
    AlreadyRunning,
    /// The repository cannot be used.
    Repository {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Writing a file failed.
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The recorder thread could not be started.
    Thread(io::Error),
    /// The CPU sampler could not be started.
    Sampler(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidSetting(s) => write!(f, "invalid setting: {s}"),
            Error::AlreadyRunning => write!(f, "a recording is already running in this process"),
            Error::Repository { path, source } => {
                write!(f, "repository {} cannot be used: {source}", path.display())
            }
            Error::Write { path, source } => {
                write!(f, "writing {} failed: {source}", path.display())
            }
            Error::Thread(e) => write!(f, "cannot start the recorder thread: {e}"),
            Error::Sampler(e) => write!(f, "cannot start the CPU sampler: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Repository { source, .. } | Error::Write { source, .. } => Some(source),
            Error::Thread(e) | Error::Sampler(e) => Some(e),
            Error::InvalidSetting(_) | Error::AlreadyRunning => None,
        }
    }
}

/// Validated recording settings. See [`RecorderBuilder`] for each one's meaning and default.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Base directory; the recording writes into a `<yyyy_MM_dd_HH_mm_ss>_<pid>` directory in it.
    pub repository: PathBuf,
    /// Flush interval.
    pub flush_interval: Duration,
    /// Rotate when a chunk reaches this size.
    pub max_chunk_size: u64,
    /// Rotate when a chunk reaches this age.
    pub max_chunk_age: Duration,
    /// Retention: total size of the repository.
    pub max_size: u64,
    /// Retention: oldest data kept.
    pub max_age: Option<Duration>,
    /// Bytes of event buffers at most.
    pub memory_budget: usize,
    /// Size of one thread's event buffer.
    pub buffer_size: usize,
    /// Stack depth policy for events (and samples).
    pub depth: DepthPolicy,
    /// Per event type settings.
    pub events: Vec<(String, EventSettings)>,
    /// Period of the periodic built-in events (CPU load, resident set size).
    pub periodic_interval: Duration,
    /// Name of the recording.
    pub name: String,
    /// Node capacity of the stack table.
    pub stack_table_capacity: usize,
    /// CPU sampling (`None`: off). Samples follow `depth` (its `max_depth` is not used).
    pub sampling: Option<SamplerConfig>,
    /// Finished chunks are replaced by zstd-compressed `<name>.jfr.zst` files (needs the crate's
    /// `zstd` feature).
    pub compress_finished_chunks: bool,
    /// Deterministic mode: logical timestamps and thread numbers, no sampling, no periodic events,
    /// flushes only when asked (`flush`, `dump`, `stop`), so the same events give byte-identical
    /// files.
    pub deterministic: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            repository: repository::default_base(),
            flush_interval: Duration::from_secs(1),
            max_chunk_size: 12 * 1024 * 1024,
            max_chunk_age: Duration::from_secs(3600),
            max_size: 250 * 1024 * 1024,
            max_age: None,
            memory_budget: 64 * 1024 * 1024,
            buffer_size: 64 * 1024,
            depth: DepthPolicy::default(),
            events: Vec::new(),
            periodic_interval: Duration::from_secs(1),
            name: "recorder".into(),
            stack_table_capacity: 1 << 18,
            sampling: Some(SamplerConfig::default()),
            compress_finished_chunks: false,
            deterministic: false,
        }
    }
}

/// Builds a recording. Every setting has a default; [`RecorderBuilder::start`] validates them.
#[derive(Debug, Clone, Default)]
pub struct RecorderBuilder {
    settings: Settings,
    /// `stack_depth` was set: `stack_depth_outer` alone keeps only the outermost frames.
    inner_depth_set: bool,
}

impl RecorderBuilder {
    /// Base directory of the repository (default: `recorder-<uid>` in the temporary directory).
    pub fn repository(mut self, dir: impl Into<PathBuf>) -> Self {
        self.settings.repository = dir.into();
        self
    }
    /// How often committed events are written and published (default 1 s; 10 ms to 1 h).
    pub fn flush_interval(mut self, d: Duration) -> Self {
        self.settings.flush_interval = d;
        self
    }
    /// Rotate chunks at this size (default 12 MiB; at least 64 KiB).
    pub fn max_chunk_size(mut self, bytes: u64) -> Self {
        self.settings.max_chunk_size = bytes;
        self
    }
    /// Replace each finished chunk file by a zstd-compressed `<name>.jfr.zst` (default false;
    /// the live chunk is never compressed). `recorder` reads such repositories; the JDK's tools
    /// and streaming readers (which only look at `*.jfr`) do not, and compressing costs the
    /// flushing thread some time at each rotation. Needs the crate's `zstd` feature.
    #[cfg(feature = "zstd")]
    pub fn compress_finished_chunks(mut self, on: bool) -> Self {
        self.settings.compress_finished_chunks = on;
        self
    }
    /// Rotate chunks at this age (default 1 h; at least the flush interval).
    pub fn max_chunk_age(mut self, d: Duration) -> Self {
        self.settings.max_chunk_age = d;
        self
    }
    /// Delete the oldest finished chunks beyond this total size (default 250 MiB).
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.settings.max_size = bytes;
        self
    }
    /// Delete finished chunks older than this (default: keep).
    pub fn max_age(mut self, d: Duration) -> Self {
        self.settings.max_age = Some(d);
        self
    }
    /// Bytes of event buffers at most (default 64 MiB); events beyond it are counted as lost.
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.settings.memory_budget = bytes;
        self
    }
    /// Size of each thread's event buffer (default 64 KiB; 256 B to 64 MiB).
    pub fn buffer_size(mut self, bytes: usize) -> Self {
        self.settings.buffer_size = bytes;
        self
    }
    /// Keep the innermost `n` frames of stacks (default 128; at most 2048).
    pub fn stack_depth(mut self, n: usize) -> Self {
        self.settings.depth.inner = n;
        self.inner_depth_set = true;
        self
    }
    /// Keep the outermost `m` frames of stacks (default 0; at most 2048). Alone, it keeps only the
    /// outermost `m`; with [`Self::stack_depth`], both ends with one `<elided:K>` frame between.
    pub fn stack_depth_outer(mut self, m: usize) -> Self {
        self.settings.depth.outer = m;
        if !self.inner_depth_set {
            self.settings.depth.inner = if m > 0 { 0 } else { DepthPolicy::default().inner };
        }
        self
    }
    /// Settings of the event type called `name`.
    pub fn event(mut self, name: impl Into<String>, settings: EventSettings) -> Self {
        self.settings.events.push((name.into(), settings));
        self
    }
    /// Period of CPU-load and memory events (default 1 s).
    pub fn periodic_interval(mut self, d: Duration) -> Self {
        self.settings.periodic_interval = d;
        self
    }
    /// Samples every thread's stack every `period` of its CPU time (default 10 ms; 100 µs to 1 s).
    pub fn sampling_period(mut self, period: Duration) -> Self {
        self.settings.sampling.get_or_insert_with(SamplerConfig::default).period = period;
        self
    }
    /// How samples are triggered (default: perf events when the kernel allows them, else CPU-clock
    /// timers).
    pub fn sampling_mode(mut self, mode: SamplingMode) -> Self {
        self.settings.sampling.get_or_insert_with(SamplerConfig::default).mode = mode;
        self
    }
    /// Sampler buffer size in bytes and buffers per thread (defaults 16 KiB and 3).
    pub fn sampler_buffers(mut self, bytes: usize, per_thread: usize) -> Self {
        let config = self.settings.sampling.get_or_insert_with(SamplerConfig::default);
        config.buffer_bytes = bytes;
        config.buffers_per_thread = per_thread;
        self
    }
    /// Threads that can be sampled at once (default 128).
    pub fn max_sampled_threads(mut self, n: usize) -> Self {
        self.settings.sampling.get_or_insert_with(SamplerConfig::default).max_threads = n;
        self
    }
    /// Deterministic mode: event timestamps become a logical counter (1, 2, 3, …) and durations 0,
    /// threads are numbered in the order they first commit, chunk times start at 0, and nothing
    /// is flushed, sampled or measured on a timer. The same events then give byte-identical
    /// files (golden-file tests). Stack traces still carry real (ASLR-dependent) addresses: turn
    /// them off for golden files.
    pub fn deterministic(mut self, on: bool) -> Self {
        self.settings.deterministic = on;
        if on {
            self.settings.sampling = None;
        }
        self
    }
    /// Records no CPU samples (events only).
    pub fn no_sampling(mut self) -> Self {
        self.settings.sampling = None;
        self
    }
    /// Name of the recording (shown in `jdk.ActiveRecording`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.name = name.into();
        self
    }
    /// The settings as they stand.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Validates the settings, creates the repository and starts recording.
    pub fn start(self) -> Result<Recorder, Error> {
        Recorder::start(self.settings)
    }
}

fn validate(s: &Settings) -> Result<(), Error> {
    let bad = |msg: String| Err(Error::InvalidSetting(msg));
    if s.flush_interval < Duration::from_millis(10) || s.flush_interval > Duration::from_secs(3600) {
        return bad(format!("flush interval {:?} is outside 10 ms ..= 1 h", s.flush_interval));
    }
    if s.max_chunk_size < 64 * 1024 {
        return bad(format!("max chunk size {} is below 64 KiB", s.max_chunk_size));
    }
    if s.max_chunk_age < s.flush_interval {
        return bad(format!("max chunk age {:?} is shorter than the flush interval", s.max_chunk_age));
    }
    if s.max_size < s.max_chunk_size {
        return bad(format!("max size {} is smaller than the max chunk size {}", s.max_size, s.max_chunk_size));
    }
    if !(256..=64 * 1024 * 1024).contains(&s.buffer_size) {
        return bad(format!("buffer size {} is outside 256 B ..= 64 MiB", s.buffer_size));
    }
    if s.memory_budget < s.buffer_size {
        return bad(format!("memory budget {} is smaller than one buffer ({})", s.memory_budget, s.buffer_size));
    }
    if s.depth.inner > MAX_DEPTH_PER_END || s.depth.outer > MAX_DEPTH_PER_END {
        return bad(format!("stack depth limits must be at most {MAX_DEPTH_PER_END} at each end"));
    }
    if s.depth.inner == 0 && s.depth.outer == 0 {
        return bad("stack depth must keep at least one frame".into());
    }
    if let Some(sampling) = &s.sampling {
        if sampling.period < Duration::from_micros(100) || sampling.period > Duration::from_secs(1) {
            return bad(format!("sampling period {:?} is outside 100 µs ..= 1 s", sampling.period));
        }
        if sampling.max_threads == 0 || sampling.max_threads > 65_536 {
            return bad(format!("max sampled threads {} is outside 1 ..= 65536", sampling.max_threads));
        }
    }
    if s.periodic_interval < Duration::from_millis(10) {
        return bad(format!("periodic interval {:?} is below 10 ms", s.periodic_interval));
    }
    if s.compress_finished_chunks && !cfg!(feature = "zstd") {
        return bad("compressed chunks need recorder's `zstd` feature".into());
    }
    Ok(())
}

/// Wakes the flusher from another thread without a lock.
#[derive(Debug, Default)]
pub(crate) struct Wakeup {
    pending: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

impl Wakeup {
    /// Asks the flusher to run soon.
    pub(crate) fn notify(&self) {
        // Release: pairs with the Acquire swap in `take`; nothing else is published.
        if !self.pending.swap(true, Ordering::Release) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
    fn take(&self) -> bool {
        // Acquire: pairs with `notify`.
        self.pending.swap(false, Ordering::Acquire)
    }
}

/// Counters for tests and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Event records copied into chunks.
    pub events_written: u64,
    /// Events lost (memory budget, write failures).
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
}

/// A running recording. Dropping it stops the recording cleanly (the last chunk gets the final
/// flag).
#[derive(Debug)]
pub struct Recorder {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    state: Mutex<State>,
    stopping: AtomicBool,
    flusher: Mutex<Option<JoinHandle<()>>>,
    sampler_thread: Mutex<Option<JoinHandle<()>>>,
    dir: PathBuf,
    /// The process that started the recording: in a forked child, stop does nothing.
    pid: u32,
}

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

impl Recorder {
    /// A builder with default settings.
    pub fn builder() -> RecorderBuilder {
        RecorderBuilder::default()
    }

    fn start(settings: Settings) -> Result<Recorder, Error> {
        validate(&settings)?;
        crate::fork::install();
        let mut current = CURRENT.lock();
        if current.is_some() {
            return Err(Error::AlreadyRunning);
        }
        let wall = ClockPair::now();
        let start = if settings.deterministic { ClockPair { epoch_nanos: 0, ticks: 0 } } else { wall };
        let dir_name = format!("{}_{}", repository::timestamp_name(wall.epoch_nanos), std::process::id());
        let mut dir = settings.repository.join(&dir_name);
        let mut n = 1;
        while dir.exists() {
            dir = settings.repository.join(format!("{dir_name}_{n}"));
            n += 1;
        }
        repository::prepare_dir(&settings.repository)
            .and_then(|()| repository::prepare_dir(&dir))
            .map_err(|source| Error::Repository { path: dir.clone(), source })?;
        // Reliability: recordings of processes that died without finishing them (kill -9, crash)
        // are closed so that every reader accepts them; see `repository::repair`.
        for (path, result) in repository::repair_dead_recordings(&settings.repository) {
            if let Err(e) = result {
                eprintln!("recorder: repairing the recording of a dead process in {} failed: {e}", path.display());
            }
        }
        for (name, s) in &settings.events {
            metadata_registry::set_settings(name, *s);
        }
        let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            generation,
            stacks: StackTable::new(settings.stack_table_capacity),
            depth: settings.depth,
            new_buffers: Default::default(),
            thread_notes: Default::default(),
            thread_refs: Default::default(),
            buffer_bytes: settings.buffer_size,
            memory_budget: settings.memory_budget,
            allocated: Default::default(),
            lost_events: Default::default(),
            lost_bytes: Default::default(),
            wakeup: Wakeup::default(),
            logical: settings.deterministic.then(crate::commit::LogicalClock::default),
        });
        let mut state = State::new(Arc::clone(&shared), settings.clone(), dir.clone(), start);
        if let Some(config) = &settings.sampling {
            // Samples keep the same frames as event stacks: innermost N, outermost M, or both.
            let (sampler, locked) =
                Sampler::start_with_depth(config.clone(), settings.depth).map_err(Error::Sampler)?;
            state.sampler = Some((Arc::new(sampler), locked));
        }
        let inner = Arc::new(Inner {
            shared: Arc::clone(&shared),
            state: Mutex::new(state),
            stopping: AtomicBool::new(false),
            flusher: Mutex::new(None),
            sampler_thread: Mutex::new(None),
            dir,
            pid: std::process::id(),
        });
        // The first segment: metadata and the recording's settings, published at once so that a
        // consumer sees the chunk immediately.
        inner.state.lock().flush();
        let thread_inner = Arc::clone(&inner);
        let handle = std::thread::Builder::new()
            .name("recorder-flush".into())
            .spawn(move || flusher_loop(&thread_inner))
            .map_err(Error::Thread)?;
        let _ = shared.wakeup.thread.set(handle.thread().clone());
        *inner.flusher.lock() = Some(handle);
        let sampler = inner.state.lock().sampler.as_ref().map(|(s, _)| Arc::clone(s));
        if let Some(sampler) = sampler {
            let thread_inner = Arc::clone(&inner);
            let handle = std::thread::Builder::new()
                .name("recorder-sampler".into())
                .spawn(move || sampler_loop(&thread_inner, &sampler))
                .map_err(Error::Thread)?;
            *inner.sampler_thread.lock() = Some(handle);
        }
        *current = Some(shared);
        // Release: publishes `CURRENT` (and everything set up above); pairs with the Acquire load
        // in `commit_event`.
        GENERATION.store(generation, Ordering::Release);
        crate::control::start(generation, &inner.dir, control_dump(Arc::downgrade(&inner))); // control hook
        Ok(Recorder { inner })
    }

    /// The directory this recording writes its chunks into.
    pub fn repository_dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Writes and publishes everything committed so far now.
    pub fn flush(&self) {
        self.inner.state.lock().flush();
    }

    /// Writes one valid `.jfr` file with everything the repository holds, the live chunk included
    /// up to now, without stopping the recording.
    pub fn dump(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        let mut state = self.inner.state.lock();
        state.flush();
        let bytes = state.dump_bytes().map_err(|source| Error::Write { path: path.to_owned(), source })?;
        drop(state);
        write_file_atomically(path, &bytes).map_err(|source| Error::Write { path: path.to_owned(), source })
    }

    /// Changes an event type's settings while recording.
    pub fn set_event_settings(&self, name: &str, settings: EventSettings) {
        metadata_registry::set_settings(name, settings);
        self.inner.state.lock().settings_changed = true;
    }

    /// Starts sampling the calling thread at once, with exact stack bounds (threads are also
    /// discovered automatically, within about 100 ms, with bounds from `/proc/self/maps`).
    pub fn register_current_thread(&self) -> io::Result<()> {
        let sampler = self.inner.state.lock().sampler.as_ref().map(|(s, _)| Arc::clone(s));
        match sampler {
            Some(s) => s.register_current_thread(),
            None => Ok(()),
        }
    }

    /// The CPU sampler's counters (taken = written + lost per thread once drained), if sampling.
    pub fn sampler_stats(&self) -> Option<SamplerStats> {
        let state = self.inner.state.lock();
        state.sampler.as_ref().map(|(s, _)| s.stats()).or_else(|| state.final_sampler_stats.clone())
    }

    /// Stops the recording like [`Recorder::stop`] and returns the final counters.
    pub fn stop_with_report(self) -> Result<FinalReport, Error> {
        self.inner.stop()?;
        let state = self.inner.state.lock();
        Ok(FinalReport { stats: state.stats, sampler: state.final_sampler_stats.clone() })
    }

    /// Counters so far.
    pub fn stats(&self) -> RecorderStats {
        let mut stats = self.inner.state.lock().stats;
        stats.stack_table_overflow = self.inner.shared.stacks.overflow();
        stats
    }

    /// Stops the recording: flushes, finishes the last chunk with the final flag, stops the
    /// flusher thread.
    pub fn stop(self) -> Result<(), Error> {
        self.inner.stop()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.inner.stop();
    }
}

impl Inner {
    fn stop(&self) -> Result<(), Error> {
        if std::process::id() != self.pid {
            // A forked child holds a copy of the parent's recorder: its threads, files and locks
            // belong to the parent. Nothing to stop here.
            return Ok(());
        }
        if self.stopping.swap(true, Ordering::AcqRel) {
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
        if let Some(handle) = self.flusher.lock().take() {
            handle.thread().unpark();
            let _ = handle.join();
        }
        if let Some(handle) = self.sampler_thread.lock().take() {
            let _ = handle.join();
        }
        let mut state = self.state.lock();
        state.flush();
        state.stop_sampler();
        state.flush();
        state.finish_chunk(true).map_err(|source| Error::Write { path: self.dir.clone(), source })
    }
}

fn write_file_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("dump.jfr");
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)?;
    let result = file.write_all(bytes).and_then(|()| file.sync_all()).and_then(|()| std::fs::rename(&temp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

fn flusher_loop(inner: &Inner) {
    if let Some((sampler, _)) = inner.state.lock().sampler.as_ref() {
        sampler.exclude_current_thread();
    }
    let (flush_interval, periodic_interval) = {
        let s = inner.state.lock();
        (s.settings.flush_interval, s.settings.periodic_interval)
    };
    if inner.shared.logical.is_some() {
        // Deterministic mode: flushes happen only when asked (flush, dump, stop), so segment
        // boundaries do not depend on timing.
        // Relaxed: `stop` also unparks us.
        while !inner.stopping.load(Ordering::Relaxed) {
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
    while !inner.stopping.load(Ordering::Relaxed) {
        let now = Instant::now();
        let deadline = next_flush.min(next_periodic);
        if deadline > now {
            std::thread::park_timeout(deadline - now);
        }
        if inner.stopping.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        let woken = inner.shared.wakeup.take();
        let mut state = inner.state.lock();
        if now >= next_periodic {
            state.periodic();
            next_periodic = now + periodic_interval;
        }
        if now >= next_flush || (woken && now.duration_since(last_flush) >= min_gap) {
            state.flush();
            state.rotate_if_needed();
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

/// The recorder thread (sampler-protocol.md §4.4): woken by the handler when a buffer fills up,
/// it drains the full queue under L, and every 100 ms discovers new threads and collects lost
/// samples.
fn sampler_loop(inner: &Inner, sampler: &Sampler) {
    sampler.exclude_current_thread();
    let mut last_discovery = Instant::now() - Duration::from_secs(1);
    // Relaxed: `stop` joins this thread after setting the flag; at worst one more round.
    while !inner.stopping.load(Ordering::Relaxed) {
        let work = sampler.wait_pending(Duration::from_millis(50));
        if inner.stopping.load(Ordering::Relaxed) {
            break;
        }
        let mut state = inner.state.lock();
        if work {
            state.drain_samples(true);
        }
        if last_discovery.elapsed() >= Duration::from_millis(100) {
            last_discovery = Instant::now();
            state.discover_and_collect_losses();
        }
    }
}

/// One symbolizer for the process: its per-module state and its cache outlive a recording, so a
/// second recording (or a forked child's) does not parse the debug info again. Taken only by L
/// holders, inside L; `fork` holds it across the fork.
static SYMBOLIZER: Mutex<Option<Symbolizer>> = Mutex::new(None);

/// Before fork: hold the symbolizer so no other thread holds it while the process is copied.
pub(crate) fn lock_symbolizer_for_fork() {
    std::mem::forget(SYMBOLIZER.lock());
}

/// After fork, on both sides.
///
/// # Safety
/// The calling thread holds the symbolizer through [`lock_symbolizer_for_fork`].
#[allow(unsafe_code)]
pub(crate) unsafe fn unlock_symbolizer_after_fork() {
    // SAFETY: the caller holds the lock.
    unsafe { SYMBOLIZER.force_unlock() };
}

/// Constants already defined in the current chunk.
#[derive(Debug, Default)]
struct Written {
    threads: HashSet<u32>,
    stacks: HashSet<u64>,
    methods: HashSet<u64>,
    classes: HashSet<u64>,
    symbols: HashSet<u64>,
    fixed_pools: bool,
    metadata_version: u64,
    /// Event types whose `jdk.ActiveSetting` rows the chunk has.
    settings_of: HashSet<u64>,
}

#[derive(Debug)]
struct LiveChunk {
    writer: ChunkWriter,
    file: Option<ChunkFile>,
    start: ClockPair,
    written: Written,
    /// The header as last written to the file successfully (None until the first publish).
    published: Option<ChunkHeader>,
}

/// A frame as serialized: method key, line, frame type key.
#[derive(Debug, Clone, Copy)]
struct FrameRef {
    method: u64,
    line: i32,
    frame_type: u64,
}

#[derive(Debug, Clone)]
struct MethodDef {
    class: u64,
    name: u64,
}

#[derive(Debug, Clone)]
struct ClassDef {
    name: u64,
}

#[derive(Debug, Default)]
struct Loss {
    events: u64,
    samples: u64,
    bytes: u64,
    /// The thread whose samples were lost (0: not one thread's).
    thread: u32,
}

#[derive(Debug, Default, Clone, Copy)]
struct CpuTimes {
    process: u64,
    machine_busy: u64,
    machine_total: u64,
    at: Option<Instant>,
    user: u64,
    system: u64,
}

/// Everything L protects.
#[derive(Debug)]
struct State {
    shared: Arc<Shared>,
    settings: Settings,
    dir: PathBuf,
    recording_start: ClockPair,
    chunk: Option<LiveChunk>,
    next_start: Option<ClockPair>,
    finished: Vec<FinishedChunk>,
    buffers: Vec<Arc<EventBuffer>>,
    thread_names: HashMap<u32, String>,
    known_threads: HashSet<u32>,
    pending_notes: Vec<ThreadNote>,
    frame_cache: HashMap<(u64, bool), Vec<FrameRef>>,
    symbol_keys: HashMap<String, u64>,
    symbol_text: BTreeMap<u64, String>,
    class_keys: HashMap<String, u64>,
    class_defs: HashMap<u64, ClassDef>,
    method_keys: HashMap<(u64, u64), u64>,
    method_defs: HashMap<u64, MethodDef>,
    next_key: u64,
    reported_events: u64,
    reported_bytes: u64,
    pending_loss: Vec<(String, Loss)>,
    /// Losses reported in the segment being written: confirmed when it is published, reported
    /// again if its write fails.
    unconfirmed_loss: Vec<(String, Loss)>,
    total_lost_events: u64,
    total_lost_samples: u64,
    total_lost_bytes: u64,
    write_error_reported: bool,
    settings_changed: bool,
    cpu: CpuTimes,
    stats: RecorderStats,
    scratch_frames: Vec<u64>,
    pending_symbols: Vec<u64>,
    /// Methods of the recorder's own commit path (see `OWN_FUNCTION_PREFIXES`).
    own_frames: HashSet<u64>,
    /// The sampler and the part of its state only L holders touch.
    sampler: Option<(Arc<Sampler>, SamplerLocked)>,
    final_sampler_stats: Option<SamplerStats>,
    /// Constants referenced by samples written into the chunk since the last checkpoint.
    sample_threads: HashSet<u32>,
    sample_stacks: HashSet<u64>,
    /// Samples written into the chunk since the last publish, per thread (lost if that fails).
    segment_samples: HashMap<u32, u64>,
    reported_unattributed: u64,
    chunk_names: repository::ChunkNames,
    samples_since_rate: u64,
    rate_since: Option<Instant>,
}

/// How frames of native code are named, for every reader (async-profiler's convention, issue 10
/// §3): the method is the whole demangled function name, its class is the module the code lives
/// in (`libc.so.6`, `myapp`), in no package, and its descriptor has no arguments and the empty
/// class as return type. So:
/// - JMC renders `libc.so.6.epoll_wait()`: a class with a package must start with the package
///   name and a dot (`getFullName` throws otherwise), a class name starting with `[` is taken for
///   an array type, and a descriptor without a return type (`()`) makes
///   `FormatToolkit.getHumanReadable` return null;
/// - async-profiler's converter shows the function name alone for native frames (the FrameType
///   pool has `Kernel`); `jfr print` and Pyroscope show `libc.so.6.epoll_wait`;
/// - our own tools show the function alone (`FrameInfo::qualified_name` knows this descriptor).
const NATIVE_DESCRIPTOR: &str = "()L;";

/// The class of the `<elided:K>` marker frame: says in every reader why frames are missing
/// (`jfr print` shows `stack-depth-limit.<elided:3>()`).
const ELIDED_CLASS: &str = "stack-depth-limit";

/// A module's name as a frame's class (see [`NATIVE_DESCRIPTOR`]): never empty (JMC and
/// `jfr print` would show `.function`) and never starting with `[` (JMC parses that as an array
/// descriptor): `[anon:x]` becomes `anon:x`, an address outside every mapping `unknown`.
fn frame_class_name(module: &str) -> &str {
    let name = module.strip_prefix('[').map_or(module, |m| m.strip_suffix(']').unwrap_or(m));
    if name.is_empty() || name.starts_with('[') {
        "unknown"
    } else {
        name
    }
}

/// Functions whose frames are the recorder's own and are dropped from the inner end of stacks.
const OWN_FUNCTION_PREFIXES: [&str; 6] = [
    "recorder::event",
    "<recorder::event",
    "recorder::commit",
    "recorder::unwind",
    "recorder::stack",
    "recorder::buffer",
];

impl State {
    fn new(shared: Arc<Shared>, settings: Settings, dir: PathBuf, start: ClockPair) -> State {
        State {
            shared,
            settings,
            dir,
            recording_start: start,
            chunk: None,
            next_start: Some(start),
            finished: Vec::new(),
            buffers: Vec::new(),
            thread_names: HashMap::new(),
            known_threads: HashSet::new(),
            pending_notes: Vec::new(),
            frame_cache: HashMap::new(),
            symbol_keys: HashMap::new(),
            symbol_text: BTreeMap::new(),
            class_keys: HashMap::new(),
            class_defs: HashMap::new(),
            method_keys: HashMap::new(),
            method_defs: HashMap::new(),
            next_key: 1,
            reported_events: 0,
            reported_bytes: 0,
            pending_loss: Vec::new(),
            unconfirmed_loss: Vec::new(),
            total_lost_events: 0,
            total_lost_samples: 0,
            total_lost_bytes: 0,
            write_error_reported: false,
            settings_changed: true,
            cpu: CpuTimes::default(),
            stats: RecorderStats::default(),
            scratch_frames: Vec::new(),
            pending_symbols: Vec::new(),
            own_frames: HashSet::new(),
            sampler: None,
            final_sampler_stats: None,
            sample_threads: HashSet::new(),
            sample_stacks: HashSet::new(),
            segment_samples: HashMap::new(),
            reported_unattributed: 0,
            chunk_names: repository::ChunkNames::default(),
            samples_since_rate: 0,
            rate_since: None,
        }
    }

    fn key(&mut self) -> u64 {
        let k = self.next_key;
        self.next_key += 1;
        k
    }

    fn symbol(&mut self, text: &str) -> u64 {
        if let Some(&k) = self.symbol_keys.get(text) {
            return k;
        }
        let k = self.key();
        self.symbol_keys.insert(text.to_owned(), k);
        self.symbol_text.insert(k, text.to_owned());
        k
    }

    /// The class of native code: its module (see [`frame_class_name`]), in no package.
    fn class(&mut self, module: &str) -> u64 {
        let name = frame_class_name(module);
        if let Some(&k) = self.class_keys.get(name) {
            return k;
        }
        let name_sym = self.symbol(name);
        let k = self.key();
        self.class_keys.insert(name.to_owned(), k);
        self.class_defs.insert(k, ClassDef { name: name_sym });
        k
    }

    /// A native function: `name` is the whole demangled name (`myapp::parser::Parser::parse`).
    fn method(&mut self, class: u64, name: &str) -> u64 {
        let key = self.method_inner(class, name);
        if OWN_FUNCTION_PREFIXES.iter().any(|p| name.starts_with(p)) {
            self.own_frames.insert(key);
        }
        key
    }

    fn method_inner(&mut self, class: u64, name: &str) -> u64 {
        let name_sym = self.symbol(name);
        if let Some(&k) = self.method_keys.get(&(class, name_sym)) {
            return k;
        }
        let k = self.key();
        self.method_keys.insert((class, name_sym), k);
        self.method_defs.insert(k, MethodDef { class, name: name_sym });
        k
    }

    /// The `<elided:K>` marker frame.
    fn elided_frame(&mut self, k: u64) -> FrameRef {
        let class = self.class(ELIDED_CLASS);
        let method = self.method(class, &format!("<elided:{k}>"));
        FrameRef { method, line: -1, frame_type: FRAME_TYPE_NATIVE }
    }

    /// The serialized frames of one address (inlined frames first).
    fn frames_for(&mut self, ip: u64, is_return_address: bool) -> Vec<FrameRef> {
        if let Some(f) = self.frame_cache.get(&(ip, is_return_address)) {
            return f.clone();
        }
        let refs = if let Some(k) = as_elided(ip) {
            vec![self.elided_frame(k)]
        } else {
            let frames =
                SYMBOLIZER.lock().get_or_insert_with(Symbolizer::new).symbolize(ip, is_return_address).to_vec();
            let mut refs = Vec::with_capacity(frames.len());
            for f in frames {
                let class = self.class(&f.module);
                let method = self.method(class, &f.function);
                refs.push(FrameRef {
                    method,
                    line: f.line.map_or(-1, |l| l as i32),
                    frame_type: if f.inlined { FRAME_TYPE_INLINED } else { FRAME_TYPE_NATIVE },
                });
            }
            refs
        };
        self.frame_cache.insert((ip, is_return_address), refs.clone());
        refs
    }

    /// The tick clock: real, or the logical one in deterministic mode.
    fn now_ticks(&self) -> i64 {
        match &self.shared.logical {
            Some(l) => l.now(),
            None => clock::ticks(),
        }
    }

    fn ensure_chunk(&mut self) {
        if self.chunk.is_some() {
            return;
        }
        let now = self.now_ticks();
        let start = self.next_start.take().unwrap_or_else(|| {
            if self.shared.logical.is_some() {
                ClockPair { epoch_nanos: now, ticks: now }
            } else {
                ClockPair::now()
            }
        });
        self.chunk = Some(LiveChunk {
            writer: ChunkWriter::new(start.epoch_nanos, start.ticks),
            file: None,
            start,
            written: Written::default(),
            published: None,
        });
        self.settings_changed = true;
    }

    /// One flush: events, the flusher's own events, metadata, one checkpoint, publish.
    fn flush(&mut self) {
        self.ensure_chunk();
        let now_ticks = self.now_ticks();
        let mut refs_threads: HashSet<u32> = HashSet::new();
        let mut refs_stacks: HashSet<u64> = HashSet::new();
        let mut segment_events = 0u64;
        let mut segment_bytes = 0u64;

        // 1. Event buffers: copy [flushed, committed), collect the leading thread and stack ids.
        while let Some(b) = self.shared.new_buffers.pop() {
            self.buffers.push(b);
        }
        {
            let chunk = self.chunk.as_mut().expect("ensured above");
            for b in &self.buffers {
                b.drain(|bytes| {
                    chunk.writer.write_records(bytes);
                    segment_bytes += bytes.len() as u64;
                    segment_events += scan_records(bytes, &mut refs_threads, &mut refs_stacks);
                });
            }
        }
        let shared = &self.shared;
        self.buffers.retain(|b| {
            let done = b.is_retired() && b.is_drained();
            if done {
                // Relaxed: budget counter.
                shared.allocated.fetch_sub(b.capacity(), Ordering::Relaxed);
            }
            !done
        });
        // Threads referenced from fields, noted before their records were committed.
        while let Some(tid) = self.shared.thread_refs.pop() {
            refs_threads.insert(tid);
        }

        // 2. Sampler buffers, after the event buffers: active ones, then the full queue. Their
        // ExecutionSamples go into the chunk now, before this segment's checkpoint.
        self.drain_samples(false);

        // 3. The flusher's own events: thread starts and ends, data loss, settings.
        while let Some(note) = self.shared.thread_notes.pop() {
            self.pending_notes.push(note);
        }
        let notes = std::mem::take(&mut self.pending_notes);
        let chunk = self.chunk.as_mut().expect("ensured above");
        for note in &notes {
            if note.started {
                self.thread_names.insert(note.tid, note.name.clone());
                chunk.writer.write_event(builtin::THREAD_START, |o| {
                    put_long(o, note.ticks);
                    put_varint(o, u64::from(note.tid));
                    put_varint(o, 0);
                    put_varint(o, u64::from(note.tid));
                    put_varint(o, 0);
                });
            } else {
                chunk.writer.write_event(builtin::THREAD_END, |o| {
                    put_long(o, note.ticks);
                    put_varint(o, u64::from(note.tid));
                    put_varint(o, u64::from(note.tid));
                });
            }
            refs_threads.insert(note.tid);
        }
        self.write_loss(now_ticks);
        if self.settings_changed {
            refs_threads.extend(self.write_settings(now_ticks, false));
            self.settings_changed = false;
        } else if chunk_metadata_version(&self.chunk) != metadata_registry::version() {
            // Types registered since: their settings, declared by the metadata written below.
            refs_threads.extend(self.write_settings(now_ticks, true));
        }

        // 4. Metadata, when the registry changed since this chunk last wrote it. Written after the
        // events so that it covers every type those events use.
        let version = metadata_registry::version();
        let chunk = self.chunk.as_mut().expect("ensured above");
        if chunk.written.metadata_version != version {
            chunk.writer.write_metadata(&metadata_registry::metadata(), now_ticks);
            chunk.written.metadata_version = version;
        }

        // 5. One checkpoint with every constant the segment needs that the chunk lacks.
        refs_threads.extend(self.sample_threads.drain());
        refs_stacks.extend(self.sample_stacks.drain());
        self.write_sampler_statistics(now_ticks);
        let checkpoint = self.segment_checkpoint(&refs_threads, &refs_stacks);
        let chunk = self.chunk.as_mut().expect("ensured above");
        chunk.writer.write_checkpoint(&checkpoint, now_ticks, true);

        // 6. Write and publish.
        let duration = now_ticks - chunk.start.ticks;
        match publish(chunk, &self.dir, &mut self.chunk_names, duration) {
            Ok(()) => {
                // Retention against the live chunk's real size, at every flush: the repository stays
                // under its limit even when flushes are late and the chunk outgrows its rotation size.
                self.apply_retention(self.chunk.as_ref().map_or(0, |c| c.writer.position()));
                self.stats.flushes += 1;
                self.stats.events_written += segment_events;
                self.stats.samples_written += self.segment_samples.drain().map(|(_, n)| n).sum::<u64>();
                for (_, loss) in self.unconfirmed_loss.drain(..) {
                    self.total_lost_events += loss.events;
                    self.total_lost_samples += loss.samples;
                    self.total_lost_bytes += loss.bytes;
                    self.stats.events_lost += loss.events;
                    self.stats.samples_lost += loss.samples;
                }
            }
            Err(e) => self.write_failed(e, segment_events, segment_bytes),
        }
    }

    fn segment_checkpoint(&mut self, threads: &HashSet<u32>, stacks: &HashSet<u64>) -> Checkpoint {
        let mut cp = Checkpoint::new();
        let mut chunk = self.chunk.take().expect("a live chunk");
        // Stack traces first (referrers before referees, I8).
        let mut methods = Vec::new();
        for &key in stacks {
            if key == 0 || !chunk.written.stacks.insert(key) {
                continue;
            }
            let mut ips = std::mem::take(&mut self.scratch_frames);
            ips.clear();
            if !self.shared.stacks.expand(StackKey(key), &mut ips) {
                chunk.written.stacks.remove(&key);
                self.scratch_frames = ips;
                continue;
            }
            let mut shown = Vec::with_capacity(ips.len());
            for (i, &ip) in ips.iter().enumerate() {
                match as_elided(ip) {
                    Some(k) => shown.push(Shown::Elided(k)),
                    None => shown.extend(self.frames_for(ip, i > 0).into_iter().map(Shown::Frame)),
                }
            }
            // The recorder's own frames never show: the commit API is inlined into its caller, so
            // the innermost address of an event's stack also names `Event::commit` and friends.
            let own = shown
                .iter()
                .take_while(|f| matches!(f, Shown::Frame(f) if self.own_frames.contains(&f.method)))
                .count();
            if own < shown.len() {
                shown.drain(..own);
            }
            self.scratch_frames = ips;
            // The walk kept addresses; the depth limits count the frames readers show (inlined
            // ones included), so they are applied again here, to the expanded frames.
            let cut = self.settings.depth.limit_shown(&mut shown);
            let truncated = StackKey(key).truncated() || cut;
            let frames: Vec<FrameRef> = shown
                .into_iter()
                .map(|f| match f {
                    Shown::Frame(f) => f,
                    Shown::Elided(k) => self.elided_frame(k),
                })
                .collect();
            cp.add(ids::STACK_TRACE, key, |o| {
                put_bool(o, truncated);
                put_varint(o, frames.len() as u64);
                for f in &frames {
                    put_varint(o, f.method);
                    put_int(o, f.line);
                    put_int(o, 0);
                    put_varint(o, f.frame_type);
                }
            });
            methods.extend(frames.iter().map(|f| f.method));
        }
        let mut classes = Vec::new();
        for m in methods {
            if !chunk.written.methods.insert(m) {
                continue;
            }
            let def = self.method_defs[&m].clone();
            let descriptor = self.symbol(NATIVE_DESCRIPTOR);
            cp.add(ids::METHOD, m, |o| {
                put_varint(o, def.class);
                put_varint(o, def.name);
                put_varint(o, descriptor);
                put_int(o, 0x100);
                put_bool(o, false);
            });
            classes.push(def.class);
            self.mark_symbol(&mut chunk, def.name);
            self.mark_symbol(&mut chunk, descriptor);
        }
        for c in classes {
            if !chunk.written.classes.insert(c) {
                continue;
            }
            let def = self.class_defs[&c].clone();
            cp.add(ids::CLASS, c, |o| {
                put_varint(o, 0);
                put_varint(o, def.name);
                put_varint(o, 0);
                put_int(o, 0);
                put_bool(o, false);
            });
            self.mark_symbol(&mut chunk, def.name);
        }
        // Symbols collected by mark_symbol.
        let symbols: Vec<u64> = std::mem::take(&mut self.pending_symbols);
        for s in symbols {
            let text = self.symbol_text.get(&s).cloned().unwrap_or_default();
            cp.add(ids::SYMBOL, s, |o| put_utf8(o, &text));
        }
        // Threads: every thread this segment references, and on a new chunk every known thread.
        let mut wanted: Vec<u32> = threads.iter().copied().collect();
        if chunk.written.threads.is_empty() {
            wanted.extend(self.known_threads.iter().copied());
        }
        for tid in wanted {
            if tid == 0 || !chunk.written.threads.insert(tid) {
                continue;
            }
            self.known_threads.insert(tid);
            let name = match self.thread_names.get(&tid) {
                Some(n) => n.clone(),
                None => {
                    let n = crate::thread::os_thread_name(tid).unwrap_or_else(|| format!("thread-{tid}"));
                    self.thread_names.insert(tid, n.clone());
                    n
                }
            };
            cp.add(ids::THREAD, u64::from(tid), |o| {
                put_string(o, Some(&name));
                put_long(o, i64::from(tid));
                put_string(o, Some(&name));
                put_long(o, 0);
                put_varint(o, 0);
            });
        }
        if !chunk.written.fixed_pools {
            chunk.written.fixed_pools = true;
            for (key, name) in FRAME_TYPES {
                cp.add(ids::FRAME_TYPE, key, |o| put_string(o, Some(name)));
            }
            for (key, name) in THREAD_STATES {
                cp.add(ids::THREAD_STATE, key, |o| put_string(o, Some(name)));
            }
        }
        self.chunk = Some(chunk);
        cp
    }
}

impl State {
    fn mark_symbol(&mut self, chunk: &mut LiveChunk, symbol: u64) {
        if chunk.written.symbols.insert(symbol) {
            self.pending_symbols.push(symbol);
        }
    }

    /// Reports losses since the last flush as `recorder.DataLoss` (and `jdk.DataLoss` for bytes).
    fn write_loss(&mut self, now_ticks: i64) {
        // Relaxed: statistics.
        let events = self.shared.lost_events.load(Ordering::Relaxed);
        let bytes = self.shared.lost_bytes.load(Ordering::Relaxed);
        if events > self.reported_events {
            let loss = Loss {
                events: events - self.reported_events,
                samples: 0,
                bytes: bytes - self.reported_bytes,
                thread: 0,
            };
            self.pending_loss.push(("event buffers full (memory budget reached)".into(), loss));
            self.reported_events = events;
            self.reported_bytes = bytes;
        }
        let pending = std::mem::take(&mut self.pending_loss);
        let chunk = self.chunk.as_mut().expect("a live chunk");
        let (mut te, mut ts, mut tb) = (self.total_lost_events, self.total_lost_samples, self.total_lost_bytes);
        for (reason, loss) in pending {
            te += loss.events;
            ts += loss.samples;
            tb += loss.bytes;
            if loss.thread != 0 {
                self.sample_threads.insert(loss.thread);
            }
            chunk.writer.write_event(builtin::DATA_LOSS, |o| {
                put_long(o, now_ticks);
                put_varint(o, u64::from(loss.thread));
                put_string(o, Some(&reason));
                put_long(o, loss.events as i64);
                put_long(o, loss.samples as i64);
                put_long(o, loss.bytes as i64);
                put_long(o, te as i64);
                put_long(o, ts as i64);
            });
            if loss.bytes > 0 {
                chunk.writer.write_event(builtin::JDK_DATA_LOSS, |o| {
                    put_long(o, now_ticks);
                    put_long(o, loss.bytes as i64);
                    put_long(o, tb as i64);
                });
            }
            self.unconfirmed_loss.push((reason, loss));
        }
    }

    /// `jdk.ActiveRecording` and one `jdk.ActiveSetting` per setting, at each chunk start and
    /// whenever settings change; with `only_new_types`, just the settings of the event types
    /// registered since the chunk last got settings.
    ///
    /// Every `jdk.ActiveSetting.id` is the id of an event type the chunk declares (JMC looks it up
    /// and fails on any other): the recording's own settings belong to `recorder.Recording`, and
    /// a type configured in the builder but not registered yet gets its rows when it registers
    /// (the metadata written in the same flush declares it). Returns the thread the events name.
    fn write_settings(&mut self, now_ticks: i64, only_new_types: bool) -> Option<u32> {
        let deterministic = self.shared.logical.is_some();
        // The flusher's own events name the thread that flushed, except in deterministic mode.
        let tid = if deterministic { 0 } else { crate::thread::current_tid() };
        let settings = self.settings.clone();
        let mut rows: Vec<(u64, String, String)> = Vec::new();
        if !only_new_types {
            let recording = |name: &str, value: String| (builtin::RECORDING, name.to_owned(), value);
            rows.extend([
                recording("flushInterval", format!("{} ms", settings.flush_interval.as_millis())),
                recording("maxChunkSize", settings.max_chunk_size.to_string()),
                recording("maxChunkAge", format!("{} s", settings.max_chunk_age.as_secs())),
                recording("maxSize", settings.max_size.to_string()),
                recording("memoryBudget", settings.memory_budget.to_string()),
                recording("stackDepth", settings.depth.inner.to_string()),
                recording("stackDepthOuter", settings.depth.outer.to_string()),
            ]);
            if !deterministic {
                rows.push(recording("repository", self.dir.display().to_string()));
            }
            rows.extend(self.extra_settings());
        }
        let chunk = self.chunk.as_mut().expect("a live chunk");
        if !only_new_types {
            chunk.written.settings_of.clear();
        }
        // Registered types only (id 0: configured, not registered yet).
        for (_, id, s) in metadata_registry::all_settings() {
            if id == 0 || !chunk.written.settings_of.insert(id) {
                continue;
            }
            rows.push((id, "enabled".into(), s.enabled.to_string()));
            rows.push((id, "threshold".into(), format!("{} ns", s.threshold.as_nanos())));
            rows.push((id, "stackTrace".into(), s.stack_trace.to_string()));
        }
        if !only_new_types {
            // What the JDK means (JDK 17's PlatformRecorder): limits in ms, Long.MAX_VALUE for none;
            // the destination is the file written when the recording stops (none here: the
            // repository is a setting of recorder.Recording).
            let millis = |d: Option<Duration>| d.map_or(i64::MAX, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let start_ms = self.recording_start.epoch_nanos / 1_000_000;
            chunk.writer.write_event(builtin::ACTIVE_RECORDING, |o| {
                put_long(o, now_ticks);
                put_long(o, 0);
                put_varint(o, u64::from(tid));
                put_varint(o, 0);
                put_long(o, 1);
                put_string(o, Some(&settings.name));
                put_string(o, None);
                put_long(o, millis(settings.max_age));
                put_long(o, millis(Some(settings.flush_interval)));
                put_long(o, i64::try_from(settings.max_size).unwrap_or(i64::MAX));
                put_long(o, start_ms);
                // The recording runs until stopped: no configured duration.
                put_long(o, millis(None));
            });
        }
        for (id, name, value) in rows {
            chunk.writer.write_event(builtin::ACTIVE_SETTING, |o| {
                put_long(o, now_ticks);
                put_long(o, 0);
                put_varint(o, u64::from(tid));
                put_varint(o, 0);
                put_long(o, id as i64);
                put_string(o, Some(&name));
                put_string(o, Some(&value));
            });
        }
        if tid == 0 {
            return None;
        }
        self.known_threads.insert(tid);
        self.thread_names.entry(tid).or_insert_with(crate::thread::current_thread_name);
        Some(tid)
    }

    /// Settings of subsystems (the sampler states its mode and rate here).
    fn extra_settings(&self) -> Vec<(u64, String, String)> {
        let Some((sampler, _)) = self.sampler.as_ref() else {
            return vec![(builtin::EXECUTION_SAMPLE, "enabled".into(), "false".into())];
        };
        let mode = match sampler.mode() {
            SamplingMode::PerfEvent => "perf_event (task-clock per thread)",
            SamplingMode::CpuTimer => "cpu_timer (POSIX timer on the thread CPU clock)",
            SamplingMode::Auto => "auto",
        };
        vec![
            (builtin::EXECUTION_SAMPLE, "enabled".into(), "true".into()),
            (builtin::EXECUTION_SAMPLE, "period".into(), format!("{} us", sampler.period().as_micros())),
            (builtin::EXECUTION_SAMPLE, "samplingMode".into(), mode.into()),
        ]
    }

    /// Hands the sampler's records to the chunk as ExecutionSamples. `full_only`: the recorder
    /// thread's pass over the full queue; otherwise the flusher's active + full pass.
    fn drain_samples(&mut self, full_only: bool) {
        self.ensure_chunk();
        let State {
            sampler, chunk, shared, sample_threads, sample_stacks, segment_samples, samples_since_rate, ..
        } = self;
        let Some((sampler, locked)) = sampler.as_mut() else { return };
        let chunk = chunk.as_mut().expect("ensured above");
        let stacks = &shared.stacks;
        let mut write = |rec: &SampleRecord<'_>| {
            write_sample(&mut chunk.writer, stacks, rec, sample_threads, sample_stacks);
            *segment_samples.entry(rec.tid).or_insert(0) += 1;
            *samples_since_rate += 1;
        };
        if full_only {
            sampler.drain_full(locked, &mut write);
        } else {
            sampler.drain(locked, &mut write);
        }
    }

    /// Recorder thread: arm sampling for new threads, collect lost-sample counts.
    fn discover_and_collect_losses(&mut self) {
        let Some((sampler, locked)) = self.sampler.as_mut() else { return };
        sampler.discover_threads(locked);
        let lost = sampler.take_lost(locked);
        let unattributed = sampler.stats().unattributed;
        self.note_sample_losses(lost, unattributed);
    }

    /// Queues the sampler's lost samples (per thread) and the growth of its unattributed count as
    /// `recorder.DataLoss` reports for the next flush.
    fn note_sample_losses(&mut self, lost: Vec<(u32, u64)>, unattributed: u64) {
        for (thread, samples) in lost {
            self.pending_loss.push(("sampler buffers full".into(), Loss { samples, thread, ..Loss::default() }));
        }
        if unattributed > self.reported_unattributed {
            let samples = unattributed - self.reported_unattributed;
            self.reported_unattributed = unattributed;
            self.pending_loss
                .push(("sample of a thread without a sampler slot".into(), Loss { samples, ..Loss::default() }));
        }
    }

    /// Stops the sampler: no signal can arrive after this; the last records go into the chunk.
    fn stop_sampler(&mut self) {
        let Some((sampler, mut locked)) = self.sampler.take() else { return };
        // Other holders (`register_current_thread`) let go within moments.
        let mut sampler = sampler;
        let owned = loop {
            match Arc::try_unwrap(sampler) {
                Ok(s) => break s,
                Err(shared) => {
                    sampler = shared;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        self.ensure_chunk();
        let State { chunk, shared, sample_threads, sample_stacks, segment_samples, .. } = self;
        let chunk = chunk.as_mut().expect("ensured above");
        let stacks = &shared.stacks;
        let report = owned.stop(&mut locked, &mut |rec: &SampleRecord<'_>| {
            write_sample(&mut chunk.writer, stacks, rec, sample_threads, sample_stacks);
            *segment_samples.entry(rec.tid).or_insert(0) += 1;
        });
        self.note_sample_losses(report.lost, report.stats.unattributed);
        self.final_sampler_stats = Some(report.stats);
    }

    /// `recorder.SamplerStatistics`: the sampler's mode and its effective rate since the last one.
    fn write_sampler_statistics(&mut self, now_ticks: i64) {
        let Some((sampler, _)) = self.sampler.as_ref() else { return };
        let now = Instant::now();
        let Some(since) = self.rate_since.replace(now) else { return };
        let elapsed = now.duration_since(since).as_secs_f64();
        if elapsed <= 0.0 {
            return;
        }
        let samples = std::mem::take(&mut self.samples_since_rate);
        let stats = sampler.stats();
        let mode = match sampler.mode() {
            SamplingMode::PerfEvent => "perf_event",
            SamplingMode::CpuTimer => "cpu_timer",
            SamplingMode::Auto => "auto",
        };
        let period_ns = sampler.period().as_nanos() as i64;
        let chunk = self.chunk.as_mut().expect("a live chunk");
        chunk.writer.write_event(builtin::SAMPLER_STATISTICS, |o| {
            put_long(o, now_ticks);
            put_string(o, Some(mode));
            put_long(o, period_ns);
            write::put_double(o, samples as f64 / elapsed);
            put_long(o, stats.taken as i64);
            put_long(o, stats.lost as i64);
            put_long(o, stats.slots_in_use as i64);
        });
    }

    /// Periodic built-in events: CPU load and resident set size.
    fn periodic(&mut self) {
        self.ensure_chunk();
        let now_ticks = clock::ticks();
        let times = read_cpu_times();
        let prev = self.cpu;
        self.cpu = times;
        let rss = read_rss();
        let chunk = self.chunk.as_mut().expect("ensured above");
        if let (Some(now), Some(then)) = (times.at, prev.at) {
            let elapsed = now.duration_since(then).as_secs_f64();
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            // Process CPU in clock ticks (USER_HZ, 100 on Linux) over the wall time of all CPUs.
            let hz = 100.0;
            let share = |d: u64| ((d as f64 / hz) / (elapsed * cpus)).clamp(0.0, 1.0) as f32;
            let user = share(times.user.saturating_sub(prev.user));
            let system = share(times.system.saturating_sub(prev.system));
            let busy = times.machine_busy.saturating_sub(prev.machine_busy) as f64;
            let total = times.machine_total.saturating_sub(prev.machine_total) as f64;
            let machine = if total > 0.0 { (busy / total).clamp(0.0, 1.0) as f32 } else { 0.0 };
            if elapsed > 0.0 {
                chunk.writer.write_event(builtin::CPU_LOAD, |o| {
                    write::put_long(o, now_ticks);
                    write::put_float(o, user);
                    write::put_float(o, system);
                    write::put_float(o, machine.max(user + system).min(1.0));
                });
            }
        }
        if let Some((size, peak)) = rss {
            chunk.writer.write_event(builtin::RESIDENT_SET_SIZE, |o| {
                put_long(o, now_ticks);
                put_long(o, size as i64);
                put_long(o, peak as i64);
            });
        }
    }

    /// A write failed: report it once, count the segment as lost, close the chunk at its last
    /// published state and start a new one at the next flush.
    fn write_failed(&mut self, e: io::Error, events: u64, bytes: u64) {
        self.stats.write_failures += 1;
        if !self.write_error_reported {
            self.write_error_reported = true;
            eprintln!(
                "recorder: writing to {} failed ({e}); the application continues, lost data is counted \
                 and recording resumes when writing works again",
                self.dir.display()
            );
        }
        let now = self.now_ticks();
        // The loss reports of the failed segment did not reach the disk either: report them again.
        let unconfirmed = std::mem::take(&mut self.unconfirmed_loss);
        self.pending_loss.extend(unconfirmed);
        if let Some(mut chunk) = self.chunk.take() {
            // The events of the segment and the flusher's own records did not reach the disk.
            self.pending_loss.push((format!("write failed: {e}"), Loss { events, samples: 0, bytes, thread: 0 }));
            for (thread, samples) in self.segment_samples.drain() {
                self.pending_loss.push((format!("write failed: {e}"), Loss { samples, thread, ..Loss::default() }));
            }
            let duration = (now - chunk.start.ticks).max(1);
            if let Some(mut header) = chunk.published {
                // Overwriting the header needs no new disk space: close the chunk at its last
                // published size so readers (and the streaming API) can move on.
                header.state = STATE_FINISHED;
                header.duration_nanos = duration;
                header.flags = FLAG_COMPRESSED_INTS;
                if let Some(file) = chunk.file.as_mut() {
                    // A file holds exactly its chunks: drop what the failed write left behind.
                    if file.truncate(header.chunk_size as u64).and_then(|()| file.publish(&header)).is_ok() {
                        self.finished.push(FinishedChunk {
                            path: file.path().to_owned(),
                            size: header.chunk_size as u64,
                            start_nanos: chunk.start.epoch_nanos,
                            end_nanos: chunk.start.epoch_nanos + duration,
                        });
                    }
                }
            } else if let Some(file) = chunk.file.take() {
                file.abandon();
            }
            self.next_start = Some(chunk.start.plus(duration));
        }
    }

    fn rotate_if_needed(&mut self) {
        let Some(chunk) = self.chunk.as_ref() else {
            return;
        };
        let age = Duration::from_nanos((self.now_ticks() - chunk.start.ticks).max(0) as u64);
        if chunk.writer.position() >= self.settings.max_chunk_size || age >= self.settings.max_chunk_age {
            if let Err(e) = self.finish_chunk(false) {
                self.write_failed(e, 0, 0);
            }
        }
    }

    /// Finishes the live chunk (state 0; the final flag at the end of the recording) and applies
    /// retention. The next chunk starts exactly where this one ends.
    fn finish_chunk(&mut self, final_chunk: bool) -> io::Result<()> {
        let Some(mut chunk) = self.chunk.take() else {
            return Ok(());
        };
        let now = self.now_ticks();
        let duration = (now - chunk.start.ticks).max(1);
        let Some(header) = chunk.writer.finish(duration, final_chunk) else {
            return Ok(());
        };
        let (offset, bytes) = chunk.writer.take_pending();
        let file = match chunk.file.as_mut() {
            Some(f) => f,
            None => {
                chunk.file = Some(ChunkFile::create(&self.dir, chunk.start.epoch_nanos, &mut self.chunk_names)?);
                chunk.file.as_mut().expect("just set")
            }
        };
        file.write_at(offset, &bytes)?;
        file.publish(&header)?;
        self.stats.chunks_finished += 1;
        let plain = (file.path().to_owned(), header.chunk_size as u64);
        // A chunk that cannot be compressed stays as it is: it is complete and valid.
        let (path, size) = if self.settings.compress_finished_chunks {
            compress::compress_chunk_file(file.path()).unwrap_or(plain)
        } else {
            plain
        };
        self.finished.push(FinishedChunk {
            path,
            size,
            start_nanos: chunk.start.epoch_nanos,
            end_nanos: chunk.start.epoch_nanos + duration,
        });
        self.next_start = Some(chunk.start.plus(duration));
        // Leave room for the live chunk, so the repository stays under its limit at all times.
        self.apply_retention(self.settings.max_chunk_size);
        Ok(())
    }

    /// Deletes the oldest finished chunks beyond the size and age limits, counting `live` bytes
    /// for the chunk being written.
    fn apply_retention(&mut self, live: u64) {
        let oldest = self.settings.max_age.map(|a| clock::epoch_nanos() - a.as_nanos() as i64);
        repository::apply_retention(&mut self.finished, live, self.settings.max_size, oldest);
    }

    /// Every finished chunk (decompressed) and the published part of the live chunk, as one valid file.
    fn dump_bytes(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut last_start = None;
        for c in &self.finished {
            let read = std::fs::read(&c.path).and_then(|bytes| compress::chunk_bytes(bytes, &c.path));
            match read {
                Ok(bytes) => {
                    last_start = Some(out.len());
                    out.extend_from_slice(&bytes);
                }
                // Retention may have removed it meanwhile; a dump holds what exists.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if let Some((chunk, header)) = self.chunk.as_ref().and_then(|c| Some((c, c.published?))) {
            if let Some(file) = chunk.file.as_ref() {
                let mut bytes = file.read_published(header.chunk_size as u64)?;
                let mut closed = header;
                closed.state = STATE_FINISHED;
                closed.duration_nanos = header.duration_nanos.max(1);
                closed.flags = FLAG_COMPRESSED_INTS | FLAG_FINAL_CHUNK;
                bytes[..68].copy_from_slice(&closed.encode());
                out.extend_from_slice(&bytes);
                return Ok(out);
            }
        }
        if let Some(start) = last_start {
            // No live chunk: the last finished one closes the file.
            out[start + 67] |= FLAG_FINAL_CHUNK as u8;
        }
        Ok(out)
    }
}

/// The registry version whose metadata the live chunk has (0 before its first).
fn chunk_metadata_version(chunk: &Option<LiveChunk>) -> u64 {
    chunk.as_ref().map_or(0, |c| c.written.metadata_version)
}

/// One `jdk.ExecutionSample`: the sampled thread, the interned stack, RUNNABLE.
fn write_sample(
    writer: &mut ChunkWriter,
    stacks: &StackTable,
    rec: &SampleRecord<'_>,
    threads: &mut HashSet<u32>,
    stack_keys: &mut HashSet<u64>,
) {
    // A leaf-only sample (stack bounds not known yet) is an honest, truncated one-frame stack.
    let key = stacks.intern(rec.ips, rec.truncated || rec.leaf_only);
    writer.write_event(builtin::EXECUTION_SAMPLE, |o| {
        put_long(o, rec.ticks);
        put_varint(o, u64::from(rec.tid));
        put_varint(o, key.0);
        put_varint(o, THREAD_STATE_RUNNABLE);
    });
    threads.insert(rec.tid);
    stack_keys.insert(key.0);
}

/// Writes the live chunk's pending bytes and publishes its header.
fn publish(chunk: &mut LiveChunk, dir: &Path, names: &mut repository::ChunkNames, duration: i64) -> io::Result<()> {
    let Some(header) = chunk.writer.publish(duration) else {
        return Ok(());
    };
    let (offset, bytes) = chunk.writer.take_pending();
    if chunk.file.is_none() {
        chunk.file = Some(ChunkFile::create(dir, chunk.start.epoch_nanos, names)?);
    }
    let file = chunk.file.as_mut().expect("just created");
    file.write_at(offset, &bytes)?;
    file.publish(&header)?;
    chunk.published = Some(header);
    Ok(())
}

/// Reads the leading implicit fields of every record in `bytes` (records written by the commit
/// path: size, type, startTime, duration, eventThread, stackTrace) and collects the thread and
/// stack ids. Returns the record count.
fn scan_records(bytes: &[u8], threads: &mut HashSet<u32>, stacks: &mut HashSet<u64>) -> u64 {
    let mut pos = 0usize;
    let mut count = 0;
    // Consecutive records mostly repeat the previous ids: skip the set lookups for those.
    let (mut last_thread, mut last_stack) = (u32::MAX, u64::MAX);
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let mut at = 0usize;
        let mut fields = [0u64; 6];
        for f in fields.iter_mut() {
            match varint::read_u64(rest.get(at..).unwrap_or(&[])) {
                Some((v, n)) => {
                    *f = v;
                    at += n;
                }
                None => break,
            }
        }
        let (size, thread, stack) = (fields[0], fields[4] as u32, fields[5]);
        if thread != last_thread {
            threads.insert(thread);
            last_thread = thread;
        }
        if stack != last_stack {
            stacks.insert(stack);
            last_stack = stack;
        }
        count += 1;
        if size == 0 {
            break;
        }
        pos += size as usize;
    }
    count
}

fn read_cpu_times() -> CpuTimes {
    let mut t = CpuTimes { at: Some(Instant::now()), ..CpuTimes::default() };
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the parenthesized command name; utime and stime are fields 14 and 15.
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            t.user = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
            t.system = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
            t.process = t.user + t.system;
        }
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
        if let Some(line) = stat.lines().next() {
            let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            t.machine_total = v.iter().sum();
            t.machine_busy = t.machine_total.saturating_sub(idle);
        }
    }
    t
}

fn read_rss() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|v| v * 1024)
    };
    Some((kb("VmRSS:")?, kb("VmHWM:").unwrap_or(0)))
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
        let inner = inner.upgrade().filter(|i| !i.stopping.load(Ordering::Acquire));
        let inner = inner.ok_or_else(|| "the recording has stopped".to_owned())?;
        let mut state = inner.state.lock();
        state.flush();
        let bytes = state.dump_bytes().map_err(|e| format!("dump failed: {e}"))?;
        drop(state);
        write_file_atomically(path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(bytes.len() as u64)
    })
}
