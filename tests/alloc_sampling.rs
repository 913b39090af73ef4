//! Allocation sampling with the sampling allocator over the system allocator:
//! samples reach the file with their stacks (our reader, `jfr print`, `jfr summary`, the JDK's
//! `EventStream` following the live repository), every sample taken is written or counted lost,
//! the estimate per call site is unbiased, and allocations in an application's signal handler,
//! in forked children, in TLS destructors at thread exit and on threads the recorder never saw
//! neither crash nor deadlock and are counted. Live-set headers keep every block intact.

mod common;

use common::*;
use recorder::alloc::SamplingAllocator;
use recorder::Recorder;
use std::alloc::Layout;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: SamplingAllocator = SamplingAllocator::new();

#[inline(never)]
fn allocate_kib_blocks(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let v = std::hint::black_box(vec![i as u8; 1024]);
        total += v.len();
    }
    total
}

/// Allocates and frees `n` blocks of `size` bytes with exactly that layout. (The call sites
/// below pass its result through `black_box`: a tail call would become a jump in an optimized
/// build, and the site's frame would be gone from every stack.)
#[inline(never)]
fn site_bytes(n: usize, size: usize) -> usize {
    let layout = Layout::from_size_align(size, 1).unwrap();
    for _ in 0..n {
        // SAFETY: a non-zero layout; freed with the same layout.
        unsafe {
            let p = std::alloc::alloc(layout);
            assert!(!p.is_null());
            std::hint::black_box(p);
            std::alloc::dealloc(p, layout);
        }
    }
    n
}

#[inline(never)]
fn site_one_byte(n: usize) {
    std::hint::black_box(site_bytes(n, 1));
}

#[inline(never)]
fn site_one_kib(n: usize) {
    std::hint::black_box(site_bytes(n, 1024));
}

#[inline(never)]
fn site_one_mib(n: usize) {
    std::hint::black_box(site_bytes(n, 1 << 20));
}

fn start(dir: &Path, interval: u64) -> Recorder {
    Recorder::builder().repository(dir).no_sampling().allocation_sampling(interval).start().unwrap()
}

/// Stops and checks the accounting equation; returns the written count.
fn stop_exact(rec: Recorder) -> recorder::alloc::AllocationStats {
    let report = rec.stop_with_report().unwrap();
    let a = report.allocation.expect("allocation statistics");
    assert_eq!(a.taken, a.written + a.lost + a.failed, "every sample taken is written or counted: {a:?}");
    a
}

fn all_events(dir: &Path, type_name: &str) -> Vec<ReadEvent> {
    chunk_files(dir).iter().flat_map(|c| read_events(c, type_name)).collect()
}

fn has_frame(e: &ReadEvent, function: &str) -> bool {
    e.stack.as_ref().is_some_and(|s| s.iter().any(|f| f.contains(function)))
}

/// Estimated bytes per function: the sum of the weights of the samples whose stack names it.
fn estimated(events: &[ReadEvent], function: &str) -> f64 {
    events.iter().filter(|e| has_frame(e, function)).map(|e| e.field_i64("weight") as f64).sum()
}

#[test]
fn samples_reach_the_file_with_stacks_and_the_jdk_reads_them() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path(), 64 * 1024);
    let repo = rec.repository_dir().to_owned();
    allocate_kib_blocks(20_000);
    let a = stop_exact(rec);
    let events = all_events(&repo, "jdk.ObjectAllocationSample");
    assert_eq!(events.len() as u64, a.written, "each written sample is one event");
    assert!(a.written > 100, "{a:?}");
    assert!(events.iter().all(|e| e.thread.is_some() && e.stack.as_ref().is_some_and(|s| !s.is_empty())));
    let ours: Vec<&ReadEvent> = events.iter().filter(|e| has_frame(e, "allocate_kib_blocks")).collect();
    assert!(ours.len() * 10 >= events.len() * 9, "{} of {} samples in the site", ours.len(), events.len());
    // The hook's own frames never show; the innermost frames are the allocation API's.
    assert!(events.iter().all(|e| !e.stack.as_ref().unwrap().iter().any(|f| f.contains("recorder::alloc"))));
    // The JDK's tools: every file accepted, the same count, objectClass names the size class.
    let files = chunk_files(&repo);
    jdk_accepts(&files);
    let jdk_count: u64 =
        files.iter().map(|f| jfr_summary_counts(f).get("jdk.ObjectAllocationSample").copied().unwrap_or(0)).sum();
    assert_eq!(jdk_count, a.written);
    let text = jdk(
        "jfr",
        &["print", "--stack-depth", "64", "--events", "jdk.ObjectAllocationSample", files[0].to_str().unwrap()],
    );
    assert!(text.contains("objectClass = rust.alloc.1KiB-2KiB"), "{}", &text[..text.len().min(2000)]);
    assert!(text.contains("allocate_kib_blocks"), "jfr print shows the stacks");
    assert!(text.contains("weight = "));
}

