//! `exec` in the recorded process: the recording follows the process into the program it execs,
//! and the new program never inherits a SIGPROF of ours.
//!
//! # Why
//! - A wrapper (`sh -c 'exec prog'`, `env`, `nice`, a `#!/bin/sh` shim as pyenv, asdf and nvm
//!   install) replaces itself with the program the user meant: recording only the wrapper records
//!   nothing of interest. So an exec of the recorded process itself (same pid) is followed
//!   whatever `follow-children` says: the recording stops (its last chunk without the final
//!   flag), the new image gets the library and its options back in its environment (the
//!   constructor removed them from `environ`), plus [`ENV_CONTINUE`] naming the recording
//!   directory, and its recording continues there: one directory, one `-o`, one summary. Children
//!   (fork + exec, `posix_spawn`, `system`) still follow the `follow-children` rule: their exec
//!   runs in another pid and passes through untouched.
//! - A SIGPROF of the sampler that is pending on a thread blocking it (every program that blocks
//!   all signals around its work) would survive `execve`, and the new image has SIGPROF's
//!   default action, terminate, until a recorder installs its handler again (never, if it does
//!   not follow). Before the real exec the recording is stopped (every timer and perf event
//!   disarmed, the sampler's threads joined: no new SIGPROF of ours can be raised), then SIGPROF
//!   is set to `SIG_IGN`, which discards every pending instance for the process and all its
//!   threads (POSIX), and the program's own disposition is put back.
//! - If the exec fails, the disposition is restored, the recording restarts in the same
//!   directory and the caller gets the exec's return value and `errno` unchanged.
//!
//! Entry points: `execve`, `execv`, `execvp`, `execvpe`, `execl`, `execlp`, `execle`, `fexecve`
//! and `execveat`. glibc implements the `v`/`l` variants with its internal `__execve`, which no
//! interposer sees, so each is replaced here. The `l` variants are C-variadic, which stable Rust
//! cannot define: a naked trampoline (x86_64 only) spills the argument registers and hands them
//! to [`exec_list`]; on other targets they pass to the C library untouched (the new program is
//! then neither followed nor protected).
//!
//! What cannot be followed: a raw `syscall(SYS_execve, ...)` (Go's runtime execs that way) is not
//! seen at all; the new image may inherit a pending SIGPROF of ours and is not followed. An exec
//! of a program the loader will not preload into (static, setuid: [`loads_library`]) is prepared
//! the same way (no pending SIGPROF), but it gets none of our variables: the recording ends at the
//! exec (`recorder record` says so). Should an image the library cannot enter inherit them all
//! the same, [`ENV_CONTINUE`] names another pid for its children, which then do not record unless
//! children are followed. An exec called from a signal handler that interrupted the program
//! inside `malloc` may wait for the allocator's lock while the recording stops.
//!
//! An exec that is bound to fail (no such file, not executable) is passed through without
//! stopping anything: shells and Python's `os.execvp` try every `PATH` entry in turn.

use crate::environ::ENV_CONTINUE;
use crate::{OPTIONS, OWNER_PID, RECORDING, RECORDING_ACTIVE};
use libc::{c_char, c_int};
use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

extern "C" {
    static mut environ: *mut *mut c_char;
}

/// What the constructor read, to give a followed image: the library's path and the options.
struct Inherited {
    library: Option<String>,
    options: String,
}

static INHERITED: OnceLock<Inherited> = OnceLock::new();
/// The recording directory this image's recording continues: from [`ENV_CONTINUE`], or the one
/// an exec that failed stopped.
static CONTINUE_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);
/// One exec preparation at a time (two threads exec'ing at once: the second waits for the
/// first to succeed, which ends it, or fail).
static EXEC_SERIAL: Mutex<()> = Mutex::new(());

/// Reads, in the constructor (before `environ` is edited), what a followed exec needs, and
/// whether this image continues a recording. Returns the options this image records with:
/// `None` if the process inherited [`ENV_CONTINUE`] from another pid (the image it was meant
/// for could not take it: a static or setuid program) and children are not followed.
pub fn read_environment(
    options: Option<crate::options::Options>,
    library: Option<String>,
) -> Option<crate::options::Options> {
    let text = std::env::var(crate::options::ENV_OPTIONS).unwrap_or_default();
    let _ = INHERITED.set(Inherited { library, options: text });
    let options = options?;
    let Some(value) = std::env::var_os(ENV_CONTINUE) else { return Some(options) };
    let value = value.as_bytes();
    let split = value.iter().position(|b| *b == b':').unwrap_or(value.len());
    let pid = std::str::from_utf8(&value[..split]).ok().and_then(|p| p.parse::<u32>().ok());
    if pid == Some(std::process::id()) && split < value.len() {
        let dir = PathBuf::from(OsStr::from_bytes(&value[split + 1..]));
        *CONTINUE_DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir);
        return Some(options);
    }
    options.follow_children.then_some(options)
}

