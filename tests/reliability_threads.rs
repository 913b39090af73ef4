//! Thread storms under 1 kHz sampling: ten thousand short-lived threads (50 at a time), sampled
//! from their start (`recorder::thread_hooks`), that burn a little CPU and commit events. No slot
//! is refused to a thread that needed one, or each refusal is counted and reported for its thread. No crash, no slot or buffer leak
//! (no sampler slot of an exited thread remains, RSS returns near its baseline), and no sample or event is written
//! with the wrong thread: every ExecutionSample names a thread that existed in the test, and a
//! storm thread's samples have the storm function on their stack.

mod common;

use common::*;
use recorder::{Event, EventSettings, Recorder};
use std::collections::{BTreeMap, HashSet};
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

recorder::event! {
    #[event(name = "test.Storm", label = "Storm")]
    pub struct Storm { pub tid: u64, pub n: u64 }
}

const THREADS: usize = 10_000;
/// The sampler's default limit of threads sampled at once.
const SAMPLED_THREADS: usize = 128;
const BATCH: usize = 50;
const EVENTS_PER_THREAD: u64 = 3;

fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() }) as u64
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The storm thread's entry: frame-pointer unwinding can miss the caller of a leaf sampled in its
/// prologue, so a storm sample names the body or, then, this entry.
#[inline(never)]
fn storm_thread_entry_marker(n: u64, tids: &Mutex<HashSet<u64>>) {
    storm_thread_body_marker(n, tids);
    black_box(n);
}

/// The storm thread's own function: everything it does (and every sample of it) is under here.
#[inline(never)]
fn storm_thread_body_marker(n: u64, tids: &Mutex<HashSet<u64>>) {
    let tid = gettid();
    tids.lock().unwrap().insert(tid);
    // Registered for sampling before this ran (the thread-start hook). With every slot taken by
    // live threads it was refused (counted, reported for this thread); discovery may still find
    // it a slot later.
    // Sampling is by CPU time: one thread in ten runs long enough (2 ms of CPU) to be sampled.
    let spin = Duration::from_micros(if n.is_multiple_of(10) { 2000 } else { 100 });
    let until = thread_cpu_time() + spin;
    let mut x = n;
    let mut i = 0;
    while thread_cpu_time() < until {
        for _ in 0..200 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if i < EVENTS_PER_THREAD {
            Storm { tid, n: n * EVENTS_PER_THREAD + i }.commit();
            i += 1;
        }
    }
    while i < EVENTS_PER_THREAD {
        Storm { tid, n: n * EVENTS_PER_THREAD + i }.commit();
        i += 1;
    }
    black_box(x);
}

struct Read {
    samples: Vec<(i64, Option<String>, Vec<String>, bool)>,
    events: Vec<(i64, i64)>, // (eventThread os tid, tid field)
    lost_events: i64,
    lost_samples: i64,
    /// Threads reported as refused a sampler slot.
    refused_threads: Vec<i64>,
}

