//! The sampler's life: start (pools, handler, publication), the calls of its owner, stop and
//! teardown, and the fork child's hook.

use super::buffer::{Core, LockedState, SampleRecord};
use super::registration::{register_thread_start, RegisterError, EXIT_GUARD};
use super::shared::{stats_of, SamplerShared, LIFECYCLE};
use super::signal;
use super::stats::{DiscoveryReport, SamplerLocked, SamplerStats, StopReport};
use super::timer;
use super::wall::{self, WallBatch, WallStats};
use super::{SamplerConfig, SamplingMode};
use crate::stack::{DepthPolicy, MAX_DEPTH_PER_END};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::threads::exits::ExitedThreadCpu;
use crate::threads::proc::start_time;
use crate::threads::registry::SampledThreads;
use crate::threads::{getpid, gettid};
use std::io;
use std::time::Duration;

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

/// The loaded segments (start, length) of the shared library this code is in, from its program
/// headers in memory (no file is read); empty when it is the executable itself.
pub(crate) fn own_library_segments() -> Vec<(usize, usize)> {
    if own_shared_library().is_none() {
        return Vec::new();
    }
    // SAFETY: zeroed is a valid `Dl_info`; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = own_library_segments as *const () as *const libc::c_void;
    // SAFETY: `addr` is a function of this object; `info` is a valid out pointer.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fbase.is_null() {
        return Vec::new();
    }
    let base = info.dli_fbase as usize;
    // SAFETY: the loader maps a shared library's ELF header and program headers at its base (the
    // first PT_LOAD starts at file offset 0); this library is loaded while its code runs.
    let ehdr = unsafe { &*(base as *const libc::Elf64_Ehdr) };
    if ehdr.e_ident[..4] != *b"\x7fELF" || usize::from(ehdr.e_phentsize) != std::mem::size_of::<libc::Elf64_Phdr>() {
        return Vec::new();
    }
    // SAFETY: as above: `e_phnum` headers at `e_phoff`, inside the mapped first segment.
    let phdrs = unsafe {
        std::slice::from_raw_parts((base + ehdr.e_phoff as usize) as *const libc::Elf64_Phdr, usize::from(ehdr.e_phnum))
    };
    let load_bias = phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_LOAD)
        .map_or(base, |first| base.wrapping_sub(first.p_vaddr as usize & !0xfff));
    phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD && p.p_memsz > 0)
        .map(|p| (load_bias + p.p_vaddr as usize, p.p_memsz as usize))
        .collect()
}

const ATFORK_REGISTERED: u64 = 1 << 63;

/// `pthread_atfork` child hook (docs/sampler-protocol.md §6, fork): the child inherits the handler and
/// memory but no timers and no other threads. Leave it "not recording" with no lock held:
/// forget the parent's sampler and force-release locks a vanished parent thread may hold.
/// The parent's `SamplerShared` is leaked in the child (a copy of the parent's memory).
extern "C" fn atfork_child() {
    let shared = signal::forget_in_child();
    timer::forget_locks_in_child();
    if LIFECYCLE.is_locked() {
        // SAFETY: the holder was a parent thread that does not exist in the child.
        unsafe { LIFECYCLE.release_after_fork(true) };
    }
    // SAFETY: the parent's `SamplerShared` is still mapped in the child (never freed there).
    if let Some(shared) = unsafe { shared.as_ref() } {
        if shared.threads.registry.is_locked() {
            // SAFETY: as above.
            unsafe { shared.threads.registry.release_after_fork(true) };
        }
    }
}

/// The CPU sampler. `Sync`: share it by reference or `Arc` between the recorder thread, the
/// flusher and application threads that register themselves.
#[derive(Debug)]
pub struct Sampler {
    shared: *mut SamplerShared,
}

// SAFETY: `SamplerShared` is made of atomics, immutable fields and Mutexes; the raw pointer is owned
// by this handle and freed only by `stop`/`drop`, which take it by value.
unsafe impl Send for Sampler {}
// SAFETY: as above; every `&self` method synchronizes through atomics or the locks.
unsafe impl Sync for Sampler {}

impl Sampler {
    pub(super) fn shared(&self) -> &SamplerShared {
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
        crate::threads::registry::set_thread_start(register_thread_start);
        let (core, locked) = Core::with_spares(nslots, nbuffers, capacity_words, per_thread - 1);
        *life += 1;
        // SAFETY: sysconf has no preconditions.
        let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let shared = Box::new(SamplerShared {
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
            threads: SampledThreads::new(nslots),
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
                shared.threads.refusals.note(gettid());
                Err(io::Error::new(io::ErrorKind::OutOfMemory, "no free sampler slot"))
            }
        }
    }

    /// Lets threads that start from now on register themselves first thing
    /// ([`register_thread_start`], called from `thread_hooks`' start routine wrapper).
    pub fn register_new_threads(&self, on: bool) {
        self.shared().threads.set_register_new_threads(on);
    }

    /// Tids refused a slot since the last call (L not needed), for per-thread reports.
    pub fn take_refused(&self) -> Vec<u32> {
        self.shared().threads.refusals.take()
    }

    /// Names (`comm`) of registered threads that exited with samples since the last call, for
    /// the drains to name those threads' last samples.
    pub fn take_exited_names(&self) -> Vec<(u32, String)> {
        self.shared().threads.exits.take_names()
    }

    /// CPU times of the registered threads that exited since the last call (at most 16,384,
    /// the oldest dropped first), for `jdk.ThreadCPULoad`.
    pub fn take_exited_cpu(&self) -> Vec<ExitedThreadCpu> {
        self.shared().threads.exits.take_cpu()
    }

    /// Stops sampling the calling thread; its buffers go to the full queue (nothing is lost).
    pub fn unregister_current_thread(&self) {
        let _ = EXIT_GUARD.try_with(|g| {
            if let Some(guard) = g.borrow_mut().as_mut() {
                guard.generation = 0;
            }
        });
        let tid = gettid();
        self.shared().unregister(tid, start_time(tid));
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
        self.shared().threads.registry.lock().excluded.push((tid, start));
        self.unregister_current_thread();
    }

    /// [`Sampler::discover_threads_unlocked`], for callers that hold L anyway (L is not
    /// needed; prefer the unlocked call, which keeps /proc reads out of the flush path).
    pub fn discover_threads(&self, _locked: &mut SamplerLocked) -> DiscoveryReport {
        self.discover_threads_unlocked()
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

    /// Bytes of the sampler's buffers (resident) and of its published unwind tables.
    pub fn memory(&self) -> (usize, usize) {
        let shared = self.shared();
        (shared.core.resident_buffer_bytes(), shared.cfi.bytes())
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

type Final<'a> = (&'a mut LockedState, &'a mut dyn FnMut(&SampleRecord<'_>));

/// # Safety
/// `shared` must come from `Box::into_raw` in `start` and not have been freed.
unsafe fn teardown(shared: *mut SamplerShared, fin: Option<Final<'_>>) -> StopReport {
    // SAFETY: caller's contract.
    let sh = unsafe { &*shared };
    // Before LIFECYCLE: the wall thread's start hook or exit guard may wait for it.
    if let Some(w) = sh.wall.as_ref() {
        w.stop_thread();
    }
    let _life = LIFECYCLE.lock();
    {
        let mut reg = sh.threads.registry.lock();
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
