//! `librecorder_preload.so`: records an unmodified, dynamically linked program.
//!
//! ```text
//! LD_PRELOAD=/path/to/librecorder_preload.so RECORDER_OPTIONS=period=1ms,output=app.jfr ./app
//! ```
//! `recorder record -- CMD` does the same and more (exit status, summary, refusing programs the
//! library cannot enter). Options: see [`options`] and the README.
//!
//! # What runs when, and why
//! - **Constructor** (`.init_array`, before `main`, while the dynamic loader holds its lock):
//!   reads `RECORDER_OPTIONS` and, unless `follow-children=1`, removes the recorder from the
//!   environment the program's children will inherit ([`environ`]). Nothing else: no thread is
//!   spawned (a thread that needed the loader — lazy binding of a new symbol, `dlopen`, TLS of a
//!   module — would wait for the lock the constructor's caller holds), and no Rust runtime
//!   set-up is assumed (there is no Rust `main`; `std` is used as a library, as by any Rust code
//!   called from C, which is what it supports).
//! - **Entry of `main`** (the first safe point): the library interposes `__libc_start_main`,
//!   which every dynamically linked glibc program's `_start` calls once all constructors of the
//!   libraries and of the program itself have run, and hands it a wrapper of `main`. The wrapper
//!   starts the recording (threads, timers, the control socket), registers the main thread for
//!   exact stack bounds, registers an `atexit` handler, then calls the real `main`. The largest
//!   piece of that work is not done there: the DWARF unwind table of this library itself (its
//!   code keeps frame pointers; in a debug build its table takes ~65 ms of CPU, more than all the
//!   program's modules together) is built by the recorder's sampler thread once it runs
//!   (`RecorderBuilder::unwind_tables_in_background`). The program's own modules (executable,
//!   libc, the libraries it links) get theirs before `main`, so their stacks are whole from the
//!   first sample: deferring those too left a window in which code without frame pointers was
//!   walked with them (garbage callers, allocation stacks without their call sites). Symbols are
//!   never loaded before `main`: the flusher thread resolves them at its flushes. The rest is
//!   the clock's calibration (20 ms of waiting, no CPU), the repository, the sampler's buffers
//!   and the first segment. Threads that
//!   constructors created before that are found by the sampler's `/proc/self/task` scan (within
//!   about 100 ms), like threads made with a raw `clone`.
//! - **Exit**: returning from `main` or calling `exit()` runs the `atexit` handler, which writes
//!   `output=` if asked and stops the recording (the last chunk gets the final flag). `_exit()`,
//!   a fatal signal or SIGKILL run nothing of ours: the repository then holds everything
//!   published up to the last flush (every second), and `recorder record` or `recorder repair`
//!   closes its chunks.
//! - **fork without exec**: the child is "not recording" (the library's fork handling); its
//!   `exit()` runs the handler, which sees a pid that is not the recording's and does nothing.
//! - **exec of the recorded process** (same pid): followed, the recording continues in the same
//!   directory in the new image; no SIGPROF of ours survives into it ([`exec`]).
#![allow(unsafe_code)]

mod environ;
mod exec;
mod malloc;
pub mod options;

