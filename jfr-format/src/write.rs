//! The writer: sans I/O encoders for values, records, metadata, checkpoints and whole chunks.
//!
//! Everything appends to a caller-provided `Vec<u8>`; [`ChunkEncoder`] keeps the chunk's state
//! (published size, last checkpoint, metadata offset, generation) and hands out the bytes to write
//! and the header updates to publish, so the caller owns all I/O.

use crate::header::{
    next_generation, ChunkHeader, FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, HEADER_SIZE, NANOS_PER_SECOND, STATE_FINISHED,
};
use crate::metadata::{Annotation, Class, Metadata};
use crate::value::Value;
use crate::varint;
use std::collections::HashMap;

/// Checkpoint type-mask bit: the checkpoint ends a flush segment.
pub const CHECKPOINT_FLUSH: u8 = 1;
/// Checkpoint type-mask bit: chunk header checkpoint.
pub const CHECKPOINT_CHUNK_HEADER: u8 = 2;

/// How a string is encoded (docs/jfr-format.md, "Encodings"). The readers accept all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringEncoding {
    /// Tag 3: UTF-8 bytes (the default).
    Utf8,
    /// Tag 4: UTF-16 code units, one varint each.
    CharArray,
    /// Tag 5: Latin-1 bytes; characters above U+00FF are written as `?`.
    Latin1,
}

/// Appends a varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    varint::write_u64(out, v);
}

/// Appends a signed integer as a varint of its two's complement (`long`).
#[inline]
pub fn put_long(out: &mut Vec<u8>, v: i64) {
    varint::write_u64(out, v as u64);
}

/// Appends an `int` (zero-extended u32 form, as HotSpot does).
#[inline]
pub fn put_int(out: &mut Vec<u8>, v: i32) {
    varint::write_u64(out, u64::from(v as u32));
}

/// Appends a `short`.
#[inline]
pub fn put_short(out: &mut Vec<u8>, v: i16) {
    varint::write_u64(out, u64::from(v as u16));
}

/// Appends a `char` (one UTF-16 code unit).
#[inline]
pub fn put_char(out: &mut Vec<u8>, v: u16) {
    varint::write_u64(out, u64::from(v));
}

/// Appends a `byte`.
#[inline]
pub fn put_byte(out: &mut Vec<u8>, v: i8) {
    out.push(v as u8);
}

/// Appends a `boolean`.
#[inline]
pub fn put_bool(out: &mut Vec<u8>, v: bool) {
    out.push(u8::from(v));
}

