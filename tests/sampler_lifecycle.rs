//! The sampler's thread lifecycle and signal handling against what a real process does to it
//! (docs/sampler-protocol.md §6; the discovered main thread's growing stack is in
//! `tests/main_thread_stack.rs`, which must run on the main thread). Each test failed on the code
//! before its fix (47d0d74).
//!
//! Settings events' thread references are in `tests/constant_refs.rs`, a forked child using the
//! inherited `Recorder` in `tests/fork.rs`.

mod common;

// One sampler per process: tests take turns (`serial()`).
use common::serial;
use recorder::sampler::{SampleRecord, Sampler, SamplerConfig, SamplerLocked, SamplingMode};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

#[inline(never)]
fn burn_until(stop: &AtomicBool) -> u64 {
    let mut v = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..1000u64 {
            v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    v
}

#[inline(never)]
fn burn_spin(n: u64) -> u64 {
    let mut v = 1u64;
    for i in 0..n {
        v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    v
}

/// Waits until `cond` holds, re-checking every few ms; fails after a generous deadline (load
/// only makes the wait longer).
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !cond() {
        assert!(Instant::now() < deadline, "after 120 s still waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn config(mode: SamplingMode, max_threads: usize) -> SamplerConfig {
    SamplerConfig {
        period: Duration::from_millis(1),
        mode,
        buffer_bytes: 4096,
        buffers_per_thread: 3,
        max_threads,
        max_depth: 64,
        ..SamplerConfig::default()
    }
}

fn set_nofile(cur: u64) -> libc::rlimit {
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) };
    let new = libc::rlimit { rlim_cur: cur, rlim_max: old.rlim_max };
    // SAFETY: valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) }, 0);
    old
}

/// Per-thread counts of what the drain callback saw.
#[derive(Default)]
struct Seen {
    full: AtomicU64,
    leaf_only: AtomicU64,
}

fn drain_counting(sampler: &Sampler, locked: &mut SamplerLocked, tid: u32, seen: &Seen) {
    sampler.drain(locked, &mut |r: &SampleRecord<'_>| {
        if r.tid == tid {
            let c = if r.leaf_only { &seen.leaf_only } else { &seen.full };
            c.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// With the process at its fd limit, discovery can read nothing from /proc. That
/// must teach it nothing: every registered slot stays (before: all were retired and reaped, the
/// thread went unsampled, then came back as a discovered thread with leaf-only samples), and the
/// exclusion list stays (before: emptied, so the next discovery sampled the recorder's own
/// threads).
#[test]
fn discovery_at_the_fd_limit_retires_nothing_and_forgets_no_exclusion() {
    let _s = serial();
    let (sampler, mut locked) = Sampler::start(config(SamplingMode::CpuTimer, 16)).expect("start");
    let sampler = Arc::new(sampler);
    // This thread plays the recorder thread: it never wants to be sampled.
    sampler.exclude_current_thread();
    let me = gettid();
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU32::new(0));
    let worker = {
        let (sampler, stop, tid) = (sampler.clone(), stop.clone(), tid.clone());
        std::thread::spawn(move || {
            sampler.register_current_thread().expect("register");
            tid.store(gettid(), Ordering::SeqCst);
            burn_until(&stop)
        })
    };
    wait_for("the worker to register", || tid.load(Ordering::SeqCst) != 0);
    let tid = tid.load(Ordering::SeqCst);
    let seen = Seen::default();
    wait_for("full samples of the registered worker", || {
        drain_counting(&sampler, &mut locked, tid, &seen);
        seen.full.load(Ordering::Relaxed) >= 10
    });

    let old = set_nofile(0);
    let report = sampler.discover_threads_unlocked();
    set_nofile(old.rlim_cur);
    assert!(!report.listing_complete, "EMFILE: the listing cannot have been read: {report:?}");
    assert_eq!(report.retired, 0, "nothing is proven dead by a failed read: {report:?}");
    // The drain that would reap a wrongly retired slot.
    drain_counting(&sampler, &mut locked, tid, &seen);
    let stats = sampler.stats();
    assert!(stats.threads.iter().any(|t| t.tid == tid), "the live registered thread lost its slot: {stats:?}");

    // It keeps being sampled with whole stacks, and a later (successful) discovery still knows
    // this thread asked not to be sampled.
    let report = sampler.discover_threads_unlocked();
    assert!(report.listing_complete && report.retired == 0, "{report:?}");
    let before = (seen.full.load(Ordering::Relaxed), seen.leaf_only.load(Ordering::Relaxed));
    wait_for("10 more full samples", || {
        drain_counting(&sampler, &mut locked, tid, &seen);
        seen.full.load(Ordering::Relaxed) >= before.0 + 10
    });
    assert_eq!(seen.leaf_only.load(Ordering::Relaxed), before.1, "samples became leaf-only: the slot was replaced");
    let stats = sampler.stats();
    assert!(!stats.threads.iter().any(|t| t.tid == me), "the excluded thread is sampled: {stats:?}");

    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let report = Arc::into_inner(sampler).unwrap().stop(&mut locked, &mut |_| {});
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost, "{:?}", report.stats);
}

/// Discovery lists /proc/self/task, then takes the registry lock. A thread created
/// after the listing that registers itself before discovery looks at the registry is missing from
/// the listing, yet alive: it must keep its slot (before: retired "on behalf of a vanished
/// thread" while its timer was armed). Detector: a registered, live thread is never without a
/// slot, over thousands of discoveries racing hundreds of registrations.
#[test]
fn registration_racing_discovery_never_loses_its_slot() {
    let _s = serial();
    let (sampler, locked) = Sampler::start(config(SamplingMode::CpuTimer, 128)).expect("start");
    let sampler = Arc::new(sampler);
    let locked = Arc::new(Mutex::new(locked));
    let stop = Arc::new(AtomicBool::new(false));
    let discoveries = Arc::new(AtomicU64::new(0));
    let disc = {
        let (sampler, locked, stop, discoveries) = (sampler.clone(), locked.clone(), stop.clone(), discoveries.clone());
        std::thread::spawn(move || {
            sampler.exclude_current_thread();
            while !stop.load(Ordering::Relaxed) {
                sampler.discover_threads_unlocked();
                sampler.drain(&mut locked.lock().unwrap(), &mut |_| {});
                discoveries.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let gaps = Arc::new(AtomicU64::new(0));
    let registered = Arc::new(AtomicU64::new(0));
    // Enough rounds for the race to be hit (the old code lost a slot within ~100 registrations
    // here); the count, not the time, bounds the test.
    while registered.load(Ordering::Relaxed) < 400 {
        let batch: Vec<_> = (0..8)
            .map(|_| {
                let (sampler, gaps, registered) = (sampler.clone(), gaps.clone(), registered.clone());
                std::thread::spawn(move || {
                    sampler.register_current_thread().expect("a slot is free");
                    registered.fetch_add(1, Ordering::Relaxed);
                    let tid = gettid();
                    for _ in 0..50 {
                        if !sampler.stats().threads.iter().any(|t| t.tid == tid) {
                            gaps.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        black_box(burn_spin(20_000));
                    }
                })
            })
            .collect();
        for w in batch {
            w.join().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    disc.join().unwrap();
    let n = discoveries.load(Ordering::Relaxed);
    let mut l = locked.lock().unwrap();
    let report = Arc::into_inner(sampler).unwrap().stop(&mut l, &mut |_| {});
    assert_eq!(gaps.load(Ordering::Relaxed), 0, "live registered threads lost their slot to a concurrent discovery");
    assert!(n > 0);
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost, "{:?}", report.stats);
}

static HIT_A: AtomicU64 = AtomicU64::new(0);
static HIT_B: AtomicU64 = AtomicU64::new(0);
extern "C" fn app_handler_a(_sig: libc::c_int) {
    HIT_A.fetch_add(1, Ordering::Relaxed);
}
extern "C" fn app_handler_b(_sig: libc::c_int) {
    HIT_B.fetch_add(1, Ordering::Relaxed);
}

fn current_handler() -> usize {
    // SAFETY: zeroed is a valid sigaction; query only.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGPROF, std::ptr::null(), &mut old);
        old.sa_sigaction
    }
}

fn set_handler(h: usize) {
    // SAFETY: installs a plain handler (or SIG_DFL) that only bumps an atomic.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = h;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGPROF, &act, std::ptr::null_mut()), 0);
    }
}

/// The application installs its own SIGPROF handler while we record; `stop` must
/// leave it (before: it restored the handler from before `start`).
#[test]
fn stop_keeps_a_sigprof_handler_installed_while_recording() {
    let _s = serial();
    set_handler(app_handler_a as *const () as usize);
    let (sampler, mut locked) = Sampler::start(config(SamplingMode::CpuTimer, 4)).unwrap();
    set_handler(app_handler_b as *const () as usize);
    let _ = sampler.stop(&mut locked, &mut |_| {});
    let now = current_handler();
    set_handler(libc::SIG_DFL);
    assert_eq!(now, app_handler_b as *const () as usize, "stop replaced the application's current SIGPROF handler");

    // And when ours is still the current one, the application's earlier handler comes back.
    set_handler(app_handler_a as *const () as usize);
    let (sampler, mut locked) = Sampler::start(config(SamplingMode::CpuTimer, 4)).unwrap();
    let _ = sampler.stop(&mut locked, &mut |_| {});
    let now = current_handler();
    set_handler(libc::SIG_DFL);
    assert_eq!(now, app_handler_a as *const () as usize, "stop did not restore the previous handler");
}

/// When a retirement asks for the recorder to be woken (its buffers went to the full
/// queue), the wakeup is posted. Here: a registration whose timer cannot be created
/// (RLIMIT_SIGPENDING 0 makes timer_create fail with EAGAIN) retires its slot again; before, the
/// request was ignored and a recorder asleep in `wait_pending` kept sleeping.
#[test]
fn a_retirement_that_needs_the_recorder_wakes_it() {
    let _s = serial();
    let (sampler, mut locked) = Sampler::start(config(SamplingMode::CpuTimer, 4)).unwrap();
    let sampler = Arc::new(sampler);
    // Nothing is pending: the wakeup counter is 0 and the flag clear.
    sampler.wait_pending(Duration::ZERO);
    let posted_before = sampler.stats().wakeups;
    let r = std::thread::spawn({
        let sampler = sampler.clone();
        move || {
            let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: valid out pointer / rlimit.
            unsafe { libc::getrlimit(libc::RLIMIT_SIGPENDING, &mut old) };
            let none = libc::rlimit { rlim_cur: 0, rlim_max: old.rlim_max };
            // SAFETY: as above.
            unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &none) };
            let r = sampler.register_current_thread();
            // SAFETY: as above.
            unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &old) };
            r
        }
    })
    .join()
    .unwrap();
    assert!(r.is_err(), "timer_create must fail without a signal queue entry");
    let posted = sampler.stats().wakeups - posted_before;
    assert!(posted >= 1, "the retirement asked for the recorder but posted no wakeup");
    assert!(sampler.wait_pending(Duration::ZERO), "the retired slot's buffers are work for drain_full");
    sampler.drain_full(&mut locked, &mut |_| {});
    assert_eq!(sampler.stats().slots_in_use, 0, "the slot was reaped");
    let _ = Arc::into_inner(sampler).unwrap().stop(&mut locked, &mut |_| {});
}

/// On a registered thread: samples taken while the thread runs on a signal
/// stack (sp outside its stack bounds) hold only the leaf and say so (leaf_only and truncated;
/// before: an unmarked one-frame stack, or frames read from wherever the frame pointer pointed),
/// while samples on its own stack are whole and not truncated (the chain ends at the null frame
/// pointer of the thread's start).
#[test]
fn samples_on_a_signal_stack_are_leaf_only_and_truncated() {
    let _s = serial();
    static IN_ALT: AtomicBool = AtomicBool::new(false);
    static SPIN: AtomicBool = AtomicBool::new(false);
    extern "C" fn on_usr1(_sig: libc::c_int) {
        IN_ALT.store(true, Ordering::SeqCst);
        while SPIN.load(Ordering::Relaxed) {
            black_box(burn_spin(1000));
        }
        IN_ALT.store(false, Ordering::SeqCst);
    }
    let (sampler, mut locked) = Sampler::start(config(SamplingMode::CpuTimer, 4)).unwrap();
    let sampler = Arc::new(sampler);
    let tid = Arc::new(AtomicU32::new(0));
    let alt_range = Arc::new(Mutex::new((0usize, 0usize)));
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (sampler, tid, alt_range, stop) = (sampler.clone(), tid.clone(), alt_range.clone(), stop.clone());
        std::thread::spawn(move || {
            sampler.register_current_thread().unwrap();
            // A signal stack of this thread's own, outside its pthread stack.
            let mut alt = vec![0u8; 256 * 1024];
            *alt_range.lock().unwrap() = (alt.as_ptr() as usize, alt.as_ptr() as usize + alt.len());
            // SAFETY: `alt` outlives every use (the handler returns before it is dropped; the
            // alternate stack is disabled below).
            unsafe {
                let ss = libc::stack_t { ss_sp: alt.as_mut_ptr().cast(), ss_flags: 0, ss_size: alt.len() };
                assert_eq!(libc::sigaltstack(&ss, std::ptr::null_mut()), 0);
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_usr1 as *const () as usize;
                act.sa_flags = libc::SA_ONSTACK;
                libc::sigemptyset(&mut act.sa_mask);
                assert_eq!(libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()), 0);
            }
            tid.store(gettid(), Ordering::SeqCst);
            SPIN.store(true, Ordering::SeqCst);
            // SAFETY: delivers SIGUSR1 to this thread; the handler spins on the signal stack
            // until the main thread clears SPIN.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR1) };
            burn_until(&stop);
            // SAFETY: disables the alternate stack before `alt` is freed.
            unsafe {
                let ss = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
                libc::sigaltstack(&ss, std::ptr::null_mut());
            }
            drop(alt);
        })
    };
    wait_for("the worker on its signal stack", || IN_ALT.load(Ordering::SeqCst));
    let tid = tid.load(Ordering::SeqCst);
    let (alt_lo, alt_hi) = *alt_range.lock().unwrap();
    // (on the signal stack, frames, truncated, leaf_only)
    let seen: Mutex<Vec<(bool, usize, bool, bool)>> = Mutex::new(Vec::new());
    let drain = |locked: &mut SamplerLocked| {
        sampler.drain(locked, &mut |r: &SampleRecord<'_>| {
            if r.tid == tid {
                let on_alt = (alt_lo..alt_hi).contains(&(r.sp as usize));
                seen.lock().unwrap().push((on_alt, r.ips.len(), r.truncated, r.leaf_only));
            }
        })
    };
    let count = |on_alt: bool| seen.lock().unwrap().iter().filter(|s| s.0 == on_alt).count();
    wait_for("20 samples on the signal stack", || {
        drain(&mut locked);
        count(true) >= 20
    });
    SPIN.store(false, Ordering::SeqCst);
    wait_for("20 samples on the thread's own stack", || {
        drain(&mut locked);
        count(false) >= 20
    });
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let report = Arc::into_inner(sampler).unwrap().stop(&mut locked, &mut |_| {});
    let seen = seen.into_inner().unwrap();
    for &(on_alt, frames, truncated, leaf_only) in &seen {
        if on_alt {
            assert!(
                leaf_only && truncated && frames == 1,
                "a sample on the signal stack: {frames} frames, truncated {truncated}, leaf_only {leaf_only}"
            );
        } else {
            assert!(!leaf_only, "a sample on the thread's own stack is leaf-only");
        }
    }
    // On its own stack, spinning in `burn_until` under the thread's entry: complete stacks.
    let own: Vec<_> = seen.iter().filter(|s| !s.0).collect();
    assert!(own.iter().all(|s| s.1 > 3 && !s.2), "own-stack samples must be whole and not truncated: {own:?}");
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost, "{:?}", report.stats);
}

