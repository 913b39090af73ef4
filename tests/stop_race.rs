//! Review finding 11: a commit that passed the "is a recording running" check before `stop()`
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
