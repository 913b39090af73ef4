//! Wall-clock sampling cost (`cargo bench --bench wall`), plain output, one run:
//! 1000 idle threads (blocked on a futex) + 4 busy threads at the 50 ms default period, side by
//! side with no profiling, and with 100 idle threads to show that requests follow the busy
//! threads, not all threads.
//!
//! Reported per configuration: stack requests (signals) per second, and what a sampler that
//! signals every thread each period would send; the busy threads' work per CPU-second (the
//! handler's cost lands on them) against no profiling; the busy threads' work per wall-second
//! (the machine is shared: a noisy figure); and the wall sampler thread's own CPU per second.
//!
//! Then the cost of walking blocked threads' stacks from outside (`src/sampler/blocked.rs`), at
//! its worst: threads that run 1 ms and then wait 99 ms, so that each is walked every other
//! period; the wall sampler thread's CPU per second with the default unwinder (which walks)
//! against the frame-pointer unwinder (which cannot: no tables), in the same run.
//! Timing numbers never go into tests.

use recorder::Recorder;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const BUSY: usize = 4;
const MEASURE: Duration = Duration::from_secs(5);

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The CPU clock of thread `tid` of this process.
fn thread_clock(tid: u32) -> libc::clockid_t {
    ((!(tid as libc::clockid_t)) << 3) | 6
}

fn tid_named(name: &str) -> Option<u32> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| e.file_name().to_str()?.parse().ok()).flatten()
    })
}

#[inline(never)]
fn unit_of_work(seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..10_000 {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
    }
    x
}

struct Run {
    units_per_cpu_s: f64,
    units_per_s: f64,
    requests_per_s: f64,
    sampler_cpu_per_s: Option<Duration>,
    periods_per_s: f64,
}

