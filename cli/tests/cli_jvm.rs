//! `recorder summary/print/dump` against a JVM-made recording, checked against the JDK's `jfr`.

mod common;

use common::*;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const CUSTOM: &str = "recorder.test.AllKinds,recorder.test.Work,recorder.test.NoStack";

/// `jfr summary`'s table: type name to (count, bytes); and the chunk count.
fn jfr_summary(path: &str) -> (u64, BTreeMap<String, (u64, u64)>) {
    let text = jfr_ok(&["summary", path]);
    let chunks =
        text.lines().find_map(|l| l.trim().strip_prefix("Chunks:")).expect("a Chunks line").trim().parse().unwrap();
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("====") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if let [name, count, bytes] = cols[..] {
            rows.insert(name.to_owned(), (count.parse().unwrap(), bytes.parse().unwrap()));
        }
    }
    assert!(rows.len() > 10, "parsed jfr summary table: {text}");
    (chunks, rows)
}

fn our_summary(path: &str) -> Json {
    let out = recorder_ok(&["summary", "--json", path]);
    assert_eq!(out.lines().count(), 1, "summary --json prints one line");
    serde_json::from_str(&out).expect("summary --json is JSON")
}

fn jfr_events(path: &str, types: &str) -> Vec<Json> {
    jfr_events_depth(path, types, 10_000)
}

fn jfr_events_depth(path: &str, types: &str, stack_depth: usize) -> Vec<Json> {
    let depth = stack_depth.to_string();
    let text = jfr_ok(&["print", "--json", "--stack-depth", &depth, "--events", types, path]);
    let mut doc: Json = serde_json::from_str(&text).expect("jfr print --json is JSON");
    match doc["recording"]["events"].take() {
        Json::Array(events) => events,
        other => panic!("unexpected jfr output shape: {other}"),
    }
}

fn our_events(path: &str, types: &str) -> Vec<Json> {
    recorder_ok(&["print", "--json", "--events", types, path])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

/// Compares one of our values with the JDK's, allowing for representation: durations (JDK:
/// ISO-8601 strings, ours: ns), floats (JDK 17's Float.toString is not always shortest: compare
/// as f32 when either side is a float field).
fn same_value(path: &str, ours: &Json, jdk: &Json, float32: bool) -> Result<(), String> {
    let fail = || Err(format!("{path}: ours {ours} != jdk {jdk}"));
    match (ours, jdk) {
        (Json::Number(a), Json::String(b)) if b.starts_with("PT") => {
            if a.as_i64() == Some(parse_iso_duration_nanos(b)) {
                Ok(())
            } else {
                fail()
            }
        }
        (Json::Number(a), Json::Number(b)) => {
            if a.is_i64() && b.is_i64() {
                return if a == b { Ok(()) } else { fail() };
            }
            let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            let equal = if float32 { (x as f32).to_bits() == (y as f32).to_bits() } else { x == y };
            if equal {
                Ok(())
            } else {
                fail()
            }
        }
        (Json::Object(a), Json::Object(b)) => {
            if a.len() != b.len() {
                return Err(format!("{path}: keys differ: ours {ours} jdk {jdk}"));
            }
            for (k, bv) in b {
                let av = a.get(k).ok_or_else(|| format!("{path}.{k} missing in ours"))?;
                same_value(&format!("{path}.{k}"), av, bv, float32)?;
            }
            Ok(())
        }
        (Json::Array(a), Json::Array(b)) => {
            if a.len() != b.len() {
                return fail();
            }
            for (i, (av, bv)) in a.iter().zip(b).enumerate() {
                same_value(&format!("{path}[{i}]"), av, bv, float32)?;
            }
            Ok(())
        }
        _ => {
            if ours == jdk {
                Ok(())
            } else {
                fail()
            }
        }
    }
}

/// The recording's chunks, each in a file of its own (made once).
fn chunk_files_of_jvm_recording() -> &'static [PathBuf] {
    static FILES: OnceLock<Vec<PathBuf>> = OnceLock::new();
    FILES.get_or_init(|| {
        let rec = jvm_recording();
        let data = std::fs::read(rec).unwrap();
        let spans = chunk_spans(&data);
        assert!(spans.len() >= 2, "the workload should make several chunks, made {}", spans.len());
        spans
            .iter()
            .enumerate()
            .map(|(i, &(at, len))| {
                let file = rec.with_file_name(format!("chunk-{i}.jfr"));
                std::fs::write(&file, &data[at..at + len]).unwrap();
                file
            })
            .collect()
    })
}

