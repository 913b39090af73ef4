//! `recorder top`: the hottest functions of the CPU samples (`jdk.ExecutionSample`) over a sliding
//! window: self (innermost frame) and total (anywhere in the stack) share.
//!
//! A file is a finished recording: one table of the last `--window` before its end is printed. A
//! directory is a repository followed live with `recorder::consumer` (every recording of it, in
//! start order, compressed finished chunks too): every `--interval` what was published since the
//! last look is read and the table printed again; when the recording's final chunk was read, the
//! table is printed once more and `top` exits (the recording is over). The window ends at the
//! latest published time of the recording (the newest chunk header's end, or the newest sample), so
//! a stopped recording still shows its last window.

use crate::args::TopConfig;
use crate::source::{self, Damage};
use crate::spans::SpanNames;
use crate::Outcome;
use jfr_format::header::HEADER_SIZE;
use jfr_format::{Chunk, Item, StackTraceInfo, Value};
use recorder::consumer::{ConsumedEvent, ConsumerError, EventIter, EventStream, Polled};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A stack's frame names, innermost first.
type Frames = Arc<[Arc<str>]>;

/// One CPU sample: when, and its frame names (innermost first).
struct Sample {
    time_ns: i64,
    frames: Frames,
    /// The span it was taken in (0: none).
    span: u64,
}

/// The samples of the window, and the end of the recording as known so far.
#[derive(Default)]
struct Samples {
    samples: VecDeque<Sample>,
    end_ns: i64,
    /// Span names, for `--by-span`.
    spans: SpanNames,
}

/// Per-chunk decoding state: the stack cache (stack keys are chunk-local).
struct ChunkReader {
    sample_type: Option<u64>,
    stacks: HashMap<u64, Arc<[Arc<str>]>>,
    /// recorder.Span: type id and the indexes of spanId, parentSpanId, name.
    span_type: Option<(u64, [usize; 3])>,
}

fn span_type(chunk: &Chunk) -> Option<(u64, [usize; 3])> {
    let c = chunk.metadata().class_by_name("recorder.Span")?;
    Some((c.id, [c.field_index("spanId")?, c.field_index("parentSpanId")?, c.field_index("name")?]))
}

impl ChunkReader {
    fn new(chunk: &Chunk) -> ChunkReader {
        ChunkReader {
            sample_type: chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id),
            stacks: HashMap::new(),
            span_type: span_type(chunk),
        }
    }

    /// Adds the samples of `chunk` from chunk offset `from`; returns where it stopped.
    fn read(&mut self, chunk: &Chunk, from: u64, samples: &mut Samples) -> jfr_format::Result<u64> {
        let h = chunk.header();
        samples.end_ns = samples.end_ns.max(h.start_nanos.saturating_add(h.duration_nanos));
        if self.sample_type.is_none() {
            // New metadata may declare it later.
            self.sample_type = chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id);
        }
        if self.span_type.is_none() {
            self.span_type = span_type(chunk);
        }
        let mut items = chunk.items(from);
        for item in items.by_ref() {
            let Item::Event(event) = item? else { continue };
            if let Some((id, [span, parent, name])) = self.span_type.filter(|(id, _)| *id == event.type_id) {
                let _ = id;
                samples.spans.add_event(chunk, &event.values, span, parent, name);
                continue;
            }
            if Some(event.type_id) != self.sample_type {
                continue;
            }
            let frames = match chunk.event_field(&event, "stackTrace") {
                Some(v @ Value::Ref { key, .. }) => match self.stacks.get(key) {
                    Some(f) => Arc::clone(f),
                    None => {
                        let f = frames(chunk, v)?;
                        self.stacks.insert(*key, Arc::clone(&f));
                        f
                    }
                },
                Some(v) => frames(chunk, v)?,
                None => continue,
            };
            let time_ns = chunk.ticks_to_epoch_nanos(event.start_ticks());
            let span = chunk.event_field(&event, "spanId").and_then(Value::as_i64).map_or(0, |s| s.max(0) as u64);
            samples.push(Sample { time_ns, frames, span });
        }
        Ok(items.position())
    }
}

