//! Work done in a descriptor table of the recorder's own.
//!
//! A descriptor the recorder opens for a moment (a /proc file read, a directory listed) takes the
//! lowest free number of the process's table, the numbers a program hands out to itself: one that
//! `dup2`s its files over low numbers, or closes every descriptor and opens its own, can put one of
//! its files at our number between our check and our `close`, and the `close` then closes the
//! program's file (`cli/tests/record_fds.rs`, `dup2` over low numbers). No check before a `close`
//! closes that window; a table of our own does: a thread that left the shared table
//! (`unshare(CLONE_FILES)`) and emptied its copy opens, reads and closes descriptors that no other
//! thread can see, and the program's `close`, `dup2` and `closefrom` cannot reach them.
//!
//! Two ways in: [`privately`], a thread of the recorder's that stays (one per process, started at
//! the first call, restarted in a forked child) for short reads, waited for; and
//! [`in_private_table`], a thread per call for long work (a DWARF loader parsing a large binary),
//! which would otherwise hold up every short read behind it. Both run the work in the calling
//! thread if no thread can be had.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

thread_local! {
    /// Set in the files thread: work it asks for runs in place (already in its own table).
    static IN_FILES_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Leaves the shared descriptor table for a copy of its own, then closes every descriptor of the
/// copy (the program's files stay open in its table, and no copy of ours keeps a pipe or socket of
/// the program from closing). Whether the calling thread now has a table of its own.
fn leave_shared_table() -> bool {
    // SAFETY: unshare(CLONE_FILES) only changes the calling thread's descriptor table.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        return false;
    }
    // SAFETY: closes descriptors of this thread's private copy only (left the shared table above).
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
    }
    true
}

