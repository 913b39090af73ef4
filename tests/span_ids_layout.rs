//! `jdk.ExecutionSample.spanId` only where span context exists (issue 12 §1): a process with no
//! `RecorderLayer` writes the JDK's exact layout of the event (readers that assume it, such as
//! async-profiler's converter, read every sample); once a layer exists, the next chunk declares
//! the field and its samples carry the span they ran in. Its own test binary: whether a layer was
//! ever created is process-wide.
#![cfg(feature = "tracing")]

mod common;

use common::*;
use recorder::tracing::RecorderLayer;
use recorder::Recorder;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

/// This thread's CPU time.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Computes for `d` of CPU time (samples count CPU time: a loaded machine gives as many).
fn spin(d: Duration) {
    let t = cpu_time();
    while cpu_time() - t < d {
        std::hint::black_box(0);
    }
}

fn field_names(e: &ReadEvent) -> Vec<&str> {
    e.fields.iter().map(|(n, _)| n.as_str()).collect()
}

const JDK_FIELDS: [&str; 4] = ["startTime", "sampledThread", "stackTrace", "state"];

#[test]
fn span_ids_appear_with_the_first_layer() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).sampling_period(Duration::from_millis(1)).start().unwrap();
    rec.register_current_thread().unwrap();
    spin(Duration::from_millis(60));
    // No layer yet: the JDK's layout (and this chunk keeps it: its samples are written).
    let before = dir.path().join("before.jfr");
    rec.dump(&before).unwrap();
    let samples = read_events(&before, "jdk.ExecutionSample");
    assert!(!samples.is_empty());
    for s in &samples {
        assert_eq!(field_names(s), JDK_FIELDS);
    }
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", before.to_str().unwrap()]);
    assert!(printed.contains("jdk.ExecutionSample") && !printed.contains("spanId"));

    // A layer: the samples taken inside its span carry the span's id, in a chunk that declares it.
    let subscriber = tracing_subscriber::registry().with(RecorderLayer::new());
    let mut inside = (0, 0);
    tracing::subscriber::with_default(subscriber, || {
        let _span = tracing::info_span!("cpu_bound").entered();
        let t0 = recorder::clock::ticks();
        spin(Duration::from_millis(200));
        inside = (t0, recorder::clock::ticks());
    });
    let after = dir.path().join("after.jfr");
    rec.dump(&after).unwrap();
    rec.stop().unwrap();
    let spans = read_events(&after, "recorder.Span");
    assert_eq!(spans.len(), 1);
    let id = spans[0].field_i64("spanId");
    let me = std::thread::current().name().unwrap().to_owned();
    let samples: Vec<_> =
        read_events(&after, "jdk.ExecutionSample").into_iter().filter(|s| s.thread.as_deref() == Some(&me)).collect();
    let (mut plain, mut in_span) = (0, 0);
    for s in &samples {
        if field_names(s) == JDK_FIELDS {
            plain += 1;
            assert!(s.start_ticks < inside.0, "a sample without spanId after the layer existed: {s:?}");
        } else {
            assert_eq!(field_names(s), [&JDK_FIELDS[..], &["spanId"]].concat());
            if (inside.0..=inside.1).contains(&s.start_ticks) {
                assert_eq!(s.field_i64("spanId"), id);
                in_span += 1;
            }
        }
    }
    // (Samples are taken per CPU time of the whole process: the recorder's own work after the
    // first dump takes its share.)
    assert!(plain > 0 && in_span >= 10, "{plain} samples without spanId, {in_span} in the span");
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", after.to_str().unwrap()]);
    assert!(printed.contains(&format!("spanId = {id}")), "{}", &printed[..printed.len().min(3000)]);
    jdk_accepts(&[after]);
}
