//! The streaming consumer against live and finished recordings of this process, single files and
//! corrupt input.

mod common;

use common::serial;
use recorder::consumer::{ConsumedEvent, ConsumerError, EventStream, StartAt};
use recorder::{clock, Event, Recorder};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

recorder::event! {
    /// A numbered event.
    #[event(name = "test.Seq", label = "Sequence", category = ["Test"])]
    pub struct Seq {
        #[field(label = "Sequence")]
        pub seq: u64,
        pub note: String,
    }
}

#[derive(Debug, Clone)]
struct Seen {
    seq: u64,
    frames: usize,
    thread: String,
    note: String,
    tick: i64,
    start_nanos: i64,
    chunk_start: i64,
}

fn seen(ev: &ConsumedEvent) -> Seen {
    Seen {
        seq: ev.field_i64("seq").expect("seq") as u64,
        frames: ev.stack_trace().map_or(0, |s| s.frames.len()),
        thread: ev.thread().map(|t| t.name().to_owned()).unwrap_or_default(),
        note: ev.field_str("note").unwrap_or_default().to_owned(),
        tick: clock::ticks(),
        start_nanos: ev.start_nanos(),
        chunk_start: ev.chunk_start_nanos(),
    }
}

fn chunk_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jfr"))
        .collect();
    v.sort();
    v
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn assert_sequence(seqs: &[u64], n: u64, what: &str) {
    assert_eq!(seqs.len() as u64, n, "{what}: expected {n} events, got {}", seqs.len());
    for (i, &s) in seqs.iter().enumerate() {
        assert_eq!(s, i as u64, "{what}: event {i} out of order or duplicated");
    }
}

