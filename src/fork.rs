//! fork(): the child inherits the recorder's memory but none of its threads or timers. It must be
//! left "not recording", with no lock held, able to start a recording of its own.
//!
//! `pthread_atfork` handlers take the process-wide locks a new recording can need (the symbolizer,
//! the current recording and the type registry) before fork and release them on both sides afterwards, so a
//! fork can never copy a lock held by another thread. In the child the recording is marked
//! stopped; every method of the parent's `Recorder` handle checks the pid first and leaves the
//! parent's recording alone (no-op, or `Error::ForkedChild`): in particular none takes the
//! chunk-writer lock L, which a parent thread may have held at fork time (review finding 3). L is
//! not taken here, so a fork never waits for a flush. The recorder registers these hooks before
//! it takes any of these locks (review finding 5).
#![allow(unsafe_code)]

use std::sync::Once;

extern "C" fn prepare() {
    crate::symbolize::lock_for_fork();
    crate::commit::lock_for_fork();
    crate::metadata_registry::lock_for_fork();
    crate::thread_hooks::lock_for_fork();
}

extern "C" fn parent() {
    // SAFETY: `prepare` locked both on this thread and their guards were forgotten.
    unsafe {
        crate::thread_hooks::unlock_after_fork();
        crate::metadata_registry::unlock_after_fork();
        crate::commit::unlock_after_fork(false);
        crate::symbolize::unlock_after_fork();
    }
}

extern "C" fn child() {
    crate::alloc::forget_in_child();
    crate::unwind::forked_child();
    // SAFETY: as in `parent`; the child has only this thread, which holds both locks.
    unsafe {
        crate::thread_hooks::unlock_after_fork();
        crate::metadata_registry::unlock_after_fork();
        crate::commit::unlock_after_fork(true);
        crate::symbolize::unlock_after_fork();
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
