//! `recorder record [OPTIONS] -- CMD [ARGS...]`: runs CMD with `librecorder_preload.so` preloaded,
//! passes its exit status through, and at its end leaves a finished repository, writes `-o` and
//! prints what `recorder demo` prints (samples taken/written/lost, the summary, the hottest
//! functions).
//!
//! How it knows what happened in CMD: it names a report file in `RECORDER_OPTIONS`; the library
//! appends `started PID PPID DIR` when a process's recording starts, `finished PID WHY TAKEN
//! WRITTEN LOST` when it stops cleanly, `failed PID MESSAGE` when it cannot start, `exec PID TAKEN
//! WRITTEN LOST PROGRAM` when the process execs PROGRAM (its recording stops there and the new
//! image's continues in the same directory: a second `started` line with the same pid and
//! directory), `exec-failed PID ERRNO` when that exec failed (the recording restarted). No
//! `started` line for CMD's pid means the library never ran in it: a program the loader refuses
//! to preload into (static, setuid) is refused before it runs; an exec into such a program is
//! reported as the end of the recording.

use crate::args::{RecordArgs, SummaryConfig};
use crate::source;
use anyhow::{bail, Context};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The library's file name, looked for next to the `recorder` binary.
pub const LIBRARY_FILE_NAME: &str = "librecorder_preload.so";
/// Overrides where the library is (a path to the `.so`).
pub const ENV_PRELOAD: &str = "RECORDER_PRELOAD";

/// CMD's pid while it runs, for the signal forwarder (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);

pub fn run(args: &RecordArgs) -> anyhow::Result<ExitCode> {
    let library = find_library()?;
    let Some((program, program_args)) = args.command.split_first() else {
        bail!("no command given: recorder record [OPTIONS] -- CMD [ARGS...]");
    };
    let resolved = resolve_program(program)?;
    check_preloadable(&resolved)?;

    let report_path = report_file_path();
    let mut options = vec![format!("period={}ns", args.period.as_nanos()), format!("report={}", report_path.display())];
    if let Some(dir) = &args.repository {
        std::fs::create_dir_all(dir).with_context(|| format!("repository {}", dir.display()))?;
        let dir = dir.canonicalize().with_context(|| format!("repository {}", dir.display()))?;
        options.push(format!("repository={}", dir.display()));
    }
    if let Some(d) = args.duration {
        options.push(format!("duration={}ns", d.as_nanos()));
    }
    if let Some(w) = args.wall {
        options.push(format!("wall={}ns", w.as_nanos()));
    }
    if args.follow_children {
        options.push("follow-children=1".into());
    }
    options.push(format!("unwinder={}", args.unwinder));
    if let Some(bytes) = args.alloc {
        options.push(format!("alloc={bytes}"));
    }
    if args.alloc_live {
        options.push("alloc_live=1".into());
    }
    if let Some(bytes) = args.symbol_memory {
        options.push(format!("symbol_memory={bytes}"));
    }
    if !args.debug_dirs.is_empty() {
        let mut dirs = Vec::new();
        for d in &args.debug_dirs {
            let d = d.canonicalize().with_context(|| format!("--debug-dir {}", d.display()))?;
            let d = d
                .to_str()
                .filter(|s| !s.contains([':', ',']))
                .with_context(|| format!("--debug-dir {}: a path with ':' or ',' cannot be passed on", d.display()))?;
            dirs.push(d.to_owned());
        }
        options.push(format!("debug_dir={}", dirs.join(":")));
    }
    // With allocation sampling the library goes first: its `malloc` must be the one the program
    // calls, forwarding to an allocator preloaded by the user (jemalloc, tcmalloc), which is
    // then sampled through it. Otherwise it goes last, out of the way of preloads that insist on
    // coming first.
    let alloc_first = args.alloc.is_some() || args.alloc_live;
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(existing) if !existing.is_empty() => {
            let (first, second) = if alloc_first {
                (library.clone().into_os_string(), existing)
            } else {
                (existing, library.clone().into_os_string())
            };
            let mut v = first;
            v.push(" ");
            v.push(second);
            v
        }
        _ => library.clone().into_os_string(),
    };
    let mut command = std::process::Command::new(program);
    command.args(program_args).env("LD_PRELOAD", preload).env("RECORDER_OPTIONS", options.join(","));
    // CMD gets the default dispositions of the signals we forward, whatever ours become.
    // SAFETY: only async-signal-safe calls (signal) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for sig in FORWARDED {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut child = command.spawn().with_context(|| format!("starting {}", program.to_string_lossy()))?;
    let pid = child.id();
    CHILD.store(pid as i32, Ordering::SeqCst);
    install_forwarding();
    // With --duration the recording may finish while CMD goes on: the outputs are written then,
    // and CMD is waited for to pass its status through.
    let mut summarized = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
        if args.duration.is_some() && !summarized {
            let lines = parse_report(&std::fs::read_to_string(&report_path).unwrap_or_default());
            if lines.finished.iter().any(|f| f.0 == pid) {
                summarized = true;
                summarize(args, pid, &lines, None)?;
                println!("\nWaiting for {} (pid {pid}) to end...", program.to_string_lossy());
            }
        }
        std::thread::sleep(POLL);
    };
    CHILD.store(0, Ordering::SeqCst);
    let status = status.with_context(|| format!("waiting for {}", program.to_string_lossy()))?;
    let lines = parse_report(&std::fs::read_to_string(&report_path).unwrap_or_default());
    let _ = std::fs::remove_file(&report_path);
    if summarized {
        println!("{} {}.", program.to_string_lossy(), describe(status));
    } else {
        summarize(args, pid, &lines, Some(status))?;
    }
    Ok(exit_code_of(status))
}

