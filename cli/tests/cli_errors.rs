//! Bad and unusual input: missing paths, non-JFR files, truncated and damaged files, and chunk
//! directories (JDK repository layout).

mod common;

use common::*;
use std::path::Path;

/// Asserts exit code 2 and exactly one stderr line that names `file` and contains `needles`.
fn assert_one_line_error(out: &std::process::Output, file: &Path, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "exit code; stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(&file.display().to_string()), "names the file: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} in {err}");
    }
    err
}

#[test]
fn missing_path_is_an_error() {
    let path = scratch_dir().join("does-not-exist.jfr");
    for args in [vec!["summary"], vec!["print", "--json"], vec!["dump", "-o", "/dev/null"]] {
        let mut args = args.clone();
        args.insert(1, path.to_str().unwrap());
        let out = recorder(&args);
        assert_one_line_error(&out, &path, &["No such file"]);
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn non_jfr_file_is_an_error_at_offset_zero() {
    let path = scratch_dir().join("not-jfr.jfr");
    std::fs::write(&path, "this is plain text, not a flight recording\n".repeat(4)).unwrap();
    let out = recorder(&["summary", "--json", path.to_str().unwrap()]);
    assert_one_line_error(&out, &path, &["offset 0x0", "not a JFR chunk"]);
    let out = recorder(&["print", path.to_str().unwrap()]);
    assert_one_line_error(&out, &path, &["offset 0x0"]);
    assert!(out.stdout.is_empty());

    let empty = scratch_dir().join("empty.jfr");
    std::fs::write(&empty, b"").unwrap();
    let out = recorder(&["summary", empty.to_str().unwrap()]);
    assert_one_line_error(&out, &empty, &["offset 0x0", "empty"]);
}

/// Writes the first `n` chunks of the JVM recording to `name`; returns the path.
fn prefix_file(name: &str, n: usize) -> std::path::PathBuf {
    let data = std::fs::read(jvm_recording()).unwrap();
    let spans = chunk_spans(&data);
    let end = spans[n - 1].0 + spans[n - 1].1;
    let path = scratch_dir().join(name);
    std::fs::write(&path, &data[..end]).unwrap();
    path
}

#[test]
fn truncated_file_prints_the_readable_chunks_then_fails_with_the_offset() {
    let data = std::fs::read(jvm_recording()).unwrap();
    let spans = chunk_spans(&data);
    assert!(spans.len() >= 2, "the recording has several chunks");
    let (last_start, last_size) = *spans.last().unwrap();
    let cut = last_start + last_size / 2;
    let truncated = scratch_dir().join("truncated.jfr");
    std::fs::write(&truncated, &data[..cut]).unwrap();
    let complete = prefix_file("complete-prefix.jfr", spans.len() - 1);
    let t = truncated.to_str().unwrap();
    let c = complete.to_str().unwrap();

    let out = recorder(&["summary", "--json", t]);
    let err = assert_one_line_error(&out, &truncated, &[&format!("offset {cut:#x}")]);
    assert!(err.contains("data ends"), "{err}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        recorder_ok(&["summary", "--json", c]),
        "summary of the readable chunks"
    );

    let out = recorder(&["print", "--json", t]);
    assert_one_line_error(&out, &truncated, &[&format!("offset {cut:#x}")]);
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(!printed.is_empty());
    assert_eq!(printed, recorder_ok(&["print", "--json", c]), "events up to the damage");

    let out = recorder(&["print", t]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stdout, recorder_ok(&["print", c]).into_bytes());

    // dump writes the readable chunks as a valid recording, and still reports the damage.
    let dumped = scratch_dir().join("dumped-truncated.jfr");
    let out = recorder(&["dump", t, "-o", dumped.to_str().unwrap()]);
    assert_one_line_error(&out, &truncated, &[&format!("offset {cut:#x}")]);
    let d = dumped.to_str().unwrap();
    jfr_ok(&["summary", d]);
    assert_eq!(recorder_ok(&["print", "--json", d]), recorder_ok(&["print", "--json", c]));
}

#[test]
fn damaged_chunk_header_names_its_offset() {
    let mut data = std::fs::read(jvm_recording()).unwrap();
    let spans = chunk_spans(&data);
    let second = spans[1].0;
    data[second..second + 4].copy_from_slice(b"XXXX");
    let path = scratch_dir().join("bad-magic.jfr");
    std::fs::write(&path, &data).unwrap();
    let out = recorder(&["print", "--json", path.to_str().unwrap()]);
    assert_one_line_error(&out, &path, &[&format!("offset {second:#x}"), "not a JFR chunk"]);
    let first = prefix_file("first-chunk.jfr", 1);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), recorder_ok(&["print", "--json", first.to_str().unwrap()]));
}

