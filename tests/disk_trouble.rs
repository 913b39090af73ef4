//! A disk that fails mid-recording: the failure is reported once, the lost events are counted in
//! the recording, the application carries on, and recording resumes when writing works again.
//! The failing disk is a file-size limit (RLIMIT_FSIZE) in a child process.

mod common;

use common::*;
use recorder::{Event, EventSettings, Recorder};
use std::process::Command;
use std::time::Duration;

recorder::event! {
    #[event(name = "test.Disk", label = "Disk")]
    pub struct Disk { pub seq: u64, pub payload: String }
}

const CHILD_ENV: &str = "RECORDER_DISK_TROUBLE_DIR";
const COMMITTED: u64 = 6000;

fn set_file_size_limit(bytes: u64) {
    let limit = libc::rlimit { rlim_cur: bytes as libc::rlim_t, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: plain syscalls with valid arguments; SIGXFSZ ignored so an oversized write fails
    // with EFBIG instead of killing the process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
}

fn child(dir: &str) {
    let rec = Recorder::builder()
        .repository(dir)
        .flush_interval(Duration::from_millis(20))
        .max_chunk_size(256 * 1024)
        .event("test.Disk", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .unwrap();
    // Chunk files may not grow past 40 KB: every chunk fails once it gets there.
    set_file_size_limit(40_000);
    let payload = "x".repeat(200);
    for seq in 0..COMMITTED / 2 {
        Disk { seq, payload: payload.clone() }.commit();
        if seq % 100 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // Space returns.
    set_file_size_limit(u64::MAX);
    for seq in COMMITTED / 2..COMMITTED {
        Disk { seq, payload: payload.clone() }.commit();
        if seq % 100 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let stats = rec.stats();
    rec.stop().unwrap();
    println!("CHILD-STATS failures={} lost={}", stats.write_failures, stats.events_lost);
}

#[test]
fn failing_disk_is_counted_as_loss_and_recording_resumes() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(&dir);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "failing_disk_is_counted_as_loss_and_recording_resumes", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the application must keep running:\n{stdout}\n{stderr}");
    assert!(stdout.contains("CHILD-STATS"), "{stdout}");
    let reports = stderr.matches("recorder: writing to").count();
    assert_eq!(reports, 1, "the failure is reported once:\n{stderr}");

    let repo = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
    let chunks = chunk_files(&repo);
    let mut found = std::collections::BTreeSet::new();
    let mut lost = 0i64;
    for c in &chunks {
        for e in read_events(c, "test.Disk") {
            assert!(found.insert(e.field_i64("seq")), "duplicate event");
        }
        lost += read_events(c, "recorder.DataLoss").iter().map(|e| e.field_i64("events")).sum::<i64>();
    }
    assert!(lost > 0, "writes should have failed");
    assert_eq!(found.len() as u64 + lost as u64, COMMITTED, "found {} + lost {lost}", found.len());
    assert!(found.contains(&(COMMITTED as i64 - 1)), "recording resumed after space returned");
    jdk_accepts(&chunks[chunks.len().saturating_sub(2)..]);
}
