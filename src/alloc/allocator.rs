//! The allocator and a recording's handle on the hook (see the module docs of `alloc`).

use super::{hook, pool};
use std::alloc::{GlobalAlloc, Layout, System};

/// Mean bytes between samples when allocation sampling is on: 512 KiB, as Go's `MemProfileRate`
/// and jemalloc's `lg_prof_sample:19`.
pub const DEFAULT_INTERVAL: u64 = 512 * 1024;

/// A global allocator that samples allocations for the recorder (see the module docs).
///
/// It forwards every call to `A` and samples only while a recording asks for it; without one it
/// costs one thread-local countdown per allocation. Install it with `#[global_allocator]`:
/// `SamplingAllocator::new()` wraps the system allocator, `SamplingAllocator::with(a)` another.
#[derive(Debug, Clone, Copy, Default)]
pub struct SamplingAllocator<A: GlobalAlloc = System> {
    inner: A,
}

impl SamplingAllocator<System> {
    /// Wraps the system allocator.
    pub const fn new() -> SamplingAllocator<System> {
        SamplingAllocator { inner: System }
    }
}

impl<A: GlobalAlloc> SamplingAllocator<A> {
    /// Wraps `inner`.
    pub const fn with(inner: A) -> SamplingAllocator<A> {
        SamplingAllocator { inner }
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }

    fn wraps_system() -> bool {
        std::any::type_name::<A>() == std::any::type_name::<System>()
    }

    #[inline(always)]
    unsafe fn forward(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        // SAFETY: the caller's `GlobalAlloc` contract, passed on.
        unsafe {
            if zeroed {
                self.inner.alloc_zeroed(layout)
            } else {
                self.inner.alloc(layout)
            }
        }
    }

    /// Every allocation the countdown did not skip (see `hook::decide`).
    #[cold]
    #[inline(never)]
    unsafe fn alloc_slow(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        hook::note_installed(Self::wraps_system());
        let Some(mut ticket) = hook::decide(layout.size()) else {
            // SAFETY: the caller's contract.
            return unsafe { self.forward(layout, zeroed) };
        };
        ticket.capture();
        if ticket.wants_header() {
            if let Some((block, offset)) = hook::header::enlarged(layout) {
                // SAFETY: the caller's contract; `block` is a valid non-zero-sized layout.
                let base = unsafe { self.forward(block, zeroed) };
                if base.is_null() {
                    ticket.failed();
                    return base;
                }
                // SAFETY: `offset < block.size()`, so `user` stays inside the block.
                let user = unsafe { base.add(offset) };
                let live = ticket.track(user);
                // SAFETY: `user` came from `enlarged`: the 8 bytes before it are ours.
                unsafe { hook::header::write(user, offset, live.map(|r| r.index)) };
                ticket.commit(layout.size(), live);
                return user;
            }
        }
        // SAFETY: the caller's contract.
        let p = unsafe { self.forward(layout, zeroed) };
        if p.is_null() {
            ticket.failed();
            return p;
        }
        let live = ticket.track(p);
        ticket.commit(layout.size(), live);
        p
    }

