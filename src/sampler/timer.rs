//! Sampling sources, armed and disarmed in normal context only (never from the handler):
//! per-thread `perf_event_open` task-clock events that deliver SIGPROF to their thread (F_SETSIG +
//! F_SETOWN_EX with the tid), or per-thread POSIX timers on the thread's CPU clock
//! (`timer_create` + SIGEV_THREAD_ID).
//!
//! # Stale signals (`tests/sampler_lifecycle.rs`)
//! A disarmed source must not have its late signals passed to the application's own SIGPROF
//! handler. `timer_delete` discards a timer's pending signal, and a timer signal names our tag in
//! `si_value` anyway. A perf event's signal carries only its fd number, and a SIGPROF the kernel
//! queued before the event was closed stays pending on its thread (for as long as the thread
//! blocks SIGPROF). So an fd number is marked ours ([`signal::PERF_FDS`]) before its event is
//! enabled, and on disarm the event is disabled and closed by `dup3`ing a placeholder over the
//! number: the close completes before `dup3` returns (no signal can be generated after it), and
//! the number stays reserved and marked. It is released (unmarked, then closed) once its thread
//! has no SIGPROF pending (`SigPnd` of /proc/self/task/TID/status) or is dead, checked at every
//! discovery, start and stop (a thread disarming its own event at exit skips the quarantine when
//! it can, see below). What remains: a signal the kernel has already
//! dequeued for a thread that has not yet run the handler's first instruction when the check
//! reads `SigPnd`; delivered after the release, it is passed to the application (it is an
//! ordinary SIGPROF with si_code POLL_IN). Without a placeholder (it could not be opened) the
//! number is released at once. A thread disarming its own event ([`disarm_own`], at its exit)
//! needs no /proc read: a signal pending when `dup3` returns is delivered on that return unless
//! SIGPROF is blocked, and `sigpending` tells the rest.
//!
//! # User time only: `exclude_kernel` is a correctness property
//! The task-clock event counts the thread's whole CPU time, but an overflow whose hrtimer
//! interrupt finds the thread in kernel mode is dropped (`perf_swevent_hrtimer` ->
//! `perf_exclude_event`), so every SIGPROF of ours is generated while the thread runs its own
//! code and is delivered on that interrupt's return to user mode. An overflow generated in kernel
//! mode would leave SIGPROF pending on a thread inside a system call: one that is about to sleep
//! (or sleeps interruptibly) would then return EINTR, and poll, epoll_wait, select, nanosleep
//! with a remaining time, sem_timedwait or a socket with a timeout return EINTR even under
//! SA_RESTART. A profiler must not make the application's system calls fail, so the sampler
//! sees user time only; `perf_event_paranoid = 2` (kernel profiling refused) asks the same. What
//! it cannot see (the thread's system time: its system calls, page faults, and the kernel's work
//! of delivering our own signal) is reported beside the samples, not sampled.
//!
//! # The first period is random
//! Ticks fall at `first`, `first + P`, `first + 2P`, ... of the thread's CPU time after arming.
//! With `first = P` a thread that runs `T` gets `floor(T / P)` samples: half a sample short per
//! thread on average, 5 % of a 10 ms thread's CPU time and a systematic bias against short
//! threads. With `first` uniform in (0, P] the expected count would be exactly `T / P`; it is
//! uniform in [`a`, P] with `a` = P/10 at most 100 µs (`FIRST_PERIOD_FLOOR`): a new thread's first
//! microseconds of CPU run the tail of its registration and, for a Rust std thread, std's code
//! before it names the thread, and a sample there would name the thread after its creator (the
//! name a chunk defines a thread with is the one it keeps; `tests/reliability_threads.rs` saw it
//! in 2 of 3 storms with `a` = 10 µs). Expected count `T / P - a / 2P`: 0.05 samples short per
//! thread at 1 kHz, against 0.5 with a whole first period (`examples/thread_start.rs`). A POSIX timer takes the first expiry as its own
//! argument; a perf event is opened with `sample_period = first` and its handler sets the period
//! to P at its first signal (`PERF_EVENT_IOC_PERIOD`, [`set_period`]): the only system call the
//! handler makes besides the recorder wakeup, once per thread.

