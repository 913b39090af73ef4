//! Allocation sampling of an unmodified program (`alloc=`, `recorder record --alloc`): the C
//! allocator's entry points are defined here, so the dynamic loader binds every `malloc` of the
//! program, of its libraries and of glibc itself to them (a preloaded library comes first), and
//! each forwards to the definition the loader would have bound without this library: the next
//! one after it (`dlsym(RTLD_NEXT)`), which is glibc's, or that of an allocator loaded after this
//! library (jemalloc or tcmalloc preloaded after it or linked by the program). Every block is then
//! made, resized and freed by one allocator, and the functions not defined here
//! (`malloc_usable_size`, `mallocx`, ...) see that allocator's own blocks.
//!
//! `reallocarray` is the one entry point glibc implements through another: it checks the
//! product and calls `realloc` through the PLT, i.e. the first `realloc` of the process, which
//! may be the program's own or that of an allocator preloaded before this library. Ours does the
//! same. An allocator bound ahead of this library (defined by the program, or preloaded before
//! it) never calls in here, so its allocations are not sampled: the recording says so
//! ([`intercepts_malloc`], `recorder::alloc::interpose::report_allocator_not_interposed`).
//!
//! The next definitions are looked up once, by the first call (`dlsym` may allocate: its
//! allocations meanwhile are served from a static arena, whose blocks are never freed).
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
//! The block is always the real allocator's own (no header, no offset), so
//! `malloc_usable_size`, `malloc_trim` and `free` by any path keep working unchanged.
#![allow(unsafe_code)]

use libc::{c_int, c_void, size_t};
use recorder::alloc::interpose;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

type MallocFn = unsafe extern "C" fn(size_t) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type CallocFn = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void;
type AlignFn = unsafe extern "C" fn(size_t, size_t) -> *mut c_void;
type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, size_t, size_t) -> c_int;

/// The entry points forwarded to, in this order in [`NEXT`].
const NAMES: [&std::ffi::CStr; 9] = [
    c"malloc",
    c"free",
    c"calloc",
    c"realloc",
    c"memalign",
    c"aligned_alloc",
    c"posix_memalign",
    c"valloc",
    c"pvalloc",
];
const MALLOC: usize = 0;
const FREE: usize = 1;
const CALLOC: usize = 2;
const REALLOC: usize = 3;
const MEMALIGN: usize = 4;
const ALIGNED_ALLOC: usize = 5;
const POSIX_MEMALIGN: usize = 6;
const VALLOC: usize = 7;
const PVALLOC: usize = 8;

/// The next definition of each of [`NAMES`] (0: none), valid once [`STATE`] is `RESOLVED`.
static NEXT: [AtomicUsize; 9] = [const { AtomicUsize::new(0) }; 9];
/// The first `realloc` of the process (what glibc's `reallocarray` calls), 0 if it is ours.
static GLOBAL_REALLOC: AtomicUsize = AtomicUsize::new(0);
static STATE: AtomicU8 = AtomicU8::new(UNRESOLVED);
const UNRESOLVED: u8 = 0;
const RESOLVING: u8 = 1;
const RESOLVED: u8 = 2;

/// Looks the next definitions up (once). Returns false while they are being looked up (by this
/// thread's `dlsym`, or by another thread): the caller then serves the call from the arena.
#[inline(always)]
fn resolved() -> bool {
    // Acquire: pairs with the Release store at the end of `resolve` (the `NEXT` entries).
    STATE.load(Ordering::Acquire) == RESOLVED || resolve()
}

#[cold]
#[inline(never)]
fn resolve() -> bool {
    // Acquire (success and failure): as in `resolved`.
    match STATE.compare_exchange(UNRESOLVED, RESOLVING, Ordering::Acquire, Ordering::Acquire) {
        Ok(_) => {}
        Err(state) => return state == RESOLVED,
    }
    for (name, next) in NAMES.iter().zip(&NEXT) {
        // SAFETY: RTLD_NEXT finds the first definition after this library; a NUL-terminated name.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        // Relaxed: published by the Release store below.
        next.store(f as usize, Ordering::Relaxed);
    }
    let global = first_definition(c"realloc");
    // Relaxed: published by the Release store below.
    GLOBAL_REALLOC.store(if defined_here(global) { 0 } else { global }, Ordering::Relaxed);
    // Release: publishes `NEXT` and `GLOBAL_REALLOC`; pairs with the Acquire loads above.
    STATE.store(RESOLVED, Ordering::Release);
    true
}

