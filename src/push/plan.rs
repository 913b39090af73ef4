//! What one finished chunk becomes on the wire.
//!
//! Pyroscope reads a JFR upload with `grafana/jfr-parser`: it turns the profile events it knows
//! (CPU, wall-clock, allocation, lock samples) into one pprof profile per kind, multiplies CPU and
//! wall samples by `1e9 / sampleRate` ns, and rejects a profile above its limits (by default 4 MiB
//! uncompressed, 16 000 distinct samples). So a chunk is posted
//!
//! - **as it is, byte for byte**, when it fits the limits and all its samples share one rate;
//! - otherwise **cut into several complete JFR files**: each holds the chunk's metadata record, its
//!   settings events (`jdk.ActiveSetting`, `jdk.ActiveRecording`), a run of its profile events
//!   copied byte for byte, and one checkpoint with exactly the constants those records reference
//!   (copied byte for byte too, [`jfr_format::Chunk::constant_bytes`]). Events Pyroscope does not
//!   read are left out of cut uploads. Wall-clock samples whose period differs from the CPU period
//!   go into uploads of their own, so each upload's `sampleRate` is right for all its samples.
//!
//! The sampling rate is the chunk's own: the `period` of `jdk.ExecutionSample` in its
//! `jdk.ActiveSetting` events, else the `period` of its `recorder.SamplerStatistics` events.

use bytes::Bytes;
use jfr_format::header::{FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, HEADER_SIZE, STATE_FINISHED};
use jfr_format::write::{Checkpoint, CHECKPOINT_FLUSH};
use jfr_format::{Chunk, Item, Value};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Pyroscope's default `max_profile_size_bytes`: the uncompressed size of one upload.
pub const DEFAULT_MAX_UPLOAD_BYTES: usize = 4 * 1024 * 1024;
/// Pyroscope's default `max_profile_stacktrace_samples`: distinct samples of one profile.
pub const DEFAULT_MAX_SAMPLES: usize = 16_000;

/// Per-upload limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Uncompressed bytes of one upload at most.
    pub max_bytes: usize,
    /// Distinct samples (stack and span context) of one profile kind in one upload at most.
    pub max_samples: usize,
    /// Cut every chunk (samples and settings only), even one within the limits.
    pub samples_only: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_bytes: DEFAULT_MAX_UPLOAD_BYTES, max_samples: DEFAULT_MAX_SAMPLES, samples_only: false }
    }
}

/// One request's worth of a chunk.
#[derive(Debug, Clone)]
pub struct Upload {
    /// A complete JFR file (the chunk itself, or a cut of it).
    pub jfr: Bytes,
    /// `from`: ns since the epoch.
    pub from_nanos: i64,
    /// `until`: ns since the epoch.
    pub until_nanos: i64,
    /// `sampleRate` (per second), when the upload has samples with a known period.
    pub sample_rate: Option<u32>,
    /// The upload is the chunk file as it is.
    pub whole_chunk: bool,
    /// Profile events (samples) in the upload.
    pub profile_events: u64,
}

/// How a chunk is posted.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The requests, in order. Empty when the chunk has nothing Pyroscope reads.
    pub uploads: Vec<Upload>,
    /// Profile events in the chunk.
    pub profile_events: u64,
    /// Profile events that fit in no upload (one event with more constants than an upload may
    /// hold); not posted.
    pub oversized_events: u64,
    /// The chunk has CPU samples but no period to derive the rate from (Pyroscope then assumes
    /// 100 Hz).
    pub rate_unknown: bool,
}

/// The pprof profiles jfr-parser builds (its `sampleType*` constants); the sample limit is per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Cpu,
    Wall,
    InNewTlab,
    OutsideTlab,
    Lock,
    Park,
    LiveObject,
    AllocSample,
    Malloc,
}

impl Kind {
    fn of(type_name: &str) -> Option<Kind> {
        Some(match type_name {
            "jdk.ExecutionSample" => Kind::Cpu,
            "profiler.WallClockSample" => Kind::Wall,
            "jdk.ObjectAllocationInNewTLAB" => Kind::InNewTlab,
            "jdk.ObjectAllocationOutsideTLAB" => Kind::OutsideTlab,
            "jdk.JavaMonitorEnter" => Kind::Lock,
            "jdk.ThreadPark" => Kind::Park,
            "profiler.LiveObject" => Kind::LiveObject,
            "jdk.ObjectAllocationSample" => Kind::AllocSample,
            "profiler.Malloc" => Kind::Malloc,
            _ => return None,
        })
    }

