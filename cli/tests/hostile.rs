//! The hostile-program suite: ordinary programs that do what real programs do and a recorder in
//! their process must survive (close every descriptor, siglongjmp out of handlers, cancel threads
//! as they start, run fibers, stop themselves, chroot, exec static binaries, bring their own
//! allocator, ...). Each one, in `tests/hostile/`, is built (gcc, g++, rustc, go with cgo), run
//! bare, and run under `recorder record --period 1ms --wall 1ms --alloc 16KiB`; the two runs
//! must end the same way (exit status or signal), print the same stdout (the recorder's summary
//! follows the program's output) and leave the same files, byte for byte, in their working
//! directory. A run that outlives [`TIME_LIMIT`] is a hang: its process group is killed and the
//! test fails naming the program.
//!
//! The programs are deterministic: what they print and write does not depend on timing, only
//! on whether they were harmed. What each one checks is said at the top of its source.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Longer than any program takes, bare or recorded, on a busy machine: past it a run is hung.
const TIME_LIMIT: Duration = Duration::from_secs(90);

/// The sampling every recorded run gets: CPU and wall-clock at 1 ms, allocations every 16 KiB.
const RECORD_FLAGS: [&str; 6] = ["--period", "1ms", "--wall", "1ms", "--alloc", "16KiB"];

fn sources() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hostile")
}

/// Builds `tests/hostile/SOURCE` once per test binary with `compiler FLAGS -o OUT SOURCE LIBS`.
fn build(source: &str, compiler: &str, flags: &[&str], libs: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<BTreeMap<String, PathBuf>>> = OnceLock::new();
    let key = format!("{source} {compiler} {flags:?}");
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(&key) {
        return p.clone();
    }
    // One directory per build: the same source built with other flags must not replace it.
    let dir = scratch_dir().join("bin").join(built.len().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let stem = source.split('.').next().unwrap();
    let out = dir.join(if flags.contains(&"-shared") { format!("lib{stem}.so") } else { stem.to_owned() });
    let result = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(sources().join(source))
        .args(libs)
        .output()
        .unwrap_or_else(|e| panic!("{compiler} is required to build {source}: {e}"));
    assert!(result.status.success(), "{compiler} {source}: {}", String::from_utf8_lossy(&result.stderr));
    built.insert(key, out.clone());
    out
}

fn c(source: &str) -> PathBuf {
    build(source, "gcc", &["-O2", "-g", "-Wall", "-pthread"], &[])
}

fn cpp(source: &str) -> PathBuf {
    build(source, "g++", &["-O2", "-g", "-Wall", "-pthread"], &[])
}

fn rust(source: &str) -> PathBuf {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    build(source, &rustc, &["-O", "--edition", "2021", "-C", "debuginfo=1"], &[])
}

/// `go` (installed by `.ci/run`): PATH, else where Debian and the Go tarball put it.
fn go_tool() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).map(|d| d.join("go")).collect::<Vec<_>>())
        .chain(["/usr/bin/go", "/usr/lib/go/bin/go", "/usr/local/go/bin/go"].iter().map(PathBuf::from))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`go` was not found: the cgo program is built with it (apt-get install golang-go)"))
}

/// `tests/hostile/gocgo` built with cgo, offline: the module has no dependencies, and the build
/// cache lives under the test's scratch directory.
fn go_cgo_program() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let scratch = scratch_dir().join("go");
            std::fs::create_dir_all(&scratch).unwrap();
            let out = scratch_dir().join("bin").join("gocgo");
            let result = Command::new(go_tool())
                .current_dir(sources().join("gocgo"))
                .args(["build", "-o"])
                .arg(&out)
                .arg(".")
                .env("CGO_ENABLED", "1")
                .env("GOFLAGS", "-mod=mod")
                .env("GOPROXY", "off")
                .env("GOTOOLCHAIN", "local")
                .env("GOCACHE", scratch.join("cache"))
                .env("GOPATH", scratch.join("path"))
                .output()
                .expect("running go build");
            assert!(result.status.success(), "go build gocgo: {}", String::from_utf8_lossy(&result.stderr));
            out
        })
        .clone()
}

