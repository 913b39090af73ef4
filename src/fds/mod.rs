//! Descriptors the recorder opens in a process whose descriptor table belongs to the host.
//!
//! The host may close every descriptor above 2 at any time (`closefrom(3)`, `close_range`, a loop
//! over 3..1024, a daemon's start) or `dup2` over any number, and its next `open` then reuses a
//! number we thought ours. Writing, reading or closing that number would corrupt or close one of
//! the host's files. So:
//!
//! - a descriptor kept across calls is moved high ([`move_high`]): the host's opens take the
//!   lowest free number, so a number of ours it closed is reused late, if at all;
//! - its file's identity (`st_dev`, `st_ino`) is recorded when it is opened ([`HeldFile`]) and
//!   checked by `fstat` before each use in normal context; a number that names another file is
//!   never used again, not even closed: the file is reopened by its path where it has one, or the
//!   work is given up;
//! - short-lived descriptors (a /proc file read, a directory listed, a binary parsed) are opened
//!   in a descriptor table of the recorder's own ([`privately`], [`in_private_table`]): out of
//!   the host's reach, however it closes or `dup2`s, and ours out of its files' way. Where no such
//!   table can be had they are read with `pread` (which moves no file offset, should the number
//!   have changed hands) and closed only after the same check; no failure panics (std's `ReadDir`
//!   panics when `closedir` sees EBADF);
//! - no signal handler writes to any descriptor: the sampler's wakeup is a futex.
//!
//! What remains: for descriptors of the shared table (those kept across calls, and short-lived
//! ones where no table of our own could be had), a number the host closes and reuses in the
//! microseconds between our `fstat` and the call that follows it. Every descriptor the host took
//! from us is counted ([`taken`]) and reported with the recording's statistics.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// The lowest number [`move_high`] moves a descriptor to (half the descriptor limit, at most
/// this): high enough that the host's own opens rarely reach it, low enough that the kernel's
/// descriptor table stays small.
const HIGH_BASE_MAX: libc::c_int = 512;

/// Descriptors of ours found closed or naming another file.
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// How many of the recorder's descriptors the host closed or replaced so far.
pub fn taken() -> u64 {
    // Relaxed: a statistic.
    TAKEN.load(Ordering::Relaxed)
}

/// Counts one descriptor the host took from us.
pub(crate) fn count_taken() {
    // Relaxed: a statistic.
    TAKEN.fetch_add(1, Ordering::Relaxed);
}

fn high_base() -> libc::c_int {
    let mut nofile = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile) } != 0 {
        return HIGH_BASE_MAX;
    }
    let half = (nofile.rlim_cur / 2).min(HIGH_BASE_MAX as libc::rlim_t) as libc::c_int;
    half.max(3)
}

/// Moves `fd` (ours, close-on-exec) to a high number and returns the new number; `fd` itself is
/// closed. If no high number is free, `fd` is returned as it is.
pub(crate) fn move_high(fd: libc::c_int) -> libc::c_int {
    let base = high_base();
    if fd >= base {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own; it takes an integer argument.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base) };
    if high < 0 {
        return fd;
    }
    // SAFETY: `fd` is ours and was duplicated above; nothing else holds its number.
    unsafe { libc::close(fd) };
    high
}

/// The base [`move_high_or_close`] holds to: [`high_base`] when first asked (at the recording's
/// start, before the program could lower its descriptor limit); 0 until then.
static FIRST_HIGH_BASE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// [`move_high`] for descriptors the recorder can do without (a thread's perf event has a POSIX
/// timer as its fallback): moved at or above the base the recording started with, or closed and
/// an error. A program that lowered its descriptor limit below that base (a daemon's
/// `setrlimit(RLIMIT_NOFILE, 16)`) keeps every number below its limit for itself.
pub(crate) fn move_high_or_close(fd: libc::c_int) -> io::Result<libc::c_int> {
    // Relaxed: a number, the same whichever thread computes it first.
    let mut base = FIRST_HIGH_BASE.load(Ordering::Relaxed);
    if base == 0 {
        base = high_base();
        // Relaxed: as above; a racing first computation stores an equal or near value.
        let _ = FIRST_HIGH_BASE.compare_exchange(0, base, Ordering::Relaxed, Ordering::Relaxed);
    }
    if fd >= base {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we own; it takes an integer argument.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base) };
    let error = io::Error::last_os_error();
    // SAFETY: `fd` is ours; nothing else holds its number (duplicated above, or given up).
    unsafe { libc::close(fd) };
    if high < 0 {
        return Err(io::Error::new(
            error.kind(),
            format!("no descriptor number at or above {base} (the program's descriptor limit is lower): {error}"),
        ));
    }
    Ok(high)
}

