//! `recorder record` on programs that bring their own allocator, preload another one, load and
//! unload plugins in a loop, or run fibers on stacks they free and reuse: the program runs as it
//! does without the recorder (exit status, output), and `--alloc` either samples its
//! allocations or says why it cannot.
//!
//! jemalloc (Debian's `libjemalloc2`) stands for any allocator preloaded with the program.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `recorder record ARGS -- CMD...` in `cwd` with `LD_PRELOAD` set to `preload` (or unset).
fn record(cwd: &Path, preload: Option<&Path>, args: &[&str], cmd: &[&str]) -> Output {
    preload_library();
    let mut c = Command::new(env!("CARGO_BIN_EXE_recorder"));
    c.current_dir(cwd).arg("record").args(args).arg("--").args(cmd).env_remove("LD_PRELOAD");
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    c.output().expect("running recorder record")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn test_dir(test: &str) -> PathBuf {
    let dir = scratch_dir().join("tests").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Debian's jemalloc (`apt-get install libjemalloc2`; `.ci/run` installs it).
fn jemalloc() -> PathBuf {
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
        .iter()
        .map(|d| Path::new(d).join("libjemalloc.so.2"))
        .find(|p| p.is_file())
        .expect("libjemalloc.so.2 is required (apt-get install libjemalloc2)")
}

/// The `recorder.Diagnostic` events of a recording, as `jfr print` shows them.
fn diagnostics(jfr: &Path) -> String {
    jdk("jfr", &["print", "--events", "recorder.Diagnostic", jfr.to_str().unwrap()])
}

fn allocation_samples(jfr: &Path) -> u64 {
    jfr_summary_counts(jfr).get("jdk.ObjectAllocationSample").copied().unwrap_or(0)
}

#[test]
fn a_program_with_its_own_malloc_keeps_it_for_reallocarray_and_alloc_says_it_samples_nothing() {
    let dir = test_dir("own_malloc");
    let prog = build_program("own_allocator.c", "gcc", &["-O2"]);
    let prog = prog.to_str().unwrap();
    let bare = Command::new(prog).output().unwrap();
    assert_eq!(bare.status.code(), Some(0), "{}", text(&bare));
    let expected = "reallocarray kept: hello\naligned_alloc: aligned\n";
    assert_eq!(stdout(&bare), expected);

    // Without --alloc: reallocarray reached glibc's realloc with the program's block (SIGABRT).
    let out = record(&dir, None, &["--repository", "repo"], &[prog]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).starts_with(expected), "{}", text(&out));

    let out = record(&dir, None, &["--alloc", "4KiB", "--repository", "repo", "-o", "own.jfr"], &[prog]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).starts_with(expected), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("malloc is defined by the program itself") && stderr.contains("not sampled"), "{stderr}");
    let jfr = dir.join("own.jfr");
    let said = diagnostics(&jfr);
    assert!(said.contains("allocator-not-interposed") && said.contains("the program itself"), "{said}");
    // Of the program's calls only aligned_alloc (glibc's: the program does not define it)
    // reaches the library, and may be sampled.
    assert!(allocation_samples(&jfr) <= 1, "{} allocation samples", allocation_samples(&jfr));
}

#[test]
fn jemalloc_preloaded_with_the_program_gets_its_blocks_back_and_alloc_samples_through_it() {
    let dir = test_dir("jemalloc");
    let jemalloc = jemalloc();
    let api = build_program("alloc_api.c", "gcc", &["-O2", "-pthread"]);
    let api = api.to_str().unwrap();
    // Without --alloc the recorder's library comes after jemalloc in LD_PRELOAD, with --alloc
    // before it: both orders.
    for args in [&["--repository", "repo"][..], &["--alloc", "64KiB", "--repository", "repo"][..]] {
        let out = record(&dir, Some(&jemalloc), args, &[api]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
        assert!(stdout(&out).starts_with("alloc api errors=0\n"), "{args:?}: {}", text(&out));
    }

    // 2 000 000 allocations of 100 to 1099 bytes (1.2 GB): about 18 000 samples at 64 KiB, all
    // through jemalloc's malloc.
    let lp = build_program("../hostile/malloc_loop.c", "gcc", &["-O2"]);
    let out = record(
        &dir,
        Some(&jemalloc),
        &["--alloc", "64KiB", "--repository", "repo", "-o", "je.jfr"],
        &[lp.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).starts_with("checksum "), "{}", text(&out));
    let jfr = dir.join("je.jfr");
    let samples = allocation_samples(&jfr);
    assert!(samples > 9_000, "{samples} allocation samples under jemalloc (about 18 000 expected)");
    assert!(!diagnostics(&jfr).contains("allocator-not-interposed"));

    // Preloaded by hand with jemalloc first: nothing can be sampled, and the recording says so.
    let lib = preload_library();
    let out = Command::new(&lp)
        .current_dir(&dir)
        .env("LD_PRELOAD", format!("{} {}", jemalloc.display(), lib.display()))
        .env("RECORDER_OPTIONS", "alloc=65536,repository=repo,output=hand.jfr")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("libjemalloc.so.2") && stderr.contains("not sampled"), "{stderr}");
    let said = diagnostics(&dir.join("hand.jfr"));
    assert!(said.contains("allocator-not-interposed") && said.contains("libjemalloc.so.2"), "{said}");
}

#[test]
fn plugins_loaded_and_unloaded_in_a_loop_are_never_written_after_dlclose() {
    let dir = test_dir("dlopen_churn");
    let plugin = build_program(
        "dlopen_plugin.c",
        "gcc",
        &["-O2", "-shared", "-fPIC", "-pthread", "-Wl,-z,norelro", "-Wl,-z,lazy"],
    );
    let churn = build_program("dlopen_churn.c", "gcc", &["-O2", "-pthread"]);
    // Every 100 ms in which modules were loaded the recorder rescans them: 80 rescans, each
    // racing the loop's dlclose.
    let out = record(
        &dir,
        None,
        &["--period", "1ms", "--repository", "repo"],
        &[churn.to_str().unwrap(), plugin.to_str().unwrap(), "8"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).starts_with("dlopen/dlclose cycles done: many\n"), "{}", text(&out));
}

#[test]
fn fibers_on_freed_and_reused_stacks_allocate_while_sampled_at_a_small_interval() {
    let dir = test_dir("fibers");
    let prog = build_program("fibers.c", "gcc", &["-O2", "-fno-omit-frame-pointer"]);
    let out =
        record(&dir, None, &["--alloc", "1KiB", "--repository", "repo", "-o", "fibers.jfr"], &[prog.to_str().unwrap()]);
    // SIGSEGV before: a walk read the fiber stack made inaccessible, within a stale cached range.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).starts_with("fibers done 0\n"), "{}", text(&out));
    let jfr = dir.join("fibers.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    // 200 x 200 + 2 x 20 000 allocations of 64 to 575 bytes (about 26 MB) at 1 KiB.
    let collapsed = recorder_ok(&["dump", "--format", "collapsed", "--type", "alloc", jfr.to_str().unwrap()]);
    let in_fibers = collapsed.lines().filter(|l| l.contains("allocate_in_fiber")).count();
    assert!(in_fibers > 0, "no allocation stack through allocate_in_fiber: {collapsed}");
    assert!(allocation_samples(&jfr) > 10_000, "{} samples", allocation_samples(&jfr));
}
