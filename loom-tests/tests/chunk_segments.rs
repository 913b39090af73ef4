//! loom models of docs/sampler-protocol.md §9 interleavings 7 and 8 (stack and thread definitions
//! against the checkpoint) on the SHIPPED chunk writer: `recorder::chunk::ChunkWriter` decides
//! which constants each segment defines, `flush::samples::write_sample` writes the samples (the
//! product's CPU source calls it from `Sampler::drain`/`drain_full`, which are `Core::drain` and
//! `Core::drain_full`), and `flush::own::write_settings` writes the recorder's own settings
//! events, named after the flushing thread.
//!
//! The L holders below run the steps of `recorder::Inner::flush_locked` in its order (sampler
//! source, own events, unresolved -> resolved, metadata, checkpoint, publish) over an in-memory
//! chunk file. After every publish the model parses the published bytes as a live reader does
//! and asserts that every thread and stack-trace reference of every event resolves (I7); at the
//! end, that each sample is in exactly one chunk and each stack trace defined at most once per
//! chunk (I9).
//!
//! Mutation `recorder_mutation = "settings_thread_unreferenced"` (the settings events' thread
//! written without telling the chunk writer) makes every model here fail.
#![cfg(loom)]

mod common;

use common::{produce, REC_WORDS, TID_BASE};
use jfr_format::metadata::{ids, Metadata};
use jfr_format::varint;
use loom::sync::{Arc, Mutex};
use loom::thread;
use recorder::__loom::buffer::{Core, LockedState, RecordHeader, SampleRecord, StackBounds};
use recorder::__loom::{
    builtin_classes, write_sample, write_settings, ChunkWriter, ClockPair, DepthPolicy, FrameName, Publish,
    RecordingInfo, Resolve, Resolved, Segment, SettingRow, StackTable, Tally,
};

/// The flushing thread: referenced only by the settings events.
const FLUSHER_TID: u32 = 7;

/// Names for addresses and threads (the symbolizer and /proc of the product).
struct Names;

impl Resolve for Names {
    fn frames(&mut self, ip: u64, _: bool) -> Vec<FrameName> {
        vec![FrameName { module: "model".into(), function: format!("f{ip}"), line: None, inlined: false }]
    }
    fn thread_name(&mut self, tid: u32) -> String {
        format!("t{tid}")
    }
}

/// The checkpoint's fallback: the flush resolved everything it needs beforehand (L is held from
/// `unresolved` to `checkpoint` here), so this is never asked.
struct NothingLeft;

impl Resolve for NothingLeft {
    fn frames(&mut self, ip: u64, _: bool) -> Vec<FrameName> {
        panic!("address {ip} was not in `unresolved`")
    }
    fn thread_name(&mut self, tid: u32) -> String {
        panic!("thread {tid} was not in `unresolved`")
    }
}

fn metadata() -> Metadata {
    let mut classes = jfr_format::metadata::jdk_types();
    classes.extend(builtin_classes());
    Metadata { id: 1, classes, region: Default::default() }
}

/// What L protects in the model: the sampler's locked state and the recorder's chunk side.
struct Recording {
    locked: LockedState,
    chunk: ChunkWriter,
    stacks: StackTable,
    tally: Tally,
    /// The live chunk's file as published so far.
    file: Vec<u8>,
    /// Finished chunk files.
    finished: Vec<Vec<u8>>,
    now: i64,
    settings_changed: bool,
}

impl Recording {
    fn new(locked: LockedState) -> Recording {
        Recording {
            locked,
            chunk: ChunkWriter::new(DepthPolicy::default()),
            stacks: StackTable::new(64),
            tally: Tally::default(),
            file: Vec::new(),
            finished: Vec::new(),
            now: 1,
            settings_changed: true,
        }
    }

    fn open_chunk_if_needed(&mut self) {
        if !self.chunk.is_open() {
            self.chunk.open(ClockPair::logical(self.now));
            self.settings_changed = true;
        }
    }

