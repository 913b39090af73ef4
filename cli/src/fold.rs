//! Stack folding (the collapsed format flame-graph tools read: `outer;...;inner weight`) of the
//! events a [`Selection`] keeps.
//!
//! Everything here works one chunk at a time: constant keys (threads, stack traces) are chunk-local,
//! so every cache is made for one chunk and dropped with it.

use crate::frames;
use crate::profile::{self, Weighing};
use crate::selection::Selection;
use crate::spans::SpanNames;
use jfr_format::{Chunk, FrameInfo};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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
