//! Pushing chunks to Pyroscope, against a small HTTP server written here (real sockets on
//! 127.0.0.1): the request shape, the body byte for byte, retries, 4xx/5xx, a slow and an
//! unreachable server, no double post after a restart, cutting chunks above the server's limits,
//! and retention keeping unposted chunks.

mod common;
mod http_server;

use bytes::Bytes;
use http_server::{closed_port_url, Received, Reply, Server};
use jfr_format::metadata::{event_class, ids, jdk_types, EventTypeSpec, Field, Metadata};
use jfr_format::write::{put_long, put_string, put_varint, Checkpoint, ChunkEncoder};
use recorder::push::{push_path, PushEvent, PushOptions, PushStats, PushTarget};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---- Recordings to push ----

recorder::event! {
    #[event(name = "test.Push", label = "Push test event")]
    pub struct PushEvent_ { pub text: String, pub n: i64 }
}

/// Burns CPU for about `iterations` steps so the sampler has something to sample.
fn burn(iterations: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..iterations {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    std::hint::black_box(x)
}

/// Records until at least `chunks` chunks are finished (events of ~1 KiB between bursts of CPU
/// work, so that every chunk has many CPU samples at 1 ms), then stops. Returns the recording
/// directory and the report.
fn record(
    base: &Path,
    configure: impl FnOnce(recorder::RecorderBuilder) -> recorder::RecorderBuilder,
    chunks: u64,
) -> (PathBuf, recorder::FinalReport) {
    use recorder::Event;
    let builder = recorder::Recorder::builder()
        .repository(base)
        .max_chunk_size(64 * 1024)
        .max_size(64 * 1024 * 1024)
        .flush_interval(Duration::from_millis(10))
        .sampling_period(Duration::from_millis(1));
    let rec = configure(builder).start().unwrap();
    rec.register_current_thread().unwrap();
    let dir = rec.repository_dir().to_owned();
    let text = "x".repeat(1000);
    let mut n = 0;
    while rec.stats().chunks_finished < chunks {
        PushEvent_ { text: text.clone(), n }.commit();
        n += 1;
        burn(300_000);
    }
    let report = rec.stop_with_report().unwrap();
    (dir, report)
}

/// A finished recording of a few chunks, made once and copied for each test (the marker goes
/// into the directory).
fn recording_copy() -> PathBuf {
    static MADE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let source = MADE.get_or_init(|| {
        let _serial = common::serial();
        let base = scratch_dir().join("push-source");
        let (dir, _) = record(&base, |b| b, 3);
        dir
    });
    let copy = scratch_dir().join(format!("push-{}", COPIES.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy).unwrap();
    for f in std::fs::read_dir(source).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "jfr") {
            std::fs::copy(&p, copy.join(p.file_name().unwrap())).unwrap();
        }
    }
    copy
}

static COPIES: AtomicUsize = AtomicUsize::new(0);

fn scratch_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("push");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Chunk files (in order) that hold CPU samples: the ones posted.
fn chunks_with_samples(dir: &Path) -> Vec<PathBuf> {
    common::chunk_files(dir).into_iter().filter(|p| !common::read_events(p, "jdk.ExecutionSample").is_empty()).collect()
}

fn fast(target: PushTarget) -> PushTarget {
    target.backoff(Duration::from_millis(5), Duration::from_millis(20)).request_timeout(Duration::from_secs(10))
}

fn quiet(_: &PushEvent<'_>) {}

fn push(target: &PushTarget, path: &Path) -> Result<PushStats, recorder::push::PushError> {
    push_path(target, path, PushOptions { follow: false, max_attempts: Some(5) }, quiet)
}

// ---- The request ----

#[test]
fn each_chunk_is_posted_once_in_order_with_the_documented_request() {
    let dir = recording_copy();
    let server = Server::start(|_| Reply::Status(200));
    let target =
        fast(PushTarget::pyroscope(server.url()).app_name("checkout").label("region", "eu-1").label("host", "h1"));
    let stats = push(&target, &dir).unwrap();
    let expected = chunks_with_samples(&dir);
    assert!(expected.len() >= 2, "the recording has several chunks with samples");
    let requests = server.requests();
    assert_eq!(requests.len(), expected.len());
    assert_eq!(stats.uploads, expected.len() as u64);
    assert_eq!(stats.chunks_posted, expected.len() as u64);
    for (request, file) in requests.iter().zip(&expected) {
        let bytes = std::fs::read(file).unwrap();
        let header = jfr_format::ChunkHeader::parse(&bytes, 0).unwrap();
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/ingest");
        let names: Vec<&str> = request.query.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["name", "from", "until", "format", "sampleRate", "spyName"]);
        assert_eq!(request.query("name"), Some("checkout{host=h1,region=eu-1}"));
        assert_eq!(request.query("from"), Some(header.start_nanos.to_string().as_str()));
        assert_eq!(request.query("until"), Some((header.start_nanos + header.duration_nanos).to_string().as_str()));
        assert_eq!(request.query("format"), Some("jfr"));
        // Sampled every 1 ms: 1000 samples per second, from the chunk's own settings.
        assert_eq!(request.query("sampleRate"), Some("1000"));
        assert_eq!(request.query("spyName"), Some("recorder"));
        assert!(request.header("content-type").unwrap().starts_with("multipart/form-data; boundary="));
        assert!(request.header("user-agent").unwrap().starts_with("recorder/"));
        assert_eq!(request.jfr(), bytes, "the jfr part is {} byte for byte", file.display());
    }
    // Chunks without samples are not posted, and recorded as such.
    let marker = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(".recorder-push-"))
        .expect("a marker file");
    let text = std::fs::read_to_string(marker).unwrap();
    assert_eq!(text.lines().filter(|l| l.ends_with(" posted")).count(), expected.len());
    let all = common::chunk_files(&dir).len() as u64;
    assert_eq!(stats.chunks_posted + stats.chunks_without_profile, all);
}

