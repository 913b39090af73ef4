//! A chunk written in stages and published by the header protocol into a growing `Vec`, followed
//! by `Chunk::refresh`: new segments, the guard byte, new metadata mid-chunk, new checkpoints,
//! segments without checkpoints, and finishing.
mod common;

use bytes::Bytes;
use common::fixture::{metadata, pools, r, s, write_events, START_NANOS, START_TICKS};
use jfr_format::header::{publish_writes, ChunkHeader, HEADER_SIZE, STATE_GUARD};
use jfr_format::metadata::{event_class, ids, EventTypeSpec, Field};
use jfr_format::write::{put_field, Checkpoint, ChunkEncoder, StringEncoding};
use jfr_format::{Chunk, Error, Item, Refresh, Value};

/// The file as a reader sees it: bytes are appended, then the header is patched in place.
struct LiveFile {
    bytes: Vec<u8>,
    writer: ChunkEncoder,
}

impl LiveFile {
    fn new() -> LiveFile {
        let mut writer = ChunkEncoder::new(START_NANOS, START_TICKS);
        let (at, header) = writer.take_pending();
        assert_eq!((at, header.len()), (0, HEADER_SIZE));
        LiveFile { bytes: header, writer }
    }
    /// Appends what the writer produced (the file now runs ahead of the published size).
    fn append(&mut self) {
        let (at, bytes) = self.writer.take_pending();
        assert_eq!(at as usize, self.bytes.len());
        self.bytes.extend(bytes);
    }
    fn apply(&mut self, writes: &[(u64, Vec<u8>)]) {
        for (offset, bytes) in writes {
            let o = *offset as usize;
            self.bytes[o..o + bytes.len()].copy_from_slice(bytes);
        }
    }
    fn snapshot(&self) -> Bytes {
        Bytes::from(self.bytes.clone())
    }
}

fn drain(chunk: &Chunk, from: u64, events: &mut Vec<(u64, Vec<Value>)>) -> (u64, usize) {
    let mut items = chunk.items(from);
    let mut flushes = 0;
    for item in items.by_ref() {
        match item.expect("item decodes") {
            Item::Event(e) => events.push((e.offset, e.values)),
            Item::Flush => flushes += 1,
        }
    }
    (items.position(), flushes)
}

