//! The flush-safe SamplerBuffer protocol (docs/sampler-protocol.md), free of signals and syscalls so
//! that the loom models in `loom-tests` run exactly this code. The § numbers below are sections of
//! that document.
//!
//! # Actors
//! - **Owner**: the sampled thread's SIGPROF handler, admitted by [`Core::admit`] (it writes
//!   through the [`Admission`] it gets: [`Core::write_record`], [`Core::write_sample`]) and, in
//!   normal context, the same thread's [`Core::retire_slot`] (unregistration / thread exit).
//! - **Retirer on behalf**: whoever retires the slot of a thread it proved dead
//!   ([`Core::retire_on_behalf`]); it takes the owner's role only once no handler is admitted to
//!   the slot (the gate, I13).
//! - **Refillers**: any normal-context thread holding the pool lock: the recorder thread (without
//!   L), a registering thread filling its own slot ([`Core::fill_spares`]), discovery, L holders
//!   after a pass ([`Core::refill_spares`]).
//! - **L holders**: whoever holds the chunk-writer lock L, proven by `&mut LockedState` (the caller
//!   keeps it inside its `Mutex`): the flusher ([`Core::drain`]), the recorder thread
//!   ([`Core::drain_full`]), stop ([`Core::drain_all_final`]).
//!
//! # Buffer states
//! CLEAN (in the pool or a slot's spare entry; `pos == flushed_pos == 0`) -> ACTIVE(T)
//! (`slot.active`) -> FULL (on the `full_head` Treiber stack; `pos` final) -> DRAINING (popped by an
//! L holder) -> CLEAN. Buffers and slots are allocated once in [`Core::new`] and never freed while
//! the `Core` lives, so a stale pointer is never dangling.
//!
//! # Locks (normal context only; the handler takes none)
//! L (the caller's) -> the sampler's lifecycle and registry locks (in `mod.rs`) -> the pool lock
//! (here; innermost: nothing is called while it is held). The pool moved out of L so that spares
//! are refilled while an L holder is busy for long (a flush serializing new stacks, a chunk
//! rotation): the recorder thread and registering threads refill without waiting for L.
//!
//! # Invariants (as numbered in docs/sampler-protocol.md §7; I7-I9 are the chunk writer's)
//! - I1: `0 <= flushed_pos <= pos <= capacity` whenever an L holder observes `pos` with Acquire.
//! - I2: words `>= pos` are written only by the owner; words in `[0, pos)` are never written until
//!   recycle, and recycle happens only in DRAINING under L.
//! - I3: each committed record is handed to the drain callback exactly once: only L holders parse,
//!   they start at `flushed_pos` and store the exact end they read.
//! - I4: a buffer becomes ACTIVE only through the owner's swap of a spare entry to null, and only
//!   pool-lock holders fill spare entries, with CLEAN buffers taken from the pool.
//! - I5: L holders keep no buffer or slot pointer past unlock (`LockedState` holds indices only).
//! - I6: per slot, `taken == written + lost_total` once every buffer has been drained.
//! - I10: the handler path takes no lock and allocates nothing.
//! - I11: owner code outside the handler closes the slot's gate (I13) with a compiler fence before
//!   it touches the slot's buffers.
//! - I12: no reference to a whole payload is ever formed; each word is its own `UnsafeCell`
//!   and is accessed through a raw pointer only in a range the accessor owns.
//! - I13 (gate): a handler touches a slot's buffers only between a successful admission (the
//!   slot's `suppress` word goes 0 -> INSIDE, Acquire) and the Release clear of INSIDE; a retirer
//!   sets RETIRED (no admission succeeds from then on) and takes the owner's role (swaps `active`
//!   and the spares) only after it has seen INSIDE clear with Acquire. So a slot has exactly one
//!   writer at a time even when it is retired on behalf of a thread that was wrongly taken for
//!   dead, and the retirer sees every write of the last admitted handler. The admitted handler's
//!   thread id is kept beside INSIDE: a handler that never returned (abandoned by a `siglongjmp`
//!   out of a signal handler nested in it, or by its thread's end) is told from one that is still
//!   running by its own thread, whose next admission or own retirement takes the gate over
//!   instead of waiting for it (the abandoned sample is counted lost).
//! - I14 (pool vs reap): spare entries are filled only under the pool lock, and only for LIVE
//!   slots; the reaper reclaims a retired slot's spares and marks it FREE under the pool lock, so a
//!   refill that saw the slot LIVE before its retirement cannot leave a buffer in a FREE slot.
//! - Order: each thread's records reach the drain callback in the order it wrote them: the full
//!   queue is drained oldest push first, and [`Core::drain`] hands out an active buffer only once
//!   every buffer its slot activated before it is drained (activation numbers).
//! - Fragments: a sample larger than a buffer is written by [`Core::write_sample`] as fragments
//!   k/n in consecutive buffers of its thread, all or nothing; L holders reassemble them with at
//!   most one sample in flight per slot, and a sample with a missing or out-of-order fragment is
//!   counted lost (once), never handed out. Drain callbacks see whole samples only.
//!
//! # Mutations (loom-tests/README.md)
//! `--cfg recorder_mutation="NAME"` weakens one step of this protocol on purpose, so that the loom
//! models can show they catch it: `pos_relaxed` (the commit store of `pos`), `refill_cas_relaxed`
//! (the CAS that fills a spare), `drain_without_gating` (the activation check of [`Core::drain`]),
//! `retire_without_gate` (a retirer does not wait for an admitted handler, I13), `claim_relaxed`
//! (the store that opens a claimed slot to its handler),
//! `push_relaxed` (the CAS that pushes a full buffer). Never set in a build that ships.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::sync::{
    compiler_fence, spin_wait, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Mutex, Ordering,
    UnsafeCell,
};
use crate::threads::RawComm;
use std::ptr;