/// What `jfr print` shows for the events of `types`, with the times of each chunk as that chunk's
/// own header gives them; each event tagged with its chunk's index. The events are those of
/// `jfr print` of the whole file (fields, threads, stacks); their start times are those of the
/// first chunk as shown there (asserted equal to the chunk read alone), and those of each later
/// chunk as `jfr print` shows that chunk alone.
///
/// Each chunk's ticks are converted with that chunk's own header (startNanos, startTicks,
/// ticksPerSecond); we do that (jfr_format's `ChunkHeader::ticks_to_epoch_nanos`, the JDK's
/// arithmetic). JDK 17's `jfr print` of a whole file does not: jdk.jfr.internal.consumer.
/// ChunkParser's constructor `ChunkParser(ChunkHeader header, ChunkParser previous,
/// ParserConfiguration pc)` makes a new `TimeConverter(chunkHeader, ...)` for each chunk but
/// hands it to a new `ParserFactory` only when `metadata != previousMetadata`; otherwise it keeps
/// `previous.parsers`, whose `EventParser`s hold the converter of the chunk that built them, and
/// `ChunkHeader.readMetadata(previous)` returns the previous descriptor when the metadata id is
/// unchanged, as it is for a JVM's later chunks. (Read in JDK 17.0.15's bytecode, `javap -c -p
/// --module jdk.jfr jdk.jfr.internal.consumer.ChunkParser`, and in openjdk/jdk's
/// src/jdk.jfr/share/classes/jdk/jfr/internal/consumer/ChunkParser.java at 1e60ff35a8a0, the
/// same code.) HotSpot samples a
/// chunk's two header clocks some time apart (ms on a loaded machine), so the first chunk's pair
/// is that far off for the later chunks; a chunk read alone gets its own converter.
///
/// `jfr print` orders events by end time within each chunk; two converters of one chunk differ
/// by a constant, so the chunk's events come in the same order whole or alone.
fn jdk_events_by_own_header(types: &str) -> Vec<(usize, Json)> {
    let mut whole = jfr_events(jvm_recording().to_str().unwrap(), types).into_iter();
    let mut out = Vec::new();
    for (i, file) in chunk_files_of_jvm_recording().iter().enumerate() {
        // Only the times are taken from here: one frame per stack keeps the document small.
        for alone in jfr_events_depth(file.to_str().unwrap(), types, 1) {
            let mut event = whole.next().expect("the whole file has the events of every chunk");
            let (w, a) = (&event["values"], &alone["values"]);
            assert_eq!(event["type"], alone["type"], "chunk {i}: same event order whole and alone");
            for field in ["eventThread", "sampledThread", "intValue", "iteration", "sequence"] {
                assert_eq!(w.get(field).map(thread_or_value), a.get(field).map(thread_or_value), "chunk {i}: {field}");
            }
            if i == 0 {
                assert_eq!(w["startTime"], a["startTime"], "the first chunk's times are the same whole or alone");
            }
            event["values"]["startTime"] = a["startTime"].clone();
            out.push((i, event));
        }
    }
    assert!(whole.next().is_none(), "every event of the file is in one chunk");
    out
}

/// A thread's Java id, or the value itself.
fn thread_or_value(v: &Json) -> Json {
    v.get("javaThreadId").cloned().unwrap_or_else(|| v.clone())
}

fn thread_id(thread: &Json) -> i64 {
    thread["javaThreadId"].as_i64().unwrap_or(-1)
}

/// A key that identifies a custom event of the workload: type, thread, and its unique field.
fn custom_key(kind: &str, thread: &Json, fields: &Json) -> (String, i64, i64) {
    let id = ["intValue", "iteration", "sequence"].iter().find_map(|f| fields[*f].as_i64()).expect("an id field");
    (kind.to_owned(), thread_id(thread), id)
}