/// How often CMD's state is looked at while it runs.
const POLL: Duration = Duration::from_millis(20);

/// Signals sent to `recorder record` that go on to CMD.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Forwards the signals in [`FORWARDED`] to CMD. A SIGINT from the terminal (Ctrl-C) already
/// reached CMD, which is in the same process group: only signals sent by a process (`kill`) are
/// forwarded, so CMD never gets one Ctrl-C twice.
fn install_forwarding() {
    extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        let from_kernel = unsafe { info.as_ref() }.is_some_and(|i| i.si_code == libc::SI_KERNEL);
        let pid = CHILD.load(Ordering::SeqCst);
        if pid > 0 && !from_kernel {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(pid, sig) };
        }
    }
    for sig in FORWARDED {
        // SAFETY: zeroed is a valid sigaction; `forward` has the SA_SIGINFO signature and only
        // calls async-signal-safe functions.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = forward as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// CMD's status as ours: its exit code, or for a signal the shell's 128 + N (after re-raising
/// it on ourselves where that terminates us the same way).
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(code as u8);
    }
    let sig = status.signal().unwrap_or(0);
    if sig != 0 {
        let _ = std::io::stdout().flush();
        // SAFETY: restoring the default action and raising the signal CMD died of, so our
        // parent sees the same cause of death (a shell prints "Killed", a build tool stops).
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    ExitCode::from((128 + sig) as u8)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct ReportLines {
    /// (pid, ppid, recording directory), in order.
    started: Vec<(u32, u32, PathBuf)>,
    /// (pid, why, taken, written, lost).
    finished: Vec<(u32, String, u64, u64, u64)>,
    /// (pid, message).
    failed: Vec<(u32, String)>,
    /// (pid, allocation samples taken, written, lost, failed allocations).
    allocation: Vec<(u32, [u64; 4])>,
    /// Execs of a recorded process: (pid, taken, written, lost, program, whether it failed).
    execs: Vec<(u32, u64, u64, u64, String, bool)>,
    /// The kind of each pid's last line (an `exec` last: the new image never recorded).
    last_kind: std::collections::HashMap<u32, String>,
}

impl ReportLines {
    /// (taken, written, lost) over every image of `pid`'s recording.
    fn sample_counts(&self, pid: u32) -> Option<(u64, u64, u64)> {
        let execs = self.execs.iter().filter(|e| e.0 == pid).map(|e| (e.1, e.2, e.3));
        let finished = self.finished.iter().filter(|f| f.0 == pid).map(|f| (f.2, f.3, f.4));
        execs.chain(finished).reduce(|a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    }

    /// Allocation samples (taken, written, lost, failed) over every image of `pid`'s recording.
    fn allocation_counts(&self, pid: u32) -> Option<[u64; 4]> {
        let lines = self.allocation.iter().filter(|a| a.0 == pid).map(|a| a.1);
        lines.reduce(|a, b| [a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]])
    }
}

fn parse_report(text: &str) -> ReportLines {
    let mut r = ReportLines::default();
    for line in text.lines() {
        let mut words = line.splitn(4, ' ');
        let kind = words.next().unwrap_or("");
        let Some(pid) = words.next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        match kind {
            "started" => {
                let ppid = words.next().and_then(|p| p.parse().ok()).unwrap_or(0);
                if let Some(dir) = words.next() {
                    r.started.push((pid, ppid, PathBuf::from(dir)));
                }
            }
            "finished" => {
                let rest: Vec<&str> = line.split(' ').skip(2).collect();
                if let [why, taken, written, lost] = rest[..] {
                    let n = |s: &str| s.parse().unwrap_or(0);
                    r.finished.push((pid, why.to_owned(), n(taken), n(written), n(lost)));
                }
            }
            "allocation" => {
                let n: Vec<u64> = line.split(' ').skip(2).filter_map(|s| s.parse().ok()).collect();
                if let [taken, written, lost, failed] = n[..] {
                    r.allocation.push((pid, [taken, written, lost, failed]));
                }
            }
            "failed" => {
                let msg = line.splitn(3, ' ').nth(2).unwrap_or("").to_owned();
                r.failed.push((pid, msg));
            }
            "exec" => {
                let rest: Vec<&str> = line.splitn(6, ' ').skip(2).collect();
                if let [taken, written, lost, program] = rest[..] {
                    let n = |s: &str| s.parse().unwrap_or(0);
                    r.execs.push((pid, n(taken), n(written), n(lost), program.to_owned(), false));
                }
            }
            "exec-failed" => {
                if let Some(e) = r.execs.iter_mut().rev().find(|e| e.0 == pid) {
                    e.5 = true;
                }
            }
            _ => continue,
        }
        r.last_kind.insert(pid, kind.to_owned());
    }
    r
}

fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s} ({})", signal_name(s)),
        _ => "ended".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => "signal",
    }
}

