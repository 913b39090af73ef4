//! Thread identity: OS thread ids and names.
//!
//! A thread's name is captured while the thread is alive: when it first commits or registers for
//! sampling (it reports itself), and at each thread-discovery pass (the kernel's `comm`, read from
//! the `/proc/self/task/TID/stat` the discovery reads anyway). Reading it when a chunk is written
//! would be too late for a thread that has exited by then. [`ThreadNames`] keeps what was seen
//! and notices renames (`prctl(PR_SET_NAME)`, `pthread_setname_np`) by a change of `comm`.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The kernel keeps 15 bytes of a thread's name (`TASK_COMM_LEN` 16 with the terminator).
const COMM_LEN: usize = 15;

/// Whether a thread may cache its id: a forked child's thread has an id of its own, so the cache
/// is only kept once the fork hooks that clear it in the child ([`forget_tid_in_child`]) are
/// registered (`recorder/atfork.rs`); before that every call asks the kernel.
static TID_CACHE_CLEARED_ON_FORK: AtomicBool = AtomicBool::new(false);

/// The calling thread's OS thread id (cached per thread).
pub fn current_tid() -> u32 {
    let cached = TID.try_with(Cell::get).unwrap_or(0);
    if cached != 0 {
        return cached;
    }
    let tid = super::gettid();
    // Acquire: pairs with the Release in `tid_cache_cleared_on_fork`, after the hooks' registration.
    if TID_CACHE_CLEARED_ON_FORK.load(Ordering::Acquire) {
        let _ = TID.try_with(|c| c.set(tid));
    }
    tid
}

/// The fork hooks now clear the forking thread's cached id in the child: threads may cache theirs.
pub fn tid_cache_cleared_on_fork() {
    // Release: pairs with the Acquire in `current_tid`.
    TID_CACHE_CLEARED_ON_FORK.store(true, Ordering::Release);
}

/// In a forked child (its `pthread_atfork` child hook, on the forking thread, the child's only
/// one): forgets the id the thread had in the parent. A `const` thread-local without destructor:
/// no allocation, no lock.
pub fn forget_tid_in_child() {
    let _ = TID.try_with(|c| c.set(0));
}

/// The kernel's name for thread `tid` of this process (`comm`), if it still exists.
pub fn os_thread_name(tid: u32) -> Option<String> {
    let comm = std::fs::read(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(String::from_utf8_lossy(comm.strip_suffix(b"\n").unwrap_or(&comm)).into_owned())
}

/// The calling thread's `comm` (one `prctl`, no file).
pub fn current_comm() -> String {
    match RawComm::current() {
        Some(raw) => raw.to_string_lossy(),
        None => os_thread_name(current_tid()).unwrap_or_default(),
    }
}

/// A thread's `comm` as the kernel keeps it (NUL-terminated, 16 bytes): compared without
/// allocating.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawComm([u8; COMM_LEN + 1]);

impl RawComm {
    /// No name (before the first look).
    pub const EMPTY: RawComm = RawComm([0; COMM_LEN + 1]);

    /// The calling thread's (one `prctl`); `None` if the kernel refuses.
    #[allow(unsafe_code)]
    pub fn current() -> Option<RawComm> {
        let mut buf = [0u8; COMM_LEN + 1];
        // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into the buffer.
        let rc = unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr() as libc::c_ulong, 0, 0, 0) };
        (rc == 0).then_some(RawComm(buf))
    }

    /// The calling thread's, read in signal context (a raw `prctl` system call: no lock, no
    /// allocation, async-signal-safe); [`RawComm::EMPTY`] if the kernel refuses.
    #[allow(unsafe_code)]
    #[inline]
    pub fn current_in_signal_handler() -> RawComm {
        let mut buf = [0u8; COMM_LEN + 1];
        // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into the buffer.
        let rc =
            unsafe { libc::syscall(libc::SYS_prctl, libc::PR_GET_NAME, buf.as_mut_ptr() as libc::c_ulong, 0, 0, 0) };
        if rc == 0 {
            RawComm(buf)
        } else {
            RawComm::EMPTY
        }
    }

    /// As two words (a sampler record's header).
    pub fn words(self) -> [u64; 2] {
        let (lo, hi) = self.0.split_at(8);
        [u64::from_ne_bytes(lo.try_into().unwrap_or_default()), u64::from_ne_bytes(hi.try_into().unwrap_or_default())]
    }

    /// From [`RawComm::words`].
    pub fn from_words([lo, hi]: [u64; 2]) -> RawComm {
        let mut buf = [0u8; COMM_LEN + 1];
        buf[..8].copy_from_slice(&lo.to_ne_bytes());
        buf[8..].copy_from_slice(&hi.to_ne_bytes());
        RawComm(buf)
    }

    /// The name, up to its terminator (the kernel's bytes, not necessarily UTF-8).
    pub fn as_bytes(&self) -> &[u8] {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        &self.0[..len]
    }

    /// No name is known.
    pub fn is_empty(&self) -> bool {
        self.0[0] == 0
    }

    /// As text (invalid UTF-8 replaced).
    pub fn to_string_lossy(self) -> String {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..len]).into_owned()
    }
}

