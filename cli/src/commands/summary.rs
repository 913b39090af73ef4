//! `recorder summary`: chunks, start, duration, and count and bytes per event type (the
//! `jdk.Metadata` and `jdk.CheckPoint` rows included, as `jfr summary` shows them); then the
//! threads with their CPU samples and other events, and what share of the CPU samples' stacks is
//! truncated (cut at the depth limit) or leaf-only (one frame: the frame-pointer walk stopped at
//! once, the mark of code built without frame pointers); then what the recording lost, by kind
//! (CPU samples, wall-clock periods, allocation samples, events, bytes: its `recorder.DataLoss`
//! events), with a warning for every kind that lost more than 1 %.
//!
//! Only each event's thread and stack keys are read, straight from the record's leading varints
//! when the fields before them are integers or constant references (every JFR writer puts
//! `startTime`, `duration`, `eventThread`, `stackTrace` first); other layouts are decoded in full.

use crate::args::SummaryConfig;
use crate::source::{self, Damage, SourceChunk};
use crate::{json, time, Outcome};
use jfr_format::header::FLAG_COMPRESSED_INTS;
use jfr_format::{Chunk, Item, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;

#[derive(Debug, Default, Clone, Copy)]
struct Stat {
    count: u64,
    bytes: u64,
}

/// A thread's row: CPU samples and other events.
#[derive(Debug, Default, Clone, Copy)]
struct ThreadCounts {
    cpu_samples: u64,
    events: u64,
}

/// The stacks of the CPU samples.
#[derive(Debug, Default, Clone, Copy)]
struct StackShares {
    samples: u64,
    /// Cut at the depth limit (the trace's `truncated` flag).
    truncated: u64,
    /// Exactly one frame.
    leaf_only: u64,
    /// No stack at all.
    no_stack: u64,
}

/// A thread as the rows group it: name, OS and Java thread ids.
type ThreadKey = (String, i64, i64);

/// Threads shown in the text table; `--json` lists all.
const THREAD_ROWS: usize = 30;

pub fn run(cfg: &SummaryConfig) -> anyhow::Result<Outcome> {
    let mut source = source::load(&cfg.path, cfg.recordings)?;
    let mut stats: HashMap<String, Stat> = HashMap::new();
    for name in ["jdk.Metadata", "jdk.CheckPoint"] {
        stats.insert(name.to_owned(), Stat::default());
    }
    for name in source::known_event_types(&source.chunks) {
        stats.entry(name).or_default();
    }
    let mut threads: BTreeMap<ThreadKey, ThreadCounts> = BTreeMap::new();
    let mut stacks = StackShares::default();
    let mut record_damage = Vec::new();
    for sc in &source.chunks {
        if let Err(e) = count_chunk(sc, &mut stats, &mut threads, &mut stacks) {
            record_damage.push(Damage::in_chunk(&sc.file, e));
        }
    }
    let weighed = match weighed_totals(&source.chunks) {
        Ok(w) => w,
        Err((file, e)) => {
            record_damage.push(Damage::in_chunk(&file, e));
            WeighedTotals::default()
        }
    };
    // One damage per file: the weighing pass meets the damage the counting pass met.
    let mut seen = std::collections::HashSet::new();
    record_damage.retain(|d| seen.insert(d.file.clone()));
    source.damage.retain(|d| !seen.contains(&d.file));
    source.damage.splice(0..0, record_damage);
    // Nothing readable: the errors alone, no empty table.
    if source.chunks.is_empty() && !source.damage.is_empty() {
        source.report_damage();
        return Ok(Outcome::Damaged);
    }

    let start = source.chunks.iter().map(|c| c.chunk.header().start_nanos).min().unwrap_or(0);
    let end = source
        .chunks
        .iter()
        .map(|c| {
            let h = c.chunk.header();
            h.start_nanos.saturating_add(h.duration_nanos)
        })
        .max()
        .unwrap_or(0);
    let duration = end.saturating_sub(start).max(0);
    let mut rows: Vec<(String, Stat)> = stats.into_iter().collect();
    rows.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(b.1.bytes.cmp(&a.1.bytes)).then(a.0.cmp(&b.0)));
    let mut thread_rows: Vec<(ThreadKey, ThreadCounts)> = threads.into_iter().collect();
    thread_rows
        .sort_by(|a, b| (b.1.cpu_samples, b.1.events).cmp(&(a.1.cpu_samples, a.1.events)).then_with(|| a.0.cmp(&b.0)));

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if cfg.json {
        let mut buf = Vec::with_capacity(64 * (rows.len() + thread_rows.len()) + 256);
        buf.extend_from_slice(b"{\"chunks\": ");
        json::uint(&mut buf, source.chunks.len() as u64);
        buf.extend_from_slice(b", \"start_ns\": ");
        json::int(&mut buf, start);
        buf.extend_from_slice(b", \"duration_ns\": ");
        json::int(&mut buf, duration);
        buf.extend_from_slice(b", \"events\": {");
        for (i, (name, s)) in rows.iter().enumerate() {
            if i > 0 {
                buf.extend_from_slice(b", ");
            }
            json::string(&mut buf, name);
            buf.extend_from_slice(b": {\"count\": ");
            json::uint(&mut buf, s.count);
            buf.extend_from_slice(b", \"bytes\": ");
            json::uint(&mut buf, s.bytes);
            buf.push(b'}');
        }
        buf.extend_from_slice(b"}, \"threads\": [");
        for (i, ((name, os_id, java_id), t)) in thread_rows.iter().enumerate() {
            if i > 0 {
                buf.extend_from_slice(b", ");
            }
            buf.extend_from_slice(b"{\"name\": ");
            json::string(&mut buf, name);
            buf.extend_from_slice(b", \"os_thread_id\": ");
            json::int(&mut buf, *os_id);
            buf.extend_from_slice(b", \"java_thread_id\": ");
            json::int(&mut buf, *java_id);
            buf.extend_from_slice(b", \"cpu_samples\": ");
            json::uint(&mut buf, t.cpu_samples);
            buf.extend_from_slice(b", \"events\": ");
            json::uint(&mut buf, t.events);
            buf.push(b'}');
        }
        buf.extend_from_slice(b"], \"cpu_sample_stacks\": {\"samples\": ");
        json::uint(&mut buf, stacks.samples);
        buf.extend_from_slice(b", \"truncated\": ");
        json::uint(&mut buf, stacks.truncated);
        buf.extend_from_slice(b", \"leaf_only\": ");
        json::uint(&mut buf, stacks.leaf_only);
        buf.extend_from_slice(b", \"no_stack\": ");
        json::uint(&mut buf, stacks.no_stack);
        buf.extend_from_slice(b"}, \"allocation_samples\": {\"samples\": ");
        json::uint(&mut buf, weighed.allocation_samples);
        buf.extend_from_slice(b", \"estimated_bytes\": ");
        json::uint(&mut buf, weighed.allocated_bytes);
        buf.extend_from_slice(b"}, \"wall_samples\": {\"events\": ");
        json::uint(&mut buf, weighed.wall_events);
        buf.extend_from_slice(b", \"periods\": ");
        json::uint(&mut buf, weighed.wall_periods);
        buf.extend_from_slice(b"}, \"live_set\": ");
        match weighed.live_set {
            Some((objects, bytes)) => {
                buf.extend_from_slice(b"{\"objects\": ");
                json::uint(&mut buf, objects);
                buf.extend_from_slice(b", \"estimated_bytes\": ");
                json::uint(&mut buf, bytes);
                buf.push(b'}');
            }
            None => buf.extend_from_slice(b"null"),
        }
        let l = &weighed.lost;
        buf.extend_from_slice(b", \"lost\": {\"cpu_samples\": ");
        json::uint(&mut buf, l.cpu_samples);
        buf.extend_from_slice(b", \"wall_periods\": ");
        json::uint(&mut buf, l.wall_periods);
        buf.extend_from_slice(b", \"allocation_samples\": ");
        json::uint(&mut buf, l.allocation_samples);
        buf.extend_from_slice(b", \"events\": ");
        json::uint(&mut buf, l.events);
        buf.extend_from_slice(b", \"bytes\": ");
        json::uint(&mut buf, l.bytes);
        buf.extend_from_slice(b"}, \"recorder_footprint\": ");
        match &weighed.footprint {
            Some(fields) => json_footprint(&mut buf, fields),
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(b"}\n");
        out.write_all(&buf)?;
    } else {
        let version = source
            .chunks
            .first()
            .map(|c| format!("{}.{}", c.chunk.header().major, c.chunk.header().minor))
            .unwrap_or_else(|| "-".to_owned());
        writeln!(out)?;
        writeln!(out, " Version: {version}")?;
        writeln!(out, " Chunks: {}", source.chunks.len())?;
        if !source.chunks.is_empty() {
            writeln!(out, " Start: {} (UTC)", time::date_time_seconds(start))?;
            writeln!(out, " Duration: {}", time::human_span(duration))?;
        }
        writeln!(out)?;
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(10).max(40);
        writeln!(out, " {:<width$} {:>11} {:>13}", "Event Type", "Count", "Size (bytes)")?;
        writeln!(out, "{}", "=".repeat(width + 27))?;
        for (name, s) in &rows {
            writeln!(out, " {:<width$} {:>11} {:>13}", name, s.count, s.bytes)?;
        }
        if !thread_rows.is_empty() {
            writeln!(out)?;
            let width = thread_rows.iter().map(|r| r.0 .0.len() + 2).max().unwrap_or(10).clamp(40, 60);
            writeln!(out, " {:<width$} {:>11} {:>13}", "Thread", "CPU samples", "Other events")?;
            writeln!(out, "{}", "=".repeat(width + 27))?;
            for ((name, _, _), t) in thread_rows.iter().take(THREAD_ROWS) {
                let name = if name.is_empty() { "(unnamed)" } else { name.as_str() };
                writeln!(out, " {:<width$} {:>11} {:>13}", name, t.cpu_samples, t.events)?;
            }
            if thread_rows.len() > THREAD_ROWS {
                writeln!(
                    out,
                    " ... {} more threads (summary --json lists every one)",
                    thread_rows.len() - THREAD_ROWS
                )?;
            }
        }
        if stacks.samples > 0 {
            let pct = |n: u64| 100.0 * n as f64 / stacks.samples as f64;
            writeln!(out)?;
            writeln!(
                out,
                " CPU sample stacks: {} samples; {:.1} % truncated (depth limit), {:.1} % leaf-only (one frame){}",
                stacks.samples,
                pct(stacks.truncated),
                pct(stacks.leaf_only),
                if stacks.no_stack > 0 {
                    format!(", {:.1} % without a stack", pct(stacks.no_stack))
                } else {
                    String::new()
                }
            )?;
        }
    }
    if !cfg.json {
        if weighed.allocation_samples > 0 {
            writeln!(out)?;
            writeln!(
                out,
                " Allocation samples: {}; estimated bytes allocated: {} ({})",
                weighed.allocation_samples,
                weighed.allocated_bytes,
                human_bytes(weighed.allocated_bytes)
            )?;
        }
        if weighed.wall_events > 0 {
            writeln!(out)?;
            writeln!(
                out,
                " Wall-clock samples: {} events standing for {} periods (profiler.WallClockSample `samples`)",
                weighed.wall_events, weighed.wall_periods
            )?;
        }
        if let Some((objects, bytes)) = weighed.live_set {
            writeln!(
                out,
                " Live set at the last snapshot: {objects} sampled allocations, estimated {bytes} bytes ({}) still allocated",
                human_bytes(bytes)
            )?;
        }
        if let Some(footprint) = &weighed.footprint {
            write_footprint(&mut out, footprint)?;
        }
        if !source.chunks.is_empty() {
            let events =
                rows.iter().filter(|(n, _)| n != "jdk.Metadata" && n != "jdk.CheckPoint").map(|r| r.1.count).sum();
            let bytes = rows.iter().map(|r| r.1.bytes).sum();
            write_losses(&mut out, &weighed, events, bytes)?;
        }
    }
    out.flush()?;
    drop(out);
    source.report_damage();
    Ok(if source.damage.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}

/// What the weighed sample kinds add up to.
#[derive(Debug, Default, Clone)]
struct WeighedTotals {
    /// jdk.ObjectAllocationSample events and the sum of their `weight` (estimated bytes).
    allocation_samples: u64,
    allocated_bytes: u64,
    /// The last recorder.LiveSet: sampled objects and estimated bytes still allocated.
    live_set: Option<(u64, u64)>,
    /// profiler.WallClockSample events and the periods they stand for (sum of `samples`).
    wall_events: u64,
    wall_periods: u64,
    /// jdk.ExecutionSample events.
    cpu_samples: u64,
    /// What the recording says it lost (recorder.DataLoss, by kind; jdk.DataLoss for bytes where
    /// no recorder.DataLoss is declared).
    lost: LossTotals,
    /// The last recorder.Footprint: its fields by name.
    footprint: Option<Vec<(String, Value)>>,
}

/// Losses by kind, summed over the recording's loss events (each counts what was lost since the
/// one before).
#[derive(Debug, Default, Clone, Copy)]
struct LossTotals {
    /// CPU samples (and the wall-clock sampler's stack requests, served by the same handler).
    cpu_samples: u64,
    /// Wall-clock periods no thread state was sampled for.
    wall_periods: u64,
    /// Allocations chosen for a sample that found no free record.
    allocation_samples: u64,
    /// Application events.
    events: u64,
    /// Bytes of recording data.
    bytes: u64,
}

/// Share of loss above which `summary` warns.
const LOSS_WARNING_PERCENT: f64 = 1.0;

/// Sums the weights of the allocation samples and the periods of the wall-clock samples, and
/// finds the last live-set
/// snapshot (chunks are in recording order).
fn weighed_totals(
    chunks: &[SourceChunk],
) -> Result<WeighedTotals, (std::sync::Arc<std::path::PathBuf>, jfr_format::Error)> {
    let mut t = WeighedTotals::default();
    for sc in chunks {
        let chunk = &sc.chunk;
        let field = |type_name: &str, field: &str| {
            let class = chunk.metadata().class_by_name(type_name)?;
            Some((class.id, class.field_index(field)?))
        };
        let alloc = field("jdk.ObjectAllocationSample", "weight");
        let live = field("recorder.LiveSet", "objects").zip(field("recorder.LiveSet", "estimatedBytes"));
        let snapshot_at = field("recorder.LiveSet", "snapshot").map(|(_, i)| i);
        let wall = field("profiler.WallClockSample", "samples");
        let cpu = chunk.metadata().class_by_name("jdk.ExecutionSample").map(|c| c.id);
        let loss = field("recorder.DataLoss", "reason").zip(
            field("recorder.DataLoss", "events")
                .zip(field("recorder.DataLoss", "samples"))
                .zip(field("recorder.DataLoss", "bytes")),
        );
        // The JDK's own loss event, read only where ours (which repeats its bytes) is not declared.
        let jdk_loss = if loss.is_none() { field("jdk.DataLoss", "amount") } else { None };
        let footprint = chunk.metadata().class_by_name("recorder.Footprint");
        if alloc.is_none()
            && live.is_none()
            && wall.is_none()
            && cpu.is_none()
            && loss.is_none()
            && jdk_loss.is_none()
            && footprint.is_none()
        {
            continue;
        }
        let mut best: Option<(i64, u64, u64)> = None;
        for event in chunk.events() {
            let event = event.map_err(|e| (sc.file.clone(), e))?;
            let value = |i: usize| event.values.get(i).and_then(Value::as_i64).map_or(0, |v| v.max(0) as u64);
            if let Some((id, i)) = alloc {
                if event.type_id == id {
                    t.allocation_samples += 1;
                    t.allocated_bytes += value(i);
                    continue;
                }
            }
            if let Some((id, i)) = wall {
                if event.type_id == id {
                    t.wall_events += 1;
                    t.wall_periods += value(i);
                    continue;
                }
            }
            if cpu == Some(event.type_id) {
                t.cpu_samples += 1;
                continue;
            }
            if let Some(class) = footprint.filter(|c| c.id == event.type_id) {
                let names = class.fields.iter().map(|f| f.name.clone());
                t.footprint = Some(names.zip(event.values.iter().cloned()).collect());
                continue;
            }
            if let Some(((id, reason), ((_, events), (_, samples)), (_, bytes))) =
                loss.map(|(r, ((e, s), b))| (r, (e, s), b))
            {
                if event.type_id == id {
                    let reason = event.values.get(reason).and_then(Value::as_str).unwrap_or("");
                    t.lost.add(reason, value(events), value(samples), value(bytes));
                    continue;
                }
            }
            if let Some((id, amount)) = jdk_loss {
                if event.type_id == id {
                    t.lost.bytes += value(amount);
                    continue;
                }
            }
            if let Some(((id, objects), (_, bytes))) = live {
                if event.type_id == id {
                    let snapshot = snapshot_at.map_or(0, |i| value(i) as i64);
                    if best.is_none_or(|(b, _, _)| snapshot > b) {
                        best = Some((snapshot, value(objects), value(bytes)));
                    }
                }
            }
        }
        if let Some((_, objects, bytes)) = best {
            t.live_set = Some((objects, bytes));
        }
    }
    Ok(t)
}

impl LossTotals {
    /// One recorder.DataLoss: its samples go to the kind its reason names (the reasons the
    /// recorder writes: "allocation sample pool full", "wall-clock periods not sampled ...", the
    /// CPU sampler's others).
    fn add(&mut self, reason: &str, events: u64, samples: u64, bytes: u64) {
        if reason.starts_with("allocation") {
            self.allocation_samples += samples;
        } else if reason.starts_with("wall-clock") {
            self.wall_periods += samples;
        } else {
            self.cpu_samples += samples;
        }
        self.events += events;
        self.bytes += bytes;
    }
}

/// `lost` of `lost + kept` in per cent (0 when both are 0).
fn loss_percent(lost: u64, kept: u64) -> f64 {
    let all = lost + kept;
    if all == 0 {
        0.0
    } else {
        100.0 * lost as f64 / all as f64
    }
}

/// The loss section: every kind, what it means, and a warning for each above
/// [`LOSS_WARNING_PERCENT`] (events against every event the recording holds, bytes against the
/// bytes of its records).
fn write_losses(out: &mut impl Write, w: &WeighedTotals, events: u64, bytes: u64) -> std::io::Result<()> {
    let l = &w.lost;
    writeln!(out)?;
    writeln!(out, " Loss (what this recording is missing, from its recorder.DataLoss events):")?;
    let rows: [(&str, &str, u64, u64, &str); 3] = [
        (
            "CPU samples",
            "CPU samples",
            l.cpu_samples,
            w.cpu_samples,
            "stacks the CPU sampler took (and wall-clock stack requests) but could not write: their time is missing from CPU profiles",
        ),
        (
            "Wall-clock periods",
            "wall-clock periods",
            l.wall_periods,
            w.wall_periods,
            "periods no thread state was sampled for: missing from wall-clock profiles",
        ),
        (
            "Allocation samples",
            "allocation samples",
            l.allocation_samples,
            w.allocation_samples,
            "allocations chosen for a sample that found no free record: their bytes are missing from the estimate",
        ),
    ];
    let mut warnings = Vec::new();
    for (what, noun, lost, kept, meaning) in rows {
        let pct = loss_percent(lost, kept);
        writeln!(out, "  {what}: {kept} written, {lost} lost ({pct:.2} %): {meaning}")?;
        if pct > LOSS_WARNING_PERCENT {
            warnings.push(format!("{pct:.1} % of the {noun} were lost"));
        }
    }
    let pct = loss_percent(l.events, events);
    writeln!(
        out,
        "  Events: {} lost ({pct:.2} % of {events} recorded): application events dropped (event buffers full, write failures)",
        l.events
    )?;
    if pct > LOSS_WARNING_PERCENT {
        warnings.push(format!("{pct:.1} % of the events were lost"));
    }
    let pct = loss_percent(l.bytes, bytes);
    writeln!(out, "  Bytes: {} lost ({pct:.2} %): recording data that never reached the disk", l.bytes)?;
    if pct > LOSS_WARNING_PERCENT {
        warnings.push(format!("{pct:.1} % of the recording's bytes were lost"));
    }
    for warning in warnings {
        writeln!(out, " Warning: {warning} (more than {LOSS_WARNING_PERCENT} %); the profile under-counts them")?;
    }
    Ok(())
}

/// recorder.Footprint's parts: (field, label in the text summary); `--json` names each by its
/// label with underscores.
const FOOTPRINT_PARTS: [(&str, &str); 8] = [
    ("eventBuffers", "event buffers"),
    ("samplerBuffers", "sampler buffers"),
    ("allocationPool", "allocation pool"),
    ("stackTable", "stack table"),
    ("unwindTables", "unwind tables"),
    ("ownCode", "recorder code"),
    ("symbolizerHeap", "symbolizer heap"),
    ("mappedDebugFiles", "mapped debug files"),
];

/// A byte field of recorder.Footprint (0 if absent or negative).
fn footprint_bytes(fields: &[(String, Value)], name: &str) -> u64 {
    fields.iter().find(|f| f.0 == name).and_then(|f| f.1.as_i64()).map_or(0, |v| v.max(0) as u64)
}

/// The last recorder.Footprint as a JSON object: `total_bytes`, each part's bytes, the
/// symbolizer's limit (0: none) and the modules named from symbols only.
fn json_footprint(buf: &mut Vec<u8>, fields: &[(String, Value)]) {
    buf.extend_from_slice(b"{\"total_bytes\": ");
    json::uint(buf, footprint_bytes(fields, "total"));
    for (field, label) in FOOTPRINT_PARTS {
        buf.extend_from_slice(b", ");
        json::string(buf, &format!("{}_bytes", label.replace(' ', "_")));
        buf.extend_from_slice(b": ");
        json::uint(buf, footprint_bytes(fields, field));
    }
    buf.extend_from_slice(b", \"symbolizer_limit_bytes\": ");
    json::uint(buf, footprint_bytes(fields, "symbolizerLimit"));
    buf.extend_from_slice(b", \"symbols_only\": ");
    let dropped = fields.iter().find(|f| f.0 == "symbolsOnly").and_then(|f| f.1.as_str()).unwrap_or("");
    json::string(buf, dropped);
    buf.push(b'}');
}

/// The recorder's own memory in the recorded process, by part, from the last recorder.Footprint.
fn write_footprint(out: &mut impl Write, fields: &[(String, Value)]) -> std::io::Result<()> {
    let bytes = |name: &str| footprint_bytes(fields, name);
    let listed: Vec<String> =
        FOOTPRINT_PARTS.iter().map(|(f, label)| format!("{label} {}", human_bytes(bytes(f)))).collect();
    writeln!(out)?;
    writeln!(
        out,
        " Recorder memory (last recorder.Footprint): {}: {}",
        human_bytes(bytes("total")),
        listed.join(", ")
    )?;
    let dropped = fields.iter().find(|f| f.0 == "symbolsOnly").and_then(|f| f.1.as_str()).unwrap_or("");
    if !dropped.is_empty() {
        writeln!(
            out,
            " Named from symbols only (no lines; their debug info did not fit the symbolizer's {}, `recorder record --symbol-memory`): {dropped}",
            human_bytes(bytes("symbolizerLimit"))
        )?;
    }
    Ok(())
}

/// `12.3 MiB`.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} bytes")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// How the fields before an event's thread and stack fields are encoded, when it is simple.
#[derive(Debug, Clone, Copy)]
enum Encoding {
    Varint,
    Fixed(usize),
}

/// Per event type: where its thread and stack keys are.
struct TypePlan {
    name_index: usize,
    thread: Option<usize>,
    stack: Option<usize>,
    cpu_sample: bool,
    /// Encodings of fields `0..=max(thread, stack)`, when they are all simple.
    lead: Option<Vec<Encoding>>,
}

fn encoding(chunk: &Chunk, field: &jfr_format::metadata::Field, compressed: bool) -> Option<Encoding> {
    if field.array {
        return None;
    }
    if field.constant_pool {
        return Some(Encoding::Varint);
    }
    let name = chunk.types().class(field.type_id)?.name.as_str();
    let fixed = |n| if compressed { Encoding::Varint } else { Encoding::Fixed(n) };
    Some(match name {
        "long" => fixed(8),
        "int" => fixed(4),
        "short" | "char" => fixed(2),
        "byte" | "boolean" => Encoding::Fixed(1),
        "float" => Encoding::Fixed(4),
        "double" => Encoding::Fixed(8),
        _ => return None,
    })
}

/// Counts one chunk's records by type, its threads' events and its CPU samples' stacks.
fn count_chunk(
    sc: &SourceChunk,
    stats: &mut HashMap<String, Stat>,
    threads: &mut BTreeMap<ThreadKey, ThreadCounts>,
    stacks: &mut StackShares,
) -> jfr_format::Result<()> {
    let chunk = &sc.chunk;
    let types = chunk.types();
    let compressed = chunk.header().flags & FLAG_COMPRESSED_INTS != 0;
    let mut plans: HashMap<u64, TypePlan> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    for class in types.classes().iter().filter(|c| c.is_event()) {
        let thread = class.field_index("eventThread").or_else(|| class.field_index("sampledThread"));
        let stack = class.field_index("stackTrace");
        let last = thread.max(stack);
        let lead = last.and_then(|last| class.fields[..=last].iter().map(|f| encoding(chunk, f, compressed)).collect());
        names.push(class.name.as_str());
        plans.insert(
            class.id,
            TypePlan {
                name_index: names.len() - 1,
                thread,
                stack,
                cpu_sample: class.name == "jdk.ExecutionSample",
                lead,
            },
        );
    }
    let mut by_id: HashMap<u64, Stat> = HashMap::new();
    let mut per_thread: HashMap<u64, ThreadCounts> = HashMap::new();
    let mut per_stack: HashMap<u64, u64> = HashMap::new();
    let mut failure = None;
    for record in chunk.records() {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        let s = by_id.entry(record.type_id).or_default();
        s.count += 1;
        s.bytes += record.bytes.len() as u64;
        let Some(plan) = plans.get(&record.type_id) else { continue };
        if plan.thread.is_none() && !plan.cpu_sample {
            continue;
        }
        let keys = match &plan.lead {
            Some(lead) => lead_keys(&record.bytes, lead, plan.thread, plan.stack),
            None => None,
        };
        let (thread_key, stack_key) = match keys {
            Some(k) => k,
            None => match chunk.items(record.offset).next() {
                Some(Ok(Item::Event(event))) => {
                    let key = |i: Option<usize>| match i.and_then(|i| event.values.get(i)) {
                        Some(Value::Ref { key, .. }) => *key,
                        _ => 0,
                    };
                    (key(plan.thread), key(plan.stack))
                }
                Some(Err(e)) => {
                    failure = Some(e);
                    break;
                }
                _ => continue,
            },
        };
        let t = per_thread.entry(thread_key).or_default();
        if plan.cpu_sample {
            t.cpu_samples += 1;
            *per_stack.entry(stack_key).or_default() += 1;
        } else {
            t.events += 1;
        }
    }
    for (id, s) in by_id {
        let name = match id {
            0 => "jdk.Metadata",
            1 => "jdk.CheckPoint",
            _ => match plans.get(&id) {
                Some(p) => names[p.name_index],
                // Records of undeclared types are skipped by readers; not an event type.
                None => match types.class(id) {
                    Some(c) => c.name.as_str(),
                    None => continue,
                },
            },
        };
        let e = stats.entry(name.to_owned()).or_default();
        e.count += s.count;
        e.bytes += s.bytes;
    }
    let thread_type = chunk.metadata().class_by_name("java.lang.Thread").map(|c| c.id);
    for (key, counts) in per_thread {
        let info = match (thread_type, key) {
            (Some(type_id), k) if k != 0 => chunk.thread_info(&Value::Ref { type_id, key: k })?,
            _ => None,
        };
        // Events without a thread (periodic events of the recorder itself) have no row.
        let Some(info) = info else { continue };
        let row = threads.entry((info.name().to_owned(), info.os_thread_id, info.java_thread_id)).or_default();
        row.cpu_samples += counts.cpu_samples;
        row.events += counts.events;
    }
    let stack_type = chunk.metadata().class_by_name("jdk.types.StackTrace").map(|c| c.id);
    for (key, n) in per_stack {
        stacks.samples += n;
        let trace = match (stack_type, key) {
            (Some(type_id), k) if k != 0 => chunk.stack_trace_info(&Value::Ref { type_id, key: k })?,
            _ => None,
        };
        match trace {
            Some(t) if !t.frames.is_empty() => {
                if t.truncated {
                    stacks.truncated += n;
                }
                if t.frames.len() == 1 {
                    stacks.leaf_only += n;
                }
            }
            _ => stacks.no_stack += n,
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The thread and stack keys of an event record whose leading fields are `lead`; `None` when the
/// bytes do not fit (the caller decodes the event instead, which reports the damage precisely).
fn lead_keys(bytes: &[u8], lead: &[Encoding], thread: Option<usize>, stack: Option<usize>) -> Option<(u64, u64)> {
    let mut fields = jfr_format::LeadingFields::new(bytes);
    let [_size, _type_id] = fields.varints()?;
    let (mut thread_key, mut stack_key) = (0, 0);
    for (i, enc) in lead.iter().enumerate() {
        let value = match enc {
            Encoding::Varint => fields.varint()?,
            Encoding::Fixed(n) => {
                fields.skip(*n)?;
                0
            }
        };
        if Some(i) == thread {
            thread_key = value;
        }
        if Some(i) == stack {
            stack_key = value;
        }
    }
    Some((thread_key, stack_key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn losses(w: &WeighedTotals, events: u64, bytes: u64) -> String {
        let mut out = Vec::new();
        write_losses(&mut out, w, events, bytes).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_kind_of_loss_is_shown_and_more_than_one_percent_warns() {
        let mut w =
            WeighedTotals { allocation_samples: 99, cpu_samples: 1000, wall_periods: 500, ..Default::default() };
        let quiet = losses(&w, 10_000, 1 << 20);
        for kind in ["CPU samples: 1000 written, 0 lost", "Wall-clock periods: 500 written, 0 lost"] {
            assert!(quiet.contains(kind), "{quiet}");
        }
        assert!(quiet.contains("Allocation samples: 99 written, 0 lost (0.00 %)"), "{quiet}");
        assert!(quiet.contains("Events: 0 lost") && quiet.contains("Bytes: 0 lost"), "{quiet}");
        assert!(!quiet.contains("Warning"), "{quiet}");

        // 1 of 100 allocation samples (1 %): no warning; 2 of 101: a warning that names them.
        w.lost.allocation_samples = 1;
        assert!(!losses(&w, 10_000, 1 << 20).contains("Warning"));
        w.allocation_samples = 99;
        w.lost.allocation_samples = 2;
        let loud = losses(&w, 10_000, 1 << 20);
        assert!(loud.contains("Allocation samples: 99 written, 2 lost (1.98 %)"), "{loud}");
        assert!(loud.contains("Warning: 2.0 % of the allocation samples were lost"), "{loud}");

        let w = WeighedTotals {
            lost: LossTotals { cpu_samples: 20, wall_periods: 30, events: 200, bytes: 1 << 19, ..Default::default() },
            cpu_samples: 980,
            wall_periods: 970,
            ..Default::default()
        };
        let all = losses(&w, 9_800, 1 << 20);
        for warning in [
            "2.0 % of the CPU samples",
            "3.0 % of the wall-clock periods",
            "2.0 % of the events",
            "33.3 % of the recording's bytes",
        ] {
            assert!(all.contains(&format!("Warning: {warning} were lost")), "{warning}: {all}");
        }
    }
}
