//! `recorder::tracing::RecorderLayer`: spans and events of the `tracing` crate as
//! `recorder.Span` / `recorder.Log`, judged by the JDK's `jfr print`, `jfr summary` and the live
//! `EventStream`; spans as scopes; bad input (close on another thread, re-entry, no recorder,
//! recorder stopped while spans are open).
#![cfg(feature = "tracing")]

mod common;

use common::*;
use recorder::tracing::RecorderLayer;
use recorder::{EventSettings, Recorder};
use serde_json::Value as Json;
use std::path::Path;
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

fn subscriber() -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::registry().with(RecorderLayer::new())
}

/// `jfr print --json` of `file`, for these event types.
fn jfr_json(file: &Path, types: &str) -> Vec<Json> {
    let text = jdk("jfr", &["print", "--json", "--stack-depth", "64", "--events", types, file.to_str().unwrap()]);
    let json: Json = serde_json::from_str(&text).unwrap();
    json["recording"]["events"].as_array().unwrap().clone()
}

fn by_name<'a>(events: &'a [Json], name: &str) -> &'a Json {
    events.iter().find(|e| e["values"]["name"] == name).unwrap_or_else(|| panic!("no span {name}: {events:#?}"))
}

fn nanos(v: &Json) -> i64 {
    // `jfr print --json` writes durations as ISO-8601 ("PT0.031S").
    let s = v.as_str().unwrap_or_else(|| panic!("{v}"));
    let secs: f64 = s.trim_start_matches("PT").trim_end_matches('S').parse().unwrap_or_else(|_| panic!("{s}"));
    (secs * 1e9).round() as i64
}

/// A program with known spans: fields, durations, nesting, busy time and the events inside equal
/// what it did, as the JDK's `jfr print` reads them; `jfr summary` counts them.
#[test]
fn spans_and_events_read_back_with_the_jdk() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    tracing::subscriber::with_default(subscriber(), || {
        let outer = tracing::info_span!("request", path = "/orders", id = 42);
        let _o = outer.enter();
        tracing::info!(items = 3, "handling");
        let inner = tracing::debug_span!("db_query", table = "orders");
        // Entered twice (an async span polled twice), idle in between.
        {
            let _i = inner.enter();
            spin_wall(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(40));
        {
            let _i = inner.enter();
            spin_wall(Duration::from_millis(20));
            tracing::warn!("slow query");
        }
        drop(inner);
    });
    let file = dir.path().join("spans.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();

    let spans = jfr_json(&file, "recorder.Span");
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let request = by_name(&spans, "request");
    let query = by_name(&spans, "db_query");
    let rv = &request["values"];
    let qv = &query["values"];
    assert_eq!(rv["fields"], "path=/orders id=42");
    assert_eq!(rv["level"], "INFO");
    assert_eq!(qv["level"], "DEBUG");
    assert_eq!(rv["target"], "tracing_spans");
    assert_eq!(qv["fields"], "table=orders");
    let (rid, qid) = (rv["spanId"].as_i64().unwrap(), qv["spanId"].as_i64().unwrap());
    assert!(rid > 0 && qid > 0 && rid != qid);
    assert_eq!(qv["parentSpanId"].as_i64().unwrap(), rid);
    assert_eq!(rv["parentSpanId"].as_i64().unwrap(), 0);
    // The query lived ~80 ms but was busy ~40 ms of it.
    let q_duration = nanos(&qv["duration"]);
    let q_active = nanos(&qv["activeNanos"]);
    assert!(q_active >= 40_000_000, "busy {q_active}");
    assert!(q_duration >= q_active + 40_000_000, "lived {q_duration}, busy {q_active}");
    assert!(nanos(&rv["duration"]) >= q_duration);
    // Stack at span entry: this test function is on it.
    let frames = qv["stackTrace"]["frames"].as_array().unwrap();
    let names: Vec<&str> = frames.iter().map(|f| f["method"]["name"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.contains("spans_and_events_read_back")), "{names:#?}");

    let logs = jfr_json(&file, "recorder.Log");
    assert_eq!(logs.len(), 2, "{logs:#?}");
    let handling = logs.iter().find(|e| e["values"]["message"] == "handling").unwrap();
    assert_eq!(handling["values"]["fields"], "items=3");
    assert_eq!(handling["values"]["level"], "INFO");
    assert_eq!(handling["values"]["spanId"].as_i64().unwrap(), rid);
    let slow = logs.iter().find(|e| e["values"]["message"] == "slow query").unwrap();
    assert_eq!(slow["values"]["level"], "WARN");
    assert_eq!(slow["values"]["spanId"].as_i64().unwrap(), qid);

    let counts = jfr_summary_counts(&file);
    assert_eq!(counts.get("recorder.Span"), Some(&2));
    assert_eq!(counts.get("recorder.Log"), Some(&2));
    jdk_accepts(&[file]);
}

/// Spans are scopes: the scope report has their paths with self and total time.
#[test]
fn spans_are_scopes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    tracing::subscriber::with_default(subscriber(), || {
        for _ in 0..3 {
            let _a = tracing::info_span!("handler").entered();
            spin_wall(Duration::from_millis(2));
            let _b = tracing::info_span!("serialize").entered();
            recorder::scope!("encode");
            spin_wall(Duration::from_millis(1));
        }
    });
    let report = rec.scope_report();
    rec.stop().unwrap();
    let handler = report.find(&["handler"]).unwrap();
    let serialize = report.find(&["handler", "serialize"]).unwrap();
    let encode = report.find(&["handler", "serialize", "encode"]).unwrap();
    assert_eq!((handler.calls, serialize.calls, encode.calls), (3, 3, 3));
    assert!(handler.self_nanos >= 6_000_000 && encode.self_nanos >= 3_000_000, "{report:#?}");
    assert_sums_up(handler.total_nanos, handler.self_nanos, &[serialize.total_nanos]);
}

