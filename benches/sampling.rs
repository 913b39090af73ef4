//! Sampling overhead and accuracy, plain output (`cargo bench --bench sampling`).
//!
//! A fixed 2-thread CPU-bound workload is run: unprofiled; under our sampler; under a no-op
//! SIGPROF handler on the same signal source (perf task-clock events, the physical floor: signal
//! delivery alone); under pprof-rs (frame-pointer feature, process-wide setitimer) at the same
//! rate. Costs are measured in the workers' own CPU time (CLOCK_THREAD_CPUTIME_ID, which includes
//! the handler and the kernel's signal delivery), so a loaded machine disturbs them less than wall
//! time would. Timing numbers never go into tests.

use recorder::sampler::bench_support::{close_perf_signal, handler_times, open_perf_signal, time_handler};
use recorder::sampler::{SampleRecord, Sampler, SamplerConfig, SamplingMode};
use recorder::Unwinder;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

const THREADS: usize = 2;

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

#[inline(never)]
fn leaf_work(iters: u64, seed: u64) -> u64 {
    let mut v = seed;
    for i in 0..iters {
        v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    v
}

#[inline(never)]
fn at_depth(depth: u32, iters: u64, seed: u64) -> u64 {
    if depth == 0 {
        leaf_work(iters, seed)
    } else {
        black_box(at_depth(depth - 1, iters, seed ^ u64::from(depth))) + 1
    }
}

/// Per-thread hooks around the measured work.
trait Hooks: Send + Sync {
    fn enter(&self) {}
    fn leave(&self) {}
}

struct NoHooks;
impl Hooks for NoHooks {}

/// Runs the workload on THREADS threads; returns the summed worker CPU time.
fn workload(hooks: Arc<dyn Hooks>, depth: u32, chunks: u64, chunk_iters: u64) -> Duration {
    let start = Arc::new(Barrier::new(THREADS));
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (hooks, start) = (hooks.clone(), start.clone());
            std::thread::spawn(move || {
                hooks.enter();
                start.wait();
                let c0 = thread_cpu();
                let mut v = t as u64;
                for _ in 0..chunks {
                    v = at_depth(depth, chunk_iters, v);
                }
                let c1 = thread_cpu();
                black_box(v);
                hooks.leave();
                c1 - c0
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).sum()
}

// ------------------------------------------------------------------ no-op floor (perf events)

static NOOP_SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn noop_handler(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    NOOP_SIGNALS.fetch_add(1, Ordering::Relaxed);
}

struct NoopPerf {
    period: Duration,
    fds: Mutex<Vec<(u32, i32)>>,
}

impl Hooks for NoopPerf {
    fn enter(&self) {
        let tid = gettid();
        let fd = open_perf_signal(tid, self.period).expect("perf_event_open for the no-op floor");
        self.fds.lock().unwrap().push((tid, fd));
    }
    fn leave(&self) {
        let tid = gettid();
        let mut fds = self.fds.lock().unwrap();
        if let Some(i) = fds.iter().position(|&(t, _)| t == tid) {
            let (_, fd) = fds.remove(i);
            close_perf_signal(fd, tid);
        }
    }
}

fn with_noop_handler<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: installs a handler that only bumps an atomic; the previous action is restored.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = noop_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGPROF, &act, &mut old);
        let r = f();
        std::thread::sleep(Duration::from_millis(20));
        libc::sigaction(libc::SIGPROF, &old, std::ptr::null_mut());
        r
    }
}

// ------------------------------------------------------------------ our sampler

struct Ours(Arc<Sampler>);
impl Hooks for Ours {
    fn enter(&self) {
        self.0.register_current_thread().unwrap();
    }
    fn leave(&self) {
        self.0.unregister_current_thread();
    }
}

struct OursRun {
    cpu: Duration,
    taken: u64,
    written: u64,
    lost: u64,
    drain_time: Duration,
}

fn run_ours(period: Duration, depth: u32, chunks: u64, iters: u64) -> OursRun {
    run_ours_buf(period, depth, chunks, iters, 64 * 1024)
}

fn run_ours_buf(period: Duration, depth: u32, chunks: u64, iters: u64, buffer_bytes: usize) -> OursRun {
    run_ours_with(period, depth, chunks, iters, buffer_bytes, Unwinder::default())
}