#[test]
fn summary_json_counts_match_jfr_summary() {
    let rec = jvm_recording().to_str().unwrap();
    let (jdk_chunks, jdk_rows) = jfr_summary(rec);
    let ours = our_summary(rec);
    assert!(jdk_chunks >= 2, "the workload should make several chunks, made {jdk_chunks}");
    assert_eq!(ours["chunks"].as_u64(), Some(jdk_chunks));
    assert!(ours["start_ns"].as_i64().unwrap() > 1_600_000_000_000_000_000);
    assert!(ours["duration_ns"].as_i64().unwrap() > 0);
    let events = ours["events"].as_object().unwrap();
    for (name, (count, bytes)) in &jdk_rows {
        let row = events.get(name).unwrap_or_else(|| panic!("{name} missing from summary --json"));
        assert_eq!(row["count"].as_u64(), Some(*count), "count of {name}");
        assert_eq!(row["bytes"].as_u64(), Some(*bytes), "bytes of {name}");
    }
    assert_eq!(events.len(), jdk_rows.len(), "same event types as jfr summary");
    for name in ["jdk.Metadata", "jdk.CheckPoint", "jdk.ExecutionSample"] {
        assert!(events[name]["count"].as_u64().unwrap() > 0, "{name} rows");
    }
}

#[test]
fn summary_text_has_the_jfr_layout() {
    let rec = jvm_recording().to_str().unwrap();
    let text = recorder_ok(&["summary", rec]);
    for needle in [" Version: 2.1", " Chunks: ", " Start: ", " Duration: ", "Event Type"] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    assert!(text.lines().any(|l| l.starts_with(" recorder.test.AllKinds ")));
}

#[test]
fn print_json_custom_fields_match_jfr_print() {
    let rec = jvm_recording().to_str().unwrap();
    let jdk = jdk_events_by_own_header(CUSTOM);
    let ours = our_events(rec, CUSTOM);
    assert_eq!(ours.len(), jdk.len(), "number of custom events");
    assert!(ours.len() > 10_000);

    let mut jdk_by_key = BTreeMap::new();
    for (chunk, e) in &jdk {
        let v = &e["values"];
        let key = custom_key(e["type"].as_str().unwrap(), &v["eventThread"], v);
        assert!(jdk_by_key.insert(key, (chunk, e)).is_none(), "unique keys");
    }
    let mut types_seen = BTreeMap::new();
    let mut chunks_seen = std::collections::BTreeSet::new();
    for o in &ours {
        let kind = o["type"].as_str().unwrap();
        *types_seen.entry(kind.to_owned()).or_insert(0) += 1;
        let key = custom_key(kind, &o["thread"], &o["fields"]);
        let (chunk, j) = jdk_by_key.remove(&key).unwrap_or_else(|| panic!("no jfr event for {key:?}"));
        chunks_seen.insert(*chunk);
        let jv = &j["values"];
        assert_eq!(
            o["start_ns"].as_i64().unwrap(),
            epoch_nanos_of_iso(jv["startTime"].as_str().unwrap()),
            "start of {key:?} (chunk {chunk})"
        );
        assert_eq!(
            o["duration_ns"].as_i64().unwrap(),
            parse_iso_duration_nanos(jv["duration"].as_str().unwrap()),
            "duration of {key:?}"
        );
        same_value("thread", &o["thread"], &jv["eventThread"], false).unwrap();
        // Every field but the four that are top-level in our format.
        let mut expected = jv.as_object().unwrap().clone();
        for f in ["startTime", "duration", "eventThread", "stackTrace"] {
            expected.remove(f);
        }
        let fields = o["fields"].as_object().unwrap();
        assert_eq!(fields.len(), expected.len(), "fields of {key:?}");
        for (name, jdk_value) in &expected {
            same_value(name, &fields[name], jdk_value, name.as_str() == "floatValue")
                .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        }
        // Stack frames too (the custom events have stack traces except NoStack).
        match &jv["stackTrace"] {
            Json::Null => assert!(o["stack"].is_null(), "{key:?} has no stack"),
            st => assert_frames_match(&o["stack"], st, &format!("{key:?}")),
        }
    }
    assert!(jdk_by_key.is_empty());
    assert_eq!(types_seen.len(), 3, "all three custom types: {types_seen:?}");
    assert!(chunks_seen.len() >= 2, "custom events in several chunks: {chunks_seen:?}");
}