    /// jfr-parser keys samples by span context only for these kinds.
    fn has_context(self) -> bool {
        matches!(self, Kind::Cpu | Kind::Wall | Kind::InNewTlab | Kind::OutsideTlab | Kind::Lock)
    }
}

/// What jfr-parser merges into one pprof sample: the stack trace reference and the span context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SampleKey {
    stack: u64,
    span_id: u64,
    span_name: u64,
    context_id: u64,
}

/// Field positions of one profile event type, bound as jfr-parser binds them (by name and type).
#[derive(Debug, Clone, Copy)]
struct Binding {
    kind: Kind,
    stack: Option<usize>,
    span_id: Option<usize>,
    span_name: Option<usize>,
    context_id: Option<usize>,
}

#[derive(Debug)]
struct EventRef {
    /// Byte range of the record in the chunk.
    start: usize,
    end: usize,
    ticks: i64,
    /// Constants the record references.
    refs: Vec<(u64, u64)>,
    /// None for settings events.
    sample: Option<(Kind, SampleKey)>,
    /// Upload group: 0, or 1 for wall samples posted at their own rate.
    group: usize,
}

/// Plans the uploads of the finished chunk `bytes` (exactly one chunk).
pub fn plan(bytes: Bytes, limits: &Limits) -> jfr_format::Result<Plan> {
    let chunk = Chunk::parse(bytes.clone(), 0)?;
    let header = *chunk.header();
    let types = chunk.types();
    let id_of = |name: &str| types.metadata.class_by_name(name).map(|c| c.id);
    let (cpu_type, wall_type) = (id_of("jdk.ExecutionSample"), id_of("profiler.WallClockSample"));
    let setting_types: HashSet<u64> =
        ["jdk.ActiveSetting", "jdk.ActiveRecording"].iter().filter_map(|n| id_of(n)).collect();
    let mut bindings: HashMap<u64, Binding> = HashMap::new();
    for class in &types.metadata.classes {
        if let Some(kind) = Kind::of(&class.name) {
            bindings.insert(class.id, bind(&chunk, class, kind));
        }
    }

    // One pass: periods, profile events, settings events.
    let (mut cpu_period, mut wall_period, mut stats_period) = (None, None, None);
    let mut events: Vec<EventRef> = Vec::new();
    let mut profile_events = 0u64;
    let mut counts: HashMap<Kind, HashSet<SampleKey>> = HashMap::new();
    let mut has_cpu = false;
    let mut has_wall = false;
    for item in chunk.items(HEADER_SIZE as u64) {
        let Item::Event(event) = item? else { continue };
        let start = event.offset as usize;
        let end = start + event.size as usize;
        let type_name = types.class(event.type_id).map_or("", |c| c.name.as_str());
        if type_name == "jdk.ActiveSetting" {
            let id = chunk.event_field(&event, "id").and_then(Value::as_i64).map(|v| v as u64);
            let name = chunk.event_field(&event, "name").and_then(Value::as_str);
            let value = chunk.event_field(&event, "value").and_then(Value::as_str);
            if let (Some(id), Some("period"), Some(value)) = (id, name, value) {
                if Some(id) == cpu_type {
                    cpu_period = parse_period(value).or(cpu_period);
                } else if Some(id) == wall_type {
                    wall_period = parse_period(value).or(wall_period);
                }
            }
        } else if type_name == "recorder.SamplerStatistics" {
            if let Some(p) = chunk.event_field(&event, "period").and_then(Value::as_i64).filter(|&p| p > 0) {
                stats_period = Some(p);
            }
        }
        let sample = bindings.get(&event.type_id).map(|b| {
            let field = |i: Option<usize>| -> u64 {
                i.and_then(|i| event.values.get(i))
                    .map(|v| match v {
                        Value::Ref { key, .. } => *key,
                        other => other.as_i64().unwrap_or(0) as u64,
                    })
                    .unwrap_or(0)
            };
            let key = SampleKey {
                stack: field(b.stack),
                span_id: field(b.span_id),
                span_name: field(b.span_name),
                context_id: field(b.context_id),
            };
            (b.kind, key)
        });
        if sample.is_none() && !setting_types.contains(&event.type_id) {
            continue;
        }
        if let Some((kind, key)) = sample {
            profile_events += 1;
            has_cpu |= kind == Kind::Cpu;
            has_wall |= kind == Kind::Wall;
            counts.entry(kind).or_default().insert(key);
        }
        let mut refs = Vec::new();
        for v in &event.values {
            collect_refs(v, &mut refs);
        }
        events.push(EventRef { start, end, ticks: event.start_ticks(), refs, sample, group: 0 });
    }
    let cpu_period = cpu_period.or(stats_period);
    let mut out = Plan { profile_events, ..Plan::default() };
    if profile_events == 0 {
        return Ok(out);
    }
    out.rate_unknown = has_cpu && cpu_period.is_none();
    let rate = |p: Option<i64>| p.map(|p| ((1e9 / p as f64).round() as u32).max(1));
    let (cpu_rate, wall_rate) = (rate(cpu_period), rate(wall_period).or(rate(cpu_period)));
    // Wall samples at another rate than the CPU samples go into uploads of their own.
    let separate_wall = has_cpu && has_wall && wall_rate != cpu_rate;
    let group_rates = if separate_wall {
        vec![cpu_rate, wall_rate]
    } else if has_cpu {
        vec![cpu_rate]
    } else {
        vec![wall_rate]
    };
    if separate_wall {
        for e in &mut events {
            if matches!(e.sample, Some((Kind::Wall, _))) {
                e.group = 1;
            }
        }
    }

    let fits = bytes.len() <= limits.max_bytes && counts.values().all(|keys| keys.len() <= limits.max_samples);
    if fits && !separate_wall && !limits.samples_only {
        out.uploads.push(Upload {
            jfr: bytes,
            from_nanos: header.start_nanos,
            until_nanos: header.start_nanos + header.duration_nanos.max(1),
            sample_rate: group_rates[0],
            whole_chunk: true,
            profile_events,
        });
        return Ok(out);
    }

    // Cut: settings events go into every upload, profile events into runs that fit.
    let metadata = chunk
        .records()
        .find_map(|r| r.ok().filter(|r| r.offset == header.metadata_offset as u64))
        .map(|r| r.bytes)
        .ok_or(jfr_format::Error::NoMetadata { offset: 0 })?;
    let mut constants = Constants { chunk: &chunk, cache: HashMap::new() };
    let settings: Vec<&EventRef> = events.iter().filter(|e| e.sample.is_none()).collect();
    for (group, &sample_rate) in group_rates.iter().enumerate() {
        let mut cut = Cut::new(&metadata, &settings, &mut constants)?;
        for e in events.iter().filter(|e| e.sample.is_some() && e.group == group) {
            if let Added::Yes = cut.add(e, limits, &mut constants)? {
                continue;
            }
            if cut.profile_events > 0 {
                let full = std::mem::replace(&mut cut, Cut::new(&metadata, &settings, &mut constants)?);
                out.uploads.push(full.finish(&bytes, sample_rate, &constants));
                if let Added::Yes = cut.add(e, limits, &mut constants)? {
                    continue;
                }
            }
            out.oversized_events += 1;
        }
        if cut.profile_events > 0 {
            out.uploads.push(cut.finish(&bytes, sample_rate, &constants));
        }
    }
    Ok(out)
}