    /// The recorder thread's pass between flushes: full buffers only (`Sampler::drain_full`).
    fn drain_ready(&mut self, core: &Core) {
        self.open_chunk_if_needed();
        let Recording { locked, chunk, stacks, tally, .. } = self;
        let mut seg = Segment { chunk, stacks, tally };
        core.drain_full(locked, &mut |r: &SampleRecord<'_>| write_sample(&mut seg, r));
    }

    /// `recorder::Inner::flush_locked`, step by step.
    fn flush(&mut self, core: &Core) {
        self.now += 1;
        self.open_chunk_if_needed();
        // 1. event buffers: none in this model.
        // 2. the sampler source (`Sampler::drain`).
        {
            let Recording { locked, chunk, stacks, tally, .. } = self;
            let mut seg = Segment { chunk, stacks, tally };
            core.drain(locked, &mut |r: &SampleRecord<'_>| write_sample(&mut seg, r));
        }
        // 3. the recorder's own events: the settings at a chunk start, by the flushing thread.
        if std::mem::take(&mut self.settings_changed) {
            let rows = [SettingRow::new(0, "flushInterval", "1000 ms")];
            write_settings(&mut self.chunk, self.now, FLUSHER_TID, &RecordingInfo::default(), &rows);
        }
        // Names the checkpoint needs (the product resolves them with L released).
        let missing = self.chunk.unresolved(&self.stacks);
        let mut names = Names;
        self.chunk.resolved(Resolved {
            addresses: missing.addresses.iter().map(|&(ip, r)| ((ip, r), names.frames(ip, r))).collect(),
            threads: missing.threads.iter().map(|&t| (t, names.thread_name(t))).collect(),
        });
        // 4-5. metadata if changed, one checkpoint.
        self.chunk.metadata(1, self.now, metadata);
        self.chunk.checkpoint(&self.stacks, &mut NothingLeft, self.now);
        // 6. publish, and read it back as a live reader does.
        let start = self.chunk.start().unwrap();
        let p = self.chunk.publish(self.now - start.ticks).expect("metadata written");
        write_into(&mut self.file, &p);
        assert_every_reference_resolves(&self.file);
    }

    /// Rotation: a flush, then the chunk finishes; the next flush opens a new one.
    fn rotate(&mut self, core: &Core) {
        self.flush(core);
        self.now += 1;
        let start = self.chunk.start().unwrap();
        let p = self.chunk.finish(self.now - start.ticks, false).expect("metadata written");
        write_into(&mut self.file, &p);
        assert_every_reference_resolves(&self.file);
        self.finished.push(std::mem::take(&mut self.file));
    }

    /// Every chunk written so far (the live one last).
    fn chunks(&self) -> Vec<&[u8]> {
        self.finished.iter().map(Vec::as_slice).chain((!self.file.is_empty()).then_some(self.file.as_slice())).collect()
    }

    /// I9 and exactly-once: each stack trace defined at most once per chunk; each sample in
    /// exactly one chunk, and every one of `attempted` written or counted lost (I6).
    fn check(&self, core: &Core, attempted: &[u64]) {
        let mut samples = Vec::new();
        for file in self.chunks() {
            let defs = stack_definitions(file);
            let mut distinct = defs.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(defs.len(), distinct.len(), "a stack trace defined twice in one chunk: {defs:?}");
            let chunk = jfr_format::Chunk::parse(bytes::Bytes::copy_from_slice(file), 0).unwrap();
            for event in chunk.events() {
                let event = event.unwrap();
                if event.type_id == recorder_execution_sample() {
                    samples.push(event.start_ticks() as u64);
                }
            }
        }
        samples.sort_unstable();
        let written = samples.len();
        samples.dedup();
        assert_eq!(samples.len(), written, "a sample is in two places");
        assert!(samples.iter().all(|s| attempted.contains(s)), "unknown samples: {samples:?}");
        let lost = core.slot_stats(core.slot(0).unwrap()).lost + core.retired_totals().2;
        assert_eq!(written as u64 + lost, attempted.len() as u64, "I6: {samples:?} written, {lost} lost");
    }
}

fn recorder_execution_sample() -> u64 {
    builtin_classes().iter().find(|c| c.name == "jdk.ExecutionSample").unwrap().id
}

/// Writes a publish into the chunk file: the bytes, then the header by the guard protocol.
fn write_into(file: &mut Vec<u8>, p: &Publish) {
    let end = p.offset as usize + p.bytes.len();
    if file.len() < end {
        file.resize(end, 0);
    }
    file[p.offset as usize..end].copy_from_slice(&p.bytes);
    for (offset, bytes) in jfr_format::header::publish_writes(&p.header) {
        file[offset as usize..offset as usize + bytes.len()].copy_from_slice(&bytes);
    }
}

/// I7 as a live reader sees it: every thread and stack-trace reference of every published event
/// is defined in the published part of the chunk.
fn assert_every_reference_resolves(file: &[u8]) {
    let chunk = jfr_format::Chunk::parse(bytes::Bytes::copy_from_slice(file), 0).unwrap();
    for event in chunk.events() {
        let event = event.unwrap();
        for value in &event.values {
            if let jfr_format::Value::Ref { type_id, key } = *value {
                if key != 0 && (type_id == ids::THREAD || type_id == ids::STACK_TRACE) {
                    assert!(
                        chunk.resolve(type_id, key).unwrap().is_some(),
                        "event type {} references {}:{key}, which the published chunk does not define",
                        event.type_id,
                        if type_id == ids::THREAD { "thread" } else { "stack trace" }
                    );
                }
            }
        }
    }
}

/// The stack-trace keys defined by every checkpoint of `file`, in order (with repeats). The chunk
/// writer puts the stack-trace pool first in a checkpoint that has one.
fn stack_definitions(file: &[u8]) -> Vec<u64> {
    let chunk = jfr_format::Chunk::parse(bytes::Bytes::copy_from_slice(file), 0).unwrap();
    let mut keys = Vec::new();
    for record in chunk.records() {
        let record = record.unwrap();
        if record.type_id != 1 {
            continue;
        }
        let mut c = Cursor { b: &record.bytes[..], at: 0 };
        let (_size, _type, _start, _duration, _delta) = (c.varint(), c.varint(), c.varint(), c.varint(), c.varint());
        let _mask = c.byte();
        if c.varint() == 0 || c.varint() != ids::STACK_TRACE {
            continue;
        }
        for _ in 0..c.varint() {
            keys.push(c.varint());
            let _truncated = c.byte();
            for _ in 0..c.varint() {
                let (_method, _line, _bci, _kind) = (c.varint(), c.varint(), c.varint(), c.varint());
            }
        }
    }
    keys
}

/// Reads a checkpoint record.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn varint(&mut self) -> u64 {
        let (v, n) = varint::read_u64(&self.b[self.at..]).unwrap();
        self.at += n;
        v
    }
    fn byte(&mut self) -> u8 {
        self.at += 1;
        self.b[self.at - 1]
    }
}

