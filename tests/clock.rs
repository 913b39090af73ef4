//! The tick clock: event times convert to wall time through the chunk header (ours and the JDK's
//! `jfr print` alike), on the TSC and on the CLOCK_MONOTONIC fallback, and every tick source
//! (commits, samples, the flusher's own events, chunk boundaries) reads the same clock.

mod common;

use common::*;
use recorder::clock::{self, Source};
use recorder::{Event, EventSettings, Recorder};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

recorder::event! {
    #[event(name = "clock.Mark", label = "Mark")]
    pub struct Mark { pub seq: i64 }
}

/// The gap allowed between an event's time and the wall-clock reads around its commit, besides
/// the calibration error: the chunk's (wall, tick) pair is read with a bracket of a few hundred ns
/// (best of several reads), and CLOCK_REALTIME may be slewed against CLOCK_MONOTONIC meanwhile.
const PAIR_SLACK_NS: i64 = 200_000;

/// Commits `n` marks a little apart; the wall clock read just before and just after each.
fn commit_marks(n: i64) -> Vec<(i64, i64)> {
    (0..n)
        .map(|seq| {
            let before = clock::epoch_nanos();
            Mark { seq }.commit();
            let after = clock::epoch_nanos();
            std::thread::sleep(Duration::from_millis(3));
            (before, after)
        })
        .collect()
}

