//! Event selection by time and thread (`--since`, `--thread`) and live-set snapshot, one chunk at a
//! time: thread keys are chunk-local, so the thread cache is made for one chunk and dropped with it.

use crate::source::SourceChunk;
use anyhow::Context;
use jfr_format::{Chunk, Event, Value};
use std::collections::HashMap;
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

/// The last live-set snapshot of the recording: (start of its chunk in epoch ns, snapshot id,
/// sampled objects it holds); `None` without one. Chunks are in recording order, so the last
/// chunk with a `recorder.LiveSet` holds it, as its largest snapshot id.
pub fn last_live_snapshot(chunks: &[SourceChunk]) -> anyhow::Result<Option<(i64, i64, i64)>> {
    let mut last = None;
    for sc in chunks {
        let chunk = &sc.chunk;
        let Some(class) = chunk.metadata().class_by_name("recorder.LiveSet") else { continue };
        let (Some(id_at), Some(objects_at)) = (class.field_index("snapshot"), class.field_index("objects")) else {
            continue;
        };
        let type_id = class.id;
        let mut best: Option<(i64, i64)> = None;
        for event in chunk.events() {
            let event = event.with_context(|| format!("{}", sc.file.display()))?;
            if event.type_id != type_id {
                continue;
            }
            let id = event.values.get(id_at).and_then(jfr_format::Value::as_i64).unwrap_or(0);
            let objects = event.values.get(objects_at).and_then(jfr_format::Value::as_i64).unwrap_or(0);
            if best.is_none_or(|(b, _)| id > b) {
                best = Some((id, objects));
            }
        }
        if let Some((id, objects)) = best {
            last = Some((chunk.header().start_nanos, id, objects));
        }
    }
    Ok(last)
}
