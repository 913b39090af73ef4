//! The reader: zero-copy over [`Bytes`], never panics, allocation bounded by the input's size.
//!
//! A [`Chunk`] parses its header, its metadata into a [`TypeTable`] and indexes its constant pools by
//! walking the checkpoint chain; values are decoded from the pool only when [`Chunk::resolve`] asks
//! for them. Events are read lazily by [`Chunk::items`]. A chunk that is still being written is
//! followed with [`Chunk::refresh`], which applies the JDK's header guard protocol.

use crate::error::{Error, Result};
use crate::header::{ChunkHeader, HEADER_SIZE};
use crate::metadata::{Annotation, Class, Field, Metadata, Region, Setting, PRIMITIVES};
use crate::value::{Object, Text, Value};
use crate::varint;
use crate::MAX_NESTING;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;

/// Cursor over a chunk's bytes; offsets in errors are absolute (`base` + position).
pub(crate) struct Cursor<'a> {
    data: &'a Bytes,
    pos: usize,
    end: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a Bytes, pos: usize, end: usize, base: u64) -> Cursor<'a> {
        let end = end.min(data.len());
        Cursor { data, pos: pos.min(end), end, base }
    }
    fn offset(&self) -> u64 {
        self.base.wrapping_add(self.pos as u64)
    }
    fn remaining(&self) -> usize {
        self.end - self.pos
    }
    fn eof(&self, expected: &'static str) -> Error {
        Error::UnexpectedEof { offset: self.base.wrapping_add(self.end as u64), expected }
    }
    fn varint(&mut self, expected: &'static str) -> Result<u64> {
        let slice = self.data.get(self.pos..self.end).unwrap_or(&[]);
        let (v, n) = varint::read_u64(slice).ok_or_else(|| self.eof(expected))?;
        self.pos += n;
        Ok(v)
    }
    fn u8(&mut self, expected: &'static str) -> Result<u8> {
        if self.pos >= self.end {
            return Err(self.eof(expected));
        }
        let b = self.data.get(self.pos).copied().ok_or_else(|| self.eof(expected))?;
        self.pos += 1;
        Ok(b)
    }
    fn array<const N: usize>(&mut self, expected: &'static str) -> Result<[u8; N]> {
        if self.remaining() < N {
            return Err(self.eof(expected));
        }
        let mut out = [0u8; N];
        out.copy_from_slice(self.data.get(self.pos..self.pos + N).ok_or_else(|| self.eof(expected))?);
        self.pos += N;
        Ok(out)
    }
    fn bytes(&mut self, n: u64, expected: &'static str) -> Result<Bytes> {
        if n > self.remaining() as u64 {
            return Err(Error::CountTooLarge { offset: self.offset(), what: expected, count: n });
        }
        let n = n as usize;
        let b = self.data.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }
    fn skip(&mut self, n: u64, expected: &'static str) -> Result<()> {
        if n > self.remaining() as u64 {
            return Err(Error::CountTooLarge { offset: self.offset(), what: expected, count: n });
        }
        self.pos += n as usize;
        Ok(())
    }
    /// Reads a count and checks that the remaining bytes could hold that many elements of at least
    /// `min_size` bytes (1 if zero-sized elements are possible: the count still bounds the work).
    fn count(&mut self, what: &'static str, min_size: usize) -> Result<usize> {
        let at = self.offset();
        let n = self.varint(what)?;
        if n > (self.remaining() / min_size.max(1)) as u64 && n > 0 {
            // A zero-sized element type may legitimately have more elements than bytes remain; we
            // still refuse, which bounds the work by the input size.
            return Err(Error::CountTooLarge { offset: at, what, count: n });
        }
        Ok(n as usize)
    }
    fn string(&mut self) -> Result<StringValue> {
        let at = self.offset();
        match self.u8("a string encoding byte")? {
            0 => Ok(StringValue::Null),
            1 => Ok(StringValue::Text(Text::from(""))),
            2 => Ok(StringValue::Ref(self.varint("a string pool key")?)),
            3 => {
                let n = self.varint("a UTF-8 string length")?;
                Ok(StringValue::Text(Text::from_utf8(self.bytes(n, "UTF-8 string bytes")?)))
            }
            4 => {
                let n = self.count("UTF-16 string length", 1)?;
                let mut units = Vec::with_capacity(n);
                for _ in 0..n {
                    units.push(self.varint("a UTF-16 code unit")? as u16);
                }
                Ok(StringValue::Text(Text::from(String::from_utf16_lossy(&units))))
            }
            5 => {
                let n = self.varint("a Latin-1 string length")?;
                Ok(StringValue::Text(Text::from_latin1(self.bytes(n, "Latin-1 string bytes")?)))
            }
            tag => Err(Error::Invalid { offset: at, expected: "a string encoding 0..=5", found: tag.into() }),
        }
    }
    fn skip_string(&mut self) -> Result<()> {
        let at = self.offset();
        match self.u8("a string encoding byte")? {
            0 | 1 => Ok(()),
            2 => self.varint("a string pool key").map(drop),
            3 | 5 => {
                let n = self.varint("a string length")?;
                self.skip(n, "string bytes")
            }
            4 => {
                let n = self.count("UTF-16 string length", 1)?;
                for _ in 0..n {
                    self.varint("a UTF-16 code unit")?;
                }
                Ok(())
            }
            tag => Err(Error::Invalid { offset: at, expected: "a string encoding 0..=5", found: tag.into() }),
        }
    }
}

enum StringValue {
    Null,
    Text(Text),
    Ref(u64),
}

/// Most elements a claimed count reserves room for before they are decoded.
const INITIAL_CAPACITY: usize = 16;

/// How a field's value is encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `boolean`
    Boolean,
    /// `byte`
    Byte,
    /// `char`
    Char,
    /// `short`
    Short,
    /// `int`
    Int,
    /// `long`
    Long,
    /// `float`
    Float,
    /// `double`
    Double,
    /// `java.lang.String`
    String,
    /// A constant-pool key of the given type.
    Ref(u64),
    /// An inline struct: index into [`TypeTable::classes`].
    Struct(usize),
}

