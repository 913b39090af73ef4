//! `jdk.ExecutionSample.spanId` only where span context exists: a recording whose
//! first samples were written with no `RecorderLayer` in the process has the JDK's exact layout
//! of the event in every chunk (readers that assume it, such as async-profiler's converter, read
//! every sample; JMC would split a type whose fields change between chunks); once a layer exists,
//! the next recording declares the field and its samples carry the span they ran in. Its own test
//! binary: whether a layer was ever created is process-wide.
#![cfg(feature = "tracing")]

mod common;

use common::*;
use recorder::tracing::RecorderLayer;
use recorder::Recorder;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

fn field_names(e: &ReadEvent) -> Vec<&str> {
    e.fields.iter().map(|(n, _)| n.as_str()).collect()
}

const JDK_FIELDS: [&str; 4] = ["startTime", "sampledThread", "stackTrace", "state"];
/// The context block after them (docs/jfr-format.md, "Context ids on samples").
const CONTEXT_FIELDS: [&str; 3] = ["contextSize", "contextIds", "spanId"];

fn spin_in_span(name: &'static str) -> (i64, i64) {
    let subscriber = tracing_subscriber::registry().with(RecorderLayer::new());
    let mut inside = (0, 0);
    tracing::subscriber::with_default(subscriber, || {
        let _span = tracing::info_span!("cpu_bound", name).entered();
        let t0 = recorder::clock::ticks();
        spin_cpu(Duration::from_millis(200));
        inside = (t0, recorder::clock::ticks());
    });
    inside
}

#[test]
fn span_ids_appear_with_the_first_layer() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::thread::current().name().unwrap().to_owned();
    let mine = |file: &std::path::Path| -> Vec<ReadEvent> {
        read_events(file, "jdk.ExecutionSample").into_iter().filter(|s| s.thread.as_deref() == Some(&me)).collect()
    };

    // No layer when the first samples are written: the JDK's layout, for the whole recording,
    // also after a layer appears (one layout per recording).
    let rec = Recorder::builder().repository(dir.path()).sampling_period(Duration::from_millis(1)).start().unwrap();
    rec.register_current_thread().unwrap();
    spin_cpu(Duration::from_millis(60));
    let before = dir.path().join("before.jfr");
    rec.dump(&before).unwrap();
    assert!(!mine(&before).is_empty());
    spin_in_span("late");
    let plain = dir.path().join("plain.jfr");
    rec.dump(&plain).unwrap();
    rec.stop().unwrap();
    let samples = read_events(&plain, "jdk.ExecutionSample");
    assert!(samples.len() > mine(&before).len());
    for s in &samples {
        assert_eq!(field_names(s), JDK_FIELDS);
    }
    assert_eq!(positional_reader_counts(&plain).get("jdk.ExecutionSample"), Some(&(samples.len() as u64)));
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", plain.to_str().unwrap()]);
    assert!(printed.contains("jdk.ExecutionSample") && !printed.contains("spanId"));
    // Not silently: the recording says why its spans have no samples, and how to fix it.
    let late: Vec<_> = read_events(&plain, "recorder.Diagnostic")
        .into_iter()
        .filter(|d| d.field("code").as_str() == Some("late-span-layer"))
        .collect();
    assert_eq!(late.len(), 1, "one late-span-layer diagnostic");
    assert!(late[0].field("fix").as_str().is_some_and(|f| f.contains("before starting the Recorder")));
    assert!(read_events(&before, "recorder.Diagnostic")
        .iter()
        .all(|d| d.field("code").as_str() != Some("late-span-layer")));
    jdk_accepts(&[plain]);

    // A layer exists: the next recording's samples carry the span they ran in.
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).sampling_period(Duration::from_millis(1)).start().unwrap();
    rec.register_current_thread().unwrap();
    let inside = spin_in_span("spans");
    let with_ids = dir.path().join("with_ids.jfr");
    rec.dump(&with_ids).unwrap();
    rec.stop().unwrap();
    let spans = read_events(&with_ids, "recorder.Span");
    assert_eq!(spans.len(), 1);
    let id = spans[0].field_i64("spanId");
    let mut in_span = 0;
    for s in &mine(&with_ids) {
        // The JDK's fields first, in its order; the context block after them, its size and count
        // what a reader that decodes the JDK's fields by position takes for the next event's
        // size and type (one that it skips: never an event type id).
        assert_eq!(field_names(s), [&JDK_FIELDS[..], &CONTEXT_FIELDS[..]].concat());
        let span = s.field_i64("spanId") as u64;
        assert_eq!(s.field_i64("contextSize"), 2 + jfr_format::varint::encoded_len(span) as i64);
        assert_eq!(s.field_i64("contextIds"), 1);
        if (inside.0..=inside.1).contains(&s.start_ticks) {
            assert_eq!(s.field_i64("spanId"), id);
            in_span += 1;
        }
    }
    // (Samples are taken per CPU time of the whole process: the recorder's own work takes its
    // share.)
    assert!(in_span >= 10, "{in_span} samples in the span");
    // A reader that decodes the JDK's fields by position (async-profiler's converter) counts
    // every sample.
    let all = read_events(&with_ids, "jdk.ExecutionSample").len() as u64;
    assert_eq!(positional_reader_counts(&with_ids).get("jdk.ExecutionSample"), Some(&all));
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", with_ids.to_str().unwrap()]);
    assert!(printed.contains(&format!("spanId = {id}")), "{}", &printed[..printed.len().min(3000)]);
    jdk_accepts(&[with_ids]);
}
