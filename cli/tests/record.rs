//! `recorder record -- CMD` on real programs that nobody changed: C, C++ and Rust
//! programs built without frame pointers, Debian's `xz`, shells and their children, and every way
//! a program ends. The JDK's `jfr` judges the files; stacks are read back with `recorder dump
//! --format collapsed` (root first, `;`-separated, count last).
//!
//! The preload library is built on demand (`cargo build -p recorder-preload`, same profile and
//! target directory as this test), so it lies next to the `recorder` binary, where `record` looks.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn calltree() -> PathBuf {
    build_program("calltree.c", "gcc", &["-O2", "-fomit-frame-pointer", "-pthread"])
}

/// Runs `recorder record ARGS -- CMD...` in `cwd`.
fn record(cwd: &Path, args: &[&str], cmd: &[&str]) -> Output {
    preload_library();
    Command::new(env!("CARGO_BIN_EXE_recorder"))
        .current_dir(cwd)
        .arg("record")
        .args(args)
        .arg("--")
        .args(cmd)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("running recorder record")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Collapsed stacks of a recording: (frames root first, count).
fn stacks(path: &Path) -> Vec<(Vec<String>, u64)> {
    let out = recorder_ok(&["dump", "--format", "collapsed", "--keep-runtime-frames", path.to_str().unwrap()]);
    out.lines()
        .filter_map(|l| {
            let (stack, count) = l.rsplit_once(' ')?;
            Some((stack.split(';').map(str::to_owned).collect(), count.parse().ok()?))
        })
        .collect()
}

/// Share of samples whose stack holds a frame named `…main` and whose innermost frame is the
/// function `leaf` (C++ names end with their parameters; inlined std frames, `core::…` and `<…>`,
/// inside it are skipped), and the sample count.
fn shares(stacks: &[(Vec<String>, u64)], leaf: &str) -> (f64, f64, u64) {
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    let with_main: u64 =
        stacks.iter().filter(|(f, _)| f.iter().any(|n| n == "main" || n.ends_with(".main"))).map(|s| s.1).sum();
    let is_leaf = |n: &str| n.ends_with(leaf) || n.starts_with(&format!("{leaf}(")) || n.contains(&format!(".{leaf}("));
    let own = |f: &[String]| f.iter().rev().find(|n| !(n.starts_with("core::") || n.starts_with('<'))).cloned();
    let on_leaf: u64 = stacks.iter().filter(|(f, _)| own(f).is_some_and(|n| is_leaf(&n))).map(|s| s.1).sum();
    (with_main as f64 / total.max(1) as f64, on_leaf as f64 / total.max(1) as f64, total)
}

/// A fresh directory of its own for one test: tests run in parallel and each names its
/// repository base, which `record` scans for the recording it started.
fn test_dir(test: &str) -> PathBuf {
    let dir = scratch_dir().join("tests").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn recording_dirs(base: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(base)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn c_without_frame_pointers_stacks_reach_main_and_the_hot_function_is_on_top() {
    let dir = test_dir("c_without_frame_pointers_stacks_reach_main_and_the_hot_function_is_on_top");
    let prog = calltree();
    let out =
        record(&dir, &["--period", "1ms", "--repository", "repo", "-o", "c.jfr"], &[prog.to_str().unwrap(), "1500"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(7), "exit status passes through:\n{t}");
    assert!(t.contains("CPU samples:") && t.contains("Hottest functions"), "{t}");
    let jfr = dir.join("c.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let s = stacks(&jfr);
    let (main_share, leaf_share, total) = shares(&s, "hot_leaf");
    assert!(total >= 200, "{total} samples\n{t}");
    assert!(
        main_share >= 0.95,
        "only {:.1} % of {total} stacks reach main: {:?}",
        main_share * 100.0,
        &s[..s.len().min(8)]
    );
    assert!(leaf_share >= 0.8, "hot_leaf on top in {:.1} % of {total}", leaf_share * 100.0);
    // The known chain is there, in order.
    let chain = s
        .iter()
        .filter(|(f, _)| {
            let names: Vec<&str> = f.iter().map(|n| n.rsplit('.').next().unwrap()).collect();
            names.windows(5).any(|w| w == ["main", "run", "level1", "level2", "hot_leaf"])
        })
        .map(|x| x.1)
        .sum::<u64>();
    assert!(chain as f64 >= 0.8 * total as f64, "main;run;level1;level2;hot_leaf in {chain} of {total}");
}

#[test]
fn frame_pointer_unwinder_alone_loses_the_callers_of_code_without_them() {
    // The control for the test above: the same program with --unwinder fp.
    let dir = test_dir("frame_pointer_unwinder_alone_loses_the_callers_of_code_without_them");
    let prog = calltree();
    let out = record(
        &dir,
        &["--period", "1ms", "--unwinder", "fp", "-o", "fp.jfr", "--repository", "repo"],
        &[prog.to_str().unwrap(), "800"],
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let (main_share, _, total) = shares(&stacks(&dir.join("fp.jfr")), "hot_leaf");
    assert!(total > 50);
    assert!(main_share < 0.5, "frame pointers reached main in {:.1} % of stacks", main_share * 100.0);
}

#[test]
fn cpp_exceptions_thrown_while_sampling_do_not_crash_and_stacks_reach_main() {
    let dir = test_dir("cpp_exceptions_thrown_while_sampling_do_not_crash_and_stacks_reach_main");
    let prog = build_program("exceptions.cpp", "g++", &["-O2", "-fomit-frame-pointer"]);
    let out =
        record(&dir, &["--period", "1ms", "-o", "cpp.jfr", "--repository", "repo"], &[prog.to_str().unwrap(), "1500"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let jfr = dir.join("cpp.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let s = stacks(&jfr);
    let (main_share, leaf_share, total) = shares(&s, "spin");
    assert!(total >= 200, "{total}");
    assert!(main_share >= 0.95, "{:.1} % reach main: {:?}", main_share * 100.0, &s[..s.len().min(8)]);
    assert!(leaf_share >= 0.5, "spin on top in {:.1} %", leaf_share * 100.0);
}

#[test]
fn rust_without_frame_pointers_stacks_reach_main() {
    let dir = test_dir("rust_without_frame_pointers_stacks_reach_main");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let prog = build_program("nofp.rs", &rustc, &["-O", "-C", "force-frame-pointers=no", "-C", "debuginfo=1"]);
    let out =
        record(&dir, &["--period", "1ms", "-o", "rs.jfr", "--repository", "repo"], &[prog.to_str().unwrap(), "1500"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let jfr = dir.join("rs.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let s = stacks(&jfr);
    let (main_share, leaf_share, total) = shares(&s, "hot_leaf");
    assert!(total >= 200, "{total}");
    assert!(main_share >= 0.95, "{:.1} % reach main: {:?}", main_share * 100.0, &s[..s.len().min(8)]);
    assert!(leaf_share >= 0.8, "hot_leaf on top in {:.1} %", leaf_share * 100.0);
}

#[test]
fn threads_of_the_program_are_sampled_with_whole_stacks() {
    let dir = test_dir("threads_of_the_program_are_sampled_with_whole_stacks");
    let prog = calltree();
    let out = record(
        &dir,
        &["--period", "1ms", "-o", "t.jfr", "--repository", "repo"],
        &[prog.to_str().unwrap(), "1200", "threads", "0"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let s = stacks(&dir.join("t.jfr"));
    let total: u64 = s.iter().map(|x| x.1).sum();
    // Thread stacks start at start_thread/clone3, not main: they must reach thread_main.
    let rooted: u64 = s.iter().filter(|(f, _)| f.iter().any(|n| n.ends_with("thread_main"))).map(|x| x.1).sum();
    assert!(total >= 200, "{total}");
    assert!(rooted as f64 >= 0.9 * total as f64, "{rooted} of {total} reach thread_main");
}

#[test]
fn exit_paths_leave_a_readable_recording() {
    let dir = test_dir("exit_paths_leave_a_readable_recording");
    let prog = calltree();
    let prog = prog.to_str().unwrap();
    // exit(): finished normally, final flag, status passed through.
    let out = record(&dir, &["-o", "exit.jfr", "--repository", "r1"], &[prog, "300", "exit", "5"]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(!text(&out).contains("not finished"), "{}", text(&out));
    jdk_accepts(&[dir.join("exit.jfr")]);
    // _exit(): no exit handler; the recording is closed by `record` and readable.
    let out = record(&dir, &["-o", "_exit.jfr", "--repository", "r2"], &[prog, "300", "_exit", "6"]);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    assert!(text(&out).contains("was not finished"), "{}", text(&out));
    jdk_accepts(&[dir.join("_exit.jfr")]);
    // SIGKILL: the same, and `record` dies of the same signal.
    let out = record(&dir, &["-o", "kill.jfr", "--repository", "r3"], &[prog, "300", "kill"]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out));
    jdk_accepts(&[dir.join("kill.jfr")]);
    let samples = jfr_summary_counts(&dir.join("kill.jfr")).get("jdk.ExecutionSample").copied().unwrap_or(0);
    assert!(samples > 0, "the samples published before SIGKILL are kept");
}

/// `recorder record -o OUT -- calltree CPU_MS wait-signal` in `dir`, returned once the program has
/// printed "ready" (it then waits for a signal).
fn record_until_ready(dir: &Path, out: &str, prog: &Path, cpu_ms: &str) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_recorder"))
        .current_dir(dir)
        .args(["record", "-o", out, "--repository", "repo", "--"])
        .args([prog.to_str().unwrap(), cpu_ms, "wait-signal"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&seen).contains("ready") {
        assert!(Instant::now() < deadline, "the program never got ready");
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
        assert!(n > 0, "stdout closed before ready");
        seen.extend_from_slice(&buf[..n]);
    }
    // Still open: `record` prints its summary there at the end.
    child.stdout = Some(stdout);
    child
}

#[test]
fn sigint_sent_to_record_reaches_the_program() {
    let dir = test_dir("sigint_sent_to_record_reaches_the_program");
    let prog = calltree();
    preload_library();
    let mut child = record_until_ready(&dir, "int.jfr", &prog, "50");
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "record dies of the program's SIGINT");
    jdk_accepts(&[dir.join("int.jfr")]);
}

#[test]
fn a_shell_and_its_children_leave_one_recording_unless_children_are_followed() {
    let dir = test_dir("a_shell_and_its_children_leave_one_recording_unless_children_are_followed");
    let out = record(
        &dir,
        &["--repository", "one", "-o", "sh.jfr"],
        &["sh", "-c", "ls >/dev/null; true; env | grep -c RECORDER_ || true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(recording_dirs(&dir.join("one")).len(), 1, "{:?}", recording_dirs(&dir.join("one")));
    // The shell's children saw no recorder variable and no preload.
    assert!(String::from_utf8_lossy(&out.stdout).lines().next().is_some_and(|l| l.trim() == "0"), "{}", text(&out));

    let out = record(
        &dir,
        &["--follow-children", "--repository", "all", "-o", "all.jfr"],
        &["sh", "-c", "ls >/dev/null; /bin/true; cat /dev/null"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let dirs = recording_dirs(&dir.join("all"));
    assert_eq!(dirs.len(), 4, "sh, ls, true and cat: {dirs:?}");
    assert!(text(&out).contains("Child processes recorded (3)"), "{}", text(&out));
    for d in &dirs {
        for chunk in chunk_files(d) {
            jdk_accepts(&[chunk]);
        }
    }
}

#[test]
fn fork_without_exec_leaves_the_parents_recording_intact() {
    let dir = test_dir("fork_without_exec_leaves_the_parents_recording_intact");
    let prog = calltree();
    let out = record(
        &dir,
        &["--period", "1ms", "--repository", "repo", "-o", "fork.jfr"],
        &[prog.to_str().unwrap(), "800", "fork"],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(7), "{t}");
    assert!(!t.contains("was not finished"), "{t}");
    assert_eq!(recording_dirs(&dir.join("repo")).len(), 1);
    jdk_accepts(&[dir.join("fork.jfr")]);
    let (_, _, total) = shares(&stacks(&dir.join("fork.jfr")), "hot_leaf");
    assert!(total > 100, "{total}");
}

#[test]
fn static_programs_are_refused_before_they_run() {
    let dir = test_dir("static_programs_are_refused_before_they_run");
    let prog = build_program("calltree.c", "gcc", &["-O2", "-static", "-pthread"]);
    let out = record(&dir, &["-o", "never.jfr"], &[prog.to_str().unwrap(), "10"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("statically linked"), "{err}");
    assert!(!dir.join("never.jfr").exists());
}

#[test]
fn an_exec_into_a_program_the_recorder_cannot_enter_is_reported() {
    // `env -i` clears the environment before it execs: the recording follows the process all the
    // same (the exec of the recorded process itself carries the library on).
    let dir = test_dir("an_exec_into_a_program_the_recorder_cannot_enter_is_reported");
    let out = record(&dir, &["-o", "x.jfr", "--repository", "repo"], &["/usr/bin/env", "-i", "/bin/true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("env exec'd /bin/true (same process)"), "{}", text(&out));
    assert!(!text(&out).contains("not finished"), "{}", text(&out));
    // A static program cannot load the library: the recording ends at the exec, closed; the
    // static program runs to its end without any variable of ours (its children would inherit
    // them).
    let static_prog = build_program("exec_blocked.c", "gcc", &["-O2", "-static"]);
    let script = format!("exec {} env", static_prog.display());
    let out = record(&dir, &["-o", "static.jfr", "--repository", "static"], &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("LD_PRELOAD set: 0, RECORDER_CONTINUE set: 0"), "{}", text(&out));
    assert!(text(&out).contains("The recording ends at the exec of"), "{}", text(&out));
    assert!(!text(&out).contains("the recording follows it"), "{}", text(&out));
    jdk_accepts(&[dir.join("static.jfr")]);
}

#[test]
fn setuid_programs_are_refused() {
    let dir = test_dir("setuid_programs_are_refused");
    let prog = dir.join("suid");
    std::fs::copy("/bin/true", &prog).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // Owned by us: no secure mode for our own uid. Hand it to another owner when we can.
    // SAFETY: chown with a valid path; failure (not root) is handled.
    let c = std::ffi::CString::new(prog.to_str().unwrap()).unwrap();
    let chowned = unsafe { libc::chown(c.as_ptr(), 65534, 65534) } == 0;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    if !chowned {
        eprintln!("not root: setuid refusal not exercised");
        return;
    }
    let out = record(&dir, &["-o", "never.jfr"], &[prog.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("setuid"), "{err}");
}

#[test]
fn dump_by_pid_works_while_the_program_runs() {
    let dir = test_dir("dump_by_pid_works_while_the_program_runs");
    let prog = calltree();
    preload_library();
    let mut child = record_until_ready(&dir, "live.jfr", &prog, "100");
    // The program is the recorder's child.
    let pid = std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id())).unwrap();
    let pid = pid.split_whitespace().next().unwrap().to_owned();
    let dumped = dir.join("bypid.jfr");
    let out = recorder(&["dump", "--pid", &pid, "-o", dumped.to_str().unwrap()]);
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(out.status.success(), "{}", text(&out));
    jdk_accepts(&[dumped]);
}

#[test]
fn the_programs_own_signal_handlers_keep_working_including_a_later_sigprof_profiler() {
    // The program installs a SIGUSR1 handler and its own SIGPROF profiler (setitimer) after the
    // recording started. Its profiler must see its own signals and none of the sampler's, its
    // query must report its own handler, and the recording must keep its samples.
    let dir = test_dir("the_programs_own_signal_handlers_keep_working_including_a_later_sigprof_profiler");
    let prog = build_program("signals.c", "gcc", &["-O2", "-fomit-frame-pointer"]);
    // Long enough that the recorder's own start-up on the main thread (CFI tables, symbols: its
    // samples are leaf-only, before main) stays a small share of the samples.
    let out =
        record(&dir, &["--period", "1ms", "--repository", "repo", "-o", "sig.jfr"], &[prog.to_str().unwrap(), "3000"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let line = String::from_utf8_lossy(&out.stdout).lines().find(|l| l.starts_with("usr1=")).unwrap_or("").to_owned();
    let field = |k: &str| -> i64 {
        line.split_whitespace().find_map(|f| f.strip_prefix(k)).and_then(|v| v.parse().ok()).unwrap_or(-1)
    };
    assert_eq!(field("usr1="), 1, "{line}\n{t}");
    assert!(field("own=") > 0, "its itimer's SIGPROFs reach its handler: {line}");
    assert_eq!(field("foreign="), 0, "no sampler signal reaches the program's handler: {line}");
    assert!(line.ends_with("query=ok"), "{line}");
    let jfr = dir.join("sig.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let s = stacks(&jfr);
    let (main_share, leaf_share, total) = shares(&s, "spin");
    assert!(total >= 200, "sampling went on after the program's sigaction: {total} samples\n{t}");
    assert!(main_share >= 0.95 && leaf_share >= 0.8, "{main_share} {leaf_share}: {:?}", &s[..s.len().min(8)]);
}

#[test]
fn xz_from_debian_compressing_with_two_threads_is_sampled_in_its_worker_threads() {
    // A real multi-threaded program nobody here wrote (Debian's xz, liblzma stripped of its
    // .symtab). Its worker threads start with every signal blocked (so that SIGINT goes to the
    // main thread): the preload's pthread_create lets SIGPROF in, or they would never be sampled
    // while the main thread only waits.
    let dir = test_dir("xz_from_debian_compressing_with_two_threads_is_sampled_in_its_worker_threads");
    // 6 MB of text that compresses a little, deterministic (an LCG over a small alphabet).
    let mut data = Vec::with_capacity(6 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while data.len() < 6 << 20 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        data.push(b"abcdefghij klmnop\n"[((x >> 33) % 18) as usize]);
    }
    std::fs::write(dir.join("data.txt"), &data).unwrap();
    let out = record(
        &dir,
        &["--period", "2ms", "--repository", "repo", "-o", "xz.jfr"],
        &["xz", "-T2", "--block-size=1MiB", "-6", "-k", "-f", "data.txt"],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let check = Command::new("xz").current_dir(&dir).args(["-t", "data.txt.xz"]).status().unwrap();
    assert!(check.success(), "xz wrote a valid file under the recorder");
    let jfr = dir.join("xz.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let s = stacks(&jfr);
    let total: u64 = s.iter().map(|x| x.1).sum();
    assert!(total >= 100, "{total} samples\n{t}");
    // Where xz spends its time: liblzma's match finder and encoder, on top of nearly every sample
    // (stripped of .symtab: its internal functions are `liblzma.so.5+0xOFFSET`, as perf shows
    // them, never a runtime address).
    let in_lzma: u64 = s
        .iter()
        .filter(|(f, _)| f.last().is_some_and(|l| l.starts_with("liblzma.so") || l.starts_with("lzma_")))
        .map(|x| x.1)
        .sum();
    let runtime_addresses: Vec<&String> =
        s.iter().flat_map(|(f, _)| f.iter()).filter(|n| n.starts_with("0x")).collect();
    assert!(runtime_addresses.is_empty(), "frames named by a runtime address: {runtime_addresses:?}");
    assert!(in_lzma as f64 >= 0.9 * total as f64, "liblzma on top in {in_lzma} of {total}: {:?}", &s[..s.len().min(5)]);
    // Whole stacks through liblzma's code (no frame pointers): down to the thread's start.
    let rooted: u64 = s
        .iter()
        .filter(|(f, _)| f.iter().any(|n| n.starts_with("recorder_preload") && n.ends_with("thread_start")))
        .map(|x| x.1)
        .sum();
    assert!(rooted as f64 >= 0.9 * total as f64, "{rooted} of {total} reach the thread's start");
    // Both worker threads were sampled.
    let summary = text(&recorder(&["summary", jfr.to_str().unwrap()]));
    let sampled_threads = summary
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("Thread"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 0))
        .count();
    assert!(sampled_threads >= 2, "{summary}");
}

#[test]
fn threads_made_before_main_and_with_a_raw_clone_are_discovered_and_sampled() {
    // Neither thread goes through the preload's pthread_create while the recording runs: one is
    // started by a constructor before main, the other by clone(2). The /proc/self/task scan finds
    // both; each burns 600 ms of its own CPU time in a known function.
    let dir = test_dir("threads_made_before_main_and_with_a_raw_clone_are_discovered_and_sampled");
    let prog = build_program("early_threads.c", "gcc", &["-O2", "-pthread"]);
    let out = record(&dir, &["--period", "1ms", "--repository", "repo", "-o", "early.jfr"], &[prog.to_str().unwrap()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let jfr = dir.join("early.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let s = stacks(&jfr);
    let with = |f: &str| -> u64 { s.iter().filter(|(st, _)| st.iter().any(|n| n.ends_with(f))).map(|x| x.1).sum() };
    // 600 ms at 1 ms: a thread found within its first 300 ms has at least 300 samples left.
    assert!(with("early_worker_loop") >= 100, "constructor thread: {} samples\n{t}", with("early_worker_loop"));
    assert!(with("clone_worker_loop") >= 100, "clone thread: {} samples\n{t}", with("clone_worker_loop"));
}

// ---- allocation sampling of an unmodified program (`record --alloc`) ----

/// Collapsed stacks of `dump ARGS PATH` (e.g. `--type alloc`, `--live`): (frames root first,
/// weight).
fn weighted_stacks(path: &Path, args: &[&str]) -> Vec<(Vec<String>, u64)> {
    let mut all = vec!["dump", "--format", "collapsed"];
    all.extend_from_slice(args);
    all.push(path.to_str().unwrap());
    recorder_ok(&all)
        .lines()
        .filter_map(|l| {
            let (stack, weight) = l.rsplit_once(' ')?;
            Some((stack.split(';').map(str::to_owned).collect(), weight.parse().ok()?))
        })
        .collect()
}

/// Weight of the stacks whose innermost frame satisfies `leaf`.
fn weight_where(stacks: &[(Vec<String>, u64)], leaf: impl Fn(&str) -> bool) -> u64 {
    stacks.iter().filter(|(f, _)| f.last().is_some_and(|n| leaf(n))).map(|s| s.1).sum()
}

/// `estimate` is within 5 standard deviations of `truth` (sampling every `interval` bytes on
/// average, the relative sd of an estimate is about sqrt(interval / bytes)), and 10 % at least.
fn assert_estimate(site: &str, estimate: u64, truth: u64, interval: u64) {
    let tolerance = (5.0 * (interval as f64 / truth as f64).sqrt()).max(0.10);
    let error = (estimate as f64 - truth as f64) / truth as f64;
    assert!(
        error.abs() <= tolerance,
        "{site}: estimated {estimate} bytes, allocated {truth} ({:+.1} %, tolerance {:.1} %)",
        error * 100.0,
        tolerance * 100.0
    );
}

const MIB: u64 = 1024 * 1024;

#[test]
fn alloc_samples_a_c_program_per_site_with_cpu_samples_and_the_leak_tops_live() {
    let dir = test_dir("alloc_samples_a_c_program_per_site_with_cpu_samples_and_the_leak_tops_live");
    let prog = build_program("allocs.c", "gcc", &["-O2", "-pthread"]);
    let out = record(
        &dir,
        &["--alloc", "64KiB", "--alloc-live", "--period", "1ms", "--repository", "repo", "-o", "a.jfr"],
        &[prog.to_str().unwrap(), "cpu"],
    );
    let t = text(&out);
    // Status 3: a block did not cover its size or alignment (malloc_usable_size, posix_memalign...).
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("Allocation samples:"), "{t}");
    let jfr = dir.join("a.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let counts = jfr_summary_counts(&jfr);
    let samples = counts.get("jdk.ObjectAllocationSample").copied().unwrap_or(0);
    assert!(samples > 5000, "{samples} allocation samples (about 10 000 expected): {counts:?}");
    let printed = jdk("jfr", &["print", "--events", "jdk.ObjectAllocationSample", jfr.to_str().unwrap()]);
    assert_eq!(printed.matches("jdk.ObjectAllocationSample {").count() as u64, samples);
    assert!(printed.contains("leak_site") && printed.contains("weight = "), "{}", &printed[..printed.len().min(2000)]);

    let alloc = weighted_stacks(&jfr, &["--type", "alloc"]);
    let interval = 64 * 1024;
    for (site, truth) in [
        ("leak_site", 32 * MIB),
        ("churn_site", 128 * MIB),
        ("calloc_site", 64 * MIB),
        ("aligned_site", 96 * MIB),
        ("realloc_site", 260 * MIB),
        ("valloc_site", 16 * MIB),
        ("array_site", 32 * MIB),
    ] {
        assert_estimate(site, weight_where(&alloc, |n| n == site), truth, interval);
    }
    // The program's call sites are reached through code without frame pointers.
    let total: u64 = alloc.iter().map(|s| s.1).sum();
    let with_main: u64 = alloc.iter().filter(|(f, _)| f.iter().any(|n| n == "main")).map(|s| s.1).sum();
    assert!(with_main as f64 >= 0.95 * total as f64, "{with_main} of {total} bytes reach main: {alloc:?}");

    let live = weighted_stacks(&jfr, &["--live"]);
    let top = live.iter().max_by_key(|s| s.1).expect("a live set");
    assert_eq!(top.0.last().map(String::as_str), Some("leak_site"), "{live:?}");
    assert_estimate("leak_site (live)", top.1, 32 * MIB, interval);
    let freed_sites: u64 = weight_where(&live, |n| n.ends_with("_site") && n != "leak_site");
    assert_eq!(freed_sites, 0, "sites that free everything are not live: {live:?}");

    // CPU samples alongside.
    let cpu = stacks(&jfr);
    let (_, burn_share, cpu_total) = shares(&cpu, "burn");
    assert!(cpu_total >= 100 && burn_share >= 0.3, "{cpu_total} CPU samples, burn {:.1} %", burn_share * 100.0);
}

#[test]
fn alloc_samples_cpp_new_and_containers_through_malloc() {
    let dir = test_dir("alloc_samples_cpp_new_and_containers_through_malloc");
    let prog = build_program("allocs.cpp", "g++", &["-O2"]);
    let out = record(
        &dir,
        &["--alloc", "64KiB", "--alloc-live", "--repository", "repo", "-o", "cpp.jfr"],
        &[prog.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let jfr = dir.join("cpp.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let alloc = weighted_stacks(&jfr, &["--type", "alloc"]);
    // operator new is the innermost frame, the program's function its caller.
    let site = |name: &str| -> u64 {
        alloc
            .iter()
            .filter(|(f, _)| {
                f.last().is_some_and(|n| n.starts_with("operator new") || n.starts_with("operator_new"))
                    && f.iter().any(|n| n.starts_with(&format!("{name}(")))
            })
            .map(|s| s.1)
            .sum()
    };
    assert_estimate("new_site", site("new_site"), 64 * MIB, 64 * 1024);
    assert_estimate("vector_site", site("vector_site"), 32 * MIB, 64 * 1024);
    let live = weighted_stacks(&jfr, &["--live"]);
    let top = live.iter().max_by_key(|s| s.1).expect("a live set");
    assert!(top.0.iter().any(|n| n.starts_with("keep_site(")), "{live:?}");
    // 4096 strings of 4000 chars (4001-byte blocks).
    assert_estimate("keep_site (live)", top.1, 4096 * 4001, 64 * 1024);
}

#[test]
fn alloc_hook_survives_constructors_signal_handlers_thread_exit_and_fork() {
    let dir = test_dir("alloc_hook_survives_constructors_signal_handlers_thread_exit_and_fork");
    let prog = build_program("allocs.c", "gcc", &["-O2", "-pthread"]);
    // A small interval: thousands of samples in every one of those contexts.
    let out = record(
        &dir,
        &["--alloc", "4KiB", "--alloc-live", "--repository", "repo", "-o", "edge.jfr"],
        &[prog.to_str().unwrap(), "edge"],
    );
    // 3: a bad block; 4: the forked child's allocations failed.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let jfr = dir.join("edge.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let alloc = weighted_stacks(&jfr, &["--type", "alloc"]);
    // 8 threads x (256 + 256 at exit) x 4 KiB in churn, 16 x 256 x 4 KiB in the signal handler.
    let in_threads = alloc
        .iter()
        .filter(|(f, _)| f.last().is_some_and(|n| n == "churn") && f.iter().any(|n| n == "thread_main"))
        .map(|s| s.1)
        .sum::<u64>();
    assert_estimate("churn in threads", in_threads, 8 * 256 * 4096, 4096);
    let churn_total = weight_where(&alloc, |n| n == "churn");
    assert_estimate("churn everywhere", churn_total, (8 * 512 + 16 * 256) * 4096, 4096);
}

#[test]
fn without_alloc_no_allocation_samples_and_a_bad_size_is_refused() {
    let dir = test_dir("without_alloc_no_allocation_samples_and_a_bad_size_is_refused");
    let prog = build_program("allocs.c", "gcc", &["-O2", "-pthread"]);
    let out = record(&dir, &["--repository", "repo", "-o", "none.jfr"], &[prog.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let counts = jfr_summary_counts(&dir.join("none.jfr"));
    assert_eq!(counts.get("jdk.ObjectAllocationSample").copied().unwrap_or(0), 0, "{counts:?}");
    for bad in ["0", "lots", "12XB"] {
        let out = record(&dir, &["--alloc", bad, "--repository", "repo"], &[prog.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "--alloc {bad}: {}", text(&out));
        assert!(text(&out).contains("--alloc"), "{}", text(&out));
    }
}

#[test]
fn bsd_signal_and_sysv_signal_handlers_of_the_program_are_chained_like_signal() {
    // Before they were interposed, either call replaced the sampler's SIGPROF handler: it returned
    // the sampler's handler as "old", the program's handler got the sampler's signals, and the
    // recording lost its samples.
    let dir = test_dir("bsd_signal_and_sysv_signal_handlers_of_the_program_are_chained_like_signal");
    let prog = build_program("oldsignals.c", "gcc", &["-O2", "-fomit-frame-pointer"]);
    for mode in ["bsd", "sysv"] {
        let jfr = format!("{mode}.jfr");
        let out = record(
            &dir,
            &["--period", "1ms", "--repository", "repo", "-o", &jfr],
            &[prog.to_str().unwrap(), mode, "1500"],
        );
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "{mode}: {t}");
        let line =
            String::from_utf8_lossy(&out.stdout).lines().find(|l| l.starts_with("old=")).unwrap_or("").to_owned();
        assert!(line.starts_with("old=dfl "), "{mode}: the previous disposition is the program's: {line}\n{t}");
        assert!(line.ends_with(" query=ok"), "{mode}: {line}");
        let own: i64 =
            line.split_whitespace().find_map(|f| f.strip_prefix("own=")).and_then(|v| v.parse().ok()).unwrap_or(-1);
        // Its 10 ms itimer over 1.5 s of CPU: about 150; the sampler's 1 kHz signals would be 1500.
        assert!((1..=600).contains(&own), "{mode}: its handler saw {own} SIGPROFs: {line}");
        let s = stacks(&dir.join(&jfr));
        let (main_share, leaf_share, total) = shares(&s, "spin");
        assert!(total >= 200, "{mode}: sampling went on after the program's call: {total} samples\n{t}");
        assert!(main_share >= 0.95 && leaf_share >= 0.8, "{mode}: {main_share} {leaf_share}");
    }
}

/// `nm -S` of `binary`: the [start, end) of function `name` in the file's address space.
fn function_range(binary: &Path, name: &str) -> (u64, u64) {
    let out = Command::new("nm").arg("-S").arg(binary).output().expect("nm (binutils) is required");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == name).then(|| {
                let start = u64::from_str_radix(f[0], 16).unwrap();
                (start, start + u64::from_str_radix(f[1], 16).unwrap())
            })
        })
        .unwrap_or_else(|| panic!("{name} not in nm -S {}:\n{text}", binary.display()))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn stripped_code_is_library_plus_offset_and_build_id_debug_files_bring_names_and_lines_back() {
    let dir = test_dir("stripped_code_is_library_plus_offset_and_build_id_debug_files_bring_names_and_lines_back");
    let built = build_program("calltree.c", "gcc", &["-O2", "-g", "-fomit-frame-pointer", "-pthread"]);
    let prog = dir.join("calltree");
    std::fs::copy(&built, &prog).unwrap();
    let (hot_start, hot_end) = function_range(&prog, "hot_leaf");
    // The debug info goes into a .build-id tree of our own; the program is stripped of everything.
    let notes = run_ok(Command::new("readelf").arg("-n").arg(&prog));
    let id = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a GNU build ID").trim().to_owned();
    let debug_root = dir.join("debug");
    let id_dir = debug_root.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&id_dir).unwrap();
    let debug_file = id_dir.join(format!("{}.debug", &id[2..]));
    run_ok(Command::new("objcopy").arg("--only-keep-debug").arg(&prog).arg(&debug_file));
    run_ok(Command::new("strip").arg("--strip-all").arg(&prog));
    let nm = Command::new("nm").arg(&prog).output().unwrap();
    assert!(String::from_utf8_lossy(&nm.stderr).contains("no symbols"), "the program is stripped");

    // Without its debug file: module-relative offsets that fall inside the right function.
    let out = record(&dir, &["--period", "1ms", "--repository", "repo", "-o", "stripped.jfr"], &["./calltree", "600"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let s = stacks(&dir.join("stripped.jfr"));
    let total: u64 = s.iter().map(|x| x.1).sum();
    let in_hot_leaf: u64 = s
        .iter()
        .filter(|(f, _)| {
            f.last()
                .and_then(|l| l.strip_prefix("calltree+0x"))
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                .is_some_and(|offset| (hot_start..hot_end).contains(&offset))
        })
        .map(|x| x.1)
        .sum();
    assert!(total >= 100, "{total} samples");
    assert!(
        in_hot_leaf as f64 >= 0.8 * total as f64,
        "calltree+0xOFFSET in hot_leaf [{hot_start:#x}, {hot_end:#x}) on top of {in_hot_leaf} of {total}: {:?}",
        &s[..s.len().min(4)]
    );
    assert!(s.iter().all(|(f, _)| !f.iter().any(|n| n == "hot_leaf")), "no name without the debug file");

    // With the .build-id directory: names and lines.
    let out = record(
        &dir,
        &["--period", "1ms", "--debug-dir", "debug", "--repository", "repo", "-o", "debug.jfr"],
        &["./calltree", "600"],
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let jfr = dir.join("debug.jfr");
    let s = stacks(&jfr);
    let (main_share, leaf_share, total) = shares(&s, "hot_leaf");
    assert!(total >= 100 && main_share >= 0.95 && leaf_share >= 0.8, "{main_share} {leaf_share} of {total}");
    let printed = jdk("jfr", &["print", "--events", "jdk.ExecutionSample", jfr.to_str().unwrap()]);
    for function in ["hot_leaf", "level2", "level1", "run", "main"] {
        let line = printed
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("calltree.{function}() line: ")))
            .and_then(|n| n.trim().parse::<u32>().ok());
        assert!(line.is_some_and(|n| n > 0), "{function} has no line: {}", &printed[..printed.len().min(1500)]);
    }
}

#[test]
fn the_programs_main_does_not_wait_for_the_preload_librarys_unwind_table() {
    // The recorder starts before main on the main thread. The DWARF table of the preload library
    // itself (the largest of the process's, for code that keeps frame pointers) is built by its
    // sampler thread instead; the program's own modules' tables still before main, so its stacks
    // are whole from the first sample. Judged by CPU work, not time: what the tables add to the
    // main thread's CPU before main (a recording with the default unwinder against one with
    // frame pointers only, which builds no table; the least of 3 runs each) is less than
    // compiling the preload library's table costs on its own, measured here with the same code.
    // Before, it included that work, so it was always more.
    let dir = test_dir("the_programs_main_does_not_wait_for_the_preload_librarys_unwind_table");
    let prog = build_program("startup.c", "gcc", &["-O2", "-fomit-frame-pointer"]);
    let premain = |unwinder: &str, run: usize| -> u64 {
        let jfr = format!("{unwinder}{run}.jfr");
        let out = record(
            &dir,
            &["--period", "1ms", "--unwinder", unwinder, "--repository", "repo", "-o", &jfr],
            &[prog.to_str().unwrap(), "300"],
        );
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "{t}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("premain_cpu_us="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no premain line: {t}"))
    };
    let with_tables = (0..3).map(|i| premain("auto", i)).min().unwrap();
    let without_tables = (0..3).map(|i| premain("fp", i)).min().unwrap();
    let t0 = thread_cpu_time();
    let path = preload_library().to_str().unwrap();
    recorder::unwind::compile::compile_file(path).unwrap_or_else(|e| panic!("{path}: {e:?}"));
    let preload_table_us = (thread_cpu_time() - t0).as_micros() as u64;
    let added = with_tables.saturating_sub(without_tables);
    assert!(
        added < preload_table_us,
        "the unwind tables added {added} µs of CPU before main ({with_tables} vs {without_tables} µs), \
         more than the preload library's table costs alone ({preload_table_us} µs): it was built on the main thread"
    );
    let s = stacks(&dir.join("auto0.jfr"));
    let (main_share, leaf_share, total) = shares(&s, "burn");
    assert!(total >= 100, "{total} samples");
    assert!(main_share >= 0.95 && leaf_share >= 0.9, "{main_share} {leaf_share}: {:?}", &s[..s.len().min(6)]);
    let leaf_only: u64 = s.iter().filter(|(f, _)| f.len() == 1).map(|x| x.1).sum();
    assert_eq!(leaf_only, 0, "leaf-only samples: {s:?}");
}

#[test]
fn cpu_samples_in_a_signal_handler_are_walked_through_the_signal_frame_to_main() {
    // The handler's stack continues, through the kernel's signal frame, into the code the signal
    // interrupted: in_handler <- (handler) <- __restore_rt <- raise's libc frames <-
    // interrupted_here <- main. With frame pointers omitted, nothing but the signal frame's
    // saved registers leads there: before, every such sample stopped at the trampoline.
    let dir = test_dir("cpu_samples_in_a_signal_handler_are_walked_through_the_signal_frame_to_main");
    let prog = build_program("sighandler.c", "gcc", &["-O2", "-g", "-fomit-frame-pointer"]);
    let out =
        record(&dir, &["--period", "1ms", "--repository", "repo", "-o", "sig.jfr"], &[prog.to_str().unwrap(), "300"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let s = stacks(&dir.join("sig.jfr"));
    let in_handler: Vec<&(Vec<String>, u64)> = s.iter().filter(|(f, _)| f.iter().any(|n| n == "in_handler")).collect();
    let total: u64 = in_handler.iter().map(|x| x.1).sum();
    assert!(total >= 100, "{total} samples in in_handler: {s:?}");
    let through = |x: &&(Vec<String>, u64)| {
        let at = |name: &str| x.0.iter().position(|n| n == name);
        // Root first: main, then interrupted_here, then (above the signal frame) in_handler.
        // The trampoline is named even in a stripped libc (its symbol is local).
        let trampoline = at("__restore_rt");
        matches!((at("main"), at("interrupted_here"), trampoline, at("in_handler")),
            (Some(m), Some(i), Some(t), Some(h)) if m < i && i < t && t < h)
    };
    let whole: u64 = in_handler.iter().filter(|x| through(x)).map(|x| x.1).sum();
    assert!(
        whole * 100 >= total * 95,
        "{whole} of {total} handler samples reach interrupted_here and main: {in_handler:?}"
    );
}

/// Allocation samples at the documented rates (about 1 GB/s per thread, 4 threads, at the default
/// interval) from 1000- to 1500-frame stacks, beside wall-clock sampling: every sample taken is
/// written or counted lost (the recording's last `recorder.AllocationStatistics` against its
/// `jdk.ObjectAllocationSample` and `recorder.DataLoss` events), at most 0.1 % are lost, the
/// estimate is within 5 % of what the program allocated (about 8000 samples: one sd is 1.1 %), and
/// the closing lines and the summary name the allocation samples and their loss. A fixed pool of
/// 1024 records lost most of them while the flusher fell behind.
#[test]
fn alloc_samples_of_deep_stacks_at_full_rate_are_all_written_and_the_estimate_holds() {
    let dir = test_dir("alloc_samples_of_deep_stacks_at_full_rate_are_all_written_and_the_estimate_holds");
    let prog = build_program("alloc_storm.c", "gcc", &["-O2", "-pthread"]);
    let interval = format!("{}KiB", recorder::alloc::DEFAULT_INTERVAL / 1024);
    let out = record(
        &dir,
        &["--alloc", &interval, "--wall", "50ms", "--repository", "repo", "-o", "a.jfr"],
        &[prog.to_str().unwrap(), "4096"],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let allocated: u64 = t
        .lines()
        .find_map(|l| l.strip_prefix("allocated ")?.strip_suffix(" bytes")?.parse().ok())
        .unwrap_or_else(|| panic!("the program's total: {t}"));
    let jfr = dir.join("a.jfr");

    let statistics = read_events(&jfr, "recorder.AllocationStatistics");
    let last = statistics.last().unwrap_or_else(|| panic!("no recorder.AllocationStatistics: {t}"));
    let (taken, written, lost, failed) =
        (last.field_i64("taken"), last.field_i64("written"), last.field_i64("lost"), last.field_i64("failed"));
    assert_eq!(taken, written + lost + failed, "taken = written + lost + failed: {taken} {written} {lost} {failed}");
    let samples = read_events(&jfr, "jdk.ObjectAllocationSample");
    assert_eq!(samples.len() as i64, written, "the samples in the file are the ones counted written");
    let lost_reported: i64 = read_events(&jfr, "recorder.DataLoss")
        .iter()
        .filter(|e| e.field("reason").as_str() == Some("allocation sample pool full"))
        .map(|e| e.field_i64("samples"))
        .sum();
    assert_eq!(lost_reported, lost, "every lost sample is reported as recorder.DataLoss");
    assert!(taken > 5000, "{taken} samples taken for {allocated} bytes");
    assert!(lost * 1000 <= taken, "{lost} of {taken} allocation samples lost (more than 0.1 %)");

    let estimate: i64 = samples.iter().map(|e| e.field_i64("weight")).sum();
    let error = (estimate as f64 - allocated as f64) / allocated as f64;
    assert!(error.abs() <= 0.05, "estimated {estimate} bytes, allocated {allocated} ({:+.2} %)", error * 100.0);

    // The closing lines: the preload's counts, then the summary's loss section.
    assert!(
        t.contains(&format!("Allocation samples: {taken} taken, {written} written, {lost} lost")),
        "the closing lines name the allocation samples and their loss: {t}"
    );
    assert!(t.contains(&format!("  Allocation samples: {written} written, {lost} lost (")), "{t}");
}

/// A SIGPROF of the sampler left pending on a thread that blocks every signal must not survive
/// into the image that thread execs: that image starts with SIGPROF's default action
/// (terminate) and unblocks signals before the recorder is back in it. Every exec function of
/// the C library, and execv three times over (the pending signal is there every time: the
/// program burns 300 ms of CPU with SIGPROF blocked at a 1 ms period).
#[test]
fn a_sigprof_left_pending_never_kills_the_program_an_exec_starts() {
    let dir = test_dir("a_sigprof_left_pending_never_kills_the_program_an_exec_starts");
    let prog = build_program("exec_blocked.c", "gcc", &["-O2"]);
    let prog = prog.to_str().unwrap();
    let runs = ["execv", "execv", "execv", "execve", "execvp", "execl", "execlp", "execle", "fexecve", "execveat"];
    for (i, how) in runs.iter().enumerate() {
        let repo = format!("repo{i}");
        let out = record(&dir, &["--period", "1ms", "--repository", &repo, "-o", &format!("{i}.jfr")], &[prog, how]);
        assert_eq!(out.status.code(), Some(0), "run {i} ({how}): {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("child survived"), "run {i} ({how}): {}", text(&out));
        // Both images are in the one recording.
        assert_eq!(recording_dirs(&dir.join(&repo)).len(), 1, "run {i} ({how})");
    }
}

/// An exec that fails after the recording stopped for it (ENOEXEC: an executable file that is no
/// program) gives the caller the error as it was, and the recording goes on in the same
/// directory: the program's work after the failure is sampled.
#[test]
fn a_failed_exec_keeps_its_errno_and_the_recording_goes_on() {
    let dir = test_dir("a_failed_exec_keeps_its_errno_and_the_recording_goes_on");
    let prog = build_program("exec_blocked.c", "gcc", &["-O2"]);
    let out =
        record(&dir, &["--period", "1ms", "--repository", "repo", "-o", "fail.jfr"], &[prog.to_str().unwrap(), "fail"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains(&format!("execv returned -1, errno {}", libc::ENOEXEC)), "{t}");
    assert!(!t.contains("the recording follows it"), "{t}");
    assert_eq!(recording_dirs(&dir.join("repo")).len(), 1, "{t}");
    let s = stacks(&dir.join("fail.jfr"));
    let after: u64 = s.iter().filter(|(f, _)| f.last().is_some_and(|n| n == "after_failed_exec")).map(|x| x.1).sum();
    assert!(after >= 50, "{after} samples in after_failed_exec: {t}");
    jdk_accepts(&[dir.join("fail.jfr")]);
}

/// `busy` (tests/programs/busy.c): burns CPU_MS of CPU in busy_hot_loop.
fn busy() -> PathBuf {
    build_program("busy.c", "gcc", &["-O2"])
}

/// What a wrapper that execs `busy` leaves: the summary's hot functions and `-o` are busy's (our
/// reader and the JDK's `jfr` agree), in one recording directory.
fn assert_the_recording_is_busys(dir: &Path, out: &Output, repo: &str, output: &str) {
    let t = text(out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("busy done"), "{t}");
    assert!(!t.contains("No CPU samples were recorded"), "{t}");
    // The hottest functions, as `record` prints them, start with busy's loop.
    let top = t.split("busy done").last().unwrap_or_default();
    assert!(top.contains("busy_hot_loop"), "{t}");
    assert_eq!(recording_dirs(&dir.join(repo)).len(), 1, "one recording for the process: {t}");
    let file = dir.join(output);
    let (_, on_leaf, total) = shares(&stacks(&file), "busy_hot_loop");
    assert!(total >= 100 && on_leaf > 0.8, "{total} samples, {on_leaf} in busy_hot_loop: {t}");
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", file.to_str().unwrap()]);
    let jdk_samples = printed.matches("jdk.ExecutionSample {").count();
    let jdk_busy = printed.split("jdk.ExecutionSample {").filter(|e| e.contains("busy_hot_loop")).count();
    assert!(
        jdk_busy * 10 >= jdk_samples * 8 && jdk_busy >= 100,
        "jfr print: {jdk_busy} of {jdk_samples} in busy_hot_loop"
    );
    jdk_accepts(&[file]);
}

#[test]
fn a_shell_that_execs_the_program_is_followed_into_it() {
    let dir = test_dir("a_shell_that_execs_the_program_is_followed_into_it");
    let busy = busy();
    let script = format!("exec {} 600", busy.display());
    let out = record(&dir, &["--period", "1ms", "--repository", "repo", "-o", "sh.jfr"], &["sh", "-c", &script]);
    assert_the_recording_is_busys(&dir, &out, "repo", "sh.jfr");
}

#[test]
fn a_script_shim_and_env_are_followed_into_the_program_they_exec() {
    let dir = test_dir("a_script_shim_and_env_are_followed_into_the_program_they_exec");
    let busy = busy();
    // As pyenv's, asdf's and nvm's shims do.
    let shim = dir.join("shim");
    std::fs::write(&shim, format!("#!/bin/sh\nexec {} \"$@\"\n", busy.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = record(&dir, &["--period", "1ms", "--repository", "shim-repo", "-o", "shim.jfr"], &["./shim", "600"]);
    assert_the_recording_is_busys(&dir, &out, "shim-repo", "shim.jfr");
    let out = record(
        &dir,
        &["--period", "1ms", "--repository", "env", "-o", "env.jfr"],
        &["env", "WRAPPED=1", busy.to_str().unwrap(), "600"],
    );
    assert_the_recording_is_busys(&dir, &out, "env", "env.jfr");
}

/// With --follow-children, many children are listed by their count and the busiest one, not
/// one line each.
#[test]
fn many_followed_children_are_listed_by_count_and_the_busiest() {
    let dir = test_dir("many_followed_children_are_listed_by_count_and_the_busiest");
    let busy = busy();
    let b = busy.display();
    // Twelve short children, then a long one whose pid the shell prints; `true` keeps the shell
    // from exec'ing the last one.
    let script = format!("for i in 1 2 3 4 5 6 7 8 9 10 11 12; do {b} 20; done; {b} 500 & echo long=$!; wait; true");
    let out = record(
        &dir,
        &["--period", "1ms", "--follow-children", "--repository", "repo", "-o", "all.jfr"],
        &["sh", "-c", &script],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let long = t.split("long=").nth(1).and_then(|s| s.split_whitespace().next()).expect("the long child's pid");
    let listing: Vec<&str> = t.lines().filter(|l| l.contains("Child processes recorded")).collect();
    assert_eq!(listing.len(), 1, "{t}");
    assert!(listing[0].contains("Child processes recorded (13"), "{t}");
    assert!(listing[0].contains(&format!("busiest: pid {long} ")), "{t}");
    // Nothing else names a child's recording directory.
    let dirs = recording_dirs(&dir.join("repo"));
    assert_eq!(dirs.len(), 14, "{dirs:?}");
    let named = dirs.iter().filter(|d| t.contains(d.to_str().unwrap())).count();
    assert_eq!(named, 2, "the shell's and the busiest child's directories only: {t}");
}

#[test]
fn closing_lines_state_the_recorders_memory_and_the_modules_its_symbol_limit_named_from_symbols() {
    let dir = test_dir("closing_lines_state_the_recorders_memory_and_the_modules_its_symbol_limit_named_from_symbols");
    let prog = build_program("calltree.c", "gcc", &["-O2", "-g", "-pthread"]);
    let prog = prog.to_str().unwrap();
    // The program's own debug info (mapped from its file) does not fit 1 KiB: after the first
    // addresses are named with it, the program is named from its symbol table.
    let out = record(&dir, &["--symbol-memory", "1KiB", "--repository", "repo", "-o", "r.jfr"], &[prog, "300"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let printed = text(&out);
    let memory = printed
        .lines()
        .find(|l| l.contains("Recorder memory (last recorder.Footprint): "))
        .unwrap_or_else(|| panic!("{printed}"));
    for part in ["event buffers", "sampler buffers", "stack table", "unwind tables", "recorder code", "symbolizer heap"]
    {
        assert!(memory.contains(part), "{part}: {memory}");
    }
    assert!(!memory.contains("recorder code 0 bytes"), "the preload library's pages: {memory}");
    let named = printed.lines().find(|l| l.contains("Named from symbols only")).unwrap_or_else(|| panic!("{printed}"));
    assert!(named.contains("1.0 KiB") && named.contains("calltree (~"), "{named}");
    // The same in `summary --json`: by part, the limit and the modules named from symbols.
    let json = recorder_ok(&["summary", "--json", dir.join("r.jfr").to_str().unwrap()]);
    let summary: serde_json::Value = serde_json::from_str(&json).unwrap();
    let footprint = &summary["recorder_footprint"];
    let bytes = |key: &str| footprint[key].as_u64().unwrap_or_else(|| panic!("{key}: {footprint}"));
    assert!(bytes("recorder_code_bytes") > 0 && bytes("stack_table_bytes") > 0, "{footprint}");
    let parts: u64 = ["event_buffers", "sampler_buffers", "allocation_pool", "stack_table", "unwind_tables"]
        .iter()
        .chain(&["recorder_code", "symbolizer_heap", "mapped_debug_files"])
        .map(|p| bytes(&format!("{p}_bytes")))
        .sum();
    assert_eq!(bytes("total_bytes"), parts, "the total is the sum of the parts: {footprint}");
    assert_eq!(bytes("symbolizer_limit_bytes"), 1024, "{footprint}");
    assert!(footprint["symbols_only"].as_str().unwrap().contains("calltree (~"), "{footprint}");
    // The samples still name the hot function (symbol table), and every JDK tool reads the file.
    let (_, leaf_share, total) = shares(&stacks(&dir.join("r.jfr")), "hot_leaf");
    assert!(total > 0 && leaf_share > 0.5, "{leaf_share} of {total}");
    for cmd in ["summary", "metadata"] {
        jdk("jfr", &[cmd, dir.join("r.jfr").to_str().unwrap()]);
    }
}

/// The recorder's own threads are never allocation-sampled: their allocations are the recorder's,
/// not the program's. The wall thread allocates as it walks blocked threads; a `--wall --alloc`
/// recording once gave `recorder-wall` 16 % of the program's allocation estimate. Not yet
/// excluded: the one allocation std's thread start makes (a thread-local destructor registered by
/// its spawn hooks) before the thread runs a statement of ours.
#[test]
fn the_recorders_own_threads_allocations_are_not_sampled() {
    let dir = test_dir("the_recorders_own_threads_allocations_are_not_sampled");
    let prog = build_program("view_mix.c", "gcc", &["-O2", "-pthread", "-fno-omit-frame-pointer"]);
    let out = record(
        &dir,
        &["--alloc", "64B", "--wall", "1ms", "--period", "1ms", "--repository", "repo", "-o", "own.jfr"],
        &[prog.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let printed = recorder_ok(&[
        "print",
        "--json",
        "--events",
        "jdk.ObjectAllocationSample",
        dir.join("own.jfr").to_str().unwrap(),
    ]);
    let mut by_thread: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for line in printed.lines() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let name = event["thread"]["osName"].as_str().unwrap_or("").to_owned();
        let frames = event["stack"]["frames"].as_array().cloned().unwrap_or_default();
        if frames.iter().any(|f| f["method"].as_str().is_some_and(|m| m.contains("ChildSpawnHooks"))) {
            continue;
        }
        *by_thread.entry(name).or_default() += 1;
    }
    let program: u64 = by_thread.iter().filter(|(name, _)| !name.starts_with("recorder-")).map(|(_, n)| n).sum();
    assert!(program > 1000, "the program's samples: {by_thread:?}");
    let own: Vec<_> = by_thread.iter().filter(|(name, _)| name.starts_with("recorder-")).collect();
    assert!(own.is_empty(), "allocation samples on the recorder's threads: {own:?} (all: {by_thread:?})");
}