fn assert_frames_match(ours: &Json, jdk: &Json, what: &str) {
    assert_eq!(ours["truncated"], jdk["truncated"], "truncated flag of {what}");
    let of = ours["frames"].as_array().unwrap();
    let jf = jdk["frames"].as_array().unwrap();
    assert_eq!(of.len(), jf.len(), "frame count of {what}");
    for (i, (a, b)) in of.iter().zip(jf).enumerate() {
        let expected = (
            b["method"]["name"].as_str().unwrap(),
            b["method"]["type"]["name"].as_str().unwrap(),
            b["lineNumber"].as_i64().unwrap(),
            b["type"].as_str().unwrap(),
        );
        let got = (
            a["method"].as_str().unwrap(),
            a["class"].as_str().unwrap(),
            a["line"].as_i64().unwrap(),
            a["type"].as_str().unwrap(),
        );
        assert_eq!(got, expected, "frame {i} of {what}");
    }
}

#[test]
fn execution_sample_stacks_match_jfr_print() {
    let rec = jvm_recording().to_str().unwrap();
    let mut jdk = jdk_events_by_own_header("jdk.ExecutionSample");
    let mut ours = our_events(rec, "jdk.ExecutionSample");
    assert_eq!(ours.len(), jdk.len(), "number of samples");
    assert!(ours.len() >= 20, "the workload should be sampled: {}", ours.len());
    let jdk_key = |e: &Json| {
        (epoch_nanos_of_iso(e["values"]["startTime"].as_str().unwrap()), thread_id(&e["values"]["sampledThread"]))
    };
    let our_key = |e: &Json| (e["start_ns"].as_i64().unwrap(), thread_id(&e["thread"]));
    jdk.sort_by_key(|(_, e)| jdk_key(e));
    ours.sort_by_key(our_key);
    let mut workload_frames = 0;
    for (o, (chunk, j)) in ours.iter().zip(&jdk) {
        assert_eq!(our_key(o), jdk_key(j), "sample time and thread (chunk {chunk})");
        assert_eq!(o["fields"]["state"], j["values"]["state"]);
        assert_frames_match(&o["stack"], &j["values"]["stackTrace"], "sample");
        workload_frames +=
            o["stack"]["frames"].as_array().unwrap().iter().filter(|f| f["class"] == "JfrWorkload").count();
    }
    assert!(workload_frames > 0, "samples in the workload's own code");
}

#[test]
fn print_text_shows_fields_threads_and_stacks() {
    let rec = jvm_recording().to_str().unwrap();
    let text = recorder_ok(&["print", "--events", "recorder.test.Work", rec]);
    assert!(text.starts_with("recorder.test.Work {\n"), "{}", &text[..200]);
    for needle in [
        "  startTime = 20",
        "  duration = ",
        "  eventThread = \"worker-",
        "  stackTrace = [\n",
        "    JfrWorkload.emit line: ",
        "  iteration = ",
        "  phase = \"even\"",
    ] {
        assert!(text.contains(needle), "{needle:?} missing");
    }
    assert!(!text.contains("recorder.test.AllKinds"));
}

#[test]
fn print_json_lines_have_the_contract_shape() {
    let rec = jvm_recording().to_str().unwrap();
    let out = recorder_ok(&["print", "--json", rec]);
    let summary = our_summary(rec);
    let total: u64 = summary["events"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "jdk.Metadata" && *k != "jdk.CheckPoint")
        .map(|(_, v)| v["count"].as_u64().unwrap())
        .sum();
    assert_eq!(out.lines().count() as u64, total, "one line per event");
    let mut last_chunk_start = 0;
    for line in out.lines().step_by(97) {
        let e: Json = serde_json::from_str(line).unwrap();
        assert!(e["type"].is_string() && e["start_ns"].is_i64() && e["fields"].is_object());
        last_chunk_start = last_chunk_start.max(e["start_ns"].as_i64().unwrap());
    }
    assert!(last_chunk_start > summary["start_ns"].as_i64().unwrap());
}

