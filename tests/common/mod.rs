//! Helpers shared by the integration tests: recordings read back and the JDK tools as judges.
//! (The CLI crate's tests include this file too: `cli/tests/common/mod.rs`.)
#![allow(dead_code)]

use jfr_format::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

recorder::event_struct! {
    #[struct_type(name = "test.Geo", label = "Position")]
    pub struct Geo {
        #[field(label = "Latitude")]
        pub lat: f64,
        pub lon: f64,
    }
}

recorder::event_struct! {
    #[struct_type(name = "test.Endpoint", label = "Endpoint")]
    pub struct Endpoint {
        #[field(label = "Host")]
        pub host: String,
        pub port: u16,
        /// A struct inside a struct.
        #[field(label = "Where")]
        pub geo: Geo,
    }
}

recorder::event! {
    /// One field of every kind.
    #[event(name = "test.AllKinds", label = "All Kinds", description = "One field of every kind", category = ["Test", "Kinds"])]
    pub struct AllKinds {
        pub flag: bool,
        pub tiny: i8,
        pub ubyte: u8,
        pub small: i16,
        pub ushort: u16,
        pub int: i32,
        pub uint: u32,
        pub long: i64,
        pub ulong: u64,
        pub single: f32,
        pub double: f64,
        pub letter: char,
        /// Outside the BMP: two UTF-16 units, so not one JFR char.
        pub wide: char,
        pub text: String,
        pub empty: String,
        pub fixed: &'static str,
        pub missing: Option<String>,
        pub endpoint: Endpoint,
        pub elapsed: std::time::Duration,
        pub when: std::time::SystemTime,
        pub size: recorder::Bytes,
        pub load: recorder::Percentage,
        pub peer: recorder::ThreadRef,
    }
}

/// The `wide` field of [`all_kinds`].
pub const WIDE: char = '🦀';

/// An [`AllKinds`] with `ulong` = `n` (`flag`: `n` is even), naming the calling thread as its
/// `peer`; every other field as below.
pub fn all_kinds(n: u64) -> AllKinds {
    use std::time::{Duration, SystemTime};
    AllKinds {
        flag: n.is_multiple_of(2),
        tiny: -7,
        ubyte: 200,
        small: -1234,
        ushort: 60000,
        int: -123456,
        uint: 4_000_000_000,
        long: -9_000_000_000_000,
        ulong: n,
        single: 1.5,
        double: -2.25e100,
        letter: 'ß',
        wide: WIDE,
        text: "héllo wörld ✓ 日本 🦀".into(),
        empty: String::new(),
        fixed: "static",
        missing: None,
        endpoint: Endpoint { host: "example.org".into(), port: 443, geo: Geo { lat: 48.5, lon: -2.25 } },
        elapsed: Duration::from_micros(1500),
        when: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        size: recorder::Bytes(1 << 40),
        load: recorder::Percentage(0.25),
        peer: recorder::ThreadRef::current(),
    }
}

/// One recording per process at a time: tests that record hold this.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): what the sampler counts, so a test
/// that spins for an amount of it gets the same samples however loaded the machine is.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }, 0);
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Computes for `d` of this thread's CPU time, in user mode: the sampler sees user time only
/// (`src/sampler/timer.rs`), and reading the CPU clock is a system call, so the clock is read
/// between bursts of user work (a loop that only read it would spend most of its time in the
/// kernel, and get a fraction of the samples its CPU time suggests: a release build got 86 of
/// 540).
pub fn spin_cpu(d: std::time::Duration) {
    let t = thread_cpu_time();
    let mut x = 0u64;
    while thread_cpu_time() - t < d {
        for i in 0..100_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
    }
}