/// The ordering a protocol step needs, or `Relaxed` when the named mutation is on (see the module
/// docs). Every use names the step's partner.
macro_rules! ordering {
    ($mutation:literal, $needed:expr) => {
        if cfg!(recorder_mutation = $mutation) {
            Ordering::Relaxed
        } else {
            $needed
        }
    };
}

/// Checks a protocol invariant on the L-holder side: always under loom (the models run in
/// release mode), in debug builds otherwise. Never used on the handler path.
macro_rules! protocol_assert {
    ($($t:tt)*) => {
        if cfg!(any(debug_assertions, loom)) {
            assert!($($t)*);
        }
    };
}

/// Checks a protocol invariant on the owner (handler) side, under loom only: a loom build never
/// runs in signal context, a shipped one never panics there.
macro_rules! owner_assert {
    ($($t:tt)*) => {
        if cfg!(loom) {
            assert!($($t)*);
        }
    };
}

mod drain;
#[cfg(all(test, not(loom)))]
mod fragment_tests;
mod retire;
mod write;

/// Words in a record header (see [`RecordHeader`]).
pub const HEADER_WORDS: usize = 8;

/// Record flag: the stack is not complete: frames were dropped (depth policy, walk limit) or the
/// walk ended before the outermost frame (broken frame-pointer chain, bounds, leaf only).
pub const FLAG_TRUNCATED: u8 = 1;
/// Record flag: only the leaf PC was recorded: the thread's stack bounds were unknown, or its
/// stack pointer lay outside them (a signal stack, a fiber) so no frame could be read safely.
pub const FLAG_LEAF_ONLY: u8 = 2;
/// Record flag: a wall-clock sample (a request of the wall sampler, `wall.rs`), not a CPU one.
pub const FLAG_WALL: u8 = 4;
/// Record kind of a CPU sample.
pub const KIND_EXEC_SAMPLE: u8 = 1;

/// Slot state: unused, may be claimed.
pub const SLOT_FREE: u8 = 0;
/// Slot state: owned by a live thread.
pub const SLOT_LIVE: u8 = 1;
/// Slot state: the owner retired it; an L holder reaps it back to FREE.
pub const SLOT_EXITED: u8 = 2;

/// `ThreadSlot::suppress` bit: a handler is admitted to the slot (I13).
const INSIDE: u32 = 1;
/// `ThreadSlot::suppress` bit: the slot is retired or not claimed; no handler is admitted (I13).
const RETIRED: u32 = 2;
/// `ThreadSlot::suppress`: the admitted handler's thread id is kept above the two bits (Linux
/// thread ids are below 2^22, `PID_MAX_LIMIT`).
const HOLDER_SHIFT: u32 = 2;

/// The `suppress` word of a handler of thread `tid` admitted to an open gate.
#[inline]
fn inside_by(tid: u32) -> u32 {
    INSIDE | (tid << HOLDER_SHIFT)
}

/// Whether `word` says a handler of thread `tid` is admitted.
#[inline]
fn held_by(word: u32, tid: u32) -> bool {
    word & INSIDE != 0 && word >> HOLDER_SHIFT == tid & (u32::MAX >> HOLDER_SHIFT)
}

/// How many times a retiring owner yields to another thread's handler holding its slot's gate
/// (a stale signal's, leaving within instructions) before it gives the slot up (see
/// [`Core::retire_slot`]).
const RETIRE_YIELDS: u32 = 100_000;

/// The fixed part of a record, as the owner writes it.
///
/// Layout, one u64 word each: w0 = nframes (bits 0..16) | flags (16..24) | kind (24..32) |
/// fragment index k (32..48) | fragment count n (48..64); w1 = ticks; w2 = tid (low 32) | slot
/// index (high 32); w3 = sample id; w4 = stack pointer at the sample; w5 = the thread's span id
/// (0: none); w6, w7 = the thread's name (`comm`) when the sample was taken. Then `nframes` IPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHeader {
    /// CLOCK_MONOTONIC ns.
    pub ticks: i64,
    /// Kernel thread id of the sampled thread.
    pub tid: u32,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Fragment index k of n (see [`Core::write_sample`]; 0 of 1 for a whole sample).
    pub frag_index: u16,
    /// Fragment count n.
    pub frag_count: u16,
    /// Process-wide sample id.
    pub sample_id: u64,
    /// Stack pointer of the interrupted context.
    pub sp: u64,
    /// The span the thread was in (its span word; 0: none).
    pub span: u64,
    /// The thread's name (`comm`) at the sample: a thread renamed between two samples has each
    /// written under the name it had (all zeros: not known).
    pub comm: RawComm,
}

