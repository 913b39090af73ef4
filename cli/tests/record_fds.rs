//! `recorder record -- CMD` on programs that take the descriptor table for themselves early in
//! `main` (`closefrom(3)`, `close_range`, a loop closing 3..1023, `dup2` over low numbers),
//! while the recorder holds descriptors opened before `main`: the program's files hold exactly
//! the bytes it wrote (compared with a run without the recorder), it exits 0, and the recording
//! is still read and says what the program took.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn run(cwd: &Path, record: Option<&[&str]>, prog: &Path, mode: &str) -> Output {
    let mut cmd = match record {
        Some(args) => {
            preload_library();
            let mut c = Command::new(env!("CARGO_BIN_EXE_recorder"));
            c.arg("record").args(args).arg("--");
            c
        }
        None => Command::new(prog),
    };
    if record.is_some() {
        cmd.arg(prog);
    }
    cmd.arg(mode).current_dir(cwd).env_remove("LD_PRELOAD").output().expect("running the program")
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("data."))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    out.sort();
    out
}

fn check(mode: &str) {
    let prog = build_program("closes_fds.c", "gcc", &["-O2", "-pthread"]);
    let root = scratch_dir().join(format!("fds-{mode}"));
    let _ = std::fs::remove_dir_all(&root);
    let bare = root.join("bare");
    let recorded = root.join("recorded");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::create_dir_all(&recorded).unwrap();
    let expected = run(&bare, None, &prog, mode);
    assert!(expected.status.success(), "bare run of {mode}: {expected:?}");
    let args = ["--period", "1ms", "--wall", "1ms", "--alloc", "16KiB", "--repository", "repo", "-o", "out.jfr"];
    let out = run(&recorded, Some(&args), &prog, mode);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{mode} under the recorder: {}\n{stderr}", out.status);
    // The recorder's own summary follows the program's output.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want_stdout = String::from_utf8_lossy(&expected.stdout);
    assert!(stdout.starts_with(&*want_stdout), "{mode}: stdout {stdout}");
    let want = files(&bare);
    assert_eq!(want.len(), 8);
    let got = files(&recorded);
    for ((name, bytes), (got_name, got_bytes)) in want.iter().zip(&got) {
        assert_eq!(name, got_name);
        assert!(
            bytes == got_bytes,
            "{mode}: {name} holds {} bytes, the bare run wrote {}:\n{}",
            got_bytes.len(),
            bytes.len(),
            String::from_utf8_lossy(got_bytes)
        );
    }
    assert_eq!(got.len(), want.len(), "{mode}: files");
    assert!(!stderr.contains("panicked"), "{mode}: {stderr}");
    // The recording is read whole, and its samples add up.
    let summary = recorder_ok(&["summary", recorded.join("out.jfr").to_str().unwrap()]);
    assert!(summary.contains("jdk.ExecutionSample"), "{mode}: {summary}");
}

#[test]
fn closefrom_3_in_main() {
    check("closefrom");
}

#[test]
fn close_range_in_main() {
    check("close_range");
}

#[test]
fn closing_3_to_1023_in_a_loop() {
    check("loop");
}

#[test]
fn dup2_over_low_numbers() {
    check("dup2");
}
