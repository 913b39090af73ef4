//! The recorder's own threads (flusher, sampler, wall, control listener, push uploader, consumer,
//! the preload library's duration thread): every one is started by [`spawn`], with every
//! asynchronous signal blocked from its first instruction, and its allocations never sampled (they
//! are the recorder's, not the program's).
//!
//! The kernel delivers a process-directed signal (`kill`, `setitimer`'s SIGALRM, SIGCHLD, a
//! terminal's SIGINT) to any thread that does not block it. A thread of ours that blocked nothing
//! could run the program's handler: a handler that `siglongjmp`s (an interpreter's timeout) would
//! then jump onto another thread's stack, and a handler that reads its own thread's state would
//! read ours. The mask is set in the spawning thread around `pthread_create`, so the child
//! inherits it before it runs anything (blocking it in the child's first statement would leave
//! the thread's start-up open), and the spawning thread gets its own mask back at once.
//!
//! Left deliverable: the synchronous signals a fault raises in the thread itself (SIGSEGV,
//! SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS), which the kernel delivers even when blocked, but then
//! with the default action, bypassing any handler a runtime installed for them. glibc also keeps
//! its own two internal signals (thread cancellation and the `setuid` broadcast that every thread
//! must answer) out of any mask `pthread_sigmask` sets.
//!
//! The thread-start hooks ([`crate::thread_hooks`], the preload library's `pthread_create`) ask
//! [`spawning`] and leave a thread of ours alone: it is not registered for sampling, and SIGPROF,
//! which they unblock in the program's threads, stays blocked in it.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

thread_local! {
    /// Set while this thread is inside [`spawn`]'s `pthread_create`.
    static SPAWNING: Cell<bool> = const { Cell::new(false) };
    /// Set in a thread [`spawn`] started, from its first statement of ours.
    static OWN: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is one of the recorder's own (started by [`spawn`]): the allocation
/// sampler leaves its allocations out, they are the recorder's, not the program's. A `const`
/// thread-local without destructor: safe to read inside an allocation.
pub(crate) fn current_is_own() -> bool {
    OWN.try_with(Cell::get).unwrap_or(false)
}

/// Signals raised by a fault of the thread itself, delivered whatever the mask says.
const SYNCHRONOUS: [libc::c_int; 6] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGSYS];

/// Every signal but the synchronous ones (glibc's `sigfillset` already leaves out its internal
/// two).
pub(crate) fn asynchronous_signals() -> libc::sigset_t {
    // SAFETY: zeroed is a valid sigset_t for sigfillset to overwrite; both calls only write `set`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sig in SYNCHRONOUS {
            libc::sigdelset(&mut set, sig);
        }
        set
    }
}

/// Spawns one of the recorder's own threads, named `name`, with every asynchronous signal blocked
/// from its first instruction (see the module docs).
pub fn spawn<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    while_spawning(|| {
        std::thread::Builder::new().name(name.into()).spawn(move || {
            let _listed = OwnTid::list();
            OWN.with(|own| own.set(true));
            f()
        })
    })
}

/// [`spawn`] for a scoped thread (one that borrows from its caller).
pub(crate) fn spawn_scoped<'scope, 'env, F, T>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: F,
) -> io::Result<std::thread::ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    while_spawning(|| {
        std::thread::Builder::new().name(name.into()).spawn_scoped(scope, move || {
            let _listed = OwnTid::list();
            OWN.with(|own| own.set(true));
            f()
        })
    })
}

/// Runs `create` (which creates one thread) with every asynchronous signal blocked and
/// [`spawning`] true in the calling thread, then restores both.
fn while_spawning<R>(create: impl FnOnce() -> R) -> R {
    let blocked = asynchronous_signals();
    // SAFETY: zeroed is a valid sigset_t for pthread_sigmask to overwrite.
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sets; changes only this thread's mask, restored below.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &blocked, &mut previous) };
    let was = SPAWNING.try_with(|s| s.replace(true)).unwrap_or(false);
    let created = create();
    let _ = SPAWNING.try_with(|s| s.set(was));
    // SAFETY: the mask this thread had on entry.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    created
}

/// Whether the calling thread is creating one of the recorder's own threads: for the
/// `pthread_create` wrappers, which run in the creating thread.
pub fn spawning() -> bool {
    SPAWNING.try_with(Cell::get).unwrap_or(false)
}

/// The tids of the running threads [`spawn`] started (0: a free entry), for thread discovery,
/// which finds every thread in `/proc/self/task` and must leave ours alone: a thread of ours
/// keeps SIGPROF blocked, so a sampling source armed on it would leave its signal pending for
/// good (and the stop would keep the recorder's handler installed, waiting for it).
static OWN_TIDS: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];

/// Whether `tid` is a running thread that [`spawn`] started.
pub fn is_own(tid: u32) -> bool {
    // Acquire: pairs with the Release store of `OwnTid::list`.
    tid != 0 && OWN_TIDS.iter().any(|t| t.load(Ordering::Acquire) == tid)
}

/// The calling thread's entry in [`OWN_TIDS`] while it runs. A thread beyond the table's room is
/// not listed (then discovery may sample it, as before the table existed).
struct OwnTid(Option<&'static AtomicU32>);

impl OwnTid {
    fn list() -> OwnTid {
        let tid = crate::threads::gettid();
        // AcqRel: a free entry claimed by one thread only; pairs with the Release store of `drop`.
        let entry = OWN_TIDS.iter().find(|t| t.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Relaxed).is_ok());
        OwnTid(entry)
    }
}

impl Drop for OwnTid {
    fn drop(&mut self) {
        if let Some(entry) = self.0 {
            // Release: pairs with the Acquire load of `is_own` and the claim in `list`.
            entry.store(0, Ordering::Release);
        }
    }
}