/// One decoded record, handed to the drain callback.
#[derive(Debug, Clone, Copy)]
pub struct SampleRecord<'a> {
    /// Kernel thread id of the sampled thread (not the drainer's).
    pub tid: u32,
    /// The tick at capture (`crate::clock::ticks_in_signal_handler`).
    pub ticks: i64,
    /// Frames were dropped (depth policy, walk limit); `ips` may hold an elided marker.
    pub truncated: bool,
    /// Stack bounds were not known yet: `ips` holds the leaf PC only.
    pub leaf_only: bool,
    /// A wall-clock sample (served request of the wall sampler), not a CPU one.
    pub wall: bool,
    /// Innermost first: `ips[0]` is the interrupted PC, the rest are return addresses
    /// (symbolize `ip - 1` for those).
    pub ips: &'a [u64],
    /// Process-wide sample id, unique and increasing per thread.
    pub sample_id: u64,
    /// Stack pointer at the sample.
    pub sp: u64,
    /// The span the thread was in (0: none).
    pub span: u64,
    /// The thread's name (`comm`) when the sample was taken (all zeros: not known).
    pub comm: RawComm,
    /// Always 0: callbacks receive reassembled samples only.
    pub frag_index: u16,
    /// Always 1 (see `frag_index`).
    pub frag_count: u16,
}

/// A per-thread sample buffer: payload words plus the two positions of the protocol.
#[derive(Debug)]
pub struct SamplerBuffer {
    index: u32,
    /// End of the committed records, in words.
    /// Written by: the owner (handler), monotonic while ACTIVE; reset by an L holder in DRAINING.
    /// Read by: owner (Relaxed), L holders (Acquire). Invariants: I1, I2.
    pos: AtomicUsize,
    /// End of the records already handed to a drain callback, in words.
    /// Written and read by: L holders only. Invariants: I1, I3.
    flushed_pos: AtomicUsize,
    /// Full-queue link. Written by: the pushing owner before its Release CAS of `full_head`.
    /// Read by: the L holder that swapped the list out (Acquire).
    next: AtomicPtr<SamplerBuffer>,
    /// `(slot index << 40) | n` while this buffer is (or was) the n-th buffer its slot made
    /// ACTIVE; `NOT_ACTIVATED` while CLEAN. Written by: the owner when it makes the buffer
    /// ACTIVE (Relaxed; published by the Release store of `active` and the Release push);
    /// reset by the recycling L holder. Read by: L holders.
    activation: AtomicU64,
    words: Words,
}

/// A buffer's words: a slice of its core's [`WordBlock`].
#[cfg(not(loom))]
#[derive(Debug)]
struct Words(&'static [UnsafeCell<u64>]);

// SAFETY: the slice is this buffer's alone (the block's chunks do not overlap) and lives as long
// as the core that owns both: moving the buffer to another thread is moving the `Box` of words
// it replaces, which was `Send`.
#[cfg(not(loom))]
unsafe impl Send for Words {}

#[cfg(not(loom))]
impl std::ops::Deref for Words {
    type Target = [UnsafeCell<u64>];
    fn deref(&self) -> &[UnsafeCell<u64>] {
        self.0
    }
}
/// A buffer's words (loom's cells are not plain words: each buffer has its own).
#[cfg(loom)]
type Words = Box<[UnsafeCell<u64>]>;

/// Every buffer's words in one zeroed allocation, which the allocator maps from the kernel's
/// zero pages without writing them: a buffer's pages become resident when samples are first
/// written there, not at start (a core's buffers, 6 MiB by default, are allocated at start and
/// most are never used by a program with few threads; one allocation per buffer was written
/// whole by the allocator's zeroing: `scripts/footprint.sh`). Declared after the buffers in
/// [`Core`], so it is dropped after them.
#[cfg(not(loom))]
struct WordBlock(#[allow(dead_code)] Box<[UnsafeCell<u64>]>);
#[cfg(loom)]
struct WordBlock;

impl std::fmt::Debug for WordBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WordBlock")
    }
}

/// `n` buffers of `capacity` words, all 0, and the block that holds them.
#[cfg(not(loom))]
fn word_block(n: usize, capacity: usize) -> (WordBlock, Vec<Words>) {
    let words = vec![0u64; n * capacity].into_boxed_slice();
    // SAFETY: `UnsafeCell<u64>` (ours and std's) is `repr(transparent)` over `u64`: the same
    // size, alignment and layout, so the slice and its allocation are reinterpreted as they are.
    let block: Box<[UnsafeCell<u64>]> = unsafe { Box::from_raw(Box::into_raw(words) as *mut [UnsafeCell<u64>]) };
    // SAFETY: the slices borrow the block's heap allocation, which never moves and is freed only
    // when the `Core` holding the block drops it, after the buffers holding the slices.
    let all: &'static [UnsafeCell<u64>] = unsafe { &*(&*block as *const [UnsafeCell<u64>]) };
    (WordBlock(block), all.chunks(capacity).map(Words).collect())
}

#[cfg(loom)]
fn word_block(n: usize, capacity: usize) -> (WordBlock, Vec<Words>) {
    (WordBlock, (0..n).map(|_| (0..capacity).map(|_| UnsafeCell::new(0)).collect()).collect())
}

const NOT_ACTIVATED: u64 = u64::MAX;
const ACTIVATION_MASK: u64 = (1 << 40) - 1;

impl SamplerBuffer {
    fn new(index: u32, words: Words) -> SamplerBuffer {
        SamplerBuffer {
            index,
            pos: AtomicUsize::new(0),
            flushed_pos: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            activation: AtomicU64::new(NOT_ACTIVATED),
            words,
        }
    }

    fn capacity(&self) -> usize {
        self.words.len()
    }