fn frames(chunk: &Chunk, value: &Value) -> jfr_format::Result<Arc<[Arc<str>]>> {
    Ok(match chunk.stack_trace_info(value)? {
        Some(t) => t.frames.iter().map(|f| Arc::from(crate::frames::display_name(f))).collect(),
        None => Arc::from(Vec::new()),
    })
}

pub fn run(cfg: &TopConfig) -> anyhow::Result<Outcome> {
    let meta = std::fs::metadata(&cfg.path).map_err(|e| anyhow::anyhow!("{}: {e}", cfg.path.display()))?;
    if !meta.is_dir() {
        return run_file(cfg);
    }
    let dir = source::recording_dir(&cfg.path, cfg.recordings)?;
    let mut stream = EventStream::open_repository(&dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    stream.all_recordings(true);
    let mut events = stream.iter();
    let mut samples = Samples::default();
    let mut names = StackNames::default();
    let terminal = std::io::stdout().is_terminal();
    loop {
        let ended = read_published(&mut events, &mut samples, &mut names);
        let table = table(&samples, cfg, &dir);
        let mut out = std::io::stdout().lock();
        if terminal {
            // Clear the screen and home the cursor: the table replaces the previous one.
            out.write_all(b"\x1b[2J\x1b[H")?;
        }
        out.write_all(table.as_bytes())?;
        if !terminal {
            out.write_all(b"\n")?;
        }
        out.flush()?;
        drop(out);
        if cfg.once || ended {
            return Ok(Outcome::Clean);
        }
        std::thread::sleep(cfg.interval);
    }
}

/// Reads the samples and spans published since the last call, reporting problems on stderr;
/// `true` when the recording is over (its final chunk was read).
fn read_published(events: &mut EventIter, samples: &mut Samples, names: &mut StackNames) -> bool {
    let want = |name: &str| name == "jdk.ExecutionSample" || name == "recorder.Span";
    let ended = loop {
        match events.poll_next(&want) {
            Polled::Event(ev) if ev.type_name() == "recorder.Span" => {
                if let (Some(id), Some(parent)) = (ev.field_i64("spanId"), ev.field_i64("parentSpanId")) {
                    samples.spans.add(id as u64, parent as u64, ev.field_str("name").unwrap_or_default());
                }
            }
            Polled::Event(ev) => samples.add_consumed(&ev, names),
            Polled::Error(e) => eprintln!("error: {}", damage(e)),
            Polled::Idle => break false,
            Polled::Ended => break true,
        }
    };
    samples.end_ns = samples.end_ns.max(events.published_end_nanos());
    ended
}

/// A problem of the followed repository, as the other commands report damage.
fn damage(e: ConsumerError) -> Damage {
    let (file, problem) = match e {
        ConsumerError::Io { path, source } => (path, anyhow::Error::new(source)),
        ConsumerError::Format { path, source } => (path, anyhow::Error::new(source)),
        other => (PathBuf::new(), anyhow::anyhow!("{other}")),
    };
    Damage { file: Arc::new(file), problem }
}

/// The frame names of the stacks of the chunk being read (stacks are chunk-local).
#[derive(Default)]
struct StackNames {
    chunk_start_ns: i64,
    /// By the address of the stack, which the entry keeps alive.
    by_stack: HashMap<*const StackTraceInfo, (Arc<StackTraceInfo>, Frames)>,
}

impl StackNames {
    fn of(&mut self, ev: &ConsumedEvent) -> Frames {
        let Some(stack) = ev.stack_trace_arc() else { return Arc::from(Vec::new()) };
        if ev.chunk_start_nanos() != self.chunk_start_ns {
            self.chunk_start_ns = ev.chunk_start_nanos();
            self.by_stack.clear();
        }
        let (_, frames) = self.by_stack.entry(Arc::as_ptr(&stack)).or_insert_with(|| {
            let frames = stack.frames.iter().map(|f| Arc::from(crate::frames::display_name(f))).collect();
            (Arc::clone(&stack), frames)
        });
        Arc::clone(frames)
    }
}

impl Samples {
    /// One CPU sample read from the repository (without a `stackTrace` field: not counted).
    fn add_consumed(&mut self, ev: &ConsumedEvent, names: &mut StackNames) {
        if ev.field("stackTrace").is_none() {
            return;
        }
        let span = ev.field_i64("spanId").map_or(0, |s| s.max(0) as u64);
        self.push(Sample { time_ns: ev.start_nanos(), frames: names.of(ev), span });
    }

    fn push(&mut self, sample: Sample) {
        self.end_ns = self.end_ns.max(sample.time_ns);
        self.samples.push_back(sample);
    }
}

/// A finished file: one table.
fn run_file(cfg: &TopConfig) -> anyhow::Result<Outcome> {
    let mut source = source::load(&cfg.path, cfg.recordings)?;
    let mut samples = Samples::default();
    let mut damage = Vec::new();
    for sc in &source.chunks {
        let mut reader = ChunkReader::new(&sc.chunk);
        if let Err(e) = reader.read(&sc.chunk, HEADER_SIZE as u64, &mut samples) {
            damage.push(Damage::in_chunk(&sc.file, e));
            break;
        }
    }
    // Nothing readable: the error alone, no empty table.
    if !source.chunks.is_empty() {
        let mut out = std::io::stdout().lock();
        out.write_all(table(&samples, cfg, &cfg.path).as_bytes())?;
        out.flush()?;
    }
    source.damage.splice(0..0, damage);
    source.report_damage();
    Ok(if source.damage.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}

/// The table of the window ending at the recording's end.
fn table(samples: &Samples, cfg: &TopConfig, path: &Path) -> String {
    let window_ns = i64::try_from(cfg.window.as_nanos()).unwrap_or(i64::MAX);
    let cutoff = samples.end_ns.saturating_sub(window_ns);
    let mut self_counts: HashMap<&str, u64> = HashMap::new();
    let mut total_counts: HashMap<&str, u64> = HashMap::new();
    let mut n = 0u64;
    // --by-span: the span path (innermost first) stands for the stack.
    let mut span_paths: HashMap<u64, Arc<[Arc<str>]>> = HashMap::new();
    if cfg.by_span {
        for s in samples.samples.iter().filter(|s| s.time_ns >= cutoff) {
            span_paths.entry(s.span).or_insert_with(|| {
                if s.span == 0 {
                    return Arc::from(vec![Arc::<str>::from("[no span]")]);
                }
                samples.spans.path(s.span).into_iter().rev().collect()
            });
        }
    }
    for s in samples.samples.iter().filter(|s| s.time_ns >= cutoff) {
        n += 1;
        let frames = if cfg.by_span { &span_paths[&s.span] } else { &s.frames };
        let Some(first) = frames.first() else {
            *self_counts.entry("[no stack]").or_default() += 1;
            *total_counts.entry("[no stack]").or_default() += 1;
            continue;
        };
        *self_counts.entry(first).or_default() += 1;
        let mut seen = HashSet::new();
        for f in frames.iter() {
            if seen.insert(&**f) {
                *total_counts.entry(f).or_default() += 1;
            }
        }
    }
    let mut out = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "recorder top: {}: {n} CPU samples in the last {:.1} s of the recording (ending {})",
        path.display(),
        cfg.window.as_secs_f64(),
        crate::time::date_time_seconds(samples.end_ns)
    );
    let _ = writeln!(out, "{:>7} {:>7}  {}", "self", "total", if cfg.by_span { "span" } else { "function" });
    if n == 0 {
        let _ = writeln!(out, "      -       -  (no CPU samples in the window)");
        return out;
    }
    let mut rows: Vec<(&str, u64, u64)> =
        total_counts.iter().map(|(name, &t)| (*name, self_counts.get(name).copied().unwrap_or(0), t)).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0)));
    let pct = |c: u64| 100.0 * c as f64 / n as f64;
    for (name, s, t) in rows.into_iter().take(cfg.n) {
        let _ = writeln!(out, "{:>6.1}% {:>6.1}%  {name}", pct(s), pct(t));
    }
    out
}