#[test]
fn the_jdk_event_stream_follows_allocation_samples_with_stacks() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .allocation_sampling(64 * 1024)
        .flush_interval(Duration::from_millis(100))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let (mut child, rx) = live_jdk_stream(&repo, &["jdk.ObjectAllocationSample"]);
    // Allocate until the stream shows one of our samples while the recording runs.
    let mut seen_live = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    while seen_live == 0 {
        assert!(Instant::now() < deadline, "the stream saw no sample while recording: {lines:?}");
        allocate_kib_blocks(2_000);
        while let Ok(line) = rx.recv_timeout(Duration::from_millis(50)) {
            if line.starts_with("EVENT") && line.contains("allocate_kib_blocks") {
                seen_live += 1;
            }
            lines.push(line);
        }
    }
    let a = stop_exact(rec);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !lines.iter().any(|l| l == "CLOSED") {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the stream did not close");
        if let Ok(line) = rx.recv_timeout(left) {
            lines.push(line);
        }
    }
    let _ = child.wait();
    let events: Vec<&String> = lines.iter().filter(|l| l.starts_with("EVENT")).collect();
    assert_eq!(events.len() as u64, a.written, "the stream delivers every sample once");
    for e in &events {
        let depth: usize = e.split(' ').nth(2).unwrap().parse().unwrap();
        assert!(depth > 0, "a streamed sample has its stack: {e}");
    }
}

/// Per call site, the summed weights estimate the bytes allocated (the sites of `cargo bench
/// --bench alloc`; the benchmark measures them at the default interval, here the intervals are chosen so that a
/// bound of ~5 standard deviations is tight enough to mean something and never flaky).
#[test]
fn estimated_bytes_per_call_site_match_the_truth() {
    let _s = serial();
    // 1 B x 1 Mi at 1 KiB: ~1024 samples, relative standard deviation ~3 %.
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path(), 1024);
    let repo = rec.repository_dir().to_owned();
    site_one_byte(1 << 20);
    let a = stop_exact(rec);
    assert_eq!(a.lost, 0, "the pool holds every sample of this run");
    let events = all_events(&repo, "jdk.ObjectAllocationSample");
    let est = estimated(&events, "site_one_byte");
    let truth = (1u64 << 20) as f64;
    assert!((est / truth - 1.0).abs() < 0.15, "1 B x 1 Mi: estimated {est} vs {truth}");

    // 1 KiB x 100 Ki (~1600 samples, ~2.5 %) and 1 MiB x 100 (each sampled with p = 1 - e^-16).
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path(), 64 * 1024);
    let repo = rec.repository_dir().to_owned();
    site_one_kib(100 * 1024);
    site_one_mib(100);
    let a = stop_exact(rec);
    assert_eq!(a.lost, 0);
    let events = all_events(&repo, "jdk.ObjectAllocationSample");
    let kib = estimated(&events, "site_one_kib");
    let truth = (100u64 << 20) as f64;
    assert!((kib / truth - 1.0).abs() < 0.12, "1 KiB x 100 Ki: estimated {kib} vs {truth}");
    let mib = estimated(&events, "site_one_mib");
    assert!((mib / truth - 1.0).abs() < 0.02, "1 MiB x 100: estimated {mib} vs {truth}");
    // A 1 MiB allocation is one sample, weighted by its size (one fresh gap after it).
    let big: Vec<i64> = events.iter().filter(|e| has_frame(e, "site_one_mib")).map(|e| e.field_i64("weight")).collect();
    assert!(big.iter().all(|&w| (1 << 20..(1 << 20) + 64).contains(&w)), "{big:?}");
}

// ---- contexts: signal handlers, threads the recorder never saw, TLS teardown, fork ----

static HANDLER_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn allocate_in_signal_handler() {
    let v = std::hint::black_box(vec![7u8; 64 * 1024]);
    HANDLER_ALLOCATIONS.fetch_add(v.len() as u64 / (64 * 1024), Ordering::Relaxed);
}

