//! Control socket: lets another process of the same user ask a running recording for a dump.
//!
//! A recording listens on a Unix stream socket `<dir>/<pid>.sock` (mode 0600) in a per-user
//! directory (mode 0700), see [`socket_dir`]. One request per connection, one line each way:
//!
//! | request | answer |
//! |---|---|
//! | `DUMP <absolute path>\n` | the process flushes and writes a complete `.jfr` of its repository to the path: `OK <bytes>\n` or `ERR <message>\n` |
//! | `PING\n` | `OK <pid> <repository dir>\n` |
//!
//! Only peers of the recording's own user are served: the listener checks the peer's uid with
//! `SO_PEERCRED` and answers anyone else `ERR permission denied` before closing. The client
//! ([`request_dump`], [`ping`]) checks the other way round: the socket file must be a socket owned
//! by the target process's user, in a directory no one else can write, and the peer at the other
//! end must be the target pid (`SO_PEERCRED` again), so a planted socket is refused.
//!
//! The listener runs on its own thread from `Recorder::start` to `Recorder::stop`; it holds no
//! strong reference to the recording, and any problem it meets is logged once to stderr and never
//! reaches the host program. `RECORDER_CONTROL=off` (or `0`) disables it.

use crate::fds::Held;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Environment variable overriding the socket directory (for both the recording and clients).
pub const ENV_DIR: &str = "RECORDER_CONTROL_DIR";
/// Environment variable that disables the listener when set to `0`, `off`, `false` or `no`.
pub const ENV_ENABLE: &str = "RECORDER_CONTROL";

/// Longest request or answer line accepted.
const MAX_LINE: usize = 4096;
/// How long the listener waits for a request line, and a client for an answer to `PING`.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client waits for a dump to be written.
const DUMP_TIMEOUT: Duration = Duration::from_secs(120);

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The directory this process's recordings put their socket in: `$RECORDER_CONTROL_DIR` if set,
/// else `$XDG_RUNTIME_DIR/recorder` if that runtime directory exists and is ours, else
/// `/tmp/recorder-<uid>/control`.
pub fn socket_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(ENV_DIR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let xdg = PathBuf::from(xdg);
        if std::fs::metadata(&xdg).is_ok_and(|m| m.is_dir() && m.uid() == uid()) {
            return xdg.join("recorder");
        }
    }
    tmp_dir(uid())
}

fn tmp_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/recorder-{uid}/control"))
}

/// Directories where a process of user `target_uid` may have put its socket, most specific first.
fn candidate_dirs(target_uid: u32) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os(ENV_DIR).filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(dir));
    }
    if target_uid == uid() {
        dirs.push(socket_dir());
    }
    dirs.push(PathBuf::from(format!("/run/user/{target_uid}/recorder")));
    dirs.push(tmp_dir(target_uid));
    let mut unique: Vec<PathBuf> = Vec::with_capacity(dirs.len());
    for d in dirs {
        if !unique.contains(&d) {
            unique.push(d);
        }
    }
    unique
}

static LOGGED: AtomicBool = AtomicBool::new(false);

/// Logs the first problem of the control socket; later ones are dropped (the host must not be
/// flooded, and nothing here may fail it).
fn log_once(what: &str) {
    if !LOGGED.swap(true, Ordering::Relaxed) {
        eprintln!("recorder: control socket disabled or degraded: {what}");
    }
}

/// Writes a dump to a path; returns its size. Given by the recorder, holding only a weak reference.
pub(crate) type DumpFn = Box<dyn Fn(&Path) -> Result<u64, String> + Send + Sync>;

struct Listener {
    generation: u64,
    /// The process that started the listener: a forked child inherits this record but not the
    /// thread, and must neither join it nor remove the parent's socket.
    pid: u32,
    stop: Arc<AtomicBool>,
    path: PathBuf,
    thread: JoinHandle<()>,
}

static LISTENER: Mutex<Option<Listener>> = Mutex::new(None);

