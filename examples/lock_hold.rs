//! How long the chunk-writer lock L is held, per flush and per other holder, in a process with
//! many threads (thread discovery, first symbolization and compression run with L released:
//! docs/architecture.md, "Who may touch what").
//!
//! ```text
//! cargo run --release --features zstd --example lock_hold -- [THREADS=1500] [SECONDS=8]
//! ```
//!
//! Chunks rotate every 2 s and are compressed (with the `zstd` feature). The threads wake every 200 ms, run a few hundred microseconds of CPU in one of several code
//! paths and sleep again (about a third of a CPU in all), so every one is discovered and sampled
//! and the first flushes symbolize new code. Prints, for each flush (all the times L was held
//! for it) and for every other kind of holder, the median, the 90th percentile and the maximum.
//! Timings, not assertions: compare runs on one machine, side by side.

use recorder::{LockHold, LockHolder, Recorder};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[inline(never)]
fn spin(n: u64) -> u64 {
    let mut v = 1u64;
    for i in 0..n {
        v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    v
}

#[inline(never)]
fn path_a(depth: u32, n: u64) -> u64 {
    if depth == 0 {
        spin(n)
    } else {
        path_b(depth - 1, n) + 1
    }
}

#[inline(never)]
fn path_b(depth: u32, n: u64) -> u64 {
    if depth == 0 {
        spin(n)
    } else {
        path_a(depth - 1, n) + 2
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn line(name: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "{name:<28} n={:<5} p50={:>10.3?} p90={:>10.3?} max={:>10.3?} total={:>10.3?}",
        v.len(),
        percentile(&v, 0.5),
        percentile(&v, 0.9),
        v.last().copied().unwrap_or_default(),
        v.iter().sum::<Duration>()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1500);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    // One perf event (or timer) per sampled thread.
    // SAFETY: plain getrlimit/setrlimit on our own process.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let dir = std::env::temp_dir().join(format!("lock-hold-{}", std::process::id()));
    let builder = Recorder::builder();
    // Finished chunks are compressed when the crate's `zstd` feature is on.
    #[cfg(feature = "zstd")]
    let builder = builder.compress_finished_chunks(true);
    let rec = builder
        .repository(&dir)
        .flush_interval(Duration::from_millis(250))
        .max_chunk_age(Duration::from_secs(2))
        .max_sampled_threads(threads + 64)
        .sampler_buffers(4096, 2)
        .sampling_period(Duration::from_millis(1))
        .log_lock_holds(true)
        .start()
        .expect("start");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut v = 0;
                    while !stop.load(Ordering::Relaxed) {
                        v += path_a((i % 24) as u32, 20_000);
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    v
                })
                .expect("spawn")
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let holds: Vec<LockHold> = rec.lock_holds();
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let report = rec.stop_with_report().expect("stop");
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "{threads} threads, {elapsed:.1?}; {} samples written, {} flushes",
        report.stats.samples_written, report.stats.flushes
    );
    let mut per_flush: BTreeMap<u64, Duration> = BTreeMap::new();
    let mut by_holder: BTreeMap<LockHolder, Vec<Duration>> = BTreeMap::new();
    for h in &holds {
        if h.flush != 0 {
            *per_flush.entry(h.flush).or_default() += h.held;
        }
        by_holder.entry(h.holder).or_default().push(h.held);
    }
    line("L per flush (all phases)", per_flush.into_values().collect());
    for (holder, v) in by_holder {
        line(&format!("  {holder:?}"), v);
    }
}
