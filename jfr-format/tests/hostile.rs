//! Hostile input: truncation at every offset, thousands of seeded random mutations, and hand-made
//! malformed metadata, checkpoints and headers. The reader must return errors — never panic, hang
//! or allocate more than a small multiple of the input (checked by a counting allocator that
//! tracks each thread's peak).
mod common;

use bytes::Bytes;
use jfr_format::header::{ChunkHeader, HEADER_SIZE};
use jfr_format::metadata::ids;
use jfr_format::write::{begin_record, end_record, put_long, put_string, put_varint};
use jfr_format::{chunks, Chunk, Error, Item, Refresh};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

struct Counting;

thread_local! {
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    let _ = CURRENT.try_with(|c| {
        let now = c.get() + delta;
        c.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only const thread-locals.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns the peak number of bytes it had allocated at once (on this thread).
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    (r, (PEAK.with(Cell::get) - base).max(0) as usize)
}

fn allocation_limit(input: usize) -> usize {
    64 * input + (1 << 20)
}

/// Everything a consumer does with a file: parse every chunk, iterate every record and event,
/// resolve threads, stack traces and every value three levels deep. Returns the first error.
fn visit(data: Bytes) -> Result<usize, Error> {
    visit_with(data, true)
}

/// [`visit`]; `deep = false` skips the resolution of references.
fn visit_with(data: Bytes, deep: bool) -> Result<usize, Error> {
    let mut events = 0;
    for chunk in chunks(data) {
        let chunk = chunk?;
        let _ = chunk.pool_sizes().count();
        for r in chunk.records() {
            r?;
        }
        for item in chunk.items(0) {
            if let Item::Event(e) = item? {
                events += 1;
                if !deep {
                    continue;
                }
                chunk.event_thread(&e)?;
                chunk.event_stack_trace(&e)?;
                for v in &e.values {
                    chunk.resolve_deep(v, 3)?;
                }
            }
        }
    }
    Ok(events)
}

/// `visit` under the allocation and time limits; returns its result.
fn checked_visit(data: &[u8], what: &str) -> Result<usize, Error> {
    checked_visit_with(data, what, true)
}

fn checked_visit_with(data: &[u8], what: &str, deep: bool) -> Result<usize, Error> {
    let started = Instant::now();
    let (result, peak) = peak_of(|| visit_with(Bytes::copy_from_slice(data), deep));
    assert!(peak <= allocation_limit(data.len()), "{what}: peak allocation {peak} for {} input bytes", data.len());
    assert!(started.elapsed() < Duration::from_secs(2), "{what}: took {:?}", started.elapsed());
    if let Err(e) = &result {
        let text = e.to_string();
        assert!(text.starts_with("at offset 0x"), "{what}: error without offset: {text}");
        assert!(e.offset() <= data.len() as u64 + 68, "{what}: offset {} beyond input", e.offset());
    }
    result
}

#[test]
fn truncation_at_every_offset_is_an_error_or_a_chunk_boundary() {
    let f = common::fixture::fixture();
    let full = &f.bytes;
    assert_eq!(checked_visit(full, "full").unwrap(), f.events.len());
    let mut boundaries = vec![0];
    for s in &f.chunk_sizes {
        boundaries.push(boundaries.last().unwrap() + s);
    }
    // The file cut anywhere: whole chunks before the cut parse, the cut chunk is an error.
    for cut in 0..full.len() {
        let result = checked_visit_with(&full[..cut], &format!("cut at {cut}"), false);
        if boundaries.contains(&cut) {
            assert!(result.is_ok(), "cut at chunk boundary {cut}: {result:?}");
        } else {
            assert!(result.is_err(), "cut at {cut} parsed as a whole file");
        }
    }
}

#[test]
fn chunks_published_up_to_every_offset_parse_or_fail_cleanly() {
    // A chunk whose header claims it ends at `cut` (as a live chunk published mid-record would):
    // the metadata and every event field are cut somewhere. Records before the cut decode; the
    // cut record is an error, unless the cut falls on a record boundary.
    let f = common::fixture::fixture();
    let chunk = &f.bytes[..f.chunk_sizes[0]];
    let parsed = Chunk::parse(Bytes::copy_from_slice(chunk), 0).unwrap();
    let ends: Vec<usize> = parsed
        .records()
        .map(|r| {
            let r = r.unwrap();
            r.offset as usize + r.bytes.len()
        })
        .collect();
    let cp = parsed.header().cp_offset as usize;
    for cut in HEADER_SIZE + 1..chunk.len() {
        let mut bytes = chunk[..cut].to_vec();
        bytes[8..16].copy_from_slice(&(cut as i64).to_be_bytes());
        if cp >= cut {
            bytes[16..24].copy_from_slice(&0i64.to_be_bytes());
        }
        bytes[64] = 5;
        let result = checked_visit(&bytes, &format!("published up to {cut}"));
        if ends.contains(&cut) {
            assert!(result.is_ok(), "record boundary {cut}: {result:?}");
        } else {
            assert!(result.is_err(), "cut at {cut} inside a record parsed");
        }
    }
}

/// xorshift64*: a small seeded generator, so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(data.len());
        match rng.below(6) {
            0 => data[at] = rng.next() as u8,
            1 => data[at] ^= 1 << rng.below(8),
            2 => data[at] = 0xff,
            3 => data[at] = 0,
            // A 9-byte varint of a huge value in place of whatever was there.
            4 => {
                let end = (at + 9).min(data.len());
                for b in &mut data[at..end] {
                    *b = 0xff;
                }
            }
            _ => {
                let len = rng.below(16).min(data.len() - at);
                data.drain(at..at + len);
                if data.is_empty() {
                    data.push(0);
                }
            }
        }
    }
}