/// What the calling thread is called, and its `comm` now: its Rust name when it has one that the
/// kernel still holds (the kernel's copy is cut to 15 bytes; the main thread's is the program's
/// name), else the kernel's name (the thread renamed itself, or was never named in Rust).
pub fn current_thread_name() -> (String, String) {
    let comm = current_comm();
    (preferred_name(&comm), comm)
}

/// What the calling thread is called, given its `comm` now (see [`current_thread_name`]).
pub fn preferred_name(comm: &str) -> String {
    match std::thread::current().name() {
        Some(name) if holds(comm, name) => name.to_owned(),
        Some("main") if current_tid() == std::process::id() && comm == program_comm() => "main".to_owned(),
        _ if comm.is_empty() => format!("thread-{}", current_tid()),
        _ => comm.to_owned(),
    }
}

/// `comm` is what the kernel keeps of `name`.
fn holds(comm: &str, name: &str) -> bool {
    let kept = &name.as_bytes()[..name.len().min(COMM_LEN)];
    String::from_utf8_lossy(kept) == comm
}

/// The `comm` the kernel gave the main thread at exec: the program file's name, cut to 15 bytes.
fn program_comm() -> String {
    let exe = std::env::args_os().next().map(std::path::PathBuf::from);
    let name = exe.as_deref().and_then(std::path::Path::file_name).map(|n| n.to_string_lossy().into_owned());
    let name = name.unwrap_or_default();
    String::from_utf8_lossy(&name.as_bytes()[..name.len().min(COMM_LEN)]).into_owned()
}

/// The names of the threads a recording has seen.
#[derive(Debug, Default)]
pub struct ThreadNames {
    names: HashMap<u32, Named>,
}

#[derive(Debug)]
struct Named {
    /// The name to write.
    display: String,
    /// The kernel's name when last seen: a change means the thread was renamed.
    comm: String,
}

impl ThreadNames {
    /// Takes in a sighting of thread `tid`: its `comm` now and, when the thread reported itself,
    /// the name it prefers ([`current_thread_name`]). A new `comm` is a rename: the thread is
    /// called by it from then on (by its preferred name if it reported one). Returns whether the
    /// name to write changed.
    pub fn observe(&mut self, tid: u32, comm: &str, preferred: Option<&str>) -> bool {
        let display = preferred.filter(|p| !p.is_empty()).unwrap_or(comm);
        match self.names.get_mut(&tid) {
            None => {
                self.names.insert(tid, Named { display: display.to_owned(), comm: comm.to_owned() });
                true
            }
            Some(named) => {
                if named.comm != comm {
                    named.comm = comm.to_owned();
                } else if preferred.is_none() {
                    // Same kernel name, and nothing better to offer than it.
                    return false;
                }
                if named.display == display {
                    return false;
                }
                named.display = display.to_owned();
                true
            }
        }
    }