/// Calls `f` through a frame whose saved frame pointer is garbage, as a function built without
/// frame pointers (libc's, say) leaves it: the chain from `f` up breaks there.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn call_through_broken_frame_chain(f: extern "C" fn()) {
    // SAFETY: saves rbp, puts a garbage value (aligned, outside every stack) in it for the call,
    // restores it; the stack stays 16-byte aligned at the call (two pushes: rbp and the return
    // address of this asm's caller frame are accounted for by the compiler's own frame).
    unsafe {
        std::arch::asm!(
            "push rbp",
            "sub rsp, 8",
            "mov rbp, 0x1000",
            "call {f}",
            "add rsp, 8",
            "pop rbp",
            f = in(reg) f,
            clobber_abi("C"),
        );
    }
}

static BROKEN_SPIN: AtomicBool = AtomicBool::new(false);

extern "C" fn spin_with_broken_chain_below() {
    while BROKEN_SPIN.load(Ordering::Relaxed) {
        black_box(burn_spin(1000));
    }
}

/// A walk that ends on a broken frame-pointer chain (code without frame pointers
/// between the sampled function and the thread's entry) is truncated (before: it looked like a
/// complete stack).
#[cfg(target_arch = "x86_64")]
#[test]
fn a_broken_frame_pointer_chain_marks_the_stack_truncated() {
    let _s = serial();
    let (sampler, mut locked) = Sampler::start(config(SamplingMode::CpuTimer, 4)).unwrap();
    let sampler = Arc::new(sampler);
    let tid = Arc::new(AtomicU32::new(0));
    BROKEN_SPIN.store(true, Ordering::SeqCst);
    let worker = {
        let (sampler, tid) = (sampler.clone(), tid.clone());
        std::thread::spawn(move || {
            sampler.register_current_thread().unwrap();
            tid.store(gettid(), Ordering::SeqCst);
            call_through_broken_frame_chain(spin_with_broken_chain_below);
        })
    };
    wait_for("the worker", || tid.load(Ordering::SeqCst) != 0);
    let tid = tid.load(Ordering::SeqCst);
    let seen: Mutex<Vec<(usize, bool, bool)>> = Mutex::new(Vec::new());
    wait_for("20 samples", || {
        sampler.drain(&mut locked, &mut |r: &SampleRecord<'_>| {
            if r.tid == tid {
                seen.lock().unwrap().push((r.ips.len(), r.truncated, r.leaf_only));
            }
        });
        seen.lock().unwrap().len() >= 20
    });
    BROKEN_SPIN.store(false, Ordering::SeqCst);
    worker.join().unwrap();
    let _ = Arc::into_inner(sampler).unwrap().stop(&mut locked, &mut |_| {});
    let seen = seen.into_inner().unwrap();
    // The walk stops at the garbage frame pointer: the spinning function and its callees only
    // (without the break, the thread's entry frames would follow).
    assert!(seen.iter().all(|s| s.0 <= 8 && !s.2), "{seen:?}");
    assert!(seen.iter().all(|s| s.1), "a stack cut at a broken chain must be truncated: {seen:?}");
}

