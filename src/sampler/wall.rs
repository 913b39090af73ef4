//! The wall-clock sampler: one thread that, every period, accounts one period to
//! every sampled thread, and asks for a stack only from the threads that ran since their last
//! visit, at most [`REQUESTS_PER_TICK`] per tick (the rest wait for later ticks, round robin).
//! Normal context only; the handler's part is two lines in `signal.rs`.
//!
//! # Never breaking a system call
//! A request is not a signal sent now: it arms the thread's one-shot user-mode task-clock event
//! (`timer::perf_open_wall`, `timer::wall_request`), which can only overflow in an interrupt that
//! finds the thread running its own code; its SIGPROF is delivered on that return to user mode.
//! So no poll, epoll_wait, select, nanosleep or read is ever interrupted by a wall sample, with
//! no race between "is it running" and the signal (a `tgkill` to threads seen in state R would
//! have one: the thread can enter poll between the /proc read and the signal). Without perf
//! events (perf_event_paranoid 3, seccomp) wall sampling is refused at start with an error
//! that says so, rather than taking that racy path (`Sampler::start_with_depth`).
//!
//! # Idle threads cost nothing
//! Each tick reads each thread's CPU clock. A thread that did not run since the last tick is not
//! touched: its period joins an open batch (thread, state, stack), which becomes one
//! `profiler.WallClockSample` with `samples` = the periods it stands for, written at the next
//! flush. Its state is read from /proc/self/task/TID/stat once when it stops running (it cannot
//! change without the thread running, which its CPU clock would show), and its stack is walked
//! from outside then (`blocked.rs`; at most [`WALKS_PER_TICK`] a tick). Where the walk fails, the
//! thread's last sampled stack stands in, or /proc/self/task/TID/syscall's user PC for a thread
//! never sampled.
//!
//! # Accounting (loss is never silent)
//! Every tick accounts `n` periods to every thread (`n` > 1 when the sampler thread was late:
//! `n - 1` ticks missed). A thread that ran gets a request for one period; its other `n - 1`
//! periods are lost (counted, `recorder.DataLoss`): nobody looked at it then. Idle or waiting
//! threads get all `n` into their batch (their state and stack did not change). A request not
//! served when its thread ends or the sampler stops is lost. So
//! `periods = requests + batched + lost`, and `requests` = served (written or lost in the
//! sampler's buffers, as CPU samples are) + unserved lost.

use super::blocked::{syscall_registers, walk_blocked, StackCopy, Waiting};
use super::timer;
use super::SamplerShared;
use crate::sync::Ordering;
use crate::threads::gettid;
use crate::threads::proc::{start_time, task_stat};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests per tick at most; the other threads that ran are batched this tick and get theirs
/// in a later one (round robin).
pub const REQUESTS_PER_TICK: usize = 16;
/// Default wall-clock period.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(50);
/// Stacks of blocked threads walked per tick at most (each takes 14-22 µs, `benches/wall.rs`;
/// copying the stack is most of it); the threads beyond get theirs at a later tick if they still
/// wait.
const WALKS_PER_TICK: usize = 32;
/// Closed batches kept between two flushes at most; beyond, their periods are counted lost.
const MAX_CLOSED: usize = 1 << 16;

/// What a thread was doing during a batch's periods (the `state` of its wall samples).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WallState {
    /// Ran (or was runnable) but was not asked for a stack this tick.
    Running,
    /// Interruptible wait (`S`: poll, recv, sleep, futex, ...).
    Sleeping,
    /// Uninterruptible wait (`D`: disk I/O, page fault, ...).
    Waiting,
    /// Anything else /proc says (stopped, traced, ...), or unreadable.
    Other,
}

impl WallState {
    fn from_proc(c: u8) -> WallState {
        match c {
            b'R' => WallState::Running,
            b'S' => WallState::Sleeping,
            b'D' => WallState::Waiting,
            _ => WallState::Other,
        }
    }
}

/// The stack of a blocked thread, walked from outside (`blocked.rs`), innermost first, and
/// whether it reached the thread's start (false: truncated).
pub type BlockedStack = (Arc<[u64]>, bool);