#[test]
fn refresh_follows_every_stage_of_a_live_chunk() {
    let md1 = metadata(false);
    let mut md2 = md1.clone();
    md2.classes.push(event_class(EventTypeSpec {
        id: 150,
        name: "test.MidChunk",
        label: "Added mid-chunk",
        description: None,
        category: &[],
        duration: false,
        thread: true,
        stack_trace: false,
        fields: vec![Field::new("note", ids::STRING)],
    }));
    md2.id = md2.id_after(&md1);
    assert_eq!(md2.id, 2);
    let all_pools = pools();
    let mut file = LiveFile::new();

    // Stage 0: a fresh header (size 68, no metadata) is not readable yet.
    assert_eq!(Chunk::parse(file.snapshot(), 0).unwrap_err(), Error::NoMetadata { offset: 0 });

    // Segment 1: metadata, events, the constants except threads 2 and 3, a FLUSH checkpoint.
    let mut seq = 0;
    file.writer.write_metadata(&md1, START_TICKS);
    let mut written = write_events(&mut file.writer, &md1, 0, &mut seq);
    let mut cp = Checkpoint::new();
    for (&(t, k), v) in &all_pools {
        if t == ids::STRING {
            cp.add(t, k, |o| jfr_format::write::put_string(o, v.as_str()));
        } else if !(t == ids::THREAD && k != 1) {
            cp.add_value(t, k, v);
        }
    }
    file.writer.write_checkpoint(&cp, START_TICKS, true);
    file.append();
    let h1 = file.writer.publish(1_000).expect("metadata written");
    assert_eq!((h1.state, h1.flags), (2, 1));
    file.apply(&publish_writes(&h1));
    // Unpublished bytes after the published size must be ignored.
    file.bytes.extend_from_slice(&[0u8; 100]);
    let mut chunk = Chunk::parse(file.snapshot(), 0).expect("first segment");
    assert_eq!(chunk.size(), h1.chunk_size as u64);
    assert!(!chunk.header().is_finished());
    let mut events = Vec::new();
    let (mut pos, flushes) = drain(&chunk, HEADER_SIZE as u64, &mut events);
    assert_eq!((events.len(), flushes), (written.len(), 1));
    assert_eq!(pos, h1.chunk_size as u64);
    assert_eq!(chunk.resolve(ids::THREAD, 2).unwrap(), None, "thread 2 not yet defined");
    file.bytes.truncate(h1.chunk_size as usize);

    // Nothing new: Unchanged.
    assert_eq!(chunk.refresh(file.snapshot()).unwrap(), Refresh::Unchanged);

    // Segment 2: more events and threads 2 and 3 in a new checkpoint; the guard byte is seen first.
    written.extend(write_events(&mut file.writer, &md1, 0, &mut seq));
    let mut cp = Checkpoint::new();
    for k in [2, 3] {
        cp.add_value(ids::THREAD, k, &all_pools[&(ids::THREAD, k)]);
    }
    file.writer.write_checkpoint(&cp, START_TICKS, true);
    file.append();
    let h2 = file.writer.publish(2_000).unwrap();
    let writes = publish_writes(&h2);
    file.apply(&writes[..1]);
    assert_eq!(file.bytes[64], STATE_GUARD);
    assert_eq!(chunk.refresh(file.snapshot()).unwrap(), Refresh::Locked);
    assert_eq!(Chunk::parse(file.snapshot(), 0).unwrap_err(), Error::HeaderLocked { offset: 0 });
    file.apply(&writes[1..2]);
    assert_eq!(chunk.refresh(file.snapshot()).unwrap(), Refresh::Locked, "body written, state not yet");
    file.apply(&writes[2..]);
    assert_eq!(chunk.refresh(file.snapshot()).unwrap(), Refresh::Grew);
    assert_eq!(chunk.header().state, 3);
    let before = events.len();
    let (p, flushes) = drain(&chunk, pos, &mut events);
    pos = p;
    assert_eq!((events.len() - before, flushes), (written.len() - before, 1));
    let thread = chunk.thread_info(&r(ids::THREAD, 3)).unwrap().expect("thread 3 now defined");
    assert_eq!(thread.java_name.as_deref(), Some("wörker-ß ☃"));
    assert!(chunk.thread_info(&r(ids::THREAD, 1)).unwrap().is_some(), "older constants stay");
    assert_eq!(chunk.checkpoint_offsets().len(), 2);

    // Segment 3: new metadata mid-chunk (id 2, one more event type), events of the new type.
    file.writer.write_metadata(&md2, START_TICKS);
    let mid_class = md2.class(150).unwrap().clone();
    for n in 0..3 {
        let values = vec![Value::Long(START_TICKS + 50_000 + n), r(ids::THREAD, 2), s(&format!("note {n}"))];
        file.writer.write_event(150, |o| {
            for (f, v) in mid_class.fields.iter().zip(&values) {
                put_field(o, &md2, f, v, StringEncoding::CharArray).unwrap();
            }
        });
        written.push(common::fixture::Written { chunk: 0, type_id: 150, values });
    }
    file.writer.write_checkpoint(&Checkpoint::new(), START_TICKS, true);
    file.append();
    let h3 = file.writer.publish(3_000).unwrap();
    file.apply(&publish_writes(&h3));
    assert_eq!(chunk.refresh(file.snapshot()).unwrap(), Refresh::Grew);
    assert_eq!(chunk.metadata().id, 2);
    assert!(chunk.types().class(150).is_some(), "new metadata taken in");
    let before = events.len();
    pos = drain(&chunk, pos, &mut events).0;
    assert_eq!(events.len() - before, 3);
    assert_eq!(events.last().unwrap().1[2], s("note 2"));
    let mid_chunk_path = common::write_tmp("live-mid-metadata.jfr", &file.bytes);

    // Segment 4: events only, no checkpoint (cpOffset unchanged), no flush item.
    written.extend(write_events(&mut file.writer, &md2, 0, &mut seq));
    file.append();
    let h4 = file.writer.publish(4_000).unwrap();
    assert_eq!(h4.cp_offset, h3.cp_offset);
    file.apply(&publish_writes(&h4));
    assert_eq!(chunk.refresh(file.snapshot()).unwrap(), Refresh::Grew);
    let before = events.len();
    let (p, flushes) = drain(&chunk, pos, &mut events);
    pos = p;
    assert_eq!(flushes, 0);
    assert!(events.len() > before);

    // Finish: state 0 and the final flag, same size: still picked up.
    let done = file.writer.finish(5_000, true).unwrap();
    file.apply(&publish_writes(&done));
    assert_eq!(chunk.refresh(file.snapshot()).unwrap(), Refresh::Grew);
    assert!(chunk.header().is_finished() && chunk.header().is_final());
    assert_eq!(drain(&chunk, pos, &mut Vec::new()).1, 0);

    // What we saw incrementally is exactly what a fresh parse of the finished chunk sees.
    let fresh = Chunk::parse(file.snapshot(), 0).unwrap();
    let mut all = Vec::new();
    drain(&fresh, HEADER_SIZE as u64, &mut all);
    assert_eq!(all, events);
    assert_eq!(all.len(), written.len());
    for ((_, got), w) in all.iter().zip(&written) {
        assert_eq!(got, &w.values);
    }

    // A shrinking chunk is an error, not a panic.
    let mut shrunk = file.bytes.clone();
    shrunk[8..16].copy_from_slice(&100i64.to_be_bytes());
    shrunk[64] = 9;
    assert!(chunk.refresh(Bytes::from(shrunk)).is_err());

    // The JDK reads the unfinished chunk with metadata replaced mid-chunk (state 4, flags 1).
    let summary = common::jfr(&["summary", mid_chunk_path.to_str().unwrap()]);
    let summary = summary.assert_clean("jfr summary of a live chunk with mid-chunk metadata");
    assert_eq!(common::summary_counts(summary).get("test.MidChunk"), Some(&3), "{summary}");
    let header = ChunkHeader::parse(&std::fs::read(&mid_chunk_path).unwrap(), 0).unwrap();
    assert_eq!((header.state, header.flags), (4, 1));
}

#[test]
fn generations_cycle_through_1_to_254() {
    let md = metadata(false);
    let mut w = ChunkEncoder::new(0, 0);
    assert!(w.publish(1).is_none(), "never publish data without metadata");
    w.write_metadata(&md, 0);
    let mut previous = w.header().state;
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..600 {
        let h = w.publish(i).unwrap();
        assert!((1..=254).contains(&h.state), "state {}", h.state);
        assert_ne!(h.state, previous);
        assert_eq!(h.encode()[65], 0, "pad byte");
        previous = h.state;
        seen.insert(h.state);
    }
    assert_eq!(seen.len(), 254);
    let done = w.finish(0, false).unwrap();
    assert_eq!((done.state, done.flags, done.duration_nanos), (0, 1, 1));
}