/// The next definition of entry point `index`, as a `T` (a function pointer type).
///
/// # Safety
/// [`resolved`] returned true; `T` is the entry point's signature.
#[inline(always)]
unsafe fn next<T: Copy>(index: usize) -> Option<T> {
    // Relaxed: published before `STATE` (see `resolve`), which the caller read with Acquire.
    let f = NEXT.get(index).map_or(0, |f| f.load(Ordering::Relaxed));
    // SAFETY: the caller's contract; a non-zero value is the address `dlsym` returned.
    (f != 0).then(|| unsafe { std::mem::transmute_copy::<usize, T>(&f) })
}

/// The first definition of `name` in the process (what a call through the PLT reaches).
fn first_definition(name: &std::ffi::CStr) -> usize {
    // SAFETY: RTLD_DEFAULT finds the first definition of the process; a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
}

/// The base address of the module holding `addr` (0: none).
fn module_of(addr: usize) -> usize {
    // SAFETY: zeroed is a valid `Dl_info`; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid out pointer.
    if addr == 0 || unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 {
        return 0;
    }
    info.dli_fbase as usize
}

/// Whether `addr` lies in this library. (Taking the address of our exported `realloc` would not
/// tell: the reference goes through the GOT, to the process's first definition.)
fn defined_here(addr: usize) -> bool {
    let here = module_of(resolve as *const () as usize);
    here != 0 && module_of(addr) == here
}

/// Whether this library's `malloc` is the one the process calls (false: the program or an
/// allocator loaded before this library defines it, and allocations do not come here).
pub(crate) fn intercepts_malloc() -> bool {
    defined_here(first_definition(c"malloc"))
}

/// The module that defines the process's `malloc` (a path, or "the program" for the
/// executable), for the message saying it is not sampled.
pub(crate) fn malloc_owner() -> String {
    let global = first_definition(c"malloc") as *mut c_void;
    // SAFETY: zeroed is a valid `Dl_info`; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid out pointer.
    if global.is_null() || unsafe { libc::dladdr(global, &mut info) } == 0 || info.dli_fname.is_null() {
        return "another module".to_owned();
    }
    // SAFETY: dladdr returns a NUL-terminated name owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let exe = std::fs::read_link("/proc/self/exe").ok();
    let path = std::fs::canonicalize(&name).ok();
    if name.is_empty() || (exe.is_some() && exe == path) {
        format!("the program itself ({})", exe.map_or(name, |e| e.display().to_string()))
    } else {
        name
    }
}

/// Memory for the allocations made while the next definitions are looked up (by `dlsym`):
/// never reused, never freed.
mod arena {
    use std::sync::atomic::{AtomicUsize, Ordering};

    const SIZE: usize = 64 * 1024;
    #[repr(C, align(64))]
    struct Bytes(std::cell::UnsafeCell<[u8; SIZE]>);
    // SAFETY: disjoint ranges are handed out by the atomic bump below.
    unsafe impl Sync for Bytes {}
    static BYTES: Bytes = Bytes(std::cell::UnsafeCell::new([0; SIZE]));
    static USED: AtomicUsize = AtomicUsize::new(0);

    fn base() -> usize {
        BYTES.0.get() as usize
    }

    /// Whether `p` is an arena block.
    pub(super) fn owns(p: *mut libc::c_void) -> bool {
        let p = p as usize;
        base() <= p && p < base() + SIZE
    }

    /// A zeroed block of `size` bytes aligned to `align` (a power of two, at least 16), with
    /// its size in the 8 bytes before it; null when the arena is used up.
    pub(super) fn allocate(size: usize, align: usize) -> *mut libc::c_void {
        let align = align.max(16);
        let Some(need) = size.checked_add(align + 16) else { return std::ptr::null_mut() };
        // Relaxed: uniqueness from the RMW.
        let start = USED.fetch_add(need, Ordering::Relaxed);
        if start.saturating_add(need) > SIZE {
            return std::ptr::null_mut();
        }
        let user = (base() + start + 8 + align - 1) & !(align - 1);
        // SAFETY: `[start, start + need)` of the arena is this call's alone; `user - 8` is in it.
        unsafe { ((user - 8) as *mut usize).write(size) };
        user as *mut libc::c_void
    }

