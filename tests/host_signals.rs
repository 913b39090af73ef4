//! The embedded library never harms the program's signals and threads (no harness: each case runs
//! in a child process of this binary, on its real main thread, so that the only threads are the
//! case's own and the recorder's; a case that hangs is killed after `CASE_LIMIT` and fails):
//! - a process-directed signal the program blocks in its own threads waits for them: its handler
//!   never runs on one of the recorder's threads (they block every asynchronous signal);
//! - a SIGALRM handler that `siglongjmp`s out of whatever it interrupted (the sampler's handler
//!   included) leaves nothing behind: the thread exits, the recording stops;
//! - threads cancelled as they start, while every sampler slot is taken by threads that just
//!   exited, end cancelled in their own code (the start hook is no cancellation point and never
//!   sleeps).

use recorder::Recorder;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that makes this binary run one case.
const CASE_VAR: &str = "RECORDER_HOST_SIGNALS_CASE";
/// Far more than any case takes on a loaded machine: only a hang reaches it.
const CASE_LIMIT: Duration = Duration::from_secs(180);

type Case = (&'static str, fn(&Path));

const CASES: [Case; 3] = [
    ("process_directed_signal_waits_for_the_programs_threads", process_directed_signal),
    ("siglongjmp_out_of_a_nested_handler_leaves_nothing_behind", siglongjmp_timeouts),
    ("threads_cancelled_at_their_start_with_every_slot_taken", cancelled_at_start),
];

fn main() {
    if let Ok(name) = std::env::var(CASE_VAR) {
        let dir = PathBuf::from(std::env::var("RECORDER_HOST_SIGNALS_DIR").expect("the case's directory"));
        let (_, case) = CASES.iter().find(|c| c.0 == name).expect("a known case");
        case(&dir);
        println!("case {name} passed");
        return;
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("host_signals");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let fixture = build_fixture(&scratch);
    let mut failed = Vec::new();
    for (name, _) in CASES {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let dir = scratch.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        match run_case(name, &dir, &fixture) {
            Ok(()) => println!("test {name} ... ok"),
            Err(why) => {
                println!("test {name} ... FAILED\n{why}");
                failed.push(name);
            }
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

/// Runs one case in a child process; kills it if it outlives `CASE_LIMIT`.
fn run_case(name: &str, dir: &Path, fixture: &Path) -> Result<(), String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CASE_VAR, name)
        .env("RECORDER_HOST_SIGNALS_DIR", dir)
        .env("RECORDER_HOST_SIGNALS_FIXTURE", fixture)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > CASE_LIMIT {
            child.kill().unwrap();
            child.wait().unwrap();
            return Err(format!("hung: still running after {CASE_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    if status.success() && out.contains(&format!("case {name} passed")) {
        Ok(())
    } else {
        Err(format!("{status}\n{out}"))
    }
}

fn build_fixture(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/host_signals/hostile.c");
    let lib = dir.join("libhostile.so");
    let status = Command::new("cc")
        .args(["-O1", "-shared", "-fPIC", "-pthread", "-o"])
        .arg(&lib)
        .arg(&src)
        .arg("-lrt")
        .status()
        .expect("a C compiler (cc) builds tests/fixtures/host_signals/hostile.c");
    assert!(status.success(), "cc failed on {}", src.display());
    lib
}

/// A function of the fixture, `int f(int)`. Loaded before the recording starts, so its
/// `pthread_create` goes through the library's thread-start hook.
fn fixture_function(name: &std::ffi::CStr) -> unsafe extern "C" fn(libc::c_int) -> libc::c_int {
    let path = std::env::var("RECORDER_HOST_SIGNALS_FIXTURE").unwrap();
    let path = std::ffi::CString::new(path).unwrap();
    // SAFETY: a NUL-terminated path; the library is never unloaded.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null(), "dlopen {path:?}");
    // SAFETY: as above.
    let f = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!f.is_null(), "{name:?} in the fixture");
    // SAFETY: the fixture's functions take and return an int.
    unsafe { std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(libc::c_int) -> libc::c_int>(f) }
}

fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The names of this process's threads, by tid.
fn thread_names() -> Vec<(u32, String)> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let tid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
            Some((tid, comm.trim().to_owned()))
        })
        .collect()
}

fn set_mask(how: libc::c_int, sig: libc::c_int) {
    // SAFETY: a set built here; changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Where each SIGUSR1 handler ran (tids, in order).
static HANDLED_ON: [AtomicU32; 64] = [const { AtomicU32::new(0) }; 64];
static HANDLED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_usr1(_sig: libc::c_int) {
    let n = HANDLED.load(Ordering::Relaxed);
    if let Some(cell) = HANDLED_ON.get(n) {
        cell.store(gettid(), Ordering::Relaxed);
    }
    HANDLED.store(n + 1, Ordering::Release);
}

/// The program blocks SIGUSR1 in its only thread, sends it to the process, and unblocks it a
/// little later: the signal must wait for it. Before, the kernel gave it to one of the
/// recorder's threads, which blocked nothing, and the program's handler ran there.
fn process_directed_signal(dir: &Path) {
    let rec = Recorder::builder()
        .repository(dir)
        .sampling_period(Duration::from_millis(1))
        .wall_clock_sampling(Duration::from_millis(1))
        .start()
        .unwrap();
    // SAFETY: zeroed is a valid sigaction; `on_usr1` has the plain handler signature.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    // A thread names itself once it runs: wait for the flusher's name.
    let deadline = Instant::now() + Duration::from_secs(30);
    let ours = loop {
        let ours: Vec<(u32, String)> = thread_names().into_iter().filter(|(_, n)| n.starts_with("recorder-")).collect();
        if ours.iter().any(|(_, n)| n == "recorder-flush") {
            break ours;
        }
        assert!(Instant::now() < deadline, "the recorder's threads run: {ours:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    for (tid, name) in &ours {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        let blocked = status.lines().find_map(|l| l.strip_prefix("SigBlk:")).unwrap().trim();
        let blocked = u64::from_str_radix(blocked, 16).unwrap();
        for sig in [libc::SIGALRM, libc::SIGCHLD, libc::SIGUSR1, libc::SIGINT, libc::SIGTERM, libc::SIGPROF] {
            assert_ne!(blocked & (1 << (sig - 1)), 0, "{name} ({tid}) does not block signal {sig}: {blocked:#x}");
        }
        assert_eq!(blocked & (1 << (libc::SIGSEGV - 1)), 0, "{name} blocks SIGSEGV");
    }
    let main = gettid();
    const SIGNALS: usize = 40;
    for i in 0..SIGNALS {
        set_mask(libc::SIG_BLOCK, libc::SIGUSR1);
        // SAFETY: a signal to this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGUSR1) };
        std::thread::sleep(Duration::from_millis(2));
        set_mask(libc::SIG_UNBLOCK, libc::SIGUSR1);
        // Delivered at the unblock if it waited; if another thread took it, it ran there.
        let deadline = Instant::now() + Duration::from_secs(10);
        while HANDLED.load(Ordering::Acquire) <= i {
            assert!(Instant::now() < deadline, "signal {i} was never handled");
            std::thread::yield_now();
        }
    }
    let names = thread_names();
    let elsewhere: Vec<(u32, String)> = HANDLED_ON[..SIGNALS]
        .iter()
        .map(|t| t.load(Ordering::Relaxed))
        .filter(|&t| t != main)
        .map(|t| (t, names.iter().find(|n| n.0 == t).map_or("?".into(), |n| n.1.clone())))
        .collect();
    rec.stop().unwrap();
    assert!(elsewhere.is_empty(), "the program's SIGUSR1 handler ran on other threads: {elsewhere:?}");
}

/// A thread of the program runs 20,000 timeouts that `siglongjmp` out of a SIGALRM handler while
/// it is sampled every millisecond; then it exits and the recording stops. Before, SIGALRM could
/// interrupt the sampler's handler (whose mask blocked nothing) and the jump abandoned it half
/// way: the thread's exit and the stop then waited for it forever.
fn siglongjmp_timeouts(dir: &Path) {
    let timeouts = fixture_function(c"longjmp_timeouts");
    let rec = Recorder::builder().repository(dir).sampling_period(Duration::from_millis(1)).start().unwrap();
    let worker = std::thread::spawn(move || {
        // SAFETY: the fixture's `int longjmp_timeouts(int)`.
        unsafe { timeouts(20_000) }
    });
    let done = worker.join().unwrap();
    assert_eq!(done, 20_000);
    let report = rec.stop_with_report().unwrap();
    let stats = report.sampler.unwrap();
    assert!(stats.taken > 0, "{stats:?}");
    assert_eq!(stats.taken, stats.written + stats.lost, "every sample written or counted lost: {stats:?}");
}

/// 300 rounds of 48 short threads and 16 threads cancelled right after `pthread_create`, with 16
/// sampler slots: every slot is taken, mostly by threads that exited and wait to be reaped.
/// Before, the start hook slept there waiting for a slot (a cancellation point): glibc's forced
/// unwind met the hook's `catch_unwind`, and the process aborted ("exception not rethrown").
fn cancelled_at_start(dir: &Path) {
    let churn = fixture_function(c"cancel_churn");
    let rec = Recorder::builder()
        .repository(dir)
        .sampling_period(Duration::from_millis(1))
        .max_sampled_threads(16)
        .start()
        .unwrap();
    // SAFETY: the fixture's `int cancel_churn(int)`.
    let cancelled = unsafe { churn(300) };
    assert_eq!(cancelled, 300 * 16, "every victim ended cancelled, in its own code");
    let report = rec.stop_with_report().unwrap();
    let stats = report.sampler.unwrap();
    assert_eq!(stats.taken, stats.written + stats.lost, "{stats:?}");
}