use super::signal::{MARK_CPU, MARK_WALL, PERF_FDS, TIMER_TAG};
use crate::fds::{self, Identity};
use crate::sync::Ordering;
use libc::c_int;
use std::io;
use std::time::Duration;

/// Perf fds disabled and closed, their numbers held by the placeholder until their thread `u32`
/// has no SIGPROF pending. Normal context only.
static QUARANTINE: crate::fork::ForkSafeMutex<Vec<(c_int, u32)>> = crate::fork::ForkSafeMutex::new(Vec::new());
/// A memfd of ours (a file no one else has: its identity tells it from any file of the host's),
/// dup'ed over the numbers of closed perf events; reopened if the host closed it.
static PLACEHOLDER: crate::fork::ForkSafeMutex<Option<(c_int, Identity)>> = crate::fork::ForkSafeMutex::new(None);
/// The kernel's id of the perf event each fd number of ours was opened for
/// (`PERF_EVENT_IOC_ID`): a number the host closed or replaced answers another id or none, and is
/// then neither disabled nor closed by us (`fds/mod.rs`).
static PERF_IDS: crate::fork::ForkSafeMutex<std::collections::BTreeMap<c_int, u64>> =
    crate::fork::ForkSafeMutex::new(std::collections::BTreeMap::new());

const F_SETSIG: c_int = 10;
const F_SETOWN_EX: c_int = 15;
const F_OWNER_TID: c_int = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_REFRESH: libc::c_ulong = 0x2402;
/// `_IOR('$', 7, __u64 *)`.
const PERF_EVENT_IOC_ID: libc::c_ulong = 0x8008_2407;
/// User CPU time after which an armed wall request fires: the kernel's floor for hrtimer-driven
/// software events (`perf_swevent_init_hrtimer` raises smaller periods to 10 µs).
const WALL_TRIGGER: Duration = Duration::from_micros(10);
/// `_IOW('$', 4, __u64)`.
const PERF_EVENT_IOC_PERIOD: libc::c_ulong = 0x4008_2404;

/// `struct perf_event_attr`, PERF_ATTR_SIZE_VER5 (112 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

#[repr(C)]
struct FOwnerEx {
    type_: c_int,
    pid: libc::pid_t,
}

/// An armed sampling source for one thread.
#[derive(Debug)]
pub(super) enum Source {
    /// A POSIX timer on the thread's CPU clock.
    Timer(libc::timer_t),
    /// A perf event fd (its slot is found through the fd table).
    Perf(c_int),
    /// The wall sampler's one-shot request event of the thread (`wall.rs`), and its CPU source
    /// if CPU sampling is on.
    Wall {
        /// The CPU sampling source.
        cpu: Option<Box<Source>>,
        /// The request event: a disabled user-mode task-clock event, armed per request.
        fd: c_int,
    },
}

impl Source {
    /// The wall request event's fd, if the source has one.
    pub(super) fn wall_fd(&self) -> Option<c_int> {
        match self {
            Source::Wall { fd, .. } => Some(*fd),
            _ => None,
        }
    }
}

// SAFETY: a `timer_t` is an opaque kernel id (a pointer-sized integer in glibc), usable from any
// thread of the process.
unsafe impl Send for Source {}

fn cvt(rc: c_int) -> io::Result<c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Opens a disabled task-clock perf event for `tid`, counting user time only, and marks its fd
/// number as ours (see the module docs).
pub(super) fn perf_open(tid: u32, period: Duration) -> io::Result<c_int> {
    perf_open_marked(tid, period, MARK_CPU)
}

/// Opens the wall sampler's request event for `tid` (disabled; [`wall_request`] arms it for one
/// overflow) and marks its fd number as a wall one.
///
/// Why a user-mode task-clock event: it overflows only in an hrtimer interrupt that finds the
/// thread in user mode (`perf_swevent_hrtimer` -> `perf_exclude_event` with exclude_kernel), and
/// the signal is generated there and delivered on that return to user mode. A thread blocked in
/// (or entering) poll, epoll_wait, select, nanosleep or read is in the kernel, so a request never
/// interrupts a system call: it waits until the thread next runs its own code.
pub(super) fn perf_open_wall(tid: u32) -> io::Result<c_int> {
    perf_open_marked(tid, WALL_TRIGGER, MARK_WALL)
}

