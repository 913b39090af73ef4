//! Helpers of the CLI's integration tests: the `recorder` binary, a JVM-made recording and the
//! parsing of `jfr print --json` values; plus the library's test helpers (recordings read back,
//! the JDK tools as judges), shared from the library's `tests/common/mod.rs`.
#![allow(dead_code)]

#[path = "../../../tests/common/mod.rs"]
mod library;
pub use library::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `librecorder_preload.so`, built once per test binary.
pub fn preload_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_recorder"));
        let profile_dir = exe.parent().unwrap().to_owned();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "recorder-preload", "--quiet"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("running cargo build -p recorder-preload");
        assert!(status.success(), "building the preload library failed");
        let lib = profile_dir.join("librecorder_preload.so");
        assert!(lib.is_file(), "{} missing after the build", lib.display());
        lib
    })
}

pub fn programs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// Compiles one of `tests/programs` (or a path relative to it: `../hostile/NAME.c`) once per test
/// binary with the given compiler and flags.
pub fn build_program(name: &str, compiler: &str, flags: &[&str]) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<std::collections::HashMap<String, PathBuf>>> = OnceLock::new();
    let key = format!("{name} {compiler} {flags:?}");
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(&key) {
        return p.clone();
    }
    // One file per (program, flags): the static build of calltree.c must not replace the other.
    let dir = scratch_dir().join("programs").join(built.len().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(Path::new(name).file_stem().unwrap());
    let src = programs_dir().join(name);
    let mut cmd = Command::new(compiler);
    cmd.args(flags).arg("-o").arg(&out).arg(&src);
    let result = cmd.output().unwrap_or_else(|e| panic!("{compiler} is required: {e}"));
    assert!(result.status.success(), "{compiler} {name}: {}", String::from_utf8_lossy(&result.stderr));
    built.insert(key, out.clone());
    out
}

/// Runs the `recorder` binary.
pub fn recorder(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_recorder")).args(args).output().expect("running the recorder binary")
}

/// Runs `recorder` and insists on success; returns stdout.
pub fn recorder_ok(args: &[&str]) -> String {
    let out = recorder(args);
    assert!(
        out.status.success(),
        "recorder {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("recorder output is UTF-8")
}

/// A scratch directory for this test binary under target/.
pub fn scratch_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(env!("CARGO_CRATE_NAME"));
    std::fs::create_dir_all(&dir).expect("creating the scratch dir");
    dir
}

/// A recording made by a JVM running tests/java/JfrWorkload.java with profile settings and 1 MB
/// chunks: several chunks, custom events with fields of every kind, execution samples. Made once
/// per test binary.
pub fn jvm_recording() -> &'static Path {
    static RECORDING: OnceLock<PathBuf> = OnceLock::new();
    RECORDING.get_or_init(|| {
        let dir = scratch_dir().join("jvm");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the JVM scratch dir");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/JfrWorkload.java");
        let status = Command::new(jdk_tool("javac")).arg("-d").arg(&dir).arg(&source).status().expect("running javac");
        assert!(status.success(), "javac failed on {}", source.display());
        let recording = dir.join("workload.jfr");
        let out = Command::new(jdk_tool("java"))
            .arg(format!("-XX:StartFlightRecording=filename={},settings=profile", recording.display()))
            .arg("-XX:FlightRecorderOptions=maxchunksize=1m")
            .arg("-cp")
            .arg(&dir)
            .args(["JfrWorkload", "8000", "3", "30000", "4"])
            .output()
            .expect("running java");
        assert!(
            out.status.success() && recording.is_file(),
            "the JVM workload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        recording
    })
}

/// Chunk boundaries of a file: (offset, size) of each chunk, from the headers.
pub fn chunk_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut pos = 0;
    while pos + 68 <= data.len() {
        assert_eq!(&data[pos..pos + 4], b"FLR\0", "chunk magic at {pos}");
        let size = u64::from_be_bytes(data[pos + 8..pos + 16].try_into().unwrap()) as usize;
        spans.push((pos, size));
        pos += size;
    }
    assert_eq!(pos, data.len(), "chunks cover the file");
    spans
}

/// `go tool pprof -symbolize=none ARGS` (Go is required: `apt-get install golang-go`; CI installs
/// it in .ci/run); returns stdout.
pub fn go_pprof(args: &[&str]) -> String {
    let go = ["/usr/bin/go", "/usr/lib/go/bin/go", "/usr/local/go/bin/go"]
        .iter()
        .map(PathBuf::from)
        .chain(std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).map(|d| d.join("go")).collect::<Vec<_>>()))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("`go` was not found: the pprof tests read our profiles with `go tool pprof` (apt-get install golang-go)")
        });
    let out = std::process::Command::new(go)
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .output()
        .expect("running go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "go tool pprof {args:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The `N` of `of N total` in `go tool pprof -top` output.
pub fn pprof_total(top: &str) -> String {
    let line = top.lines().find(|l| l.starts_with("Showing nodes accounting for")).unwrap_or_else(|| panic!("{top}"));
    line.rsplit_once(" of ").unwrap().1.trim_end_matches(" total").to_owned()
}

/// An ISO-8601 duration as `jfr print --json` writes it (`PT0.000001S`, `PT1M2.5S`, `PT0S`) to ns.
pub fn parse_iso_duration_nanos(s: &str) -> i64 {
    let rest = s.strip_prefix("PT").unwrap_or_else(|| panic!("not a duration: {s}"));
    let mut total: f64 = 0.0;
    let mut number = String::new();
    for c in rest.chars() {
        match c {
            'H' => total += number.parse::<f64>().unwrap() * 3600e9,
            'M' => total += number.parse::<f64>().unwrap() * 60e9,
            'S' => total += number.parse::<f64>().unwrap() * 1e9,
            _ => {
                number.push(c);
                continue;
            }
        }
        number.clear();
    }
    total.round() as i64
}

#[test]
fn iso_helpers_parse_jfr_output() {
    assert_eq!(epoch_nanos_of_iso("1970-01-01T00:00:01.5Z"), 1_500_000_000);
    assert_eq!(epoch_nanos_of_iso("2026-11-29T16:59:14.957127984Z"), 1_795_971_554_957_127_984);
    assert_eq!(parse_iso_duration_nanos("PT0.000001S"), 1_000);
    assert_eq!(parse_iso_duration_nanos("PT1M2.5S"), 62_500_000_000);
}

/// `python3 otlp_judge.py FILE [--json]`: its report, or a failed test with its message (a missing
/// `opentelemetry-proto` fails too: the judge is required, not optional).
pub fn otlp_judge(file: &Path, json: bool) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_judge.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script).arg(file);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("running python3 (required: it runs the OTLP judge)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named") {
        panic!("the OTLP judge needs PyPI's opentelemetry-proto: pip install opentelemetry-proto\n{stderr}");
    }
    assert!(out.status.success(), "the OTLP judge rejects {}: {stderr}", file.display());
    serde_json::from_slice(&out.stdout).unwrap()
}
