//! Writer → reader round trips: every field kind, every string encoding, varints in every legal
//! width, headers and metadata, as unit cases and as proptest properties.

use bytes::Bytes;
use jfr_format::header::ChunkHeader;
use jfr_format::metadata::{event_class, ids, jdk_types, Class, EventTypeSpec, Field, Metadata, Region};
use jfr_format::write::{
    put_field, put_int, put_long, put_short, put_string_as, put_varint, ChunkEncoder, StringEncoding,
};
use jfr_format::{chunks, varint, Chunk, Object, Text, Value};
use proptest::prelude::*;

const EVENT: u64 = 100;
const PAIR: u64 = 300;

const ENCODINGS: [StringEncoding; 3] = [StringEncoding::Utf8, StringEncoding::CharArray, StringEncoding::Latin1];

fn metadata(fields: Vec<Field>) -> Metadata {
    let mut classes = jdk_types();
    let mut pair = Class::new(PAIR, "test.Pair");
    pair.fields = vec![Field::new("n", ids::INT), Field::new("s", ids::STRING)];
    classes.push(pair);
    classes.push(event_class(EventTypeSpec {
        id: EVENT,
        name: "test.E",
        label: "E",
        description: None,
        category: &[],
        duration: false,
        thread: false,
        stack_trace: false,
        fields,
    }));
    Metadata { id: 1, classes, region: Region::default() }
}

/// One chunk with one event per element of `events`, each written field by field.
fn chunk_with(md: &Metadata, events: &[Vec<Value>], encoding: StringEncoding) -> Bytes {
    let mut w = ChunkEncoder::new(0, 0);
    w.write_metadata(md, 0);
    let class = md.class(EVENT).unwrap();
    for values in events {
        w.write_event(EVENT, |out| {
            for (f, v) in class.fields.iter().zip(values) {
                put_field(out, md, f, v, encoding).expect("value fits");
            }
        });
    }
    Bytes::from(w.into_bytes(1, true))
}

fn read_events(data: Bytes) -> Vec<Vec<Value>> {
    let chunk = Chunk::parse(data, 0).expect("chunk parses");
    chunk.events().map(|e| e.expect("event decodes").values).collect()
}

/// Equality that treats floats by their bits (NaN round trips too).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.type_id == y.type_id
                && x.fields.len() == y.fields.len()
                && x.fields.iter().zip(&y.fields).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

fn all_kind_fields() -> Vec<Field> {
    vec![
        Field::new("b", ids::BYTE),
        Field::new("sh", ids::SHORT),
        Field::new("i", ids::INT),
        Field::new("l", ids::LONG),
        Field::new("f", ids::FLOAT),
        Field::new("d", ids::DOUBLE),
        Field::new("z", ids::BOOLEAN),
        Field::new("c", ids::CHAR),
        Field::new("s", ids::STRING),
        Field::new("ref", ids::THREAD).pooled(),
        Field::new("sref", ids::STRING),
        Field::new("ints", ids::INT).array(),
        Field::new("pairs", PAIR).array(),
        Field::new("pair", PAIR),
    ]
}

fn text(s: &str) -> Value {
    Value::String(Text::from(s))
}

prop_compose! {
    fn any_pair(latin1: bool)(n in any::<i32>(), s in string(latin1)) -> Value {
        Value::Object(Object { type_id: PAIR, fields: vec![Value::Int(n), s] })
    }
}

/// A string value: null, empty, or any text (Latin-1 only when `latin1`).
fn string(latin1: bool) -> BoxedStrategy<Value> {
    let text_strategy = if latin1 { "[\\x00-\\xff]{0,40}".boxed() } else { any::<String>().boxed() };
    prop_oneof![Just(Value::Null), text_strategy.prop_map(|s| text(&s))].boxed()
}

