//! Real-signal robustness: garbage frame pointers, stop/start cycles with signals in flight,
//! thousands of short-lived threads, discovered threads, chaining to an application handler.
//! One sampler per process at a time, so the tests serialize on a lock.

mod common;

use common::{serial, thread_cpu_time};
use recorder::sampler::{SampleRecord, Sampler, SamplerConfig, SamplingMode};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn fast_config() -> SamplerConfig {
    SamplerConfig {
        period: Duration::from_millis(1),
        mode: SamplingMode::Auto,
        buffer_bytes: 4096,
        buffers_per_thread: 3,
        max_threads: 32,
        max_depth: 128,
        ..SamplerConfig::default()
    }
}

#[inline(never)]
fn burn(ms: u64) -> u64 {
    let t0 = Instant::now();
    let mut v = 1u64;
    while t0.elapsed() < Duration::from_millis(ms) {
        for i in 0..1000u64 {
            v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    v
}

/// Burns `ms` of this thread's CPU time (however long that takes on a loaded machine): a sampler
/// counts CPU time, so this is what guarantees samples.
fn burn_cpu(ms: u64) -> u64 {
    let end = thread_cpu_time() + Duration::from_millis(ms);
    let mut v = 1u64;
    while thread_cpu_time() < end {
        v = black_box(v.wrapping_add(burn(1)));
    }
    v
}

/// Spins `iters` iterations with rbp set to `bad` (restored afterwards).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn spin_with_fp(bad: u64, iters: u64) {
    // SAFETY: rbp is saved on the stack and restored before the asm block ends; nothing in the
    // loop reads memory through it.
    unsafe {
        std::arch::asm!(
            "push rbp",
            "mov rbp, {bad}",
            "2:",
            "dec {n}",
            "jnz 2b",
            "pop rbp",
            bad = in(reg) bad,
            n = inout(reg) iters => _,
        );
    }
}

/// rbp pointing at itself (a cycle), at the stack with garbage around it, misaligned, kernel,
/// null, just below the top of the stack: each must end the walk without a fault.
#[cfg(target_arch = "x86_64")]
#[test]
fn garbage_frame_pointer_never_faults() {
    let _s = serial();
    let (sampler, locked) = Sampler::start(fast_config()).expect("start");
    let sampler = Arc::new(sampler);
    let locked = Arc::new(Mutex::new(locked));
    let done = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let drainer = {
        let (sampler, locked, done, seen) = (sampler.clone(), locked.clone(), done.clone(), seen.clone());
        std::thread::spawn(move || {
            sampler.exclude_current_thread();
            while !done.load(Ordering::Relaxed) {
                sampler.wait_pending(Duration::from_millis(5));
                let mut l = locked.lock().unwrap();
                sampler.drain(&mut l, &mut |r: &SampleRecord<'_>| {
                    assert_ne!(r.ips[0], 0);
                    seen.fetch_add(1, Ordering::Relaxed);
                });
            }
        })
    };
    let s2 = sampler.clone();
    let worker = std::thread::spawn(move || {
        s2.register_current_thread().unwrap();
        let local = 0u64;
        let here = &local as *const u64 as u64;
        let bads = [0xdead_beef_u64, here + 3, 0xffff_8000_0000_1000, 0, here, here - 4096, u64::MAX - 15, 8];
        // Sampling follows CPU time: 500 ms of it (about 500 samples), however long that takes.
        let t0 = thread_cpu_time();
        let mut i = 0;
        while thread_cpu_time() - t0 < Duration::from_millis(500) {
            spin_with_fp(bads[i % bads.len()], 2_000_000);
            i += 1;
        }
        black_box(local);
        s2.unregister_current_thread();
    });
    worker.join().unwrap();
    done.store(true, Ordering::Relaxed);
    drainer.join().unwrap();
    let sampler = Arc::try_unwrap(sampler).expect("sole owner");
    let report = sampler.stop(&mut locked.lock().unwrap(), &mut |_| {
        seen.fetch_add(1, Ordering::Relaxed);
    });
    eprintln!("garbage fp: {:?}, seen {}", report.stats, seen.load(Ordering::Relaxed));
    assert!(report.stats.taken > 100, "the worker was sampled (taken {})", report.stats.taken);
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost);
}