/// A field's decoding plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldPlan {
    /// Encoding of one element.
    pub kind: Kind,
    /// The field is an array.
    pub array: bool,
}

/// Metadata decoded into lookup tables: classes by id and per-class field plans.
#[derive(Debug)]
pub struct TypeTable {
    /// The descriptor as decoded.
    pub metadata: Metadata,
    by_id: HashMap<u64, usize>,
    plans: Vec<Vec<FieldPlan>>,
    string_type: Option<u64>,
}

impl TypeTable {
    /// Builds the tables; fails if a field names an undeclared type or a field-less non-primitive.
    pub fn new(metadata: Metadata, offset: u64) -> Result<TypeTable> {
        let by_id: HashMap<u64, usize> = metadata.classes.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
        let mut plans = Vec::with_capacity(metadata.classes.len());
        for class in &metadata.classes {
            let mut plan = Vec::with_capacity(class.fields.len());
            for field in &class.fields {
                let &idx = by_id.get(&field.type_id).ok_or(Error::UnknownType { offset, type_id: field.type_id })?;
                let target = &metadata.classes[idx];
                let kind = if field.constant_pool {
                    Kind::Ref(field.type_id)
                } else {
                    match primitive_kind(&target.name) {
                        Some(k) if target.fields.is_empty() => k,
                        _ if !target.fields.is_empty() => Kind::Struct(idx),
                        _ => {
                            return Err(Error::Invalid {
                                offset,
                                expected: "a primitive type or a type with fields",
                                found: field.type_id,
                            })
                        }
                    }
                };
                plan.push(FieldPlan { kind, array: field.array });
            }
            plans.push(plan);
        }
        let string_type = metadata.classes.iter().find(|c| c.name == "java.lang.String").map(|c| c.id);
        let table = TypeTable { metadata, by_id, plans, string_type };
        table.check_inline_cycles(offset)?;
        Ok(table)
    }

    /// Inline structs that contain themselves (directly or not) can never be decoded; refuse them
    /// up front so that malformed metadata fails fast.
    fn check_inline_cycles(&self, offset: u64) -> Result<()> {
        // 0 = unvisited, 1 = on the path, 2 = done
        let mut state = vec![0u8; self.plans.len()];
        for start in 0..self.plans.len() {
            if state[start] != 0 {
                continue;
            }
            let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
            state[start] = 1;
            while let Some(&mut (class, ref mut next)) = stack.last_mut() {
                let plan = &self.plans[class];
                if *next < plan.len() {
                    let field = plan[*next];
                    *next += 1;
                    if let Kind::Struct(target) = field.kind {
                        if field.array {
                            continue; // an empty array ends the recursion
                        }
                        match state[target] {
                            1 => return Err(Error::NestingTooDeep { offset }),
                            0 => {
                                state[target] = 1;
                                stack.push((target, 0));
                            }
                            _ => {}
                        }
                    }
                } else {
                    state[class] = 2;
                    stack.pop();
                }
            }
        }
        Ok(())
    }

    /// The class with id `type_id`.
    pub fn class(&self, type_id: u64) -> Option<&Class> {
        self.by_id.get(&type_id).map(|&i| &self.metadata.classes[i])
    }

    /// Index of the class with id `type_id`.
    pub fn class_index(&self, type_id: u64) -> Option<usize> {
        self.by_id.get(&type_id).copied()
    }

    /// All classes, indexable by [`Kind::Struct`].
    pub fn classes(&self) -> &[Class] {
        &self.metadata.classes
    }

