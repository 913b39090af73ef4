//! The negative model of interleaving 8 (docs/sampler-protocol.md §9): a recorder that drains WITHOUT taking L must
//! fail. Interleavings 7 and 8 themselves run on the shipped chunk writer in `chunk_segments.rs`.
//!
//! `ChunkModel` below stands for the recorder core's L-protected state: a per-chunk dedup
//! table of stack traces (no epochs; ids are defined in the segment's checkpoint: docs/sampler-protocol.md §5),
//! the pending stack-trace constant buffer, and the chunk output. (This model catches a race on
//! its own cell, whatever the shipped code does.)
#![cfg(loom)]

mod common;

use common::{produce, REC_WORDS, TID_BASE};
use loom::cell::UnsafeCell;
use loom::sync::{Arc, Mutex};
use loom::thread;
use recorder::__loom::buffer::{Core, LockedState, SampleRecord, StackBounds};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    /// ExecutionSample(sample id, stack id) in a segment.
    Event(u64, u64),
    /// Stack-trace constant written in a checkpoint.
    Def(u64),
    /// End of a segment (its checkpoint came just before).
    Checkpoint,
}

struct ChunkModel {
    locked: LockedState,
    chunks: Vec<Vec<Item>>,
    /// Per chunk: stack (first ip) -> id. Cleared at rotation.
    dedup: Vec<(u64, u64)>,
    next_id: u64,
    /// The constant buffer: ids interned since the last checkpoint, not yet written.
    pending_defs: Vec<u64>,
    /// Events processed since the last checkpoint.
    segment: Vec<Item>,
    /// Ids drained so far (exactly-once check across chunks).
    seen: Vec<u64>,
}

impl ChunkModel {
    fn new(locked: LockedState) -> ChunkModel {
        ChunkModel {
            locked,
            chunks: vec![Vec::new()],
            dedup: Vec::new(),
            next_id: 1,
            pending_defs: Vec::new(),
            segment: Vec::new(),
            seen: Vec::new(),
        }
    }

    fn drain(&mut self, core: &Core, active: bool) {
        let mut items = Vec::new();
        let mut pending = Vec::new();
        {
            // Split borrows: run the drain with a callback that only touches local vectors, then
            // fold them in (same effect as processing inline).
            let ChunkModel { locked, dedup, next_id, seen, .. } = self;
            let mut f = |r: &SampleRecord<'_>| {
                let key = r.ips[0];
                let id = match dedup.iter().find(|(k, _)| *k == key) {
                    Some(&(_, id)) => id,
                    None => {
                        let id = *next_id;
                        *next_id += 1;
                        dedup.push((key, id));
                        pending.push(id);
                        id
                    }
                };
                seen.push(r.sample_id);
                items.push(Item::Event(r.sample_id, id));
            };
            // The shipped passes: the flusher's `drain` (full queue, then activation-gated active
            // buffers), the recorder thread's `drain_full`.
            if active {
                core.drain(locked, &mut f);
            } else {
                core.drain_full(locked, &mut f);
            }
        }
        self.segment.extend(items);
        self.pending_defs.extend(pending);
    }

    /// Flush (docs/sampler-protocol.md §3): sampler pass, own events, checkpoint with the pending constants, reset the
    /// constant buffer.
    fn flush(&mut self, core: &Core) {
        self.drain(core, true);
        let chunk = self.chunks.last_mut().unwrap();
        chunk.append(&mut self.segment);
        chunk.extend(self.pending_defs.drain(..).map(Item::Def));
        chunk.push(Item::Checkpoint);
    }

    /// Recorder (docs/sampler-protocol.md §4): full pass; serializes into the shared constant buffer.
    fn recorder(&mut self, core: &Core) {
        self.drain(core, false);
    }

    /// I7 + I9: every event's stack id is defined in the same chunk, in the checkpoint that closes
    /// its segment or an earlier one; each id is defined at most once per chunk; each sample is in
    /// exactly one chunk.
    fn check(&self, attempted: &[u64]) {
        for chunk in &self.chunks {
            let mut defined: Vec<u64> = Vec::new();
            let mut open: Vec<u64> = Vec::new();
            for item in chunk {
                match item {
                    Item::Event(_, id) => open.push(*id),
                    Item::Def(id) => {
                        assert!(!defined.contains(id), "stack {id} defined twice in a chunk: {chunk:?}");
                        defined.push(*id);
                    }
                    Item::Checkpoint => {
                        for id in open.drain(..) {
                            assert!(defined.contains(&id), "event references undefined stack {id}: {chunk:?}");
                        }
                    }
                }
            }
            assert!(open.is_empty(), "segment without checkpoint");
        }
        let mut seen = self.seen.clone();
        seen.sort_unstable();
        let n = seen.len();
        seen.dedup();
        assert_eq!(n, seen.len(), "a sample was drained twice");
        let events: usize = self.chunks.iter().map(|c| c.iter().filter(|i| matches!(i, Item::Event(..))).count()).sum();
        assert_eq!(events, n, "every drained sample is in exactly one chunk");
        for id in &seen {
            assert!(attempted.contains(id));
        }
    }
}

fn setup(records: usize, nbuffers: usize) -> (Arc<Core>, LockedState) {
    let (core, locked) = Core::new(1, nbuffers, records * REC_WORDS);
    core.claim_slot(TID_BASE, StackBounds::default()).unwrap();
    core.refill_spares();
    (Arc::new(core), locked)
}

fn recorder_vs_flush(recorder_takes_l: bool) {
    loom::model(move || {
        let (core, locked) = setup(1, 3);
        assert!(produce(&core, 0, 0));
        // The L-protected state, held in a loom cell so that an access without L is a data race
        // loom can see. `l` is the chunk-writer lock itself.
        let state = Arc::new(UnsafeCell::new(ChunkModel::new(locked)));
        let l = Arc::new(Mutex::new(()));
        core.refill_spares();
        let c = core.clone();
        let owner = thread::spawn(move || {
            produce(&c, 0, 1); // rotation: pushes the buffer with r0
        });
        let (c, s, l2) = (core.clone(), state.clone(), l.clone());
        let recorder = thread::spawn(move || {
            let _g = if recorder_takes_l { Some(l2.lock().unwrap()) } else { None };
            // SAFETY (model): exclusive only while L is held - which is what this test checks.
            s.with_mut(|w| unsafe { (*w).recorder(&c) });
        });
        {
            let _g = l.lock().unwrap();
            // SAFETY (model): L held.
            state.with_mut(|w| unsafe { (*w).flush(&core) });
        }
        owner.join().unwrap();
        recorder.join().unwrap();
        let _g = l.lock().unwrap();
        state.with_mut(|w| unsafe {
            (*w).flush(&core);
            (*w).check(&[0, 1]);
        });
    });
}

/// Negative model: the same, but the recorder drains without taking L. loom must find the race
/// (a concurrent access to the L-protected state), so this test expects the model to fail.
#[test]
#[should_panic(expected = "Causality violation")]
fn recorder_without_l_is_caught() {
    recorder_vs_flush(false);
}
