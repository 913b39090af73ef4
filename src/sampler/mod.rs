//! The CPU sampler core: per-thread sampling sources, the SIGPROF capture path, and the
//! flush-safe SamplerBuffer protocol of `sampler-protocol.md` §4.
//!
//! # Who calls what
//! ```text
//! let (sampler, locked) = Sampler::start(config)?;      // once; Arc<Sampler> if shared
//! let l = Mutex::new(ChunkWriter { sampler_locked: locked, .. });   // L owns SamplerLocked
//!
//! flusher (every flush interval), holding L:
//!     event buffers -> sampler.drain(&mut w.sampler_locked, &mut |rec| intern + ExecutionSample)
//!     -> own event buffer -> checkpoint -> header           (sampler pass AFTER event buffers)
//! recorder thread (sampler.exclude_current_thread() first):
//!     loop { let work = sampler.wait_pending(timeout);       // without L
//!            lock L; if work { sampler.drain_full(..) }
//!            every ~100 ms-1 s: sampler.discover_threads(..); lost = sampler.take_lost(..)
//!            -> write lost as data-loss events; unlock L }
//! application threads (optional, zero delay, exact bounds): sampler.register_current_thread()
//! end: lock L; flush; let report = Arc::into_inner(sampler).stop(&mut locked, &mut |rec| ..);
//!      write report.lost; final flush
//! ```
//! - [`Sampler::start`] returns the [`Sampler`] (shared, `Sync`) and the [`SamplerLocked`] state,
//!   which the caller keeps *inside* the chunk-writer mutex L, so every method that takes
//!   `&mut SamplerLocked` is proven to run under L.
//! - The flusher, holding L, calls [`Sampler::drain`] after the event buffers (active pass, then
//!   full queue; §4.3 steps 2-3).
//! - The recorder thread loops on [`Sampler::wait_pending`]; when it returns true or times out it
//!   takes L and calls [`Sampler::drain_full`], periodically [`Sampler::discover_threads`] and
//!   [`Sampler::take_lost`].
//! - [`Sampler::stop`] disarms everything, waits out in-flight handlers and hands the last
//!   records to its callback.
//!
//! # Design constraints
//! Modules: `buffer` (the protocol, loom-tested, no syscalls), `signal` (signal context only),
//! `timer` (sampling sources). Thread state is found in the handler through the siginfo:
//! `si_value` of the POSIX timer carries the slot index, `si_fd` of a perf event indexes a
//! preallocated fd table; no thread-local is read in signal context. A slot is written only by the
//! thread whose tid it holds (checked with `gettid` in the handler), so a stale signal after slot
//! reuse is dropped, not written.
//!
//! Locks, all in normal context and never in the handler: L (the caller's; proven by
//! `&mut SamplerLocked`), the registry lock (slot bookkeeping for register / unregister /
//! discovery; order L -> registry) and the lifecycle lock (start / stop / thread-exit guards;
//! order L -> lifecycle -> registry). A registering thread does not hold L, so it takes its first
//! buffer from a small lock-free reserve (crossbeam `ArrayQueue`) that L holders keep topped up.
//!
//! # Signal safety
//! See `signal.rs`: no allocation, no lock, no formatting, no panic, errno preserved, every
//! frame-pointer read validated against the thread's stack bounds.
//!
//! Stack bounds of discovered threads (suggested answer of design.md §6, taken): until known,
//! samples carry the leaf PC and the stack pointer only; `discover_threads` looks the last stack
//! pointer up in /proc/self/maps and stores the mapping as the bounds. Thread exit and tid reuse
//! (§6, taken): registered threads retire their slot from a thread-local guard at exit;
//! discovered threads that vanish, or whose tid now has another start time (stat field 22), are
//! retired by the L holder in `discover_threads` and reaped by the next `drain_full`.
//! fork (§6): a `pthread_atfork` child hook leaves the child not recording, with no lock held.

pub mod buffer;
#[cfg(not(loom))]
mod signal;
#[cfg(not(loom))]
mod timer;

pub use buffer::SampleRecord;

/// The sampler's signal source without the sampler, for `benches/sampling.rs`'s no-op floor: the
/// same per-thread perf event delivering SIGPROF, so the bench measures exactly what the sampler
/// adds on top of it.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod bench_support {
    use std::io;
    use std::time::Duration;

    /// Opens and enables a task-clock perf event for `tid` that sends SIGPROF every `period` of
    /// its CPU time; returns the fd to pass to [`close_perf_signal`].
    pub fn open_perf_signal(tid: u32, period: Duration) -> io::Result<i32> {
        let fd = super::timer::perf_open(tid, period)?;
        if let Err(e) = super::timer::perf_enable(fd, tid) {
            super::timer::disarm(super::timer::Source::Perf(fd));
            return Err(e);
        }
        Ok(fd)
    }

    /// Disables and closes a source from [`open_perf_signal`].
    pub fn close_perf_signal(fd: i32) {
        super::timer::disarm(super::timer::Source::Perf(fd));
    }
}

