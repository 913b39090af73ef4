//! A sample carries the name its thread had when it was taken. Worker threads rename themselves
//! at random moments (`w<worker>-<kind>-<phase>`) and run each phase in the marker function of
//! its kind, while another thread flushes at random moments and chunks rotate: every
//! `jdk.ExecutionSample` whose stack shows a phase marker names its thread by that phase's name,
//! and was taken between that phase's start and end (one clock). The JDK's reader, which keeps
//! the first value it reads for a constant's key in every chunk of a file, shows the same names
//! for the same samples in one file of every chunk.

mod common;

use common::*;
use recorder::Recorder;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const WORKERS: usize = 3;
const PHASES: usize = 150;
const KINDS: [&str; 3] = ["a", "b", "c"];

/// A small xorshift generator: random moments without a dependency.
struct Random(u64);

impl Random {
    fn seeded(salt: u64) -> Random {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        Random((nanos ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn set_own_name(name: &str) {
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: names the calling thread; the string is NUL-terminated and at most 15 bytes.
    let rc = unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr()) };
    assert_eq!(rc, 0, "pthread_setname_np");
}

fn spin(cpu: Duration, seed: u64) -> u64 {
    let until = thread_cpu_time() + cpu;
    let mut x = seed;
    while thread_cpu_time() < until {
        for _ in 0..200 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

#[inline(never)]
fn rename_phase_marker_a(cpu: Duration, seed: u64) -> u64 {
    black_box(spin(cpu, seed))
}

#[inline(never)]
fn rename_phase_marker_b(cpu: Duration, seed: u64) -> u64 {
    black_box(spin(cpu, seed))
}

#[inline(never)]
fn rename_phase_marker_c(cpu: Duration, seed: u64) -> u64 {
    black_box(spin(cpu, seed))
}

/// One phase of a worker: its name, and the ticks before and after its marker ran.
#[derive(Debug, Clone)]
struct Phase {
    name: String,
    start: i64,
    end: i64,
}

/// The phase marker kind on a stack, if any.
fn marker_kind(frames: &[String]) -> Option<&'static str> {
    KINDS.into_iter().find(|k| frames.iter().any(|f| f.contains(&format!("rename_phase_marker_{k}"))))
}

#[test]
fn every_sample_carries_the_name_its_thread_had_when_it_was_taken() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .flush_interval(Duration::from_millis(10))
        // Rotations too: a name keeps its key in every chunk.
        .max_chunk_size(64 * 1024)
        .max_size(1 << 30)
        .start()
        .unwrap();
    let done = AtomicBool::new(false);
    let phases: Mutex<HashMap<u64, Vec<Phase>>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut random = Random::seeded(99);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_micros(random.below(4000)));
                rec.flush();
            }
        });
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let phases = &phases;
                std::thread::Builder::new()
                    .name(format!("worker-{w}"))
                    .spawn_scoped(s, move || {
                        // SAFETY: gettid has no preconditions.
                        let tid = unsafe { libc::gettid() } as u64;
                        let mut random = Random::seeded(w as u64);
                        let mut mine = Vec::with_capacity(PHASES);
                        for i in 0..PHASES {
                            let kind = KINDS[i % KINDS.len()];
                            let name = format!("w{w}-{kind}-{i}");
                            set_own_name(&name);
                            // 0.2 to 3 ms of CPU: from no sample to several per phase.
                            let cpu = Duration::from_micros(200 + random.below(2800));
                            let start = recorder::clock::ticks();
                            match kind {
                                "a" => rename_phase_marker_a(cpu, i as u64),
                                "b" => rename_phase_marker_b(cpu, i as u64),
                                _ => rename_phase_marker_c(cpu, i as u64),
                            };
                            let end = recorder::clock::ticks();
                            mine.push(Phase { name, start, end });
                        }
                        phases.lock().unwrap().insert(tid, mine);
                    })
                    .unwrap()
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let repository = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let phases = phases.into_inner().unwrap();

    // Our reader, chunk by chunk.
    let files = chunk_files(&repository);
    let mut checked = 0;
    // (tid, name) -> samples in a marker; per chunk, the names each worker's samples show.
    let mut ours: BTreeMap<(i64, String), u64> = BTreeMap::new();
    let mut names_in_one_chunk = 0;
    let mut chunks = 0;
    for file in &files {
        let data = bytes::Bytes::from(std::fs::read(file).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            chunks += 1;
            let Some(sample) = chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id) else { continue };
            let mut names_by_tid: HashMap<i64, HashSet<String>> = HashMap::new();
            for event in chunk.events() {
                let event = event.unwrap();
                if event.type_id != sample {
                    continue;
                }
                let thread = chunk.event_thread(&event).unwrap().expect("a sample has a thread");
                let Some(worker_phases) = phases.get(&(thread.os_thread_id as u64)) else { continue };
                let trace = chunk.event_stack_trace(&event).unwrap().unwrap_or_default();
                let frames: Vec<String> = trace.frames.iter().map(|f| f.qualified_name()).collect();
                let Some(kind) = marker_kind(&frames) else { continue };
                let name = thread.os_name.clone().unwrap_or_default();
                let ticks = event.start_ticks();
                // The phase the sample was taken in, by its time: the name must be that phase's.
                let phase = worker_phases.iter().find(|p| p.start <= ticks && ticks <= p.end);
                assert!(
                    phase.is_some_and(|p| p.name == name),
                    "a sample in rename_phase_marker_{kind} of thread {} at tick {ticks} is named {name:?}; \
                     the phase running then is {phase:?}",
                    thread.os_thread_id
                );
                names_by_tid.entry(thread.os_thread_id).or_default().insert(name.clone());
                *ours.entry((thread.os_thread_id, name)).or_default() += 1;
                checked += 1;
            }
            names_in_one_chunk += names_by_tid.values().filter(|n| n.len() > 1).count();
        }
    }
    eprintln!(
        "{checked} samples in phase markers, {} (thread, name) pairs, {chunks} chunks in {} files; \
         {names_in_one_chunk} times a chunk holds one worker under several names",
        ours.len(),
        files.len()
    );
    // The test means something: renames fell between samples of one thread within one chunk.
    assert!(checked >= 100, "only {checked} samples in phase markers");
    assert!(names_in_one_chunk > 0, "no chunk holds samples of one worker under two names");

    // The JDK's reader on one file of every chunk (as `recorder dump` writes it): it resolves a
    // key once for the whole file, so a key that changed its value would show a stale name.
    let all = dir.path().join("all.jfr");
    let bytes: Vec<u8> = files.iter().flat_map(|f| std::fs::read(f).unwrap()).collect();
    std::fs::write(&all, bytes).unwrap();
    let text = jdk(
        "jfr",
        &["print", "--json", "--stack-depth", "64", "--events", "jdk.ExecutionSample", all.to_str().unwrap()],
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut jdk_view: BTreeMap<(i64, String), u64> = BTreeMap::new();
    for event in json["recording"]["events"].as_array().unwrap() {
        let thread = &event["values"]["sampledThread"];
        let tid = thread["osThreadId"].as_i64().unwrap();
        if !phases.contains_key(&(tid as u64)) {
            continue;
        }
        let frames: Vec<String> = event["values"]["stackTrace"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["method"]["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        let Some(kind) = marker_kind(&frames) else { continue };
        let name = thread["osName"].as_str().unwrap_or_default().to_owned();
        assert!(
            name.split('-').nth(1) == Some(kind),
            "the JDK shows a sample in rename_phase_marker_{kind} of thread {tid} named {name:?}"
        );
        *jdk_view.entry((tid, name)).or_default() += 1;
    }
    assert_eq!(jdk_view, ours, "the JDK's names of the samples (thread, name) -> count, against ours");
}
