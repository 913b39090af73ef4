//! Allocation sampling: cost and accuracy, plain output (`cargo bench --bench alloc`).
//!
//! 1. Unsampled allocation + free, side by side in one run: the system allocator called directly,
//!    the sampling allocator with no recording, and with a recording sampling at the default
//!    interval (512 KiB: ~1 allocation in 8000 of 64 B is sampled).
//! 2. The cost of one sampled allocation (stack walk, record, commit), from the difference
//!    between a small interval and no recording, divided by the samples taken.
//! 3. A whole allocation-heavy program (BTreeMaps of Strings built and dropped) with and without
//!    allocation sampling at the default interval.
//! 4. Estimation accuracy per call site at the default interval (1 B x 1 Mi, 1 KiB x 100 Ki,
//!    1 MiB x 100), over repeated recordings: bias, spread, and the spread theory predicts. For
//!    small allocations the spread of one run is about sqrt(interval / bytes at the site) (a
//!    Poisson count of samples): 1 MiB allocated at 512 KiB is ~2 samples, 71 %; a site is within
//!    5 % (one sd) from 400 x the interval (200 MiB) on. The mean over runs shows the bias.
//!
//! Costs are the measuring thread's CPU time (CLOCK_THREAD_CPUTIME_ID), repeated in alternating
//! rounds and reported as medians, so other load on the machine disturbs them less. Timing
//! numbers never go into tests.

use recorder::alloc::{SamplingAllocator, DEFAULT_INTERVAL};
use recorder::Recorder;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

#[global_allocator]
static GLOBAL: SamplingAllocator = SamplingAllocator::new();

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

const PAIRS: usize = 2_000_000;

/// ns per alloc + free of `size` bytes through `a`.
fn pairs_with(a: &dyn GlobalAlloc, size: usize) -> f64 {
    let layout = Layout::from_size_align(size, 8).unwrap();
    let c0 = thread_cpu();
    for _ in 0..PAIRS {
        // SAFETY: a non-zero layout, freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            black_box(p);
            a.dealloc(p, layout);
        }
    }
    (thread_cpu() - c0).as_nanos() as f64 / PAIRS as f64
}

/// ns per alloc + free through the global allocator (the sampling allocator).
fn pairs_global(size: usize) -> f64 {
    let layout = Layout::from_size_align(size, 8).unwrap();
    let c0 = thread_cpu();
    for _ in 0..PAIRS {
        // SAFETY: as above.
        unsafe {
            let p = std::alloc::alloc(layout);
            black_box(p);
            std::alloc::dealloc(p, layout);
        }
    }
    (thread_cpu() - c0).as_nanos() as f64 / PAIRS as f64
}

fn recording(dir: &Path, interval: u64, live: bool) -> Recorder {
    Recorder::builder()
        .repository(dir)
        .no_sampling()
        .allocation_sampling(interval)
        .allocation_live_set(live)
        .start()
        .expect("recording")
}

fn unsampled_cost(dir: &Path) {
    println!("## Unsampled allocation + free (ns per pair, median of 7 alternating rounds, {PAIRS} pairs each)");
    println!();
    println!("| size | System | sampling allocator, no recording | + recording at 512 KiB | + live set (512 KiB) |");
    println!("|---:|---:|---:|---:|---:|");
    for size in [16usize, 64, 1024] {
        let (mut sys, mut off, mut on, mut live) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..7 {
            sys.push(pairs_with(&System, size));
            off.push(pairs_global(size));
            let rec = recording(dir, DEFAULT_INTERVAL, false);
            on.push(pairs_global(size));
            rec.stop().unwrap();
            let rec = recording(dir, DEFAULT_INTERVAL, true);
            live.push(pairs_global(size));
            rec.stop().unwrap();
        }
        let (s, o, n, l) = (median(sys), median(off), median(on), median(live));
        println!(
            "| {size} B | {s:.2} | {o:.2} (+{:.2}, x{:.3}) | {n:.2} (+{:.2}, x{:.3}) | {l:.2} (+{:.2}, x{:.3}) |",
            o - s,
            o / s,
            n - s,
            n / s,
            l - s,
            l / s
        );
    }
    println!();
}