#[test]
fn damaged_event_record_prints_the_events_before_it() {
    let mut data = std::fs::read(jvm_recording()).unwrap();
    let spans = chunk_spans(&data);
    // Find the 1000th recorder.test.Work event of the last chunk by our own print, then break
    // the size of the record that follows it.
    let last = spans.len();
    let single = prefix_file("whole.jfr", last);
    let lines = recorder_ok(&["print", "--json", single.to_str().unwrap()]);
    assert!(lines.lines().count() > 1000);
    // Zero the size varint of a record in the middle of the last chunk: walk records from the
    // chunk's first record.
    let (start, size) = spans[last - 1];
    let mut pos = start + 68;
    let mut records = 0;
    loop {
        let (len, n) = read_varint(&data[pos..]);
        assert!(n > 0 && len > 0);
        let (type_id, _) = read_varint(&data[pos + n..]);
        // An event record (not metadata or a checkpoint, which the chunk parse itself reads).
        if pos >= start + size / 2 && type_id > 1 {
            break;
        }
        pos += len as usize;
        records += 1;
    }
    assert!(records > 10);
    data[pos] = 0; // a record of size 0
    let path = scratch_dir().join("bad-record.jfr");
    std::fs::write(&path, &data).unwrap();
    let out = recorder(&["print", "--json", path.to_str().unwrap()]);
    assert_one_line_error(&out, &path, &[&format!("offset {pos:#x}")]);
    let printed = String::from_utf8(out.stdout).unwrap();
    let before = recorder_ok(&["print", "--json", prefix_file("before.jfr", last - 1).to_str().unwrap()]);
    assert!(
        printed.starts_with(&before) && printed.len() > before.len(),
        "all earlier chunks and part of the damaged one are printed"
    );
    // The same when the chunks are rendered in many small parallel units.
    let split = std::process::Command::new(env!("CARGO_BIN_EXE_recorder"))
        .args(["print", "--json", path.to_str().unwrap()])
        .env("RECORDER_PRINT_UNIT_BYTES", "20000")
        .output()
        .unwrap();
    assert_one_line_error(&split, &path, &[&format!("offset {pos:#x}")]);
    assert!(String::from_utf8(split.stdout).unwrap() == printed);
    let out = recorder(&["summary", path.to_str().unwrap()]);
    assert_one_line_error(&out, &path, &[&format!("offset {pos:#x}")]);
}