/// 20 start/stop cycles while threads burn CPU under a 100 µs period: no signal may kill the
/// process, also after the last stop with timers just disarmed.
#[test]
fn stop_start_cycles_with_signals_in_flight() {
    let _s = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Arc::new(AtomicUsize::new(0));
    let current: Arc<Mutex<Option<Arc<Sampler>>>> = Arc::new(Mutex::new(None));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let (stop, epoch, current) = (stop.clone(), epoch.clone(), current.clone());
        workers.push(std::thread::spawn(move || {
            let mut mine = usize::MAX;
            while !stop.load(Ordering::Relaxed) {
                let e = epoch.load(Ordering::SeqCst);
                if e != mine {
                    if let Some(s) = current.lock().unwrap().clone() {
                        let _ = s.register_current_thread();
                    }
                    mine = e;
                }
                burn(1);
            }
        }));
    }
    let mut total = 0;
    for cycle in 0..20 {
        let config = SamplerConfig { period: Duration::from_micros(100), ..fast_config() };
        let (sampler, mut locked) = Sampler::start(config).expect("start");
        let sampler = Arc::new(sampler);
        *current.lock().unwrap() = Some(sampler.clone());
        epoch.store(cycle + 1, Ordering::SeqCst);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(30) {
            std::thread::sleep(Duration::from_millis(3));
            sampler.drain(&mut locked, &mut |_| {});
        }
        *current.lock().unwrap() = None;
        // A worker may hold a clone for a moment while registering.
        let mut shared = sampler;
        let sampler = loop {
            match Arc::try_unwrap(shared) {
                Ok(s) => break s,
                Err(back) => {
                    shared = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        let report = sampler.stop(&mut locked, &mut |_| {});
        assert_eq!(report.stats.taken, report.stats.written + report.stats.lost, "cycle {cycle}");
        total += report.stats.taken;
    }
    burn(100); // stray signals after the last stop must be harmless
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    eprintln!("stop/start: {total} samples over 20 cycles");
    assert!(total > 0);
}

/// Thousands of short-lived threads register and exit under sampling: the exit guard retires
/// their slots, the drainer reaps them, the slot table never runs out and nothing leaks.
#[test]
fn short_lived_threads_leak_no_slots() {
    let _s = serial();
    let config = SamplerConfig { max_threads: 32, ..fast_config() };
    let (sampler, locked) = Sampler::start(config).expect("start");
    let sampler = Arc::new(sampler);
    let locked = Arc::new(Mutex::new(locked));
    let done = Arc::new(AtomicBool::new(false));
    let max_in_use = Arc::new(AtomicUsize::new(0));
    let drainer = {
        let (sampler, locked, done, max_in_use) = (sampler.clone(), locked.clone(), done.clone(), max_in_use.clone());
        std::thread::spawn(move || {
            sampler.exclude_current_thread();
            while !done.load(Ordering::Relaxed) {
                sampler.wait_pending(Duration::from_millis(1));
                let mut l = locked.lock().unwrap();
                sampler.drain(&mut l, &mut |_| {});
                drop(l);
                max_in_use.fetch_max(sampler.stats().slots_in_use, Ordering::Relaxed);
            }
        })
    };
    let failures = Arc::new(AtomicUsize::new(0));
    let total = 2000;
    for _batch in 0..total / 4 {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (sampler, failures) = (sampler.clone(), failures.clone());
                std::thread::spawn(move || {
                    if sampler.register_current_thread().is_err() {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    burn(1);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    done.store(true, Ordering::Relaxed);
    drainer.join().unwrap();
    let mut l = locked.lock().unwrap();
    sampler.drain(&mut l, &mut |_| {});
    let stats = sampler.stats();
    eprintln!("short-lived: {stats:?} max slots in use {}", max_in_use.load(Ordering::Relaxed));
    assert_eq!(failures.load(Ordering::Relaxed), 0, "slot table exhausted");
    assert_eq!(stats.slots_in_use, 0, "every exited thread's slot was reaped");
    assert_eq!(stats.taken, stats.written + stats.lost);
    assert!(stats.taken > 0);
    drop(l);
    let sampler = Arc::try_unwrap(sampler).expect("sole owner");
    let report = sampler.stop(&mut locked.lock().unwrap(), &mut |_| {});
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost);
}

/// A thread that never registers is found by `discover_threads`; its first samples are leaf-only,
/// then its stack bounds come from /proc/self/maps and full stacks follow. Excluded threads are
/// never sampled.
#[test]
fn discovered_threads_get_bounds_and_full_stacks() {
    discovered(SamplingMode::Auto);
}

/// The same through per-thread CPU timers armed on another thread's clock.
#[test]
fn discovered_threads_with_cpu_timers() {
    discovered(SamplingMode::CpuTimer);
}

fn discovered(mode: SamplingMode) {
    let _s = serial();
    let (sampler, mut locked) = Sampler::start(SamplerConfig { mode, ..fast_config() }).expect("start");
    sampler.exclude_current_thread();
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU64::new(0));
    let worker = {
        let (stop, tid) = (stop.clone(), tid.clone());
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid.store(unsafe { libc::syscall(libc::SYS_gettid) } as u64, Ordering::SeqCst);
            while !stop.load(Ordering::Relaxed) {
                burn(5);
            }
        })
    };
    while tid.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
    let wtid = tid.load(Ordering::SeqCst) as u32;
    // SAFETY: as above.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let (mut leaf_only, mut full, mut mine) = (0, 0, 0);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        sampler.discover_threads(&mut locked);
        std::thread::sleep(Duration::from_millis(10));
        sampler.drain(&mut locked, &mut |r| {
            if r.tid == me {
                mine += 1;
            }
            if r.tid == wtid {
                if r.leaf_only {
                    leaf_only += 1;
                } else if r.ips.len() > 1 {
                    full += 1;
                }
            }
        });
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    sampler.discover_threads(&mut locked); // notices the exit
    sampler.drain(&mut locked, &mut |_| {});
    let sampler_mode = sampler.mode();
    let report = sampler.stop(&mut locked, &mut |_| {});
    eprintln!("discovered ({:?}): leaf-only {leaf_only} full {full} {:?}", sampler_mode, report.stats);
    assert!(full > 0, "discovered thread never got full stacks");
    assert_eq!(mine, 0, "excluded thread was sampled");
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost);
}

static APP_CALLS: AtomicU64 = AtomicU64::new(0);

extern "C" fn app_handler(_sig: libc::c_int) {
    APP_CALLS.fetch_add(1, Ordering::Relaxed);
}

fn current_sigprof_handler() -> usize {
    // SAFETY: query only.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGPROF, std::ptr::null(), &mut old);
        old.sa_sigaction
    }
}

