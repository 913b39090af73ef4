//! The capture path allocates nothing: a counting global allocator counts allocations per thread
//! (by kernel tid, in a fixed table, without allocating itself). A sampled thread that never
//! allocates in its own loop must show an unchanged count across a burst of signals, while the
//! handler demonstrably ran on it (taken > 0), including buffer rotations and recorder wakeups.

use recorder::sampler::{Sampler, SamplerConfig, SamplingMode};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TABLE: usize = 4096;
static TIDS: [AtomicU32; TABLE] = [const { AtomicU32::new(0) }; TABLE];
static COUNTS: [AtomicU64; TABLE] = [const { AtomicU64::new(0) }; TABLE];

fn gettid() -> u32 {
    // SAFETY: no preconditions; async-signal-safe and allocation-free.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Counter cell for `tid` (open addressing; claims a free cell by CAS).
fn cell(tid: u32) -> Option<&'static AtomicU64> {
    let start = tid as usize % TABLE;
    for k in 0..TABLE {
        let i = (start + k) % TABLE;
        let t = TIDS[i].load(Ordering::Acquire);
        if t == tid {
            return Some(&COUNTS[i]);
        }
        if t == 0 && TIDS[i].compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return Some(&COUNTS[i]);
        }
        if TIDS[i].load(Ordering::Acquire) == tid {
            return Some(&COUNTS[i]);
        }
    }
    None
}

struct Counting;

// SAFETY: forwards to the system allocator; the bookkeeping allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(c) = cell(gettid()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Some(c) = cell(gettid()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn my_count() -> u64 {
    cell(gettid()).map_or(0, |c| c.load(Ordering::Relaxed))
}

#[inline(never)]
fn recurse(depth: u32, v: u64) -> u64 {
    if depth == 0 {
        let mut x = v;
        for i in 0..5000u64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        x
    } else {
        black_box(recurse(depth - 1, v ^ u64::from(depth)))
    }
}

fn burst(mode: SamplingMode) {
    let config = SamplerConfig {
        period: Duration::from_micros(200),
        mode,
        buffer_bytes: 4096,
        buffers_per_thread: 3,
        max_threads: 8,
        max_depth: 64,
        // The table walk, the handler's heavier path (frame-pointer steps where it finds no row).
        unwinder: recorder::Unwinder::Dwarf,
        tables_in_background: false,
        cpu: true,
        wall: None,
    };
    let (sampler, locked) = match Sampler::start(config) {
        Ok(v) => v,
        Err(e) if mode == SamplingMode::PerfEvent => {
            eprintln!("perf events unavailable: {e}; skipping");
            return;
        }
        Err(e) => panic!("start: {e}"),
    };
    let sampler = Arc::new(sampler);
    let locked = Arc::new(Mutex::new(locked));
    let done = Arc::new(AtomicBool::new(false));
    let drainer = {
        let (sampler, locked, done) = (sampler.clone(), locked.clone(), done.clone());
        std::thread::spawn(move || {
            sampler.exclude_current_thread();
            while !done.load(Ordering::Relaxed) {
                sampler.wait_pending(Duration::from_millis(2));
                sampler.drain(&mut locked.lock().unwrap(), &mut |_| {});
            }
        })
    };
    let s2 = sampler.clone();
    let (allocs, taken_on_me) = std::thread::spawn(move || {
        s2.register_current_thread().unwrap();
        let tid = gettid();
        let t0 = Instant::now();
        let before = my_count();
        // The loop below allocates nothing itself; every sample taken meanwhile ran the handler
        // on this thread (deep stacks via recursion, rotations through small buffers).
        let mut v = 0u64;
        while t0.elapsed() < Duration::from_millis(1000) {
            v = recurse(40, v);
        }
        let after = my_count();
        black_box(v);
        let taken = s2.stats().threads.iter().find(|t| t.tid == tid).map_or(0, |t| t.taken);
        s2.unregister_current_thread();
        (after - before, taken)
    })
    .join()
    .unwrap();
    done.store(true, Ordering::Relaxed);
    drainer.join().unwrap();
    let sampler = Arc::try_unwrap(sampler).expect("sole owner");
    let report = sampler.stop(&mut locked.lock().unwrap(), &mut |_| {});
    eprintln!("{mode:?}: allocations on the sampled thread during the burst: {allocs}; samples taken on it: {taken_on_me}; {:?}", report.stats);
    assert!(taken_on_me > 10, "the handler must have run on the thread ({taken_on_me})");
    assert_eq!(allocs, 0, "the signal handler allocated");
}

#[test]
fn handler_allocates_nothing() {
    burst(SamplingMode::CpuTimer);
    burst(SamplingMode::PerfEvent);
}

/// The detector works: an allocation on the thread is counted (so the test above can fail).
#[test]
fn counter_sees_allocations() {
    let before = my_count();
    let v: Vec<u64> = black_box(Vec::with_capacity(16));
    drop(v);
    assert!(my_count() > before);
}
