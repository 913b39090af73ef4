//! On the real main thread (so this test has no harness): a *discovered* main thread's stack
//! bounds follow its growing stack. Its bounds come
//! from the `[stack]` mapping, which grows down on demand; a 4000-deep recursion (about 4 MiB)
//! takes it far below what was mapped when the thread was discovered. Before, every sample down
//! there held one frame and said nothing about it (the walk's bounds ended where the mapping
//! ended at discovery); now every one is walked through the recursion (the innermost `DEPTH_KEPT`
//! frames are kept, the rest counted as dropped).
//!
//! Also on the main thread: its shallow samples are complete (not truncated) although
//! its frame-pointer chain ends in libc's start-up code, which has no frame pointers.

use recorder::sampler::{SampleRecord, Sampler, SamplerConfig, SamplingMode};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEPTH: u32 = 4000;
/// Innermost frames kept per sample.
const DEPTH_KEPT: usize = 128;

/// Set while the main thread spins; cleared by the observer once it has what it needs.
static SPIN: AtomicBool = AtomicBool::new(false);
/// The main thread's stack pointer near the top of its stack (before the recursion).
static SHALLOW_SP: AtomicUsize = AtomicUsize::new(0);

#[inline(never)]
fn spin() -> u64 {
    let mut v = 1u64;
    while SPIN.load(Ordering::Relaxed) {
        for i in 0..1000u64 {
            v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    v
}

/// The main thread's stack pointer at the bottom of the recursion.
static BOTTOM_SP: AtomicUsize = AtomicUsize::new(0);

fn stack_pointer() -> usize {
    let x = 0u8;
    black_box(&x) as *const u8 as usize
}

/// `n` frames of about 1 KiB each, then spin.
#[inline(never)]
fn deep(n: u32) -> u64 {
    let mut pad = [0u8; 1000];
    pad[n as usize % 1000] = n as u8;
    let pad = black_box(&pad);
    if n == 0 {
        BOTTOM_SP.store(stack_pointer(), Ordering::SeqCst);
        return spin();
    }
    deep(n - 1) + u64::from(pad[7])
}

/// One main-thread sample: (sp, frames, truncated, leaf_only).
type Seen = Vec<(u64, usize, bool, bool)>;

fn main() {
    let config = SamplerConfig {
        period: Duration::from_millis(1),
        mode: SamplingMode::CpuTimer,
        max_depth: DEPTH_KEPT,
        ..Default::default()
    };
    let (sampler, locked) = Sampler::start(config).expect("start");
    let sampler = Arc::new(sampler);
    let locked = Arc::new(Mutex::new(locked));
    // SAFETY: no preconditions.
    let main_tid = unsafe { libc::syscall(libc::SYS_gettid) as u32 };
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let observer = {
        let (sampler, locked, seen) = (sampler.clone(), locked.clone(), seen.clone());
        std::thread::spawn(move || {
            // The recorder thread's part: discover (the main thread never registers), drain.
            sampler.exclude_current_thread();
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut phase = 0;
            while phase < 3 {
                assert!(Instant::now() < deadline, "no progress in 300 s: {:?}", seen.lock().unwrap());
                std::thread::sleep(Duration::from_millis(10));
                sampler.discover_threads_unlocked();
                sampler.drain(&mut locked.lock().unwrap(), &mut |r: &SampleRecord<'_>| {
                    if r.tid == main_tid {
                        seen.lock().unwrap().push((r.sp, r.ips.len(), r.truncated, r.leaf_only));
                    }
                });
                let shallow = SHALLOW_SP.load(Ordering::SeqCst) as u64;
                let s = seen.lock().unwrap();
                // Phase 1: bounds found (a whole shallow sample). Phase 2: 30 samples deep in the
                // recursion (more than 3 MiB below the shallow stack pointer). Phase 3: shallow again.
                let whole = |x: &&(u64, usize, bool, bool)| !x.3;
                let deep_ones = s.iter().filter(|x| shallow != 0 && x.0 + (3 << 20) < shallow).count();
                let next = match phase {
                    0 => s.iter().filter(whole).count() >= 10,
                    1 => deep_ones >= 30,
                    _ => s.iter().rev().take_while(|x| x.0 + (1 << 20) >= shallow).filter(whole).count() >= 10,
                };
                if next {
                    phase += 1;
                    SPIN.store(false, Ordering::SeqCst);
                }
            }
        })
    };
    SHALLOW_SP.store(stack_pointer(), Ordering::SeqCst);
    SPIN.store(true, Ordering::SeqCst);
    spin(); // shallow: discovered, bounds found
    SPIN.store(true, Ordering::SeqCst);
    black_box(deep(DEPTH)); // about 4 MiB below where the stack ended at discovery
    SPIN.store(true, Ordering::SeqCst);
    spin(); // shallow again
    observer.join().unwrap();
    let mut l = locked.lock().unwrap();
    let report = Arc::into_inner(sampler).unwrap().stop(&mut l, &mut |_| {});
    let seen = seen.lock().unwrap();

    let shallow = SHALLOW_SP.load(Ordering::SeqCst) as u64;
    let bottom = BOTTOM_SP.load(Ordering::SeqCst) as u64;
    println!("main_thread_stack: the recursion took the stack {} KiB down", (shallow - bottom) >> 10);
    assert!(shallow - bottom > 3 << 20, "the recursion must take the stack far below its discovery-time mapping");
    let deep_samples: Vec<_> = seen.iter().filter(|x| x.0 + (3 << 20) < shallow).collect();
    assert!(deep_samples.len() >= 30, "{seen:?}");
    for &&(sp, frames, truncated, leaf_only) in &deep_samples {
        assert!(
            !leaf_only && frames == DEPTH_KEPT && truncated,
            "a sample deep in the recursion (sp {sp:#x}) must be walked through it: {frames} frames, \
             truncated {truncated}, leaf_only {leaf_only}"
        );
    }
    // Shallow samples once the bounds were found: whole and complete (the chain ends in libc's
    // start-up code, at the process's start stack). A sample taken in the first MiB of the
    // recursion (on the way down or up) is near `shallow` too but DEPTH_KEPT frames deep: cut by
    // the depth limit, so truncated by design, never leaf-only.
    let first_whole = seen.iter().position(|x| !x.3).expect("a whole sample");
    let shallow_samples: Vec<_> = seen[first_whole..].iter().filter(|x| x.0 + (1 << 20) >= shallow).collect();
    assert!(!shallow_samples.is_empty());
    for &&(sp, frames, truncated, leaf_only) in &shallow_samples {
        assert!(
            !leaf_only && frames > 3 && (!truncated || frames == DEPTH_KEPT),
            "a shallow main-thread sample (sp {sp:#x}): {frames} frames, truncated {truncated}, leaf_only {leaf_only}"
        );
    }
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost, "{:?}", report.stats);
    println!(
        "main_thread_stack: ok ({} deep samples walked through the recursion, {} shallow samples complete)",
        deep_samples.len(),
        shallow_samples.len()
    );
}
