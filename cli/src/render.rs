//! Turning decoded events into text: JSON lines ([`JsonRenderer`]) and the `jfr print`-like human
//! format ([`HumanRenderer`]).
//!
//! Both work per chunk (constant keys are chunk-local) and cache what they render for a constant
//! `(type, key)`: threads, classes, strings and whole stack traces are rendered once per chunk and
//! copied afterwards, which is what makes `print --json` fast on JVM recordings where a few
//! thousand constants are shared by hundreds of thousands of events.

use crate::{json, time};
use jfr_format::read::TypeTable;
use jfr_format::{Chunk, ChunkHeader, Event, Value};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Deepest chain of constant references followed when rendering (guards against cyclic pools).
const MAX_REF_DEPTH: u32 = 12;

/// How a field's integer value is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conv {
    None,
    /// `@Timestamp("TICKS")`: chunk ticks to epoch ns.
    TimestampTicks,
    /// `@Timestamp("MILLISECONDS_SINCE_EPOCH")`: to epoch ns.
    TimestampMillis,
    /// `@Timespan("TICKS")`: ticks to ns.
    TimespanTicks,
    /// `@Timespan(unit)`: multiply by this many ns.
    TimespanScale(i64),
    /// `@DataAmount("BYTES")`: shown as kB/MB/GB in text, raw in JSON.
    Bytes,
    /// `@MemoryAddress`: shown in hex in text, raw in JSON.
    Address,
    /// `@Percentage` (a fraction): shown as a percentage in text, raw in JSON.
    Percent,
}

impl Conv {
    fn apply(self, header: &ChunkHeader, v: i64) -> i64 {
        match self {
            Conv::None | Conv::Bytes | Conv::Address | Conv::Percent => v,
            Conv::TimestampTicks => header.ticks_to_epoch_nanos(v),
            Conv::TimestampMillis => v.saturating_mul(1_000_000),
            Conv::TimespanTicks => header.ticks_to_nanos(v),
            Conv::TimespanScale(s) => v.saturating_mul(s),
        }
    }
    fn is_timestamp(self) -> bool {
        matches!(self, Conv::TimestampTicks | Conv::TimestampMillis)
    }
    fn is_timespan(self) -> bool {
        matches!(self, Conv::TimespanTicks | Conv::TimespanScale(_))
    }
}

#[derive(Debug)]
struct FieldInfo {
    name: String,
    /// `"name":`, pre-escaped.
    json_key: Vec<u8>,
    conv: Conv,
}

#[derive(Debug, Default)]
struct ClassInfo {
    /// The type name as a JSON string literal.
    json_name: Vec<u8>,
    fields: Vec<FieldInfo>,
    /// Field 1 is `duration`.
    has_duration: bool,
    event_thread: Option<usize>,
    sampled_thread: Option<usize>,
    stack_trace: Option<usize>,
}

/// Per-class rendering plans of one type table.
#[derive(Debug)]
pub struct TypeInfo {
    classes: Vec<ClassInfo>,
    /// Class index by type id for ids below [`DENSE_IDS`] (`u32::MAX`: undeclared): a lookup per
    /// event without hashing. Larger ids go through the type table's map.
    dense: Vec<u32>,
    types: std::sync::Arc<TypeTable>,
    thread_type: Option<u64>,
    class_type: Option<u64>,
    stack_trace_type: Option<u64>,
}

/// Type ids below this are looked up in [`TypeInfo::dense`] (JDK and our ids are small).
const DENSE_IDS: u64 = 1 << 16;

impl TypeInfo {
    /// Index of the class with id `type_id`.
    pub fn class_index(&self, type_id: u64) -> Option<usize> {
        if type_id < DENSE_IDS {
            match self.dense.get(type_id as usize) {
                Some(&i) if i != u32::MAX => Some(i as usize),
                _ => None,
            }
        } else {
            self.types.class_index(type_id)
        }
    }

