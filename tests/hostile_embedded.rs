//! The hostile-program suite's cases for the embedded library (the CLI's `tests/hostile.rs` runs
//! whole programs under `recorder record`): a program that starts a `Recorder` and then escapes
//! a SIGALRM handler with `siglongjmp`, has process-directed signals delivered to it, closes
//! every descriptor it did not open, and cancels threads as they start. The C half (what Rust
//! cannot do safely, and a C module's own `pthread_create` slot for the recorder to hook) is
//! `tests/hostile/embedded_helper.c`, built into a shared library by the test.
//!
//! Each case runs in a child process (this test binary again, one test, its case named in an
//! environment variable) under a time limit: a hang or a crash is the child's, and is reported
//! with what the child printed.

use recorder::Recorder;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const CASE_ENV: &str = "RECORDER_HOSTILE_EMBEDDED_CASE";
const DIR_ENV: &str = "RECORDER_HOSTILE_EMBEDDED_DIR";
/// Far longer than any case takes on a busy machine: past it the child is hung.
const TIME_LIMIT: Duration = Duration::from_secs(90);

/// `embedded_helper.c` as a shared library, built once per test binary.
fn helper_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(env!("CARGO_CRATE_NAME"));
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libhostile_embedded_helper.so");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/embedded_helper.c");
        let out = Command::new("gcc")
            .args(["-O2", "-g", "-Wall", "-shared", "-fPIC", "-pthread", "-o"])
            .arg(&lib)
            .arg(&source)
            .output()
            .expect("gcc is required to build tests/hostile/embedded_helper.c");
        assert!(out.status.success(), "gcc embedded_helper.c: {}", String::from_utf8_lossy(&out.stderr));
        lib
    })
}

/// The helper's functions, from the library loaded with dlopen.
struct Helper {
    longjmp_timeouts: unsafe extern "C" fn(c_int) -> c_int,
    alarms_on_recorder_threads: unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int,
    cancel_churn: unsafe extern "C" fn(c_int) -> c_int,
}

fn load_helper(path: &Path) -> Helper {
    let path = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: dlopen/dlsym with valid C strings; the symbols have the signatures declared in
    // embedded_helper.c, and the library is never closed.
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!handle.is_null(), "dlopen {:?}: {:?}", path, CStr::from_ptr(libc::dlerror()));
        let symbol = |name: &CStr| {
            let p = libc::dlsym(handle, name.as_ptr());
            assert!(!p.is_null(), "{name:?} missing from the helper");
            p
        };
        Helper {
            longjmp_timeouts: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(c_int) -> c_int>(symbol(
                c"hostile_longjmp_timeouts",
            )),
            alarms_on_recorder_threads: std::mem::transmute::<
                *mut libc::c_void,
                unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int,
            >(symbol(c"hostile_alarms_on_recorder_threads")),
            cancel_churn: std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(c_int) -> c_int>(symbol(
                c"hostile_cancel_churn",
            )),
        }
    }
}

/// A recording with CPU sampling and wall-clock sampling at 1 ms, as hostile as it gets.
fn start(dir: &Path, max_threads: usize) -> Recorder {
    Recorder::builder()
        .repository(dir)
        .flush_interval(Duration::from_millis(20))
        .sampling_period(Duration::from_millis(1))
        .wall_clock_sampling(Duration::from_millis(1))
        .max_sampled_threads(max_threads)
        .start()
        .expect("the recording starts")
}

