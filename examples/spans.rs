//! Spans, logs and scopes in one recording: a few threads serve "requests" as `tracing` spans,
//! with CPU work inside scopes, while the sampler runs. Writes `spans.jfr` (or the path given),
//! which `jfr print --events recorder.Span,recorder.Log`, `recorder dump --by-span` and
//! `recorder dump --weight self-time` read.
//!
//! `cargo run --release --example spans [-- OUT.jfr]`
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// CPU work for about `d`.
fn burn(d: Duration) -> u64 {
    let t = Instant::now();
    let mut x = 1u64;
    while t.elapsed() < d {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

#[recorder::profile]
fn parse(n: u32) -> u64 {
    burn(Duration::from_micros(300 * u64::from(n % 3 + 1)))
}

fn query(table: &str) -> u64 {
    let _span = tracing::debug_span!("db_query", table).entered();
    recorder::scope!("query");
    burn(Duration::from_millis(2))
}

fn handle(worker: u32, n: u32) -> u64 {
    let _span = tracing::info_span!("request", worker, n, path = "/orders").entered();
    let mut x = parse(n);
    x ^= query("orders");
    if n.is_multiple_of(5) {
        tracing::warn!(n, "slow request");
    }
    x
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).unwrap_or_else(|| "spans.jfr".into());
    // The layer first: see the README ("Span context on CPU samples").
    tracing_subscriber::registry().with(recorder::tracing::RecorderLayer::new()).init();
    let rec = recorder::Recorder::builder().sampling_period(Duration::from_millis(1)).start()?;
    let workers: Vec<_> = (0..3)
        .map(|w| {
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || (0..100).fold(0, |x, n| x ^ handle(w, n)))
                .expect("spawn")
        })
        .collect();
    let x = workers.into_iter().map(|h| h.join().expect("worker")).fold(0, |a, b| a ^ b);
    std::hint::black_box(x);
    rec.dump(&out)?;
    let report = rec.scope_report();
    rec.stop()?;
    print!("{}", report.collapsed(recorder::scope::Weight::SelfTime));
    println!("wrote {out}");
    Ok(())
}