fn enabled() -> bool {
    !matches!(std::env::var(ENV_ENABLE).map(|v| v.to_ascii_lowercase()).as_deref(), Ok("0" | "off" | "false" | "no"))
}

/// Starts the listener of recording `generation` (called by `Recorder::start`); its thread runs
/// `on_start` first (the recorder's own threads are not sampled). Never fails: a problem is
/// logged once and the recording runs without a control socket.
pub(crate) fn start(generation: u64, repository: &Path, dump: DumpFn, on_start: Box<dyn FnOnce() + Send>) {
    if !enabled() {
        return;
    }
    let mut slot = LISTENER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(old) = slot.take() {
        shut_down(old);
    }
    match listen(generation, repository.to_owned(), dump, on_start) {
        Ok(l) => *slot = Some(l),
        Err(e) => log_once(&e),
    }
}

/// Stops the listener of recording `generation` and removes its socket (called by
/// `Recorder::stop`). A listener of another recording is left alone.
pub(crate) fn stop(generation: u64) {
    let listener = {
        let mut slot = LISTENER.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_ref() {
            Some(l) if l.generation == generation => slot.take(),
            _ => None,
        }
    };
    if let Some(l) = listener {
        shut_down(l);
    }
}

fn shut_down(l: Listener) {
    if l.pid != std::process::id() {
        // Inherited through fork(): the thread and the socket are the parent's. Joining a thread
        // that does not exist in this process would wait forever.
        std::mem::forget(l);
        return;
    }
    l.stop.store(true, Ordering::Release);
    // Wake the accept poll at once; the poll timeout covers the case where this fails.
    let _ = UnixStream::connect(&l.path);
    let _ = l.thread.join();
}

/// Checks that `dir` is a directory of ours that nobody else can use, creating it (0700) if needed.
fn prepare_dir(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if meta.uid() != uid() {
        return Err(format!("{} belongs to uid {}, not to us", dir.display(), meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))?;
    }
    // The directory above the default one is ours too (we may have created it just now).
    if dir.starts_with("/tmp") {
        if let Some(parent) = dir.parent().filter(|p| *p != Path::new("/tmp")) {
            let meta = std::fs::symlink_metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
            if !meta.is_dir() || meta.uid() != uid() || meta.mode() & 0o022 != 0 {
                return Err(format!("{} is not a directory only we can write", parent.display()));
            }
        }
    }
    Ok(())
}

/// Removes the sockets that recordings of dead processes left in this process's socket directory
/// (a process killed with SIGKILL never removes its own). `Recorder::start` does this; so can
/// `recorder repair`. Returns the sockets removed.
pub fn remove_dead_sockets() -> Vec<PathBuf> {
    remove_dead_sockets_in(&socket_dir())
}

/// A socket `<pid>.sock` of ours is dead when no process `pid` exists and nobody answers on it
/// (a live process of another pid namespace sharing the directory still does). Anything else is
/// left alone: other files, sockets of other users, a live pid (maybe reused: its owner replaces
/// the socket when it records, and the next sweep after it exits removes it).
fn remove_dead_sockets_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".sock"))
            .and_then(|p| p.parse::<libc::pid_t>().ok())
            .filter(|&p| p > 0)
        else {
            continue;
        };
        let ours = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket() && m.uid() == uid());
        if !ours || pid_exists(pid) {
            continue;
        }
        let refused = matches!(UnixStream::connect(&path), Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED));
        if refused && std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

