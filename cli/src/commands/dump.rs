//! `recorder dump`: the recording's events, selected by type (`--events`, `--exclude-events`), time
//! (`--since`) and thread (`--thread`), written as
//!
//! - `jfr` (default): a copy of the recording (what newer JDKs call `jfr scrub`). Each chunk is
//!   re-encoded: metadata records are copied, the checkpoints of the chain are copied with their
//!   deltas recomputed for their new offsets, kept event records are copied byte for byte, and a
//!   new header is written (state finished, final flag on the last chunk only). Chunks are
//!   written back to back with no trailing bytes.
//! - `json`: one JSON object per event and line, as `print --json`.
//! - `collapsed`: folded stacks `outer;...;inner weight`, identical stacks aggregated.
//! - `flamegraph`: an interactive SVG of those stacks, drawn by inferno.
//! - `pprof`: a gzipped profile.proto of the samples (see `pprof.rs`).
//! - `html`: the page `recorder view` writes, of the selected samples (`view.rs`).
//! - `firefox`: the Firefox Profiler's processed profile of the CPU samples and events
//!   (`firefox.rs`).
//! - `otlp`, `otlp-json`: an OpenTelemetry profiles export request of every kind of sample
//!   (see `otlp.rs`).
//!
//! The profile formats fold the stacks of a `--type` of samples (`profile.rs`: cpu by default),
//! or of the `--events` types with a stack trace, each event weighed as its kind says
//! (jdk.ObjectAllocationSample by its bytes). Thread-start frames of the runtime are folded away
//! unless `--keep-runtime-frames`; `--by-thread` roots each stack at its thread.
//!
//! Chunks are processed one at a time, in recording order, on this thread; every cache is per
//! chunk (constant keys are chunk-local). `--compress` wraps the output in a zstd stream (and a
//! file output's name gets `.zst`, see `args.rs`). A file output is written under a temporary
//! name and renamed, so it is never half-written; errors name the file asked for.

