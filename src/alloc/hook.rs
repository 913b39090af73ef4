//! What runs inside the allocator: the per-thread byte countdown (the fast path), the sampling
//! decision, the stack walk, the record and the live-set header. Everything here may run in any
//! context an allocation can happen in: normal code, an application's signal handler, a thread's
//! TLS destructors, a forked child. So nothing here allocates, takes a lock, formats or panics;
//! the per-thread state is one const-initialized thread-local without a destructor (readable at
//! any time, never lazily registered), and the recording's state is reached through a [`Gate`].
//!
//! Sampling: each thread counts down the bytes it allocates; when the countdown
//! reaches zero the allocation is sampled and a fresh gap is drawn from an exponential
//! distribution of mean `interval` (one draw, however large the allocation: the sample's weight,
//! `size / (1 - exp(-size / interval))`, accounts for the allocations it stands for). No counter
//! is shared between threads.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::pool::{Claim, Gate, LiveRef, LiveTable, Pool, SEQ_WORD};
use crate::sync::statics::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::ptr;

// ---- record layout (words of a pool record) ----
const LAYOUT_WORD: usize = 1;
const TICKS_WORD: usize = 2;
const TID_WORD: usize = 3;
const SIZE_WORD: usize = 4;
const LIVE_INDEX_WORD: usize = 5;
const LIVE_WORD: usize = 6;
/// Frames the walk saw (kept or not; the record keeps them as `stack::KeepEnds` places them).
const WALKED_WORD: usize = 7;
/// Words before the frames.
pub(crate) const RECORD_HEADER_WORDS: usize = 8;

/// Record flag: the walk stopped at `HARD_WALK_LIMIT`.
const FLAG_CUT: u64 = 1;
/// Record flag: the thread's stack could not be found; no frames.
const FLAG_NO_STACK: u64 = 2;

/// What a recording asks of the hook.
pub(crate) struct Active {
    pub(crate) pool: Pool,
    /// Mean bytes between samples.
    interval: u64,
    /// The live-set table, when live-set tracking is on.
    live: Option<&'static LiveTable>,
    /// Sampled blocks carry a header (see [`header`]); else frees are found in the table.
    headers: bool,
    inner: usize,
    outer: usize,
    seq: AtomicU64,
    pub(crate) counters: Counters,
    /// Asks the flusher for an early flush (at each quarter of the pool taken).
    wake: Box<dyn Fn() + Send + Sync>,
}

/// The hook's counters for one recording (Relaxed: statistics).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Allocations the countdown chose.
    pub taken: AtomicU64,
    /// Chosen but not recorded: every record was taken (pool full).
    pub lost: AtomicU64,
    /// Chosen, but the allocation itself failed (no allocation, no sample).
    pub failed: AtomicU64,
    /// Recorded, but the live table had no room: not followed by the live set.
    pub untracked: AtomicU64,
}

impl std::fmt::Debug for Active {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Active").field("interval", &self.interval).field("headers", &self.headers).finish()
    }
}

impl Active {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        interval: u64,
        records: usize,
        inner: usize,
        outer: usize,
        live: Option<&'static LiveTable>,
        headers: bool,
        wake: Box<dyn Fn() + Send + Sync>,
    ) -> Active {
        Active {
            pool: Pool::new(
                records,
                RECORD_HEADER_WORDS + inner + outer,
                super::pool::reserve_for(records, RECORD_HEADER_WORDS + inner + outer),
            ),
            interval: interval.max(1),
            live,
            headers: headers && live.is_some(),
            inner,
            outer,
            seq: AtomicU64::new(1),
            counters: Counters::default(),
            wake,
        }
    }

    pub(crate) fn live(&self) -> Option<&'static LiveTable> {
        self.live
    }

    pub(crate) fn headers(&self) -> bool {
        self.headers
    }

    /// Innermost frames a record keeps in order and outermost ones in a ring after them.
    pub(crate) fn depth(&self) -> (usize, usize) {
        (self.inner, self.outer)
    }
}

/// Bytes of the running allocation sampler's record pool that may be resident (0 when off).
pub(crate) fn pool_bytes() -> usize {
    let entered = GATE.enter();
    entered.get().map_or(0, |active| active.pool.touched_bytes())
}