/// A file's identity: (`st_dev`, `st_ino`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
}

/// The identity of the file `fd` names, if it is open.
pub(crate) fn identity(fd: libc::c_int) -> Option<Identity> {
    // SAFETY: zeroed is a valid `stat`; fstat writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer; fstat of any number is harmless.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some(Identity { dev: st.st_dev, ino: st.st_ino })
}

/// Closes `fd` if it still names the file `id`; else leaves the number alone (it is the host's
/// now) and counts it.
pub(crate) fn close_if_ours(fd: libc::c_int, id: Identity) {
    if identity(fd) == Some(id) {
        // SAFETY: `fd` still names the file we opened.
        unsafe { libc::close(fd) };
    } else {
        count_taken();
    }
}

/// A descriptor the recorder keeps open (a file, a listening socket): held at a high number,
/// checked before each use, never closed once its number names another file.
#[derive(Debug)]
pub(crate) struct Held<T: AsRawFd + IntoRawFd + FromRawFd> {
    file: ManuallyDrop<T>,
    id: Identity,
}

/// A file the recorder keeps open.
pub(crate) type HeldFile = Held<File>;

impl<T: AsRawFd + IntoRawFd + FromRawFd> Held<T> {
    /// Takes `file` (just opened by us), moving it high.
    pub(crate) fn new(file: T) -> io::Result<Held<T>> {
        let fd = move_high(file.into_raw_fd());
        let Some(id) = identity(fd) else {
            // A descriptor we opened a moment ago is gone: the host closed it.
            count_taken();
            return Err(taken_error());
        };
        // SAFETY: `fd` is ours (opened by us, moved by `move_high`), of the type it came as.
        Ok(Held { file: ManuallyDrop::new(unsafe { T::from_raw_fd(fd) }), id })
    }

    /// The file, if its number still names it.
    pub(crate) fn get(&self) -> io::Result<&T> {
        if identity(self.file.as_raw_fd()) == Some(self.id) {
            Ok(&self.file)
        } else {
            Err(taken_error())
        }
    }

    /// Whether `other` (e.g. the file reopened by its path) is the same file as this one.
    pub(crate) fn same_file(&self, other: &T) -> bool {
        identity(other.as_raw_fd()) == Some(self.id)
    }

    /// Replaces the descriptor (whose number the host took) with `file`, the same file reopened;
    /// the old number is left to the host.
    pub(crate) fn replace(&mut self, file: T) -> io::Result<()> {
        count_taken();
        let fresh = Held::new(file)?;
        if fresh.id != self.id {
            return Err(io::Error::other("the reopened file is not the one we had open"));
        }
        let old = std::mem::replace(self, fresh);
        // The old number is the host's: never close it.
        std::mem::forget(old);
        Ok(())
    }
}

impl<T: AsRawFd + IntoRawFd + FromRawFd> Drop for Held<T> {
    fn drop(&mut self) {
        if identity(self.file.as_raw_fd()) == Some(self.id) {
            // SAFETY: dropped once, here; the number still names our file.
            unsafe { ManuallyDrop::drop(&mut self.file) };
        } else {
            count_taken();
        }
    }
}

/// The error of a descriptor the host closed or reused.
pub(crate) fn taken_error() -> io::Error {
    io::Error::other("the program closed or replaced the recorder's file descriptor")
}

mod private_table;

pub(crate) use private_table::{in_private_table, privately};