/// An application's SIGPROF handler receives foreign SIGPROFs while we sample and is restored
/// by stop.
#[test]
fn application_handler_is_chained_and_restored() {
    let _s = serial();
    // SAFETY: installs a plain handler that only bumps an atomic.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = app_handler as *const () as usize;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGPROF, &act, std::ptr::null_mut());
    }
    let before = APP_CALLS.load(Ordering::Relaxed);
    let (sampler, mut locked) = Sampler::start(fast_config()).expect("start");
    assert_ne!(current_sigprof_handler(), app_handler as *const () as usize);
    sampler.register_current_thread().unwrap();
    burn(50);
    // SAFETY: raise sends SIGPROF to this thread with si_code SI_TKILL: not ours, so chained.
    unsafe { libc::raise(libc::SIGPROF) };
    sampler.unregister_current_thread();
    let report = sampler.stop(&mut locked, &mut |_| {});
    assert_eq!(APP_CALLS.load(Ordering::Relaxed), before + 1, "foreign SIGPROF chained exactly once");
    assert_eq!(current_sigprof_handler(), app_handler as *const () as usize, "application handler restored");
    assert!(report.stats.taken > 0);
    // Leave the process with a harmless disposition for the other tests.
    // SAFETY: SIG_IGN is always valid.
    unsafe { libc::signal(libc::SIGPROF, libc::SIG_IGN) };
}

/// fork while sampling: the child starts "not recording" (no lock held, no sampler published)
/// and can start, use and stop a sampler of its own; the parent's recording goes on.
#[test]
fn fork_child_can_record_on_its_own() {
    let _s = serial();
    let (sampler, mut locked) = Sampler::start(fast_config()).expect("start");
    sampler.register_current_thread().unwrap();
    burn(20);
    // SAFETY: the child only runs the code below and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| {
            let (child, mut l) = Sampler::start(fast_config()).expect("start in child");
            child.register_current_thread().expect("register in child");
            burn_cpu(30);
            child.unregister_current_thread();
            let r = child.stop(&mut l, &mut |_| {});
            if r.stats.taken > 0 && r.stats.taken == r.stats.written + r.stats.lost {
                true
            } else {
                eprintln!("child: {:?}", r.stats);
                false
            }
        });
        // SAFETY: leaves the child without running the parent's atexit handlers or destructors.
        unsafe { libc::_exit(if matches!(ok, Ok(true)) { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    burn(20);
    sampler.unregister_current_thread();
    let report = sampler.stop(&mut locked, &mut |_| {});
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child failed: status {status:#x}");
    assert!(report.stats.taken > 0);
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost);
}
