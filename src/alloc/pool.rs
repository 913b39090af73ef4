//! The allocation-sample protocols, free of TLS, signals and syscalls so that the loom models in
//! `loom-tests/tests/alloc_pool.rs` run exactly this code: the record pool, the live table and
//! the gate that lets a recording's state be freed.
//!
//! # Why not the SamplerBuffer protocol or the event buffers
//! Both give the flush guarantee this module must keep (a sample committed before a flush's
//! sample pass is written by that pass, its stack defined in the same segment), but neither can
//! be reached from an allocator hook: the SamplerBuffer protocol writes into a per-thread *slot*,
//! which the sampler claims and retires in normal context under its registry (a thread the
//! recorder never saw, a thread in its TLS destructors, an application's signal handler and a
//! forked child have none, and claiming one from the hook would lock); an event buffer is a lazily
//! allocated thread-local with a destructor (it allocates, and is gone during thread exit). So the
//! hook gets the same protocol at a smaller grain: one preallocated **record** is the unit a
//! producer owns, claimed with one CAS from any thread, written with plain stores, committed with
//! one Release store, and drained by L holders after the event buffers, exactly like the
//! `[flushed_pos, pos)` range of a SamplerBuffer. A full pool drops the sample and counts it.
//!
//! # Base and reserve
//! A producer looks for a FREE record in the **base** first (from its thread's hint), then in the
//! **reserve** behind it, a larger range of the same array that the kernel backs with memory
//! only where a record is written (an anonymous mapping made by `Pool::new`, in normal context:
//! the hook itself never allocates or maps). A drainer cannot see the reserve's
//! use in the states it scans unless it scans that far, so a producer that claims a reserve
//! record raises `high` (one past the highest record ever claimed) before its commit, and every
//! drain scans `[0, high)`:
//! - P6 (reach): a record whose commit happens before a drain lies below the `high` that drain
//!   reads (the producer's `fetch_max` is sequenced before its commit; coherence).
//!
//! # Record pool: actors, states, invariants
//! - **Producer**: any thread inside the allocator hook (normal context, a signal handler, TLS
//!   teardown). **Drainer**: an L holder, proven by `&mut PoolDrain` kept inside L.
//! - Each record is FREE -> WRITING (a producer's CAS) -> READY (its Release store) -> FREE (the
//!   drainer's Release store, after reading it). Nothing else moves a state.
//! - P1 (exclusive writer): only the producer whose CAS moved a record to WRITING writes its words,
//!   and only while it is WRITING.
//! - P2 (complete reads): the drainer reads a record's words only after an Acquire load saw READY,
//!   which pairs with the producer's Release store; the words are complete and no longer written.
//! - P3 (exactly once): a READY record is handed to the drain callback once: only L holders drain,
//!   and the drainer frees a record only after its callback returned.
//! - P4 (reuse): a producer's claim is an Acquire CAS that pairs with the drainer's Release store
//!   of FREE, so the drainer's reads happen before the next producer's writes.
//! - P5 (order): records carry a process-wide sequence number (word `SEQ_WORD`) and one drain hands
//!   them out in sequence order. Across drains there is no order: a drain that scanned a record
//!   while it was still FREE may find a later record of the same thread READY (loom found it);
//!   events carry their time, and the live set never relies on order (`flush/alloc.rs`).
//!
//! # Live table
//! One word per entry: 0 (empty) or `address | tag << 48`, the tag taken from the sample's
//! sequence number so that a block freed and a new one sampled at the same address and entry are
//! told apart. The hook inserts (CAS 0 -> word) before it commits the sample's record; a free
//! clears it (CAS word -> 0); an L holder asks whether an entry still holds the word it read from
//! the record. Entries are grouped in buckets of [`BUCKET`] words by a hash of the address, so
//! a free that must search (no header, see `hook.rs`) reads one cache line.
//!
//! # Gate
//! [`Gate`] publishes a recording's state to the hook and lets the recording free it: a hook
//! counts itself in `inside` before it loads the pointer (with a SeqCst fence between), the stop
//! nulls the pointer and waits until `inside` drains (fence between as well): either the hook saw
//! null or the stop sees its count (the Dekker pattern of `sampler/signal.rs`).
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::sync::{fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, UnsafeCell};
use std::ptr;