/// Appends a `float` (big-endian IEEE-754).
#[inline]
pub fn put_float(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a `double` (big-endian IEEE-754).
#[inline]
pub fn put_double(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a string: `None` as null (tag 0), `""` as empty (tag 1), anything else as UTF-8.
#[inline]
pub fn put_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some("") => out.push(1),
        Some(s) => {
            out.push(3);
            varint::write_u64(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// Appends a string as UTF-8 (tag 3) whatever it holds, the empty string included. Write the
/// `jdk.types.Symbol` pool with this: async-profiler's reader (and so its converters and tools
/// built on it) accepts no other tag there, not even the empty-string tag 1.
#[inline]
pub fn put_utf8(out: &mut Vec<u8>, s: &str) {
    out.push(3);
    varint::write_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends a non-empty string in the chosen encoding (null and `""` still use tags 0 and 1).
pub fn put_string_as(out: &mut Vec<u8>, s: Option<&str>, encoding: StringEncoding) {
    match (s, encoding) {
        (None, _) | (Some(""), _) | (Some(_), StringEncoding::Utf8) => put_string(out, s),
        (Some(s), StringEncoding::CharArray) => {
            out.push(4);
            varint::write_u64(out, s.encode_utf16().count() as u64);
            for unit in s.encode_utf16() {
                varint::write_u64(out, u64::from(unit));
            }
        }
        (Some(s), StringEncoding::Latin1) => {
            out.push(5);
            varint::write_u64(out, s.chars().count() as u64);
            out.extend(s.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')));
        }
    }
}

/// Appends a string as a reference (tag 2) into the `java.lang.String` constant pool.
pub fn put_string_ref(out: &mut Vec<u8>, key: u64) {
    out.push(2);
    varint::write_u64(out, key);
}

/// Width reserved for a record's size until it is known.
const RESERVED_SIZE_WIDTH: usize = 4;

/// Starts a record of `type_id` at the end of `out`; returns the token for [`end_record`].
#[inline]
pub fn begin_record(out: &mut Vec<u8>, type_id: u64) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0x80, 0x80, 0x80, 0x00]);
    varint::write_u64(out, type_id);
    start
}

/// Ends the record begun at `start`: patches its size. Records of at most 127 bytes are compacted
/// to a one-byte size; larger ones keep the 4-byte padded size (as HotSpot writes), and the rare
/// record of 2^28 bytes or more is widened to an 8-byte padded size.
///
/// # Panics
/// If `start` is not a token from [`begin_record`] on this buffer, or the record exceeds
/// 2^56 − 1 bytes.
#[inline]
pub fn end_record(out: &mut Vec<u8>, start: usize) {
    let total = out.len() - start;
    let compact = total - (RESERVED_SIZE_WIDTH - 1);
    if compact < 0x80 {
        out.drain(start + 1..start + RESERVED_SIZE_WIDTH);
        out[start] = compact as u8;
    } else if total < 1 << 28 {
        varint::patch_padded(&mut out[start..start + RESERVED_SIZE_WIDTH], total as u64);
    } else {
        const WIDE: usize = 8;
        let extra = WIDE - RESERVED_SIZE_WIDTH;
        out.splice(start..start, core::iter::repeat_n(0u8, extra));
        varint::patch_padded(&mut out[start..start + WIDE], (total + extra) as u64);
    }
}

/// Appends a whole record: `body` writes the payload after the type id.
pub fn write_record(out: &mut Vec<u8>, type_id: u64, body: impl FnOnce(&mut Vec<u8>)) {
    let start = begin_record(out, type_id);
    body(out);
    end_record(out, start);
}

/// Encodes a [`Value`] as a field of type `type_id` against `metadata`. Constant references are
/// written as keys, objects field by field, arrays with their count. Used by tests, tools that
/// rewrite events, and anyone who builds events dynamically.
pub fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.push(0),
        Value::Boolean(v) => put_bool(out, *v),
        Value::Byte(v) => put_byte(out, *v),
        Value::Char(v) => put_char(out, *v),
        Value::Short(v) => put_short(out, *v),
        Value::Int(v) => put_int(out, *v),
        Value::Long(v) => put_long(out, *v),
        Value::Float(v) => put_float(out, *v),
        Value::Double(v) => put_double(out, *v),
        Value::String(s) => put_string(out, Some(s)),
        Value::Ref { key, .. } => put_varint(out, *key),
        Value::Array(items) => {
            put_varint(out, items.len() as u64);
            for item in items {
                put_value(out, item);
            }
        }
        Value::Object(obj) => {
            for field in &obj.fields {
                put_value(out, field);
            }
        }
    }
}

/// Encodes `value` as the value of `field` according to `metadata`: unlike [`put_value`] it knows
/// which fields are strings, so a string-pool reference (`Value::Ref` of the string type) gets tag 2
/// and a null string tag 0, inline strings use `encoding`, and arrays and inline structs are
/// checked against their declarations. Fails (naming the field's type and the output position) if
/// the value does not fit the field.
pub fn put_field(
    out: &mut Vec<u8>,
    metadata: &Metadata,
    field: &crate::metadata::Field,
    value: &Value,
    encoding: StringEncoding,
) -> crate::Result<()> {
    put_typed(out, metadata, field.type_id, field.constant_pool, field.array, value, encoding, 0)
}

/// Encodes all fields of an event or struct of class `type_id` from `values`, in declared order.
pub fn put_fields(
    out: &mut Vec<u8>,
    metadata: &Metadata,
    type_id: u64,
    values: &[Value],
    encoding: StringEncoding,
) -> crate::Result<()> {
    let class = metadata.class(type_id).ok_or(crate::Error::UnknownType { offset: out.len() as u64, type_id })?;
    if class.fields.len() != values.len() {
        return Err(mismatch(out, "one value per declared field", values.len() as u64));
    }
    for (f, v) in class.fields.iter().zip(values) {
        put_field(out, metadata, f, v, encoding)?;
    }
    Ok(())
}

fn mismatch(out: &[u8], expected: &'static str, found: u64) -> crate::Error {
    crate::Error::Invalid { offset: out.len() as u64, expected, found }
}

#[allow(clippy::too_many_arguments)]
fn put_typed(
    out: &mut Vec<u8>,
    metadata: &Metadata,
    type_id: u64,
    pooled: bool,
    array: bool,
    value: &Value,
    encoding: StringEncoding,
    depth: usize,
) -> crate::Result<()> {
    if depth > crate::MAX_NESTING {
        return Err(crate::Error::NestingTooDeep { offset: out.len() as u64 });
    }
    if array {
        let Value::Array(items) = value else {
            return Err(mismatch(out, "an array value", type_id));
        };
        put_varint(out, items.len() as u64);
        for item in items {
            put_typed(out, metadata, type_id, pooled, false, item, encoding, depth + 1)?;
        }
        return Ok(());
    }
    let class = metadata.class(type_id).ok_or(crate::Error::UnknownType { offset: out.len() as u64, type_id })?;
    if pooled {
        return match value {
            Value::Null => {
                put_varint(out, 0);
                Ok(())
            }
            Value::Ref { key, .. } => {
                put_varint(out, *key);
                Ok(())
            }
            _ => Err(mismatch(out, "a constant reference or null", type_id)),
        };
    }
    match (class.name.as_str(), value) {
        ("java.lang.String", Value::Null) => out.push(0),
        ("java.lang.String", Value::String(s)) => put_string_as(out, Some(s), encoding),
        ("java.lang.String", Value::Ref { key, .. }) => put_string_ref(out, *key),
        ("boolean", Value::Boolean(v)) => put_bool(out, *v),
        ("byte", Value::Byte(v)) => put_byte(out, *v),
        ("char", Value::Char(v)) => put_char(out, *v),
        ("short", Value::Short(v)) => put_short(out, *v),
        ("int", Value::Int(v)) => put_int(out, *v),
        ("long", Value::Long(v)) => put_long(out, *v),
        ("float", Value::Float(v)) => put_float(out, *v),
        ("double", Value::Double(v)) => put_double(out, *v),
        (_, Value::Object(o)) if !class.fields.is_empty() && o.type_id == type_id => {
            if o.fields.len() != class.fields.len() {
                return Err(mismatch(out, "one value per declared field", type_id));
            }
            for (f, v) in class.fields.iter().zip(&o.fields) {
                put_typed(out, metadata, f.type_id, f.constant_pool, f.array, v, encoding, depth + 1)?;
            }
        }
        _ => return Err(mismatch(out, "a value of the field's declared type", type_id)),
    }
    Ok(())
}

/// Encodes a metadata record (type 0) with the descriptor `metadata`.
pub fn write_metadata(out: &mut Vec<u8>, metadata: &Metadata, start_ticks: i64) {
    let mut strings = StringTable::default();
    let root = metadata_tree(metadata, &mut strings);
    let start = begin_record(out, 0);
    put_long(out, start_ticks);
    put_varint(out, 0);
    put_varint(out, metadata.id);
    put_varint(out, strings.list.len() as u64);
    for s in &strings.list {
        put_string(out, Some(s));
    }
    root.encode(out);
    end_record(out, start);
}

#[derive(Default)]
struct StringTable {
    list: Vec<String>,
    index: HashMap<String, u64>,
}

impl StringTable {
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

struct Element {
    name: u64,
    attributes: Vec<(u64, u64)>,
    children: Vec<Element>,
}

impl Element {
    fn new(strings: &mut StringTable, name: &str) -> Element {
        Element { name: strings.id(name), attributes: Vec::new(), children: Vec::new() }
    }
    fn attr(&mut self, strings: &mut StringTable, key: &str, value: &str) {
        let pair = (strings.id(key), strings.id(value));
        self.attributes.push(pair);
    }
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.name);
        put_varint(out, self.attributes.len() as u64);
        for &(k, v) in &self.attributes {
            put_varint(out, k);
            put_varint(out, v);
        }
        put_varint(out, self.children.len() as u64);
        for child in &self.children {
            child.encode(out);
        }
    }
}