#[inline(never)]
fn nest(depth: u32, f: &mut dyn FnMut()) {
    if depth == 0 {
        f();
    } else {
        nest(depth - 1, f);
        black_box(depth);
    }
}

fn sampled_cost(dir: &Path) {
    println!("## One sampled allocation (ns per sample: extra CPU time / samples taken, 64 B pairs)");
    println!();
    println!("| interval | stack depth | samples | ns per sample |");
    println!("|---:|---:|---:|---:|");
    for (interval, depth) in [(4096u64, 10u32), (4096, 60), (64 * 1024, 10)] {
        let (mut costs, mut samples) = (Vec::new(), 0);
        for _ in 0..5 {
            let mut base = 0.0;
            nest(depth, &mut || base = pairs_global(64));
            let rec = recording(dir, interval, false);
            let mut with = 0.0;
            nest(depth, &mut || with = pairs_global(64));
            let a = rec.stop_with_report().unwrap().allocation.unwrap();
            samples = a.taken;
            costs.push((with - base) * PAIRS as f64 / a.taken.max(1) as f64);
            assert_eq!(a.lost, 0, "the pool held every sample");
        }
        println!("| {interval} B | +{depth} frames | {samples} | {:.0} |", median(costs));
    }
    println!();
}

/// The allocation-heavy program: BTreeMaps of Strings built and dropped.
fn btree_workload(rounds: usize) -> usize {
    let mut total = 0;
    for r in 0..rounds {
        let mut m = BTreeMap::new();
        for i in 0..20_000 {
            m.insert(format!("key-{i:08}-{r}"), format!("value of {i} in round {r}"));
        }
        total += m.len();
        drop(black_box(m));
    }
    total
}

fn whole_program(dir: &Path) {
    println!("## Whole program: BTreeMap<String, String> of 20 000 entries built and dropped, 30 times");
    println!();
    let (mut off, mut on, mut live) = (Vec::new(), Vec::new(), Vec::new());
    let mut samples = 0;
    for _ in 0..9 {
        let c0 = thread_cpu();
        black_box(btree_workload(30));
        off.push((thread_cpu() - c0).as_secs_f64() * 1e3);
        let rec = recording(dir, DEFAULT_INTERVAL, false);
        let c0 = thread_cpu();
        black_box(btree_workload(30));
        on.push((thread_cpu() - c0).as_secs_f64() * 1e3);
        samples = rec.stop_with_report().unwrap().allocation.unwrap().taken;
        let rec = recording(dir, DEFAULT_INTERVAL, true);
        let c0 = thread_cpu();
        black_box(btree_workload(30));
        live.push((thread_cpu() - c0).as_secs_f64() * 1e3);
        rec.stop().unwrap();
    }
    let (o, n, l) = (median(off), median(on), median(live));
    println!("| run | CPU ms (median of 9) | overhead |");
    println!("|---|---:|---:|");
    println!("| sampling allocator, no recording | {o:.1} | - |");
    println!("| allocation sampling at 512 KiB ({samples} samples) | {n:.1} | {:+.2} % |", (n / o - 1.0) * 100.0);
    println!("| + live set | {l:.1} | {:+.2} % |", (l / o - 1.0) * 100.0);
    println!();
}

#[inline(never)]
fn site(n: usize, size: usize) {
    let layout = Layout::from_size_align(size, 1).unwrap();
    for _ in 0..n {
        // SAFETY: non-zero layout; freed with it.
        unsafe {
            let p = std::alloc::alloc(layout);
            black_box(p);
            std::alloc::dealloc(p, layout);
        }
    }
}

#[inline(never)]
fn site_1b_x_1mi() {
    site(1 << 20, 1);
    black_box(()); // not a tail call: the site's frame stays on the stack
}
#[inline(never)]
fn site_1kib_x_100ki() {
    site(100 << 10, 1024);
    black_box(()); // not a tail call: the site's frame stays on the stack
}
#[inline(never)]
fn site_1mib_x_100() {
    site(100, 1 << 20);
    black_box(()); // not a tail call: the site's frame stays on the stack
}

