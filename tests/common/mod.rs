//! Helpers shared by the integration tests: recordings read back, the JDK tools as judges, the
//! `recorder` binary and a JVM-made recording.
#![allow(dead_code)]

use jfr_format::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

static SERIAL: Mutex<()> = Mutex::new(());

/// One recording per process at a time: tests that record hold this.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `.jfr` chunk files of a recording directory, in start order (the header's startNanos, as
/// the JDK orders them; names agree, but this does not rely on them).
pub fn chunk_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jfr"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            let start = jfr_format::ChunkHeader::parse(&bytes, 0).map_or(i64::MAX, |h| h.start_nanos);
            (start, p)
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// An event read back with its fields by name.
#[derive(Debug, Clone)]
pub struct ReadEvent {
    pub type_name: String,
    pub fields: Vec<(String, Value)>,
    pub start_ticks: i64,
    pub thread: Option<String>,
    pub stack: Option<Vec<String>>,
}

impl ReadEvent {
    pub fn field(&self, name: &str) -> &Value {
        &self.fields.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no field {name}")).1
    }
    pub fn field_i64(&self, name: &str) -> i64 {
        self.field(name).as_i64().unwrap_or_else(|| panic!("{name} is not an integer"))
    }
}

/// Every event of type `type_name` in the file at `path` (all chunks).
pub fn read_events(path: &Path, type_name: &str) -> Vec<ReadEvent> {
    let data = bytes::Bytes::from(std::fs::read(path).unwrap());
    let mut out = Vec::new();
    for chunk in jfr_format::chunks(data) {
        let chunk = chunk.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let Some(class) = chunk.metadata().class_by_name(type_name).cloned() else {
            continue;
        };
        for event in chunk.events() {
            let event = event.unwrap();
            if event.type_id != class.id {
                continue;
            }
            let thread = chunk.event_thread(&event).unwrap().map(|t| t.name().to_owned());
            let stack =
                chunk.event_stack_trace(&event).unwrap().map(|s| s.frames.iter().map(|f| f.qualified_name()).collect());
            out.push(ReadEvent {
                type_name: type_name.to_owned(),
                fields: class.fields.iter().map(|f| f.name.clone()).zip(event.values.iter().cloned()).collect(),
                start_ticks: event.start_ticks(),
                thread,
                stack,
            });
        }
    }
    out
}

/// Runs a JDK tool; a missing JDK is a failure, not a skip.
pub fn jdk(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("`{tool}` is required (install openjdk-17-jdk-headless): {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

/// `jfr summary`, `jfr print` and `jfr metadata` accept every file.
pub fn jdk_accepts(files: &[PathBuf]) {
    for f in files {
        let p = f.to_str().unwrap();
        for cmd in ["summary", "metadata"] {
            let text = jdk("jfr", &[cmd, p]);
            assert!(!text.contains("Exception"), "jfr {cmd} {p}:\n{text}");
        }
        let out = Command::new("jfr").args(["print", p]).output().expect("jfr is required");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !stderr.contains("Exception"), "jfr print {p}:\n{stderr}");
    }
}

/// Per-type counts from `jfr summary`.
pub fn jfr_summary_counts(path: &Path) -> std::collections::BTreeMap<String, u64> {
    let text = jdk("jfr", &["summary", path.to_str().unwrap()]);
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() == 3 && parts[1].chars().all(|c| c.is_ascii_digit()) && parts[0].contains('.') {
            out.insert(parts[0].to_owned(), parts[1].parse().unwrap());
        }
    }
    out
}

// ---- The CLI and JVM-made recordings ----

/// Runs the `recorder` binary.
pub fn recorder(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_recorder")).args(args).output().expect("running the recorder binary")
}

/// Runs `recorder` and insists on success; returns stdout.
pub fn recorder_ok(args: &[&str]) -> String {
    let out = recorder(args);
    assert!(
        out.status.success(),
        "recorder {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("recorder output is UTF-8")
}

/// Finds a JDK tool on PATH (or in $JAVA_HOME/bin). A missing JDK is a test FAILURE, not a skip:
/// CI must have one.
pub fn jdk_tool(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "the JDK tool `{name}` was not found on PATH or in $JAVA_HOME/bin: the CLI tests \
                 need a JDK 17+ (java, javac, jfr); install one (e.g. apt-get install \
                 openjdk-17-jdk-headless)"
        )
    })
}

