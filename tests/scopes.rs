//! Instrumented scopes: the merged report equals what the threads did, exited
//! threads included; self and total time add up; explicit timestamps are kept exactly; the
//! deterministic report is byte-identical (golden file); `recorder.ScopeTiming` events carry the
//! same numbers and pass the JDK's tools.

mod common;

use common::*;
use recorder::scope::{ScopeClock, ScopeReport, Weight};
use recorder::Recorder;
use std::path::Path;
use std::time::Duration;

fn start(dir: &Path) -> Recorder {
    start_with(dir, ScopeClock::default())
}

fn start_with(dir: &Path, clock: ScopeClock) -> Recorder {
    Recorder::builder().repository(dir).no_sampling().scope_clock(clock).start().unwrap()
}

/// The tests of times run with both clocks: what they check holds for either.
const CLOCKS: [ScopeClock; 2] = [ScopeClock::Calibrated, ScopeClock::Exact];

fn leaf(work: u32) -> u64 {
    recorder::scope!("leaf");
    (0..work).map(|i| std::hint::black_box(u64::from(i))).sum()
}

fn middle(n: u32) -> u64 {
    recorder::scope!("middle");
    (0..n).map(|_| leaf(100)).sum()
}

fn job(jobs: u32, n: u32) {
    for _ in 0..jobs {
        recorder::scope!("job");
        middle(n);
    }
}

fn calls(report: &ScopeReport, path: &[&str]) -> u64 {
    report.find(path).map_or(0, |n| n.calls)
}

/// A pool of workers doing nested scopes: the report (made on the test thread, after every worker
/// exited) has the sum of what each did; no worker's data is missing.
#[test]
fn worker_pool_totals_are_the_sum_of_every_worker() {
    let _serial = serial();
    for clock in CLOCKS {
        worker_pool(clock);
    }
}

fn worker_pool(clock: ScopeClock) {
    let dir = tempfile::tempdir().unwrap();
    let rec = start_with(dir.path(), clock);
    let workers: Vec<(u32, u32)> = (0..8).map(|w| (3 + w, 2 + w % 3)).collect();
    let handles: Vec<_> = workers.iter().map(|&(jobs, n)| std::thread::spawn(move || job(jobs, n))).collect();
    for h in handles {
        h.join().unwrap();
    }
    // And some on this thread, still alive.
    job(2, 5);
    let report = rec.scope_report();
    let jobs: u64 = workers.iter().map(|&(j, _)| u64::from(j)).sum::<u64>() + 2;
    let middles = jobs;
    let leaves: u64 = workers.iter().map(|&(j, n)| u64::from(j * n)).sum::<u64>() + 10;
    assert_eq!(calls(&report, &["job"]), jobs, "{report:#?}");
    assert_eq!(calls(&report, &["job", "middle"]), middles);
    assert_eq!(calls(&report, &["job", "middle", "leaf"]), leaves);
    assert_eq!(report.nodes.len(), 3, "one node per displayed path: {report:#?}");
    // Totals: a parent's total is its self time plus its children's totals.
    let job = report.find(&["job"]).unwrap();
    let middle = report.find(&["job", "middle"]).unwrap();
    let leaf = report.find(&["job", "middle", "leaf"]).unwrap();
    assert_sums_up(job.total_nanos, job.self_nanos, &[middle.total_nanos]);
    assert_sums_up(middle.total_nanos, middle.self_nanos, &[leaf.total_nanos]);
    assert_eq!(leaf.total_nanos, leaf.self_nanos);
    assert!(leaf.self_nanos > 0);
    // The report at stop has the same counts.
    let fin = rec.stop_with_report().unwrap();
    assert_eq!(calls(&fin.scopes, &["job", "middle", "leaf"]), leaves);
}

/// Self time is the time outside children, total includes them; a sibling path is its own node.
#[test]
fn self_and_total_time_follow_the_nesting() {
    let _serial = serial();
    for clock in CLOCKS {
        nesting(clock);
    }
}