fn annotation_element(strings: &mut StringTable, a: &Annotation) -> Element {
    let mut e = Element::new(strings, "annotation");
    e.attr(strings, "class", &a.type_id.to_string());
    for (k, v) in &a.values {
        e.attr(strings, k, v);
    }
    e
}

fn class_element(strings: &mut StringTable, c: &Class) -> Element {
    let mut e = Element::new(strings, "class");
    e.attr(strings, "name", &c.name);
    e.attr(strings, "id", &c.id.to_string());
    if let Some(s) = &c.super_type {
        e.attr(strings, "superType", s);
    }
    if c.simple_type {
        e.attr(strings, "simpleType", "true");
    }
    for a in &c.annotations {
        e.children.push(annotation_element(strings, a));
    }
    for s in &c.settings {
        let mut se = Element::new(strings, "setting");
        se.attr(strings, "name", &s.name);
        se.attr(strings, "class", &s.type_id.to_string());
        se.attr(strings, "defaultValue", &s.default_value);
        for a in &s.annotations {
            se.children.push(annotation_element(strings, a));
        }
        e.children.push(se);
    }
    for f in &c.fields {
        let mut fe = Element::new(strings, "field");
        fe.attr(strings, "name", &f.name);
        fe.attr(strings, "class", &f.type_id.to_string());
        if f.constant_pool {
            fe.attr(strings, "constantPool", "true");
        }
        if f.array {
            fe.attr(strings, "dimension", "1");
        }
        for a in &f.annotations {
            fe.children.push(annotation_element(strings, a));
        }
        e.children.push(fe);
    }
    e
}

