//! The fixture recording: three chunks written by our writer with event types covering every field
//! kind, plus the model of what was written (events as `Value`s, pools as `Value`s) so tests can
//! compare what a reader reports against it.

use bytes::Bytes;
use jfr_format::metadata::{event_class, ids, jdk_types, Annotation, Class, EventTypeSpec, Field, Metadata, Region};
use jfr_format::write::{put_field, Checkpoint, ChunkEncoder, StringEncoding};
use jfr_format::{Object, Text, Value};
use std::collections::BTreeMap;

pub const POINT: u64 = 300;
pub const OUTER: u64 = 301;
pub const ALL_KINDS: u64 = 100;
pub const SAMPLE: u64 = 101;
pub const LATER: u64 = 102;

/// Start of chunk 0 (ns since the epoch) and the tick clock (1 tick = 1 ns).
pub const START_NANOS: i64 = 1_790_000_000_000_000_000;
pub const START_TICKS: i64 = 5_000_000;
pub const CHUNK_NANOS: i64 = 1_000_000_000;

/// One event as written.
#[derive(Debug, Clone)]
pub struct Written {
    pub chunk: usize,
    pub type_id: u64,
    pub values: Vec<Value>,
}

/// The fixture: file bytes, the descriptors of each chunk, every event, every constant.
pub struct Fixture {
    pub bytes: Vec<u8>,
    pub chunk_sizes: Vec<usize>,
    pub metadata: Vec<Metadata>,
    pub events: Vec<Written>,
    /// (type id, key) → value as written (simple types as their single field's value).
    pub pools: BTreeMap<(u64, u64), Value>,
}

pub fn s(text: &str) -> Value {
    Value::String(Text::from(text))
}
pub fn r(type_id: u64, key: u64) -> Value {
    Value::Ref { type_id, key }
}
pub fn obj(type_id: u64, fields: Vec<Value>) -> Value {
    Value::Object(Object { type_id, fields })
}

fn string_encoding(field: &str) -> StringEncoding {
    match field {
        "chars" => StringEncoding::CharArray,
        "latin1" => StringEncoding::Latin1,
        _ => StringEncoding::Utf8,
    }
}

/// The descriptor of chunks 0 and 1 (`later = false`, id 1) or chunk 2 (`later = true`, id 2: one
/// more event type).
pub fn metadata(later: bool) -> Metadata {
    let mut classes = jdk_types();
    let mut point = Class::new(POINT, "test.Point");
    point.fields = vec![Field::new("x", ids::INT), Field::new("y", ids::INT), Field::new("label", ids::STRING)];
    point.annotations.push(Annotation::value(ids::LABEL, "Point"));
    classes.push(point);
    let mut outer = Class::new(OUTER, "test.Outer");
    outer.fields =
        vec![Field::new("inner", POINT), Field::new("weight", ids::DOUBLE), Field::new("tags", ids::STRING).array()];
    classes.push(outer);
    classes.push(event_class(EventTypeSpec {
        id: ALL_KINDS,
        name: "test.AllKinds",
        label: "All Kinds",
        description: Some("Every field kind the format has"),
        category: &["Test", "Format"],
        duration: true,
        thread: true,
        stack_trace: true,
        fields: vec![
            Field::new("seq", ids::LONG),
            Field::new("b", ids::BYTE),
            Field::new("sh", ids::SHORT),
            Field::new("i", ids::INT),
            Field::new("l", ids::LONG),
            Field::new("f", ids::FLOAT),
            Field::new("d", ids::DOUBLE),
            Field::new("z", ids::BOOLEAN),
            Field::new("c", ids::CHAR),
            Field::new("utf8", ids::STRING),
            Field::new("chars", ids::STRING),
            Field::new("latin1", ids::STRING),
            Field::new("pooledText", ids::STRING),
            Field::new("nul", ids::STRING),
            Field::new("empty", ids::STRING),
            Field::new("cls", ids::CLASS).pooled(),
            Field::new("span", ids::LONG).with(Annotation::value(ids::TIMESPAN, "NANOSECONDS")),
            Field::new("amount", ids::LONG)
                .with(Annotation::value(ids::DATA_AMOUNT, "BYTES"))
                .with(Annotation::value(ids::LABEL, "Amount")),
            Field::new("ints", ids::INT).array(),
            Field::new("points", POINT).array(),
            Field::new("outer", OUTER),
            Field::new("names", ids::STRING).array(),
        ],
    }));
    classes.push(event_class(EventTypeSpec {
        id: SAMPLE,
        name: "test.Sample",
        label: "Sample",
        description: None,
        category: &["Test"],
        duration: false,
        thread: false,
        stack_trace: false,
        fields: vec![
            Field::new("sampledThread", ids::THREAD).pooled(),
            Field::new("stackTrace", ids::STACK_TRACE).pooled(),
            Field::new("state", ids::THREAD_STATE).pooled(),
        ],
    }));
    if later {
        classes.push(event_class(EventTypeSpec {
            id: LATER,
            name: "test.Later",
            label: "Later",
            description: None,
            category: &[],
            duration: false,
            thread: true,
            stack_trace: false,
            fields: vec![Field::new("msg", ids::STRING)],
        }));
    }
    let mut md = Metadata { id: 1, classes, region: Region::default() };
    if later {
        md.id = md.id_after(&metadata(false));
    }
    md
}

