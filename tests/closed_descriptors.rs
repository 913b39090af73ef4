//! An embedding program that closes every descriptor above 2 while a recording runs (as a daemon
//! does after it started, or a library that "cleans up" before it forks): the recorder never
//! writes to, reads from or closes the numbers the program reuses, keeps recording (its chunk
//! file reopened by path, its threads' sampling events opened again), and says what the program
//! took. One test in this binary: it closes the test harness's descriptors too.

use recorder::{Event, Recorder};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::*;

recorder::event! {
    /// A numbered event of the program's.
    #[event(name = "test.Closed", label = "Closed descriptors test", category = ["Test"])]
    pub struct Closed {
        pub seq: u64,
    }
}

const FILES: usize = 8;
const ROUNDS: usize = 40;
/// `seq` of the event committed right after the descriptors were closed.
const CLOSE_MARK: u64 = 1_000_000;

fn line(round: usize, file: usize) -> String {
    format!("line {round} of file {file}\n")
}

#[test]
fn closing_every_descriptor_leaves_the_programs_files_alone_and_the_recording_whole() {
    let repo = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(repo.path())
        .sampling_period(Duration::from_millis(1))
        .wall_clock_sampling(Duration::from_millis(1))
        .flush_interval(Duration::from_millis(50))
        .start()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new().name("spinner".into()).spawn(move || spin_until(&stop)).unwrap()
    };
    let mut seq = 0;
    for _ in 0..10 {
        Closed { seq }.commit();
        seq += 1;
        std::thread::sleep(Duration::from_millis(20));
    }

    // The program takes the descriptor table, then opens its files at the numbers it freed.
    for fd in 3..1024 {
        // SAFETY: the test plays a program that owns its descriptor table.
        unsafe { libc::close(fd) };
    }
    Closed { seq: CLOSE_MARK }.commit();
    let mut files: Vec<std::fs::File> = (0..FILES)
        .map(|i| {
            let path = data.path().join(format!("data.{i}"));
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).unwrap()
        })
        .collect();
    for round in 0..ROUNDS {
        for (i, f) in files.iter_mut().enumerate() {
            f.write_all(line(round, i).as_bytes()).unwrap();
        }
        Closed { seq }.commit();
        seq += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    let recording = rec.repository_dir().to_owned();
    rec.stop().unwrap();

    // Every byte of the program's files is its own.
    for (i, f) in files.iter().enumerate() {
        let want: String = (0..ROUNDS).map(|r| line(r, i)).collect();
        let len = f.metadata().unwrap().len() as usize;
        let mut got = vec![0u8; len];
        f.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want, "data.{i}");
    }

    // The recording holds every event the program committed, samples of the thread that ran
    // across the close taken after it, and the diagnostic that says what happened.
    let chunks = chunk_files(&recording);
    assert!(!chunks.is_empty(), "no chunk in {}", recording.display());
    let events: Vec<ReadEvent> = chunks.iter().flat_map(|c| read_events(c, "test.Closed")).collect();
    let mut seqs: Vec<i64> = events.iter().map(|e| e.field_i64("seq")).collect();
    seqs.sort();
    let want: Vec<i64> = (0..seq as i64).chain([CLOSE_MARK as i64]).collect();
    assert_eq!(seqs, want, "events committed");
    let mark = events.iter().find(|e| e.field_i64("seq") == CLOSE_MARK as i64).unwrap().start_ticks;
    let samples: Vec<ReadEvent> = chunks.iter().flat_map(|c| read_events(c, "jdk.ExecutionSample")).collect();
    let spinner_after =
        samples.iter().filter(|s| s.thread.as_deref() == Some("spinner") && s.start_ticks > mark).count();
    assert!(spinner_after > 0, "no sample of the spinner after the close ({} samples in all)", samples.len());
    let diagnostics: Vec<ReadEvent> = chunks.iter().flat_map(|c| read_events(c, "recorder.Diagnostic")).collect();
    assert!(diagnostics.iter().any(|d| d.field("code").as_str() == Some("descriptors-taken")), "{diagnostics:?}");
    // Every chunk is whole: its header's size is the file's.
    for c in &chunks {
        let bytes = std::fs::read(c).unwrap();
        let header = jfr_format::ChunkHeader::parse(&bytes, 0).unwrap_or_else(|e| panic!("{}: {e:?}", c.display()));
        assert_eq!(header.chunk_size as usize, bytes.len(), "{}", c.display());
    }
}
