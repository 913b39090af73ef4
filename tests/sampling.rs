//! CPU sampling through the whole recorder: every sample taken is written or counted as lost,
//! per thread, across flushes and rotations; the JDK's streaming reader receives samples with
//! their stacks while the chunk is still being written.

mod common;

use common::*;
use recorder::{Recorder, SamplingMode};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[inline(never)]
fn spin_in_sampled_workload(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
    }
    x
}

#[inline(never)]
fn deep_sampled_chain(depth: u32, stop: &AtomicBool) -> u64 {
    if depth == 0 {
        return spin_in_sampled_workload(stop);
    }
    std::hint::black_box(deep_sampled_chain(depth - 1, stop)) + 1
}

/// Runs `threads` sampled threads (even ones registered, odd ones discovered) until `done` says
/// the recording holds what the test is about. Load only makes that take longer; a generous
/// deadline turns a hang into a failure that says what was missing.
fn run_workload(rec: &Recorder, threads: usize, what: &str, done: impl Fn() -> bool) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for i in 0..threads {
            let stop = &stop;
            std::thread::Builder::new()
                .name(format!("sampled-{i}"))
                .spawn_scoped(s, move || {
                    if i % 2 == 0 {
                        rec.register_current_thread().unwrap();
                    } // odd threads are discovered by the recorder
                    deep_sampled_chain(20 + i as u32, stop)
                })
                .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(300);
        while !done() {
            if Instant::now() > deadline {
                stop.store(true, Ordering::Relaxed);
                panic!("after 300 s the recording still lacks {what}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
}

fn exactness(mode: SamplingMode) {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .sampling_mode(mode)
        .sampler_buffers(4096, 2)
        .flush_interval(Duration::from_millis(50))
        .max_chunk_age(Duration::from_millis(500))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    // What the test is about: samples of registered and discovered threads across flushes and at
    // least two chunk rotations. The workload runs until the recording has them, however loaded
    // the machine is (rotations follow the chunk age; samples follow the threads' CPU time).
    run_workload(&rec, 3, "two rotations and 100 samples", || {
        chunk_files(&repo).len() >= 3 && rec.sampler_stats().is_some_and(|s| s.taken > 100)
    });
    let report = rec.stop_with_report().unwrap();
    let sampler = report.sampler.expect("sampling was on");
    let mut written: HashMap<i64, u64> = HashMap::new();
    let mut lost: HashMap<i64, i64> = HashMap::new();
    let chunks = chunk_files(&repo);
    // Exactness across rotations is the point: the workload above ran until there were two.
    assert!(chunks.len() >= 3, "two rotations ({} chunks)", chunks.len());
    for c in &chunks {
        let bytes = bytes::Bytes::from(std::fs::read(c).unwrap());
        for chunk in jfr_format::chunks(bytes) {
            let chunk = chunk.unwrap();
            for e in chunk.events() {
                let e = e.unwrap();
                let name = chunk.types().class(e.type_id).unwrap().name.as_str();
                match name {
                    "jdk.ExecutionSample" => {
                        let t = chunk.event_thread(&e).unwrap().expect("sampled thread");
                        *written.entry(t.os_thread_id).or_default() += 1;
                        let stack = chunk.event_stack_trace(&e).unwrap().expect("a stack");
                        assert!(!stack.frames.is_empty());
                    }
                    "recorder.DataLoss" => {
                        let samples = chunk.event_field(&e, "samples").unwrap().as_i64().unwrap();
                        let tid = match chunk.event_field(&e, "thread") {
                            Some(v) => chunk.thread_info(v).unwrap().map_or(0, |t| t.os_thread_id),
                            None => 0,
                        };
                        *lost.entry(tid).or_default() += samples;
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(sampler.taken > 100, "{sampler:?}");
    assert_eq!(sampler.unattributed, 0);
    for t in &sampler.threads {
        let tid = i64::from(t.tid);
        let w = written.get(&tid).copied().unwrap_or(0);
        let l = lost.get(&tid).copied().unwrap_or(0) as u64;
        assert_eq!(t.taken, w + l, "thread {}: taken {} != written {w} + lost {l}", t.tid, t.taken);
    }
    let total_written: u64 = written.values().sum();
    assert_eq!(total_written, report.stats.samples_written);
    assert_eq!(sampler.taken, total_written + lost.values().sum::<i64>() as u64);
}

#[test]
fn every_sample_taken_is_written_or_counted_lost_perf_events() {
    exactness(SamplingMode::Auto);
}

#[test]
fn every_sample_taken_is_written_or_counted_lost_cpu_timers() {
    exactness(SamplingMode::CpuTimer);
}

#[test]
fn jdk_stream_receives_samples_with_stacks_before_the_chunk_is_finished() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(2))
        .flush_interval(Duration::from_millis(100))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let (mut child, rx) = live_jdk_stream(&repo, &["jdk.ExecutionSample"]);
    let stop = AtomicBool::new(false);
    let mut tops: HashMap<String, u64> = HashMap::new();
    let mut samples = 0;
    let mut in_workload = 0;
    let mut strays: Vec<String> = Vec::new();
    std::thread::scope(|s| {
        let stop = &stop;
        std::thread::Builder::new()
            .name("sampled-worker".into())
            .spawn_scoped(s, || {
                rec.register_current_thread().unwrap();
                deep_sampled_chain(10, stop)
            })
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        // While the recording runs (its only chunk unfinished), samples arrive with stacks.
        while samples < 200 && Instant::now() < deadline {
            let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else { continue };
            if let Some(rest) = line.strip_prefix("EVENT ") {
                let parts: Vec<&str> = rest.split(' ').collect();
                let depth: usize = parts[1].parse().unwrap();
                assert!(depth > 0, "a streamed sample without its stack: {line}");
                *tops.entry(parts[2].to_owned()).or_default() += 1;
                let frames = parts.get(4).copied().unwrap_or("");
                if parts[3] == "sampled-worker" {
                    // Every sample of the workload thread names the workload's functions, or
                    // the registration that precedes them (the thread-start hook has it sampled
                    // already, and a loaded machine can catch it there).
                    let named = |f: &str| {
                        f == "sampling::deep_sampled_chain"
                            || f == "recorder::recorder::Recorder::register_current_thread"
                    };
                    if !frames.split(',').any(named) {
                        strays.push(line.clone());
                    }
                    in_workload += 1;
                }
                samples += 1;
            } else if line.starts_with("ERROR") {
                strays.push(line);
                break;
            }
        }
        // Stop the workload before any assertion, or a failure would wait for it forever.
        stop.store(true, Ordering::Relaxed);
    });
    assert!(strays.is_empty(), "samples of the workload thread without its frames, or errors: {strays:#?}");
    let chunks_while_streaming = chunk_files(&repo);
    let live = std::fs::read(&chunks_while_streaming[0]).unwrap();
    assert_ne!(live[64], 0, "the chunk was still in progress while the samples streamed");
    rec.stop().unwrap();
    let _ = child.wait();
    assert!(samples >= 200, "only {samples} samples streamed: {tops:?}");
    // The workload is the only busy thread (the recorder's own threads are not sampled).
    assert!(in_workload * 10 >= samples * 8, "{in_workload} of {samples} samples are the workload's: {tops:?}");
}