/// A perf event's SIGPROF that was still pending when its thread was unregistered (or
/// the sampler stopped) is ours and stale: it must not reach the application's own SIGPROF
/// handler (before: it was chained to it, with an si_fd the application never opened). The
/// thread blocks SIGPROF so the signal is surely pending across the disarm, then unblocks it.
#[test]
fn stale_perf_signals_never_reach_the_applications_handler() {
    let _s = serial();
    set_handler(app_handler_a as *const () as usize);
    HIT_A.store(0, Ordering::SeqCst);
    let (sampler, mut locked) = match Sampler::start(config(SamplingMode::PerfEvent, 64)) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            set_handler(libc::SIG_DFL);
            eprintln!("SKIPPED: perf_event_open is not permitted on this machine (perf_event_paranoid)");
            return;
        }
        Err(e) => panic!("start: {e}"),
    };
    let sampler = Arc::new(sampler);
    let perf_fds = || -> Vec<i32> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains("perf_event")))
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    };
    let sigprof_pending = || {
        // SAFETY: sigpending fills a valid sigset.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut set);
            libc::sigismember(&set, libc::SIGPROF) == 1
        }
    };
    let block = |how: libc::c_int| {
        // SAFETY: changes this thread's mask for SIGPROF only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPROF);
            assert_eq!(libc::pthread_sigmask(how, &set, std::ptr::null_mut()), 0);
        }
    };
    // 1. Unregistration while a signal is pending.
    let leftover = std::thread::spawn({
        let sampler = sampler.clone();
        move || {
            sampler.register_current_thread().unwrap();
            let fds = perf_fds();
            block(libc::SIG_BLOCK);
            while !sigprof_pending() {
                black_box(burn_spin(10_000));
            }
            sampler.unregister_current_thread();
            block(libc::SIG_UNBLOCK);
            fds
        }
    })
    .join()
    .unwrap();
    assert_eq!(HIT_A.load(Ordering::SeqCst), 0, "a stale perf signal reached the application's handler");
    assert!(sampler.stats().stale >= 1, "the stale signal was seen: {:?}", sampler.stats());
    // Its fd number is released once the signal was delivered.
    sampler.discover_threads_unlocked();
    sampler.drain(&mut locked, &mut |_| {});
    let open_now = perf_fds();
    for fd in &leftover {
        // SAFETY: F_GETFD on a number only queries it.
        let open = unsafe { libc::fcntl(*fd, libc::F_GETFD) } != -1;
        assert!(!open || open_now.contains(fd), "perf fd {fd} still held after its signal was delivered");
    }

    // 2. Stop while a signal is pending on a sampled thread.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn({
        let sampler = sampler.clone();
        move || {
            sampler.register_current_thread().unwrap();
            block(libc::SIG_BLOCK);
            while !sigprof_pending() {
                black_box(burn_spin(10_000));
            }
            drop(sampler);
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            block(libc::SIG_UNBLOCK);
        }
    });
    ready_rx.recv().unwrap();
    let _ = Arc::into_inner(sampler).unwrap().stop(&mut locked, &mut |_| {});
    go_tx.send(()).unwrap();
    t.join().unwrap();
    let hits = HIT_A.load(Ordering::SeqCst);
    set_handler(libc::SIG_DFL);
    assert_eq!(hits, 0, "a stale perf signal reached the application's handler after stop");
}