#[test]
fn live_recording_across_rotations_every_event_once_in_order_with_latency() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(base.path())
        .flush_interval(Duration::from_millis(50))
        .max_chunk_size(64 * 1024)
        .max_chunk_age(Duration::from_millis(700))
        .max_size(1 << 30)
        .start()
        .unwrap();
    let dir = rec.repository_dir().to_owned();

    // Callback form on a background thread.
    let events: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let closed = Arc::new(AtomicBool::new(false));
    let flushes = Arc::new(AtomicU64::new(0));
    let mut stream = recorder::consumer::open_recording(&dir).unwrap();
    stream.poll_interval(Duration::from_millis(10));
    {
        let events = Arc::clone(&events);
        stream.on_event("test.Seq", move |ev| events.lock().unwrap().push(seen(ev)));
        let errors = Arc::clone(&errors);
        stream.on_error(move |e| errors.lock().unwrap().push(e.to_string()));
        let closed = Arc::clone(&closed);
        stream.on_close(move || closed.store(true, Ordering::SeqCst));
        let flushes = Arc::clone(&flushes);
        stream.on_flush(move || {
            flushes.fetch_add(1, Ordering::Relaxed);
        });
    }
    let handle = stream.start().unwrap();

    // Iterator form on another thread, opened on the base directory (picks the recording dir).
    let iter_stream = EventStream::open_repository(base.path()).unwrap();
    let iter_thread = std::thread::spawn(move || {
        let mut seqs = Vec::new();
        let mut errs = Vec::new();
        for ev in iter_stream.iter() {
            match ev {
                Ok(ev) if ev.type_name() == "test.Seq" => seqs.push(ev.field_i64("seq").unwrap() as u64),
                Ok(_) => {}
                Err(e) => errs.push(e.to_string()),
            }
        }
        (seqs, errs)
    });

    const ROUNDS: u64 = 300;
    const PER_ROUND: u64 = 100;
    let note = "x".repeat(40);
    let mut flush_ticks: HashMap<u64, i64> = HashMap::new();
    let mut seen_while_running = 0;
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            Seq { seq: round * PER_ROUND + i, note: note.clone() }.commit();
        }
        rec.flush();
        flush_ticks.insert(round * PER_ROUND + PER_ROUND - 1, clock::ticks());
        std::thread::sleep(Duration::from_millis(3 + round % 7));
        if round == ROUNDS / 2 {
            seen_while_running = events.lock().unwrap().len();
        }
    }
    let total = ROUNDS * PER_ROUND;
    // The consumer keeps up while the recording runs.
    assert!(seen_while_running > 0, "the consumer saw nothing while the recording ran");
    let caught_up = wait_until(Duration::from_secs(5), || events.lock().unwrap().len() as u64 == total);
    assert!(caught_up, "consumer has {} of {total} events before stop", events.lock().unwrap().len());
    assert!(!closed.load(Ordering::SeqCst), "stream closed before the recording stopped");
    rec.stop().unwrap();
    // The final flag ends both streams by themselves.
    assert!(wait_until(Duration::from_secs(5), || handle.is_finished()), "stream did not end after stop");
    handle.join();
    assert!(closed.load(Ordering::SeqCst), "on_close not called");
    let (iter_seqs, iter_errs) = iter_thread.join().unwrap();

    let chunks = chunk_files(&dir);
    assert!(chunks.len() >= 3, "expected rotations, got {} chunks", chunks.len());
    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "errors: {errors:?}");
    assert!(iter_errs.is_empty(), "iterator errors: {iter_errs:?}");
    let events = events.lock().unwrap().clone();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_sequence(&seqs, total, "callback stream");
    assert_sequence(&iter_seqs, total, "iterator stream");
    let chunk_starts: std::collections::BTreeSet<i64> = events.iter().map(|e| e.chunk_start).collect();
    assert!(chunk_starts.len() >= 3, "events came from {} chunks", chunk_starts.len());
    for e in &events {
        assert!(e.frames > 0, "event {} has no stack frames", e.seq);
        assert!(!e.thread.is_empty(), "event {} has no thread", e.seq);
        assert_eq!(e.note, note);
        // (An event committed just before a rotation may land in the next chunk: no check of
        // start_nanos against chunk_start.)
        assert!(e.start_nanos > 0);
    }
    assert!(flushes.load(Ordering::Relaxed) >= ROUNDS, "on_flush ran {} times", flushes.load(Ordering::Relaxed));

    // Flush-to-consumer latency: producer tick right after `flush()` returned, consumer tick when
    // the callback got the round's last event. Negative = the flusher thread published it first.
    let mut lat: Vec<i64> =
        events.iter().filter_map(|e| flush_ticks.get(&e.seq).map(|&t| clock::ticks_to_nanos(e.tick - t))).collect();
    lat.sort_unstable();
    let ms = |ns: i64| ns as f64 / 1e6;
    eprintln!(
        "flush-to-consumer latency over {} flushes (poll 10 ms): min {:.2} ms, p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        ms(lat[0]),
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.9)),
        ms(percentile(&lat, 0.99)),
        ms(*lat.last().unwrap())
    );
    assert_eq!(lat.len() as u64, ROUNDS);
    assert!(*lat.last().unwrap() < 5_000_000_000, "a flush took more than 5 s to reach the consumer");

    // (c) The finished repository, from the beginning, through the base directory.
    let mut all = Vec::new();
    let t0 = Instant::now();
    let mut count = 0u64;
    for ev in EventStream::open_repository(base.path()).unwrap().iter() {
        count += 1;
        let ev = ev.unwrap();
        if ev.type_name() == "test.Seq" {
            assert!(ev.stack_trace().is_some_and(|s| !s.frames.is_empty()));
            all.push(ev.field_i64("seq").unwrap() as u64);
        }
    }
    let took = t0.elapsed();
    eprintln!(
        "finished repository: {count} events in {:.1} ms ({:.2} µs/event, threads and stacks resolved)",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / count as f64
    );
    assert_sequence(&all, total, "finished repository");
}

