//! `recorder push` against a local HTTP server (real sockets on 127.0.0.1): a recording posted
//! once, a live recording followed until it ends, and the errors a user can make.

mod common;
#[path = "../../tests/http_server/mod.rs"]
mod http_server;

use common::*;
use http_server::{closed_port_url, Received, Reply, Server};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

recorder::event! {
    #[event(name = "test.CliPush", label = "CLI push test event")]
    pub struct CliPushEvent { pub text: String }
}

fn burn(iterations: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..iterations {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
    }
    std::hint::black_box(x)
}

/// Records `chunks` finished chunks with CPU samples every 1 ms; `during` runs once the recording
/// directory exists (to follow it live).
fn record(base: &Path, chunks: u64, during: impl FnOnce(&Path)) -> PathBuf {
    use recorder::Event;
    // One recording per process at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rec = recorder::Recorder::builder()
        .repository(base)
        .max_chunk_size(64 * 1024)
        .flush_interval(Duration::from_millis(10))
        .sampling_period(Duration::from_millis(1))
        .start()
        .unwrap();
    rec.register_current_thread().unwrap();
    let dir = rec.repository_dir().to_owned();
    during(&dir);
    let text = "y".repeat(1000);
    while rec.stats().chunks_finished < chunks {
        CliPushEvent { text: text.clone() }.commit();
        burn(300_000);
    }
    rec.stop().unwrap();
    dir
}

/// The chunk files with CPU samples, in recording order, as bytes.
fn posted_chunks(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<(i64, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jfr"))
        .map(|p| std::fs::read(p).unwrap())
        .filter(|bytes| {
            let chunk = jfr_format::Chunk::parse(bytes::Bytes::copy_from_slice(bytes), 0).unwrap();
            let id = chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id);
            let found = chunk.events().any(|e| Some(e.unwrap().type_id) == id);
            found
        })
        .map(|bytes| (jfr_format::ChunkHeader::parse(&bytes, 0).unwrap().start_nanos, bytes))
        .collect();
    files.sort();
    files.into_iter().map(|(_, b)| b).collect()
}

#[test]
fn push_posts_each_chunk_once_and_a_second_run_nothing() {
    let base = scratch_dir().join("cli-push-once");
    let _ = std::fs::remove_dir_all(&base);
    let dir = record(&base, 3, |_| {});
    let server = Server::start(|_| Reply::Status(200));
    let url = server.url();
    let args = ["push", "--pyroscope", &url, "--app", "cli", "--label", "region=eu-1", dir.to_str().unwrap()];
    let stdout = recorder_ok(&args);
    let expected = posted_chunks(&dir);
    assert!(expected.len() >= 2);
    assert_eq!(stdout.lines().filter(|l| l.starts_with("posted ")).count(), expected.len(), "{stdout}");
    assert!(stdout.contains("samples at 1000 Hz"), "{stdout}");
    let requests = server.requests();
    assert_eq!(requests.iter().map(Received::jfr).collect::<Vec<_>>(), expected);
    for r in &requests {
        assert_eq!(r.query("name"), Some("cli{region=eu-1}"));
        assert_eq!(r.query("sampleRate"), Some("1000"));
        assert_eq!(r.query("spyName"), Some("recorder"));
    }
    // Again: everything is already there.
    let stdout = recorder_ok(&args);
    assert!(stdout.contains("0 chunks posted in 0 uploads"), "{stdout}");
    assert_eq!(server.requests().len(), expected.len());
}

#[test]
fn push_follow_posts_chunks_as_they_finish_and_ends_with_the_recording() {
    let base = scratch_dir().join("cli-push-follow");
    let _ = std::fs::remove_dir_all(&base);
    let server = Server::start(|_| Reply::Status(200));
    let url = server.url();
    let mut child = None;
    let dir = record(&base, 4, |dir| {
        child = Some(
            Command::new(env!("CARGO_BIN_EXE_recorder"))
                .args(["push", "--pyroscope", &url, "--app", "live", "--follow", dir.to_str().unwrap()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    });
    let mut child = child.unwrap();
    // The command ends by itself once the recording's final chunk is posted (the loop only keeps
    // a hung command from hanging the test run).
    let mut waited = 0;
    while child.try_wait().unwrap().is_none() {
        assert!(waited < 600, "`recorder push --follow` did not end after the recording did");
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let expected = posted_chunks(&dir);
    assert!(expected.len() >= 3, "{stdout}");
    assert_eq!(server.requests().iter().map(Received::jfr).collect::<Vec<_>>(), expected, "{stdout}");
}

#[test]
fn push_reports_what_goes_wrong() {
    let base = scratch_dir().join("cli-push-errors");
    let _ = std::fs::remove_dir_all(&base);
    let dir = record(&base, 1, |_| {});
    let d = dir.to_str().unwrap();
    let fails = |args: &[&str], needle: &str| {
        let out = recorder(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in:\n{stderr}");
    };
    fails(&["push", "--pyroscope", "http://127.0.0.1:1", "--app", "a", "--label", "nope", d], "is not a label");
    fails(&["push", "--pyroscope", "ftp://x", "--app", "a", d], "give http://HOST[:PORT]");
    fails(&["push", "--pyroscope", "http://127.0.0.1:1", "--app", "my app", d], "is not allowed");
    fails(&["push", "--pyroscope", "http://127.0.0.1:1", "--app", "a", "/nonexistent/dir"], "/nonexistent/dir");
    let closed = closed_port_url();
    fails(&["push", "--pyroscope", &closed, "--app", "a", "--max-attempts", "2", d], "after 2 attempts");
    let server = Server::start(|_| Reply::Status(403));
    fails(&["push", "--pyroscope", &server.url(), "--app", "a", d], "HTTP 403");
    assert_eq!(server.requests().len(), 1);
    let rejecting = Server::start(|_| Reply::Status(400));
    let out = recorder(&["push", "--pyroscope", &rejecting.url(), "--app", "a", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rejected"));
    let out = Command::new(env!("CARGO_BIN_EXE_recorder"))
        .args(["push", "--pyroscope", "http://127.0.0.1:1", "--app", "a", "--basic-auth-user", "u", d])
        .env_remove("RECORDER_PUSH_PASSWORD")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("RECORDER_PUSH_PASSWORD"));
}
