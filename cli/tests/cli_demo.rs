//! `recorder demo`, the README's first command: it records, writes what it says it writes, and
//! the files read back (our `print`, the JDK's `jfr summary`).

mod common;

use common::*;

#[test]
fn demo_records_and_its_files_read_back_with_cut_stacks_marked() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("repo");
    let file = dir.path().join("demo.jfr");
    // Both depth limits: samples deeper than 8 frames keep 4 + <elided:K> + 4.
    let stdout = recorder_ok(&[
        "demo",
        "--seconds",
        "1",
        "--threads",
        "2",
        "--period",
        "1ms",
        "--stack-depth",
        "4",
        "--stack-depth-outer",
        "4",
        "--repository",
        base.to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ]);
    for needle in ["Recorded ", "CPU samples: ", "Repository: ", "demo.Request", "Hottest functions", "Flame graph: "] {
        assert!(stdout.contains(needle), "demo output has {needle:?}:\n{stdout}");
    }
    let svg = dir.path().join("demo.jfr.svg");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"), "{} is an SVG", svg.display());

    let counts = jfr_summary_counts(&file);
    assert!(counts.get("demo.Request").copied().unwrap_or(0) > 0, "jfr summary sees the requests: {counts:?}");
    let printed = recorder_ok(&["print", "--events", "jdk.ExecutionSample", file.to_str().unwrap()]);
    assert!(printed.contains("<elided:"), "recorder print shows the marker of cut stacks");
}

/// The demo ends with "Next:" commands; each runs as printed (in the demo's working directory,
/// with the binary not on PATH, as after `cargo run --release -- demo`).
#[test]
fn the_next_commands_the_demo_prints_run_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .env("TMPDIR", &tmp)
            .current_dir(dir.path())
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{program} {args:?} failed ({}):\n{stdout}\n{stderr}", out.status);
        stdout
    };
    let demo = run(env!("CARGO_BIN_EXE_recorder"), &["demo", "--seconds", "1", "--threads", "2"]);
    let next: Vec<&str> = demo
        .lines()
        .skip_while(|l| !l.starts_with("Next: "))
        .take_while(|l| l.starts_with("Next: ") || l.starts_with("      "))
        .map(|l| l.trim_start_matches("Next: ").trim())
        .collect();
    assert_eq!(next.len(), 2, "two commands after Next:\n{demo}");
    let printed = run("sh", &["-c", next[0]]);
    assert!(printed.contains("demo.Request {"), "{} prints the requests:\n{printed}", next[0]);
    let summary = run("sh", &["-c", next[1]]);
    assert!(summary.contains("demo.Request"), "{} counts the requests:\n{summary}", next[1]);
    assert!(demo.contains("cargo install --path cli"), "how to put recorder on PATH:\n{demo}");
}
