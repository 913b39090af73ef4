//! A base directory holding several recordings: `summary`, `print`, `dump` and
//! `top` read the newest and name the others (`--all` merges them), and `repair BASE` repairs
//! every recording below it, leaving live ones alone.

mod common;

use common::*;
use jfr_format::ChunkHeader;
use recorder::{Event, Recorder};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

recorder::event! {
    #[event(name = "cli.First", label = "First")]
    pub struct First { pub n: u64 }
}

recorder::event! {
    #[event(name = "cli.Second", label = "Second")]
    pub struct Second { pub n: u64 }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Records in `base` while `work` runs; returns the recording's directory.
fn record(base: &Path, work: impl FnOnce()) -> PathBuf {
    let _guard = serial();
    let rec = Recorder::builder().repository(base).no_sampling().start().unwrap();
    let dir = rec.repository_dir().to_owned();
    work();
    rec.stop().unwrap();
    dir
}

/// `summary --json`: event counts, and the chunk count.
fn counts(args: &[&str]) -> (BTreeMap<String, u64>, u64, String) {
    let out = recorder(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let counts =
        v["events"].as_object().unwrap().iter().map(|(k, e)| (k.clone(), e["count"].as_u64().unwrap())).collect();
    (counts, v["chunks"].as_u64().unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn name_of(dir: &Path) -> &str {
    dir.file_name().unwrap().to_str().unwrap()
}

#[test]
fn a_base_directory_reads_its_newest_recording_and_names_the_others() {
    let base = tempfile::tempdir().unwrap();
    let first = record(base.path(), || (0..3).for_each(|n| First { n }.commit()));
    let second = record(base.path(), || (0..5).for_each(|n| Second { n }.commit()));
    assert_ne!(first, second);

    let (newest, chunks, note) = counts(&["summary", "--json", s(base.path())]);
    assert_eq!(newest.get("cli.Second"), Some(&5), "{newest:?}");
    assert_eq!(newest.get("cli.First").copied().unwrap_or(0), 0, "the older recording is not merged: {newest:?}");
    assert_eq!(chunks, chunk_files(&second).len() as u64);
    assert!(note.contains(name_of(&second)) && note.contains(name_of(&first)) && note.contains("--all"), "{note}");

    let (all, chunks, _) = counts(&["summary", "--json", "--all", s(base.path())]);
    assert_eq!((all.get("cli.First"), all.get("cli.Second")), (Some(&3), Some(&5)), "{all:?}");
    assert_eq!(chunks, (chunk_files(&first).len() + chunk_files(&second).len()) as u64);

    let printed = recorder_ok(&["print", "--json", "--events", "cli.Second", s(base.path())]);
    assert_eq!(printed.lines().count(), 5);
    let out = tempfile::tempdir().unwrap();
    let dumped = out.path().join("newest.jfr");
    let newest_only = recorder(&["dump", s(base.path()), "-o", s(&dumped)]);
    assert!(newest_only.status.success(), "{newest_only:?}");
    assert!(!String::from_utf8_lossy(&newest_only.stderr).contains("warning"), "{newest_only:?}");
    let jdk = jfr_summary_counts(&dumped);
    assert_eq!((jdk.get("cli.First").copied().unwrap_or(0), jdk.get("cli.Second")), (0, Some(&5)), "{jdk:?}");
    let merged = out.path().join("all.jfr");
    // The merge says that the JDK may misname what the recordings' overlapping ids name.
    let all_out = recorder(&["dump", "--all", s(base.path()), "-o", s(&merged)]);
    assert!(all_out.status.success(), "{all_out:?}");
    let warned = String::from_utf8_lossy(&all_out.stderr);
    assert!(warned.contains("warning: the output merges 2 recordings") && warned.contains("without --all"), "{warned}");
    let jdk = jfr_summary_counts(&merged);
    assert_eq!((jdk.get("cli.First"), jdk.get("cli.Second")), (Some(&3), Some(&5)), "{jdk:?}");
    let top = recorder_ok(&["top", "--once", s(base.path())]);
    assert!(top.contains(name_of(&second)), "top follows the newest recording: {top}");
}

/// Leaves `dir`'s newest chunk as a killed writer does: in progress, with bytes after its
/// published size.
fn kill_newest_chunk(dir: &Path) -> PathBuf {
    let newest = chunk_files(dir).pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes[64] = 7; // a generation: in progress
    bytes[67] = 1; // compressed ints, no final flag
    bytes.extend_from_slice(&[0x55; 300]);
    std::fs::write(&newest, bytes).unwrap();
    newest
}

fn header(path: &Path) -> ChunkHeader {
    ChunkHeader::parse(&std::fs::read(path).unwrap(), 0).unwrap()
}

#[test]
fn repair_of_a_base_repairs_every_recording_below_it_and_leaves_live_ones_alone() {
    let made = tempfile::tempdir().unwrap();
    let source = record(made.path(), || (0..4).for_each(|n| First { n }.commit()));
    let base = tempfile::tempdir().unwrap();
    // A live recording in the base (started first: a starting recorder repairs dead siblings
    // itself, and this test is about `recorder repair`).
    let _guard = serial();
    let live = Recorder::builder().repository(base.path()).no_sampling().start().unwrap();
    let live_dir = live.repository_dir().to_owned();
    let mut killed = Vec::new();
    for name in ["2026_01_01_00_00_01_999999991", "2026_01_01_00_00_02_999999992"] {
        let dir = base.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        for f in chunk_files(&source) {
            std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
        }
        let newest = kill_newest_chunk(&dir);
        assert!(!header(&newest).is_finished());
        killed.push((dir, newest));
    }

    let out = recorder_ok(&["repair", s(base.path())]);
    for (dir, newest) in &killed {
        assert!(out.contains(&format!("closed   {}", newest.display())), "{out}");
        let h = header(newest);
        assert!(h.is_finished() && h.is_final(), "{}: repaired", newest.display());
        for f in chunk_files(dir) {
            assert_eq!(std::fs::metadata(&f).unwrap().len(), header(&f).chunk_size as u64, "{}", f.display());
            jfr_ok(&["summary", s(&f)]);
        }
    }
    assert!(out.contains(&format!("live     {}", live_dir.display())), "the live recording is named: {out}");
    // Left alone: it keeps recording.
    First { n: 99 }.commit();
    live.stop().unwrap();
    assert!(chunk_files(&live_dir).iter().all(|f| header(f).is_finished()));
    // Repairing again finds nothing to do.
    let again = recorder_ok(&["repair", s(base.path())]);
    assert!(again.lines().all(|l| l.ends_with("nothing to repair")), "{again}");
}