    /// Every free while live-set tracking is (or was) on.
    #[cold]
    #[inline(never)]
    unsafe fn dealloc_slow(&self, ptr: *mut u8, layout: Layout, mode: u8) {
        if hook::headers_may_exist(mode) {
            // SAFETY: header bits are set only when `A` is the system allocator on glibc: every
            // block it returned has 8 mapped bytes before it (see `hook::header`).
            if let Some((offset, entry)) = unsafe { hook::header::read(ptr) } {
                hook::freed_with_header(entry, ptr);
                // SAFETY: a header block was allocated as `block_layout(layout, offset)` at
                // `ptr - offset` (`alloc_slow`); the caller's contract covers the rest.
                unsafe { self.inner.dealloc(ptr.sub(offset), hook::header::block_layout(layout, offset)) };
                return;
            }
        }
        if hook::search_on_free(mode) {
            hook::freed(ptr);
        }
        // SAFETY: the caller's contract.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    /// Every realloc that is sampled or may touch a tracked block.
    #[cold]
    #[inline(never)]
    unsafe fn realloc_slow(&self, ptr: *mut u8, layout: Layout, new_size: usize, sampled: bool) -> *mut u8 {
        let mode = hook::dealloc_mode();
        // SAFETY: as in `dealloc_slow`.
        let headered = hook::headers_may_exist(mode) && unsafe { hook::header::read(ptr) }.is_some();
        if headered || (sampled && hook::headers_may_exist(mode)) {
            // A block with a header cannot grow in place into one without (or the reverse):
            // move it. The new block gets its own sampling decision.
            // SAFETY: `GlobalAlloc::realloc`'s contract: `new_size` with `layout.align()` is valid.
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            let new = if sampled {
                // SAFETY: the caller's contract.
                unsafe { self.alloc_slow(new_layout, false) }
            } else {
                // SAFETY: as above.
                unsafe { self.inner.alloc(new_layout) }
            };
            if !new.is_null() {
                // SAFETY: both blocks are valid for the copied length and do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    self.dealloc_slow(ptr, layout, hook::dealloc_mode());
                }
            }
            return new;
        }
        if hook::search_on_free(mode) {
            // The old block's tracking ends here (if realloc fails, it stays untracked).
            hook::freed(ptr);
        }
        hook::note_installed(Self::wraps_system());
        let ticket = if sampled { hook::decide(new_size) } else { None };
        let Some(mut ticket) = ticket else {
            // SAFETY: the caller's contract.
            return unsafe { self.inner.realloc(ptr, layout, new_size) };
        };
        ticket.capture();
        // SAFETY: the caller's contract.
        let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if p.is_null() {
            ticket.failed();
            return p;
        }
        let live = ticket.track(p);
        ticket.commit(new_size, live);
        p
    }
}

// SAFETY: every method forwards to `A` with the caller's layout, or (live-set headers) with a
// larger layout whose block contains the caller's, freed with the same larger layout; the
// sampling bookkeeping never touches the caller's bytes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for SamplingAllocator<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if hook::skip(layout.size()) {
            // SAFETY: the caller's contract.
            return unsafe { self.inner.alloc(layout) };
        }
        // SAFETY: the caller's contract.
        unsafe { self.alloc_slow(layout, false) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if hook::skip(layout.size()) {
            // SAFETY: the caller's contract.
            return unsafe { self.inner.alloc_zeroed(layout) };
        }
        // SAFETY: the caller's contract.
        unsafe { self.alloc_slow(layout, true) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let mode = hook::dealloc_mode();
        if mode != 0 {
            // SAFETY: the caller's contract.
            return unsafe { self.dealloc_slow(ptr, layout, mode) };
        }
        // SAFETY: the caller's contract.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let sampled = !hook::skip(new_size);
        if !sampled && hook::dealloc_mode() == 0 {
            // SAFETY: the caller's contract.
            return unsafe { self.inner.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller's contract.
        unsafe { self.realloc_slow(ptr, layout, new_size, sampled) }
    }
}

/// What a recording samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AllocConfig {
    pub interval: u64,
    pub live_set: bool,
    /// Frames kept: innermost, outermost (as the recording's depth policy).
    pub inner: usize,
    pub outer: usize,
    /// Records in the pool.
    pub records: usize,
}

/// Records of a recording's pool at the default interval: 1024 (about 1 MiB at the default
/// depth of 128 frames). At 512 KiB a process allocating 1 GB/s takes ~2000 samples/s per core;
/// the flusher is woken at each quarter of the pool taken (early flushes are at least 20 ms
/// apart), and when a sample needs a record of the reserve ([`super::pool::reserve_for`]).
pub(crate) const DEFAULT_RECORDS: usize = 1024;

/// Records for `interval`: a smaller interval takes proportionally more samples, so the pool
/// grows with it (to 8192 records, about 8 MiB at the default depth).
pub(crate) fn records_for(interval: u64) -> usize {
    let scale = (DEFAULT_INTERVAL / interval.max(1)).clamp(1, 8) as usize;
    DEFAULT_RECORDS * scale
}

/// The hook's counters of a recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocationStats {
    /// Allocations chosen by the countdown.
    pub taken: u64,
    /// Samples written into the recording.
    pub written: u64,
    /// Samples lost (no free record); `taken == written + lost + failed` once drained.
    pub lost: u64,
    /// Chosen allocations that failed (nothing allocated, nothing recorded).
    pub failed: u64,
    /// Samples recorded but not followed by the live set (its table had no room).
    pub untracked: u64,
}

