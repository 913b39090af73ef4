//! What thread discovery costs in a process with many threads (it runs without L, so a long
//! discovery delays no flush): `cargo run --release --example discovery_cost [THREADS]` (default 1500).
//!
//! Spawns THREADS parked threads, starts a sampler with a slot for each, and times
//! `Sampler::discover_threads_unlocked`: the first discovery (arms every thread), steady-state
//! discoveries (nothing new), and one after a tenth of the threads exited (retires their slots).
//! For each: wall time, how long the registry lock was held in all and at most at once, and how
//! long L was held (nothing: discovery is called without it; before, all of it ran under L).
//! Figures vary with load; run it side by side with other versions on the same machine.

use recorder::sampler::{DiscoveryReport, Sampler, SamplerConfig, SamplingMode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn show(what: &str, r: &DiscoveryReport) {
    println!(
        "{what:<34} {:>9.2} ms  registry lock {:>7.2} ms in all, {:>6.3} ms at most  L 0 ms  \
         (listed {}, armed {}, retired {}, kept {})",
        ms(r.elapsed),
        ms(r.registry_held),
        ms(r.registry_held_max),
        r.listed,
        r.armed,
        r.retired,
        r.kept_unproven
    );
}

fn main() {
    let n: usize = std::env::args().nth(1).map_or(1500, |a| a.parse().expect("THREADS"));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (stop, start) = (stop.clone(), start.clone());
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    start.wait();
                    // The first tenth exits early (see below); the rest park until the end.
                    let early = i < n / 10;
                    while !(stop.load(Ordering::Relaxed) || early && stop_early()) {
                        std::thread::park_timeout(Duration::from_millis(50));
                    }
                })
                .expect("spawn")
        })
        .collect();
    start.wait();
    let config = SamplerConfig {
        mode: SamplingMode::Auto,
        max_threads: n + 64,
        buffer_bytes: 4096,
        buffers_per_thread: 2,
        ..SamplerConfig::default()
    };
    let (sampler, mut locked) = Sampler::start(config).expect("start");
    sampler.exclude_current_thread();
    println!("{n} threads, sampling mode {:?}", sampler.mode());
    show("first discovery (arms all)", &sampler.discover_threads_unlocked());
    let mut steady: Vec<DiscoveryReport> = (0..10).map(|_| sampler.discover_threads_unlocked()).collect();
    steady.sort_by_key(|r| r.elapsed);
    show("steady state (median of 10)", &steady[5]);
    STOP_EARLY.store(true, Ordering::Relaxed);
    let (early, rest): (Vec<_>, Vec<_>) = threads.into_iter().enumerate().partition(|(i, _)| *i < n / 10);
    for (_, t) in early {
        t.thread().unpark();
        t.join().unwrap();
    }
    show("after a tenth exited (retires)", &sampler.discover_threads_unlocked());
    stop.store(true, Ordering::Relaxed);
    for (_, t) in rest {
        t.thread().unpark();
        t.join().unwrap();
    }
    let report = sampler.stop(&mut locked, &mut |_| {});
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost);
}

static STOP_EARLY: AtomicBool = AtomicBool::new(false);

fn stop_early() -> bool {
    STOP_EARLY.load(Ordering::Relaxed)
}