/// Pools shared by every chunk (keys are immutable across the recording: docs/jfr-format.md, "Constant pools").
pub fn pools() -> BTreeMap<(u64, u64), Value> {
    let mut p = BTreeMap::new();
    let sym = |p: &mut BTreeMap<_, _>, key: u64, text: &str| {
        p.insert((ids::SYMBOL, key), s(text));
    };
    // Packages, classes, methods.
    sym(&mut p, 1001, "com/example");
    sym(&mut p, 1002, "com/example/Worker");
    sym(&mut p, 1003, "libc.so.6");
    sym(&mut p, 1004, "()V");
    sym(&mut p, 1005, "(IJ)Ljava/lang/String;");
    sym(&mut p, 1006, "com/example/Ünïcode$Inner");
    for m in 0..8u64 {
        sym(&mut p, 1100 + m, &format!("method{m}_λ"));
    }
    p.insert(
        (ids::PACKAGE, 400),
        obj(ids::PACKAGE, vec![r(ids::SYMBOL, 1001), r(ids::MODULE, 0), Value::Boolean(true)]),
    );
    for (key, name, package) in [(500, 1002, 400), (501, 1003, 0), (502, 1006, 400)] {
        p.insert(
            (ids::CLASS, key),
            obj(
                ids::CLASS,
                vec![
                    r(ids::CLASS_LOADER, 0),
                    r(ids::SYMBOL, name),
                    r(ids::PACKAGE, package),
                    Value::Int(1),
                    Value::Boolean(false),
                ],
            ),
        );
    }
    for m in 0..8u64 {
        let class = [500, 501, 502][(m % 3) as usize];
        p.insert(
            (ids::METHOD, 600 + m),
            obj(
                ids::METHOD,
                vec![
                    r(ids::CLASS, class),
                    r(ids::SYMBOL, 1100 + m),
                    r(ids::SYMBOL, if m % 2 == 0 { 1004 } else { 1005 }),
                    Value::Int(if class == 501 { 0x100 } else { 9 }),
                    Value::Boolean(false),
                ],
            ),
        );
    }
    for (key, text) in jfr_format::metadata::FRAME_TYPES {
        p.insert((ids::FRAME_TYPE, key), s(text));
    }
    for (key, text) in jfr_format::metadata::THREAD_STATES {
        p.insert((ids::THREAD_STATE, key), s(text));
    }
    // Stack traces: 70 frames, truncated; and a short one.
    let frame = |m: u64, line: i32, bci: i32, kind: u64| {
        obj(
            ids::STACK_FRAME,
            vec![r(ids::METHOD, 600 + m), Value::Int(line), Value::Int(bci), r(ids::FRAME_TYPE, kind)],
        )
    };
    let long: Vec<Value> = (0..70u64)
        .map(|i| {
            let kind = i % 4;
            let line = if kind == 3 { -1 } else { 10 + 7 * i as i32 };
            frame(i % 8, line, (i * 3) as i32, kind)
        })
        .collect();
    p.insert((ids::STACK_TRACE, 1), obj(ids::STACK_TRACE, vec![Value::Boolean(true), Value::Array(long)]));
    p.insert(
        (ids::STACK_TRACE, 2),
        obj(
            ids::STACK_TRACE,
            vec![
                Value::Boolean(false),
                Value::Array(vec![frame(1, 42, 0, 1), frame(2, 0, 0, 3), frame(3, 1234567, 65535, 2)]),
            ],
        ),
    );
    // Threads: a Java thread, a native one (javaName null, javaThreadId 0), a non-ASCII one.
    for (key, os, tid, java, jtid) in [
        (1u64, "main", 4242i64, Some("main"), 1i64),
        (2, "native-io", 4243, None, 0),
        (3, "wörker-ß", 4244, Some("wörker-ß ☃"), 17),
    ] {
        p.insert(
            (ids::THREAD, key),
            obj(
                ids::THREAD,
                vec![
                    s(os),
                    Value::Long(tid),
                    java.map(s).unwrap_or(Value::Null),
                    Value::Long(jtid),
                    r(ids::THREAD_GROUP, 0),
                ],
            ),
        );
    }
    // The String pool (tag 2 references).
    p.insert((ids::STRING, 7), s("pooled ✓ string"));
    p.insert((ids::STRING, 8), s("another pooled"));
    p
}

