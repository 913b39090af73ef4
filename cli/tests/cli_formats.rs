//! `recorder dump --format json|collapsed|flamegraph`, `--since`, `--thread`, `--compress`, `.jfr.zst`
//! input and `recorder top`, on a recording made by the library (two threads with distinct hot
//! functions, 1 ms sampling, several chunks). The JDK's `jfr` judges the compressed JFR output.

mod common;

use common::*;
use recorder::Recorder;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// A hot function that spins on plain arithmetic (no calls, not even inlined ones such as
/// `wrapping_add` or a range's `next`, which an optimized build's debug info shows as frames of
/// their own), so it is the innermost frame of its samples in any build: an xorshift with the
/// given shifts.
macro_rules! hot_function {
    ($name:ident, $seed:literal, $a:literal, $b:literal, $c:literal) => {
        #[inline(never)]
        fn $name(stop: &AtomicBool) -> u64 {
            let mut x = $seed;
            while !stop.load(Ordering::Relaxed) {
                let mut i = 0u64;
                while i < 10_000 {
                    x ^= x << $a;
                    x ^= x >> $b;
                    x ^= x << $c;
                    x ^= i;
                    i += 1;
                }
            }
            x
        }
    };
}

hot_function!(fmt_hot_alpha, 1u64, 13, 7, 17);
hot_function!(fmt_hot_beta, 7u64, 5, 11, 23);

struct Recording {
    /// Keeps the files.
    _dir: tempfile::TempDir,
    /// The repository directory (several chunk files).
    repo: PathBuf,
    /// All chunks in one file (`recorder dump REPO -o`).
    file: PathBuf,
}

/// One recording for the whole test binary: 2 threads, ~1.2 s, chunks rotated every 400 ms.
fn recording() -> &'static Recording {
    static REC: OnceLock<Recording> = OnceLock::new();
    REC.get_or_init(|| {
        let _guard = serial();
        let dir = tempfile::tempdir().unwrap();
        let rec = Recorder::builder()
            .repository(dir.path().join("repo"))
            .sampling_period(Duration::from_millis(1))
            .flush_interval(Duration::from_millis(100))
            .max_chunk_age(Duration::from_millis(400))
            .start()
            .unwrap();
        let repo = rec.repository_dir().to_owned();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let stop = &stop;
            let rec = &rec;
            std::thread::Builder::new()
                .name("fmt-hot-a".into())
                .spawn_scoped(s, move || {
                    rec.register_current_thread().unwrap();
                    std::hint::black_box(fmt_hot_alpha(stop))
                })
                .unwrap();
            std::thread::Builder::new()
                .name("fmt-hot-b".into())
                .spawn_scoped(s, move || {
                    rec.register_current_thread().unwrap();
                    std::hint::black_box(fmt_hot_beta(stop))
                })
                .unwrap();
            std::thread::sleep(Duration::from_millis(1200));
            stop.store(true, Ordering::Relaxed);
        });
        rec.stop().unwrap();
        assert!(chunk_files(&repo).len() >= 2, "the recording rotated chunks");
        let file = dir.path().join("whole.jfr");
        recorder_ok(&["dump", repo.to_str().unwrap(), "-o", file.to_str().unwrap()]);
        Recording { _dir: dir, repo, file }
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `recorder summary --json`: (count per type, start_ns, duration_ns).
fn summary(path: &Path) -> (BTreeMap<String, u64>, i64, i64) {
    let v: serde_json::Value = serde_json::from_str(&recorder_ok(&["summary", "--json", s(path)])).unwrap();
    let counts =
        v["events"].as_object().unwrap().iter().map(|(k, e)| (k.clone(), e["count"].as_u64().unwrap())).collect();
    (counts, v["start_ns"].as_i64().unwrap(), v["duration_ns"].as_i64().unwrap())
}

/// Parses collapsed output: (stack, count) per line; checks every line's shape.
fn parse_collapsed(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|line| {
            let (stack, count) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no count: {line}"));
            assert!(!stack.is_empty() && !stack.contains(char::is_whitespace), "one token per frame: {line}");
            assert!(stack.split(';').all(|f| !f.is_empty()), "empty frame: {line}");
            (stack.to_owned(), count.parse().unwrap_or_else(|_| panic!("bad count: {line}")))
        })
        .collect()
}