#[test]
fn tenant_and_basic_auth_headers() {
    let dir = recording_copy();
    let server = Server::start(|_| Reply::Status(200));
    let target = fast(PushTarget::pyroscope(server.url()).tenant("team-a").basic_auth("123", "tok"));
    push(&target, &dir).unwrap();
    for r in server.requests() {
        assert_eq!(r.header("x-scope-orgid"), Some("team-a"));
        assert_eq!(r.header("authorization"), Some("Basic MTIzOnRvaw=="));
    }
}

// ---- Failures ----

#[test]
fn server_errors_are_retried_and_the_upload_is_posted_once() {
    let dir = recording_copy();
    // The first two attempts fail with 503 and 500, then everything is accepted.
    let server = Server::start(|n| {
        Reply::Status(match n {
            0 => 503,
            1 => 500,
            _ => 200,
        })
    });
    let stats = push(&fast(PushTarget::pyroscope(server.url())), &dir).unwrap();
    let expected = chunks_with_samples(&dir);
    let requests = server.requests();
    assert_eq!(requests.len(), expected.len() + 2);
    assert_eq!(stats.retries, 2);
    assert_eq!(stats.uploads, expected.len() as u64);
    // The same request three times for the first chunk, then each other chunk once.
    assert_eq!(requests[0].body, requests[1].body);
    assert_eq!(requests[1].body, requests[2].body);
    let posted: Vec<Vec<u8>> = requests[2..].iter().map(Received::jfr).collect();
    let files: Vec<Vec<u8>> = expected.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert_eq!(posted, files);
}

#[test]
fn a_rejected_upload_is_reported_once_and_not_retried() {
    let dir = recording_copy();
    let server = Server::start(|n| Reply::Status(if n == 0 { 400 } else { 200 }));
    let rejected = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&rejected);
    let stats = push_path(
        &fast(PushTarget::pyroscope(server.url())),
        &dir,
        PushOptions { follow: false, max_attempts: Some(5) },
        move |e| {
            if let PushEvent::Rejected { chunk, error, .. } = e {
                log.lock().unwrap().push(format!("{chunk}: {error}"));
            }
        },
    )
    .unwrap();
    let expected = chunks_with_samples(&dir);
    assert_eq!(server.requests().len(), expected.len(), "no retry of the rejected upload");
    assert_eq!(stats.rejected, 1);
    assert_eq!(stats.retries, 0);
    assert_eq!(stats.uploads, expected.len() as u64 - 1);
    let rejected = rejected.lock().unwrap();
    assert_eq!(rejected.len(), 1);
    assert!(rejected[0].contains("HTTP 400: answer 400"), "{}", rejected[0]);
    // A second run posts nothing: the rejected chunk is done too.
    let stats = push(&fast(PushTarget::pyroscope(server.url())), &dir).unwrap();
    assert_eq!(stats.uploads + stats.rejected, 0);
    assert_eq!(server.requests().len(), expected.len());
}

#[test]
fn unauthorized_stops_the_uploads_and_the_next_run_posts_everything() {
    let dir = recording_copy();
    let server = Server::start(|_| Reply::Status(401));
    let target = fast(PushTarget::pyroscope(server.url()));
    let err = push(&target, &dir).unwrap_err();
    assert!(err.to_string().contains("HTTP 401"), "{err}");
    assert_eq!(server.requests().len(), 1, "the uploader stops at the first 401");
    let good = Server::start(|_| Reply::Status(200));
    let stats = push(&fast(PushTarget::pyroscope(good.url())), &dir).unwrap();
    assert_eq!(stats.uploads, chunks_with_samples(&dir).len() as u64);
}