use libc::{c_char, c_int, c_void};
use options::Options;
use recorder::Recorder;
use std::ffi::CStr;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The options read by the constructor (`None` inside: the variable was absent or wrong, so the
/// library stays out of the way).
static OPTIONS: OnceLock<Option<Options>> = OnceLock::new();
/// The running recording. Held for the whole of a stop, so an `exit()` racing the `duration`
/// thread waits for the recording to be finished rather than exit under it.
static RECORDING: Mutex<Option<Recorder>> = Mutex::new(None);
/// The process whose recording `RECORDING` is (a forked child must not touch it).
static OWNER_PID: AtomicU32 = AtomicU32::new(0);
/// The recording runs (set after start, cleared at finish): `pthread_create` registers new threads.
static RECORDING_ACTIVE: AtomicBool = AtomicBool::new(false);
/// The program's real `main`, set by our `__libc_start_main` before it calls the real one.
static REAL_MAIN: AtomicUsize = AtomicUsize::new(0);

type MainFn = unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;
type StartMainFn =
    unsafe extern "C" fn(MainFn, c_int, *mut *mut c_char, *mut c_void, *mut c_void, *mut c_void, *mut c_void) -> c_int;

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

extern "C" fn constructor() {
    // A panic must not unwind into the loader.
    let _ = std::panic::catch_unwind(|| {
        let parsed = read_options();
        let ours = own_path();
        // What an exec of this process needs to be followed, and whether this image continues
        // the recording of the one that exec'd it (see `exec`).
        let options = exec::read_environment(parsed.clone(), ours.clone());
        if options.as_ref().is_some_and(|o| o.alloc.is_some() || o.alloc_live) {
            // Allocations reach the recorder through this library's `malloc` (see `malloc`).
            recorder::alloc::interpose::use_foreign_allocator();
        }
        if let Some(o) = &parsed {
            if !o.follow_children {
                // SAFETY: before `main`, on the process's only thread.
                unsafe { environ::remove_recorder(ours.as_deref()) };
            }
        }
        // Never inherited: it names this process's recording.
        // SAFETY: as above.
        unsafe { environ::remove_variable(environ::ENV_CONTINUE) };
        let _ = OPTIONS.set(options);
    });
}

fn read_options() -> Option<Options> {
    let text = std::env::var(options::ENV_OPTIONS).unwrap_or_default();
    match options::parse(&text) {
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("recorder-preload: {}: {e}; not recording", options::ENV_OPTIONS);
            None
        }
    }
}

/// This library's path as the loader opened it.
fn own_path() -> Option<String> {
    // SAFETY: zeroed is a valid `Dl_info`; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = constructor as *const () as *const c_void;
    // SAFETY: `addr` is a function of this library; `info` is a valid out pointer.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returns a NUL-terminated name owned by the loader.
    Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned())
}