#[test]
fn collapsed_counts_every_sample_once_and_inferno_reads_it() {
    let r = recording();
    let samples = summary(&r.repo).0["jdk.ExecutionSample"];
    // How many depends on the CPU time the threads got (load), not on us: some.
    assert!(samples > 0, "the hot threads were sampled");
    let text = recorder_ok(&["dump", s(&r.repo), "--format", "collapsed"]);
    let lines = parse_collapsed(&text);
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    assert_eq!(total, samples, "counts sum to the ExecutionSample count");
    // Identical stacks are aggregated: no stack appears twice.
    let mut stacks: Vec<&String> = lines.iter().map(|(st, _)| st).collect();
    stacks.sort();
    stacks.dedup();
    assert_eq!(stacks.len(), lines.len(), "each stack once");
    let alpha: u64 = lines.iter().filter(|(st, _)| st.contains("fmt_hot_alpha")).map(|(_, n)| n).sum();
    let beta: u64 = lines.iter().filter(|(st, _)| st.contains("fmt_hot_beta")).map(|(_, n)| n).sum();
    assert!(alpha > 0 && beta > 0, "both hot functions: alpha {alpha} beta {beta} of {samples}");
    // Outermost first: the hot function is the innermost (last) frame of its stacks, mostly.
    assert!(lines.iter().any(|(st, _)| st.rsplit(';').next().unwrap().contains("fmt_hot_alpha")), "{text}");
    // The single-file copy folds to the same lines.
    assert_eq!(recorder_ok(&["dump", s(&r.file), "--format", "collapsed"]), text);
    // inferno reads it without complaint.
    let mut svg = Vec::new();
    let mut options = inferno::flamegraph::Options::default();
    inferno::flamegraph::from_lines(&mut options, text.lines(), &mut svg).expect("inferno reads the collapsed stacks");
    assert!(String::from_utf8(svg).unwrap().contains("fmt_hot_alpha"));
}

/// Parses an SVG (inferno's carries a DOCTYPE).
fn parse_svg(text: &str) -> roxmltree::Document<'_> {
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..roxmltree::ParsingOptions::default() };
    roxmltree::Document::parse_with_options(text, options).expect("the SVG is well-formed XML")
}

#[test]
fn flamegraph_is_an_svg_naming_the_hot_functions() {
    let r = recording();
    let out = tempfile::tempdir().unwrap();
    let svg_path = out.path().join("cpu.svg");
    recorder_ok(&["dump", s(&r.repo), "--format", "flamegraph", "-o", s(&svg_path)]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = parse_svg(&svg);
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let titles: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("title")).filter_map(|n| n.text()).collect();
    for hot in ["fmt_hot_alpha", "fmt_hot_beta"] {
        assert!(titles.iter().any(|t| t.contains(hot)), "{hot} has a frame in the flame graph");
    }
    // To stdout as well.
    let stdout = recorder_ok(&["dump", s(&r.file), "--format", "flamegraph"]);
    parse_svg(&stdout);
}

#[test]
fn json_lines_all_parse_and_match_print() {
    let r = recording();
    let text = recorder_ok(&["dump", s(&r.repo), "--format", "json"]);
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["type"].is_string() && v["start_ns"].is_i64(), "{line}");
        n += 1;
    }
    let (counts, _, _) = summary(&r.repo);
    let events: u64 =
        counts.iter().filter(|(k, _)| *k != "jdk.Metadata" && *k != "jdk.CheckPoint").map(|(_, c)| c).sum();
    assert_eq!(n, events, "one line per event");
    assert_eq!(text, recorder_ok(&["print", "--json", s(&r.repo)]), "the same rendering as print --json");
    let samples = recorder_ok(&["dump", s(&r.file), "--format", "json", "--events", "jdk.ExecutionSample"]);
    assert_eq!(samples.lines().count() as u64, counts["jdk.ExecutionSample"]);
}