    pub fn new(types_arc: &std::sync::Arc<TypeTable>) -> TypeInfo {
        let types: &TypeTable = types_arc;
        let max_dense =
            types.classes().iter().map(|c| c.id).filter(|&id| id < DENSE_IDS).max().map_or(0, |m| m as usize + 1);
        let mut dense = vec![u32::MAX; max_dense];
        for (i, c) in types.classes().iter().enumerate() {
            if c.id < DENSE_IDS && dense[c.id as usize] == u32::MAX {
                dense[c.id as usize] = i as u32;
            }
        }
        let id_of = |name: &str| types.classes().iter().find(|c| c.name == name).map(|c| c.id);
        let timestamp = id_of("jdk.jfr.Timestamp");
        let timespan = id_of("jdk.jfr.Timespan");
        let data_amount = id_of("jdk.jfr.DataAmount");
        let address = id_of("jdk.jfr.MemoryAddress");
        let percentage = id_of("jdk.jfr.Percentage");
        let classes = types
            .classes()
            .iter()
            .map(|class| {
                let fields: Vec<FieldInfo> = class
                    .fields
                    .iter()
                    .map(|f| {
                        let mut conv = Conv::None;
                        for a in &f.annotations {
                            let unit = a.get("value").unwrap_or("");
                            if Some(a.type_id) == timestamp {
                                conv = match unit {
                                    "TICKS" => Conv::TimestampTicks,
                                    "MILLISECONDS_SINCE_EPOCH" => Conv::TimestampMillis,
                                    _ => Conv::None,
                                };
                            } else if Some(a.type_id) == timespan {
                                conv = match unit {
                                    "TICKS" => Conv::TimespanTicks,
                                    "NANOSECONDS" => Conv::TimespanScale(1),
                                    "MICROSECONDS" => Conv::TimespanScale(1_000),
                                    "MILLISECONDS" => Conv::TimespanScale(1_000_000),
                                    "SECONDS" => Conv::TimespanScale(1_000_000_000),
                                    _ => Conv::None,
                                };
                            } else if Some(a.type_id) == data_amount && unit == "BYTES" {
                                conv = Conv::Bytes;
                            } else if Some(a.type_id) == address {
                                conv = Conv::Address;
                            } else if Some(a.type_id) == percentage {
                                conv = Conv::Percent;
                            }
                        }
                        let mut json_key = Vec::with_capacity(f.name.len() + 3);
                        json::string(&mut json_key, &f.name);
                        json_key.push(b':');
                        FieldInfo { name: f.name.clone(), json_key, conv }
                    })
                    .collect();
                let index_of = |n: &str| fields.iter().position(|f| f.name == n);
                let mut json_name = Vec::new();
                json::string(&mut json_name, &class.name);
                ClassInfo {
                    json_name,
                    has_duration: fields.get(1).is_some_and(|f| f.name == "duration"),
                    event_thread: index_of("eventThread"),
                    sampled_thread: index_of("sampledThread"),
                    stack_trace: index_of("stackTrace"),
                    fields,
                }
            })
            .collect();
        TypeInfo {
            classes,
            dense,
            types: std::sync::Arc::clone(types_arc),
            thread_type: id_of("java.lang.Thread"),
            class_type: id_of("java.lang.Class"),
            stack_trace_type: id_of("jdk.types.StackTrace"),
        }
    }
}

/// Renders events of one chunk as JSON lines.
pub struct JsonRenderer<'c> {
    chunk: &'c Chunk,
    info: &'c TypeInfo,
    header: ChunkHeader,
    /// Rendered JSON of constants, by (type id, key).
    refs: HashMap<(u64, u64), Box<[u8]>>,
    /// Rendered `stack` objects, by stack-trace key.
    stacks: HashMap<u64, Box<[u8]>>,
}