/// Sums the `weight` of the jdk.ObjectAllocationSample events per site function.
fn estimates(repo: &Path, names: &[&str]) -> Vec<f64> {
    let mut out = vec![0.0; names.len()];
    let mut files: Vec<_> = std::fs::read_dir(repo)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jfr"))
        .collect();
    files.sort();
    for f in files {
        let data = bytes::Bytes::from(std::fs::read(&f).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            let Some(class) = chunk.metadata().class_by_name("jdk.ObjectAllocationSample").cloned() else { continue };
            let weight_at = class.field_index("weight").unwrap();
            for event in chunk.events() {
                let event = event.unwrap();
                if event.type_id != class.id {
                    continue;
                }
                let Some(stack) = chunk.event_stack_trace(&event).unwrap() else { continue };
                let w = event.values[weight_at].as_i64().unwrap() as f64;
                for (i, n) in names.iter().enumerate() {
                    if stack.frames.iter().any(|fr| fr.qualified_name().contains(n)) {
                        out[i] += w;
                    }
                }
            }
        }
    }
    out
}

/// A call site of the estimation workload: what it allocates in all.
struct Site {
    name: &'static str,
    run: fn(),
    /// Bytes per allocation.
    size: f64,
    /// Bytes allocated in all.
    truth: f64,
}

fn estimation(dir: &Path) {
    const RUNS: usize = 100;
    let sites = [
        Site { name: "site_1b_x_1mi", run: site_1b_x_1mi, size: 1.0, truth: (1u64 << 20) as f64 },
        Site { name: "site_1kib_x_100ki", run: site_1kib_x_100ki, size: 1024.0, truth: (100u64 << 20) as f64 },
        Site { name: "site_1mib_x_100", run: site_1mib_x_100, size: (1u64 << 20) as f64, truth: (100u64 << 20) as f64 },
    ];
    let names: Vec<&str> = sites.iter().map(|s| s.name).collect();
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); sites.len()];
    for _ in 0..RUNS {
        let rec = recording(dir, DEFAULT_INTERVAL, false);
        let repo = rec.repository_dir().to_owned();
        for s in &sites {
            (s.run)();
        }
        let a = rec.stop_with_report().unwrap().allocation.unwrap();
        assert_eq!(a.lost, 0);
        for (i, e) in estimates(&repo, &names).into_iter().enumerate() {
            runs[i].push(e);
        }
        let _ = std::fs::remove_dir_all(&repo);
    }
    println!("## Estimated bytes per call site at 512 KiB ({RUNS} recordings)");
    println!();
    println!(
        "| site | truth | mean estimate (bias) | theory sd of the mean | spread per run (sd) | theory sd | runs within 5 % | worst run |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let r = DEFAULT_INTERVAL as f64;
    for (i, s) in sites.iter().enumerate() {
        let truth = s.truth;
        let errs: Vec<f64> = runs[i].iter().map(|e| e / truth - 1.0).collect();
        let mean = errs.iter().sum::<f64>() / RUNS as f64;
        let sd = (errs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (RUNS - 1) as f64).sqrt();
        // Per allocation of size s: variance of the HT term = s^2 (1 - p) / p, p = 1 - e^(-s/R).
        let p = 1.0 - (-s.size / r).exp();
        let n = truth / s.size;
        let theory = (n * s.size * s.size * (1.0 - p) / p).sqrt() / truth;
        let within = errs.iter().filter(|e| e.abs() <= 0.05).count();
        let worst = errs.iter().map(|e| e.abs()).fold(0.0, f64::max);
        println!(
            "| {} | {} | {:+.2} % | {:.2} % | {:.1} % | {:.1} % | {within}/{RUNS} | {:.1} % |",
            s.name,
            truth,
            mean * 100.0,
            theory / (RUNS as f64).sqrt() * 100.0,
            sd * 100.0,
            theory * 100.0,
            worst * 100.0
        );
    }
    println!();
}

fn main() {
    // `cargo bench` passes `--bench`; a name filter selects parts.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wants = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let dir = tempfile::tempdir().unwrap();
    if wants("unsampled") {
        unsampled_cost(dir.path());
    }
    if wants("sampled") {
        sampled_cost(dir.path());
    }
    if wants("program") {
        whole_program(dir.path());
    }
    if wants("estimation") {
        estimation(dir.path());
    }
}
