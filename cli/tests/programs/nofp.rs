// A Rust program built without frame pointers (`rustc -O -C force-frame-pointers=no`): its own
// functions address their frames through the stack pointer only.
use std::hint::black_box;
use std::time::Instant;

#[inline(never)]
fn hot_leaf(n: u64) -> u64 {
    let mut v = 1u64;
    for i in 0..n {
        v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    v
}

#[inline(never)]
fn level2(n: u64) -> u64 {
    black_box(hot_leaf(n)) ^ 3
}

#[inline(never)]
fn level1(n: u64) -> u64 {
    black_box(level2(n)) ^ 5
}

fn cpu_ms() -> f64 {
    let mut ts = std::mem::MaybeUninit::<[i64; 2]>::uninit();
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut [i64; 2]) -> i32;
    }
    // CLOCK_PROCESS_CPUTIME_ID = 2.
    unsafe {
        clock_gettime(2, ts.as_mut_ptr());
        let [s, ns] = ts.assume_init();
        s as f64 * 1e3 + ns as f64 / 1e6
    }
}

fn main() {
    let ms: f64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1500.0);
    let start = Instant::now();
    let mut acc = 0u64;
    while cpu_ms() < ms {
        acc ^= level1(1_000_000);
    }
    println!("{acc} in {:?}", start.elapsed());
}