/// The fields jfr-parser reads from a profile event type, when they have the type it expects
/// (it skips a field of another type, and so do we when counting samples).
fn bind(chunk: &Chunk, class: &jfr_format::Class, kind: Kind) -> Binding {
    let types = chunk.types();
    let type_name = |id: u64| types.class(id).map_or("", |c| c.name.as_str());
    let find = |name: &str, want: &str, pooled: bool| {
        class
            .fields
            .iter()
            .position(|f| f.name == name && type_name(f.type_id) == want && f.constant_pool == pooled && !f.array)
    };
    let context = kind.has_context();
    Binding {
        kind,
        stack: find("stackTrace", "jdk.types.StackTrace", true),
        span_id: if context { find("spanId", "long", false) } else { None },
        span_name: if context { find("spanName", "long", false) } else { None },
        context_id: if context { find("contextId", "long", false) } else { None },
    }
}

fn collect_refs(v: &Value, out: &mut Vec<(u64, u64)>) {
    match v {
        Value::Ref { type_id, key } => out.push((*type_id, *key)),
        Value::Array(items) => items.iter().for_each(|i| collect_refs(i, out)),
        Value::Object(o) => o.fields.iter().for_each(|f| collect_refs(f, out)),
        _ => {}
    }
}

/// `10 ms`, `10000 us`, `1 s`, … as ns (the JDK's and our own `jdk.ActiveSetting` spelling: a unit
/// is required).
pub(crate) fn parse_period(text: &str) -> Option<i64> {
    if text.trim_end().ends_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let ns = crate::units::parse_duration(text).ok()?.as_nanos();
    (1..9_000_000_000_000_000_000).contains(&ns).then_some(ns as i64)
}