fn json_events(args: &[&str]) -> Vec<serde_json::Value> {
    recorder_ok(args).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn since_keeps_exactly_the_events_of_the_last_span() {
    let r = recording();
    let (_, start, duration) = summary(&r.repo);
    let end = start + duration;
    let all = json_events(&["dump", s(&r.repo), "--format", "json"]);
    let recent = json_events(&["dump", s(&r.repo), "--format", "json", "--since", "300ms"]);
    let cutoff = end - 300_000_000;
    let expected = all.iter().filter(|e| e["start_ns"].as_i64().unwrap() >= cutoff).count();
    assert!(expected > 0 && expected < all.len(), "the span splits the recording ({expected} of {})", all.len());
    assert_eq!(recent.len(), expected);
    assert!(recent.iter().all(|e| e["start_ns"].as_i64().unwrap() >= cutoff));
    // Collapsed and JFR outputs honour it too.
    let recent_samples = recent.iter().filter(|e| e["type"] == "jdk.ExecutionSample").count() as u64;
    let folded = recorder_ok(&["dump", s(&r.repo), "--format", "collapsed", "--since", "0.3s"]);
    assert_eq!(parse_collapsed(&folded).iter().map(|(_, n)| n).sum::<u64>(), recent_samples);
    let out = tempfile::tempdir().unwrap();
    let jfr = out.path().join("recent.jfr");
    recorder_ok(&["dump", s(&r.repo), "--since", "300ms", "-o", s(&jfr)]);
    assert_eq!(summary(&jfr).0["jdk.ExecutionSample"], recent_samples);
    jdk_accepts(&[jfr]);
}

#[test]
fn thread_keeps_only_that_threads_events() {
    let r = recording();
    let events = json_events(&["dump", s(&r.repo), "--format", "json", "--thread", "fmt-hot-a"]);
    assert!(!events.is_empty());
    for e in &events {
        let t = &e["thread"];
        assert!(t["javaName"] == "fmt-hot-a" || t["osName"] == "fmt-hot-a", "{e}");
    }
    let all = json_events(&["dump", s(&r.repo), "--format", "json"]);
    let expected =
        all.iter().filter(|e| e["thread"]["javaName"] == "fmt-hot-a" || e["thread"]["osName"] == "fmt-hot-a").count();
    assert_eq!(events.len(), expected);
    let folded = recorder_ok(&["dump", s(&r.repo), "--format", "collapsed", "--thread", "fmt-hot-a"]);
    assert!(folded.contains("fmt_hot_alpha"), "{folded}");
    assert!(!folded.contains("fmt_hot_beta"), "{folded}");
}

#[test]
fn compressed_output_is_zstd_of_a_valid_recording_and_zst_input_reads_directly() {
    let r = recording();
    let out = tempfile::tempdir().unwrap();
    let zst = out.path().join("whole.jfr.zst");
    recorder_ok(&["dump", s(&r.repo), "-o", s(&zst), "--compress"]);
    let compressed = std::fs::read(&zst).unwrap();
    assert_eq!(compressed[..4], [0x28, 0xb5, 0x2f, 0xfd], "zstd magic");
    let plain = zstd::decode_all(&compressed[..]).expect("decompresses");
    let jfr = out.path().join("whole.jfr");
    std::fs::write(&jfr, &plain).unwrap();
    jdk_accepts(std::slice::from_ref(&jfr));
    assert_eq!(jfr_summary_counts(&jfr)["jdk.ExecutionSample"], summary(&r.repo).0["jdk.ExecutionSample"]);
    // recorder reads the .zst directly, as it reads the plain file.
    assert_eq!(recorder_ok(&["summary", "--json", s(&zst)]), recorder_ok(&["summary", "--json", s(&jfr)]));
    assert_eq!(
        recorder_ok(&["dump", s(&zst), "--format", "collapsed"]),
        recorder_ok(&["dump", s(&jfr), "--format", "collapsed"])
    );
    // A repository whose finished chunks are `*.jfr.zst` reads like the original.
    let repo = out.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    for (i, c) in chunk_files(&r.repo).iter().enumerate() {
        let name = c.file_name().unwrap().to_str().unwrap();
        if i % 2 == 0 {
            let data = std::fs::read(c).unwrap();
            std::fs::write(repo.join(format!("{name}.zst")), zstd::encode_all(&data[..], 3).unwrap()).unwrap();
        } else {
            std::fs::copy(c, repo.join(name)).unwrap();
        }
    }
    assert_eq!(recorder_ok(&["summary", "--json", s(&repo)]), recorder_ok(&["summary", "--json", s(&r.repo)]));
    // Compressed collapsed output decompresses to the plain one.
    let folded_zst = out.path().join("cpu.folded.zst");
    recorder_ok(&["dump", s(&r.repo), "--format", "collapsed", "--compress", "-o", s(&folded_zst)]);
    let folded = zstd::decode_all(&std::fs::read(&folded_zst).unwrap()[..]).unwrap();
    assert_eq!(String::from_utf8(folded).unwrap(), recorder_ok(&["dump", s(&r.repo), "--format", "collapsed"]));
}

#[test]
fn top_once_on_a_file_and_a_repository_prints_the_hot_functions() {
    let r = recording();
    for source in [&r.file, &r.repo] {
        let text = recorder_ok(&["top", "--once", "-n", "50", "--window", "1h", s(source)]);
        let samples = summary(&r.repo).0["jdk.ExecutionSample"];
        assert!(text.contains(&format!("{samples} CPU samples")), "{text}");
        for hot in ["fmt_hot_alpha", "fmt_hot_beta"] {
            let row = text.lines().find(|l| l.contains(hot)).unwrap_or_else(|| panic!("{hot} in\n{text}"));
            let pcts: Vec<f64> =
                row.split_whitespace().take(2).map(|p| p.trim_end_matches('%').parse().unwrap()).collect();
            // Self share depends on inlining (debug builds call out of the loop); total does not.
            assert!(pcts[0] > 0.0 && pcts[1] > 10.0 && pcts[1] >= pcts[0], "{hot} is hot: {row}");
        }
    }
    // A finished file prints once and exits, even without --once; so does the repository of a
    // stopped recording (its last chunk is final).
    let text = recorder_ok(&["top", s(&r.file)]);
    assert_eq!(text.matches("CPU samples").count(), 1, "{text}");
    let text = recorder_ok(&["top", "--interval", "10ms", s(&r.repo)]);
    assert_eq!(text.matches("CPU samples").count(), 1, "{text}");
}

#[test]
fn top_follows_a_live_repository() {
    let r = recording(); // the shared recording is done: this one records alone
    let _ = r;
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .flush_interval(Duration::from_millis(100))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_recorder"))
        .args(["top", "--interval", "200ms", "--window", "1h", s(&repo)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Tables are read as they come; the workload runs until three tables with more than 100
    // samples were printed (the machine may be loaded), or 30 s.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let sample_count = |l: &str| -> Option<u64> {
        l.strip_prefix("recorder top:")?.split(": ").nth(1)?.split_whitespace().next()?.parse().ok()
    };
    let stop = AtomicBool::new(false);
    let mut lines = Vec::new();
    std::thread::scope(|s| {
        let stop = &stop;
        let rec = &rec;
        std::thread::Builder::new()
            .name("fmt-live".into())
            .spawn_scoped(s, move || {
                rec.register_current_thread().unwrap();
                std::hint::black_box(fmt_hot_beta(stop))
            })
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut big_tables = 0;
        while big_tables < 3 && std::time::Instant::now() < deadline {
            let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else { continue };
            if sample_count(&line).is_some_and(|n| n > 100) {
                big_tables += 1;
            }
            lines.push(line);
        }
        stop.store(true, Ordering::Relaxed);
    });
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    // `dump --pid`: the running process (this one) writes what it recorded through its control
    // socket; the temporary file is removed afterwards.
    let pid = std::process::id().to_string();
    let folded = recorder_ok(&["dump", "--pid", &pid, "--format", "collapsed", "--thread", "fmt-live"]);
    let by_pid: u64 = parse_collapsed(&folded).iter().map(|(_, n)| n).sum();
    assert!(by_pid > 100 && folded.contains("fmt_hot_beta"), "{folded}");
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("recorder-dump-{pid}-from-")))
        .collect();
    assert!(leftovers.is_empty(), "temporary dumps are removed: {leftovers:?}");
    rec.stop().unwrap();
    assert_error(&recorder(&["dump", "--pid", "999999999", "--format", "json"]), &["--pid 999999999"]);
    let text = lines.join("\n");
    let counts: Vec<u64> = lines.iter().filter_map(|l| sample_count(l)).collect();
    assert!(counts.len() >= 3, "one table per refresh:\n{text}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "the window only grows: {counts:?}");
    assert!(*counts.last().unwrap() > 100, "samples of the live chunk were read: {counts:?}");
    assert!(text.contains("fmt_hot_beta"), "{text}");
    assert!(!text.contains("\x1b[2J"), "no screen clearing when stdout is not a terminal");
}

fn assert_error(out: &std::process::Output, needles: &[&str]) -> String {
    assert_eq!(out.status.code(), Some(2), "exit code 2: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "`{n}` in: {stderr}");
    }
    stderr
}

#[test]
fn bad_inputs_are_clear_errors() {
    let r = recording();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jfr");
    for format in ["json", "collapsed", "flamegraph"] {
        assert_error(&recorder(&["dump", s(&missing), "--format", format]), &["missing.jfr"]);
    }
    assert_error(&recorder(&["top", s(&missing)]), &["missing.jfr"]);
    let text = dir.path().join("notes.jfr");
    std::fs::write(&text, "this is not a flight recording, just some text that is long enough for a header").unwrap();
    assert_error(&recorder(&["dump", s(&text), "--format", "collapsed"]), &["notes.jfr", "offset 0x0"]);
    // Unknown event types are listed with the known ones.
    let e = assert_error(
        &recorder(&["dump", s(&r.file), "--format", "json", "--events", "jdk.NoSuchEvent"]),
        &["jdk.NoSuchEvent", "known types", "jdk.ExecutionSample"],
    );
    assert!(e.contains("jdk.ThreadEnd") || e.contains("jdk.CPULoad"), "{e}");
    // Truncated: the readable chunks are processed, then one error line, exit 2.
    let whole = std::fs::read(&r.file).unwrap();
    let first_chunk = u64::from_be_bytes(whole[8..16].try_into().unwrap()) as usize;
    assert!(first_chunk < whole.len(), "several chunks in the file");
    let cut = dir.path().join("cut.jfr");
    std::fs::write(&cut, &whole[..first_chunk + (whole.len() - first_chunk) / 2]).unwrap();
    let out = recorder(&["dump", s(&cut), "--format", "json"]);
    assert_error(&out, &["cut.jfr", "offset"]);
    // The complete chunks before the cut (the recording may have two chunks or more).
    let cut_at = first_chunk + (whole.len() - first_chunk) / 2;
    let mut complete = 0;
    while complete < cut_at {
        let size = u64::from_be_bytes(whole[complete + 8..complete + 16].try_into().unwrap()) as usize;
        if complete + size > cut_at {
            break;
        }
        complete += size;
    }
    let first = dir.path().join("first.jfr");
    std::fs::write(&first, &whole[..complete]).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), recorder_ok(&["dump", s(&first), "--format", "json"]));
    let out = recorder(&["dump", s(&cut), "--format", "collapsed"]);
    assert_error(&out, &["cut.jfr"]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), recorder_ok(&["dump", s(&first), "--format", "collapsed"]));
    // A truncated .zst: what decompresses is read, then one error line.
    let zst = dir.path().join("cut.jfr.zst");
    let compressed = zstd::encode_all(&whole[..], 3).unwrap();
    std::fs::write(&zst, &compressed[..compressed.len() * 3 / 4]).unwrap();
    assert_error(&recorder(&["summary", s(&zst)]), &["cut.jfr.zst", "zstd"]);
    // Collapsed of types without stacks is refused with the reason.
    assert_error(
        &recorder(&["dump", s(&r.file), "--format", "collapsed", "--events", "jdk.CPULoad"]),
        &["stack trace"],
    );
}