    /// Makes the buffer's pages resident and writable before a thread gets it (normal context,
    /// pool lock held): its words come from one zeroed allocation whose pages the kernel maps on
    /// first write, and a first write in the SIGPROF handler paid the page fault and its zeroing
    /// there (handler p99 at 16 frames 4.4-6.4 µs against 1.3-2.3 µs when buffers were written
    /// at start; README, handler-time). A buffer never handed out stays unmapped. Contents are
    /// left as they are. Kernels before 5.14 answer EINVAL: the pages then fault as before.
    #[cfg(not(loom))]
    pub(super) fn prefault(&self) {
        /// `MADV_POPULATE_WRITE` (Linux 5.14, the same on every architecture).
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let start = self.words.as_ptr() as usize;
        let end = start + std::mem::size_of_val::<[UnsafeCell<u64>]>(&self.words);
        let lo = start / page * page;
        let hi = end.div_ceil(page) * page;
        // SAFETY: the range covers this buffer's words, rounded out to whole pages of the block's
        // mapping (a neighbour's words at most); MADV_POPULATE_WRITE faults pages in writable and
        // changes no byte.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, MADV_POPULATE_WRITE) };
    }

    #[cfg(loom)]
    pub(super) fn prefault(&self) {}

    /// Writes one word. Returns false (and writes nothing) out of range.
    ///
    /// Only the owner calls this, only at indices `>= pos` (I2).
    #[inline(always)]
    fn write_word(&self, at: usize, value: u64) -> bool {
        match self.words.get(at) {
            Some(cell) => {
                // SAFETY: I2: `at >= pos` and only the owner writes above `pos`; L holders read only
                // below a `pos` they loaded with Acquire, so no access to this word is concurrent.
                cell.with_mut(|p| unsafe { p.write(value) });
                true
            }
            None => false,
        }
    }

    /// Reads one word; 0 out of range.
    ///
    /// Only L holders call this, only at indices `< pos` loaded with Acquire (I1, I2).
    #[inline(always)]
    fn read_word(&self, at: usize) -> u64 {
        match self.words.get(at) {
            // SAFETY: I2: the word lies below a `pos` this L holder loaded with Acquire (pairs with
            // the owner's Release commit), so it is initialized and no longer written.
            Some(cell) => cell.with(|p| unsafe { p.read() }),
            None => 0,
        }
    }
}

/// Per-thread state. Never freed while the `Core` lives; reused after its thread is reaped.
#[derive(Debug)]
pub struct ThreadSlot {
    index: u32,
    /// The buffer the handler writes. Written by: owner only (rotation, retire). Read by: owner
    /// (Relaxed), L holders (Acquire).
    active: AtomicPtr<SamplerBuffer>,
    /// CLEAN buffers ready for rotation (one or more: an oversized sample takes several in one
    /// handler call, see [`Core::write_sample`]). Each entry is the spare handoff (§2 step 5) on its own:
    /// L holders fill it (null -> buf, Release CAS); the owner empties it (swap to null, Acquire).
    /// Only the owner empties entries, so an entry the owner sees non-null stays non-null until
    /// the owner takes it.
    spares: Box<[AtomicPtr<SamplerBuffer>]>,
    /// Buffers this slot has made ACTIVE (ever; owner only, Relaxed).
    activations: AtomicU64,
    /// The gate (I13): `INSIDE` (with the handler's tid above it) while a handler is admitted,
    /// `RETIRED` from retirement until the next claim (FREE slots keep it). Handlers set INSIDE
    /// only from 0 (Acquire CAS) and clear it (Release); retirers set RETIRED (Acquire) and wait
    /// for INSIDE to clear; a claim stores 0 (Release).
    suppress: AtomicU32,
    /// `SLOT_FREE` / `SLOT_LIVE` / `SLOT_EXITED`.
    state: AtomicU8,
    /// The owner's kernel thread id; the handler drops signals whose thread is not this one.
    tid: AtomicU32,
    /// Lost samples not yet reported by `take_lost` (owner adds; L holders add samples whose
    /// fragments were incomplete, and swap it to 0).
    lost: AtomicU64,
    /// Statistics (I6): samples attempted, lost (ever), handed to a drain callback.
    taken: AtomicU64,
    lost_total: AtomicU64,
    written: AtomicU64,
    /// Of those, the wall-clock samples (`FLAG_WALL`): taken and written. A wall sample taken and
    /// not written is lost (I6), so the wall sampler's accounting stays exact while CPU samples
    /// are lost beside it.
    wall_taken: AtomicU64,
    wall_written: AtomicU64,
    /// Stack bounds [lo, hi) for the frame walk; `hi == 0` means unknown (leaf only). `lo` is
    /// as low as the stack may ever reach (a growing main-thread stack's limit); words in
    /// `[verified_lo, hi)` are known to be mapped. The handler reads below `verified_lo` only after
    /// checking that the stack grew there (`signal.rs`), and then lowers it.
    stack_lo: AtomicUsize,
    stack_verified_lo: AtomicUsize,
    stack_hi: AtomicUsize,
    /// Last sampled stack pointer, so an L holder can find bounds for discovered threads.
    last_sp: AtomicUsize,
    /// The owner's span word (`crate::span_context`): a cell that lives as long as the process
    /// (cells are pooled, never freed), or null.
    span_cell: AtomicPtr<AtomicU64>,
}

