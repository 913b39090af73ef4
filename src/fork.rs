//! fork(): the child inherits the recorder's memory but none of its threads or timers. It must be
//! left "not recording", with no lock held, able to start a recording of its own.
//!
//! `pthread_atfork` handlers take the process-wide locks the commit path can need (the current
//! recording and the type registry) before fork and release them on both sides afterwards, so a
//! fork can never copy a lock held by another thread. In the child the recording is marked
//! stopped; the parent's `Recorder` handle, if the child ever drops it, notices the pid change and
//! does nothing.
#![allow(unsafe_code)]

use std::sync::Once;

extern "C" fn prepare() {
    crate::commit::lock_for_fork();
    crate::metadata_registry::lock_for_fork();
}

extern "C" fn parent() {
    // SAFETY: `prepare` locked both on this thread and their guards were forgotten.
    unsafe {
        crate::metadata_registry::unlock_after_fork();
        crate::commit::unlock_after_fork(false);
    }
}

extern "C" fn child() {
    // SAFETY: as in `parent`; the child has only this thread, which holds both locks.
    unsafe {
        crate::metadata_registry::unlock_after_fork();
        crate::commit::unlock_after_fork(true);
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