fn perf_open_marked(tid: u32, period: Duration, kind: u8) -> io::Result<c_int> {
    let fd = perf_open_unmarked(tid, period)?;
    let Some(mark) = PERF_FDS.get(fd as usize) else {
        // SAFETY: we own `fd`; it never fired (disabled).
        unsafe { libc::close(fd) };
        return Err(io::Error::new(io::ErrorKind::OutOfMemory, "perf fd number above the sampler's table"));
    };
    // Release: pairs with the Acquire load in `signal::perf_fd_kind`; stored before the event
    // is enabled, so every signal it sends finds the mark.
    mark.store(kind, Ordering::Release);
    // A kernel without PERF_EVENT_IOC_ID (before 3.12): the number is trusted, as before.
    PERF_IDS.lock().insert(fd, perf_id(fd).unwrap_or(UNVERIFIABLE));
    Ok(fd)
}

/// `PERF_IDS` entry of an event whose id the kernel would not tell.
const UNVERIFIABLE: u64 = u64::MAX;

/// The kernel's id of the perf event `fd` names, if it names one.
fn perf_id(fd: c_int) -> Option<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes a u64 through the pointer; other files refuse the request
    // (its type byte is perf's).
    (unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ID, &mut id as *mut u64) } == 0).then_some(id)
}

/// Whether every perf event of `source` still has the number we opened it at (no side effect).
pub(super) fn source_intact(source: &Source) -> bool {
    let intact = |fd: c_int| match PERF_IDS.lock().get(&fd).copied() {
        Some(UNVERIFIABLE) => true,
        Some(id) => perf_id(fd) == Some(id),
        None => false,
    };
    match source {
        Source::Timer(_) => true,
        Source::Perf(fd) => intact(*fd),
        Source::Wall { cpu, fd } => intact(*fd) && cpu.as_deref().is_none_or(source_intact),
    }
}

/// Whether `fd` still names the perf event we opened at that number; forgets the number if not
/// (the host closed or replaced it: its event went with it, and the number is the host's).
fn still_ours(fd: c_int) -> bool {
    let mut ids = PERF_IDS.lock();
    let ours = match ids.get(&fd) {
        Some(&UNVERIFIABLE) => true,
        Some(&id) => perf_id(fd) == Some(id),
        None => false,
    };
    if !ours {
        ids.remove(&fd);
        fds::count_taken();
    }
    ours
}

fn perf_open_unmarked(tid: u32, period: Duration) -> io::Result<c_int> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: period.as_nanos().max(1) as u64,
        // disabled (bit 0), exclude_kernel (bit 5), exclude_hv (bit 6): user time only, so no
        // signal of ours interrupts a system call (see the module docs); perf_event_paranoid = 2
        // allows that much for one's own threads.
        flags: 1 | (1 << 5) | (1 << 6),
        wakeup_events: 1,
        ..PerfEventAttr::default()
    };
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares; pid = tid, cpu = -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            tid as libc::pid_t,
            -1 as c_int,
            -1 as c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    // High: the host's own opens rarely reach the number (`fds/mod.rs`), and none below it is ever
    // taken from the host (the thread gets a POSIX CPU timer instead, which needs no descriptor).
    // Before any routing: the signal carries the number the event was routed with.
    cvt(fd as c_int).and_then(fds::move_high_or_close)
}

/// Routes the perf event's overflow signal to `tid` as SIGPROF and enables it.
pub(super) fn perf_enable(fd: c_int, tid: u32) -> io::Result<()> {
    perf_route(fd, tid)?;
    // SAFETY: `fd` is an open perf event fd we own.
    cvt(unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) })?;
    Ok(())
}