impl ThreadSlot {
    fn new(index: u32, nspares: usize) -> ThreadSlot {
        ThreadSlot {
            index,
            active: AtomicPtr::new(ptr::null_mut()),
            spares: (0..nspares.max(1)).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
            activations: AtomicU64::new(0),
            suppress: AtomicU32::new(RETIRED),
            state: AtomicU8::new(SLOT_FREE),
            tid: AtomicU32::new(0),
            lost: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            lost_total: AtomicU64::new(0),
            written: AtomicU64::new(0),
            wall_taken: AtomicU64::new(0),
            wall_written: AtomicU64::new(0),
            stack_lo: AtomicUsize::new(0),
            stack_verified_lo: AtomicUsize::new(0),
            stack_hi: AtomicUsize::new(0),
            last_sp: AtomicUsize::new(0),
            span_cell: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Points the slot at its owner's span word (null: none).
    pub fn set_span_cell(&self, cell: *const AtomicU64) {
        // Release: pairs with the Acquire load in `span`; the cell is initialized before.
        self.span_cell.store(cell.cast_mut(), Ordering::Release);
    }

    /// The owner's current span id (0: none or unknown).
    ///
    /// # Signal safety
    /// Two atomic loads; the cell is never freed.
    #[inline]
    pub fn span(&self) -> u64 {
        // Acquire: pairs with the Release store in `set_span_cell`.
        let cell = self.span_cell.load(Ordering::Acquire);
        // SAFETY: non-null cells come from `span_context`, which never frees them.
        match unsafe { cell.as_ref() } {
            // Relaxed: the owner's own word, written by the same thread the handler interrupts.
            Some(cell) => cell.load(Ordering::Relaxed),
            None => 0,
        }
    }

    /// Index of this slot in the table.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The owner's tid (Relaxed; see [`Core::admit`] for the handler's ordered read).
    pub fn tid(&self) -> u32 {
        // Relaxed: informational; the ordered read is in `Core::admit`.
        self.tid.load(Ordering::Relaxed)
    }

    /// `SLOT_*` state (Acquire: pairs with the Release stores in `claim_slot`/`retire_slot`/`reap`).
    pub fn state(&self) -> u8 {
        // Acquire: pairs with the Release stores of `state` in `Core::claim_slot`,
        // `Core::retire_slot` and `Core::reap_exited`.
        self.state.load(Ordering::Acquire)
    }

    /// Stack bounds `(lo, verified_lo, hi)`; `hi == 0` when unknown.
    ///
    /// # Signal safety
    /// Three atomic loads.
    #[inline]
    pub fn stack_bounds(&self) -> StackBounds {
        // Acquire: pairs with the Release store of `stack_hi` in `set_stack_bounds`; `stack_lo`
        // and `stack_verified_lo` (stored before it) are then current.
        let hi = self.stack_hi.load(Ordering::Acquire);
        // Relaxed: ordered by the Acquire load of `stack_hi` above.
        let lo = self.stack_lo.load(Ordering::Relaxed);
        // Relaxed: ordered by the Acquire load of `stack_hi`; later it only decreases, to
        // addresses someone checked were mapped (any value read is a valid bound).
        let verified_lo = self.stack_verified_lo.load(Ordering::Relaxed);
        // Reading an older `hi` than `lo` (bounds replaced meanwhile) can give lo > hi: no
        // `clamp`, which would panic; such bounds admit no stack pointer anyway.
        StackBounds { lo, verified_lo: verified_lo.max(lo).min(hi), hi }
    }

    /// Publishes stack bounds for the handler's walk: the stack may reach down to `lo`;
    /// `[verified_lo, hi)` is mapped. `hi == 0`: unknown.
    pub fn set_stack_bounds(&self, lo: usize, verified_lo: usize, hi: usize) {
        // Relaxed: published by the Release store of `stack_hi` below.
        self.stack_lo.store(lo, Ordering::Relaxed);
        // Relaxed: as above.
        self.stack_verified_lo.store(verified_lo, Ordering::Relaxed);
        // Release: publishes both; pairs with the Acquire load in `stack_bounds` (handler).
        self.stack_hi.store(hi, Ordering::Release);
    }

    /// Lowers the verified bound to `addr` (the stack is known to be mapped from `addr` up).
    ///
    /// # Signal safety
    /// One atomic RMW.
    #[inline]
    pub fn lower_verified(&self, addr: usize) {
        // Relaxed: a bound that only decreases, each value checked mapped by its writer; the
        // handler reads it with the bounds (see `stack_bounds`).
        self.stack_verified_lo.fetch_min(addr, Ordering::Relaxed);
    }

    /// Records the stack pointer of the latest sample.
    ///
    /// # Signal safety
    /// One atomic store.
    #[inline]
    pub fn note_sp(&self, sp: usize) {
        // Relaxed: a hint for `discover_threads`; nothing is published through it.
        self.last_sp.store(sp, Ordering::Relaxed);
    }

    /// The stack pointer of the latest sample (0 if none).
    pub fn last_sp(&self) -> usize {
        // Relaxed: a hint only (see `note_sp`).
        self.last_sp.load(Ordering::Relaxed)
    }
}

/// A thread's stack bounds as the handler's walk uses them (see [`ThreadSlot::stack_bounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StackBounds {
    /// Lowest address the stack may reach.
    pub lo: usize,
    /// `[verified_lo, hi)` is known to be mapped.
    pub verified_lo: usize,
    /// Top of the stack (exclusive); 0 when unknown.
    pub hi: usize,
}

/// Per-slot statistics (see [`Core::slot_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotStats {
    /// Owner tid.
    pub tid: u32,
    /// Samples attempted by the handler for this slot.
    pub taken: u64,
    /// Records handed to a drain callback.
    pub written: u64,
    /// Samples counted lost.
    pub lost: u64,
    /// Wall-clock samples taken (included in `taken`).
    pub wall_taken: u64,
    /// Wall-clock samples handed to a drain callback (included in `written`).
    pub wall_written: u64,
}

