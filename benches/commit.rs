//! Per-event cost of `Event::commit`, ours against the JVM's (`jdk.jfr.Event::commit`), in one run.
//!
//! `cargo bench --bench commit` prints, per event in ns (median of several repetitions):
//! - `commit_no_stack_ns`, `commit_stack_ns`: one thread committing a two-field event (i64, i32)
//!   from the bottom of a 20-deep `#[inline(never)]` recursion, without and with a stack trace;
//! - `commit_no_stack_ns_2threads`, `commit_stack_ns_2threads`: the same with two threads
//!   committing concurrently (per thread);
//! - `jvm_commit_no_stack_ns`, `jvm_commit_stack_ns` (and `_2threads`): the same loops in Java
//!   (`benches/java/CommitBench.java`, compiled with `javac` and run under an active recording);
//! - `ratio_no_stack`, `ratio_stack` (and `_2threads`): ours / JVM (at most 1/3 without a stack);
//! - `events_lost`: events the recorder lost (must be 0);
//! - the floor, same loop and clock: `floor_empty_call_ns` (an `#[inline(never)]` call that does
//!   nothing), `floor_tick_ns` (`recorder::clock::ticks()`: one `rdtsc` scaled to ns where the
//!   TSC is the clock), `floor_clock_gettime_ns` (CLOCK_MONOTONIC through the vDSO, the JVM's
//!   clock), and `clock_source`, `clock_ticks_per_second`, `clock_counter_per_second`,
//!   `clock_calibration_error_ppm`.
//!
//! Environment: `COMMIT_BENCH_N` (events per no-stack repetition, default 5,000,000),
//! `COMMIT_BENCH_STACK_N` (per stack repetition, default 1,000,000), `COMMIT_BENCH_REPS` (default
//! 5), `COMMIT_BENCH_JVM_STACK_N` (default 200,000: the JVM's stack walk is ~100x slower),
//! `COMMIT_BENCH_NO_JVM=1` skips the Java side (e.g. under valgrind).

use recorder::{Event, EventSettings, Recorder};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

recorder::event! {
    #[event(name = "bench.Small", label = "Small")]
    pub struct Small { pub a: i64, pub b: i32 }
}

const DEPTH: usize = 20;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(default)
}

#[inline(never)]
fn empty_call(i: u64) -> u64 {
    black_box(i)
}

fn clock_gettime_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CPU ns per iteration of `f` over `n` iterations (the loop's own cost included, as in the
/// commit loops).
fn floor(n: u64, mut f: impl FnMut(u64) -> u64) -> PerEvent {
    let (c0, w0) = (thread_cpu_time(), Instant::now());
    let mut sum = 0u64;
    for i in 0..n {
        sum = sum.wrapping_add(f(i));
    }
    black_box(sum);
    let wall = w0.elapsed();
    (ns_per_event(thread_cpu_time() - c0, n), ns_per_event(wall, n))
}

#[inline(never)]
fn commit_loop(n: u64) {
    for i in 0..n {
        Small { a: i as i64, b: i as i32 }.commit();
    }
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Time taken by a loop: on this thread's CPU clock (immune to other processes taking the CPU)
/// and on the wall clock.
#[derive(Clone, Copy)]
struct Times {
    cpu: Duration,
    wall: Duration,
}

/// Commits `n` events from the bottom of a `depth`-deep recursion; returns the loop's time.
#[inline(never)]
fn recurse(depth: usize, n: u64) -> Times {
    if depth == 0 {
        let (c0, w0) = (thread_cpu_time(), Instant::now());
        commit_loop(n);
        let wall = w0.elapsed();
        return Times { cpu: thread_cpu_time() - c0, wall };
    }
    let r = recurse(black_box(depth - 1), n);
    // Keeps the frame from becoming a tail call.
    black_box(depth);
    r
}

fn ns_per_event(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

/// ns per event, (CPU, wall).
type PerEvent = (f64, f64);

/// One thread: ns per event.
fn time_one(n: u64) -> PerEvent {
    let t = recurse(DEPTH, n);
    (ns_per_event(t.cpu, n), ns_per_event(t.wall, n))
}

/// Two threads committing at the same time: mean per-thread ns per event.
fn time_two(n: u64) -> PerEvent {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                // Attach to the recording (first commit: the one-time slow path) before timing.
                commit_loop(1);
                barrier.wait();
                time_one(n)
            })
        })
        .collect();
    let (a, b) =
        handles.into_iter().map(|h| h.join().expect("bench thread")).fold((0.0, 0.0), |s, t| (s.0 + t.0, s.1 + t.1));
    (a / 2.0, b / 2.0)
}

/// Median over `reps` repetitions, of CPU and wall times separately.
fn median(reps: u64, mut f: impl FnMut() -> PerEvent) -> PerEvent {
    let (mut cpu, mut wall): (Vec<f64>, Vec<f64>) = (0..reps.max(1)).map(|_| f()).unzip();
    cpu.sort_by(f64::total_cmp);
    wall.sort_by(f64::total_cmp);
    (cpu[cpu.len() / 2], wall[wall.len() / 2])
}

fn settings(stack_trace: bool) -> EventSettings {
    EventSettings { stack_trace, ..Default::default() }
}