    /// The size an arena block was allocated with.
    ///
    /// # Safety
    /// `p` is an arena block.
    pub(super) unsafe fn size_of(p: *mut libc::c_void) -> usize {
        // SAFETY: the caller's contract: `allocate` wrote the size there.
        unsafe { ((p as usize - 8) as *const usize).read() }
    }
}

/// Sets `errno` (thread-local; async-signal-safe).
fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// `malloc` through the next definition (the arena while it is looked up).
#[inline(always)]
fn next_malloc(size: size_t) -> *mut c_void {
    if !resolved() {
        return arena::allocate(size, 16);
    }
    // SAFETY: resolved; `malloc`'s signature.
    match unsafe { next::<MallocFn>(MALLOC) } {
        // SAFETY: the next `malloc`, with the caller's argument.
        Some(f) => unsafe { f(size) },
        None => std::ptr::null_mut(),
    }
}

/// An aligned allocation through the next definition of entry point `index` (`memalign`,
/// `aligned_alloc`, `valloc` or `pvalloc`; the last two ignore `align`).
#[inline(always)]
fn next_aligned(index: usize, align: size_t, size: size_t) -> *mut c_void {
    if !resolved() {
        let page = 4096;
        return arena::allocate(size, if index == VALLOC || index == PVALLOC { page } else { align });
    }
    if index == VALLOC || index == PVALLOC {
        // SAFETY: resolved; `valloc`'s and `pvalloc`'s signature.
        return match unsafe { next::<MallocFn>(index) } {
            // SAFETY: the next definition, with the caller's argument.
            Some(f) => unsafe { f(size) },
            None => std::ptr::null_mut(),
        };
    }
    // SAFETY: resolved; `memalign`'s and `aligned_alloc`'s signature.
    match unsafe { next::<AlignFn>(index) } {
        // SAFETY: the next definition, with the caller's arguments.
        Some(f) => unsafe { f(align, size) },
        None => std::ptr::null_mut(),
    }
}

/// # Safety
/// The C standard's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    if interpose::skip(size) {
        return next_malloc(size);
    }
    let fp = interpose::frame_pointer();
    // SAFETY: this function's frame pointer; the next malloc.
    unsafe { interpose::sampled(size, fp, || next_malloc(size)) }
}

/// # Safety
/// The C standard's `free`.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if ptr.is_null() || arena::owns(ptr) {
        return;
    }
    if interpose::tracks_frees() {
        interpose::freed(ptr);
    }
    if !resolved() {
        // Only this thread's `dlsym` or a racing first call get here: a block that is not the
        // arena's was made by an allocator not known yet; leaking it is the safe choice.
        return;
    }
    // SAFETY: resolved; `free`'s signature.
    if let Some(f) = unsafe { next::<FreeFn>(FREE) } {
        // SAFETY: the next free, with the caller's pointer (made by the same allocator).
        unsafe { f(ptr) }
    }
}

/// `calloc` through the next definition (the arena, zeroed, while it is looked up).
#[inline(always)]
fn next_calloc(n: size_t, size: size_t) -> *mut c_void {
    if !resolved() {
        return n.checked_mul(size).map_or(std::ptr::null_mut(), |bytes| arena::allocate(bytes, 16));
    }
    // SAFETY: resolved; `calloc`'s signature.
    match unsafe { next::<CallocFn>(CALLOC) } {
        // SAFETY: the next calloc, with the caller's arguments.
        Some(f) => unsafe { f(n, size) },
        None => std::ptr::null_mut(),
    }
}

/// # Safety
/// The C standard's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    // An overflowing product is the allocator's to refuse (ENOMEM); it is not an allocation.
    let Some(bytes) = n.checked_mul(size) else {
        return next_calloc(n, size);
    };
    if interpose::skip(bytes) {
        return next_calloc(n, size);
    }
    let fp = interpose::frame_pointer();
    // SAFETY: this function's frame pointer; the next calloc.
    unsafe { interpose::sampled(bytes, fp, || next_calloc(n, size)) }
}

