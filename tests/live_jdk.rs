//! The JDK's streaming reader follows a live repository: it receives each flush's events while
//! the recording runs, follows rotations, and ends when the final chunk is published.

mod common;

use common::*;
use recorder::{Event, EventSettings, Recorder};
use std::time::{Duration, Instant};

recorder::event! {
    #[event(name = "test.Live", label = "Live")]
    pub struct Live { pub seq: u64 }
}

#[test]
fn jdk_event_stream_follows_flushes_and_rotations_until_the_final_chunk() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .flush_interval(Duration::from_millis(100))
        .max_chunk_age(Duration::from_millis(1500))
        .event("test.Live", EventSettings { stack_trace: true, ..Default::default() })
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let (mut child, rx) = live_jdk_stream(&repo, &["test.Live"]);

    let mut received = Vec::new();
    let mut flushes = 0;
    let mut seq = 0;
    let started = Instant::now();
    // Batches until at least two rotations happened while the consumer was following.
    while started.elapsed() < Duration::from_millis(4000) || seq < 30 {
        let batch_end = seq + 10;
        while seq < batch_end {
            Live { seq }.commit();
            seq += 1;
        }
        // The consumer must see this batch while the recording is still running.
        let deadline = Instant::now() + Duration::from_secs(30);
        while received.last() != Some(&(batch_end - 1)) {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("the JDK consumer did not receive event {} while recording", batch_end - 1));
            if let Some(rest) = line.strip_prefix("EVENT ") {
                let parts: Vec<&str> = rest.split(' ').collect();
                received.push(parts[0].parse::<u64>().unwrap());
                assert!(parts[1].parse::<usize>().unwrap() > 0, "event without a stack: {line}");
            } else if line == "FLUSH" {
                flushes += 1;
            } else if line.starts_with("ERROR") {
                panic!("consumer error: {line}");
            }
        }
    }
    let chunks_during = chunk_files(&repo).len();
    rec.stop().unwrap();
    // The final flag ends the stream by itself.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut closed = false;
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if line == "CLOSED" || line == "DONE" {
            closed = true;
            break;
        }
        if let Some(rest) = line.strip_prefix("EVENT ") {
            received.push(rest.split(' ').next().unwrap().parse().unwrap());
        }
    }
    let status = child.wait().unwrap();
    assert!(closed, "the consumer did not end after the final chunk");
    assert!(status.success());
    assert!(chunks_during >= 3, "only {chunks_during} chunks while streaming: no two rotations");
    assert!(flushes >= 3, "only {flushes} flushes seen");
    let expected: Vec<u64> = (0..seq).collect();
    assert_eq!(received, expected, "every event exactly once, in order");
}