/// jemalloc's shared library (`apt-get install libjemalloc2`; `.ci/run` installs it).
fn jemalloc() -> &'static str {
    const PATH: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    assert!(Path::new(PATH).is_file(), "{PATH} is missing: apt-get install libjemalloc2");
    PATH
}

/// How one run ended.
struct Run {
    /// None: killed after [`TIME_LIMIT`].
    status: Option<ExitStatus>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    seconds: f64,
    /// Every file under the working directory, by relative path.
    files: BTreeMap<PathBuf, Vec<u8>>,
}

impl Run {
    fn describe(&self) -> String {
        match self.status {
            None => format!("HUNG: still running after {} s, killed", TIME_LIMIT.as_secs()),
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => format!("exit status {c}"),
                (_, Some(sig)) => {
                    format!("killed by signal {sig}{}", if s.core_dumped() { " (core dumped)" } else { "" })
                }
                _ => format!("{s}"),
            },
        }
    }

    fn text(&self) -> String {
        format!(
            "{} after {:.1} s\n--- stdout\n{}--- stderr (last 4000 bytes)\n{}",
            self.describe(),
            self.seconds,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr[self.stderr.len().saturating_sub(4000)..])
        )
    }
}

/// Runs `command` in `cwd` in a process group of its own; past [`TIME_LIMIT`] the whole group is
/// killed.
fn run(mut command: Command, cwd: &Path) -> Run {
    let _ = std::fs::remove_dir_all(cwd);
    std::fs::create_dir_all(cwd).unwrap();
    command.current_dir(cwd).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let started = Instant::now();
    let mut child = command.spawn().expect("starting the program");
    let pgid = child.id() as i32;
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the program") {
            break Some(status);
        }
        if started.elapsed() > TIME_LIMIT {
            // SAFETY: signals our own child's process group (it was made its leader).
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Children the program left behind keep the pipes open: they are killed too.
    // SAFETY: as above; the group may be gone already (ESRCH is fine).
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let seconds = started.elapsed().as_secs_f64();
    Run { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap(), seconds, files: snapshot(cwd) }
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_owned();
            match entry.file_type() {
                Ok(t) if t.is_dir() => walk(root, &path, into),
                _ => {
                    into.insert(
                        rel,
                        std::fs::read(&path).unwrap_or_else(|e| format!("<unreadable: {e}>").into_bytes()),
                    );
                }
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(dir, dir, &mut files);
    files
}

/// One program of the suite and how it is run.
struct Hostile {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    /// Arguments of the bare run where they differ (a shorter run of a program whose output
    /// does not depend on how long it runs).
    bare_args: Option<Vec<String>>,
    /// Environment of both runs (e.g. another allocator preloaded).
    env: Vec<(&'static str, String)>,
    /// Options of `recorder record` besides [`RECORD_FLAGS`].
    record_flags: Vec<&'static str>,
    /// The bare run's exit status: the program works without the recorder.
    expect_code: i32,
}

impl Hostile {
    fn new(name: &'static str, program: PathBuf) -> Self {
        Hostile {
            name,
            program,
            args: Vec::new(),
            bare_args: None,
            env: Vec::new(),
            record_flags: Vec::new(),
            expect_code: 0,
        }
    }
    fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self
    }
    fn bare_args(mut self, args: &[&str]) -> Self {
        self.bare_args = Some(args.iter().map(|a| a.to_string()).collect());
        self
    }
    fn env(mut self, key: &'static str, value: &str) -> Self {
        self.env.push((key, value.to_owned()));
        self
    }
    fn record_flags(mut self, flags: &[&'static str]) -> Self {
        self.record_flags = flags.to_vec();
        self
    }
    fn exits(mut self, code: i32) -> Self {
        self.expect_code = code;
        self
    }

    fn dir(&self) -> PathBuf {
        scratch_dir().join("runs").join(self.name)
    }

    fn bare(&self) -> Run {
        let mut command = Command::new(&self.program);
        command
            .args(self.bare_args.as_ref().unwrap_or(&self.args))
            .env_remove("LD_PRELOAD")
            .env_remove("RECORDER_OPTIONS");
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        run(command, &self.dir().join("bare"))
    }

    /// The recorded run; its recording is `recording.jfr` beside (not in) its working directory.
    fn recorded(&self) -> Run {
        preload_library();
        let dir = self.dir();
        let _ = std::fs::remove_dir_all(dir.join("repository"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_recorder"));
        command
            .arg("record")
            .args(RECORD_FLAGS)
            .args(&self.record_flags)
            .arg("--repository")
            .arg(dir.join("repository"))
            .arg("-o")
            .arg(dir.join("recording.jfr"))
            .arg("--")
            .arg(&self.program)
            .args(&self.args)
            .env_remove("LD_PRELOAD")
            .env_remove("RECORDER_OPTIONS");
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        run(command, &dir.join("recorded"))
    }

    /// Runs the program bare and recorded and insists that the recorder changed nothing;
    /// returns the recorded run.
    fn check(&self) -> Run {
        let bare = self.bare();
        assert_eq!(
            bare.status.and_then(|s| s.code()),
            Some(self.expect_code),
            "{}: the bare run (without the recorder) is broken: {}",
            self.name,
            bare.text()
        );
        let recorded = self.recorded();
        let both = || format!("\n=== bare run: {}\n=== recorded run: {}", bare.text(), recorded.text());
        assert!(recorded.status.is_some(), "{} HUNG under recorder record{}", self.name, both());
        let (b, r) = (bare.status.unwrap(), recorded.status.unwrap());
        assert!(
            b.code() == r.code() && b.signal() == r.signal(),
            "{} ended differently under recorder record: {} bare, {} recorded{}",
            self.name,
            bare.describe(),
            recorded.describe(),
            both()
        );
        self.check_stdout(&bare, &recorded, &both);
        let (bf, rf) = (&bare.files, &recorded.files);
        for (path, bytes) in bf {
            match rf.get(path) {
                None => panic!("{}: {} written bare is missing when recorded{}", self.name, path.display(), both()),
                Some(r) if r != bytes => panic!(
                    "{}: {} differs when recorded: {} bytes bare, {} recorded; first difference at byte {}{}",
                    self.name,
                    path.display(),
                    bytes.len(),
                    r.len(),
                    bytes.iter().zip(r).position(|(x, y)| x != y).unwrap_or(bytes.len().min(r.len())),
                    both()
                ),
                _ => {}
            }
        }
        let extra: Vec<_> = rf.keys().filter(|p| !bf.contains_key(*p)).collect();
        assert!(extra.is_empty(), "{}: files only the recorded run left: {extra:?}{}", self.name, both());
        eprintln!("{}: bare {:.1} s, recorded {:.1} s, same outcome", self.name, bare.seconds, recorded.seconds);
        recorded
    }

    /// The recorded run's stdout is the program's, then the recorder's summary (which names the
    /// repository: the recording did start in the program). With --duration the summary comes
    /// while the program runs: then the program's output must be found whole in it.
    fn check_stdout(&self, bare: &Run, recorded: &Run, both: &dyn Fn() -> String) {
        let (b, r) = (&bare.stdout[..], &recorded.stdout[..]);
        let found = if self.record_flags.contains(&"--duration") {
            b.is_empty() || r.windows(b.len()).any(|w| w == b)
        } else {
            r.starts_with(b)
        };
        assert!(found, "{}: the program's stdout differs when recorded{}", self.name, both());
        let summary =
            String::from_utf8_lossy(if self.record_flags.contains(&"--duration") { r } else { &r[b.len()..] });
        assert!(
            summary.contains("Repository: "),
            "{}: no recording summary after the program's output (did the recording start?){}",
            self.name,
            both()
        );
    }
}

/// Events of each type in the recorded run's recording (`recorder summary --json`).
fn event_counts(h: &Hostile) -> BTreeMap<String, u64> {
    let out = recorder_ok(&["summary", "--json", h.dir().join("recording.jfr").to_str().unwrap()]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("summary --json is JSON");
    json["events"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v["count"].as_u64().unwrap_or(0))).collect())
        .unwrap_or_default()
}

// --- descriptors ---------------------------------------------------------------------------

#[test]
fn closefrom() {
    Hostile::new("closefrom", c("closefrom.c")).args(&["loop"]).check();
}

#[test]
fn closefrom_close_range() {
    Hostile::new("closefrom_close_range", c("closefrom.c")).args(&["close_range"]).check();
}

#[test]
fn closefrom_dup2() {
    Hostile::new("closefrom_dup2", c("closefrom.c")).args(&["dup2"]).check();
}

#[test]
fn nofile16() {
    Hostile::new("nofile16", c("nofile16.c")).check();
}

#[test]
fn emfile() {
    Hostile::new("emfile", c("emfile_deep.c")).args(&["emfile"]).check();
}

// --- signals -------------------------------------------------------------------------------

#[test]
fn foreign_thread_handler() {
    Hostile::new("foreign_thread_handler", c("foreign_thread_handler.c")).check();
}

#[test]
fn longjmp_alarm() {
    Hostile::new("longjmp_alarm", c("longjmp_alarm.c")).check();
}

#[test]
fn longjmp_nested() {
    Hostile::new("longjmp_nested", c("longjmp_nested.c")).check();
}

#[test]
fn ownprof() {
    Hostile::new("ownprof", c("ownprof.c")).check();
}

#[test]
fn ownprof_siginfo() {
    Hostile::new("ownprof_siginfo", c("ownprof.c")).args(&["siginfo"]).check();
}

#[test]
fn prof_after_stop() {
    Hostile::new("prof_after_stop", c("prof_after_stop.c")).record_flags(&["--duration", "1s"]).check();
}

#[test]
fn altstack_threads() {
    Hostile::new("altstack_threads", c("altstack_threads.c")).check();
}

#[test]
fn block_sigprof() {
    Hostile::new("block_sigprof", c("block_sigprof.c")).check();
}

#[test]
fn stop_cont() {
    Hostile::new("stop_cont", c("stop_cont.c")).check();
}

// --- threads -------------------------------------------------------------------------------

#[test]
fn cancel_churn() {
    Hostile::new("cancel_churn", c("cancel_churn.c")).check();
}

#[test]
fn threads() {
    Hostile::new("threads", c("threads.c")).check();
}

#[test]
fn short_threads() {
    Hostile::new("short_threads", c("short_threads.c")).check();
}

#[test]
fn pthread_exit() {
    Hostile::new("pthread_exit", c("pthread_exit.c")).check();
}

#[test]
fn exit_race() {
    Hostile::new("exit_race", c("exit_race.c")).args(&["300", "0"]).exits(7).check();
}

#[test]
fn exit_race_from_thread() {
    Hostile::new("exit_race_from_thread", c("exit_race.c")).args(&["300", "1"]).exits(7).check();
}

#[test]
fn fibers() {
    Hostile::new("fibers", c("fibers.c")).check();
}

#[test]
fn deep_stack() {
    Hostile::new(
        "deep_stack",
        build("emfile_deep.c", "gcc", &["-O2", "-g", "-fno-omit-frame-pointer", "-pthread"], &[]),
    )
    .args(&["deep"])
    .check();
}

// --- processes -----------------------------------------------------------------------------

#[test]
fn blocked_exec() {
    Hostile::new("blocked_exec", c("blocked_exec.c")).check();
}

#[test]
fn fork_noexec() {
    Hostile::new("fork_noexec", c("fork_noexec.c")).check();
}

#[test]
fn spawn() {
    Hostile::new("spawn", c("spawn.c")).check();
}

#[test]
fn vfork_exit() {
    Hostile::new("vfork_exit", c("vfork_exit.c")).check();
}

#[test]
fn exec_static() {
    let child = build("static_child.c", "gcc", &["-O2", "-static"], &[]);
    Hostile::new("exec_static", c("exec_static.c")).args(&[child.to_str().unwrap()]).exits(3).check();
}

#[test]
fn exec_static_blocked() {
    let child = build("static_child.c", "gcc", &["-O2", "-static"], &[]);
    Hostile::new("exec_static_blocked", c("exec_static.c"))
        .args(&[child.to_str().unwrap(), "blocked"])
        .exits(3)
        .check();
}

#[test]
fn chroot_jail() {
    let h = Hostile::new("chroot_jail", c("chroot_jail.c"));
    let bare = h.bare();
    if bare.status.and_then(|s| s.code()) == Some(77) {
        eprintln!(
            "chroot_jail SKIPPED: unshare/chroot not permitted here: {}",
            String::from_utf8_lossy(&bare.stderr).trim()
        );
        return;
    }
    h.check();
}

#[test]
fn sleeper() {
    Hostile::new("sleeper", c("sleeper.c")).check();
}

// --- memory --------------------------------------------------------------------------------

#[test]
fn mmap_fixed() {
    Hostile::new("mmap_fixed", c("mmap_fixed.c")).check();
}

#[test]
fn dlchurn() {
    let plugin = build("plug.c", "gcc", &["-O2", "-shared", "-fPIC", "-pthread", "-Wl,-z,norelro", "-Wl,-z,lazy"], &[]);
    let program = build("dlchurn.c", "gcc", &["-O2", "-g", "-Wall"], &["-ldl"]);
    // The window (a rescan's GOT writes racing a dlclose) is narrow: 8 s of churn recorded
    // (about 80 rescans) crashed main in 2 runs of 2 (SIGSEGV, SIGBUS), 2 s in none of 1.
    let plugin = plugin.to_str().unwrap();
    Hostile::new("dlchurn", program).args(&[plugin, "8"]).bare_args(&[plugin, "1"]).check();
}

#[test]
fn own_malloc() {
    Hostile::new("own_malloc", c("own_malloc.c")).check();
}

#[test]
fn alloc_api() {
    Hostile::new("alloc_api", c("alloc_api.c")).check();
}

#[test]
fn alloc_api_jemalloc() {
    Hostile::new("alloc_api_jemalloc", c("alloc_api.c")).env("LD_PRELOAD", jemalloc()).check();
}

#[test]
fn malloc_loop() {
    let h = Hostile::new("malloc_loop", c("malloc_loop.c"));
    h.check();
    let samples = event_counts(&h).get("jdk.ObjectAllocationSample").copied().unwrap_or(0);
    assert!(samples > 0, "malloc_loop: no allocation sample recorded with --alloc 16KiB");
}

/// With jemalloc preloaded, `--alloc` samples its allocations or says why it cannot (on stderr
/// and in a `recorder.Diagnostic` event); never an empty allocation profile without a word.
#[test]
fn malloc_loop_jemalloc() {
    let h = Hostile::new("malloc_loop_jemalloc", c("malloc_loop.c")).env("LD_PRELOAD", jemalloc());
    let recorded = h.check();
    let counts = event_counts(&h);
    let samples = counts.get("jdk.ObjectAllocationSample").copied().unwrap_or(0);
    let diagnostics = counts.get("recorder.Diagnostic").copied().unwrap_or(0);
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    assert!(
        samples > 0 || (diagnostics > 0 && stderr.contains("alloc")),
        "malloc_loop_jemalloc: {samples} allocation samples, {diagnostics} recorder.Diagnostic events, and stderr says:\n{stderr}"
    );
}

// --- other languages -----------------------------------------------------------------------

#[test]
fn gocgo() {
    Hostile::new("gocgo", go_cgo_program()).check();
}

#[test]
fn gocgo_pprof() {
    Hostile::new("gocgo_pprof", go_cgo_program()).args(&["pprof"]).check();
}

#[test]
fn cpp_threads() {
    Hostile::new("cpp_threads", cpp("cpp_threads.cpp")).check();
}

#[test]
fn rust_threads() {
    Hostile::new("rust_threads", rust("rust_threads.rs")).check();
}
