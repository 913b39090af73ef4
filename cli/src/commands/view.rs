//! `recorder view`: one self-contained HTML page of a recording (`view.html`, with the data
//! embedded as JSON): a lane per thread with its samples as a heat strip over time (and, for
//! wall-clock samples, the thread's state), and the flame graph (icicle) and function table of
//! the selected time range, for a selectable kind of samples: CPU, wall clock, allocated bytes,
//! live bytes (`profile.rs` names the event types and weights of each). The other events
//! (`view/events.rs`) are bars and ticks in their threads' lanes and rows of the events table.
//! Nothing is fetched when the page opens. The page honours
//! `#kind=KIND&range=FROM_MS,TO_MS&view=FROM_MS,TO_MS&thread=LANE&event=INDEX&type=NAME&fn=NAME`
//! (milliseconds from the recording's start) and exposes what it shows as `window.recorderView`
//! and `<pre id=state>` for tests.
//!
//! Samples are embedded as (thread, time, stack, weight, state), identical ones added up;
//! stacks and frame names are deduplicated. A kind whose entries pass [`SERIES_BUDGET`] is
//! aggregated over time buckets (`bucketNs`, doubled until the entries fit), so the page of a
//! large recording stays small: its range selections are then as fine as a bucket. The lanes
//! have their own entries without stacks (`heat`, [`HEAT_BUDGET`]), so their buckets stay fine
//! when many distinct stacks widen the flame graphs'.

use crate::args::ViewArgs;
use crate::frames;
use crate::json;
use crate::profile::{self, ProfileKind, Unit, Weighing};
use crate::selection::{self, Selection};
use crate::source::{self, Recordings, SourceChunk};
use crate::Outcome;
use anyhow::Context;
use std::collections::HashMap;
use std::io::Write;

mod events;

const TEMPLATE: &str = include_str!("view.html");
/// Where the template takes the data.
const DATA_MARK: &str = "/*RECORDER_DATA*/";

/// Distinct (thread, time bucket, stack, state) entries a kind of samples may embed for its flame
/// graphs before its time buckets are widened: about 22 bytes of JSON each, ~2.6 MB a kind.
pub const SERIES_BUDGET: usize = 120_000;
/// Distinct (thread, time bucket, state) entries a kind may embed for its lanes (their own,
/// finer buckets: many distinct stacks widen the flame graphs' buckets, not the lanes'): about
/// 18 bytes each, ~1 MB a kind.
pub const HEAT_BUDGET: usize = 60_000;

/// The sample kinds of the page, in the order of its selector: id, label, and the weighing.
fn kinds() -> Vec<(&'static str, &'static str, Weighing)> {
    vec![
        ("cpu", "CPU", ProfileKind::Cpu.weighing()),
        ("wall", "wall clock", ProfileKind::Wall.weighing()),
        ("alloc", "allocated bytes", ProfileKind::Alloc.weighing()),
        ("live", "live bytes", Weighing::live()),
    ]
}

/// One kind's samples, added up per (thread, time bucket, stack, state).
struct Series {
    /// Width of a time bucket (1: exact times).
    bucket_ns: i64,
    /// The widest bucket worth having: the recording's duration.
    widest_ns: i64,
    budget: usize,
    /// (thread, bucket, stack, state) → weight.
    entries: HashMap<(u32, i64, u32, u32), u64>,
    events: u64,
}

impl Series {
    fn new(duration_ns: i64, budget: usize) -> Series {
        Series { bucket_ns: 1, widest_ns: duration_ns.max(1), budget, entries: HashMap::new(), events: 0 }
    }

    fn add(&mut self, thread: u32, at_ns: i64, stack: u32, state: u32, weight: u64) {
        self.events += 1;
        *self.entries.entry((thread, at_ns.max(0) / self.bucket_ns, stack, state)).or_default() += weight;
        if self.entries.len() > self.budget {
            self.widen();
        }
    }