/// Starts the recording `builder` describes, in the directory it continues if there is one (a
/// fresh one if that fails, with a warning).
pub fn start(builder: recorder::RecorderBuilder) -> Result<recorder::Recorder, recorder::Error> {
    let dir = CONTINUE_DIR.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(dir) = dir else { return builder.start() };
    match builder.clone().continue_recording_in(&dir).start() {
        Ok(rec) => Ok(rec),
        Err(e) => {
            eprintln!(
                "recorder-preload: continuing the recording in {}: {e}; recording into a new directory",
                dir.display()
            );
            builder.start()
        }
    }
}

/// Which file an exec runs, for the check that it can succeed.
#[derive(Clone, Copy)]
enum Target {
    /// A path, relative to the working directory.
    Path(*const c_char),
    /// A file name looked for in `PATH` unless it holds a slash (`execvp`).
    Search(*const c_char),
    /// A descriptor or a directory descriptor and path (`fexecve`, `execveat`): not checked.
    Other,
}

impl Target {
    /// The file the exec runs: `None` if the exec is certain to fail (no such file, not an
    /// executable regular file), `Some(None)` for a descriptor (not looked at).
    fn file(self) -> Option<Option<Vec<u8>>> {
        match self {
            Target::Path(p) => {
                let path = (!p.is_null()).then(|| unsafe_cstr(p).to_bytes().to_vec())?;
                executable(&path).then_some(Some(path))
            }
            Target::Search(f) => {
                let file = (!f.is_null()).then(|| unsafe_cstr(f).to_bytes())?;
                if file.is_empty() {
                    return None;
                }
                if file.contains(&b'/') {
                    return executable(file).then(|| Some(file.to_vec()));
                }
                // glibc's execvp searches confstr(_CS_PATH) when PATH is unset.
                let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
                path.as_bytes().split(|b| *b == b':').find_map(|dir| {
                    let dir = if dir.is_empty() { b".".as_slice() } else { dir };
                    let candidate = [dir, b"/", file].concat();
                    executable(&candidate).then_some(Some(candidate))
                })
            }
            Target::Other => Some(None),
        }
    }

    fn describe(self) -> String {
        match self {
            // One report line: a newline in the name must not start another.
            Target::Path(p) | Target::Search(p) if !p.is_null() => unsafe_cstr(p).to_string_lossy().replace('\n', "?"),
            _ => "(a descriptor)".into(),
        }
    }
}

fn unsafe_cstr<'a>(p: *const c_char) -> &'a CStr {
    // SAFETY: the exec functions' contract: a non-null path is a NUL-terminated string that
    // outlives the call.
    unsafe { CStr::from_ptr(p) }
}

/// Whether the dynamic loader will preload the library into the program `path` runs: not for
/// a static executable (no `PT_INTERP`) nor a setuid/setgid one (secure mode); a `#!` script is
/// judged by its interpreter. What cannot be read or told apart is taken as yes.
fn loads_library(path: &[u8], depth: u32) -> bool {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let Ok(file) = std::fs::File::open(OsStr::from_bytes(path)) else { return true };
    let Ok(meta) = file.metadata() else { return true };
    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if (meta.mode() & libc::S_ISUID != 0 && meta.uid() != euid)
        || (meta.mode() & libc::S_ISGID != 0 && meta.gid() != egid)
    {
        return false;
    }
    let mut head = [0u8; 128];
    let Ok(n) = file.read_at(&mut head, 0) else { return true };
    let head = &head[..n];
    if let Some(line) = head.strip_prefix(b"#!") {
        let interpreter = line.split(|b| *b == b'\n').next().unwrap_or_default();
        let interpreter = interpreter.split(|b| *b == b' ' || *b == b'\t').find(|w| !w.is_empty());
        return depth > 0 || interpreter.is_none_or(|i| loads_library(i, depth + 1));
    }
    // A 64-bit little-endian ELF file: is there a PT_INTERP among its program headers?
    if n < 64 || !head.starts_with(b"\x7fELF\x02\x01") {
        return true;
    }
    let word = |at: usize, len: usize| head[at..at + len].iter().rev().fold(0u64, |v, b| v << 8 | u64::from(*b));
    let (offset, size, count) = (word(32, 8), word(54, 2), word(56, 2));
    (0..count).any(|i| {
        let mut kind = [0u8; 4];
        file.read_at(&mut kind, offset + i * size).map_or(true, |_| u32::from_le_bytes(kind) == libc::PT_INTERP)
    })
}