extern "C" fn on_sigusr1(_: libc::c_int) {
    allocate_in_signal_handler();
}

/// An application's signal handler allocates (the interrupted thread spins without allocating,
/// so glibc's malloc is never re-entered): no crash, no deadlock, the samples are written with
/// the handler's stack and counted.
#[test]
fn allocations_in_a_signal_handler_are_sampled() {
    let _s = serial();
    // SAFETY: installs a plain handler for SIGUSR1 (restored below).
    let old = unsafe { libc::signal(libc::SIGUSR1, on_sigusr1 as *const () as libc::sighandler_t) };
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path(), 16 * 1024);
    let repo = rec.repository_dir().to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() } as u64).unwrap();
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_add(1);
                std::hint::spin_loop();
            }
            x
        })
    };
    let target = rx.recv().unwrap() as libc::pthread_t;
    let before = HANDLER_ALLOCATIONS.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Signals that arrive while one is pending merge: send until 300 were handled.
    while HANDLER_ALLOCATIONS.load(Ordering::Relaxed) - before < 300 {
        assert!(Instant::now() < deadline, "the handler stopped running (deadlock?)");
        // SAFETY: the spinner thread is alive until `stop` is set below.
        unsafe { libc::pthread_kill(target, libc::SIGUSR1) };
        std::thread::sleep(Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    let a = stop_exact(rec);
    // SAFETY: restores the previous disposition.
    unsafe { libc::signal(libc::SIGUSR1, old) };
    let events = all_events(&repo, "jdk.ObjectAllocationSample");
    let in_handler = events.iter().filter(|e| has_frame(e, "allocate_in_signal_handler")).count();
    assert!(in_handler > 50, "samples taken in the handler: {in_handler} ({a:?})");
}

#[inline(never)]
fn allocate_on_a_raw_thread() {
    std::hint::black_box(allocate_kib_blocks(4_000));
}

extern "C" fn raw_thread(_: *mut libc::c_void) -> *mut libc::c_void {
    allocate_on_a_raw_thread();
    std::ptr::null_mut()
}

struct AllocatesOnDrop;

#[inline(never)]
fn allocate_in_tls_destructor() {
    for i in 0..2_000 {
        std::hint::black_box(vec![i as u8; 1024]);
    }
}

impl Drop for AllocatesOnDrop {
    fn drop(&mut self) {
        allocate_in_tls_destructor();
    }
}

thread_local! {
    static ON_EXIT: std::cell::RefCell<Option<AllocatesOnDrop>> = const { std::cell::RefCell::new(None) };
}

/// A thread made with `pthread_create` (no Rust runtime state, never registered) and a thread
/// whose TLS destructor allocates at exit: their samples are written with their stacks.
#[test]
fn unseen_threads_and_tls_destructors_are_sampled() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path(), 16 * 1024);
    let repo = rec.repository_dir().to_owned();
    let mut t: libc::pthread_t = 0;
    // SAFETY: a valid start routine and out pointer; joined below.
    assert_eq!(unsafe { libc::pthread_create(&mut t, std::ptr::null(), raw_thread, std::ptr::null_mut()) }, 0);
    // SAFETY: joins the thread created above.
    assert_eq!(unsafe { libc::pthread_join(t, std::ptr::null_mut()) }, 0);
    std::thread::spawn(|| ON_EXIT.with(|c| *c.borrow_mut() = Some(AllocatesOnDrop))).join().unwrap();
    let a = stop_exact(rec);
    let events = all_events(&repo, "jdk.ObjectAllocationSample");
    let raw = events.iter().filter(|e| has_frame(e, "allocate_on_a_raw_thread")).count();
    let tls = events.iter().filter(|e| has_frame(e, "allocate_in_tls_destructor")).count();
    assert!(raw > 50 && tls > 20, "raw thread {raw}, TLS destructor {tls} ({a:?})");
    let truth = 2_000.0 * 1024.0;
    let est = estimated(&events, "allocate_in_tls_destructor");
    assert!((est / truth - 1.0).abs() < 0.5, "TLS destructor: estimated {est} vs {truth}");
}

#[inline(never)]
fn child_site() {
    std::hint::black_box(allocate_kib_blocks(20_000));
}

