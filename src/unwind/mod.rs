//! Stack unwinding, all of it: the DWARF tables ([`tables`], built by [`compile`]), the one walk
//! ([`walk::walk`], over any [`walk::StackMemory`], with every validation rule), and the calling
//! thread's own stack in normal context: its bounds, the main thread's entry, and the walks of
//! events that carry a stack ([`capture_current`]). Which frames of a deep stack are kept is
//! `crate::stack`'s [`crate::stack::KeepEnds`] / [`crate::stack::WalkLayout`], shared by every
//! walker.
//!
//! The walkers: the SIGPROF handler (`sampler/signal.rs`, the interrupted thread's own stack),
//! the wall thread (`sampler/blocked.rs`, a copy of a blocked thread's stack), the allocation hook
//! (`alloc/hook.rs`) and the commit path ([`capture_current`], the calling thread's stack).
//!
//! A walk is complete when it reaches the outermost frame: a null frame pointer (the ABI's end
//! marker, which glibc's thread start leaves), a null return address, an undefined return address
//! in the tables (`_start`, `clone`), or on the main thread a frame record at most
//! [`ENTRY_SLACK`] below the process's start stack (`/proc/self/stat` field 28): libc's start-up
//! code, built without frame pointers, is all that lies between and leaves a garbage frame
//! pointer there. Any other end (a chain broken by code without frame pointers, the bounds, the
//! walk limit) marks the stack truncated.

pub mod compile;
pub mod tables;
pub mod walk;

pub use tables::{Mapped, ModuleTable, Regs, Row, Tables, Unwinder};
pub use walk::{caller_of_record, walk, End, OwnStack, StackMemory, WalkRules, ENTRY_SLACK};

use crate::stack::{DepthPolicy, KeepEnds, MAX_DEPTH_PER_END};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The tables the handler reads: a snapshot published through an atomic pointer, replaced
/// (never changed in place) when the process's executable mappings change. Replaced snapshots
/// are kept until this is dropped, which the sampler does only after its grace period (no
/// handler can still be reading one).
#[derive(Debug, Default)]
pub struct Published {
    current: AtomicPtr<Tables>,
    /// The compiler (files already compiled) and the addresses of replaced snapshots.
    state: crate::fork::ForkSafeMutex<(compile::Compiler, Vec<usize>)>,
}

impl Published {
    /// Compiles the tables of every module mapped now, or of those mapped since the last call,
    /// and publishes them (normal context: reads files, allocates).
    pub fn refresh(&self) {
        self.refresh_files(&|_| true);
    }

    /// As [`Published::refresh`], for the files `wanted` accepts only (a later `refresh` adds the
    /// others).
    pub fn refresh_files(&self, wanted: &dyn Fn(&str) -> bool) {
        let mut state = self.state.lock();
        let Some(tables) = state.0.refresh_files(wanted) else { return };
        let new = Box::into_raw(Box::new(tables));
        // AcqRel: Release publishes the built snapshot to the handler's Acquire load in `load`;
        // Acquire orders the old snapshot's construction before it is kept for freeing.
        let old = self.current.swap(new, Ordering::AcqRel);
        if !old.is_null() {
            state.1.push(old as usize);
        }
    }

    /// Bytes of the published tables: each module's rows and indexes once (snapshots share
    /// them), and the current snapshot's module list. Reads the published snapshot as the handler
    /// does, without the compiler's lock: waiting for a compilation (hundreds of ms for the
    /// preload library's table) held up the flusher and the sampler lock it held, which let a
    /// program's `dup2` over low descriptor numbers race with the recorder's opens
    /// (cli/tests/record_fds.rs failed about one run in three).
    pub fn bytes(&self) -> usize {
        let Some(tables) = self.load() else { return 0 };
        let mut total = std::mem::size_of_val(&*tables.modules);
        let mut seen = std::collections::HashSet::new();
        for m in tables.modules.iter() {
            if seen.insert(Arc::as_ptr(&m.table)) {
                total += m.table.bytes();
            }
        }
        total
    }