/// The running recording's state, if allocation sampling is on.
pub(crate) static GATE: Gate<Active> = Gate::new();
/// Bumped whenever sampling starts or stops: a thread whose countdown belongs to another epoch
/// takes the slow path once and starts a fresh one.
static EPOCH: AtomicU64 = AtomicU64::new(1);
/// Which allocator the process's `SamplingAllocator` wraps, once it allocated: 0 not seen, 1 the
/// system allocator, 2 another one.
static INSTALLED: AtomicU8 = AtomicU8::new(0);
/// What `dealloc` must look at: `DEALLOC_HEADERS` (sampled blocks with a header may exist: set
/// once, never cleared, since such blocks outlive recordings) and `DEALLOC_SEARCH` (live-set
/// tracking without headers is on: frees search the table).
static DEALLOC: AtomicU8 = AtomicU8::new(0);
const DEALLOC_HEADERS: u8 = 1;
const DEALLOC_SEARCH: u8 = 2;
/// The live table, allocated by the first recording that tracks the live set and kept for the
/// process's life (blocks with a header name an entry of it whenever they are freed).
static LIVE_TABLE: AtomicPtr<LiveTable> = AtomicPtr::new(ptr::null_mut());

/// Entries of the live table.
const LIVE_ENTRIES: usize = 1 << 16;

/// Per-thread state. Atomics (Relaxed) rather than `Cell`s because an application's signal
/// handler that allocates may interrupt the hook on the same thread.
struct AllocThreadState {
    /// Bytes until the next sample.
    remaining: AtomicI64,
    /// The `EPOCH` `remaining` belongs to (0: none yet).
    epoch: AtomicU64,
    rng: AtomicU64,
    /// Cached kernel thread id (0: not read yet; reset in a forked child).
    tid: AtomicU32,
    /// Non-zero while the recorder works on this (application) thread: no sample.
    suspended: AtomicU32,
    /// The stack mapping found last (`hi == 0`: none).
    stack_lo: AtomicUsize,
    stack_hi: AtomicUsize,
}

thread_local! {
    // Const-initialized and without `Drop`: no lazy initialization, no destructor registration,
    // accessible during TLS teardown.
    static LOCAL: AllocThreadState = const {
        AllocThreadState {
            remaining: AtomicI64::new(0),
            epoch: AtomicU64::new(0),
            rng: AtomicU64::new(0),
            tid: AtomicU32::new(0),
            suspended: AtomicU32::new(0),
            stack_lo: AtomicUsize::new(0),
            stack_hi: AtomicUsize::new(0),
        }
    };
}

/// The fast path: counts `size` bytes down; true if the allocation is not sampled and nothing
/// else needs doing.
///
/// # Signal safety
/// One global load, thread-local loads and a store.
#[inline(always)]
pub(crate) fn skip(size: usize) -> bool {
    // Relaxed: a thread that reads an old epoch once more samples by its old countdown once more.
    let epoch = EPOCH.load(Ordering::Relaxed);
    LOCAL.with(|l| {
        // Relaxed (all `AllocThreadState` accesses): this thread's own state.
        let r = l.remaining.load(Ordering::Relaxed).wrapping_sub(size as i64);
        if r > 0 && l.epoch.load(Ordering::Relaxed) == epoch {
            l.remaining.store(r, Ordering::Relaxed);
            true
        } else {
            false
        }
    })
}

/// No recording samples allocations: the allocation needs no countdown.
///
/// # Signal safety
/// One load.
#[inline(always)]
pub(crate) fn idle() -> bool {
    // A thread that sees the gate late counts (or skips) a few more allocations on the old side
    // of a start or stop, as `skip` does with the epoch.
    GATE.is_closed()
}

/// What `dealloc` must look at (0: nothing; see `DEALLOC`).
///
/// # Signal safety
/// One load.
#[inline(always)]
pub(crate) fn dealloc_mode() -> u8 {
    // Relaxed: a block with a header (or tracked in the table) was handed to the freeing thread
    // after its allocation, which happened after the bit was set: the hand-over orders them.
    DEALLOC.load(Ordering::Relaxed)
}

