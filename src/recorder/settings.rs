//! Recording settings, their builder and validation, and the recorder's errors.

use crate::metadata_registry::EventSettings;
use crate::repository;
use crate::sampler::{SamplerConfig, SamplingMode};
use crate::stack::{DepthPolicy, MAX_DEPTH_PER_END};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Allocation sampling was asked for, but the global allocator is not
    /// `recorder::alloc::SamplingAllocator`.
    AllocatorNotInstalled,
    /// The recording belongs to another process: this one is a forked child of the process
    /// that started it, and has none of its threads, files or locks.
    ForkedChild {
        /// The process that started the recording.
        owner: u32,
    },
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
            Error::Sampler(e) => write!(f, "cannot start the sampler: {e}"),
            Error::AllocatorNotInstalled => write!(
                f,
                "allocation sampling needs the sampling allocator as the global allocator: \
                 #[global_allocator] static GLOBAL: recorder::alloc::SamplingAllocator = \
                 recorder::alloc::SamplingAllocator::new();"
            ),
            Error::ForkedChild { owner } => write!(
                f,
                "this recording belongs to process {owner}; a forked child cannot use it (start a recording of its own)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Repository { source, .. } | Error::Write { source, .. } => Some(source),
            Error::Thread(e) | Error::Sampler(e) => Some(e),
            Error::InvalidSetting(_)
            | Error::AlreadyRunning
            | Error::ForkedChild { .. }
            | Error::AllocatorNotInstalled => None,
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
    /// Bytes the symbolizer may hold (its heap and the DWARF sections of the files it maps for
    /// their debug info); `None`: no bound. See [`RecorderBuilder::symbol_memory`].
    pub symbol_memory: Option<usize>,
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
    /// Wall-clock sampling period (`None`: off, the default). See
    /// [`RecorderBuilder::wall_clock_sampling`].
    pub wall_clock: Option<Duration>,
    /// With sampling: new threads are sampled from their first instruction (`pthread_create` is
    /// interposed, see `thread_hooks`); off, they are found by discovery (within 100 ms).
    pub sample_threads_from_start: bool,
    /// Allocation sampling (`None`: off). Samples follow `depth`.
    pub allocation: Option<AllocationSampling>,
    /// Finished chunks are replaced by zstd-compressed `<name>.jfr.zst` files (needs the crate's
    /// `zstd` feature).
    pub compress_finished_chunks: bool,
    /// Deterministic mode: logical timestamps and thread numbers, no sampling, no periodic events,
    /// flushes only when asked (`flush`, `dump`, `stop`), so the same events give byte-identical
    /// files.
    pub deterministic: bool,
    /// How scopes charge their own entry and return to the scopes around them
    /// ([`RecorderBuilder::scope_clock`]).
    pub scope_clock: crate::scope::ScopeClock,
    /// `jdk.ExecutionSample` carries `spanId`, the `tracing` span its thread was in: `None` (the
    /// default) when a `RecorderLayer` exists as the recording writes its first samples,
    /// `Some(on)` always / never.
    pub sample_span_ids: Option<bool>,
    /// Diagnostics: log how long every holder keeps the chunk-writer lock L
    /// (`Recorder::lock_holds`; `examples/lock_hold.rs`).
    #[doc(hidden)]
    pub log_lock_holds: bool,
    /// Push finished chunks to this Pyroscope server.
    #[cfg(feature = "push")]
    pub push: Option<crate::push::PushTarget>,
    /// An existing recording directory the recording continues instead of creating one
    /// ([`RecorderBuilder::continue_recording_in`]).
    pub continue_in: Option<PathBuf>,
    /// Constant keys (stack traces, methods, classes, symbols) start above this: set by the
    /// start of a recording that continues a directory, so that no key of the recordings
    /// before it is reused for another value in the same files.
    #[doc(hidden)]
    pub constant_key_base: u64,
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
            symbol_memory: None,
            buffer_size: 64 * 1024,
            depth: DepthPolicy::default(),
            events: Vec::new(),
            periodic_interval: Duration::from_secs(1),
            name: "recorder".into(),
            stack_table_capacity: 1 << 18,
            sampling: Some(SamplerConfig::default()),
            wall_clock: None,
            sample_threads_from_start: true,
            allocation: None,
            compress_finished_chunks: false,
            deterministic: false,
            scope_clock: crate::scope::ScopeClock::Calibrated,
            sample_span_ids: None,
            log_lock_holds: false,
            #[cfg(feature = "push")]
            push: None,
            continue_in: None,
            constant_key_base: 0,
        }
    }
}