#[test]
fn start_at_now_skips_what_was_published_before() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(base.path()).flush_interval(Duration::from_millis(20)).start().unwrap();
    for seq in 0..100 {
        Seq { seq, note: String::new() }.commit();
    }
    rec.flush();
    let got: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut stream = EventStream::open_repository(rec.repository_dir()).unwrap();
    stream.start_at(StartAt::Now);
    let g = Arc::clone(&got);
    stream.on_event("test.Seq", move |ev| g.lock().unwrap().push(ev.field_i64("seq").unwrap() as u64));
    let handle = stream.start().unwrap();
    // Give the stream time to open the chunk before the new events are published.
    std::thread::sleep(Duration::from_millis(100));
    for seq in 100..200 {
        Seq { seq, note: String::new() }.commit();
    }
    rec.flush();
    assert!(wait_until(Duration::from_secs(5), || got.lock().unwrap().len() >= 100));
    // close() ends a live stream.
    handle.close();
    let got = got.lock().unwrap().clone();
    assert_eq!(got, (100..200).collect::<Vec<u64>>());
    rec.stop().unwrap();
}

fn record_a_dump(dir: &Path, n: u64) -> PathBuf {
    let rec = Recorder::builder().repository(dir.join("repo")).start().unwrap();
    for seq in 0..n {
        Seq { seq, note: format!("n{seq}") }.commit();
    }
    let file = dir.join("dump.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    file
}

/// `strict`: check each event's thread, stack and note (only for undamaged files).
fn consume_file(path: &Path, strict: bool) -> (Vec<u64>, Vec<ConsumerError>) {
    let mut seqs = Vec::new();
    let mut errs = Vec::new();
    for ev in EventStream::open_file(path).unwrap().iter() {
        match ev {
            Ok(ev) if ev.type_name() == "test.Seq" && !strict => {
                seqs.push(ev.field_i64("seq").unwrap_or(-1) as u64);
            }
            Ok(ev) if ev.type_name() == "test.Seq" => {
                assert!(ev.thread().is_some());
                assert!(ev.stack_trace().is_some_and(|s| !s.frames.is_empty()));
                assert_eq!(ev.field_str("note").unwrap(), format!("n{}", ev.field_i64("seq").unwrap()));
                seqs.push(ev.field_i64("seq").unwrap() as u64);
            }
            Ok(_) => {}
            Err(e) => errs.push(e),
        }
    }
    (seqs, errs)
}

#[test]
fn single_file_and_corrupt_files() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = record_a_dump(dir.path(), 500);
    let (seqs, errs) = consume_file(&file, true);
    assert!(errs.is_empty(), "{errs:?}");
    assert_sequence(&seqs, 500, "dump file");

    // `open` on a file, callback form: run() returns at the end of the file and calls on_close.
    let count = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let mut stream = EventStream::open(&file).unwrap();
    let c = Arc::clone(&count);
    stream.on_any_event(move |_| {
        c.fetch_add(1, Ordering::Relaxed);
    });
    let cl = Arc::clone(&closed);
    stream.on_close(move || cl.store(true, Ordering::SeqCst));
    stream.run();
    assert!(count.load(Ordering::Relaxed) >= 500);
    assert!(closed.load(Ordering::SeqCst));

    // Garbage: an error, no panic, the stream ends.
    let garbage = dir.path().join("garbage.jfr");
    std::fs::write(&garbage, vec![0x5a; 1000]).unwrap();
    let (seqs, errs) = consume_file(&garbage, false);
    assert!(seqs.is_empty());
    assert_eq!(errs.len(), 1, "{errs:?}");
    eprintln!("garbage: {}", errs[0]);

    // Truncated in the middle.
    let bytes = std::fs::read(&file).unwrap();
    let cut = dir.path().join("cut.jfr");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (_, errs) = consume_file(&cut, false);
    assert!(!errs.is_empty(), "a truncated file gave no error");

    // Bytes overwritten in every possible place: never a panic, and an error or fewer events.
    let mut damaged = 0;
    let step = (bytes.len() / 97).max(1);
    for at in (0..bytes.len()).step_by(step) {
        let mut b = bytes.clone();
        for x in b.iter_mut().skip(at).take(16) {
            *x = 0xff;
        }
        let path = dir.path().join("damaged.jfr");
        std::fs::write(&path, &b).unwrap();
        let (seqs, errs) = consume_file(&path, false);
        if !errs.is_empty() || seqs.len() < 500 {
            damaged += 1;
        }
    }
    assert!(damaged > 0);

    // A missing path is an error at open.
    assert!(EventStream::open_file(dir.path().join("nope.jfr")).is_err());
    assert!(EventStream::open_repository(dir.path().join("nope")).is_err());
}