prop_compose! {
    fn any_event(latin1: bool)(
        start in any::<i64>(),
        b in any::<i8>(), sh in any::<i16>(), i in any::<i32>(), l in any::<i64>(),
        f in any::<f32>(), d in any::<f64>(), z in any::<bool>(), c in any::<u16>(),
        s in string(latin1), key in any::<u64>(), skey in any::<u64>(),
        ints in proptest::collection::vec(any::<i32>(), 0..8),
        pairs in proptest::collection::vec(any_pair(latin1), 0..4),
        pair in any_pair(latin1),
    ) -> Vec<Value> {
        vec![
            Value::Long(start), Value::Byte(b), Value::Short(sh), Value::Int(i), Value::Long(l),
            Value::Float(f), Value::Double(d), Value::Boolean(z), Value::Char(c), s,
            Value::Ref { type_id: ids::THREAD, key },
            Value::Ref { type_id: ids::STRING, key: skey },
            Value::Array(ints.into_iter().map(Value::Int).collect()),
            Value::Array(pairs), pair,
        ]
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn varint_round_trips_every_u64(v in any::<u64>()) {
        let mut out = Vec::new();
        varint::write_u64(&mut out, v);
        prop_assert_eq!(out.len(), varint::encoded_len(v));
        prop_assert_eq!(varint::read_u64(&out), Some((v, out.len())));
        // Any prefix is "data ends inside", never a wrong value.
        for cut in 0..out.len() {
            prop_assert_eq!(varint::read_u64(&out[..cut]), None);
        }
    }

    #[test]
    fn varint_padded_forms_read_back(v in any::<u64>(), width in 1usize..=8) {
        let v = if width == 8 { v >> 8 } else { v & ((1u64 << (7 * width)) - 1) };
        let mut out = Vec::new();
        varint::write_padded(&mut out, v, width);
        prop_assert_eq!(out.len(), width);
        prop_assert_eq!(varint::read_u64(&out), Some((v, width)));
    }

    #[test]
    fn varint_never_reads_more_than_nine_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
        if let Some((v, n)) = varint::read_u64(&bytes) {
            prop_assert!(n <= 9 && n <= bytes.len());
            // A canonical (shortest) encoding re-encodes to the same bytes.
            let mut out = Vec::new();
            varint::write_u64(&mut out, v);
            if out.len() == n {
                prop_assert_eq!(&out[..], &bytes[..n]);
            }
        }
    }

    #[test]
    fn signed_integers_in_every_accepted_width(v in any::<i64>()) {
        // long as two's complement, int/short zero-extended (HotSpot) and sign-extended (9 bytes).
        let md = metadata(vec![Field::new("l", ids::LONG), Field::new("i", ids::INT), Field::new("i9", ids::INT), Field::new("s", ids::SHORT), Field::new("s9", ids::SHORT)]);
        let mut w = ChunkEncoder::new(0, 0);
        w.write_metadata(&md, 0);
        w.write_event(EVENT, |o| {
            put_long(o, 1);
            put_long(o, v);
            put_int(o, v as i32);
            put_varint(o, i64::from(v as i32) as u64);
            put_short(o, v as i16);
            put_varint(o, i64::from(v as i16) as u64);
        });
        let events = read_events(Bytes::from(w.into_bytes(1, true)));
        prop_assert_eq!(&events[0][1..], &[Value::Long(v), Value::Int(v as i32), Value::Int(v as i32), Value::Short(v as i16), Value::Short(v as i16)][..]);
    }

    #[test]
    fn strings_round_trip_in_every_encoding(s in any::<String>(), latin in "[\\x00-\\xff]{0,64}") {
        let md = metadata(vec![Field::new("a", ids::STRING), Field::new("b", ids::STRING)]);
        for encoding in ENCODINGS {
            // Latin-1 only carries U+0000..U+00FF; other text becomes '?' by design.
            let a = if encoding == StringEncoding::Latin1 { latin.clone() } else { s.clone() };
            let data = chunk_with(&md, &[vec![Value::Long(0), text(&a), text(&latin)]], encoding);
            let got = read_events(data);
            prop_assert_eq!(got[0][1].as_str(), Some(a.as_str()), "{:?}", encoding);
            prop_assert_eq!(got[0][2].as_str(), Some(latin.as_str()), "{:?}", encoding);
        }
        // Non-Latin-1 text written as Latin-1 turns into '?', one per char.
        let mut out = Vec::new();
        put_string_as(&mut out, Some(&s), StringEncoding::Latin1);
        if !s.is_empty() {
            prop_assert_eq!(out[0], 5);
            let (n, used) = varint::read_u64(&out[1..]).unwrap();
            prop_assert_eq!(n as usize, s.chars().count());
            prop_assert_eq!(out.len(), 1 + used + s.chars().count());
        }
    }

    #[test]
    fn every_field_kind_round_trips(events in proptest::collection::vec(any_event(true), 1..4), which in 0usize..3) {
        let md = metadata(all_kind_fields());
        let encoding = ENCODINGS[which];
        let got = read_events(chunk_with(&md, &events, encoding));
        prop_assert_eq!(got.len(), events.len());
        for (g, e) in got.iter().zip(&events) {
            prop_assert!(g.len() == e.len() && g.iter().zip(e).all(|(a, b)| same(a, b)), "{:?}\n!=\n{:?}", g, e);
        }
    }

    #[test]
    fn every_field_kind_round_trips_unicode(events in proptest::collection::vec(any_event(false), 1..4), which in 0usize..2) {
        let md = metadata(all_kind_fields());
        let got = read_events(chunk_with(&md, &events, ENCODINGS[which]));
        for (g, e) in got.iter().zip(&events) {
            prop_assert!(g.iter().zip(e).all(|(a, b)| same(a, b)), "{:?}\n!=\n{:?}", g, e);
        }
    }

    #[test]
    fn headers_round_trip(fields in any::<[i64; 7]>(), state in any::<u8>(), flags in any::<u16>(), minor in any::<u16>(), major in 1u16..=2) {
        let h = ChunkHeader {
            major, minor,
            chunk_size: fields[0], cp_offset: fields[1], metadata_offset: fields[2],
            start_nanos: fields[3], duration_nanos: fields[4], start_ticks: fields[5],
            ticks_per_second: fields[6], state, flags,
        };
        let bytes = h.encode();
        prop_assert_eq!(bytes[65], 0, "pad byte is always 0");
        prop_assert_eq!(ChunkHeader::parse(&bytes, 0), Ok(h));
    }
}