/// Routes the perf event's overflow signal to `tid` as SIGPROF (the event stays as it is).
pub(super) fn perf_route(fd: c_int, tid: u32) -> io::Result<()> {
    // SAFETY: `fd` is an open perf event fd we own; these fcntls take integer/struct arguments.
    unsafe {
        // No F_GETFL first: a perf fd has no status flags but its access mode, which F_SETFL
        // leaves alone.
        cvt(libc::fcntl(fd, libc::F_SETFL, libc::O_ASYNC | libc::O_NONBLOCK))?;
        cvt(libc::fcntl(fd, F_SETSIG, libc::SIGPROF))?;
        let owner = FOwnerEx { type_: F_OWNER_TID, pid: tid as libc::pid_t };
        cvt(libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx))?;
    }
    Ok(())
}

/// Arms a wall request event ([`perf_open_wall`]) for exactly one overflow: the kernel enables
/// it, and disables it again at that overflow (`event_limit`), whose signal carries POLL_HUP.
/// Normal context (the wall sampler thread), with the registry lock held so the fd is the one
/// the caller looked up.
pub(super) fn wall_request(fd: c_int) -> io::Result<()> {
    // SAFETY: `fd` is an open perf event fd we own; REFRESH takes an integer argument.
    cvt(unsafe { libc::ioctl(fd, PERF_EVENT_IOC_REFRESH, 1) })?;
    Ok(())
}

/// Whether a perf task-clock event can be opened for the calling thread, and whether its period
/// can be changed once it runs (else every event keeps its first period: [`set_period`] must
/// not be relied on and the first period is the whole period).
pub(super) fn perf_available(period: Duration) -> (bool, bool) {
    let tid = crate::threads::gettid();
    match perf_open_unmarked(tid, period) {
        Ok(fd) => {
            let ns = period.as_nanos().max(1) as u64;
            // SAFETY: we own `fd` (enabled for the check, never routed to a signal).
            let period_settable = unsafe {
                libc::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) == 0 && libc::ioctl(fd, PERF_EVENT_IOC_PERIOD, &ns) == 0
            };
            // SAFETY: we own `fd`.
            unsafe { libc::close(fd) };
            (true, period_settable)
        }
        Err(_) => (false, false),
    }
}

/// Sets the period of the running perf event `fd` to `period_ns`; the next overflow comes one
/// whole period from now.
///
/// # Signal safety
/// One `ioctl` system call on a local argument; errno is the handler's to preserve.
#[inline]
pub(super) fn set_period(fd: c_int, period_ns: u64) {
    // SAFETY: an ioctl on our own fd (a placeholder if the event was closed meanwhile: then it
    // fails harmlessly) with a pointer to a u64 that outlives the call.
    unsafe { libc::ioctl(fd, PERF_EVENT_IOC_PERIOD, &period_ns as *const u64) };
}

/// The shortest first period: a tenth of the period, at most 100 µs, at least the kernel's 10 µs
/// floor for hrtimer-driven events (see the module docs).
const FIRST_PERIOD_FLOOR: Duration = Duration::from_micros(100);

/// A first period uniform in [`FIRST_PERIOD_FLOOR` or P/10, `period`], drawn from the thread id
/// and the clock: see the module docs.
pub(super) fn random_first_period(tid: u32, period: Duration) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // splitmix64 of (tid, now): threads started together still draw apart.
    let mut z = (u64::from(tid) << 32 ^ ts.tv_nsec as u64 ^ (ts.tv_sec as u64).rotate_left(40))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let p = period.as_nanos().max(1) as u64;
    let floor = (FIRST_PERIOD_FLOOR.as_nanos() as u64).min(p / 10).max(10_000).min(p);
    Duration::from_nanos(floor + z % (p - floor + 1))
}

/// The CPU-time clock of thread `tid` of this process (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
pub(super) fn thread_cpu_clock(tid: u32) -> libc::clockid_t {
    ((!(tid as libc::clockid_t)) << 3) | 6
}

