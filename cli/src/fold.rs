//! Event selection by time and thread (`--since`, `--thread`) and stack folding (the collapsed
//! format flame-graph tools read: `outer;...;inner count`).
//!
//! Everything here works one chunk at a time: constant keys (threads, stack traces) are chunk-local,
//! so every cache is made for one chunk and dropped with it.

use crate::source::SourceChunk;
use jfr_format::{Chunk, Event, FrameInfo, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Which events to keep, beyond their type.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Events starting before this (epoch ns) are dropped.
    cutoff_ns: Option<i64>,
    /// Only events of a thread with this name (Java or OS name).
    thread: Option<String>,
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
        Selection { cutoff_ns, thread }
    }

    /// Does the selection keep every event (no time or thread condition)?
    pub fn is_all(&self) -> bool {
        self.cutoff_ns.is_none() && self.thread.is_none()
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

/// A frame's name in folded output: `class.method` (or `method`), one token: `;` becomes `:` and
/// whitespace and control characters become `_`. An `<elided:K>` marker stays one frame named so.
pub fn frame_name(frame: &FrameInfo) -> String {
    let raw = if frame.method.starts_with("<elided:") { frame.method.clone() } else { frame.qualified_name() };
    if raw.is_empty() {
        return "[unknown]".to_owned();
    }
    raw.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_whitespace() || c.is_control() => '_',
            c => c,
        })
        .collect()
}

/// Folded stacks and their counts, aggregated over chunks.
#[derive(Debug, Default)]
pub struct Folded {
    /// Folded stack → events.
    pub counts: BTreeMap<String, u64>,
    /// Events counted.
    pub events: u64,
}

impl Folded {
    /// Adds the stacks of the events of `chunk` whose type is in `types` (type ids) and that
    /// `selection` keeps.
    pub fn add_chunk(&mut self, chunk: &Chunk, types: &[u64], selection: &Selection) -> jfr_format::Result<()> {
        let mut select = selection.for_chunk(chunk);
        let mut cache: HashMap<u64, String> = HashMap::new();
        for event in chunk.events() {
            let event = event?;
            if !types.contains(&event.type_id) || !select.keeps(&event)? {
                continue;
            }
            let stack = match chunk.event_field(&event, "stackTrace") {
                Some(v @ Value::Ref { key, .. }) => match cache.get(key) {
                    Some(s) => s.clone(),
                    None => {
                        let s = fold_stack(chunk, v)?;
                        cache.insert(*key, s.clone());
                        s
                    }
                },
                Some(v) => fold_stack(chunk, v)?,
                None => continue,
            };
            *self.counts.entry(stack).or_default() += 1;
            self.events += 1;
        }
        Ok(())
    }

    /// The collapsed lines, sorted by stack.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        self.counts.iter().map(|(s, n)| format!("{s} {n}"))
    }
}

/// The folded form of a stack trace value: outermost frame first. A missing or empty stack is
/// the single frame `[no stack]` (the event is still counted).
pub fn fold_stack(chunk: &Chunk, value: &Value) -> jfr_format::Result<String> {
    let frames = match chunk.stack_trace_info(value)? {
        Some(t) if !t.frames.is_empty() => t.frames,
        _ => return Ok("[no stack]".to_owned()),
    };
    let mut out = String::new();
    for (i, f) in frames.iter().rev().enumerate() {
        if i > 0 {
            out.push(';');
        }
        out.push_str(&frame_name(f));
    }
    Ok(out)
}

/// The type ids of `chunk` among `names` that have a `stackTrace` field.
pub fn stack_type_ids(chunk: &Chunk, names: &[String]) -> Vec<u64> {
    chunk
        .types()
        .classes()
        .iter()
        .filter(|c| c.is_event() && names.contains(&c.name) && c.field_index("stackTrace").is_some())
        .map(|c| c.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_names_are_one_token() {
        let f = FrameInfo { method: "call once;x".into(), class: "<T as Fn>".into(), ..FrameInfo::default() };
        assert_eq!(frame_name(&f), "<T_as_Fn>.call_once:x");
        let e = FrameInfo { method: "<elided:7>".into(), class: "[elided]".into(), ..FrameInfo::default() };
        assert_eq!(frame_name(&e), "<elided:7>");
        assert_eq!(frame_name(&FrameInfo::default()), "[unknown]");
    }
}
