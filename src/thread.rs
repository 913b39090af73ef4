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