/// Simple types are written as their single field.
fn is_simple(type_id: u64) -> bool {
    matches!(type_id, ids::SYMBOL | ids::FRAME_TYPE | ids::THREAD_STATE | ids::STRING)
}

fn all_kinds(chunk: usize, n: usize, seq: i64) -> Vec<Value> {
    let start = START_TICKS + chunk as i64 * CHUNK_NANOS + 1000 * (n as i64 + 1);
    let extreme = n % 2 == 1;
    let point = |x: i32, y: i32, label: &str| obj(POINT, vec![Value::Int(x), Value::Int(y), s(label)]);
    vec![
        Value::Long(start),
        Value::Long(if extreme { 0 } else { 123_456 }),
        r(ids::THREAD, 1 + (n as u64 % 3)),
        r(ids::STACK_TRACE, 1 + (n as u64 % 2)),
        Value::Long(seq),
        Value::Byte(if extreme { i8::MIN } else { 7 }),
        Value::Short(if extreme { i16::MIN } else { -300 }),
        Value::Int(if extreme { i32::MIN } else { -5 }),
        Value::Long(if extreme { i64::MIN } else { i64::MAX }),
        Value::Float(if extreme { -1.5e-30 } else { 0.48 }),
        Value::Double(if extreme { f64::MAX } else { -2.5e-7 }),
        Value::Boolean(!extreme),
        Value::Char(if extreme { 0x00e9 } else { u16::from(b'Q') }),
        s(if extreme { "UTF-8: 日本語 🎉" } else { "plain ascii" }),
        s(if extreme { "chars: Grüße 𝄞" } else { "chars" }),
        s(if extreme { "latin1: café ÿ" } else { "latin1" }),
        r(ids::STRING, 7 + (n as u64 % 2)),
        Value::Null,
        s(""),
        r(ids::CLASS, 500 + (n as u64 % 3)),
        Value::Long(if extreme { 1 } else { 1_500_000_000 }),
        Value::Long(if extreme { 0 } else { 4096 }),
        Value::Array(if extreme { vec![] } else { vec![Value::Int(1), Value::Int(-1), Value::Int(i32::MAX)] }),
        Value::Array(vec![point(1, 2, "p1"), point(-3, 4, "ü"), point(i32::MIN, i32::MAX, "")]),
        obj(OUTER, vec![point(9, -9, "inner ✓"), Value::Double(0.1), Value::Array(vec![s("a"), Value::Null, s("ç")])]),
        Value::Array(vec![s("x"), s("yz")]),
    ]
}