/// Forks while threads allocate with sampling on (hooks in flight): every child allocates without
/// the parent's recording, starts a recording of its own, samples its own allocations and exits
/// cleanly; the parent's accounting stays exact.
#[test]
fn forked_children_allocate_and_sample_on_their_own() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path().join("parent"))
        .no_sampling()
        .allocation_sampling(4 * 1024)
        .allocation_live_set(true)
        .flush_interval(Duration::from_millis(10))
        .start()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    allocate_kib_blocks(100);
                }
            })
        })
        .collect();
    let child_dir = dir.path().join("children");
    std::fs::create_dir(&child_dir).unwrap();
    let mut children = Vec::new();
    for _ in 0..10 {
        // The child only allocates, calls the recorder and then _exit.
        let pid = fork_child(|| {
            allocate_kib_blocks(10_000); // not recording: no sample, no crash
            let rec = Recorder::builder()
                .repository(&child_dir)
                .no_sampling()
                .allocation_sampling(64 * 1024)
                .start()
                .expect("the child starts its own");
            child_site();
            let a = rec.stop_with_report().expect("the child stops").allocation.expect("stats");
            assert!(a.written > 0 && a.taken == a.written + a.lost + a.failed, "{a:?}");
        });
        children.push(pid);
        std::thread::sleep(Duration::from_millis(5));
    }
    for pid in children {
        wait_child_ok(pid, Duration::from_secs(60));
    }
    stop.store(true, Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
    stop_exact(rec);
    let mut found = 0;
    for sub in std::fs::read_dir(&child_dir).unwrap() {
        let events = all_events(&sub.unwrap().path(), "jdk.ObjectAllocationSample");
        assert!(events.iter().any(|e| has_frame(e, "child_site")), "the child's own samples");
        found += 1;
    }
    assert_eq!(found, 10, "every child wrote its own recording");
}

/// With the live set tracked (headers on sampled blocks) and every allocation sampled, blocks
/// of every alignment keep their contents through realloc (grow, shrink, in place or moved),
/// zeroed blocks are zero, and everything frees cleanly; blocks sampled during the recording
/// and freed after it are freed correctly too.
#[test]
fn live_set_headers_keep_every_block_intact() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .allocation_sampling(1)
        .allocation_live_set(true)
        .start()
        .unwrap();
    let mut kept = Vec::new();
    for align in [1usize, 2, 8, 16, 32, 64, 4096] {
        for size in [1usize, 7, 16, 100, 4096, 100_000] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero layouts; every pointer is used within its size and freed with the
            // layout it has at that moment.
            unsafe {
                let z = std::alloc::alloc_zeroed(layout);
                assert!(!z.is_null() && (z as usize).is_multiple_of(align));
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0), "zeroed {size}/{align}");
                std::alloc::dealloc(z, layout);
                let p = std::alloc::alloc(layout);
                assert!(!p.is_null() && (p as usize).is_multiple_of(align));
                for i in 0..size {
                    *p.add(i) = (i % 251) as u8;
                }
                let grown = std::alloc::realloc(p, layout, size * 3);
                assert!(!grown.is_null() && (grown as usize).is_multiple_of(align));
                for i in 0..size {
                    assert_eq!(*grown.add(i), (i % 251) as u8, "grown {size}/{align} at {i}");
                }
                let big = Layout::from_size_align(size * 3, align).unwrap();
                let shrunk = std::alloc::realloc(grown, big, size.div_ceil(2));
                for i in 0..size.div_ceil(2) {
                    assert_eq!(*shrunk.add(i), (i % 251) as u8, "shrunk {size}/{align} at {i}");
                }
                kept.push((shrunk, Layout::from_size_align(size.div_ceil(2), align).unwrap()));
            }
        }
    }
    let a = stop_exact(rec);
    assert!(a.written > 100, "{a:?}");
    // Freed after the recording: the headers are still recognized.
    for (p, layout) in kept {
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(p, layout) };
    }
    // And nothing of it disturbs later allocations.
    allocate_kib_blocks(1_000);
}

#[test]
fn settings_and_data_loss_are_in_the_recording() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = start(dir.path(), 12_345);
    let repo = rec.repository_dir().to_owned();
    allocate_kib_blocks(100);
    stop_exact(rec);
    let settings = all_events(&repo, "jdk.ActiveSetting");
    let value = |name: &str| {
        settings
            .iter()
            .find(|e| e.field("name").as_str() == Some(name))
            .and_then(|e| e.field("value").as_str().map(str::to_owned))
    };
    assert_eq!(value("interval").as_deref(), Some("12345 bytes"));
    assert_eq!(value("liveSet").as_deref(), Some("false"));
}
