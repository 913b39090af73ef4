//! The CPU sampler core: per-thread sampling sources, the SIGPROF capture path, and the
//! flush-safe SamplerBuffer protocol of `docs/sampler-protocol.md`.
//!
//! # Who calls what
//! ```text
//! let (sampler, locked) = Sampler::start(config)?;      // once; Arc<Sampler> if shared
//! // L owns SamplerLocked: `flush::samples::CpuSamples` keeps it, in the recorder's `State`
//! state.add_sample_source(Box::new(CpuSamples::new(Arc::clone(&sampler), locked)));
//!
//! flusher (every flush interval), holding L:
//!     event buffers -> sampler.drain(&mut locked, &mut |rec| intern + ExecutionSample)
//!     -> own event buffer -> checkpoint -> header           (sampler pass AFTER event buffers)
//! recorder thread (sampler.exclude_current_thread() first):
//!     loop { let work = sampler.wait_pending(timeout);       // without L; refills spares
//!            every ~100 ms-1 s: sampler.discover_threads_unlocked();   // without L
//!            lock L; if work { sampler.drain_full(..) }
//!            lost = sampler.take_lost(..) -> write lost as data-loss events; unlock L }
//! application threads (optional, zero delay, exact bounds): sampler.register_current_thread()
//! new threads, first thing (`thread_hooks`' pthread_create wrapper), if the owner called
//!     sampler.register_new_threads(true): register_thread_start()   // the same registration
//! end: lock L; flush; let report = Arc::into_inner(sampler).stop(&mut locked, &mut |rec| ..);
//!      write report.lost; final flush
//! ```
//! - [`Sampler::start`] returns the [`Sampler`] (shared, `Sync`) and the [`SamplerLocked`] state,
//!   which the caller keeps *inside* the chunk-writer mutex L, so every method that takes
//!   `&mut SamplerLocked` is proven to run under L.
//! - The flusher, holding L, calls [`Sampler::drain`] after the event buffers (full queue, then
//!   active buffers; docs/sampler-protocol.md §3 steps 2-3).
//! - The recorder thread loops on [`Sampler::wait_pending`] (which refills spares, no L needed);
//!   when it returns true or times out it takes L and calls [`Sampler::drain_full`] and
//!   [`Sampler::take_lost`]. Periodically, *without* L, it calls
//!   [`Sampler::discover_threads_unlocked`]: /proc is read outside every lock and the result
//!   applied under the registry lock only (the whole of discovery needs nothing L protects).
//! - [`Sampler::stop`] disarms everything, waits out in-flight handlers and hands the last
//!   records to its callback.
//!
//! # Design constraints
//! Modules: `buffer` (the protocol, loom-tested, no syscalls), `signal` (signal context only),
//! `timer` (sampling sources), `wall` (the wall-clock sampler thread: its requests are one-shot
//! perf events whose samples go through the same buffers, flagged `FLAG_WALL`). Thread state is found in the handler through the siginfo:
//! `si_value` of the POSIX timer carries the slot index, `si_fd` of a perf event indexes a
//! preallocated fd table; no thread-local is read in signal context. A slot is written only by a
//! handler admitted to it (`Core::admit`: the thread whose tid it holds, while it is not retired;
//! I13), so a stale signal after slot reuse is dropped, not written.
//!
//! Locks, all in normal context and never in the handler: L (the caller's; proven by
//! `&mut SamplerLocked`), the lifecycle lock (start / stop / thread-exit guards), the registry
//! lock (slot bookkeeping for register / unregister / discovery) and the buffer pool's lock
//! (`buffer.rs`); order L -> lifecycle -> registry -> pool. Registering threads and the recorder
//! thread refill spares from the pool without L, so a long L hold does not starve the handlers.
//!
//! # Signal safety
//! See `signal.rs`: no allocation, no lock, no formatting, no panic, errno preserved, every
//! frame-pointer read validated against the thread's stack bounds, and frames read only when the
//! stack pointer lies inside them.
//!
//! # Thread discovery and retirement (docs/sampler-protocol.md §6)
//! Until its stack bounds are known, a discovered thread's samples carry the leaf PC and the stack
//! pointer only; discovery looks the last stack pointer up in /proc/self/maps and stores the
//! mapping as the bounds. The main thread's stack grows down: its bounds reach as low as the
//! stack may grow (RLIMIT_STACK, the mapping below), and the part known to be mapped follows the
//! growth (`signal::walkable`). Registered threads retire their slot from a thread-local guard at
//! exit. A slot is retired on behalf of another thread only when that thread is proven dead:
//! `tgkill(pid, tid, 0)` fails with ESRCH, or its tid now names a thread with another start time
//! (stat field 22) or a zombie. A thread missing from a /proc listing, a listing that could not be
//! read (EMFILE, ENOMEM), a stat that could not be read or a thread that registered after the
//! listing is never taken for dead. Even then the retirer takes over the slot only once no
//! handler is admitted to it (I13), and the next `drain_full` processes its buffers and reaps it.
//! fork: a `pthread_atfork` child hook leaves the child not recording, with no lock held.

#[cfg(not(loom))]
#[allow(unsafe_code)]
mod blocked;
pub mod buffer;
#[cfg(not(loom))]
mod handler_time;
#[cfg(not(loom))]
mod signal;
#[cfg(not(loom))]
mod stacks;
#[cfg(not(loom))]
mod timer;
#[cfg(not(loom))]
mod wall;

pub use buffer::SampleRecord;
#[cfg(not(loom))]
pub(crate) use signal::with_unwind_tables;
#[cfg(not(loom))]
pub use signal::{adopt_application_action, changing_own_action};

/// The sampler's signal source without the sampler, for `benches/sampling.rs`'s no-op floor: the
/// same per-thread perf event delivering SIGPROF, so the bench measures exactly what the sampler
/// adds on top of it.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod bench_support {
    pub use super::handler_time::{enable as time_handler, report as handler_times, HandlerTimes};
    use std::io;
    use std::time::Duration;

    /// Opens and enables a task-clock perf event for `tid` that sends SIGPROF every `period` of
    /// its CPU time; returns the fd to pass to [`close_perf_signal`].
    pub fn open_perf_signal(tid: u32, period: Duration) -> io::Result<i32> {
        let fd = super::timer::perf_open(tid, period)?;
        if let Err(e) = super::timer::perf_enable(fd, tid) {
            super::timer::disarm(super::timer::Source::Perf(fd), tid);
            return Err(e);
        }
        Ok(fd)
    }

    /// Disables and closes a source from [`open_perf_signal`] of thread `tid`.
    pub fn close_perf_signal(fd: i32, tid: u32) {
        super::timer::disarm(super::timer::Source::Perf(fd), tid);
        super::timer::release_quarantine();
    }
}

#[cfg(not(loom))]
pub use imp::*;