fn sample(chunk: usize, n: usize) -> Vec<Value> {
    let start = START_TICKS + chunk as i64 * CHUNK_NANOS + 500 + 1000 * n as i64;
    vec![
        Value::Long(start),
        r(ids::THREAD, 1 + (n as u64 % 3)),
        if n % 5 == 4 { r(ids::STACK_TRACE, 0) } else { r(ids::STACK_TRACE, 1 + (n as u64 % 2)) },
        r(ids::THREAD_STATE, if n.is_multiple_of(2) { 5 } else { 225 }),
    ]
}

/// Writes the events of `chunk` into `w` and returns them.
pub fn write_events(w: &mut ChunkEncoder, md: &Metadata, chunk: usize, seq: &mut i64) -> Vec<Written> {
    let mut written = Vec::new();
    let mut emit = |w: &mut ChunkEncoder, type_id: u64, values: Vec<Value>| {
        let class = md.class(type_id).expect("declared");
        w.write_event(type_id, |out| {
            for (f, v) in class.fields.iter().zip(&values) {
                put_field(out, md, f, v, string_encoding(&f.name)).expect("value fits its field");
            }
        });
        written.push(Written { chunk, type_id, values });
    };
    for n in 0..4 {
        *seq += 1;
        emit(w, ALL_KINDS, all_kinds(chunk, n, *seq));
    }
    for n in 0..6 {
        emit(w, SAMPLE, sample(chunk, n));
    }
    if md.class(LATER).is_some() {
        let start = START_TICKS + chunk as i64 * CHUNK_NANOS + 99_000;
        emit(w, LATER, vec![Value::Long(start), r(ids::THREAD, 3), s("added in chunk 3")]);
    }
    written
}

/// All constants, as one checkpoint.
pub fn checkpoint(pools: &BTreeMap<(u64, u64), Value>) -> Checkpoint {
    let mut cp = Checkpoint::new();
    for (&(type_id, key), value) in pools {
        if type_id == ids::STRING {
            cp.add(type_id, key, |out| jfr_format::write::put_string(out, value.as_str()));
        } else {
            cp.add_value(type_id, key, value);
        }
    }
    cp
}

/// The whole fixture: 3 chunks, final flag on the last one.
pub fn fixture() -> Fixture {
    let pools = pools();
    let mut bytes = Vec::new();
    let mut chunk_sizes = Vec::new();
    let mut metas = Vec::new();
    let mut events = Vec::new();
    let mut seq = 0;
    for chunk in 0..3 {
        let md = metadata(chunk == 2);
        let start = START_NANOS + chunk as i64 * CHUNK_NANOS;
        let mut w = ChunkEncoder::new(start, START_TICKS + chunk as i64 * CHUNK_NANOS);
        w.write_metadata(&md, START_TICKS);
        events.extend(write_events(&mut w, &md, chunk, &mut seq));
        // Constants split over two checkpoints (the second also ends the segment).
        let cp = checkpoint(&pools);
        let mut first = Checkpoint::new();
        let mut second = Checkpoint::new();
        for (i, (&(type_id, key), value)) in pools.iter().enumerate() {
            let target = if i % 2 == 0 { &mut first } else { &mut second };
            if type_id == ids::STRING {
                target.add(type_id, key, |out| jfr_format::write::put_string(out, value.as_str()));
            } else {
                target.add_value(type_id, key, value);
            }
        }
        assert_eq!(cp.len(), first.len() + second.len());
        w.write_checkpoint(&first, START_TICKS, false);
        w.write_checkpoint(&second, START_TICKS, true);
        let chunk_bytes = w.into_bytes(CHUNK_NANOS, chunk == 2);
        chunk_sizes.push(chunk_bytes.len());
        bytes.extend(chunk_bytes);
        metas.push(md);
    }
    Fixture { bytes, chunk_sizes, metadata: metas, events, pools }
}

impl Fixture {
    pub fn data(&self) -> Bytes {
        Bytes::from(self.bytes.clone())
    }
    /// Whether `(type_id)` is written as a single field.
    pub fn is_simple(type_id: u64) -> bool {
        is_simple(type_id)
    }
}
