//! Removing the recorder from the environment that exec'd children inherit.
//!
//! Choice: edit `environ` in place once, in the library's constructor, rather than interpose
//! `execve`, `execv*`, `execl*`, `posix_spawn*`, `system` and `popen`. Every one of those passes
//! `environ` (or a copy the program made of it after `main` started) to the kernel, so one edit
//! before `main` covers them all, including the variants that glibc implements without going
//! through an exported `execve` (posix_spawn's `__spawni`, `system`), which an interposer would
//! miss. The edit is in place (entries shifted down, the null terminator moved), so `main`'s
//! third argument, which points at the same array, sees it too. What it cannot cover: a program
//! that builds an environment from strings of its own containing `LD_PRELOAD` (rare; the child
//! then records itself too, into its own directory).
//!
//! The library reads its variables before the edit, so it needs none of them later.

use libc::c_char;
use std::ffi::{CStr, CString};

extern "C" {
    static mut environ: *mut *mut c_char;
}

/// The file name the loader gives the library; `LD_PRELOAD` entries ending in it are ours.
pub const LIBRARY_FILE_NAME: &str = "librecorder_preload.so";

/// Set by an exec of the recorded process for the new image: `PID:DIR`, the recording
/// directory its recording continues (only in process PID: a child that inherits it does not).
pub const ENV_CONTINUE: &str = "RECORDER_CONTINUE";

/// Variables removed whole.
const OURS: [&str; 3] = ["RECORDER_OPTIONS", "RECORDER_PRELOAD", ENV_CONTINUE];

/// What `LD_PRELOAD` keeps once our entries are gone (`None`: nothing is left). Entries are
/// separated by spaces or colons, as the loader reads them.
pub fn preload_without_us(value: &str, our_path: Option<&str>) -> Option<String> {
    let kept: Vec<&str> = value
        .split([' ', ':'])
        .filter(|e| !e.is_empty())
        .filter(|e| !(e.rsplit('/').next() == Some(LIBRARY_FILE_NAME) || Some(*e) == our_path))
        .collect();
    (!kept.is_empty()).then(|| kept.join(" "))
}

/// Removes `RECORDER_OPTIONS`, `RECORDER_PRELOAD` and our entry of `LD_PRELOAD` from `environ`.
///
/// # Safety
/// Only while no other thread reads or writes the environment (the library's constructor runs
/// before `main`, on the only thread the process normally has then).
pub unsafe fn remove_recorder(our_path: Option<&str>) {
    // SAFETY: the caller guarantees exclusive access; `environ` is the C library's array.
    let base = unsafe { environ };
    if base.is_null() {
        return;
    }
    let mut read = 0usize;
    let mut write = 0usize;
    loop {
        // SAFETY: `environ` is a null-terminated array of pointers; `read` stops at the null.
        let entry = unsafe { *base.add(read) };
        if entry.is_null() {
            break;
        }
        read += 1;
        // SAFETY: each entry is a NUL-terminated `NAME=value` string.
        let text = unsafe { CStr::from_ptr(entry) }.to_string_lossy();
        let (name, value) = text.split_once('=').unwrap_or((&text, ""));
        let mut keep = entry;
        if OURS.contains(&name) {
            continue;
        }
        if name == "LD_PRELOAD" {
            match preload_without_us(value, our_path) {
                None => continue,
                Some(rest) if rest != value => {
                    // Leaked on purpose: the environment's strings live as long as the process.
                    match CString::new(format!("LD_PRELOAD={rest}")) {
                        Ok(s) => keep = s.into_raw(),
                        Err(_) => continue,
                    }
                }
                Some(_) => {}
            }
        }
        // SAFETY: `write <= read - 1 < len`: inside the array.
        unsafe { *base.add(write) = keep };
        write += 1;
    }
    // SAFETY: `write <= read`, the index of the old terminator: inside the array.
    unsafe { *base.add(write) = std::ptr::null_mut() };
}

/// Removes every `name=` entry from `environ`.
///
/// # Safety
/// As [`remove_recorder`].
pub unsafe fn remove_variable(name: &str) {
    // SAFETY: the caller guarantees exclusive access; `environ` is the C library's array.
    let base = unsafe { environ };
    if base.is_null() {
        return;
    }
    let (mut read, mut write) = (0usize, 0usize);
    loop {
        // SAFETY: a null-terminated array of pointers; `read` stops at the null.
        let entry = unsafe { *base.add(read) };
        if entry.is_null() {
            break;
        }
        read += 1;
        // SAFETY: each entry is a NUL-terminated `NAME=value` string.
        let text = unsafe { CStr::from_ptr(entry) }.to_bytes();
        if text.strip_prefix(name.as_bytes()).is_some_and(|rest| rest.first() == Some(&b'=')) {
            continue;
        }
        // SAFETY: `write < read`: inside the array.
        unsafe { *base.add(write) = entry };
        write += 1;
    }
    // SAFETY: `write <= read`, the index of the old terminator: inside the array.
    unsafe { *base.add(write) = std::ptr::null_mut() };
}

#[cfg(test)]
mod tests {
    use super::preload_without_us;

    #[test]
    fn only_our_entries_leave_ld_preload() {
        assert_eq!(preload_without_us("/x/librecorder_preload.so", None), None);
        assert_eq!(preload_without_us("libfoo.so /x/librecorder_preload.so", None).as_deref(), Some("libfoo.so"));
        assert_eq!(preload_without_us("a.so:/p/ours.so:b.so", Some("/p/ours.so")).as_deref(), Some("a.so b.so"));
        assert_eq!(preload_without_us("a.so", None).as_deref(), Some("a.so"));
    }
}
