//! Event types with every field kind, duration events, thresholds and per-type settings, judged by
//! `jfr print --json` on a dump of the live recording.

mod common;

use common::*;
use recorder::{Event, EventSettings, Recorder};
use std::time::Duration;

recorder::event! {
    #[event(name = "test.Work", label = "Work")]
    pub struct Work { pub id: u32 }
}

recorder::event! {
    #[event(name = "test.Quiet", label = "Quiet")]
    pub struct Quiet { pub id: u32 }
}

#[inline(never)]
fn commit_from_a_known_function() {
    all_kinds(12_345_678_901_234).commit();
}

#[test]
fn every_field_kind_reads_back_in_jfr_print_json() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .event("test.Work", EventSettings { threshold: Duration::from_millis(5), ..Default::default() })
        .event("test.Quiet", EventSettings { enabled: false, ..Default::default() })
        .start()
        .unwrap();
    commit_from_a_known_function();
    // Duration events: one above the threshold, one below (dropped), one cancelled.
    let mut slow = Work { id: 1 }.begin();
    std::thread::sleep(Duration::from_millis(20));
    slow.id = 2;
    slow.end();
    Work { id: 3 }.begin().end();
    Work { id: 4 }.begin().cancel();
    Quiet { id: 5 }.commit();
    rec.set_event_settings("test.Quiet", EventSettings::default());
    Quiet { id: 6 }.commit();
    let out = dir.path().join("dump.jfr");
    rec.dump(&out).unwrap();

    let json: serde_json::Value = serde_json::from_str(&jdk(
        "jfr",
        &["print", "--json", "--events", "test.AllKinds,test.Work,test.Quiet", out.to_str().unwrap()],
    ))
    .unwrap();
    let events = json["recording"]["events"].as_array().unwrap();
    let all: Vec<_> = events.iter().filter(|e| e["type"] == "test.AllKinds").collect();
    assert_eq!(all.len(), 1);
    let v = &all[0]["values"];
    assert_eq!(v["flag"], true);
    assert_eq!(v["tiny"], -7);
    assert_eq!(v["ubyte"], 200);
    assert_eq!(v["small"], -1234);
    assert_eq!(v["ushort"], 60000);
    assert_eq!(v["int"], -123456);
    assert_eq!(v["uint"], 4_000_000_000u64);
    assert_eq!(v["long"], -9_000_000_000_000i64);
    assert_eq!(v["ulong"], 12_345_678_901_234u64);
    assert_eq!(v["single"], 1.5);
    assert_eq!(v["double"], -2.25e100);
    assert_eq!(v["letter"], "ß");
    assert_eq!(v["text"], "héllo wörld ✓ 日本 🦀");
    assert_eq!(v["fixed"], "static");
    assert!(v["missing"].is_null());
    assert_eq!(v["endpoint"]["host"], "example.org");
    assert_eq!(v["endpoint"]["port"], 443);
    assert_eq!(v["elapsed"], "PT0.0015S");
    assert_eq!(v["when"], "2023-11-14T22:13:20.123Z");
    assert_eq!(v["size"], 1u64 << 40);
    assert_eq!(v["load"], 0.25);
    assert!(v["peer"]["osThreadId"].as_i64().unwrap() > 0);
    assert!(v["eventThread"]["osThreadId"].as_i64().unwrap() > 0);
    let frames = v["stackTrace"]["frames"].as_array().unwrap();
    assert!(!frames.is_empty(), "the event carries a stack");
    // The first frame is the function that committed (the recorder's own frames are skipped): its
    // whole name, its module as the class (this test's executable), a line number and the native
    // frame type.
    let top = &frames[0];
    assert_eq!(top["method"]["name"], "events_jdk::commit_from_a_known_function", "{top}");
    assert_eq!(top["method"]["descriptor"], "()L;", "{top}");
    assert!(top["method"]["type"]["name"].as_str().unwrap().starts_with("events_jdk-"), "{top}");
    assert!(top["lineNumber"].as_i64().unwrap() > 0, "{top}");
    assert_eq!(top["type"], "Native");
    assert!(
        frames.iter().any(|f| f["method"]["name"] == "events_jdk::every_field_kind_reads_back_in_jfr_print_json"),
        "the caller's frame is there too"
    );

    let works: Vec<i64> =
        events.iter().filter(|e| e["type"] == "test.Work").map(|e| e["values"]["id"].as_i64().unwrap()).collect();
    assert_eq!(works, [2], "only the event above the threshold is kept");
    let quiet: Vec<i64> =
        events.iter().filter(|e| e["type"] == "test.Quiet").map(|e| e["values"]["id"].as_i64().unwrap()).collect();
    assert_eq!(quiet, [6], "disabled at first, enabled at run time");

    jdk_accepts(std::slice::from_ref(&out));
    let meta = jdk("jfr", &["metadata", out.to_str().unwrap()]);
    assert!(meta.contains("@Category({\"Test\", \"Kinds\"})") || meta.contains("Kinds"), "{meta}");
    rec.stop().unwrap();
}

#[test]
fn unwritable_repository_and_bad_settings_are_rejected_at_start() {
    let _guard = serial();
    let err = Recorder::builder().repository("/proc/definitely/not/writable").start().unwrap_err();
    assert!(err.to_string().contains("/proc/definitely/not/writable"), "{err}");
    let err = Recorder::builder().flush_interval(Duration::from_micros(10)).start().unwrap_err();
    assert!(err.to_string().contains("flush interval"), "{err}");
    let err = Recorder::builder().max_chunk_size(10).start().unwrap_err();
    assert!(err.to_string().contains("chunk size"), "{err}");
    let err = Recorder::builder().stack_depth(5000).start().unwrap_err();
    assert!(err.to_string().contains("stack depth"), "{err}");
}

#[test]
fn a_second_recording_in_the_process_is_refused_and_stop_ends_with_the_final_flag() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).start().unwrap();
    assert!(matches!(Recorder::builder().repository(dir.path()).start(), Err(recorder::Error::AlreadyRunning)));
    let repo = rec.repository_dir().to_owned();
    drop(rec);
    let chunks = chunk_files(&repo);
    let last = std::fs::read(chunks.last().unwrap()).unwrap();
    assert_eq!(&last[64..68], &[0, 0, 0, 3], "finished, compressed, final");
    let summary = jfr_summary_counts(chunks.last().unwrap());
    assert!(summary.get("jdk.ActiveRecording").copied().unwrap_or(0) >= 1, "{summary:?}");
}