/// The closing line of `pid`'s allocation samples, when it sampled allocations.
fn write_allocation_counts(out: &mut impl Write, lines: &ReportLines, pid: u32) -> std::io::Result<()> {
    if let Some([taken, written, lost, failed]) = lines.allocation_counts(pid) {
        writeln!(
            out,
            "Allocation samples: {taken} taken, {written} written, {lost} lost (no free record: their bytes are missing from the estimate){}.",
            if failed > 0 { format!(", {failed} not taken (the allocation failed)") } else { String::new() }
        )?;
    }
    Ok(())
}

/// Everything after CMD ended: close the recording if CMD could not, write `-o`, print the summary.
fn summarize(
    args: &RecordArgs,
    pid: u32,
    lines: &ReportLines,
    status: Option<std::process::ExitStatus>,
) -> anyhow::Result<()> {
    let program = args.command.first().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let Some((_, _, dir)) = lines.started.iter().find(|(p, _, _)| *p == pid) else {
        if let Some((_, msg)) = lines.failed.iter().find(|(p, _)| *p == pid) {
            bail!("the recording could not start in {program}: {msg}");
        }
        bail!(
            "{program} {} without the recorder: {LIBRARY_FILE_NAME} was not loaded into it (a program that clears LD_PRELOAD from its environment before it re-executes itself, or one the loader runs in secure mode); nothing was recorded",
            status.map_or_else(|| "ran".to_owned(), describe)
        );
    };
    let finished = lines.finished.iter().find(|f| f.0 == pid);
    let mut out = std::io::stdout().lock();
    writeln!(out)?;
    if let Some(status) = status {
        writeln!(out, "{program} {}.", describe(status))?;
    }
    // The programs the process exec'd: its recording followed it into each but, if an `exec` is
    // the pid's last line, the last one.
    let followed: Vec<&str> = lines.execs.iter().filter(|e| e.0 == pid && !e.5).map(|e| e.4.as_str()).collect();
    let unfollowed = lines.last_kind.get(&pid).is_some_and(|k| k == "exec");
    let into = &followed[..followed.len() - usize::from(unfollowed && !followed.is_empty())];
    if !into.is_empty() {
        writeln!(out, "{program} exec'd {} (same process): the recording follows it.", into.join(", which exec'd "))?;
    }
    // The sampler counts the wall-clock sampler's stack requests with its CPU samples (one
    // sample each, taken by the same handler).
    let what = if args.wall.is_some() { "Samples (CPU, and wall-clock stack requests)" } else { "CPU samples" };
    match finished {
        Some((_, why, ..)) => {
            if why == "duration" {
                writeln!(out, "Recording stopped after --duration while {program} went on.")?;
            }
            let (taken, written, lost) = lines.sample_counts(pid).unwrap_or_default();
            writeln!(out, "{what}: {taken} taken, {written} written, {lost} lost.")?;
            write_allocation_counts(&mut out, lines, pid)?;
        }
        None if unfollowed => {
            drop(out);
            // The exec'd program never loaded the library: its last chunk is the final one.
            recorder::repository::repair(dir).with_context(|| format!("closing {}", dir.display()))?;
            out = std::io::stdout().lock();
            let (taken, written, lost) = lines.sample_counts(pid).unwrap_or_default();
            writeln!(
                out,
                "The recording ends at the exec of {}: the recorder cannot enter it (statically linked, setuid, or run without LD_PRELOAD).",
                followed.last().copied().unwrap_or("another program")
            )?;
            writeln!(out, "{what}: {taken} taken, {written} written, {lost} lost.")?;
            write_allocation_counts(&mut out, lines, pid)?;
        }
        None => {
            drop(out);
            // CMD could not finish its recording (_exit, a fatal signal, SIGKILL): close its chunks
            // at what was published, so every JFR reader accepts them.
            let repaired = recorder::repository::repair(dir).with_context(|| format!("closing {}", dir.display()))?;
            out = std::io::stdout().lock();
            writeln!(
                out,
                "The recording was not finished by {program} (no exit handler ran); it keeps what was published up to its last flush{}.",
                if repaired.chunks_closed.is_empty() && repaired.final_chunk.is_none() { "" } else { " (chunks closed)" }
            )?;
        }
    }
    writeln!(out)?;
    writeln!(out, "Repository: {}", dir.display())?;
    // Children in one line: how many, and the busiest (a build runs thousands).
    // A child that exec'd has one line per image.
    let mut seen = std::collections::HashSet::new();
    let children: Vec<&(u32, u32, PathBuf)> = lines.started.iter().filter(|c| c.0 != pid && seen.insert(c.0)).collect();
    if !children.is_empty() {
        let written = |p: u32| lines.sample_counts(p).map_or(0, |c| c.1);
        let total: u64 = children.iter().map(|c| written(c.0)).sum();
        // The first of the busiest in start order.
        let busiest = children.iter().copied().rev().max_by_key(|c| written(c.0)).expect("not empty");
        let (p, pp, d) = busiest;
        writeln!(
            out,
            "Child processes recorded ({}): {total} CPU samples written; busiest: pid {p} (parent {pp}), {} samples, {}{}",
            children.len(),
            written(*p),
            d.display(),
            dir.parent().map_or_else(String::new, |base| format!(" (all in {})", base.display()))
        )?;
    }
    write_output(dir, &args.output).with_context(|| format!("writing {}", args.output.display()))?;
    writeln!(out, "Recording:  {}", args.output.display())?;
    out.flush()?;
    drop(out);
    crate::commands::summary::run(&SummaryConfig {
        path: dir.clone(),
        recordings: source::Recordings::All,
        json: false,
    })?;
    crate::commands::demo::print_top(dir, args.top)?;
    if let Some(svg) = &args.flamegraph {
        crate::commands::demo::write_flamegraph(dir, svg, &format!("recorder record: {program}"))?;
        println!("\nFlame graph: {}", svg.display());
    }
    Ok(())
}