    /// Field plans of the class at `index`.
    pub fn plan(&self, index: usize) -> &[FieldPlan] {
        self.plans.get(index).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Id of `java.lang.String`, if declared.
    pub fn string_type(&self) -> Option<u64> {
        self.string_type
    }

    fn read_value(&self, cur: &mut Cursor<'_>, plan: FieldPlan, depth: usize) -> Result<Value> {
        if plan.array {
            let n = cur.count("array length", 1)?;
            // Grow with what is decoded: a count only bounds the work, and nested arrays would
            // otherwise reserve their claimed lengths at every level before reading anything.
            let mut items = Vec::with_capacity(n.min(INITIAL_CAPACITY));
            for _ in 0..n {
                items.push(self.read_one(cur, plan.kind, depth)?);
            }
            return Ok(Value::Array(items));
        }
        self.read_one(cur, plan.kind, depth)
    }

    fn read_one(&self, cur: &mut Cursor<'_>, kind: Kind, depth: usize) -> Result<Value> {
        Ok(match kind {
            Kind::Boolean => Value::Boolean(cur.u8("a boolean")? != 0),
            Kind::Byte => Value::Byte(cur.u8("a byte")? as i8),
            Kind::Char => Value::Char(cur.varint("a char")? as u16),
            Kind::Short => Value::Short(cur.varint("a short")? as i16),
            Kind::Int => Value::Int(cur.varint("an int")? as i32),
            Kind::Long => Value::Long(cur.varint("a long")? as i64),
            Kind::Float => Value::Float(f32::from_be_bytes(cur.array("a float")?)),
            Kind::Double => Value::Double(f64::from_be_bytes(cur.array("a double")?)),
            Kind::String => match cur.string()? {
                StringValue::Null => Value::Null,
                StringValue::Text(t) => Value::String(t),
                StringValue::Ref(key) => match self.string_type {
                    Some(type_id) => Value::Ref { type_id, key },
                    None => Value::Null,
                },
            },
            // Key 0 is null by convention, but the JDK resolves it like any other key when the
            // pool defines it (HotSpot's FrameType 0 is "Interpreted", ThreadState 0 "STATE_NEW"),
            // so it stays a reference; `Chunk::resolve` returns `None` when the pool lacks it.
            Kind::Ref(type_id) => Value::Ref { type_id, key: cur.varint("a constant pool key")? },
            Kind::Struct(index) => {
                if depth >= MAX_NESTING {
                    return Err(Error::NestingTooDeep { offset: cur.offset() });
                }
                let plan = self.plan(index);
                let mut fields = Vec::with_capacity(plan.len());
                for &p in plan {
                    fields.push(self.read_value(cur, p, depth + 1)?);
                }
                Value::Object(Object { type_id: self.metadata.classes[index].id, fields })
            }
        })
    }

    fn skip_value(&self, cur: &mut Cursor<'_>, plan: FieldPlan, depth: usize) -> Result<()> {
        if plan.array {
            let n = cur.count("array length", 1)?;
            for _ in 0..n {
                self.skip_one(cur, plan.kind, depth)?;
            }
            return Ok(());
        }
        self.skip_one(cur, plan.kind, depth)
    }

    fn skip_one(&self, cur: &mut Cursor<'_>, kind: Kind, depth: usize) -> Result<()> {
        match kind {
            Kind::Boolean | Kind::Byte => cur.skip(1, "a byte"),
            Kind::Float => cur.skip(4, "a float"),
            Kind::Double => cur.skip(8, "a double"),
            Kind::Char | Kind::Short | Kind::Int | Kind::Long | Kind::Ref(_) => cur.varint("an integer").map(drop),
            Kind::String => cur.skip_string(),
            Kind::Struct(index) => {
                if depth >= MAX_NESTING {
                    return Err(Error::NestingTooDeep { offset: cur.offset() });
                }
                for &p in self.plan(index) {
                    self.skip_value(cur, p, depth + 1)?;
                }
                Ok(())
            }
        }
    }

    /// Decodes one value of class `class_index` (all its fields) from `cur`.
    fn read_class(&self, cur: &mut Cursor<'_>, class_index: usize) -> Result<Value> {
        self.read_one(cur, Kind::Struct(class_index), 0)
    }
}

fn primitive_kind(name: &str) -> Option<Kind> {
    Some(match name {
        "boolean" => Kind::Boolean,
        "byte" => Kind::Byte,
        "char" => Kind::Char,
        "short" => Kind::Short,
        "int" => Kind::Int,
        "long" => Kind::Long,
        "float" => Kind::Float,
        "double" => Kind::Double,
        "java.lang.String" => Kind::String,
        _ => return None,
    })
}

/// Is `name` one of the primitive type names?
pub fn is_primitive(name: &str) -> bool {
    PRIMITIVES.contains(&name)
}

/// A decoded metadata record's element tree node.
struct Element {
    name: usize,
    attributes: Vec<(usize, usize)>,
    children: Vec<Element>,
}

/// Decoded metadata text may be at most this many times the record's size (plus the slack).
const METADATA_TEXT_FACTOR: usize = 16;
/// Slack of the metadata text budget, for tiny records.
const METADATA_TEXT_SLACK: usize = 64 * 1024;

/// Parses a metadata record at chunk offset `offset`; returns the descriptor.
pub fn parse_metadata(data: &Bytes, offset: usize, limit: usize, base: u64) -> Result<Metadata> {
    let mut cur = Cursor::new(data, offset, limit, base);
    let at = cur.offset();
    let size = cur.varint("a metadata record size")?;
    let record_end = check_record_size(&cur, offset, size, at)?;
    let mut cur = Cursor::new(data, cur.pos, record_end, base);
    let type_id = cur.varint("the metadata type id")?;
    if type_id != 0 {
        return Err(Error::Invalid { offset: at, expected: "a metadata record (type 0)", found: type_id });
    }
    cur.varint("the metadata start time")?;
    cur.varint("the metadata duration")?;
    let id = cur.varint("the metadata id")?;
    let n = cur.count("metadata string table", 1)?;
    let mut strings = Vec::with_capacity(n.min(INITIAL_CAPACITY));
    for _ in 0..n {
        strings.push(match cur.string()? {
            StringValue::Text(t) => t.as_str().to_owned(),
            _ => String::new(),
        });
    }
    let root = read_element(&mut cur, strings.len(), 0)?;
    // Every string the descriptor materialises is charged against a budget proportional to the
    // record's size: a 2-byte attribute may name a long string, and without the budget a small
    // hostile record could make us copy that string millions of times.
    let budget =
        core::cell::Cell::new((size as usize).saturating_mul(METADATA_TEXT_FACTOR).saturating_add(METADATA_TEXT_SLACK));
    let s = |i: usize| strings.get(i).map(String::as_str).unwrap_or("");
    let own = |text: &str| -> Result<String> {
        let cost = text.len() + 16;
        match budget.get().checked_sub(cost) {
            Some(left) => {
                budget.set(left);
                Ok(text.to_owned())
            }
            None => Err(Error::Invalid {
                offset: at,
                expected: "metadata whose decoded text stays proportional to its size",
                found: size,
            }),
        }
    };
    let find = |e: &Element, key: &str| -> Option<&str> {
        e.attributes.iter().find(|&&(k, _)| s(k) == key).map(|&(_, v)| s(v))
    };
    let attr = |e: &Element, key: &str| -> Result<Option<String>> { find(e, key).map(&own).transpose() };
    let number = |e: &Element, key: &str| -> Result<u64> {
        let text = find(e, key).unwrap_or_default();
        text.parse::<u64>().or_else(|_| text.parse::<i64>().map(|v| v as u64)).map_err(|_| Error::Invalid {
            offset: at,
            expected: "a numeric id attribute",
            found: 0,
        })
    };
    let annotation = |e: &Element| -> Result<Annotation> {
        Ok(Annotation {
            type_id: number(e, "class")?,
            values: e
                .attributes
                .iter()
                .filter(|&&(k, _)| s(k) != "class")
                .map(|&(k, v)| Ok((own(s(k))?, own(s(v))?)))
                .collect::<Result<_>>()?,
        })
    };
    let annotations = |e: &Element| -> Result<Vec<Annotation>> {
        e.children.iter().filter(|a| s(a.name) == "annotation").map(&annotation).collect()
    };
    let mut metadata = Metadata { id, classes: Vec::new(), region: Region { attributes: Vec::new() } };
    for top in &root.children {
        match s(top.name) {
            "metadata" => {
                for ce in top.children.iter().filter(|c| s(c.name) == "class") {
                    let mut class = Class::new(number(ce, "id")?, attr(ce, "name")?.unwrap_or_default());
                    class.super_type = attr(ce, "superType")?;
                    class.simple_type = find(ce, "simpleType").is_some();
                    for child in &ce.children {
                        match s(child.name) {
                            "field" => class.fields.push(Field {
                                name: attr(child, "name")?.unwrap_or_default(),
                                type_id: number(child, "class")?,
                                constant_pool: find(child, "constantPool").is_some_and(|v| v != "false"),
                                array: match find(child, "dimension") {
                                    None | Some("0") => false,
                                    Some("1") => true,
                                    Some(other) => {
                                        return Err(Error::Invalid {
                                            offset: at,
                                            expected: "a field dimension of 0 or 1",
                                            found: other.parse().unwrap_or(u64::MAX),
                                        })
                                    }
                                },
                                annotations: annotations(child)?,
                            }),
                            "setting" => class.settings.push(Setting {
                                name: attr(child, "name")?.unwrap_or_default(),
                                type_id: number(child, "class")?,
                                default_value: attr(child, "defaultValue")?.unwrap_or_default(),
                                annotations: annotations(child)?,
                            }),
                            "annotation" => class.annotations.push(annotation(child)?),
                            _ => {}
                        }
                    }
                    metadata.classes.push(class);
                }
            }
            "region" => {
                metadata.region.attributes =
                    top.attributes.iter().map(|&(k, v)| Ok((own(s(k))?, own(s(v))?))).collect::<Result<_>>()?;
            }
            _ => {}
        }
    }
    Ok(metadata)
}

fn read_element(cur: &mut Cursor<'_>, nstrings: usize, depth: usize) -> Result<Element> {
    if depth > MAX_NESTING {
        return Err(Error::NestingTooDeep { offset: cur.offset() });
    }
    let string_index = |cur: &mut Cursor<'_>| -> Result<usize> {
        let at = cur.offset();
        let i = cur.varint("a metadata string index")?;
        if i >= nstrings as u64 {
            return Err(Error::Invalid { offset: at, expected: "an index into the metadata string table", found: i });
        }
        Ok(i as usize)
    };
    let name = string_index(cur)?;
    let nattr = cur.count("element attribute", 2)?;
    let mut attributes = Vec::with_capacity(nattr.min(INITIAL_CAPACITY));
    for _ in 0..nattr {
        let k = string_index(cur)?;
        let v = string_index(cur)?;
        attributes.push((k, v));
    }
    let nchildren = cur.count("element children", 3)?;
    let mut children = Vec::with_capacity(nchildren.min(INITIAL_CAPACITY));
    for _ in 0..nchildren {
        children.push(read_element(cur, nstrings, depth + 1)?);
    }
    Ok(Element { name, attributes, children })
}