/// `path` is a regular file the process may execute (effective ids, as exec checks them).
fn executable(path: &[u8]) -> bool {
    let Ok(c) = CString::new(path) else { return false };
    // SAFETY: zeroed is a valid `stat`; `c` is NUL-terminated; both pointers are valid.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::stat(c.as_ptr(), &mut st) == 0
            && st.st_mode & libc::S_IFMT == libc::S_IFREG
            && libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::X_OK, libc::AT_EACCESS) == 0
    }
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `exec` (the C library's exec function, given the environment to pass) prepared as the
/// module documentation says, if this process is the recorded one and the exec may succeed;
/// otherwise exactly as called.
fn exec_with(target: Target, envp: *const *const c_char, exec: impl FnOnce(*const *const c_char) -> c_int) -> c_int {
    // Relaxed: written once by the recording's start on this process's thread; a vfork or fork
    // child sees its parent's pid here and is not the recorded process.
    let owner = OWNER_PID.load(Ordering::Relaxed);
    // SAFETY: getpid has no preconditions (not cached by glibc: right in a vfork child).
    if owner == 0 || owner != unsafe { libc::getpid() } as u32 {
        return exec(envp);
    }
    let Some(file) = target.file() else { return exec(envp) };
    let _serial = EXEC_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let followed = std::panic::catch_unwind(|| stop_recording(target)).ok().flatten();
    // A program the library cannot enter gets no variable of ours (its children would inherit
    // them): its recording ends here.
    let enters = file.is_none_or(|f| loads_library(&f, 0));
    let environment = followed
        .as_ref()
        .filter(|_| enters)
        .and_then(|dir| std::panic::catch_unwind(|| Environment::new(envp, dir)).ok().flatten());
    let envp_used = environment.as_ref().map_or(envp, |e| e.pointers.as_ptr());
    let previous = discard_pending_sigprof();
    let rc = exec(envp_used);
    let failure = errno();
    if let Some(previous) = previous {
        real_sigaction(&previous);
    }
    if let Some(dir) = followed {
        let _ = std::panic::catch_unwind(|| {
            if let Some(Some(options)) = OPTIONS.get() {
                crate::report(options, &format!("exec-failed {} {failure}", std::process::id()));
            }
            *CONTINUE_DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir);
            crate::start_recording();
        });
    }
    set_errno(failure);
    rc
}

/// Stops the running recording for an exec of `target` (its last chunk not final, `output=`
/// written, an `exec` line in the report) and returns its directory; `None` if none runs.
fn stop_recording(target: Target) -> Option<PathBuf> {
    let Some(Some(options)) = OPTIONS.get() else { return None };
    let mut slot = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    let rec = slot.take()?;
    // Relaxed: a hint for `pthread_create` and `sigaction` (see there).
    RECORDING_ACTIVE.store(false, Ordering::Relaxed);
    let dir = rec.repository_dir().to_owned();
    let pid = std::process::id();
    let (taken, written, lost) = match rec.stop_for_exec() {
        Ok(r) => r.sampler.as_ref().map_or((0, 0, 0), |s| (s.taken, s.written, s.lost)),
        Err(e) => {
            eprintln!("recorder-preload: stopping the recording before exec: {e}");
            (0, 0, 0)
        }
    };
    if let Some(out) = &options.output {
        // The exec'd image rewrites it at its end, with its own chunks too.
        if let Err(e) = crate::write_output(&dir, out) {
            eprintln!("recorder-preload: writing {}: {e}", out.display());
        }
    }
    crate::report(options, &format!("exec {pid} {taken} {written} {lost} {}", target.describe()));
    drop(slot);
    Some(dir)
}

/// The environment a followed exec passes: the caller's, without any variable of ours, plus
/// `LD_PRELOAD` with this library last, the options, and [`ENV_CONTINUE`].
struct Environment {
    /// Owns the strings `pointers` points into.
    _strings: Vec<CString>,
    pointers: Vec<*const c_char>,
}