/// Compiles and runs the Java side; its `name: value` lines.
fn run_jvm(n: u64, stack_n: u64, reps: u64, work: &Path) -> Result<BTreeMap<String, f64>, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/java/CommitBench.java");
    let classes = work.join("classes");
    let out = Command::new("javac").arg("-d").arg(&classes).arg(&source).output().map_err(|e| format!("javac: {e}"))?;
    if !out.status.success() {
        return Err(format!("javac failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let out = Command::new("java")
        .arg("-cp")
        .arg(&classes)
        .arg("CommitBench")
        .args([n, stack_n, DEPTH as u64, reps].map(|v| v.to_string()))
        .current_dir(work)
        .output()
        .map_err(|e| format!("java: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("java failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(stdout
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_owned(), v.trim().parse().ok()?))
        })
        .collect())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; a `cargo test --benches` run passes nothing of interest and
    // should not spend two minutes here.
    if std::env::args().skip(1).all(|a| a != "--bench") && std::env::var_os("COMMIT_BENCH_N").is_none() {
        println!("commit bench: run with `cargo bench --bench commit`");
        return Ok(());
    }
    let n = env_u64("COMMIT_BENCH_N", 5_000_000);
    let stack_n = env_u64("COMMIT_BENCH_STACK_N", 1_000_000);
    let jvm_stack_n = env_u64("COMMIT_BENCH_JVM_STACK_N", 200_000);
    let reps = env_u64("COMMIT_BENCH_REPS", 5);
    let work = tempfile::tempdir()?;

    let rec = Recorder::builder()
        .repository(work.path().join("repo"))
        .memory_budget(1 << 30)
        .max_size(1 << 30)
        .event("bench.Small", settings(false))
        .start()?;

    let empty = median(reps, || floor(n, empty_call));
    let tick = median(reps, || floor(n, |_| recorder::clock::ticks() as u64));
    let gettime = median(reps, || floor(n, |_| clock_gettime_ns() as u64));

    // Warm-up: attaches this thread, registers the type, faults in the first buffers.
    time_one(n / 10);
    // A flush after each repetition (not timed): the recorder then never holds more than one
    // repetition's records, whatever the flusher's share of a busy machine.
    let flushed = |per_event: PerEvent| {
        rec.flush();
        per_event
    };
    let no_stack = median(reps, || flushed(time_one(n)));
    let no_stack_2 = median(reps, || flushed(time_two(n)));

    rec.set_event_settings("bench.Small", settings(true));
    time_one(stack_n / 10);
    let stack = median(reps, || flushed(time_one(stack_n)));
    let stack_2 = median(reps, || flushed(time_two(stack_n)));

    rec.flush();
    let stats = rec.stats();
    rec.stop()?;

    println!("commit_no_stack_ns: {:.1}", no_stack.0);
    println!("commit_stack_ns: {:.1}", stack.0);
    println!("commit_no_stack_ns_2threads: {:.1}", no_stack_2.0);
    println!("commit_stack_ns_2threads: {:.1}", stack_2.0);
    println!("commit_no_stack_ns_wall: {:.1}", no_stack.1);
    println!("commit_stack_ns_wall: {:.1}", stack.1);
    println!("commit_no_stack_ns_2threads_wall: {:.1}", no_stack_2.1);
    println!("commit_stack_ns_2threads_wall: {:.1}", stack_2.1);
    let clock = recorder::clock::calibration();
    println!("floor_empty_call_ns: {:.1}", empty.0);
    println!("floor_tick_ns: {:.1}", tick.0);
    println!("floor_clock_gettime_ns: {:.1}", gettime.0);
    println!("clock_source: {:?}", clock.source);
    println!("clock_ticks_per_second: {}", clock.ticks_per_second);
    println!("clock_counter_per_second: {}", clock.counter_per_second);
    println!("clock_calibration_error_ppm: {:.2}", clock.error * 1e6);
    println!("events_written: {}", stats.events_written);
    println!("events_lost: {}", stats.events_lost);

    if std::env::var_os("COMMIT_BENCH_NO_JVM").is_none() {
        let jvm = run_jvm(n, jvm_stack_n, reps.min(3), work.path())?;
        let cases = [
            ("no_stack", no_stack.0, ""),
            ("stack", stack.0, ""),
            ("no_stack", no_stack_2.0, "_2threads"),
            ("stack", stack_2.0, "_2threads"),
            ("no_stack", no_stack.1, "_wall"),
            ("stack", stack.1, "_wall"),
            ("no_stack", no_stack_2.1, "_2threads_wall"),
            ("stack", stack_2.1, "_2threads_wall"),
        ];
        let mut ratios = Vec::new();
        for (case, ours, suffix) in cases {
            let key = format!("jvm_commit_{case}_ns{suffix}");
            let theirs = *jvm.get(&key).ok_or_else(|| format!("the Java bench printed no `{key}`"))?;
            println!("{key}: {theirs:.1}");
            ratios.push(format!("ratio_{case}{suffix}: {:.3}", ours / theirs));
        }
        for r in ratios {
            println!("{r}");
        }
    }
    if stats.events_lost != 0 {
        return Err(format!("the recorder lost {} events", stats.events_lost).into());
    }
    Ok(())
}