/// Runs `case` in a child process; returns its stdout after checking it exited 0 in time.
fn in_child(case: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", case, "--nocapture", "--test-threads=1"])
        .env(CASE_ENV, case)
        .env(DIR_ENV, dir.path())
        .env("HELPER", helper_library())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > TIME_LIMIT {
            // SAFETY: kills our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let Some(status) = status else {
        panic!("{case} HUNG: killed after {} s\n{text}", TIME_LIMIT.as_secs());
    };
    assert!(status.success(), "{case}: the program with the recorder embedded ended with {status}\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn child_case() -> Option<(String, PathBuf, Helper)> {
    let case = std::env::var(CASE_ENV).ok()?;
    let dir = PathBuf::from(std::env::var_os(DIR_ENV).unwrap());
    let helper = load_helper(Path::new(&std::env::var_os("HELPER").unwrap()));
    Some((case, dir, helper))
}

/// A siglongjmp out of a SIGALRM handler that interrupted the recorder's SIGPROF handler: the
/// thread keeps being sampled, and `stop()` returns.
#[test]
fn embedded_longjmp_out_of_alarm_handler() {
    if let Some((_, dir, helper)) = child_case() {
        let rec = start(&dir, 128);
        // SAFETY: the helper's function; it restores SIGALRM's action before it returns.
        let done = unsafe { (helper.longjmp_timeouts)(10_000) };
        println!("timeouts={done}");
        let stats = rec.sampler_stats().expect("sampling");
        rec.stop().expect("the recording stops");
        println!("taken={} lost={}", stats.taken, stats.lost);
        return;
    }
    let out = in_child("embedded_longjmp_out_of_alarm_handler");
    assert!(out.contains("timeouts=10000"), "the timeouts did not all fire:\n{out}");
}

/// Process-directed SIGALRMs with the program's handler: none of them may run on a thread the
/// recorder started.
#[test]
fn embedded_process_signals_never_run_on_recorder_threads() {
    if let Some((_, dir, helper)) = child_case() {
        let rec = start(&dir, 128);
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: the helper's function; `name` is set to a NUL-terminated static buffer.
        let on_ours = unsafe { (helper.alarms_on_recorder_threads)(1500, &mut name) };
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().trim().to_owned();
        rec.stop().expect("the recording stops");
        println!("on recorder threads: {on_ours} (first: {name})");
        return;
    }
    let out = in_child("embedded_process_signals_never_run_on_recorder_threads");
    assert!(out.contains("on recorder threads: 0 "), "the program's SIGALRM handler ran on recorder threads:\n{out}");
}

/// The program closes every descriptor it did not open (3..1023) while recording, then writes
/// files of its own: they hold exactly what it wrote, and the recording stops without a panic.
#[test]
fn embedded_closing_every_descriptor() {
    if let Some((_, dir, _)) = child_case() {
        use std::io::{Read, Seek, Write};
        use std::os::fd::FromRawFd;
        let rec = start(&dir.join("repository"), 128);
        std::thread::sleep(Duration::from_millis(100));
        for fd in 3..1024 {
            // SAFETY: closing numbers this process's Rust code holds no File for.
            unsafe { libc::close(fd) };
        }
        let burner = std::thread::spawn(|| {
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed() < Duration::from_millis(600) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            x
        });
        let mut files: Vec<std::fs::File> = (0..8)
            .map(|i| {
                let path = CString::new(dir.join(format!("data.{i}")).to_str().unwrap()).unwrap();
                // SAFETY: open with a valid path; the descriptor is owned by the File made of it.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644) };
                assert!(fd >= 0);
                // SAFETY: fd was just opened by us and is owned by nothing else.
                unsafe { std::fs::File::from_raw_fd(fd) }
            })
            .collect();
        for round in 0..30 {
            for (i, f) in files.iter_mut().enumerate() {
                writeln!(f, "line {round} of file {i}").unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        burner.join().unwrap();
        let mut damaged = 0;
        for (i, f) in files.iter_mut().enumerate() {
            let expect: String = (0..30).map(|r| format!("line {r} of file {i}\n")).collect();
            let mut got = String::new();
            f.rewind().unwrap();
            let _ = f.read_to_string(&mut got);
            if got != expect {
                damaged += 1;
                eprintln!("data.{i}: {} bytes, {} written", got.len(), expect.len());
            }
        }
        let stopped = rec.stop();
        println!(
            "damaged files: {damaged}; stop: {}",
            if stopped.is_ok() { "ok".to_owned() } else { format!("{stopped:?}") }
        );
        return;
    }
    let out = in_child("embedded_closing_every_descriptor");
    assert!(out.contains("damaged files: 0; stop: ok"), "files damaged or stop failed:\n{out}");
}

/// Threads of a C module (its pthread_create slot hooked by the recorder) cancelled right after
/// they were created, with the thread slots full of exited threads: no abort, every victim is
/// cancelled, stop() returns.
#[test]
fn embedded_cancelled_hooked_threads() {
    if let Some((_, dir, helper)) = child_case() {
        // Few slots, so that short threads keep them all taken.
        let rec = start(&dir, 8);
        // SAFETY: the helper's function.
        let cancelled = unsafe { (helper.cancel_churn)(200) };
        rec.stop().expect("the recording stops");
        println!("cancelled={cancelled}");
        return;
    }
    let out = in_child("embedded_cancelled_hooked_threads");
    assert!(out.contains("cancelled=1600"), "not every victim was cancelled:\n{out}");
}