impl Environment {
    fn new(envp: *const *const c_char, dir: &Path) -> Option<Environment> {
        let inherited = INHERITED.get()?;
        let library = inherited.library.as_deref()?;
        let mut pointers = Vec::new();
        let mut preload: Option<String> = None;
        let mut i = 0;
        while !envp.is_null() {
            // SAFETY: `envp` is a null-terminated array of strings (exec's contract).
            let entry = unsafe { *envp.add(i) };
            if entry.is_null() {
                break;
            }
            i += 1;
            let bytes = unsafe_cstr(entry).to_bytes();
            let name = bytes.split(|b| *b == b'=').next().unwrap_or(bytes);
            match name {
                b"LD_PRELOAD" => {
                    let value = String::from_utf8_lossy(bytes.get(name.len() + 1..).unwrap_or_default());
                    preload = crate::environ::preload_without_us(&value, Some(library));
                }
                b"RECORDER_OPTIONS" | b"RECORDER_PRELOAD" | b"RECORDER_CONTINUE" => {}
                _ => pointers.push(entry),
            }
        }
        let mut dir_value = format!("{ENV_CONTINUE}={}:", std::process::id()).into_bytes();
        dir_value.extend_from_slice(dir.as_os_str().as_bytes());
        let strings = vec![
            CString::new(match preload {
                Some(others) => format!("LD_PRELOAD={others} {library}"),
                None => format!("LD_PRELOAD={library}"),
            })
            .ok()?,
            CString::new(format!("{}={}", crate::options::ENV_OPTIONS, inherited.options)).ok()?,
            CString::new(dir_value).ok()?,
        ];
        pointers.extend(strings.iter().map(|s| s.as_ptr()));
        pointers.push(std::ptr::null());
        Some(Environment { _strings: strings, pointers })
    }
}

static REAL_SIGACTION_FOR_EXEC: AtomicUsize = AtomicUsize::new(0);

type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

/// The C library's `sigaction` for SIGPROF: installs `act` (non-null) or queries (`None`).
fn real_sigaction_call(act: Option<&libc::sigaction>) -> Option<libc::sigaction> {
    let real = crate::next_symbol(&REAL_SIGACTION_FOR_EXEC, c"sigaction");
    if real == 0 {
        return None;
    }
    // SAFETY: the C library's `sigaction` has this signature.
    let real: SigactionFn = unsafe { std::mem::transmute::<usize, SigactionFn>(real) };
    // SAFETY: zeroed is a valid `sigaction`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `act` is a valid action or null; `old` a valid out pointer.
    let rc = unsafe { real(libc::SIGPROF, act.map_or(std::ptr::null(), |a| a as *const _), &mut old) };
    (rc == 0).then_some(old)
}

fn real_sigaction(act: &libc::sigaction) {
    let _ = real_sigaction_call(Some(act));
}

/// Discards every pending SIGPROF (setting `SIG_IGN` does, POSIX), then installs the program's
/// own action (ours stands in for it while the process records, and stays after a recording
/// whose program had none). Returns the action that was installed, to restore if the exec fails.
fn discard_pending_sigprof() -> Option<libc::sigaction> {
    let current = real_sigaction_call(None)?;
    let program = recorder::sampler::adopt_application_action(None).unwrap_or(current);
    // SAFETY: zeroed is a valid `sigaction` (empty mask, no flags).
    let mut ignore: libc::sigaction = unsafe { std::mem::zeroed() };
    ignore.sa_sigaction = libc::SIG_IGN;
    real_sigaction(&ignore);
    real_sigaction(&program);
    Some(current)
}

// ---- The exec functions ----

static REAL_EXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVPE: AtomicUsize = AtomicUsize::new(0);
static REAL_FEXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVEAT: AtomicUsize = AtomicUsize::new(0);

type ExecveFn = unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type FexecveFn = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
type ExecveatFn =
    unsafe extern "C" fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int;

/// The C library's `name`, or ENOSYS if it has none.
fn real(cache: &AtomicUsize, name: &CStr) -> Option<usize> {
    match crate::next_symbol(cache, name) {
        0 => {
            set_errno(libc::ENOSYS);
            None
        }
        f => Some(f),
    }
}

fn current_environ() -> *const *const c_char {
    // SAFETY: reading the C library's `environ` pointer, as its own `execv` does.
    unsafe { environ as *const *const c_char }
}

/// # Safety
/// `execve`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    exec_with(Target::Path(path), envp, |envp| {
        let Some(f) = real(&REAL_EXECVE, c"execve") else { return -1 };
        // SAFETY: the C library's `execve`, with the caller's arguments (and environment).
        unsafe { std::mem::transmute::<usize, ExecveFn>(f)(path, argv, envp) }
    })
}

/// # Safety
/// `execv`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as the C library's `execv` does.
    unsafe { execve(path, argv, current_environ()) }
}

