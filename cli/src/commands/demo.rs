//! `recorder demo`: records the library's built-in workload (several threads with distinct hot
//! functions and deep call chains, emitting typed events) under a real recording, then shows what
//! was recorded: where the files are, the summary, and the hottest functions of the CPU samples.

use crate::args::{DemoArgs, SummaryConfig};
use crate::demo_workload::{self as demo, DemoOptions};
use crate::source;
use anyhow::Context;
use jfr_format::Value;
use recorder::Recorder;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::time::Duration;

pub fn run(args: &DemoArgs) -> anyhow::Result<crate::Outcome> {
    let mut builder = Recorder::builder().name("recorder demo").sampling_period(args.period);
    if let Some(dir) = &args.repository {
        builder = builder.repository(dir);
    }
    if let Some(n) = args.stack_depth {
        builder = builder.stack_depth(n);
    }
    if let Some(m) = args.stack_depth_outer {
        // Alone, it keeps only the outermost frames; with --stack-depth, both ends.
        builder = builder.stack_depth_outer(m);
    }
    let rec = builder.start().context("starting the recording")?;
    let repository = rec.repository_dir().to_owned();
    eprintln!(
        "recording {} worker threads for {} s (sampling every {:?}) into {}",
        args.threads,
        args.seconds,
        args.period,
        repository.display()
    );
    let report =
        demo::run_with(&rec, &DemoOptions { duration: Duration::from_secs(args.seconds), threads: args.threads });
    let final_report = rec.stop_with_report().context("stopping the recording")?;
    if let Some(out) = &args.output {
        // After the stop, so the file has the last flush too (checkpoint, statistics, thread ends).
        write_recording(&repository, out).with_context(|| format!("writing {}", out.display()))?;
    }

    let mut out = std::io::stdout().lock();
    writeln!(out, "Recorded {} requests on {} threads in {} s.", report.requests, args.threads, args.seconds)?;
    if let Some(s) = &final_report.sampler {
        writeln!(
            out,
            "CPU samples: {} taken, {} written, {} lost; events lost: {}.",
            s.taken, final_report.stats.samples_written, s.lost, final_report.stats.events_lost
        )?;
    }
    writeln!(out)?;
    writeln!(out, "Repository: {}", repository.display())?;
    if let Some(o) = &args.output {
        writeln!(out, "Recording:  {}", o.display())?;
    }
    out.flush()?;
    drop(out);
    crate::commands::summary::run(&SummaryConfig {
        path: repository.clone(),
        recordings: source::Recordings::All,
        json: false,
    })?;
    print_top(&repository, args.top)?;
    // The flame graph goes next to the recording: `FILE.svg` for `-o FILE`, else into the
    // repository directory (whose readers only look at `*.jfr` files).
    let svg = match &args.output {
        Some(o) => {
            let mut name = o.clone().into_os_string();
            name.push(".svg");
            std::path::PathBuf::from(name)
        }
        None => repository.join("flamegraph.svg"),
    };
    let flamegraph = write_flamegraph(&repository, &svg, "recorder demo: CPU samples");
    let mut out = std::io::stdout().lock();
    writeln!(out)?;
    match &flamegraph {
        Ok(()) => writeln!(out, "Flame graph: {} (open it in a browser)", svg.display())?,
        Err(e) => writeln!(out, "No flame graph: {e:#}")?,
    }
    writeln!(
        out,
        "Files: repository {}{}",
        repository.display(),
        match &args.output {
            Some(o) => format!(", recording {}", o.display()),
            None => String::new(),
        }
    )?;
    writeln!(out)?;
    // Commands that run as printed: `recorder` only when that is what the shell finds.
    let (me, on_path) = invocation();
    let repo = shell_word(&repository.display().to_string());
    writeln!(out, "Next: {me} print --events demo.Request {repo}")?;
    match &args.output {
        Some(file) => writeln!(out, "      jfr summary {}", shell_word(&file.display().to_string()))?,
        None => writeln!(out, "      {me} dump {repo} -o demo.jfr && jfr summary demo.jfr")?,
    }
    if !on_path {
        writeln!(out, "(To type just `recorder`: cargo install --path cli, from the repository's root.)")?;
    }
    Ok(crate::Outcome::Clean)
}

/// Writes the finished repository as one file: its chunks in start order, as they are on disk (the
/// last one has the final flag), so the file holds exactly what the repository does.
fn write_recording(repository: &std::path::Path, out: &std::path::Path) -> anyhow::Result<()> {
    let source = source::load(repository, source::Recordings::All)?;
    if let Some(damage) = source.damage.first() {
        anyhow::bail!("the repository {} is damaged: {damage}", repository.display());
    }
    let mut bytes = Vec::new();
    for sc in &source.chunks {
        bytes.extend_from_slice(sc.chunk.bytes());
    }
    std::fs::write(out, bytes)?;
    Ok(())
}

