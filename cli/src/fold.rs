//! Event selection by time and thread (`--since`, `--thread`) and stack folding (the collapsed
//! format flame-graph tools read: `outer;...;inner weight`).
//!
//! Everything here works one chunk at a time: constant keys (threads, stack traces) are chunk-local,
//! so every cache is made for one chunk and dropped with it.

use crate::frames;
use crate::profile::{self, Weighing};
use crate::source::SourceChunk;
use crate::spans::SpanNames;
use jfr_format::{Chunk, Event, FrameInfo, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Which events to keep, beyond their type.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Events starting before this (epoch ns) are dropped.
    cutoff_ns: Option<i64>,
    /// Only events of a thread with this name (Java or OS name).
    thread: Option<String>,
    /// Only events of this live-set snapshot: (start of its chunk in epoch ns, snapshot id).
    snapshot: Option<(i64, i64)>,
}

/// The end of the recording: the latest chunk end (epoch ns).
pub fn recording_end_ns(chunks: &[SourceChunk]) -> i64 {
    chunks
        .iter()
        .map(|c| {
            let h = c.chunk.header();
            h.start_nanos.saturating_add(h.duration_nanos)
        })
        .max()
        .unwrap_or(0)
}

impl Selection {
    pub fn new(chunks: &[SourceChunk], since: Option<Duration>, thread: Option<String>) -> Selection {
        let cutoff_ns = since.map(|d| {
            let since = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
            recording_end_ns(chunks).saturating_sub(since)
        });
        Selection { cutoff_ns, thread, snapshot: None }
    }

    /// Keeps only the events of live-set snapshot `id` in the chunk that starts at `chunk_start`
    /// (epoch ns); events without a `snapshot` field are not affected.
    pub fn with_snapshot(mut self, chunk_start: i64, id: i64) -> Selection {
        self.snapshot = Some((chunk_start, id));
        self
    }

    /// Does the selection keep every event (no time, thread or snapshot condition)?
    pub fn is_all(&self) -> bool {
        self.cutoff_ns.is_none() && self.thread.is_none() && self.snapshot.is_none()
    }

    /// The selection applied to one chunk (with its per-chunk thread cache).
    pub fn for_chunk<'a>(&'a self, chunk: &'a Chunk) -> ChunkSelection<'a> {
        ChunkSelection { selection: self, chunk, threads: HashMap::new() }
    }
}

/// [`Selection`] for the events of one chunk.
pub struct ChunkSelection<'a> {
    selection: &'a Selection,
    chunk: &'a Chunk,
    /// Thread constant key → does its name match.
    threads: HashMap<u64, bool>,
}

impl ChunkSelection<'_> {
    /// Does the selection keep every event?
    pub fn is_all(&self) -> bool {
        self.selection.is_all()
    }

    /// Is `event` kept?
    pub fn keeps(&mut self, event: &Event) -> jfr_format::Result<bool> {
        if let Some((chunk_start, id)) = self.selection.snapshot {
            if let Some(v) = self.chunk.event_field(event, "snapshot") {
                if self.chunk.header().start_nanos != chunk_start || v.as_i64() != Some(id) {
                    return Ok(false);
                }
            }
        }
        if let Some(cutoff) = self.selection.cutoff_ns {
            if self.chunk.ticks_to_epoch_nanos(event.start_ticks()) < cutoff {
                return Ok(false);
            }
        }
        let Some(wanted) = &self.selection.thread else {
            return Ok(true);
        };
        let chunk = self.chunk;
        let Some(value) = chunk.event_field(event, "eventThread").or_else(|| chunk.event_field(event, "sampledThread"))
        else {
            return Ok(false);
        };
        let matches = |v: &Value| -> jfr_format::Result<bool> {
            Ok(chunk.thread_info(v)?.is_some_and(|t| {
                t.java_name.as_deref() == Some(wanted.as_str()) || t.os_name.as_deref() == Some(wanted.as_str())
            }))
        };
        match value {
            Value::Ref { key, .. } => {
                if let Some(&m) = self.threads.get(key) {
                    return Ok(m);
                }
                let m = matches(value)?;
                self.threads.insert(*key, m);
                Ok(m)
            }
            other => matches(other),
        }
    }
}

