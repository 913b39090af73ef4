//! The `/proc` readers: one parser for `/proc/self/maps` lines, one for `stat` lines
//! (`/proc/self/stat`, `/proc/self/task/TID/stat`), and the thread listing with start times.
//!
//! Fields of a `stat` line are numbered as proc(5) numbers them (1: pid, 2: comm, 3: state, 14:
//! utime, 15: stime, 22: starttime); every reader goes through [`parse_stat`], so there is one
//! convention.
//!
//! The allocation hook reads `/proc/self/maps` without allocating and through raw system calls
//! (it runs inside the application's `malloc`, see `alloc/hook.rs`): it cannot share this parser,
//! which takes a line of text.

use std::collections::HashSet;
use std::io;

/// One line of `/proc/self/maps`: `start-end perms offset dev inode   path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsLine<'a> {
    /// First address of the mapping.
    pub start: usize,
    /// One past its last address.
    pub end: usize,
    /// Mapped executable (`x` in the permissions).
    pub executable: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// The file's device (`major:minor`).
    pub dev: &'a str,
    /// The file's inode (0: anonymous).
    pub inode: u64,
    /// The file (with ` (deleted)` if it is gone), a pseudo name such as `[stack]`, or empty.
    pub path: &'a str,
}

/// Parses one line of `/proc/self/maps`; `None` if it is not one.
pub fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        rest = &t[end..];
        Some(&t[..end]).filter(|f| !f.is_empty())
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let path = rest.trim_start();
    let (start, end) = range.split_once('-')?;
    Some(MapsLine {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev,
        inode: inode.parse().ok()?,
        path,
    })
}

/// The text of `/proc/self/maps` (`None`: unreadable).
pub fn read_maps() -> Option<String> {
    crate::fds::read_string("/proc/self/maps").ok()
}

/// The fields of a `stat` line the recorder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat<'a> {
    /// Field 2, without its parentheses (between the first `(` and the last `)`: a name may
    /// contain both).
    pub comm: &'a str,
    /// Field 3 (R, S, D, Z, X, ...).
    pub state: u8,
    /// Field 14: user CPU time, in clock ticks (USER_HZ).
    pub utime: u64,
    /// Field 15: system CPU time, in clock ticks.
    pub stime: u64,
    /// Field 22: start time, in clock ticks since boot.
    pub start_time: u64,
    /// Field 28: the address of the start (bottom) of the main thread's stack; 0 if the line
    /// has no such field.
    pub start_stack: u64,
}

/// Parses a `stat` line; `None` if it is not one.
pub fn parse_stat(stat: &str) -> Option<Stat<'_>> {
    let comm = stat_comm(stat)?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 is the first after the comm.
    let field = |n: usize| fields.get(n - 3).copied();
    let number = |n: usize| field(n)?.parse::<u64>().ok();
    Some(Stat {
        comm,
        state: *field(3)?.as_bytes().first()?,
        utime: number(14)?,
        stime: number(15)?,
        start_time: number(22)?,
        start_stack: number(28).unwrap_or(0),
    })
}

/// The `comm` field of a `stat` line (between the first `(` and the last `)`: a name may
/// contain both).
pub fn stat_comm(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// Thread `tid`'s `stat` line, read into `buf` (no descriptor of the host's trusted, `fds/mod.rs`),
/// parsed.
pub fn task_stat(tid: u32, buf: &mut String) -> io::Result<Stat<'_>> {
    crate::fds::read_to_string(&format!("/proc/self/task/{tid}/stat"), buf)?;
    parse_stat(buf).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable stat"))
}

/// Start time (field 22 of /proc/self/task/TID/stat), 0 if unreadable.
pub fn start_time(tid: u32) -> u64 {
    task_stat(tid, &mut String::new()).map_or(0, |s| s.start_time)
}

/// Whether /proc/self/task still lists thread `tid`.
pub fn task_listed(tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}

/// The thread ids listed in /proc/self/task, and whether the listing was read to its end.
pub fn list_task_ids() -> io::Result<(Vec<u32>, bool)> {
    // Not std's read_dir: its closedir panics on a descriptor the host closed (`fds/mod.rs`).
    crate::fds::numeric_entries("/proc/self/task")
}

/// The /proc/self/task listing with start times, read outside every lock.
#[derive(Debug, Default)]
pub struct TaskListing {
    /// (tid, start time if its stat could be read).
    pub threads: Vec<(u32, Option<u64>)>,
    /// (tid, `comm`) of the threads whose stat was read, from that same read.
    pub names: Vec<(u32, String)>,
    /// The listing was read to its end (false: EMFILE, ENOMEM, ...).
    pub complete: bool,
}

/// Lists the process's threads with their start times and names.
pub fn list_tasks() -> TaskListing {
    // In the recorder's own descriptor table, all in one visit (`fds::privately`).
    crate::fds::privately(list_tasks_here)
}

fn list_tasks_here() -> TaskListing {
    let mut out = TaskListing::default();
    let Ok((tids, complete)) = list_task_ids() else {
        return out;
    };
    let mut buf = String::new();
    out.complete = complete;
    for tid in tids {
        let stat = task_stat(tid, &mut buf).ok();
        if let Some(st) = &stat {
            out.names.push((tid, st.comm.to_owned()));
        }
        out.threads.push((tid, stat.map(|s| s.start_time)));
    }
    out
}