#[test]
fn corrupt_chunk_in_a_repository_is_reported_and_skipped() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(base.path())
        .flush_interval(Duration::from_millis(20))
        .max_chunk_size(64 * 1024)
        .max_size(1 << 30)
        .start()
        .unwrap();
    let dir = rec.repository_dir().to_owned();
    let mut seq = 0;
    while chunk_files(&dir).len() < 4 {
        for _ in 0..500 {
            Seq { seq, note: format!("n{seq}") }.commit();
            seq += 1;
        }
        rec.flush();
    }
    rec.stop().unwrap();
    let chunks = chunk_files(&dir);
    // Damage the second chunk's records (not its header).
    let victim = &chunks[1];
    let mut b = std::fs::read(victim).unwrap();
    let mid = b.len() / 2;
    for x in &mut b[mid..mid + 64] {
        *x = 0xff;
    }
    std::fs::write(victim, &b).unwrap();
    // And add a file that is not a chunk at all.
    std::fs::write(dir.join("zz_not_a_chunk.jfr"), vec![1u8; 200]).unwrap();

    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let mut seqs = Vec::new();
        let mut errs = Vec::new();
        for ev in EventStream::open_repository(&dir).unwrap().iter() {
            match ev {
                Ok(ev) if ev.type_name() == "test.Seq" => seqs.push(ev.field_i64("seq").unwrap() as u64),
                Ok(_) => {}
                Err(e) => errs.push(e.to_string()),
            }
        }
        let _ = tx.send(());
        (seqs, errs)
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("the stream did not end after the final chunk");
    let (seqs, errs) = worker.join().unwrap();
    eprintln!("errors: {errs:#?}");
    assert!(errs.iter().any(|e| e.contains("zz_not_a_chunk")), "the non-chunk file was not reported");
    assert!(
        errs.iter().any(|e| e.contains(victim.file_name().unwrap().to_str().unwrap())),
        "the damaged chunk was not reported"
    );
    // Everything from the other chunks arrived, in order; the last event is there.
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "out of order");
    assert_eq!(seqs.last().copied(), Some(seq - 1));
    assert!((seqs.len() as u64) < seq, "the damaged chunk's events cannot all be there");
}

#[test]
fn not_following_reads_an_unfinished_repository_and_ends() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(base.path().join("repo"))
        .flush_interval(Duration::from_millis(20))
        .max_chunk_size(64 * 1024)
        .max_size(1 << 30)
        .start()
        .unwrap();
    const N: u64 = 5000;
    for seq in 0..N {
        Seq { seq, note: format!("n{seq}") }.commit();
    }
    rec.flush();
    // A copy taken while the recording runs: its newest chunk is unfinished, as after a crash.
    // A rotation while the files are copied can leave two unfinished copies (the old chunk read
    // before its final flag, the new one after): copy again, as a user would.
    let copy = base.path().join("copy");
    let mut unfinished_seen = Vec::new();
    loop {
        let _ = std::fs::remove_dir_all(&copy);
        std::fs::create_dir(&copy).unwrap();
        for f in chunk_files(rec.repository_dir()) {
            std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
        }
        let unfinished = chunk_files(&copy)
            .iter()
            .filter(|f| jfr_format::ChunkHeader::parse(&std::fs::read(f).unwrap(), 0).unwrap().state != 0)
            .count();
        if unfinished == 1 {
            break;
        }
        unfinished_seen.push(unfinished);
        assert!(unfinished_seen.len() < 40, "copies never held exactly one unfinished chunk: {unfinished_seen:?}");
        // Right after a rotation the next chunk exists only from its first flush on (0 unfinished
        // until then): give the flusher (20 ms interval) time to publish it.
        std::thread::sleep(Duration::from_millis(25));
    }
    rec.stop().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let mut stream = EventStream::open_repository(&copy).unwrap();
        stream.follow(false);
        let mut seqs = Vec::new();
        for ev in stream.iter() {
            let ev = ev.unwrap();
            if ev.type_name() == "test.Seq" {
                seqs.push(ev.field_i64("seq").unwrap() as u64);
            }
        }
        let _ = tx.send(());
        seqs
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("a non-following stream did not end");
    let seqs = worker.join().unwrap();
    assert_sequence(&seqs, N, "unfinished copy");
}