/// Runs `jfr` and insists on success; returns stdout.
pub fn jfr_ok(args: &[&str]) -> String {
    let out = Command::new(jdk_tool("jfr")).args(args).output().expect("running jfr");
    assert!(
        out.status.success(),
        "jfr {args:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("jfr output is UTF-8")
}

/// A scratch directory for this test binary under target/.
pub fn scratch_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(env!("CARGO_CRATE_NAME"));
    std::fs::create_dir_all(&dir).expect("creating the scratch dir");
    dir
}

/// A recording made by a JVM running tests/java/JfrWorkload.java with profile settings and 1 MB
/// chunks: several chunks, custom events with fields of every kind, execution samples. Made once
/// per test binary.
pub fn jvm_recording() -> &'static Path {
    static RECORDING: OnceLock<PathBuf> = OnceLock::new();
    RECORDING.get_or_init(|| {
        let dir = scratch_dir().join("jvm");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the JVM scratch dir");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/JfrWorkload.java");
        let status = Command::new(jdk_tool("javac")).arg("-d").arg(&dir).arg(&source).status().expect("running javac");
        assert!(status.success(), "javac failed on {}", source.display());
        let recording = dir.join("workload.jfr");
        let out = Command::new(jdk_tool("java"))
            .arg(format!("-XX:StartFlightRecording=filename={},settings=profile", recording.display()))
            .arg("-XX:FlightRecorderOptions=maxchunksize=1m")
            .arg("-cp")
            .arg(&dir)
            .args(["JfrWorkload", "8000", "3", "30000", "4"])
            .output()
            .expect("running java");
        assert!(
            out.status.success() && recording.is_file(),
            "the JVM workload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        recording
    })
}

/// Chunk boundaries of a file: (offset, size) of each chunk, from the headers.
pub fn chunk_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut pos = 0;
    while pos + 68 <= data.len() {
        assert_eq!(&data[pos..pos + 4], b"FLR\0", "chunk magic at {pos}");
        let size = u64::from_be_bytes(data[pos + 8..pos + 16].try_into().unwrap()) as usize;
        spans.push((pos, size));
        pos += size;
    }
    assert_eq!(pos, data.len(), "chunks cover the file");
    spans
}

/// `2026-11-29T16:59:14.957127984Z` (as `jfr print --json` writes) to ns since the epoch.
pub fn parse_iso_nanos(s: &str) -> i64 {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> i64 { s[r].parse().expect("a timestamp number") };
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    let (hh, mm, ss) = (num(11..13), num(14..16), num(17..19));
    let mut nanos = 0i64;
    if b.get(19) == Some(&b'.') {
        let frac: String = s[20..].chars().take_while(char::is_ascii_digit).collect();
        nanos = format!("{frac:0<9}")[..9].parse().unwrap();
    }
    // days_from_civil (Howard Hinnant)
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000_000) + nanos
}

/// An ISO-8601 duration as `jfr print --json` writes it (`PT0.000001S`, `PT1M2.5S`, `PT0S`) to ns.
pub fn parse_iso_duration_nanos(s: &str) -> i64 {
    let rest = s.strip_prefix("PT").unwrap_or_else(|| panic!("not a duration: {s}"));
    let mut total: f64 = 0.0;
    let mut number = String::new();
    for c in rest.chars() {
        match c {
            'H' => total += number.parse::<f64>().unwrap() * 3600e9,
            'M' => total += number.parse::<f64>().unwrap() * 60e9,
            'S' => total += number.parse::<f64>().unwrap() * 1e9,
            _ => {
                number.push(c);
                continue;
            }
        }
        number.clear();
    }
    total.round() as i64
}

#[test]
fn iso_helpers_parse_jfr_output() {
    assert_eq!(parse_iso_nanos("1970-01-01T00:00:01.5Z"), 1_500_000_000);
    assert_eq!(parse_iso_nanos("2026-11-29T16:59:14.957127984Z"), 1_795_971_554_957_127_984);
    assert_eq!(parse_iso_duration_nanos("PT0.000001S"), 1_000);
    assert_eq!(parse_iso_duration_nanos("PT1M2.5S"), 62_500_000_000);
}