#[test]
fn dump_keeps_only_the_chosen_types() {
    let rec = jvm_recording().to_str().unwrap();
    let out = scratch_dir().join("kept.jfr");
    let out = out.to_str().unwrap();
    let kept = "recorder.test.Work,jdk.ExecutionSample";
    recorder_ok(&["dump", rec, "-o", out, "--events", kept]);
    let (orig_chunks, orig) = jfr_summary(rec);
    let (chunks, rows) = jfr_summary(out);
    assert_eq!(chunks, orig_chunks);
    for (name, (count, _)) in &rows {
        let expected = match name.as_str() {
            "recorder.test.Work" | "jdk.ExecutionSample" | "jdk.Metadata" | "jdk.CheckPoint" => orig[name].0,
            _ => 0,
        };
        assert_eq!(*count, expected, "count of {name} after dump");
    }
    jfr_ok(&["print", out]);
    // Constants still resolve: the kept events print exactly as in the original.
    assert_eq!(
        recorder_ok(&["print", "--json", "--events", kept, out]),
        recorder_ok(&["print", "--json", "--events", kept, rec])
    );
    let bytes = std::fs::read(out).unwrap();
    let spans = chunk_spans(&bytes);
    for (i, &(start, _)) in spans.iter().enumerate() {
        assert_eq!(bytes[start + 64], 0, "chunk {i} finished");
        let last = i + 1 == spans.len();
        assert_eq!(bytes[start + 67] & 2 != 0, last, "final flag on chunk {i}");
    }
}

#[test]
fn dump_excludes_types() {
    let rec = jvm_recording().to_str().unwrap();
    let out = scratch_dir().join("excluded.jfr");
    let out = out.to_str().unwrap();
    recorder_ok(&["dump", rec, "-o", out, "--exclude-events", "recorder.test.AllKinds,jdk.ObjectAllocationSample"]);
    let (_, orig) = jfr_summary(rec);
    let (_, rows) = jfr_summary(out);
    for (name, (count, _)) in &rows {
        let expected = match name.as_str() {
            "recorder.test.AllKinds" | "jdk.ObjectAllocationSample" => 0,
            _ => orig[name].0,
        };
        assert_eq!(*count, expected, "count of {name} after dump");
    }
    let printed = jfr_ok(&["print", "--events", "recorder.test.Work", out]);
    assert_eq!(printed.matches("recorder.test.Work {").count() as u64, orig["recorder.test.Work"].0);
}

#[test]
fn dump_rejects_unknown_types_and_lists_the_known_ones() {
    let rec = jvm_recording().to_str().unwrap();
    let out = scratch_dir().join("unknown.jfr");
    let result = recorder(&["dump", rec, "-o", out.to_str().unwrap(), "--events", "recorder.test.Work,no.such.Type"]);
    assert_eq!(result.status.code(), Some(2));
    let err = String::from_utf8_lossy(&result.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("no.such.Type"), "{err}");
    assert!(err.contains("recorder.test.AllKinds") && err.contains("jdk.ExecutionSample"));
    assert!(!out.exists(), "nothing written");
}

#[test]
fn closed_stdout_is_success() {
    let rec = jvm_recording();
    let mut child = Command::new(env!("CARGO_BIN_EXE_recorder"))
        .args(["print", "--json"])
        .arg(rec)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1000];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // stdout is closed here, like `| head -c 1000`.
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty());
}

#[test]
fn every_subcommand_help_has_examples() {
    for sub in ["summary", "print", "dump"] {
        let help = recorder_ok(&[sub, "--help"]);
        assert!(help.contains("EXAMPLES:"), "{sub} --help: {help}");
        assert!(help.contains(&format!("recorder {sub} ")), "{sub} --help: {help}");
    }
}

#[test]
fn output_order_survives_splitting_chunks_into_small_units() {
    let rec = jvm_recording().to_str().unwrap();
    for args in [vec!["print", "--json", rec], vec!["print", rec]] {
        let whole = recorder_ok(&args);
        let split = Command::new(env!("CARGO_BIN_EXE_recorder"))
            .args(&args)
            .env("RECORDER_PRINT_UNIT_BYTES", "20000")
            .output()
            .unwrap();
        assert!(split.status.success());
        assert!(whole == String::from_utf8(split.stdout).unwrap(), "same output for {args:?}");
    }
}