impl<'c> JsonRenderer<'c> {
    pub fn new(chunk: &'c Chunk, info: &'c TypeInfo) -> JsonRenderer<'c> {
        JsonRenderer { chunk, info, header: *chunk.header(), refs: HashMap::new(), stacks: HashMap::new() }
    }

    /// Appends one line: `{"type", "start_ns", "duration_ns"?, "fields", "thread"?, "stack"?}`.
    pub fn event(&mut self, event: &Event, out: &mut Vec<u8>) -> jfr_format::Result<()> {
        let info = self.info;
        let Some(class) = info.class_index(event.type_id).and_then(|i| info.classes.get(i)) else {
            return Ok(());
        };
        out.extend_from_slice(b"{\"type\":");
        out.extend_from_slice(&class.json_name);
        out.extend_from_slice(b",\"start_ns\":");
        json::int(out, self.header.ticks_to_epoch_nanos(event.start_ticks()));
        if class.has_duration {
            out.extend_from_slice(b",\"duration_ns\":");
            let ticks = event.values.get(1).and_then(Value::as_i64).unwrap_or(0);
            json::int(out, self.header.ticks_to_nanos(ticks));
        }
        out.extend_from_slice(b",\"fields\":");
        self.fields_of(class, event, out)?;
        if let Some(i) = class.event_thread.or(class.sampled_thread) {
            out.extend_from_slice(b",\"thread\":");
            match event.values.get(i) {
                Some(v) => self.value(v, Conv::None, 0, out)?,
                None => out.extend_from_slice(b"null"),
            }
        }
        if let Some(i) = class.stack_trace {
            out.extend_from_slice(b",\"stack\":");
            match event.values.get(i) {
                Some(v @ Value::Ref { key, .. }) => self.stack(*key, v, out)?,
                _ => out.extend_from_slice(b"null"),
            }
        }
        out.extend_from_slice(b"}\n");
        Ok(())
    }

    /// Appends the `fields` object of `event` (as in [`JsonRenderer::event`]: without the start
    /// time, duration, event thread and stack trace); nothing for an undeclared type.
    pub fn fields(&mut self, event: &Event, out: &mut Vec<u8>) -> jfr_format::Result<()> {
        let info = self.info;
        match info.class_index(event.type_id).and_then(|i| info.classes.get(i)) {
            Some(class) => self.fields_of(class, event, out),
            None => Ok(()),
        }
    }

    fn fields_of(&mut self, class: &ClassInfo, event: &Event, out: &mut Vec<u8>) -> jfr_format::Result<()> {
        out.push(b'{');
        let mut first = true;
        for (i, (field, value)) in class.fields.iter().zip(&event.values).enumerate() {
            if i == 0 || (i == 1 && class.has_duration) || Some(i) == class.event_thread || Some(i) == class.stack_trace
            {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(&field.json_key);
            self.value(value, field.conv, 0, out)?;
        }
        out.push(b'}');
        Ok(())
    }

    fn stack(&mut self, key: u64, value: &Value, out: &mut Vec<u8>) -> jfr_format::Result<()> {
        if let Some(done) = self.stacks.get(&key) {
            out.extend_from_slice(done);
            return Ok(());
        }
        let mut buf = Vec::with_capacity(256);
        match self.chunk.stack_trace_info(value)? {
            None => buf.extend_from_slice(b"null"),
            Some(trace) => {
                buf.extend_from_slice(b"{\"truncated\":");
                buf.extend_from_slice(if trace.truncated { b"true" } else { b"false" });
                buf.extend_from_slice(b",\"frames\":[");
                for (i, f) in trace.frames.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    buf.extend_from_slice(b"{\"method\":");
                    json::string(&mut buf, &f.method);
                    buf.extend_from_slice(b",\"class\":");
                    json::string(&mut buf, &f.class);
                    buf.extend_from_slice(b",\"line\":");
                    json::int(&mut buf, f.line.into());
                    buf.extend_from_slice(b",\"type\":");
                    match &f.frame_type {
                        Some(t) => json::string(&mut buf, t),
                        None => buf.extend_from_slice(b"null"),
                    }
                    buf.push(b'}');
                }
                buf.extend_from_slice(b"]}");
            }
        }
        out.extend_from_slice(&buf);
        self.stacks.insert(key, buf.into_boxed_slice());
        Ok(())
    }

    fn value(&mut self, value: &Value, conv: Conv, depth: u32, out: &mut Vec<u8>) -> jfr_format::Result<()> {
        match value {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::Byte(v) => json::int(out, conv.apply(&self.header, (*v).into())),
            Value::Short(v) => json::int(out, conv.apply(&self.header, (*v).into())),
            Value::Int(v) => json::int(out, conv.apply(&self.header, (*v).into())),
            Value::Long(v) => json::int(out, conv.apply(&self.header, *v)),
            Value::Char(c) => json::char_unit(out, *c),
            Value::Float(f) => json::float(out, (*f).into(), true),
            Value::Double(d) => json::float(out, *d, false),
            Value::String(t) => json::string(out, t),
            Value::Ref { type_id, key } => self.reference(*type_id, *key, depth, out)?,
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.value(item, conv, depth, out)?;
                }
                out.push(b']');
            }
            Value::Object(o) => {
                let info = self.info;
                let class = info.class_index(o.type_id).and_then(|i| info.classes.get(i));
                out.push(b'{');
                if let Some(class) = class {
                    for (i, (field, v)) in class.fields.iter().zip(&o.fields).enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(&field.json_key);
                        self.value(v, field.conv, depth, out)?;
                    }
                }
                out.push(b'}');
            }
        }
        Ok(())
    }

    fn reference(&mut self, type_id: u64, key: u64, depth: u32, out: &mut Vec<u8>) -> jfr_format::Result<()> {
        if let Some(done) = self.refs.get(&(type_id, key)) {
            out.extend_from_slice(done);
            return Ok(());
        }
        if depth >= MAX_REF_DEPTH {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        let mut buf = Vec::with_capacity(64);
        match self.chunk.resolve(type_id, key)? {
            None => buf.extend_from_slice(b"null"),
            Some(v) => self.value(&v, Conv::None, depth + 1, &mut buf)?,
        }
        out.extend_from_slice(&buf);
        self.refs.insert((type_id, key), buf.into_boxed_slice());
        Ok(())
    }
}