#[test]
fn an_unreachable_server_is_retried_then_given_up_with_a_clear_error() {
    let dir = recording_copy();
    let target = fast(PushTarget::pyroscope(closed_port_url()));
    let err = push_path(&target, &dir, PushOptions { follow: false, max_attempts: Some(3) }, quiet).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("after 3 attempts") && text.contains("127.0.0.1"), "{text}");
    let recorder::push::PushError::Stopped { stats, .. } = err else { panic!("{text}") };
    assert_eq!(stats.retries, 3);
    assert_eq!(stats.uploads, 0);
}

#[test]
fn a_slow_server_is_timed_out_and_retried() {
    let dir = recording_copy();
    // The first request hangs; the retry is answered.
    let server = Server::start(|n| if n == 0 { Reply::Hang } else { Reply::Status(200) });
    let target = fast(PushTarget::pyroscope(server.url())).request_timeout(Duration::from_millis(1000));
    let stats = push(&target, &dir).unwrap();
    let expected = chunks_with_samples(&dir);
    // The hung request is timed out and retried; on a busy machine an answered request may
    // outlast the timeout too and be retried as well, and an attempt that timed out before the
    // server had read it whole never reaches it: each retry is at most one more request.
    assert!(stats.retries >= 1, "{stats:?}");
    assert_eq!(stats.uploads, expected.len() as u64);
    let requests = server.requests();
    let received = requests.len() as u64;
    assert!(
        (expected.len() as u64 + 1..=expected.len() as u64 + stats.retries).contains(&received),
        "{received} requests for {} chunks: {stats:?}",
        expected.len()
    );
    // Every chunk reached the server, in order (a retried one possibly twice in a row).
    let mut bodies: Vec<Vec<u8>> = requests.iter().map(Received::jfr).collect();
    bodies.dedup();
    let want: Vec<Vec<u8>> = expected.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert_eq!(bodies, want);
}

#[test]
fn an_https_url_speaks_tls() {
    let dir = recording_copy();
    // A plain-HTTP server behind an https:// URL: the TLS handshake fails, which is retried as a
    // connection failure and reported, never sent in clear.
    let server = Server::start(|_| Reply::Status(200));
    let target = fast(PushTarget::pyroscope(format!("https://{}", server.addr)));
    let err = push_path(&target, &dir, PushOptions { follow: false, max_attempts: Some(1) }, quiet).unwrap_err();
    assert!(server.requests().is_empty(), "no request in clear text");
    assert!(err.to_string().contains("after 1 attempts"), "{err}");
}

// ---- Restarts ----

fn marker_text(dir: &Path) -> String {
    let marker = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(".recorder-push-"))
        .expect("a marker file");
    std::fs::read_to_string(marker).unwrap()
}

#[test]
fn a_restart_never_posts_a_chunk_twice() {
    let dir = recording_copy();
    let expected: Vec<Vec<u8>> = chunks_with_samples(&dir).iter().map(|p| std::fs::read(p).unwrap()).collect();
    let server = Server::start(|n| Reply::Status(if n == 0 { 200 } else { 401 }));
    let target = fast(PushTarget::pyroscope(server.url()));
    // Run 1: the first upload is taken, then the server refuses and the uploader stops.
    assert!(push(&target, &dir).is_err());
    assert_eq!(server.requests().len(), 2);
    // Run 2 (a restart): only what run 1 did not post.
    server.set(|_| Reply::Status(200));
    push(&target, &dir).unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), expected.len() + 1);
    // Accepted: request 0, then run 2's. Each chunk exactly once, in order.
    let mut accepted = vec![requests[0].jfr()];
    accepted.extend(requests[2..].iter().map(Received::jfr));
    assert_eq!(accepted, expected);
    // Run 3: nothing left.
    let stats = push(&target, &dir).unwrap();
    assert_eq!(stats.uploads, 0);
    assert_eq!(server.requests().len(), expected.len() + 1);
    // Another server is another marker: it gets everything.
    let other = Server::start(|_| Reply::Status(200));
    push(&fast(PushTarget::pyroscope(other.url())), &dir).unwrap();
    assert_eq!(other.requests().len(), expected.len());
    assert!(marker_text(&dir).lines().count() >= expected.len());
}

// ---- A recording process ----

