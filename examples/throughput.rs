//! Commits events from several threads as fast as possible for a few seconds and reports the rate,
//! the bytes written and the loss. `cargo run --release --example throughput -- [threads] [seconds]`
use recorder::{Event, EventSettings, Recorder};
use std::time::{Duration, Instant};

recorder::event! {
    #[event(name = "bench.Tick", label = "Tick")]
    pub struct Tick { pub n: u64, pub label: &'static str }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = std::env::temp_dir().join(format!("recorder-throughput-{}", std::process::id()));
    let rec = Recorder::builder()
        .repository(&dir)
        .event("bench.Tick", EventSettings { stack_trace: false, ..Default::default() })
        .max_size(1 << 34)
        .start()
        .unwrap();
    let start = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while start.elapsed() < Duration::from_secs(seconds) {
                        for _ in 0..1000 {
                            Tick { n, label: "tick" }.commit();
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let elapsed = start.elapsed();
    let stats = rec.stats();
    let repo = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let bytes: u64 = std::fs::read_dir(&repo).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    println!(
        "threads={threads} events={total} rate={:.1}M/s lost={} written_bytes={} flushes={}",
        total as f64 / elapsed.as_secs_f64() / 1e6,
        stats.events_lost,
        bytes,
        stats.flushes
    );
    let _ = std::fs::remove_dir_all(&dir);
}