/// Interposes glibc's `__libc_start_main` (the executable's `_start` calls it through the
/// dynamic loader, which finds a preloaded library's definition first) to start the recording
/// at the entry of `main`; see the module documentation.
///
/// # Safety
/// Called by `_start` with glibc's arguments, which are passed through unchanged.
#[no_mangle]
pub unsafe extern "C" fn __libc_start_main(
    main: MainFn,
    argc: c_int,
    argv: *mut *mut c_char,
    init: *mut c_void,
    fini: *mut c_void,
    rtld_fini: *mut c_void,
    stack_end: *mut c_void,
) -> c_int {
    // SAFETY: RTLD_NEXT finds the next definition after this library: glibc's.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__libc_start_main".as_ptr()) };
    if real.is_null() {
        // Nothing can start the program without it; say why rather than crash.
        let msg = b"recorder-preload: __libc_start_main not found after the preloaded library\n";
        // SAFETY: writing a static buffer to stderr; `_exit` never returns.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    // SAFETY: glibc's `__libc_start_main` has exactly this signature.
    let real: StartMainFn = unsafe { std::mem::transmute::<*mut c_void, StartMainFn>(real) };
    let recording = matches!(OPTIONS.get(), Some(Some(_)));
    let entry: MainFn = if recording {
        // Relaxed: read by `main_with_recorder` on this same thread.
        REAL_MAIN.store(main as usize, Ordering::Relaxed);
        main_with_recorder
    } else {
        main
    };
    // SAFETY: the caller's arguments, passed through; only `main` may be our wrapper, which has
    // the same signature.
    unsafe { real(entry, argc, argv, init, fini, rtld_fini, stack_end) }
}

unsafe extern "C" fn main_with_recorder(argc: c_int, argv: *mut *mut c_char, envp: *mut *mut c_char) -> c_int {
    let _ = std::panic::catch_unwind(start_recording);
    // Relaxed: stored by `__libc_start_main` on this thread.
    let main = REAL_MAIN.load(Ordering::Relaxed);
    // SAFETY: the program's own `main`, stored by `__libc_start_main`, with its arguments.
    unsafe {
        let main: MainFn = std::mem::transmute::<usize, MainFn>(main);
        main(argc, argv, envp)
    }
}

/// What the symbolizer may hold in a recorded program unless `symbol_memory=` says otherwise.
pub const DEFAULT_SYMBOL_MEMORY: usize = 16 << 20;

fn start_recording() {
    let Some(Some(options)) = OPTIONS.get() else { return };
    if let Some(dirs) = &options.debug_dirs {
        recorder::symbolize::set_debug_file_directories(dirs.iter().cloned());
    }
    let mut builder = Recorder::builder().name(format!("recorder record: {}", program_name()));
    if let Some(p) = options.period {
        builder = builder.sampling_period(p);
    }
    if let Some(dir) = &options.repository {
        builder = builder.repository(dir);
    }
    // The program's `main` waits for the start: this library's own unwind table (the largest)
    // is built by the recorder's sampler thread instead; see the module docs.
    builder = builder.unwind_tables_in_background(true);
    // A program that did not ask to be recorded gets a bounded symbolizer: its debug info could
    // cost more than the rest of the recorder together (`RecorderBuilder::symbol_memory`).
    let symbol_memory =
        options.symbol_memory.map_or(DEFAULT_SYMBOL_MEMORY, |b| usize::try_from(b).unwrap_or(usize::MAX));
    builder = builder.symbol_memory(symbol_memory);
    builder = builder.unwinder(match options.unwinder {
        options::UnwinderChoice::Auto => recorder::Unwinder::Auto,
        options::UnwinderChoice::FramePointer => recorder::Unwinder::FramePointer,
        options::UnwinderChoice::Dwarf => recorder::Unwinder::Dwarf,
    });
    if let Some(period) = options.wall {
        builder = builder.wall_clock_sampling(period);
    }
    if let Some(bytes) = options.alloc {
        builder = builder.allocation_sampling(bytes);
    }
    if options.alloc_live {
        builder = builder.allocation_live_set(true);
    }
    let rec = match exec::start(builder) {
        Ok(rec) => rec,
        Err(e) => {
            eprintln!("recorder-preload: recording could not start: {e}");
            report(options, &format!("failed {} {e}", std::process::id()));
            return;
        }
    };
    if (options.alloc.is_some() || options.alloc_live) && !malloc::intercepts_malloc() {
        recorder::alloc::interpose::report_allocator_not_interposed(&malloc::malloc_owner());
    }
    // Exact bounds for the main thread at once; the others are discovered.
    let _ = rec.register_current_thread();
    let pid = std::process::id();
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    report(options, &format!("started {pid} {ppid} {}", rec.repository_dir().display()));
    // Relaxed: read by `at_exit`, in this process only after this thread registered it below.
    OWNER_PID.store(pid, Ordering::Relaxed);
    *RECORDING.lock().unwrap_or_else(|e| e.into_inner()) = Some(rec);
    // Relaxed: a hint for `pthread_create` (see there).
    RECORDING_ACTIVE.store(true, Ordering::Relaxed);
    // SAFETY: `at_exit` is an `extern "C" fn()` that lives as long as the process.
    unsafe { libc::atexit(at_exit) };
    if let Some(d) = options.duration {
        let spawned = recorder::own_thread::spawn("recorder-duration", move || {
            std::thread::sleep(d);
            finish("duration");
        });
        if let Err(e) = spawned {
            eprintln!("recorder-preload: duration={d:?} cannot be applied (no thread: {e}); recording until exit");
        }
    }
}

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;
type PthreadCreateFn =
    unsafe extern "C" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, StartRoutine, *mut c_void) -> c_int;