/// Runs `f` on a short-lived thread whose descriptor table is its own (see the module docs): for
/// code of other crates that keeps a file open for long, such as a DWARF loader parsing a large
/// binary. Runs `f` here if no thread can start.
pub(crate) fn in_private_table<R: Send, F: FnOnce() -> R + Send>(f: F) -> R {
    let slot = Mutex::new(Some(f));
    let take = || slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    let result = std::thread::scope(|scope| {
        // One of the recorder's own threads: never sampled (a perf event armed on it would stay
        // in the shared table, out of its reach at exit), signals blocked from its start.
        let handle = crate::own_thread::spawn_scoped(scope, "recorder-load", || {
            leave_shared_table();
            take().map(|f| f())
        });
        handle.ok().and_then(|h| h.join().ok()).flatten()
    });
    match result {
        Some(r) => r,
        // No thread: the work is done here, as before.
        None => (take().expect("not taken: the thread never ran it"))(),
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A value one thread waits for and another gives. Mutex and condition variable only (futexes):
/// the waiting thread may be one that std has not set up yet (a thread-start hook runs before
/// std's own start code, and std aborts a thread whose handle was made early, as waiting on a
/// channel does).
struct Handoff<T> {
    value: Mutex<Option<T>>,
    given: Condvar,
}

impl<T> Handoff<T> {
    fn new() -> Handoff<T> {
        Handoff { value: Mutex::new(None), given: Condvar::new() }
    }

    fn give(&self, value: T) {
        *self.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
        self.given.notify_all();
    }

    fn wait(&self) -> T {
        let mut value = self.value.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = value.take() {
                return v;
            }
            value = self.given.wait(value).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Work waiting for the files thread; `None` once the thread is to end.
struct Queue {
    jobs: Mutex<Option<VecDeque<Job>>>,
    more: Condvar,
}

/// The files thread of one process.
struct FilesThread {
    /// The process it runs in: a forked child has none until it starts its own.
    pid: u32,
    queue: Arc<Queue>,
}

/// The current process's files thread; never freed (one per process that forked and read).
static FILES_THREAD: AtomicPtr<FilesThread> = AtomicPtr::new(std::ptr::null_mut());

/// The process in which the files thread could not be had (no thread, or no table of its own):
/// work runs in the caller there, without trying again at every call.
static NO_FILES_THREAD: AtomicU32 = AtomicU32::new(0);

fn current_pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

fn serve(queue: &Queue) {
    let mut jobs = queue.jobs.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let Some(waiting) = jobs.as_mut() else { return };
        match waiting.pop_front() {
            Some(job) => {
                drop(jobs);
                job();
                jobs = queue.jobs.lock().unwrap_or_else(|e| e.into_inner());
            }
            None => jobs = queue.more.wait(jobs).unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// This process's files thread, started if need be; `None` if it cannot be had.
fn files_thread() -> Option<&'static FilesThread> {
    let pid = current_pid();
    // Acquire: pairs with the Release of the compare_exchange that published it.
    let current = FILES_THREAD.load(Ordering::Acquire);
    // SAFETY: a published FilesThread is never freed.
    if let Some(t) = unsafe { current.as_ref() } {
        if t.pid == pid {
            return Some(t);
        }
    }
    // Relaxed: a hint, written once per process by the thread that failed.
    if NO_FILES_THREAD.load(Ordering::Relaxed) == pid {
        return None;
    }
    let queue = Arc::new(Queue { jobs: Mutex::new(Some(VecDeque::new())), more: Condvar::new() });
    let ready = Arc::new(Handoff::new());
    let (served, told) = (Arc::clone(&queue), Arc::clone(&ready));
    let spawned = crate::own_thread::spawn("recorder-files", move || {
        IN_FILES_THREAD.with(|f| f.set(true));
        let own = leave_shared_table();
        told.give(own);
        if own {
            serve(&served);
        }
    });
    if spawned.is_err() || !ready.wait() {
        // Relaxed: see NO_FILES_THREAD.
        NO_FILES_THREAD.store(pid, Ordering::Relaxed);
        return None;
    }
    let fresh = Box::into_raw(Box::new(FilesThread { pid, queue }));
    // Release: publishes the FilesThread written above (pairs with the Acquire load above).
    match FILES_THREAD.compare_exchange(current, fresh, Ordering::Release, Ordering::Acquire) {
        // SAFETY: just published; never freed.
        Ok(_) => Some(unsafe { &*fresh }),
        Err(other) => {
            // Another thread published first: ours is told to end.
            // SAFETY: `fresh` was never published.
            let ours = unsafe { Box::from_raw(fresh) };
            *ours.queue.jobs.lock().unwrap_or_else(|e| e.into_inner()) = None;
            ours.queue.more.notify_all();
            // SAFETY: a published FilesThread is never freed.
            unsafe { other.as_ref() }.filter(|t| t.pid == pid)
        }
    }
}

/// Runs `f` in the recorder's files thread, whose descriptor table is its own (see the module
/// docs), and waits for it: every descriptor `f` opens is out of the program's reach. Runs `f` in
/// place when called from that thread, and in the calling thread when no files thread can be had.
/// A panic in `f` is resumed in the caller.
pub(crate) fn privately<R, F>(f: F) -> R
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    if IN_FILES_THREAD.with(|t| t.get()) {
        return f();
    }
    let Some(thread) = files_thread() else {
        return f();
    };
    let reply = Arc::new(Handoff::new());
    let answer = Arc::clone(&reply);
    let job: Job = Box::new(move || answer.give(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))));
    {
        let mut jobs = thread.queue.jobs.lock().unwrap_or_else(|e| e.into_inner());
        // The published thread's queue is never closed.
        if let Some(waiting) = jobs.as_mut() {
            waiting.push_back(job);
        }
    }
    thread.queue.more.notify_one();
    match reply.wait() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The numbers of the calling thread's open descriptors.
    fn open_numbers() -> Vec<i32> {
        (0..256).filter(|&fd| super::super::identity(fd).is_some()).collect()
    }

    #[test]
    fn a_descriptor_opened_privately_is_not_in_the_callers_table() {
        let (fd, open_there) = privately(|| {
            // SAFETY: a NUL-terminated path; plain open in the files thread's own table.
            let fd = unsafe { libc::open(c"/proc/self/stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            (fd, super::super::identity(fd).is_some())
        });
        assert!(fd >= 0 && open_there, "opened in the files thread: {fd}");
        // Left open there on purpose: the number is not open here (or is one of ours, not it).
        let stat = super::super::identity(fd);
        let proc_stat = {
            let f = std::fs::File::open("/proc/self/stat").unwrap();
            super::super::identity(std::os::fd::AsRawFd::as_raw_fd(&f))
        };
        assert!(stat.is_none() || stat != proc_stat, "{fd} is open in the caller's table: {:?}", open_numbers());
        // The files thread's table holds none of the caller's descriptors.
        let ours = std::fs::File::open("/proc/self/status").unwrap();
        let ours_fd = std::os::fd::AsRawFd::as_raw_fd(&ours);
        let ours_id = super::super::identity(ours_fd);
        assert_ne!(privately(move || super::super::identity(ours_fd)), ours_id);
    }

    #[test]
    fn nested_work_runs_in_place_and_panics_reach_the_caller() {
        assert_eq!(privately(|| privately(|| 7)), 7);
        let caught = std::panic::catch_unwind(|| privately(|| -> u32 { panic!("in the files thread") }));
        assert!(caught.is_err());
        assert_eq!(privately(|| 8), 8, "the files thread still answers after a panic");
    }
}