/// `recorder.Span` with a threshold keeps only the slow spans.
#[test]
fn threshold_keeps_only_slow_spans() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .event("recorder.Span", EventSettings { threshold: Duration::from_millis(15), ..Default::default() })
        .start()
        .unwrap();
    tracing::subscriber::with_default(subscriber(), || {
        for i in 0..5 {
            let _s = tracing::info_span!("fast", i).entered();
        }
        let _s = tracing::info_span!("slow").entered();
        spin_wall(Duration::from_millis(20));
    });
    let file = dir.path().join("threshold.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    let names: Vec<String> =
        read_events(&file, "recorder.Span").iter().map(|e| e.field("name").as_str().unwrap().to_owned()).collect();
    assert_eq!(names, ["slow"]);
}

/// Bad input: a span closed on another thread, a span entered re-entrantly, the layer with no
/// recorder (a no-op), a recorder stopped while spans are open.
#[test]
fn bad_input_is_handled() {
    let _serial = serial();
    // No recorder: nothing happens, nothing panics.
    tracing::subscriber::with_default(subscriber(), || {
        let s = tracing::info_span!("unrecorded", x = 1);
        let _e = s.enter();
        tracing::info!("nobody listens");
    });

    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    let dispatch = tracing::Dispatch::new(subscriber());
    let moved = tracing::dispatcher::with_default(&dispatch, || {
        // Closed on another thread.
        let moved = tracing::info_span!("moved");
        moved.in_scope(|| spin_wall(Duration::from_millis(1)));
        let d = dispatch.clone();
        std::thread::spawn(move || tracing::dispatcher::with_default(&d, move || drop(moved))).join().unwrap();
        // Re-entered while entered.
        let twice = tracing::info_span!("reentered");
        {
            let _a = twice.enter();
            let _b = twice.enter();
            recorder::scope!("inside");
        }
        drop(twice);
        // Open when the recording stops.
        let open = tracing::info_span!("open_at_stop");
        open.entered()
    });
    let file = dir.path().join("bad.jfr");
    rec.dump(&file).unwrap();
    let report = rec.scope_report();
    rec.stop().unwrap();
    tracing::dispatcher::with_default(&dispatch, || drop(moved));
    let spans = read_events(&file, "recorder.Span");
    let names: Vec<&str> = spans.iter().map(|e| e.field("name").as_str().unwrap()).collect();
    assert!(names.contains(&"moved") && names.contains(&"reentered"), "{names:?}");
    assert_eq!(spans.len(), 2);
    let moved_span = spans.iter().find(|e| e.field("name").as_str() == Some("moved")).unwrap();
    assert!(moved_span.field_i64("activeNanos") >= 1_000_000);
    // The re-entry is one scope, not two.
    assert_eq!(report.find(&["reentered"]).map(|n| n.calls), Some(1), "{report:#?}");
    assert_eq!(report.find(&["reentered", "inside"]).map(|n| n.calls), Some(1));
    assert!(report.find(&["reentered", "reentered"]).is_none());
    jdk_accepts(&[file]);
    // A later recording starts clean.
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    tracing::dispatcher::with_default(&dispatch, || {
        let _s = tracing::info_span!("after").entered();
    });
    let report = rec.scope_report();
    rec.stop().unwrap();
    assert_eq!(report.find(&["after"]).map(|n| n.calls), Some(1));
    assert!(report.find(&["open_at_stop"]).is_none());
}

