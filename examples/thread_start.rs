//! Measurements: are short threads sampled from their first instruction, and what
//! does that cost at thread creation?
//!
//! `cargo run --release --example thread_start` (add `-- --no-hook` to see discovery alone):
//! 1. Accuracy at 1 kHz: threads that each burn a known amount of CPU (10, 50, 300 ms: a loop
//!    calibrated beforehand, with no system call), one after another and in parallel, each
//!    reading its own `CLOCK_THREAD_CPUTIME_ID` at the end; the
//!    samples the recording holds for each thread against its CPU time (1 sample per ms).
//! 2. Cost: spawn+join of an empty thread, without a recorder (before any start), with the
//!    recorder sampling new threads from their start, with the recorder relying on discovery,
//!    and after the recording stopped (hook left in place, a no-op); ratios to the first.

use recorder::Recorder;
use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// This thread's user CPU time (what a user-time sampler can see). An estimate: without
/// `CONFIG_VIRT_CPU_ACCOUNTING_GEN` the kernel splits a thread's exact run time into user and
/// system by which mode its scheduler ticks (250 Hz here) found it in, so over a few seconds the
/// "of user time" column is good to about a percent either way.
fn thread_user_time() -> Duration {
    // SAFETY: zeroed is a valid rusage; getrusage writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    Duration::new(ru.ru_utime.tv_sec as u64, ru.ru_utime.tv_usec as u32 * 1000)
}

/// Loop iterations per millisecond of this machine's CPU, measured by [`calibrate`] before the
/// recording starts.
static ITERATIONS_PER_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[inline(always)]
fn spin(iterations: u64, mut x: u64) -> u64 {
    for _ in 0..iterations {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}

/// Measures the burners' loop against this thread's CPU clock (read between rounds: the clock is
/// a system call). Run once, without a recording.
fn calibrate() {
    const ROUND: u64 = 100_000;
    let start = thread_cpu();
    let (mut rounds, mut x) = (0u64, 1u64);
    while thread_cpu() - start < Duration::from_millis(100) {
        x = spin(ROUND, x);
        rounds += 1;
    }
    black_box(x);
    let per_ms = (rounds * ROUND) as f64 / ((thread_cpu() - start).as_secs_f64() * 1e3);
    ITERATIONS_PER_MS.store(per_ms as u64, std::sync::atomic::Ordering::Relaxed);
}

/// Burns about `ms` of this thread's CPU in user code alone: a calibrated loop with no system
/// call (a burner polling its CPU clock would spend a share of its time in the kernel, where a
/// syscall-safe sampler does not sample), then reads its CPU clock once at the end. Returns
/// (tid, CPU time at the end, user CPU time).
#[inline(never)]
fn burn(ms: u64) -> (u32, Duration, Duration) {
    let iterations = ms * ITERATIONS_PER_MS.load(std::sync::atomic::Ordering::Relaxed);
    black_box(spin(iterations, ms));
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() } as u32, thread_cpu(), thread_user_time())
}

/// (class ms, tid, CPU time, user CPU time) of every burner.
fn run_burners() -> Vec<(u64, u32, Duration, Duration)> {
    let mut out = Vec::new();
    let spawn =
        |ms: u64, i: usize| std::thread::Builder::new().name(format!("burn{ms}-{i}")).spawn(move || burn(ms)).unwrap();
    // One after another.
    for (i, ms) in [10u64, 50, 300, 10, 50, 300, 10, 50].into_iter().enumerate() {
        let (tid, cpu, user) = spawn(ms, i).join().unwrap();
        out.push((ms, tid, cpu, user));
    }
    // In parallel: twenty 50 ms threads, three 300 ms threads, ten 10 ms threads.
    for (ms, n) in [(50u64, 20usize), (300, 3), (10, 10)] {
        let handles: Vec<_> = (0..n).map(|i| spawn(ms, 100 + i)).collect();
        for h in handles {
            let (tid, cpu, user) = h.join().unwrap();
            out.push((ms, tid, cpu, user));
        }
    }
    out
}

/// ExecutionSamples per thread id, and each thread's name as the recording has it.
fn samples_per_thread(dir: &std::path::Path) -> (HashMap<u32, u64>, HashMap<u32, String>) {
    let mut counts = HashMap::new();
    let mut names = HashMap::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jfr"))
        .collect();
    files.sort();
    for file in files {
        for chunk in jfr_format::chunks(bytes::Bytes::from(std::fs::read(&file).unwrap())) {
            let chunk = chunk.unwrap();
            let Some(class) = chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id) else { continue };
            for event in chunk.events() {
                let event = event.unwrap();
                if event.type_id != class {
                    continue;
                }
                if let Some(t) = chunk.event_thread(&event).unwrap() {
                    *counts.entry(t.os_thread_id as u32).or_insert(0) += 1;
                    names.insert(t.os_thread_id as u32, t.os_name.clone().unwrap_or_default());
                }
            }
        }
    }
    (counts, names)
}