/// State only L holders touch: reassembly, ordering and scratch space. It holds indices, never
/// pointers (I5), so it is `Send` and carries no lifetime.
#[derive(Debug)]
pub struct LockedState {
    core_id: usize,
    scratch: Vec<u64>,
    exited: Vec<bool>,
    /// Lost samples of slots reaped since the last `take_lost` (their thread exited before its
    /// losses were collected): reported by the next `take_lost`, never dropped (I6).
    reaped_lost: Vec<(u32, u64)>,
    /// Per slot: the fragmented sample being reassembled (at most one per thread).
    pending: Vec<Pending>,
    /// Per slot: activation number of the slot's next buffer not yet drained from the full
    /// queue (see `SamplerBuffer::activation`). [`Core::drain`] hands out the records of an
    /// active buffer only when it is this one, i.e. every older buffer of the thread is done.
    expected: Vec<u64>,
}

/// Reassembly state of one slot (L holders only).
#[derive(Debug, Default)]
struct Pending {
    /// A sample is in flight.
    open: bool,
    sample_id: u64,
    /// Next expected fragment index, and the fragment count.
    next: u16,
    count: u16,
    tid: u32,
    ticks: i64,
    flags: u8,
    sp: u64,
    span: u64,
    comm: RawComm,
    frames: Vec<u64>,
    /// The last sample discarded as incomplete (already counted lost): its stray fragments are
    /// dropped without counting it again.
    discarded: u64,
}

/// The shared protocol state: slot table, buffer arena, full queue, wakeup flag, counters.
#[derive(Debug)]
pub struct Core {
    slots: Box<[ThreadSlot]>,
    buffers: Box<[SamplerBuffer]>,
    /// The buffers' words (after `buffers`: dropped after them).
    _words: WordBlock,
    /// CLEAN buffers in no slot (indices). Refillers pop, L holders' recycles push, under the
    /// lock (I4, I14); the handler never touches it. Its capacity is the number of buffers, so a
    /// push never allocates.
    pool: Mutex<Vec<u32>>,
    /// Treiber stack of FULL buffers. Owners push (Release CAS); L holders swap it out (Acquire).
    full_head: AtomicPtr<SamplerBuffer>,
    /// Set (Release swap) by an owner after a push or a missing spare; cleared (Acquire swap) by
    /// the recorder in [`Core::take_pending`].
    recorder_pending: AtomicBool,
    /// Number of wakeups posted (the syscall, if any, is done by the caller of `write_record`).
    wakeups: AtomicU64,
    next_sample_id: AtomicU64,
    /// Samples that reached no slot (no sampler, stale signal, foreign thread).
    unattributed: AtomicU64,
    /// Statistics of reaped slots (L holders write, Relaxed).
    retired_taken: AtomicU64,
    retired_written: AtomicU64,
    retired_lost: AtomicU64,
    retired_wall_taken: AtomicU64,
    retired_wall_written: AtomicU64,
    max_record_words: usize,
    /// Where the next `claim_slot` starts looking (claims are serialized by their caller).
    claim_hint: AtomicUsize,
}

/// Outcome of [`Core::write_record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The record was committed (else it was counted lost).
    pub committed: bool,
    /// `recorder_pending` went from clear to set: the caller must post the wakeup syscall.
    pub wake: bool,
}

/// What [`Core::retire_own`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    /// Post the recorder wakeup.
    pub wake: bool,
    /// A handler of the owner that never returned held the gate: taken over, its sample counted
    /// lost.
    pub abandoned: bool,
    /// Another thread's handler held the gate and never left: the slot was given up as it is.
    pub given_up: bool,
}

/// A handler admitted to a slot (I13): the only way to write its buffers. Dropping it clears the
/// slot's INSIDE bit (Release), so a retirer waiting for the gate sees every write made through it.
#[derive(Debug)]
pub struct Admission<'a> {
    slot: &'a ThreadSlot,
    /// It took over the admission of a handler of the same thread that never returned.
    recovered: bool,
}

impl Admission<'_> {
    /// The slot the handler was admitted to.
    ///
    /// # Signal safety
    /// A field read.
    #[inline]
    pub fn slot(&self) -> &ThreadSlot {
        self.slot
    }

    /// Whether this admission took over one that an earlier handler of the same thread never
    /// released (it was abandoned half-way; its sample was counted lost). The caller releases
    /// what else that handler held.
    ///
    /// # Signal safety
    /// A field read.
    #[inline]
    pub fn recovered(&self) -> bool {
        self.recovered
    }
}

impl Drop for Admission<'_> {
    /// # Signal safety
    /// One atomic RMW.
    #[inline]
    fn drop(&mut self) {
        // Release: publishes this handler's writes (active, pos, words, pushes) to a retirer;
        // pairs with the Acquire RMW / load of `suppress` in `close_gate`. Clears INSIDE and the
        // holder's tid.
        self.slot.suppress.fetch_and(RETIRED, Ordering::Release);
    }
}

/// Writes the IPs of one record, in order, after the header.
#[derive(Debug)]
pub struct FrameSink<'a> {
    buf: &'a SamplerBuffer,
    at: usize,
    end: usize,
}