/// Validates a record's size: non-zero, no smaller than its size field, inside `limit`.
fn check_record_size(cur: &Cursor<'_>, start: usize, size: u64, at: u64) -> Result<usize> {
    let header_len = (cur.pos - start) as u64;
    if size == 0 || size <= header_len {
        return Err(Error::Invalid { offset: at, expected: "a record size larger than its size field", found: size });
    }
    let end = (start as u64).saturating_add(size);
    if end > cur.end as u64 {
        return Err(Error::UnexpectedEof {
            offset: cur.base.wrapping_add(cur.end as u64),
            expected: "the rest of a record",
        });
    }
    Ok(end as usize)
}

/// A decoded event record.
#[derive(Debug, Clone)]
pub struct Event {
    /// The event type id.
    pub type_id: u64,
    /// Absolute offset of the record.
    pub offset: u64,
    /// Record size in bytes.
    pub size: u64,
    /// Field values in declared order (the first is the start time in ticks).
    pub values: Vec<Value>,
}

impl Event {
    /// The start time in ticks (field 0).
    pub fn start_ticks(&self) -> i64 {
        self.values.first().and_then(Value::as_i64).unwrap_or(0)
    }
}

/// One record of a chunk, as iterated by [`Chunk::items`].
#[derive(Debug, Clone)]
pub enum Item {
    /// An event of a declared event type.
    Event(Event),
    /// A checkpoint with the FLUSH bit: the end of a flush segment.
    Flush,
}

/// A raw record: its bytes, untouched.
#[derive(Debug, Clone)]
pub struct RawRecord {
    /// Chunk-relative offset.
    pub offset: u64,
    /// Record type id (0 metadata, 1 checkpoint, else an event type).
    pub type_id: u64,
    /// The whole record, size field included.
    pub bytes: Bytes,
}

impl RawRecord {
    /// Its leading fields, read without decoding the rest (see [`LeadingFields`]).
    pub fn leading_fields(&self) -> LeadingFields<'_> {
        LeadingFields::new(&self.bytes)
    }
}

/// The leading fields of a record, read one by one from its bytes without decoding the rest: the
/// size and the type id, then, in an event record, its fields in declared order (the start time
/// and duration in ticks, then e.g. the thread and stack trace keys). Every read is checked
/// against the bytes; `None` means they end or a varint is malformed (the decoder then names the
/// problem precisely).
#[derive(Debug, Clone, Copy)]
pub struct LeadingFields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> LeadingFields<'a> {
    /// Starts at `record`'s first byte, its size field.
    #[inline]
    pub fn new(record: &'a [u8]) -> LeadingFields<'a> {
        LeadingFields { bytes: record, pos: 0 }
    }

    /// The next field, a varint: the size, the type id, an integer, or a constant pool key.
    #[inline]
    pub fn varint(&mut self) -> Option<u64> {
        let (v, n) = varint::read_u64(self.bytes.get(self.pos..)?)?;
        self.pos += n;
        Some(v)
    }

    /// The next `N` varint fields.
    #[inline]
    pub fn varints<const N: usize>(&mut self) -> Option<[u64; N]> {
        let mut out = [0u64; N];
        for v in &mut out {
            *v = self.varint()?;
        }
        Some(out)
    }

    /// Skips a field of `n` bytes (a float, double, byte or boolean).
    #[inline]
    pub fn skip(&mut self, n: usize) -> Option<()> {
        let end = self.pos.checked_add(n)?;
        self.bytes.get(end..)?;
        self.pos = end;
        Some(())
    }

    /// How many bytes the fields read so far take.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes after the fields read so far.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }
}

