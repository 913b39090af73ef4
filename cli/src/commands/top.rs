//! `recorder top`: the hottest functions of the CPU samples (`jdk.ExecutionSample`) over a sliding
//! window: self (innermost frame) and total (anywhere in the stack) share.
//!
//! A file is a finished recording: one table of the last `--window` before its end is printed. A
//! directory is a repository followed live: every `--interval` its chunk files are polled; a new
//! file is parsed, a live chunk is re-read ([`jfr_format::Chunk::refresh`], which honours the
//! header's guard protocol) when its file grew or its header still says "in progress", and only
//! the records published since the last poll are decoded. Finished chunks are read once; when all
//! are read and the newest is the recording's final chunk, the table is printed once more and
//! `top` exits (the recording is over). The
//! window ends at the latest published time of the recording (the newest chunk header's end, or
//! the newest sample), so a stopped recording still shows its last window.

use crate::args::TopConfig;
use crate::source::{self, Damage};
use crate::spans::SpanNames;
use crate::Outcome;
use jfr_format::header::{FLAG_FINAL_CHUNK, HEADER_SIZE};
use jfr_format::{Chunk, Item, Refresh, Value};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One CPU sample: when, and its frame names (innermost first).
struct Sample {
    time_ns: i64,
    frames: Arc<[Arc<str>]>,
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
            samples.end_ns = samples.end_ns.max(time_ns);
            let span = chunk.event_field(&event, "spanId").and_then(Value::as_i64).map_or(0, |s| s.max(0) as u64);
            samples.samples.push_back(Sample { time_ns, frames, span });
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
    let mut repo = Repository { dir: dir.clone(), files: BTreeMap::new(), damage: Vec::new() };
    let mut samples = Samples::default();
    let terminal = std::io::stdout().is_terminal();
    loop {
        repo.poll(&mut samples)?;
        for d in repo.damage.drain(..) {
            eprintln!("error: {d}");
        }
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
        if cfg.once || repo.ended() {
            return Ok(Outcome::Clean);
        }
        std::thread::sleep(cfg.interval);
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

/// A chunk file being followed.
struct Followed {
    /// The live chunk (None once finished and read, or before it could be parsed).
    chunk: Option<(Chunk, ChunkReader, u64)>,
    /// File length at the last read.
    len: u64,
    /// Everything in the file was read: never read again.
    done: bool,
    /// The file's last chunk has the final flag: the recording ended with it.
    final_chunk: bool,
}

struct Repository {
    dir: PathBuf,
    files: BTreeMap<PathBuf, Followed>,
    damage: Vec<Damage>,
}

impl Repository {
    /// The recording is over: every chunk file was read and the newest one is the final chunk.
    fn ended(&self) -> bool {
        self.files.values().all(|f| f.done) && self.files.values().next_back().is_some_and(|f| f.final_chunk)
    }

    /// Reads what was published since the last poll.
    fn poll(&mut self, samples: &mut Samples) -> anyhow::Result<()> {
        let listed = source::repository_files(&self.dir)?;
        let present: HashSet<&PathBuf> = listed.iter().collect();
        // Files removed by retention are forgotten (their samples stay until they leave the window).
        self.files.retain(|p, _| present.contains(p));
        for path in &listed {
            let followed = self.files.entry(path.clone()).or_insert(Followed {
                chunk: None,
                len: u64::MAX,
                done: false,
                final_chunk: false,
            });
            if followed.done {
                continue;
            }
            let Ok(meta) = std::fs::metadata(path) else { continue };
            let live = followed.chunk.as_ref().is_some_and(|(c, _, _)| !c.header().is_finished());
            if meta.len() == followed.len && !live {
                continue;
            }
            if let Err(problem) = follow(path, followed, samples, meta.len()) {
                self.damage.push(Damage { file: Arc::new(path.clone()), problem });
                followed.done = true;
                followed.chunk = None;
            }
        }
        Ok(())
    }
}

/// Reads one chunk file's news.
fn follow(path: &Path, followed: &mut Followed, samples: &mut Samples, len: u64) -> anyhow::Result<()> {
    let data = source::read_file_bytes(path).map_err(|(_, e)| e)?;
    if data.len() < HEADER_SIZE {
        return Ok(()); // just created: nothing published yet
    }
    let header = jfr_format::ChunkHeader::parse(&data, 0)?;
    match followed.chunk.as_mut() {
        None if header.is_finished() => {
            // A finished file: every chunk in it, once.
            for chunk in jfr_format::chunks(data) {
                let chunk = chunk?;
                ChunkReader::new(&chunk).read(&chunk, HEADER_SIZE as u64, samples)?;
                followed.final_chunk = chunk.header().flags & FLAG_FINAL_CHUNK != 0;
            }
            followed.done = true;
        }
        None => match Chunk::parse(data, 0) {
            Ok(chunk) => {
                let mut reader = ChunkReader::new(&chunk);
                let pos = reader.read(&chunk, HEADER_SIZE as u64, samples)?;
                followed.chunk = Some((chunk, reader, pos));
            }
            // Being rewritten, or no metadata yet: next time.
            Err(jfr_format::Error::HeaderLocked { .. } | jfr_format::Error::NoMetadata { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        },
        Some((chunk, reader, pos)) => match chunk.refresh(data)? {
            Refresh::Locked => return Ok(()), // the writer holds the guard: next time
            Refresh::Unchanged => {}
            Refresh::Grew => {
                *pos = reader.read(chunk, *pos, samples)?;
                if chunk.header().is_finished() {
                    followed.final_chunk = chunk.header().flags & FLAG_FINAL_CHUNK != 0;
                    followed.chunk = None;
                    followed.done = true;
                }
            }
        },
    }
    followed.len = len;
    Ok(())
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
