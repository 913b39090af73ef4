//! Real signals: several CPU-bound threads sampled at 1 ms with tiny buffers while a drainer
//! (holding the mutex that stands for L) drains every few ms. Exact accounting per thread:
//! taken == written + lost.

mod common;

use common::serial;
use recorder::sampler::{Sampler, SamplerConfig, SamplerLocked, SamplingMode};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

#[inline(never)]
fn hot_leaf(x: u64) -> u64 {
    let mut v = x;
    for i in 0..2000u64 {
        v = black_box(v.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    v
}

#[inline(never)]
fn hot_fn(stop: &AtomicBool) -> u64 {
    let mut acc = 0u64;
    while !stop.load(Ordering::Relaxed) {
        acc = acc.wrapping_add(hot_leaf(acc));
    }
    black_box(acc)
}

#[derive(Default)]
struct Seen {
    per_tid: HashMap<u32, u64>,
    total: u64,
    zero_leaf: u64,
    hot_hits: u64,
    max_depth_seen: usize,
    ids: Vec<u64>,
}

fn run(mode: SamplingMode) {
    // One sampler per process at a time: the tests of this binary take turns.
    let _serial = serial();
    let config = SamplerConfig {
        period: Duration::from_millis(1),
        mode,
        buffer_bytes: 4096,
        buffers_per_thread: 2,
        max_threads: 16,
        max_depth: 64,
        ..SamplerConfig::default()
    };
    let (sampler, locked) = match Sampler::start(config) {
        Ok(v) => v,
        Err(e) if mode == SamplingMode::PerfEvent => {
            eprintln!("perf events unavailable here: {e}; skipping");
            return;
        }
        Err(e) => panic!("start: {e}"),
    };
    let sampler = Arc::new(sampler);
    let locked = Arc::new(Mutex::new(locked));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let hot = hot_fn as *const () as usize as u64;
    let leaf = hot_leaf as *const () as usize as u64;
    let mut on_record = {
        let seen = seen.clone();
        move |r: &recorder::sampler::SampleRecord<'_>| {
            let mut s = seen.lock().unwrap();
            *s.per_tid.entry(r.tid).or_default() += 1;
            s.total += 1;
            s.ids.push(r.sample_id);
            if r.ips.first().copied().unwrap_or(0) == 0 {
                s.zero_leaf += 1;
            }
            s.max_depth_seen = s.max_depth_seen.max(r.ips.len());
            if r.ips.iter().any(|&ip| (ip >= hot && ip < hot + 4096) || (ip >= leaf && ip < leaf + 4096)) {
                s.hot_hits += 1;
            }
        }
    };

    let stop_work = Arc::new(AtomicBool::new(false));
    let stop_drain = Arc::new(AtomicBool::new(false));
    let nthreads = 3;
    let parked = Arc::new(Barrier::new(nthreads + 1));
    let release = Arc::new(Barrier::new(nthreads + 1));
    let registered = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..nthreads {
        let (sampler, stop_work, parked, release, registered) =
            (sampler.clone(), stop_work.clone(), parked.clone(), release.clone(), registered.clone());
        workers.push(std::thread::spawn(move || {
            sampler.register_current_thread().expect("register");
            registered.fetch_add(1, Ordering::SeqCst);
            hot_fn(&stop_work);
            parked.wait(); // blocked: no CPU time, so no samples
            release.wait();
            sampler.unregister_current_thread();
        }));
    }
    let drainer = {
        let (sampler, locked, stop_drain) = (sampler.clone(), locked.clone(), stop_drain.clone());
        let mut on_record = on_record.clone();
        std::thread::spawn(move || {
            sampler.exclude_current_thread();
            let mut rounds = 0u64;
            while !stop_drain.load(Ordering::Relaxed) {
                sampler.wait_pending(Duration::from_millis(3));
                let mut l = locked.lock().unwrap();
                sampler.drain(&mut l, &mut on_record);
                rounds += 1;
            }
            rounds
        })
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop_work.store(true, Ordering::Relaxed);
    parked.wait();
    stop_drain.store(true, Ordering::Relaxed);
    let rounds = drainer.join().unwrap();
    {
        let mut l: std::sync::MutexGuard<'_, SamplerLocked> = locked.lock().unwrap();
        sampler.drain(&mut l, &mut on_record);
        sampler.drain(&mut l, &mut on_record);
    }
    let stats = sampler.stats();
    let s = seen.lock().unwrap();
    eprintln!(
        "mode {:?} rounds {rounds} stats {:?} total seen {} hot hits {} max depth {}",
        sampler.mode(),
        stats,
        s.total,
        s.hot_hits,
        s.max_depth_seen
    );
    assert_eq!(stats.threads.len(), nthreads, "one slot per worker");
    let mut any_lost = 0;
    for t in &stats.threads {
        assert_eq!(
            t.taken,
            t.written + t.lost,
            "thread {} taken {} written {} lost {}",
            t.tid,
            t.taken,
            t.written,
            t.lost
        );
        assert_eq!(
            s.per_tid.get(&t.tid).copied().unwrap_or(0),
            t.written,
            "callback count equals written for {}",
            t.tid
        );
        assert!(t.written > 0, "thread {} had no sample written", t.tid);
        any_lost += t.lost;
    }
    assert_eq!(stats.taken, stats.written + stats.lost);
    assert_eq!(s.total, stats.written);
    assert_eq!(s.zero_leaf, 0, "ips[0] must never be 0");
    assert!(s.hot_hits > 0, "no sample inside hot_fn/hot_leaf");
    assert!(s.max_depth_seen > 2, "frame-pointer walk never went deeper than 2 frames");
    let mut ids = s.ids.clone();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), s.ids.len(), "a sample was handed out twice");
    eprintln!("lost {any_lost}");
    drop(s);
    release.wait();
    for w in workers {
        w.join().unwrap();
    }
    let sampler = Arc::try_unwrap(sampler).expect("sole owner");
    let mut l = locked.lock().unwrap();
    let report = sampler.stop(&mut l, &mut on_record);
    assert_eq!(report.stats.taken, report.stats.written + report.stats.lost);
}

#[test]
fn exact_accounting_cpu_timer() {
    run(SamplingMode::CpuTimer);
}

#[test]
fn exact_accounting_perf_event() {
    run(SamplingMode::PerfEvent);
}