/// Periods a thread spent without a stack request, to be written as one wall sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WallBatch {
    /// The thread.
    pub tid: u32,
    /// Its state during these periods.
    pub state: WallState,
    /// Periods the batch stands for (the event's `samples`).
    pub periods: u64,
    /// When its first period ended (`crate::clock` ticks).
    pub ticks: i64,
    /// The user PC of the system call it was blocked in (/proc/self/task/TID/syscall; 0:
    /// unknown): its stack if it was never sampled and `stack` could not be walked.
    pub pc: u64,
    /// Its stack where it waits, walked while it waited (None: it ran, or the walk failed; then
    /// its last sampled stack stands for these periods).
    pub stack: Option<BlockedStack>,
}

/// Counters of the wall sampler, all since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WallStats {
    /// Ticks the sampler thread ran.
    pub ticks: u64,
    /// Ticks it missed (late wake-ups).
    pub missed_ticks: u64,
    /// Thread periods accounted: `requests + batched + lost`.
    pub periods: u64,
    /// Stack requests issued (each stands for one period).
    pub requests: u64,
    /// Requests served by the thread's handler (its sample is written or counted lost with the
    /// sampler's other samples).
    pub served: u64,
    /// Requests never served (the thread ended, or the sampler stopped, first): counted in
    /// `lost` too.
    pub unserved: u64,
    /// Periods put into batches (all written at the flushes).
    pub batched: u64,
    /// Periods lost: missed ticks of threads that ran, batch overflow, unserved requests.
    /// Once stopped, `periods = requests + batched + lost - unserved` and
    /// `requests = served + unserved`.
    pub lost: u64,
    /// Stacks of waiting threads walked from outside (`blocked.rs`).
    pub walks: u64,
    /// Walks whose stack was used (the others: the thread ran meanwhile, or its stack could not
    /// be read or unwound; its last sampled stack stood in).
    pub walks_used: u64,
}

#[derive(Debug, Default)]
struct Pending {
    /// The open batch of each thread.
    open: HashMap<u32, WallBatch>,
    /// Batches closed by a state change, oldest first.
    closed: Vec<WallBatch>,
}

/// The wall sampler's part of [`SamplerShared`].
#[derive(Debug)]
pub(super) struct WallShared {
    pub(super) period: Duration,
    /// Per slot: requests its handler served (written by the handler, Release; read by the wall
    /// thread, Acquire).
    served: Box<[AtomicU64]>,
    pending: crate::fork::ForkSafeMutex<Pending>,
    /// std's (a futex word: no process-wide wait queue that a fork would copy), for its condvar.
    stop: std::sync::Mutex<bool>,
    wake: std::sync::Condvar,
    thread: crate::fork::ForkSafeMutex<Option<std::thread::JoinHandle<()>>>,
    /// Requests outstanding when the thread stopped: (slot, served count then).
    outstanding_at_stop: crate::fork::ForkSafeMutex<Vec<(usize, u64)>>,
    counters: crate::fork::ForkSafeMutex<WallStats>,
    /// Lost periods already handed to `take_lost`.
    reported_lost: AtomicU64,
}

impl WallShared {
    pub(super) fn new(period: Duration, slots: usize) -> WallShared {
        WallShared {
            period,
            served: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            pending: crate::fork::ForkSafeMutex::new(Pending::default()),
            stop: std::sync::Mutex::new(false),
            wake: std::sync::Condvar::new(),
            thread: crate::fork::ForkSafeMutex::new(None),
            outstanding_at_stop: crate::fork::ForkSafeMutex::new(Vec::new()),
            counters: crate::fork::ForkSafeMutex::new(WallStats::default()),
            reported_lost: AtomicU64::new(0),
        }
    }

    /// The handler served a request of slot `index`.
    ///
    /// # Signal safety
    /// One bounds-checked atomic RMW.
    #[inline]
    pub(super) fn note_served(&self, index: usize) {
        if let Some(c) = self.served.get(index) {
            // Release: pairs with the Acquire load in `tick`; orders the record's commit (the
            // Release store of `pos` before this) before the wall thread's batches that follow.
            c.fetch_add(1, Ordering::Release);
        }
    }

