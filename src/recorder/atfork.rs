//! fork(): the child inherits the recorder's memory but none of its threads or timers. It must be
//! left "not recording", with no lock held, able to start a recording of its own.
//!
//! `pthread_atfork` handlers take the process-wide locks a new recording can need
//! ([`HELD_ACROSS_FORK`]) before fork and release them on both sides afterwards, so a fork can
//! never copy a lock held by another thread. In the child the recording is marked stopped; every
//! method of the parent's `Recorder` handle checks the pid first and leaves the parent's recording
//! alone (no-op, or `Error::ForkedChild`): in particular none takes the chunk-writer lock L, which
//! a parent thread may have held at fork time. L is not taken here, so a fork never waits for a
//! flush. `Recorder::start` registers these hooks before it takes any of these locks.
//!
//! The sampler registers a child hook of its own for its locks (it forgets the parent's sampler
//! there).
#![allow(unsafe_code)]

use crate::commit::{CURRENT, GENERATION, STARTING};
use crate::fork::HeldAcrossFork;
use std::sync::atomic::Ordering;
use std::sync::Once;

/// The process-wide locks held across fork, in the order `prepare` takes them; both sides release
/// them in the reverse order.
///
/// The order is what keeps `prepare` from deadlocking: it waits for each lock in turn while
/// holding the ones before it, so no thread may hold a lock of this list while it waits for one
/// earlier in it. First the locks of the recording's machinery: the symbolizer (the flusher holds
/// it while it parses a module's debug info), the current recording, the type registry, the
/// thread-hook patcher. Then the leaf locks, whose holders wait for no other lock of the list,
/// except where two are taken together, the outer one first: the scope registry before the scope
/// names (a flush absorbs every thread's tree under the registry and interns names inside), the
/// pending diagnostics, the span words' pool and map (each held alone), the `tracing` callsites,
/// and the span table's locks: `record` (held while `on_record` changes a span's fields), its
/// `overflow` map and its pool (a slot that an insert displaces from the map goes back to the pool
/// under the map's lock).
static HELD_ACROSS_FORK: &[&dyn HeldAcrossFork] = &[
    crate::symbolize::PROCESS_LOCK,
    &CURRENT,
    crate::metadata_registry::REGISTRY_LOCK,
    crate::thread_hooks::PATCHER_LOCK,
    crate::scope::report::REGISTRY_LOCK,
    crate::scope::names::NAMES_LOCK,
    crate::diagnostics::PENDING_LOCK,
    crate::span_context::POOL_LOCK,
    crate::span_context::BY_TID_LOCK,
    #[cfg(feature = "tracing")]
    crate::tracing::CALLSITES_LOCK,
    #[cfg(feature = "tracing")]
    crate::tracing::TABLE_RECORD_LOCK,
    #[cfg(feature = "tracing")]
    crate::tracing::TABLE_OVERFLOW_LOCK,
    #[cfg(feature = "tracing")]
    crate::tracing::TABLE_POOL_LOCK,
];

extern "C" fn prepare() {
    for lock in HELD_ACROSS_FORK {
        lock.hold();
    }
}

extern "C" fn parent() {
    for lock in HELD_ACROSS_FORK.iter().rev() {
        // SAFETY: `prepare` took every lock of the list on this thread (guards forgotten).
        unsafe { lock.release() };
    }
}

extern "C" fn child() {
    crate::alloc::forget_in_child();
    crate::unwind::forked_child();
    crate::threads::forget_tid_in_child();
    // Release (both): later commits in the child see no recording, and a start the parent had in
    // progress does not exist in the child.
    GENERATION.store(0, Ordering::Release);
    STARTING.store(false, Ordering::Release);
    for lock in HELD_ACROSS_FORK.iter().rev() {
        // SAFETY: as in `parent`; the child has only this thread, which holds them all, and starts
        // no thread before this returns.
        unsafe { lock.force_release_in_child() };
    }
    // The child's own recordings start from a clean slot. The parent's shared state stays
    // allocated in the child's copy of memory; it is simply no longer reachable.
    std::mem::forget(CURRENT.lock().take());
}

/// Installs the handlers once per process.
pub(super) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handlers are `extern "C"` functions that live for the whole process.
        let registered = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) } == 0;
        if registered {
            crate::threads::tid_cache_cleared_on_fork();
        }
    });
}
