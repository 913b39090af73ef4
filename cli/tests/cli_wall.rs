//! Wall-clock profiles through the CLI: `dump --type wall --format collapsed`
//! weighs each stack by the periods its `profiler.WallClockSample` events stand for (`samples`,
//! batches of idle periods included), and `summary` counts the wall samples and their periods.
//! The recording is made by this test binary.

mod common;

use common::*;
use recorder::Recorder;
use std::time::{Duration, Instant};

#[inline(never)]
fn wall_spin(d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < end {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    x
}

#[inline(never)]
fn wall_nap(d: Duration) {
    // Run a little first, so the thread's stack is sampled before it sleeps.
    wall_spin(Duration::from_millis(30));
    std::thread::sleep(d);
}

#[test]
fn dump_type_wall_weighs_stacks_by_samples_and_summary_counts_periods() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .cpu_sampling(false)
        .wall_clock_sampling(Duration::from_millis(10))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let napper = std::thread::Builder::new().name("napper".into()).spawn(|| wall_nap(Duration::from_secs(2))).unwrap();
    let spinner =
        std::thread::Builder::new().name("spinner".into()).spawn(|| wall_spin(Duration::from_secs(1))).unwrap();
    napper.join().unwrap();
    spinner.join().unwrap();
    let report = rec.stop_with_report().unwrap();
    let wall = report.sampler.unwrap().wall.unwrap();
    let repo = repo.to_str().unwrap();

    // What the file holds, by our reader: events and the periods they stand for.
    let json = recorder_ok(&["summary", "--json", repo]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let events = v["wall_samples"]["events"].as_u64().unwrap();
    let periods = v["wall_samples"]["periods"].as_u64().unwrap();
    assert!(periods > events, "idle periods are batched: {events} events, {periods} periods");
    assert!(periods <= wall.periods, "{periods} written of {wall:?}");
    let text = recorder_ok(&["summary", repo]);
    assert!(text.contains(&format!("Wall-clock samples: {events} events standing for {periods} periods")), "{text}");

    // The collapsed wall profile sums to the periods, and the nap (about 2 s / 10 ms = 200
    // periods) outweighs the 1 s spin.
    let out = recorder_ok(&["dump", repo, "--format", "collapsed", "--type", "wall"]);
    let lines: Vec<(String, u64)> = out
        .lines()
        .map(|l| {
            let (s, n) = l.rsplit_once(' ').unwrap();
            (s.to_owned(), n.parse().unwrap())
        })
        .collect();
    let total: u64 = lines.iter().map(|l| l.1).sum();
    assert_eq!(total, periods, "collapsed weights are the events' samples");
    // The napper's 2 s stand on its last sampled stack: its warm-up spin in wall_nap, or std's
    // sleep on its way into nanosleep (where the frame-pointer walk may skip wall_nap).
    let nap = lines
        .iter()
        .filter(|(s, _)| s.contains("wall_nap") || s.contains("thread::functions::sleep"))
        .map(|l| l.1)
        .sum::<u64>();
    let spin =
        lines.iter().filter(|(s, _)| s.contains("wall_spin") && !s.contains("wall_nap")).map(|l| l.1).sum::<u64>();
    assert!(nap >= 150, "the 2 s nap stands for ~200 periods: {nap} ({lines:?})");
    // The spinner's 1 s: fewer periods than the nap (some lost to a late sampler under load, some
    // outside wall_spin where a sample in a callee's prologue skips its caller).
    assert!(spin > 0 && nap > spin, "nap {nap} vs spin {spin}");
}