/// Address space a pool's reserve may take: 64 MiB (memory only for the records a burst writes).
const RESERVE_BYTES: usize = 64 << 20;

/// Records of the reserve behind a pool of `base` records of `record_words` words: the samples a
/// flusher that falls behind (a loaded machine, a flush slowed by deep stacks) leaves in the pool
/// go there rather than being lost. 31 times the base (31 744 records, 16 GiB allocated at the
/// default interval, 8 s of 1 GB/s on two cores), at most 64 MiB, and never less than the base.
pub(crate) fn reserve_for(base: usize, record_words: usize) -> usize {
    (RESERVE_BYTES / (record_words.max(1) * 8)).clamp(base, base.saturating_mul(31))
}

const FREE: u32 = 0;
const WRITING: u32 = 1;
const READY: u32 = 2;

/// Word of a record that holds its sequence number (P5). The other words are the hook's.
pub const SEQ_WORD: usize = 0;

/// The pool of records (see the module docs).
#[derive(Debug)]
pub struct Pool {
    /// The states and words of every record, the reserve's included.
    storage: Storage,
    /// Records claimed first (from a producer's hint); the rest, `[base, records)`, is the reserve.
    base: usize,
    records: usize,
    record_words: usize,
    /// Records committed and not yet drained: the producers that make it reach each quarter of
    /// the base ask for an early flush (the flusher ignores a wakeup that comes too soon after
    /// its last flush, so one is not enough).
    ready: AtomicUsize,
    /// One past the highest record ever claimed (at least `base`): drains scan `[0, high)`.
    /// Written by: producers claiming in the reserve (`fetch_max`, before their commit). Read by:
    /// drainers.
    high: AtomicUsize,
    /// Where the next claim in the reserve starts looking (a hint: the CAS decides).
    reserve_next: AtomicUsize,
}

/// A record a producer owns (WRITING). Dropping it without [`Claim::commit`] frees it.
#[derive(Debug)]
pub struct Claim<'a> {
    pool: &'a Pool,
    index: usize,
}

/// What [`Claim::commit`] asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// This commit filled another quarter of the base, or its record came from the reserve:
    /// the caller should ask for an early flush.
    pub wake: bool,
}

impl Pool {
    /// Bytes of the records that may be resident: every record below the highest ever claimed
    /// (the reserve above it is address space only), words and states.
    pub fn touched_bytes(&self) -> usize {
        // Relaxed: a statistic.
        let high = self.high.load(Ordering::Relaxed).max(self.base).min(self.records);
        high * (self.record_words * 8 + std::mem::size_of::<u32>())
    }

    /// `base + reserve` records of `record_words` words each (at least 1 and 2), all FREE. The
    /// reserve is address space until a record of it is first written (see [`Storage`]).
    pub fn new(base: usize, record_words: usize, reserve: usize) -> Pool {
        let base = base.max(1);
        let record_words = record_words.max(SEQ_WORD + 2);
        let (storage, records) = Storage::new(base, base.saturating_add(reserve), record_words);
        Pool {
            storage,
            base,
            records,
            record_words,
            ready: AtomicUsize::new(0),
            high: AtomicUsize::new(base),
            reserve_next: AtomicUsize::new(0),
        }
    }