#[test]
fn a_recording_posts_its_chunks_from_its_own_thread() {
    let _serial = common::serial();
    let server = Server::start(|_| Reply::Status(200));
    let target = fast(PushTarget::pyroscope(server.url()).app_name("embedded")).stop_grace(Duration::from_secs(5));
    let base = scratch_dir().join("push-embedded");
    let (dir, report) = record(&base, |b| b.push(target.clone()), 3);
    let stats = report.push.expect("push statistics");
    let expected: Vec<Vec<u8>> = chunks_with_samples(&dir).iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert_eq!(stats.uploads, server.requests().len() as u64);
    assert_eq!(stats.chunks_lost, 0);
    // What the recording did not post within its grace period, `recorder push` posts now; together
    // every chunk exactly once, in order.
    push(&target, &dir).unwrap();
    let posted: Vec<Vec<u8>> = server.requests().iter().map(Received::jfr).collect();
    assert_eq!(posted, expected);
    for r in server.requests() {
        assert_eq!(r.query("name"), Some("embedded{}"));
        assert_eq!(r.query("sampleRate"), Some("1000"));
    }
    // The recording says what its uploader did.
    let events: Vec<_> =
        common::chunk_files(&dir).iter().flat_map(|f| common::read_events(f, "recorder.PushStatistics")).collect();
    assert!(!events.is_empty(), "recorder.PushStatistics events");
    let last = events.last().unwrap();
    assert!(last.field_i64("uploads") <= stats.uploads as i64);
    assert_eq!(last.field("target").as_str(), Some(server.url().as_str()));
    common::jdk_accepts(&common::chunk_files(&dir));
}

#[test]
fn a_slow_server_never_holds_up_the_application() {
    let _serial = common::serial();
    // Every request hangs for the whole test: no upload ever completes.
    let server = Server::start(|_| Reply::Hang);
    let target =
        fast(PushTarget::pyroscope(server.url())).request_timeout(Duration::from_secs(600)).stop_grace(Duration::ZERO);
    let base = scratch_dir().join("push-slow");
    // The application commits, rotates and stops while the uploader waits on the server.
    let (dir, report) = record(&base, |b| b.push(target), 4);
    let stats = report.push.unwrap();
    assert!(report.stats.chunks_finished >= 4);
    assert_eq!(report.stats.events_lost, 0);
    assert_eq!(stats.uploads, 0);
    assert_eq!(server.requests().len(), 1, "one upload, stuck");
    // Nothing was posted, so nothing was deleted.
    assert_eq!(common::chunk_files(&dir).len() as u64, report.stats.chunks_finished);
}

#[test]
fn retention_keeps_unposted_chunks_past_their_age() {
    let _serial = common::serial();
    let target = fast(PushTarget::pyroscope(closed_port_url())).stop_grace(Duration::ZERO);
    let base = scratch_dir().join("push-age");
    // Every finished chunk is older than max_age at once.
    let (dir, report) = record(&base, |b| b.max_age(Duration::from_nanos(1)).push(target), 3);
    let stats = report.push.unwrap();
    assert!(stats.retries >= 1);
    assert_eq!(stats.chunks_lost, 0);
    assert_eq!(common::chunk_files(&dir).len() as u64, report.stats.chunks_finished);
    // The same recording without push keeps only what the age allows.
    let (dir, report) = record(&base, |b| b.max_age(Duration::from_nanos(1)), 3);
    assert!((common::chunk_files(&dir).len() as u64) < report.stats.chunks_finished);
}

#[test]
fn the_disk_budget_deletes_unposted_chunks_and_counts_them_lost() {
    let _serial = common::serial();
    let target = fast(PushTarget::pyroscope(closed_port_url())).stop_grace(Duration::ZERO);
    let base = scratch_dir().join("push-budget");
    let (dir, report) = record(&base, |b| b.max_size(3 * 64 * 1024).push(target), 6);
    let stats = report.push.unwrap();
    let on_disk = common::chunk_files(&dir).len() as u64;
    assert!(stats.chunks_lost >= 1, "{stats:?}");
    // Every finished chunk is on disk or counted as lost (every chunk has samples, none was posted).
    assert_eq!(report.stats.chunks_finished, on_disk + stats.chunks_lost, "{stats:?}");
    assert!(stats.bytes_lost >= 64 * 1024 * (stats.chunks_lost - 1));
    let events: Vec<_> =
        common::chunk_files(&dir).iter().flat_map(|f| common::read_events(f, "recorder.PushStatistics")).collect();
    let reported = events.iter().map(|e| e.field_i64("chunksLost")).max().unwrap();
    assert!(reported >= 1 && reported as u64 <= stats.chunks_lost);
}