/// The JDK's `EventStream` receives `recorder.Span` events while the recording runs.
#[test]
fn jdk_event_stream_receives_spans_live() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .flush_interval(Duration::from_millis(100))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let (mut child, rx) = live_jdk_stream(&repo, &["recorder.Span", "spanId"]);
    let dispatch = tracing::Dispatch::new(subscriber());
    let mut seen = 0;
    for round in 0..3 {
        tracing::dispatcher::with_default(&dispatch, || {
            let _s = tracing::info_span!("live", round).entered();
        });
        // Each span must arrive while the recording runs.
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen <= round {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("the JDK consumer did not receive span {round} while recording"));
            if line.starts_with("EVENT ") {
                seen += 1;
            } else if line.starts_with("ERROR") {
                panic!("consumer error: {line}");
            }
        }
    }
    rec.stop().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen, 3);
}

/// Deterministic mode: a span's times are logical (no duration, no busy time), its fields and
/// nesting are kept, so a recording of the same spans does not vary with the machine's speed.
#[test]
fn deterministic_spans_carry_no_real_time() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().deterministic(true).start().unwrap();
    tracing::subscriber::with_default(subscriber(), || {
        let outer = tracing::info_span!("outer", k = 1);
        let _o = outer.enter();
        let _i = tracing::info_span!("inner").entered();
        spin_wall(Duration::from_millis(5));
    });
    let file = dir.path().join("deterministic.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    let spans = read_events(&file, "recorder.Span");
    assert_eq!(spans.len(), 2);
    for span in &spans {
        assert_eq!(span.field_i64("activeNanos"), 0, "{span:?}");
    }
    let outer = spans.iter().find(|e| e.field("name").as_str() == Some("outer")).unwrap();
    let inner = spans.iter().find(|e| e.field("name").as_str() == Some("inner")).unwrap();
    assert_eq!(outer.field("fields").as_str(), Some("k=1"));
    assert_eq!(inner.field_i64("parentSpanId"), outer.field_i64("spanId"));
}

/// Fields recorded after the span's creation (`Span::record`) join its `fields`, `message`
/// included.
#[test]
fn fields_recorded_later_are_kept() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    tracing::subscriber::with_default(subscriber(), || {
        let span =
            tracing::info_span!("late", early = 1, rows = tracing::field::Empty, message = tracing::field::Empty);
        span.record("rows", 42);
        span.record("message", "done");
    });
    let file = dir.path().join("late.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    let spans = read_events(&file, "recorder.Span");
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].field("fields").as_str(), Some("early=1 rows=42 message=done"));
}

/// A thread whose first contact with the recording is a span's creation (its stack captured, no
/// commit yet) holds up nothing: the stop finds no commit in progress and reports no loss.
#[test]
fn a_span_created_first_on_a_thread_is_no_commit_in_progress() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    let dispatch = tracing::Dispatch::new(subscriber());
    let d = dispatch.clone();
    let open = std::thread::spawn(move || tracing::dispatcher::with_default(&d, || tracing::info_span!("first")))
        .join()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    tracing::dispatcher::with_default(&dispatch, || drop(open));
    let losses: Vec<String> = chunk_files(&repo)
        .iter()
        .flat_map(|c| read_events(c, "recorder.DataLoss"))
        .map(|e| format!("{}: {}", e.field("reason").as_str().unwrap_or("?"), e.field_i64("events")))
        .collect();
    assert!(losses.is_empty(), "{losses:?}");
}

#[inline(never)]
fn handle_order() -> tracing::Span {
    tracing::info_span!("order", id = 7)
}

#[inline(never)]
fn handle_root() -> tracing::Span {
    tracing::info_span!(parent: None, "root")
}

#[inline(never)]
fn handle_child(parent: &tracing::Span) -> tracing::Span {
    tracing::info_span!(parent: parent, "child")
}

#[inline(never)]
fn log_shipped(n: u32) {
    tracing::info!(n, "shipped");
}

#[inline(never)]
#[tracing::instrument]
fn instrumented(n: u32) -> u32 {
    std::hint::black_box(n) + 1
}