/// glibc's `pthread_create`, looked up once.
static REAL_PTHREAD_CREATE: AtomicUsize = AtomicUsize::new(0);

/// Interposes `pthread_create` so that a new thread is registered with the sampler before its
/// first instruction of application code: exact stack bounds and whole stacks from its first
/// sample, instead of leaf-only samples until the sampler's `/proc/self/task` scan finds it
/// (within about 100 ms). Threads made before the recording started, or with a raw `clone`, are
/// still found by that scan. The new thread runs `recorder::thread_hooks::on_thread_start`, as
/// threads created through the library's own GOT interposition do.
///
/// # Safety
/// Called with `pthread_create`'s arguments, which are passed through.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let real = next_symbol(&REAL_PTHREAD_CREATE, c"pthread_create");
    if real == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: the C library's `pthread_create` has this signature.
    let real: PthreadCreateFn = unsafe { std::mem::transmute::<usize, PthreadCreateFn>(real) };
    // Relaxed: a hint; a thread started while the recording starts or stops is found by the scan.
    // The recorder's own threads are left as they are: not sampled, every signal blocked.
    if !RECORDING_ACTIVE.load(Ordering::Relaxed) || recorder::own_thread::spawning() {
        // SAFETY: the caller's arguments, passed through.
        return unsafe { real(thread, attr, start, arg) };
    }
    let boxed = Box::into_raw(Box::new((start, arg)));
    // SAFETY: the caller's arguments, with our trampoline taking ownership of `boxed`.
    let rc = unsafe { real(thread, attr, thread_start, boxed.cast()) };
    if rc != 0 {
        // SAFETY: the thread was not created, so the trampoline never took `boxed`.
        drop(unsafe { Box::from_raw(boxed) });
    }
    rc
}

extern "C" fn thread_start(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the box `pthread_create` made for this thread, taken once.
    let (start, arg) = *unsafe { Box::from_raw(p.cast::<(StartRoutine, *mut c_void)>()) };
    // Nothing before the program's routine is a cancellation point (see `on_thread_start`).
    recorder::thread_hooks::without_cancellation(register_starting_thread);
    start(arg)
}

/// The preload's part of a new thread's start, before the program's routine.
fn register_starting_thread() {
    // Programs block every signal in their worker threads so that process-wide signals go to
    // the main thread (xz and liblzma's threads do: without this their work is never sampled).
    // SIGPROF is the sampler's per-thread signal: let it in. A process-wide SIGPROF of the
    // program's own (`setitimer`) may then run its handler on a worker, chained by the sampler.
    // SAFETY: a valid signal set, built here; changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPROF);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    // The library's thread-start hook (the one its own `pthread_create` interposition runs:
    // idempotent, so a thread wrapped by both registers once). Should it not take the thread
    // (new-thread sampling off), register it here. Never blocks thread start: if a stop holds
    // the recording, the scan finds the thread.
    if !recorder::thread_hooks::on_thread_start() {
        if let Ok(slot) = RECORDING.try_lock() {
            if let Some(rec) = slot.as_ref() {
                let _ = rec.register_current_thread();
            }
        }
    }
}

type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// The C library's definition of `name` (the next one after this library), looked up once.
fn next_symbol(cache: &AtomicUsize, name: &CStr) -> usize {
    // Relaxed: a cached function address; a race only looks it up twice.
    let mut f = cache.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: RTLD_NEXT finds the C library's definition after this library.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        // Relaxed: as above.
        cache.store(f, Ordering::Relaxed);
    }
    f
}

static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);