impl FrameSink<'_> {
    /// Appends one IP; ignored once the reserved frame count is reached.
    ///
    /// # Signal safety
    /// One plain store into the owner's own region.
    #[inline(always)]
    pub fn push(&mut self, ip: u64) {
        if self.at < self.end && self.buf.write_word(self.at, ip) {
            self.at += 1;
        }
    }
}

impl Core {
    /// Allocates `nslots` slots and `nbuffers` buffers of `capacity_words` words each; every
    /// buffer starts CLEAN in the pool.
    ///
    /// # Panics
    /// If `capacity_words < HEADER_WORDS + 1` or a count exceeds `u32::MAX`.
    pub fn new(nslots: usize, nbuffers: usize, capacity_words: usize) -> (Core, LockedState) {
        Core::with_spares(nslots, nbuffers, capacity_words, 1)
    }

    /// Bytes of the buffers' words resident now.
    #[cfg(not(loom))]
    pub fn resident_buffer_bytes(&self) -> usize {
        crate::resident::resident_bytes(&self._words.0)
    }

    /// Like [`Core::new`], with `spares` spare entries per slot (at least 1): how many buffers a
    /// slot holds besides its active one, and so how many an oversized sample can span beyond it.
    ///
    /// # Panics
    /// As [`Core::new`].
    pub fn with_spares(nslots: usize, nbuffers: usize, capacity_words: usize, spares: usize) -> (Core, LockedState) {
        assert!(capacity_words > HEADER_WORDS, "buffer too small for one record");
        assert!(nslots < u32::MAX as usize && nbuffers < u32::MAX as usize);
        let (block, words) = word_block(nbuffers, capacity_words);
        let core = Core {
            slots: (0..nslots).map(|i| ThreadSlot::new(i as u32, spares)).collect(),
            buffers: words.into_iter().enumerate().map(|(i, w)| SamplerBuffer::new(i as u32, w)).collect(),
            _words: block,
            pool: Mutex::new((0..nbuffers as u32).rev().collect()),
            full_head: AtomicPtr::new(ptr::null_mut()),
            recorder_pending: AtomicBool::new(false),
            wakeups: AtomicU64::new(0),
            next_sample_id: AtomicU64::new(1),
            unattributed: AtomicU64::new(0),
            retired_taken: AtomicU64::new(0),
            retired_written: AtomicU64::new(0),
            retired_lost: AtomicU64::new(0),
            retired_wall_taken: AtomicU64::new(0),
            retired_wall_written: AtomicU64::new(0),
            max_record_words: capacity_words,
            claim_hint: AtomicUsize::new(0),
        };
        let locked = LockedState {
            core_id: 0,
            scratch: Vec::new(),
            exited: Vec::new(),
            reaped_lost: Vec::new(),
            pending: (0..nslots).map(|_| Pending::default()).collect(),
            expected: vec![0; nslots],
        };
        (core, locked)
    }

    /// Binds `locked` to this core's address, so later calls can check they belong together.
    /// Call once the `Core` has its final address (e.g. after boxing it).
    pub fn bind(&self, locked: &mut LockedState) {
        locked.core_id = self as *const Core as usize;
    }

    /// # Panics
    /// If `locked` belongs to another (or a stopped) sampler: its indices would name the wrong
    /// buffers.
    fn check_locked(&self, locked: &LockedState) {
        assert!(
            locked.core_id == 0 || locked.core_id == self as *const Core as usize,
            "SamplerLocked of another sampler"
        );
    }

    /// Makes `locked` unusable with any sampler (after stop).
    pub fn unbind(&self, locked: &mut LockedState) {
        locked.core_id = usize::MAX;
    }

    /// Number of CLEAN buffers in the pool.
    pub fn free_buffers(&self) -> usize {
        self.pool.lock().len()
    }

    /// The slot table.
    pub fn slots(&self) -> &[ThreadSlot] {
        &self.slots
    }

    /// Slot `index`, if it exists.
    ///
    /// # Signal safety
    /// A bounds-checked index.
    #[inline]
    pub fn slot(&self, index: usize) -> Option<&ThreadSlot> {
        self.slots.get(index)
    }

    /// Largest record (header + frames) in words that fits a buffer.
    pub fn max_record_words(&self) -> usize {
        self.max_record_words
    }

