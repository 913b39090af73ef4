//! What an exiting thread leaves behind: its name, for the drains to name its last samples, and
//! its CPU times, for `jdk.ThreadCPULoad` (its /proc entry is gone by the next periodic reading).

use super::RawComm;
use crate::fork::ForkSafeMutex;
use std::time::Duration;

/// A registered thread's CPU times as it exited (`getrusage(RUSAGE_THREAD)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitedThreadCpu {
    /// The thread.
    pub tid: u32,
    /// Its `comm`.
    pub name: String,
    /// Its user CPU time, from its start.
    pub user: Duration,
    /// Its system CPU time, from its start.
    pub system: Duration,
}

/// Exited threads whose names wait for a drain; beyond this (no drain for a long time) the
/// oldest are forgotten and those samples fall back to `thread-<tid>`.
const MAX_EXIT_NAMES: usize = 1 << 14;

/// The exits not collected yet.
#[derive(Debug, Default)]
pub struct Exits {
    /// Names of registered threads that exited with samples, for the drains to name their
    /// last samples (the thread and its /proc entry are gone by then).
    names: ForkSafeMutex<Vec<(u32, String)>>,
    /// CPU times of registered threads as they exited, for `jdk.ThreadCPULoad` (their
    /// /proc entries are gone by the next periodic reading).
    cpu: ForkSafeMutex<Vec<ExitedThreadCpu>>,
}

impl Exits {
    /// Called on an exiting thread (normal context): its name (for the drains, if it has
    /// samples) and its CPU times (for `jdk.ThreadCPULoad`), two system calls.
    #[allow(unsafe_code)]
    pub fn note_exit(&self, tid: u32, with_samples: bool) {
        fn push<T>(list: &mut Vec<T>, item: T) {
            if list.len() >= MAX_EXIT_NAMES {
                list.remove(0);
            }
            list.push(item);
        }
        let name = RawComm::current().map(RawComm::to_string_lossy).unwrap_or_default();
        if with_samples && !name.is_empty() {
            push(&mut self.names.lock(), (tid, name.clone()));
        }
        // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out pointer; RUSAGE_THREAD reads the calling thread's times.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } == 0 {
            let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
            let cpu = ExitedThreadCpu { tid, name, user: time(usage.ru_utime), system: time(usage.ru_stime) };
            push(&mut self.cpu.lock(), cpu);
        }
    }

    /// Names (`comm`) of the threads that exited with samples since the last call.
    pub fn take_names(&self) -> Vec<(u32, String)> {
        std::mem::take(&mut *self.names.lock())
    }

    /// CPU times of the threads that exited since the last call (at most 16,384, the oldest
    /// dropped first).
    pub fn take_cpu(&self) -> Vec<ExitedThreadCpu> {
        std::mem::take(&mut *self.cpu.lock())
    }
}