fn record_marks(dir: &Path, n: i64) -> Vec<(i64, i64)> {
    let rec = Recorder::builder()
        .repository(dir)
        .no_sampling()
        .event("clock.Mark", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .unwrap();
    let walls = commit_marks(n);
    rec.stop().unwrap();
    walls
}

/// Each mark's time, converted through its chunk's header, lies within the wall-clock reads
/// around its commit (give or take the calibration error over the time since the chunk's start),
/// and `jfr print` shows the same time. Returns the chunks' tick frequency.
fn check_marks(dir: &Path, walls: &[(i64, i64)], error: f64) -> i64 {
    let files = chunk_files(&recording_dir(dir));
    assert!(!files.is_empty());
    let mut seen = vec![None; walls.len()];
    let mut frequencies = Vec::new();
    for file in &files {
        let data = bytes::Bytes::from(std::fs::read(file).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            let header = *chunk.header();
            frequencies.push(header.ticks_per_second);
            let Some(class) = chunk.metadata().class_by_name("clock.Mark").cloned() else { continue };
            for event in chunk.events() {
                let event = event.unwrap();
                if event.type_id != class.id {
                    continue;
                }
                let seq = event.values.last().and_then(|v| v.as_i64()).unwrap() as usize;
                let at = chunk.ticks_to_epoch_nanos(event.start_ticks());
                let (before, after) = walls[seq];
                let slack = PAIR_SLACK_NS + ((after - header.start_nanos) as f64 * error) as i64;
                assert!(
                    before - slack <= at && at <= after + slack,
                    "mark {seq} at {at} ns, committed between {before} and {after} (slack {slack} ns, {header:?})"
                );
                seen[seq] = Some(at);
            }
        }
    }
    assert!(seen.iter().all(Option::is_some), "marks missing: {seen:?}");
    frequencies.dedup();
    assert_eq!(frequencies.len(), 1, "one tick frequency per recording: {frequencies:?}");
    // The JDK converts the same ticks to the same times.
    for file in &files {
        let json = jdk("jfr", &["print", "--json", "--events", "clock.Mark", file.to_str().unwrap()]);
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        for e in doc["recording"]["events"].as_array().unwrap() {
            let seq = e["values"]["seq"].as_i64().unwrap() as usize;
            let jdk_at = epoch_nanos_of_iso(e["values"]["startTime"].as_str().unwrap());
            let ours = seen[seq].unwrap();
            // The JDK converts with a double; one ns either way.
            assert!((jdk_at - ours).abs() <= 1, "mark {seq}: jfr print {jdk_at} ns, ours {ours} ns");
        }
    }
    frequencies[0]
}

/// The one recording directory under `base`.
fn recording_dir(base: &Path) -> std::path::PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(base).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

#[test]
fn event_times_follow_the_wall_clock_on_the_chosen_clock() {
    let _guard = serial();
    let calibration = *clock::calibration();
    let base = tempfile::tempdir().unwrap();
    let walls = record_marks(base.path(), 60);
    let frequency = check_marks(base.path(), &walls, calibration.error);
    assert_eq!(frequency, calibration.ticks_per_second);
    // Ticks are ns on either source, as the JVM's are on Linux: JMC adds a duration in ticks to
    // a start in epoch ns exactly only when a tick is a whole ns, and otherwise in a double of
    // epoch ticks, whose rounding made back-to-back events of one thread overlap, and its lane
    // builder then counted some events twice and others not at all (docs/jfr-format.md, "Time
    // fields").
    assert_eq!(frequency, 1_000_000_000, "{calibration:?}");
    if calibration.source == Source::Tsc {
        assert_ne!(calibration.counter_per_second, 1_000_000_000, "the TSC's own rate: {calibration:?}");
    }
}

/// Run as a child with `RECORDER_CLOCK=monotonic`: records marks into `CLOCK_TEST_DIR` and writes
/// the wall-clock reads around them next to it.
#[test]
fn child_records_with_the_clock_it_is_given() {
    let Some(dir) = std::env::var_os("CLOCK_TEST_DIR") else { return };
    let dir = Path::new(&dir);
    let walls = record_marks(&dir.join("repo"), 20);
    let text: String = walls.iter().map(|(b, a)| format!("{b} {a}\n")).collect();
    std::fs::write(dir.join("walls"), text).unwrap();
    let c = clock::calibration();
    std::fs::write(dir.join("source"), format!("{:?} {} {}", c.source, c.ticks_per_second, c.error)).unwrap();
}

#[test]
fn clock_monotonic_is_the_fallback_and_can_be_forced() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child_records_with_the_clock_it_is_given", "--exact", "--nocapture", "--test-threads=1"])
        .env("CLOCK_TEST_DIR", work.path())
        .env("RECORDER_CLOCK", "monotonic")
        .output()
        .unwrap();
    assert!(out.status.success(), "child failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let source = std::fs::read_to_string(work.path().join("source")).unwrap();
    assert_eq!(source, "Monotonic 1000000000 0");
    let walls: Vec<(i64, i64)> = std::fs::read_to_string(work.path().join("walls"))
        .unwrap()
        .lines()
        .map(|l| {
            let (b, a) = l.split_once(' ').unwrap();
            (b.parse().unwrap(), a.parse().unwrap())
        })
        .collect();
    assert_eq!(check_marks(&work.path().join("repo"), &walls, 0.0), 1_000_000_000);
}

/// Commits, samples and the flusher's own events are on one clock: a sample taken while the thread
/// burns CPU between two commits lies between their ticks, the statistics the flusher writes in a
/// flush between two commits lie between theirs, and the chunk spans all of them.
#[test]
fn commits_samples_and_flushes_share_one_clock() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(base.path())
        .sampling_period(Duration::from_millis(1))
        .event("clock.Mark", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .unwrap();
    rec.register_current_thread().unwrap();
    let tid = recorder::ThreadRef::current().0;
    let taken = |rec: &Recorder| {
        rec.sampler_stats().and_then(|s| s.threads.iter().find(|t| t.tid == tid).map(|t| t.taken)).unwrap_or(0)
    };
    Mark { seq: 0 }.commit();
    // Burn CPU until this thread has been sampled twice more (the sampler's clock is its CPU time).
    let first = taken(&rec);
    let mut spin = 0u64;
    while taken(&rec) < first + 2 {
        for i in 0..10_000u64 {
            spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(i));
        }
    }
    Mark { seq: 1 }.commit();
    rec.flush();
    Mark { seq: 2 }.commit();
    rec.stop().unwrap();

    let files = chunk_files(&recording_dir(base.path()));
    let mut marks = [None; 3];
    let mut samples = Vec::new();
    let mut statistics = Vec::new();
    for file in &files {
        let data = bytes::Bytes::from(std::fs::read(file).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            let header = *chunk.header();
            let chunk_end =
                header.start_ticks + ((header.duration_nanos as f64) * header.ticks_per_second as f64 / 1e9) as i64;
            let meta = chunk.metadata();
            let id = |name: &str| meta.class_by_name(name).map(|c| c.id);
            let (mark, sample, stats) = (id("clock.Mark"), id("jdk.ExecutionSample"), id("recorder.SamplerStatistics"));
            for event in chunk.events() {
                let event = event.unwrap();
                let t = event.start_ticks();
                if Some(event.type_id) == mark {
                    let seq = event.values.last().and_then(|v| v.as_i64()).unwrap() as usize;
                    marks[seq] = Some(t);
                } else if Some(event.type_id) == sample {
                    let thread = chunk.event_thread(&event).unwrap();
                    if thread.is_some_and(|th| th.os_thread_id == i64::from(tid)) {
                        samples.push(t);
                    }
                } else if Some(event.type_id) == stats {
                    statistics.push(t);
                } else {
                    continue;
                }
                assert!(
                    header.start_ticks <= t && t <= chunk_end,
                    "tick {t} outside its chunk [{}, {chunk_end}]",
                    header.start_ticks
                );
            }
        }
    }
    let [Some(m0), Some(m1), Some(m2)] = marks else { panic!("marks missing: {marks:?}") };
    assert!(m0 < m1 && m1 < m2, "one thread's commits in order: {marks:?}");
    let burning = samples.iter().filter(|&&t| m0 < t && t < m1).count();
    assert!(
        burning >= 2,
        "samples taken between the commits around the burn: {burning} of {samples:?} in ({m0}, {m1})"
    );
    assert!(
        statistics.iter().any(|&t| m1 < t && t < m2),
        "the flush between the second and third commit wrote its statistics between them: {statistics:?} vs ({m1}, {m2})"
    );
}