const PRODUCER_ENV: &str = "RECORDER_CONSUMER_TEST_PRODUCER";

/// Runs only as the child of `another_process_is_followed_live`: records into the base directory
/// named by the environment, printing `FLUSH <seq> <tick>` after every flush.
#[test]
fn child_mode_producer() {
    let Ok(base) = std::env::var(PRODUCER_ENV) else {
        return;
    };
    let rec = Recorder::builder()
        .repository(base)
        .flush_interval(Duration::from_millis(50))
        .max_chunk_size(64 * 1024)
        .max_size(1 << 30)
        .start()
        .unwrap();
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for round in 0..200u64 {
        for i in 0..50 {
            Seq { seq: round * 50 + i, note: "child".into() }.commit();
        }
        rec.flush();
        let tick = clock::ticks();
        writeln!(out, "FLUSH {} {tick}", round * 50 + 49).unwrap();
        std::thread::sleep(Duration::from_millis(2 + round % 9));
    }
    rec.stop().unwrap();
}

#[test]
fn another_process_is_followed_live() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    // Opened before the other process has created its recording directory.
    let mut stream = EventStream::open_repository(base.path()).unwrap();
    let got: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let g = Arc::clone(&got);
    stream.on_event("test.Seq", move |ev| g.lock().unwrap().push(seen(ev)));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let e = Arc::clone(&errors);
    stream.on_error(move |err| e.lock().unwrap().push(err.to_string()));
    let handle = stream.start().unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_mode_producer", "--exact", "--nocapture", "--test-threads=1"])
        .env(PRODUCER_ENV, base.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    // The other process stopped its recording: the final chunk ends the stream.
    assert!(wait_until(Duration::from_secs(5), || handle.is_finished()), "stream did not end");
    handle.join();
    assert!(errors.lock().unwrap().is_empty(), "{:?}", errors.lock().unwrap());
    let got = got.lock().unwrap().clone();
    let seqs: Vec<u64> = got.iter().map(|s| s.seq).collect();
    assert_sequence(&seqs, 200 * 50, "other process");
    assert!(got.iter().all(|s| s.frames > 0 && !s.thread.is_empty() && s.note == "child"));
    let flush_ticks: HashMap<u64, i64> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            // (The harness's "test child_mode_producer ... " shares the first line.)
            let mut parts = l[l.find("FLUSH ")? + 6..].split(' ');
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .collect();
    let mut lat: Vec<i64> =
        got.iter().filter_map(|s| flush_ticks.get(&s.seq).map(|&t| clock::ticks_to_nanos(s.tick - t))).collect();
    assert_eq!(lat.len(), 200);
    lat.sort_unstable();
    let ms = |ns: i64| ns as f64 / 1e6;
    eprintln!(
        "cross-process flush-to-consumer latency over {} flushes (poll 10 ms): min {:.2} ms, p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(),
        ms(lat[0]),
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.9)),
        ms(percentile(&lat, 0.99)),
        ms(*lat.last().unwrap())
    );
    assert!(*lat.last().unwrap() < 5_000_000_000);
}

/// Read rate of a large dump (run with `--ignored --nocapture`, in release).
#[test]
#[ignore]
fn bench_read_rate() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path().join("repo")).max_size(1 << 30).start().unwrap();
    for seq in 0..300_000u64 {
        Seq { seq, note: "bench".into() }.commit();
        if seq % 10_000 == 0 {
            rec.flush();
        }
    }
    let file = dir.path().join("big.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut n = 0u64;
        let mut frames = 0usize;
        for ev in EventStream::open_file(&file).unwrap().iter() {
            let ev = ev.unwrap();
            frames += ev.stack_trace().map_or(0, |s| s.frames.len());
            n += 1;
        }
        let t = t0.elapsed().as_secs_f64();
        eprintln!("{n} events ({frames} frames) in {:.1} ms: {:.2} µs/event", t * 1e3, t * 1e6 / n as f64);
    }
}