/// How stacks are folded.
#[derive(Debug, Clone, Copy, Default)]
pub struct FoldOptions {
    /// One root per thread: the thread's name in brackets is the outermost frame.
    pub by_thread: bool,
    /// Keep the thread-start boilerplate frames ([`frames::runtime_frames`]).
    pub keep_runtime_frames: bool,
    /// Each stack under the path of the span it was taken in (`span:outer;span:inner;...`).
    pub by_span: bool,
}

/// Folded stacks and their weights, aggregated over chunks.
#[derive(Debug, Default)]
pub struct Folded {
    /// Folded stack → summed weight.
    pub counts: BTreeMap<String, u64>,
    /// Events counted.
    pub events: u64,
}

impl Folded {
    /// Adds the stacks of the events of `chunk` that `weighing` names and `selection` keeps.
    pub fn add_chunk(
        &mut self,
        chunk: &Chunk,
        weighing: &Weighing,
        selection: &Selection,
        options: FoldOptions,
    ) -> jfr_format::Result<()> {
        self.add_chunk_with_spans(chunk, weighing, selection, options, &SpanNames::default())
    }

    /// [`Folded::add_chunk`], with the span names `--by-span` folds under.
    pub fn add_chunk_with_spans(
        &mut self,
        chunk: &Chunk,
        weighing: &Weighing,
        selection: &Selection,
        options: FoldOptions,
        spans: &SpanNames,
    ) -> jfr_format::Result<()> {
        let mut folded: HashMap<u64, Arc<str>> = HashMap::new();
        let mut line = String::new();
        profile::for_each_sample(chunk, weighing, selection, |sample| {
            let stack = folded
                .entry(sample.stack_key)
                .or_insert_with(|| Arc::from(fold_frames(&sample.stack.frames, options.keep_runtime_frames)));
            line.clear();
            if options.by_thread {
                line.push('[');
                line.push_str(&frames::token(sample.thread.map_or("unknown thread", |t| &**t)));
                line.push_str("];");
            }
            if options.by_span {
                for name in spans.path(sample.span) {
                    line.push_str("span:");
                    line.push_str(&frames::token(&name));
                    line.push(';');
                }
            }
            line.push_str(stack);
            match self.counts.get_mut(line.as_str()) {
                Some(n) => *n += sample.weight,
                None => {
                    self.counts.insert(line.clone(), sample.weight);
                }
            }
            self.events += 1;
        })
    }

    /// The collapsed lines, sorted by stack.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        self.counts.iter().map(|(s, n)| format!("{s} {n}"))
    }

    /// The summed weight.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// The folded form of a stack (frames innermost first): outermost frame first, runtime frames
/// dropped unless kept. A stack without frames is the single frame `[no stack]` (the event is
/// still counted).
pub fn fold_frames(stack: &[FrameInfo], keep_runtime_frames: bool) -> String {
    if stack.is_empty() {
        return "[no stack]".to_owned();
    }
    let kept = fold_runtime(stack, keep_runtime_frames);
    let mut out = String::new();
    for (i, f) in kept.iter().rev().enumerate() {
        if i > 0 {
            out.push(';');
        }
        out.push_str(&frames::folded_name(f));
    }
    out
}

/// `stack` (innermost first) without its runtime frames, unless they are kept.
pub fn fold_runtime(stack: &[FrameInfo], keep_runtime_frames: bool) -> &[FrameInfo] {
    let drop = if keep_runtime_frames { 0 } else { frames::runtime_frames(stack) };
    &stack[..stack.len() - drop]
}
