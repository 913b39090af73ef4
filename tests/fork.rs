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
        // SAFETY: the child only calls the recorder and then _exit; see the fork module docs.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                Forky { n: u64::MAX }.commit(); // inherited recording: must be a no-op
                let rec = Recorder::builder().repository(&child_dir).start().expect("child starts its own");
                Forky { n: 7 }.commit();
                rec.stop().expect("child stops");
            })
            .map_or(3, |()| 0);
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        children.push(pid);
        std::thread::sleep(Duration::from_millis(5));
    }
    for pid in children {
        let mut status = 0;
        // A deadlocked child would hang here: bound the wait.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            // SAFETY: plain waitpid on our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "child {pid} hangs (deadlock after fork?)");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child {pid} failed: {status}");
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
