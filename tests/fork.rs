//! A recorded process that forks: the child is not broken (no deadlock on a lock held at fork
//! time, no inherited recording) and can start a recording of its own.

mod common;

use common::*;
use recorder::{Event, Recorder};
use std::time::Duration;

recorder::event! {
    #[event(name = "test.Forky", label = "Forky")]
    pub struct Forky { pub n: u64 }
}

#[test]
fn forked_child_is_clean_and_can_record_on_its_own() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let parent = Recorder::builder().repository(dir.path()).flush_interval(Duration::from_millis(10)).start().unwrap();
    // Threads committing (and the flusher flushing) while we fork, so locks are busy.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    Forky { n }.commit();
                    n += 1;
                }
            })
        })
        .collect();
    let child_dir = dir.path().join("child");
    std::fs::create_dir(&child_dir).unwrap();
    let mut children = Vec::new();
    for _ in 0..20 {
        // The child only calls the recorder and then _exit; see the fork module docs.
        let pid = fork_child(|| {
            Forky { n: u64::MAX }.commit(); // inherited recording: must be a no-op
            let rec = Recorder::builder().repository(&child_dir).start().expect("child starts its own");
            Forky { n: 7 }.commit();
            rec.stop().expect("child stops");
        });
        children.push(pid);
        std::thread::sleep(Duration::from_millis(5));
    }
    for pid in children {
        // A deadlocked child would hang here: bound the wait. Generously: 20 children each start a
        // recording of their own (CFI tables of every module compiled anew, symbolization) on a
        // machine that may be busy with other tests, so a slow child is not a hung one.
        wait_child_ok(pid, Duration::from_secs(300));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
    parent.stop().unwrap();
    let mut found = 0;
    for sub in std::fs::read_dir(&child_dir).unwrap() {
        for c in chunk_files(&sub.unwrap().path()) {
            let events = read_events(&c, "test.Forky");
            assert!(events.iter().all(|e| e.field_i64("n") == 7), "only the child's own events");
            found += events.len();
        }
    }
    assert_eq!(found, 20, "every child recorded its event");
}

/// Runs `body` in a forked child with an alarm; returns how the child ended: `Ok(code)` for an
/// exit, `Err(signal)` when killed (SIGALRM: it hung).
fn in_child(seconds: u32, body: impl FnOnce() -> i32) -> Result<i32, i32> {
    // SAFETY: the child runs `body` (recorder calls only) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: plain libc calls in the child; the default SIGALRM action ends a hung child.
        unsafe { libc::alarm(seconds) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
        // SAFETY: leaves without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFSIGNALED(status) {
        Err(libc::WTERMSIG(status))
    } else {
        Ok(libc::WEXITSTATUS(status))
    }
}