fn accuracy(hook: bool) {
    calibrate();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .sample_threads_from_start(hook)
        .start()
        .unwrap();
    let burners = run_burners();
    let path = rec.repository_dir().to_owned();
    let report = rec.stop_with_report().unwrap();
    let (counts, names) = samples_per_thread(&path);
    println!(
        "accuracy at 1 kHz, new threads {}:",
        if hook { "hooked at their start" } else { "found by discovery only" }
    );
    println!("  class   threads   CPU ms   samples   aggregate   worst thread   named after themselves   of user time");
    let mut all = (0.0, 0u64, 0.0);
    for class in [10u64, 50, 300] {
        let of: Vec<_> = burners.iter().filter(|b| b.0 == class).collect();
        let cpu_ms: f64 = of.iter().map(|b| b.2.as_secs_f64() * 1e3).sum();
        let samples: u64 = of.iter().map(|b| counts.get(&b.1).copied().unwrap_or(0)).sum();
        let worst = of
            .iter()
            .map(|b| counts.get(&b.1).copied().unwrap_or(0) as f64 / (b.2.as_secs_f64() * 1e3))
            .fold(f64::INFINITY, f64::min);
        let user_ms: f64 = of.iter().map(|b| b.3.as_secs_f64() * 1e3).sum();
        let named = of.iter().filter(|b| names.get(&b.1).is_some_and(|n| n.starts_with("burn"))).count();
        let sampled = of.iter().filter(|b| counts.contains_key(&b.1)).count();
        println!(
            "  {class:>3} ms  {:>7}  {cpu_ms:>7.0}  {samples:>8}   {:>8.1} %   {:>10.1} %   {named:>10}/{sampled:<10}   {:>8.1} %",
            of.len(),
            100.0 * samples as f64 / cpu_ms,
            100.0 * worst,
            100.0 * samples as f64 / user_ms
        );
        all.0 += cpu_ms;
        all.1 += samples;
        all.2 += user_ms;
    }
    println!(
        "  all: {} samples for {:.0} ms of CPU = {:.1} % ({:.0} ms of it user time: {:.1} %)",
        all.1,
        all.0,
        100.0 * all.1 as f64 / all.0,
        all.2,
        100.0 * all.1 as f64 / all.2
    );
    if let Some(s) = report.sampler {
        println!("  sampler: taken {} written {} lost {} refused {}", s.taken, s.written, s.lost, s.refused);
    }
}

/// The process's CPU time (user + system, all threads: the recorder's work included).
fn process_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Mean wall and process CPU time of a spawn+join of an empty thread over `n` rounds. The CPU
/// time is the steadier figure on a loaded machine (wall time there is mostly waiting for a core,
/// and every extra wakeup, such as the recorder reaping an exited thread's slot, waits too).
fn spawn_join(n: usize) -> (Duration, Duration) {
    let (t0, c0) = (Instant::now(), process_cpu());
    for _ in 0..n {
        std::thread::spawn(|| black_box(())).join().unwrap();
    }
    (t0.elapsed() / n as u32, (process_cpu() - c0) / n as u32)
}

fn cost() {
    const N: usize = 2000;
    const ROUNDS: usize = 5;
    spawn_join(200);
    let plain: Vec<(Duration, Duration)> = (0..ROUNDS).map(|_| spawn_join(N)).collect();
    let mut hooked = Vec::new();
    let mut discovery = Vec::new();
    let mut after = Vec::new();
    for _ in 0..ROUNDS {
        for hook in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let rec = Recorder::builder()
                .repository(dir.path())
                .sampling_period(Duration::from_millis(1))
                .sample_threads_from_start(hook)
                .start()
                .unwrap();
            spawn_join(100);
            let d = spawn_join(N);
            rec.stop().unwrap();
            if hook { &mut hooked } else { &mut discovery }.push(d);
        }
        after.push(spawn_join(N));
    }
    // Medians of wall and CPU time, each on its own.
    let median = |v: &[(Duration, Duration)]| {
        let mut w: Vec<Duration> = v.iter().map(|x| x.0).collect();
        let mut c: Vec<Duration> = v.iter().map(|x| x.1).collect();
        w.sort();
        c.sort();
        (w[w.len() / 2], c[c.len() / 2])
    };
    let p = median(&plain);
    println!(
        "spawn+join of an empty thread (median of {ROUNDS} rounds of {N}):   wall  (ratio)   process CPU  (ratio)"
    );
    for (label, v) in [
        ("no recorder (before any start)", &plain),
        ("recording, threads hooked at start", &hooked),
        ("recording, discovery only", &discovery),
        ("after stop (hook in place, no-op)", &after),
    ] {
        let (w, c) = median(v);
        println!(
            "  {label:<37} {:>8.1} µs  ({:.2})   {:>8.1} µs  ({:.2})",
            w.as_secs_f64() * 1e6,
            w.as_secs_f64() / p.0.as_secs_f64(),
            c.as_secs_f64() * 1e6,
            c.as_secs_f64() / p.1.as_secs_f64()
        );
    }
}

fn main() {
    let no_hook = std::env::args().any(|a| a == "--no-hook");
    let only = std::env::args().find_map(|a| a.strip_prefix("--only=").map(str::to_owned));
    if only.as_deref() != Some("accuracy") {
        cost();
    }
    if only.as_deref() != Some("cost") {
        accuracy(!no_hook);
    }
}
