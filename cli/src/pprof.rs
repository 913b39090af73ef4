//! `dump --format pprof`: the selected samples as a gzipped `profile.proto` (the format of Go's
//! `pprof`, and of the tools that read it: `go tool pprof`, Pyroscope, Speedscope, ...).
//!
//! The message is encoded here, by hand: profile.proto is a small, stable schema and we only write
//! it, so the encoder is about a hundred lines, against a code generator (prost-build, or checked-in
//! generated code) and its runtime for what would be the same field writes. The gzip layer is
//! flate2, already built for the library (`object` decompresses debug sections with it).
//!
//! Each sample is one distinct (stack, thread) with its summed values; every frame is a
//! `Location` with one `Line` (function and line number); the thread is the label `thread`
//! (`go tool pprof -tagfocus thread=worker-1`, `-tagroot thread`). Sample types: for CPU samples
//! `samples/count` and `cpu/nanoseconds` (each sample is one sampling period of CPU time; the
//! period comes from the recording's `jdk.ActiveSetting` `period` of jdk.ExecutionSample), for
//! allocation samples `alloc_samples/count` and `alloc_space/bytes` (jdk.ObjectAllocationSample's
//! `weight`), for wall-clock samples `samples/count` (and `wall/nanoseconds` when the period is
//! known).

use crate::fold::fold_runtime;
use crate::profile::{self, ProfileKind, Unit, Weighing};
use crate::selection::Selection;
use crate::source::SourceChunk;
use jfr_format::{Chunk, Item, Value};
use std::collections::HashMap;
use std::io::Write;

/// Builds one profile from the chunks of a recording.
pub struct Builder {
    kind: ProfileKind,
    weighing: Weighing,
    keep_runtime_frames: bool,
    strings: Vec<String>,
    string_ids: HashMap<String, u64>,
    /// Function name id → function id.
    functions: HashMap<u64, u64>,
    /// (function id, line) → location id.
    locations: HashMap<(u64, i64), u64>,
    /// Location ids in id order: (function id, line).
    location_list: Vec<(u64, i64)>,
    /// (location ids innermost first, thread name string id) → (values).
    samples: HashMap<(Vec<u64>, u64), [u64; 2]>,
    /// Nanoseconds per sample of the current chunk, when the recording says.
    period_ns: Option<u64>,
    /// The first period found (the profile's `period`).
    first_period_ns: Option<u64>,
    start_ns: i64,
    end_ns: i64,
    pub events: u64,
}

impl Builder {
    pub fn new(kind: ProfileKind, keep_runtime_frames: bool) -> Builder {
        let mut b = Builder {
            kind,
            weighing: kind.weighing(),
            keep_runtime_frames,
            strings: Vec::new(),
            string_ids: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            location_list: Vec::new(),
            samples: HashMap::new(),
            period_ns: None,
            first_period_ns: None,
            start_ns: i64::MAX,
            end_ns: i64::MIN,
            events: 0,
        };
        b.string(""); // string_table[0] is always ""
        b
    }