    /// Claims a FREE record: one of the base, looking from record `hint` on, else one of the
    /// reserve; `None` when every record is taken.
    ///
    /// # Signal safety
    /// Atomic loads, one CAS per candidate and one `fetch_max`; no allocation, no lock. A
    /// reserve record written for the first time faults its page in (the kernel's work).
    #[inline]
    pub fn claim(&self, hint: usize) -> Option<Claim<'_>> {
        let base = self.base;
        for k in 0..base {
            let index = hint.wrapping_add(k) % base;
            if self.try_claim(index) {
                return Some(Claim { pool: self, index });
            }
        }
        let reserve = self.records - base;
        if reserve == 0 || cfg!(recorder_mutation = "pool_reserve_unused") {
            return None;
        }
        // Relaxed: a hint.
        let start = self.reserve_next.load(Ordering::Relaxed);
        for k in 0..reserve {
            let index = base + start.wrapping_add(k) % reserve;
            if self.try_claim(index) {
                // Relaxed: a hint.
                self.reserve_next.store((index - base + 1) % reserve, Ordering::Relaxed);
                // Relaxed: sequenced before this record's commit, so a drain that the commit
                // happens before reads this value or a later one (coherence) and scans the record.
                if self.high.load(Ordering::Relaxed) <= index {
                    self.high.fetch_max(index + 1, Ordering::Relaxed);
                }
                return Some(Claim { pool: self, index });
            }
        }
        None
    }

    #[inline]
    fn try_claim(&self, index: usize) -> bool {
        let Some(state) = self.storage.states().get(index) else { return false };
        // Relaxed: a hint that skips the CAS on taken records; the CAS below decides.
        if state.load(Ordering::Relaxed) != FREE {
            return false;
        }
        // Acquire (success): pairs with the drainer's Release store of FREE in `drain` (P4):
        // its reads of this record happen before our writes. Relaxed (failure): nothing read.
        state.compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    fn word(&self, index: usize, at: usize) -> Option<&UnsafeCell<u64>> {
        if at >= self.record_words {
            return None;
        }
        self.storage.words().get(index * self.record_words + at)
    }
}

impl Claim<'_> {
    /// Writes word `at` (ignored out of range).
    ///
    /// # Signal safety
    /// One plain store.
    #[inline(always)]
    pub fn write(&mut self, at: usize, value: u64) {
        if let Some(cell) = self.pool.word(self.index, at) {
            // SAFETY: P1: this record is WRITING and we moved it there; nobody else touches its
            // words until our Release store of READY (or FREE).
            cell.with_mut(|p| unsafe { p.write(value) });
        }
    }

    /// Publishes the record to L holders (P2).
    ///
    /// # Signal safety
    /// One atomic store and one RMW.
    #[inline]
    pub fn commit(self) -> Committed {
        let pool = self.pool;
        let index = self.index;
        std::mem::forget(self);
        if let Some(state) = pool.storage.states().get(index) {
            // Release: publishes the words written above; pairs with the Acquire load in `drain`.
            state.store(READY, Ordering::Release);
        }
        // Relaxed: a fill level for the wakeup heuristic; nothing is published through it.
        let now = pool.ready.fetch_add(1, Ordering::Relaxed) + 1;
        let quarter = pool.base.div_ceil(4);
        Committed { wake: now.is_multiple_of(quarter) || index >= pool.base }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.pool.storage.states().get(self.index) {
            // Release: our (partial) writes happen before a later claimer's (Acquire CAS).
            state.store(FREE, Ordering::Release);
        }
    }
}

/// The drainer's state; keep it inside L (every drain takes `&mut`).
#[derive(Debug, Default)]
pub struct PoolDrain {
    ready: Vec<(u64, usize)>,
    record: Vec<u64>,
}

impl Pool {
    /// Hands every READY record to `f` in sequence order (P5), then frees it; returns how many.
    /// L held (`drain` is the only drainer).
    pub fn drain(&self, d: &mut PoolDrain, f: &mut dyn FnMut(&[u64])) -> usize {
        d.ready.clear();
        // Relaxed: see `claim`: every record whose commit happens before this drain lies below.
        let high = if cfg!(recorder_mutation = "pool_drain_base_only") {
            self.base
        } else {
            self.high.load(Ordering::Relaxed)
        };
        for (index, state) in self.storage.states().iter().enumerate().take(high) {
            // Acquire: pairs with the Release store of READY in `Claim::commit` (P2).
            if state.load(Ordering::Acquire) == READY {
                let seq = self.read(index, SEQ_WORD);
                d.ready.push((seq, index));
            }
        }
        d.ready.sort_unstable();
        for &(_, index) in &d.ready {
            d.record.clear();
            for at in 0..self.record_words {
                let w = self.read(index, at);
                d.record.push(w);
            }
            f(&d.record);
            if let Some(state) = self.storage.states().get(index) {
                // Release: our reads of the record happen before the next producer's writes;
                // pairs with the Acquire CAS in `claim` (P4).
                state.store(FREE, Ordering::Release);
            }
        }
        // Relaxed: the fill level (see `ready`).
        self.ready.fetch_sub(d.ready.len(), Ordering::Relaxed);
        d.ready.len()
    }

