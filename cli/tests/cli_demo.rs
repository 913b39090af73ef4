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