const MUTATIONS: usize = 5000;

#[test]
fn random_mutations_never_panic_hang_or_balloon() {
    let f = common::fixture::fixture();
    let live = {
        // Also mutate a single chunk (the fixture's first), followed live.
        f.bytes[..f.chunk_sizes[0]].to_vec()
    };
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut errors = 0;
    for i in 0..MUTATIONS {
        let mut data = if i % 2 == 0 { f.bytes.clone() } else { live.clone() };
        mutate(&mut rng, &mut data);
        if checked_visit(&data, &format!("mutation {i}")).is_err() {
            errors += 1;
        }
        // Refresh on growing prefixes of the mutated bytes.
        if i % 10 == 0 {
            let (_, peak) = peak_of(|| {
                let all = Bytes::from(data.clone());
                let mut chunk: Option<Chunk> = None;
                let mut at = 0;
                for len in (HEADER_SIZE..=all.len()).step_by(97).chain([all.len()]) {
                    match &mut chunk {
                        None => chunk = Chunk::parse(all.slice(..len), 0).ok(),
                        Some(c) => {
                            if let Ok(Refresh::Grew) = c.refresh(all.slice(..len)) {
                                let mut items = c.items(at);
                                for item in items.by_ref() {
                                    if item.is_err() {
                                        break;
                                    }
                                }
                                at = items.position();
                            }
                        }
                    }
                }
            });
            assert!(peak <= allocation_limit(data.len()), "refresh of mutation {i}: peak {peak}");
        }
    }
    assert!(errors > MUTATIONS / 10, "only {errors} of {MUTATIONS} mutations were detected as errors");
}

// ---- Hand-made malformed chunks ----------------------------------------------------------------

/// A chunk with a raw metadata record (`strings`, then the raw element bytes) and raw records
/// after it (placed after the metadata; `cp` = chunk offset of the last checkpoint in them, or 0).
fn raw_chunk(strings: &[&str], root: &[u8], records: &[u8], cp_in_records: Option<usize>) -> Vec<u8> {
    let mut body = Vec::new();
    let start = begin_record(&mut body, 0);
    put_long(&mut body, 0);
    put_long(&mut body, 0);
    put_varint(&mut body, 1);
    put_varint(&mut body, strings.len() as u64);
    for s in strings {
        put_string(&mut body, Some(s));
    }
    body.extend_from_slice(root);
    end_record(&mut body, start);
    let meta_len = body.len();
    body.extend_from_slice(records);
    let mut h = ChunkHeader::new(0, 0);
    h.chunk_size = (HEADER_SIZE + body.len()) as i64;
    h.metadata_offset = HEADER_SIZE as i64;
    h.cp_offset = cp_in_records.map_or(0, |o| (HEADER_SIZE + meta_len + o) as i64);
    h.state = 0;
    h.flags = 3;
    let mut out = h.encode().to_vec();
    out.extend(body);
    out
}

