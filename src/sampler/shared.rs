//! What the signal handler can reach (`SamplerShared`, published in `signal::SHARED`), and the
//! arming and disarming of a thread's sampling sources.

use super::buffer::{Core, ThreadSlot, SLOT_FREE, SLOT_LIVE};
use super::signal;
use super::stats::{SamplerStats, ThreadStats};
use super::timer::{self, Source};
use super::wall;
use super::SamplingMode;
use crate::stack::DepthPolicy;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::threads::registry::SampledThreads;
use std::io;
use std::time::Duration;

/// Lifecycle lock: serializes start/stop with exit guards of registered threads. The value
/// is the generation counter of the latest sampler; bit 63 marks the atfork hook as registered.
pub(super) static LIFECYCLE: crate::fork::ForkSafeMutex<u64> = crate::fork::ForkSafeMutex::new(0);

/// Everything the handler can reach, behind [`signal::SHARED`].
#[derive(Debug)]
pub(super) struct SamplerShared {
    pub(super) core: Core,
    /// perf fd -> slot index + 1 (0: none). Written in normal context before the fd is enabled.
    pub(super) fd_slots: Box<[AtomicU32]>,
    /// The recorder wakeup: a futex word the handler bumps (no descriptor: the host may close
    /// or reuse any number, see `fds/mod.rs`). Std's atomic: the kernel reads it.
    pub(super) wake: std::sync::atomic::AtomicU32,
    /// Frames kept per sample: innermost `inner`, outermost `outer` (each <= 2048, not both 0).
    pub(super) depth: DepthPolicy,
    /// Per-slot walk scratch, `depth.inner + depth.outer` words per slot: the innermost frames
    /// in order, then the ring of the last `outer` frames seen. Preallocated; only the slot's
    /// owner (its handler; SIGPROF is blocked while it runs) touches its part.
    pub(super) scratch: Box<[AtomicU64]>,
    /// This process's pid and the main thread's start stack (`unwind::main_thread_entry`),
    /// for the handler's "reached the outermost frame" rule.
    pub(super) pid: u32,
    pub(super) main_entry: usize,
    pub(super) page_size: usize,
    /// Stale perf signals dropped (see `SamplerStats::stale`).
    pub(super) stale: AtomicU64,
    pub(super) period: Duration,
    /// Sources start with a random first period (`timer.rs`, "The first period is random");
    /// false only if the kernel refuses to change a running perf event's period.
    pub(super) random_first_period: bool,
    pub(super) mode: SamplingMode,
    /// CPU sources are armed (`SamplerConfig::cpu`).
    pub(super) cpu: bool,
    /// The wall-clock sampler, if on.
    pub(super) wall: Option<wall::WallShared>,
    pub(super) generation: u64,
    /// The sampled threads: registry, refusals, exits (normal context; never the handler).
    pub(super) threads: SampledThreads<Source>,
    /// How the handler walks stacks, and the DWARF tables it reads for `Auto` and `Dwarf`
    /// (published before the handler is installed, refreshed by thread discovery).
    pub(super) unwinder: crate::unwind::Unwinder,
    pub(super) cfi: crate::unwind::Published,
}

/// `fd_slots` bit: the event still runs its random first period; its handler sets the whole
/// period at its first signal.
const FIRST_PERIOD: u32 = 1 << 31;

impl SamplerShared {
    /// Unregisters thread (tid, start time): disarm, then retire its slot (buffers to the full
    /// queue). Called on the thread itself. Other threads' quarantined perf fd numbers are left
    /// to the next discovery (a /proc read each: not on every thread's exit path).
    pub(super) fn unregister(&self, tid: u32, start: u64) {
        {
            let mut reg = self.threads.registry.lock();
            if let Some(index) = reg.find(tid, start) {
                if let Some(entry) = reg.entries.get_mut(index).and_then(Option::take) {
                    if let Some(source) = entry.source {
                        self.disarm_own(source, tid);
                    }
                    if let Some(slot) = self.core.slot(index) {
                        if slot.state() == SLOT_LIVE {
                            // Before the retirement hands the buffers over: a drain that sees
                            // them has the name already.
                            self.threads.exits.note_exit(tid, self.core.slot_stats(slot).taken > 0);
                            self.retire_own(slot);
                        }
                    }
                }
            }
        }
    }

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
    /// (then the handler calls [`SamplerShared::end_first_period`]).
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
        // SAFETY: FUTEX_WAKE on a live u32 of ours (SamplerShared outlives every handler, stop's
        // grace period); no other pointer argument is read.
        unsafe { libc::syscall(libc::SYS_futex, self.wake.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
    }

    /// Retires `slot` on its owner's thread (normal context) and posts the wakeup if asked
    /// (every retirement wakes the recorder when it must: `tests/sampler_lifecycle.rs`).
    pub(super) fn retire_own(&self, slot: &ThreadSlot) {
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
    pub(super) fn arm(&self, tid: u32, slot: usize) -> io::Result<Source> {
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
        let first = if self.random_first_period { timer::random_first_period(tid, self.period) } else { self.period };
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
    pub(super) fn disarm(&self, source: Source, tid: u32) {
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
    /// or replaced it, `fds/mod.rs`): the old number is forgotten, never closed, and a new event
    /// is opened. Normal context; takes the registry lock.
    pub(super) fn rearm_taken(&self) {
        let mut reg = self.threads.registry.lock();
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

    /// [`SamplerShared::disarm`] on the thread `tid` itself (`timer::disarm_own`: no /proc read).
    pub(super) fn disarm_own(&self, source: Source, tid: u32) {
        self.unmap_fds(&source);
        timer::disarm_own(source, tid);
    }
}

pub(super) fn stats_of(shared: &SamplerShared) -> SamplerStats {
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
        refused: shared.threads.refusals.count(),
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