/// A constant's encoded value and the constants it references, decoded once per chunk.
struct Constant {
    bytes: Bytes,
    refs: Vec<(u64, u64)>,
}

struct Constants<'c> {
    chunk: &'c Chunk,
    cache: HashMap<(u64, u64), Option<Rc<Constant>>>,
}

impl Constants<'_> {
    fn get(&mut self, type_id: u64, key: u64) -> jfr_format::Result<Option<Rc<Constant>>> {
        if let Some(c) = self.cache.get(&(type_id, key)) {
            return Ok(c.clone());
        }
        let constant = match self.chunk.constant_bytes(type_id, key)? {
            Some(bytes) => {
                let mut refs = Vec::new();
                if let Some(value) = self.chunk.resolve(type_id, key)? {
                    collect_refs(&value, &mut refs);
                }
                Some(Rc::new(Constant { bytes, refs }))
            }
            None => None,
        };
        self.cache.insert((type_id, key), constant.clone());
        Ok(constant)
    }
}

enum Added {
    Yes,
    Full,
}

/// One cut being assembled.
struct Cut {
    /// Byte ranges of the records, settings first.
    records: Vec<(usize, usize)>,
    metadata: Bytes,
    /// Constants in first-reference order (referrers before referees).
    constants: Vec<(u64, u64)>,
    defined: HashSet<(u64, u64)>,
    pool_types: HashSet<u64>,
    /// Upper bound of the finished file's size.
    size: usize,
    samples: HashMap<Kind, HashSet<SampleKey>>,
    profile_events: u64,
    ticks: Option<(i64, i64)>,
}

/// Bytes of a checkpoint record besides its pools: size (≤ 5), type, start (≤ 9), duration, delta,
/// mask, pool count (≤ 5).
const CHECKPOINT_OVERHEAD: usize = 5 + 1 + 9 + 1 + 1 + 1 + 5;
/// Bytes of one pool's type id and count at most.
const POOL_OVERHEAD: usize = 9 + 5;

impl Cut {
    fn new(metadata: &Bytes, settings: &[&EventRef], constants: &mut Constants<'_>) -> jfr_format::Result<Cut> {
        let mut cut = Cut {
            records: Vec::new(),
            metadata: metadata.clone(),
            constants: Vec::new(),
            defined: HashSet::new(),
            pool_types: HashSet::new(),
            size: HEADER_SIZE + metadata.len() + CHECKPOINT_OVERHEAD,
            samples: HashMap::new(),
            profile_events: 0,
            ticks: None,
        };
        for e in settings {
            let (new, bytes) = cut.closure(&e.refs, constants)?;
            cut.commit(e, new, bytes);
        }
        Ok(cut)
    }

    /// The constants `refs` need that the cut lacks, and the bytes they add.
    fn closure(
        &self,
        refs: &[(u64, u64)],
        constants: &mut Constants<'_>,
    ) -> jfr_format::Result<(Vec<(u64, u64)>, usize)> {
        let mut new = Vec::new();
        let mut seen: HashSet<(u64, u64)> = HashSet::new();
        let mut new_pools: HashSet<u64> = HashSet::new();
        let mut bytes = 0usize;
        let mut stack: Vec<(u64, u64)> = refs.iter().rev().copied().collect();
        while let Some(r) = stack.pop() {
            if self.defined.contains(&r) || !seen.insert(r) {
                continue;
            }
            let Some(c) = constants.get(r.0, r.1)? else { continue };
            new.push(r);
            bytes += varint_len(r.1) + c.bytes.len();
            if !self.pool_types.contains(&r.0) && new_pools.insert(r.0) {
                bytes += POOL_OVERHEAD;
            }
            stack.extend(c.refs.iter().rev().copied());
        }
        Ok((new, bytes))
    }