/// `realloc` through the next definition; an arena block is moved out of the arena.
#[inline(always)]
fn next_realloc(ptr: *mut c_void, size: size_t) -> *mut c_void {
    if !ptr.is_null() && arena::owns(ptr) {
        let q = next_malloc(size);
        if !q.is_null() {
            // SAFETY: `ptr` is an arena block of `size_of` bytes; `q` holds `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), q.cast::<u8>(), arena::size_of(ptr).min(size)) };
        }
        return q;
    }
    if !resolved() {
        return if ptr.is_null() { arena::allocate(size, 16) } else { std::ptr::null_mut() };
    }
    // SAFETY: resolved; `realloc`'s signature.
    match unsafe { next::<ReallocFn>(REALLOC) } {
        // SAFETY: the next realloc, with the caller's arguments.
        Some(f) => unsafe { f(ptr, size) },
        None => std::ptr::null_mut(),
    }
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
        return next_realloc(ptr, size);
    }
    // SAFETY: the caller's frame pointer; the next realloc.
    unsafe { interpose::sampled(size, fp, || next_realloc(ptr, size)) }
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
/// glibc's `reallocarray` (2.26+): `realloc(ptr, n * size)` unless the product overflows, where
/// `realloc` is the process's first one (glibc calls it through the PLT): the program's own or a
/// preloaded allocator's if either comes before this library, else ours.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    // Relaxed: published before `STATE` (see `resolve`), read with Acquire by `resolved`.
    let global = if resolved() { GLOBAL_REALLOC.load(Ordering::Relaxed) } else { 0 };
    if global != 0 {
        // SAFETY: the address `dlsym` returned for `realloc`.
        let f = unsafe { std::mem::transmute::<usize, ReallocFn>(global) };
        // SAFETY: the process's realloc, with the caller's pointer (made by its allocator).
        return unsafe { f(ptr, bytes) };
    }
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { realloc_from(ptr, bytes, fp) }
}

/// An aligned allocation through the next definition of entry point `index`, sampled by its
/// size.
#[inline(always)]
unsafe fn aligned_from(index: usize, align: size_t, size: size_t, fp: usize) -> *mut c_void {
    if interpose::skip(size) {
        return next_aligned(index, align, size);
    }
    // SAFETY: the caller's frame pointer; the next definition.
    unsafe { interpose::sampled(size, fp, || next_aligned(index, align, size)) }
}

/// # Safety
/// `memalign(3)`.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { aligned_from(MEMALIGN, align, size, fp) }
}

/// # Safety
/// C11's `aligned_alloc`.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { aligned_from(ALIGNED_ALLOC, align, size, fp) }
}

/// `posix_memalign` through the next definition (which answers EINVAL and ENOMEM itself).
#[inline(always)]
fn next_posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> c_int {
    if !resolved() {
        if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
            return libc::EINVAL;
        }
        let p = arena::allocate(size, align);
        if p.is_null() {
            return libc::ENOMEM;
        }
        // SAFETY: the caller passes a valid out pointer.
        unsafe { *out = p };
        return 0;
    }
    // SAFETY: resolved; `posix_memalign`'s signature.
    match unsafe { next::<PosixMemalignFn>(POSIX_MEMALIGN) } {
        // SAFETY: the next posix_memalign, with the caller's arguments.
        Some(f) => unsafe { f(out, align, size) },
        None => libc::ENOMEM,
    }
}

/// # Safety
/// POSIX `posix_memalign`: `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> c_int {
    if interpose::skip(size) {
        return next_posix_memalign(out, align, size);
    }
    let fp = interpose::frame_pointer();
    let mut rc = 0;
    // SAFETY: this function's frame pointer; the sampled result is the block stored at `out`.
    unsafe {
        interpose::sampled(size, fp, || {
            rc = next_posix_memalign(out, align, size);
            if rc == 0 {
                *out
            } else {
                std::ptr::null_mut()
            }
        })
    };
    rc
}

/// # Safety
/// `valloc(3)`.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { aligned_from(VALLOC, 0, size, fp) }
}

/// # Safety
/// `pvalloc(3)` (sampled by the size asked for; glibc rounds it up to whole pages).
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    let fp = interpose::frame_pointer();
    // SAFETY: the caller's contract.
    unsafe { aligned_from(PVALLOC, 0, size, fp) }
}