#[test]
fn string_tags_zero_to_five_decode() {
    let md = metadata(vec![Field::new("s", ids::STRING); 1]);
    let mut w = ChunkEncoder::new(0, 0);
    w.write_metadata(&md, 0);
    let payloads: Vec<(Vec<u8>, Value)> = vec![
        (vec![0], Value::Null),
        (vec![1], text("")),
        (vec![2, 7], Value::Ref { type_id: ids::STRING, key: 7 }),
        (vec![3, 2, b'h', b'i'], text("hi")),
        (vec![4, 3, 0x68, 0xe9, 0x01, 0xff, 0xff, 0x03], text("h\u{e9}\u{ffff}")),
        (vec![5, 2, 0x63, 0xe9], text("c\u{e9}")),
        // Unpaired surrogates in a char array become U+FFFD rather than an error.
        (vec![4, 1, 0x80, 0xb0, 0x03], text("\u{fffd}")),
        // Invalid UTF-8 decodes lossily.
        (vec![3, 1, 0xff], text("\u{fffd}")),
    ];
    for (bytes, _) in &payloads {
        w.write_event(EVENT, |o| {
            put_long(o, 0);
            o.extend_from_slice(bytes);
        });
    }
    let got = read_events(Bytes::from(w.into_bytes(1, true)));
    for ((bytes, expected), g) in payloads.iter().zip(&got) {
        assert_eq!(&g[1], expected, "payload {bytes:02x?}");
    }
    // Tag 6 is not a string encoding.
    let mut w = ChunkEncoder::new(0, 0);
    w.write_metadata(&md, 0);
    w.write_event(EVENT, |o| {
        put_long(o, 0);
        o.push(6);
    });
    let chunk = Chunk::parse(Bytes::from(w.into_bytes(1, true)), 0).unwrap();
    let err = chunk.events().next().unwrap().unwrap_err();
    assert!(err.to_string().contains("string encoding"), "{err}");
}

#[test]
fn metadata_round_trips_with_annotations_settings_and_regions() {
    let mut md = metadata(all_kind_fields());
    md.region.attributes.push(("dst".into(), "3600000".into()));
    md.classes.push(Class {
        id: 400,
        name: "test.Weird name ✓".into(),
        super_type: None,
        simple_type: true,
        fields: vec![Field::new("only", ids::STRING)],
        settings: vec![],
        annotations: vec![jfr_format::metadata::Annotation::values(ids::CATEGORY, ["a", "b", "c"])],
    });
    let data = chunk_with(&md, &[], StringEncoding::Utf8);
    let chunk = Chunk::parse(data, 0).unwrap();
    assert_eq!(chunk.metadata(), &md);
}

#[test]
fn metadata_id_changes_exactly_when_the_descriptor_changes() {
    let a = metadata(vec![Field::new("x", ids::INT)]);
    let mut b = a.clone();
    b.id = 9;
    assert!(a.same_descriptor(&b));
    assert_eq!(a.id_after(&b), 9, "unchanged descriptor keeps the id");
    let mut c = a.clone();
    c.classes.last_mut().unwrap().fields.push(Field::new("y", ids::LONG));
    assert_eq!(c.id_after(&b), 10);
    let mut d = a.clone();
    d.region.attributes.clear();
    assert_eq!(d.id_after(&a), a.id + 1);
}