fn run_ours_with(
    period: Duration,
    depth: u32,
    chunks: u64,
    iters: u64,
    buffer_bytes: usize,
    unwinder: Unwinder,
) -> OursRun {
    let config = SamplerConfig {
        period,
        unwinder,
        mode: SamplingMode::PerfEvent,
        max_depth: 2048,
        buffer_bytes,
        buffers_per_thread: 3,
        max_threads: 8,
        ..SamplerConfig::default()
    };
    let (sampler, locked) = Sampler::start(config).expect("sampler");
    let sampler = Arc::new(sampler);
    let locked = Arc::new(Mutex::new(locked));
    let done = Arc::new(AtomicBool::new(false));
    let drain_ns = Arc::new(AtomicU64::new(0));
    // The recorder thread + a 10 ms flusher in one: the shape the recorder core will have.
    let recorder = {
        let (sampler, locked, done, drain_ns) = (sampler.clone(), locked.clone(), done.clone(), drain_ns.clone());
        std::thread::spawn(move || {
            sampler.exclude_current_thread();
            let mut sink = 0u64;
            while !done.load(Ordering::Relaxed) {
                sampler.wait_pending(Duration::from_millis(10));
                let mut l = locked.lock().unwrap();
                let t0 = Instant::now();
                sampler.drain(&mut l, &mut |r: &SampleRecord<'_>| sink = sink.wrapping_add(r.ips.iter().sum::<u64>()));
                drain_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            black_box(sink);
        })
    };
    let cpu = workload(Arc::new(Ours(sampler.clone())), depth, chunks, iters);
    done.store(true, Ordering::Relaxed);
    recorder.join().unwrap();
    let sampler = Arc::try_unwrap(sampler).expect("sole owner");
    let report = sampler.stop(&mut locked.lock().unwrap(), &mut |_| {});
    OursRun {
        cpu,
        taken: report.stats.taken,
        written: report.stats.written,
        lost: report.stats.lost,
        drain_time: Duration::from_nanos(drain_ns.load(Ordering::Relaxed)),
    }
}

fn run_noop(period: Duration, depth: u32, chunks: u64, iters: u64) -> (Duration, u64) {
    NOOP_SIGNALS.store(0, Ordering::Relaxed);
    let cpu = with_noop_handler(|| {
        workload(Arc::new(NoopPerf { period, fds: Mutex::new(Vec::new()) }), depth, chunks, iters)
    });
    (cpu, NOOP_SIGNALS.load(Ordering::Relaxed))
}

fn run_pprof(rate: i32, depth: u32, chunks: u64, iters: u64) -> (Duration, u64) {
    let guard = pprof::ProfilerGuardBuilder::default().frequency(rate).build().expect("pprof");
    let cpu = workload(Arc::new(NoHooks), depth, chunks, iters);
    let report = guard.report().build().expect("pprof report");
    drop(guard);
    let samples: isize = report.data.values().sum();
    (cpu, samples.max(0) as u64)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Drain cost: let the handler fill big buffers with >= 10 000 samples, then time one drain.
fn drain_10k() {
    let config = SamplerConfig {
        period: Duration::from_micros(100),
        mode: SamplingMode::PerfEvent,
        max_depth: 128,
        buffer_bytes: 4 << 20,
        buffers_per_thread: 2,
        max_threads: 4,
        ..SamplerConfig::default()
    };
    let (sampler, mut locked) = Sampler::start(config).expect("sampler");
    let sampler = Arc::new(sampler);
    let stop = Arc::new(AtomicBool::new(false));
    let hs: Vec<_> = (0..THREADS)
        .map(|_| {
            let (sampler, stop) = (sampler.clone(), stop.clone());
            std::thread::spawn(move || {
                sampler.register_current_thread().unwrap();
                let mut v = 0;
                while !stop.load(Ordering::Relaxed) {
                    v = at_depth(20, 100_000, v);
                }
                black_box(v);
                sampler.unregister_current_thread();
            })
        })
        .collect();
    // Give the registrants their spares, then let the active buffers fill.
    std::thread::sleep(Duration::from_millis(5));
    sampler.drain(&mut locked, &mut |_| {});
    let t0 = Instant::now();
    while sampler.stats().taken < 10_500 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    let mut n = 0u64;
    let mut frames = 0u64;
    let t0 = Instant::now();
    sampler.drain(&mut locked, &mut |r| {
        n += 1;
        frames += r.ips.len() as u64;
        black_box(r.ips);
    });
    let dt = t0.elapsed();
    println!(
        "drain: {n} samples ({:.1} frames avg) in {:.2} ms = {:.0} ns/sample -> {:.2} ms per 10 000 samples",
        frames as f64 / n.max(1) as f64,
        dt.as_secs_f64() * 1e3,
        dt.as_nanos() as f64 / n.max(1) as f64,
        dt.as_secs_f64() * 1e3 * 10_000.0 / n.max(1) as f64
    );
    let sampler = Arc::try_unwrap(sampler).expect("sole owner");
    sampler.stop(&mut locked, &mut |_| {});
}

/// The handler's own time, measured from inside it (a clock read at its entry and exit, into a
/// histogram; `sampler::bench_support::time_handler`), by stack depth and unwinder, at 10 kHz.
fn handler_own_time(chunks: u64, chunk_iters: u64) {
    println!("\n== handler own time (clock at entry and exit, inside the handler), 10 kHz ==");
    let period = Duration::from_micros(100);
    for depth in [16u32, 128] {
        for (name, unwinder) in [("frame pointers", Unwinder::FramePointer), ("tables (dwarf)", Unwinder::Dwarf)] {
            time_handler(true);
            let r = run_ours_with(period, depth, chunks / 2, chunk_iters, 1 << 20, unwinder);
            time_handler(false);
            let t = handler_times();
            println!(
                "depth {depth:>4} {name:<15}: p50 {:>6.2} us  p99 {:>6.2} us  max {:>7.2} us  ({} handler runs, {} samples taken, {} lost)",
                t.p50 as f64 / 1e3,
                t.p99 as f64 / 1e3,
                t.max as f64 / 1e3,
                t.count,
                r.taken,
                r.lost
            );
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("sampling: bench");
        return;
    }
    // Calibrate: about 0.6 s of CPU per thread, in chunks of ~1 ms.
    let chunk_iters = 200_000u64;
    let t = workload(Arc::new(NoHooks), 8, 50, chunk_iters) / THREADS as u32;
    let chunks = ((0.6 / t.as_secs_f64()) * 50.0) as u64;
    // `cargo bench --bench sampling -- handler-time`: that section alone.
    if std::env::args().any(|a| a == "handler-time") {
        handler_own_time(chunks, chunk_iters);
        return;
    }
    println!("workload: {THREADS} threads x {chunks} chunks of {chunk_iters} iterations at depth 8 (~0.6 s CPU each)");
    println!(
        "machine: {} cpus; costs in worker CPU time (user+sys), median of 3",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let reps = 3;
    for rate in [100u32, 1000] {
        let period = Duration::from_nanos(1_000_000_000 / u64::from(rate));
        let base = median((0..reps).map(|_| workload(Arc::new(NoHooks), 8, chunks, chunk_iters)).collect());
        let mut noop_cpu = Vec::new();
        let mut noop_n = 0;
        let mut ours_cpu = Vec::new();
        let mut ours = None;
        let mut pp_cpu = Vec::new();
        let mut pp_n = 0;
        for _ in 0..reps {
            let (c, n) = run_noop(period, 8, chunks, chunk_iters);
            noop_cpu.push(c);
            noop_n = n;
            let r = run_ours(period, 8, chunks, chunk_iters);
            ours_cpu.push(r.cpu);
            ours = Some(r);
        }
        for _ in 0..reps {
            let (c, n) = run_pprof(rate as i32, 8, chunks, chunk_iters);
            pp_cpu.push(c);
            pp_n = n;
        }
        let (noop, oursc, pp) = (median(noop_cpu), median(ours_cpu), median(pp_cpu));
        let ours = ours.unwrap();
        let expected = |cpu: Duration| cpu.as_secs_f64() * f64::from(rate);
        let pct = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) / base.as_secs_f64() * 100.0;
        println!("\n== {rate} Hz ==");
        println!("unprofiled          cpu {:>8.3} s", base.as_secs_f64());
        println!(
            "no-op handler       cpu {:>8.3} s  (+{:.2}% vs unprofiled)  signals/expected {:.3}",
            noop.as_secs_f64(),
            pct(noop, base),
            noop_n as f64 / expected(noop)
        );
        println!(
            "our sampler         cpu {:>8.3} s  (+{:.2}% vs unprofiled, +{:.2}% vs no-op floor)  samples/expected {:.3}  (taken {} written {} lost {}), +{:.2} us/sample over floor, drain {:.0} ns/sample",
            oursc.as_secs_f64(),
            pct(oursc, base),
            pct(oursc, noop),
            ours.taken as f64 / expected(ours.cpu),
            ours.taken,
            ours.written,
            ours.lost,
            (oursc.as_secs_f64() - noop.as_secs_f64()) * 1e6 / ours.taken.max(1) as f64,
            ours.drain_time.as_nanos() as f64 / ours.written.max(1) as f64,
        );
        println!("pprof-rs (setitimer) cpu {:>7.3} s  (+{:.2}% vs unprofiled, +{:.2}% vs no-op floor)  samples/expected {:.3}", pp.as_secs_f64(), pct(pp, base), pct(pp, noop), pp_n as f64 / expected(pp));
    }
    // Per-sample differences are small next to run-to-run noise, so this section samples at
    // 10 kHz (100 us) to put ~10x more samples into the same CPU time, and takes medians of 5.
    println!("\n== handler cost by stack depth, 10 kHz: (our CPU - no-op CPU) / samples, median of 5 ==");
    let period = Duration::from_micros(100);
    for depth in [16u32, 128, 1024] {
        let chunks_d = chunks / 2;
        let noop = median((0..5).map(|_| run_noop(period, depth, chunks_d, chunk_iters).0).collect());
        let mut cpus = Vec::new();
        let mut last = None;
        for _ in 0..5 {
            let r = run_ours_buf(period, depth, chunks_d, chunk_iters, 1 << 20);
            cpus.push(r.cpu);
            last = Some(r);
        }
        let r = last.unwrap();
        let c = median(cpus);
        println!(
            "depth {depth:>5}: {:>6.2} us/sample over the no-op floor (no-op floor {:.3} s, ours {:.3} s, taken {}, lost {}), drain {:.0} ns/sample",
            (c.as_secs_f64() - noop.as_secs_f64()) * 1e6 / r.taken.max(1) as f64,
            noop.as_secs_f64(),
            c.as_secs_f64(),
            r.taken,
            r.lost,
            r.drain_time.as_nanos() as f64 / r.written.max(1) as f64
        );
    }
    handler_own_time(chunks, chunk_iters);
    println!();
    drain_10k();
}