    fn served(&self, index: usize) -> u64 {
        // Acquire: pairs with the Release RMW in `note_served`.
        self.served.get(index).map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// Every batch so far (open ones are closed): the flusher writes them after draining the
    /// sampler's records, which include every served request that preceded them.
    pub(super) fn take_batches(&self) -> Vec<WallBatch> {
        let mut p = self.pending.lock();
        let mut out = std::mem::take(&mut p.closed);
        out.extend(p.open.drain().map(|(_, b)| b));
        out
    }

    pub(super) fn stats(&self) -> WallStats {
        *self.counters.lock()
    }

    /// Lost periods since the last call.
    pub(super) fn take_lost(&self) -> u64 {
        let lost = self.counters.lock().lost;
        // Relaxed: only L holders call this (one at a time).
        let before = self.reported_lost.swap(lost, Ordering::Relaxed);
        lost.saturating_sub(before)
    }

    /// Stops and joins the wall thread (without LIFECYCLE: the thread's start hook may wait for
    /// it).
    pub(super) fn stop_thread(&self) {
        *self.stop.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.wake.notify_all();
        let handle = self.thread.lock().take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// After the sources are disarmed and no handler runs: requests still not served are lost.
    pub(super) fn settle_outstanding(&self) {
        let list = std::mem::take(&mut *self.outstanding_at_stop.lock());
        let unserved = list.iter().filter(|&&(index, seen)| self.served(index) == seen).count() as u64;
        let mut c = self.counters.lock();
        c.lost += unserved;
        c.unserved += unserved;
        c.served += list.len() as u64 - unserved;
    }
}

/// Starts the wall thread of `shared` (published, with a wall part).
pub(super) fn spawn(shared: *const SamplerShared) -> std::io::Result<()> {
    let addr = shared as usize;
    let handle = crate::own_thread::spawn("recorder-wall", move || {
        // SAFETY: `teardown` joins this thread (`WallShared::stop_thread`) before it frees
        // `SamplerShared`.
        let shared = unsafe { &*(addr as *const SamplerShared) };
        run(shared);
    })?;
    // SAFETY: as above; the caller owns the published `SamplerShared`.
    if let Some(w) = unsafe { &*shared }.wall.as_ref() {
        *w.thread.lock() = Some(handle);
    }
    Ok(())
}

/// What the wall thread knows of one sampled thread.
#[derive(Debug)]
struct Tracked {
    tid: u32,
    /// Its CPU clock at the last tick (None: not read yet).
    cpu: Option<u64>,
    /// A request is armed and not yet served; `served` is the slot's count when it was issued.
    outstanding: bool,
    served: u64,
    /// What was read when it stopped running (None: it ran at the last tick).
    idle: Option<Idle>,
}

/// A thread that stopped running: its state, and where it waits.
#[derive(Debug, Clone)]
struct Idle {
    state: WallState,
    /// The user PC of its system call (0: unknown).
    pc: u64,
    stack: Option<BlockedStack>,
    /// Whether its stack was walked (or could not be: no tables); false: over a tick's budget.
    walked: bool,
    /// Whether a walk ran (/proc gave its registers, and the tables exist).
    tried: bool,
}

fn cpu_time(tid: u32) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer; the clock names a thread of this process (an error if it died).
    if unsafe { libc::clock_gettime(timer::thread_cpu_clock(tid), &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// What the wall thread needs to walk blocked threads' stacks.
struct Walker {
    copy: StackCopy,
    frames: Vec<u64>,
}

/// State (stat field 3) of a thread that did not run since the last tick (its CPU clock read
/// `cpu`), the user PC of its system call, and (if `walk`) its stack there if it can be walked
/// while the thread stays put (`blocked.rs`).
fn idle_state(
    shared: &SamplerShared,
    index: usize,
    tid: u32,
    cpu: u64,
    buf: &mut String,
    walker: &mut Walker,
    walk: bool,
) -> Idle {
    // Both read in one visit to the recorder's own descriptor table (`fds::privately`).
    let mut stat = std::mem::take(buf);
    let (state, registers, stat) = crate::fds::privately(move || {
        let state = task_stat(tid, &mut stat).map_or(WallState::Other, |s| WallState::from_proc(s.state));
        stat.clear();
        (state, syscall_registers(tid), stat)
    });
    *buf = stat;
    let pc = registers.map_or(0, |(_, pc)| pc as u64);
    let tables = match shared.unwinder {
        crate::unwind::Unwinder::FramePointer => None,
        mode => shared.cfi.load().map(|t| (t, mode)),
    };
    let limit = shared.depth.inner.max(1) + shared.depth.outer;
    let walked = walk || tables.is_none();
    let tried = walk && registers.is_some() && tables.is_some();
    let stack = registers.zip(tables).filter(|_| walk).and_then(|((sp, pc), (tables, mode))| {
        // Its slot's stack bounds, if known and still its own (the slot may have been reused:
        // then `sp` is outside them and the copy goes page by page).
        let top = shared.core.slot(index).map(|s| s.stack_bounds()).filter(|b| b.lo <= sp && sp < b.hi).map(|b| b.hi);
        let waiting = Waiting { sp, pc, top };
        let complete = walk_blocked(tables, mode, waiting, &mut walker.copy, limit, &mut walker.frames)?;
        // The thread did not run while its stack was copied and walked (else the copy may be
        // torn): its CPU clock and its system call's registers are the same as before.
        let still = cpu_time(tid) == Some(cpu) && syscall_registers(tid) == Some((sp, pc));
        (still && walker.frames.len() > 1).then(|| (Arc::from(&walker.frames[..]), complete))
    });
    Idle { state, pc, stack, walked, tried }
}

fn run(shared: &SamplerShared) {
    // Our own thread is never sampled (its CPU is the sampler's cost, not the application's).
    exclude_self(shared);
    let Some(w) = shared.wall.as_ref() else { return };
    let period = w.period;
    let mut tracked: HashMap<usize, Tracked> = HashMap::new();
    let mut cursor = 0usize;
    let mut buf = String::new();
    let mut walker = Walker { copy: StackCopy::new(), frames: Vec::new() };
    let mut last = Instant::now();
    loop {
        {
            let mut stop = w.stop.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let deadline = last + period;
            while !*stop {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                stop = match w.wake.wait_timeout(stop, deadline - now) {
                    Ok((guard, _)) => guard,
                    Err(poisoned) => poisoned.into_inner().0,
                };
            }
            if *stop {
                break;
            }
        }
        let elapsed = last.elapsed();
        let n = (elapsed.as_nanos() / period.as_nanos().max(1)) as u64;
        if n == 0 {
            continue;
        }
        last += period * n as u32;
        tick(shared, w, n, &mut tracked, &mut cursor, &mut buf, &mut walker);
    }
    *w.outstanding_at_stop.lock() =
        tracked.iter().filter(|(_, t)| t.outstanding).map(|(&i, t)| (i, t.served)).collect();
}

fn exclude_self(shared: &SamplerShared) {
    let tid = gettid();
    let start = start_time(tid);
    shared.threads.registry.lock().excluded.push((tid, start));
    shared.unregister(tid, start);
}

/// One tick standing for `n` periods (see the module docs).
fn tick(
    shared: &SamplerShared,
    w: &WallShared,
    n: u64,
    tracked: &mut HashMap<usize, Tracked>,
    cursor: &mut usize,
    buf: &mut String,
    walker: &mut Walker,
) {
    let now = crate::clock::ticks();
    let entries: Vec<(usize, u32, libc::c_int)> = {
        let reg = shared.threads.registry.lock();
        reg.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let e = e.as_ref()?;
                let fd = e.source.as_ref()?.wall_fd()?;
                (!e.retiring).then_some((i, e.tid, fd))
            })
            .collect()
    };
    let mut lost = 0u64;
    let mut served = 0u64;
    let mut unserved = 0u64;
    // Threads gone (or their slot reused): an unserved request of theirs is lost.
    tracked.retain(|&i, t| {
        let keep = entries.iter().any(|&(j, tid, _)| j == i && tid == t.tid);
        if !keep && t.outstanding {
            if w.served(i) == t.served {
                unserved += 1;
            } else {
                served += 1;
            }
        }
        keep
    });
    let mut batched: Vec<(u32, u64, Option<Idle>)> = Vec::new();
    let mut want: Vec<(usize, u32, libc::c_int)> = Vec::new();
    let mut accounted = 0u64;
    let mut budget = 0usize;
    let mut walks = 0u64;
    let mut walks_used = 0u64;
    let count = entries.len();
    if count > 0 {
        *cursor %= count;
    }
    for k in 0..count {
        let Some(&(index, tid, fd)) = entries.get((*cursor + k) % count) else { continue };
        let t = tracked.entry(index).or_insert(Tracked { tid, cpu: None, outstanding: false, served: 0, idle: None });
        let now_served = w.served(index);
        if t.outstanding && now_served != t.served {
            t.outstanding = false;
            served += 1;
        }
        let Some(cpu) = cpu_time(tid) else {
            // Exited since the listing: its periods end with it.
            continue;
        };
        let ran = t.cpu != Some(cpu);
        t.cpu = Some(cpu);
        accounted += n;
        if ran {
            t.idle = None;
        } else if t.idle.as_ref().is_none_or(|i| !i.walked && budget < WALKS_PER_TICK) {
            let walk = budget < WALKS_PER_TICK;
            budget += usize::from(walk);
            let idle = idle_state(shared, index, tid, cpu, buf, walker, walk);
            walks += u64::from(idle.tried);
            walks_used += u64::from(idle.stack.is_some());
            t.idle = Some(idle);
        }
        if !t.outstanding && ran && want.len() < REQUESTS_PER_TICK {
            t.served = now_served;
            want.push((index, tid, fd));
        } else {
            // Idle (nothing changed: where it waits), its request not served yet, or over this
            // tick's budget (its last stack).
            batched.push((tid, n, t.idle.clone()));
        }
    }
    // The next tick starts after the last thread that got a request (round robin).
    if let Some(&(last_index, _, _)) = want.last() {
        if let Some(pos) = entries.iter().position(|&(i, _, _)| i == last_index) {
            *cursor = pos + 1;
        }
    }
    let mut requested = 0u64;
    {
        let reg = shared.threads.registry.lock();
        for &(index, tid, fd) in &want {
            let same = reg
                .entries
                .get(index)
                .and_then(Option::as_ref)
                .is_some_and(|e| e.tid == tid && e.source.as_ref().and_then(|s| s.wall_fd()) == Some(fd));
            let t = tracked.get_mut(&index);
            if same && timer::wall_request(fd).is_ok() {
                if let Some(t) = t {
                    t.outstanding = true;
                }
                requested += 1;
                lost += n - 1;
            } else {
                batched.push((tid, n, None));
            }
        }
    }
    let mut batched_periods = 0u64;
    let mut overflow = 0u64;
    {
        let mut p = w.pending.lock();
        for (tid, periods, idle) in batched {
            let (state, pc, stack) = match idle {
                Some(i) => (i.state, i.pc, i.stack),
                None => (WallState::Running, 0, None),
            };
            let close = p.open.get(&tid).is_some_and(|b| b.state != state || b.stack != stack);
            if close {
                if let Some(old) = p.open.remove(&tid) {
                    if p.closed.len() < MAX_CLOSED {
                        p.closed.push(old);
                    } else {
                        // Counted batched when it was opened; now lost instead.
                        overflow += old.periods;
                    }
                }
            }
            let b = p.open.entry(tid).or_insert(WallBatch { tid, state, periods: 0, ticks: now, pc, stack });
            b.periods += periods;
            batched_periods += periods;
        }
    }
    let mut c = w.counters.lock();
    c.ticks += 1;
    c.missed_ticks += n - 1;
    c.periods += accounted;
    c.requests += requested;
    c.served += served;
    c.unserved += unserved;
    c.batched = c.batched + batched_periods - overflow;
    c.lost += lost + overflow + unserved;
    c.walks += walks;
    c.walks_used += walks_used;
}
