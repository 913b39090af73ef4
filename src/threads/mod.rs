//! Threads: who they are, which of them are sampled, and what the kernel says about them.
//!
//! - [`names`]: thread ids (cached [`current_tid`]) and names, renames.
//! - [`proc`]: the `/proc` readers (maps lines, `stat` lines with one field numbering, the task
//!   listing, proofs of death).
//! - [`registry`]: the sampled threads' registry (which slot samples which thread, who asked not
//!   to be sampled, who was refused a slot) and the thread-start registration hand-off.
//! - [`exits`]: what an exiting thread leaves behind for the recording (its name, its CPU times).
//! - [`thread_hooks`]: new threads reach the registry first thing (`pthread_create` interposed).
//!
//! The sampler (`sampler/`) owns the timers, the handler and the buffers: it arms and disarms a
//! thread's source when the registry gains or loses it (registration, discovery, retirement).

#[cfg(not(loom))]
pub mod exits;
pub mod names;
#[cfg(not(loom))]
pub mod proc;
#[cfg(not(loom))]
pub mod registry;
#[cfg(not(loom))]
pub mod thread_hooks;

pub use names::*;

/// The calling thread's kernel id: the raw system call, uncached (no thread-local, no lock:
/// async-signal-safe, for the signal handler and the allocation hook). [`current_tid`] caches it.
#[inline]
#[allow(unsafe_code)]
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions, cannot fail and is async-signal-safe.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// This process's id.
#[inline]
#[allow(unsafe_code)]
pub fn getpid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// A reference to an OS thread of this process (a `java.lang.Thread` constant keyed by tid): the
/// flusher defines the thread in the chunk. An event's field (`FieldType`), and a built-in event's
/// (`chunk::FieldValue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadRef(pub u32);

impl ThreadRef {
    /// The calling thread.
    pub fn current() -> ThreadRef {
        ThreadRef(current_tid())
    }
}