/// Arms a POSIX timer on `tid`'s CPU clock that sends SIGPROF to `tid` carrying `slot`, first
/// after `first` of its CPU time, then every `period`.
pub(super) fn timer_arm(tid: u32, slot: usize, first: Duration, period: Duration) -> io::Result<Source> {
    // SAFETY: zeroed is a valid sigevent (its padding is private).
    let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
    sev.sigev_notify = libc::SIGEV_THREAD_ID;
    sev.sigev_signo = libc::SIGPROF;
    sev.sigev_notify_thread_id = tid as c_int;
    sev.sigev_value = libc::sigval { sival_ptr: ((TIMER_TAG << 32) | slot as u64) as usize as *mut libc::c_void };
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: valid sigevent and out pointer; the clock names a thread of this process.
    cvt(unsafe { libc::timer_create(thread_cpu_clock(tid), &mut sev, &mut timer) })?;
    let ts =
        libc::timespec { tv_sec: period.as_secs() as libc::time_t, tv_nsec: period.subsec_nanos() as libc::c_long };
    let first =
        libc::timespec { tv_sec: first.as_secs() as libc::time_t, tv_nsec: first.subsec_nanos() as libc::c_long };
    let spec = libc::itimerspec { it_interval: ts, it_value: first };
    // SAFETY: `timer` was just created by us.
    if let Err(e) = cvt(unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) }) {
        // SAFETY: as above.
        unsafe { libc::timer_delete(timer) };
        return Err(e);
    }
    Ok(Source::Timer(timer))
}

/// Stops and releases the source of thread `tid`. A perf event's fd number stays reserved until
/// none of its signals can be pending (see the module docs and [`release_quarantine`]).
pub(super) fn disarm(source: Source, tid: u32) {
    match source {
        Source::Timer(t) => {
            // SAFETY: `t` is a live timer we created; deleting it stops further expirations and
            // discards its pending signal.
            unsafe { libc::timer_delete(t) };
        }
        Source::Wall { cpu, fd } => {
            if let Some(cpu) = cpu {
                disarm(*cpu, tid);
            }
            disarm(Source::Perf(fd), tid);
        }
        Source::Perf(fd) => {
            if !still_ours(fd) {
                forget_number(fd);
                return;
            }
            // SAFETY: `fd` is a perf event fd we own.
            unsafe { libc::ioctl(fd, PERF_EVENT_IOC_DISABLE, 0) };
            let placeholder = placeholder();
            // SAFETY: both fds are ours; dup3 closes the perf event's file (its last reference)
            // before it returns and leaves `fd` naming the placeholder.
            if placeholder >= 0 && unsafe { libc::dup3(placeholder, fd, libc::O_CLOEXEC) } == fd {
                PERF_IDS.lock().remove(&fd);
                QUARANTINE.lock().push((fd, tid));
            } else {
                unmark_and_close(fd);
            }
        }
    }
}

/// [`disarm`] on the thread that owns the source (its exit): a perf event's number is released
/// at once unless this thread has SIGPROF pending (blocked), without reading /proc. A SIGPROF the
/// event queued before `dup3` closed it is delivered (handled as stale) when `dup3` returns,
/// unless the thread blocks SIGPROF; then `sigpending` shows it and the number is quarantined.
/// (A process-wide SIGPROF of the application's own, pending, quarantines it too: rare, and
/// only delays the release.)
pub(super) fn disarm_own(source: Source, tid: u32) {
    if let Source::Wall { cpu, fd } = source {
        // The wall request event counts user time only too: the same holds for it.
        if let Some(cpu) = cpu {
            disarm_own(*cpu, tid);
        }
        disarm_own(Source::Perf(fd), tid);
        return;
    }
    let Source::Perf(fd) = source else {
        disarm(source, tid);
        return;
    };
    if !still_ours(fd) {
        forget_number(fd);
        return;
    }
    // No PERF_EVENT_IOC_DISABLE first: the event counts this thread's user time only, and the
    // thread is in the kernel until `dup3` has closed it, so it cannot overflow in between.
    let placeholder = placeholder();
    // SAFETY: both fds are ours; see `disarm`.
    if placeholder < 0 || unsafe { libc::dup3(placeholder, fd, libc::O_CLOEXEC) } != fd {
        unmark_and_close(fd);
        return;
    }
    PERF_IDS.lock().remove(&fd);
    // SAFETY: zeroed is a valid sigset_t; sigpending writes it.
    let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let clear = unsafe { libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPROF) == 0 };
    if clear {
        unmark_and_close(fd);
    } else {
        QUARANTINE.lock().push((fd, tid));
    }
}