#[test]
fn recorder_compresses_finished_chunks_when_asked() {
    let r = recording(); // the shared recording is done: this one records alone
    let _ = r;
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .flush_interval(Duration::from_millis(100))
        .max_chunk_age(Duration::from_millis(300))
        .compress_finished_chunks(true)
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        let rec = &rec;
        std::thread::Builder::new()
            .name("fmt-zst".into())
            .spawn_scoped(s, move || {
                rec.register_current_thread().unwrap();
                std::hint::black_box(fmt_hot_alpha(stop))
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
    });
    // A dump while recording holds the compressed chunks, decompressed.
    let dumped = dir.path().join("dumped.jfr");
    rec.dump(&dumped).unwrap();
    jdk_accepts(std::slice::from_ref(&dumped));
    let report = rec.stop_with_report().unwrap();
    let names: Vec<String> =
        std::fs::read_dir(&repo).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let zst: Vec<&String> = names.iter().filter(|n| n.ends_with(".jfr.zst")).collect();
    assert!(zst.len() >= 2, "finished chunks are compressed: {names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".jfr") || n.ends_with(".part")), "no plain chunk is left: {names:?}");
    for n in &zst {
        assert_eq!(std::fs::read(repo.join(n)).unwrap()[..4], [0x28, 0xb5, 0x2f, 0xfd], "{n}");
    }
    let (counts, _, _) = summary(&repo);
    assert_eq!(counts["jdk.ExecutionSample"], report.stats.samples_written, "every sample is in the .zst chunks");
    assert!(summary(&dumped).0["jdk.ExecutionSample"] > 0);
}

/// `summary --json`'s threads: name → (CPU samples, other events).
fn summary_threads(path: &Path) -> BTreeMap<String, (u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(&recorder_ok(&["summary", "--json", s(path)])).unwrap();
    let mut out = BTreeMap::new();
    for t in v["threads"].as_array().expect("summary --json lists threads") {
        let e = out.entry(t["name"].as_str().unwrap().to_owned()).or_insert((0, 0));
        e.0 += t["cpu_samples"].as_u64().unwrap();
        e.1 += t["events"].as_u64().unwrap();
    }
    out
}

/// The name `print --json` gives an event's thread (as summary names it: Java name, else OS name).
fn thread_name(e: &serde_json::Value) -> Option<String> {
    let t = &e["thread"];
    t["javaName"].as_str().or(t["osName"].as_str()).map(str::to_owned)
}

// Summary lists threads with their event and sample counts, and the share of
// truncated / leaf-only stacks.
#[test]
fn summary_lists_threads_with_their_samples_and_events_and_the_stack_shares() {
    let r = recording();
    let threads = summary_threads(&r.file);
    let mut expected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut samples = 0;
    let (mut truncated, mut leaf_only) = (0, 0);
    for e in json_events(&["print", "--json", s(&r.file)]) {
        let Some(name) = thread_name(&e) else { continue };
        let row = expected.entry(name).or_default();
        if e["type"] == "jdk.ExecutionSample" {
            row.0 += 1;
            samples += 1;
            truncated += u64::from(e["stack"]["truncated"] == true);
            leaf_only += u64::from(e["stack"]["frames"].as_array().is_some_and(|f| f.len() == 1));
        } else {
            row.1 += 1;
        }
    }
    assert_eq!(threads, expected, "per thread: CPU samples and other events");
    assert!(threads.values().filter(|t| t.0 > 0).count() >= 2, "the two hot threads: {threads:?}");

    let v: serde_json::Value = serde_json::from_str(&recorder_ok(&["summary", "--json", s(&r.file)])).unwrap();
    let stacks = &v["cpu_sample_stacks"];
    assert_eq!(stacks["samples"], samples);
    assert_eq!(stacks["truncated"], truncated);
    assert_eq!(stacks["leaf_only"], leaf_only);

    let text = recorder_ok(&["summary", s(&r.file)]);
    assert!(text.contains(" Thread ") && text.contains("CPU samples"), "{text}");
    let (busiest, counts) = threads.iter().max_by_key(|(_, c)| c.0).unwrap();
    let row = text.lines().find(|l| l.starts_with(&format!(" {busiest} "))).unwrap_or_else(|| panic!("{text}"));
    assert!(row.split_whitespace().rev().nth(1) == Some(counts.0.to_string().as_str()), "{row}");
    assert!(text.contains(&format!("CPU sample stacks: {samples} samples;")), "{text}");
    assert!(text.contains("% truncated") && text.contains("% leaf-only"), "{text}");
}

// `--thread NAME` that matches nothing is an error listing the thread names (rc 2),
// like `--events`.
#[test]
fn thread_that_matches_nothing_is_an_error_listing_the_threads() {
    let r = recording();
    for format in ["jfr", "json", "collapsed"] {
        let out = recorder(&["dump", s(&r.file), "--format", format, "--thread", "no-such-thread", "-o", "/dev/null"]);
        let e = assert_error(&out, &["no-such-thread", "threads:"]);
        for name in summary_threads(&r.file).keys() {
            assert!(e.contains(name.as_str()), "{name} is listed: {e}");
        }
    }
}

// `dump --compress -o x.jfr` wrote zstd under a `.jfr` name (the JDK then says "Not a
// Flight Recorder file"). The output gets `.zst`, and stderr says so.
#[test]
fn compress_to_a_jfr_name_writes_a_jfr_zst_file() {
    let r = recording();
    let out = tempfile::tempdir().unwrap();
    let asked = out.path().join("whole.jfr");
    let run = recorder(&["dump", s(&r.file), "--compress", "-o", s(&asked)]);
    assert!(run.status.success(), "{run:?}");
    assert!(!asked.exists(), "no zstd data under a .jfr name");
    let written = out.path().join("whole.jfr.zst");
    assert_eq!(std::fs::read(&written).unwrap()[..4], [0x28, 0xb5, 0x2f, 0xfd], "zstd in whole.jfr.zst");
    assert!(String::from_utf8_lossy(&run.stderr).contains("whole.jfr.zst"), "the name written is said");
    // A name that says zstd already is kept.
    let named = out.path().join("named.zst");
    recorder_ok(&["dump", s(&r.file), "--compress", "-o", s(&named)]);
    assert!(named.exists() && !out.path().join("named.zst.zst").exists());
}

/// Sums collapsed weights by the first (outermost) frame.
fn sums_by_root(lines: &[(String, u64)]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (stack, n) in lines {
        *out.entry(stack.split(';').next().unwrap().to_owned()).or_default() += n;
    }
    out
}

// Flame graphs with one root per thread.
#[test]
fn by_thread_roots_each_stack_at_its_thread() {
    let r = recording();
    let lines = parse_collapsed(&recorder_ok(&["dump", s(&r.file), "--format", "collapsed", "--by-thread"]));
    let expected: BTreeMap<String, u64> = summary_threads(&r.file)
        .into_iter()
        .filter(|(_, c)| c.0 > 0)
        .map(|(name, c)| (format!("[{}]", name.replace(char::is_whitespace, "_")), c.0))
        .collect();
    assert_eq!(sums_by_root(&lines), expected, "one root per thread, weighing its CPU samples");
    // Without the thread roots, the same stacks.
    let mut unrooted: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, n) in &lines {
        *unrooted.entry(stack.split_once(';').unwrap().1.to_owned()).or_default() += n;
    }
    let plain: BTreeMap<String, u64> =
        parse_collapsed(&recorder_ok(&["dump", s(&r.file), "--format", "collapsed"])).into_iter().collect();
    assert_eq!(unrooted, plain);
    let svg = recorder_ok(&["dump", s(&r.file), "--format", "flamegraph", "--by-thread"]);
    let doc = parse_svg(&svg);
    let titles: Vec<&str> = doc.descendants().filter(|n| n.has_tag_name("title")).filter_map(|n| n.text()).collect();
    for root in expected.keys() {
        assert!(titles.iter().any(|t| t.starts_with(root.as_str())), "{root} has a frame");
    }
}

