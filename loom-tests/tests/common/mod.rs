//! Shared helpers for the sampler protocol models: a tiny `Core`, an owner that writes records
//! through the shipped `Core::write_record`, and an L holder that collects what it drains.
#![allow(dead_code)]

use loom::sync::{Arc, Mutex};
use recorder::__loom::buffer::{Core, LockedState, RecordHeader, SampleRecord, ThreadSlot, HEADER_WORDS};

/// One record of one frame.
pub const REC_WORDS: usize = HEADER_WORDS + 1;

/// What the L holder keeps under L: the sampler's locked state and the "chunk" output.
pub struct Chunk {
    pub locked: LockedState,
    /// (sample id, first ip) in drain order.
    pub out: Vec<(u64, u64)>,
}

pub struct Model {
    pub core: Arc<Core>,
    pub l: Arc<Mutex<Chunk>>,
}

pub const TID_BASE: u32 = 100;

impl Model {
    /// `nslots` slots, each claimed (tid = TID_BASE + i) and given a spare; `nbuffers` buffers of
    /// `records` one-frame records each.
    pub fn new(nslots: usize, nbuffers: usize, records: usize) -> Model {
        let (core, mut locked) = Core::new(nslots, nbuffers, records * REC_WORDS);
        for i in 0..nslots {
            core.claim_slot(TID_BASE + i as u32, 0, 0).expect("slot");
        }
        core.refill_spares(&mut locked);
        Model { core: Arc::new(core), l: Arc::new(Mutex::new(Chunk { locked, out: Vec::new() })) }
    }

    pub fn slot(&self, i: usize) -> &ThreadSlot {
        self.core.slot(i).expect("slot")
    }
}

/// The handler's path for sample `id` on slot `i`: admission, then `write_record` with one frame
/// whose value is `id * 10`. Returns true if written.
pub fn produce(core: &Core, i: usize, id: u64) -> bool {
    let slot = core.slot(i).expect("slot");
    let tid = TID_BASE + i as u32;
    if !core.admit(slot, tid) {
        return false;
    }
    let hdr =
        RecordHeader { ticks: id as i64, tid, flags: 0, frag_index: 0, frag_count: 1, sample_id: id, sp: 0, span: 0 };
    core.write_record(slot, &hdr, 1, |s| s.push(id * 10)).committed
}

pub fn collect(out: &mut Vec<(u64, u64)>) -> impl FnMut(&SampleRecord<'_>) + '_ {
    move |r: &SampleRecord<'_>| {
        assert_eq!(r.ips.len(), 1);
        assert_eq!(r.ips[0], r.sample_id * 10, "record words torn");
        out.push((r.sample_id, r.ips[0]));
    }
}

/// Flusher (§4.3): active pass then full pass, under L.
pub fn flush(core: &Core, l: &Mutex<Chunk>) {
    let mut g = l.lock().unwrap();
    let Chunk { locked, out } = &mut *g;
    let mut f = collect(out);
    core.drain_active(locked, &mut f);
    core.drain_full(locked, &mut f);
}

/// Recorder (§4.4): full pass under L.
pub fn recorder_drain(core: &Core, l: &Mutex<Chunk>) {
    let mut g = l.lock().unwrap();
    let Chunk { locked, out } = &mut *g;
    core.drain_full(locked, &mut collect(out));
}

/// Asserts exactly-once delivery and exact accounting after a final flush.
pub fn check_exact(m: &Model, attempted: &[u64]) {
    flush(&m.core, &m.l);
    let g = m.l.lock().unwrap();
    let mut ids: Vec<u64> = g.out.iter().map(|&(id, _)| id).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, ids.len(), "a record was drained twice: {:?}", g.out);
    for id in &ids {
        assert!(attempted.contains(id), "unknown record {id}");
    }
    let mut taken = 0;
    let mut written = 0;
    let mut lost = 0;
    for slot in m.core.slots() {
        let s = m.core.slot_stats(slot);
        taken += s.taken;
        written += s.written;
        lost += s.lost;
    }
    let (rt, rw, rl) = m.core.retired_totals();
    taken += rt;
    written += rw;
    lost += rl;
    assert_eq!(taken, attempted.len() as u64, "taken");
    assert_eq!(written, ids.len() as u64, "written");
    assert_eq!(taken, written + lost, "I6: taken == written + lost");
}