/// Values [`Chunk::resolve_deep`] may produce beyond one per chunk byte.
const RESOLVE_SLACK: usize = 4096;

/// Where the pool value of a (type, key) starts.
type PoolIndex = HashMap<u64, HashMap<u64, usize>>;

/// One chunk, complete or (followed with [`Chunk::refresh`]) still being written.
#[derive(Debug, Clone)]
pub struct Chunk {
    data: Bytes,
    base: u64,
    header: ChunkHeader,
    types: Arc<TypeTable>,
    pools: Arc<PoolIndex>,
    checkpoints: Vec<u64>,
}

/// What [`Chunk::refresh`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// The header is being rewritten: try again shortly.
    Locked,
    /// Nothing new was published.
    Unchanged,
    /// More data was published.
    Grew,
}

impl Chunk {
    /// Parses the chunk at the start of `data` (which may hold more bytes after the chunk, or, for a
    /// live chunk, unpublished bytes). `base` is the chunk's offset in the containing file, for
    /// errors. A chunk whose header is locked gives [`Error::HeaderLocked`]; one with data but no
    /// metadata, [`Error::NoMetadata`].
    pub fn parse(data: Bytes, base: u64) -> Result<Chunk> {
        let header = ChunkHeader::parse(&data, base)?;
        if header.is_locked() {
            return Err(Error::HeaderLocked { offset: base });
        }
        header.validate(data.len() as u64, base)?;
        let data = data.slice(..header.chunk_size as usize);
        if header.metadata_offset == 0 {
            return Err(Error::NoMetadata { offset: base });
        }
        let metadata = parse_metadata(&data, header.metadata_offset as usize, data.len(), base)?;
        let types = Arc::new(TypeTable::new(metadata, base.wrapping_add(header.metadata_offset as u64))?);
        let mut chunk = Chunk { data, base, header, types, pools: Arc::new(HashMap::new()), checkpoints: Vec::new() };
        let mut pools = HashMap::new();
        chunk.index_checkpoints(header.cp_offset, 0, &mut pools)?;
        chunk.pools = Arc::new(pools);
        Ok(chunk)
    }

    /// Like [`Chunk::parse`], but reuses `types` when the chunk's metadata has the same id (as the
    /// JDK reader does; docs/jfr-format.md, "Metadata", explains why ids must change with the descriptor).
    pub fn parse_with(data: Bytes, base: u64, previous: Option<&Arc<TypeTable>>) -> Result<Chunk> {
        // Metadata parsing is cheap next to event decoding; reuse only saves the allocation.
        let chunk = Chunk::parse(data, base)?;
        match previous {
            Some(p) if p.metadata == chunk.types.metadata => Ok(Chunk { types: Arc::clone(p), ..chunk }),
            _ => Ok(chunk),
        }
    }

    /// Re-reads the header of a live chunk from `data` (the file's current bytes from the chunk
    /// start) and takes in what was published since: new metadata, the checkpoints between the old
    /// and the new last checkpoint. Events read before stay valid; continue from the position the
    /// last iteration reached.
    pub fn refresh(&mut self, data: Bytes) -> Result<Refresh> {
        let header = ChunkHeader::parse(&data, self.base)?;
        if header.is_locked() {
            return Ok(Refresh::Locked);
        }
        if header.chunk_size == self.header.chunk_size && header.state == self.header.state {
            return Ok(Refresh::Unchanged);
        }
        if header.chunk_size < self.header.chunk_size {
            return Err(Error::Invalid {
                offset: self.base.wrapping_add(8),
                expected: "a chunk size that never shrinks",
                found: header.chunk_size as u64,
            });
        }
        header.validate(data.len() as u64, self.base)?;
        if header.metadata_offset == 0 {
            return Ok(Refresh::Locked);
        }
        let data = data.slice(..header.chunk_size as usize);
        let types = if header.metadata_offset != self.header.metadata_offset {
            let metadata = parse_metadata(&data, header.metadata_offset as usize, data.len(), self.base)?;
            Some(Arc::new(TypeTable::new(metadata, self.base.wrapping_add(header.metadata_offset as u64))?))
        } else {
            None
        };
        let old_cp = self.header.cp_offset;
        let mut next = Chunk {
            data,
            base: self.base,
            header,
            types: types.unwrap_or_else(|| Arc::clone(&self.types)),
            pools: Arc::clone(&self.pools),
            checkpoints: self.checkpoints.clone(),
        };
        if header.cp_offset != old_cp {
            let mut pools = (*self.pools).clone();
            next.index_checkpoints(header.cp_offset, old_cp, &mut pools)?;
            next.pools = Arc::new(pools);
        }
        *self = next;
        Ok(Refresh::Grew)
    }

