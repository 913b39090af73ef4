//! `recorder dump --format otlp|otlp-json`, judged by the OpenTelemetry project's own Python types
//! (PyPI `opentelemetry-proto`, required: `pip install opentelemetry-proto`; CI installs it in
//! .ci/run): `otlp_judge.py` decodes every request, checks that every index resolves, and reports
//! what is compared here with the JDK's reading of the same recording.

mod common;

use common::*;
use recorder::tracing::RecorderLayer;
use recorder::Recorder;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

struct Made {
    /// Keeps the files.
    _dir: tempfile::TempDir,
    /// The recording's directory (named with this process's id).
    repo: PathBuf,
    /// The recording in one file.
    file: PathBuf,
}

/// A thread sampled every millisecond, inside a `request` span and outside any span.
fn made() -> &'static Made {
    static MADE: OnceLock<Made> = OnceLock::new();
    MADE.get_or_init(|| {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        // The layer before the recorder, as cli_spans.rs explains.
        let subscriber = tracing_subscriber::registry().with(RecorderLayer::new());
        let rec = Recorder::builder()
            .repository(dir.path().join("repo"))
            .sampling_period(Duration::from_millis(1))
            .flush_interval(Duration::from_millis(100))
            .max_chunk_age(Duration::from_millis(300))
            .start()
            .unwrap();
        let repo = rec.repository_dir().to_owned();
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("otlp-worker".into())
                .spawn_scoped(s, || {
                    rec.register_current_thread().unwrap();
                    tracing::subscriber::with_default(subscriber, || {
                        let _r = tracing::info_span!("request").entered();
                        spin_cpu(Duration::from_millis(400));
                    });
                    spin_cpu(Duration::from_millis(200));
                })
                .unwrap();
        });
        rec.stop().unwrap();
        let file = dir.path().join("whole.jfr");
        recorder_ok(&["dump", s(&repo), "-o", s(&file)]);
        Made { _dir: dir, repo, file }
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The JDK's reading of the CPU samples: (per thread name, count; first and last start, epoch ns).
fn jdk_cpu_samples(file: &Path) -> (BTreeMap<String, u64>, i64, i64) {
    let (threads, _, first, last) = jdk_cpu_samples_and_thread_ids(file);
    (threads, first, last)
}

/// [`jdk_cpu_samples`] with each thread name's OS thread ids.
fn jdk_cpu_samples_and_thread_ids(file: &Path) -> (BTreeMap<String, u64>, BTreeMap<String, Vec<i64>>, i64, i64) {
    let v: serde_json::Value =
        serde_json::from_str(&jfr_ok(&["print", "--json", "--events", "jdk.ExecutionSample", s(file)])).unwrap();
    let mut threads = BTreeMap::new();
    let mut ids: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for e in v["recording"]["events"].as_array().unwrap() {
        let t = &e["values"]["sampledThread"];
        let name = t["javaName"].as_str().or(t["osName"].as_str()).unwrap().to_owned();
        let id = t["osThreadId"].as_i64().unwrap();
        let known = ids.entry(name.clone()).or_default();
        if !known.contains(&id) {
            known.push(id);
        }
        *threads.entry(name).or_insert(0) += 1;
        let at = epoch_nanos_of_iso(e["values"]["startTime"].as_str().unwrap());
        first = first.min(at);
        last = last.max(at);
    }
    (threads, ids, first, last)
}

fn profile<'a>(report: &'a serde_json::Value, type_name: &str) -> &'a serde_json::Value {
    report["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == type_name)
        .unwrap_or_else(|| panic!("no {type_name} profile in {report}"))
}

// Every CPU sample is in the request once, with its time, thread and span; the profile's values
// are its sampling period of CPU time each.
#[test]
fn otlp_export_is_read_by_the_official_opentelemetry_types() {
    let m = made();
    let out = tempfile::tempdir().unwrap();
    let pb = out.path().join("out.pb");
    recorder_ok(&["dump", s(&m.repo), "--format", "otlp", "--service-name", "otlp-test", "-o", s(&pb)]);
    let report = otlp_judge(&pb, false);
    let (threads, thread_ids, first, last) = jdk_cpu_samples_and_thread_ids(&m.file);
    let count: u64 = threads.values().sum();
    assert!(count > 0);
    let cpu = profile(&report, "cpu");
    assert_eq!(cpu["unit"], "nanoseconds");
    assert_eq!(cpu["period"], 1_000_000, "the 1 ms sampling period");
    assert_eq!(cpu["values"], count, "one value per jdk.ExecutionSample");
    assert_eq!(cpu["sum"], count * 1_000_000, "count x period");
    let by_thread: BTreeMap<String, u64> = serde_json::from_value(cpu["threads"].clone()).unwrap();
    assert_eq!(by_thread, threads, "thread names (and their samples) as the JDK reads them");
    let ids: BTreeMap<String, Vec<i64>> = serde_json::from_value(cpu["thread_ids"].clone()).unwrap();
    assert_eq!(ids, thread_ids, "thread.id: the OS thread id the JDK reads");
    assert_eq!(cpu["min_timestamp"], first, "the first sample's time");
    assert_eq!(cpu["max_timestamp"], last, "the last sample's time");
    let (start, end) = (cpu["time_unix_nano"].as_i64().unwrap(), cpu["duration_nano"].as_i64().unwrap());
    assert!(start <= first && last <= start + end, "samples lie within the recording");
    assert!(cpu["spans"]["request"].as_u64().unwrap() > 0, "samples taken in the span name it: {cpu}");
    assert!(cpu["spans"]["request"].as_u64().unwrap() < count, "samples outside the span name none");
    assert!(cpu["functions"].as_object().unwrap().keys().any(|f| f.contains("spin_cpu")), "{cpu}");
    assert_eq!(report["resource"]["service.name"], "otlp-test");
    assert_eq!(report["resource"]["process.pid"], std::process::id());
}

