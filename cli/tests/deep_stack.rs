//! `recorder record` on a deep stack: a C program whose main thread recurses 4000 frames (frame
//! pointers kept) and burns CPU at the bottom, sampled every millisecond of CPU. Each sample's
//! walk used to read the whole stack (the SIGPROF handler's walk is bounded by the depth policy,
//! `recorder::unwind::sample_walk_limit`): a handler longer than the period is followed by the
//! next signal at once, and the program never got to finish. A run that hangs is killed after
//! 90 s and named; the samples at the bottom of the recursion keep the innermost 128 frames and
//! are marked truncated.

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a run may take before it counts as a hang (bare: well under a second).
const HANG_LIMIT: Duration = Duration::from_secs(90);

const DEPTH: &str = "4000";
/// Millions of iterations at the bottom of the recursion (about 0.1-0.2 s bare).
const WORK: &str = "300";

fn program() -> PathBuf {
    build_program("deep_recursion.c", "gcc", &["-O2", "-fno-omit-frame-pointer"])
}

/// Runs `cmd` in its own process group, killing the group and failing if it runs past
/// [`HANG_LIMIT`]; returns its exit status and stdout.
fn run_bounded(mut cmd: Command, what: &str) -> (std::process::ExitStatus, String) {
    let out = std::env::temp_dir().join(format!("deep-stack-{}-{what}.out", std::process::id()));
    let mut child = cmd
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > HANG_LIMIT {
            // SAFETY: kill has no memory preconditions; the group is the child's own.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("{what} still running after {HANG_LIMIT:?}: the sampler stalls the program");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    (status, stdout)
}

fn samples(jfr: &Path) -> Vec<(Vec<String>, bool)> {
    let data = bytes::Bytes::from(std::fs::read(jfr).unwrap());
    let mut out = Vec::new();
    for chunk in jfr_format::chunks(data) {
        let chunk = chunk.unwrap();
        let Some(class) = chunk.metadata().class_by_name("jdk.ExecutionSample").cloned() else { continue };
        for event in chunk.events() {
            let event = event.unwrap();
            if event.type_id != class.id {
                continue;
            }
            if let Some(s) = chunk.event_stack_trace(&event).unwrap() {
                out.push((s.frames.iter().map(|f| f.qualified_name()).collect(), s.truncated));
            }
        }
    }
    out
}

#[test]
fn a_4000_deep_recursion_sampled_every_millisecond_finishes_with_truncated_stacks() {
    preload_library();
    let prog = program();
    let (status, bare) = run_bounded(
        {
            let mut c = Command::new(&prog);
            c.args([DEPTH, WORK]);
            c
        },
        "bare",
    );
    assert!(status.success(), "bare run: {status}");

    let dir = scratch_dir().join("tests").join("deep_stack");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let jfr = dir.join("deep.jfr");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_recorder"));
    cmd.current_dir(&dir)
        .args(["record", "--period", "1ms", "--repository", "repo", "-o", jfr.to_str().unwrap(), "--"])
        .arg(&prog)
        .args([DEPTH, WORK])
        .env_remove("LD_PRELOAD");
    let (status, recorded) = run_bounded(cmd, "recorded");
    assert!(status.success(), "recorded run: {status}");
    // The program's line, then the recorder's summary.
    assert_eq!(recorded.lines().next(), bare.lines().next(), "the program's output:\n{recorded}");

    // At the bottom of the recursion: the innermost 128 frames (the default depth), truncated.
    let all = samples(&jfr);
    let is_deep = |f: &String| f.ends_with("deep_frame");
    let at_bottom: Vec<&(Vec<String>, bool)> =
        all.iter().filter(|(frames, _)| frames.len() > 100 && frames.iter().take(100).all(is_deep)).collect();
    assert!(!at_bottom.is_empty(), "no sample at the bottom of the recursion among {} samples", all.len());
    for (frames, truncated) in at_bottom {
        assert_eq!(frames.len(), 128, "{:?}", &frames[..4]);
        assert!(truncated, "a cut stack is marked truncated");
    }
}