    /// Walks the checkpoint chain from `from` back to `stop` (exclusive) or the first checkpoint.
    fn index_checkpoints(&mut self, from: i64, stop: i64, pools: &mut PoolIndex) -> Result<()> {
        let mut offset = from;
        // Where the pointer to `offset` was read: the header's cpOffset field, then the previous
        // checkpoint (its delta). Errors about a bad target name that place.
        let mut pointer_at = self.base.wrapping_add(16);
        let mut seen = Vec::new();
        while offset != 0 && (stop == 0 || offset > stop) {
            if offset < HEADER_SIZE as i64 || offset as u64 >= self.data.len() as u64 {
                return Err(Error::Invalid {
                    offset: pointer_at,
                    expected: "a checkpoint offset inside the chunk",
                    found: offset as u64,
                });
            }
            let at = self.base.wrapping_add(offset as u64);
            let delta = self.index_checkpoint(offset as usize, pools)?;
            seen.push(offset as u64);
            if delta == 0 {
                break;
            }
            if delta > 0 {
                return Err(Error::Invalid {
                    offset: at,
                    expected: "a negative checkpoint delta",
                    found: delta as u64,
                });
            }
            pointer_at = at;
            offset += delta;
        }
        seen.reverse();
        self.checkpoints.extend(seen);
        Ok(())
    }

    /// Indexes one checkpoint's pool entries; returns its delta.
    fn index_checkpoint(&self, offset: usize, pools: &mut PoolIndex) -> Result<i64> {
        let mut cur = Cursor::new(&self.data, offset, self.data.len(), self.base);
        let at = cur.offset();
        let size = cur.varint("a checkpoint size")?;
        let end = check_record_size(&cur, offset, size, at)?;
        let mut cur = Cursor::new(&self.data, cur.pos, end, self.base);
        let type_id = cur.varint("the checkpoint type id")?;
        if type_id != 1 {
            return Err(Error::Invalid { offset: at, expected: "a checkpoint record (type 1)", found: type_id });
        }
        cur.varint("the checkpoint start time")?;
        cur.varint("the checkpoint duration")?;
        let delta = cur.varint("the checkpoint delta")? as i64;
        cur.u8("the checkpoint type mask")?;
        let npools = cur.count("constant pool", 2)?;
        for _ in 0..npools {
            let pool_at = cur.offset();
            let pool_type = cur.varint("a constant pool type id")?;
            let class_index =
                self.types.class_index(pool_type).ok_or(Error::UnknownType { offset: pool_at, type_id: pool_type })?;
            let count = cur.count("constant", 1)?;
            let entries = pools.entry(pool_type).or_default();
            for _ in 0..count {
                let key = cur.varint("a constant key")?;
                let value_at = cur.pos;
                self.skip_class_value(&mut cur, class_index)?;
                entries.entry(key).or_insert(value_at);
            }
        }
        if cur.pos != end {
            return Err(Error::Invalid {
                offset: at,
                expected: "a checkpoint whose size matches its content",
                found: size,
            });
        }
        Ok(delta)
    }

    fn skip_class_value(&self, cur: &mut Cursor<'_>, class_index: usize) -> Result<()> {
        let class = &self.types.classes()[class_index];
        match primitive_kind(&class.name) {
            Some(kind) if class.fields.is_empty() => self.types.skip_one(cur, kind, 0),
            _ => self.types.skip_one(cur, Kind::Struct(class_index), 0),
        }
    }

    /// The header as read.
    pub fn header(&self) -> &ChunkHeader {
        &self.header
    }

    /// The chunk's offset in its file.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Published size of the chunk.
    pub fn size(&self) -> u64 {
        self.data.len() as u64
    }

    /// The chunk's bytes (header included, published part only).
    pub fn bytes(&self) -> &Bytes {
        &self.data
    }

    /// The decoded metadata and lookup tables.
    pub fn types(&self) -> &Arc<TypeTable> {
        &self.types
    }

    /// The metadata descriptor.
    pub fn metadata(&self) -> &Metadata {
        &self.types.metadata
    }

    /// Chunk-relative offsets of the checkpoints found, in file order.
    pub fn checkpoint_offsets(&self) -> &[u64] {
        &self.checkpoints
    }

    /// Number of entries in each constant pool.
    pub fn pool_sizes(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.pools.iter().map(|(&t, m)| (t, m.len()))
    }