    /// Doubles the buckets until the entries fit in three quarters of the budget (or a bucket is
    /// the whole recording: then the entries are as few as they can be).
    fn widen(&mut self) {
        while self.entries.len() > self.budget * 3 / 4 && self.bucket_ns < self.widest_ns {
            self.bucket_ns *= 2;
            let old = std::mem::take(&mut self.entries);
            for ((thread, bucket, stack, state), w) in old {
                *self.entries.entry((thread, bucket / 2, stack, state)).or_default() += w;
            }
        }
        if self.entries.len() > self.budget {
            self.budget = usize::MAX;
        }
    }
}

impl Series {
    /// Appends the entries, in time order, as a flat array: thread, time from start (ns, a
    /// bucket's start), stack (if `with_stack`), weight, state.
    fn write_json(&self, j: &mut Vec<u8>, with_stack: bool) {
        j.push(b'[');
        let mut entries: Vec<_> = self.entries.iter().collect();
        entries.sort_unstable_by_key(|((thread, bucket, stack, state), _)| (*bucket, *thread, *stack, *state));
        for (i, ((thread, bucket, stack, state), weight)) in entries.into_iter().enumerate() {
            if i > 0 {
                j.push(b',');
            }
            json::int(j, *thread as i64);
            j.push(b',');
            json::int(j, bucket * self.bucket_ns);
            if with_stack {
                j.push(b',');
                json::int(j, *stack as i64);
            }
            j.push(b',');
            json::uint(j, *weight);
            j.push(b',');
            json::int(j, *state as i64);
        }
        j.push(b']');
    }
}

/// The page's data, gathered over every chunk.
struct ViewData {
    frames: Vec<String>,
    frame_ids: HashMap<String, usize>,
    /// Frame indexes, outermost first.
    stacks: Vec<Vec<usize>>,
    stack_ids: HashMap<Vec<usize>, usize>,
    threads: Vec<String>,
    thread_ids: HashMap<String, usize>,
    /// Thread states of wall-clock samples; 0 is "none".
    states: Vec<String>,
    /// Per kind of [`kinds`]: its samples, and their weight per thread, time and state (the lanes).
    series: Vec<Series>,
    heat: Vec<Series>,
    /// The wall-clock sampler's period (ns; 0: unknown).
    wall_period_ns: i64,
    /// The other events: counts per type and those embedded.
    events: events::Events,
}

impl ViewData {
    fn new(duration_ns: i64) -> ViewData {
        ViewData {
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: Vec::new(),
            stack_ids: HashMap::new(),
            threads: Vec::new(),
            thread_ids: HashMap::new(),
            states: vec![String::new()],
            series: kinds().iter().map(|_| Series::new(duration_ns, SERIES_BUDGET)).collect(),
            heat: kinds().iter().map(|_| Series::new(duration_ns, HEAT_BUDGET)).collect(),
            wall_period_ns: 0,
            events: events::Events::default(),
        }
    }

    fn frame(&mut self, name: String) -> usize {
        if let Some(&i) = self.frame_ids.get(&name) {
            return i;
        }
        self.frames.push(name.clone());
        self.frame_ids.insert(name, self.frames.len() - 1);
        self.frames.len() - 1
    }

    fn stack(&mut self, frames: Vec<usize>) -> usize {
        if let Some(&i) = self.stack_ids.get(&frames) {
            return i;
        }
        self.stacks.push(frames.clone());
        self.stack_ids.insert(frames, self.stacks.len() - 1);
        self.stacks.len() - 1
    }

    /// The page's stack of `frames` (innermost first), without the runtime's thread-start frames.
    fn stack_of(&mut self, frames: &[jfr_format::FrameInfo]) -> usize {
        let shown = &frames[..frames.len() - frames::runtime_frames(frames)];
        let ids: Vec<usize> = shown.iter().rev().map(|f| self.frame(frames::display_name(f))).collect();
        self.stack(ids)
    }