/// Renders events of one chunk in a `jfr print`-like text format.
pub struct HumanRenderer<'c> {
    chunk: &'c Chunk,
    info: &'c TypeInfo,
    header: ChunkHeader,
    /// One-line renderings of threads, classes and simple constants.
    inline: HashMap<(u64, u64), String>,
    /// Rendered stack-trace blocks (at field indentation), by key.
    stacks: HashMap<u64, String>,
}

impl<'c> HumanRenderer<'c> {
    pub fn new(chunk: &'c Chunk, info: &'c TypeInfo) -> HumanRenderer<'c> {
        HumanRenderer { chunk, info, header: *chunk.header(), inline: HashMap::new(), stacks: HashMap::new() }
    }

    /// Appends one event block.
    pub fn event(&mut self, event: &Event, out: &mut String) -> jfr_format::Result<()> {
        let types = self.chunk.types();
        let Some(index) = types.class_index(event.type_id) else {
            return Ok(());
        };
        let name = &types.classes()[index].name;
        let _ = writeln!(out, "{name} {{");
        self.fields(index, &event.values, 1, out)?;
        out.push_str("}\n\n");
        Ok(())
    }

    fn fields(
        &mut self,
        class_index: usize,
        values: &[Value],
        indent: usize,
        out: &mut String,
    ) -> jfr_format::Result<()> {
        let info = self.info;
        let Some(class) = info.classes.get(class_index) else {
            return Ok(());
        };
        for (field, value) in class.fields.iter().zip(values) {
            pad(out, indent);
            let _ = write!(out, "{} = ", field.name);
            if let (Some(st), Value::Ref { type_id, key }) = (info.stack_trace_type, value) {
                if *type_id == st {
                    self.stack(*key, value, indent, out)?;
                    out.push('\n');
                    continue;
                }
            }
            self.value(value, field.conv, indent, 0, out)?;
            out.push('\n');
        }
        Ok(())
    }

    fn stack(&mut self, key: u64, value: &Value, indent: usize, out: &mut String) -> jfr_format::Result<()> {
        if indent == 1 {
            if let Some(done) = self.stacks.get(&key) {
                out.push_str(done);
                return Ok(());
            }
        }
        let mut s = String::new();
        match self.chunk.stack_trace_info(value)? {
            None => s.push_str("null"),
            Some(trace) => {
                s.push_str("[\n");
                for f in &trace.frames {
                    pad(&mut s, indent + 1);
                    s.push_str(&crate::frames::display_name(f));
                    if f.line >= 0 {
                        let _ = write!(s, " line: {}", f.line);
                    }
                    if let Some(t) = &f.frame_type {
                        let _ = write!(s, " ({t})");
                    }
                    s.push('\n');
                }
                if trace.truncated {
                    pad(&mut s, indent + 1);
                    s.push_str("...\n");
                }
                pad(&mut s, indent);
                s.push(']');
            }
        }
        out.push_str(&s);
        if indent == 1 {
            self.stacks.insert(key, s);
        }
        Ok(())
    }

    fn value(
        &mut self,
        value: &Value,
        conv: Conv,
        indent: usize,
        depth: u32,
        out: &mut String,
    ) -> jfr_format::Result<()> {
        let int = |this: &Self, v: i64, out: &mut String| {
            let v2 = conv.apply(&this.header, v);
            if conv.is_timestamp() {
                out.push_str(&time::iso_nanos(v2));
            } else if conv.is_timespan() {
                out.push_str(&time::human_span(v2));
            } else if conv == Conv::Bytes {
                out.push_str(&human_bytes(v2));
            } else if conv == Conv::Address {
                let _ = write!(out, "{v2:#x}");
            } else {
                let _ = write!(out, "{v2}");
            }
        };
        match value {
            Value::Null => out.push_str("null"),
            Value::Boolean(b) => {
                let _ = write!(out, "{b}");
            }
            Value::Byte(v) => int(self, (*v).into(), out),
            Value::Short(v) => int(self, (*v).into(), out),
            Value::Int(v) => int(self, (*v).into(), out),
            Value::Long(v) => int(self, *v, out),
            Value::Char(c) => {
                let ch = char::from_u32(u32::from(*c)).unwrap_or(char::REPLACEMENT_CHARACTER);
                let _ = write!(out, "{ch:?}");
            }
            Value::Float(f) if conv == Conv::Percent => {
                let _ = write!(out, "{:.2}%", f * 100.0);
            }
            Value::Double(d) if conv == Conv::Percent => {
                let _ = write!(out, "{:.2}%", d * 100.0);
            }
            Value::Float(f) => {
                let _ = write!(out, "{f:?}");
            }
            Value::Double(d) => {
                let _ = write!(out, "{d:?}");
            }
            Value::String(t) => {
                let _ = write!(out, "{:?}", t.as_str());
            }
            Value::Ref { type_id, key } => {
                if let Some(done) = self.inline.get(&(*type_id, *key)) {
                    out.push_str(done);
                    return Ok(());
                }
                if depth >= MAX_REF_DEPTH {
                    out.push_str("...");
                    return Ok(());
                }
                let info = self.info;
                let resolved = self.chunk.resolve(*type_id, *key)?;
                let mut s = String::new();
                let cacheable = match &resolved {
                    None => {
                        s.push_str("null");
                        true
                    }
                    Some(v) if Some(*type_id) == info.thread_type => {
                        let t = self.chunk.thread_info(v)?.unwrap_or_default();
                        let _ = write!(s, "{:?} (javaThreadId = {})", t.name(), t.java_thread_id);
                        if t.java_name.is_none() {
                            let _ = write!(s, " (osThreadId = {})", t.os_thread_id);
                        }
                        true
                    }
                    Some(v) if Some(*type_id) == info.class_type => {
                        match self.chunk.field(v, "name") {
                            Some(n) => {
                                let n = self.chunk.resolve_deep(n, 2)?;
                                s.push_str(&n.as_str().unwrap_or("").replace('/', "."));
                            }
                            None => s.push_str("null"),
                        }
                        true
                    }
                    Some(v @ Value::Object(_)) => {
                        self.value(v, Conv::None, indent, depth + 1, &mut s)?;
                        false
                    }
                    Some(v) => {
                        self.value(v, Conv::None, indent, depth + 1, &mut s)?;
                        true
                    }
                };
                out.push_str(&s);
                if cacheable {
                    self.inline.insert((*type_id, *key), s);
                }
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.value(item, conv, indent, depth, out)?;
                }
                out.push(']');
            }
            Value::Object(o) => {
                let Some(index) = self.chunk.types().class_index(o.type_id) else {
                    out.push_str("{}");
                    return Ok(());
                };
                out.push_str("{\n");
                self.fields_nested(index, &o.fields, indent + 1, depth, out)?;
                pad(out, indent);
                out.push('}');
            }
        }
        Ok(())
    }

    fn fields_nested(
        &mut self,
        class_index: usize,
        values: &[Value],
        indent: usize,
        depth: u32,
        out: &mut String,
    ) -> jfr_format::Result<()> {
        let info = self.info;
        let Some(class) = info.classes.get(class_index) else {
            return Ok(());
        };
        for (field, value) in class.fields.iter().zip(values) {
            pad(out, indent);
            let _ = write!(out, "{} = ", field.name);
            self.value(value, field.conv, indent, depth, out)?;
            out.push('\n');
        }
        Ok(())
    }
}

fn pad(out: &mut String, indent: usize) {
    for _ in 0..indent {
        out.push_str("  ");
    }
}

/// `840 bytes`, `4.0 kB`, `17.8 MB` (powers of 1024, as `jfr print` shows data amounts).
fn human_bytes(v: i64) -> String {
    const UNITS: [&str; 5] = ["kB", "MB", "GB", "TB", "PB"];
    if v.unsigned_abs() < 1024 {
        return format!("{v} bytes");
    }
    let mut x = v as f64 / 1024.0;
    let mut unit = 0;
    while x.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    format!("{x:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn data_amounts_use_binary_units() {
        assert_eq!(human_bytes(840), "840 bytes");
        assert_eq!(human_bytes(4096), "4.0 kB");
        assert_eq!(human_bytes(18_664_652), "17.8 MB");
    }
}