    fn commit(&mut self, e: &EventRef, new: Vec<(u64, u64)>, bytes: usize) {
        self.records.push((e.start, e.end));
        self.size += (e.end - e.start) + bytes;
        for r in new {
            self.pool_types.insert(r.0);
            self.defined.insert(r);
            self.constants.push(r);
        }
        if let Some((kind, key)) = e.sample {
            self.samples.entry(kind).or_default().insert(key);
            self.profile_events += 1;
            self.ticks = Some(match self.ticks {
                None => (e.ticks, e.ticks),
                Some((lo, hi)) => (lo.min(e.ticks), hi.max(e.ticks)),
            });
        }
    }

    fn add(&mut self, e: &EventRef, limits: &Limits, constants: &mut Constants<'_>) -> jfr_format::Result<Added> {
        let (new, bytes) = self.closure(&e.refs, constants)?;
        let too_big = self.size + (e.end - e.start) + bytes > limits.max_bytes;
        let too_many = e.sample.is_some_and(|(kind, key)| {
            let keys = self.samples.get(&kind);
            keys.is_some_and(|k| !k.contains(&key) && k.len() >= limits.max_samples)
        });
        if too_big || too_many {
            return Ok(Added::Full);
        }
        self.commit(e, new, bytes);
        Ok(Added::Yes)
    }

    /// The cut as a complete one-chunk JFR file.
    fn finish(self, chunk_bytes: &Bytes, sample_rate: Option<u32>, constants: &Constants<'_>) -> Upload {
        let original = jfr_format::ChunkHeader::parse(chunk_bytes, 0).expect("parsed before");
        let mut out = Vec::with_capacity(self.size);
        out.resize(HEADER_SIZE, 0);
        let metadata_offset = out.len();
        out.extend_from_slice(&self.metadata);
        for &(start, end) in &self.records {
            out.extend_from_slice(&chunk_bytes[start..end]);
        }
        let mut cp = Checkpoint::new();
        for &(type_id, key) in &self.constants {
            if let Some(Some(c)) = constants.cache.get(&(type_id, key)) {
                cp.add(type_id, key, |o| o.extend_from_slice(&c.bytes));
            }
        }
        let cp_offset = out.len();
        cp.write(&mut out, original.start_ticks, 0, CHECKPOINT_FLUSH);
        let mut header = original;
        header.chunk_size = out.len() as i64;
        header.cp_offset = cp_offset as i64;
        header.metadata_offset = metadata_offset as i64;
        header.state = STATE_FINISHED;
        header.flags = FLAG_COMPRESSED_INTS | FLAG_FINAL_CHUNK;
        out[..HEADER_SIZE].copy_from_slice(&header.encode());
        let (lo, hi) = self.ticks.unwrap_or((original.start_ticks, original.start_ticks));
        let from = original.ticks_to_epoch_nanos(lo);
        let until = original.ticks_to_epoch_nanos(hi).max(from + 1);
        debug_assert!(out.len() <= self.size, "size bound {} < {}", self.size, out.len());
        Upload {
            jfr: Bytes::from(out),
            from_nanos: from,
            until_nanos: until,
            sample_rate,
            whole_chunk: false,
            profile_events: self.profile_events,
        }
    }
}

fn varint_len(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods() {
        assert_eq!(parse_period("10000 us"), Some(10_000_000));
        assert_eq!(parse_period("10 ms"), Some(10_000_000));
        assert_eq!(parse_period("1 s"), Some(1_000_000_000));
        assert_eq!(parse_period("20ms"), Some(20_000_000));
        assert_eq!(parse_period("0 ms"), None);
        assert_eq!(parse_period("everyChunk"), None);
        assert_eq!(parse_period("10 parsecs"), None);
    }

    #[test]
    fn varint_lengths() {
        for v in [0u64, 1, 127, 128, 16383, 16384, 1 << 35, 1 << 56, u64::MAX] {
            let mut out = Vec::new();
            jfr_format::write::put_varint(&mut out, v);
            assert!(varint_len(v) >= out.len(), "{v}: {} < {}", varint_len(v), out.len());
        }
    }
}