    fn read(&self, index: usize, at: usize) -> u64 {
        match self.word(index, at) {
            // SAFETY: P2: the caller saw READY with Acquire; the words are complete and only the
            // drainer (us, under L) touches a READY record.
            Some(cell) => cell.with(|p| unsafe { p.read() }),
            None => 0,
        }
    }
}

/// The memory of a pool's records: one anonymous mapping (zero-filled: every state FREE) that the
/// kernel backs page by page when a record is first written, so a reserve costs address space
/// (and commit charge, where the kernel counts it: a mapping it refuses leaves the base alone),
/// not memory, until a burst needs it; the heap (every record touched at once) for the base alone
/// when the mapping fails, and under loom.
enum Storage {
    #[cfg(not(loom))]
    Mapped {
        base: std::ptr::NonNull<u8>,
        len: usize,
        records: usize,
        record_words: usize,
        words_at: usize,
    },
    Heap {
        states: Box<[AtomicU32]>,
        words: Box<[UnsafeCell<u64>]>,
    },
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("records", &self.states().len()).finish()
    }
}

// SAFETY: the mapping is owned by the storage and only reached through `states` and `words`
// (atomics, and cells accessed under the pool's protocol), as the heap variant is.
unsafe impl Send for Storage {}
// SAFETY: as for `Send`.
unsafe impl Sync for Storage {}

impl Storage {
    /// Storage for `records` records (or only `base` if the mapping fails); returns how many.
    fn new(base: usize, records: usize, record_words: usize) -> (Storage, usize) {
        #[cfg(not(loom))]
        let records = match Storage::mapped(records, record_words) {
            Some(s) => return (s, records),
            None => base,
        };
        #[cfg(loom)]
        let _ = base;
        let states = (0..records).map(|_| AtomicU32::new(FREE)).collect();
        let words = (0..records * record_words).map(|_| UnsafeCell::new(0)).collect();
        (Storage::Heap { states, words }, records)
    }

    #[cfg(not(loom))]
    fn mapped(records: usize, record_words: usize) -> Option<Storage> {
        let words_at = records.checked_mul(4)?.checked_next_multiple_of(64)?;
        let len = records.checked_mul(record_words)?.checked_mul(8)?.checked_add(words_at)?;
        // SAFETY: a fresh private anonymous mapping; no address is imposed.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let base = std::ptr::NonNull::new(p.cast::<u8>())?;
        Some(Storage::Mapped { base, len, records, record_words, words_at })
    }

    #[inline(always)]
    fn states(&self) -> &[AtomicU32] {
        match self {
            #[cfg(not(loom))]
            Storage::Mapped { base, records, .. } => {
                // SAFETY: the mapping is page-aligned, zero-filled (0 is a valid `AtomicU32`, FREE),
                // holds `records` states from its start and lives as long as `self`.
                unsafe { std::slice::from_raw_parts(base.as_ptr().cast::<AtomicU32>(), *records) }
            }
            Storage::Heap { states, .. } => states,
        }
    }