#[inline(never)]
fn recurse_then_burn(depth: u32, stop: &AtomicBool) -> u64 {
    if depth == 0 {
        return burn_until(stop);
    }
    black_box(recurse_then_burn(depth - 1, stop)) + 1
}

/// Why `tests/deep_stacks.rs`' 3000-deep case lost samples now and then, even on an idle machine:
/// a sample larger than a buffer is written as fragments into fresh buffers, all or nothing, so
/// it needs that many filled spare entries when it is taken. Before, only L holders refilled
/// spares, and a registering thread got one buffer (the rest at the next refill: a drain, or the
/// recorder thread's discovery, every 100 ms, under L). Until then, or whenever L was held for
/// long (the first flushes of a deep recording intern and symbolize thousands of frames), every
/// deep sample was lost whole (counted, so the test's `lost == 0` failed). Now registration fills
/// every spare entry and the recorder thread refills them without L, from the pool.
///
/// Here L is never free: the test holds `SamplerLocked` and drains nothing while the deep thread
/// runs; the recorder thread's stand-in only waits in `wait_pending` (it refills from the pool).
/// Every sample (2048 frames: three 8 KiB fragments) must still be written whole, none lost. The
/// thread's own 127 spare entries hold about 42 samples, twice the 20 asked for, so the result
/// does not depend on when the recorder's stand-in gets a CPU on a loaded machine (before, the
/// thread had one buffer and lost every sample).
#[test]
fn deep_samples_are_not_lost_while_l_is_held() {
    let _s = serial();
    let cfg = SamplerConfig {
        period: Duration::from_millis(2),
        mode: SamplingMode::Auto,
        buffer_bytes: 8192,
        buffers_per_thread: 128,
        max_threads: 4,
        max_depth: 2048,
        ..SamplerConfig::default()
    };
    let (sampler, mut locked) = Sampler::start(cfg).unwrap();
    let sampler = Arc::new(sampler);
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU32::new(0));
    let deep = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn({
            let (sampler, stop, tid) = (sampler.clone(), stop.clone(), tid.clone());
            move || {
                sampler.register_current_thread().unwrap();
                tid.store(gettid(), Ordering::Relaxed);
                black_box(recurse_then_burn(3000, &stop));
                sampler.unregister_current_thread();
            }
        })
        .unwrap();
    let recorder_stop = Arc::new(AtomicBool::new(false));
    let recorder = std::thread::spawn({
        let (sampler, recorder_stop) = (sampler.clone(), recorder_stop.clone());
        move || {
            while !recorder_stop.load(Ordering::Relaxed) {
                sampler.wait_pending(Duration::from_millis(5));
            }
        }
    });
    wait_for("20 deep samples", || sampler.stats().taken >= 20);
    stop.store(true, Ordering::Relaxed);
    deep.join().unwrap();
    recorder_stop.store(true, Ordering::Relaxed);
    recorder.join().unwrap();
    let tid = tid.load(Ordering::Relaxed);
    // A sample may land on the way down (or up) the recursion, with fewer frames; the thread's
    // CPU time is spent at the bottom, so most samples are deep.
    let (mut whole, mut shallow, mut other) = (0u64, 0u64, 0u64);
    sampler.drain(&mut locked, &mut |r: &SampleRecord<'_>| {
        if r.tid != tid {
            other += 1;
        } else if r.ips.len() >= 2000 {
            whole += 1;
        } else {
            shallow += 1;
        }
    });
    let stats = sampler.stats();
    assert_eq!(stats.taken, stats.written + stats.lost, "taken = written + lost");
    assert_eq!(stats.lost, 0, "spares were refilled without L: nothing may be lost ({whole} written)");
    assert_eq!(other, 0, "every sample is the deep thread's");
    assert_eq!(whole + shallow, stats.written);
    assert!(whole * 2 >= stats.written, "most samples are deep and written whole: {whole} of {}", stats.written);
    let _ = Arc::into_inner(sampler).unwrap().stop(&mut locked, &mut |_| {});
}
