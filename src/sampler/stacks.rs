//! Which stack the SIGPROF handler's work runs on (signal context).
//!
//! The handler is installed with `SA_ONSTACK`: on a thread with an alternate signal stack the
//! kernel starts it there. Runtimes that switch stacks need that (Go runs goroutines on stacks of
//! a few KiB and gives each thread a 32 KiB signal stack), but the alternate stacks other programs
//! set up are often small: Rust's standard library gives every thread an 8 KiB one for its
//! stack-overflow message, less than a walk and a write take in a debug build. So the handler
//! does its work where the kernel would have started it without `SA_ONSTACK` whenever that place
//! is known to be a thread stack with room ([`Placement::Switch`]: just below the interrupted
//! stack pointer, past the red zone), stays on the alternate stack only when the interrupted code
//! ran elsewhere (a goroutine's or a fiber's stack) and the alternate stack has room
//! ([`Placement::Here`]), and otherwise records the interrupted PC alone, which needs little
//! room ([`room_for_leaf`]), or counts the sample lost. A chained application handler gets the
//! stack its own flags ask for.
//!
//! Nothing here allocates, locks or panics; the only system call is `sigaltstack`'s query.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libc::c_void;

/// What a handler's work needs below the stack pointer it starts at: a walk and a record write
/// take under 10 KiB in a debug build (measured on an alternate stack filled with a pattern),
/// less optimized; the kernel's signal frame is below the handler's start already.
pub(super) const HANDLER_ROOM: usize = 16 << 10;

/// What writing a leaf-only record (no walk) needs below the stack pointer: about 3 KiB in a
/// debug build, 208 bytes optimized (`signal.rs`, `a_leaf_record_is_written_within_the_leaf_room`).
pub(super) const LEAF_ROOM: usize = 4 << 10;

/// A handler whose stack pointer lies less than this below the interrupted one runs on the
/// interrupted stack (the kernel put its frame right there); farther away or above it, on an
/// alternate stack. The kernel's frame with the largest register state is below 12 KiB.
const SAME_STACK_SPAN: usize = 64 << 10;

/// Bytes skipped below the interrupted stack pointer before the switched-to frame: the x86-64
/// red zone (128) that the interrupted function may be using, rounded up.
const RED_ZONE: usize = 256;

/// Where the handler's work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    /// On the stack it runs on now.
    Here,
    /// On the interrupted thread stack, with this stack pointer (16-byte aligned).
    Switch(usize),
    /// Nowhere: no stack known to have room for a walk (the leaf alone is recorded if
    /// [`room_for_leaf`], else the sample is counted lost).
    Nowhere,
}

/// The calling function's approximate stack pointer.
///
/// # Signal safety
/// Takes a local's address.
#[inline(always)]
pub(super) fn current_sp() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Whether code at `here` runs on the stack whose interrupted pointer is `interrupted`.
#[inline]
fn on_interrupted_stack(here: usize, interrupted: usize) -> bool {
    interrupted.wrapping_sub(here) < SAME_STACK_SPAN
}

/// The 16-byte aligned stack pointer just below the interrupted one, past its red zone.
#[inline]
fn below(interrupted: usize) -> usize {
    interrupted.saturating_sub(RED_ZONE) & !15
}

/// Where to run the sampler's work for a thread whose stack is `[lo, hi)` (`hi == 0`: unknown),
/// interrupted at `interrupted_sp`.
///
/// # Signal safety
/// Arithmetic, and one `sigaltstack` query when the handler runs on an alternate stack while the
/// interrupted code was not on the thread's stack.
#[inline]
pub(super) fn placement(interrupted_sp: usize, lo: usize, hi: usize) -> Placement {
    let here = current_sp();
    if on_interrupted_stack(here, interrupted_sp) {
        return Placement::Here;
    }
    if hi != 0 && interrupted_sp >= lo && interrupted_sp < hi {
        let top = below(interrupted_sp);
        return if top >= lo.saturating_add(HANDLER_ROOM) { Placement::Switch(top) } else { Placement::Nowhere };
    }
    if room_on_alternate_stack(here) >= HANDLER_ROOM {
        Placement::Here
    } else {
        Placement::Nowhere
    }
}

/// Whether the stack the handler runs on has [`LEAF_ROOM`] left: an alternate signal stack
/// (where [`Placement::Nowhere`] leaves it) with that much below the current stack pointer.
///
/// # Signal safety
/// One `sigaltstack` query.
#[inline]
pub(super) fn room_for_leaf() -> bool {
    room_on_alternate_stack(current_sp()) >= LEAF_ROOM
}