/// Starts `idle` blocked threads and `BUSY` busy ones, optionally under wall sampling, and
/// measures for `MEASURE`.
fn run(idle: usize, wall: bool) -> Run {
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let idlers: Vec<_> = (0..idle)
        .map(|_| {
            let gate = Arc::clone(&gate);
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let (m, cv) = &*gate;
                    let mut open = m.lock().unwrap();
                    while !*open {
                        open = cv.wait(open).unwrap();
                    }
                })
                .unwrap()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let rec = wall.then(|| {
        Recorder::builder()
            .repository(dir.path())
            .cpu_sampling(false)
            .max_sampled_threads(2048)
            .sampler_buffers(4096, 2)
            .wall_clock_sampling(recorder::sampler::DEFAULT_WALL_PERIOD)
            .start()
            .unwrap()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let units = Arc::new(AtomicU64::new(0));
    let cpu_ns = Arc::new(AtomicU64::new(0));
    let busy: Vec<_> = (0..BUSY)
        .map(|i| {
            let (stop, units, cpu_ns) = (Arc::clone(&stop), Arc::clone(&units), Arc::clone(&cpu_ns));
            std::thread::spawn(move || {
                let c0 = clock(libc::CLOCK_THREAD_CPUTIME_ID);
                let mut n = 0u64;
                let mut x = i as u64;
                while !stop.load(Ordering::Relaxed) {
                    x = unit_of_work(x);
                    n += 1;
                }
                black_box(x);
                units.fetch_add(n, Ordering::Relaxed);
                cpu_ns.fetch_add((clock(libc::CLOCK_THREAD_CPUTIME_ID) - c0).as_nanos() as u64, Ordering::Relaxed);
            })
        })
        .collect();
    // Let discovery and the first ticks settle (every thread's first visit is a request).
    std::thread::sleep(Duration::from_secs(1));
    let sampler_tid = tid_named("recorder-wall");
    let before = rec.as_ref().and_then(|r| r.sampler_stats()).and_then(|s| s.wall);
    let sampler_cpu0 = sampler_tid.map(|t| clock(thread_clock(t)));
    let units0 = units.load(Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(MEASURE);
    let elapsed = t0.elapsed().as_secs_f64();
    let after = rec.as_ref().and_then(|r| r.sampler_stats()).and_then(|s| s.wall);
    let sampler_cpu = sampler_tid.map(|t| clock(thread_clock(t)) - sampler_cpu0.unwrap_or_default());
    stop.store(true, Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
    let total_units = units.load(Ordering::Relaxed);
    let cpu = cpu_ns.load(Ordering::Relaxed) as f64 / 1e9;
    let _ = units0;
    {
        let (m, cv) = &*gate;
        *m.lock().unwrap() = true;
        cv.notify_all();
    }
    for t in idlers {
        t.join().unwrap();
    }
    if let Some(r) = rec {
        r.stop().unwrap();
    }
    let (requests, periods) = match (before, after) {
        (Some(b), Some(a)) => ((a.requests - b.requests) as f64, (a.periods - b.periods) as f64),
        _ => (0.0, 0.0),
    };
    Run {
        units_per_cpu_s: total_units as f64 / cpu,
        units_per_s: total_units as f64 / (elapsed + 1.0),
        requests_per_s: requests / elapsed,
        sampler_cpu_per_s: sampler_cpu.map(|c| c.div_f64(elapsed)),
        periods_per_s: periods / elapsed,
    }
}

/// `threads` threads that each run 1 ms and wait 99 ms, under wall sampling with `unwinder`, for
/// `MEASURE`: the wall sampler thread's CPU per second, and the stacks it walked (and used) per
/// second.
fn cycling(threads: usize, unwinder: recorder::Unwinder) -> (Duration, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .cpu_sampling(false)
        .unwinder(unwinder)
        .wall_clock_sampling(recorder::sampler::DEFAULT_WALL_PERIOD)
        .start()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = i as u64;
                while !stop.load(Ordering::Relaxed) {
                    let end = clock(libc::CLOCK_THREAD_CPUTIME_ID) + Duration::from_millis(1);
                    while clock(libc::CLOCK_THREAD_CPUTIME_ID) < end {
                        x = unit_of_work(x);
                    }
                    std::thread::sleep(Duration::from_millis(99));
                }
                black_box(x);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let sampler_tid = tid_named("recorder-wall").expect("the wall sampler thread");
    let before = rec.sampler_stats().and_then(|s| s.wall).unwrap();
    let cpu0 = clock(thread_clock(sampler_tid));
    let t0 = Instant::now();
    std::thread::sleep(MEASURE);
    let cpu = clock(thread_clock(sampler_tid)) - cpu0;
    let elapsed = t0.elapsed().as_secs_f64();
    let after = rec.sampler_stats().and_then(|s| s.wall).unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    rec.stop().unwrap();
    let per_s = |n: u64| n as f64 / elapsed;
    (cpu.div_f64(elapsed), per_s(after.walks - before.walks), per_s(after.walks_used - before.walks_used))
}

fn main() {
    // 1000 threads with a wall request event each, and the sampler's own fds.
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid in/out pointers.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl);
        rl.rlim_cur = rl.rlim_max.min(65_536);
        libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
    }
    let period = recorder::sampler::DEFAULT_WALL_PERIOD;
    let ticks_per_s = 1.0 / period.as_secs_f64();
    println!("wall-clock sampling, {BUSY} busy threads, period {period:?}, {MEASURE:?} each (thread CPU time)");
    let base = run(1000, false);
    for idle in [1000, 100] {
        let w = run(idle, true);
        let all = (idle + BUSY + 1) as f64 * ticks_per_s;
        println!(
            "{idle:>5} idle: requests {:>7.1}/s (signalling every thread: {all:.0}/s, ratio {:.4}); periods accounted {:.0}/s",
            w.requests_per_s,
            w.requests_per_s / all,
            w.periods_per_s
        );
        println!(
            "       busy work per CPU-s {:.0} vs {:.0} unprofiled (x{:.4}); per wall-s {:.0} vs {:.0} (x{:.3}); sampler thread CPU {:?}/s",
            w.units_per_cpu_s,
            base.units_per_cpu_s,
            w.units_per_cpu_s / base.units_per_cpu_s,
            w.units_per_s,
            base.units_per_s,
            w.units_per_s / base.units_per_s,
            w.sampler_cpu_per_s.unwrap_or_default()
        );
    }
    println!("\nwalking waiting threads' stacks: threads that run 1 ms then wait 99 ms (two periods)");
    for threads in [16, 64] {
        let (walking, walks, used) = cycling(threads, recorder::Unwinder::Auto);
        let (not_walking, _, _) = cycling(threads, recorder::Unwinder::FramePointer);
        println!(
            "{threads:>5} threads: {walks:.0} walks/s ({used:.0} used); sampler thread CPU {walking:?}/s walking (auto unwinder) vs {not_walking:?}/s not (fp unwinder): {:.1} µs a walk, {:.2} % of a core",
            (walking.as_secs_f64() - not_walking.as_secs_f64()) * 1e6 / walks.max(1.0),
            (walking.as_secs_f64() - not_walking.as_secs_f64()) * 100.0,
        );
    }
}