fn nesting(clock: ScopeClock) {
    let dir = tempfile::tempdir().unwrap();
    let rec = start_with(dir.path(), clock);
    {
        recorder::scope!("outer");
        spin_wall(Duration::from_millis(20));
        {
            recorder::scope!("inner");
            spin_wall(Duration::from_millis(30));
        }
        {
            recorder::scope!("other");
            spin_wall(Duration::from_millis(10));
        }
    }
    let report = rec.scope_report();
    rec.stop().unwrap();
    let outer = report.find(&["outer"]).unwrap();
    let inner = report.find(&["outer", "inner"]).unwrap();
    let other = report.find(&["outer", "other"]).unwrap();
    assert_eq!((outer.calls, inner.calls, other.calls), (1, 1, 1));
    assert!(inner.self_nanos >= 30_000_000, "{inner:?}");
    assert!(other.self_nanos >= 10_000_000, "{other:?}");
    assert!(outer.self_nanos >= 20_000_000, "{outer:?}");
    assert_sums_up(outer.total_nanos, outer.self_nanos, &[inner.total_nanos, other.total_nanos]);
    // First-weight order: inner returned first, then other, then outer.
    let order: Vec<&str> = report.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(order, ["inner", "other", "outer"]);
    let collapsed = report.collapsed(Weight::SelfTime);
    let lines: Vec<&str> = collapsed.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("outer;inner "), "{collapsed}");
    assert!(lines[2].starts_with("outer "), "{collapsed}");
    let sum: u64 = lines.iter().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
    assert_eq!(sum, outer.self_nanos + inner.self_nanos + other.self_nanos);
}

/// `scope_at` keeps exactly the times it was given, and the enclosing scope's self time excludes
/// them.
#[test]
fn explicit_timestamps_are_kept_exactly() {
    let _serial = serial();
    for clock in CLOCKS {
        explicit_timestamps(clock);
    }
}

fn explicit_timestamps(clock: ScopeClock) {
    let dir = tempfile::tempdir().unwrap();
    let rec = start_with(dir.path(), clock);
    let mut given = 0;
    {
        recorder::scope!("host");
        for d in [Duration::from_millis(3), Duration::from_micros(10)] {
            let start = recorder::clock::ticks();
            spin_wall(d);
            let end = recorder::clock::ticks();
            recorder::scope_at("external", start, end);
            given += end - start;
        }
    }
    recorder::scope_at("outside", 0, 77);
    let report = rec.scope_report();
    rec.stop().unwrap();
    let nanos = |ticks: i64| recorder::clock::ticks_to_nanos(ticks) as u64;
    let ext = report.find(&["host", "external"]).unwrap();
    assert_eq!((ext.calls, ext.total_nanos, ext.self_nanos), (2, nanos(given), nanos(given)));
    let outside = report.find(&["outside"]).unwrap();
    assert_eq!((outside.calls, outside.total_nanos), (1, nanos(77)));
    let host = report.find(&["host"]).unwrap();
    assert_sums_up(host.total_nanos, host.self_nanos, &[nanos(given)]);
}

/// No recorder: scopes do nothing. No scope entered: an empty, valid export.
#[test]
fn no_recorder_and_no_scope() {
    let _serial = serial();
    job(3, 3); // no recorder runs: nothing recorded, nothing panics
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path());
    let report = rec.scope_report();
    assert!(report.nodes.is_empty(), "{report:#?}");
    assert_eq!(report.collapsed(Weight::SelfTime), "");
    assert_eq!(report.to_json(), r#"{"deterministic":false,"unit":"ns","roots":[]}"#);
    rec.stop().unwrap();
}

/// A recorder stopped while scopes are open: the guards end harmlessly, and the next recording
/// starts with an empty tree.
#[test]
fn recorder_stopped_while_scopes_are_open() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path());
    let outer = {
        static SITE: recorder::scope::Site = recorder::scope::Site::new("open-at-stop");
        recorder::scope::enter(&SITE)
    };
    job(1, 1);
    rec.stop().unwrap();
    drop(outer);
    let rec = start(dir.path());
    job(1, 2);
    let report = rec.scope_report();
    rec.stop().unwrap();
    assert_eq!(calls(&report, &["job", "middle", "leaf"]), 2, "{report:#?}");
    assert!(report.find(&["open-at-stop"]).is_none());
}

/// A guard dropped out of order (kept past its parent's): the parent's return ends both, and the
/// late drop is ignored.
#[test]
fn guards_dropped_out_of_order_end_with_their_parent() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path());
    static A: recorder::scope::Site = recorder::scope::Site::new("a");
    static B: recorder::scope::Site = recorder::scope::Site::new("b");
    let a = recorder::scope::enter(&A);
    let b = recorder::scope::enter(&B);
    drop(a);
    drop(b);
    job(1, 1);
    let report = rec.scope_report();
    rec.stop().unwrap();
    assert_eq!(calls(&report, &["a"]), 1);
    assert_eq!(calls(&report, &["a", "b"]), 1);
    assert_eq!(calls(&report, &["job"]), 1, "later scopes are outermost again: {report:#?}");
}