fn metadata_tree(metadata: &Metadata, strings: &mut StringTable) -> Element {
    let mut root = Element::new(strings, "root");
    let mut meta = Element::new(strings, "metadata");
    for c in &metadata.classes {
        meta.children.push(class_element(strings, c));
    }
    root.children.push(meta);
    let mut region = Element::new(strings, "region");
    for (k, v) in &metadata.region.attributes {
        region.attr(strings, k, v);
    }
    root.children.push(region);
    root
}

/// The constant pools of one checkpoint record, collected before it is written. Pools appear in
/// the order their types were first added; add referrers before referees (invariant I8 of docs/sampler-protocol.md).
#[derive(Debug, Default, Clone)]
pub struct Checkpoint {
    pools: Vec<PoolData>,
    index: HashMap<u64, usize>,
}

#[derive(Debug, Clone)]
struct PoolData {
    type_id: u64,
    count: u64,
    bytes: Vec<u8>,
}

impl Checkpoint {
    /// An empty checkpoint.
    pub fn new() -> Checkpoint {
        Checkpoint::default()
    }

    /// Adds the constant `key` of type `type_id`; `value` writes its fields (a simple type writes its
    /// single field).
    pub fn add(&mut self, type_id: u64, key: u64, value: impl FnOnce(&mut Vec<u8>)) {
        let i = match self.index.get(&type_id) {
            Some(&i) => i,
            None => {
                self.pools.push(PoolData { type_id, count: 0, bytes: Vec::new() });
                self.index.insert(type_id, self.pools.len() - 1);
                self.pools.len() - 1
            }
        };
        let pool = &mut self.pools[i];
        pool.count += 1;
        put_varint(&mut pool.bytes, key);
        value(&mut pool.bytes);
    }