    /// The published tables, if any.
    ///
    /// # Signal safety
    /// One atomic load.
    #[inline]
    pub fn load(&self) -> Option<&Tables> {
        // Acquire: pairs with the Release swap in `refresh` (the snapshot is fully built).
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: non-null pointers come from `Box::into_raw` in `refresh` and are freed only in
        // `drop`, which needs `&mut self`: no reference handed out here outlives them.
        unsafe { p.as_ref() }
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        let current = std::mem::replace(self.current.get_mut(), std::ptr::null_mut());
        let retired = std::mem::take(&mut self.state.get_mut().1);
        for p in retired.into_iter().map(|a| a as *mut Tables).chain(std::iter::once(current)) {
            if !p.is_null() {
                // SAFETY: each came from `Box::into_raw` in `refresh`, is freed once, and `&mut
                // self` means no reader is left.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

/// No walk goes further than this many frames, whatever the stack looks like (cycles, torn stacks).
pub const HARD_WALK_LIMIT: usize = 65_536;

/// Most frames a sample's walk reads when the outermost frames are kept (`stack_depth_outer`):
/// they are found only by walking the whole stack, and the SIGPROF handler's cost must stay a
/// small fraction of the sampling period at any depth. Twice [`MAX_DEPTH_PER_END`]: a stack
/// that both ends at their largest would keep whole is walked whole; a deeper one keeps the
/// innermost frames, `<elided:K>` and the last frames walked (not the thread's entry), and is
/// marked truncated, as a broken chain is.
pub const SAMPLE_WALK_LIMIT: usize = 2 * MAX_DEPTH_PER_END;

/// Frames a sample's walk reads under a depth policy of `inner` innermost and `outer` outermost
/// frames: with no outermost frames kept, one more than the innermost kept (that one tells a
/// whole stack from a truncated one), else [`SAMPLE_WALK_LIMIT`].
///
/// # Signal safety
/// Arithmetic only.
#[inline]
pub fn sample_walk_limit(inner: usize, outer: usize) -> usize {
    if outer == 0 {
        inner.saturating_add(1).min(SAMPLE_WALK_LIMIT)
    } else {
        SAMPLE_WALK_LIMIT
    }
}

/// The process's start stack (the stack pointer `_start` got, `/proc/self/stat` field 28), 0 if
/// unknown. Normal context; read once.
pub fn main_thread_entry() -> usize {
    static ENTRY: AtomicUsize = AtomicUsize::new(usize::MAX);
    // Relaxed: a value computed the same way by every thread; no other data is published.
    let cached = ENTRY.load(Ordering::Relaxed);
    if cached != usize::MAX {
        return cached;
    }
    let entry = crate::fds::read_string("/proc/self/stat")
        .ok()
        .and_then(|s| crate::threads::proc::parse_stat(&s).map(|st| st.start_stack as usize))
        .unwrap_or(0);
    // Relaxed: as above.
    ENTRY.store(entry, Ordering::Relaxed);
    entry
}

/// The entry to pass to [`at_entry`] for the calling thread: cached per thread (two system calls
/// at every event stack were most of a span's stack capture: `cargo bench --bench scopes`,
/// `strace -c`), asked again after a fork (the forking thread is the child's main thread).
fn own_entry() -> usize {
    // Relaxed: bumped by the child after fork, read by its only thread.
    let forks = FORKS.load(Ordering::Relaxed);
    if let Ok((at, entry)) = OWN_ENTRY.try_with(Cell::get) {
        if at == forks {
            return entry;
        }
    }
    let entry = if crate::threads::gettid() == crate::threads::getpid() { main_thread_entry() } else { 0 };
    let _ = OWN_ENTRY.try_with(|c| c.set((forks, entry)));
    entry
}

/// Forks this process went through (as the child): see [`own_entry`].
static FORKS: AtomicU64 = AtomicU64::new(0);

/// In the child after a fork.
pub(crate) fn forked_child() {
    // Relaxed: see `own_entry`.
    FORKS.fetch_add(1, Ordering::Relaxed);
}

thread_local! {
    static STACK_BOUNDS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// (`FORKS` when cached, [`own_entry`]'s value).
    static OWN_ENTRY: Cell<(u64, usize)> = const { Cell::new((u64::MAX, 0)) };
}

/// The calling thread's stack as [low, high) (0, 0 if unknown), cached per thread.
pub fn current_stack_bounds() -> (usize, usize) {
    let cached = STACK_BOUNDS.with(Cell::get);
    if cached.1 != 0 {
        return cached;
    }
    let bounds = query_stack_bounds().unwrap_or((0, 0));
    STACK_BOUNDS.with(|c| c.set(bounds));
    bounds
}

/// The part of the calling thread's own stack a walk may read now: from the current stack
/// pointer to its top ((0, 0) when the thread runs elsewhere, such as on a fiber's stack or an
/// alternate signal stack, or its bounds are unknown). The cached bounds are the thread's
/// whole stack area; below the stack pointer it may not be mapped (the main thread's grows on
/// demand), and a stack the thread switched to is not in it: a frame record found outside
/// `[sp, hi)` ends the walk instead of being read.
#[inline(always)]
fn current_own_stack() -> (usize, usize) {
    let (lo, hi) = current_stack_bounds();
    let marker = 0u8;
    let sp = std::hint::black_box(&marker) as *const u8 as usize;
    if hi == 0 || sp < lo || sp >= hi {
        return (0, 0);
    }
    (sp, hi)
}

fn query_stack_bounds() -> Option<(usize, usize)> {
    // SAFETY: `attr` is initialized by pthread_getattr_np before use and destroyed after; the
    // out-pointers are valid locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 || addr.is_null() {
            return None;
        }
        Some((addr as usize, addr as usize + size))
    }
}

/// The current function's frame-pointer register (inlined into its caller).
#[inline(always)]
pub fn frame_pointer() -> usize {
    let fp: usize;
    // SAFETY: reads the frame-pointer register into a local; no memory is touched.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!("mov {}, rbp", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    // SAFETY: as above, for aarch64's frame-pointer register.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!("mov {}, x29", out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        fp = 0;
    }
    fp
}

/// The frame record of the function that a function holding `addr` in its frame called: the
/// highest record on the calling thread's frame-pointer chain below `addr` (an address in a
/// caller's frame, such as a value it passed by reference), as an anchor for [`capture_current`]:
/// the walk from it starts at the return into that function. `None` if `addr` is not on this
/// thread's stack above the current frame, or the chain breaks before reaching it.
#[inline(never)]
#[cfg(feature = "tracing")] // the tracing layer's
pub fn record_below(addr: usize) -> Option<usize> {
    let (lo, hi) = current_own_stack();
    let fp = frame_pointer();
    if hi == 0 || addr <= fp || addr >= hi {
        return None;
    }
    let stack = OwnStack { lo, hi };
    let start = caller_of_record(&stack, fp)?;
    // Each frame's record lies 16 bytes below its stack pointer (frame-pointer steps only).
    let (mut below, mut found) = (fp, None);
    walk(&stack, &WalkRules::frame_pointers(HARD_WALK_LIMIT, 0), start, false, |frame| {
        let record = frame.sp - 16;
        if record >= addr {
            found = Some(below);
            return false;
        }
        below = record;
        true
    });
    found
}

/// Walks the calling thread's stack into `out` (innermost first) under `policy`. Frame records
/// below `anchor` (the frame-pointer value of the recorder's outermost own frame, see
/// [`frame_pointer`]) are skipped, so the first kept frame is the recorder's caller. Pass 0 to keep
/// every frame. Returns whether frames were dropped.
///
/// The first kept frame is stored as its return address minus one, so that every stack in the
/// recording follows the sampler's convention: frame 0 is an address inside the instruction, later
/// frames are return addresses.
///
/// Returns whether the stack is truncated: frames were dropped, or the walk ended before the
/// outermost frame (see the module docs).
#[inline(never)]
pub fn capture_current(anchor: usize, policy: DepthPolicy, ring: &mut Vec<u64>, out: &mut Vec<u64>) -> bool {
    let (lo, hi) = current_own_stack();
    out.clear();
    ring.clear();
    if hi == 0 {
        return true;
    }
    let inner = policy.inner.min(MAX_DEPTH_PER_END);
    let outer = policy.outer.min(MAX_DEPTH_PER_END);
    // No limit at either end: every frame is an innermost one.
    // With no limit at either end every frame is kept and `keep` hands out no slot.
    let mut keep = KeepEnds::new(inner, outer);
    let stack = OwnStack { lo, hi };
    // The walk starts at the anchor's record (a frame-pointer value of one of the recorder's
    // own frames on this chain, below which every frame is the recorder's) or at this one's.
    let Some(start) = caller_of_record(&stack, anchor.max(frame_pointer())) else { return true };
    // The walked frames go into `out` at the places `keep` gives them (in order, each at most
    // one past the end, until the ring wraps).
    let rules = WalkRules::frame_pointers(HARD_WALK_LIMIT, own_entry());
    let end = if inner == 0 && outer == 0 {
        walk(&stack, &rules, start, false, |frame| {
            out.push(frame.pc as u64);
            true
        })
        .1
    } else {
        // At most `inner + outer` slots: written in place in `out`'s spare capacity (kept from
        // the thread's previous stacks), not pushed frame by frame: a push stores the length back
        // at every frame, which cost the commit path 6 % at 20 frames (`cargo bench --bench commit`).
        let slots = inner + outer;
        out.reserve(slots);
        let spare = &mut out.spare_capacity_mut()[..slots];
        let mut filled = 0usize;
        let (_, end) = walk(&stack, &rules, start, false, |frame| {
            if let Some(slot) = keep.next_slot().and_then(|at| spare.get_mut(at).map(|s| (at, s))) {
                slot.1.write(frame.pc as u64);
                filled = filled.max(slot.0 + 1);
            }
            true
        });
        // SAFETY: `keep` hands out slots below `slots` in order, each at most one past the
        // highest handed out before, so every slot below `filled` was written above; `filled` is
        // within the capacity reserved.
        unsafe { out.set_len(filled) };
        end
    };
    let layout = keep.layout();
    if layout.dropped() > 0 {
        // The ring wrapped (or frames were only counted): read the kept stack back in order.
        ring.extend_from_slice(out);
        out.clear();
        out.extend((0..layout.len()).map(|i| layout.word(i, |at| ring.get(at).copied().unwrap_or(0))));
    }
    if let Some(first) = out.first_mut() {
        if crate::stack::as_elided(*first).is_none() {
            *first = first.saturating_sub(1);
        }
    }
    layout.dropped() > 0 || end != End::Root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn recurse(n: usize, out: &mut Vec<u64>, policy: DepthPolicy) -> bool {
        if n == 0 {
            let mut scratch = Vec::new();
            return capture_current(0, policy, &mut scratch, out);
        }
        let r = recurse(n - 1, out, policy);
        std::hint::black_box(n);
        r
    }

    #[test]
    fn walks_own_stack_with_depth_policies() {
        let mut out = Vec::new();
        let truncated = recurse(50, &mut out, DepthPolicy { inner: 1000, outer: 0 });
        assert!(!truncated, "a test thread's chain ends at its null frame pointer");
        assert!(out.len() > 50, "walked {} frames", out.len());
        let full = out.len();

        let truncated = recurse(50, &mut out, DepthPolicy { inner: 10, outer: 0 });
        assert!(truncated);
        assert_eq!(out.len(), 10);

        let truncated = recurse(50, &mut out, DepthPolicy { inner: 0, outer: 5 });
        assert!(truncated);
        assert_eq!(out.len(), 5);

        let truncated = recurse(50, &mut out, DepthPolicy { inner: 4, outer: 3 });
        assert!(truncated);
        assert_eq!(out.len(), 8);
        assert_eq!(crate::stack::as_elided(out[4]), Some(full as u64 - 7));
    }

    #[inline(never)]
    fn deeper(local: &u64, out: &mut Vec<u64>) {
        let anchor = record_below(local as *const u64 as usize).expect("the local is on this stack");
        capture_current(anchor, DepthPolicy { inner: 8, outer: 0 }, &mut Vec::new(), out);
    }

    #[inline(never)]
    fn callee(local: &u64, out: &mut Vec<u64>) {
        deeper(local, out);
        std::hint::black_box(());
    }

    #[inline(never)]
    fn holder(from_local: &mut Vec<u64>, from_holder: &mut Vec<u64>) {
        let local = std::hint::black_box(7u64);
        callee(&local, from_local);
        capture_current(frame_pointer(), DepthPolicy { inner: 8, outer: 0 }, &mut Vec::new(), from_holder);
    }

    /// A walk anchored below an address in a caller's frame starts at the return into that
    /// caller (inside `holder`), then goes on as a walk from `holder` itself.
    #[test]
    fn a_walk_from_a_callers_value_starts_at_that_caller() {
        let (mut from_local, mut from_holder) = (Vec::new(), Vec::new());
        holder(&mut from_local, &mut from_holder);
        let holder_start = holder as *const () as u64;
        assert!(from_local[0] > holder_start, "{from_local:x?}");
        assert_eq!(from_local[1], from_holder[0] + 1, "{from_local:x?} {from_holder:x?}");
        assert_eq!(from_local[2..6], from_holder[1..5]);
        assert_eq!(record_below(0), None);
    }
}