#[cfg(not(loom))]
pub use imp::*;

#[cfg(not(loom))]
mod imp {
    use super::buffer::{Core, LockedState, SampleRecord, SLOT_FREE, SLOT_LIVE};
    use super::signal;
    use super::timer::{self, Source};
    use crate::stack::{DepthPolicy, MAX_DEPTH_PER_END};
    use crate::sync::{AtomicU32, AtomicU64, Ordering};
    use std::cell::RefCell;
    use std::collections::HashSet;
    use std::io;
    use std::time::Duration;

    /// How samples are triggered.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum SamplingMode {
        /// perf events when the kernel allows them, else CPU-clock timers.
        #[default]
        Auto,
        /// Per-thread `perf_event_open` task-clock events (SIGPROF via F_SETSIG/F_SETOWN_EX).
        PerfEvent,
        /// Per-thread POSIX timers on the thread CPU clock (capped near the kernel tick rate).
        CpuTimer,
    }

    /// Sampler settings. Out-of-range values are clamped by [`Sampler::start`].
    #[derive(Debug, Clone)]
    pub struct SamplerConfig {
        /// Sampling period of each thread's CPU time. Default 10 ms, at least 100 µs.
        pub period: Duration,
        /// Trigger source.
        pub mode: SamplingMode,
        /// Frames per sample, innermost kept, when started with [`Sampler::start`]. Default 128,
        /// clamped to 1..=2048. [`Sampler::start_with_depth`] takes a whole
        /// [`DepthPolicy`] (innermost N and outermost M) instead.
        pub max_depth: usize,
        /// Bytes per buffer (at least 512). A sample larger than a buffer is split into fragments
        /// across consecutive buffers of its thread and reassembled by the drains. Default 16 KiB.
        pub buffer_bytes: usize,
        /// Buffers in the pool per slot: one active, the rest its spares (so a deep sample can
        /// span up to this many buffers). Default 3, at least 2.
        pub buffers_per_thread: usize,
        /// Threads that can be sampled at once (slots). Default 128. Memory used is
        /// `max_threads * buffers_per_thread * buffer_bytes`, allocated at start.
        pub max_threads: usize,
    }

    impl Default for SamplerConfig {
        fn default() -> SamplerConfig {
            SamplerConfig {
                period: Duration::from_millis(10),
                mode: SamplingMode::Auto,
                max_depth: 128,
                buffer_bytes: 16 * 1024,
                buffers_per_thread: 3,
                max_threads: 128,
            }
        }
    }

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
        /// Samples lost (no spare buffer, suppressed).
        pub lost: u64,
        /// Signals that reached no slot (stale after unregistration, foreign thread).
        pub unattributed: u64,
        /// Slots not FREE (live or awaiting reaping).
        pub slots_in_use: usize,
        /// Per thread, for slots not FREE.
        pub threads: Vec<ThreadStats>,
    }

    /// State only holders of the chunk-writer lock L may touch (the CLEAN free list, scratch
    /// space). Keep it inside the Mutex that is L.
    #[derive(Debug)]
    pub struct SamplerLocked {
        inner: LockedState,
    }

    /// What [`Sampler::stop`] leaves behind.
    #[derive(Debug, Clone, Default)]
    pub struct StopReport {
        /// Lost samples not yet reported through `take_lost`, per thread.
        pub lost: Vec<(u32, u64)>,
        /// Final statistics.
        pub stats: SamplerStats,
    }

    #[derive(Debug)]
    struct Entry {
        tid: u32,
        start_time: u64,
        source: Option<Source>,
    }

    #[derive(Debug, Default)]
    struct Registry {
        /// Indexed by slot.
        entries: Vec<Option<Entry>>,
        /// (tid, start time) of threads that asked not to be sampled.
        excluded: Vec<(u32, u64)>,
    }

    /// Everything the handler can reach, behind [`signal::SHARED`].
    #[derive(Debug)]
    pub(super) struct Shared {
        pub(super) core: Core,
        /// perf fd -> slot index + 1 (0: none). Written in normal context before the fd is enabled.
        fd_slots: Box<[AtomicU32]>,
        wake_fd: libc::c_int,
        /// Frames kept per sample: innermost `inner`, outermost `outer` (each <= 2048, not both 0).
        pub(super) depth: DepthPolicy,
        /// Per-slot walk scratch, `depth.inner + depth.outer` words per slot: the innermost frames
        /// in order, then the ring of the last `outer` frames seen. Preallocated; only the slot's
        /// owner (its handler; SIGPROF is blocked while it runs) touches its part.
        scratch: Box<[AtomicU64]>,
        period: Duration,
        mode: SamplingMode,
        generation: u64,
        /// Slot bookkeeping for registration and discovery (normal context; never the handler).
        registry: parking_lot::Mutex<Registry>,
        /// CLEAN buffers an L holder set aside so that a registering thread (which does not hold
        /// L) gets its first buffer at once. Filled by L holders after every pass, popped by
        /// registrants; never touched by the handler.
        reserve: crossbeam_queue::ArrayQueue<u32>,
    }

    impl Shared {
        /// The walk scratch of slot `index`.
        ///
        /// # Signal safety
        /// Bounds-checked slicing, no panic.
        #[inline]
        pub(super) fn scratch(&self, index: usize) -> &[AtomicU64] {
            let w = self.depth.inner + self.depth.outer;
            self.scratch.get(index * w..(index + 1) * w).unwrap_or(&[])
        }

        /// # Signal safety
        /// One bounds-checked atomic load.
        #[inline]
        pub(super) fn slot_for_fd(&self, fd: libc::c_int) -> Option<usize> {
            let e = self.fd_slots.get(usize::try_from(fd).ok()?)?;
            // Acquire: pairs with the Release store in `arm` made before the event was enabled.
            let v = e.load(Ordering::Acquire);
            (v != 0).then(|| v as usize - 1)
        }

        /// Posts the recorder wakeup: one 8-byte `write` to the eventfd.
        ///
        /// # Signal safety
        /// `write(2)` is async-signal-safe; the eventfd is non-blocking.
        #[inline]
        pub(super) fn post_wake(&self) {
            let one: u64 = 1;
            // SAFETY: `wake_fd` is our eventfd, open until `Shared` is dropped after stop's grace
            // period; `one` is 8 readable bytes.
            unsafe { libc::write(self.wake_fd, (&one as *const u64).cast(), 8) };
        }

        /// Tops the registration reserve up from the free list (L held).
        fn top_up_reserve(&self, locked: &mut SamplerLocked) {
            while !self.reserve.is_full() {
                let Some(index) = self.core.take_clean(&mut locked.inner) else {
                    break;
                };
                if let Err(index) = self.reserve.push(index) {
                    // A registrant pushed one back meanwhile; keep this one on the free list.
                    self.core.return_clean(&mut locked.inner, index);
                    break;
                }
            }
        }

        fn arm(&self, tid: u32, slot: usize) -> io::Result<Source> {
            if self.mode == SamplingMode::PerfEvent {
                if let Ok(fd) = timer::perf_open(tid, self.period) {
                    match self.fd_slots.get(fd as usize) {
                        Some(e) => {
                            // Release: the mapping is visible to a handler that receives this
                            // fd's signal (Acquire load in `slot_for_fd`).
                            e.store(slot as u32 + 1, Ordering::Release);
                            if timer::perf_enable(fd, tid).is_ok() {
                                return Ok(Source::Perf(fd));
                            }
                            // Relaxed: the fd is closed below, no signal will use the entry.
                            e.store(0, Ordering::Relaxed);
                            timer::disarm(Source::Perf(fd));
                        }
                        None => timer::disarm(Source::Perf(fd)),
                    }
                }
                // Fall back to a CPU timer for this thread.
            }
            timer::timer_arm(tid, slot, self.period)
        }

        fn disarm(&self, source: Source) {
            let fd = match source {
                Source::Perf(fd) => Some(fd),
                Source::Timer(_) => None,
            };
            timer::disarm(source);
            if let Some(e) = fd.and_then(|fd| self.fd_slots.get(fd as usize)) {
                // Relaxed: a stale signal carrying this fd maps to nothing or to a reused fd's
                // slot, whose tid check drops it.
                e.store(0, Ordering::Relaxed);
            }
        }
    }

    impl Drop for Shared {
        fn drop(&mut self) {
            // SAFETY: our eventfd; no handler can run any more (stop's grace period).
            unsafe { libc::close(self.wake_fd) };
        }
    }

    /// Lifecycle lock: serializes start/stop with exit guards of registered threads. The value
    /// is the generation counter of the latest sampler; bit 63 marks the atfork hook as registered.
    static LIFECYCLE: parking_lot::Mutex<u64> = parking_lot::const_mutex(0);
    const ATFORK_REGISTERED: u64 = 1 << 63;

    /// `pthread_atfork` child hook (design.md §6 "fork"): the child inherits the handler and
    /// memory but no timers and no other threads. Leave it "not recording" with no lock held:
    /// forget the parent's sampler and force-release locks a vanished parent thread may hold.
    /// The parent's `Shared` is leaked in the child (a copy of the parent's memory).
    extern "C" fn atfork_child() {
        let shared = signal::forget_in_child();
        if LIFECYCLE.is_locked() {
            // SAFETY: the holder was a parent thread that does not exist in the child.
            unsafe { LIFECYCLE.force_unlock() };
        }
        // SAFETY: the parent's `Shared` is still mapped in the child (never freed there).
        if let Some(shared) = unsafe { shared.as_ref() } {
            if shared.registry.is_locked() {
                // SAFETY: as above.
                unsafe { shared.registry.force_unlock() };
            }
        }
    }

    thread_local! {
        /// Unregisters a registered thread when it exits (normal context; never read by the
        /// handler).
        static EXIT_GUARD: RefCell<Option<ExitGuard>> = const { RefCell::new(None) };
    }

    struct ExitGuard {
        generation: u64,
        start_time: u64,
    }

    impl Drop for ExitGuard {
        fn drop(&mut self) {
            let _life = LIFECYCLE.lock();
            // Relaxed: under LIFECYCLE, which `start`/`stop` hold while publishing/unpublishing.
            let shared = signal::SHARED.load(Ordering::Relaxed);
            // SAFETY: under LIFECYCLE the published `Shared` cannot be freed.
            if let Some(shared) = unsafe { shared.as_ref() } {
                if shared.generation == self.generation {
                    unregister(shared, gettid(), self.start_time);
                }
            }
        }
    }

    /// Points the sampler slot of thread `tid` (if it is sampled) at its span word (null: none).
    /// Normal context; takes the lifecycle and registry locks (in that order).
    pub(crate) fn attach_span_cell(tid: u32, cell: *const std::sync::atomic::AtomicU64) {
        let _life = LIFECYCLE.lock();
        // Relaxed: under LIFECYCLE, which `start`/`stop` hold while publishing/unpublishing.
        let shared = signal::SHARED.load(Ordering::Relaxed);
        // SAFETY: under LIFECYCLE the published `Shared` cannot be freed.
        let Some(shared) = (unsafe { shared.as_ref() }) else { return };
        let reg = shared.registry.lock();
        for (index, entry) in reg.entries.iter().enumerate() {
            if entry.as_ref().is_some_and(|e| e.tid == tid) {
                if let Some(slot) = shared.core.slot(index) {
                    slot.set_span_cell(cell);
                }
            }
        }
    }

    fn gettid() -> u32 {
        // SAFETY: no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }

    /// Start time (field 22 of /proc/self/task/TID/stat), 0 if unreadable.
    fn start_time(tid: u32) -> u64 {
        start_time_and_name(tid).0
    }

    /// Start time, as [`start_time`], and the thread's name (`comm`) from the same read.
    fn start_time_and_name(tid: u32) -> (u64, Option<String>) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
            return (0, None);
        };
        (parse_start_time(&stat).unwrap_or(0), crate::thread::stat_comm(&stat).map(str::to_owned))
    }

    fn parse_start_time(stat: &str) -> Option<u64> {
        let rest = &stat[stat.rfind(')')? + 1..];
        // Fields after the comm start at field 3; field 22 is the 20th of them.
        rest.split_whitespace().nth(19)?.parse().ok()
    }

    /// Stack bounds of the calling thread (shared with the event-stack walk, which caches them per
    /// thread).
    fn current_stack_bounds() -> Option<(usize, usize)> {
        let (lo, hi) = crate::unwind::current_stack_bounds();
        (hi != 0).then_some((lo, hi))
    }

    /// Unregisters thread (tid, start time): disarm, then retire its slot (buffers to the full
    /// queue). Called on the thread itself (or, for a dead thread, by whoever noticed).
    fn unregister(shared: &Shared, tid: u32, start: u64) {
        let mut reg = shared.registry.lock();
        let found = reg.entries.iter().position(|e| e.as_ref().is_some_and(|e| e.tid == tid && e.start_time == start));
        if let Some(index) = found {
            retire_entry(shared, &mut reg, index);
        }
    }

    /// Disarms entry `index` and retires its slot (registry lock held).
    fn retire_entry(shared: &Shared, reg: &mut Registry, index: usize) {
        let Some(entry) = reg.entries.get_mut(index).and_then(Option::take) else {
            return;
        };
        if let Some(source) = entry.source {
            shared.disarm(source);
        }
        if let Some(slot) = shared.core.slot(index) {
            if slot.state() == SLOT_LIVE && shared.core.retire_slot(slot) {
                shared.post_wake();
            }
        }
    }

    /// The CPU sampler. `Sync`: share it by reference or `Arc` between the recorder thread, the
    /// flusher and application threads that register themselves.
    #[derive(Debug)]
    pub struct Sampler {
        shared: *mut Shared,
    }

    // SAFETY: `Shared` is made of atomics, immutable fields and a Mutex; the raw pointer is owned
    // by this handle and freed only by `stop`/`drop`, which take it by value.
    unsafe impl Send for Sampler {}
    // SAFETY: as above; every `&self` method synchronizes through atomics or the registry lock.
    unsafe impl Sync for Sampler {}

    impl Sampler {
        fn shared(&self) -> &Shared {
            // SAFETY: `shared` is valid from `start` until `stop`/`drop`, which consume `self`.
            unsafe { &*self.shared }
        }

        /// Allocates the pools, installs the SIGPROF handler and publishes the sampler. No thread
        /// is sampled until it registers or is discovered.
        ///
        /// Fails with `AlreadyExists` if a sampler is running in this process.
        pub fn start(config: SamplerConfig) -> io::Result<(Sampler, SamplerLocked)> {
            let depth = DepthPolicy { inner: config.max_depth.max(1), outer: 0 };
            Sampler::start_with_depth(config, depth)
        }

        /// Like [`Sampler::start`], keeping the frames `depth` selects (design.md §4 "Depth"):
        /// the innermost `inner`, the outermost `outer`, or both with one `<elided:K>` frame
        /// ([`crate::stack::elided_marker`]) between them; records that dropped frames are marked
        /// truncated. Each end is clamped to 2048; both 0 keeps the innermost frame only.
        /// `config.max_depth` is ignored.
        pub fn start_with_depth(config: SamplerConfig, depth: DepthPolicy) -> io::Result<(Sampler, SamplerLocked)> {
            // The handler reads ticks and must not be the one to choose the clock.
            crate::clock::init();
            let mut life = LIFECYCLE.lock();
            // Relaxed: under LIFECYCLE.
            if !signal::SHARED.load(Ordering::Relaxed).is_null() {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a sampler is already running"));
            }
            let period = config.period.max(Duration::from_micros(100));
            let mut depth =
                DepthPolicy { inner: depth.inner.min(MAX_DEPTH_PER_END), outer: depth.outer.min(MAX_DEPTH_PER_END) };
            if depth.inner == 0 && depth.outer == 0 {
                depth.inner = 1;
            }
            // Buffers stay as small as asked (with a floor): deeper samples are fragmented.
            let capacity_words = (config.buffer_bytes / 8).max(64);
            let nslots = config.max_threads.clamp(1, 1 << 16);
            let per_thread = config.buffers_per_thread.max(2);
            let nbuffers = nslots * per_thread;
            let mode = match config.mode {
                SamplingMode::Auto | SamplingMode::PerfEvent if timer::perf_available(period) => {
                    SamplingMode::PerfEvent
                }
                SamplingMode::Auto => SamplingMode::CpuTimer,
                SamplingMode::PerfEvent => {
                    return Err(io::Error::new(io::ErrorKind::Unsupported, "perf_event_open is not permitted here"));
                }
                SamplingMode::CpuTimer => SamplingMode::CpuTimer,
            };
            // SAFETY: plain syscall wrapper.
            let wake_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if wake_fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut nofile = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: valid out pointer.
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile) };
            let fd_len = (nofile.rlim_cur as usize).clamp(1024, 1 << 16);
            if *life & ATFORK_REGISTERED == 0 {
                // SAFETY: registers a hook that only does atomic stores and lock releases.
                if unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) } == 0 {
                    *life |= ATFORK_REGISTERED;
                }
            }
            let (core, locked) = Core::with_spares(nslots, nbuffers, capacity_words, per_thread - 1);
            *life += 1;
            let shared = Box::new(Shared {
                core,
                fd_slots: (0..fd_len).map(|_| AtomicU32::new(0)).collect(),
                wake_fd,
                depth,
                scratch: (0..nslots * (depth.inner + depth.outer)).map(|_| AtomicU64::new(0)).collect(),
                period,
                mode,
                generation: *life,
                reserve: crossbeam_queue::ArrayQueue::new(nslots.clamp(1, 16)),
                registry: parking_lot::Mutex::new(Registry {
                    entries: (0..nslots).map(|_| None).collect(),
                    excluded: Vec::new(),
                }),
            });
            let mut locked = SamplerLocked { inner: locked };
            shared.core.bind(&mut locked.inner);
            shared.top_up_reserve(&mut locked);
            signal::install()?;
            let shared = Box::into_raw(shared);
            signal::publish(shared);
            Ok((Sampler { shared }, locked))
        }

        /// The effective mode.
        pub fn mode(&self) -> SamplingMode {
            self.shared().mode
        }

        /// The effective sampling period.
        pub fn period(&self) -> Duration {
            self.shared().period
        }

        /// Starts sampling the calling thread now, with exact stack bounds (pthread_getattr_np).
        /// Its first buffer comes at once from a lock-free reserve that L holders keep topped up;
        /// its spare arrives with the next `drain`/`drain_full`/`discover_threads` (the recorder
        /// is woken). The thread is unregistered automatically when it exits (a thread-local
        /// guard; normal context). A no-op for excluded or already registered threads.
        ///
        /// Fails if no slot is free (`max_threads`) or the sampling source cannot be armed.
        pub fn register_current_thread(&self) -> io::Result<()> {
            let shared = self.shared();
            let tid = gettid();
            let start = start_time(tid);
            let (lo, hi) = current_stack_bounds().unwrap_or((0, 0));
            {
                let mut reg = shared.registry.lock();
                if reg.excluded.contains(&(tid, start))
                    || reg.entries.iter().flatten().any(|e| e.tid == tid && e.start_time == start)
                {
                    return Ok(());
                }
                // An entry with our tid but another start time belongs to a dead thread whose
                // tid we reuse: retire it now rather than at the next discovery.
                let stale: Vec<usize> = (0..reg.entries.len())
                    .filter(|&i| {
                        reg.entries
                            .get(i)
                            .and_then(Option::as_ref)
                            .is_some_and(|e| e.tid == tid && e.start_time != start)
                    })
                    .collect();
                for i in stale {
                    retire_entry(shared, &mut reg, i);
                }
                let slot = shared
                    .core
                    .claim_slot(tid, lo, hi)
                    .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "no free sampler slot"))?;
                slot.set_span_cell(crate::span_context::cell_for(tid));
                let index = slot.index() as usize;
                // First buffer now, from the reserve; the rest come from L holders' refills.
                if let Some(b) = shared.reserve.pop() {
                    if !shared.core.install_spare(slot, b) {
                        // An L holder's refill got there first; hand the buffer back.
                        // FIXME(sampler): if the reserve refilled to capacity meanwhile, the
                        // buffer drops out of the pool until stop (bounded, never unsafe).
                        let _ = shared.reserve.push(b);
                    }
                }
                match shared.arm(tid, index) {
                    Ok(source) => {
                        if let Some(e) = reg.entries.get_mut(index) {
                            *e = Some(Entry { tid, start_time: start, source: Some(source) });
                        }
                    }
                    Err(err) => {
                        shared.core.retire_slot(slot);
                        return Err(err);
                    }
                }
            }
            shared.post_wake();
            // `try_with`: fails only during thread teardown, when there is nothing to guard. A
            // previous guard is disarmed first so that dropping it cannot unregister us.
            let _ = EXIT_GUARD.try_with(|g| {
                let mut g = g.borrow_mut();
                if let Some(old) = g.as_mut() {
                    old.generation = 0;
                }
                *g = Some(ExitGuard { generation: shared.generation, start_time: start });
            });
            Ok(())
        }

        /// Stops sampling the calling thread; its buffers go to the full queue (nothing is lost).
        pub fn unregister_current_thread(&self) {
            let _ = EXIT_GUARD.try_with(|g| {
                if let Some(guard) = g.borrow_mut().as_mut() {
                    guard.generation = 0;
                }
            });
            let tid = gettid();
            unregister(self.shared(), tid, start_time(tid));
        }

        /// Never sample the calling thread (the recorder's own threads call this); unregisters it
        /// if it is sampled.
        pub fn exclude_current_thread(&self) {
            let tid = gettid();
            let start = start_time(tid);
            self.shared().registry.lock().excluded.push((tid, start));
            self.unregister_current_thread();
        }

        /// Scans /proc/self/task (L held): arms sampling for new threads, retires the slots of
        /// vanished ones (tid reuse told apart by start time; their buffers go to the full queue
        /// and the next `drain_full` processes and reaps them), finds stack bounds of discovered
        /// threads from /proc/self/maps, refills spares. Returns the name (`comm`) of every thread
        /// listed, read with its start time, for the recorder to name threads while they run.
        pub fn discover_threads(&self, locked: &mut SamplerLocked) -> Vec<(u32, String)> {
            let shared = self.shared();
            let mut live: Vec<(u32, u64)> = Vec::new();
            let mut names = Vec::new();
            if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
                for e in dir.flatten() {
                    if let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                        let (start, name) = start_time_and_name(tid);
                        live.push((tid, start));
                        names.extend(name.map(|n| (tid, n)));
                    }
                }
            }
            let live_set: HashSet<(u32, u64)> = live.iter().copied().collect();
            let mut need_bounds = Vec::new();
            {
                let mut reg = shared.registry.lock();
                reg.excluded.retain(|t| live_set.contains(t));
                let mut present = HashSet::new();
                for index in 0..reg.entries.len() {
                    let Some(Some(entry)) = reg.entries.get(index) else {
                        continue;
                    };
                    let key = (entry.tid, entry.start_time);
                    if live_set.contains(&key) {
                        present.insert(key);
                        if let Some(slot) = shared.core.slot(index) {
                            if slot.stack_bounds().1 == 0 && slot.last_sp() != 0 {
                                need_bounds.push((index, slot.last_sp()));
                            }
                        }
                        continue;
                    }
                    // Vanished (or its tid now names a newer thread): the owner is dead, so no
                    // handler can run for it; retire the slot on its behalf. Its buffers go to the
                    // full queue; the next `drain_full` processes them and reaps the slot.
                    retire_entry(shared, &mut reg, index);
                }
                for &(tid, start) in &live {
                    if present.contains(&(tid, start)) || reg.excluded.contains(&(tid, start)) {
                        continue;
                    }
                    let Some(slot) = shared.core.claim_slot(tid, 0, 0) else {
                        break;
                    };
                    slot.set_span_cell(crate::span_context::cell_for(tid));
                    let index = slot.index() as usize;
                    match shared.arm(tid, index) {
                        Ok(source) => {
                            if let Some(e) = reg.entries.get_mut(index) {
                                *e = Some(Entry { tid, start_time: start, source: Some(source) });
                            }
                        }
                        Err(_) => {
                            shared.core.retire_slot(slot);
                        }
                    }
                }
            }
            if !need_bounds.is_empty() {
                if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
                    for (index, sp) in need_bounds {
                        if let (Some((lo, hi)), Some(slot)) = (mapping_containing(&maps, sp), shared.core.slot(index)) {
                            slot.set_stack_bounds(lo, hi);
                        }
                    }
                }
            }
            shared.core.refill_spares(&mut locked.inner);
            shared.top_up_reserve(locked);
            names
        }

        /// Flusher pass (L held): the full queue (processed oldest first, recycled), reaping and
        /// spare refills, then the records in `[flushed_pos, pos)` of every active buffer
        /// (§4.3 steps 2-3, in the order that keeps each thread's records in sequence; see
        /// `Core::drain`). `f` sees whole samples only: fragments of oversized samples are
        /// reassembled first, incomplete ones counted lost.
        pub fn drain(&self, locked: &mut SamplerLocked, f: &mut dyn FnMut(&SampleRecord<'_>)) {
            let shared = self.shared();
            shared.core.drain(&mut locked.inner, f);
            shared.top_up_reserve(locked);
        }

        /// Recorder pass (L held): the full queue only, then reaping and spare refills (§4.4).
        pub fn drain_full(&self, locked: &mut SamplerLocked, f: &mut dyn FnMut(&SampleRecord<'_>)) {
            let shared = self.shared();
            shared.core.drain_full(&mut locked.inner, f);
            shared.top_up_reserve(locked);
        }

        /// Sleeps until a handler signals a full buffer / missing spare / new thread, or until
        /// `timeout`. Returns true if there is work for `drain_full`. Call without holding L.
        pub fn wait_pending(&self, timeout: Duration) -> bool {
            let shared = self.shared();
            if shared.core.take_pending() {
                return true;
            }
            let mut pfd = libc::pollfd { fd: shared.wake_fd, events: libc::POLLIN, revents: 0 };
            let ts = libc::timespec {
                tv_sec: timeout.as_secs() as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: one valid pollfd, valid timespec, no signal mask change.
            let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
            if rc > 0 {
                let mut v: u64 = 0;
                // SAFETY: reads 8 bytes into `v` from our non-blocking eventfd.
                unsafe { libc::read(shared.wake_fd, (&mut v as *mut u64).cast(), 8) };
            }
            shared.core.take_pending()
        }

        /// Lost samples since the last call, per thread (L held), for data-loss events.
        pub fn take_lost(&self, locked: &mut SamplerLocked) -> Vec<(u32, u64)> {
            self.shared().core.take_lost(&mut locked.inner)
        }

        /// Statistics (a test hook): exact when no handler and no drain runs concurrently.
        pub fn stats(&self) -> SamplerStats {
            stats_of(self.shared())
        }

        /// Disarms every source, waits until no handler can touch the sampler, hands every record
        /// still buffered to `f`, restores the application's SIGPROF handler (or leaves a harmless
        /// one installed if there was none) and frees the pools.
        pub fn stop(self, locked: &mut SamplerLocked, f: &mut dyn FnMut(&SampleRecord<'_>)) -> StopReport {
            let shared = self.shared;
            std::mem::forget(self);
            // SAFETY: `shared` came from `Box::into_raw` in `start`; this is the only release.
            unsafe { teardown(shared, Some((&mut locked.inner, f))) }
        }
    }

    impl Drop for Sampler {
        /// Like `stop` without a final drain: buffered samples are discarded.
        fn drop(&mut self) {
            // SAFETY: as in `stop`; `drop` runs at most once and `stop` forgets `self`.
            unsafe { teardown(self.shared, None) };
        }
    }

    fn stats_of(shared: &Shared) -> SamplerStats {
        let core = &shared.core;
        let (t, w, l) = core.retired_totals();
        let mut st = SamplerStats {
            taken: t,
            written: w,
            lost: l,
            unattributed: core.unattributed(),
            ..SamplerStats::default()
        };
        for slot in core.slots() {
            if slot.state() == SLOT_FREE {
                continue;
            }
            let s = core.slot_stats(slot);
            st.taken += s.taken;
            st.written += s.written;
            st.lost += s.lost;
            st.slots_in_use += 1;
            st.threads.push(ThreadStats { tid: s.tid, taken: s.taken, written: s.written, lost: s.lost });
        }
        st
    }

    type Final<'a> = (&'a mut LockedState, &'a mut dyn FnMut(&SampleRecord<'_>));

    /// # Safety
    /// `shared` must come from `Box::into_raw` in `start` and not have been freed.
    unsafe fn teardown(shared: *mut Shared, fin: Option<Final<'_>>) -> StopReport {
        let _life = LIFECYCLE.lock();
        // SAFETY: caller's contract.
        let sh = unsafe { &*shared };
        {
            let mut reg = sh.registry.lock();
            for entry in reg.entries.iter_mut() {
                if let Some(source) = entry.as_mut().and_then(|e| e.source.take()) {
                    sh.disarm(source);
                }
            }
        }
        signal::unpublish_and_wait();
        let mut report = StopReport::default();
        if let Some((locked, f)) = fin {
            sh.core.drain_all_final(locked, f);
            report.lost = sh.core.take_lost(locked);
            sh.core.unbind(locked);
        }
        report.stats = stats_of(sh);
        signal::uninstall();
        // SAFETY: unpublished and no handler is running (grace period above); exit guards check
        // the generation under LIFECYCLE, which we hold.
        drop(unsafe { Box::from_raw(shared) });
        report
    }

    /// The `/proc/self/maps` mapping `[lo, hi)` that contains `addr`.
    fn mapping_containing(maps: &str, addr: usize) -> Option<(usize, usize)> {
        for line in maps.lines() {
            let range = line.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            let (lo, hi) = (usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?);
            if lo <= addr && addr < hi {
                return Some((lo, hi));
            }
        }
        None
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn start_time_parses_field_22_after_comm_with_spaces() {
            let stat = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
            assert_eq!(parse_start_time(stat), Some(424242));
        }

        #[test]
        fn mapping_lookup_finds_the_right_range() {
            let maps = "1000-2000 r-xp 0 0:0 0 a\n7f00-8000 rw-p 0 0:0 0 [stack]\n";
            assert_eq!(mapping_containing(maps, 0x7f10), Some((0x7f00, 0x8000)));
            assert_eq!(mapping_containing(maps, 0x3000), None);
        }
    }
}