/// Threads of `listed` (tid, start time in clock ticks since boot) that started less than
/// 200 ms ago.
#[allow(unsafe_code)]
pub fn young_threads(listed: &[(u32, Option<u64>)]) -> HashSet<u32> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
    let now = ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000;
    let window = (hz / 5).max(1);
    listed.iter().filter(|(_, s)| s.is_none_or(|s| s + window > now)).map(|&(t, _)| t).collect()
}

/// What is known about whether thread (tid, start) still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The kernel says it runs.
    Alive,
    /// Proven dead.
    Dead,
    /// Nothing could be read: never taken for dead.
    Unknown,
}

/// Proves a thread dead, or not (docs/sampler-protocol.md §6): only the kernel's word counts.
/// `tgkill(pid, tid, 0)` failing with ESRCH (no task with that tid in this process), or its
/// tid naming a task with another start time (tid reuse) or a zombie, is death. Anything that
/// cannot be read is `Unknown`, never death.
#[allow(unsafe_code)]
pub fn fate(tid: u32, start: u64, buf: &mut String) -> Fate {
    let exists = || {
        // SAFETY: signal 0 only checks that the target exists and may be signalled.
        let rc = unsafe { libc::syscall(libc::SYS_tgkill, super::getpid() as libc::pid_t, tid as libc::pid_t, 0) };
        if rc == 0 {
            Some(true)
        } else if io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            Some(false)
        } else {
            None
        }
    };
    match exists() {
        Some(false) => return Fate::Dead,
        None => return Fate::Unknown,
        Some(true) => {}
    }
    match task_stat(tid, buf) {
        Ok(st) if start != 0 && st.start_time != start => Fate::Dead,
        Ok(st) if st.state == b'Z' || st.state == b'X' => Fate::Dead,
        Ok(_) => Fate::Alive,
        // /proc says no such task: believe it only if the kernel now agrees.
        Err(e) if e.kind() == io::ErrorKind::NotFound && exists() == Some(false) => Fate::Dead,
        Err(_) => Fate::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn stat_fields_are_numbered_as_proc_numbers_them_after_a_comm_with_spaces() {
        let stat = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
        let st = parse_stat(stat).unwrap();
        assert_eq!((st.comm, st.state, st.start_time), ("a b) c", b'S', 424242));
        // Fields 14 and 15 are the 11th and 12th numbers after the state.
        assert_eq!((st.utime, st.stime), (11, 12));
        assert_eq!(st.start_stack, 0);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_ne!(parse_stat(&own).unwrap().start_stack, 0);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn comm_is_read_between_the_outer_parentheses() {
        assert_eq!(stat_comm("12 (worker (1)) S 1 2"), Some("worker (1)"));
        assert_eq!(stat_comm("12 () R 1"), Some(""));
        assert_eq!(stat_comm("garbage"), None);
    }

    #[test]
    fn own_stat_is_read() {
        let mut buf = String::new();
        let me = super::super::gettid();
        let st = task_stat(me, &mut buf).unwrap();
        // Read by the recorder's files thread while this one waits for it (`fds::privately`).
        assert!(matches!(st.state, b'R' | b'S'), "{}", st.state as char);
        assert_ne!(st.start_time, 0);
        assert_eq!(start_time(me), st.start_time);
    }

    #[test]
    fn maps_lines_parse_with_and_without_paths() {
        let m =
            parse_maps_line("7f1c2a400000-7f1c2a428000 r-xp 00028000 08:01 1234   /usr/lib/x86_64-linux-gnu/libc.so.6")
                .unwrap();
        assert_eq!((m.start, m.end, m.offset, m.executable), (0x7f1c2a400000, 0x7f1c2a428000, 0x28000, true));
        assert_eq!((m.dev, m.inode, m.path), ("08:01", 1234, "/usr/lib/x86_64-linux-gnu/libc.so.6"));
        let anon = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0").unwrap();
        assert!(!anon.executable && anon.path.is_empty());
        let spaced = parse_maps_line("1000-2000 r-xp 0 00:00 5 /tmp/a b (deleted)").unwrap();
        assert_eq!(spaced.path, "/tmp/a b (deleted)");
        let stack = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]");
        assert_eq!(stack.unwrap().path, "[stack]");
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn fate_never_takes_a_live_thread_for_dead() {
        let mut buf = String::new();
        let me = super::super::gettid();
        assert_eq!(fate(me, start_time(me), &mut buf), Fate::Alive);
        // Unknown start time: the kernel's word that it exists is enough.
        assert_eq!(fate(me, 0, &mut buf), Fate::Alive);
        // Same tid, another start time: the entry's thread is dead (tid reuse).
        assert_eq!(fate(me, start_time(me) + 1, &mut buf), Fate::Dead);
        let t = std::thread::spawn(super::super::gettid);
        let gone = t.join().unwrap();
        // A joined thread may linger for a moment before the kernel forgets it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while fate(gone, 0, &mut buf) != Fate::Dead {
            assert!(Instant::now() < deadline, "a joined thread never became dead");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