/// Frames of the thread-start boilerplate of Rust threads (std and the C library).
const RUNTIME_FRAMES: [&str; 4] = ["__rust_begin_short_backtrace", "start_thread", "clone3", "catch_unwind"];

// The std thread-start boilerplate frames are folded away by default.
#[test]
fn runtime_frames_are_folded_away_unless_kept() {
    let r = recording();
    let folded = parse_collapsed(&recorder_ok(&["dump", s(&r.file), "--format", "collapsed"]));
    let kept = parse_collapsed(&recorder_ok(&["dump", s(&r.file), "--format", "collapsed", "--keep-runtime-frames"]));
    let total = |l: &[(String, u64)]| l.iter().map(|(_, n)| n).sum::<u64>();
    assert_eq!(total(&folded), total(&kept), "every sample is still counted");
    // (A stack of boilerplate only, a thread sampled before it reached its closure, keeps its
    // innermost frame.)
    for (stack, _) in folded.iter().filter(|(stack, _)| stack.contains(';')) {
        for f in RUNTIME_FRAMES {
            assert!(!stack.contains(f), "{f} is folded away: {stack}");
        }
    }
    // The hot threads' full stacks reach the thread start: kept, they show it; folded, they start
    // with the test's own closure, the frame just inside std's __rust_begin_short_backtrace.
    let full: Vec<&(String, u64)> = kept
        .iter()
        .filter(|(st, _)| st.contains("fmt_hot_alpha") && st.contains("__rust_begin_short_backtrace"))
        .collect();
    assert!(!full.is_empty(), "stacks of the hot thread reach its start: {kept:?}");
    for (stack, _) in full {
        let inside = stack.split("__rust_begin_short_backtrace;").nth(1).unwrap();
        assert!(folded.iter().any(|(st, _)| st == inside), "{inside} is a folded stack");
    }
    // pprof too.
    let out = tempfile::tempdir().unwrap();
    let (plain, with) = (out.path().join("plain.pb.gz"), out.path().join("with.pb.gz"));
    recorder_ok(&["dump", s(&r.file), "--format", "pprof", "-o", s(&plain)]);
    recorder_ok(&["dump", s(&r.file), "--format", "pprof", "--keep-runtime-frames", "-o", s(&with)]);
    let top = |p: &Path| go_pprof(&["-top", "-nodecount=1000", "-sample_index=samples", s(p)]);
    assert!(!top(&plain).contains("__rust_begin_short_backtrace"));
    assert!(top(&with).contains("__rust_begin_short_backtrace"));
}