use crate::args::{DumpConfig, DumpFormat, DumpWeight, TypeFilter};
use crate::fold::Folded;
use crate::otlp;
use crate::pprof;
use crate::profile::{count_name, ProfileKind, Weighing};
use crate::render::{JsonRenderer, TypeInfo};
use crate::selection::{self, Selection};
use crate::source::{self, Damage, SourceChunk};
use crate::spans::{self, SpanNames};
use crate::Outcome;
use anyhow::Context;
use clap::ValueEnum;
use jfr_format::header::{ChunkHeader, FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, HEADER_SIZE};
use jfr_format::{varint, write, Item};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Removes the temporary file a `--pid` dump was written to.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn run(cfg: &DumpConfig) -> anyhow::Result<Outcome> {
    let _temporary = match cfg.pid {
        Some(pid) => {
            let guard = RemoveOnDrop(cfg.path.clone());
            recorder::control::request_dump(pid, &cfg.path).map_err(|e| anyhow::anyhow!("--pid {pid}: {e}"))?;
            Some(guard)
        }
        None => None,
    };
    let mut source = source::load(&cfg.path, cfg.recordings)?;
    source::check_type_names(cfg.filter.names(), &source.chunks)?;
    if let Some(thread) = &cfg.thread {
        source::check_thread_name(thread, &source.chunks)?;
    }
    let mut selection = Selection::new(&source.chunks, cfg.since, cfg.thread.clone());
    if cfg.live {
        let (chunk_start, id, objects) = selection::last_live_snapshot(&source.chunks)?.ok_or_else(|| {
            anyhow::anyhow!(
                "{}: no live-set snapshot (recorder.LiveSet): record with the live set tracked \
                 (RecorderBuilder::allocation_live_set(true))",
                cfg.path.display()
            )
        })?;
        if objects == 0 {
            eprintln!(
                "note: the last live-set snapshot holds no sampled allocation: nothing sampled is still allocated"
            );
        }
        selection = selection.with_snapshot(chunk_start, id);
    }
    let progress = progress_bar(&source.chunks);
    let mut chunk_damage = None;
    // Profile formats read everything first: a selection with no samples is an error about the
    // input, and no output file is made.
    let mut profile_output: Option<WriteProfile> = None;
    if cfg.format.is_profile() && cfg.weight == DumpWeight::SelfTime {
        // The instrumented scope tree: self time in ns; empty (a valid empty output) if the
        // recording has no scopes.
        let report = match spans::scope_report(source.chunks.iter().map(|sc| &sc.chunk)) {
            Ok(report) => report,
            Err(e) => anyhow::bail!("{}: reading recorder.ScopeTiming: {e}", cfg.path.display()),
        };
        let collapsed = report.collapsed(recorder::scope::Weight::SelfTime);
        let title = format!("recorder: {} (scope self time)", cfg.path.display());
        let flamegraph = cfg.format == DumpFormat::Flamegraph;
        profile_output = Some(Box::new(move |sink: &mut Sink| {
            if flamegraph {
                write_flamegraph_lines(collapsed.lines(), &title, "ns", sink)
            } else {
                Ok(sink.write_all(collapsed.as_bytes())?)
            }
        }));
    } else if cfg.format.is_profile() {
        let weighing = weighing(cfg, &source.chunks)?;
        let nothing = |what: &str| {
            let mut text = format!("{}: no {what} were selected", cfg.path.display());
            if cfg.thread.is_some() || cfg.since.is_some() {
                text.push_str(" (--thread and --since narrow the selection)");
            }
            anyhow::anyhow!("{text}: nothing to write")
        };
        if cfg.format == DumpFormat::Pprof {
            let kind = cfg.kind.unwrap_or(ProfileKind::Cpu);
            let (builder, damage) =
                pprof::build(&source.chunks, kind, cfg.fold.keep_runtime_frames, &selection, |n| progress.inc(n));
            chunk_damage = damage.map(|(i, e)| Damage::in_chunk(&source.chunks[i].file, e));
            if builder.events == 0 {
                progress.finish_and_clear();
                return nothing_to_write(source, chunk_damage, nothing(&weighing.what));
            }
            profile_output = Some(Box::new(move |sink: &mut Sink| Ok(builder.write(sink)?)));
        } else {
            let mut folded = Folded::default();
            let mut span_names = SpanNames::default();
            if cfg.fold.by_span {
                for sc in &source.chunks {
                    if let Err(e) = span_names.add_chunk(&sc.chunk) {
                        chunk_damage = Some(Damage::in_chunk(&sc.file, e));
                        break;
                    }
                }
            }
            for sc in &source.chunks {
                if let Err(e) = folded.add_chunk_with_spans(&sc.chunk, &weighing, &selection, cfg.fold, &span_names) {
                    chunk_damage = Some(Damage::in_chunk(&sc.file, e));
                    break;
                }
                progress.inc(sc.chunk.size());
            }
            if cfg.format == DumpFormat::Flamegraph {
                if folded.counts.is_empty() && cfg.live {
                    progress.finish_and_clear();
                    anyhow::bail!(
                        "{}: no sampled allocation is still allocated: no flame graph to draw",
                        cfg.path.display()
                    );
                }
                if folded.counts.is_empty() {
                    progress.finish_and_clear();
                    return nothing_to_write(source, chunk_damage, nothing(&weighing.what));
                }
                let title = format!("recorder: {} ({})", cfg.path.display(), weighing.what);
                let count_name = count_name(weighing.unit);
                profile_output =
                    Some(Box::new(move |sink: &mut Sink| write_flamegraph(&folded, &title, count_name, sink)));
            } else {
                profile_output = Some(Box::new(move |sink: &mut Sink| {
                    for line in folded.lines() {
                        writeln!(sink, "{line}")?;
                    }
                    Ok(())
                }));
            }
        }
    }
    if matches!(cfg.format, DumpFormat::Otlp | DumpFormat::OtlpJson) {
        let live = selection::last_live_snapshot(&source.chunks)?
            .map(|(start, id, _)| selection.clone().with_snapshot(start, id));
        let origin = otlp::Origin {
            service_name: cfg.service_name.clone(),
            pid: cfg.pid.map(i64::from).or_else(|| recording_pid(&source.chunks)),
        };
        let (export, damage) = otlp::build(&source.chunks, &selection, live, false, &origin);
        chunk_damage = damage.map(|(i, e)| Damage::in_chunk(&source.chunks[i].file, e));
        progress.inc(source.chunks.iter().map(|sc| sc.chunk.size()).sum());
        if export.samples == 0 {
            progress.finish_and_clear();
            let mut text = format!("{}: no samples (CPU, wall-clock or allocation) were selected", cfg.path.display());
            if cfg.thread.is_some() || cfg.since.is_some() {
                text.push_str(" (--thread and --since narrow the selection)");
            }
            return nothing_to_write(source, chunk_damage, anyhow::anyhow!("{text}: nothing to write"));
        }
        let json = cfg.format == DumpFormat::OtlpJson;
        profile_output = Some(Box::new(move |sink: &mut Sink| {
            let bytes = if json { otlp::to_json(&export.request)? } else { otlp::to_protobuf(&export.request) };
            Ok(sink.write_all(&bytes)?)
        }));
    }
    let mut sink = Sink::open(cfg).with_context(|| sink_name(cfg))?;
    let result = match (cfg.format, profile_output) {
        (DumpFormat::Jfr, _) => write_jfr(&source.chunks, cfg, &selection, &mut sink, &progress, &mut chunk_damage),
        (DumpFormat::Json, _) => write_json(&source.chunks, cfg, &selection, &mut sink, &progress, &mut chunk_damage)
            .and_then(|written| {
                if written && chunk_damage.is_none() {
                    write_scope_tree(&source.chunks, cfg, &mut sink)?;
                }
                Ok(written)
            }),
        (DumpFormat::Html, _) => {
            let title = format!("recorder: {}", cfg.path.display());
            // An error goes through `result`, so the output file is abandoned as for the other formats.
            super::view::page_of(&source.chunks, &selection, &title, !source.damage.is_empty())
                .and_then(|page| Ok(sink.write_all(&page).map(|()| true)?))
        }
        (DumpFormat::Firefox, _) => {
            let title = format!("recorder: {}", cfg.path.display());
            crate::firefox::write(&source.chunks, &selection, &title, &mut sink).map(|()| true)
        }
        (_, Some(write)) => write(&mut sink).map(|()| true),
        (_, None) => Ok(true),
    };
    progress.finish_and_clear();
    match result {
        Ok(true) => {
            sink.finish().with_context(|| sink_name(cfg))?;
            if cfg.zst_added {
                eprintln!("note: wrote {} (--compress writes zstd; the name says so)", sink_name(cfg));
            }
        }
        Ok(false) => sink.abandon(),
        Err(e) => {
            sink.abandon();
            return Err(e).with_context(|| sink_name(cfg));
        }
    }
    if let Some(d) = chunk_damage {
        source.damage.insert(0, d);
    }
    source.report_damage();
    Ok(if source.damage.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}

/// No samples to write: the damage that stopped the reading, if any (no output), else `error`.
fn nothing_to_write(
    mut source: source::Source,
    damage: Option<Damage>,
    error: anyhow::Error,
) -> anyhow::Result<Outcome> {
    if let Some(d) = damage {
        source.damage.insert(0, d);
    }
    if source.damage.is_empty() {
        return Err(error);
    }
    source.report_damage();
    Ok(Outcome::Damaged)
}

/// Writes a profile format's output, once its samples are gathered.
type WriteProfile = Box<dyn FnOnce(&mut Sink) -> anyhow::Result<()>>;

fn sink_name(cfg: &DumpConfig) -> String {
    cfg.output.as_ref().map_or_else(|| "stdout".to_owned(), |o| o.display().to_string())
}

/// What the profile formats fold: the `--events` types that have a stack trace, or the samples of
/// the `--type` (cpu by default).
fn weighing(cfg: &DumpConfig, chunks: &[SourceChunk]) -> anyhow::Result<Weighing> {
    if cfg.live {
        return Ok(Weighing::live());
    }
    let kind = cfg.kind.unwrap_or(ProfileKind::Cpu);
    match &cfg.filter {
        TypeFilter::Only(names) => {
            let with_stacks: Vec<String> = names
                .iter()
                .filter(|n| {
                    chunks.iter().any(|c| {
                        c.chunk.metadata().class_by_name(n).is_some_and(|k| k.field_index("stackTrace").is_some())
                    })
                })
                .cloned()
                .collect();
            if with_stacks.is_empty() {
                anyhow::bail!("none of the event types {} has a stack trace: nothing to fold", names.join(", "));
            }
            Ok(Weighing::of_events(&with_stacks))
        }
        TypeFilter::Except(names) if kind.contributors().iter().any(|c| names.iter().any(|n| n == c.event)) => {
            anyhow::bail!(
                "--type {} folds {}, which --exclude-events removes",
                kind.to_possible_value().map_or_else(String::new, |v| v.get_name().to_owned()),
                kind.weighing().names().join(", ")
            )
        }
        _ => {
            let weighing = kind.weighing();
            let declared =
                weighing.names().iter().any(|n| chunks.iter().any(|c| c.chunk.metadata().class_by_name(n).is_some()));
            if !declared && !chunks.is_empty() {
                anyhow::bail!(
                    "{}: the recording has no {} (no {} events)",
                    cfg.path.display(),
                    weighing.what,
                    weighing.names().join(", ")
                );
            }
            Ok(weighing)
        }
    }
}

/// The process id a recording's directory name gives (`2026_11_29_16_36_53_10829`), if its chunks
/// are in one.
fn recording_pid(chunks: &[SourceChunk]) -> Option<i64> {
    let dir = chunks.first()?.file.parent()?.file_name()?.to_str()?;
    recorder::repository::layout::recording_dir_pid(dir).map(i64::from)
}

/// `--format json`: after the events, the merged scope tree (when the recording has
/// recorder.ScopeTiming events and the selection keeps them), as one more line:
/// `{"type":"recorder.ScopeTree","values":{"deterministic":..,"unit":"ns","roots":[..]}}`.
fn write_scope_tree(chunks: &[SourceChunk], cfg: &DumpConfig, out: &mut Sink) -> anyhow::Result<()> {
    let declared = chunks.iter().any(|c| c.chunk.metadata().class_by_name("recorder.ScopeTiming").is_some());
    if !declared || !cfg.filter.keeps("recorder.ScopeTiming") || cfg.thread.is_some() {
        return Ok(());
    }
    let report = spans::scope_report(chunks.iter().map(|sc| &sc.chunk))?;
    if report.nodes.is_empty() {
        return Ok(());
    }
    writeln!(out, "{{\"type\":\"recorder.ScopeTree\",\"values\":{}}}", report.to_json())?;
    Ok(())
}

/// Draws collapsed `lines` as a flame graph SVG (inferno); no lines (nothing has weight) give an
/// empty flame graph, a valid SVG that says so.
pub fn write_flamegraph_lines<'a>(
    lines: impl Iterator<Item = &'a str>,
    title: &str,
    count_name: &str,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let lines: Vec<&str> = lines.collect();
    if lines.is_empty() {
        let text = format!("{title}: nothing has weight (no scope entered, or deterministic mode)");
        let mut escaped = String::new();
        for c in text.chars() {
            match c {
                '<' => escaped.push_str("&lt;"),
                '>' => escaped.push_str("&gt;"),
                '&' => escaped.push_str("&amp;"),
                c => escaped.push(c),
            }
        }
        write!(
            out,
            "<?xml version=\"1.0\" standalone=\"no\"?>\n<svg version=\"1.1\" width=\"1200\" height=\"60\" \
             xmlns=\"http://www.w3.org/2000/svg\"><text x=\"600\" y=\"30\" text-anchor=\"middle\">{escaped}</text></svg>\n"
        )?;
        return Ok(());
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = count_name.to_owned();
    inferno::flamegraph::from_lines(&mut options, lines, out).context("drawing the flame graph")
}

/// Draws `folded` as an interactive flame graph SVG (inferno).
pub fn write_flamegraph(folded: &Folded, title: &str, count_name: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = count_name.to_owned();
    let lines: Vec<String> = folded.lines().collect();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .context("drawing the flame graph")
}

/// A progress bar over the bytes of the chunks, on stderr when it is a terminal and the input is
/// large enough to take a while.
fn progress_bar(chunks: &[SourceChunk]) -> indicatif::ProgressBar {
    const SHOW_FROM_BYTES: u64 = 64 << 20;
    let total: u64 = chunks.iter().map(|c| c.chunk.size()).sum();
    if total < SHOW_FROM_BYTES || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} dump [{bar:40}] {bytes}/{total_bytes} ({eta} left)")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Where output goes: a file (written as `OUT.part`, renamed at the end) or stdout, zstd-compressed
/// with `--compress`.
struct Sink {
    out: Option<Out>,
    file: Option<(std::fs::File, PathBuf, PathBuf)>,
}

enum Out {
    Plain(Box<dyn Write>),
    Zstd(zstd::stream::write::Encoder<'static, Box<dyn Write>>),
}

impl Sink {
    fn open(cfg: &DumpConfig) -> anyhow::Result<Sink> {
        let (base, file): (Box<dyn Write>, _) = match &cfg.output {
            // A device or pipe (`-o /dev/null`, a FIFO) is written directly.
            Some(path) if crate::args::is_special_file(path) => {
                let f = std::fs::OpenOptions::new().write(true).open(path)?;
                (Box::new(std::io::BufWriter::with_capacity(1 << 16, f)) as Box<dyn Write>, None)
            }
            Some(path) => {
                let mut partial = path.clone().into_os_string();
                partial.push(".part");
                let partial = PathBuf::from(partial);
                // A stale `.part` of ours is replaced; a symlink planted there is never followed
                // (O_NOFOLLOW, then O_EXCL on a fresh name).
                if std::fs::symlink_metadata(&partial).is_ok_and(|m| m.is_file()) {
                    let _ = std::fs::remove_file(&partial);
                }
                let f = {
                    use std::os::unix::fs::OpenOptionsExt;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&partial)?
                };
                let sync = f.try_clone()?;
                (Box::new(std::io::BufWriter::with_capacity(1 << 20, f)), Some((sync, partial, path.clone())))
            }
            None => (Box::new(std::io::BufWriter::with_capacity(1 << 16, std::io::stdout())), None),
        };
        let out = if cfg.compress {
            let mut encoder = zstd::stream::write::Encoder::new(base, 3)?;
            // The content size is unknown up front; a checksum lets readers detect corruption.
            encoder.include_checksum(true)?;
            Out::Zstd(encoder)
        } else {
            Out::Plain(base)
        };
        Ok(Sink { out: Some(out), file })
    }

    fn writer(&mut self) -> std::io::Result<&mut dyn Write> {
        match self.out.as_mut() {
            Some(Out::Plain(w)) => Ok(w),
            Some(Out::Zstd(w)) => Ok(w),
            None => Err(std::io::Error::other("output already closed")),
        }
    }

    /// Flushes everything and moves the file into place.
    fn finish(&mut self) -> std::io::Result<()> {
        let mut base = match self.out.take() {
            Some(Out::Plain(w)) => w,
            Some(Out::Zstd(w)) => w.finish()?,
            None => return Ok(()),
        };
        base.flush()?;
        drop(base);
        if let Some((sync, partial, path)) = self.file.take() {
            sync.sync_all()?;
            std::fs::rename(&partial, &path)?;
        }
        Ok(())
    }

    /// Drops the output: a file output is removed.
    fn abandon(&mut self) {
        self.out = None;
        if let Some((_, partial, _)) = self.file.take() {
            let _ = std::fs::remove_file(partial);
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer()?.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.writer()?.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer()?.flush()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if self.file.is_some() {
            self.abandon();
        }
    }
}

/// The kept events as JSON lines. Returns true (output is written even when empty).
fn write_json(
    chunks: &[SourceChunk],
    cfg: &DumpConfig,
    selection: &Selection,
    out: &mut Sink,
    progress: &indicatif::ProgressBar,
    damage: &mut Option<Damage>,
) -> anyhow::Result<bool> {
    let mut info: Option<(std::sync::Arc<jfr_format::read::TypeTable>, TypeInfo, Vec<bool>)> = None;
    let mut buf = Vec::with_capacity(1 << 17);
    for sc in chunks {
        let chunk = &sc.chunk;
        if !info.as_ref().is_some_and(|(t, _, _)| std::sync::Arc::ptr_eq(t, chunk.types())) {
            let types = chunk.types();
            let keep = types.classes().iter().map(|c| c.is_event() && cfg.filter.keeps(&c.name)).collect();
            info = Some((std::sync::Arc::clone(types), TypeInfo::new(types), keep));
        }
        let Some((_, type_info, keep)) = info.as_ref() else { continue };
        let mut renderer = JsonRenderer::new(chunk, type_info);
        let mut select = selection.for_chunk(chunk);
        let mut failure = None;
        for event in chunk.events() {
            let rendered = event.and_then(|event| {
                if type_info.class_index(event.type_id).is_some_and(|i| keep[i]) && select.keeps(&event)? {
                    renderer.event(&event, &mut buf)?;
                }
                Ok(())
            });
            if let Err(e) = rendered {
                failure = Some(e);
                break;
            }
            if buf.len() >= 1 << 16 {
                out.write_all(&buf)?;
                buf.clear();
            }
        }
        out.write_all(&buf)?;
        buf.clear();
        if let Some(e) = failure {
            *damage = Some(Damage::in_chunk(&sc.file, e));
            break;
        }
        progress.inc(chunk.size());
    }
    Ok(true)
}

/// The re-encoded chunks as one JFR file. Returns false when nothing was readable (no output).
fn write_jfr(
    chunks: &[SourceChunk],
    cfg: &DumpConfig,
    selection: &Selection,
    out: &mut Sink,
    progress: &indicatif::ProgressBar,
    damage: &mut Option<Damage>,
) -> anyhow::Result<bool> {
    // Chunks are copied with their constant-pool keys, unique within one recording only. The
    // JDK's reader keeps what it resolved for a key from one chunk to the next (docs/jfr-format.md),
    // so in a merge of recordings it names one recording's frames, threads and classes by
    // another's: say so rather than let it show wrong names silently.
    let recordings: std::collections::BTreeSet<&std::path::Path> =
        chunks.iter().filter_map(|c| c.file.parent()).collect();
    if recordings.len() > 1 {
        eprintln!(
            "warning: the output merges {} recordings, whose constant-pool ids overlap: the JDK's jfr tool and \
             streaming API name one recording's frames, threads and classes by another's (recorder, JDK Mission \
             Control and jfrs read it right); for the JDK, dump each recording alone (without --all)",
            recordings.len()
        );
    }
    // The last chunk is held back until we know it is the last (it gets the final flag). A
    // damaged chunk is not written: the output holds the chunks that were fully readable.
    let mut held: Option<Vec<u8>> = None;
    for sc in chunks {
        let bytes = match rewrite_chunk(sc, cfg, selection) {
            Ok(bytes) => bytes,
            Err(e) => {
                *damage = Some(Damage::in_chunk(&sc.file, e));
                break;
            }
        };
        if let Some(previous) = held.replace(bytes) {
            out.write_all(&previous)?;
        }
        progress.inc(sc.chunk.size());
    }
    let Some(mut last) = held else {
        return Ok(false); // nothing readable: no output file
    };
    // Flags are the big-endian u16 at 66; the JDK reads byte 67.
    last[67] |= FLAG_FINAL_CHUNK as u8;
    out.write_all(&last)?;
    Ok(true)
}

/// Re-encodes one chunk with only the kept events. The final flag is left clear.
fn rewrite_chunk(sc: &SourceChunk, cfg: &DumpConfig, selection: &Selection) -> jfr_format::Result<Vec<u8>> {
    let chunk = &sc.chunk;
    let mut select = selection.for_chunk(chunk);
    let types = chunk.types();
    let keep: Vec<bool> = types.classes().iter().map(|c| c.is_event() && cfg.filter.keeps(&c.name)).collect();
    let old = *chunk.header();
    let chain = chunk.checkpoint_offsets();
    let mut out = Vec::with_capacity(chunk.size() as usize);
    out.resize(HEADER_SIZE, 0);
    let mut metadata_offset = 0u64;
    let mut last_checkpoint = 0u64;
    for record in chunk.records() {
        let record = record?;
        if record.offset < HEADER_SIZE as u64 {
            continue;
        }
        match record.type_id {
            0 => {
                // Only the metadata the header names is current; earlier ones are copied too, so
                // that the chunk keeps its history, but the header points at the current one.
                if record.offset == old.metadata_offset as u64 || metadata_offset == 0 {
                    metadata_offset = out.len() as u64;
                }
                out.extend_from_slice(&record.bytes);
            }
            1 => {
                if chain.binary_search(&record.offset).is_err() {
                    // Not on the chain the header starts: readers never see it.
                    continue;
                }
                let offset = out.len() as u64;
                let delta = if last_checkpoint == 0 { 0 } else { last_checkpoint as i64 - offset as i64 };
                relink_checkpoint(&record.bytes, delta, &mut out, sc, record.offset)?;
                last_checkpoint = offset;
            }
            id => {
                if types.class_index(id).is_some_and(|i| keep[i]) && selected(chunk, record.offset, &mut select)? {
                    out.extend_from_slice(&record.bytes);
                }
            }
        }
    }
    let header = ChunkHeader {
        chunk_size: out.len() as i64,
        cp_offset: last_checkpoint as i64,
        metadata_offset: metadata_offset as i64,
        state: jfr_format::header::STATE_FINISHED,
        flags: FLAG_COMPRESSED_INTS,
        ..old
    };
    out[..HEADER_SIZE].copy_from_slice(&header.encode());
    Ok(out)
}

/// Appends the checkpoint record `bytes` with its delta replaced by `delta`.
fn relink_checkpoint(
    bytes: &[u8],
    delta: i64,
    out: &mut Vec<u8>,
    sc: &SourceChunk,
    offset: u64,
) -> jfr_format::Result<()> {
    let at = sc.chunk.base() + offset;
    let bad = || jfr_format::Error::UnexpectedEof { offset: at, expected: "a checkpoint header" };
    // size, type id, start time, duration, delta: five varints; the rest is copied as is.
    let mut lead = jfr_format::LeadingFields::new(bytes);
    let fields: [u64; 5] = lead.varints().ok_or_else(bad)?;
    let rest = lead.rest();
    let mut body = Vec::with_capacity(rest.len() + 32);
    write::put_varint(&mut body, 1);
    write::put_varint(&mut body, fields[2]);
    write::put_varint(&mut body, fields[3]);
    write::put_long(&mut body, delta);
    body.extend_from_slice(rest);
    // The size counts its own bytes: find the width that holds the total.
    let mut size = body.len() as u64 + 1;
    while varint::encoded_len(size) + body.len() != size as usize {
        size = (varint::encoded_len(size) + body.len()) as u64;
    }
    write::put_varint(out, size);
    out.extend_from_slice(&body);
    Ok(())
}

/// Does the selection keep the event record at chunk offset `offset` (decoded only when the
/// selection has a time or thread condition)?
fn selected(
    chunk: &jfr_format::Chunk,
    offset: u64,
    select: &mut selection::ChunkSelection<'_>,
) -> jfr_format::Result<bool> {
    if select.is_all() {
        return Ok(true);
    }
    match chunk.items(offset).next() {
        Some(Ok(Item::Event(event))) => select.keeps(&event),
        Some(Err(e)) => Err(e),
        _ => Ok(false),
    }
}
