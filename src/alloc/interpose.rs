//! Allocation sampling for a library that interposes the C allocator (`malloc`, `free`, ... of
//! `librecorder_preload.so`): the same per-thread byte countdown, decision, stack walk,
//! pool records and live table as [`super::SamplingAllocator`], reached through functions an
//! interposer calls around the real allocator.
//!
//! ```ignore
//! #[no_mangle]
//! pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
//!     if interpose::skip(size) {
//!         return unsafe { __libc_malloc(size) };
//!     }
//!     let fp = interpose::frame_pointer();
//!     unsafe { interpose::sampled(size, fp, || __libc_malloc(size)) }
//! }
//! ```
//!
//! Blocks of a foreign allocator carry no header (the caller may free them with any function of
//! the C allocator, and `malloc_usable_size` must see glibc's own chunk): with the live set on,
//! frees are recognized by the table search ([`tracks_frees`], [`freed`]).
//!
//! Everything here has the hook's guarantees (`hook.rs`): no allocation, no lock, no recursion,
//! no panic; safe before `main`, during thread exit, in forked children and in signal handlers.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::hook;

/// Declares that the process's allocations reach the hook through an interposed C allocator, not
/// a `SamplingAllocator`: a recording may then sample allocations, and its live set searches
/// the table on free (no headers). Call it before the first recording starts.
pub fn use_foreign_allocator() {
    hook::note_installed(false);
}

/// Says (on stderr and as a `recorder.Diagnostic` in the running recording) that allocation
/// sampling sees nothing: the process's `malloc` is `owner`'s (a path, or "the program itself"),
/// bound ahead of the interposer. Call it after the recording started.
pub fn report_allocator_not_interposed(owner: &str) {
    crate::diagnostics::report_allocator_not_interposed(owner);
}

/// The fast path: true if the allocation is not sampled (almost always), and the interposer
/// just forwards. While no recording samples allocations it reads one global flag; while one
/// does, it counts `size` bytes down in a thread-local.
///
/// # Signal safety
/// Global loads, thread-local loads and a store.
#[inline(always)]
pub fn skip(size: usize) -> bool {
    hook::idle() || hook::skip(size)
}

/// The slow path of an allocation [`skip`] did not skip: decides whether it is sampled, and if
/// so walks the stack from the frame record at `fp` (the interposer's own frame: the walk starts
/// at its return address, in the interposer's caller), calls `allocate` and records the sample
/// (and enters the block into the live table). Returns what `allocate` returned.
///
/// # Safety
/// `fp` is the interposer's frame pointer ([`crate::unwind::frame_pointer`] in a function built
/// with frame pointers) or 0; `allocate` is the real allocator's call.
///
/// # Signal safety
/// As `hook::decide` and `Ticket::capture`; `allocate` must be as safe as the caller needs.
#[cold]
#[inline(never)]
pub unsafe fn sampled<T>(size: usize, fp: usize, allocate: impl FnOnce() -> *mut T) -> *mut T {
    let Some(mut ticket) = hook::decide(size) else {
        return allocate();
    };
    ticket.capture_from(fp);
    let p = allocate();
    if p.is_null() {
        ticket.failed();
        return p;
    }
    let live = ticket.track(p.cast());
    ticket.commit(size, live);
    p
}

/// The calling function's frame-pointer register (the `fp` of [`sampled`]), inlined into it.
#[inline(always)]
pub fn frame_pointer() -> usize {
    crate::unwind::frame_pointer()
}

/// Whether frees must be reported with [`freed`] (the live set is tracked).
///
/// # Signal safety
/// One load.
#[inline(always)]
pub fn tracks_frees() -> bool {
    hook::search_on_free(hook::dealloc_mode())
}

/// The block at `ptr` is about to be freed (or moved by `realloc`): its live-set entry, if any,
/// is cleared. Call it before the real free, while the address cannot be reused.
///
/// # Signal safety
/// A search of one bucket of the live table (atomics).
#[inline]
pub fn freed<T>(ptr: *mut T) {
    hook::freed(ptr.cast());
}