fn read_varint(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(9) {
        if i == 8 {
            return (v | (u64::from(byte) << 56), 9);
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    (0, 0)
}

#[test]
fn directory_of_chunk_files_reads_like_the_file() {
    let data = std::fs::read(jvm_recording()).unwrap();
    let spans = chunk_spans(&data);
    assert!(spans.len() >= 2);
    let root = scratch_dir().join("repository");
    let _ = std::fs::remove_dir_all(&root);
    // JDK layout: <root>/<yyyy_MM_dd_HH_mm_ss>_<pid>/<name>.jfr. Names sort in the opposite order
    // of the chunks' start times: ordering must come from the headers.
    let sub = root.join("2026_11_29_16_36_53_10829");
    std::fs::create_dir_all(&sub).unwrap();
    for (i, &(start, size)) in spans.iter().enumerate() {
        let name = format!("2026_11_29_16_36_{:02}.jfr", 59 - i);
        std::fs::write(sub.join(name), &data[start..start + size]).unwrap();
    }
    std::fs::write(sub.join("notes.txt"), "ignored").unwrap();
    std::fs::write(sub.join("2026_11_29_16_37_00.jfr"), b"").unwrap(); // just created: skipped
                                                                       // A live chunk that has published its header but no metadata yet: skipped in a directory (as
                                                                       // the JDK's repository reader does), an error when named as a file.
    let mut live = data[..200].to_vec();
    live[8..16].copy_from_slice(&200u64.to_be_bytes()); // size
    live[16..32].fill(0); // no checkpoint, no metadata
    live[64] = 1; // in progress
    let live_path = sub.join("2026_11_29_16_37_01.jfr");
    std::fs::write(&live_path, &live).unwrap();
    let out = recorder(&["summary", live_path.to_str().unwrap()]);
    assert_one_line_error(&out, &live_path, &["no metadata"]);
    let file = jvm_recording().to_str().unwrap();
    for dir in [&root, &sub] {
        let d = dir.to_str().unwrap();
        assert_eq!(recorder_ok(&["summary", "--json", d]), recorder_ok(&["summary", "--json", file]));
        assert_eq!(recorder_ok(&["print", "--json", d]), recorder_ok(&["print", "--json", file]));
    }
    let out = scratch_dir().join("from-dir.jfr");
    recorder_ok(&["dump", root.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let (orig, dumped) =
        (recorder_ok(&["summary", "--json", file]), recorder_ok(&["summary", "--json", out.to_str().unwrap()]));
    let counts =
        |s: &str| -> serde_json::Value { serde_json::from_str::<serde_json::Value>(s).unwrap()["events"].clone() };
    let (a, b) = (counts(&orig), counts(&dumped));
    for (name, row) in a.as_object().unwrap() {
        if name != "jdk.CheckPoint" {
            assert_eq!(row, &b[name], "{name}");
        }
    }
    jfr_ok(&["summary", out.to_str().unwrap()]);
}

#[test]
fn empty_directory_is_an_error() {
    let dir = scratch_dir().join("empty-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let out = recorder(&["summary", dir.to_str().unwrap()]);
    assert_one_line_error(&out, &dir, &["no readable .jfr"]);
}

// No empty summary table (or top table) printed before an error when nothing could
// be read.
#[test]
fn unreadable_input_prints_the_error_and_no_empty_table() {
    let path = scratch_dir().join("not-jfr-table.jfr");
    std::fs::write(&path, "this is plain text, not a flight recording\n".repeat(4)).unwrap();
    for args in [vec!["summary"], vec!["summary", "--json"], vec!["top", "--once"]] {
        let mut args = args.clone();
        args.push(path.to_str().unwrap());
        let out = recorder(&args);
        assert_one_line_error(&out, &path, &["offset 0x0"]);
        assert!(
            out.stdout.is_empty(),
            "{args:?} prints nothing but the error: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

// Error messages say each thing once ("X: X") and name the file the user asked for
// (not the temporary `x.jfr.part`).
#[test]
fn errors_say_each_thing_once_and_name_the_file_asked_for() {
    let rec = jvm_recording().to_str().unwrap();
    let missing = scratch_dir().join("no-such-dir");
    let _ = std::fs::remove_dir_all(&missing);
    let out_path = missing.join("out.jfr");
    let out = recorder(&["dump", rec, "-o", out_path.to_str().unwrap()]);
    let err = assert_one_line_error(&out, &out_path, &["No such file or directory"]);
    assert!(!err.contains(".part"), "names the file asked for: {err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "said once: {err}");
    // A library error that includes its cause, and returns it as its source too.
    let file = scratch_dir().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let repo = file.join("repo");
    let out = recorder(&["demo", "--seconds", "1", "--repository", repo.to_str().unwrap()]);
    let err = assert_one_line_error(&out, &repo, &["Not a directory"]);
    assert_eq!(err.matches("Not a directory").count(), 1, "said once: {err}");
}