    /// Adds a constant whose value is given as a [`Value`].
    pub fn add_value(&mut self, type_id: u64, key: u64, value: &Value) {
        self.add(type_id, key, |out| put_value(out, value));
    }

    /// No constants were added.
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// Number of constants added.
    pub fn len(&self) -> usize {
        self.pools.iter().map(|p| p.count as usize).sum()
    }

    /// Removes every constant.
    pub fn clear(&mut self) {
        self.pools.clear();
        self.index.clear();
    }

    /// Encodes the checkpoint record (type 1). `delta` is the previous checkpoint's offset minus this
    /// one's (0 for the first of a chunk); `mask` is the type mask ([`CHECKPOINT_FLUSH`], …).
    pub fn write(&self, out: &mut Vec<u8>, start_ticks: i64, delta: i64, mask: u8) {
        let start = begin_record(out, 1);
        put_long(out, start_ticks);
        put_varint(out, 0);
        put_long(out, delta);
        out.push(mask);
        put_varint(out, self.pools.len() as u64);
        for pool in &self.pools {
            put_varint(out, pool.type_id);
            put_varint(out, pool.count);
            out.extend_from_slice(&pool.bytes);
        }
        end_record(out, start);
    }
}

/// The state of one chunk being written, without I/O.
///
/// Records are appended to an internal buffer that the caller drains with [`Self::take_pending`] and
/// writes at the returned chunk offset; [`Self::publish`] and [`Self::finish`] return the header to
/// write by the guard protocol (see [`crate::header::publish_writes`]). A caller that keeps the whole
/// chunk in memory uses [`Self::into_bytes`] instead.
#[derive(Debug)]
pub struct ChunkEncoder {
    header: ChunkHeader,
    pending: Vec<u8>,
    pending_start: u64,
    last_checkpoint: u64,
    metadata_offset: u64,
    metadata_id: Option<u64>,
}

impl ChunkEncoder {
    /// Starts a chunk with ns ticks: the header (state 1, size 68) is the first pending bytes.
    pub fn new(start_nanos: i64, start_ticks: i64) -> ChunkEncoder {
        ChunkEncoder::with_ticks_per_second(start_nanos, start_ticks, NANOS_PER_SECOND)
    }

    /// Starts a chunk whose ticks run at `ticks_per_second` (e.g. a CPU's time-stamp counter).
    pub fn with_ticks_per_second(start_nanos: i64, start_ticks: i64, ticks_per_second: i64) -> ChunkEncoder {
        let header = ChunkHeader { ticks_per_second, ..ChunkHeader::new(start_nanos, start_ticks) };
        ChunkEncoder {
            pending: header.encode().to_vec(),
            header,
            pending_start: 0,
            last_checkpoint: 0,
            metadata_offset: 0,
            metadata_id: None,
        }
    }

    /// The header as last published (or the initial one).
    pub fn header(&self) -> &ChunkHeader {
        &self.header
    }

    /// Chunk-relative offset where the next record goes.
    pub fn position(&self) -> u64 {
        self.pending_start + self.pending.len() as u64
    }

    /// Bytes written so far that are not yet published.
    pub fn unpublished_len(&self) -> u64 {
        self.position() - self.header.chunk_size as u64
    }

    /// Id of the metadata written last, if any.
    pub fn metadata_id(&self) -> Option<u64> {
        self.metadata_id
    }

    /// Appends a metadata record and makes it the chunk's current metadata.
    pub fn write_metadata(&mut self, metadata: &Metadata, start_ticks: i64) {
        self.metadata_offset = self.position();
        self.metadata_id = Some(metadata.id);
        write_metadata(&mut self.pending, metadata, start_ticks);
    }