/// `-o`: the recording's chunk files in order, one after the other (a JFR file is its chunks),
/// written under a temporary name and renamed.
fn write_output(dir: &Path, out: &Path) -> anyhow::Result<()> {
    recorder::repository::layout::write_recording_file(dir, out)?;
    Ok(())
}

/// `RECORDER_PRELOAD`, else `librecorder_preload.so` next to this binary.
fn find_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(ENV_PRELOAD).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("{ENV_PRELOAD}={}: no such file", p.display());
        }
        return p.canonicalize().with_context(|| format!("{ENV_PRELOAD}={}", p.display()));
    }
    let exe = std::env::current_exe().context("finding the recorder binary")?;
    let beside = exe.with_file_name(LIBRARY_FILE_NAME);
    if beside.is_file() {
        return Ok(beside);
    }
    bail!(
        "{LIBRARY_FILE_NAME} not found next to {} (build it with `cargo build --release -p recorder-preload`, or point {ENV_PRELOAD} at it)",
        exe.display()
    )
}

/// CMD as exec will find it: a path as given, a bare name through `PATH`.
fn resolve_program(program: &OsString) -> anyhow::Result<PathBuf> {
    let p = Path::new(program);
    if program.to_string_lossy().contains('/') {
        if p.is_file() {
            return Ok(p.to_owned());
        }
        bail!("{}: no such file", p.display());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(p);
        if candidate.is_file() && is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    bail!("{}: command not found", p.display())
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.mode() & 0o111 != 0)
}