/// `dealloc_mode` bit: sampled blocks may carry a header.
#[inline(always)]
pub(crate) fn headers_may_exist(mode: u8) -> bool {
    mode & DEALLOC_HEADERS != 0
}

/// `dealloc_mode` bit: frees search the live table.
#[inline(always)]
pub(crate) fn search_on_free(mode: u8) -> bool {
    mode & DEALLOC_SEARCH != 0
}

/// Notes which allocator the `SamplingAllocator` wraps (its first slow path per thread).
#[inline]
pub(crate) fn note_installed(system: bool) {
    // Relaxed: a fact that never changes once set.
    if INSTALLED.load(Ordering::Relaxed) == 0 {
        INSTALLED.store(if system { 1 } else { 2 }, Ordering::Relaxed);
    }
}

/// Whether a `SamplingAllocator` is the global allocator (it allocated), and whether it wraps
/// the system allocator.
pub(crate) fn installed() -> Option<bool> {
    // Relaxed: see `note_installed`.
    match INSTALLED.load(Ordering::Relaxed) {
        0 => None,
        v => Some(v == 1),
    }
}

/// Suspends sampling on the calling thread while the guard lives: the recorder's own work on an
/// application's thread (start, flush, dump, stop, registration) is not sampled.
pub(crate) fn suspend() -> Suspended {
    let _ = LOCAL.try_with(|l| {
        // Relaxed: this thread's own state.
        l.suspended.fetch_add(1, Ordering::Relaxed);
    });
    Suspended(())
}

/// See [`suspend`].
#[derive(Debug)]
pub(crate) struct Suspended(());

impl Drop for Suspended {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| {
            // Relaxed: this thread's own state.
            l.suspended.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// The process-wide live table (allocated on first use, normal context).
pub(crate) fn live_table() -> &'static LiveTable {
    // Acquire: pairs with the Release CAS below (another starter's table is initialized).
    let current = LIVE_TABLE.load(Ordering::Acquire);
    // SAFETY: non-null values come from `Box::leak` below and are never freed.
    if let Some(t) = unsafe { current.as_ref() } {
        return t;
    }
    let fresh: *mut LiveTable = Box::leak(Box::new(LiveTable::new(LIVE_ENTRIES)));
    // Release: publishes the initialized table; pairs with the Acquire loads here and in `table`.
    match LIVE_TABLE.compare_exchange(ptr::null_mut(), fresh, Ordering::Release, Ordering::Acquire) {
        // SAFETY: leaked above, never freed.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: `fresh` was never published; `other` is a leaked, never freed table.
            unsafe {
                drop(Box::from_raw(fresh));
                &*other
            }
        }
    }
}

fn table() -> Option<&'static LiveTable> {
    // Acquire: pairs with the Release CAS in `live_table`.
    // SAFETY: non-null values are leaked tables, never freed.
    unsafe { LIVE_TABLE.load(Ordering::Acquire).as_ref() }
}

/// Publishes a recording's state (normal context; the caller owns `active` and frees it only
/// after [`stop`]).
pub(crate) fn start(active: *mut Active) {
    // SAFETY: the caller passes a live, initialized `Active`.
    let a = unsafe { &*active };
    if let Some(live) = a.live {
        live.clear();
        let bit = if a.headers { DEALLOC_HEADERS } else { DEALLOC_SEARCH };
        // Relaxed: see `dealloc_mode`; set before any block that needs it exists.
        DEALLOC.fetch_or(bit, Ordering::Relaxed);
    }
    GATE.open(active);
    // Release: pairs with nothing in particular; threads pick the new epoch up at their next
    // allocation (Relaxed load in `skip`) and then meet the published state through the gate.
    EPOCH.fetch_add(1, Ordering::Release);
}

/// Unpublishes the recording's state and waits until no hook uses it (normal context). Every
/// record committed so far is in the pool; nothing is committed after this returns. The live
/// table still follows frees until [`finish`].
pub(crate) fn stop() -> *mut Active {
    let active = GATE.close();
    // Release: see `start`.
    EPOCH.fetch_add(1, Ordering::Release);
    active
}

