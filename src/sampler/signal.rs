//! Everything that runs in signal context: the one `extern "C"` SIGPROF handler, register
//! extraction (one arch module), the call of the stack walk (`crate::unwind::walk`), and the static through which
//! the handler finds the sampler. Nothing here allocates, locks, formats or panics.
//!
//! The handler is a straight line: save errno, count itself in `IN_HANDLER`, load
//! `SHARED`, map the siginfo to a slot (POSIX timer: `si_value`; perf event: `si_fd` through a
//! preallocated table), get admitted to the slot (it belongs to this thread and is not retired;
//! I13), check the stack pointer lies in the thread's stack, walk once under the depth policy
//! into the slot's scratch (innermost N in order, outermost M in a ring), `Core::write_sample`
//! (fragments if the sample is larger than a buffer), leave the slot, post the wakeup if asked,
//! restore errno.
//!
//! Signals that are not ours go to the application's previous SIGPROF handler, if it had one.
//! Ours are recognized even when stale: a POSIX timer signal carries our tag in `si_value`; a perf
//! event signal carries an fd number that [`PERF_FDS`] marks as ours from before the event is
//! enabled until no signal of it can be pending any more (see `timer::disarm`), whether or not a
//! sampler is running.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::buffer::{RecordHeader, ThreadSlot, FLAG_LEAF_ONLY, FLAG_TRUNCATED, FLAG_WALL};
use super::{stacks, SamplerShared};
use crate::stack::KeepEnds;
use crate::sync::{fence, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use crate::unwind::{sample_walk_limit, walk, End, OwnStack, Regs, Unwinder, WalkRules};
use libc::{c_int, c_void, siginfo_t};
use std::ptr;

/// The running sampler, or null. Written only by `Sampler::start`/`stop` (normal context, under
/// the lifecycle lock); read by the handler.
pub(super) static SHARED: AtomicPtr<SamplerShared> = AtomicPtr::new(ptr::null_mut());
/// Handlers currently between their increment and decrement (stop's grace period).
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// The application's previous SIGPROF disposition (`sa_sigaction` value and `sa_flags`).
static PREV_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREV_FLAGS: AtomicUsize = AtomicUsize::new(0);
/// The previous action, for restoring it (normal context only).
static PREV_ACTION: crate::fork::ForkSafeMutex<Option<libc::sigaction>> = crate::fork::ForkSafeMutex::new(None);

/// fd numbers of our perf events, armed or quarantined (`timer.rs`): 1 = ours. Written in normal
/// context only; read by the handler to tell a stale signal of ours from the application's own.
pub(super) static PERF_FDS: [AtomicU8; PERF_FD_TABLE] = [const { AtomicU8::new(0) }; PERF_FD_TABLE];
/// fds at or above this number are never used for perf events (`timer::perf_open` refuses them).
pub(super) const PERF_FD_TABLE: usize = 1 << 16;

/// `PERF_FDS` mark of a CPU sampling event.
pub(super) const MARK_CPU: u8 = 1;
/// `PERF_FDS` mark of a wall request event (`timer::perf_open_wall`).
pub(super) const MARK_WALL: u8 = 2;

/// The mark of `fd` if it is (or was, with a signal possibly still pending) one of our perf
/// events: [`MARK_CPU`] or [`MARK_WALL`]; 0 if it is not ours.
///
/// # Signal safety
/// One bounds-checked atomic load.
#[inline]
fn perf_fd_kind(fd: c_int) -> u8 {
    let Some(mark) = usize::try_from(fd).ok().and_then(|i| PERF_FDS.get(i)) else {
        return 0;
    };
    // Acquire: pairs with the Release store of the mark in `timer::perf_open_marked`, made before
    // the event is enabled.
    mark.load(Ordering::Acquire)
}

/// Tag in the high 32 bits of a POSIX timer's `sigev_value`, so a timer signal carries
/// (tag, slot index) and foreign timer signals are told apart.
pub(super) const TIMER_TAG: u64 = 0x5a4d_5052; // "ZMPR"

/// `si_code` values of a perf event's F_SETSIG signal.
const POLL_IN: c_int = 1;
const POLL_HUP: c_int = 6;

/// Installs the handler unless it is already the current SIGPROF action (normal context; caller
/// holds the lifecycle lock). Whatever else is installed becomes the handler we chain to.
pub(super) fn install() -> std::io::Result<()> {
    as_own_change(install_action)
}

fn install_action() -> std::io::Result<()> {
    // SAFETY: zeroed is a valid `sigaction` (empty mask, no flags, SIG_DFL).
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: query only; `old` is a valid out pointer.
    if unsafe { libc::sigaction(libc::SIGPROF, ptr::null(), &mut old) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let ours = on_sigprof as *const () as usize;
    if old.sa_sigaction == ours {
        return Ok(());
    }
    // Relaxed: read by the handler only after the sigaction below, which the kernel orders.
    PREV_HANDLER.store(old.sa_sigaction, Ordering::Relaxed);
    // Relaxed: as above.
    PREV_FLAGS.store(old.sa_flags as usize, Ordering::Relaxed);
    *PREV_ACTION.lock() = Some(old);
    // SAFETY: zeroed is a valid `sigaction`.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = ours;
    // SA_ONSTACK: on a thread with an alternate signal stack the handler runs there, as runtimes
    // that switch stacks require (Go's goroutine stacks are a few KiB: a handler that ran on them
    // overflowed them); the interrupted stack is the one in the ucontext, which the walk reads.
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    act.sa_mask = handler_mask();
    // SAFETY: `act` is fully initialized; `on_sigprof` has the SA_SIGINFO signature.
    if unsafe { libc::sigaction(libc::SIGPROF, &act, ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// What the handler runs with blocked: every asynchronous signal (SIGPROF included), so no handler
/// of the program can interrupt it and leave it half-way with a `siglongjmp` (its slot's gate and
/// the stop's grace count held forever), glibc's cancellation signal too (an asynchronous
/// cancellation would end the thread inside it). Left open: the synchronous signals a fault
/// raises, which the kernel delivers even when blocked, but with the default action. They wait
/// the few microseconds the handler runs.
fn handler_mask() -> libc::sigset_t {
    let mut mask = crate::own_thread::asynchronous_signals();
    // glibc's own two (cancellation 32 and the set*id broadcast 33), which its `sigfillset` and
    // `sigaddset` leave out; the kernel takes them in `sa_mask` like any other.
    // SAFETY: glibc's sigset_t is an array of unsigned longs, bit `sig - 1` for signal `sig`;
    // signals 32 and 33 are bits 31 and 32 of its first word.
    unsafe { *(&mut mask as *mut libc::sigset_t).cast::<u64>() |= (1 << 31) | (1 << 32) };
    mask
}

/// Restores the application's SIGPROF handler if it had one (a function or SIG_IGN), but only
/// while ours is the current one: a handler the application (or another profiler) installed while
/// we recorded stays (`tests/sampler_lifecycle.rs`). If the previous one was SIG_DFL ours
/// stays installed: with `SHARED` null it drops stray SIGPROFs, so a signal still pending from a
/// disarmed source can never kill the process.
pub(super) fn uninstall() {
    // Held throughout: an application `sigaction` adopted meanwhile (`adopt_application_action`)
    // would otherwise change the action after we read it and be lost by the restore.
    let prev = PREV_ACTION.lock();
    let Some(prev) = *prev else { return };
    if prev.sa_sigaction == libc::SIG_DFL {
        return;
    }
    as_own_change(|| {
        // SAFETY: zeroed is a valid `sigaction`.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: query only; `current` is a valid out pointer.
        if unsafe { libc::sigaction(libc::SIGPROF, ptr::null(), &mut current) } != 0 {
            return;
        }
        if current.sa_sigaction != on_sigprof as *const () as usize {
            // The application replaced ours while we recorded: it keeps its own.
            return;
        }
        // SAFETY: `prev` is the action the kernel gave us in `install`.
        unsafe { libc::sigaction(libc::SIGPROF, &prev, ptr::null_mut()) };
    });
}

thread_local! {
    /// Set while this thread installs or restores the sampler's own SIGPROF action.
    static CHANGING_OWN_ACTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (which installs, restores or queries our SIGPROF action) marked as the sampler's own
/// call.
fn as_own_change<R>(f: impl FnOnce() -> R) -> R {
    let _ = CHANGING_OWN_ACTION.try_with(|c| c.set(true));
    let out = f();
    let _ = CHANGING_OWN_ACTION.try_with(|c| c.set(false));
    out
}

/// Whether the calling thread is installing, restoring or querying (for the application) the
/// sampler's own SIGPROF action: an
/// interposed `sigaction` (the preload library's) must then pass the call to the C library
/// instead of adopting it as the application's. Any other SIGPROF `sigaction` goes through
/// [`adopt_application_action`], which adopts it only while our handler is installed, so that a
/// program's call during a stop, before the restore, is still reported and restored right
/// (hostile prof_after_stop, a stop slowed by load).
pub fn changing_own_action() -> bool {
    CHANGING_OWN_ACTION.try_with(std::cell::Cell::get).unwrap_or(false)
}

/// While our handler is the current SIGPROF action, makes `act` the application's action instead
/// of letting it replace ours: foreign SIGPROFs (not our timers' or perf events') are chained to
/// it, and `uninstall` restores it. Returns the action it takes the place of (what the
/// application's `sigaction` reports as the old one); `None` if our handler is not installed
/// (the caller installs `act` for real). With `act` `None`, only reports the application's
/// action. Normal context: the preload library's `sigaction` and `signal`.
pub fn adopt_application_action(act: Option<&libc::sigaction>) -> Option<libc::sigaction> {
    let mut prev = PREV_ACTION.lock();
    // SAFETY: zeroed is a valid `sigaction`.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // Our own query: an interposed `sigaction` passes it to the C library (it would otherwise
    // come back here, and take the lock held above).
    // SAFETY: query only; `current` is a valid out pointer.
    let queried = as_own_change(|| unsafe { libc::sigaction(libc::SIGPROF, ptr::null(), &mut current) });
    if queried != 0 || current.sa_sigaction != on_sigprof as *const () as usize {
        return None;
    }
    // SAFETY: zeroed is a valid `sigaction` (SIG_DFL): what there was if we never saw one.
    let application = prev.unwrap_or_else(|| unsafe { std::mem::zeroed() });
    let Some(act) = act else { return Some(application) };
    *prev = Some(*act);
    // Release: handlers that load SIG_IGN drop foreign signals while the pair changes; pairs with
    // the Acquire loads in `chain`.
    PREV_HANDLER.store(libc::SIG_IGN, Ordering::Release);
    // Release: pairs with the Acquire load in `chain` (a chain that sees these flags sees SIG_IGN
    // or the new handler on its second load of PREV_HANDLER).
    PREV_FLAGS.store(act.sa_flags as usize, Ordering::Release);
    // Release: publishes the flags stored above; pairs with the Acquire loads in `chain`.
    PREV_HANDLER.store(act.sa_sigaction, Ordering::Release);
    Some(application)
}

/// How long `unpublish_and_wait` waits for handlers to leave: a handler runs for microseconds,
/// so one still counted after this never returns.
const GRACE_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Set once a grace period ended with handlers still counted: from then on no `SamplerShared` is ever
/// freed, and later grace periods wait only for the handlers above that count.
static ABANDONED: AtomicUsize = AtomicUsize::new(0);
static ANY_ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Unpublishes the sampler and waits until no handler can still be using it. Returns false if
/// some handler never left within [`GRACE_LIMIT`] (abandoned half-way, or counted by the
/// allocation hook in a frame the program's `siglongjmp` skipped): the caller must then never
/// free the sampler it unpublished, and no later one is freed either (the count that stayed
/// cannot be told apart from a live handler's).
pub(super) fn unpublish_and_wait() -> bool {
    // Relaxed + the SeqCst fence below: Dekker with the handler's increment + fence + load.
    SHARED.store(ptr::null_mut(), Ordering::Relaxed);
    // SeqCst fence: forbids the load of IN_HANDLER below from moving before the store above;
    // pairs with the fence in `on_sigprof`. Either the handler sees null or we see its count.
    fence(Ordering::SeqCst);
    // Relaxed: written only here, under the lifecycle lock that serializes stops.
    let stuck = ABANDONED.load(Ordering::Relaxed);
    // Acquire: pairs with the Release decrement in `on_sigprof`; its accesses are done.
    if !wait_below(&IN_HANDLER, stuck + 1, GRACE_LIMIT) {
        // Relaxed: as above.
        ABANDONED.store(IN_HANDLER.load(Ordering::Relaxed), Ordering::Relaxed);
        // Relaxed: read under the same lifecycle lock.
        ANY_ABANDONED.store(true, Ordering::Relaxed);
    }
    // Relaxed: as above.
    !ANY_ABANDONED.load(Ordering::Relaxed)
}

/// Waits until `count` is below `limit` (Acquire: pairs with the Release decrements), yielding,
/// then sleeping; false if it still is not after `patience`.
fn wait_below(count: &AtomicUsize, limit: usize, patience: std::time::Duration) -> bool {
    let t0 = std::time::Instant::now();
    let mut spins = 0u32;
    while count.load(Ordering::Acquire) >= limit {
        if t0.elapsed() >= patience {
            return false;
        }
        spins += 1;
        if spins < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    true
}

/// Releases the grace count of a handler that never returned, once a later handler or the
/// thread's own retirement took over the slot it was admitted to (`Core::admit`,
/// `Core::retire_own`): it was counted between its increment and decrement.
///
/// # Signal safety
/// One atomic RMW.
pub(super) fn release_abandoned_handler() {
    // Release: as the handler's own decrement; pairs with the Acquire loads in `wait_below`.
    IN_HANDLER.fetch_sub(1, Ordering::Release);
}

/// Runs `f` with the running sampler's unwinding mode and DWARF tables (`None`: no sampler runs,
/// it walks frame pointers only, or its tables are not built yet), counted in `IN_HANDLER` like
/// a handler, so that the tables outlive `f` (stop frees them only after its grace period). For
/// the allocation hook, which walks its own stack in any context a handler may run in.
///
/// # Signal safety
/// As the handler's entry and exit: two atomic RMWs, a fence and two loads, then `f`.
#[inline]
pub(crate) fn with_unwind_tables<R>(
    f: impl FnOnce(Option<(&crate::unwind::Tables, crate::unwind::Unwinder)>) -> R,
) -> R {
    // Relaxed + SeqCst fence: Dekker with `unpublish_and_wait`, as in `on_sigprof`.
    IN_HANDLER.fetch_add(1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    // Acquire: pairs with the Release store in `publish`.
    let shared = SHARED.load(Ordering::Acquire);
    // SAFETY: non-null means published and not yet freed: `stop` nulls it and waits for
    // IN_HANDLER to reach 0 before freeing.
    let tables = unsafe { shared.as_ref() }.and_then(|s| match s.unwinder {
        crate::unwind::Unwinder::FramePointer => None,
        mode => s.cfi.load().map(|t| (t, mode)),
    });
    let r = f(tables);
    // Release: our reads of `SamplerShared` happen-before `unpublish_and_wait` sees the count drop.
    IN_HANDLER.fetch_sub(1, Ordering::Release);
    r
}

/// In a forked child (only the forking thread survives): forget the parent's sampler, so the
/// child starts "not recording" and may start a recording of its own. Returns the parent's
/// `SamplerShared` (still mapped in the child) so its locks can be released.
///
/// # Signal safety
/// Atomic stores only (it runs in the `pthread_atfork` child hook).
pub(super) fn forget_in_child() -> *mut SamplerShared {
    // Relaxed: single-threaded child.
    let shared = SHARED.swap(ptr::null_mut(), Ordering::Relaxed);
    // Relaxed: no handler of the parent's other threads exists in the child.
    IN_HANDLER.store(0, Ordering::Relaxed);
    if PREV_ACTION.is_locked() {
        // SAFETY: the holder was a parent thread that does not exist in the child.
        unsafe { PREV_ACTION.release_after_fork(true) };
    }
    shared
}

/// Publishes a fully initialized sampler.
pub(super) fn publish(shared: *mut SamplerShared) {
    // Release: publishes the initialized `SamplerShared`; pairs with the Acquire load in `on_sigprof`.
    SHARED.store(shared, Ordering::Release);
}

/// The SIGPROF handler.
///
/// # Signal safety
/// The whole point: atomics, `clock_gettime`, `gettid`, `prctl(PR_GET_NAME)`, and a `write` to
/// an eventfd.
extern "C" fn on_sigprof(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let started = super::handler_time::start();
    // SAFETY: `__errno_location` returns this thread's errno; reading/writing it is signal-safe.
    let errno = unsafe { *libc::__errno_location() };
    // Relaxed + SeqCst fence: Dekker with `unpublish_and_wait` (see there).
    IN_HANDLER.fetch_add(1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    // Acquire: pairs with the Release store in `publish`.
    let shared = SHARED.load(Ordering::Acquire);
    // SAFETY: non-null means published and not yet freed: `stop` nulls it and waits for
    // IN_HANDLER to reach 0 before freeing.
    let handled = match unsafe { shared.as_ref() } {
        Some(shared) => on_signal(shared, info, ctx),
        // No sampler: a stale signal of ours (a source disarmed by stop) is dropped.
        None => !matches!(source_of(info), Source::Foreign),
    };
    // Release: our reads of `SamplerShared` happen-before `unpublish_and_wait` sees the count drop.
    IN_HANDLER.fetch_sub(1, Ordering::Release);
    if !handled {
        chain(sig, info, ctx);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    super::handler_time::finish(started);
}

/// Passes a foreign SIGPROF to the application's previous handler; SIG_DFL/SIG_IGN: drop it.
fn chain(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    // Acquire: pairs with the Release stores of `install` (kernel-ordered anyway) and of
    // `adopt_application_action`.
    let h = PREV_HANDLER.load(Ordering::Acquire);
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    // Acquire: pairs with the Release store of the flags in `adopt_application_action`.
    let flags = PREV_FLAGS.load(Ordering::Acquire) as c_int;
    // Acquire: as the first load. Changed meanwhile (the application installed another handler):
    // `flags` may be the new handler's, so drop this one signal rather than call `h` wrongly.
    if PREV_HANDLER.load(Ordering::Acquire) != h {
        return;
    }
    let mut call = Chained { handler: h, flags, sig, info, ctx };
    let arg = (&mut call as *mut Chained).cast::<c_void>();
    match arch::registers(ctx) {
        Some(regs) => {
            // SAFETY: a switch goes just below the interrupted stack pointer, where the kernel
            // would have put the handler's frame without SA_ONSTACK (`placement_for_flags`).
            unsafe { stacks::run(stacks::placement_for_flags(regs.sp, flags), call_chained, arg) };
        }
        None => call_chained(arg),
    }
}

/// The application's handler and its arguments, for [`call_chained`].
struct Chained {
    handler: usize,
    flags: c_int,
    sig: c_int,
    info: *mut siginfo_t,
    ctx: *mut c_void,
}

/// Calls the application's handler (`arg`: a [`Chained`]).
extern "C" fn call_chained(arg: *mut c_void) {
    // SAFETY: `chain` passes its own `Chained`, alive for the call.
    let Some(call) = (unsafe { arg.cast::<Chained>().as_ref() }) else { return };
    if call.flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the application installed it with SA_SIGINFO, so it has this signature.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) = unsafe { std::mem::transmute(call.handler) };
        f(call.sig, call.info, call.ctx);
    } else {
        // SAFETY: without SA_SIGINFO the handler takes the signal number only.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(call.handler) };
        f(call.sig);
    }
}

/// Where a SIGPROF came from.
enum Source {
    /// Not ours: chain it to the application's handler.
    Foreign,
    /// One of our POSIX timers: the slot index it carries.
    Timer(usize),
    /// One of our perf events (live or quarantined): its fd, and whether it is a wall request.
    Perf(c_int, bool),
}

/// Tells our signals from foreign ones by the siginfo alone (valid with or without a sampler).
///
/// # Signal safety
/// Loads from the kernel-provided siginfo and one atomic load.
fn source_of(info: *mut siginfo_t) -> Source {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let Some(info_ref) = (unsafe { info.as_ref() }) else {
        return Source::Foreign;
    };
    let code = info_ref.si_code;
    if code == libc::SI_TIMER {
        // SAFETY: SI_TIMER siginfo carries `si_value`.
        let v = unsafe { info_ref.si_value() }.sival_ptr as usize as u64;
        return if v >> 32 == TIMER_TAG { Source::Timer((v & 0xffff_ffff) as usize) } else { Source::Foreign };
    }
    if code == POLL_IN || code == POLL_HUP {
        // The SIGPOLL member: `long si_band` at offset 16, `int si_fd` at offset 24 on 64-bit.
        // SAFETY: siginfo_t is 128 bytes; offset 24 is inside it and 4-byte aligned.
        let fd = unsafe { (info as *const u8).add(24).cast::<c_int>().read() };
        match perf_fd_kind(fd) {
            0 => {}
            kind => return Source::Perf(fd, kind == MARK_WALL),
        }
    }
    Source::Foreign
}

/// Returns true if the signal was ours (handled, counted or stale), false if it must be chained.
fn on_signal(shared: &SamplerShared, info: *mut siginfo_t, ctx: *mut c_void) -> bool {
    let (index, wall) = match source_of(info) {
        Source::Foreign => return false,
        Source::Timer(index) => (index, false),
        Source::Perf(fd, wall) => match shared.slot_for_fd(fd) {
            Some((index, first_period)) => {
                // Only a CPU event's first signal: the word was read by `slot_for_fd` above, so
                // every later sample costs no second access (wall events never carry the bit).
                if first_period {
                    shared.end_first_period(fd);
                }
                (index, wall)
            }
            None => {
                // Ours, from a perf event disarmed before the signal was delivered.
                shared.count_stale();
                return true;
            }
        },
    };
    sample(shared, index, wall, ctx);
    if wall {
        // After the record's commit (or its loss): the wall sampler that sees the request served
        // finds the record in the buffer.
        shared.note_wall_served(index);
    }
    true
}

/// Takes one sample of the calling thread into slot `index` (a wall-clock one if `wall`).
///
/// # Signal safety
/// As the handler: atomics, the validated walk, writes into the slot's own buffers.
fn sample(shared: &SamplerShared, index: usize, wall: bool, ctx: *mut c_void) {
    let core = &shared.core;
    let Some(slot) = core.slot(index) else {
        core.count_unattributed();
        return;
    };
    let tid = crate::threads::gettid();
    let Some(adm) = core.admit(slot, tid, wall) else {
        return;
    };
    if adm.recovered() {
        release_abandoned_handler();
    }
    let Some(regs) = arch::registers(ctx) else {
        // No context: count it lost (taken was counted by `admit`).
        core.lose(&adm);
        return;
    };
    // Before the stack is chosen: a discovered thread's bounds are found from it, even while its
    // samples are lost for want of a stack to walk on.
    slot.note_sp(regs.sp);
    let bounds = slot.stack_bounds();
    let mut work = SampleWork { shared, slot, adm: &adm, regs, wall, tid, wake: false };
    let place = stacks::placement(regs.sp, bounds.lo, bounds.hi);
    // SAFETY: a switch goes below the interrupted stack pointer, inside the thread's own stack
    // `[lo, hi)` with `HANDLER_ROOM` left below it (`stacks::placement`).
    if !unsafe { stacks::run(place, sample_work, (&mut work as *mut SampleWork).cast()) } {
        // No stack known to have room for a walk (a discovered thread whose bounds are not known
        // yet, on a small alternate stack): its leaf alone needs little, else the sample is lost.
        if stacks::room_for_leaf() {
            work.wake = write_leaf(core, &adm, tid, wall, &regs);
        } else {
            core.lose(&adm);
        }
    }
    let wake = work.wake;
    // Leave the slot (I13) before the syscall.
    drop(adm);
    if wake {
        shared.post_wake();
    }
}

/// Writes the interrupted PC alone as a leaf-only record (no walk): what a sample is where no
/// stack has room for a walk ([`stacks::room_for_leaf`]). Returns whether the caller must post
/// the recorder's wakeup.
///
/// # Signal safety
/// As the handler: atomics and writes into the slot's own buffers.
#[inline(never)]
fn write_leaf(
    core: &super::buffer::Core,
    adm: &super::buffer::Admission<'_>,
    tid: u32,
    wall: bool,
    regs: &Regs,
) -> bool {
    let hdr = RecordHeader {
        ticks: crate::clock::ticks_in_signal_handler(),
        tid,
        flags: FLAG_LEAF_ONLY | if wall { FLAG_WALL } else { 0 },
        frag_index: 0,
        frag_count: 1,
        sample_id: core.next_sample_id(),
        sp: regs.sp as u64,
        span: adm.slot().span(),
        comm: crate::threads::RawComm::current_in_signal_handler(),
    };
    let pc = regs.pc as u64;
    core.write_record(adm, &hdr, 1, |sink| sink.push(pc)).wake
}

/// One sample's walk and write, for [`sample_work`] on the stack [`stacks::placement`] chose.
struct SampleWork<'a> {
    shared: &'a SamplerShared,
    slot: &'a ThreadSlot,
    adm: &'a super::buffer::Admission<'a>,
    regs: Regs,
    wall: bool,
    tid: u32,
    /// Out: post the recorder's wakeup.
    wake: bool,
}

/// Walks the interrupted stack into the slot's scratch and writes the record (`arg`: a
/// [`SampleWork`]).
///
/// # Signal safety
/// As the handler: atomics, the validated walk, writes into the slot's own buffers.
extern "C" fn sample_work(arg: *mut c_void) {
    // SAFETY: `sample` passes its own `SampleWork`, alive and not otherwise used for the call.
    let Some(work) = (unsafe { arg.cast::<SampleWork<'_>>().as_mut() }) else { return };
    let (shared, slot, adm, regs, wall, tid) = (work.shared, work.slot, work.adm, work.regs, work.wall, work.tid);
    let core = &shared.core;
    let index = slot.index() as usize;
    let depth = shared.depth;
    let scratch = shared.scratch(index);
    let mut flags = if wall { FLAG_WALL } else { 0 };
    // Frames are read only from [sp, hi) of a stack known to be mapped there. On a signal stack,
    // a fiber or with stale bounds sp lies elsewhere and only the leaf is recorded
    // (`tests/sampler_lifecycle.rs`).
    let (lo, hi) = if walkable(slot, shared.page_size, regs.sp) {
        (regs.sp, slot.stack_bounds().hi)
    } else {
        flags |= FLAG_LEAF_ONLY;
        (0, 0)
    };
    let entry = if tid == shared.pid { shared.main_entry } else { 0 };
    // One bounded walk (README, "Settings and defaults"): the innermost `inner` frames in order, the last
    // `outer` in a ring, the rest counted. At most `sample_walk_limit` frames: the handler's cost
    // is bounded whatever the depth.
    let tables = match shared.unwinder {
        Unwinder::FramePointer => None,
        _ => shared.cfi.load(),
    };
    let rules = WalkRules::with_tables(tables, shared.unwinder, sample_walk_limit(depth.inner, depth.outer), entry);
    let mut keep = KeepEnds::new(depth.inner, depth.outer);
    let (_, end) = walk(&OwnStack { lo, hi }, &rules, regs, true, |frame| {
        if let Some(w) = keep.next_slot().and_then(|at| scratch.get(at)) {
            // Relaxed: the scratch is read back only by this handler (same thread).
            w.store(frame.pc as u64, Ordering::Relaxed);
        }
        true
    });
    let layout = keep.layout();
    if end != End::Root || layout.dropped() > 0 {
        flags |= FLAG_TRUNCATED;
    }
    // With only the outer end kept, frame 0 is a return address: store it minus one, so every
    // record follows the convention "frame 0 lies inside its instruction" (as `unwind::capture_current` does).
    let first_is_return = layout.dropped() > 0 && depth.inner == 0;
    let hdr = RecordHeader {
        ticks: crate::clock::ticks_in_signal_handler(),
        tid,
        flags,
        frag_index: 0,
        frag_count: 1,
        sample_id: core.next_sample_id(),
        sp: regs.sp as u64,
        span: slot.span(),
        // Read at every sample, not when the chunk is written: a thread that renamed itself
        // (std names a spawned thread in its first microseconds) shows each sample under the name
        // it had when it was taken.
        comm: crate::threads::RawComm::current_in_signal_handler(),
    };
    // Relaxed (loads below): the scratch was written by this same handler above; it is the
    // owner's alone.
    let outcome = if layout.dropped() == 0 {
        // Nothing dropped: the kept stack is the scratch in order (the ring never wrapped).
        core.write_sample(adm, &hdr, layout.len(), |i| scratch.get(i).map_or(0, |w| w.load(Ordering::Relaxed)))
    } else {
        core.write_sample(adm, &hdr, layout.len(), |i| {
            let ip = layout.word(i, |k| scratch.get(k).map_or(0, |w| w.load(Ordering::Relaxed)));
            if i == 0 && first_is_return {
                ip.saturating_sub(1)
            } else {
                ip
            }
        })
    };
    work.wake = outcome.wake;
}

/// Whether the frames above `sp` may be read: `sp` lies in the thread's stack `[lo, hi)` and
/// `[sp, hi)` is mapped. Below `verified_lo` (a main-thread stack that grew since its bounds were
/// taken: `tests/main_thread_stack.rs`) one `msync(MS_ASYNC)` checks that the new part is mapped (it
/// fails with ENOMEM on any hole and, since Linux 2.6.19, does nothing else); a success lowers
/// `verified_lo`, so each growth is checked once.
///
/// # Signal safety
/// Atomic loads, at most one raw syscall (not glibc's `msync`, which is a cancellation point).
#[inline]
fn walkable(slot: &ThreadSlot, page_size: usize, sp: usize) -> bool {
    let b = slot.stack_bounds();
    if b.hi == 0 || sp < b.lo || sp >= b.hi {
        return false;
    }
    if sp >= b.verified_lo {
        return true;
    }
    let page = sp & !(page_size.max(1) - 1);
    // SAFETY: msync only inspects the mappings of the range; MS_ASYNC writes nothing back.
    let rc = unsafe { libc::syscall(libc::SYS_msync, page, b.verified_lo - page, libc::MS_ASYNC) };
    if rc != 0 {
        return false;
    }
    slot.lower_verified(page);
    true
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use crate::unwind::Regs;
    use libc::c_void;

    /// rip / rbp / rsp from the ucontext.
    ///
    /// # Signal safety
    /// Three loads from the kernel-provided ucontext.
    #[inline(always)]
    pub(super) fn registers(ctx: *mut c_void) -> Option<Regs> {
        // SAFETY: for an SA_SIGINFO handler the third argument is the thread's `ucontext_t`.
        let uc = unsafe { ctx.cast::<libc::ucontext_t>().as_ref() }?;
        let g = &uc.uc_mcontext.gregs;
        Some(Regs {
            pc: *g.get(libc::REG_RIP as usize)? as usize,
            fp: *g.get(libc::REG_RBP as usize)? as usize,
            sp: *g.get(libc::REG_RSP as usize)? as usize,
        })
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    use crate::unwind::Regs;
    use libc::c_void;

    /// pc / x29 (fp) / sp from the ucontext.
    ///
    /// # Signal safety
    /// Three loads from the kernel-provided ucontext.
    #[inline(always)]
    pub(super) fn registers(ctx: *mut c_void) -> Option<Regs> {
        // SAFETY: for an SA_SIGINFO handler the third argument is the thread's `ucontext_t`.
        let uc = unsafe { ctx.cast::<libc::ucontext_t>().as_ref() }?;
        let m = &uc.uc_mcontext;
        Some(Regs { pc: m.pc as usize, fp: *m.regs.get(29)? as usize, sp: m.sp as usize })
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the sampler supports x86_64 and aarch64 only");

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The grace period's wait ends: a count that never drops (a handler abandoned half-way) is
    /// waited for a bounded time, then reported (before, stop yielded forever).
    #[test]
    fn the_grace_wait_gives_up_on_a_count_that_never_drops() {
        let stuck = AtomicUsize::new(1);
        assert!(!wait_below(&stuck, 1, std::time::Duration::from_millis(20)));
        assert!(wait_below(&stuck, 2, std::time::Duration::from_millis(20)));
        let (tx, rx) = std::sync::mpsc::channel();
        let dropping = std::sync::Arc::new(AtomicUsize::new(1));
        let d = std::sync::Arc::clone(&dropping);
        std::thread::spawn(move || tx.send(wait_below(&d, 1, std::time::Duration::from_secs(60))).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(5));
        dropping.fetch_sub(1, Ordering::Release);
        assert!(rx.recv().unwrap(), "a count that drops ends the wait");
    }

    /// The handler runs with every asynchronous signal blocked (a program's handler cannot nest
    /// in it), glibc's cancellation signal included, and the synchronous ones open.
    #[test]
    fn a_leaf_record_is_written_within_the_leaf_room() {
        struct Leaf<'a> {
            core: &'a super::super::buffer::Core,
            adm: super::super::buffer::Admission<'a>,
        }
        extern "C" fn leaf(arg: *mut c_void) {
            // SAFETY: the test passes its own `Leaf`, alive for the call.
            let l = unsafe { &*arg.cast::<Leaf<'_>>() };
            let regs = Regs { pc: 0x1234, fp: 0, sp: 0x8000 };
            write_leaf(l.core, &l.adm, 77, true, &regs);
        }
        let (core, mut locked) = super::super::buffer::Core::new(1, 4, 256);
        core.claim_slot(77, super::super::buffer::StackBounds::default()).unwrap();
        core.refill_spares();
        // Admitted before, as the handler is (on the stack it started on).
        let l = Leaf { core: &core, adm: core.admit(core.slot(0).unwrap(), 77, true).unwrap() };
        let mut stack = vec![0xa5u8; 64 << 10];
        let base = stack.as_mut_ptr() as usize;
        let top = (base + stack.len()) & !15;
        // SAFETY: `top` is the aligned end of a buffer of ours, unused otherwise.
        assert!(unsafe { stacks::run(stacks::Placement::Switch(top), leaf, &l as *const Leaf<'_> as *mut c_void) });
        drop(l);
        let untouched = stack.iter().take_while(|&&b| b == 0xa5).count();
        let used = top - (base + untouched);
        eprintln!("a leaf write used {used} bytes of stack");
        assert!(used < stacks::LEAF_ROOM, "a leaf write used {used} bytes of stack");
        let mut seen = Vec::new();
        core.drain(&mut locked, &mut |r| seen.push((r.tid, r.leaf_only, r.wall, r.ips.to_vec())));
        assert_eq!(seen, vec![(77, true, true, vec![0x1234])]);
        let s = core.slot_stats(core.slot(0).unwrap());
        assert_eq!((s.taken, s.written, s.wall_taken, s.wall_written), (1, 1, 1, 1));
    }

    #[test]
    fn the_handler_mask_blocks_asynchronous_signals_only() {
        let mask = handler_mask();
        // SAFETY: a valid set.
        let has = |sig| unsafe { libc::sigismember(&mask, sig) } == 1;
        for sig in [libc::SIGALRM, libc::SIGPROF, libc::SIGUSR1, libc::SIGCHLD, libc::SIGINT, libc::SIGRTMIN() + 5] {
            assert!(has(sig), "signal {sig} open");
        }
        for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGSYS] {
            assert!(!has(sig), "signal {sig} blocked");
        }
        // SAFETY: the set's first word (glibc's layout); bit 31 is signal 32.
        assert_ne!(unsafe { *(&mask as *const libc::sigset_t).cast::<u64>() } & (1 << 31), 0);
    }
}
