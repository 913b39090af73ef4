//! Shared test helpers: the JDK tools (a missing JDK is a failure, never a skip), a cached JVM-made
//! recording, and the fixture recording written by our writer with its expected values.
#![allow(dead_code)]

pub mod fixture;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Scratch directory under `target/` for this test binary.
pub fn tmp_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("jfr-format-tests");
    std::fs::create_dir_all(&dir).expect("create target tmp dir");
    dir
}

/// Finds a JDK tool on PATH (or in `$JAVA_HOME/bin`). Panics with a clear message if it is
/// missing: in CI a missing JDK must fail the build, not skip the JDK checks.
pub fn jdk_tool(name: &str) -> PathBuf {
    let mut candidates = Vec::new();
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        candidates.push(PathBuf::from(home).join("bin").join(name));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|p| p.join(name)));
    }
    candidates.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "JDK tool `{name}` not found on PATH or in $JAVA_HOME/bin: the jfr-format tests \
             need a JDK 17+ (java, javac, jfr) to judge the writer; install one"
        )
    })
}

/// Output of a JDK tool run.
#[derive(Debug)]
pub struct ToolOutput {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    /// Exit 0 and nothing on stderr (for JVM-made recordings, whose event names contain "Error").
    pub fn assert_ok(&self, what: &str) -> &str {
        assert!(
            self.ok && self.stderr.trim().is_empty(),
            "{what} failed (exit ok = {}):\n--- stderr ---\n{}",
            self.ok,
            self.stderr
        );
        &self.stdout
    }

    /// Exit 0 and no error or exception in any output; otherwise panics with everything.
    pub fn assert_clean(&self, what: &str) -> &str {
        let bad = |s: &str| s.contains("Error") || s.contains("Exception") || s.contains("error:");
        assert!(
            self.ok && !bad(&self.stdout) && !bad(&self.stderr),
            "{what} failed (exit ok = {}):\n--- stderr ---\n{}\n--- stdout (first 4000 chars) ---\n{}",
            self.ok,
            self.stderr,
            &self.stdout[..self.stdout.len().min(4000)]
        );
        &self.stdout
    }
}

/// Runs `jfr` with `args`.
pub fn jfr(args: &[&str]) -> ToolOutput {
    let out = Command::new(jdk_tool("jfr")).args(args).output().expect("run jfr");
    ToolOutput {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `jfr print --json`, `jfr summary` and `jfr metadata` on `path` in parallel, asserts that
/// all three are clean and returns the parsed JSON and the summary text.
pub fn judge(path: &Path) -> (serde_json::Value, String) {
    let p = path.to_str().expect("utf-8 path").to_owned();
    let (json, summary, metadata) = std::thread::scope(|s| {
        let a = s.spawn(|| jfr(&["print", "--json", &p]));
        let b = s.spawn(|| jfr(&["summary", &p]));
        let c = s.spawn(|| jfr(&["metadata", &p]));
        (a.join().unwrap(), b.join().unwrap(), c.join().unwrap())
    });
    metadata.assert_clean(&format!("jfr metadata {p}"));
    let summary = summary.assert_clean(&format!("jfr summary {p}")).to_owned();
    let text = json.assert_clean(&format!("jfr print --json {p}"));
    let parsed = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("jfr print --json {p} is not JSON ({e}):\n{}", &text[..text.len().min(4000)]));
    (parsed, summary)
}

/// Parses `jfr summary`'s table: event type name → count.
pub fn summary_counts(summary: &str) -> std::collections::BTreeMap<String, u64> {
    let mut counts = std::collections::BTreeMap::new();
    let mut in_table = false;
    for line in summary.lines() {
        if line.starts_with("====") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [name, count, _size] = parts[..] {
            counts.insert(name.to_owned(), count.parse().expect("numeric count"));
        }
    }
    counts
}

/// The number of chunks `jfr summary` reports.
pub fn summary_chunks(summary: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.trim().strip_prefix("Chunks:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a `Chunks:` line in jfr summary")
}

const BUSY_JAVA: &str = r#"
public class Busy {
    static volatile long sink;
    static long work(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) { s += Integer.toString(i).hashCode(); }
        return s;
    }
    // Busy for an amount of the worker's CPU time, not of wall time: on a loaded machine the run
    // gets longer instead of its samples fewer. (The wall-clock cap only guards against a hang.)
    public static void main(String[] args) throws Exception {
        long cpuNanos = Long.parseLong(args[0]) * 1_000_000L;
        long cap = System.currentTimeMillis() + 120_000;
        var threads = java.lang.management.ManagementFactory.getThreadMXBean();
        Thread t = new Thread(() -> {
            while (threads.getCurrentThreadCpuTime() < cpuNanos && System.currentTimeMillis() < cap) sink += work(10000);
        }, "worker-\u00fc");
        t.start();
        while (t.isAlive()) { sink += work(5000); Thread.sleep(5); }
        t.join();
    }
}
"#;

/// A JVM-made recording (`settings=profile`, two busy threads, one of them for 800 ms of CPU time), made once per
/// test binary run and cached under `target/`.
pub fn jvm_recording() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = tmp_dir().join(format!("jvm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Busy.java"), BUSY_JAVA).unwrap();
        let status = Command::new(jdk_tool("javac")).arg("Busy.java").current_dir(&dir).status().expect("run javac");
        assert!(status.success(), "javac Busy.java failed");
        let out = dir.join("busy.jfr");
        let output = Command::new(jdk_tool("java"))
            .arg(format!("-XX:StartFlightRecording=filename={},settings=profile", out.display()))
            .args(["-cp", ".", "Busy", "800"])
            .current_dir(&dir)
            .output()
            .expect("run java");
        assert!(
            output.status.success() && out.is_file(),
            "java -XX:StartFlightRecording failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        out
    })
}

/// Writes `bytes` to a fresh file under the tmp dir.
pub fn write_tmp(name: &str, bytes: &[u8]) -> PathBuf {
    let path = tmp_dir().join(format!("{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}