/// # Safety
/// `execvpe`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    exec_with(Target::Search(file), envp, |envp| {
        let Some(f) = real(&REAL_EXECVPE, c"execvpe") else { return -1 };
        // SAFETY: the C library's `execvpe` (its own PATH search and ENOEXEC fallback), with
        // the caller's arguments (and environment).
        unsafe { std::mem::transmute::<usize, ExecveFn>(f)(file, argv, envp) }
    })
}

/// # Safety
/// `execvp`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: as the C library's `execvp` does.
    unsafe { execvpe(file, argv, current_environ()) }
}

/// # Safety
/// `fexecve`'s contract.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    exec_with(Target::Other, envp, |envp| {
        let Some(f) = real(&REAL_FEXECVE, c"fexecve") else { return -1 };
        // SAFETY: the C library's `fexecve`, with the caller's arguments (and environment).
        unsafe { std::mem::transmute::<usize, FexecveFn>(f)(fd, argv, envp) }
    })
}

/// # Safety
/// `execveat`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    exec_with(Target::Other, envp, |envp| {
        let Some(f) = real(&REAL_EXECVEAT, c"execveat") else { return -1 };
        // SAFETY: the C library's `execveat`, with the caller's arguments (and environment).
        unsafe { std::mem::transmute::<usize, ExecveatFn>(f)(dirfd, path, argv, envp, flags) }
    })
}

/// Which `l` function a trampoline stands for.
#[cfg(target_arch = "x86_64")]
const LIST_EXECL: u32 = 0;
#[cfg(target_arch = "x86_64")]
const LIST_EXECLP: u32 = 1;
#[cfg(target_arch = "x86_64")]
const LIST_EXECLE: u32 = 2;

/// Arguments kept on the stack (more go to the heap): a vfork child, which shares its parent's
/// heap, execs without allocating.
#[cfg(target_arch = "x86_64")]
const LIST_ON_STACK: usize = 256;

/// The body of `execl`, `execlp` and `execle`: `regs` holds the 6 argument registers as the
/// caller loaded them, `stack` points at the caller's stack arguments (x86_64 System V: the
/// 7th argument and on). The list ends at the first null after the path; `execle`'s environment
/// follows it.
///
/// # Safety
/// Called by the trampolines below only, with a caller that followed the function's contract.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn exec_list(regs: *const usize, stack: *const usize, kind: u32) -> c_int {
    // SAFETY: `i` < 6 reads the spilled registers; later ones the caller's stack arguments, of
    // which there are as many as the list and its terminator (and `execle`'s environment) hold.
    let arg = |i: usize| unsafe {
        if i < 6 {
            *regs.add(i)
        } else {
            *stack.add(i - 6)
        }
    } as *const c_char;
    let path = arg(0);
    let mut on_stack = [std::ptr::null::<c_char>(); LIST_ON_STACK];
    let mut on_heap = Vec::new();
    let mut n = 0;
    loop {
        let a = arg(n + 1);
        if n < LIST_ON_STACK {
            on_stack[n] = a;
        } else {
            if on_heap.is_empty() {
                on_heap.extend_from_slice(&on_stack);
            }
            on_heap.push(a);
        }
        n += 1;
        if a.is_null() {
            break;
        }
    }
    let argv = if on_heap.is_empty() { on_stack.as_ptr() } else { on_heap.as_ptr() };
    // SAFETY: a null-terminated list built from the caller's arguments; the environment as the
    // C library's functions take it.
    unsafe {
        match kind {
            LIST_EXECLP => execvp(path, argv),
            LIST_EXECLE => execve(path, argv, arg(n + 1) as *const *const c_char),
            _ => execv(path, argv),
        }
    }
}

/// A trampoline for a C-variadic `l` function: spills the 6 argument registers below its frame
/// and calls `exec_list(spilled, caller's stack arguments, kind)`, keeping the stack 16-byte
/// aligned at the call.
#[cfg(target_arch = "x86_64")]
macro_rules! list_trampoline {
    ($name:ident, $kind:expr) => {
        /// # Safety
        /// The C function's contract (a null-terminated list of strings after the path).
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() -> c_int {
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "sub rsp, 48",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "mov rdi, rsp",
                "lea rsi, [rbp + 16]",
                "mov edx, {kind}",
                "call {body}",
                "leave",
                "ret",
                kind = const $kind,
                body = sym exec_list,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
list_trampoline!(execl, LIST_EXECL);
#[cfg(target_arch = "x86_64")]
list_trampoline!(execlp, LIST_EXECLP);
#[cfg(target_arch = "x86_64")]
list_trampoline!(execle, LIST_EXECLE);