/// After [`stop`] and the last snapshot: frees stop searching the table and its entries are
/// emptied (a later recording starts from an empty table).
pub(crate) fn finish(active: &Active) {
    if let Some(live) = active.live {
        // Relaxed: frees stop searching (searching the process-lifetime table stays harmless).
        DEALLOC.fetch_and(!DEALLOC_SEARCH, Ordering::Relaxed);
        live.clear();
    }
}

/// The `pthread_atfork` child hook: the child has only the forking thread; it is not recording
/// (the parent's recording stays the parent's) and may start a recording of its own.
///
/// # Signal safety
/// Atomic stores only.
pub(crate) fn forget_in_child() {
    GATE.forget_in_child();
    // Relaxed (all): single-threaded child.
    DEALLOC.fetch_and(!DEALLOC_SEARCH, Ordering::Relaxed);
    EPOCH.fetch_add(1, Ordering::Relaxed);
    let _ = LOCAL.try_with(|l| l.tid.store(0, Ordering::Relaxed));
}

/// A sampled allocation in progress: the caller holds the gate and a record.
pub(crate) struct Ticket {
    // Field order matters: the claim (which borrows the pool) drops before the gate guard.
    claim: Claim<'static>,
    active: &'static Active,
    _entered: super::pool::Entered<'static, Active>,
    seq: u64,
    tid: u32,
}

