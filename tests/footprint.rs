//! The recorder's own memory: `recorder.Footprint` names its parts, and the symbolizer's share of
//! the memory budget bounds the debug info it inflates (`src/symbolize/memory.rs`).

mod common;

use common::*;
use recorder::symbolize::{set_memory_limit, Symbolizer};
use recorder::Recorder;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn footprint_events_name_each_part_and_sum_to_their_total() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .periodic_interval(Duration::from_millis(100))
        .flush_interval(Duration::from_millis(100))
        .symbol_memory(1 << 20)
        .start()
        .unwrap();
    let out = dir.path().join("d.jfr");
    // Wait until a footprint taken after the first samples were named is in a dump (the deadline
    // turns a hang into a failure, never a pass). This test binary's debug info (tens of MB)
    // does not fit 1 MiB: it is named from its symbol table from then on, and reported.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let last = loop {
        spin_cpu(Duration::from_millis(50));
        rec.dump(&out).unwrap();
        let events = read_events(&out, "recorder.Footprint");
        if let Some(e) = events.into_iter().last().filter(|e| e.field_i64("symbolsOnlyModules") > 0) {
            break e;
        }
        assert!(std::time::Instant::now() < deadline, "no recorder.Footprint with a module named from symbols");
    };
    rec.stop().unwrap();
    let parts = [
        "eventBuffers",
        "samplerBuffers",
        "allocationPool",
        "stackTable",
        "unwindTables",
        "ownCode",
        "symbolizerHeap",
        "mappedDebugFiles",
    ];
    let sum: i64 = parts.iter().map(|p| last.field_i64(p)).sum();
    assert_eq!(last.field_i64("total"), sum, "{:?}", last.fields);
    // What is resident of the default stack table (2^18 nodes of 24 bytes) and sampler buffers
    // (128 threads x 3 x 16 KiB): the pages written, some but not all of them.
    let (table, buffers) = (last.field_i64("stackTable"), last.field_i64("samplerBuffers"));
    assert!(table > 0 && table < (1 << 18) * 24, "{table}");
    assert!(buffers > 0 && buffers < 128 * 3 * 16 * 1024, "{buffers}");
    assert!(last.field_i64("unwindTables") > 0, "{:?}", last.fields);
    assert_eq!(last.field_i64("ownCode"), 0, "linked into this executable: its code is the program's");
    assert_eq!(last.field_i64("symbolizerLimit"), 1 << 20);
    let dropped = last.field("symbolsOnly").as_str().unwrap().to_owned();
    assert!(dropped.contains("footprint-"), "this test binary is named: {dropped}");
    assert_eq!(last.field_i64("mappedDebugFiles"), 0, "its file is no longer mapped: {:?}", last.fields);
    let printed = jdk("jfr", &["print", "--events", "recorder.Footprint", out.to_str().unwrap()]);
    assert!(printed.contains("recorder.Footprint") && printed.contains("stackTable = "), "{printed}");
    jdk_accepts(&[out]);
}

/// A shared library with one function, its DWARF compressed (`-gz`, as Debian's debug files).
fn compressed_dwarf_library(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("lib.c");
    std::fs::write(
        &src,
        "int footprint_lib_work(int n) {\n  int s = 0;\n  for (int i = 0; i < n; i++) s += i * i;\n  return s;\n}\n",
    )
    .unwrap();
    let lib = dir.join("libfootprint.so");
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-g", "-gz=zlib", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    lib
}

#[test]
fn compressed_debug_info_over_the_symbolizers_share_is_named_from_symbols_and_reported() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let lib = compressed_dwarf_library(dir.path());
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; the library has no constructors. It stays loaded.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null());
    // SAFETY: a NUL-terminated name in a library just loaded.
    let work = unsafe { libc::dlsym(handle, c"footprint_lib_work".as_ptr()) } as u64;
    assert_ne!(work, 0);

    // Unbounded (no recording): the DWARF gives the line.
    set_memory_limit(usize::MAX);
    let mut s = Symbolizer::new();
    let f = s.symbolize(work, false).last().unwrap().clone();
    assert_eq!(f.function, "footprint_lib_work");
    assert!(f.line.is_some(), "{f:?}");
    assert!(s.symbols_only().is_empty());

    // No room: the symbol table names it, without a line, and the module is reported.
    set_memory_limit(0);
    let mut s = Symbolizer::new();
    let f = s.symbolize(work, false).last().unwrap().clone();
    set_memory_limit(usize::MAX);
    assert_eq!(f.function, "footprint_lib_work");
    assert_eq!(f.line, None, "{f:?}");
    assert_eq!(s.symbols_only().len(), 1);
    let (module, bytes) = &s.symbols_only()[0];
    assert_eq!(module, "libfootprint.so");
    assert!(*bytes > 0);
}
