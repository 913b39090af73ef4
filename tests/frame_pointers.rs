//! Missing frame pointers are never silent: a program built without them (release mode,
//! `-C force-frame-pointers=no`, its own cargo build of tests/fixtures/frame_pointers) says so
//! once on stderr, with the fix, and once in its recording (`recorder.Diagnostic`), naming what
//! the chosen unwinder makes of it; the same code built with frame pointers (this test binary)
//! says nothing and records whole stacks. Both recordings carry the stack shapes in
//! `recorder.SamplerStatistics`.

#[path = "fixtures/frame_pointers/main.rs"]
mod fixture;

use recorder::consumer::EventStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CHILD_ENV: &str = "RECORDER_FRAME_POINTER_CHILD";
const WARNING: &str = "recorder: warning:";

/// What a run of the fixture left: its stderr and what its recording says.
#[derive(Debug)]
struct Outcome {
    stderr: String,
    /// `recorder.Diagnostic` events: (code, message, fix).
    diagnostics: Vec<(String, String, String)>,
    /// Sums of `recorder.SamplerStatistics`: samplesWritten, leafOnlyStacks, truncatedStacks.
    written: i64,
    leaf_only: i64,
    truncated: i64,
    /// Frames of each `jdk.ExecutionSample` stack and of each `fixture.Step` stack (0: none).
    sample_depths: Vec<usize>,
    step_depths: Vec<usize>,
    /// Of the samples taken in the workload's leaf function `spin` (whole walks, not marked
    /// truncated): how many `nested` frames (its callers, seven of them) each one's stack holds.
    /// Without frame pointers only the unwind tables can find them.
    spin_callers: Vec<usize>,
}

fn read(output: Output, repository: &Path) -> Outcome {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "the fixture failed ({}):\n{stderr}", output.status);
    let mut stream = EventStream::open_repository(repository).unwrap();
    stream.follow(false);
    let mut outcome = Outcome {
        stderr,
        diagnostics: Vec::new(),
        written: 0,
        leaf_only: 0,
        truncated: 0,
        sample_depths: Vec::new(),
        step_depths: Vec::new(),
        spin_callers: Vec::new(),
    };
    for event in stream.iter() {
        let e = event.unwrap_or_else(|e| panic!("reading {}: {e}", repository.display()));
        let depth = e.stack_trace().map_or(0, |s| s.frames.len());
        match e.type_name() {
            "recorder.Diagnostic" => {
                let text = |f: &str| e.field_str(f).unwrap_or_default().to_owned();
                outcome.diagnostics.push((text("code"), text("message"), text("fix")));
            }
            "recorder.SamplerStatistics" => {
                outcome.written += e.field_i64("samplesWritten").expect("samplesWritten");
                outcome.leaf_only += e.field_i64("leafOnlyStacks").expect("leafOnlyStacks");
                outcome.truncated += e.field_i64("truncatedStacks").expect("truncatedStacks");
            }
            "jdk.ExecutionSample" => {
                outcome.sample_depths.push(depth);
                let frames = e.stack_trace().map(|s| s.frames.as_slice()).unwrap_or_default();
                // Truncated stacks are marked: those of a thread sampled before its stack bounds
                // were known (the leaf alone) or cut by the depth limit. The others are whole walks.
                let whole_walk = e.stack_trace().is_some_and(|s| !s.truncated);
                // `spin` is the leaf, or the caller of an arithmetic helper in an unoptimized build.
                // A native frame's method is the whole function name (`frame_pointers::fixture::spin`
                // here, `frame_pointer_fixture::spin` in the fixture's own build): its last segment.
                let named = |method: &str, name: &str| method.rsplit("::").next() == Some(name);
                if let Some(at) = frames.iter().take(2).position(|f| named(&f.method, "spin")).filter(|_| whole_walk) {
                    outcome.spin_callers.push(frames[at..].iter().filter(|f| named(&f.method, "nested")).count());
                }
            }
            "fixture.Step" => outcome.step_depths.push(depth),
            _ => {}
        }
    }
    outcome
}

/// Builds the fixture without frame pointers: its own workspace (so the repository's
/// `.cargo/config.toml`, which asks for them, is overridden by RUSTFLAGS) and target directory,
/// offline with this workspace's lock file. Release mode for the fixture and the recorder (whose
/// probe is the code under test); other dependencies unoptimized, which halves the build.
fn build_without_frame_pointers() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("frame-pointer-fixture");
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = format!(
        "[package]\nname = \"frame-pointer-fixture\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [[bin]]\nname = \"frame-pointer-fixture\"\npath = {main:?}\n\n\
         [dependencies]\nrecorder = {{ path = {root:?} }}\nlibc = \"0.2\"\n\n\
         [profile.release]\ndebug = false\n\n\
         [profile.release.package.\"*\"]\nopt-level = 0\n\n\
         [profile.release.package.recorder]\nopt-level = 3\n\n[workspace]\n",
        main = root.join("tests/fixtures/frame_pointers/main.rs"),
        root = root,
    );
    write_if_changed(&dir.join("Cargo.toml"), manifest.as_bytes());
    if !dir.join("Cargo.lock").exists() {
        std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    }
    let out = Command::new(option_env!("CARGO").unwrap_or("cargo"))
        .args(["build", "--release", "--offline", "--quiet"])
        .current_dir(&dir)
        .env("RUSTFLAGS", "-C force-frame-pointers=no")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .output()
        .expect("running cargo");
    assert!(out.status.success(), "building the fixture failed:\n{}", String::from_utf8_lossy(&out.stderr));
    dir.join("target/release/frame-pointer-fixture")
}

