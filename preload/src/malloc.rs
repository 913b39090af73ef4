//! Allocation sampling of an unmodified program (`alloc=`, `recorder record --alloc`): the C
//! allocator's entry points are defined here, so the dynamic loader binds every `malloc` of the
//! program, of its libraries and of glibc itself to them (a preloaded library comes first), and
//! each forwards to glibc's allocator through its exported `__libc_*` entry points.
//!
//! Why those and not `dlsym(RTLD_NEXT, "malloc")`: `dlsym` may allocate (its error state), which
//! would call this `malloc` before it knows where the real one is; `__libc_malloc` and friends are
//! ordinary symbols of libc.so.6 (GLIBC_2.2.5), bound by the loader before any code runs.
//!
//! Every function is the same: [`interpose::skip`] counts the bytes down (a thread-local
//! subtraction) and forwards; the rare sampled call goes through [`interpose::sampled`], which
//! walks the stack from this function's frame (so the first frame kept is the program's call
//! site) and records a `jdk.ObjectAllocationSample`. Frees are looked up in the live table only
//! while a live set is tracked. Nothing here allocates, locks or formats: the hook's guarantees
//! (`recorder::alloc`) hold before `main`, in signal handlers, at thread exit and in forked
//! children; before a recording starts (and after it stops) the countdown sends every call
//! straight on.
//!
//! The block is always glibc's own (no header, no offset), so `malloc_usable_size`,
//! `malloc_trim` and `free` by any path keep working unchanged.
#![allow(unsafe_code)]

use libc::{c_int, c_void, size_t};
use recorder::alloc::interpose;

extern "C" {
    fn __libc_malloc(size: size_t) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: size_t) -> *mut c_void;
    fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
    fn __libc_valloc(size: size_t) -> *mut c_void;
    fn __libc_pvalloc(size: size_t) -> *mut c_void;
}

/// Sets `errno` (thread-local; async-signal-safe).
fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// # Safety
/// The C standard's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    if interpose::skip(size) {
        // SAFETY: glibc's malloc, with the caller's argument.
        return unsafe { __libc_malloc(size) };
    }
    let fp = interpose::frame_pointer();
    // SAFETY: this function's frame pointer; glibc's malloc.
    unsafe { interpose::sampled(size, fp, || __libc_malloc(size)) }
}

/// # Safety
/// The C standard's `free`.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if !ptr.is_null() && interpose::tracks_frees() {
        interpose::freed(ptr);
    }
    // SAFETY: glibc's free, with the caller's pointer.
    unsafe { __libc_free(ptr) }
}

/// # Safety
/// The C standard's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    // An overflowing product is glibc's to refuse (ENOMEM); it is not an allocation.
    let Some(bytes) = n.checked_mul(size) else {
        // SAFETY: glibc's calloc, with the caller's arguments.
        return unsafe { __libc_calloc(n, size) };
    };
    if interpose::skip(bytes) {
        // SAFETY: as above.
        return unsafe { __libc_calloc(n, size) };
    }
    let fp = interpose::frame_pointer();
    // SAFETY: this function's frame pointer; glibc's calloc.
    unsafe { interpose::sampled(bytes, fp, || __libc_calloc(n, size)) }
}

/// `realloc` to `size` bytes, sampled as an allocation of `size` (as `SamplingAllocator` does);
/// `fp` is the exported function's frame.
#[inline(always)]
unsafe fn realloc_from(ptr: *mut c_void, size: size_t, fp: usize) -> *mut c_void {
    if !ptr.is_null() && interpose::tracks_frees() {
        // The old block's tracking ends here (if the realloc fails, the block stays untracked).
        interpose::freed(ptr);
    }
    // realloc(p, 0) frees p and allocates nothing.
    if (size == 0 && !ptr.is_null()) || interpose::skip(size) {
        // SAFETY: glibc's realloc, with the caller's arguments.
        return unsafe { __libc_realloc(ptr, size) };
    }
    // SAFETY: the caller's frame pointer; glibc's realloc.
    unsafe { interpose::sampled(size, fp, || __libc_realloc(ptr, size)) }
}

/// # Safety
/// The C standard's `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: size_t) -> *mut c_void {
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { realloc_from(ptr, size, fp) }
}

/// # Safety
/// glibc's `reallocarray` (2.26+): `realloc(ptr, n * size)` unless the product overflows.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { realloc_from(ptr, bytes, fp) }
}

/// An aligned allocation through glibc's `memalign`, sampled by its size.
#[inline(always)]
unsafe fn aligned_from(align: size_t, size: size_t, fp: usize) -> *mut c_void {
    if interpose::skip(size) {
        // SAFETY: glibc's memalign, with the caller's arguments.
        return unsafe { __libc_memalign(align, size) };
    }
    // SAFETY: the caller's frame pointer; glibc's memalign.
    unsafe { interpose::sampled(size, fp, || __libc_memalign(align, size)) }
}

/// # Safety
/// `memalign(3)`.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { aligned_from(align, size, fp) }
}

/// # Safety
/// C11's `aligned_alloc` (glibc implements it as `memalign`).
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { aligned_from(align, size, fp) }
}

/// # Safety
/// POSIX `posix_memalign`: `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> c_int {
    // POSIX: a power of two multiple of sizeof(void *), else EINVAL (and `*out` untouched).
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let fp = interpose::frame_pointer();
    // posix_memalign leaves errno alone.
    // SAFETY: `errno` is thread-local.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the caller's contract.
    let p = unsafe { aligned_from(align, size, fp) };
    set_errno(errno);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid out pointer.
    unsafe { *out = p };
    0
}

/// # Safety
/// `valloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    if interpose::skip(size) {
        // SAFETY: glibc's valloc, with the caller's argument.
        return unsafe { __libc_valloc(size) };
    }
    let fp = interpose::frame_pointer();
    // SAFETY: this function's frame pointer; glibc's valloc.
    unsafe { interpose::sampled(size, fp, || __libc_valloc(size)) }
}

/// # Safety
/// `pvalloc(3)` (sampled by the size asked for; glibc rounds it up to whole pages).
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    if interpose::skip(size) {
        // SAFETY: glibc's pvalloc, with the caller's argument.
        return unsafe { __libc_pvalloc(size) };
    }
    let fp = interpose::frame_pointer();
    // SAFETY: this function's frame pointer; glibc's pvalloc.
    unsafe { interpose::sampled(size, fp, || __libc_pvalloc(size)) }
}