fn open_raw(path: &str, flags: libc::c_int) -> io::Result<(libc::c_int, Identity)> {
    let c = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path; plain open.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    match identity(fd) {
        Some(id) => Ok((fd, id)),
        None => {
            count_taken();
            Err(taken_error())
        }
    }
}

/// Reads the whole of the small file `path` (a /proc file) into `buf` (cleared first), in the
/// recorder's own descriptor table ([`privately`]).
pub(crate) fn read_to_string(path: &str, buf: &mut String) -> io::Result<()> {
    let path = path.to_owned();
    let mut taken = std::mem::take(buf);
    let (result, filled) = privately(move || {
        let result = read_to_string_here(&path, &mut taken);
        (result, taken)
    });
    *buf = filled;
    result
}

/// The whole of the small file `path` (a /proc file), read as [`read_to_string`] does.
pub(crate) fn read_string(path: &str) -> io::Result<String> {
    let mut buf = String::new();
    read_to_string(path, &mut buf)?;
    Ok(buf)
}

/// [`read_to_string`] in the calling thread's table, by `pread` on a descriptor checked before
/// it is closed: see the module docs.
fn read_to_string_here(path: &str, buf: &mut String) -> io::Result<()> {
    buf.clear();
    let (fd, id) = open_raw(path, 0)?;
    let mut bytes = std::mem::take(buf).into_bytes();
    let mut chunk = [0u8; 4096];
    let result = loop {
        // SAFETY: `chunk` is writable for its length; pread moves no file offset.
        let n = unsafe { libc::pread(fd, chunk.as_mut_ptr().cast(), chunk.len(), bytes.len() as libc::off_t) };
        match n {
            0 => break Ok(()),
            n if n > 0 => bytes.extend_from_slice(&chunk[..n as usize]),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    break Err(e);
                }
            }
        }
    };
    close_if_ours(fd, id);
    result?;
    *buf = String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))?;
    Ok(())
}

/// The numeric names in directory `path` (the threads of /proc/self/task), and whether the
/// listing was complete, listed in the recorder's own descriptor table ([`privately`]); never
/// panics (see the module docs).
pub(crate) fn numeric_entries(path: &str) -> io::Result<(Vec<u32>, bool)> {
    let path = path.to_owned();
    privately(move || numeric_entries_here(&path))
}

fn numeric_entries_here(path: &str) -> io::Result<(Vec<u32>, bool)> {
    let (fd, id) = open_raw(path, libc::O_DIRECTORY)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let complete = loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n == 0 {
            break true;
        }
        if n < 0 {
            break false;
        }
        let mut at = 0usize;
        let n = n as usize;
        // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name[].
        while at + 19 <= n {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 || at + reclen > n {
                break;
            }
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(v) = std::str::from_utf8(name).ok().and_then(|s| s.parse::<u32>().ok()) {
                out.push(v);
            }
            at += reclen;
        }
    };
    close_if_ours(fd, id);
    Ok((out, complete))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_held_file_whose_number_was_reused_is_neither_used_nor_closed() {
        let dir = tempfile::tempdir().unwrap();
        let ours = HeldFile::new(File::create(dir.path().join("ours")).unwrap()).unwrap();
        let fd = ours.file.as_raw_fd();
        assert!(fd >= high_base().min(3), "moved high: {fd}");
        assert!(ours.get().is_ok());
        // The host closes our number and opens its own file there.
        let theirs = File::create(dir.path().join("theirs")).unwrap();
        // SAFETY: test: plays the host.
        assert_eq!(unsafe { libc::dup2(theirs.as_raw_fd(), fd) }, fd);
        assert!(ours.get().is_err());
        let before = taken();
        drop(ours);
        assert!(taken() > before);
        // The host's descriptor is still open.
        assert!(identity(fd).is_some());
        // SAFETY: test cleanup of the duplicate made above.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn proc_reads_and_listings() {
        let mut buf = String::new();
        read_to_string("/proc/self/stat", &mut buf).unwrap();
        assert!(buf.contains(')'));
        let (tids, complete) = numeric_entries("/proc/self/task").unwrap();
        assert!(complete);
        // SAFETY: getpid has no preconditions.
        assert!(tids.contains(&(unsafe { libc::getpid() } as u32)));
    }
}
