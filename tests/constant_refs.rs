//! Segment completeness (docs/sampler-protocol.md I7): every thread and stack trace an
//! event references is defined in the chunk it lands in, whoever wrote the event and whenever.

mod common;

use common::*;
use jfr_format::metadata::ids;
use recorder::{Event, EventSettings, Recorder};
use std::path::Path;
use std::time::Duration;

recorder::event! {
    #[event(name = "refs.Event", label = "Refs")]
    pub struct RefsEvent { pub n: u64, pub other: recorder::ThreadRef }
}

/// Every reference to a thread or a stack trace in every event of every chunk of `repo` that the
/// chunk does not define, and the number of references checked.
fn dangling_refs(repo: &Path) -> (Vec<String>, usize) {
    let mut dangling = Vec::new();
    let mut checked = 0;
    for path in chunk_files(repo) {
        let data = bytes::Bytes::from(std::fs::read(&path).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            for event in chunk.events() {
                let event = event.unwrap();
                let name = chunk.types().class(event.type_id).map(|c| c.name.clone()).unwrap_or_default();
                for value in &event.values {
                    let jfr_format::Value::Ref { type_id, key } = *value else { continue };
                    if key == 0 || (type_id != ids::THREAD && type_id != ids::STACK_TRACE) {
                        continue;
                    }
                    checked += 1;
                    if chunk.resolve(type_id, key).unwrap().is_none() {
                        dangling.push(format!("{}: {name} -> {type_id}:{key} undefined", path.display()));
                    }
                }
            }
        }
    }
    (dangling, checked)
}

/// `jdk.ActiveSetting` / `jdk.ActiveRecording` written by a mid-chunk flush
/// (after a settings change) name the flushing thread, which the chunk must define.
#[test]
fn settings_written_mid_chunk_reference_defined_threads() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .flush_interval(Duration::from_millis(50))
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(120));
    rec.set_event_settings("refs.Nothing", EventSettings { enabled: false, ..Default::default() });
    std::thread::sleep(Duration::from_millis(120));
    // An application thread flushes after another change: its tid names the settings events.
    rec.set_event_settings("refs.Nothing", EventSettings { enabled: true, ..Default::default() });
    std::thread::scope(|s| {
        s.spawn(|| rec.flush());
    });
    let repo = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let (dangling, checked) = dangling_refs(&repo);
    assert!(checked > 0, "the settings events reference their thread");
    assert!(dangling.is_empty(), "{} of {checked} references undefined: {dangling:#?}", dangling.len());
}

/// Every kind of event the recorder writes (application events with stacks and thread fields,
/// samples, thread starts and ends, settings, loss reports, statistics) over several chunks.
#[test]
fn every_reference_in_a_rotating_recording_is_defined() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .flush_interval(Duration::from_millis(20))
        .max_chunk_age(Duration::from_millis(150))
        .sampling_period(Duration::from_millis(1))
        .start()
        .unwrap();
    let other = std::thread::spawn(recorder::ThreadRef::current).join().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_millis(600);
    let mut n = 0u64;
    while std::time::Instant::now() < deadline {
        RefsEvent { n, other }.commit();
        n += 1;
        if n.is_multiple_of(500) {
            rec.set_event_settings("refs.Event", EventSettings::default());
        }
    }
    let repo = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let (dangling, checked) = dangling_refs(&repo);
    assert!(checked > 0);
    assert!(
        dangling.is_empty(),
        "{} of {checked} references undefined: {:#?}",
        dangling.len(),
        &dangling[..dangling.len().min(20)]
    );
}