    /// The name to write for `tid` while its kernel name was `comm`: the name it is known by if
    /// that is still its `comm` (a Rust name may be longer than the kernel keeps), else `comm`
    /// itself. `None` if the thread was never seen.
    pub fn name_for(&self, tid: u32, comm: &RawComm) -> Option<std::borrow::Cow<'_, str>> {
        let named = self.names.get(&tid)?;
        if named.comm.as_bytes() == comm.as_bytes() {
            Some(std::borrow::Cow::Borrowed(named.display.as_str()))
        } else {
            Some(std::borrow::Cow::Owned(comm.to_string_lossy()))
        }
    }

    /// The name to write for `tid`, if it was seen.
    pub fn get(&self, tid: u32) -> Option<&str> {
        self.names.get(&tid).map(|n| n.display.as_str())
    }

    /// Forgets `tid` (its id may be reused by a new thread).
    pub fn forget(&mut self, tid: u32) {
        self.names.remove(&tid);
    }
}

/// `membarrier(2)` commands (linux/membarrier.h).
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 8;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 16;

#[allow(unsafe_code)]
fn membarrier(cmd: libc::c_int) -> bool {
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

/// Makes the process-wide barrier of [`process_barrier`] cheap (the expedited kind needs this
/// once per process). Called when a recording starts; harmless to repeat.
pub(crate) fn prepare_process_barrier() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        let _ = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
    });
}

/// The heavy half of an asymmetric fence: when it returns, every thread of the process has run
/// a full memory barrier, so a store one of them made before it (ordered by a mere compiler
/// fence on its side) is visible to the caller, and a load one of them makes after it sees the
/// caller's earlier stores. Linux `membarrier` (expedited when registered, else the global
/// kind); without it (kernels before 4.3, or a seccomp filter), a 10 ms pause, which is what a
/// store buffer needs many times over but is not a guarantee.
pub(crate) fn process_barrier() {
    if membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) || membarrier(MEMBARRIER_CMD_GLOBAL) {
        return;
    }
    std::thread::sleep(std::time::Duration::from_millis(10));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_comm_is_a_rename_and_a_self_report_may_lengthen_a_cut_name() {
        let mut names = ThreadNames::default();
        // Discovery sees the kernel's 15 bytes first; the thread's own report gives the whole name.
        assert!(names.observe(7, "pool-worker-num", None));
        assert_eq!(names.get(7), Some("pool-worker-num"));
        assert!(names.observe(7, "pool-worker-num", Some("pool-worker-number-3")));
        assert_eq!(names.get(7), Some("pool-worker-number-3"));
        // Discovery passes that see the same comm change nothing.
        assert!(!names.observe(7, "pool-worker-num", None));
        assert_eq!(names.get(7), Some("pool-worker-number-3"));
        // The thread renames itself: the next sighting, by anyone, carries the new name.
        assert!(names.observe(7, "busy", None));
        assert_eq!(names.get(7), Some("busy"));
        assert!(!names.observe(7, "busy", Some("busy")));
        names.forget(7);
        assert_eq!(names.get(7), None);
    }

    #[test]
    fn the_calling_thread_reports_its_rust_name_and_a_rename() {
        let (name, comm) = std::thread::Builder::new()
            .name("a-rather-long-thread-name".into())
            .spawn(current_thread_name)
            .unwrap()
            .join()
            .unwrap();
        assert_eq!((name.as_str(), comm.as_str()), ("a-rather-long-thread-name", "a-rather-long-t"));
        let renamed = std::thread::Builder::new()
            .name("before".into())
            .spawn(|| {
                let new = std::ffi::CString::new("after").unwrap();
                // SAFETY: names the calling thread; the string is NUL-terminated and short.
                #[allow(unsafe_code)]
                unsafe {
                    libc::pthread_setname_np(libc::pthread_self(), new.as_ptr())
                };
                current_thread_name()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(renamed, ("after".to_owned(), "after".to_owned()));
    }
}