    /// Appends pre-encoded, complete records (for example the contents of an event buffer).
    pub fn write_records(&mut self, records: &[u8]) {
        self.pending.extend_from_slice(records);
    }

    /// Appends one event record; `body` writes its fields after the type id.
    pub fn write_event(&mut self, type_id: u64, body: impl FnOnce(&mut Vec<u8>)) {
        write_record(&mut self.pending, type_id, body);
    }

    /// Appends a checkpoint linked to the previous one. `flush` sets the FLUSH bit, which ends a
    /// streaming segment.
    pub fn write_checkpoint(&mut self, checkpoint: &Checkpoint, start_ticks: i64, flush: bool) {
        let offset = self.position();
        let delta = if self.last_checkpoint == 0 { 0 } else { self.last_checkpoint as i64 - offset as i64 };
        checkpoint.write(&mut self.pending, start_ticks, delta, if flush { CHECKPOINT_FLUSH } else { 0 });
        self.last_checkpoint = offset;
    }

    /// Takes the bytes appended since the last call: the chunk offset to write them at, and the bytes.
    pub fn take_pending(&mut self) -> (u64, Vec<u8>) {
        let start = self.pending_start;
        let bytes = std::mem::take(&mut self.pending);
        self.pending_start += bytes.len() as u64;
        (start, bytes)
    }

    /// Publishes everything written so far as the next generation of an in-progress chunk. Write the
    /// pending bytes before the returned header. Publishing with data but no metadata would make the
    /// JDK reader spin (docs/jfr-format.md, "Publishing a live chunk"), so it is refused (returns `None`).
    pub fn publish(&mut self, duration_nanos: i64) -> Option<ChunkHeader> {
        if self.metadata_offset == 0 {
            return None;
        }
        self.header.chunk_size = self.position() as i64;
        self.header.cp_offset = self.last_checkpoint as i64;
        self.header.metadata_offset = self.metadata_offset as i64;
        self.header.duration_nanos = duration_nanos.max(0);
        self.header.state = next_generation(self.header.state);
        Some(self.header)
    }

    /// Finishes the chunk: state 0, the final duration (at least 1 ns), and the final flag if this is
    /// the last chunk of the recording. Returns `None` if no metadata was ever written.
    pub fn finish(&mut self, duration_nanos: i64, final_chunk: bool) -> Option<ChunkHeader> {
        if self.metadata_offset == 0 {
            return None;
        }
        self.header.chunk_size = self.position() as i64;
        self.header.cp_offset = self.last_checkpoint as i64;
        self.header.metadata_offset = self.metadata_offset as i64;
        self.header.duration_nanos = duration_nanos.max(1);
        self.header.state = STATE_FINISHED;
        self.header.flags = FLAG_COMPRESSED_INTS | if final_chunk { FLAG_FINAL_CHUNK } else { 0 };
        Some(self.header)
    }

    /// The whole chunk as bytes, for a writer that never took pending bytes: finishes it with
    /// `duration_nanos` and `final_chunk` and patches the header in place.
    ///
    /// # Panics
    /// If pending bytes were taken before, or no metadata was written.
    pub fn into_bytes(mut self, duration_nanos: i64, final_chunk: bool) -> Vec<u8> {
        assert_eq!(self.pending_start, 0, "into_bytes needs the whole chunk in memory");
        let header = self.finish(duration_nanos, final_chunk).expect("a chunk needs metadata");
        self.pending[..HEADER_SIZE].copy_from_slice(&header.encode());
        self.pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_utf8_uses_tag_3_even_for_the_empty_string() {
        let mut out = Vec::new();
        put_utf8(&mut out, "");
        assert_eq!(out, [3, 0]);
        out.clear();
        put_utf8(&mut out, "é");
        assert_eq!(out, [3, 2, 0xC3, 0xA9]);
        out.clear();
        put_string(&mut out, Some(""));
        assert_eq!(out, [1], "plain strings keep the short empty form");
    }
}