/// Interposes `sigaction` so that a SIGPROF handler the program installs while it is recorded
/// does not replace the sampler's: it becomes the handler the sampler passes every SIGPROF that
/// is not its own to (a program's `setitimer(ITIMER_PROF)` profiler keeps working, sees none of
/// the sampler's signals, and the recording keeps its samples), and the query reports it as the
/// installed one. Every other call, every call while the sampler's handler is not installed, and
/// the sampler's own install and restore, go to the C library unchanged.
///
/// # Safety
/// `sigaction`'s contract: `act` and `old` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    // Not gated on RECORDING_ACTIVE: that is cleared before a stop restores the program's
    // action, and a query in between must still report the program's (the sampler checks its
    // handler is installed, so outside a recording this goes to the C library below).
    if sig == libc::SIGPROF && !recorder::sampler::changing_own_action() {
        // SAFETY: the caller passes a valid action or null.
        let adopted = adopt(unsafe { act.as_ref() });
        if let Some(previous) = adopted {
            if !old.is_null() {
                // SAFETY: the caller passes a valid out pointer or null.
                unsafe { *old = previous };
            }
            return 0;
        }
    }
    let real = next_symbol(&REAL_SIGACTION, c"sigaction");
    if real == 0 {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // SAFETY: the C library's `sigaction`, with the caller's arguments.
    unsafe { std::mem::transmute::<usize, SigactionFn>(real)(sig, act, old) }
}

/// `adopt_application_action` once per thread at a time: it queries the installed action with
/// `sigaction`, which is this library's, which must then go to the C library.
fn adopt(act: Option<&libc::sigaction>) -> Option<libc::sigaction> {
    thread_local! {
        static ADOPTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if ADOPTING.try_with(|a| a.replace(true)).unwrap_or(true) {
        return None;
    }
    let adopted = recorder::sampler::adopt_application_action(act);
    let _ = ADOPTING.try_with(|a| a.set(false));
    adopted
}

/// Installs `handler` for SIGPROF as `signal`-like functions do (an action with `flags` and
/// `sig` itself blocked or not) by making it the handler the sampler chains to, if a recording
/// runs; `None`: the caller goes to the C library.
fn adopt_like_signal(
    sig: c_int,
    handler: libc::sighandler_t,
    flags: c_int,
    block_sig: bool,
) -> Option<libc::sighandler_t> {
    // As in `sigaction`.
    if sig != libc::SIGPROF || recorder::sampler::changing_own_action() {
        return None;
    }
    // SAFETY: zeroed is a valid `sigaction`.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    // SAFETY: `act.sa_mask` is a valid sigset.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        if block_sig {
            libc::sigaddset(&mut act.sa_mask, sig);
        }
    }
    adopt(Some(&act)).map(|previous| previous.sa_sigaction)
}

/// The C library's `name` (a `signal`-like function), called with the caller's arguments.
fn next_signal_like(cache: &AtomicUsize, name: &CStr, sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    let real = next_symbol(cache, name);
    if real == 0 {
        return libc::SIG_ERR;
    }
    // SAFETY: `signal`, `bsd_signal` and `sysv_signal` of the C library have this signature.
    unsafe { std::mem::transmute::<usize, SignalFn>(real)(sig, handler) }
}

/// Interposes `signal` for the same reason as [`sigaction`] (the C library's `signal` does not
/// go through the exported `sigaction`). Its semantics are glibc's: `SA_RESTART`, the signal
/// blocked while its handler runs.
///
/// # Safety
/// `signal`'s contract.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    adopt_like_signal(sig, handler, libc::SA_RESTART, true)
        .unwrap_or_else(|| next_signal_like(&REAL_SIGNAL, c"signal", sig, handler))
}

static REAL_BSD_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SYSV_SIGNAL: AtomicUsize = AtomicUsize::new(0);

/// Interposes `bsd_signal` (POSIX's old name for BSD-semantics `signal`), as [`signal`]: same
/// semantics.
///
/// # Safety
/// `bsd_signal`'s contract.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    adopt_like_signal(sig, handler, libc::SA_RESTART, true)
        .unwrap_or_else(|| next_signal_like(&REAL_BSD_SIGNAL, c"bsd_signal", sig, handler))
}