    fn string(&mut self, s: &str) -> u64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u64;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), id);
        id
    }

    fn location(&mut self, name: &str, line: i64) -> u64 {
        let name_id = self.string(name);
        let next_function = self.functions.len() as u64 + 1;
        let function = *self.functions.entry(name_id).or_insert(next_function);
        let next_location = self.location_list.len() as u64 + 1;
        let id = *self.locations.entry((function, line)).or_insert(next_location);
        if id == next_location {
            self.location_list.push((function, line));
        }
        id
    }

    /// Adds the samples of one chunk that `selection` keeps.
    pub fn add_chunk(&mut self, chunk: &Chunk, selection: &Selection) -> jfr_format::Result<()> {
        let h = chunk.header();
        self.start_ns = self.start_ns.min(h.start_nanos);
        self.end_ns = self.end_ns.max(h.start_nanos.saturating_add(h.duration_nanos));
        if let Some(p) = sampling_period(chunk, &self.weighing)? {
            self.period_ns = Some(p);
            self.first_period_ns.get_or_insert(p);
        }
        let mut stacks: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut found = Vec::new();
        profile::for_each_sample(chunk, &self.weighing.clone(), selection, |sample| {
            let thread = sample.thread.map(|t| t.to_string());
            found.push((sample.stack_key, sample.stack.clone(), thread, sample.weight));
        })?;
        for (key, stack, thread, weight) in found {
            let locations = match stacks.get(&key) {
                Some(l) => l.clone(),
                None => {
                    let kept = fold_runtime(&stack.frames, self.keep_runtime_frames);
                    let mut l: Vec<u64> = kept
                        .iter()
                        .map(|f| self.location(&crate::frames::display_name(f), i64::from(f.line.max(0))))
                        .collect();
                    if l.is_empty() {
                        l.push(self.location("[no stack]", 0));
                    }
                    stacks.insert(key, l.clone());
                    l
                }
            };
            let thread = match thread {
                Some(t) => self.string(&t),
                None => 0,
            };
            let values = match self.kind.unit() {
                Unit::Samples => [weight, weight.saturating_mul(self.period_ns.unwrap_or(0))],
                Unit::Bytes => [1, weight],
            };
            let slot = self.samples.entry((locations, thread)).or_insert([0, 0]);
            slot[0] += values[0];
            slot[1] += values[1];
            self.events += 1;
        }
        Ok(())
    }

    /// The sample types: (type, unit) pairs, and how many of each sample's two values are written.
    fn sample_types(&self) -> Vec<(&'static str, &'static str)> {
        match (self.kind, self.first_period_ns) {
            (ProfileKind::Alloc, _) => vec![("alloc_samples", "count"), ("alloc_space", "bytes")],
            (ProfileKind::Cpu, Some(_)) => vec![("samples", "count"), ("cpu", "nanoseconds")],
            (ProfileKind::Wall, Some(_)) => vec![("samples", "count"), ("wall", "nanoseconds")],
            (ProfileKind::Cpu | ProfileKind::Wall, None) => vec![("samples", "count")],
        }
    }

    /// Writes the gzipped profile.
    pub fn write(mut self, out: &mut dyn Write) -> std::io::Result<()> {
        let types = self.sample_types();
        let type_ids: Vec<(u64, u64)> = types.iter().map(|(t, u)| (self.string(t), self.string(u))).collect();
        let thread_key = self.string("thread");
        let mut pb = Vec::with_capacity(1 << 16);
        for &(t, u) in &type_ids {
            message(&mut pb, 1, |m| {
                uint(m, 1, t);
                uint(m, 2, u);
            });
        }
        let mut samples: Vec<_> = self.samples.iter().collect();
        samples.sort(); // deterministic output
        for ((locations, thread), values) in samples {
            message(&mut pb, 2, |m| {
                packed(m, 1, locations.iter().copied());
                packed(m, 2, values.iter().copied().take(type_ids.len()));
                if *thread != 0 {
                    message(m, 3, |l| {
                        uint(l, 1, thread_key);
                        uint(l, 2, *thread);
                    });
                }
            });
        }
        for (i, &(function, line)) in self.location_list.iter().enumerate() {
            message(&mut pb, 4, |m| {
                uint(m, 1, i as u64 + 1);
                message(m, 4, |l| {
                    uint(l, 1, function);
                    uint(l, 2, line as u64);
                });
            });
        }
        let mut functions: Vec<(u64, u64)> = self.functions.iter().map(|(&name, &id)| (id, name)).collect();
        functions.sort();
        for (id, name) in functions {
            message(&mut pb, 5, |m| {
                uint(m, 1, id);
                uint(m, 2, name);
                uint(m, 3, name);
            });
        }
        for s in &self.strings {
            bytes(&mut pb, 6, s.as_bytes());
        }
        if self.start_ns != i64::MAX {
            uint(&mut pb, 9, self.start_ns as u64);
            uint(&mut pb, 10, self.end_ns.saturating_sub(self.start_ns).max(0) as u64);
        }
        if let (Some(period), Some(&(t, u))) = (self.first_period_ns, type_ids.get(1)) {
            if self.kind.unit() == Unit::Samples {
                message(&mut pb, 11, |m| {
                    uint(m, 1, t);
                    uint(m, 2, u);
                });
                uint(&mut pb, 12, period);
            }
        }
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        gz.write_all(&pb)?;
        gz.finish()?;
        Ok(())
    }
}

