//! A commit that passed the "is a recording running" check before `stop()`
//! is written into the recording or counted lost, never dropped silently.

mod common;

use common::*;
use recorder::{Event, FieldType, Recorder, TypeRegistry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Records encoded so far: `encode` only runs for a commit that found a recording running.
static ENCODED: AtomicU64 = AtomicU64::new(0);

/// A field whose encoding waits until the recording has begun to stop, then lingers: the commit
/// is past the generation check, and its record lands after `stop` would have finished.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Straggler;

impl FieldType for Straggler {
    fn describe(name: &str, registry: &mut TypeRegistry) -> jfr_format::metadata::Field {
        u64::describe(name, registry)
    }
    fn encode(&self, out: &mut recorder::Encoder<'_>) {
        ENCODED.fetch_add(1, Ordering::SeqCst);
        while Late::is_enabled() {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(300));
        0u64.encode(out);
    }
}

recorder::event! {
    #[event(name = "stop.Late", label = "Late")]
    pub struct Late { pub wait: Straggler }
}

#[test]
fn a_commit_in_flight_at_stop_is_written_or_counted() {
    let _guard = serial();
    Late::register();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    let repo = rec.repository_dir().to_owned();
    let committer = std::thread::spawn(|| Late { wait: Straggler }.commit());
    while ENCODED.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = rec.stop_with_report().unwrap();
    committer.join().unwrap();
    let written: usize = chunk_files(&repo).iter().map(|c| read_events(c, "stop.Late").len()).sum();
    let encoded = ENCODED.load(Ordering::SeqCst);
    assert_eq!(
        written as u64 + report.stats.events_lost,
        encoded,
        "{encoded} commits passed the check: {written} written, {} counted lost",
        report.stats.events_lost
    );
}

/// A thread that joined the recording without committing anything (`register_current_thread`,
/// as the preload does for the program's main thread) has no commit in flight: `stop` on that
/// very thread neither waits for it nor reports it lost. Before the fix the join left the
/// thread's in-flight mark set, and every `recorder record` run ended with a phantom
/// "commit still in progress" loss after a one-second wait.
#[test]
fn a_thread_that_joined_without_committing_has_no_commit_in_flight() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).start().unwrap();
    let repo = rec.repository_dir().to_owned();
    rec.register_current_thread().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| rec.register_current_thread().unwrap());
    });
    let report = rec.stop_with_report().unwrap();
    let losses: Vec<String> = chunk_files(&repo)
        .iter()
        .flat_map(|c| read_events(c, "recorder.DataLoss"))
        .map(|e| format!("{:?}", e.field("reason")))
        .collect();
    assert_eq!(report.stats.events_lost, 0, "losses reported: {losses:?}");
    assert!(losses.is_empty(), "{losses:?}");
}
