//! `recorder view`: one self-contained HTML page of a recording (`view.html`, with the data
//! embedded as JSON): a lane per sampled thread with its CPU samples as a heat strip over time,
//! and the flame graph (icicle) and function table of the selected time range. Nothing is
//! fetched when the page opens. The page honours `#range=FROM_MS,TO_MS` (milliseconds from the
//! recording's start) and exposes what it shows as `window.recorderView` for tests.
//!
//! Every CPU sample is embedded (thread, time, stack index); stacks and frame names are
//! deduplicated.

use crate::args::ViewArgs;
use crate::frames;
use crate::json;
use crate::profile::{self, ProfileKind};
use crate::selection::{self, Selection};
use crate::source::{self, Recordings, SourceChunk};
use crate::Outcome;
use anyhow::Context;
use std::collections::HashMap;
use std::io::Write;

const TEMPLATE: &str = include_str!("view.html");
/// Where the template takes the data.
const DATA_MARK: &str = "/*RECORDER_DATA*/";

/// The page's data, gathered over every chunk.
#[derive(Default)]
struct ViewData {
    frames: Vec<String>,
    frame_ids: HashMap<String, usize>,
    /// Frame indexes, outermost first.
    stacks: Vec<Vec<usize>>,
    stack_ids: HashMap<Vec<usize>, usize>,
    threads: Vec<String>,
    thread_ids: HashMap<String, usize>,
    /// (thread, time from start in ns, stack) per sample.
    samples: Vec<(usize, i64, usize)>,
}

impl ViewData {
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

    fn thread(&mut self, name: &str) -> usize {
        if let Some(&i) = self.thread_ids.get(name) {
            return i;
        }
        self.threads.push(name.to_owned());
        self.thread_ids.insert(name.to_owned(), self.threads.len() - 1);
        self.threads.len() - 1
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

/// The page of the CPU samples of `chunks` that `selection` keeps (`recorder dump --format html`
/// selects by `--since` and `--thread`); `truncated` puts up the banner.
pub fn page_of(chunks: &[SourceChunk], selection: &Selection, title: &str, truncated: bool) -> anyhow::Result<Vec<u8>> {
    let start_ns = chunks.iter().map(|c| c.chunk.header().start_nanos).min().unwrap_or(0);
    let end_ns = selection::recording_end_ns(chunks).max(start_ns);
    let weighing = ProfileKind::Cpu.weighing();
    let mut data = ViewData::default();
    for sc in chunks {
        // Stack keys are chunk-local: this chunk's key → the page's stack index.
        let mut chunk_stacks: HashMap<u64, usize> = HashMap::new();
        profile::for_each_sample(&sc.chunk, &weighing, selection, |sample| {
            let stack = match chunk_stacks.get(&sample.stack_key) {
                Some(&i) => i,
                None => {
                    let shown = &sample.stack.frames
                        [..sample.stack.frames.len() - frames::runtime_frames(&sample.stack.frames)];
                    let ids: Vec<usize> = shown.iter().rev().map(|f| data.frame(frames::display_name(f))).collect();
                    let i = data.stack(ids);
                    chunk_stacks.insert(sample.stack_key, i);
                    i
                }
            };
            let thread = data.thread(sample.thread.map_or("(no thread)", |t| t));
            for _ in 0..sample.weight {
                data.samples.push((thread, sample.start_ns - start_ns, stack));
            }
        })
        .with_context(|| format!("{}", sc.file.display()))?;
    }
    Ok(page(&data, title, end_ns - start_ns, truncated))
}

/// The page: the template with the data as a JSON object literal.
fn page(data: &ViewData, title: &str, duration_ns: i64, truncated: bool) -> Vec<u8> {
    let mut j = Vec::new();
    j.extend_from_slice(b"{\"title\":");
    json::string(&mut j, title);
    j.extend_from_slice(b",\"durationNs\":");
    json::int(&mut j, duration_ns);
    j.extend_from_slice(b",\"truncated\":");
    j.extend_from_slice(if truncated { b"true" } else { b"false" });
    j.extend_from_slice(b",\"threads\":[");
    for (i, t) in data.threads.iter().enumerate() {
        if i > 0 {
            j.push(b',');
        }
        json::string(&mut j, t);
    }
    j.extend_from_slice(b"],\"frames\":[");
    for (i, f) in data.frames.iter().enumerate() {
        if i > 0 {
            j.push(b',');
        }
        json::string(&mut j, f);
    }
    j.extend_from_slice(b"],\"stacks\":[");
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
    // Flat triples: thread, time from start (ns), stack.
    j.extend_from_slice(b"],\"samples\":[");
    for (i, (thread, at, stack)) in data.samples.iter().enumerate() {
        if i > 0 {
            j.push(b',');
        }
        json::uint(&mut j, *thread as u64);
        j.push(b',');
        json::int(&mut j, *at);
        j.push(b',');
        json::uint(&mut j, *stack as u64);
    }
    j.extend_from_slice(b"]}");
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
