//! `recorder record` never changes what a program's signals and thread starts do: a signal sent
//! to the process never runs the program's handler on one of the recorder's threads; a
//! `siglongjmp` out of a handler that interrupted the sampler's leaves nothing hanging; a thread
//! cancelled as it starts is cancelled in its own code; a Go program built with cgo runs its
//! goroutines and its own CPU profiler while it is sampled. Each program is run with a time limit
//! far above what it takes on a loaded machine: only a hang reaches it.

mod common;

use common::*;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(180);

/// `recorder record ARGS -- CMD` in a fresh directory of its own: (exit code, stdout with the
/// summary, stderr); panics if it is still running after `LIMIT`, once it and the program (in a
/// process group of their own) are killed.
fn record(test: &str, args: &[&str], cmd: &[&str]) -> (Option<i32>, String, String) {
    preload_library();
    let dir = scratch_dir().join("tests").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_recorder"))
        .current_dir(&dir)
        .arg("record")
        .args(["--repository", dir.join("repo").to_str().unwrap()])
        .args(args)
        .arg("--")
        .args(cmd)
        .env_remove("LD_PRELOAD")
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running recorder record");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }),
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > LIMIT {
            // SAFETY: signals the process group this test created for `record` and the program.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            panic!("{cmd:?} under recorder record hung (still running after {LIMIT:?})");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code(), readers.0.join().unwrap(), readers.1.join().unwrap())
}

#[test]
fn a_signal_sent_to_the_process_never_runs_the_programs_handler_on_a_recorder_thread() {
    let prog = build_program("process_signal.c", "gcc", &["-O2"]);
    let (code, out, err) = record("process_signal", &["--period", "1ms", "--wall", "1ms"], &[prog.to_str().unwrap()]);
    assert!(out.contains("handled=40 elsewhere=0"), "{out}\n{err}");
    assert_eq!(code, Some(0), "{out}\n{err}");
}

#[test]
fn siglongjmp_out_of_a_handler_nested_in_the_samplers_neither_hangs_nor_loses_count() {
    let prog = build_program("longjmp_nested.c", "gcc", &["-O2"]);
    let (code, out, err) = record("longjmp_nested", &["--period", "1ms"], &[prog.to_str().unwrap(), "20000"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("timeouts=20000"), "{out}\n{err}");
    // Every sample taken is written or counted lost, in the summary the user reads.
    let line = out.lines().find(|l| l.starts_with("CPU samples:")).unwrap_or_else(|| panic!("{out}\n{err}"));
    let n: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    assert!(n.len() >= 3 && n[0] > 0 && n[0] == n[1] + n[2], "{line}");
}

#[test]
fn threads_cancelled_as_they_start_are_cancelled_in_their_own_code() {
    let prog = build_program("cancel_churn.c", "gcc", &["-O2", "-pthread"]);
    let (code, out, err) = record("cancel_churn", &["--period", "1ms"], &[prog.to_str().unwrap(), "300"]);
    assert!(!err.contains("exception not rethrown"), "{err}");
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("rounds=300 ok"), "{out}\n{err}");
}

/// The Go program of `tests/programs/gocgo`, built with cgo once per test binary.
fn go_program() -> PathBuf {
    let out = scratch_dir().join("gocgo");
    let status = Command::new("go")
        .current_dir(programs_dir().join("gocgo"))
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .env("CGO_ENABLED", "1")
        .env("GOFLAGS", "-mod=mod")
        .env("GOCACHE", scratch_dir().join("gocache"))
        .status()
        .expect("go is required (`.ci/run` installs golang-go)");
    assert!(status.success(), "go build failed");
    out
}

#[test]
fn a_go_program_built_with_cgo_runs_and_profiles_itself_while_it_is_sampled() {
    let prog = go_program();
    let prog = prog.to_str().unwrap();
    for (name, cmd) in [("gocgo", vec![prog]), ("gocgo_pprof", vec![prog, "pprof"])] {
        let (code, out, err) = record(name, &["--period", "1ms"], &cmd);
        assert_eq!(code, Some(0), "{name}: {out}\n{err}");
        assert!(out.contains("go ok"), "{name}: {out}\n{err}");
        assert!(!err.contains("fatal error"), "{name}: {err}");
        // Its threads were sampled (it leaves through the C library's exit, so the recording is
        // finished with every sample it took).
        let samples = out
            .lines()
            .find(|l| l.trim_start().starts_with("jdk.ExecutionSample"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok());
        assert!(samples.is_some_and(|n| n > 0), "{name}: no CPU samples\n{out}\n{err}");
    }
}
