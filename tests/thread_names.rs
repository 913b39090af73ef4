//! Thread names are captured while the threads run: a thread that exits before the next flush
//! keeps its name (whether it registered for sampling, was discovered, or committed), and a thread
//! that renames itself shows its new name in the chunks that follow.

mod common;

use common::*;
use recorder::{Event, EventSettings, Recorder};
use std::path::Path;
use std::time::Duration;

recorder::event! {
    #[event(name = "names.Step", label = "Step")]
    pub struct Step { pub n: i64 }
}

/// One event as the test needs it: its type, its thread's OS id and name, and the index of the
/// chunk (in start order) that holds it.
#[derive(Debug)]
struct Seen {
    chunk: usize,
    type_name: String,
    tid: i64,
    thread: String,
}

fn events(base: &Path) -> Vec<Seen> {
    let dirs: Vec<_> = std::fs::read_dir(base).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let mut out = Vec::new();
    let mut index = 0;
    for file in chunk_files(&dirs[0]) {
        for chunk in jfr_format::chunks(bytes::Bytes::from(std::fs::read(&file).unwrap())) {
            let chunk = chunk.unwrap();
            let meta = chunk.metadata();
            for event in chunk.events() {
                let event = event.unwrap();
                let Some(thread) = chunk.event_thread(&event).unwrap() else { continue };
                let type_name = meta.class(event.type_id).map(|c| c.name.clone()).unwrap_or_default();
                out.push(Seen {
                    chunk: index,
                    type_name,
                    tid: thread.os_thread_id,
                    thread: thread.os_name.clone().unwrap_or_default(),
                });
            }
            index += 1;
        }
    }
    out
}

/// Samples the sampler took of thread `tid` so far.
fn samples_taken(rec: &Recorder, tid: u32) -> u64 {
    rec.sampler_stats().and_then(|s| s.threads.iter().find(|t| t.tid == tid).map(|t| t.taken)).unwrap_or(0)
}

/// Burns CPU on the calling thread until the sampler has taken `n` samples of it.
fn burn_until_sampled(rec: &Recorder, n: u64) {
    let tid = recorder::ThreadRef::current().0;
    let mut x = 1u64;
    while samples_taken(rec, tid) < n {
        for i in 0..20_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

fn sampling_recorder(base: &Path) -> Recorder {
    Recorder::builder()
        .repository(base)
        .sampling_period(Duration::from_millis(1))
        // No timed flush while the short threads run: only the explicit one after they are gone.
        .flush_interval(Duration::from_secs(600))
        .max_chunk_age(Duration::from_secs(600))
        .start()
        .unwrap()
}

/// The thread's samples carry its name (not `thread-<tid>`), and every event of the thread does.
fn assert_named(seen: &[Seen], tid: u32, name: &str, kinds: &[&str]) {
    let of_thread: Vec<&Seen> = seen.iter().filter(|s| s.tid == i64::from(tid)).collect();
    for kind in kinds {
        assert!(of_thread.iter().any(|s| s.type_name == *kind), "no {kind} of thread {tid}: {of_thread:?}");
    }
    assert!(of_thread.iter().all(|s| s.thread == name), "thread {tid} should be {name:?}: {of_thread:?}");
}

#[test]
fn a_registered_thread_that_exits_before_the_flush_keeps_its_name() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = sampling_recorder(base.path());
    let tid = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("short-registered".into())
            .spawn_scoped(s, || {
                rec.register_current_thread().unwrap();
                burn_until_sampled(&rec, 3);
                recorder::ThreadRef::current().0
            })
            .unwrap()
            .join()
            .unwrap()
    });
    rec.flush();
    rec.stop().unwrap();
    let seen = events(base.path());
    assert_named(&seen, tid, "short-registered", &["jdk.ExecutionSample", "jdk.ThreadStart", "jdk.ThreadEnd"]);
}

#[test]
fn a_discovered_thread_that_exits_before_the_flush_keeps_its_name() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = sampling_recorder(base.path());
    // The thread does not register: it is sampled once thread discovery finds it, which knows
    // the kernel's name (15 bytes at most) only.
    let tid = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("short-discover".into())
            .spawn_scoped(s, || {
                burn_until_sampled(&rec, 3);
                recorder::ThreadRef::current().0
            })
            .unwrap()
            .join()
            .unwrap()
    });
    rec.flush();
    rec.stop().unwrap();
    let seen = events(base.path());
    assert_named(&seen, tid, "short-discover", &["jdk.ExecutionSample"]);
}