fn setup(records: usize, nbuffers: usize) -> (Arc<Core>, LockedState) {
    let (core, locked) = Core::new(1, nbuffers, records * REC_WORDS);
    core.claim_slot(TID_BASE, StackBounds::default()).unwrap();
    core.refill_spares();
    (Arc::new(core), locked)
}

/// The handler's path for sample `id` with the same one-frame stack (ip 10) every time, so that
/// the stack's definition is shared across the rotation.
fn produce_same_stack(core: &Core, id: u64) {
    let slot = core.slot(0).unwrap();
    if let Some(adm) = core.admit(slot, TID_BASE, false) {
        let hdr = RecordHeader {
            ticks: id as i64,
            tid: TID_BASE,
            flags: 0,
            frag_index: 0,
            frag_count: 1,
            sample_id: id,
            sp: 0,
            span: 0,
            ..Default::default()
        };
        core.write_record(&adm, &hdr, 1, |s| s.push(10));
    }
}

/// Interleaving 7: commits land before and after the rotation's sampler pass; each sample is in exactly
/// one chunk, and its stack and thread are defined in that chunk at or before the checkpoint of
/// its segment.
#[test]
fn rotation_vs_commits_on_the_shipped_chunk_writer() {
    loom::model(|| {
        let (core, locked) = setup(2, 2);
        let l = Arc::new(Mutex::new(Recording::new(locked)));
        let c = core.clone();
        let owner = thread::spawn(move || {
            produce_same_stack(&c, 1);
            produce_same_stack(&c, 2);
        });
        l.lock().unwrap().rotate(&core);
        owner.join().unwrap();
        let mut r = l.lock().unwrap();
        r.flush(&core);
        r.check(&core, &[1, 2]);
    });
}

/// Interleaving 8: the recorder thread writes samples with new stacks between flushes while a flush
/// closes the segment; with L, whichever order loom picks, every reference is defined by the
/// checkpoint that closes its segment and each stack trace once per chunk.
#[test]
fn recorder_vs_flush_on_the_shipped_chunk_writer() {
    loom::model(|| {
        let (core, locked) = setup(1, 3);
        assert!(produce(&core, 0, 0));
        let l = Arc::new(Mutex::new(Recording::new(locked)));
        core.refill_spares(); // needs no L (the pool has its own lock)
        let c = core.clone();
        let owner = thread::spawn(move || {
            produce(&c, 0, 1); // rotation: pushes the buffer holding sample 0
        });
        let (c, l2) = (core.clone(), l.clone());
        let recorder = thread::spawn(move || l2.lock().unwrap().drain_ready(&c));
        l.lock().unwrap().flush(&core);
        owner.join().unwrap();
        recorder.join().unwrap();
        let mut r = l.lock().unwrap();
        r.flush(&core);
        r.check(&core, &[0, 1]);
    });
}

/// Both L holders write into a chunk that rotates between them: the recorder thread's samples
/// drained after the rotation land in the new chunk with their constants defined there.
#[test]
fn recorder_vs_rotation_on_the_shipped_chunk_writer() {
    loom::model(|| {
        let (core, locked) = setup(1, 3);
        assert!(produce(&core, 0, 0));
        let l = Arc::new(Mutex::new(Recording::new(locked)));
        {
            let mut r = l.lock().unwrap();
            core.refill_spares();
            r.flush(&core);
        }
        let c = core.clone();
        let owner = thread::spawn(move || {
            produce(&c, 0, 1);
            produce(&c, 0, 2);
        });
        let (c, l2) = (core.clone(), l.clone());
        let recorder = thread::spawn(move || l2.lock().unwrap().drain_ready(&c));
        l.lock().unwrap().rotate(&core);
        owner.join().unwrap();
        recorder.join().unwrap();
        let mut r = l.lock().unwrap();
        r.flush(&core);
        r.check(&core, &[0, 1, 2]);
    });
}