// OTLP/JSON carries the same request.
#[test]
fn otlp_json_is_the_same_request() {
    let m = made();
    let out = tempfile::tempdir().unwrap();
    let (pb, json) = (out.path().join("out.pb"), out.path().join("out.json"));
    recorder_ok(&["dump", s(&m.file), "--format", "otlp", "-o", s(&pb)]);
    recorder_ok(&["dump", s(&m.file), "--format", "otlp-json", "-o", s(&json)]);
    let (from_pb, from_json) = (otlp_judge(&pb, false), otlp_judge(&json, true));
    assert_eq!(from_pb, from_json);
    assert_eq!(from_pb["resource"]["service.name"], "unknown_service");
}

// A recording without samples is an error naming the problem, and no output file is made.
#[test]
fn an_empty_recording_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("empty.jfr");
    {
        let _serial = serial();
        let rec = Recorder::builder().repository(dir.path().join("repo")).start().unwrap();
        rec.dump(&file).unwrap();
        rec.stop().unwrap();
    }
    let pb = dir.path().join("out.pb");
    let out = recorder(&["dump", s(&file), "--format", "otlp", "-o", s(&pb)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no samples") && stderr.contains("nothing to write"), "{stderr}");
    assert!(!pb.exists(), "no output file");
}

// Flags that do not apply to OTLP are refused.
#[test]
fn flags_of_other_formats_are_refused() {
    let m = made();
    let out = recorder(&["dump", s(&m.file), "--format", "otlp", "--events", "jdk.ExecutionSample", "-o", "/dev/null"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--format otlp"));
    let out = recorder(&["dump", s(&m.file), "--format", "pprof", "--service-name", "x", "-o", "/dev/null"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--service-name applies to --format otlp"));
}

/// `recorder record --period 1ms -o FILE -- PROGRAM ARGS` in a fresh directory; returns FILE.
fn record(dir: &Path, program: &Path, args: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let jfr = dir.join("recorded.jfr");
    preload_library();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_recorder"))
        .current_dir(dir)
        .args(["record", "--period", "1ms", "--repository", "repo", "-o", s(&jfr), "--"])
        .arg(program)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "recorded run: {}", String::from_utf8_lossy(&out.stderr));
    jfr
}

// A function name that is not UTF-8 arrives as valid UTF-8 (replacement characters), its samples all there.
#[test]
fn a_function_name_that_is_not_utf8_is_exported_readable() {
    // With debug info: its name comes from DWARF (the symbol table's non-UTF-8 name alone is
    // not used by the symbolizer).
    let program = build_program("non_utf8_symbol.c", "gcc", &["-O2", "-g", "-fno-omit-frame-pointer"]);
    let dir = tempfile::tempdir().unwrap();
    let jfr = record(dir.path(), &program, &["200"]);
    let pb = dir.path().join("out.pb");
    recorder_ok(&["dump", s(&jfr), "--format", "otlp", "-o", s(&pb)]);
    let cpu = profile(&otlp_judge(&pb, false), "cpu").clone();
    let count: u64 = jdk_cpu_samples(&jfr).0.values().sum();
    assert_eq!(cpu["values"], count);
    let hot = cpu["functions"]["otlp_hot_\u{fffd}\u{fffd}"].as_u64().unwrap_or_else(|| panic!("{cpu}"));
    assert!(hot > 0);
}

// A 3,000-frame recursion: the stacks the recording keeps are exported whole, every location resolves.
#[test]
fn a_3000_frame_stack_is_exported_whole() {
    let program = build_program("deep_recursion.c", "gcc", &["-O2", "-fno-omit-frame-pointer"]);
    let dir = tempfile::tempdir().unwrap();
    let jfr = record(dir.path(), &program, &["3000", "300"]);
    let pb = dir.path().join("out.pb");
    recorder_ok(&["dump", s(&jfr), "--format", "otlp", "-o", s(&pb)]);
    let cpu = profile(&otlp_judge(&pb, false), "cpu").clone();
    let count: u64 = jdk_cpu_samples(&jfr).0.values().sum();
    assert_eq!(cpu["values"], count);
    let deepest = recorder_ok(&["dump", s(&jfr), "--format", "collapsed"])
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().0.split(';').count())
        .max()
        .unwrap();
    assert!(deepest >= 128, "the recording keeps deep stacks ({deepest} frames)");
    assert_eq!(cpu["max_depth"], deepest, "the deepest stack has every frame the recording kept");
}