#[cfg(not(loom))]
mod imp {
    use super::buffer::{Core, LockedState, SampleRecord, StackBounds, ThreadSlot, SLOT_EXITED, SLOT_FREE, SLOT_LIVE};
    use super::signal;
    use super::timer::{self, Source};
    use super::wall;
    pub use super::wall::{WallBatch, WallState, WallStats, DEFAULT_PERIOD as DEFAULT_WALL_PERIOD, REQUESTS_PER_TICK};
    use crate::stack::{DepthPolicy, MAX_DEPTH_PER_END};
    use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};
    use std::io;
    use std::time::{Duration, Instant};

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
        /// How stacks are walked: frame pointers, DWARF CFI tables, or both (default `Auto`).
        pub unwinder: crate::unwind::Unwinder,
        /// Build the DWARF table of the shared library the recorder's code is in (the preload
        /// library of `recorder record`: the largest of a process's tables, and of code that keeps
        /// frame pointers) on the recorder's sampler thread ([`Sampler::build_unwind_tables`])
        /// instead of in `start` (default false; nothing changes when the recorder is linked into
        /// the executable). The program's own modules get their tables in `start` as always, so
        /// their stacks are whole from the first sample.
        pub tables_in_background: bool,
        /// CPU sampling (default true). Off, only the wall-clock sampler (if any) takes samples.
        pub cpu: bool,
        /// Wall-clock sampling period (`None`, the default: off; see `wall.rs`). Needs perf
        /// events: start fails without them.
        pub wall: Option<Duration>,
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
                unwinder: crate::unwind::Unwinder::Auto,
                tables_in_background: false,
                cpu: true,
                wall: None,
            }
        }
    }

    /// The path of the shared library this code is in, as `/proc/self/maps` names it; `None` when
    /// it is the executable itself (or unknown).
    fn own_shared_library() -> Option<String> {
        // SAFETY: zeroed is a valid `Dl_info`; dladdr fills it for an address inside a loaded
        // object and leaves it alone otherwise.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let addr = own_shared_library as *const () as *const libc::c_void;
        // SAFETY: `addr` is a function of this object; `info` is a valid out pointer.
        if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dladdr returns a NUL-terminated name owned by the loader.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
        let path = std::fs::canonicalize(&name).ok()?;
        let exe = std::fs::read_link("/proc/self/exe").ok()?;
        (path != exe).then(|| path.to_string_lossy().into_owned())
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
        inner: LockedState,
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

    /// A registry entry: the thread a slot samples, identified by (tid, start time).
    #[derive(Debug)]
    pub(super) struct Entry {
        pub(super) tid: u32,
        /// Stat field 22; 0 if it could not be read (then the tid alone identifies it).
        start_time: u64,
        pub(super) source: Option<Source>,
        /// The thread registered itself (exact bounds, exit guard); else it was discovered.
        registered: bool,
        /// Proven dead, slot retirement waiting for a handler to leave (I13).
        pub(super) retiring: bool,
    }

    impl Entry {
        fn is(&self, tid: u32, start: u64) -> bool {
            self.tid == tid && (self.start_time == 0 || start == 0 || self.start_time == start)
        }
    }

    #[derive(Debug, Default)]
    pub(super) struct Registry {
        /// Indexed by slot.
        pub(super) entries: Vec<Option<Entry>>,
        /// (tid, start time) of threads that asked not to be sampled.
        pub(super) excluded: Vec<(u32, u64)>,
    }

    impl Registry {
        /// The slot of thread (tid, start), if it has one that is not being retired.
        fn find(&self, tid: u32, start: u64) -> Option<usize> {
            self.entries.iter().position(|e| e.as_ref().is_some_and(|e| !e.retiring && e.is(tid, start)))
        }

        fn is_excluded(&self, tid: u32, start: u64) -> bool {
            self.excluded.iter().any(|&(t, s)| t == tid && (s == 0 || start == 0 || s == start))
        }
    }

    /// Everything the handler can reach, behind [`signal::SHARED`].
    #[derive(Debug)]
    pub(super) struct Shared {
        pub(super) core: Core,
        /// perf fd -> slot index + 1 (0: none). Written in normal context before the fd is enabled.
        fd_slots: Box<[AtomicU32]>,
        /// The recorder wakeup: a futex word the handler bumps (no descriptor: the host may close
        /// or reuse any number, see `fds.rs`). Std's atomic: the kernel reads it.
        wake: std::sync::atomic::AtomicU32,
        /// Frames kept per sample: innermost `inner`, outermost `outer` (each <= 2048, not both 0).
        pub(super) depth: DepthPolicy,
        /// Per-slot walk scratch, `depth.inner + depth.outer` words per slot: the innermost frames
        /// in order, then the ring of the last `outer` frames seen. Preallocated; only the slot's
        /// owner (its handler; SIGPROF is blocked while it runs) touches its part.
        scratch: Box<[AtomicU64]>,
        /// This process's pid and the main thread's start stack (`unwind::main_thread_entry`),
        /// for the handler's "reached the outermost frame" rule.
        pub(super) pid: u32,
        pub(super) main_entry: usize,
        pub(super) page_size: usize,
        /// Stale perf signals dropped (see `SamplerStats::stale`).
        stale: AtomicU64,
        period: Duration,
        /// Sources start with a random first period (`timer.rs`, "The first period is random");
        /// false only if the kernel refuses to change a running perf event's period.
        random_first_period: bool,
        mode: SamplingMode,
        /// CPU sources are armed (`SamplerConfig::cpu`).
        cpu: bool,
        /// The wall-clock sampler, if on.
        pub(super) wall: Option<wall::WallShared>,
        generation: u64,
        /// Slot bookkeeping for registration and discovery (normal context; never the handler).
        pub(super) registry: crate::fork::ForkSafeMutex<Registry>,
        /// How the handler walks stacks, and the DWARF tables it reads for `Auto` and `Dwarf`
        /// (published before the handler is installed, refreshed by thread discovery).
        pub(super) unwinder: crate::unwind::Unwinder,
        pub(super) cfi: crate::unwind::Published,
        /// New threads register themselves at their start ([`register_thread_start`], called by
        /// `thread_hooks`); off unless the owner asked for it.
        register_new_threads: AtomicBool,
        /// Refusals (see `SamplerStats::refused`), and the tids refused not yet collected.
        refused: AtomicU64,
        refused_threads: crate::fork::ForkSafeMutex<Vec<u32>>,
        /// Names of registered threads that exited with samples, for the drains to name their
        /// last samples (the thread and its /proc entry are gone by then).
        exited_names: crate::fork::ForkSafeMutex<Vec<(u32, String)>>,
        /// CPU times of registered threads as they exited, for `jdk.ThreadCPULoad` (their
        /// /proc entries are gone by the next periodic reading).
        exited_cpu: crate::fork::ForkSafeMutex<Vec<ExitedThreadCpu>>,
    }

    /// A registered thread's CPU times as it exited (`getrusage(RUSAGE_THREAD)`).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ExitedThreadCpu {
        /// The thread.
        pub tid: u32,
        /// Its `comm`.
        pub name: String,
        /// Its user CPU time, from its start.
        pub user: Duration,
        /// Its system CPU time, from its start.
        pub system: Duration,
    }

    /// `fd_slots` bit: the event still runs its random first period; its handler sets the whole
    /// period at its first signal.
    const FIRST_PERIOD: u32 = 1 << 31;

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

        /// The slot of perf event `fd`, and whether the event is still in its random first period
        /// (then the handler calls [`Shared::end_first_period`]).
        ///
        /// # Signal safety
        /// One bounds-checked atomic load.
        #[inline]
        pub(super) fn slot_for_fd(&self, fd: libc::c_int) -> Option<(usize, bool)> {
            let e = self.fd_slots.get(usize::try_from(fd).ok()?)?;
            // Acquire: pairs with the Release store in `arm` made before the event was enabled.
            let word = e.load(Ordering::Acquire);
            let v = word & !FIRST_PERIOD;
            (v != 0).then(|| (v as usize - 1, word & FIRST_PERIOD != 0))
        }

        /// The handler served a wall request of slot `index` (see `wall.rs`).
        ///
        /// # Signal safety
        /// One bounds-checked atomic RMW.
        #[inline]
        pub(super) fn note_wall_served(&self, index: usize) {
            if let Some(w) = self.wall.as_ref() {
                w.note_served(index);
            }
        }

        /// Ends the random first period of perf event `fd` at its first signal (see `timer.rs`):
        /// from now on it overflows every whole period. A no-op after the first time.
        ///
        /// # Signal safety
        /// One atomic RMW and, once per event, one `ioctl`.
        #[inline]
        pub(super) fn end_first_period(&self, fd: libc::c_int) {
            let Some(e) = usize::try_from(fd).ok().and_then(|i| self.fd_slots.get(i)) else { return };
            // Relaxed: only this thread's handler clears the bit of its own event (SIGPROF is
            // blocked while it runs); `disarm` zeroes the word under the registry lock, and a
            // cleared bit then only skips a harmless ioctl on the placeholder.
            if e.fetch_and(!FIRST_PERIOD, Ordering::Relaxed) & FIRST_PERIOD != 0 {
                timer::set_period(fd, self.period.as_nanos().max(1) as u64);
            }
        }

        /// Counts a stale perf signal.
        ///
        /// # Signal safety
        /// One atomic RMW.
        #[inline]
        pub(super) fn count_stale(&self) {
            // Relaxed: statistics only.
            self.stale.fetch_add(1, Ordering::Relaxed);
        }

        /// Posts the recorder wakeup: bumps the futex word and wakes its waiter.
        ///
        /// # Signal safety
        /// One atomic RMW and the raw `futex` syscall on our own memory: no descriptor, so nothing
        /// the host closed or reused can be written to.
        #[inline]
        pub(super) fn post_wake(&self) {
            // Release: pairs with the Acquire load in `wait_pending`; what the waker published
            // (the pending flag) is seen by a waiter that sees the new value.
            self.wake.fetch_add(1, std::sync::atomic::Ordering::Release);
            // SAFETY: FUTEX_WAKE on a live u32 of ours (Shared outlives every handler, stop's
            // grace period); no other pointer argument is read.
            unsafe {
                libc::syscall(libc::SYS_futex, self.wake.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1)
            };
        }

        /// Retires `slot` on its owner's thread (normal context) and posts the wakeup if asked
        /// (every retirement wakes the recorder when it must: `tests/sampler_lifecycle.rs`).
        fn retire_own(&self, slot: &ThreadSlot) {
            let retired = self.core.retire_own(slot);
            if retired.abandoned {
                // The handler that never returned still counted in the grace period.
                signal::release_abandoned_handler();
            }
            if retired.wake {
                self.post_wake();
            }
        }

        /// Arms thread `tid`'s sources: CPU sampling and the wall request event, as configured.
        fn arm(&self, tid: u32, slot: usize) -> io::Result<Source> {
            let cpu = if self.cpu { Some(self.arm_cpu(tid, slot)?) } else { None };
            if self.wall.is_none() {
                return cpu.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no sampling source configured"));
            }
            match self.arm_wall(tid, slot) {
                Ok(fd) => Ok(Source::Wall { cpu: cpu.map(Box::new), fd }),
                Err(e) => {
                    if let Some(c) = cpu {
                        self.disarm(c, tid);
                    }
                    Err(e)
                }
            }
        }

        /// Opens thread `tid`'s wall request event, maps its fd to `slot` and routes its signal.
        fn arm_wall(&self, tid: u32, slot: usize) -> io::Result<libc::c_int> {
            let fd = timer::perf_open_wall(tid)?;
            let Some(e) = self.fd_slots.get(fd as usize) else {
                timer::disarm(Source::Perf(fd), tid);
                return Err(io::Error::new(io::ErrorKind::OutOfMemory, "perf fd number above the fd table"));
            };
            // Release: the mapping is visible to a handler that receives this fd's signal
            // (Acquire load in `slot_for_fd`); the event is armed only later, by a request.
            e.store(slot as u32 + 1, Ordering::Release);
            if let Err(err) = timer::perf_route(fd, tid) {
                // Relaxed: the event never fired; it is disarmed below.
                e.store(0, Ordering::Relaxed);
                timer::disarm(Source::Perf(fd), tid);
                return Err(err);
            }
            Ok(fd)
        }

        fn arm_cpu(&self, tid: u32, slot: usize) -> io::Result<Source> {
            let first =
                if self.random_first_period { timer::random_first_period(tid, self.period) } else { self.period };
            if self.mode == SamplingMode::PerfEvent {
                if let Ok(fd) = timer::perf_open(tid, first) {
                    match self.fd_slots.get(fd as usize) {
                        Some(e) => {
                            let phase = if first == self.period { 0 } else { FIRST_PERIOD };
                            // Release: the mapping is visible to a handler that receives this
                            // fd's signal (Acquire load in `slot_for_fd`).
                            e.store((slot as u32 + 1) | phase, Ordering::Release);
                            if timer::perf_enable(fd, tid).is_ok() {
                                return Ok(Source::Perf(fd));
                            }
                            // Relaxed: the event never fired; it is disarmed below.
                            e.store(0, Ordering::Relaxed);
                            timer::disarm(Source::Perf(fd), tid);
                        }
                        None => timer::disarm(Source::Perf(fd), tid),
                    }
                }
                // Fall back to a CPU timer for this thread.
            }
            timer::timer_arm(tid, slot, first, self.period)
        }

        /// Disarms thread `tid`'s source. Called with the registry lock held, so the fd cannot
        /// be armed again for another slot between the two steps.
        fn disarm(&self, source: Source, tid: u32) {
            self.unmap_fds(&source);
            timer::disarm(source, tid);
        }

        fn unmap_fds(&self, source: &Source) {
            let fd = match source {
                Source::Timer(_) => return,
                Source::Perf(fd) => *fd,
                Source::Wall { cpu, fd } => {
                    if let Some(cpu) = cpu {
                        self.unmap_fds(cpu);
                    }
                    *fd
                }
            };
            if let Some(e) = self.fd_slots.get(fd as usize) {
                // Relaxed: from now on a signal carrying this fd is stale (dropped, counted);
                // the fd number stays reserved until no such signal can be pending
                // (`timer::disarm`).
                e.store(0, Ordering::Relaxed);
            }
        }

        /// Re-arms every thread whose perf event's number no longer names it (the program closed
        /// or replaced it, `fds.rs`): the old number is forgotten, never closed, and a new event
        /// is opened. Normal context; takes the registry lock.
        fn rearm_taken(&self) {
            let mut reg = self.registry.lock();
            for (slot, entry) in reg.entries.iter_mut().enumerate() {
                let Some(e) = entry.as_mut().filter(|e| !e.retiring) else { continue };
                if e.source.as_ref().is_none_or(timer::source_intact) {
                    continue;
                }
                if let Some(old) = e.source.take() {
                    self.disarm(old, e.tid);
                }
                e.source = self.arm(e.tid, slot).ok();
            }
        }

        /// [`Shared::disarm`] on the thread `tid` itself (`timer::disarm_own`: no /proc read).
        fn disarm_own(&self, source: Source, tid: u32) {
            self.unmap_fds(&source);
            timer::disarm_own(source, tid);
        }
    }

    /// Lifecycle lock: serializes start/stop with exit guards of registered threads. The value
    /// is the generation counter of the latest sampler; bit 63 marks the atfork hook as registered.
    static LIFECYCLE: crate::fork::ForkSafeMutex<u64> = crate::fork::ForkSafeMutex::new(0);
    const ATFORK_REGISTERED: u64 = 1 << 63;

    /// `pthread_atfork` child hook (docs/sampler-protocol.md §6, fork): the child inherits the handler and
    /// memory but no timers and no other threads. Leave it "not recording" with no lock held:
    /// forget the parent's sampler and force-release locks a vanished parent thread may hold.
    /// The parent's `Shared` is leaked in the child (a copy of the parent's memory).
    extern "C" fn atfork_child() {
        let shared = signal::forget_in_child();
        timer::forget_locks_in_child();
        if LIFECYCLE.is_locked() {
            // SAFETY: the holder was a parent thread that does not exist in the child.
            unsafe { LIFECYCLE.release_after_fork(true) };
        }
        // SAFETY: the parent's `Shared` is still mapped in the child (never freed there).
        if let Some(shared) = unsafe { shared.as_ref() } {
            if shared.registry.is_locked() {
                // SAFETY: as above.
                unsafe { shared.registry.release_after_fork(true) };
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
            if self.generation == 0 {
                // Disarmed (replaced or unregistered): takes no lock, so it may be dropped
                // while LIFECYCLE is held.
                return;
            }
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

    pub(super) fn gettid() -> u32 {
        // SAFETY: no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }

    fn getpid() -> u32 {
        // SAFETY: no preconditions.
        unsafe { libc::getpid() as u32 }
    }

    /// Fields of /proc/self/task/TID/stat that identify a thread.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) struct TaskStat {
        /// Field 3 (R, S, D, Z, X, ...).
        pub(super) state: u8,
        /// Field 22, in clock ticks since boot.
        start_time: u64,
    }

    pub(super) fn task_stat(tid: u32, buf: &mut String) -> io::Result<TaskStat> {
        crate::fds::read_to_string(&format!("/proc/self/task/{tid}/stat"), buf)?;
        parse_task_stat(buf).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable stat"))
    }

    fn parse_task_stat(stat: &str) -> Option<TaskStat> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = *fields.next()?.as_bytes().first()?;
        // Field 3 was the first after the comm; field 22 is the 19th after it.
        let start_time = fields.nth(18)?.parse().ok()?;
        Some(TaskStat { state, start_time })
    }

    /// Start time (field 22 of /proc/self/task/TID/stat), 0 if unreadable.
    pub(super) fn start_time(tid: u32) -> u64 {
        task_stat(tid, &mut String::new()).map_or(0, |s| s.start_time)
    }

    /// What is known about whether thread (tid, start) still runs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Fate {
        Alive,
        Dead,
        Unknown,
    }

    /// Proves a thread dead, or not (docs/sampler-protocol.md §6): only the kernel's word counts.
    /// `tgkill(pid, tid, 0)` failing with ESRCH (no task with that tid in this process), or its
    /// tid naming a task with another start time (tid reuse) or a zombie, is death. Anything that
    /// cannot be read is `Unknown`, never death.
    fn fate(tid: u32, start: u64, buf: &mut String) -> Fate {
        let exists = || {
            // SAFETY: signal 0 only checks that the target exists and may be signalled.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, getpid() as libc::pid_t, tid as libc::pid_t, 0) };
            if rc == 0 {
                Some(true)
            } else if io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
                Some(false)
            } else {
                None
            }
        };
        match exists() {
            Some(false) => return Fate::Dead,
            None => return Fate::Unknown,
            Some(true) => {}
        }
        match task_stat(tid, buf) {
            Ok(st) if start != 0 && st.start_time != start => Fate::Dead,
            Ok(st) if st.state == b'Z' || st.state == b'X' => Fate::Dead,
            Ok(_) => Fate::Alive,
            // /proc says no such task: believe it only if the kernel now agrees.
            Err(e) if e.kind() == io::ErrorKind::NotFound && exists() == Some(false) => Fate::Dead,
            Err(_) => Fate::Unknown,
        }
    }

    /// The /proc/self/task listing with start times, read outside every lock.
    #[derive(Debug, Default)]
    struct TaskListing {
        /// (tid, start time if its stat could be read).
        threads: Vec<(u32, Option<u64>)>,
        /// (tid, `comm`) of the threads whose stat was read, from that same read.
        names: Vec<(u32, String)>,
        complete: bool,
    }

    fn list_tasks() -> TaskListing {
        let mut out = TaskListing::default();
        // Not std's read_dir: its closedir panics on a descriptor the host closed (`fds.rs`).
        let Ok((tids, complete)) = crate::fds::numeric_entries("/proc/self/task") else {
            return out;
        };
        let mut buf = String::new();
        out.complete = complete;
        for tid in tids {
            let stat = task_stat(tid, &mut buf).ok();
            if stat.is_some() {
                out.names.extend(crate::thread::stat_comm(&buf).map(|n| (tid, n.to_owned())));
            }
            out.threads.push((tid, stat.map(|s| s.start_time)));
        }
        out
    }

    /// Threads of `listed` (tid, start time in clock ticks since boot) that started less than
    /// 200 ms ago.
    fn young_threads(listed: &[(u32, Option<u64>)]) -> HashSet<u32> {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        // SAFETY: sysconf has no preconditions.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
        let now = ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000;
        let window = (hz / 5).max(1);
        listed.iter().filter(|(_, s)| s.is_none_or(|s| s + window > now)).map(|&(t, _)| t).collect()
    }

    /// Stack bounds of the calling thread (shared with the event-stack walk, which caches them per
    /// thread). The main thread's stack may still grow: only the part above its current stack
    /// pointer counts as verified (the handler checks the rest when it gets there).
    fn current_stack_bounds() -> StackBounds {
        let (lo, hi) = crate::unwind::current_stack_bounds();
        if hi == 0 {
            return StackBounds::default();
        }
        let verified_lo = if gettid() == getpid() { crate::unwind::frame_pointer().clamp(lo, hi) } else { lo };
        StackBounds { lo, verified_lo, hi }
    }

    /// Unregisters thread (tid, start time): disarm, then retire its slot (buffers to the full
    /// queue). Called on the thread itself. Other threads' quarantined perf fd numbers are left
    /// to the next discovery (a /proc read each: not on every thread's exit path).
    pub(super) fn unregister(shared: &Shared, tid: u32, start: u64) {
        {
            let mut reg = shared.registry.lock();
            if let Some(index) = reg.find(tid, start) {
                if let Some(entry) = reg.entries.get_mut(index).and_then(Option::take) {
                    if let Some(source) = entry.source {
                        shared.disarm_own(source, tid);
                    }
                    if let Some(slot) = shared.core.slot(index) {
                        if slot.state() == SLOT_LIVE {
                            // Before the retirement hands the buffers over: a drain that sees
                            // them has the name already.
                            shared.note_exit(tid, shared.core.slot_stats(slot).taken > 0);
                            shared.retire_own(slot);
                        }
                    }
                }
            }
        }
    }

    /// The calling thread's kernel name (`comm`, what /proc would have said while it lived).
    fn own_comm() -> Option<String> {
        let mut buf = [0u8; 17];
        // SAFETY: PR_GET_NAME writes at most 16 bytes (NUL included) into `buf`.
        if unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) } != 0 {
            return None;
        }
        let len = buf.iter().position(|&b| b == 0).unwrap_or(16);
        Some(String::from_utf8_lossy(buf.get(..len)?).into_owned())
    }

    /// Exited threads whose names wait for a drain; beyond this (no drain for a long time) the
    /// oldest are forgotten and those samples fall back to `thread-<tid>`.
    const MAX_EXIT_NAMES: usize = 1 << 14;

    /// Tids refused a slot kept for per-thread reports; beyond this they are only counted.
    const MAX_REFUSED_LISTED: usize = 1 << 14;

    /// Why a registration did not happen.
    enum RegisterError {
        NoSlot,
        Io(io::Error),
    }

    impl Shared {
        /// Called on an exiting thread (normal context): its name (for the drains, if it has
        /// samples) and its CPU times (for `jdk.ThreadCPULoad`), two system calls.
        fn note_exit(&self, tid: u32, with_samples: bool) {
            fn push<T>(list: &mut Vec<T>, item: T) {
                if list.len() >= MAX_EXIT_NAMES {
                    list.remove(0);
                }
                list.push(item);
            }
            let name = own_comm().unwrap_or_default();
            if with_samples && !name.is_empty() {
                push(&mut self.exited_names.lock(), (tid, name.clone()));
            }
            // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: a valid out pointer; RUSAGE_THREAD reads the calling thread's times.
            if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } == 0 {
                let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
                let cpu = ExitedThreadCpu { tid, name, user: time(usage.ru_utime), system: time(usage.ru_stime) };
                push(&mut self.exited_cpu.lock(), cpu);
            }
        }

        fn note_refused(&self, tid: u32) {
            // Relaxed: a statistic.
            self.refused.fetch_add(1, Ordering::Relaxed);
            let mut list = self.refused_threads.lock();
            if list.len() < MAX_REFUSED_LISTED {
                list.push(tid);
            }
        }

        /// Whether some slot waits for an L holder to reap it (retired, not yet FREE).
        fn reaping_pending(&self) -> bool {
            self.core.slots().iter().any(|s| s.state() == SLOT_EXITED)
        }

        /// Registers the calling thread (see [`Sampler::register_current_thread`]). Returns the
        /// exit guard it replaced, to be dropped by the caller (after releasing LIFECYCLE).
        ///
        /// `new_thread`: called first thing on a thread that just started (the thread-start
        /// hook). Such a thread is identified by its tid alone (start time 0) unless the registry
        /// already holds an entry with its tid (discovery found it first, or a dead thread's
        /// entry awaits retirement after tid reuse): no /proc read on the creation path. The tid
        /// suffices because the thread's exit guard removes the entry before the tid can be
        /// reused; a thread leaving without thread-local destructors (a raw `exit` system call)
        /// is retired by discovery once `tgkill` says it is gone, as before.
        fn register_current(&self, new_thread: bool) -> Result<Option<ExitGuard>, RegisterError> {
            let tid = gettid();
            let bounds = current_stack_bounds();
            let start = if new_thread { 0 } else { start_time(tid) };
            {
                let mut reg = self.registry.lock();
                if new_thread
                    && (reg.entries.iter().flatten().any(|e| e.tid == tid) || reg.excluded.iter().any(|e| e.0 == tid))
                {
                    drop(reg);
                    return self.register_current(false);
                }
                if reg.is_excluded(tid, start) {
                    return Ok(None);
                }
                if let Some(index) = reg.find(tid, start) {
                    let Some(entry) = reg.entries.get_mut(index).and_then(Option::as_mut) else {
                        return Ok(None);
                    };
                    if entry.registered {
                        return Ok(None);
                    }
                    // Discovered before: now with exact bounds and an exit guard.
                    entry.registered = true;
                    if let (Some(slot), true) = (self.core.slot(index), bounds.hi != 0) {
                        slot.set_stack_bounds(bounds.lo, bounds.verified_lo, bounds.hi);
                    }
                } else {
                    // An entry with our tid but another start time belongs to a dead thread whose
                    // tid we reuse (proof enough): retire it now rather than at the next discovery.
                    let stale: Vec<usize> = (0..reg.entries.len())
                        .filter(|&i| {
                            reg.entries.get(i).and_then(Option::as_ref).is_some_and(|e| {
                                e.tid == tid && e.start_time != 0 && start != 0 && e.start_time != start
                            })
                        })
                        .collect();
                    for i in stale {
                        retire_dead(self, &mut reg, i);
                    }
                    let slot = self.core.claim_slot(tid, bounds).ok_or(RegisterError::NoSlot)?;
                    slot.set_span_cell(crate::span_context::cell_for(tid));
                    let index = slot.index() as usize;
                    // Every spare now, before the timer can fire: the first samples (deep ones
                    // need several buffers) do not wait for a refill.
                    self.core.fill_spares(slot);
                    match self.arm(tid, index) {
                        Ok(source) => {
                            if let Some(e) = reg.entries.get_mut(index) {
                                *e = Some(Entry {
                                    tid,
                                    start_time: start,
                                    source: Some(source),
                                    registered: true,
                                    retiring: false,
                                });
                            }
                        }
                        Err(err) => {
                            self.retire_own(slot);
                            return Err(RegisterError::Io(err));
                        }
                    }
                }
            }
            // `try_with`: fails only during thread teardown, when there is nothing to guard. A
            // previous guard is disarmed (so that dropping it cannot unregister us) and handed
            // back: its drop must not run here, under LIFECYCLE in `register_thread_start`.
            let generation = self.generation;
            Ok(EXIT_GUARD
                .try_with(|g| {
                    g.borrow_mut().replace(ExitGuard { generation, start_time: start }).map(|mut old| {
                        old.generation = 0;
                        old
                    })
                })
                .ok()
                .flatten())
        }
    }

    /// What [`register_thread_start`] did.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ThreadStart {
        /// No sampler runs, or its owner did not ask for new threads to register at their start.
        NotSampling,
        /// The thread is sampled (or excluded, or was already registered).
        Registered,
        /// Every slot is taken (by live threads, or by exited ones not reaped yet): counted and
        /// reported as this thread's refusal
        /// (`SamplerStats::refused`, [`Sampler::take_refused`]); discovery may sample it later.
        Refused,
        /// The sampling source could not be armed (discovery retries later).
        Failed,
    }

    /// The thread-start hook's half in the sampler: registers the calling thread with the running
    /// sampler if its owner enabled [`Sampler::register_new_threads`]. Normal context; called
    /// first thing on a new thread (`thread_hooks`), so its first instruction of user code is
    /// sampled. When every slot is taken it does not wait (a thread's start is the program's
    /// time, and a wait could be where the thread is cancelled): the thread is refused (counted;
    /// discovery samples it once a slot is free), and if some slots belong to exited threads the
    /// recorder has not reaped yet, the recorder is woken to reap them for the next thread.
    pub fn register_thread_start() -> ThreadStart {
        let life = LIFECYCLE.lock();
        // Relaxed: under LIFECYCLE, which `start`/`stop` hold while publishing/unpublishing.
        let shared = signal::SHARED.load(Ordering::Relaxed);
        // SAFETY: under LIFECYCLE the published `Shared` cannot be freed.
        let Some(shared) = (unsafe { shared.as_ref() }) else {
            return ThreadStart::NotSampling;
        };
        // Relaxed: set before the hook is installed, under no ordering need (a thread that
        // misses it is discovered).
        if !shared.register_new_threads.load(Ordering::Relaxed) {
            return ThreadStart::NotSampling;
        }
        match shared.register_current(true) {
            Ok(old) => {
                drop(life);
                drop(old);
                ThreadStart::Registered
            }
            Err(RegisterError::Io(_)) => ThreadStart::Failed,
            Err(RegisterError::NoSlot) => {
                if shared.reaping_pending() {
                    shared.post_wake();
                }
                shared.note_refused(gettid());
                ThreadStart::Refused
            }
        }
    }

    /// Retires entry `index` on behalf of its thread, which the caller proved dead (registry lock
    /// held). Returns false if a handler is still inside the slot: the entry stays, marked
    /// `retiring`, for the next discovery.
    fn retire_dead(shared: &Shared, reg: &mut Registry, index: usize) -> bool {
        let Some(entry) = reg.entries.get_mut(index).and_then(Option::as_mut) else {
            return true;
        };
        if let Some(source) = entry.source.take() {
            shared.disarm(source, entry.tid);
        }
        entry.retiring = true;
        let done = match shared.core.slot(index) {
            Some(slot) if slot.state() == SLOT_LIVE => match shared.core.retire_on_behalf(slot) {
                Some(wake) => {
                    if wake {
                        shared.post_wake();
                    }
                    true
                }
                None => false,
            },
            _ => true,
        };
        if done {
            if let Some(e) = reg.entries.get_mut(index) {
                *e = None;
            }
        }
        done
    }

    /// The `/proc/self/maps` mappings, sorted: `(lo, hi, is the main thread's [stack])`.
    fn read_maps() -> Vec<(usize, usize, bool)> {
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return Vec::new();
        };
        let mut out: Vec<(usize, usize, bool)> = maps
            .lines()
            .filter_map(|line| {
                let range = line.split_whitespace().next()?;
                let (a, b) = range.split_once('-')?;
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                    line.ends_with("[stack]"),
                ))
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Bounds for a thread whose stack pointer is `sp`, from the mapping that contains it. For the
    /// main thread's growing `[stack]`, `lo` is as low as it may grow: RLIMIT_STACK below its top,
    /// and never into the mapping below (`tests/main_thread_stack.rs`).
    fn bounds_from_maps(maps: &[(usize, usize, bool)], sp: usize) -> Option<StackBounds> {
        let i = maps.partition_point(|&(lo, _, _)| lo <= sp).checked_sub(1)?;
        let &(lo, hi, growing) = maps.get(i)?;
        if sp >= hi {
            return None;
        }
        if !growing {
            return Some(StackBounds { lo, verified_lo: lo, hi });
        }
        let below = i.checked_sub(1).and_then(|j| maps.get(j)).map_or(0, |m| m.1);
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: valid out pointer.
        unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) };
        let limit = if rl.rlim_cur == libc::RLIM_INFINITY { usize::MAX } else { rl.rlim_cur as usize };
        Some(StackBounds { lo: hi.saturating_sub(limit).max(below).min(lo), verified_lo: lo, hi })
    }

    /// The CPU sampler. `Sync`: share it by reference or `Arc` between the recorder thread, the
    /// flusher and application threads that register themselves.
    #[derive(Debug)]
    pub struct Sampler {
        shared: *mut Shared,
    }

    // SAFETY: `Shared` is made of atomics, immutable fields and Mutexes; the raw pointer is owned
    // by this handle and freed only by `stop`/`drop`, which take it by value.
    unsafe impl Send for Sampler {}
    // SAFETY: as above; every `&self` method synchronizes through atomics or the locks.
    unsafe impl Sync for Sampler {}

    /// New threads claimed per registry-lock hold during discovery (their sources are armed outside
    /// the lock): bounds how long registering and exiting threads wait for discovery.
    const ARM_BATCH: usize = 64;

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

        /// Like [`Sampler::start`], keeping the frames `depth` selects (README, "Settings and defaults"):
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
            let wall_period = config.wall.map(|p| p.max(Duration::from_millis(1)));
            if wall_period.is_some() && !timer::perf_available(period).0 {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "wall-clock sampling needs perf events (perf_event_open of a user-mode task-clock event \
                     on the process's own threads: perf_event_paranoid <= 2, no seccomp filter denying it); \
                     it is refused rather than done by signalling threads, which could interrupt their \
                     poll, epoll_wait, select, nanosleep or read with EINTR",
                ));
            }
            if !config.cpu && wall_period.is_none() {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "neither CPU nor wall-clock sampling is on"));
            }
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
            let (perf, perf_period_settable) = match config.mode {
                SamplingMode::Auto | SamplingMode::PerfEvent => timer::perf_available(period),
                SamplingMode::CpuTimer => (false, false),
            };
            let mode = match config.mode {
                SamplingMode::Auto | SamplingMode::PerfEvent if perf => SamplingMode::PerfEvent,
                SamplingMode::Auto => SamplingMode::CpuTimer,
                SamplingMode::PerfEvent => {
                    return Err(io::Error::new(io::ErrorKind::Unsupported, "perf_event_open is not permitted here"));
                }
                SamplingMode::CpuTimer => SamplingMode::CpuTimer,
            };
            let mut nofile = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: valid out pointer.
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile) };
            let fd_len = (nofile.rlim_cur as usize).clamp(1024, signal::PERF_FD_TABLE);
            if *life & ATFORK_REGISTERED == 0 {
                // SAFETY: registers a hook that only does atomic stores and lock releases.
                if unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) } == 0 {
                    *life |= ATFORK_REGISTERED;
                }
            }
            timer::release_quarantine();
            let (core, locked) = Core::with_spares(nslots, nbuffers, capacity_words, per_thread - 1);
            *life += 1;
            // SAFETY: sysconf has no preconditions.
            let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
            let shared = Box::new(Shared {
                core,
                fd_slots: (0..fd_len).map(|_| AtomicU32::new(0)).collect(),
                wake: std::sync::atomic::AtomicU32::new(0),
                depth,
                scratch: (0..nslots * (depth.inner + depth.outer)).map(|_| AtomicU64::new(0)).collect(),
                pid: getpid(),
                main_entry: crate::unwind::main_thread_entry(),
                page_size,
                stale: AtomicU64::new(0),
                period,
                random_first_period: mode == SamplingMode::CpuTimer || perf_period_settable,
                mode,
                cpu: config.cpu,
                wall: wall_period.map(|p| wall::WallShared::new(p, nslots)),
                unwinder: config.unwinder,
                cfi: crate::unwind::Published::default(),
                generation: *life,
                registry: crate::fork::ForkSafeMutex::new(Registry {
                    entries: (0..nslots).map(|_| None).collect(),
                    excluded: Vec::new(),
                }),
                register_new_threads: AtomicBool::new(false),
                refused: AtomicU64::new(0),
                refused_threads: crate::fork::ForkSafeMutex::new(Vec::new()),
                exited_names: crate::fork::ForkSafeMutex::new(Vec::new()),
                exited_cpu: crate::fork::ForkSafeMutex::new(Vec::new()),
            });
            let mut locked = SamplerLocked { inner: locked };
            shared.core.bind(&mut locked.inner);
            if shared.unwinder != crate::unwind::Unwinder::FramePointer {
                // Before the first signal: samples of code without frame pointers are whole from
                // the start (compiling the loaded modules' tables takes milliseconds). In the
                // background mode, all but the recorder's own library's (see
                // `tables_in_background`), which the sampler thread builds.
                if config.tables_in_background {
                    let own = own_shared_library();
                    shared.cfi.refresh_files(&|path| own.as_deref() != Some(path));
                } else {
                    shared.cfi.refresh();
                }
            }
            signal::install()?;
            let wall_on = shared.wall.is_some();
            let shared = Box::into_raw(shared);
            signal::publish(shared);
            let sampler = Sampler { shared };
            if wall_on {
                if let Err(e) = wall::spawn(shared) {
                    drop(life);
                    drop(sampler);
                    return Err(e);
                }
            }
            Ok((sampler, locked))
        }

        /// The wall-clock period, if wall-clock sampling is on.
        pub fn wall_period(&self) -> Option<Duration> {
            self.shared().wall.as_ref().map(|w| w.period)
        }

        /// Whether CPU samples are taken.
        pub fn cpu_enabled(&self) -> bool {
            self.shared().cpu
        }

        /// The wall sampler's batches so far (each one wall sample standing for its periods),
        /// for an L holder to write after [`Sampler::drain`] (take them before the drain: every
        /// served request a batch follows is then in the drain).
        pub fn take_wall_batches(&self) -> Vec<WallBatch> {
            self.shared().wall.as_ref().map(|w| w.take_batches()).unwrap_or_default()
        }

        /// Wall periods lost since the last call (missed ticks, unserved requests, overflow).
        pub fn take_wall_lost(&self) -> u64 {
            self.shared().wall.as_ref().map_or(0, |w| w.take_lost())
        }

        /// The wall sampler's counters, if it runs.
        pub fn wall_stats(&self) -> Option<WallStats> {
            self.shared().wall.as_ref().map(|w| w.stats())
        }

        /// The effective mode.
        pub fn mode(&self) -> SamplingMode {
            self.shared().mode
        }

        /// The effective sampling period.
        pub fn period(&self) -> Duration {
            self.shared().period
        }

        /// How stacks are walked.
        pub fn unwinder(&self) -> crate::unwind::Unwinder {
            self.shared().unwinder
        }

        /// Starts sampling the calling thread now, with exact stack bounds (pthread_getattr_np)
        /// and all its spare buffers taken from the pool at once (no L needed). The thread is
        /// unregistered automatically when it exits (a thread-local guard; normal context). A
        /// thread that was already discovered keeps its slot and gets its exact bounds and the
        /// guard; a no-op for excluded or already registered threads.
        ///
        /// Fails if no slot is free (`max_threads`) or the sampling source cannot be armed.
        pub fn register_current_thread(&self) -> io::Result<()> {
            let shared = self.shared();
            match shared.register_current(false) {
                Ok(old) => {
                    drop(old);
                    Ok(())
                }
                Err(RegisterError::Io(e)) => Err(e),
                Err(RegisterError::NoSlot) => {
                    shared.note_refused(gettid());
                    Err(io::Error::new(io::ErrorKind::OutOfMemory, "no free sampler slot"))
                }
            }
        }

        /// Lets threads that start from now on register themselves first thing
        /// ([`register_thread_start`], called from `thread_hooks`' start routine wrapper).
        pub fn register_new_threads(&self, on: bool) {
            // Relaxed: see `register_thread_start`.
            self.shared().register_new_threads.store(on, Ordering::Relaxed);
        }

        /// Tids refused a slot since the last call (L not needed), for per-thread reports.
        pub fn take_refused(&self) -> Vec<u32> {
            std::mem::take(&mut *self.shared().refused_threads.lock())
        }

        /// Names (`comm`) of registered threads that exited with samples since the last call, for
        /// the drains to name those threads' last samples.
        pub fn take_exited_names(&self) -> Vec<(u32, String)> {
            std::mem::take(&mut *self.shared().exited_names.lock())
        }

        /// CPU times of the registered threads that exited since the last call (at most 16,384,
        /// the oldest dropped first), for `jdk.ThreadCPULoad`.
        pub fn take_exited_cpu(&self) -> Vec<ExitedThreadCpu> {
            std::mem::take(&mut *self.shared().exited_cpu.lock())
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

        /// Compiles and publishes the DWARF tables of the modules mapped now (those not compiled
        /// yet), if the unwinder uses them: for the recorder's own thread, when the sampler was
        /// started with [`SamplerConfig::tables_in_background`]. Normal context; reads files.
        pub fn build_unwind_tables(&self) {
            let shared = self.shared();
            if shared.unwinder != crate::unwind::Unwinder::FramePointer {
                shared.cfi.refresh();
            }
        }

        /// Never sample the calling thread (the recorder's own threads call this); unregisters it
        /// if it is sampled.
        pub fn exclude_current_thread(&self) {
            let tid = gettid();
            let start = start_time(tid);
            self.shared().registry.lock().excluded.push((tid, start));
            self.unregister_current_thread();
        }

        /// [`Sampler::discover_threads_unlocked`], for callers that hold L anyway (L is not
        /// needed; prefer the unlocked call, which keeps /proc reads out of the flush path).
        pub fn discover_threads(&self, _locked: &mut SamplerLocked) -> DiscoveryReport {
            self.discover_threads_unlocked()
        }

        /// Thread discovery, callable without L (and without any other lock of the caller's):
        /// lists /proc/self/task with start times outside every lock, arms sampling for new threads
        /// (a few at a time under the registry lock), retires the slots of threads proven dead
        /// (their buffers go to the full queue; the next `drain_full` processes them and reaps the
        /// slots), finds stack bounds of discovered threads in /proc/self/maps, refills spares and
        /// closes perf fds whose signals can no longer arrive. Never retires a live thread (see the
        /// module docs); a failed /proc read only means less is learned this time.
        pub fn discover_threads_unlocked(&self) -> DiscoveryReport {
            let shared = self.shared();
            if shared.unwinder != crate::unwind::Unwinder::FramePointer {
                // Libraries loaded since (dlopen): their tables, before their code is sampled much.
                shared.cfi.refresh();
            }
            let t0 = Instant::now();
            let mut report = DiscoveryReport::default();
            let mut held = Duration::ZERO;
            let mut held_max = Duration::ZERO;
            let mut hold = |since: Instant| {
                let d = since.elapsed();
                held += d;
                held_max = held_max.max(d);
            };
            // 1. Outside every lock: the listing.
            let mut listing = list_tasks();
            report.listed = listing.threads.len();
            report.listing_complete = listing.complete;
            report.names = std::mem::take(&mut listing.names);
            // Relaxed: see `register_thread_start`.
            if shared.register_new_threads.load(Ordering::Relaxed) {
                // A thread this young may not have its own name yet (Rust std names a thread
                // after the thread-start hook registered it): its `comm` is still its creator's,
                // and applied after the thread's own report it would read as a rename. Such a
                // thread names itself (commit, exit); older ones are read at the next pass.
                let young = young_threads(&listing.threads);
                report.names.retain(|(tid, _)| !young.contains(tid));
            }
            let listed_tids: HashMap<u32, Option<u64>> = listing.threads.iter().copied().collect();
            let is_listed = |tid: u32, start: u64| match listed_tids.get(&tid) {
                Some(&Some(s)) => start == 0 || s == start,
                _ => false,
            };
            // 2. Under the registry lock: who is missing from the listing (candidates),
            // retirements still waiting for a handler to leave, and who is known already.
            let (candidates, excluded_candidates, known) = {
                let since = Instant::now();
                let reg = shared.registry.lock();
                let known: HashSet<(u32, u64)> = reg
                    .entries
                    .iter()
                    .flatten()
                    .map(|e| (e.tid, e.start_time))
                    .chain(reg.excluded.iter().copied())
                    .collect();
                let c: Vec<(usize, u32, u64, bool)> = reg
                    .entries
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
                    .filter(|(_, e)| e.retiring || !is_listed(e.tid, e.start_time))
                    .map(|(i, e)| (i, e.tid, e.start_time, e.retiring))
                    .collect();
                let x: Vec<(u32, u64)> = reg.excluded.iter().copied().filter(|&(t, s)| !is_listed(t, s)).collect();
                drop(reg);
                hold(since);
                (c, x, known)
            };
            // 3. Outside the lock: the kernel's word on each candidate.
            let mut buf = String::new();
            let proven: Vec<(usize, u32, u64)> = candidates
                .iter()
                .filter_map(|&(i, tid, start, retiring)| {
                    if retiring {
                        return Some((i, tid, start));
                    }
                    match fate(tid, start, &mut buf) {
                        Fate::Dead => Some((i, tid, start)),
                        Fate::Alive | Fate::Unknown => {
                            report.kept_unproven += 1;
                            None
                        }
                    }
                })
                .collect();
            let dead_excluded: Vec<(u32, u64)> = excluded_candidates
                .into_iter()
                .filter(|&(tid, start)| fate(tid, start, &mut buf) == Fate::Dead)
                .collect();
            // 4. Under the registry lock: retire the proven dead (if their entry is still the one
            // we proved dead), forget dead excluded threads.
            {
                let since = Instant::now();
                let mut reg = shared.registry.lock();
                reg.excluded.retain(|t| !dead_excluded.contains(t));
                for (i, tid, start) in proven {
                    let same = reg
                        .entries
                        .get(i)
                        .and_then(Option::as_ref)
                        .is_some_and(|e| e.tid == tid && e.start_time == start);
                    if !same {
                        continue;
                    }
                    if retire_dead(shared, &mut reg, i) {
                        report.retired += 1;
                    } else {
                        report.retire_pending += 1;
                    }
                }
                drop(reg);
                hold(since);
            }
            // 5. New threads, a batch at a time: slots claimed (with their spares) under the
            // registry lock, each checked against the registry as it is then (the thread may have
            // registered or excluded itself meanwhile); sources armed outside it (a few syscalls
            // each); armed sources recorded under it again, unless the entry went away meanwhile
            // (the thread unregistered or excluded itself, or died and was retired).
            let new: Vec<(u32, u64)> = listing
                .threads
                .iter()
                .filter_map(|&(t, s)| s.map(|s| (t, s)))
                .filter(|&(t, s)| !known.contains(&(t, s)) && !known.contains(&(t, 0)))
                // The recorder's own threads, whoever started them (the preload's too).
                .filter(|&(t, _)| !crate::own_thread::is_own(t))
                .collect();
            for batch in new.chunks(ARM_BATCH) {
                let since = Instant::now();
                let mut reg = shared.registry.lock();
                let mut claimed = Vec::with_capacity(batch.len());
                let mut full = false;
                for &(tid, start) in batch {
                    if reg.find(tid, start).is_some() || reg.is_excluded(tid, start) {
                        continue;
                    }
                    let Some(slot) = shared.core.claim_slot(tid, StackBounds::default()) else {
                        full = true;
                        break;
                    };
                    slot.set_span_cell(crate::span_context::cell_for(tid));
                    let index = slot.index() as usize;
                    shared.core.fill_spares(slot);
                    if let Some(e) = reg.entries.get_mut(index) {
                        *e = Some(Entry { tid, start_time: start, source: None, registered: false, retiring: false });
                    }
                    claimed.push((index, tid, start));
                }
                drop(reg);
                hold(since);
                let armed: Vec<_> = claimed
                    .into_iter()
                    .map(|(index, tid, start)| (index, tid, start, shared.arm(tid, index)))
                    .collect();
                let since = Instant::now();
                let mut reg = shared.registry.lock();
                for (index, tid, start, source) in armed {
                    let entry = reg
                        .entries
                        .get_mut(index)
                        .and_then(Option::as_mut)
                        .filter(|e| e.tid == tid && e.start_time == start && e.source.is_none() && !e.retiring);
                    match (entry, source) {
                        (Some(e), Ok(source)) => {
                            e.source = Some(source);
                            report.armed += 1;
                        }
                        (None, Ok(source)) => shared.disarm(source, tid),
                        // The thread exited since the listing (its clock or task is gone): no
                        // handler ever ran for this slot.
                        (Some(_), Err(_)) => {
                            if let Some(e) = reg.entries.get_mut(index) {
                                *e = None;
                            }
                            if let Some(slot) = shared.core.slot(index) {
                                if let Some(true) = shared.core.retire_on_behalf(slot) {
                                    shared.post_wake();
                                }
                            }
                        }
                        (None, Err(_)) => {}
                    }
                }
                drop(reg);
                hold(since);
                if full {
                    break;
                }
            }
            // 6. Stack bounds of discovered threads (unknown, or a main stack that grew past what
            // the handler could verify), from one read of /proc/self/maps.
            let need: Vec<(usize, usize)> = shared
                .core
                .slots()
                .iter()
                .filter(|s| s.state() == SLOT_LIVE && s.last_sp() != 0)
                .filter(|s| {
                    let b = s.stack_bounds();
                    b.hi == 0 || (s.last_sp() < b.verified_lo && s.last_sp() >= b.lo)
                })
                .map(|s| (s.index() as usize, s.last_sp()))
                .collect();
            if !need.is_empty() {
                let maps = read_maps();
                for (index, sp) in need {
                    let (Some(b), Some(slot)) = (bounds_from_maps(&maps, sp), shared.core.slot(index)) else {
                        continue;
                    };
                    let old = slot.stack_bounds();
                    if old.hi == 0 {
                        slot.set_stack_bounds(b.lo, b.verified_lo, b.hi);
                    } else if b.hi == old.hi {
                        slot.lower_verified(b.verified_lo);
                    }
                }
            }
            // 6b. Threads whose perf event the program closed (or whose number it replaced) get a
            // new one: a program that closes every descriptor keeps its threads sampled.
            shared.rearm_taken();
            // 7. Spares for everyone (pool lock only), and perf fds whose last signal is in.
            shared.core.refill_spares();
            timer::release_quarantine();
            report.registry_held = held;
            report.registry_held_max = held_max;
            report.elapsed = t0.elapsed();
            report
        }

        /// Flusher pass (L held): the full queue (processed oldest first, recycled), reaping and
        /// spare refills, then the records in `[flushed_pos, pos)` of every active buffer
        /// (docs/sampler-protocol.md §3 steps 2-3, in the order that keeps each thread's records in sequence; see
        /// `Core::drain`). `f` sees whole samples only: fragments of oversized samples are
        /// reassembled first, incomplete ones counted lost.
        pub fn drain(&self, locked: &mut SamplerLocked, f: &mut dyn FnMut(&SampleRecord<'_>)) {
            self.shared().core.drain(&mut locked.inner, f);
        }

        /// Recorder pass (L held): the full queue only, then reaping and spare refills (docs/sampler-protocol.md §4).
        pub fn drain_full(&self, locked: &mut SamplerLocked, f: &mut dyn FnMut(&SampleRecord<'_>)) {
            self.shared().core.drain_full(&mut locked.inner, f);
        }

        /// Gives every sampled thread's empty spare entries buffers from the pool. Needs no L (the
        /// pool has its own lock), so the recorder thread can keep handlers supplied while
        /// another thread holds L for long.
        pub fn refill_spares(&self) {
            self.shared().core.refill_spares();
        }

        /// Sleeps until a handler signals a full buffer / missing spare / new thread, or until
        /// `timeout`; then refills spares (no L needed). Returns true if there is work for
        /// `drain_full`. Call without holding L.
        pub fn wait_pending(&self, timeout: Duration) -> bool {
            let shared = self.shared();
            // Acquire: pairs with the Release bump in `post_wake`: a wakeup posted after this load
            // changes the word, and the wait below returns at once.
            let seen = shared.wake.load(std::sync::atomic::Ordering::Acquire);
            if !shared.core.take_pending() {
                let ts = libc::timespec {
                    tv_sec: timeout.as_secs() as libc::time_t,
                    tv_nsec: timeout.subsec_nanos() as libc::c_long,
                };
                // SAFETY: FUTEX_WAIT on our live u32 with a valid relative timeout; it returns on
                // a wake, a timeout, a signal, or at once if the word is no longer `seen`.
                unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        shared.wake.as_ptr(),
                        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                        seen,
                        &ts as *const libc::timespec,
                    )
                };
                if !shared.core.take_pending() {
                    shared.core.refill_spares();
                    return false;
                }
            }
            shared.core.refill_spares();
            true
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
        /// still buffered to `f`, restores the application's SIGPROF handler (if ours is still the
        /// current one; or leaves a harmless one installed if there was none) and frees the pools.
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
        let (wall_taken, wall_written) = core.retired_wall_totals();
        let mut st = SamplerStats {
            taken: t,
            written: w,
            lost: l,
            wall_taken,
            wall_written,
            unattributed: core.unattributed(),
            // Relaxed: statistics.
            stale: shared.stale.load(Ordering::Relaxed),
            // Relaxed: statistics.
            wakeups: u64::from(shared.wake.load(std::sync::atomic::Ordering::Relaxed)),
            // Relaxed: statistics.
            refused: shared.refused.load(Ordering::Relaxed),
            wall: shared.wall.as_ref().map(|w| w.stats()),
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
            st.wall_taken += s.wall_taken;
            st.wall_written += s.wall_written;
            st.slots_in_use += 1;
            st.threads.push(ThreadStats { tid: s.tid, taken: s.taken, written: s.written, lost: s.lost });
        }
        st
    }

    type Final<'a> = (&'a mut LockedState, &'a mut dyn FnMut(&SampleRecord<'_>));

    /// # Safety
    /// `shared` must come from `Box::into_raw` in `start` and not have been freed.
    unsafe fn teardown(shared: *mut Shared, fin: Option<Final<'_>>) -> StopReport {
        // SAFETY: caller's contract.
        let sh = unsafe { &*shared };
        // Before LIFECYCLE: the wall thread's start hook or exit guard may wait for it.
        if let Some(w) = sh.wall.as_ref() {
            w.stop_thread();
        }
        let _life = LIFECYCLE.lock();
        {
            let mut reg = sh.registry.lock();
            for entry in reg.entries.iter_mut().flatten() {
                if let Some(source) = entry.source.take() {
                    sh.disarm(source, entry.tid);
                }
            }
        }
        let freeable = signal::unpublish_and_wait();
        // Perf fds whose thread has no SIGPROF pending are closed now; the others stay reserved
        // (recognized as ours by the handler, which stays installed or chains) until a later
        // start, stop or discovery sees their signal delivered.
        timer::release_quarantine();
        let mut report = StopReport::default();
        if let Some(w) = sh.wall.as_ref() {
            w.settle_outstanding();
            // Before the final drain: the records they follow are in it.
            report.wall_batches = w.take_batches();
        }
        if let Some((locked, f)) = fin {
            sh.core.drain_all_final(locked, f);
            report.lost = sh.core.take_lost(locked);
            sh.core.unbind(locked);
        }
        report.stats = stats_of(sh);
        if let Some(w) = sh.wall.as_ref() {
            report.wall_lost = w.take_lost();
            report.wall = Some(w.stats());
        }
        // A perf signal still pending on some thread would reach a restored application handler
        // directly: then ours stays installed; with no sampler it drops our stale signals and
        // chains every other SIGPROF to the application's handler.
        if timer::quarantine_is_empty() {
            signal::uninstall();
        }
        if freeable {
            // SAFETY: unpublished and no handler is running (grace period above); exit guards
            // check the generation under LIFECYCLE, which we hold.
            drop(unsafe { Box::from_raw(shared) });
        } else {
            // A handler never left: what it may still read stays allocated (and its eventfd
            // open) for the life of the process.
            report.handlers_abandoned = true;
        }
        report
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn task_stat_parses_state_and_field_22_after_comm_with_spaces() {
            let stat = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
            assert_eq!(parse_task_stat(stat), Some(TaskStat { state: b'S', start_time: 424242 }));
        }

        #[test]
        fn bounds_lookup_finds_the_mapping_and_lets_the_main_stack_grow() {
            let maps = vec![(0x1000, 0x2000, false), (0x10_0000, 0x20_0000, false), (0x7f_0000, 0x80_0000, true)];
            assert_eq!(
                bounds_from_maps(&maps, 0x1800),
                Some(StackBounds { lo: 0x1000, verified_lo: 0x1000, hi: 0x2000 })
            );
            assert_eq!(bounds_from_maps(&maps, 0x3000), None);
            assert_eq!(bounds_from_maps(&maps, 0x500), None);
            // The [stack] mapping may grow down to RLIMIT_STACK below its top, never into the
            // mapping below it.
            let b = bounds_from_maps(&maps, 0x7f_8000).unwrap();
            assert_eq!((b.verified_lo, b.hi), (0x7f_0000, 0x80_0000));
            assert!(b.lo >= 0x20_0000 && b.lo < 0x7f_0000, "{b:?}");
        }

        #[test]
        fn fate_never_takes_a_live_thread_for_dead() {
            let mut buf = String::new();
            let me = gettid();
            assert_eq!(fate(me, start_time(me), &mut buf), Fate::Alive);
            // Unknown start time: the kernel's word that it exists is enough.
            assert_eq!(fate(me, 0, &mut buf), Fate::Alive);
            // Same tid, another start time: the entry's thread is dead (tid reuse).
            assert_eq!(fate(me, start_time(me) + 1, &mut buf), Fate::Dead);
            let t = std::thread::spawn(gettid);
            let gone = t.join().unwrap();
            // A joined thread may linger for a moment before the kernel forgets it.
            let deadline = Instant::now() + Duration::from_secs(10);
            while fate(gone, 0, &mut buf) != Fate::Dead {
                assert!(Instant::now() < deadline, "a joined thread never became dead");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}