/// Refuses, before running it, a program the dynamic loader will not preload the library into:
/// a static executable (no loader at all) or a setuid/setgid one (secure mode ignores LD_PRELOAD
/// paths). A `#!` script is judged by its interpreter.
fn check_preloadable(path: &Path) -> anyhow::Result<()> {
    check_file(path, 0)
}

fn check_file(path: &Path, depth: u32) -> anyhow::Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if (meta.mode() & libc::S_ISUID != 0 && meta.uid() != euid)
        || (meta.mode() & libc::S_ISGID != 0 && meta.gid() != egid)
    {
        bail!(
            "{} is setuid/setgid: the dynamic loader ignores LD_PRELOAD for it, so it cannot be recorded",
            path.display()
        );
    }
    let mut head = vec![0u8; 4096];
    let n = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
        f.read(&mut head).with_context(|| format!("{}", path.display()))?
    };
    head.truncate(n);
    if head.starts_with(b"#!") && depth == 0 {
        let line = head.split(|b| *b == b'\n').next().unwrap_or(&[]);
        let text = String::from_utf8_lossy(&line[2..]);
        if let Some(interp) = text.split_whitespace().next() {
            return check_file(Path::new(interp), depth + 1);
        }
        return Ok(());
    }
    match elf_interpreter(path)? {
        Elf::Dynamic => Ok(()),
        Elf::Static => bail!(
            "{} is statically linked: it has no dynamic loader to preload the recorder into, so it cannot be recorded (embed the recorder crate instead)",
            path.display()
        ),
        Elf::Other => Ok(()),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Elf {
    /// Has a PT_INTERP: the dynamic loader starts it.
    Dynamic,
    /// An ELF executable without PT_INTERP.
    Static,
    /// Not an ELF file (exec decides).
    Other,
}

/// Reads the ELF header and program headers (64-bit little-endian, the targets we support).
fn elf_interpreter(path: &Path) -> anyhow::Result<Elf> {
    let bytes = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return Ok(Elf::Other);
    }
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |o: usize| bytes.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |o: usize| bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize);
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return Ok(Elf::Other);
    };
    for i in 0..phnum {
        let Some(kind) = u32_at(phoff + i * phentsize) else { break };
        if kind == 3 {
            return Ok(Elf::Dynamic);
        }
    }
    Ok(Elf::Static)
}

/// A fresh file name for the library's report lines.
fn report_file_path() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("recorder-record-{}-{nanos}.report", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_are_read_back() {
        let r = parse_report(
            "started 10 9 /tmp/r/2026_01_01_00_00_00_10\nstarted 11 10 /tmp/r/a b\nfinished 11 exit 5 4 1\nallocation 11 9 7 2 0\nfailed 12 repository /x: denied\ngarbage\n",
        );
        assert_eq!(r.started.len(), 2);
        assert_eq!(r.started[1], (11, 10, PathBuf::from("/tmp/r/a b")));
        assert_eq!(r.finished, vec![(11, "exit".to_owned(), 5, 4, 1)]);
        assert_eq!(r.failed, vec![(12, "repository /x: denied".to_owned())]);
        assert_eq!(r.allocation, vec![(11, [9, 7, 2, 0])]);

        // A process that exec'd twice (the first exec failed), then finished: every image counts.
        let r = parse_report(
            "started 10 9 /r/d\nexec 10 3 2 1 /bin/a b\nexec-failed 10 2\nstarted 10 9 /r/d\nexec 10 4 4 0 /bin/c\nstarted 10 9 /r/d\nfinished 10 exit 5 5 0\nexec 11 1 1 0 /static\n",
        );
        assert_eq!(r.execs.len(), 3);
        assert_eq!((r.execs[0].4.as_str(), r.execs[0].5, r.execs[1].5), ("/bin/a b", true, false));
        assert_eq!(r.sample_counts(10), Some((12, 11, 1)));
        assert_eq!(r.last_kind[&10], "finished");
        assert_eq!(r.last_kind[&11], "exec");
    }

    #[test]
    fn static_and_dynamic_executables_are_told_apart() {
        assert_eq!(elf_interpreter(Path::new("/bin/sh")).unwrap(), Elf::Dynamic);
        let exe = std::env::current_exe().unwrap();
        assert_eq!(elf_interpreter(&exe).unwrap(), Elf::Dynamic);
    }
}