/// Allocation sampling settings (see [`RecorderBuilder::allocation_sampling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocationSampling {
    /// Mean bytes allocated between two samples, per thread.
    pub interval: u64,
    /// Follow the sampled blocks until they are freed (`recorder.LiveObject`).
    pub live_set: bool,
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
    /// Continues in `dir`, an existing recording directory, instead of creating a new one in the
    /// repository: the recording's chunks follow those already there, so readers of the
    /// directory see one recording. For a process that replaces its program with `exec`: the
    /// image that ran first stops with [`Recorder::stop_for_exec`](super::Recorder::stop_for_exec)
    /// (its last chunk is not the final one), the new image continues in its directory.
    pub fn continue_recording_in(mut self, dir: impl Into<PathBuf>) -> Self {
        self.settings.continue_in = Some(dir.into());
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
    /// flushing thread some time at each rotation (without the chunk-writer lock). Needs the
    /// crate's `zstd` feature.
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
    /// Bounds what the process's symbolizer holds to `bytes` (default: no bound): its heap (parsed
    /// debug info, symbol tables) and the DWARF sections of the files it maps for their debug
    /// info. A module whose debug info does not fit is named from its symbol table only
    /// (function names, no lines or inlined frames), and named in `recorder.Footprint`'s
    /// `symbolsOnly`; addresses named before keep their names. `recorder record` sets 16 MiB
    /// (`--symbol-memory`). The debug info of a large program can take more than the rest of the
    /// recorder together: a 50 MB C++ binary's ~60 MB, a Rust test binary's ~75 MB
    /// (`scripts/footprint.sh`).
    pub fn symbol_memory(mut self, bytes: usize) -> Self {
        self.settings.symbol_memory = Some(bytes);
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
    /// How the sampler walks stacks (default [`Unwinder::Auto`](crate::Unwinder::Auto): frame
    /// pointers through modules built with them, the `.eh_frame` CFI tables elsewhere). The
    /// choice is written into the recording (`jdk.ActiveSetting` `unwinder`).
    pub fn unwinder(mut self, unwinder: crate::Unwinder) -> Self {
        self.settings.sampling.get_or_insert_with(SamplerConfig::default).unwinder = unwinder;
        self
    }
    /// Whether the DWARF unwind table of the shared library the recorder's code is in (the preload
    /// library of `recorder record`) is built by the recorder's sampler thread rather than by
    /// `start` on the calling thread (default false; no effect when the recorder is linked into
    /// the executable). That table is the largest of a process's (~65 ms of CPU in a debug build)
    /// and its code keeps frame pointers, so the program's stacks do not need it; the program's
    /// own modules still get theirs in `start`, and their stacks are whole from the first sample.
    /// `recorder record` turns it on, so the program's `main` waits less.
    pub fn unwind_tables_in_background(mut self, on: bool) -> Self {
        self.settings.sampling.get_or_insert_with(SamplerConfig::default).tables_in_background = on;
        self
    }
    /// Sampler buffer size in bytes and buffers per thread (defaults 16 KiB and 3).
    pub fn sampler_buffers(mut self, bytes: usize, per_thread: usize) -> Self {
        let config = self.settings.sampling.get_or_insert_with(SamplerConfig::default);
        config.buffer_bytes = bytes;
        config.buffers_per_thread = per_thread;
        self
    }
    /// Whether new threads are sampled from their first instruction (default true:
    /// `pthread_create` is interposed in every loaded module, see [`crate::thread_hooks`]); when
    /// false they are found by thread discovery, within about 100 ms.
    pub fn sample_threads_from_start(mut self, on: bool) -> Self {
        self.settings.sample_threads_from_start = on;
        self
    }
    /// Threads that can be sampled at once (default 128).
    pub fn max_sampled_threads(mut self, n: usize) -> Self {
        self.settings.sampling.get_or_insert_with(SamplerConfig::default).max_threads = n;
        self
    }
    /// How the scope profiler ([`scope!`](crate::scope!), `#[recorder::profile]`, spans of
    /// `RecorderLayer`) keeps its own entry and return out of the self time of the scopes around
    /// them: [`ScopeClock::Calibrated`](crate::scope::ScopeClock::Calibrated) (the default: two
    /// clock reads per scope, a constant measured once per process) or
    /// [`ScopeClock::Exact`](crate::scope::ScopeClock::Exact) (four reads per scope, measured in
    /// place: self times stay right on a machine whose neighbours change the cost of code from
    /// one millisecond to the next, such as a shared VM).
    pub fn scope_clock(mut self, clock: crate::scope::ScopeClock) -> Self {
        self.settings.scope_clock = clock;
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
            self.settings.wall_clock = None;
            self.settings.allocation = None;
        }
        self
    }
    /// Samples allocations: on each thread, one allocation per `interval_bytes` allocated on
    /// average (a per-thread exponential gap, so every byte has the same chance), each as a
    /// `jdk.ObjectAllocationSample` with its stack and the bytes it stands for. Off by default;
    /// [`crate::alloc::DEFAULT_INTERVAL`] (512 KiB) is the usual value (1 B to 1 TiB). Needs
    /// `recorder::alloc::SamplingAllocator` as the global allocator (`start` fails otherwise).
    pub fn allocation_sampling(mut self, interval_bytes: u64) -> Self {
        let live_set = self.settings.allocation.is_some_and(|a| a.live_set);
        self.settings.allocation = Some(AllocationSampling { interval: interval_bytes, live_set });
        self
    }
    /// Follows every sampled allocation until it is freed: each flush writes a
    /// `recorder.LiveObject` per sampled block still allocated (`recorder dump --live` shows
    /// them: leaks, what holds memory now). Turns allocation sampling on at the default interval
    /// if it is off. Default false.
    pub fn allocation_live_set(mut self, on: bool) -> Self {
        let interval = self.settings.allocation.map_or(crate::alloc::DEFAULT_INTERVAL, |a| a.interval);
        self.settings.allocation = Some(AllocationSampling { interval, live_set: on });
        self
    }
    /// Whether each `jdk.ExecutionSample` carries `spanId`, the `tracing` span its thread was in.
    /// By default it does when a [`RecorderLayer`](crate::tracing::RecorderLayer) exists as the
    /// recording writes its first samples (at its first flush), in every chunk; otherwise the
    /// recording keeps the JDK's exact four fields, in every chunk. `true`: always; `false`: never, for readers that assume the
    /// JDK's layout instead of reading the metadata (async-profiler's converter reads a sample's
    /// four fields and does not skip to the event's end, so an extra field derails it).
    pub fn sample_span_ids(mut self, on: bool) -> Self {
        self.settings.sample_span_ids = Some(on);
        self
    }
    /// Records no CPU samples (events only, and wall-clock samples if
    /// [`Self::wall_clock_sampling`] is on).
    pub fn no_sampling(mut self) -> Self {
        self.settings.sampling = None;
        self
    }
    /// Whether CPU samples are taken (default true). Unlike [`Self::no_sampling`] it keeps the
    /// other sampler settings ([`Self::max_sampled_threads`], buffers, unwinder), which the
    /// wall-clock sampler uses too.
    pub fn cpu_sampling(mut self, on: bool) -> Self {
        self.settings.sampling.get_or_insert_with(SamplerConfig::default).cpu = on;
        self
    }
    /// Wall-clock sampling (off by default; [`crate::sampler::DEFAULT_WALL_PERIOD`], 50 ms, is
    /// the usual period; 1 ms to 60 s): every `period`, each thread stands for one period of
    /// wall time, written as `profiler.WallClockSample` events (thread, stack, state, `samples`).
    /// Threads that ran since the last period are asked for their stack (at most 16 a period,
    /// the rest in later periods), by a one-shot perf event that fires only while the thread
    /// runs its own code, so no system call of the application is ever interrupted (no EINTR,
    /// no early return). Threads that did not run cost nothing: their periods are batched with
    /// their last stack and their state (sleeping, waiting). Needs perf events
    /// (perf_event_paranoid <= 2): `start` fails with a clear error otherwise.
    pub fn wall_clock_sampling(mut self, period: Duration) -> Self {
        self.settings.wall_clock = Some(period);
        self
    }
    /// Name of the recording (shown in `jdk.ActiveRecording`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.name = name.into();
        self
    }
    /// Diagnostics: log how long every holder keeps the chunk-writer lock (see
    /// `Recorder::lock_holds`).
    #[doc(hidden)]
    pub fn log_lock_holds(mut self, on: bool) -> Self {
        self.settings.log_lock_holds = on;
        self
    }
    /// Posts every finished chunk to a Grafana Pyroscope server, from a thread of its own, in
    /// order and once (see [`crate::push`]). Unposted chunks stay in the repository: retention
    /// deletes them only when the size limit leaves no other choice, and counts them as lost.
    #[cfg(feature = "push")]
    pub fn push(mut self, target: crate::push::PushTarget) -> Self {
        self.settings.push = Some(target);
        self
    }
    /// The settings as they stand.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Validates the settings, creates the repository and starts recording.
    pub fn start(self) -> Result<super::Recorder, Error> {
        super::Recorder::start(self.settings)
    }
}

pub(super) fn validate(s: &Settings) -> Result<(), Error> {
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
    if let Some(p) = s.wall_clock {
        if p < Duration::from_millis(1) || p > Duration::from_secs(60) {
            return bad(format!("wall-clock sampling period {p:?} is outside 1 ms ..= 60 s"));
        }
        if s.deterministic {
            return bad("deterministic mode samples nothing: turn wall-clock sampling off".into());
        }
    }
    if let Some(a) = &s.allocation {
        if !(1..=1 << 40).contains(&a.interval) {
            return bad(format!("allocation sampling interval {} is outside 1 B ..= 1 TiB", a.interval));
        }
        if s.deterministic {
            return bad("deterministic mode samples nothing: turn allocation sampling off".into());
        }
    }
    if s.periodic_interval < Duration::from_millis(10) {
        return bad(format!("periodic interval {:?} is below 10 ms", s.periodic_interval));
    }
    if s.compress_finished_chunks && !cfg!(feature = "zstd") {
        return bad("compressed chunks need recorder's `zstd` feature".into());
    }
    #[cfg(feature = "push")]
    if let Some(target) = &s.push {
        target.validate().map_err(|e| Error::InvalidSetting(format!("push: {e}")))?;
    }
    Ok(())
}