#[test]
fn a_locked_header_is_waited_for_and_a_final_header_ends_the_stream() {
    use std::os::unix::fs::FileExt;
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(base.path().join("repo")).start().unwrap();
    for seq in 0..300 {
        Seq { seq, note: String::new() }.commit();
    }
    rec.flush();
    let copy = base.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    let files = chunk_files(rec.repository_dir());
    assert_eq!(files.len(), 1);
    let chunk = copy.join(files[0].file_name().unwrap());
    std::fs::copy(&files[0], &chunk).unwrap();
    rec.stop().unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&chunk).unwrap();
    let mut state = [0u8; 4];
    file.read_exact_at(&mut state, 64).unwrap();
    assert!(state[0] != 0 && state[0] != 255, "the copy should be a live chunk, state {}", state[0]);
    file.write_all_at(&[255], 64).unwrap();

    // A non-following stream gives up on a header that stays locked, with an error.
    let (tx, rx) = std::sync::mpsc::channel();
    let c = copy.clone();
    std::thread::spawn(move || {
        let mut s = EventStream::open_repository(&c).unwrap();
        s.follow(false);
        let items: Vec<_> = s.iter().collect();
        let _ = tx.send(items);
    });
    let items = rx.recv_timeout(Duration::from_secs(10)).expect("a non-following stream waited forever");
    assert!(items.len() == 1 && items[0].is_err(), "{items:?}");

    // A following stream waits while the guard is set.
    let got: Arc<Mutex<Vec<u64>>> = Arc::default();
    let closed = Arc::new(AtomicBool::new(false));
    let mut stream = EventStream::open_repository(&copy).unwrap();
    let g = Arc::clone(&got);
    stream.on_event("test.Seq", move |ev| g.lock().unwrap().push(ev.field_i64("seq").unwrap() as u64));
    let cl = Arc::clone(&closed);
    stream.on_close(move || cl.store(true, Ordering::SeqCst));
    let handle = stream.start().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(got.lock().unwrap().is_empty(), "events read from a locked chunk");
    assert!(!handle.is_finished());
    // The "writer" finishes the chunk as the last one of its recording: state 0, final flag.
    file.write_all_at(&[0, 0, state[2], state[3] | 2], 64).unwrap();
    assert!(wait_until(Duration::from_secs(5), || handle.is_finished()), "the final flag did not end the stream");
    handle.join();
    assert!(closed.load(Ordering::SeqCst));
    assert_eq!(*got.lock().unwrap(), (0..300).collect::<Vec<u64>>());
}

const SPIN_JAVA: &str = r#"
public class Spin {
    public static void main(String[] a) throws Exception {
        long end = System.currentTimeMillis() + Long.parseLong(a[0]);
        long x = 0;
        while (System.currentTimeMillis() < end) {
            for (int i = 0; i < 100000; i++) x += i ^ (x >>> 3);
            Thread.sleep(1);
        }
        System.out.println("done " + x);
    }
}
"#;