/// Bytes left below `here` on the alternate signal stack the thread runs on (0 if it is not on
/// one, or the kernel will not say).
fn room_on_alternate_stack(here: usize) -> usize {
    // SAFETY: zeroed is a valid stack_t for the kernel to overwrite.
    let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: a query (null new stack) into a valid out pointer; the raw call, not a wrapper.
    let rc = unsafe { libc::syscall(libc::SYS_sigaltstack, std::ptr::null::<libc::stack_t>(), &mut ss) };
    if rc != 0 || ss.ss_flags & libc::SS_ONSTACK == 0 {
        return 0;
    }
    let lo = ss.ss_sp as usize;
    if here < lo || here >= lo.saturating_add(ss.ss_size) {
        return 0;
    }
    here - lo
}

/// Where a chained application handler runs: where the kernel would have started it, i.e. on
/// the interrupted stack unless it asked for the alternate one (`SA_ONSTACK` in `flags`).
#[inline]
pub(super) fn placement_for_flags(interrupted_sp: usize, flags: libc::c_int) -> Placement {
    if flags & libc::SA_ONSTACK != 0 || on_interrupted_stack(current_sp(), interrupted_sp) {
        Placement::Here
    } else {
        Placement::Switch(below(interrupted_sp))
    }
}

/// Runs `f(arg)` where `placement` says (`Nowhere`: not at all); returns whether it ran.
///
/// # Safety
/// For `Switch(top)`: `top` is a 16-byte aligned address below which at least the memory `f`
/// uses is this thread's own, unused stack.
#[inline]
pub(super) unsafe fn run(placement: Placement, f: extern "C" fn(*mut c_void), arg: *mut c_void) -> bool {
    match placement {
        Placement::Here => {
            f(arg);
            true
        }
        // SAFETY: the caller's contract.
        Placement::Switch(top) => {
            unsafe { call_on_stack(f, arg, top) };
            true
        }
        Placement::Nowhere => false,
    }
}

/// Calls `f(arg)` with the stack pointer at `top`, then comes back to this stack.
///
/// # Safety
/// As [`run`].
#[cfg(target_arch = "x86_64")]
#[inline(never)]
unsafe fn call_on_stack(f: extern "C" fn(*mut c_void), arg: *mut c_void, top: usize) {
    // SAFETY: r12 (callee-saved, so `f` keeps it) holds our stack pointer across the call; `top`
    // is 16-byte aligned as the ABI wants it before a `call`; every register `f` may clobber is
    // declared clobbered.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

/// Calls `f(arg)` with the stack pointer at `top`, then comes back to this stack.
///
/// # Safety
/// As [`run`].
#[cfg(target_arch = "aarch64")]
#[inline(never)]
unsafe fn call_on_stack(f: extern "C" fn(*mut c_void), arg: *mut c_void, top: usize) {
    // SAFETY: x20 (callee-saved, so `f` keeps it) holds our stack pointer across the call; `top`
    // is 16-byte aligned as sp must be; every register `f` may clobber (x30 included) is
    // declared clobbered.
    unsafe {
        core::arch::asm!(
            "mov x20, sp",
            "mov sp, {top}",
            "blr {f}",
            "mov sp, x20",
            top = in(reg) top,
            f = in(reg) f,
            in("x0") arg,
            out("x20") _,
            clobber_abi("C"),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    extern "C" fn record_sp(out: *mut c_void) {
        // SAFETY: `out` points at the caller's usize.
        unsafe { *out.cast::<usize>() = current_sp() };
    }

    #[test]
    fn a_call_on_another_stack_runs_there_and_comes_back() {
        let mut stack = vec![0u8; 64 << 10];
        let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
        let mut seen = 0usize;
        // SAFETY: `top` is the aligned end of a buffer of ours, unused otherwise.
        let ran = unsafe { run(Placement::Switch(top), record_sp, (&mut seen as *mut usize).cast()) };
        assert!(ran);
        assert!(seen < top && seen > top - (16 << 10), "{seen:#x} not just below {top:#x}");
        let mut here = 0usize;
        // SAFETY: no switch.
        assert!(unsafe { run(Placement::Here, record_sp, (&mut here as *mut usize).cast()) });
        assert!(on_interrupted_stack(here, current_sp() + 64), "{here:#x}");
        // SAFETY: nothing runs.
        assert!(!unsafe { run(Placement::Nowhere, record_sp, (&mut here as *mut usize).cast()) });
    }

    #[test]
    fn the_work_goes_back_to_the_thread_stack_and_never_below_its_room() {
        let (lo, hi) = (0x1000_0000usize, 0x1080_0000usize);
        // Running on the interrupted stack: stay.
        let sp = current_sp() + 512;
        assert_eq!(placement(sp, lo, hi), Placement::Here);
        // Elsewhere (an alternate stack), interrupted on the thread stack: switch below it.
        assert_eq!(placement(0x1070_0008, lo, hi), Placement::Switch((0x1070_0008 - 256) & !15));
        // Interrupted near the bottom of the thread stack: no room.
        assert_eq!(placement(lo + 1024, lo, hi), Placement::Nowhere);
        // Interrupted on some other stack (a goroutine's), not on an alternate stack ourselves:
        // nowhere known to have room.
        assert_eq!(placement(0x2000_0000, lo, hi), Placement::Nowhere);
    }
}