    /// Keys of the pool of `type_id`.
    pub fn pool_keys(&self, type_id: u64) -> impl Iterator<Item = u64> + '_ {
        self.pools.get(&type_id).into_iter().flat_map(|m| m.keys().copied())
    }

    /// Chunk-relative offset where the encoded value of constant `key` of type `type_id` starts
    /// (after its key), if the chunk defines it: for checks of the encoding itself, e.g. which
    /// string tag a `jdk.types.Symbol` was written with.
    pub fn constant_offset(&self, type_id: u64, key: u64) -> Option<u64> {
        self.pools.get(&type_id)?.get(&key).map(|&at| at as u64)
    }

    /// Decodes the constant `key` of type `type_id`: `Ok(None)` if the pool lacks it (the JDK treats
    /// that as null). Simple types come back as their single field's value.
    pub fn resolve(&self, type_id: u64, key: u64) -> Result<Option<Value>> {
        Ok(self.resolve_sized(type_id, key)?.map(|(v, _)| v))
    }

    /// The encoded value of the constant `key` of type `type_id`, exactly as its checkpoint holds it
    /// (the bytes after the key): `Ok(None)` if no pool defines it. Copied after the same key into a
    /// checkpoint of a chunk with the same metadata, it defines the same constant, so a writer can
    /// cut a chunk into smaller valid chunks without decoding and re-encoding constants.
    pub fn constant_bytes(&self, type_id: u64, key: u64) -> Result<Option<Bytes>> {
        let Some(&offset) = self.pools.get(&type_id).and_then(|p| p.get(&key)) else {
            return Ok(None);
        };
        let class_index = self.types.class_index(type_id).ok_or(Error::UnknownType { offset: self.base, type_id })?;
        let mut cur = Cursor::new(&self.data, offset, self.data.len(), self.base);
        self.skip_class_value(&mut cur, class_index)?;
        Ok(Some(self.data.slice(offset..cur.pos)))
    }

    /// [`Chunk::resolve`], plus the number of bytes the constant's encoding took.
    fn resolve_sized(&self, type_id: u64, key: u64) -> Result<Option<(Value, usize)>> {
        let Some(&offset) = self.pools.get(&type_id).and_then(|p| p.get(&key)) else {
            return Ok(None);
        };
        let class_index = self.types.class_index(type_id).ok_or(Error::UnknownType { offset: self.base, type_id })?;
        let class = &self.types.classes()[class_index];
        let mut cur = Cursor::new(&self.data, offset, self.data.len(), self.base);
        let value = match primitive_kind(&class.name) {
            Some(kind) if class.fields.is_empty() => self.types.read_one(&mut cur, kind, 0)?,
            _ => self.types.read_class(&mut cur, class_index)?,
        };
        Ok(Some((unwrap_simple(&self.types, value), cur.pos - offset)))
    }

    /// Follows references: a `Ref` becomes its resolved value (recursively up to `depth` levels),
    /// objects and arrays are walked. Missing keys become `Null`.
    ///
    /// Constants may refer to each other many times over, so the result could be far larger than
    /// the chunk; the walk gives up with [`Error::CountTooLarge`] once the values it produced plus
    /// the bytes of the constants it decoded exceed the chunk's size (plus a small allowance).
    pub fn resolve_deep(&self, value: &Value, depth: usize) -> Result<Value> {
        let mut budget = self.data.len().saturating_add(RESOLVE_SLACK);
        self.resolve_deep_within(value, depth, 0, &mut budget)
    }

    fn resolve_deep_within(&self, value: &Value, depth: usize, nesting: usize, budget: &mut usize) -> Result<Value> {
        if *budget == 0 || nesting > 4 * MAX_NESTING {
            return Err(Error::CountTooLarge {
                offset: self.base,
                what: "values produced by resolving constants",
                count: self.data.len() as u64,
            });
        }
        *budget -= 1;
        Ok(match value {
            Value::Ref { type_id, key } if depth > 0 => match self.resolve_sized(*type_id, *key)? {
                Some((v, encoded)) => {
                    // Each decoded constant costs its encoded size: values are at least a byte.
                    *budget = budget.saturating_sub(encoded);
                    self.resolve_deep_within(&v, depth - 1, nesting + 1, budget)?
                }
                None => Value::Null,
            },
            Value::Array(items) if depth > 0 => Value::Array(
                items.iter().map(|v| self.resolve_deep_within(v, depth, nesting + 1, budget)).collect::<Result<_>>()?,
            ),
            Value::Object(o) if depth > 0 => Value::Object(Object {
                type_id: o.type_id,
                fields: o
                    .fields
                    .iter()
                    .map(|v| self.resolve_deep_within(v, depth, nesting + 1, budget))
                    .collect::<Result<_>>()?,
            }),
            other => other.clone(),
        })
    }

    /// The value of field `name` of `object` (an inline struct or resolved constant).
    pub fn field<'v>(&self, object: &'v Value, name: &str) -> Option<&'v Value> {
        let Value::Object(o) = object else {
            return None;
        };
        let index = self.types.class(o.type_id)?.field_index(name)?;
        o.fields.get(index)
    }

    /// The value of field `name` of `event`.
    pub fn event_field<'e>(&self, event: &'e Event, name: &str) -> Option<&'e Value> {
        let index = self.types.class(event.type_id)?.field_index(name)?;
        event.values.get(index)
    }

    /// Iterates the records from chunk offset `from` (use [`HEADER_SIZE`] for the start) to the
    /// published end: events and flush boundaries. Records of unknown types are skipped by size.
    pub fn items(&self, from: u64) -> Items<'_> {
        Items { chunk: self, pos: from.max(HEADER_SIZE as u64) as usize, failed: false }
    }

    /// Iterates the events of the chunk.
    pub fn events(&self) -> impl Iterator<Item = Result<Event>> + '_ {
        self.items(HEADER_SIZE as u64).filter_map(|item| match item {
            Ok(Item::Event(e)) => Some(Ok(e)),
            Ok(Item::Flush) => None,
            Err(e) => Some(Err(e)),
        })
    }

    /// Iterates every record's raw bytes.
    pub fn records(&self) -> RawRecords<'_> {
        self.records_from(HEADER_SIZE as u64)
    }

    /// Iterates the records' raw bytes from the record at chunk offset `from` (a record boundary)
    /// to the published end.
    pub fn records_from(&self, from: u64) -> RawRecords<'_> {
        let pos = usize::try_from(from).unwrap_or(usize::MAX).max(HEADER_SIZE);
        RawRecords { chunk: self, pos, failed: false }
    }

    /// Ticks to ns since the epoch with this chunk's clock.
    pub fn ticks_to_epoch_nanos(&self, ticks: i64) -> i64 {
        self.header.ticks_to_epoch_nanos(ticks)
    }

    fn record_at(&self, pos: usize) -> Result<(usize, u64, Cursor<'_>)> {
        let mut cur = Cursor::new(&self.data, pos, self.data.len(), self.base);
        let at = cur.offset();
        let size = cur.varint("a record size")?;
        let end = check_record_size(&cur, pos, size, at)?;
        let mut body = Cursor::new(&self.data, cur.pos, end, self.base);
        let type_id = body.varint("a record type id")?;
        Ok((end, type_id, body))
    }
}