// `dump --format pprof`, read by `go tool pprof`.
#[test]
fn pprof_profile_is_read_by_go_tool_pprof() {
    let r = recording();
    let out = tempfile::tempdir().unwrap();
    let profile = out.path().join("cpu.pb.gz");
    recorder_ok(&["dump", s(&r.repo), "--format", "pprof", "-o", s(&profile)]);
    assert_eq!(std::fs::read(&profile).unwrap()[..2], [0x1f, 0x8b], "gzip");
    let samples = summary(&r.file).0["jdk.ExecutionSample"];
    let top = go_pprof(&["-top", "-sample_index=samples", s(&profile)]);
    assert!(top.contains("Type: samples"), "{top}");
    assert_eq!(pprof_total(&top), samples.to_string(), "every CPU sample");
    for hot in ["fmt_hot_alpha", "fmt_hot_beta"] {
        assert!(top.contains(hot), "{hot} in {top}");
    }
    // Each sample is one 1 ms sampling period of CPU time.
    let cpu = go_pprof(&["-top", "-sample_index=cpu", "-unit=ns", s(&profile)]);
    assert!(cpu.contains("Type: cpu"), "{cpu}");
    assert_eq!(pprof_total(&cpu), format!("{}ns", samples * 1_000_000));
    // Samples are labelled with their thread.
    let raw = go_pprof(&["-raw", s(&profile)]);
    for (name, counts) in summary_threads(&r.file) {
        if counts.0 > 0 {
            assert!(raw.contains(&format!("thread:[{name}]")), "{name} labels its samples:\n{raw}");
        }
    }
}

