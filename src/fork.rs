//! fork(): the child inherits the recorder's memory but none of its threads or timers. It must be
//! left "not recording", with no lock held, able to start a recording of its own.
//!
//! `pthread_atfork` handlers take the process-wide locks a new recording can need (the symbolizer,
//! the current recording, the type registry, the thread-hook patcher, and last the leaf locks: the
//! scope registry and names, the pending diagnostics, the span words) before fork and release them on both sides afterwards, so a
//! fork can never copy a lock held by another thread. In the child the recording is marked
//! stopped; every method of the parent's `Recorder` handle checks the pid first and leaves the
//! parent's recording alone (no-op, or `Error::ForkedChild`): in particular none takes the
//! chunk-writer lock L, which a parent thread may have held at fork time (review finding 3). L is
//! not taken here, so a fork never waits for a flush. The recorder registers these hooks before
//! it takes any of these locks (review finding 5).
#![allow(unsafe_code)]

use std::sync::Once;

/// Releases a process-wide lock that `prepare` (or, in the child, a vanished parent thread) holds
/// across fork. In the parent, a plain unlock (it wakes the threads that queued meanwhile). In the
/// child, the lock's word is set back to "unlocked" without waking anyone: `force_unlock` would
/// look for parked waiters in parking_lot's queue, find the parent threads that waited at fork
/// time (they do not exist in the child) and may hand the lock to one of them (parking_lot's
/// eventually-fair unlock), leaving it held forever: a child that hung on the scope names this
/// way was caught by `tests/fork.rs`.
///
/// # Safety
/// The lock is held by the calling thread (forgotten guard) or, in the child, by a thread that
/// does not exist; no guard of it is alive. `child`: only in the fork child before it starts a
/// thread.
#[allow(unsafe_code)]
pub(crate) unsafe fn release<T: ?Sized>(lock: &parking_lot::Mutex<T>, child: bool) {
    if child {
        // `RawMutex` is its state byte and nothing else (checked below at compile time).
        const _: () = assert!(std::mem::size_of::<parking_lot::RawMutex>() == 1);
        // SAFETY: the lock's only byte is its atomic state (an `UnsafeCell`), so it may be
        // viewed as an `AtomicU8`; the child has no other thread reading it.
        let state = unsafe { &*(lock.raw() as *const parking_lot::RawMutex).cast::<std::sync::atomic::AtomicU8>() };
        // Relaxed: single-threaded child; 0 is "unlocked, nobody parked".
        state.store(0, std::sync::atomic::Ordering::Relaxed);
    } else {
        // SAFETY: the caller holds the lock.
        unsafe { lock.force_unlock() };
    }
}

extern "C" fn prepare() {
    crate::symbolize::lock_for_fork();
    crate::commit::lock_for_fork();
    crate::metadata_registry::lock_for_fork();
    crate::thread_hooks::lock_for_fork();
    // Leaf locks a new recording takes too, last (none of their holders waits for a lock).
    crate::scope::report::lock_for_fork();
    crate::scope::names::lock_for_fork();
    crate::diagnostics::lock_for_fork();
    crate::span_context::lock_for_fork();
}

extern "C" fn parent() {
    // SAFETY: `prepare` locked both on this thread and their guards were forgotten.
    unsafe {
        crate::span_context::unlock_after_fork(false);
        crate::diagnostics::unlock_after_fork(false);
        crate::scope::names::unlock_after_fork(false);
        crate::scope::report::unlock_after_fork(false);
        crate::thread_hooks::unlock_after_fork(false);
        crate::metadata_registry::unlock_after_fork(false);
        crate::commit::unlock_after_fork(false);
        crate::symbolize::unlock_after_fork(false);
    }
}

extern "C" fn child() {
    crate::alloc::forget_in_child();
    crate::unwind::forked_child();
    // SAFETY: as in `parent`; the child has only this thread, which holds both locks.
    unsafe {
        crate::span_context::unlock_after_fork(true);
        crate::diagnostics::unlock_after_fork(true);
        crate::scope::names::unlock_after_fork(true);
        crate::scope::report::unlock_after_fork(true);
        crate::thread_hooks::unlock_after_fork(true);
        crate::metadata_registry::unlock_after_fork(true);
        crate::commit::unlock_after_fork(true);
        crate::symbolize::unlock_after_fork(true);
    }
}

/// Installs the handlers once per process.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handlers are `extern "C"` functions that live for the whole process.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    });
}