fn deterministic_run(dir: &Path) -> (String, String) {
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let rec = Recorder::builder().repository(&dir).deterministic(true).start().unwrap();
        job(2, 3);
        let workers: Vec<_> = (0..3).map(|i| std::thread::spawn(move || job(i + 1, 2))).collect();
        for w in workers {
            w.join().unwrap();
        }
        recorder::scope_at("external", 0, 1000);
        let report = rec.scope_report();
        rec.stop().unwrap();
        (report.to_json(), report.collapsed(Weight::SelfTime))
    })
    .join()
    .unwrap()
}

/// Deterministic mode: times zero, counts kept, stable order; two runs give byte-identical
/// reports, equal to the golden file (`UPDATE_GOLDEN=1` rewrites it); the self-time flame graph
/// is empty.
#[test]
fn deterministic_reports_are_byte_identical() {
    let _serial = serial();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first = deterministic_run(a.path());
    let second = deterministic_run(b.path());
    assert_eq!(first, second);
    assert_eq!(first.1, "", "zero-weight flame graph");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scopes_golden.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &first.0).unwrap();
    }
    assert_eq!(first.0, std::fs::read_to_string(&golden).unwrap());
}

/// `recorder.ScopeTiming`: the newest event of each path id has the report's numbers; the JDK's
/// `jfr print` and `jfr summary` read them.
#[test]
fn scope_timing_events_carry_the_report() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path());
    job(2, 3);
    rec.flush();
    job(1, 4); // changes after the first flush: written again
    let report = rec.scope_report();
    let file = dir.path().join("scopes.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    let events = read_events(&file, "recorder.ScopeTiming");
    assert!(!events.is_empty());
    let mut latest: std::collections::BTreeMap<i64, (i64, String, i64, i64, i64)> = Default::default();
    for e in &events {
        let id = e.field_i64("pathId");
        let calls = e.field_i64("calls");
        let name = e.field("name").as_str().unwrap().to_owned();
        let row = (e.field_i64("parentPathId"), name, calls, e.field_i64("totalTime"), e.field_i64("selfTime"));
        if latest.get(&id).is_none_or(|r| r.2 <= calls) {
            latest.insert(id, row);
        }
    }
    let nodes: Vec<(u64, u64, String, u64, u64, u64)> = latest
        .into_iter()
        .map(|(id, (p, n, c, t, s))| (id as u64, p as u64, n, c as u64, t as u64, s as u64))
        .collect();
    let back = ScopeReport::from_nodes(&nodes, false);
    // The events carry no first-weight order: compare the lines.
    let sorted = |s: String| {
        let mut lines: Vec<String> = s.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(sorted(back.collapsed(Weight::Calls)), sorted(report.collapsed(Weight::Calls)));
    assert_eq!(sorted(back.collapsed(Weight::SelfTime)), sorted(report.collapsed(Weight::SelfTime)));
    let printed = jfr_ok(&["print", "--events", "recorder.ScopeTiming", file.to_str().unwrap()]);
    assert!(printed.contains("recorder.ScopeTiming"), "{printed}");
    assert!(printed.contains("name = \"leaf\""), "{printed}");
    let counts = jfr_summary_counts(&file);
    assert_eq!(counts.get("recorder.ScopeTiming").copied(), Some(events.len() as u64), "{counts:?}");
    jdk_accepts(&[file]);
}

#[recorder::profile]
fn profiled_outer() -> u64 {
    (0..3).map(|_| profiled_inner(7)).sum()
}

#[recorder::profile(name = "custom::inner")]
fn profiled_inner(x: u64) -> u64 {
    std::hint::black_box(x * 2)
}

/// `#[recorder::profile]` times functions like `scope!`, named after the function or as given.
#[test]
fn profile_attribute_times_functions() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path());
    assert_eq!(profiled_outer(), 42);
    let report = rec.scope_report();
    rec.stop().unwrap();
    assert_eq!(calls(&report, &["profiled_outer"]), 1);
    assert_eq!(calls(&report, &["profiled_outer", "custom::inner"]), 3);
}