// A differential flame graph of two recordings, and its collapsed form.
#[test]
fn diff_compares_the_samples_of_two_recordings() {
    let r = recording();
    let out = tempfile::tempdir().unwrap();
    let threads = summary_threads(&r.file);
    let (busiest, counts) = threads.iter().max_by_key(|(_, c)| c.0).unwrap();
    // AFTER: the samples of one thread only.
    let after = out.path().join("one-thread.jfr");
    recorder_ok(&["dump", s(&r.file), "--thread", busiest, "-o", s(&after)]);
    let before_total = summary(&r.file).0["jdk.ExecutionSample"];
    let after_total = summary(&after).0["jdk.ExecutionSample"];
    assert_eq!(after_total, counts.0);
    let lines: Vec<(String, u64, u64)> =
        recorder_ok(&["diff", "--format", "collapsed", "--no-normalize", s(&r.file), s(&after)])
            .lines()
            .map(|l| {
                let mut parts = l.rsplitn(3, ' ');
                let b = parts.next().unwrap().parse().unwrap();
                let a = parts.next().unwrap().parse().unwrap();
                (parts.next().unwrap().to_owned(), a, b)
            })
            .collect();
    assert_eq!(lines.iter().map(|l| l.1).sum::<u64>(), before_total, "BEFORE's column counts its samples");
    assert_eq!(lines.iter().map(|l| l.2).sum::<u64>(), after_total, "AFTER's column counts its samples");
    assert!(lines.iter().any(|l| l.1 > 0 && l.2 == 0), "stacks of the other threads are gone in AFTER");
    // Normalized (the default): BEFORE scaled to AFTER's total, up to rounding per line.
    let normalized: u64 = recorder_ok(&["diff", "--format", "collapsed", s(&r.file), s(&after)])
        .lines()
        .map(|l| l.rsplit(' ').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(normalized.abs_diff(after_total) <= lines.len() as u64, "{normalized} vs {after_total}");
    let svg_path = out.path().join("diff.svg");
    recorder_ok(&["diff", s(&r.file), s(&after), "-o", s(&svg_path)]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = parse_svg(&svg);
    assert!(doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .any(|t| t.contains("fmt_hot")));
}