/// How the user's shell runs this very binary: `recorder` when PATH finds this file under that
/// name, else its path (relative to the working directory when it is below it, as with
/// `cargo run`'s `target/release/recorder`). Also whether PATH found it.
fn invocation() -> (String, bool) {
    let Ok(me) = std::env::current_exe() else { return ("recorder".to_owned(), true) };
    let me = me.canonicalize().unwrap_or(me);
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path).map(|dir| dir.join("recorder")).find(|candidate| candidate.is_file())
    });
    if found.and_then(|p| p.canonicalize().ok()).as_ref() == Some(&me) {
        return ("recorder".to_owned(), true);
    }
    let cwd = std::env::current_dir().ok().and_then(|d| d.canonicalize().ok());
    let shown = match cwd.as_ref().and_then(|cwd| me.strip_prefix(cwd).ok()) {
        Some(relative) => std::path::Path::new(".").join(relative),
        None => me.clone(),
    };
    (shell_word(&shown.display().to_string()), false)
}

/// `word` as one word of a POSIX shell command line: as is when it has no special characters,
/// else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Writes the flame graph SVG of the CPU samples in `repository` to `svg`.
pub(crate) fn write_flamegraph(repository: &std::path::Path, svg: &std::path::Path, title: &str) -> anyhow::Result<()> {
    let source = source::load(repository, source::Recordings::All)?;
    let selection = crate::selection::Selection::default();
    let mut folded = crate::fold::Folded::default();
    let weighing = crate::profile::ProfileKind::Cpu.weighing();
    for sc in &source.chunks {
        folded.add_chunk(&sc.chunk, &weighing, &selection, crate::fold::FoldOptions::default())?;
    }
    if folded.counts.is_empty() {
        anyhow::bail!("no CPU samples were recorded");
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(svg).with_context(|| format!("{}", svg.display()))?);
    crate::commands::dump::write_flamegraph(&folded, title, "samples", &mut out)?;
    out.flush().with_context(|| format!("{}", svg.display()))?;
    Ok(())
}

/// The hottest functions of the recording's CPU samples: self (innermost frame) and total (anywhere
/// in the stack) shares.
pub(crate) fn print_top(path: &std::path::Path, top: usize) -> anyhow::Result<()> {
    let source = source::load(path, source::Recordings::All)?;
    let mut self_counts: HashMap<String, u64> = HashMap::new();
    let mut total_counts: HashMap<String, u64> = HashMap::new();
    let mut samples = 0u64;
    for sc in &source.chunks {
        let chunk = &sc.chunk;
        let Some(class) = chunk.metadata().class_by_name("jdk.ExecutionSample") else { continue };
        let Some(stack_index) = class.field_index("stackTrace") else { continue };
        let mut names_by_stack: HashMap<u64, Vec<String>> = HashMap::new();
        for event in chunk.events() {
            let Ok(event) = event else { break };
            if event.type_id != class.id {
                continue;
            }
            let Some(Value::Ref { key, .. }) = event.values.get(stack_index) else { continue };
            if !names_by_stack.contains_key(key) {
                let frames = match chunk.stack_trace_info(&event.values[stack_index]) {
                    Ok(Some(trace)) => trace.frames.iter().map(crate::frames::display_name).collect(),
                    _ => Vec::new(),
                };
                names_by_stack.insert(*key, frames);
            }
            let names = &names_by_stack[key];
            let Some(first) = names.first() else { continue };
            samples += 1;
            *self_counts.entry(first.clone()).or_default() += 1;
            let mut seen = HashSet::new();
            for n in names {
                if seen.insert(n) {
                    *total_counts.entry(n.clone()).or_default() += 1;
                }
            }
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out)?;
    if samples == 0 {
        writeln!(out, "No CPU samples were recorded.")?;
        return Ok(());
    }
    writeln!(out, "Hottest functions ({samples} CPU samples)")?;
    writeln!(out, "{:>7} {:>7}  function", "self", "total")?;
    let mut rows: Vec<(&String, &u64)> = self_counts.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (name, count) in rows.into_iter().take(top) {
        let total = total_counts.get(name).copied().unwrap_or(0);
        let pct = |n: u64| 100.0 * n as f64 / samples as f64;
        writeln!(out, "{:>6.1}% {:>6.1}%  {name}", pct(*count), pct(total))?;
    }
    Ok(())
}
