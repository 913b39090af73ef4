//! Thread identity: OS thread ids and names.

use std::cell::Cell;

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread's OS thread id (cached per thread).
pub fn current_tid() -> u32 {
    let cached = TID.try_with(Cell::get).unwrap_or(0);
    if cached != 0 {
        return cached;
    }
    // gettid never fails.
    let tid = rustix_free_gettid();
    let _ = TID.try_with(|c| c.set(tid));
    tid
}

#[allow(unsafe_code)]
fn rustix_free_gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// The kernel's name for thread `tid` of this process (`comm`), if it still exists.
pub fn os_thread_name(tid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_owned())
}

/// The calling thread's name: its Rust name if it has one, else the kernel's.
pub fn current_thread_name() -> String {
    match std::thread::current().name() {
        Some(name) => name.to_owned(),
        None => os_thread_name(current_tid()).unwrap_or_else(|| format!("thread-{}", current_tid())),
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