    fn thread(&mut self, name: &str) -> usize {
        if let Some(&i) = self.thread_ids.get(name) {
            return i;
        }
        self.threads.push(name.to_owned());
        self.thread_ids.insert(name.to_owned(), self.threads.len() - 1);
        self.threads.len() - 1
    }

    fn state(&mut self, name: &str) -> usize {
        match self.states.iter().position(|s| s == name) {
            Some(i) => i,
            None => {
                self.states.push(name.to_owned());
                self.states.len() - 1
            }
        }
    }
}

pub fn run(args: &ViewArgs) -> anyhow::Result<Outcome> {
    let which = if args.source.all { Recordings::All } else { Recordings::Newest };
    let path = &args.source.path;
    let source = source::load(path, which)?;
    source.report_damage();
    let title = format!("recorder: {}", path.display());
    let page = page_of(&source.chunks, &Selection::default(), &title, !source.damage.is_empty())?;
    match &args.output {
        Some(out) => {
            let tmp = out.with_extension("html.tmp");
            std::fs::write(&tmp, &page).with_context(|| format!("writing {}", out.display()))?;
            std::fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
        }
        None => std::io::stdout().lock().write_all(&page)?,
    }
    Ok(if source.damage.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}

/// The page of the samples of `chunks` that `selection` keeps (`recorder dump --format html`
/// selects by `--since` and `--thread`); `truncated` puts up the banner.
pub fn page_of(chunks: &[SourceChunk], selection: &Selection, title: &str, truncated: bool) -> anyhow::Result<Vec<u8>> {
    let start_ns = chunks.iter().map(|c| c.chunk.header().start_nanos).min().unwrap_or(0);
    let end_ns = selection::recording_end_ns(chunks).max(start_ns);
    let kinds = kinds();
    // One pass over the samples of every kind; the live bytes are those of the last live-set
    // snapshot (as `dump --live`), which the selection picks among the recorder.LiveObject events.
    let mut weighing = Weighing { types: Vec::new(), unit: Unit::Samples, what: String::new() };
    let mut kind_of_type = Vec::new();
    for (k, (_, _, w)) in kinds.iter().enumerate() {
        for t in &w.types {
            weighing.types.push(t.clone());
            kind_of_type.push(k);
        }
    }
    let samples_selection = match selection::last_live_snapshot(chunks)? {
        Some((chunk_start, id, _)) => selection.clone().with_snapshot(chunk_start, id),
        None => selection.clone(),
    };
    let mut data = ViewData::new(end_ns - start_ns);
    data.wall_period_ns = wall_period_ns(chunks);
    for sc in chunks {
        // Stack keys are chunk-local: this chunk's key → the page's stack index.
        let mut chunk_stacks: HashMap<u64, usize> = HashMap::new();
        profile::for_each_sample(&sc.chunk, &weighing, &samples_selection, |sample| {
            let stack = match chunk_stacks.get(&sample.stack_key) {
                Some(&i) => i,
                None => {
                    let i = data.stack_of(&sample.stack.frames);
                    chunk_stacks.insert(sample.stack_key, i);
                    i
                }
            };
            let thread = data.thread(sample.thread.map_or("(no thread)", |t| t));
            let state = sample.state.map_or(0, |s| data.state(s));
            let (kind, at) = (kind_of_type[sample.type_index], sample.start_ns - start_ns);
            data.series[kind].add(thread as u32, at, stack as u32, state as u32, sample.weight);
            data.heat[kind].add(thread as u32, at, 0, state as u32, sample.weight);
        })
        .with_context(|| format!("{}", sc.file.display()))?;
        let sample_types = weighing.names();
        events::add_chunk(&mut data, &sc.chunk, &sample_types, selection, start_ns)
            .with_context(|| format!("{}", sc.file.display()))?;
    }
    Ok(page(&data, &kinds, title, end_ns - start_ns, truncated))
}

/// The wall-clock sampler's period, from its `jdk.ActiveSetting` (0 if the recording has none).
fn wall_period_ns(chunks: &[SourceChunk]) -> i64 {
    let wall = ProfileKind::Wall.weighing();
    chunks
        .iter()
        .find_map(|sc| crate::pprof::sampling_period(&sc.chunk, &wall).ok().flatten())
        .map_or(0, |p| i64::try_from(p).unwrap_or(0))
}

/// The page: the template with the data as a JSON object literal.
fn page(
    data: &ViewData,
    kinds: &[(&'static str, &'static str, Weighing)],
    title: &str,
    duration_ns: i64,
    truncated: bool,
) -> Vec<u8> {
    let mut j = Vec::new();
    let strings = |j: &mut Vec<u8>, items: &[String]| {
        j.push(b'[');
        for (i, t) in items.iter().enumerate() {
            if i > 0 {
                j.push(b',');
            }
            json::string(j, t);
        }
        j.push(b']');
    };
    j.extend_from_slice(b"{\"title\":");
    json::string(&mut j, title);
    j.extend_from_slice(b",\"durationNs\":");
    json::int(&mut j, duration_ns);
    j.extend_from_slice(b",\"truncated\":");
    j.extend_from_slice(if truncated { b"true" } else { b"false" });
    j.extend_from_slice(b",\"threads\":");
    strings(&mut j, &data.threads);
    j.extend_from_slice(b",\"frames\":");
    strings(&mut j, &data.frames);
    j.extend_from_slice(b",\"stacks\":[");
    for (i, s) in data.stacks.iter().enumerate() {
        if i > 0 {
            j.push(b',');
        }
        j.push(b'[');
        for (k, f) in s.iter().enumerate() {
            if k > 0 {
                j.push(b',');
            }
            json::uint(&mut j, *f as u64);
        }
        j.push(b']');
    }
    j.extend_from_slice(b"],\"states\":");
    strings(&mut j, &data.states);
    j.extend_from_slice(b",\"wallPeriodNs\":");
    json::int(&mut j, data.wall_period_ns);
    // Per kind: for the flame graphs (thread, time, stack, weight, state) quintuples, for the lanes
    // (thread, time, weight, state) quadruples.
    j.extend_from_slice(b",\"kinds\":[");
    let mut first = true;
    for (((id, label, weighing), series), heat) in kinds.iter().zip(&data.series).zip(&data.heat) {
        // CPU is always there (the page's default); the others when the recording has them.
        if series.entries.is_empty() && *id != "cpu" {
            continue;
        }
        if !first {
            j.push(b',');
        }
        first = false;
        j.extend_from_slice(b"{\"id\":");
        json::string(&mut j, id);
        j.extend_from_slice(b",\"label\":");
        json::string(&mut j, label);
        j.extend_from_slice(b",\"unit\":");
        json::string(&mut j, profile::count_name(weighing.unit));
        j.extend_from_slice(b",\"events\":");
        json::uint(&mut j, series.events);
        j.extend_from_slice(b",\"bucketNs\":");
        json::int(&mut j, series.bucket_ns);
        j.extend_from_slice(b",\"entries\":");
        series.write_json(&mut j, true);
        j.extend_from_slice(b",\"heatBucketNs\":");
        json::int(&mut j, heat.bucket_ns);
        j.extend_from_slice(b",\"heat\":");
        heat.write_json(&mut j, false);
        j.push(b'}');
    }
    j.push(b']');
    data.events.write_json(&mut j);
    j.push(b'}');
    let mut out = Vec::with_capacity(TEMPLATE.len() + j.len());
    let (head, tail) = TEMPLATE.split_once(DATA_MARK).expect("the template has its data mark");
    out.extend_from_slice(head.as_bytes());
    // `<` appears only inside JSON strings, where `\u003c` means the same: no `</script>` or
    // `<!--` in the data can end the script element it sits in.
    for &b in &j {
        if b == b'<' {
            out.extend_from_slice(b"\\u003c");
        } else {
            out.push(b);
        }
    }
    out.extend_from_slice(tail.as_bytes());
    out
}