/// Burns CPU in user code until `stop` is set; returns the work's result (keep it from being
/// optimised away).
#[inline(never)]
pub fn spin_until(stop: &std::sync::atomic::AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

/// Busy for `d` of wall-clock time (a span or scope that lasts, whatever the CPU gets).
pub fn spin_wall(d: std::time::Duration) {
    let t = std::time::Instant::now();
    while t.elapsed() < d {
        std::hint::black_box(0);
    }
}

/// The JDK's `EventStream` following the repository `repo` live (`tests/java/LiveStream.java`,
/// arguments after the repository: the event type, then optional field names): the `java` child
/// and its stdout lines (`EVENT ...`, `FLUSH`, `CLOSED`, `ERROR ...`) as they come. The library's
/// tests only (the path is under its manifest directory).
pub fn live_jdk_stream(repo: &Path, args: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let java = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/java/LiveStream.java");
    let mut child = Command::new("java")
        .arg(java)
        .arg(repo)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("`java` is required (install openjdk-17-jdk-headless)");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Forks a child that runs `body` and leaves with `_exit`: 0 when `body` returned, 3 when it
/// panicked (the parent's destructors never run in it). The parent gets the child's pid.
pub fn fork_child(body: impl FnOnce()) -> libc::pid_t {
    // SAFETY: the child runs `body` (the caller's recorder calls) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).map_or(3, |()| 0);
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for the child `pid` (of `fork_child`) to exit with 0. A deadlocked child would hang the
/// test: after `limit` this panics with what each of its threads is doing (state and kernel wait
/// channel) and, when gdb is at hand, where.
pub fn wait_child_ok(pid: libc::pid_t, limit: std::time::Duration) {
    let mut status = 0;
    let deadline = std::time::Instant::now() + limit;
    loop {
        // SAFETY: plain waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if std::time::Instant::now() >= deadline {
            let mut threads = String::new();
            for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
                let p = t.path();
                let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
                let wchan = std::fs::read_to_string(p.join("wchan")).unwrap_or_default();
                threads.push_str(&format!("\n  {} wchan {wchan}", stat.trim()));
            }
            let stacks = Command::new("timeout")
                .args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| format!("(no gdb: {e})"));
            panic!("child {pid} hangs (deadlock after fork?); its threads:{threads}\n{stacks}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child {pid} failed: {status}");
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

/// A UTC timestamp as `jfr print --json` writes it (`2026-11-29T16:59:14.957127984Z`, fraction
/// optional) to ns since the epoch.
pub fn epoch_nanos_of_iso(s: &str) -> i64 {
    let field = |from: usize, len: usize| -> i64 { s[from..from + len].parse().expect("a timestamp field") };
    let (year, month, day) = (field(0, 4), field(5, 2), field(8, 2));
    let seconds_of_day = field(11, 2) * 3600 + field(14, 2) * 60 + field(17, 2);
    let fraction: String = s.get(20..).unwrap_or("").chars().take_while(char::is_ascii_digit).collect();
    let nanos: i64 = if fraction.is_empty() { 0 } else { format!("{fraction:0<9}")[..9].parse().unwrap() };
    // Days since 1970-01-01 of a proleptic Gregorian date, counting years from March.
    let (y, m) = if month <= 2 { (year - 1, month + 9) } else { (year, month - 3) };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + (153 * m + 2) / 5 + day - 1;
    let days = era * 146_097 + day_of_era - 719_468;
    (days * 86_400 + seconds_of_day) * 1_000_000_000 + nanos
}

#[test]
fn iso_timestamps_convert_to_epoch_nanos() {
    assert_eq!(epoch_nanos_of_iso("1970-01-01T00:00:00Z"), 0);
    assert_eq!(epoch_nanos_of_iso("2000-03-01T00:00:01.5Z"), 951_868_801_500_000_000);
    assert_eq!(epoch_nanos_of_iso("2026-11-29T16:59:14.957127984Z"), 1_795_971_554_957_127_984);
}

/// A scope's total time in ns is its self time plus its children's totals: exact in ticks (a
/// call's total is never less than its children's, see `scope::ScopeThreadState::pop`), up to the rounding
/// of each term's conversion to whole ns. A lost or double-counted child is far beyond that.
pub fn assert_sums_up(total: u64, self_nanos: u64, children: &[u64]) {
    let parts = self_nanos + children.iter().sum::<u64>();
    // Exact in ticks; each number is rounded down to whole ns on its own.
    let slack = children.len() as u64 + 1;
    assert!(total.abs_diff(parts) <= slack, "total {total} ns is not self {self_nanos} + children {children:?} ns");
}

/// The samples a reader that decodes sample events by position counts in the file at `path`, by
/// type: async-profiler's converter (`one.jfr.JfrReader`, behind `jfr2flame` and
/// `jfr2collapsed`) reads an event's size and type, decodes the JDK's fields of the sample types
/// it knows one after the other, and reads on from there as if the next event started; it skips
/// any other event by its size. A layout with bytes after those fields that do not read as a
/// skippable event (size > 0, an event type it does not decode) sends it off the event grid
/// (docs/jfr-format.md, "Context ids on samples"). Panics where the walk leaves the grid: a size
/// of 0, or a chunk whose events do not end exactly where its records do.
pub fn positional_reader_counts(path: &Path) -> std::collections::BTreeMap<String, u64> {
    let data = bytes::Bytes::from(std::fs::read(path).unwrap());
    let mut counts = std::collections::BTreeMap::new();
    for chunk in jfr_format::chunks(data) {
        let chunk = chunk.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let meta = chunk.metadata();
        let id = |name: &str| meta.class_by_name(name).map(|c| c.id);
        // The fields the converter decodes of each sample type it knows (the wall-clock sample's
        // `timeSpan` only where it is declared).
        let mut decoded: Vec<(u64, &str, usize)> = Vec::new();
        for (name, fields) in [("jdk.ExecutionSample", 4), ("jdk.ObjectAllocationSample", 5)] {
            if let Some(id) = id(name) {
                decoded.push((id, name, fields));
            }
        }
        if let Some(wall) = meta.class_by_name("profiler.WallClockSample") {
            let fields = 5 + usize::from(wall.fields.iter().any(|f| f.name == "timeSpan"));
            decoded.push((wall.id, "profiler.WallClockSample", fields));
        }
        let bytes = chunk.bytes();
        let varint = |at: &mut usize| -> u64 {
            let (v, n) = jfr_format::varint::read_u64(&bytes[*at..]).expect("a varint inside the chunk");
            *at += n;
            v
        };
        let mut at = jfr_format::header::HEADER_SIZE;
        while at < bytes.len() {
            let start = at;
            let size = varint(&mut at) as usize;
            let type_id = varint(&mut at);
            assert!(size > 0, "{}: a size of 0 at byte {start} of a chunk: off the event grid", path.display());
            match decoded.iter().find(|(id, _, _)| *id == type_id) {
                Some(&(_, name, fields)) => {
                    for _ in 0..fields {
                        varint(&mut at);
                    }
                    *counts.entry(name.to_owned()).or_insert(0) += 1;
                }
                None => at = start + size,
            }
        }
        assert_eq!(at, bytes.len(), "{}: the walk ends past the chunk's end", path.display());
    }
    counts
}