/// A recording's allocation sampling: owns the hook's state, drains it under L.
#[derive(Debug)]
pub(crate) struct Sampling {
    active: *mut hook::Active,
    drain: pool::PoolDrain,
    frames: Vec<u64>,
    written: u64,
    stopped: bool,
}

// SAFETY: the raw pointer is the owned `Box<Active>`; `Active` is `Sync` (atomics, a pool of
// atomics and cells accessed under its protocol, a `Send + Sync` closure).
unsafe impl Send for Sampling {}

/// How allocation sampling could not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// No `SamplingAllocator` is the global allocator.
    NotInstalled,
}

impl Sampling {
    /// Starts sampling with `config`; `wake` asks the flusher for an early flush.
    pub(crate) fn start(config: AllocConfig, wake: Box<dyn Fn() + Send + Sync>) -> Result<Sampling, StartError> {
        if hook::installed().is_none() {
            // Every thread's first allocation takes the slow path, which notes the allocator.
            drop(std::hint::black_box(Box::new(0u64)));
        }
        let Some(system) = hook::installed() else {
            return Err(StartError::NotInstalled);
        };
        let live = config.live_set.then(hook::live_table);
        let headers = system && hook::malloc_is_glibc();
        let active = Box::into_raw(Box::new(hook::Active::new(
            config.interval,
            config.records,
            config.inner,
            config.outer,
            live,
            headers,
            wake,
        )));
        hook::start(active);
        Ok(Sampling { active, drain: pool::PoolDrain::default(), frames: Vec::new(), written: 0, stopped: false })
    }

    fn active(&self) -> &hook::Active {
        // SAFETY: owned by us until `Drop` frees it.
        unsafe { &*self.active }
    }

    /// Live-set headers are in use (else frees search the table).
    pub(crate) fn headers(&self) -> bool {
        self.active().headers()
    }

    /// Hands every committed sample to `f`, oldest first (L held).
    pub(crate) fn drain(&mut self, f: &mut dyn FnMut(&hook::AllocRecord<'_>)) -> usize {
        // SAFETY: owned by us until `Drop`; `&mut self` is the only drainer.
        let active = unsafe { &*self.active };
        let (inner, outer) = active.depth();
        let frames = &mut self.frames;
        let n = active.pool.drain(&mut self.drain, &mut |words| hook::decode(words, frames, f, inner, outer));
        self.written += n as u64;
        n
    }

    /// Whether a tracked block is still allocated.
    pub(crate) fn is_live(&self, r: pool::LiveRef) -> bool {
        self.active().live().is_some_and(|t| t.is_live(r))
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> AllocationStats {
        let c = &self.active().counters;
        // Relaxed (all): statistics.
        use crate::sync::statics::Ordering::Relaxed;
        AllocationStats {
            taken: c.taken.load(Relaxed),
            written: self.written,
            lost: c.lost.load(Relaxed),
            failed: c.failed.load(Relaxed),
            untracked: c.untracked.load(Relaxed),
        }
    }

    /// Stops sampling: no hook uses the state any more and every sample taken is handed to `f`.
    /// The live set is still followed (for a last snapshot) until `self` is dropped.
    pub(crate) fn stop(&mut self, f: &mut dyn FnMut(&hook::AllocRecord<'_>)) -> AllocationStats {
        if !self.stopped {
            let closed = hook::stop();
            debug_assert!(closed == self.active, "one recording samples allocations at a time");
            self.stopped = true;
        }
        self.drain(f);
        self.stats()
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        if !self.stopped {
            hook::stop();
        }
        // SAFETY: `stop` waited out every hook (one recording samples at a time, so the state it
        // closed was ours); we own the box.
        let active = unsafe { Box::from_raw(self.active) };
        hook::finish(&active);
        drop(active);
    }
}
