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

/// A shared library `lib{name}.so` with one function, `{name}_work`, built with -g (its DWARF
/// compressed with `-gz`, as Debian's debug files, when `compressed`), loaded; returns the
/// function's address.
fn load_library(dir: &Path, name: &str, compressed: bool) -> u64 {
    let src = dir.join(format!("{name}.c"));
    let body = format!(
        "int {name}_work(int n) {{\n  int s = 0;\n  for (int i = 0; i < n; i++) s += i * i;\n  return s;\n}}\n"
    );
    std::fs::write(&src, body).unwrap();
    let lib = dir.join(format!("lib{name}.so"));
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1", "-g"])
        .args(compressed.then_some("-gz=zlib"))
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; the library has no constructors. It stays loaded.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null());
    let symbol = std::ffi::CString::new(format!("{name}_work")).unwrap();
    // SAFETY: a NUL-terminated name in a library just loaded.
    let work = unsafe { libc::dlsym(handle, symbol.as_ptr()) } as u64;
    assert_ne!(work, 0);
    work
}

#[test]
fn a_module_whose_mapped_debug_info_exceeds_the_limit_is_named_from_symbols_from_then_on() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let first = load_library(dir.path(), "footprint_mapped", false);
    set_memory_limit(usize::MAX);
    let mut s = Symbolizer::new();
    let f = s.symbolize(first, false).last().unwrap().clone();
    assert!(f.line.is_some(), "its DWARF, mapped from the file: {f:?}");
    s.enforce_limit(u64::MAX);
    assert!(s.symbols_only().is_empty(), "within an unbounded limit");

    // Over the limit: the module loses its DWARF; what it named keeps its name (the cache), a
    // new address of it is named from the symbol table, and the module is reported.
    s.enforce_limit(1);
    assert_eq!(s.symbols_only().len(), 1);
    let (module, bytes) = &s.symbols_only()[0];
    assert_eq!(module, "libfootprint_mapped.so");
    assert!(*bytes > 0, "its mapped pages");
    let again = s.symbolize(first + 1, false).last().unwrap().clone();
    assert_eq!(again.function, "footprint_mapped_work");
    assert_eq!(again.line, None, "{again:?}");
    s.enforce_limit(1);
    assert_eq!(s.symbols_only().len(), 1, "nothing mapped is left to drop");
}

#[test]
fn compressed_debug_info_over_the_symbolizers_share_is_named_from_symbols_and_reported() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let work = load_library(dir.path(), "footprint_compressed", true);

    // Unbounded (no recording): the DWARF gives the line.
    set_memory_limit(usize::MAX);
    let mut s = Symbolizer::new();
    let f = s.symbolize(work, false).last().unwrap().clone();
    assert_eq!(f.function, "footprint_compressed_work");
    assert!(f.line.is_some(), "{f:?}");
    assert!(s.symbols_only().is_empty());

    // No room: the symbol table names it, without a line, and the module is reported.
    set_memory_limit(0);
    let mut s = Symbolizer::new();
    let f = s.symbolize(work, false).last().unwrap().clone();
    set_memory_limit(usize::MAX);
    assert_eq!(f.function, "footprint_compressed_work");
    assert_eq!(f.line, None, "{f:?}");
    assert_eq!(s.symbols_only().len(), 1);
    let (module, bytes) = &s.symbols_only()[0];
    assert_eq!(module, "libfootprint_compressed.so");
    assert!(*bytes > 0);
}