/// A HotSpot recording: followed live in its JVM repository (the stream ends by itself when the JVM
/// exits), and its dump read as a file with exactly the counts `jfr summary` gives.
#[test]
fn jdk_recording_live_and_as_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(dir.path().join("Spin.java"), SPIN_JAVA).unwrap();
    let out = dir.path().join("out.jfr");

    let live: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let samples_with_stacks = Arc::new(AtomicU64::new(0));
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut stream = EventStream::open_repository(&repo).unwrap();
    {
        let live = Arc::clone(&live);
        let s = Arc::clone(&samples_with_stacks);
        stream.on_any_event(move |ev| {
            *live.lock().unwrap().entry(ev.type_name().to_owned()).or_default() += 1;
            if ev.type_name() == "jdk.ExecutionSample"
                && ev.stack_trace().is_some_and(|st| !st.frames.is_empty())
                && ev.thread().is_some_and(|t| !t.name().is_empty())
            {
                s.fetch_add(1, Ordering::Relaxed);
            }
        });
        let e = Arc::clone(&errors);
        stream.on_error(move |err| e.lock().unwrap().push(err.to_string()));
    }
    let handle = stream.start().unwrap();
    let status = std::process::Command::new("java")
        .arg(format!("-XX:StartFlightRecording:settings=profile,filename={}", out.display()))
        .arg(format!("-XX:FlightRecorderOptions:repository={}", repo.display()))
        .arg("-Xlog:jfr*=warning")
        .arg(dir.path().join("Spin.java"))
        .arg("3000")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("java is required");
    assert!(status.success());
    assert!(
        wait_until(Duration::from_secs(10), || handle.is_finished()),
        "the JVM's final chunk did not end the stream"
    );
    handle.join();
    assert!(errors.lock().unwrap().is_empty(), "{:?}", errors.lock().unwrap());
    let live = live.lock().unwrap().clone();
    let total: u64 = live.values().sum();
    eprintln!(
        "live from the JVM repository: {total} events of {} types, {} execution samples with stacks",
        live.len(),
        samples_with_stacks.load(Ordering::Relaxed)
    );
    assert!(samples_with_stacks.load(Ordering::Relaxed) > 0, "no execution samples with stacks: {live:?}");

    // The dump as a file: per-type counts equal `jfr summary`'s.
    let mut counts: HashMap<String, u64> = HashMap::new();
    for ev in EventStream::open_file(&out).unwrap().iter() {
        let ev = ev.unwrap();
        *counts.entry(ev.type_name().to_owned()).or_default() += 1;
    }
    let summary = std::process::Command::new("jfr").arg("summary").arg(&out).output().expect("jfr is required");
    assert!(summary.status.success());
    let mut expected: HashMap<String, u64> = HashMap::new();
    for line in String::from_utf8_lossy(&summary.stdout).lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() == 3 && parts[0].starts_with("jdk.") {
            if let Ok(n) = parts[1].parse::<u64>() {
                if n > 0 {
                    expected.insert(parts[0].to_owned(), n);
                }
            }
        }
    }
    // `jfr summary` counts checkpoint and metadata records as pseudo events; they are not events.
    expected.remove("jdk.CheckPoint");
    expected.remove("jdk.Metadata");
    eprintln!("the JVM's dump: {} events", counts.values().sum::<u64>());
    assert_eq!(counts, expected);
    // The live stream saw the same recording: every event of it.
    assert_eq!(live, counts, "live stream and dump differ");
}

/// The `test.Seq` numbers of a stream read to its end (on a thread of its own: a stream that does
/// not end fails the test instead of hanging it).
fn seqs_to_the_end(stream: EventStream) -> Vec<u64> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seqs = Vec::new();
        for ev in stream.iter() {
            let ev = ev.unwrap();
            if ev.type_name() == "test.Seq" {
                seqs.push(ev.field_i64("seq").unwrap() as u64);
            }
        }
        let _ = tx.send(seqs);
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the stream did not end")
}

/// Finished chunks compressed by the recorder (`*.jfr.zst`) are read like plain ones, in order.
#[cfg(feature = "zstd")]
#[test]
fn compressed_finished_chunks_are_read_in_order() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(base.path())
        .no_sampling()
        .flush_interval(Duration::from_millis(20))
        .max_chunk_size(64 * 1024)
        .compress_finished_chunks(true)
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let files = || std::fs::read_dir(&repo).unwrap().count();
    const N: u64 = 1200;
    for seq in 0..N {
        Seq { seq, note: format!("{seq:0>200}") }.commit();
        if seq % 400 == 399 {
            // 80 KiB published: the next periodic flush rotates the chunk.
            let before = files();
            rec.flush();
            assert!(wait_until(Duration::from_secs(30), || files() > before), "no rotation");
        }
    }
    rec.stop().unwrap();
    let compressed = std::fs::read_dir(&repo)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".jfr.zst"))
        .count();
    assert!(compressed >= 2, "the recording rotated and compressed its chunks ({compressed} .jfr.zst)");
    assert_sequence(&seqs_to_the_end(EventStream::open_repository(&repo).unwrap()), N, "compressed chunks");
}