/// Element encoder for the raw metadata: (name index, attribute pairs, children).
fn element(out: &mut Vec<u8>, name: u64, attrs: &[(u64, u64)], children: &[Vec<u8>]) {
    put_varint(out, name);
    put_varint(out, attrs.len() as u64);
    for &(k, v) in attrs {
        put_varint(out, k);
        put_varint(out, v);
    }
    put_varint(out, children.len() as u64);
    for c in children {
        out.extend_from_slice(c);
    }
}

fn el(name: u64, attrs: &[(u64, u64)], children: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    element(&mut out, name, attrs, children);
    out
}

// String table used by the malformed metadata below.
const STRINGS: &[&str] = &[
    "root",
    "metadata",
    "class",
    "field",
    "name",
    "id",
    "A",
    "B",
    "100",
    "101",
    "102",
    "a",
    "b",
    "region",
    "long",
    "startTime",
    "superType",
    "jdk.jfr.Event",
    "E",
    "11",
    "dimension",
    "1",
    "Node",
    "kids",
    "java.lang.String",
    "20",
    "999",
    "2",
];
fn s(name: &str) -> u64 {
    STRINGS.iter().position(|&x| x == name).unwrap() as u64
}

fn class(name: &str, id: &str, fields: &[(&str, &str, bool)], event: bool) -> Vec<u8> {
    let mut attrs = vec![(s("name"), s(name)), (s("id"), s(id))];
    if event {
        attrs.push((s("superType"), s("jdk.jfr.Event")));
    }
    let fields: Vec<Vec<u8>> = fields
        .iter()
        .map(|&(n, t, array)| {
            let mut a = vec![(s("name"), s(n)), (s("class"), s(t))];
            if array {
                a.push((s("dimension"), s("1")));
            }
            el(s("field"), &a, &[])
        })
        .collect();
    el(s("class"), &attrs, &fields)
}

fn root(classes: &[Vec<u8>]) -> Vec<u8> {
    el(s("root"), &[], &[el(s("metadata"), &[], classes), el(s("region"), &[], &[])])
}

fn parse_err(bytes: &[u8]) -> Error {
    let started = Instant::now();
    let (result, peak) = peak_of(|| visit(Bytes::copy_from_slice(bytes)));
    assert!(peak <= allocation_limit(bytes.len()), "peak {peak} for {} bytes", bytes.len());
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    result.expect_err("malformed input must be an error")
}

fn long_class() -> Vec<u8> {
    class("long", "11", &[], false)
}

#[test]
fn cycles_of_inline_types_fail_fast() {
    // A { b: B }, B { a: A }: no value of A can ever end.
    let md =
        root(&[class("A", "100", &[("b", "101", false)], false), class("B", "101", &[("a", "100", false)], false)]);
    assert!(matches!(parse_err(&raw_chunk(STRINGS, &md, &[], None)), Error::NestingTooDeep { .. }));
    // A { a: A }.
    let md = root(&[class("A", "100", &[("a", "100", false)], false)]);
    assert!(matches!(parse_err(&raw_chunk(STRINGS, &md, &[], None)), Error::NestingTooDeep { .. }));
}

#[test]
fn deep_values_of_recursive_array_types_fail_at_the_nesting_limit() {
    // Node { kids: Node[] } is legal, but a value nested 10 000 deep must not overflow the stack.
    let md = root(&[
        long_class(),
        class("Node", "101", &[("kids", "101", true)], false),
        class("E", "102", &[("startTime", "11", false), ("a", "101", false)], true),
    ]);
    let mut record = Vec::new();
    let start = begin_record(&mut record, 102);
    put_long(&mut record, 5);
    for _ in 0..10_000 {
        put_varint(&mut record, 1);
    }
    put_varint(&mut record, 0);
    end_record(&mut record, start);
    let err = parse_err(&raw_chunk(STRINGS, &md, &record, None));
    assert!(matches!(err, Error::NestingTooDeep { .. }), "{err}");
}

