//! The built-in workload behind `recorder demo`: several threads with distinct hot functions
//! and some deep call chains, emitting typed events while the recorder records them.

use recorder::{Event, Recorder};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

recorder::event! {
    /// One unit of work of the demo.
    #[event(name = "demo.Request", label = "Request", description = "A simulated request handled by a worker", category = ["Demo"])]
    pub struct Request {
        #[field(label = "Worker")]
        pub worker: String,
        #[field(label = "Kind", description = "Which workload handled the request")]
        pub kind: &'static str,
        #[field(label = "Items")]
        pub items: u64,
        #[field(label = "Checksum")]
        pub checksum: u64,
    }
}

recorder::event! {
    /// A cache miss in the demo's lookup workload.
    #[event(name = "demo.CacheMiss", label = "Cache Miss", category = ["Demo"])]
    pub struct CacheMiss {
        #[field(label = "Key")]
        pub key: u64,
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How long the workload runs.
    pub duration: Duration,
    /// Threads running the workload.
    pub threads: usize,
}

/// What the demo did.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// Requests committed.
    pub requests: u64,
}

#[inline(never)]
fn hash_bytes(data: &[u8], rounds: u32) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..rounds {
        for &b in data {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x1000_0000_01b3);
        }
    }
    h
}

#[inline(never)]
fn sort_numbers(seed: u64, n: usize) -> u64 {
    let mut x = seed | 1;
    let mut v: Vec<u64> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    v.sort_unstable();
    v[n / 2]
}

#[inline(never)]
fn recurse_deep(depth: u32, acc: u64) -> u64 {
    if depth == 0 {
        return hash_bytes(&acc.to_le_bytes(), 2000);
    }
    let r = recurse_deep(depth - 1, acc.wrapping_mul(31).wrapping_add(u64::from(depth)));
    std::hint::black_box(r)
}

#[inline(never)]
fn lookup_cache(keys: u64) -> u64 {
    let mut hits = 0;
    for k in 0..keys {
        let key = k.wrapping_mul(0x9e37_79b9) % 1000;
        if key % 211 == 0 {
            CacheMiss { key }.commit();
        } else {
            hits += 1;
        }
        hits = std::hint::black_box(hits);
    }
    hits
}

#[inline(never)]
fn worker(recorder: &Recorder, index: usize, stop: &AtomicBool, requests: &AtomicU64) {
    // Sampled from its first instruction, with exact stack bounds (discovery would take ~100 ms).
    let _ = recorder.register_current_thread();
    let name = format!("demo-worker-{index}");
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + index as u32) as u8).collect();
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let kind = ["hash", "sort", "recurse", "lookup"][(index + round as usize) % 4];
        let mut request = Request { worker: name.clone(), kind, items: 0, checksum: 0 }.begin();
        let (items, checksum) = match kind {
            "hash" => (data.len() as u64, hash_bytes(&data, 50)),
            "sort" => (20_000, sort_numbers(round, 20_000)),
            "recurse" => (60, recurse_deep(60, round)),
            _ => (2_000, lookup_cache(2_000)),
        };
        request.items = items;
        request.checksum = checksum;
        request.end();
        requests.fetch_add(1, Ordering::Relaxed);
        round += 1;
    }
}

/// Runs the workload while `recorder` records (the caller stops or dumps it).
pub fn run_with(recorder: &Recorder, options: &DemoOptions) -> DemoReport {
    let stop = AtomicBool::new(false);
    let requests = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for i in 0..options.threads.max(1) {
            let (stop, requests) = (&stop, &requests);
            std::thread::Builder::new()
                .name(format!("demo-worker-{i}"))
                .spawn_scoped(s, move || worker(recorder, i, stop, requests))
                .expect("spawn a demo worker");
        }
        while started.elapsed() < options.duration {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
    DemoReport { requests: requests.load(Ordering::Relaxed) }
}