/// A base directory with two recordings: by default the most recently modified one is read; with
/// `all_recordings` both, in start order, and the stream ends after the newest final chunk.
#[test]
fn all_recordings_of_a_base_directory_are_read_in_order() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    for range in [0..50u64, 50..120] {
        let rec = Recorder::builder().repository(base.path()).no_sampling().start().unwrap();
        for seq in range {
            Seq { seq, note: String::new() }.commit();
        }
        rec.stop().unwrap();
        // The next recording's chunks start after this one's end on the wall clock.
        std::thread::sleep(Duration::from_millis(10));
    }
    let newest = seqs_to_the_end(EventStream::open_repository(base.path()).unwrap());
    assert_eq!(newest, (50..120).collect::<Vec<u64>>(), "the newest recording only");
    let mut stream = EventStream::open_repository(base.path()).unwrap();
    stream.all_recordings(true);
    assert_sequence(&seqs_to_the_end(stream), 120, "every recording");
}

/// Every recording of a base directory, the older one's last chunk left unfinished by a writer
/// that died: what it published is read, then the newer recording, and the stream ends after the
/// newer one's final chunk instead of waiting for the dead chunk to grow.
#[test]
fn all_recordings_move_on_from_a_dead_recordings_unfinished_chunk() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for range in [0..50u64, 50..120] {
        let rec = Recorder::builder().repository(base.path()).no_sampling().start().unwrap();
        for seq in range {
            Seq { seq, note: String::new() }.commit();
        }
        dirs.push(rec.repository_dir().to_owned());
        rec.stop().unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let dead = chunk_files(&dirs[0]).pop().unwrap();
    let mut bytes = std::fs::read(&dead).unwrap();
    bytes[64] = 7; // a generation: in progress
    bytes[67] = 1; // compressed ints, no final flag
    std::fs::write(&dead, bytes).unwrap();
    let mut stream = EventStream::open_repository(base.path()).unwrap();
    stream.all_recordings(true);
    assert_sequence(&seqs_to_the_end(stream), 120, "a dead recording, then a finished one");
}

/// `poll_next` hands out what is published and then says so instead of waiting for the writer;
/// the headers read tell how far the recording reaches.
#[test]
fn poll_next_returns_idle_when_caught_up_and_ended_after_the_final_chunk() {
    use recorder::consumer::Polled;
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(base.path())
        .no_sampling()
        .flush_interval(Duration::from_secs(3600))
        .start()
        .unwrap();
    let mut events = EventStream::open_repository(rec.repository_dir()).unwrap().iter();
    let want = |name: &str| name == "test.Seq";
    // Everything published, then Idle (or Ended): the Seq numbers read.
    let read_published = |events: &mut recorder::consumer::EventIter| {
        let mut seqs = Vec::new();
        loop {
            match events.poll_next(&want) {
                Polled::Event(ev) => seqs.push(ev.field_i64("seq").unwrap() as u64),
                Polled::Error(e) => panic!("{e}"),
                Polled::Idle => return (seqs, false),
                Polled::Ended => return (seqs, true),
            }
        }
    };
    let mut ends = Vec::new();
    for round in 0..3u64 {
        for seq in round * 10..round * 10 + 10 {
            Seq { seq, note: String::new() }.commit();
        }
        rec.flush();
        let (seqs, ended) = read_published(&mut events);
        assert_eq!(seqs, (round * 10..round * 10 + 10).collect::<Vec<u64>>(), "round {round}");
        assert!(!ended, "a live recording has not ended");
        ends.push(events.published_end_nanos());
    }
    assert!(ends[0] > 0 && ends.windows(2).all(|w| w[0] <= w[1]), "{ends:?}");
    rec.stop().unwrap();
    let (seqs, ended) = read_published(&mut events);
    assert!(seqs.is_empty() && ended, "{seqs:?} {ended}");
}