#[test]
fn multi_chunk_files_end_exactly_and_flag_only_the_last() {
    let md = metadata(vec![Field::new("x", ids::INT)]);
    let mut file = Vec::new();
    for i in 0..3 {
        let mut w = ChunkEncoder::new(1000 * i, 1000 * i);
        w.write_metadata(&md, 0);
        w.write_event(EVENT, |o| {
            put_long(o, 1000 * i + 1);
            put_int(o, i as i32);
        });
        file.extend(w.into_bytes(1000, i == 2));
    }
    let parsed: Vec<Chunk> = chunks(Bytes::from(file.clone())).map(Result::unwrap).collect();
    assert_eq!(parsed.len(), 3);
    assert_eq!(parsed.iter().map(|c| c.size()).sum::<u64>(), file.len() as u64);
    for (i, c) in parsed.iter().enumerate() {
        assert_eq!(c.header().flags, if i == 2 { 3 } else { 1 });
        assert_eq!(c.header().state, 0);
        assert_eq!(c.header().duration_nanos, 1000);
        assert_eq!(c.events().count(), 1);
    }
    // Trailing bytes after the last chunk are an error, as in the JDK.
    file.extend_from_slice(b"junk");
    let results: Vec<_> = chunks(Bytes::from(file)).collect();
    assert_eq!(results.len(), 4);
    assert!(results[3].is_err());
}

#[test]
fn large_records_get_wider_size_fields() {
    for len in [0usize, 100, 124, 125, 126, 200, 20_000] {
        let md = metadata(vec![Field::new("s", ids::STRING)]);
        let s = "x".repeat(len);
        let data = chunk_with(&md, &[vec![Value::Long(0), text(&s)]], StringEncoding::Utf8);
        let chunk = Chunk::parse(data, 0).unwrap();
        let event = chunk.events().next().unwrap().unwrap();
        assert_eq!(event.values[1], text(&s), "len {len}");
        let record = chunk.records().nth(1).unwrap().unwrap();
        let (size, width) = varint::read_u64(&record.bytes).unwrap();
        assert_eq!(size as usize, record.bytes.len());
        assert_eq!(width, if size < 128 { 1 } else { 4 }, "len {len}");
    }
    // Past 2^28 bytes the size widens to 8 bytes.
    let mut out = Vec::new();
    let start = jfr_format::write::begin_record(&mut out, 100);
    out.resize(out.len() + (1 << 28), 0);
    jfr_format::write::end_record(&mut out, start);
    let (size, width) = varint::read_u64(&out).unwrap();
    assert_eq!((size as usize, width), (out.len(), 8));
}

#[test]
fn leading_fields_are_the_decoded_fields() {
    // startTime comes first by itself; a long stands where a duration event has its duration.
    let md = metadata(vec![Field::new("length", ids::LONG), Field::new("f", ids::FLOAT), Field::new("key", ids::LONG)]);
    let events: Vec<Vec<Value>> = [(5, 0, 3), (1 << 40, 300, 1 << 20), (i64::MAX, 1, 0)]
        .iter()
        .map(|&(start, duration, key)| {
            vec![Value::Long(start), Value::Long(duration), Value::Float(1.5), Value::Long(key)]
        })
        .collect();
    let chunk = Chunk::parse(chunk_with(&md, &events, StringEncoding::Utf8), 0).unwrap();
    let records: Vec<_> = chunk.records().map(Result::unwrap).filter(|r| r.type_id == EVENT).collect();
    assert_eq!(records.len(), events.len());
    for (record, values) in records.iter().zip(&events) {
        let mut fields = record.leading_fields();
        let [size, type_id, start, duration] = fields.varints().unwrap();
        assert_eq!((size as usize, type_id), (record.bytes.len(), EVENT));
        assert_eq!([Value::Long(start as i64), Value::Long(duration as i64)], values[..2]);
        fields.skip(4).unwrap();
        assert_eq!(Value::Long(fields.varint().unwrap() as i64), values[3]);
        assert_eq!((fields.position(), fields.rest()), (record.bytes.len(), &[][..]));
        // Past the end: None, never a read beyond the bytes.
        assert_eq!(fields.varint(), None);
        assert_eq!(fields.skip(1), None);
        let mut fields = record.leading_fields();
        fields.varints::<4>().unwrap();
        let cut = &record.bytes[..fields.position() + 3];
        let mut fields = jfr_format::LeadingFields::new(cut);
        fields.varints::<4>().unwrap();
        assert_eq!(fields.skip(4), None, "the float is cut short");
    }
}