fn write_if_changed(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).ok().as_deref() != Some(bytes) {
        std::fs::write(path, bytes).unwrap();
    }
}

/// Built without frame pointers, the program says so once, and its CPU samples keep their callers
/// with the default unwinder (`Unwinder::Auto` walks the program's `.eh_frame` tables where frame
/// pointers are missing) but lose them with `Unwinder::FramePointer`; the message says which.
/// Event stacks (a frame-pointer walk on the committing thread) are empty either way.
#[test]
fn missing_frame_pointers_are_said_once_on_stderr_and_in_the_recording() {
    let program = build_without_frame_pointers();
    for unwinder in ["auto", "fp"] {
        let repository = tempfile::tempdir().unwrap();
        let output = Command::new(&program)
            .arg(repository.path())
            .arg(unwinder)
            .env("RECORDER_CONTROL", "off")
            .output()
            .unwrap();
        let run = read(output, repository.path());

        assert_eq!(run.stderr.matches(WARNING).count(), 1, "{unwinder}: one warning on stderr:\n{}", run.stderr);
        assert!(run.stderr.contains("frame pointers"), "{}", run.stderr);
        assert!(run.stderr.contains("force-frame-pointers=yes"), "the fix is named:\n{}", run.stderr);
        assert!(run.stderr.contains(".cargo/config.toml"), "the permanent fix is named:\n{}", run.stderr);

        assert_eq!(run.diagnostics.len(), 1, "{unwinder}: one diagnostic event: {:?}", run.diagnostics);
        let (code, message, fix) = &run.diagnostics[0];
        assert_eq!(code, "missing-frame-pointers");
        assert!(message.contains("without frame pointers") && message.contains("event stacks stay empty"), "{message}");
        assert!(fix.contains("force-frame-pointers=yes") && fix.contains(".cargo/config.toml"), "{fix}");

        assert_eq!(run.step_depths.len(), 10);
        assert!(!run.spin_callers.is_empty(), "{unwinder}: the workload was sampled: {run:?}");
        assert!(run.written > 0 && run.written == run.sample_depths.len() as i64, "{run:?}");
        if unwinder == "auto" {
            // The unwind tables find every caller of the leaf.
            assert!(message.contains("DWARF unwind tables"), "{message}");
            assert!(run.spin_callers.iter().all(|&n| n == 7), "auto: whole stacks by the tables: {run:?}");
        } else {
            // What the user would otherwise not have noticed: the samples in the leaf function lack
            // its callers.
            assert!(message.contains("lose the program's own callers"), "{message}");
            assert!(run.spin_callers.iter().all(|&n| n < 7), "fp: callers were found without frame pointers: {run:?}");
        }
        let one_frame = run.sample_depths.iter().filter(|&&d| d <= 1).count();
        eprintln!(
            "without frame pointers, unwinder {unwinder}: {} samples, {one_frame} of one frame; statistics: {} \
             written, {} leaf-only, {} truncated; most nested callers in a sample of spin: {:?}; event stack depths \
             {:?}",
            run.sample_depths.len(),
            run.written,
            run.leaf_only,
            run.truncated,
            run.spin_callers.iter().max(),
            run.step_depths
        );
    }
}

#[test]
fn a_build_with_frame_pointers_says_nothing_and_keeps_whole_stacks() {
    let repository = tempfile::tempdir().unwrap();
    // The same fixture code, in this test binary (built with the repository's frame pointers),
    // in a child process: its stderr is its own, and no other test's recording is in the way.
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["child_runs_the_fixture", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, repository.path())
        .env("RECORDER_CONTROL", "off")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("1 passed"), "the child ran the fixture");
    let run = read(output, repository.path());

    assert!(!run.stderr.contains(WARNING), "no warning:\n{}", run.stderr);
    assert!(run.diagnostics.is_empty(), "no diagnostic: {:?}", run.diagnostics);
    assert_eq!(run.step_depths.len(), 10);
    assert!(run.step_depths.iter().all(|&d| d >= 3), "events have their stacks: {:?}", run.step_depths);
    // Every sample in the leaf function has its seven `nested` callers.
    assert!(!run.spin_callers.is_empty(), "the workload was sampled: {run:?}");
    assert!(run.spin_callers.iter().all(|&n| n == 7), "whole stacks: {:?}", run.spin_callers);
    // Every sample is counted in the statistics, those the recording's stop wrote included.
    assert!(run.written > 0 && run.written == run.sample_depths.len() as i64, "{run:?}");
    assert!(run.leaf_only * 10 <= run.written, "few one-frame stacks: {run:?}");
    // No stack reaches the depth limit; a walk that ends early is marked truncated too (see
    // `unwind/walk.rs`), as the leaf-only stack of a thread sampled before its bounds were known is.
    assert!(run.truncated <= run.leaf_only, "no stack reaches the depth limit: {run:?}");
}

/// Runs only in the child of `a_build_with_frame_pointers_says_nothing_and_keeps_whole_stacks`.
#[test]
fn child_runs_the_fixture() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        fixture::run(Path::new(&dir), recorder::Unwinder::Auto);
    }
}