#[test]
fn stopping_with_every_chunk_unposted_keeps_the_final_chunk() {
    let _serial = common::serial();
    let target = fast(PushTarget::pyroscope(closed_port_url())).stop_grace(Duration::ZERO);
    let base = scratch_dir().join("push-final");
    // The budget is one chunk: room for a live chunk (reserved at every rotation) leaves none
    // for finished ones, and nothing is ever posted. The last chunk has no live chunk after it.
    let (dir, report) = record(&base, |b| b.max_size(64 * 1024).push(target), 3);
    let stats = report.push.unwrap();
    let files = common::chunk_files(&dir);
    let last = files.last().expect("the final chunk is on disk");
    let bytes = std::fs::read(last).unwrap();
    let header = jfr_format::ChunkHeader::parse(&bytes, 0).unwrap();
    assert!(header.is_final(), "{} is the final chunk", last.display());
    // Every other finished chunk was deleted unposted, and counted.
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(stats.chunks_lost, report.stats.chunks_finished - 1, "{stats:?}");
    common::jdk_accepts(&files);
}

// ---- Limits: chunks cut into several valid JFR files ----

const EXEC: u64 = 100;
const SETTING: u64 = 101;
const WALL: u64 = 102;
const NOISE: u64 = 103;
const START_NANOS: i64 = 1_700_000_000_000_000_000;

struct Synth {
    stacks: usize,
    frames: usize,
    samples: usize,
    wall_samples: usize,
    cpu_period: Option<&'static str>,
    wall_period: Option<&'static str>,
    noise: usize,
    span_ids: bool,
}

/// A chunk with the JDK's stack-trace types, `samples` CPU samples over `stacks` distinct stacks of
/// `frames` frames, wall-clock samples, settings and events Pyroscope does not read.
fn synthetic_chunk(s: &Synth) -> Vec<u8> {
    let mut classes = jdk_types();
    let mut exec_fields = vec![
        Field::new("sampledThread", ids::THREAD).pooled(),
        Field::new("stackTrace", ids::STACK_TRACE).pooled(),
        Field::new("state", ids::THREAD_STATE).pooled(),
    ];
    if s.span_ids {
        exec_fields.push(Field::new("spanId", ids::LONG));
    }
    let spec = |id, name, fields| EventTypeSpec {
        id,
        name,
        label: name,
        description: None,
        category: &[],
        duration: false,
        thread: false,
        stack_trace: false,
        fields,
    };
    classes.push(event_class(spec(EXEC, "jdk.ExecutionSample", exec_fields)));
    classes.push(event_class(EventTypeSpec {
        duration: true,
        thread: true,
        stack_trace: true,
        ..spec(
            SETTING,
            "jdk.ActiveSetting",
            vec![Field::new("id", ids::LONG), Field::new("name", ids::STRING), Field::new("value", ids::STRING)],
        )
    }));
    classes.push(event_class(spec(
        WALL,
        "profiler.WallClockSample",
        vec![
            Field::new("sampledThread", ids::THREAD).pooled(),
            Field::new("stackTrace", ids::STACK_TRACE).pooled(),
            Field::new("state", ids::THREAD_STATE).pooled(),
            Field::new("samples", ids::INT),
        ],
    )));
    classes.push(event_class(spec(NOISE, "app.Noise", vec![Field::new("text", ids::STRING)])));
    let metadata = Metadata { id: 1, classes, ..Metadata::default() };
    let mut w = ChunkEncoder::new(START_NANOS, 1000);
    w.write_metadata(&metadata, 1000);
    let mut t = 1000i64;
    let mut tick = || {
        t += 10_000;
        t
    };
    for (type_id, period) in [(EXEC, s.cpu_period), (WALL, s.wall_period)] {
        if let Some(p) = period {
            let at = tick();
            w.write_event(SETTING, |o| {
                put_long(o, at);
                put_long(o, 0);
                put_varint(o, 1);
                put_varint(o, 0);
                put_long(o, type_id as i64);
                put_string(o, Some("period"));
                put_string(o, Some(p));
            });
        }
    }
    for k in 0..s.samples.max(s.wall_samples).max(s.noise) {
        if k < s.samples {
            let at = tick();
            w.write_event(EXEC, |o| {
                put_long(o, at);
                put_varint(o, 1);
                put_varint(o, (k % s.stacks) as u64 + 1);
                put_varint(o, 5);
                if s.span_ids {
                    put_long(o, (k % 7) as i64 + 1);
                }
            });
        }
        if k < s.wall_samples {
            let at = tick();
            w.write_event(WALL, |o| {
                put_long(o, at);
                put_varint(o, 1);
                put_varint(o, (k % s.stacks) as u64 + 1);
                put_varint(o, 225);
                put_varint(o, 3);
            });
        }
        if k < s.noise {
            let at = tick();
            w.write_event(NOISE, |o| {
                put_long(o, at);
                put_string(o, Some(&"noise ".repeat(50)));
            });
        }
    }
    let methods = 1000usize;
    let mut cp = Checkpoint::new();
    for i in 0..s.stacks {
        cp.add(ids::STACK_TRACE, i as u64 + 1, |o| {
            jfr_format::write::put_bool(o, false);
            put_varint(o, s.frames as u64);
            for j in 0..s.frames {
                let m = match j {
                    0 => i % methods,
                    1 => (i / methods) % methods,
                    _ => (i * 31 + j * 17) % methods,
                };
                put_varint(o, 10_000 + m as u64);
                jfr_format::write::put_int(o, j as i32);
                jfr_format::write::put_int(o, 0);
                put_varint(o, 3);
            }
        });
    }
    for m in 0..methods {
        cp.add(ids::METHOD, 10_000 + m as u64, |o| {
            put_varint(o, 20_000 + (m % 10) as u64);
            put_varint(o, 30_000 + m as u64);
            put_varint(o, 29_999);
            jfr_format::write::put_int(o, 0x100);
            jfr_format::write::put_bool(o, false);
        });
    }
    for c in 0..10u64 {
        cp.add(ids::CLASS, 20_000 + c, |o| {
            put_varint(o, 0);
            put_varint(o, 40_000 + c);
            put_varint(o, 0);
            jfr_format::write::put_int(o, 0);
            jfr_format::write::put_bool(o, false);
        });
        cp.add(ids::SYMBOL, 40_000 + c, |o| put_string(o, Some(&format!("synth::mod{c}"))));
    }
    cp.add(ids::SYMBOL, 29_999, |o| put_string(o, Some("()L;")));
    for m in 0..methods {
        cp.add(ids::SYMBOL, 30_000 + m as u64, |o| put_string(o, Some(&format!("function_{m}"))));
    }
    cp.add(ids::THREAD, 1, |o| {
        put_string(o, Some("main"));
        put_long(o, 1);
        put_string(o, Some("main"));
        put_long(o, 1);
        put_varint(o, 0);
    });
    cp.add(ids::FRAME_TYPE, 3, |o| put_string(o, Some("Native")));
    for (k, name) in [(5u64, "STATE_RUNNABLE"), (225, "STATE_SLEEPING")] {
        cp.add(ids::THREAD_STATE, k, |o| put_string(o, Some(name)));
    }
    let end = tick();
    w.write_checkpoint(&cp, end, true);
    w.into_bytes(end - 1000, true)
}