/// Every method of a `Recorder` inherited by a forked child checks the pid
/// before touching the recording. The parent holds L (explicit flushes in a loop) whenever the
/// child calls, so any method that takes L hangs.
#[test]
fn forked_child_never_waits_for_the_parents_lock() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = std::sync::Arc::new(
        Recorder::builder().repository(dir.path()).flush_interval(Duration::from_millis(10)).start().unwrap(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (rec, stop) = (rec.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rec.flush();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(30));
    type Call = fn(&Recorder) -> i32;
    let calls: [(&str, Call); 7] = [
        ("stats", |r| i32::from(r.stats() != recorder::RecorderStats::default())),
        ("sampler_stats", |r| i32::from(r.sampler_stats().is_some())),
        ("flush", |r| {
            r.flush();
            0
        }),
        ("dump", |r| i32::from(r.dump(std::env::temp_dir().join("never-written-by-a-child.jfr")).is_ok())),
        ("set_event_settings", |r| {
            r.set_event_settings("test.Forky", recorder::EventSettings::default());
            0
        }),
        ("register_current_thread", |r| i32::from(r.register_current_thread().is_ok())),
        ("repository_dir", |r| i32::from(!r.repository_dir().exists())),
    ];
    let mut failures = Vec::new();
    for (name, call) in calls {
        for _ in 0..3 {
            let rec = &*rec;
            match in_child(3, || call(rec)) {
                Ok(0) => {}
                Ok(code) => {
                    failures.push(format!("{name}: child returned {code} (the call acted on the parent's recording)"))
                }
                Err(sig) => failures.push(format!("{name}: child killed by signal {sig} (hung on the parent's lock)")),
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.join().unwrap();
    std::sync::Arc::into_inner(rec).unwrap().stop().unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A child's `flush()` on the inherited handle while L is free
/// must not publish anything into the parent's live chunk file.
#[test]
fn forked_child_flush_leaves_the_parents_chunk_alone() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .flush_interval(Duration::from_secs(3600))
        .max_chunk_age(Duration::from_secs(3600))
        .start()
        .unwrap();
    let files = chunk_files(rec.repository_dir());
    assert_eq!(files.len(), 1);
    for n in 0..100 {
        Forky { n }.commit();
    }
    let before = std::fs::read(&files[0]).unwrap();
    let child = in_child(5, || {
        rec.flush();
        i32::from(rec.dump(std::env::temp_dir().join("never-written-by-a-child.jfr")).is_ok())
    });
    let after = std::fs::read(&files[0]).unwrap();
    rec.stop().unwrap();
    assert_eq!(child, Ok(0), "the child's dump must fail with an error");
    assert!(
        before == after,
        "the forked child wrote into the parent's live chunk ({} -> {} bytes)",
        before.len(),
        after.len()
    );
}

/// A fork while another thread holds one of the recorder's process-wide locks that a new
/// recording takes too (the scope registry a flush holds while it absorbs every thread's scope
/// tree, the scope names, the pending diagnostics, the span words): the child must still start
/// and stop a recording of its own. Before the atfork hooks took them, a child forked in such a
/// window waited forever on a lock whose holder does not exist in it (seen as a hung child of
/// `forked_child_is_clean_and_can_record_on_its_own`, one futex-waiting thread).
#[test]
fn forked_child_starts_while_parent_threads_hold_the_scope_and_diagnostic_locks() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let parent = Recorder::builder().repository(dir.path()).flush_interval(Duration::from_millis(10)).start().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let child_dir = dir.path().join("child");
    std::fs::create_dir(&child_dir).unwrap();
    let outcomes = std::thread::scope(|s| {
        // Scopes with ever new names: every flush absorbs thousands of changed nodes under the
        // scope registry, and every new name is interned under the names lock.
        for t in 0..2 {
            let stop = &stop;
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let now = recorder::clock::ticks();
                    recorder::scope_at(&format!("scope-{t}-{}", i % 20_000), now, now + 1);
                    i += 1;
                }
            });
        }
        // Flushes back to back (each takes the scope registry and the pending diagnostics).
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                parent.flush();
            }
        });
        let mut outcomes = Vec::new();
        for _ in 0..40 {
            outcomes.push(in_child(120, || {
                let rec =
                    Recorder::builder().repository(&child_dir).no_sampling().start().expect("child starts its own");
                let now = recorder::clock::ticks();
                recorder::scope_at("child", now, now + 1);
                Forky { n: 7 }.commit();
                rec.stop().expect("child stops");
                0
            }));
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        outcomes
    });
    parent.stop().unwrap();
    let hung = outcomes.iter().filter(|o| **o == Err(libc::SIGALRM)).count();
    assert!(outcomes.iter().all(|o| *o == Ok(0)), "{hung} of 40 children hung (SIGALRM); all: {outcomes:?}");
}

/// The thread id a thread caches for its commits: in a forked child the forking thread is the
/// child's only thread, with an id of its own (the child's pid), and the child's events carry that
/// id, not the one the thread had in the parent.
#[test]
fn forked_childs_events_carry_the_childs_thread_id() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let parent = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    Forky { n: 1 }.commit(); // this thread's first commit: its id is cached
    let child_dir = dir.path().join("child");
    std::fs::create_dir(&child_dir).unwrap();
    let pid = fork_child(|| {
        let rec = Recorder::builder().repository(&child_dir).no_sampling().start().expect("child starts its own");
        Forky { n: 7 }.commit();
        rec.stop().expect("child stops");
    });
    wait_child_ok(pid, Duration::from_secs(300));
    parent.stop().unwrap();
    let mut tids = Vec::new();
    for sub in std::fs::read_dir(&child_dir).unwrap() {
        for path in chunk_files(&sub.unwrap().path()) {
            for chunk in jfr_format::chunks(bytes::Bytes::from(std::fs::read(&path).unwrap())) {
                let chunk = chunk.unwrap();
                let Some(id) = chunk.metadata().class_by_name("test.Forky").map(|c| c.id) else { continue };
                for event in chunk.events().map(Result::unwrap).filter(|e| e.type_id == id) {
                    tids.push(chunk.event_thread(&event).unwrap().expect("an event thread").os_thread_id);
                }
            }
        }
    }
    assert_eq!(tids, vec![i64::from(pid)], "the child's event names the child's thread");
}