/// The slow path of every allocation the countdown did not skip: new epoch, excluded thread,
/// or a sample. `Some` if this allocation is sampled.
///
/// # Signal safety
/// Atomics, the thread's CPU-free `gettid` (once per thread), `clock_gettime`; no allocation.
#[cold]
#[inline(never)]
pub(crate) fn decide(size: usize) -> Option<Ticket> {
    // Relaxed: see `skip`.
    let epoch = EPOCH.load(Ordering::Relaxed);
    LOCAL
        .try_with(|l| {
            // Relaxed (all `AllocThreadState` accesses): this thread's own state. The recorder's
            // own threads are excluded from their first statement of ours (`own_thread`).
            if crate::own_thread::current_is_own() {
                l.epoch.store(epoch, Ordering::Relaxed);
                l.remaining.store(i64::MAX, Ordering::Relaxed);
                return None;
            }
            if l.suspended.load(Ordering::Relaxed) != 0 {
                // The recorder's own allocation: not counted; the countdown starts afresh.
                l.epoch.store(0, Ordering::Relaxed);
                return None;
            }
            let entered = GATE.enter();
            let Some(active) = entered.get() else {
                l.epoch.store(epoch, Ordering::Relaxed);
                l.remaining.store(i64::MAX, Ordering::Relaxed);
                return None;
            };
            // SAFETY: the state lives until the gate is closed, which waits for `entered`; the
            // ticket keeps both together and drops the borrowers first.
            let active: &'static Active = unsafe { &*(active as *const Active) };
            let fresh = l.epoch.load(Ordering::Relaxed) != epoch;
            let remaining = if fresh { draw_gap(l, active.interval) } else { l.remaining.load(Ordering::Relaxed) };
            l.epoch.store(epoch, Ordering::Relaxed);
            let remaining = remaining.saturating_sub(size as i64);
            if remaining > 0 {
                l.remaining.store(remaining, Ordering::Relaxed);
                return None;
            }
            // One fresh gap after a sample, however large the allocation.
            l.remaining.store(draw_gap(l, active.interval), Ordering::Relaxed);
            // Relaxed: statistics.
            active.counters.taken.fetch_add(1, Ordering::Relaxed);
            let tid = tid(l);
            let Some(claim) = active.pool.claim((tid as usize).wrapping_mul(31)) else {
                // Relaxed: statistics (reported as loss).
                active.counters.lost.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            // Relaxed: uniqueness from the RMW; order within a thread from program order.
            let seq = active.seq.fetch_add(1, Ordering::Relaxed);
            Some(Ticket { claim, active, _entered: entered, seq, tid })
        })
        .ok()
        .flatten()
}

impl Ticket {
    /// Walks the calling thread's stack into the record (innermost `inner` frames in order, the
    /// outermost `outer` in a ring, the rest counted). Call it from the allocator's own frame.
    ///
    /// # Signal safety
    /// Validated loads from this thread's stack; `open`/`read`/`close` of /proc/self/maps the
    /// first time a thread's stack is seen.
    #[inline(never)]
    pub(crate) fn capture(&mut self) {
        self.capture_from(crate::unwind::frame_pointer());
    }

    /// [`Ticket::capture`] from the frame record at `fp` (a frame of the caller's: the walk
    /// starts at that frame's return address, so the frames between it and here are not kept).
    ///
    /// # Signal safety
    /// As [`Ticket::capture`].
    #[inline(never)]
    pub(crate) fn capture_from(&mut self, fp: usize) {
        let marker = 0u8;
        let sp = std::hint::black_box(&marker) as *const u8 as usize;
        let (inner, outer) = (self.active.inner, self.active.outer);
        let Some((lo, hi)) = stack_bounds(sp) else {
            self.claim.write(LAYOUT_WORD, FLAG_NO_STACK << 48);
            self.claim.write(WALKED_WORD, 0);
            return;
        };
        let stack = crate::unwind::OwnStack { lo: lo.max(sp), hi };
        let claim = &mut self.claim;
        // The innermost `inner` return addresses in order, the last `outer` in a ring.
        let mut keep = crate::stack::KeepEnds::new(inner, outer);
        let mut store = |frame: crate::unwind::Regs| {
            if let Some(at) = keep.next_slot() {
                claim.write(RECORD_HEADER_WORDS + at, frame.pc as u64);
            }
            true
        };
        // The caller of the frame at `fp`: its pc is the return address, its sp the frame's CFA,
        // its frame pointer the one the frame saved.
        let end = crate::unwind::caller_of_record(&stack, fp).map(|start| {
            // The sampler's DWARF tables when it runs with them (code without frame pointers,
            // such as a C program's `malloc` callers under `recorder record`), else frame
            // pointers.
            crate::sampler::with_unwind_tables(|tables| {
                let rules = match tables {
                    Some((tables, mode)) => {
                        crate::unwind::WalkRules::with_tables(Some(tables), mode, crate::unwind::HARD_WALK_LIMIT, 0)
                    }
                    None => crate::unwind::WalkRules::frame_pointers(crate::unwind::HARD_WALK_LIMIT, 0),
                };
                crate::unwind::walk(&stack, &rules, start, false, &mut store).1
            })
        });
        // Only a walk cut by its limit is marked (a broken chain is kept as walked).
        let flags = if end == Some(crate::unwind::End::Full) { FLAG_CUT } else { 0 };
        self.claim.write(LAYOUT_WORD, flags << 48);
        self.claim.write(WALKED_WORD, keep.seen() as u64);
    }

    /// The sampled block gets a live-set header (live-set tracking with headers).
    #[inline]
    pub(crate) fn wants_header(&self) -> bool {
        self.active.headers
    }

    /// Enters the block at `address` into the live table, when the live set is tracked.
    #[inline]
    pub(crate) fn track(&self, address: *mut u8) -> Option<LiveRef> {
        let live = self.active.live?;
        let r = live.insert(address as u64, self.seq & 0xffff);
        if r.is_none() {
            // Relaxed: statistics.
            self.active.counters.untracked.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// The allocation failed: nothing was allocated, nothing is recorded.
    pub(crate) fn failed(self) {
        // Relaxed: statistics.
        self.active.counters.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Commits the sample of a `size`-byte allocation.
    ///
    /// # Signal safety
    /// `clock_gettime`, plain stores, one Release store, and at most a futex wake.
    pub(crate) fn commit(mut self, size: usize, live: Option<LiveRef>) {
        let c = &mut self.claim;
        c.write(SEQ_WORD, self.seq);
        c.write(TICKS_WORD, crate::clock::ticks() as u64);
        c.write(TID_WORD, u64::from(self.tid));
        c.write(SIZE_WORD, size as u64);
        c.write(LIVE_INDEX_WORD, live.map_or(0, |r| u64::from(r.index) + 1));
        c.write(LIVE_WORD, live.map_or(0, |r| r.word));
        let active = self.active;
        let Ticket { claim, _entered, .. } = self;
        if claim.commit().wake {
            (active.wake)();
        }
        drop(_entered);
    }
}

/// One sample as the drain hands it out.
#[derive(Debug)]
pub(crate) struct AllocRecord<'a> {
    pub ticks: i64,
    pub tid: u32,
    pub size: u64,
    pub live: Option<LiveRef>,
    /// Innermost first; frame 0 lies inside its instruction, the rest are return addresses.
    pub frames: &'a [u64],
    pub truncated: bool,
}

/// Decodes a drained record into `frames` (scratch) and hands it to `f`; `inner` and `outer`:
/// the recording's depth policy, as the record was written.
pub(crate) fn decode(
    words: &[u64],
    frames: &mut Vec<u64>,
    f: &mut dyn FnMut(&AllocRecord<'_>),
    inner: usize,
    outer: usize,
) {
    let w = |i: usize| words.get(i).copied().unwrap_or(0);
    let flags = w(LAYOUT_WORD) >> 48;
    // Where the walk's `KeepEnds` put the frames.
    let layout = crate::stack::WalkLayout::new(inner, outer, w(WALKED_WORD) as usize);
    frames.clear();
    frames.extend((0..layout.len()).map(|i| layout.word(i, |at| w(RECORD_HEADER_WORDS + at))));
    // Every frame is a return address; the first one kept is stored minus one, so that every
    // stack of the recording says "frame 0 lies inside its instruction" (as `unwind::capture_current` does).
    if let Some(first) = frames.first_mut() {
        if crate::stack::as_elided(*first).is_none() {
            *first = first.saturating_sub(1);
        }
    }
    let live_index = w(LIVE_INDEX_WORD);
    let rec = AllocRecord {
        ticks: w(TICKS_WORD) as i64,
        tid: w(TID_WORD) as u32,
        size: w(SIZE_WORD),
        live: (live_index != 0).then(|| LiveRef { index: (live_index - 1) as u32, word: w(LIVE_WORD) }),
        frames,
        truncated: layout.dropped() > 0 || flags & FLAG_CUT != 0,
    };
    f(&rec);
}

/// The block at `ptr` (with a header naming live entry `index`, if any) is freed.
#[inline]
pub(crate) fn freed_with_header(index: Option<u32>, ptr: *mut u8) {
    if let (Some(index), Some(t)) = (index, table()) {
        t.free_at(index, ptr as u64);
    }
}

/// The block at `ptr` is freed (live-set tracking without headers): clears its entry, if any.
#[inline]
pub(crate) fn freed(ptr: *mut u8) {
    if let Some(t) = table() {
        t.free(ptr as u64);
    }
}

fn tid(l: &AllocThreadState) -> u32 {
    // Relaxed: this thread's own cache.
    let t = l.tid.load(Ordering::Relaxed);
    if t != 0 {
        return t;
    }
    let t = crate::threads::gettid();
    // Relaxed: as above.
    l.tid.store(t, Ordering::Relaxed);
    t
}

/// The next gap: an exponential draw of mean `interval` bytes (at least 1).
fn draw_gap(l: &AllocThreadState, interval: u64) -> i64 {
    // Relaxed (both): this thread's own generator.
    let mut x = l.rng.load(Ordering::Relaxed);
    if x == 0 {
        let seed =
            u64::from(tid(l)) ^ (crate::clock::ticks() as u64).rotate_left(17) ^ (l as *const AllocThreadState as u64);
        x = splitmix64(seed) | 1;
    }
    // xorshift64*.
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    l.rng.store(x, Ordering::Relaxed);
    let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
    // Uniform in (0, 1): never 0, so the logarithm is finite.
    let u = ((r >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
    let gap = -u.ln() * interval as f64;
    gap.clamp(1.0, (i64::MAX / 4) as f64).ceil() as i64
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The bounds of the stack `sp` lies on: the mapping of /proc/self/maps that holds it now.
///
/// Only the thread's own stack is cached: the mapping `[stack]` (the main thread's) or the one
/// holding the thread's descriptor (`pthread_self()`: glibc places it at the top of every
/// thread's stack, given or not). That mapping stays mapped while the thread runs, whatever
/// runs on it. Any other mapping is a stack the program switched to (a fiber of
/// `makecontext`/`swapcontext`, a coroutine, an alternate signal stack), which it may free,
/// shrink, protect or reuse between two allocations: its bounds are read afresh for each sample,
/// so a walk never reads past the end of the stack the thread runs on now (a cached range once
/// let a walk follow a frame record into a fiber stack made inaccessible since; the fibers test
/// of `cli/tests/record_hosts.rs`).
///
/// # Signal safety
/// `pthread_self` (a register read), `open`, `read`, `close` (async-signal-safe), parsing into a
/// stack buffer.
fn stack_bounds(sp: usize) -> Option<(usize, usize)> {
    LOCAL
        .try_with(|l| {
            // Relaxed (all): this thread's own cache.
            let (lo, hi) = (l.stack_lo.load(Ordering::Relaxed), l.stack_hi.load(Ordering::Relaxed));
            if lo <= sp && sp < hi {
                return Some((lo, hi));
            }
            let (lo, hi, named_stack) = mapping_of(sp)?;
            // SAFETY: no preconditions; reads the thread pointer.
            let descriptor = unsafe { libc::pthread_self() } as usize;
            if named_stack || (lo <= descriptor && descriptor < hi) {
                l.stack_lo.store(lo, Ordering::Relaxed);
                l.stack_hi.store(hi, Ordering::Relaxed);
            }
            Some((lo, hi))
        })
        .ok()
        .flatten()
}

/// The mapping of /proc/self/maps that contains `addr`, read without allocating, and whether it
/// is the one named `[stack]`. Raw system calls: glibc's `open`, `read` and `close` are
/// cancellation points, and this runs inside the application's allocation. The descriptor is of
/// the shared table (the recorder's own table, `fds::privately`, would allocate): read by `pread`,
/// which moves no offset should the program `dup2` over its number meanwhile, and closed only if
/// it still names the file opened (`fds/mod.rs`).
fn mapping_of(addr: usize) -> Option<(usize, usize, bool)> {
    // SAFETY: a NUL-terminated path; the flags need no mode argument.
    let fd = unsafe {
        libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC)
    };
    if fd < 0 {
        return None;
    }
    let fd = fd as libc::c_int;
    let opened = crate::fds::identity(fd);
    let mut at: libc::off_t = 0;
    let mut buf = [0u8; 1024];
    // 0: the start address, 1: the end address, 2: the rest of the line, 3: the rest of the
    // matching line (its name).
    let (mut state, mut lo, mut hi) = (0u8, 0usize, 0usize);
    let mut found = None;
    // The tail of the matching line, compared with "[stack]" as it is read.
    const NAME: &[u8] = b"[stack]";
    let (mut name_at, mut last) = (0usize, 0u8);
    'read: loop {
        // SAFETY: `buf` is writable for its length; `fd` is ours.
        let n = unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), at) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        at += n as libc::off_t;
        for &b in buf.iter().take(n as usize) {
            match state {
                0 if b == b'-' => state = 1,
                0 => lo = lo.wrapping_mul(16).wrapping_add(hex(b)),
                1 if b == b' ' => {
                    state = if lo <= addr && addr < hi { 3 } else { 2 };
                }
                1 => hi = hi.wrapping_mul(16).wrapping_add(hex(b)),
                3 if b == b'\n' => {
                    found = Some((lo, hi, name_at == NAME.len() && last == b']'));
                    break 'read;
                }
                3 => {
                    // Matches "[stack]" at the end of the line (the name follows a space).
                    if b == b' ' {
                        name_at = 0;
                    } else if NAME.get(name_at) == Some(&b) {
                        name_at += 1;
                    } else {
                        name_at = NAME.len() + 1;
                    }
                    last = b;
                }
                _ if b == b'\n' => {
                    state = 0;
                    lo = 0;
                    hi = 0;
                }
                _ => {}
            }
        }
    }
    if found.is_none() && state == 3 {
        found = Some((lo, hi, name_at == NAME.len()));
    }
    if opened.is_some() && crate::fds::identity(fd) == opened {
        // SAFETY: our descriptor, still naming the file we opened.
        unsafe { libc::syscall(libc::SYS_close, fd) };
    } else {
        crate::fds::count_taken();
    }
    found
}

fn hex(b: u8) -> usize {
    match b {
        b'0'..=b'9' => (b - b'0') as usize,
        b'a'..=b'f' => (b - b'a' + 10) as usize,
        b'A'..=b'F' => (b - b'A' + 10) as usize,
        _ => 0,
    }
}

/// The live-set header of a sampled block (live-set tracking with the system allocator on
/// glibc, see `mod.rs`): the block is allocated `offset` bytes larger and aligned to at least 16,
/// the caller gets `base + offset`, and the 8 bytes before that pointer hold
/// `MAGIC << 48 | log2(offset) << 40 | (live entry + 1)`.
///
/// Telling a sampled block from any other on `dealloc` needs only those 8 bytes: before a block
/// of glibc's malloc (every pointer the system allocator returns, `posix_memalign` ones
/// included) they hold the chunk's size field, always below 2^48, so a word whose top 16 bits
/// are `MAGIC` (0xA11C, above 2^63) is never one; and they are always mapped.
pub(crate) mod header {
    use std::alloc::Layout;

    const MAGIC: u64 = 0xA11C;

    /// The layout of the enlarged block and the offset of the caller's pointer in it.
    #[inline]
    pub(crate) fn enlarged(layout: Layout) -> Option<(Layout, usize)> {
        let offset = layout.align().max(16);
        let size = layout.size().checked_add(offset)?;
        Some((Layout::from_size_align(size, offset).ok()?, offset))
    }

    /// Writes the header of the block whose caller pointer is `user`.
    ///
    /// # Safety
    /// `user` was made by `enlarged`: the 8 bytes before it belong to the block.
    #[inline]
    pub(crate) unsafe fn write(user: *mut u8, offset: usize, entry: Option<u32>) {
        let word = (MAGIC << 48) | (u64::from(offset.trailing_zeros()) << 40) | entry.map_or(0, |e| u64::from(e) + 1);
        // SAFETY: the caller's contract.
        unsafe { user.sub(8).cast::<u64>().write_unaligned(word) };
    }

    /// If `ptr` is a sampled block with a header: (offset of `ptr` in its block, live entry).
    ///
    /// # Safety
    /// `ptr` was returned by the system allocator on glibc (directly or by `write`'s caller):
    /// the 8 bytes before it are mapped.
    #[inline]
    pub(crate) unsafe fn read(ptr: *mut u8) -> Option<(usize, Option<u32>)> {
        // SAFETY: the caller's contract.
        let word = unsafe { ptr.sub(8).cast::<u64>().read_unaligned() };
        if word >> 48 != MAGIC {
            return None;
        }
        let offset = 1usize << ((word >> 40) & 0x3f);
        let entry = (word & 0xffff_ffff) as u32;
        Some((offset, entry.checked_sub(1)))
    }

    /// The layout the enlarged block was allocated with, from the caller's layout.
    #[inline]
    pub(crate) fn block_layout(layout: Layout, offset: usize) -> Layout {
        // SAFETY-free: `enlarged` accepted this layout when the block was made.
        Layout::from_size_align(layout.size() + offset, layout.align().max(16)).unwrap_or(layout)
    }
}

/// Whether the process's `malloc` is glibc's (not interposed by another allocator), so that the
/// 8 bytes before every block of the system allocator are glibc's chunk size field.
pub(crate) fn malloc_is_glibc() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: zeroed is a valid Dl_info; dladdr fills it for an address inside a loaded
        // object; `dli_fname` is then a NUL-terminated string owned by the loader.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let malloc = libc::malloc as *const libc::c_void;
            if libc::dladdr(malloc, &mut info) == 0 || info.dli_fname.is_null() {
                return false;
            }
            let name = std::ffi::CStr::from_ptr(info.dli_fname).to_string_lossy();
            name.rsplit('/').next().is_some_and(|file| file.starts_with("libc.so") || file.starts_with("libc-"))
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
