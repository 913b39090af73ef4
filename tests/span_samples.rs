//! Span context on CPU samples: every `jdk.ExecutionSample` taken while a thread is
//! inside a span carries that span's id (`spanId`, declared in the metadata so the JDK prints
//! it); samples outside any span carry 0.
#![cfg(feature = "tracing")]

mod common;

use common::*;
use recorder::tracing::RecorderLayer;
use recorder::Recorder;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

#[test]
fn every_sample_inside_a_span_carries_its_id() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // The layer before the recorder (the README's order): the recording's first written sample
    // decides whether samples carry `spanId`, and a flush may come soon after `start`.
    let subscriber = tracing_subscriber::registry().with(RecorderLayer::new());
    let rec = Recorder::builder().repository(dir.path()).sampling_period(Duration::from_millis(1)).start().unwrap();
    rec.register_current_thread().unwrap();
    // (span id is read back from recorder.Span; the intervals in ticks)
    let mut inside = Vec::new();
    let mut outside = Vec::new();
    tracing::subscriber::with_default(subscriber, || {
        for round in 0..3 {
            let t0 = recorder::clock::ticks();
            spin_cpu(Duration::from_millis(60));
            outside.push((t0, recorder::clock::ticks()));
            let span = tracing::info_span!("cpu_bound", round);
            let entered = span.enter();
            let t1 = recorder::clock::ticks();
            spin_cpu(Duration::from_millis(120));
            inside.push((round, t1, recorder::clock::ticks()));
            drop(entered);
        }
    });
    let file = dir.path().join("samples.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    let spans = read_events(&file, "recorder.Span");
    assert_eq!(spans.len(), 3);
    let id_of = |round: i64| {
        spans
            .iter()
            .find(|s| s.field("fields").as_str() == Some(&format!("round={round}")))
            .unwrap()
            .field_i64("spanId")
    };
    let me = std::thread::current().name().unwrap().to_owned();
    let samples: Vec<_> =
        read_events(&file, "jdk.ExecutionSample").into_iter().filter(|s| s.thread.as_deref() == Some(&me)).collect();
    let (mut checked_in, mut checked_out) = (0, 0);
    for s in &samples {
        let t = s.start_ticks;
        let span = s.field_i64("spanId");
        if let Some(&(round, _, _)) = inside.iter().find(|(_, a, b)| *a <= t && t <= *b) {
            assert_eq!(span, id_of(round), "sample at {t} inside round {round}");
            checked_in += 1;
        } else if outside.iter().any(|(a, b)| *a <= t && t <= *b) {
            assert_eq!(span, 0, "sample at {t} outside every span");
            checked_out += 1;
        }
    }
    // 360 ms of CPU inside and 180 ms outside at 1 ms: hundreds and dozens of samples.
    assert!(checked_in >= 30 && checked_out >= 10, "in {checked_in}, out {checked_out} of {}", samples.len());
    // The JDK prints the field.
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", file.to_str().unwrap()]);
    assert!(printed.contains(&format!("spanId = {}", id_of(1))), "{}", &printed[..printed.len().min(3000)]);
    // The JDK and a reader that decodes the JDK's fields by position (async-profiler's
    // converter) count every sample of the file.
    let all = read_events(&file, "jdk.ExecutionSample").len() as u64;
    assert_eq!(jfr_summary_counts(&file).get("jdk.ExecutionSample"), Some(&all));
    assert_eq!(positional_reader_counts(&file).get("jdk.ExecutionSample"), Some(&all));
    jdk_accepts(&[file]);
}

/// `sample_span_ids(false)`: `jdk.ExecutionSample` has exactly the JDK's four fields (readers
/// that assume that layout, like async-profiler's converter, read every sample); the next
/// recording has `spanId` again.
#[test]
fn samples_without_span_ids_have_the_jdk_layout() {
    let _serial = serial();
    let fields = |file: &std::path::Path| {
        let samples = read_events(file, "jdk.ExecutionSample");
        assert!(!samples.is_empty());
        samples[0].fields.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
    };
    let record = |span_ids: bool, name: &str| {
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::builder()
            .repository(dir.path())
            .sampling_period(Duration::from_millis(1))
            .sample_span_ids(span_ids)
            .start()
            .unwrap();
        rec.register_current_thread().unwrap();
        let subscriber = tracing_subscriber::registry().with(RecorderLayer::new());
        tracing::subscriber::with_default(subscriber, || {
            let _s = tracing::info_span!("cpu_bound").entered();
            spin_cpu(Duration::from_millis(50));
        });
        let file = dir.path().join(name);
        rec.dump(&file).unwrap();
        rec.stop().unwrap();
        (dir, file)
    };
    let (_d1, plain) = record(false, "plain.jfr");
    assert_eq!(fields(&plain), ["startTime", "sampledThread", "stackTrace", "state"]);
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", plain.to_str().unwrap()]);
    assert!(printed.contains("jdk.ExecutionSample") && !printed.contains("spanId"));
    jdk_accepts(&[plain]);
    let (_d2, with_ids) = record(true, "with_ids.jfr");
    assert_eq!(
        fields(&with_ids),
        ["startTime", "sampledThread", "stackTrace", "state", "contextSize", "contextIds", "spanId"]
    );
}