    /// Next process-wide sample id.
    ///
    /// # Signal safety
    /// One atomic RMW.
    #[inline]
    pub fn next_sample_id(&self) -> u64 {
        // Relaxed: uniqueness comes from the RMW itself; nothing is published through it.
        self.next_sample_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a sample that reached no slot.
    ///
    /// # Signal safety
    /// One atomic RMW.
    #[inline]
    pub fn count_unattributed(&self) {
        // Relaxed: statistics only.
        self.unattributed.fetch_add(1, Ordering::Relaxed);
    }

    /// Samples that reached no slot.
    pub fn unattributed(&self) -> u64 {
        // Relaxed: statistics only.
        self.unattributed.load(Ordering::Relaxed)
    }

    // ---------------------------------------------------------------- owner side (normal context)

    /// Claims a FREE slot for thread `tid` with stack bounds `bounds` (`hi == 0`: unknown).
    /// The slot is LIVE with no buffers; [`Core::fill_spares`] (or any refill) supplies them.
    ///
    /// Callers must serialize claims (the sampler's registry lock); L holders may reap
    /// concurrently.
    pub fn claim_slot(&self, tid: u32, bounds: StackBounds) -> Option<&ThreadSlot> {
        // Start where the last claim ended, so claiming thousands of slots is not quadratic.
        // Relaxed: claims are serialized by the caller; a stale hint only costs a longer scan.
        let from = self.claim_hint.load(Ordering::Relaxed);
        let n = self.slots.len();
        for k in 0..n {
            let Some(slot) = self.slots.get((from + k) % n.max(1)) else { continue };
            // Relaxed: a hint that skips the RMW on slots in use; the CAS below decides.
            if slot.state.load(Ordering::Relaxed) != SLOT_FREE {
                continue;
            }
            // Acquire (success): pairs with the Release store of FREE in `reap_exited`, so the
            // reaper's resets of the counters and buffer pointers are visible. Relaxed (failure):
            // nothing is read.
            if slot.state.compare_exchange(SLOT_FREE, SLOT_LIVE, Ordering::Acquire, Ordering::Relaxed).is_err() {
                continue;
            }
            // Relaxed: see above.
            self.claim_hint.store((from + k + 1) % n.max(1), Ordering::Relaxed);
            // Relaxed: published by the Release store of `suppress` below.
            slot.tid.store(tid, Ordering::Relaxed);
            slot.set_stack_bounds(bounds.lo, bounds.verified_lo, bounds.hi);
            // Relaxed: published by the Release store of `suppress` below.
            slot.last_sp.store(0, Ordering::Relaxed);
            // Release: opens the gate (I13; FREE slots keep RETIRED, so no handler is inside) and
            // publishes `tid` and the bounds; pairs with the Acquire CAS of `suppress` in `admit`
            // (a handler admitted after this sees the new tid).
            slot.suppress.store(0, ordering!("claim_relaxed", Ordering::Release));
            return Some(slot);
        }
        None
    }

    /// Handler admission (I13) of a sample (a wall-clock one if `wall`): the slot belongs to
    /// thread `tid` and is not retired. On success
    /// the handler holds the slot's gate until it drops the returned [`Admission`], and writes
    /// through it. Counts the sample as taken when the slot is `tid`'s (and lost when it is
    /// retired or, rarely, a stale handler of another thread holds the gate); a slot of another
    /// thread counts it unattributed.
    ///
    /// `tid` is the calling thread's. A gate held by a handler of that same thread is a handler
    /// that will never return: the sampler's handler does not nest in itself (its signal is
    /// blocked while it runs), so the holder was abandoned half-way (a `siglongjmp` out of a
    /// signal handler nested in it). Its sample is counted lost, and this handler takes the
    /// admission over ([`Admission::recovered`]) rather than lose every later sample of the
    /// thread; on a retired slot it only releases the gate for the retirer.
    ///
    /// # Signal safety
    /// Atomic loads and RMWs only.
    #[inline]
    pub fn admit<'a>(&self, slot: &'a ThreadSlot, tid: u32, wall: bool) -> Option<Admission<'a>> {
        // Acquire (success): pairs with the Release store in `claim_slot` (the new tid and bounds
        // are visible) and with the Release clear of INSIDE by the previous admission. Acquire
        // (failure): the tid check below reads the claimer's tid.
        match slot.suppress.compare_exchange(0, inside_by(tid), Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                // Relaxed: ordered by the Acquire CAS above.
                if slot.tid.load(Ordering::Relaxed) != tid {
                    // A stale signal of a thread whose slot was reused.
                    // Release: pairs with the Acquire of a retirer waiting for the gate.
                    slot.suppress.fetch_and(RETIRED, Ordering::Release);
                    self.count_unattributed();
                    return None;
                }
                Self::count_taken(slot, wall);
                Some(Admission { slot, recovered: false })
            }
            Err(word) => {
                // Relaxed: ordered by the Acquire failure load above.
                if slot.tid.load(Ordering::Relaxed) != tid || slot.state() == SLOT_FREE {
                    self.count_unattributed();
                    return None;
                }
                if held_by(word, tid) {
                    // The abandoned handler's sample: taken, never written.
                    Self::count_lost(slot);
                    Self::count_taken(slot, wall);
                    if word & RETIRED == 0 {
                        return Some(Admission { slot, recovered: true });
                    }
                    // Retired on behalf (discovery took this thread for dead): let the retirer
                    // in; this sample is lost too. Release: pairs with the retirer's Acquire in
                    // `close_gate`.
                    slot.suppress.fetch_and(RETIRED, Ordering::Release);
                    Self::count_lost(slot);
                    return None;
                }
                // Retired (the owner's own exit in progress, or on its behalf), or a stale handler
                // of another thread holds the gate for a moment: this thread's sample is lost.
                Self::count_taken(slot, wall);
                Self::count_lost(slot);
                None
            }
        }
    }

    /// Counts a sample of the admitted slot as lost (after [`Core::admit`] counted it taken).
    ///
    /// # Signal safety
    /// Two atomic RMWs.
    #[inline]
    pub fn lose(&self, adm: &Admission<'_>) {
        Self::count_lost(adm.slot);
    }

    #[inline]
    fn count_taken(slot: &ThreadSlot, wall: bool) {
        // Relaxed: statistics; single writer (the admitted owner, or the handler that holds the
        // gate), read by L holders for reports only.
        slot.taken.fetch_add(1, Ordering::Relaxed);
        if wall {
            // Relaxed: as `taken`.
            slot.wall_taken.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline]
    fn count_lost(slot: &ThreadSlot) {
        // Relaxed: statistics; reported through `take_lost` (swap) by an L holder.
        slot.lost.fetch_add(1, Ordering::Relaxed);
        // Relaxed: statistics only.
        slot.lost_total.fetch_add(1, Ordering::Relaxed);
    }
}