/// The placeholder's fd (-1 if none can be made): the one we made, if its number still names it,
/// else a new one (the host closed ours).
fn placeholder() -> c_int {
    let mut held = PLACEHOLDER.lock();
    if let Some((fd, id)) = *held {
        if fds::identity(fd) == Some(id) {
            return fd;
        }
        fds::count_taken();
    }
    // SAFETY: a NUL-terminated name and flags; creates an empty anonymous file of ours.
    let fd = unsafe { libc::memfd_create(c"recorder-placeholder".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        *held = None;
        return -1;
    }
    let fd = fds::move_high(fd);
    *held = fds::identity(fd).map(|id| (fd, id));
    if held.is_some() {
        fd
    } else {
        -1
    }
}

/// Whether `fd` names our placeholder (a quarantined number the host did not take).
fn is_placeholder(fd: c_int) -> bool {
    let held = *PLACEHOLDER.lock();
    held.is_some_and(|(_, id)| fds::identity(fd) == Some(id))
}

/// Gives up a number the host took: unmarked (a signal carrying it is not ours), never closed.
fn forget_number(fd: c_int) {
    if let Some(mark) = PERF_FDS.get(fd as usize) {
        // Relaxed: the event of ours that had this number is gone with the host's close.
        mark.store(0, Ordering::Relaxed);
    }
}

/// Releases quarantined fd numbers whose thread has no SIGPROF pending any more (or is dead).
/// Normal context; reads /proc for each entry.
pub(super) fn release_quarantine() {
    let mut q = QUARANTINE.lock();
    if q.is_empty() {
        return;
    }
    // Every entry's /proc file in one visit to the recorder's own descriptor table
    // (`fds::privately`): one wait, however many threads exited.
    let tids: Vec<u32> = q.iter().map(|&(_, tid)| tid).collect();
    let pending = fds::privately(move || {
        let mut buf = String::new();
        tids.into_iter().map(|tid| sigprof_may_be_pending(tid, &mut buf)).collect::<Vec<bool>>()
    });
    let mut pending = pending.into_iter();
    q.retain(|&(fd, _)| {
        if pending.next().unwrap_or(true) {
            return true;
        }
        if is_placeholder(fd) {
            unmark_and_close(fd);
        } else {
            fds::count_taken();
            forget_number(fd);
        }
        false
    });
}

/// Whether no perf fd number is held back (no stale signal of ours can still arrive).
pub(super) fn quarantine_is_empty() -> bool {
    QUARANTINE.lock().is_empty()
}

/// In a forked child: the quarantine lock may be held by a parent thread that does not exist.
pub(super) fn forget_locks_in_child() {
    if QUARANTINE.is_locked() {
        // SAFETY: the holder was a parent thread that does not exist in the child.
        unsafe { QUARANTINE.release_after_fork(true) };
    }
    if PLACEHOLDER.is_locked() {
        // SAFETY: as above.
        unsafe { PLACEHOLDER.release_after_fork(true) };
    }
    if PERF_IDS.is_locked() {
        // SAFETY: as above.
        unsafe { PERF_IDS.release_after_fork(true) };
    }
}

fn unmark_and_close(fd: c_int) {
    PERF_IDS.lock().remove(&fd);
    if let Some(mark) = PERF_FDS.get(fd as usize) {
        // Relaxed: no signal carrying this number can be pending (the caller checked), and the
        // number is not reused before the close below.
        mark.store(0, Ordering::Relaxed);
    }
    // SAFETY: `fd` is ours (the perf event, or the placeholder's duplicate).
    unsafe { libc::close(fd) };
}

/// Whether thread `tid` may still have a SIGPROF pending: true unless it is dead or its `SigPnd`
/// says none (unreadable: true).
fn sigprof_may_be_pending(tid: u32, buf: &mut String) -> bool {
    // SAFETY: signal 0 only checks that the target exists.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        // A dead thread's pending signals died with it.
        return false;
    }
    if fds::read_to_string(&format!("/proc/self/task/{tid}/status"), buf).is_err() {
        return true;
    }
    let Some(mask) =
        buf.lines().find_map(|l| l.strip_prefix("SigPnd:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    else {
        return true;
    };
    mask & (1 << (libc::SIGPROF - 1)) != 0
}
