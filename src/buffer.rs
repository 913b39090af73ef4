//! Per-thread event buffers: the application thread appends committed records, holders of the
//! chunk-writer lock L copy them into the chunk.
//!
//! Actors and indices (docs/architecture.md, "Who may touch what"):
//! - the **owner** (one application thread) writes records at `committed` and publishes them with
//!   a Release store of `committed`;
//! - an **L holder** (flusher, recorder thread, dump, stop) copies `[flushed, committed)` into the
//!   chunk and advances `flushed`.
//!
//! Invariants:
//! - E1: `flushed <= committed <= capacity`, both monotonic.
//! - E2: bytes at or above `committed` are written only by the owner; bytes below it never change.
//! - E3: only L holders read `[flushed, committed)` and move `flushed`; each byte is copied once.
//! - E4: a buffer is `retired` by its owner (full, or thread exit) and never written again; an L
//!   holder drops it once `flushed == committed` after seeing `retired`.
#![allow(unsafe_code)]

use crate::sync::{AtomicBool, AtomicUsize, Ordering};

/// One thread's event buffer.
pub struct EventBuffer {
    ptr: *mut u8,
    capacity: usize,
    /// End of the records the L holder may copy. Written by: the owner (Release). Read by: L
    /// holders (Acquire). Invariant: E1.
    committed: AtomicUsize,
    /// End of the records already copied. Written and read by: L holders only. Invariant: E1, E3.
    flushed: AtomicUsize,
    /// Set by the owner when it stops using the buffer. Invariant: E4.
    retired: AtomicBool,
    /// OS thread id of the owner (diagnostics).
    tid: u32,
    /// Under loom only: one checked cell per payload byte, written and read alongside the real
    /// bytes, so the models see every unordered access to the payload (I12 / E2).
    #[cfg(loom)]
    shadow: Box<[crate::sync::UnsafeCell<u8>]>,
}

// SAFETY: the raw payload is shared by exactly one writer (the owner, above `committed`) and
// readers of `[flushed, committed)` (L holders), which never overlap (E2, E3); all coordination is
// through the atomics.
unsafe impl Send for EventBuffer {}
// SAFETY: as above.
unsafe impl Sync for EventBuffer {}

impl std::fmt::Debug for EventBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBuffer")
            .field("tid", &self.tid)
            .field("capacity", &self.capacity)
            .field("committed", &self.committed.load(Ordering::Relaxed))
            .finish()
    }
}

impl EventBuffer {
    /// A buffer of `capacity` bytes owned by thread `tid`.
    pub fn new(capacity: usize, tid: u32) -> EventBuffer {
        // Uninitialized: no byte is read before the owner has written it (E2: readers only see
        // `[flushed, committed)`), so zeroing the buffer (a 64 KiB memset on the committing thread
        // for every new buffer) would be wasted.
        let layout = Self::layout(capacity);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        EventBuffer {
            ptr,
            capacity,
            committed: AtomicUsize::new(0),
            flushed: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            tid,
            #[cfg(loom)]
            shadow: (0..capacity).map(|_| crate::sync::UnsafeCell::new(0)).collect(),
        }
    }

    /// The allocation of a buffer of `capacity` bytes (at least one byte: zero-sized allocations
    /// are not allowed).
    fn layout(capacity: usize) -> std::alloc::Layout {
        std::alloc::Layout::array::<u8>(capacity.max(1)).expect("buffer size fits the address space")
    }