fn pid_exists(pid: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn listen(
    generation: u64,
    repository: PathBuf,
    dump: DumpFn,
    on_start: Box<dyn FnOnce() + Send>,
) -> Result<Listener, String> {
    let dir = socket_dir();
    prepare_dir(&dir)?;
    remove_dead_sockets_in(&dir);
    let pid = std::process::id();
    let path = dir.join(format!("{pid}.sock"));
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_socket() && meta.uid() == uid() => {
            // A stale socket of an earlier recording with our pid (this process, or a dead one),
            // unless someone still serves it (a process with our pid in another pid namespace).
            if UnixStream::connect(&path).is_ok() {
                return Err(format!("{} is served by another live process", path.display()));
            }
            std::fs::remove_file(&path).map_err(|e| format!("cannot remove stale {}: {e}", path.display()))?;
        }
        Ok(_) => return Err(format!("{} exists and is not our socket; not replacing it", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let listener = UnixListener::bind(&path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    let cleanup = |e: String| {
        let _ = std::fs::remove_file(&path);
        e
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| cleanup(format!("cannot restrict {}: {e}", path.display())))?;
    listener.set_nonblocking(true).map_err(|e| cleanup(format!("{}: {e}", path.display())))?;
    // Held high and checked before each poll: the program may close every descriptor (`fds/mod.rs`).
    let listener = Held::new(listener).map_err(|e| cleanup(format!("{}: {e}", path.display())))?;
    let ino = std::fs::symlink_metadata(&path).map(|m| (m.dev(), m.ino())).ok();
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let thread_path = path.clone();
    let thread = crate::own_thread::spawn("recorder-control", move || {
        on_start();
        serve(&listener, &thread_stop, &repository, &dump);
        // Remove the socket only if it is still the one we bound.
        let same = std::fs::symlink_metadata(&thread_path).map(|m| (m.dev(), m.ino())).ok();
        if same.is_some() && same == ino {
            let _ = std::fs::remove_file(&thread_path);
        }
    })
    .map_err(|e| cleanup(format!("cannot start the control thread: {e}")))?;
    Ok(Listener { generation, pid, stop, path, thread })
}

/// Connections read at once at most: beyond, the oldest waiting one is closed.
const MAX_WAITING: usize = 64;

/// A connection whose request line is still being read.
struct Waiting {
    stream: UnixStream,
    line: Vec<u8>,
    deadline: Instant,
}

/// Serves every connection at once (one `poll` over the listener and the connections whose
/// request line is incomplete), so an idle or slow peer delays no other: each has `IO_TIMEOUT`
/// to send its line, and a line is answered as soon as it is complete.
fn serve(listener: &Held<UnixListener>, stop: &AtomicBool, repository: &Path, dump: &DumpFn) {
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut pfds: Vec<libc::pollfd> = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let Ok(l) = listener.get() else {
            // The program closed or replaced the listener's descriptor: its number is the
            // program's now, never polled, accepted on or closed by us.
            log_once("the program closed the control socket's descriptor; requests are no longer served");
            return;
        };
        let now = Instant::now();
        waiting.retain(|w| w.deadline > now);
        let timeout = waiting.iter().map(|w| w.deadline - now).min().unwrap_or(Duration::from_millis(200));
        let timeout = timeout.min(Duration::from_millis(200)).as_millis().max(1) as libc::c_int;
        pfds.clear();
        pfds.push(libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        pfds.extend(waiting.iter().map(|w| libc::pollfd {
            fd: w.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: `pfds` is a valid array of pollfds for the duration of the call.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                log_once(&format!("poll: {e}"));
                std::thread::sleep(Duration::from_millis(200));
            }
            continue;
        }
        if n == 0 {
            continue;
        }
        // Connections first (their indices are those of `pfds`), then the new ones.
        for i in (0..waiting.len()).rev() {
            if pfds[i + 1].revents == 0 {
                continue;
            }
            match read_available(&mut waiting[i]) {
                ReadState::More => {}
                ReadState::Done => {
                    drop(waiting.remove(i));
                }
                ReadState::Line(line) => {
                    let w = waiting.remove(i);
                    if let Err(e) = send_all(&w.stream, answer(&line, repository, dump).as_bytes()) {
                        log_once(&format!("request: {e}"));
                    }
                }
            }
        }
        if pfds[0].revents == 0 {
            continue;
        }
        loop {
            match l.accept() {
                Ok((stream, _)) => {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    match admit(stream) {
                        Ok(Some(stream)) => {
                            if waiting.len() >= MAX_WAITING {
                                waiting.remove(0);
                            }
                            waiting.push(Waiting { stream, line: Vec::new(), deadline: Instant::now() + IO_TIMEOUT });
                        }
                        Ok(None) => {}
                        Err(e) => log_once(&format!("request: {e}")),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log_once(&format!("accept: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
        }
    }
}

/// A new connection: refused at once (before anything is read from it) unless its peer is of
/// our user; else made non-blocking, to be read by `serve`.
fn admit(stream: UnixStream) -> io::Result<Option<UnixStream>> {
    stream.set_nonblocking(true)?;
    let cred = peer_cred(&stream)?;
    if cred.uid != uid() {
        let _ = send_all(&stream, b"ERR permission denied\n");
        return Ok(None);
    }
    Ok(Some(stream))
}

enum ReadState {
    /// The line is not complete yet.
    More,
    /// The peer left, broke the rules (no line within `MAX_LINE`, not UTF-8) or failed: closed
    /// without an answer (a peer that connects and leaves, like the listener's own wake-up, is no
    /// problem).
    Done,
    /// The request line, without its newline.
    Line(String),
}

/// Reads what `w`'s peer has sent so far, without blocking.
fn read_available(w: &mut Waiting) -> ReadState {
    let mut buf = [0u8; 1024];
    loop {
        match (&w.stream).read(&mut buf) {
            Ok(0) => return ReadState::Done,
            Ok(n) => {
                let room = MAX_LINE - w.line.len();
                let got = &buf[..n.min(room)];
                if let Some(end) = got.iter().position(|&b| b == b'\n') {
                    w.line.extend_from_slice(&got[..end]);
                    return match String::from_utf8(std::mem::take(&mut w.line)) {
                        Ok(line) => ReadState::Line(line),
                        Err(_) => ReadState::Done,
                    };
                }
                w.line.extend_from_slice(got);
                if w.line.len() >= MAX_LINE {
                    return ReadState::Done;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadState::More,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return ReadState::Done,
        }
    }
}

/// The credentials of the process at the other end of `stream`.
fn peer_cred(stream: &UnixStream) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes and `len` holds the buffer's size.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

fn read_line(stream: &UnixStream) -> io::Result<String> {
    let mut line = Vec::new();
    let mut reader = BufReader::new(stream.take(MAX_LINE as u64));
    reader.read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "no complete line"));
    }
    line.pop();
    String::from_utf8(line).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// The answer to request `line`.
fn answer(line: &str, repository: &Path, dump: &DumpFn) -> String {
    if line == "PING" {
        format!("OK {} {}\n", std::process::id(), repository.display())
    } else if let Some(path) = line.strip_prefix("DUMP ") {
        let path = Path::new(path);
        if !path.is_absolute() {
            "ERR the dump path must be absolute\n".to_owned()
        } else if let Err(e) = dump_target_allowed(path) {
            format!("ERR {}\n", e.replace('\n', " "))
        } else {
            match dump(path) {
                Ok(n) => format!("OK {n}\n"),
                Err(e) => format!("ERR {}\n", e.replace('\n', " ")),
            }
        }
    } else {
        "ERR unknown request (expected DUMP <path> or PING)\n".to_owned()
    }
}

/// A dump replaces its target by a rename: only a new path or an existing regular file may be
/// replaced, never a device, a directory, a FIFO, a socket or a symlink (whatever it points to).
fn dump_target_allowed(path: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok(meta) if meta.file_type().is_file() => Ok(()),
        Ok(meta) => {
            let t = meta.file_type();
            let what = if t.is_symlink() {
                "a symbolic link"
            } else if t.is_dir() {
                "a directory"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_fifo() {
                "a FIFO"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            Err(format!("{} is {what}: a dump is written to a new path or over a regular file only", path.display()))
        }
    }
}

/// Writes all of `bytes` with `MSG_NOSIGNAL`: a peer that went away must not raise SIGPIPE in the
/// host (a C host does not ignore it as Rust binaries do).
fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe a live slice; the fd is open for the call.
        let n = unsafe { libc::send(stream.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Why a control request failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ControlError {
    /// No process has this pid.
    NoSuchProcess {
        /// The pid.
        pid: u32,
    },
    /// The process exists but runs no recording with a control socket (no socket, or nobody
    /// listening on it).
    NotRecording {
        /// The pid.
        pid: u32,
        /// What was found.
        detail: String,
    },
    /// The process belongs to another user, or refused us.
    PermissionDenied {
        /// The pid.
        pid: u32,
        /// What refused.
        detail: String,
    },
    /// The socket path is not a socket of the target process's user, or the peer is not the
    /// target process: refused without sending anything.
    Untrusted {
        /// The socket path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The process answered with an error.
    Remote {
        /// The process's message.
        message: String,
    },
    /// Talking to the process failed.
    Io {
        /// What was being done.
        context: String,
        /// Why.
        source: io::Error,
    },
    /// The answer was not understood.
    Protocol {
        /// What was received.
        message: String,
    },
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::NoSuchProcess { pid } => write!(f, "process {pid} does not exist"),
            ControlError::NotRecording { pid, detail } => {
                write!(f, "process {pid} is not recording (no control socket: {detail})")
            }
            ControlError::PermissionDenied { pid, detail } => {
                write!(f, "permission denied for process {pid}: {detail}")
            }
            ControlError::Untrusted { path, reason } => {
                write!(f, "refusing control socket {}: {reason}", path.display())
            }
            ControlError::Remote { message } => write!(f, "the process answered: {message}"),
            ControlError::Io { context, source } => write!(f, "{context}: {source}"),
            ControlError::Protocol { message } => write!(f, "unexpected answer: {message:?}"),
        }
    }
}

impl std::error::Error for ControlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ControlError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The uid owning process `pid`, or why not.
fn process_uid(pid: u32) -> Result<u32, ControlError> {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return Err(ControlError::NoSuchProcess { pid });
    };
    if raw <= 0 {
        return Err(ControlError::NoSuchProcess { pid });
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    if unsafe { libc::kill(raw, 0) } != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return Err(ControlError::NoSuchProcess { pid });
    }
    match std::fs::metadata(format!("/proc/{pid}")) {
        Ok(m) => Ok(m.uid()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(ControlError::NoSuchProcess { pid }),
        Err(e) => Err(ControlError::Io { context: format!("reading /proc/{pid}"), source: e }),
    }
}

/// Finds and checks the socket of `pid`, connects, checks the peer, sends `request`, returns the
/// text after `OK `.
fn exchange(pid: u32, request: &str, timeout: Duration) -> Result<String, ControlError> {
    let owner = process_uid(pid)?;
    let mut path = None;
    for dir in candidate_dirs(owner) {
        let p = dir.join(format!("{pid}.sock"));
        match std::fs::symlink_metadata(&p) {
            Ok(_) => {
                path = Some(p);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(ControlError::PermissionDenied {
                    pid,
                    detail: format!("cannot look into {}: {e}", dir.display()),
                })
            }
            Err(_) => {}
        }
    }
    let Some(path) = path else {
        return Err(ControlError::NotRecording {
            pid,
            detail: format!("no {pid}.sock in {:?}", candidate_dirs(owner)),
        });
    };
    let untrusted = |reason: String| ControlError::Untrusted { path: path.clone(), reason };
    let meta = std::fs::symlink_metadata(&path).map_err(|e| untrusted(e.to_string()))?;
    if !meta.file_type().is_socket() {
        return Err(untrusted("not a socket".into()));
    }
    if meta.uid() != owner {
        return Err(untrusted(format!("owned by uid {}, but process {pid} runs as uid {owner}", meta.uid())));
    }
    if let Some(dir) = path.parent() {
        let dmeta = std::fs::symlink_metadata(dir).map_err(|e| untrusted(e.to_string()))?;
        if !dmeta.is_dir() || (dmeta.uid() != owner && dmeta.uid() != 0) || dmeta.mode() & 0o022 != 0 {
            return Err(untrusted(format!("{} is writable by others or not owned by uid {owner}", dir.display())));
        }
    }
    let stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) => {
            return Err(match e.raw_os_error() {
                Some(libc::ECONNREFUSED) | Some(libc::ENOENT) => {
                    ControlError::NotRecording { pid, detail: format!("{}: {e}", path.display()) }
                }
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    ControlError::PermissionDenied { pid, detail: format!("{}: {e}", path.display()) }
                }
                _ => ControlError::Io { context: format!("connecting to {}", path.display()), source: e },
            })
        }
    };
    let cred = peer_cred(&stream).map_err(|e| ControlError::Io { context: "SO_PEERCRED".into(), source: e })?;
    if cred.pid as u32 != pid {
        return Err(untrusted(format!("served by process {}, not {pid}", cred.pid)));
    }
    if cred.uid != owner {
        return Err(untrusted(format!("served by uid {}, not {owner}", cred.uid)));
    }
    let io_err = |context: &str, e: io::Error| ControlError::Io { context: context.to_owned(), source: e };
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| io_err("socket", e))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| io_err("socket", e))?;
    if let Err(e) = send_all(&stream, request.as_bytes()) {
        // A refusing process answers and closes before reading: its answer is still to be read.
        if !matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) {
            return Err(io_err("sending the request", e));
        }
    }
    let answer = match read_line(&stream) {
        Ok(a) => a,
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return Err(ControlError::Protocol { message: "connection closed without an answer".into() })
        }
        Err(e) => return Err(io_err("reading the answer", e)),
    };
    if let Some(rest) = answer.strip_prefix("OK ") {
        Ok(rest.to_owned())
    } else if let Some(message) = answer.strip_prefix("ERR ") {
        if message.starts_with("permission denied") {
            Err(ControlError::PermissionDenied { pid, detail: format!("the process refused: {message}") })
        } else {
            Err(ControlError::Remote { message: message.to_owned() })
        }
    } else {
        Err(ControlError::Protocol { message: answer })
    }
}

/// Asks the recording in process `pid` to write a complete `.jfr` of its repository to `out_path`
/// (relative paths are taken from this process's working directory). Returns the file's size.
pub fn request_dump(pid: u32, out_path: impl AsRef<Path>) -> Result<u64, ControlError> {
    let out = std::path::absolute(out_path.as_ref())
        .map_err(|e| ControlError::Io { context: format!("resolving {}", out_path.as_ref().display()), source: e })?;
    let text = out.to_str().ok_or_else(|| ControlError::Io {
        context: format!("{}", out.display()),
        source: io::Error::new(io::ErrorKind::InvalidInput, "the path is not UTF-8"),
    })?;
    if text.contains('\n') {
        return Err(ControlError::Io {
            context: text.to_owned(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "the path contains a newline"),
        });
    }
    let answer = exchange(pid, &format!("DUMP {text}\n"), DUMP_TIMEOUT)?;
    answer.trim().parse().map_err(|_| ControlError::Protocol { message: format!("OK {answer}") })
}

/// Asks the recording in process `pid` who it is: returns its pid and repository directory.
pub fn ping(pid: u32) -> Result<(u32, PathBuf), ControlError> {
    let answer = exchange(pid, "PING\n", IO_TIMEOUT)?;
    let (p, dir) = answer.split_once(' ').ok_or_else(|| ControlError::Protocol { message: answer.clone() })?;
    let p = p.parse().map_err(|_| ControlError::Protocol { message: answer.clone() })?;
    Ok((p, PathBuf::from(dir)))
}