#[test]
fn a_committing_thread_that_exits_before_the_flush_keeps_its_long_name() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(base.path())
        .no_sampling()
        .flush_interval(Duration::from_secs(600))
        .max_chunk_age(Duration::from_secs(600))
        .event("names.Step", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .unwrap();
    let tid = std::thread::Builder::new()
        .name("a-committing-thread-with-a-long-name".into())
        .spawn(|| {
            Step { n: 1 }.commit();
            recorder::ThreadRef::current().0
        })
        .unwrap()
        .join()
        .unwrap();
    rec.flush();
    rec.stop().unwrap();
    let seen = events(base.path());
    assert_named(
        &seen,
        tid,
        "a-committing-thread-with-a-long-name",
        &["names.Step", "jdk.ThreadStart", "jdk.ThreadEnd"],
    );
}

fn set_own_name(name: &str) {
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: names the calling thread with a NUL-terminated string of at most 15 bytes.
    let rc = unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr()) };
    assert_eq!(rc, 0);
}

/// Runs `f` on a thread of its own and waits for it; the thread stays alive between calls.
struct Worker {
    tx: std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>,
    done: std::sync::mpsc::Receiver<()>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn new(name: &str) -> Worker {
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let (done_tx, done) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for f in rx {
                    f();
                    done_tx.send(()).unwrap();
                }
            })
            .unwrap();
        Worker { tx, done, handle: Some(handle) }
    }
    fn run(&self, f: impl FnOnce() + Send + 'static) {
        self.tx.send(Box::new(f)).unwrap();
        self.done.recv().unwrap();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let (tx, _) = std::sync::mpsc::channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

/// Flushes until the recording has started a chunk file after the ones there now.
fn flush_until_rotated(rec: &Recorder) {
    let count = || chunk_files(rec.repository_dir()).len();
    let before = count();
    for _ in 0..500 {
        rec.flush();
        if count() > before {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no new chunk after 500 flushes past the chunk age");
}

fn renamed_thread_shows_its_new_name_in_later_chunks(sampling: bool) {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let builder = Recorder::builder()
        .repository(base.path())
        .flush_interval(Duration::from_millis(20))
        .max_chunk_age(Duration::from_millis(20))
        .event("names.Step", EventSettings { stack_trace: false, ..Default::default() });
    let rec = if sampling { builder.sampling_period(Duration::from_millis(1)) } else { builder.no_sampling() }
        .start()
        .unwrap();
    let worker = Worker::new("before-rename");
    worker.run(|| Step { n: 1 }.commit());
    flush_until_rotated(&rec);
    worker.run(|| set_own_name("after-rename"));
    // The rename is seen at the thread's next commit after a flush (or a discovery pass).
    rec.flush();
    worker.run(|| Step { n: 2 }.commit());
    rec.flush();
    flush_until_rotated(&rec);
    worker.run(|| Step { n: 3 }.commit());
    let tid = {
        let (tx, rx) = std::sync::mpsc::channel();
        worker.run(move || tx.send(recorder::ThreadRef::current().0).unwrap());
        rx.recv().unwrap()
    };
    drop(worker);
    rec.stop().unwrap();
    let seen = events(base.path());
    let steps: Vec<&Seen> = seen.iter().filter(|s| s.type_name == "names.Step").collect();
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(steps.iter().all(|s| s.tid == i64::from(tid)));
    assert_eq!(steps[0].thread, "before-rename", "{steps:?}");
    assert_eq!(steps[2].thread, "after-rename", "{steps:?}");
    // Every chunk from the one of the last step on names the thread by its new name.
    let last = steps[2].chunk;
    let later: Vec<&Seen> = seen.iter().filter(|s| s.tid == i64::from(tid) && s.chunk >= last).collect();
    assert!(later.iter().all(|s| s.thread == "after-rename"), "{later:?}");
}

#[test]
fn a_renamed_committing_thread_shows_its_new_name_in_later_chunks() {
    renamed_thread_shows_its_new_name_in_later_chunks(false);
}

#[test]
fn a_renamed_sampled_thread_shows_its_new_name_in_later_chunks() {
    renamed_thread_shows_its_new_name_in_later_chunks(true);
}