#[test]
fn absurd_counts_are_refused_before_allocating() {
    let huge = 1u64 << 60;
    // String table count.
    let mut bytes = raw_chunk(&[], &[], &[], None);
    let mut body = Vec::new();
    let start = begin_record(&mut body, 0);
    put_long(&mut body, 0);
    put_long(&mut body, 0);
    put_varint(&mut body, 1);
    put_varint(&mut body, huge);
    body.extend_from_slice(&[0; 32]);
    end_record(&mut body, start);
    bytes.truncate(HEADER_SIZE);
    bytes.extend(&body);
    let len = bytes.len() as i64;
    bytes[8..16].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(parse_err(&bytes), Error::CountTooLarge { count, .. } if count == huge));

    // Attribute and children counts.
    for children in [false, true] {
        let mut md = Vec::new();
        put_varint(&mut md, s("root"));
        if children {
            put_varint(&mut md, 0);
        }
        put_varint(&mut md, huge);
        md.extend_from_slice(&[0; 16]);
        assert!(matches!(parse_err(&raw_chunk(STRINGS, &md, &[], None)), Error::CountTooLarge { .. }));
    }

    // Array length, string lengths (UTF-8, UTF-16, Latin-1) in an event.
    let md = root(&[
        long_class(),
        class("java.lang.String", "20", &[], false),
        class("E", "102", &[("startTime", "11", false), ("a", "11", true)], true),
        class("Node", "101", &[("startTime", "11", false), ("b", "20", false)], true),
    ]);
    for (type_id, payload) in [(102u64, vec![]), (101, vec![3u8]), (101, vec![4]), (101, vec![5])] {
        let mut record = Vec::new();
        let start = begin_record(&mut record, type_id);
        put_long(&mut record, 5);
        record.extend(payload);
        put_varint(&mut record, huge);
        record.extend_from_slice(&[1; 8]);
        end_record(&mut record, start);
        let err = parse_err(&raw_chunk(STRINGS, &md, &record, None));
        assert!(matches!(err, Error::CountTooLarge { .. }), "{err}");
    }

    // Pool count and constant count in a checkpoint.
    for pools in [huge, 1] {
        let mut record = Vec::new();
        let start = begin_record(&mut record, 1);
        put_long(&mut record, 0);
        put_long(&mut record, 0);
        put_long(&mut record, 0);
        record.push(0);
        put_varint(&mut record, pools);
        put_varint(&mut record, 11);
        put_varint(&mut record, huge);
        record.extend_from_slice(&[1; 8]);
        end_record(&mut record, start);
        let err = parse_err(&raw_chunk(STRINGS, &md, &record, Some(0)));
        assert!(matches!(err, Error::CountTooLarge { .. }), "{err}");
    }
}

#[test]
fn deep_element_nesting_fails_fast() {
    let mut md = Vec::new();
    for _ in 0..100_000 {
        put_varint(&mut md, s("root"));
        put_varint(&mut md, 0);
        put_varint(&mut md, 1);
    }
    let err = parse_err(&raw_chunk(STRINGS, &md, &[], None));
    assert!(matches!(err, Error::NestingTooDeep { .. }), "{err}");
}

#[test]
fn metadata_text_amplification_is_refused() {
    // One 20 KB string named by 10 000 two-byte annotation attributes would be 200 MB of copies.
    let big = "x".repeat(20_000);
    let mut strings: Vec<&str> = STRINGS.to_vec();
    strings.push("annotation");
    strings.push(&big);
    let (ann, big_i) = (strings.len() as u64 - 2, strings.len() as u64 - 1);
    let attrs: Vec<(u64, u64)> =
        std::iter::once((s("class"), s("11"))).chain((0..10_000).map(|_| (big_i, big_i))).collect();
    let annotation = el(ann, &attrs, &[]);
    let mut a = vec![(s("name"), s("long")), (s("id"), s("11"))];
    a.truncate(2);
    let md = root(&[el(s("class"), &a, &[annotation])]);
    let err = parse_err(&raw_chunk(&strings, &md, &[], None));
    assert!(err.to_string().contains("proportional"), "{err}");
}

