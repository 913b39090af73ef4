//! Shared helpers for the sampler protocol models: a tiny `Core`, an owner that writes records
//! the way the handler does (the shipped `Core::admit` + `Core::write_record`), and L holders
//! that drain the way the product does (`Core::drain` for the flusher, `Core::drain_full` for the
//! recorder thread), collecting what they drain.
#![allow(dead_code)]

use loom::sync::{Arc, Mutex};
use recorder::__loom::buffer::{Core, LockedState, RecordHeader, SampleRecord, StackBounds, ThreadSlot, HEADER_WORDS};

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
    /// Buffers in the model (all back in the pool once everything is drained and reaped).
    pub nbuffers: usize,
}

pub const TID_BASE: u32 = 100;

impl Model {
    /// `nslots` slots, each claimed (tid = TID_BASE + i) and given a spare; `nbuffers` buffers of
    /// `records` one-frame records each.
    pub fn new(nslots: usize, nbuffers: usize, records: usize) -> Model {
        let (core, locked) = Core::new(nslots, nbuffers, records * REC_WORDS);
        for i in 0..nslots {
            core.claim_slot(TID_BASE + i as u32, StackBounds::default()).expect("slot");
        }
        core.refill_spares();
        Model { core: Arc::new(core), l: Arc::new(Mutex::new(Chunk { locked, out: Vec::new() })), nbuffers }
    }

    pub fn slot(&self, i: usize) -> &ThreadSlot {
        self.core.slot(i).expect("slot")
    }
}

/// The handler's path for sample `id` on slot `i` as thread `tid`: admission, then
/// `write_record` with one frame whose value is `id * 10`, then leaving the slot. Returns true if
/// written.
pub fn produce_as(core: &Core, i: usize, tid: u32, id: u64) -> bool {
    let slot = core.slot(i).expect("slot");
    let Some(adm) = core.admit(slot, tid, false) else {
        return false;
    };
    let hdr = RecordHeader {
        ticks: id as i64,
        tid,
        flags: 0,
        frag_index: 0,
        frag_count: 1,
        sample_id: id,
        sp: 0,
        span: 0,
        ..Default::default()
    };
    core.write_record(&adm, &hdr, 1, |s| s.push(id * 10)).committed
}

/// [`produce_as`] by the slot's own thread (tid = TID_BASE + i).
pub fn produce(core: &Core, i: usize, id: u64) -> bool {
    produce_as(core, i, TID_BASE + i as u32, id)
}

pub fn collect(out: &mut Vec<(u64, u64)>) -> impl FnMut(&SampleRecord<'_>) + '_ {
    move |r: &SampleRecord<'_>| {
        assert_eq!(r.ips.len(), 1);
        assert_eq!(r.ips[0], r.sample_id * 10, "record words torn");
        out.push((r.sample_id, r.ips[0]));
    }
}

/// Flusher (docs/sampler-protocol.md §3) as shipped: `Core::drain` under L (full queue oldest first, reaping, refills,
/// then active buffers gated by activation order).
pub fn flush(core: &Core, l: &Mutex<Chunk>) {
    let mut g = l.lock().unwrap();
    let Chunk { locked, out } = &mut *g;
    core.drain(locked, &mut collect(out));
}

/// Recorder (docs/sampler-protocol.md §4): full pass under L.
pub fn recorder_drain(core: &Core, l: &Mutex<Chunk>) {
    let mut g = l.lock().unwrap();
    let Chunk { locked, out } = &mut *g;
    core.drain_full(locked, &mut collect(out));
}

/// Stop's last pass: retires every slot, drains and reaps everything.
pub fn final_drain(core: &Core, l: &Mutex<Chunk>) {
    let mut g = l.lock().unwrap();
    let Chunk { locked, out } = &mut *g;
    core.drain_all_final(locked, &mut collect(out));
}

/// Asserts exactly-once delivery, per-thread order and exact accounting after a final flush.
pub fn check_exact(m: &Model, attempted: &[u64]) {
    flush(&m.core, &m.l);
    let g = m.l.lock().unwrap();
    let ids: Vec<u64> = g.out.iter().map(|&(id, _)| id).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "a record was drained twice: {:?}", g.out);
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
    // A sample whose slot was already reaped (retired on its thread's behalf) belongs to no slot:
    // counted unattributed.
    assert_eq!(taken + m.core.unattributed(), attempted.len() as u64, "taken + unattributed");
    assert_eq!(written, ids.len() as u64, "written");
    assert_eq!(taken, written + lost, "I6: taken == written + lost");
}

/// Asserts each slot's records came out in the order its thread wrote them (ids increase per
/// slot; ids of slot i are in `i*10..i*10+10` by the models' convention).
pub fn check_order(m: &Model) {
    let g = m.l.lock().unwrap();
    for i in 0..m.core.slots().len() as u64 {
        let ids: Vec<u64> = g.out.iter().map(|&(id, _)| id).filter(|id| id / 10 == i).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted, "slot {i}'s records out of order");
    }
}

/// Asserts every buffer is back in the pool exactly once (I4: a buffer is in one place), after
/// a final drain.
pub fn check_pool(m: &Model) {
    final_drain(&m.core, &m.l);
    let free = m.core.free_buffers();
    assert!(free <= m.nbuffers, "a buffer is in the pool twice: {free} of {}", m.nbuffers);
    assert_eq!(free, m.nbuffers, "a buffer leaked out of the pool");
}