#[test]
fn print_rejects_unknown_types_and_lists_the_known_ones() {
    let rec = jvm_recording().to_str().unwrap();
    let out = recorder(&["print", "--json", "--events", "jdk.NoSuchEvent", rec]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown event type jdk.NoSuchEvent; known types: "));
    assert!(err.contains("recorder.test.Work"));
}

// JVM frames use the same separator in print, collapsed and top (the JDK's dotted
// class names: java.lang.Thread.run, not java/lang/Thread.run).
#[test]
fn jvm_frames_are_named_alike_in_print_collapsed_and_top() {
    let rec = jvm_recording().to_str().unwrap();
    let frame = "java.lang.Thread.run";
    let printed = recorder_ok(&["print", "--events", "jdk.ExecutionSample", rec]);
    let collapsed = recorder_ok(&["dump", rec, "--format", "collapsed"]);
    let top = recorder_ok(&["top", "--once", "-n", "1000", "--window", "1h", rec]);
    for (view, text) in [("print", &printed), ("collapsed", &collapsed), ("top", &top)] {
        assert!(text.contains(frame), "{view} names {frame}:\n{text}");
        assert!(!text.contains("java/lang/"), "{view} uses one separator:\n{text}");
    }
    let jdk = jfr_ok(&["print", "--events", "jdk.ExecutionSample", rec]);
    assert!(jdk.contains(&format!("{frame}()")), "the JDK's own naming");
}

/// `jfr print --json` of jdk.ObjectAllocationSample: the sum of `weight`.
fn jdk_allocation_weight(rec: &str) -> u64 {
    jfr_events_depth(rec, "jdk.ObjectAllocationSample", 1).iter().map(|e| e["values"]["weight"].as_u64().unwrap()).sum()
}

// Allocation flame graphs of JVM recordings weigh jdk.ObjectAllocationSample by its
// `weight` (bytes), not one per sample.
#[test]
fn allocation_views_weigh_samples_by_their_bytes() {
    let rec = jvm_recording().to_str().unwrap();
    let bytes = jdk_allocation_weight(rec);
    let events = jfr_events_depth(rec, "jdk.ObjectAllocationSample", 1).len() as u64;
    assert!(bytes > events, "weights are bytes: {bytes} over {events} samples");
    let total =
        |text: &str| -> u64 { text.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum() };
    let by_type = recorder_ok(&["dump", rec, "--format", "collapsed", "--type", "alloc"]);
    assert_eq!(total(&by_type), bytes, "--type alloc");
    let by_events = recorder_ok(&["dump", rec, "--format", "collapsed", "--events", "jdk.ObjectAllocationSample"]);
    assert_eq!(total(&by_events), bytes, "--events jdk.ObjectAllocationSample");
    let svg = recorder_ok(&["dump", rec, "--format", "flamegraph", "--type", "alloc"]);
    assert!(svg.contains("bytes"), "the flame graph counts bytes");
    // pprof: alloc_space in bytes, alloc_samples one per sample.
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("alloc.pb.gz");
    recorder_ok(&["dump", rec, "--format", "pprof", "--type", "alloc", "-o", profile.to_str().unwrap()]);
    let space = go_pprof(&["-top", "-sample_index=alloc_space", "-unit=B", profile.to_str().unwrap()]);
    assert_eq!(pprof_total(&space), format!("{bytes}B"), "{space}");
    let count = go_pprof(&["-top", "-sample_index=alloc_samples", profile.to_str().unwrap()]);
    assert_eq!(pprof_total(&count), events.to_string(), "{count}");
    // CPU is the default and counts samples.
    let cpu = recorder_ok(&["dump", rec, "--format", "collapsed"]);
    assert_eq!(total(&cpu), jfr_events_depth(rec, "jdk.ExecutionSample", 1).len() as u64);
    // No wall-clock samples in a JVM recording: said, not an empty graph.
    let out = recorder(&["dump", rec, "--format", "flamegraph", "--type", "wall"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no wall-clock samples"), "{out:?}");
}