#[test]
fn constant_fan_out_cannot_explode_resolution() {
    // Node { kids: →Node[] } with 2000 references per constant, all to itself: resolving three
    // levels deep would produce 8e9 values.
    let mut strings: Vec<&str> = STRINGS.to_vec();
    strings.push("constantPool");
    strings.push("true");
    let (cp_key, true_v) = (strings.len() as u64 - 2, strings.len() as u64 - 1);
    let md = {
        let node = el(
            s("class"),
            &[(s("name"), s("Node")), (s("id"), s("101"))],
            &[el(
                s("field"),
                &[(s("name"), s("kids")), (s("class"), s("101")), (s("dimension"), s("1")), (cp_key, true_v)],
                &[],
            )],
        );
        root(&[long_class(), node, class("E", "102", &[("startTime", "11", false), ("a", "11", false)], true)])
    };
    let mut cp = Vec::new();
    let start = begin_record(&mut cp, 1);
    put_long(&mut cp, 0);
    put_long(&mut cp, 0);
    put_long(&mut cp, 0);
    cp.push(0);
    put_varint(&mut cp, 1);
    put_varint(&mut cp, 101);
    put_varint(&mut cp, 1);
    put_varint(&mut cp, 1); // key 1
    put_varint(&mut cp, 2000);
    for _ in 0..2000 {
        put_varint(&mut cp, 1);
    }
    end_record(&mut cp, start);
    let bytes = raw_chunk(&strings, &md, &cp, Some(0));
    let chunk = Chunk::parse(Bytes::from(bytes.clone()), 0).expect("legal chunk");
    let started = Instant::now();
    let (result, peak) = peak_of(|| chunk.resolve_deep(&jfr_format::Value::Ref { type_id: 101, key: 1 }, 3));
    assert!(matches!(result, Err(Error::CountTooLarge { .. })), "{result:?}");
    assert!(peak <= allocation_limit(bytes.len()), "peak {peak}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // One level is fine.
    assert!(chunk.resolve_deep(&jfr_format::Value::Ref { type_id: 101, key: 1 }, 1).is_ok());
}

#[test]
fn hostile_headers_are_errors() {
    let f = common::fixture::fixture();
    let chunk0 = &f.bytes[..f.chunk_sizes[0]];
    let cases: Vec<(usize, i64)> = vec![
        (8, -1),
        (8, 0),
        (8, 67),
        (8, i64::MAX),
        (8, i64::MIN),
        (8, 1 << 33),
        (16, -68),
        (16, i64::MAX),
        (16, 3),
        (24, -1),
        (24, 0),
        (24, 69),
        (24, i64::MAX),
        (56, 0),
        (56, -1),
    ];
    for (offset, value) in cases {
        let mut bytes = chunk0.to_vec();
        bytes[offset..offset + 8].copy_from_slice(&value.to_be_bytes());
        let err = parse_err(&bytes);
        assert!(err.offset() <= bytes.len() as u64, "{offset}={value}: {err}");
    }
    for (offset, value) in [(4usize, 3u8), (5, 0)] {
        let mut bytes = chunk0.to_vec();
        bytes[offset] = value;
        if offset == 5 {
            bytes[4] = 0;
        }
        assert!(matches!(parse_err(&bytes), Error::UnsupportedVersion { .. }));
    }
    let mut bytes = chunk0.to_vec();
    bytes[64] = 255;
    assert_eq!(parse_err(&bytes), Error::HeaderLocked { offset: 0 });
    // An error in the second chunk names the absolute offset.
    let mut bytes = f.bytes.clone();
    bytes[f.chunk_sizes[0]] = b'X';
    assert_eq!(parse_err(&bytes).offset(), f.chunk_sizes[0] as u64);
}

#[test]
fn hostile_checkpoint_chains_and_record_sizes_are_errors() {
    let md = root(&[long_class(), class("E", "102", &[("startTime", "11", false)], true)]);
    let checkpoint = |delta: i64| {
        let mut cp = Vec::new();
        let start = begin_record(&mut cp, 1);
        put_long(&mut cp, 0);
        put_long(&mut cp, 0);
        put_long(&mut cp, delta);
        cp.push(0);
        put_varint(&mut cp, 0);
        end_record(&mut cp, start);
        cp
    };
    // Positive delta, delta to itself... a self-loop would be delta 0 which ends the chain.
    for delta in [5, 1 << 40, i64::MIN, -1_000_000] {
        let err = parse_err(&raw_chunk(STRINGS, &md, &checkpoint(delta), Some(0)));
        assert!(matches!(err, Error::Invalid { .. }), "delta {delta}: {err}");
    }
    // cpOffset pointing at an event record, not a checkpoint.
    let mut ev = Vec::new();
    let start = begin_record(&mut ev, 102);
    put_long(&mut ev, 1);
    end_record(&mut ev, start);
    let err = parse_err(&raw_chunk(STRINGS, &md, &ev, Some(0)));
    assert!(matches!(err, Error::Invalid { .. }), "{err}");
    // Record sizes: 0, smaller than the size field, beyond the chunk.
    for raw in [
        vec![0u8, 102],
        vec![1u8],
        vec![0x80, 0x80, 0x80, 0x02],
        vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    ] {
        let err = parse_err(&raw_chunk(STRINGS, &md, &raw, None));
        assert!(matches!(err, Error::Invalid { .. } | Error::UnexpectedEof { .. }), "{raw:02x?}: {err}");
    }
    // Unknown event types are skipped by size, not errors.
    let mut unknown = Vec::new();
    let start = begin_record(&mut unknown, 7777);
    unknown.extend_from_slice(&[0xff; 40]);
    end_record(&mut unknown, start);
    unknown.extend_from_slice(&ev);
    let bytes = raw_chunk(STRINGS, &md, &unknown, None);
    assert_eq!(visit(Bytes::from(bytes)).unwrap(), 1);
}

#[test]
fn undeclared_types_in_fields_and_pools_are_errors() {
    let md = root(&[long_class(), class("E", "102", &[("startTime", "11", false), ("a", "999", false)], true)]);
    assert!(matches!(parse_err(&raw_chunk(STRINGS, &md, &[], None)), Error::UnknownType { type_id: 999, .. }));
    let md = root(&[long_class(), class("E", "102", &[("startTime", "11", false)], true)]);
    let mut cp = Vec::new();
    let start = begin_record(&mut cp, 1);
    put_long(&mut cp, 0);
    put_long(&mut cp, 0);
    put_long(&mut cp, 0);
    cp.push(0);
    put_varint(&mut cp, 1);
    put_varint(&mut cp, 555);
    put_varint(&mut cp, 1);
    put_varint(&mut cp, 1);
    put_varint(&mut cp, 1);
    end_record(&mut cp, start);
    assert!(matches!(parse_err(&raw_chunk(STRINGS, &md, &cp, Some(0))), Error::UnknownType { type_id: 555, .. }));
    let _ = ids::LONG;
}

#[test]
fn nested_claimed_counts_do_not_reserve_memory_at_every_level() {
    // Node { kids: Node[] }: 60 nested arrays each claiming 5000 elements, then 10 000 empty ones.
    // Reserving the claimed length at every level would take 60 × 5000 values before any decode.
    let md = root(&[
        long_class(),
        class("Node", "101", &[("kids", "101", true)], false),
        class("E", "102", &[("startTime", "11", false), ("a", "101", false)], true),
    ]);
    let mut record = Vec::new();
    let start = begin_record(&mut record, 102);
    put_long(&mut record, 5);
    for _ in 0..60 {
        put_varint(&mut record, 5000);
    }
    record.extend(std::iter::repeat_n(0u8, 10_000));
    end_record(&mut record, start);
    let _ = parse_err(&raw_chunk(STRINGS, &md, &record, None));

    // The same in the metadata element tree: 60 levels each claiming 30 000 children.
    let mut md = Vec::new();
    for _ in 0..60 {
        put_varint(&mut md, s("root"));
        put_varint(&mut md, 0);
        put_varint(&mut md, 30_000);
    }
    md.extend(std::iter::repeat_n(0u8, 100_000));
    let _ = parse_err(&raw_chunk(STRINGS, &md, &[], None));
}

#[test]
fn multi_dimensional_fields_are_refused() {
    let field = el(s("field"), &[(s("name"), s("a")), (s("class"), s("11")), (s("dimension"), s("2"))], &[]);
    let e = el(s("class"), &[(s("name"), s("E")), (s("id"), s("102")), (s("superType"), s("jdk.jfr.Event"))], &[field]);
    let err = parse_err(&raw_chunk(STRINGS, &root(&[long_class(), e]), &[], None));
    assert!(matches!(err, Error::Invalid { found: 2, .. }), "{err}");
}