fn unwrap_simple(types: &TypeTable, value: Value) -> Value {
    match value {
        Value::Object(o) if o.fields.len() == 1 && types.class(o.type_id).is_some_and(|c| c.simple_type) => {
            o.fields.into_iter().next().unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// Iterator over a chunk's events and flush boundaries; see [`Chunk::items`].
#[derive(Debug)]
pub struct Items<'c> {
    chunk: &'c Chunk,
    pos: usize,
    failed: bool,
}

impl Items<'_> {
    /// Chunk-relative offset of the next record: where to resume after a refresh.
    pub fn position(&self) -> u64 {
        self.pos as u64
    }
}

impl Iterator for Items<'_> {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        while !self.failed && self.pos < self.chunk.data.len() {
            let start = self.pos;
            let (end, type_id, mut body) = match self.chunk.record_at(start) {
                Ok(r) => r,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            };
            self.pos = end;
            match type_id {
                0 => continue,
                1 => {
                    let flush = (|| -> Result<bool> {
                        body.varint("the checkpoint start time")?;
                        body.varint("the checkpoint duration")?;
                        body.varint("the checkpoint delta")?;
                        Ok(body.u8("the checkpoint type mask")? & crate::write::CHECKPOINT_FLUSH != 0)
                    })();
                    match flush {
                        Ok(true) => return Some(Ok(Item::Flush)),
                        Ok(false) => continue,
                        Err(e) => {
                            self.failed = true;
                            return Some(Err(e));
                        }
                    }
                }
                _ => {
                    let types = &self.chunk.types;
                    let Some(index) = types.class_index(type_id) else {
                        continue;
                    };
                    let mut values = Vec::with_capacity(types.plan(index).len());
                    for &plan in types.plan(index) {
                        match types.read_value(&mut body, plan, 1) {
                            Ok(v) => values.push(v),
                            Err(e) => {
                                self.failed = true;
                                return Some(Err(e));
                            }
                        }
                    }
                    return Some(Ok(Item::Event(Event {
                        type_id,
                        offset: self.chunk.base.wrapping_add(start as u64),
                        size: (end - start) as u64,
                        values,
                    })));
                }
            }
        }
        None
    }
}

/// Iterator over raw records; see [`Chunk::records`].
#[derive(Debug)]
pub struct RawRecords<'c> {
    chunk: &'c Chunk,
    pos: usize,
    failed: bool,
}

impl Iterator for RawRecords<'_> {
    type Item = Result<RawRecord>;

    fn next(&mut self) -> Option<Result<RawRecord>> {
        if self.failed || self.pos >= self.chunk.data.len() {
            return None;
        }
        match self.chunk.record_at(self.pos) {
            Ok((end, type_id, _)) => {
                let record =
                    RawRecord { offset: self.pos as u64, type_id, bytes: self.chunk.data.slice(self.pos..end) };
                self.pos = end;
                Some(Ok(record))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Iterates the chunks of a file (chunks back to back). After an error it stops; bytes after the
/// last chunk that are not a chunk are an error, as in the JDK.
///
/// An unfinished chunk (header state != 0) is the last chunk of its file: a writer only ever
/// appends to its live chunk, so the bytes after its published size are data it had not yet
/// published (a live writer, or one killed in the middle of a flush), not a next chunk. The
/// iteration ends after it.
pub fn chunks(data: Bytes) -> Chunks {
    Chunks { data, pos: 0, failed: false, previous: None }
}

/// Iterator over a file's chunks; see [`chunks`].
#[derive(Debug)]
pub struct Chunks {
    data: Bytes,
    pos: usize,
    failed: bool,
    previous: Option<Arc<TypeTable>>,
}

impl Iterator for Chunks {
    type Item = Result<Chunk>;

    fn next(&mut self) -> Option<Result<Chunk>> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let rest = self.data.slice(self.pos..);
        match Chunk::parse_with(rest, self.pos as u64, self.previous.as_ref()) {
            Ok(chunk) => {
                self.pos += chunk.size() as usize;
                if !chunk.header().is_finished() {
                    // Unpublished bytes of a live (or killed) writer follow, never a chunk.
                    self.pos = self.data.len();
                }
                self.previous = Some(Arc::clone(chunk.types()));
                Some(Ok(chunk))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{event_class, ids, jdk_types, EventTypeSpec};
    use crate::write::ChunkEncoder;

    /// A live chunk with one published flush (events 0 and 1) followed by the bytes of a flush
    /// written but never published (events 2 and 3), as a writer killed mid-flush leaves it.
    fn killed_mid_flush() -> (Vec<u8>, usize) {
        let mut classes = jdk_types();
        classes.push(event_class(EventTypeSpec {
            id: ids::FIRST_EVENT,
            name: "test.N",
            label: "N",
            description: None,
            category: &[],
            duration: false,
            thread: false,
            stack_trace: false,
            fields: vec![Field::new("n", ids::LONG)],
        }));
        let metadata = Metadata { id: 1, classes, ..Metadata::default() };
        let event = |w: &mut ChunkEncoder, n: u64| {
            w.write_event(ids::FIRST_EVENT, |o| {
                crate::varint::write_u64(o, 10); // startTime
                crate::varint::write_u64(o, n);
            })
        };
        let mut w = ChunkEncoder::new(1_700_000_000_000_000_000, 0);
        w.write_metadata(&metadata, 0);
        event(&mut w, 0);
        event(&mut w, 1);
        let header = w.publish(5).unwrap();
        let (_, mut bytes) = w.take_pending();
        bytes[..68].copy_from_slice(&header.encode());
        let published = bytes.len();
        event(&mut w, 2);
        event(&mut w, 3);
        bytes.extend_from_slice(&w.take_pending().1);
        (bytes, published)
    }

    fn numbers(data: Vec<u8>) -> Result<Vec<i64>> {
        let mut out = Vec::new();
        for chunk in chunks(Bytes::from(data)) {
            for event in chunk?.events() {
                out.push(event?.values[1].as_i64().unwrap());
            }
        }
        Ok(out)
    }

    #[test]
    fn unpublished_bytes_after_an_unfinished_chunk_are_not_read() {
        let (bytes, published) = killed_mid_flush();
        assert!(bytes.len() > published);
        // Without the rule the iterator would parse the unpublished event as a chunk header.
        assert_eq!(numbers(bytes.clone()).unwrap(), vec![0, 1]);
        // Even with the final flag, only the state byte decides.
        let mut flagged = bytes.clone();
        flagged[67] |= crate::header::FLAG_FINAL_CHUNK as u8;
        assert_eq!(numbers(flagged).unwrap(), vec![0, 1]);
        // A finished chunk followed by the same bytes: they must be a chunk, so it is an error.
        let mut finished = bytes;
        finished[64] = crate::header::STATE_FINISHED;
        assert!(numbers(finished).is_err());
    }
}