/// The sampling period (ns) the chunk's `jdk.ActiveSetting` events give for the first of the
/// weighed event types that has one (`period` = `10 ms`, `1000 us`, ...).
pub(crate) fn sampling_period(chunk: &Chunk, weighing: &Weighing) -> jfr_format::Result<Option<u64>> {
    let Some(setting) = chunk.metadata().class_by_name("jdk.ActiveSetting") else {
        return Ok(None);
    };
    let ids: Vec<u64> =
        weighing.names().iter().filter_map(|n| chunk.metadata().class_by_name(n)).map(|c| c.id).collect();
    let (setting_id, id_field, name_field, value_field) =
        (setting.id, setting.field_index("id"), setting.field_index("name"), setting.field_index("value"));
    let (Some(id_field), Some(name_field), Some(value_field)) = (id_field, name_field, value_field) else {
        return Ok(None);
    };
    let mut period = None;
    for record in chunk.records() {
        let record = record?;
        if record.type_id != setting_id {
            continue;
        }
        let Some(Ok(Item::Event(event))) = chunk.items(record.offset).next() else { continue };
        let text = |i: usize| -> jfr_format::Result<Option<String>> {
            match event.values.get(i) {
                Some(v) => Ok(chunk.resolve_deep(v, 2)?.as_str().map(str::to_owned)),
                None => Ok(None),
            }
        };
        let for_type = event.values.get(id_field).and_then(Value::as_i64).is_some_and(|id| ids.contains(&(id as u64)));
        if for_type && text(name_field)?.as_deref() == Some("period") {
            if let Some(d) = text(value_field)?.and_then(|v| crate::args::parse_duration(&v).ok()) {
                period = Some(d.as_nanos() as u64).filter(|&p| p > 0);
            }
        }
    }
    Ok(period)
}

/// Adds the samples of every chunk; stops at the first damaged chunk (returned).
pub fn build(
    chunks: &[SourceChunk],
    kind: ProfileKind,
    keep_runtime_frames: bool,
    selection: &Selection,
    mut progress: impl FnMut(u64),
) -> (Builder, Option<(usize, jfr_format::Error)>) {
    let mut builder = Builder::new(kind, keep_runtime_frames);
    for (i, sc) in chunks.iter().enumerate() {
        if let Err(e) = builder.add_chunk(&sc.chunk, selection) {
            return (builder, Some((i, e)));
        }
        progress(sc.chunk.size());
    }
    (builder, None)
}

// ---- protobuf wire format: varints and length-delimited fields ----

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint field (wire type 0); zero is the default and is not written.
fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        varint(out, u64::from(field) << 3);
        varint(out, v);
    }
}

/// A length-delimited field (wire type 2).
fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    varint(out, (u64::from(field) << 3) | 2);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// A packed repeated varint field.
fn packed(out: &mut Vec<u8>, field: u32, values: impl Iterator<Item = u64>) {
    let mut body = Vec::new();
    for v in values {
        varint(&mut body, v);
    }
    if !body.is_empty() {
        bytes(out, field, &body);
    }
}

/// An embedded message field.
fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut body = Vec::new();
    f(&mut body);
    bytes(out, field, &body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_matches_protobuf_encoding() {
        let mut out = Vec::new();
        uint(&mut out, 1, 150);
        assert_eq!(out, [0x08, 0x96, 0x01], "the protobuf documentation's example");
        let mut out = Vec::new();
        bytes(&mut out, 2, b"testing");
        assert_eq!(out, [0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g']);
        let mut out = Vec::new();
        packed(&mut out, 4, [3, 270, 86942].into_iter());
        assert_eq!(out, [0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05], "packed repeated example");
        let mut out = Vec::new();
        uint(&mut out, 3, 0);
        assert!(out.is_empty(), "defaults are not written");
    }
}