/// A span's stack starts at the application's `span!` / `#[instrument]` call: tracing's own frames
/// (`Layered::new_span`, `Span::new`, ...) and the layer's are left out, as the JDK reads the
/// stack, in debug and release builds alike (a release build inlines `Span::child_of` and
/// friends into the application's function). Spans with a contextual parent, no parent, an
/// explicit parent, and `#[instrument]`; and a tracing event's stack starts at its `event!`.
#[test]
fn span_stacks_start_at_the_application() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
    tracing::subscriber::with_default(subscriber(), || {
        for _ in 0..2 {
            let order = handle_order();
            drop(handle_child(&order));
            drop(order);
            drop(handle_root());
            std::hint::black_box(instrumented(1));
            log_shipped(3);
        }
    });
    let file = dir.path().join("stacks.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    let spans = jfr_json(&file, "recorder.Span");
    assert_eq!(spans.len(), 8, "{spans:#?}");
    for (span, function) in [
        ("order", "handle_order"),
        ("child", "handle_child"),
        ("root", "handle_root"),
        ("instrumented", "instrumented"),
    ] {
        let mine: Vec<&Json> = spans.iter().filter(|e| e["values"]["name"] == span).collect();
        assert_eq!(mine.len(), 2);
        for e in mine {
            let frames = e["values"]["stackTrace"]["frames"].as_array().unwrap();
            let names: Vec<&str> = frames.iter().map(|f| f["method"]["name"].as_str().unwrap()).collect();
            assert!(names[0].ends_with(function), "span {span}: the stack starts at {}: {names:#?}", names[0]);
            assert!(names[1].contains("span_stacks_start_at_the_application"), "{names:#?}");
        }
    }
    let logs = jfr_json(&file, "recorder.Log");
    assert_eq!(logs.len(), 2, "{logs:#?}");
    for e in &logs {
        let frames = e["values"]["stackTrace"]["frames"].as_array().unwrap();
        let names: Vec<&str> = frames.iter().map(|f| f["method"]["name"].as_str().unwrap()).collect();
        // `event!` calls `Event::dispatch` from a closure of its own in the application's function.
        let own = names.iter().take_while(|n| n.starts_with("tracing_spans::log_shipped")).count();
        assert!(own > 0, "the log's stack starts at {}: {names:#?}", names[0]);
        assert!(names[own].contains("span_stacks_start_at_the_application"), "{names:#?}");
    }
}

/// Threads create, enter and close spans at once, a third of them closed on another thread, with
/// more spans open at a time than the layer's table holds in place (the rest go to its overflow
/// map): every span is recorded once, under its own id, with its parent's id, and the entered time
/// of the spans that were entered.
#[test]
fn spans_of_many_threads_at_once_keep_their_ids_and_parents() {
    let _serial = serial();
    const THREADS: usize = 4;
    const PER_THREAD: usize = 3000;
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .event("recorder.Span", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .unwrap();
    let dispatch = tracing::Dispatch::new(subscriber());
    let (to_closer, closer_inbox) = std::sync::mpsc::channel::<tracing::Span>();
    // With the subscriber as its default: the registry closes a closed child's parent through
    // the thread's default dispatcher.
    let closer_dispatch = dispatch.clone();
    let closer = std::thread::spawn(move || {
        tracing::dispatcher::with_default(&closer_dispatch, || closer_inbox.into_iter().count())
    });
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let dispatch = dispatch.clone();
            let to_closer = to_closer.clone();
            s.spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    // All open at once: 4 × 3000 parents, beyond the 8192 places of the table.
                    let parents: Vec<tracing::Span> =
                        (0..PER_THREAD).map(|i| tracing::info_span!("parent", t, i)).collect();
                    for (i, parent) in parents.into_iter().enumerate() {
                        let child = parent.in_scope(|| tracing::info_span!("child", t, i));
                        child.in_scope(|| std::hint::black_box(i));
                        if i % 3 == 0 {
                            to_closer.send(child).unwrap();
                            to_closer.send(parent).unwrap();
                        }
                    }
                });
            });
        }
    });
    drop(to_closer);
    assert_eq!(closer.join().unwrap(), 2 * THREADS * PER_THREAD.div_ceil(3));
    let file = dir.path().join("threads.jfr");
    rec.dump(&file).unwrap();
    assert_eq!(rec.stats().events_lost, 0);
    rec.stop().unwrap();

    let spans = read_events(&file, "recorder.Span");
    assert_eq!(spans.len(), 2 * THREADS * PER_THREAD);
    let mut parent_ids = std::collections::HashMap::new();
    let mut ids = std::collections::HashSet::new();
    for span in &spans {
        assert!(ids.insert(span.field_i64("spanId")), "span id used twice: {span:?}");
        if span.field("name").as_str() == Some("parent") {
            assert_eq!(span.field_i64("parentSpanId"), 0, "{span:?}");
            parent_ids.insert(span.field("fields").as_str().unwrap().to_owned(), span.field_i64("spanId"));
        }
    }
    assert!(!ids.contains(&0));
    for span in spans.iter().filter(|s| s.field("name").as_str() == Some("child")) {
        let fields = span.field("fields").as_str().unwrap();
        assert_eq!(Some(&span.field_i64("parentSpanId")), parent_ids.get(fields), "{span:?}");
        assert!(span.field_i64("activeNanos") > 0, "{span:?}");
    }
}