/// Interposes `sysv_signal` (System V semantics: `SA_RESETHAND | SA_NODEFER`, no restart), as
/// [`signal`]. The flags are kept with the adopted action (a query reports them); the sampler
/// calls the handler for each of the program's own SIGPROFs without resetting it to `SIG_DFL`
/// first (a program that re-installs its handler in the handler, as System V programs do, sees
/// no difference; one that does not is not killed by its next SIGPROF).
///
/// # Safety
/// `sysv_signal`'s contract.
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    adopt_like_signal(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER, false)
        .unwrap_or_else(|| next_signal_like(&REAL_SYSV_SIGNAL, c"sysv_signal", sig, handler))
}

static REAL_SYSV_SIGNAL_INTERNAL: AtomicUsize = AtomicUsize::new(0);

/// `__sysv_signal`: what `<signal.h>` binds `signal` to in strict standard modes (`-std=c11`
/// without `_DEFAULT_SOURCE`); as [`sysv_signal`].
///
/// # Safety
/// `sysv_signal`'s contract.
#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    adopt_like_signal(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER, false)
        .unwrap_or_else(|| next_signal_like(&REAL_SYSV_SIGNAL_INTERNAL, c"__sysv_signal", sig, handler))
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| finish("exit"));
}

/// Writes `output=` if asked and stops the recording with the final flag; once (the `duration`
/// thread and `exit` may race: the second finds nothing to do).
fn finish(why: &str) {
    // Relaxed: a forked child sees the parent's pid here (fork copies memory) and returns; the
    // parent wrote it before registering this handler.
    if OWNER_PID.load(Ordering::Relaxed) != std::process::id() {
        return;
    }
    let Some(Some(options)) = OPTIONS.get() else { return };
    let mut slot = RECORDING.lock().unwrap_or_else(|e| e.into_inner());
    let Some(rec) = slot.take() else { return };
    // Relaxed: a hint for `pthread_create` (see there).
    RECORDING_ACTIVE.store(false, Ordering::Relaxed);
    let dir = rec.repository_dir().to_owned();
    let pid = std::process::id();
    match rec.stop_with_report() {
        Ok(r) => {
            if let Some(out) = &options.output {
                if let Err(e) = write_output(&dir, out) {
                    eprintln!("recorder-preload: writing {}: {e}", out.display());
                }
            }
            // The CPU sampler's own counts (the recording's samples written include allocation
            // samples).
            let (taken, written, lost) = r.sampler.as_ref().map_or((0, 0, 0), |s| (s.taken, s.written, s.lost));
            report(options, &format!("finished {pid} {why} {taken} {written} {lost}"));
            if let Some(a) = r.allocation {
                report(options, &format!("allocation {pid} {} {} {} {}", a.taken, a.written, a.lost, a.failed));
            }
        }
        Err(e) => {
            eprintln!("recorder-preload: stopping the recording: {e}");
            report(options, &format!("failed {pid} stopping the recording: {e}"));
        }
    }
    drop(slot);
}

/// `output=`: the finished recording's chunks in order, as one file (a JFR file is its chunks one
/// after the other), written under a temporary name and renamed.
fn write_output(dir: &std::path::Path, out: &std::path::Path) -> std::io::Result<()> {
    recorder::repository::layout::write_recording_file(dir, out).map(drop)
}

/// Appends one line to the `report=` file (one `write` with O_APPEND: lines of processes that
/// record at the same time do not mix).
fn report(options: &Options, line: &str) {
    let Some(path) = &options.report else { return };
    let file = std::fs::OpenOptions::new().append(true).create(true).open(path);
    if let Ok(mut f) = file {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// The program's name, from `/proc/self/comm`.
fn program_name() -> String {
    std::fs::read_to_string("/proc/self/comm").map(|s| s.trim().to_owned()).unwrap_or_default()
}