/// Writes `chunk` as the only chunk file of a fresh recording directory.
fn chunk_dir(chunk: &[u8]) -> PathBuf {
    let dir = scratch_dir().join(format!("push-synth-{}", COPIES.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("2023_11_14_22_13_20.jfr"), chunk).unwrap();
    dir
}

/// A fresh directory for cut files handed to the JDK's `jfr` (which wants a `.jfr` name).
fn cuts_dir() -> PathBuf {
    let dir = scratch_dir().join(format!("push-cuts-{}", COPIES.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A record's bytes and its resolved stack.
type Record = (Vec<u8>, Vec<String>);

/// Per event type: the records (bytes) with their resolved stacks, in order.
fn records_with_stacks(data: &[u8]) -> BTreeMap<String, Vec<Record>> {
    let chunk = jfr_format::Chunk::parse(Bytes::copy_from_slice(data), 0).unwrap();
    assert_eq!(chunk.size() as usize, data.len(), "one chunk");
    let mut out: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for e in chunk.events() {
        let e = e.unwrap();
        let name = chunk.types().class(e.type_id).unwrap().name.clone();
        let stack = chunk
            .event_stack_trace(&e)
            .unwrap()
            .map(|s| s.frames.iter().map(|f| f.qualified_name()).collect())
            .unwrap_or_default();
        let start = e.offset as usize;
        out.entry(name).or_default().push((data[start..start + e.size as usize].to_vec(), stack));
    }
    out
}

/// Distinct (stack key, spanId) of the CPU samples of one JFR file.
fn distinct_cpu_samples(data: &[u8]) -> usize {
    let chunk = jfr_format::Chunk::parse(Bytes::copy_from_slice(data), 0).unwrap();
    let mut keys = HashSet::new();
    for e in chunk.events() {
        let e = e.unwrap();
        if e.type_id == EXEC {
            keys.insert((format!("{:?}", e.values[2]), e.values.get(4).and_then(|v| v.as_i64())));
        }
    }
    keys.len()
}

/// The cuts hold every profile event of `original` exactly once, byte for byte and with the same
/// stack, within `max_bytes` and `max_samples`; settings events are in each; other events in none.
fn check_cuts(original: &[u8], cuts: &[Vec<u8>], max_bytes: usize, max_samples: usize) {
    let want = records_with_stacks(original);
    let mut got: HashMap<String, Vec<Record>> = HashMap::new();
    for cut in cuts {
        assert!(cut.len() <= max_bytes, "a cut of {} bytes is above {max_bytes}", cut.len());
        assert!(distinct_cpu_samples(cut) <= max_samples);
        let records = records_with_stacks(cut);
        assert_eq!(records.get("jdk.ActiveSetting"), want.get("jdk.ActiveSetting"), "settings in every cut");
        assert!(!records.contains_key("app.Noise"), "events Pyroscope does not read stay out of cuts");
        for (name, list) in records {
            got.entry(name).or_default().extend(list);
        }
    }
    for name in ["jdk.ExecutionSample", "profiler.WallClockSample"] {
        let mut w = want.get(name).cloned().unwrap_or_default();
        let mut g = got.remove(name).unwrap_or_default();
        w.sort();
        g.sort();
        assert_eq!(g.len(), w.len(), "{name}: every event once");
        assert!(g == w, "{name}: the same records with the same stacks");
    }
}

#[test]
fn a_chunk_with_more_distinct_stacks_than_the_server_takes_is_cut() {
    let original = synthetic_chunk(&Synth {
        stacks: 20_000,
        frames: 3,
        samples: 20_000,
        wall_samples: 0,
        cpu_period: Some("10 ms"),
        wall_period: None,
        noise: 100,
        span_ids: true,
    });
    assert!(original.len() < 4 * 1024 * 1024 && distinct_cpu_samples(&original) > 16_000);
    let dir = chunk_dir(&original);
    let server = Server::start(|_| Reply::Status(200));
    // The server's default limits.
    let stats = push(&fast(PushTarget::pyroscope(server.url())), &dir).unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(stats.uploads, 2);
    assert_eq!(stats.chunks_posted, 1);
    let cuts: Vec<Vec<u8>> = requests.iter().map(Received::jfr).collect();
    check_cuts(&original, &cuts, 4 * 1024 * 1024, 16_000);
    for r in &requests {
        assert_eq!(r.query("sampleRate"), Some("100"));
        let (from, until): (i64, i64) =
            (r.query("from").unwrap().parse().unwrap(), r.query("until").unwrap().parse().unwrap());
        assert!(START_NANOS <= from && from < until);
    }
    let marker = marker_text(&dir);
    assert!(marker.contains("2023_11_14_22_13_20#1/2 posted") && marker.contains("2023_11_14_22_13_20#2/2 posted"));
    // The JDK reads a cut.
    let file = cuts_dir().join("cut.jfr");
    std::fs::write(&file, &cuts[1]).unwrap();
    common::jdk_accepts(&[file]);
}

#[test]
fn a_chunk_above_the_size_limit_is_cut() {
    let original = synthetic_chunk(&Synth {
        stacks: 6_000,
        frames: 160,
        samples: 6_000,
        wall_samples: 0,
        cpu_period: Some("1 ms"),
        wall_period: None,
        noise: 0,
        span_ids: false,
    });
    assert!(original.len() > 4 * 1024 * 1024 && distinct_cpu_samples(&original) <= 16_000);
    let dir = chunk_dir(&original);
    let server = Server::start(|_| Reply::Status(200));
    push(&fast(PushTarget::pyroscope(server.url())), &dir).unwrap();
    let requests = server.requests();
    assert!(requests.len() >= 2);
    let cuts: Vec<Vec<u8>> = requests.iter().map(Received::jfr).collect();
    check_cuts(&original, &cuts, 4 * 1024 * 1024, 16_000);
    assert!(requests.iter().all(|r| r.query("sampleRate") == Some("1000")));
}

#[test]
fn small_limits_cut_a_real_recording_into_valid_files() {
    let dir = recording_copy();
    let server = Server::start(|_| Reply::Status(200));
    let target = fast(PushTarget::pyroscope(server.url())).max_upload_bytes(64 * 1024).max_samples_per_upload(10);
    push(&target, &dir).unwrap();
    let cuts: Vec<Vec<u8>> = server.requests().iter().map(Received::jfr).collect();
    let mut all_samples = 0;
    for f in chunks_with_samples(&dir) {
        all_samples += common::read_events(&f, "jdk.ExecutionSample").len();
    }
    let mut posted_samples = 0;
    for cut in &cuts {
        assert!(cut.len() <= 64 * 1024);
        let records = records_with_stacks(cut);
        let samples = &records["jdk.ExecutionSample"];
        let distinct: HashSet<&Vec<String>> = samples.iter().map(|(_, s)| s).collect();
        assert!(distinct.len() <= 10);
        posted_samples += samples.len();
    }
    assert!(cuts.len() > chunks_with_samples(&dir).len());
    assert_eq!(posted_samples, all_samples);
    let files: Vec<PathBuf> = cuts
        .iter()
        .take(3)
        .enumerate()
        .map(|(i, c)| {
            let f = cuts_dir().join(format!("cut{i}.jfr"));
            std::fs::write(&f, c).unwrap();
            f
        })
        .collect();
    common::jdk_accepts(&files);
}

#[test]
fn wall_clock_samples_at_another_rate_go_in_their_own_upload() {
    let original = synthetic_chunk(&Synth {
        stacks: 50,
        frames: 4,
        samples: 100,
        wall_samples: 40,
        cpu_period: Some("10 ms"),
        wall_period: Some("50 ms"),
        noise: 10,
        span_ids: false,
    });
    let dir = chunk_dir(&original);
    let server = Server::start(|_| Reply::Status(200));
    push(&fast(PushTarget::pyroscope(server.url())), &dir).unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let cuts: Vec<Vec<u8>> = requests.iter().map(Received::jfr).collect();
    check_cuts(&original, &cuts, 4 * 1024 * 1024, 16_000);
    let cpu = records_with_stacks(&cuts[0]);
    let wall = records_with_stacks(&cuts[1]);
    assert_eq!(requests[0].query("sampleRate"), Some("100"));
    assert_eq!(cpu["jdk.ExecutionSample"].len(), 100);
    assert!(!cpu.contains_key("profiler.WallClockSample"));
    assert_eq!(requests[1].query("sampleRate"), Some("20"));
    assert_eq!(wall["profiler.WallClockSample"].len(), 40);
    assert!(!wall.contains_key("jdk.ExecutionSample"));
}

#[test]
fn without_a_period_the_rate_is_left_to_the_server() {
    let original = synthetic_chunk(&Synth {
        stacks: 5,
        frames: 2,
        samples: 10,
        wall_samples: 0,
        cpu_period: None,
        wall_period: None,
        noise: 0,
        span_ids: false,
    });
    let dir = chunk_dir(&original);
    let server = Server::start(|_| Reply::Status(200));
    push(&fast(PushTarget::pyroscope(server.url())), &dir).unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].query("sampleRate"), None);
    assert_eq!(requests[0].jfr(), original, "it fits: posted as it is");
}

#[test]
fn samples_only_leaves_the_other_events_out() {
    let original = synthetic_chunk(&Synth {
        stacks: 20,
        frames: 3,
        samples: 200,
        wall_samples: 0,
        cpu_period: Some("10 ms"),
        wall_period: None,
        noise: 500,
        span_ids: false,
    });
    let dir = chunk_dir(&original);
    let server = Server::start(|_| Reply::Status(200));
    push(&fast(PushTarget::pyroscope(server.url())).samples_only(true), &dir).unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let cut = requests[0].jfr();
    assert!(cut.len() < original.len() / 2, "{} of {}", cut.len(), original.len());
    check_cuts(&original, &[cut], 4 * 1024 * 1024, 16_000);
}

#[test]
fn compressed_chunks_are_posted_as_the_chunks_they_hold() {
    let _serial = common::serial();
    let server = Server::start(|_| Reply::Status(200));
    let target = fast(PushTarget::pyroscope(server.url())).stop_grace(Duration::from_secs(5));
    let base = scratch_dir().join("push-zst");
    let (dir, _) = record(&base, |b| b.compress_finished_chunks(true).push(target.clone()), 3);
    push(&target, &dir).unwrap();
    let mut expected: Vec<(i64, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(".jfr.zst") || p.extension().is_some_and(|e| e == "jfr"))
        .map(|p| {
            let raw = std::fs::read(&p).unwrap();
            let bytes =
                if raw.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) { zstd::decode_all(&raw[..]).unwrap() } else { raw };
            (jfr_format::ChunkHeader::parse(&bytes, 0).unwrap().start_nanos, bytes)
        })
        .filter(|(_, bytes)| {
            let chunk = jfr_format::Chunk::parse(Bytes::copy_from_slice(bytes), 0).unwrap();
            let id = chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id);
            let found = chunk.events().any(|e| Some(e.unwrap().type_id) == id);
            found
        })
        .collect();
    expected.sort();
    assert!(expected.len() >= 2);
    let posted: Vec<Vec<u8>> = server.requests().iter().map(Received::jfr).collect();
    assert_eq!(posted, expected.into_iter().map(|(_, b)| b).collect::<Vec<_>>());
}
