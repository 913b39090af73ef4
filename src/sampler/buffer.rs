//! The flush-safe SamplerBuffer protocol (sampler-protocol.md §4), free of signals and syscalls so
//! that the loom models in `loom-tests` run exactly this code.
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
//! # Invariants (numbering of sampler-protocol.md §4.7, plus I13-I14 added here)
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
//! `retire_without_gate` (a retirer does not wait for an admitted handler, finding 1 of the
//! 2026-11-30 review), `claim_relaxed` (the store that opens a claimed slot to its handler),
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
    words: Box<[UnsafeCell<u64>]>,
}

const NOT_ACTIVATED: u64 = u64::MAX;
const ACTIVATION_MASK: u64 = (1 << 40) - 1;

impl SamplerBuffer {
    fn new(index: u32, capacity_words: usize) -> SamplerBuffer {
        SamplerBuffer {
            index,
            pos: AtomicUsize::new(0),
            flushed_pos: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            activation: AtomicU64::new(NOT_ACTIVATED),
            words: (0..capacity_words).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    fn capacity(&self) -> usize {
        self.words.len()
    }

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
    /// handler call, see [`Core::write_sample`]). Each entry is the §4 spare handoff on its own:
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

    /// Like [`Core::new`], with `spares` spare entries per slot (at least 1): how many buffers a
    /// slot holds besides its active one, and so how many an oversized sample can span beyond it.
    ///
    /// # Panics
    /// As [`Core::new`].
    pub fn with_spares(nslots: usize, nbuffers: usize, capacity_words: usize, spares: usize) -> (Core, LockedState) {
        assert!(capacity_words > HEADER_WORDS, "buffer too small for one record");
        assert!(nslots < u32::MAX as usize && nbuffers < u32::MAX as usize);
        let core = Core {
            slots: (0..nslots).map(|i| ThreadSlot::new(i as u32, spares)).collect(),
            buffers: (0..nbuffers).map(|i| SamplerBuffer::new(i as u32, capacity_words)).collect(),
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

    /// The handler's buffer step (§4.2 steps 4-7): reserve `HEADER_WORDS + nframes` words in the
    /// slot's active buffer, rotating to the spare when it does not fit, write the header, let
    /// `fill` push exactly `nframes` IPs (missing ones are written as 0), and commit with a Release
    /// store of `pos`. Call [`Core::admit`] first (it counts the sample as taken). A record larger
    /// than a buffer is counted lost; [`Core::write_sample`] splits such samples instead.
    ///
    /// Only an admitted handler calls it (the [`Admission`] proves it; I13): it is the single
    /// writer of the slot's `active`, of `pos` and of the words above `pos`.
    ///
    /// # Signal safety
    /// No allocation, no lock, no syscall (the wakeup syscall is the caller's, when the outcome
    /// says so), CAS retry loops only.
    #[inline]
    pub fn write_record(
        &self,
        adm: &Admission<'_>,
        hdr: &RecordHeader,
        nframes: usize,
        fill: impl FnOnce(&mut FrameSink<'_>),
    ) -> WriteOutcome {
        let slot = adm.slot;
        let len = HEADER_WORDS + nframes;
        if len > self.max_record_words || nframes > u16::MAX as usize {
            Self::count_lost(slot);
            return WriteOutcome { committed: false, wake: false };
        }
        // Relaxed: only this thread (the owner) writes `active`.
        let mut b = slot.active.load(Ordering::Relaxed);
        // SAFETY: `b` is null or points into `self.buffers`, which lives as long as `self`.
        let mut p = match unsafe { b.as_ref() } {
            // Relaxed: only the owner moves `pos` of its ACTIVE buffer.
            Some(buf) => buf.pos.load(Ordering::Relaxed),
            None => 0,
        };
        let mut rotated = false;
        // SAFETY: as above.
        let fits = unsafe { b.as_ref() }.is_some_and(|buf| buf.capacity().saturating_sub(p) >= len);
        if !fits {
            let Some(n) = self.rotate(slot, b) else {
                Self::count_lost(slot);
                return WriteOutcome { committed: false, wake: self.notify_recorder() };
            };
            b = n;
            // Relaxed: the recycle's reset is ordered before us by the Acquire swap of the spare.
            // SAFETY: `n` came from a spare, which only holds pointers into `self.buffers`.
            p = unsafe { &*n }.pos.load(Ordering::Relaxed);
            rotated = true;
        }
        // SAFETY: `b` is non-null here and points into `self.buffers`.
        let buf = unsafe { &*b };
        if !Self::room_for(buf, p, len) {
            Self::count_lost(slot);
            return WriteOutcome { committed: false, wake: rotated && self.notify_recorder() };
        }
        Self::put(buf, p, slot, hdr, nframes, fill);
        WriteOutcome { committed: true, wake: rotated && self.notify_recorder() }
    }

    /// Rotation (§4.2 step 5): takes the first non-empty spare, publishes it as `active`, then
    /// pushes the old buffer `b` (if any) on the full queue. `None` (nothing changed) if every
    /// spare is empty. Owner only.
    ///
    /// # Signal safety
    /// Atomic RMWs and a CAS retry loop.
    #[inline]
    fn rotate(&self, slot: &ThreadSlot, b: *mut SamplerBuffer) -> Option<*mut SamplerBuffer> {
        let mut n = ptr::null_mut();
        for spare in slot.spares.iter() {
            // Relaxed: a hint that skips the RMW on empty entries; only the owner empties them.
            if spare.load(Ordering::Relaxed).is_null() {
                continue;
            }
            // Acquire: pairs with the Release CAS in `fill_spare`; the recycler's reset of
            // `pos`/`flushed_pos` is visible.
            n = spare.swap(ptr::null_mut(), Ordering::Acquire);
            if !n.is_null() {
                break;
            }
        }
        // SAFETY: null or a pointer into `self.buffers` (spares hold nothing else).
        let nb = unsafe { n.as_ref() }?;
        // Relaxed (both): owner-only counter.
        let seq = slot.activations.load(Ordering::Relaxed);
        slot.activations.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Relaxed: published with the buffer by the Release store of `active` below (active
        // pass) and by the Release push of this buffer later (full pass).
        nb.activation.store((u64::from(slot.index) << 40) | (seq & ACTIVATION_MASK), Ordering::Relaxed);
        // Release: the new buffer's clean positions (and this slot's switch) are visible to an L
        // holder's Acquire load of `active` in `drain`. Stored before the old
        // buffer becomes reachable from the full queue (§4.2 publication order).
        slot.active.store(n, Ordering::Release);
        if !b.is_null() {
            // SAFETY: `b` points into `self.buffers` (the caller's active buffer).
            self.push_full(unsafe { &*b });
        }
        Some(n)
    }

    /// Spare entries of `slot` holding a buffer. Owner only: the count cannot drop until the
    /// owner takes one (L holders only fill entries).
    ///
    /// # Signal safety
    /// Atomic loads.
    #[inline]
    fn spares_ready(slot: &ThreadSlot) -> usize {
        // Relaxed: a count; each buffer is taken later with the Acquire swap in `rotate`.
        slot.spares.iter().filter(|s| !s.load(Ordering::Relaxed).is_null()).count()
    }

    /// Whether a record of `len` words fits at word `p` of a buffer the owner just rotated into
    /// (or holds). A CLEAN buffer's `pos` is 0, so this fails only if the protocol is broken (a
    /// recycle's reset not published to the owner, see `refill_cas_relaxed`); then the sample is
    /// lost instead of written out of bounds (loom models fail on it).
    ///
    /// # Signal safety
    /// Arithmetic only (the assert exists in loom builds only).
    #[inline(always)]
    fn room_for(buf: &SamplerBuffer, p: usize, len: usize) -> bool {
        let fits = p <= buf.capacity() && buf.capacity() - p >= len;
        owner_assert!(
            fits,
            "a buffer from a spare has pos {p} (capacity {}): its recycle was not published",
            buf.capacity()
        );
        fits
    }

    /// Writes one record at word `p` of the owner's buffer and commits it.
    #[inline(always)]
    fn put(
        buf: &SamplerBuffer,
        p: usize,
        slot: &ThreadSlot,
        hdr: &RecordHeader,
        nframes: usize,
        fill: impl FnOnce(&mut FrameSink<'_>),
    ) {
        let len = HEADER_WORDS + nframes;
        let w0 = (nframes as u64)
            | (u64::from(hdr.flags) << 16)
            | (u64::from(KIND_EXEC_SAMPLE) << 24)
            | (u64::from(hdr.frag_index) << 32)
            | (u64::from(hdr.frag_count) << 48);
        buf.write_word(p, w0);
        buf.write_word(p + 1, hdr.ticks as u64);
        buf.write_word(p + 2, u64::from(hdr.tid) | (u64::from(slot.index) << 32));
        buf.write_word(p + 3, hdr.sample_id);
        buf.write_word(p + 4, hdr.sp);
        buf.write_word(p + 5, hdr.span);
        let [comm_lo, comm_hi] = hdr.comm.words();
        buf.write_word(p + 6, comm_lo);
        buf.write_word(p + 7, comm_hi);
        let mut sink = FrameSink { buf, at: p + HEADER_WORDS, end: p + len };
        fill(&mut sink);
        // Missing frames are zeros. Bounded by `end`, never by the writes' success, so that a
        // record that does not fit (impossible after `room_for`) cannot make the handler spin.
        for at in sink.at..sink.end {
            buf.write_word(at, 0);
        }
        // Release: the commit point; publishes the record's words to L holders. Pairs with the
        // Acquire load of `pos` in `process` (`drain`, `drain_full`).
        buf.pos.store(p + len, ordering!("pos_relaxed", Ordering::Release));
    }

    /// The handler's buffer step for a whole sample of `nframes` frames (`frame(i)`, innermost
    /// first). A sample that fits one buffer is one record ([`Core::write_record`]). A larger one
    /// is split into fragments k/n (same header and sample id, `frag_index` k, `frag_count` n):
    /// the first fills what is left of the active buffer, each further one an empty buffer taken
    /// from the slot's spares by the ordinary rotation, so the fragments lie in consecutive
    /// buffers of this thread, in order. The spares are counted first: if they cannot hold the
    /// whole sample, nothing is written and the sample is counted lost (a partial sample is never
    /// committed). L holders reassemble the fragments (`process`).
    ///
    /// Admitted handler only, like [`Core::write_record`].
    ///
    /// # Signal safety
    /// As [`Core::write_record`]: no allocation, no lock, CAS retry loops only.
    #[inline]
    pub fn write_sample(
        &self,
        adm: &Admission<'_>,
        hdr: &RecordHeader,
        nframes: usize,
        frame: impl Fn(usize) -> u64,
    ) -> WriteOutcome {
        let slot = adm.slot;
        let cap = self.max_record_words;
        if HEADER_WORDS + nframes <= cap {
            let h = RecordHeader { frag_index: 0, frag_count: 1, ..*hdr };
            return self.write_record(adm, &h, nframes, |sink| {
                for i in 0..nframes {
                    sink.push(frame(i));
                }
            });
        }
        // A record holds at most u16::MAX frames (w0).
        let per = (cap - HEADER_WORDS).min(u16::MAX as usize);
        // Relaxed: only this thread (the owner) writes `active`.
        let mut b = slot.active.load(Ordering::Relaxed);
        // SAFETY: `b` is null or points into `self.buffers`.
        let p = match unsafe { b.as_ref() } {
            // Relaxed: only the owner moves `pos` of its ACTIVE buffer.
            Some(buf) => buf.pos.load(Ordering::Relaxed),
            None => cap,
        };
        // Frames the first fragment puts into the active buffer (0: start in a fresh one). The
        // sample does not fit a whole buffer, so it does not fit this remainder either.
        let first = cap.saturating_sub(p).saturating_sub(HEADER_WORDS).min(per);
        let rest = nframes.saturating_sub(first);
        let fresh = rest.div_ceil(per);
        let count = fresh + usize::from(first > 0);
        if count > u16::MAX as usize || Self::spares_ready(slot) < fresh {
            Self::count_lost(slot);
            return WriteOutcome { committed: false, wake: self.notify_recorder() };
        }
        let mut at = 0usize; // next frame to write
        let mut k = 0u16;
        if first > 0 {
            // SAFETY: `first > 0` implies `b` is non-null (p < cap), a pointer into `self.buffers`.
            let buf = unsafe { &*b };
            let h = RecordHeader { frag_index: k, frag_count: count as u16, ..*hdr };
            Self::put(buf, p, slot, &h, first, |sink| {
                for i in 0..first {
                    sink.push(frame(i));
                }
            });
            at = first;
            k += 1;
        }
        while at < nframes {
            // Counted above: every rotation finds a spare (only this thread empties them).
            let Some(n) = self.rotate(slot, b) else {
                // Unreachable with a correct count; the fragments already committed are an
                // incomplete sample, which the L holder discards and counts lost (with none
                // committed, it is counted here).
                if k == 0 {
                    Self::count_lost(slot);
                }
                return WriteOutcome { committed: false, wake: self.notify_recorder() };
            };
            b = n;
            let len = (nframes - at).min(per);
            // SAFETY: `n` came from a spare, which only holds pointers into `self.buffers`.
            let buf = unsafe { &*n };
            // Relaxed: the recycle's reset is ordered before us by the Acquire swap in `rotate`.
            let p = buf.pos.load(Ordering::Relaxed);
            if !Self::room_for(buf, p, HEADER_WORDS + len) {
                // Fragments committed so far are an incomplete sample, which the L holder
                // discards and counts lost; with none committed, it is counted here.
                if k == 0 {
                    Self::count_lost(slot);
                }
                return WriteOutcome { committed: false, wake: self.notify_recorder() };
            }
            let h = RecordHeader { frag_index: k, frag_count: count as u16, ..*hdr };
            let from = at;
            Self::put(buf, p, slot, &h, len, |sink| {
                for i in from..from + len {
                    sink.push(frame(i));
                }
            });
            at += len;
            k += 1;
        }
        WriteOutcome { committed: true, wake: self.notify_recorder() }
    }

    /// Pushes a FULL buffer on the Treiber stack.
    fn push_full(&self, b: &SamplerBuffer) {
        let bp = b as *const SamplerBuffer as *mut SamplerBuffer;
        // Relaxed: the CAS below re-validates the head.
        let mut head = self.full_head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            b.next.store(head, Ordering::Relaxed);
            // Release (success): publishes `next` and the buffer's final `pos`/words; pairs with
            // the Acquire swap of `full_head` in `drain_queue`. Relaxed (failure): retry.
            let success = ordering!("push_relaxed", Ordering::Release);
            match self.full_head.compare_exchange_weak(head, bp, success, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Sets `recorder_pending`; returns true if the caller must post the wakeup (it was clear).
    ///
    /// # Signal safety
    /// One atomic RMW.
    #[inline]
    pub fn notify_recorder(&self) -> bool {
        // Release: publishes the push that preceded it; pairs with the Acquire swap in
        // `take_pending`. If it was already set, the recorder has not consumed it yet and will
        // see our push when it does, so no second wakeup is needed.
        let was = self.recorder_pending.swap(true, Ordering::Release);
        if !was {
            // Relaxed: statistics / loom's stand-in for the wakeup syscall.
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        !was
    }

    /// Clears `recorder_pending`; true if it was set (the recorder should run `drain_full`).
    pub fn take_pending(&self) -> bool {
        // Acquire: pairs with the Release swap in `notify_recorder`; the pushes before it are
        // visible to the `drain_full` that follows.
        self.recorder_pending.swap(false, Ordering::Acquire)
    }

    /// Wakeups posted so far (loom models use it as the semaphore count).
    pub fn wakeups(&self) -> u64 {
        // Relaxed: statistics.
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Closes the slot's gate (I13): no handler is admitted from now on. Returns true once no
    /// handler is inside, i.e. the caller now has the owner's role; false if one still is (it
    /// leaves within moments: a handler takes no lock and never blocks).
    fn close_gate(slot: &ThreadSlot) -> bool {
        // Acquire: pairs with the Release clear of INSIDE in `Admission::drop`; when INSIDE is
        // clear here, the last admitted handler's writes happen-before what the caller does next.
        let was = slot.suppress.fetch_or(RETIRED, Ordering::Acquire);
        if cfg!(recorder_mutation = "retire_without_gate") {
            return true;
        }
        // Acquire: as above, for a handler that left after our RMW.
        was & INSIDE == 0 || slot.suppress.load(Ordering::Acquire) & INSIDE == 0
    }

    /// Owner-side retirement (§4.6 exit), normal context on the owning thread: close the gate
    /// (I11, I13), take `active` and the spares, push them on the full queue, mark the slot
    /// EXITED. Disarm the thread's timer before calling. Returns true if the caller should post
    /// the wakeup.
    ///
    /// See [`Core::retire_own`]; this one is for callers with nothing else to release.
    #[must_use = "post the recorder wakeup when it returns true"]
    pub fn retire_slot(&self, slot: &ThreadSlot) -> bool {
        self.retire_own(slot).wake
    }

    /// [`Core::retire_slot`], saying what it found. The thread's own handler is not running (it
    /// runs to completion before this code resumes), so a gate held by it is held by a handler
    /// that was abandoned half-way: its sample is counted lost and the gate taken over
    /// ([`Retired::abandoned`]). A stale signal of another thread may hold the gate for a moment,
    /// which this waits out, yielding at most `RETIRE_YIELDS` times: a holder still there then
    /// never returns either, and the slot is given up as it is (gated, never reaped, its buffers
    /// out of the pool) rather than wait forever ([`Retired::given_up`]).
    pub fn retire_own(&self, slot: &ThreadSlot) -> Retired {
        let owner = slot.tid();
        let mut abandoned = false;
        let mut yields = 0u32;
        loop {
            // Acquire: pairs with the Release clear of INSIDE in `Admission::drop`.
            let word = slot.suppress.fetch_or(RETIRED, Ordering::Acquire);
            if word & INSIDE == 0 || cfg!(recorder_mutation = "retire_without_gate") {
                break;
            }
            if held_by(word, owner) {
                Self::count_lost(slot);
                // Relaxed: only this thread's own handler could write the word, and it is
                // not running (it would only find RETIRED set and leave).
                slot.suppress.store(RETIRED, Ordering::Relaxed);
                abandoned = true;
                break;
            }
            if yields >= RETIRE_YIELDS {
                return Retired { wake: false, abandoned, given_up: true };
            }
            yields += 1;
            spin_wait();
        }
        // Same-thread order with our own handler (I11): the gate is closed before we touch the
        // buffers.
        compiler_fence(Ordering::SeqCst);
        Retired { wake: self.take_over(slot), abandoned, given_up: false }
    }

    /// Retirement on behalf of a thread the caller proved dead (discovery): as
    /// [`Core::retire_slot`], but if a handler is still admitted to the slot (the thread was
    /// not dead after all, or died inside its handler) nothing but the gate changes and `None` is
    /// returned: call again later. The gate stays closed meanwhile (no new samples are written).
    /// `Some(wake)`: retired; post the wakeup if `wake`.
    #[must_use = "retry on None; post the recorder wakeup on Some(true)"]
    pub fn retire_on_behalf(&self, slot: &ThreadSlot) -> Option<bool> {
        if !Self::close_gate(slot) {
            return None;
        }
        Some(self.take_over(slot))
    }

    /// The owner's role after the gate is closed: empty the slot onto the full queue, EXITED.
    fn take_over(&self, slot: &ThreadSlot) -> bool {
        // Acquire: pairs with the handler's Release store of `active` in `rotate` (the gate's
        // Acquire already orders it; kept for a same-thread retire). Release: orders the pushes.
        let b = slot.active.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: null or a pointer into `self.buffers`.
        if let Some(b) = unsafe { b.as_ref() } {
            self.push_full(b);
        }
        for spare in slot.spares.iter() {
            // Acquire: pairs with the Release CAS in `fill_spare`.
            let s = spare.swap(ptr::null_mut(), Ordering::Acquire);
            // SAFETY: null or a pointer into `self.buffers`.
            if let Some(s) = unsafe { s.as_ref() } {
                self.push_full(s);
            }
        }
        // Release: the pushes above happen-before an L holder's Acquire load of EXITED in
        // `drain_full`, which therefore drains them before reaping the slot.
        slot.state.store(SLOT_EXITED, Ordering::Release);
        self.notify_recorder()
    }

    // ---------------------------------------------------------------- L holders

    /// Full pass (§4.3 step 3 / §4.4): swaps out the full queue, processes what is left of each
    /// buffer, recycles them into the pool, reaps retired slots and refills spares.
    pub fn drain_full(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        self.check_locked(locked);
        // First the spares, from what the pool holds now: processing the queue may take long
        // (the callback serializes stacks), and handlers keep rotating meanwhile.
        self.refill_spares();
        // Slots seen EXITED before the swap below have all their buffers in the queue we take.
        let mut exited = std::mem::take(&mut locked.exited);
        exited.clear();
        exited.extend(self.slots.iter().map(|slot| slot.state() == SLOT_EXITED));
        self.drain_queue(locked, f);
        if exited.iter().any(|&e| e) {
            self.reap_exited(locked, |i| exited.get(i).copied().unwrap_or(false), f);
        }
        locked.exited = exited;
        self.refill_spares();
    }

    /// Swaps the full queue out and processes its buffers oldest push first, so each thread's
    /// buffers (and the fragments of an oversized sample in them) come in the order it filled
    /// them.
    fn drain_queue(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        // Acquire: pairs with the Release CAS in `push_full` (and its release sequence); takes
        // the whole list, so no ABA.
        let mut b = self.full_head.swap(ptr::null_mut(), Ordering::Acquire);
        // Reverse the LIFO list in place (we own every node now: DRAINING).
        let mut fifo: *mut SamplerBuffer = ptr::null_mut();
        // SAFETY: the queue holds only pointers into `self.buffers`.
        while let Some(buf) = unsafe { b.as_ref() } {
            // Relaxed: made visible by the Acquire swap above; then private to this L holder.
            b = buf.next.load(Ordering::Relaxed);
            // Relaxed: private to this L holder (the buffer is DRAINING).
            buf.next.store(fifo, Ordering::Relaxed);
            fifo = buf as *const SamplerBuffer as *mut SamplerBuffer;
        }
        // SAFETY: as above.
        while let Some(buf) = unsafe { fifo.as_ref() } {
            // Relaxed: written by this L holder just above.
            fifo = buf.next.load(Ordering::Relaxed);
            self.process(buf, locked, f);
            // Relaxed: published by the owner's Release push (Acquire swap above).
            let act = buf.activation.load(Ordering::Relaxed);
            if act != NOT_ACTIVATED {
                if let Some(e) = locked.expected.get_mut((act >> 40) as usize) {
                    *e = (act & ACTIVATION_MASK) + 1;
                }
            }
            self.recycle(buf, locked);
        }
    }

    /// The flusher's pass (§4.3 steps 2-3) with per-thread order kept: drains the full queue
    /// (oldest first; reaps, refills), then hands out the records of each slot's active buffer if
    /// every older buffer of that thread has been drained. One that is not (the owner rotated
    /// after the queue was taken, so the buffer it rotated out is still queued) waits for the next
    /// pass, so no record overtakes an older one of its thread and fragments stay in order.
    pub fn drain(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        self.check_locked(locked);
        self.drain_full(locked, f);
        for slot in self.slots.iter() {
            // Acquire: pairs with the owner's Release store of `active` in `rotate` (its
            // `activation` store is visible).
            let b = slot.active.load(Ordering::Acquire);
            // SAFETY: null or a pointer into `self.buffers`; L is held so it cannot be recycled
            // while we use it (I5).
            let Some(buf) = (unsafe { b.as_ref() }) else { continue };
            // Relaxed: ordered by the Acquire load of `active` above.
            let act = buf.activation.load(Ordering::Relaxed);
            let expected = locked.expected.get(slot.index as usize).copied().unwrap_or(0);
            if act & ACTIVATION_MASK != expected & ACTIVATION_MASK && !cfg!(recorder_mutation = "drain_without_gating")
            {
                continue;
            }
            self.process(buf, locked, f);
        }
    }

    /// Parses `[flushed_pos, pos)` of `b` (L held). Whole samples go to `f` at once; fragments
    /// of an oversized sample are collected in the slot's [`Pending`] and go to `f` as one
    /// record when the last one arrives (possibly in a later pass or another buffer).
    fn process(&self, b: &SamplerBuffer, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        // Acquire: pairs with the owner's Release commit in `put`; words below are final.
        let e = b.pos.load(Ordering::Acquire);
        // Relaxed: `flushed_pos` is serialized by L.
        let mut s = b.flushed_pos.load(Ordering::Relaxed);
        protocol_assert!(s <= e && e <= b.capacity(), "I1 violated: flushed_pos {s} pos {e}");
        while s + HEADER_WORDS <= e {
            let w0 = b.read_word(s);
            let nframes = (w0 & 0xffff) as usize;
            let len = HEADER_WORDS + nframes;
            if s + len > e {
                // Corrupt length: cannot happen with a correct owner; skip the rest (I3 still
                // holds: nothing is handed out twice).
                protocol_assert!(false, "record overruns pos");
                break;
            }
            let flags = ((w0 >> 16) & 0xff) as u8;
            let w2 = b.read_word(s + 2);
            let slot_index = (w2 >> 32) as usize;
            let frag_index = (w0 >> 32) as u16;
            let frag_count = (w0 >> 48) as u16;
            let tid = w2 as u32;
            let ticks = b.read_word(s + 1) as i64;
            let sample_id = b.read_word(s + 3);
            let sp = b.read_word(s + 4);
            let span = b.read_word(s + 5);
            let comm = RawComm::from_words([b.read_word(s + 6), b.read_word(s + 7)]);
            let slot = self.slots.get(slot_index);
            let LockedState { scratch, pending, .. } = &mut *locked;
            let Some(p) = pending.get_mut(slot_index) else {
                s += len;
                continue;
            };
            if frag_count <= 1 {
                // A whole sample: whatever was in flight for this thread can no longer complete.
                Self::discard(p, slot);
                scratch.clear();
                scratch.extend((0..nframes).map(|i| b.read_word(s + HEADER_WORDS + i)));
                let rec = SampleRecord {
                    tid,
                    ticks,
                    truncated: flags & FLAG_TRUNCATED != 0,
                    leaf_only: flags & FLAG_LEAF_ONLY != 0,
                    wall: flags & FLAG_WALL != 0,
                    ips: scratch,
                    sample_id,
                    sp,
                    span,
                    comm,
                    frag_index: 0,
                    frag_count: 1,
                };
                Self::emit(slot, &rec, f);
            } else if p.open && p.sample_id == sample_id && p.next == frag_index && p.count == frag_count {
                p.frames.extend((0..nframes).map(|i| b.read_word(s + HEADER_WORDS + i)));
                p.next += 1;
                if p.next == p.count {
                    p.open = false;
                    let rec = SampleRecord {
                        tid: p.tid,
                        ticks: p.ticks,
                        truncated: p.flags & FLAG_TRUNCATED != 0,
                        leaf_only: p.flags & FLAG_LEAF_ONLY != 0,
                        wall: p.flags & FLAG_WALL != 0,
                        ips: &p.frames,
                        sample_id: p.sample_id,
                        sp: p.sp,
                        span: p.span,
                        comm: p.comm,
                        frag_index: 0,
                        frag_count: 1,
                    };
                    Self::emit(slot, &rec, f);
                }
            } else {
                // A fragment that does not continue the sample in flight: that one is incomplete.
                Self::discard(p, slot);
                if sample_id == p.discarded {
                    // A stray fragment of a sample already counted lost.
                } else if frag_index == 0 {
                    p.open = true;
                    p.sample_id = sample_id;
                    p.next = 1;
                    p.count = frag_count;
                    p.tid = tid;
                    p.ticks = ticks;
                    p.flags = flags;
                    p.sp = sp;
                    p.span = span;
                    p.comm = comm;
                    p.frames.clear();
                    p.frames.extend((0..nframes).map(|i| b.read_word(s + HEADER_WORDS + i)));
                } else {
                    // Its first fragments are missing (or came out of order): lost, once.
                    p.discarded = sample_id;
                    if let Some(slot) = slot {
                        Self::count_lost(slot);
                    }
                }
            }
            s += len;
        }
        // Relaxed: serialized by L (the next L holder acquires L after our release).
        b.flushed_pos.store(e, Ordering::Relaxed);
    }

    /// Hands a complete sample to `f` and counts it written.
    fn emit(slot: Option<&ThreadSlot>, rec: &SampleRecord<'_>, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        f(rec);
        if let Some(slot) = slot {
            // Relaxed: statistics; only L holders write it.
            slot.written.fetch_add(1, Ordering::Relaxed);
            if rec.wall {
                // Relaxed: as `written`.
                slot.wall_written.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops the sample in flight (if any) as incomplete and counts it lost.
    fn discard(p: &mut Pending, slot: Option<&ThreadSlot>) {
        if p.open {
            p.open = false;
            p.discarded = p.sample_id;
            if let Some(slot) = slot {
                Self::count_lost(slot);
            }
        }
    }

    /// DRAINING -> CLEAN: reset both positions and put the buffer into the pool (L held).
    fn recycle(&self, b: &SamplerBuffer, _locked: &mut LockedState) {
        // Relaxed: the buffer is unreachable; the reset is published by the pool lock to the
        // refiller, and by its Release CAS that puts the buffer into a spare to the owner.
        b.pos.store(0, Ordering::Relaxed);
        // Relaxed: as above.
        b.flushed_pos.store(0, Ordering::Relaxed);
        // Relaxed: as above.
        b.next.store(ptr::null_mut(), Ordering::Relaxed);
        // Relaxed: as above.
        b.activation.store(NOT_ACTIVATED, Ordering::Relaxed);
        self.pool.lock().push(b.index);
    }

    /// Gives every LIVE slot's empty spare entries CLEAN buffers from the pool, one entry per slot
    /// per round (first entries first), so a short pool is shared fairly. Any normal-context
    /// thread may call it; L is not needed (the pool lock serializes refillers, I4, I14).
    pub fn refill_spares(&self) {
        let mut pool = self.pool.lock();
        let rounds = self.slots.first().map_or(0, |s| s.spares.len());
        for round in 0..rounds {
            for slot in self.slots.iter() {
                if pool.is_empty() {
                    return;
                }
                if slot.state() != SLOT_LIVE {
                    continue;
                }
                if let Some(spare) = slot.spares.get(round) {
                    self.fill_spare(&mut pool, spare);
                }
            }
        }
    }

    /// Fills every empty spare entry of `slot` from the pool at once: a thread that registers
    /// itself gets all its spares before its timer is armed, without waiting for anyone.
    pub fn fill_spares(&self, slot: &ThreadSlot) {
        let mut pool = self.pool.lock();
        if slot.state() != SLOT_LIVE {
            return;
        }
        for spare in slot.spares.iter() {
            if pool.is_empty() {
                return;
            }
            self.fill_spare(&mut pool, spare);
        }
    }

    /// Puts the pool's last buffer into `spare` if it is empty (pool lock held).
    fn fill_spare(&self, pool: &mut Vec<u32>, spare: &AtomicPtr<SamplerBuffer>) {
        // Relaxed: a hint; the CAS below decides.
        if !spare.load(Ordering::Relaxed).is_null() {
            return;
        }
        let Some(&i) = pool.last() else { return };
        let Some(buf) = self.buffers.get(i as usize) else { return };
        let bp = buf as *const SamplerBuffer as *mut SamplerBuffer;
        // Release (success): publishes the recycle's resets (which reached us through the pool
        // lock); pairs with the Acquire swap of the entry in `rotate` (and `take_over`, the
        // reaper). Relaxed (failure): only the owner empties an entry and only pool-lock holders
        // fill one, so a non-null entry is simply left alone.
        let success = ordering!("refill_cas_relaxed", Ordering::Release);
        if spare.compare_exchange(ptr::null_mut(), bp, success, Ordering::Relaxed).is_ok() {
            pool.pop();
        }
    }

    /// Frees retired slots selected by `is_exited` (seen EXITED before the last queue swap):
    /// reclaims a spare that a refill put there after the retirement (I14), folds the slot's
    /// statistics into the retired totals, marks it FREE.
    fn reap_exited(
        &self,
        locked: &mut LockedState,
        is_exited: impl Fn(usize) -> bool,
        f: &mut dyn FnMut(&SampleRecord<'_>),
    ) {
        for slot in self.slots.iter() {
            if !is_exited(slot.index as usize) || slot.state() != SLOT_EXITED {
                continue;
            }
            // Acquire: pairs with the owner's Release store (it is null after `take_over`).
            let a = slot.active.swap(ptr::null_mut(), Ordering::Acquire);
            // SAFETY: null or a pointer into `self.buffers`; the slot is retired, so we own it.
            if let Some(a) = unsafe { a.as_ref() } {
                self.process(a, locked, f);
                self.recycle(a, locked);
            }
            // Every buffer this slot activated has been drained: the next owner's first buffer is
            // the next one expected. Relaxed: the retired owner's stores are ordered before our
            // Acquire load of EXITED.
            if let Some(e) = locked.expected.get_mut(slot.index as usize) {
                *e = slot.activations.load(Ordering::Relaxed);
            }
            // A sample still in flight can no longer complete: it is lost.
            if let Some(p) = locked.pending.get_mut(slot.index as usize) {
                if p.open {
                    p.open = false;
                    Self::count_lost(slot);
                }
                p.discarded = 0;
            }
            let lost = self.fold_stats(slot);
            if lost != 0 {
                locked.reaped_lost.push((slot.tid(), lost));
            }
            // Under the pool lock (I14): no refill runs between the reclaim and FREE.
            let mut pool = self.pool.lock();
            for spare in slot.spares.iter() {
                // Acquire: pairs with the Release CAS in `fill_spare`.
                let s = spare.swap(ptr::null_mut(), Ordering::Acquire);
                // SAFETY: null or a pointer into `self.buffers`. Spares only ever hold CLEAN
                // buffers, so it goes straight back to the pool.
                if let Some(s) = unsafe { s.as_ref() } {
                    pool.push(s.index);
                }
            }
            // Release: publishes the resets above; pairs with the Acquire CAS in `claim_slot`.
            slot.state.store(SLOT_FREE, Ordering::Release);
        }
    }

    /// Folds a retired slot's counters into the totals; returns its lost samples not yet
    /// collected by `take_lost`.
    fn fold_stats(&self, slot: &ThreadSlot) -> u64 {
        // Relaxed (all): statistics; the slot is retired, its owner no longer writes them.
        let t = slot.taken.swap(0, Ordering::Relaxed);
        let w = slot.written.swap(0, Ordering::Relaxed);
        let l = slot.lost_total.swap(0, Ordering::Relaxed);
        let uncollected = slot.lost.swap(0, Ordering::Relaxed);
        self.retired_taken.fetch_add(t, Ordering::Relaxed);
        self.retired_written.fetch_add(w, Ordering::Relaxed);
        self.retired_lost.fetch_add(l, Ordering::Relaxed);
        let wt = slot.wall_taken.swap(0, Ordering::Relaxed);
        let ww = slot.wall_written.swap(0, Ordering::Relaxed);
        self.retired_wall_taken.fetch_add(wt, Ordering::Relaxed);
        self.retired_wall_written.fetch_add(ww, Ordering::Relaxed);
        uncollected
    }

    /// Lost samples since the last call, per thread (L held).
    pub fn take_lost(&self, locked: &mut LockedState) -> Vec<(u32, u64)> {
        self.check_locked(locked);
        let mut out = std::mem::take(&mut locked.reaped_lost);
        for slot in self.slots.iter() {
            if slot.state() == SLOT_FREE {
                continue;
            }
            // Relaxed: statistics; the counter itself is the only data.
            let n = slot.lost.swap(0, Ordering::Relaxed);
            if n != 0 {
                out.push((slot.tid(), n));
            }
        }
        out
    }

    /// Statistics of one slot.
    pub fn slot_stats(&self, slot: &ThreadSlot) -> SlotStats {
        // Relaxed (all): statistics.
        SlotStats {
            tid: slot.tid(),
            taken: slot.taken.load(Ordering::Relaxed),
            written: slot.written.load(Ordering::Relaxed),
            lost: slot.lost_total.load(Ordering::Relaxed),
            wall_taken: slot.wall_taken.load(Ordering::Relaxed),
            wall_written: slot.wall_written.load(Ordering::Relaxed),
        }
    }

    /// Wall-clock totals of reaped slots `(taken, written)`.
    pub fn retired_wall_totals(&self) -> (u64, u64) {
        // Relaxed (both): statistics.
        (self.retired_wall_taken.load(Ordering::Relaxed), self.retired_wall_written.load(Ordering::Relaxed))
    }

    /// Totals of reaped slots `(taken, written, lost)`.
    pub fn retired_totals(&self) -> (u64, u64, u64) {
        // Relaxed (all): statistics.
        (
            self.retired_taken.load(Ordering::Relaxed),
            self.retired_written.load(Ordering::Relaxed),
            self.retired_lost.load(Ordering::Relaxed),
        )
    }

    /// Teardown after every producer is gone (all timers disarmed, no handler running): drains
    /// everything, retires and reaps every slot, returns all buffers to the pool.
    pub fn drain_all_final(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        self.check_locked(locked);
        for slot in self.slots.iter() {
            if slot.state() == SLOT_LIVE {
                // No handler runs any more: nobody to wake.
                let _ = self.retire_slot(slot);
            }
        }
        self.drain_queue(locked, f);
        self.reap_exited(locked, |_| true, f);
        self.take_pending();
    }
}

#[cfg(all(test, not(loom)))]
#[allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod fragment_tests {
    //! Reassembly of oversized samples from hand-made fragment sequences (owner side through the
    //! shipped `write_record` / `write_sample`, L side through `drain`).
    use super::*;

    const TID: u32 = 500;

    fn core(nslots: usize, nbuffers: usize, words: usize, spares: usize) -> (Core, LockedState) {
        let (core, locked) = Core::with_spares(nslots, nbuffers, words, spares);
        for i in 0..nslots {
            core.claim_slot(TID + i as u32, StackBounds::default()).unwrap();
        }
        core.refill_spares();
        (core, locked)
    }

    /// Writes fragment `k`/`n` of sample `id` on slot `i` with `frames` (admits on k == 0,
    /// as the handler counts a sample taken once).
    fn frag(core: &Core, i: usize, id: u64, k: u16, n: u16, frames: &[u64]) {
        let slot = core.slot(i).unwrap();
        // The handler writes all fragments of a sample in one admission; here each fragment is
        // written separately, and only the first counts the sample taken.
        let adm = if k == 0 || n == 1 {
            core.admit(slot, TID + i as u32, false).unwrap()
        } else {
            Admission { slot, recovered: false }
        };
        let hdr = RecordHeader {
            ticks: id as i64,
            tid: TID + i as u32,
            flags: FLAG_TRUNCATED,
            frag_index: k,
            frag_count: n,
            sample_id: id,
            sp: 0,
            span: 0,
            comm: RawComm::EMPTY,
        };
        assert!(core.write_record(&adm, &hdr, frames.len(), |s| frames.iter().for_each(|&f| s.push(f))).committed);
    }

    fn drain(core: &Core, locked: &mut LockedState) -> Vec<(u32, u64, Vec<u64>)> {
        let mut out = Vec::new();
        core.drain(locked, &mut |r: &SampleRecord<'_>| {
            assert_eq!((r.frag_index, r.frag_count), (0, 1), "callbacks see whole samples only");
            assert!(r.truncated);
            out.push((r.tid, r.sample_id, r.ips.to_vec()));
        });
        out
    }

    fn exact(core: &Core, i: usize, written: u64, lost: u64) {
        let s = core.slot_stats(core.slot(i).unwrap());
        assert_eq!((s.written, s.lost), (written, lost), "slot {i}: {s:?}");
        assert_eq!(s.taken, s.written + s.lost, "taken = written + lost");
    }

    /// A handler abandoned half-way (its admission never released: a `siglongjmp` out of a
    /// handler nested in it) stops neither its thread's later samples nor its exit: the same
    /// thread's next handler takes the admission over, the exit takes the gate at once (before,
    /// it waited for the gate forever), and each abandoned sample is counted lost.
    #[test]
    fn an_abandoned_admission_is_taken_over_by_the_same_threads_next_handler_and_exit() {
        let (c, mut l) = core(1, 4, 64, 1);
        let slot = c.slot(0).unwrap();
        std::mem::forget(c.admit(slot, TID, false).unwrap());
        assert!(c.admit(slot, TID + 1, false).is_none(), "another thread's stale signal still stays out");
        let adm = c.admit(slot, TID, false).expect("the same thread's next handler is admitted");
        assert!(adm.recovered());
        c.lose(&adm);
        drop(adm);
        frag(&c, 0, 1, 0, 1, &[1, 2]);
        std::mem::forget(c.admit(slot, TID, false).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        // On another thread with a generous limit: a retirement that waits for the gate never
        // returns.
        std::thread::spawn(move || {
            let retired = c.retire_own(c.slot(0).unwrap());
            tx.send((c, retired)).unwrap();
        });
        let (c, retired) = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the exit waited for the gate");
        assert!(retired.abandoned && !retired.given_up, "{retired:?}");
        let slot = c.slot(0).unwrap();
        let out = drain(&c, &mut l);
        assert_eq!(out, vec![(TID, 1, vec![1, 2])]);
        let s = c.slot_stats(slot);
        let (t, w, lost) = c.retired_totals();
        assert_eq!((t + s.taken, w + s.written, lost + s.lost), (4, 1, 3), "taken = written + lost");
    }

    #[test]
    fn interleaved_threads_reassemble_separately() {
        let (c, mut l) = core(2, 6, 64, 1);
        frag(&c, 0, 1, 0, 3, &[1, 2]);
        frag(&c, 1, 2, 0, 2, &[10]);
        frag(&c, 0, 1, 1, 3, &[3]);
        frag(&c, 1, 2, 1, 2, &[11, 12]);
        frag(&c, 0, 1, 2, 3, &[4, 5, 6]);
        let mut out = drain(&c, &mut l);
        out.sort();
        assert_eq!(out, vec![(TID, 1, vec![1, 2, 3, 4, 5, 6]), (TID + 1, 2, vec![10, 11, 12])]);
        exact(&c, 0, 1, 0);
        exact(&c, 1, 1, 0);
    }

    #[test]
    fn fragments_split_across_two_flushes() {
        let (c, mut l) = core(1, 3, 64, 1);
        frag(&c, 0, 7, 0, 2, &[1, 2, 3]);
        assert!(drain(&c, &mut l).is_empty(), "half a sample is never handed out");
        frag(&c, 0, 7, 1, 2, &[4]);
        assert_eq!(drain(&c, &mut l), vec![(TID, 7, vec![1, 2, 3, 4])]);
        exact(&c, 0, 1, 0);
    }

    #[test]
    fn missing_fragment_discards_the_sample() {
        let (c, mut l) = core(1, 3, 64, 1);
        frag(&c, 0, 5, 0, 3, &[1]);
        frag(&c, 0, 5, 2, 3, &[3]); // 1/3 missing
        frag(&c, 0, 6, 0, 1, &[9]);
        // A sample whose last fragment never comes, followed by a new sample's first fragment.
        frag(&c, 0, 8, 0, 2, &[1]);
        frag(&c, 0, 9, 0, 2, &[2]);
        frag(&c, 0, 9, 1, 2, &[3]);
        assert_eq!(drain(&c, &mut l), vec![(TID, 6, vec![9]), (TID, 9, vec![2, 3])]);
        exact(&c, 0, 2, 2);
    }

    #[test]
    fn out_of_order_fragments_discard_the_sample_once() {
        let (c, mut l) = core(1, 3, 64, 1);
        frag(&c, 0, 7, 1, 2, &[2]);
        frag(&c, 0, 7, 0, 2, &[1]);
        frag(&c, 0, 8, 0, 1, &[5]);
        frag(&c, 0, 10, 0, 3, &[1]);
        frag(&c, 0, 10, 2, 3, &[3]);
        frag(&c, 0, 10, 1, 3, &[2]);
        frag(&c, 0, 11, 0, 1, &[6]);
        assert_eq!(drain(&c, &mut l), vec![(TID, 8, vec![5]), (TID, 11, vec![6])]);
        exact(&c, 0, 2, 2);
    }

    #[test]
    fn sample_larger_than_every_buffer_together_is_lost() {
        // 16-word buffers hold `per` frames each; active + 2 spares.
        let per = 16 - HEADER_WORDS;
        let (c, mut l) = core(1, 6, 16, 2);
        let slot = c.slot(0).unwrap();
        let hdr = RecordHeader { tid: TID, sample_id: 1, ..RecordHeader::default() };
        let adm = c.admit(slot, TID, false).unwrap();
        // Nothing active yet, so at most 2 spares * `per` frames.
        let o = c.write_sample(&adm, &hdr, 2 * per + 1, |i| i as u64);
        drop(adm);
        assert!(!o.committed);
        assert!(drain(&c, &mut l).is_empty());
        exact(&c, 0, 0, 1);
        // The same sample with one frame fewer fits two buffers exactly.
        let adm = c.admit(slot, TID, false).unwrap();
        let hdr = RecordHeader { sample_id: 2, flags: FLAG_TRUNCATED, ..hdr };
        assert!(c.write_sample(&adm, &hdr, 2 * per, |i| 1000 + i as u64).committed);
        drop(adm);
        let out = drain(&c, &mut l);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].2, (1000..1000 + 2 * per as u64).collect::<Vec<u64>>());
        exact(&c, 0, 1, 1);
    }

    #[test]
    fn write_sample_uses_the_active_remainder_and_keeps_order_across_drains() {
        // Buffers of 10 frames each after the header.
        let (c, mut l) = core(1, 16, HEADER_WORDS + 10, 6);
        let slot = c.slot(0).unwrap();
        let mut want = Vec::new();
        for id in 1..=6u64 {
            let adm = c.admit(slot, TID, false).unwrap();
            let n = [3usize, 30, 7, 44, 11, 12][id as usize - 1];
            let hdr = RecordHeader { tid: TID, sample_id: id, flags: FLAG_TRUNCATED, ..RecordHeader::default() };
            assert!(c.write_sample(&adm, &hdr, n, |i| id * 100 + i as u64).committed, "sample {id}");
            drop(adm);
            want.push((TID, id, (0..n as u64).map(|i| id * 100 + i).collect::<Vec<_>>()));
            if id % 2 == 0 {
                let got = drain(&c, &mut l);
                assert_eq!(got, std::mem::take(&mut want));
            }
        }
        exact(&c, 0, 6, 0);
    }
}