    #[inline(always)]
    fn words(&self) -> &[UnsafeCell<u64>] {
        match self {
            #[cfg(not(loom))]
            Storage::Mapped { base, records, record_words, words_at, .. } => {
                // SAFETY: `words_at` is a multiple of 64 inside the mapping, which holds
                // `records * record_words` zero-filled words from there (a valid `UnsafeCell<u64>`,
                // `repr(transparent)` over `u64`) and lives as long as `self`.
                unsafe {
                    std::slice::from_raw_parts(
                        base.as_ptr().add(*words_at).cast::<UnsafeCell<u64>>(),
                        records * record_words,
                    )
                }
            }
            Storage::Heap { words, .. } => words,
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        if let Storage::Mapped { base, len, .. } = self {
            // SAFETY: our mapping; the pool (and every claim borrowing it) is gone.
            unsafe { libc::munmap(base.as_ptr().cast(), *len) };
        }
    }
}

/// Words per live-table bucket: one cache line.
pub const BUCKET: usize = 8;
/// The address bits of a live-table word (user-space addresses below 2^48).
pub const ADDRESS_MASK: u64 = (1 << 48) - 1;

/// The live table (see the module docs).
#[derive(Debug)]
pub struct LiveTable {
    /// Written by: the hook (insert, free), stop (clear). Read by: the hook (free), L holders.
    words: Box<[AtomicU64]>,
}

/// A tracked block: its entry and the word the entry holds while the block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveRef {
    /// Entry index.
    pub index: u32,
    /// `address | tag << 48`.
    pub word: u64,
}

impl LiveTable {
    /// A table of about `entries` entries (rounded up to whole buckets, a power of two of them).
    pub fn new(entries: usize) -> LiveTable {
        let buckets = entries.div_ceil(BUCKET).max(1).next_power_of_two();
        LiveTable { words: (0..buckets * BUCKET).map(|_| AtomicU64::new(0)).collect() }
    }