fn read_recording(dir: &std::path::Path) -> Read {
    let mut out =
        Read { samples: Vec::new(), events: Vec::new(), lost_events: 0, lost_samples: 0, refused_threads: Vec::new() };
    for file in chunk_files(dir) {
        let data = bytes::Bytes::from(std::fs::read(&file).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            let meta = chunk.metadata();
            let sample = meta.class_by_name("jdk.ExecutionSample").map(|c| c.id);
            let storm = meta.class_by_name("test.Storm").cloned();
            let loss = meta.class_by_name("recorder.DataLoss").cloned();
            for event in chunk.events() {
                let event = event.unwrap();
                if Some(event.type_id) == sample {
                    let thread = chunk.event_thread(&event).unwrap().expect("a sample has a thread");
                    let trace = chunk.event_stack_trace(&event).unwrap().unwrap_or_default();
                    let stack = trace.frames.iter().map(|f| f.qualified_name()).collect();
                    out.samples.push((thread.os_thread_id, thread.os_name.clone(), stack, trace.truncated));
                } else if let Some(c) = storm.as_ref().filter(|c| c.id == event.type_id) {
                    let thread = chunk.event_thread(&event).unwrap().expect("an event has a thread");
                    let tid = event.values[c.field_index("tid").unwrap()].as_i64().unwrap();
                    out.events.push((thread.os_thread_id, tid));
                } else if let Some(c) = loss.as_ref().filter(|c| c.id == event.type_id) {
                    out.lost_events += event.values[c.field_index("events").unwrap()].as_i64().unwrap();
                    out.lost_samples += event.values[c.field_index("samples").unwrap()].as_i64().unwrap();
                    let reason = event.values[c.field_index("reason").unwrap()].as_str().unwrap_or("").to_owned();
                    if reason.contains("no free sampler slot") {
                        let thread = chunk.thread_info(&event.values[c.field_index("thread").unwrap()]).unwrap();
                        out.refused_threads.push(thread.map_or(0, |t| t.os_thread_id));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn ten_thousand_threads_under_1khz_sampling() {
    storm(false);
}

/// Every sample taken is in the recording or counted there as lost. Fails today: when the sampler
/// reaps the slot of an exited thread (`reap_exited` → `fold_stats` in src/sampler/buffer.rs) it
/// zeroes the slot's not-yet-reported loss counter, so the losses of threads that lived less than
/// a discovery period (100 ms) never reach `take_lost` and no `recorder.DataLoss` names them.
#[test]
fn storm_losses_are_all_reported() {
    storm(true);
}

fn storm(strict_loss: bool) {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .flush_interval(Duration::from_millis(50))
        .max_size(1 << 30)
        .event("test.Storm", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .unwrap();
    let tids = Mutex::new(HashSet::new());
    let max_slots = std::sync::atomic::AtomicUsize::new(0);
    let main_tid = gettid();
    let run_batches = |from: usize, to: usize| {
        for batch in (from..to).step_by(BATCH) {
            std::thread::scope(|s| {
                for n in batch..(batch + BATCH).min(to) {
                    let tids = &tids;
                    std::thread::Builder::new()
                        .name(format!("storm-{n}"))
                        .spawn_scoped(s, move || storm_thread_entry_marker(n as u64, tids))
                        .unwrap();
                }
            });
            max_slots.fetch_max(rec.sampler_stats().unwrap().slots_in_use, Ordering::Relaxed);
            // Paced by the reaper, not by the clock: the next batch starts once the slots of
            // the exited threads left room for it (the recorder's passes reap them; on a loaded
            // machine they may wait for the CPU). A reaper that never frees them still leads
            // to refusals, which the assertions below catch.
            let deadline = Instant::now() + Duration::from_secs(10);
            while rec.sampler_stats().unwrap().slots_in_use + BATCH > SAMPLED_THREADS && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    };
    // Warm-up: allocator arenas, buffers and the stack table reach their working size.
    run_batches(0, 500);
    rec.flush();
    rec.flush();
    let baseline = rss_kib();
    let started = Instant::now();
    run_batches(500, THREADS);
    let storm_time = started.elapsed();
    let peak = rss_kib();
    // Slots of exited threads are reaped by the recorder's next passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut slots = usize::MAX;
    let mut dead_slots = Vec::new();
    while Instant::now() < deadline {
        rec.flush();
        let stats = rec.sampler_stats().unwrap();
        slots = stats.slots_in_use;
        // A slot left for a thread that no longer exists is a leak; the live threads (this one,
        // the recorder's, the control socket's) may keep theirs.
        dead_slots = stats
            .threads
            .iter()
            .map(|t| t.tid)
            .filter(|tid| !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists())
            .collect();
        if dead_slots.is_empty() && slots <= 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    rec.flush();
    rec.flush();
    let after = rss_kib();
    let stats = rec.sampler_stats().unwrap();
    let recorder_stats = rec.stats();
    eprintln!(
        "storm of {} threads in {storm_time:?}; RSS baseline {baseline} KiB, peak {peak} KiB, after {after} KiB; \
         slots in use {slots} (at most {} between batches); slots refused {}; sampler {stats:?}; \
         recorder {recorder_stats:?}",
        THREADS - 500,
        max_slots.load(Ordering::Relaxed),
        stats.refused
    );
    assert!(dead_slots.is_empty(), "sampler slots leak: slots of exited threads {dead_slots:?}");
    assert!(slots <= 4, "sampler slots leak: {slots} still in use after the storm");
    assert!(
        after <= baseline + 48 * 1024,
        "RSS grew from {baseline} KiB to {after} KiB over the storm (peak {peak} KiB)"
    );
    let dir_path = rec.repository_dir().to_owned();
    let report = rec.stop_with_report().unwrap();
    let final_sampler = report.sampler.expect("sampling");

    let tids = tids.into_inner().unwrap();
    assert!(tids.len() > THREADS / 4, "only {} distinct tids", tids.len());
    let read = read_recording(&dir_path);
    // 50 threads at a time never need more than 128 slots: a refusal here means the slots of
    // exited threads were not reaped in time. Whatever happened, each refusal is in the
    // recording, for its thread.
    let mut reported = read.refused_threads.clone();
    reported.sort_unstable();
    reported.dedup();
    assert_eq!(read.refused_threads.len() as u64, final_sampler.refused, "refusals reported: {reported:?}");
    assert_eq!(reported.len(), read.refused_threads.len(), "one report per refused thread");
    assert!(reported.iter().all(|t| tids.contains(&(*t as u64))), "refusals name storm threads: {reported:?}");
    assert_eq!(final_sampler.refused, 0, "slots refused to storm threads: {reported:?}");
    // Events: each on its own thread, all there unless counted as lost.
    for (thread, field) in &read.events {
        assert_eq!(thread, field, "an event written with another thread");
    }
    assert_eq!(
        read.events.len() as i64 + read.lost_events,
        (THREADS as u64 * EVENTS_PER_THREAD) as i64,
        "events found + lost"
    );
    // Samples: a storm thread's samples are in the storm function; nobody else is sampled but
    // the test thread and its harness.
    let mut storm_samples = 0;
    let mut truncated = 0;
    let mut in_exit = 0;
    let mut unflagged = 0;
    let mut others: BTreeMap<String, usize> = BTreeMap::new();
    // A storm thread sampled in its first microseconds (the tail of its registration, std's code
    // before it names itself) had the name it inherited from its creator (`comm`: the test
    // thread's name, 15 bytes) when the sample was taken, and the sample carries it. Such samples
    // are never in the thread's body; how many there are depends on the machine's load (1 % of
    // storm samples at load 25), so only where they lie is checked.
    let creator: String = std::thread::current().name().unwrap_or_default().chars().take(15).collect();
    let mut named_after_creator = 0;
    for (tid, name, stack, cut) in &read.samples {
        if tids.contains(&(*tid as u64)) {
            storm_samples += 1;
            let in_body =
                stack.iter().any(|f| f.contains("storm_thread_body_marker") || f.contains("storm_thread_entry_marker"));
            if name.as_deref() == Some(creator.as_str()) && !in_body {
                named_after_creator += 1;
                continue;
            }
            assert!(
                name.as_deref().is_some_and(|n| n.starts_with("storm-")),
                "storm tid {tid} named {name:?}: {stack:?}"
            );
            // The thread's root: start_thread, or past it the clone3 that started it (the CFI
            // walk through libc reaches that far).
            let root = stack.iter().rev().take(2).any(|f| f.contains("start_thread"));
            if *cut || !root {
                if storm_samples == 1 {
                    eprintln!("a storm sample not reaching its root: {stack:?}");
                }
                // The walk did not reach the thread's root (flagged truncated, or ended at a frame
                // without a frame pointer, e.g. inside libc): no outer frame to check.
                truncated += 1;
                unflagged += usize::from(!*cut);
                continue;
            }
            if !stack.iter().any(|f| f.contains("storm_thread_body_marker") || f.contains("storm_thread_entry_marker"))
            {
                // After the body returned, in its own thread's exit path (still sampled until the
                // slot retires at thread exit): a spawned thread's start routine, nothing of the
                // test thread (whose stack runs through the test harness). Or before the body, in
                // std's spawn hooks (libtest's hook hands its output capture to the new thread:
                // `test::` closures, called from `ChildSpawnHooks::run`), which the thread runs
                // in its first microseconds: a random first period can fall there.
                // (The stack reaches start_thread, checked above.)
                let in_spawn_hooks = stack.iter().any(|f| f.contains("ChildSpawnHooks>::run"));
                let own_exit = !stack.iter().any(|f| f.starts_with("test::") || f.contains("run_test"));
                assert!(
                    own_exit || in_spawn_hooks,
                    "a sample of storm thread {tid} ({name:?}) outside its own code (truncated: {cut}): {stack:?}"
                );
                in_exit += 1;
                continue;
            }
        } else {
            let name = name.clone().unwrap_or_default();
            assert!(
                *tid as u64 == main_tid || name.starts_with("recorder") || name.contains("ten_thousand"),
                "a sample of an unknown thread {tid} ({name}): {stack:?}"
            );
            *others.entry(name).or_default() += 1;
        }
    }
    eprintln!(
        "samples in the recording {} + counted lost {} vs sampler taken {} (written {}, lost {})",
        read.samples.len(),
        read.lost_samples,
        final_sampler.taken,
        final_sampler.written,
        final_sampler.lost
    );
    assert!(read.samples.len() as u64 <= final_sampler.taken, "more samples than taken");
    if strict_loss {
        assert_eq!(
            read.samples.len() as u64 + read.lost_samples as u64,
            final_sampler.taken,
            "samples taken must be in the recording or reported lost (sampler says lost {})",
            final_sampler.lost
        );
    }
    eprintln!("{storm_samples} storm samples ({truncated} not reaching start_thread, {unflagged} of them not flagged truncated, {in_exit} in thread start or exit), others {others:?}");
    assert!(truncated * 4 <= storm_samples, "most storm samples have their whole stack");
    assert!(storm_samples > 100, "the storm threads were sampled ({storm_samples} samples)");
    eprintln!("{named_after_creator} of {storm_samples} storm samples taken before the thread named itself");
}