    /// Makes a drained, retired buffer (no other reference left) new again, for owner `tid`.
    #[cfg(not(loom))]
    pub fn reset(&mut self, tid: u32) {
        *self.committed.get_mut() = 0;
        *self.flushed.get_mut() = 0;
        *self.retired.get_mut() = false;
        self.tid = tid;
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Owner only: appends one or more complete records and publishes them. Returns `false` (and
    /// writes nothing) if they do not fit.
    #[inline]
    pub fn append(&self, records: &[u8]) -> bool {
        // Relaxed: only the owner stores `committed`, so it reads its own last value.
        let at = self.committed.load(Ordering::Relaxed);
        if records.len() > self.capacity - at {
            return false;
        }
        // SAFETY: [at, at + len) is inside the allocation (checked above) and at or above
        // `committed`, which only this owner writes and no reader touches (E2).
        unsafe { copy_record(records, self.ptr.add(at)) };
        #[cfg(loom)]
        for (i, &b) in records.iter().enumerate() {
            // SAFETY: loom checks this access; the cell is only written here (by the owner).
            self.shadow[at + i].with_mut(|p| unsafe { *p = b });
        }
        // Release: publishes the bytes copied above; pairs with the Acquire load of `committed` in
        // `EventBuffer::drain` (L holder).
        self.committed.store(at + records.len(), Ordering::Release);
        true
    }

    /// Owner only: the free space `[committed, capacity)`, for encoding records in place. Only the
    /// owner writes there (E2) until it publishes with [`Self::publish_to`].
    #[cfg(not(loom))]
    #[inline]
    pub fn free_space(&self) -> (*mut u8, *mut u8) {
        // Relaxed: only the owner stores `committed`, so it reads its own last value.
        let at = self.committed.load(Ordering::Relaxed);
        // SAFETY: `at <= capacity` (E1): both pointers are inside the allocation or one past it.
        unsafe { (self.ptr.add(at), self.ptr.add(self.capacity)) }
    }

    /// Owner only: publishes the records the owner wrote in place up to `end`.
    ///
    /// # Safety
    /// `end` lies in `[committed, capacity]` of this buffer (from [`Self::free_space`]) and every
    /// byte below it is a written, complete record.
    #[cfg(not(loom))]
    #[inline]
    pub unsafe fn publish_to(&self, end: *mut u8) {
        let at = end as usize - self.ptr as usize;
        debug_assert!(at >= self.committed.load(Ordering::Relaxed) && at <= self.capacity);
        // Release: publishes the bytes written in place; pairs with the Acquire load of
        // `committed` in `EventBuffer::drain` (L holder).
        self.committed.store(at, Ordering::Release);
    }

    /// Owner only: the buffer will not be written again.
    pub fn retire(&self) {
        // Release: orders every earlier `append` before the flag; pairs with the Acquire load in
        // `is_retired` (L holder), which then sees the final `committed`.
        self.retired.store(true, Ordering::Release);
    }

    /// The owner retired the buffer.
    pub fn is_retired(&self) -> bool {
        // Acquire: pairs with the Release store in `retire`.
        self.retired.load(Ordering::Acquire)
    }

    /// L holder only: hands the unflushed committed records to `f` and marks them flushed.
    /// Returns the number of bytes handed over.
    ///
    /// Callers prove they hold L by being inside the chunk writer's critical section; the buffer
    /// cannot check it.
    pub fn drain(&self, f: impl FnOnce(&[u8])) -> usize {
        // Acquire: pairs with the Release store in `append`; the bytes below are complete.
        let end = self.committed.load(Ordering::Acquire);
        // Relaxed: `flushed` is only touched by L holders, which L serializes.
        let start = self.flushed.load(Ordering::Relaxed);
        if end <= start {
            return 0;
        }
        // SAFETY: [start, end) was published by the owner (Acquire above) and is never written
        // again (E2); the slice covers only that range (I12: no reference to the whole payload).
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) };
        #[cfg(loom)]
        for (i, &b) in bytes.iter().enumerate() {
            // SAFETY: loom checks this access against the owner's write in `append`.
            self.shadow[start + i].with(|p| assert_eq!(unsafe { *p }, b, "payload byte {} torn", start + i));
        }
        f(bytes);
        // Relaxed: serialized by L (E3).
        self.flushed.store(end, Ordering::Relaxed);
        end - start
    }

    /// L holder: everything committed has been flushed.
    pub fn is_drained(&self) -> bool {
        // Acquire: pairs with `append`'s Release store.
        self.committed.load(Ordering::Acquire) == self.flushed.load(Ordering::Relaxed)
    }
}

/// Copies `src` to `dst`. A typical event record is 8 to 32 bytes: it is copied as two or four
/// 8-byte words (overlapping where the length is not a multiple of 8), inline, instead of calling
/// `memcpy`. (No loop: LLVM turns a word-copy loop back into a `memcpy` call.)
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes and not overlap `src`.
#[inline(always)]
unsafe fn copy_record(src: &[u8], dst: *mut u8) {
    let len = src.len();
    let from = src.as_ptr();
    if !(8..=32).contains(&len) {
        // SAFETY: as the caller guarantees.
        unsafe { std::ptr::copy_nonoverlapping(from, dst, len) };
        return;
    }
    // SAFETY (every call): `at + 8 <= len`, so the word is inside `src` and the destination.
    let word =
        |at: usize| unsafe { dst.add(at).cast::<u64>().write_unaligned(from.add(at).cast::<u64>().read_unaligned()) };
    // [0, 8) and [len - 8, len) cover 8..=16 bytes; with [8, 16) and [len - 16, len - 8), 32.
    word(0);
    word(len - 8);
    if len > 16 {
        word(8);
        word(len - 16);
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `std::alloc::alloc` with this layout in `new`, and drop runs
        // once, after every other owner of the buffer is gone.
        unsafe { std::alloc::dealloc(self.ptr, Self::layout(self.capacity)) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn append_copies_every_length() {
        let b = EventBuffer::new(8192, 1);
        let mut expected = Vec::new();
        for len in 0..=80usize {
            let record: Vec<u8> = (0..len).map(|i| (len * 7 + i) as u8).collect();
            assert!(b.append(&record));
            expected.extend_from_slice(&record);
        }
        let mut seen = Vec::new();
        b.drain(|bytes| seen.extend_from_slice(bytes));
        assert_eq!(seen, expected);
    }

    #[test]
    fn append_drain_retire() {
        let b = EventBuffer::new(8, 1);
        assert!(b.append(&[1, 2, 3]));
        assert!(b.append(&[4, 5]));
        assert!(!b.append(&[0; 4]));
        let mut seen = Vec::new();
        assert_eq!(b.drain(|bytes| seen.extend_from_slice(bytes)), 5);
        assert_eq!(seen, [1, 2, 3, 4, 5]);
        assert_eq!(b.drain(|_| panic!("nothing new")), 0);
        assert!(b.is_drained());
        b.retire();
        assert!(b.is_retired());
    }
}