    fn bucket(&self, address: u64) -> usize {
        // A multiplicative hash of the address without its alignment bits.
        let h = (address >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let buckets = self.words.len() / BUCKET;
        ((h >> 32) as usize & (buckets - 1)) * BUCKET
    }

    /// Tracks the block at `address` with `tag` (non-zero, below 2^16); `None` if its bucket is
    /// full or the address does not fit 48 bits.
    ///
    /// # Signal safety
    /// At most [`BUCKET`] CASes.
    #[inline]
    pub fn insert(&self, address: u64, tag: u64) -> Option<LiveRef> {
        if address == 0 || address > ADDRESS_MASK {
            return None;
        }
        let word = address | ((tag & 0xffff).max(1) << 48);
        let start = self.bucket(address);
        for index in start..start + BUCKET {
            let Some(w) = self.words.get(index) else { continue };
            // Relaxed (all): the word publishes nothing but itself; whoever learns of the entry
            // (the record's reader, the block's freer) is ordered after this insert by the
            // record's commit or by the pointer's hand-over.
            if w.load(Ordering::Relaxed) == 0
                && w.compare_exchange(0, word, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                return Some(LiveRef { index: index as u32, word });
            }
        }
        None
    }

    /// The block at `address`, tracked in entry `index`, is freed (a header told the index).
    ///
    /// # Signal safety
    /// One load and one CAS.
    #[inline]
    pub fn free_at(&self, index: u32, address: u64) {
        let Some(w) = self.words.get(index as usize) else { return };
        // Relaxed: see `insert`.
        let current = w.load(Ordering::Relaxed);
        if current != 0 && current & ADDRESS_MASK == address {
            // Relaxed: see `insert`. A failure means the entry changed meanwhile (cleared).
            let _ = w.compare_exchange(current, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The block at `address` is freed: finds its entry in its bucket, if it has one.
    ///
    /// # Signal safety
    /// At most [`BUCKET`] loads and one CAS.
    #[inline]
    pub fn free(&self, address: u64) {
        if address == 0 || address > ADDRESS_MASK {
            return;
        }
        let start = self.bucket(address);
        for index in start..start + BUCKET {
            let Some(w) = self.words.get(index) else { continue };
            // Relaxed: see `insert`.
            let current = w.load(Ordering::Relaxed);
            if current != 0 && current & ADDRESS_MASK == address {
                // Relaxed: see `insert`.
                let _ = w.compare_exchange(current, 0, Ordering::Relaxed, Ordering::Relaxed);
                return;
            }
        }
    }

    /// The entry still holds `r.word`: the block has not been freed.
    pub fn is_live(&self, r: LiveRef) -> bool {
        // Relaxed: see `insert`; a free racing with this check may go either way.
        self.words.get(r.index as usize).is_some_and(|w| w.load(Ordering::Relaxed) == r.word)
    }

    /// Empties every entry (a recording starts or stops: no earlier sample is followed any more).
    pub fn clear(&self) {
        for w in self.words.iter() {
            // Relaxed (both): see `insert`. A swap rather than a store: every write of an entry is
            // then a read-modify-write, so a free's CAS and this clear are ordered as RMWs (loom
            // does not order a plain store against a concurrent CAS of another thread).
            if w.load(Ordering::Relaxed) != 0 {
                w.swap(0, Ordering::Relaxed);
            }
        }
    }
}

/// Publishes a `T` to hooks and waits them out before it is freed (see the module docs).
#[derive(Debug)]
pub struct Gate<T> {
    /// The published state, or null. Written by: start and stop (normal context). Read by: hooks.
    current: AtomicPtr<T>,
    /// Hooks between their increment in `enter` and their decrement in `Entered::drop`.
    inside: AtomicUsize,
}

impl<T> Gate<T> {
    /// Nothing published.
    #[cfg(not(loom))]
    pub const fn new() -> Gate<T> {
        Gate { current: AtomicPtr::new(ptr::null_mut()), inside: AtomicUsize::new(0) }
    }

    /// Nothing published.
    #[cfg(loom)]
    pub fn new() -> Gate<T> {
        Gate { current: AtomicPtr::new(ptr::null_mut()), inside: AtomicUsize::new(0) }
    }

    /// Publishes `state` (null: nothing). The caller keeps ownership and frees it only after
    /// [`Gate::close`].
    pub fn open(&self, state: *mut T) {
        // Release: publishes the initialized state; pairs with the Acquire load in `enter`.
        self.current.store(state, Ordering::Release);
    }

    /// Unpublishes the state and waits until no hook can still use it; returns what was
    /// published. After it returns the caller may free it.
    pub fn close(&self) -> *mut T {
        // Relaxed + the SeqCst fence below: Dekker with the increment + fence + load in `enter`.
        let old = self.current.swap(ptr::null_mut(), Ordering::Relaxed);
        // SeqCst fence: the load of `inside` below cannot move before the swap above; pairs with
        // the fence in `enter`. Either the hook sees null or we see its count.
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release decrement in `Entered::drop`: the hook is done with it.
        while self.inside.load(Ordering::Acquire) != 0 {
            crate::sync::yield_now();
        }
        old
    }

    /// Counts the caller in and returns the published state (if any) for as long as the guard
    /// lives.
    ///
    /// # Signal safety
    /// Two atomic RMWs, a fence and a load.
    #[inline]
    pub fn enter(&self) -> Entered<'_, T> {
        // Relaxed + SeqCst fence: Dekker with `close` (see there).
        self.inside.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // Acquire: pairs with the Release store in `open`.
        let state = self.current.load(Ordering::Acquire);
        Entered { gate: self, state }
    }

    /// Nothing is published: a hint for a fast path that then skips [`Gate::enter`] (a caller
    /// that sees an open or close late acts as if it came a little earlier or later).
    ///
    /// # Signal safety
    /// One load.
    #[inline(always)]
    pub fn is_closed(&self) -> bool {
        // Relaxed: a hint; whoever acts on an open gate still enters it (Acquire in `enter`).
        self.current.load(Ordering::Relaxed).is_null()
    }

    /// Forgets the state and every hook inside it without waiting: only for a forked child,
    /// whose other threads (and their hooks) do not exist.
    pub fn forget_in_child(&self) {
        // Relaxed (both): a single-threaded child.
        self.current.store(ptr::null_mut(), Ordering::Relaxed);
        self.inside.store(0, Ordering::Relaxed);
    }
}

/// A hook inside the gate (see [`Gate::enter`]).
#[derive(Debug)]
pub struct Entered<'a, T> {
    gate: &'a Gate<T>,
    state: *mut T,
}

impl<T> Entered<'_, T> {
    /// The published state, alive while this guard is.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        // SAFETY: non-null means published by `open`; `close` waits for our decrement before the
        // owner frees it, and this borrow cannot outlive the guard.
        unsafe { self.state.as_ref() }
    }
}

impl<T> Drop for Entered<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: our uses of the state happen before `close` sees the count drop.
        self.gate.inside.fetch_sub(1, Ordering::Release);
    }
}
