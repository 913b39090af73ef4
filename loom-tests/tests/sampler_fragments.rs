//! loom model of oversized samples ("Fragments" in docs/sampler-protocol.md §7): the owner splits a sample into
//! fragments across consecutive buffers through the shipped `Core::write_sample` (the ordinary
//! rotation: spare swap, Release store of `active`, Release push) while the flusher runs
//! `Core::drain` (full queue oldest first, then active buffers only when every older buffer of the
//! thread is drained) and the recorder runs `Core::drain_full`, serialized by L.
//!
//! The fragment path adds no new kind of atomic interaction: each spare entry is the spare
//! handoff, every rotation the rotation of docs/sampler-protocol.md §2 step 5. What is new is the L-side order rule (an
//! active buffer waits while an older buffer of its thread is still queued) and the per-buffer
//! activation number it reads; this model checks that no interleaving lets a fragment overtake an
//! older one: the sample is always delivered whole, exactly once, and nothing is counted lost.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use recorder::__loom::buffer::{Core, LockedState, RecordHeader, SampleRecord, StackBounds, HEADER_WORDS};

const TID: u32 = 100;

struct Chunk {
    locked: LockedState,
    /// (sample id, frames) in delivery order.
    out: Vec<(u64, Vec<u64>)>,
}

fn collect(out: &mut Vec<(u64, Vec<u64>)>) -> impl FnMut(&SampleRecord<'_>) + '_ {
    move |r: &SampleRecord<'_>| {
        assert_eq!((r.frag_index, r.frag_count), (0, 1), "only whole samples are handed out");
        out.push((r.sample_id, r.ips.to_vec()));
    }
}

fn sample(core: &Core, id: u64, n: usize) -> bool {
    let slot = core.slot(0).unwrap();
    let adm = core.admit(slot, TID, false).expect("admitted");
    let hdr = RecordHeader {
        ticks: 0,
        tid: TID,
        flags: 0,
        frag_index: 0,
        frag_count: 1,
        sample_id: id,
        sp: 0,
        span: 0,
        ..Default::default()
    };
    core.write_sample(&adm, &hdr, n, |i| id * 100 + i as u64).committed
}

/// Buffers of 12 words (7 frames). s1 (1 frame) is one record; s2 (12 frames) is split into
/// 1 frame in what is left of s1's buffer, 7 in a spare, 4 in another: three buffers, the last
/// one left ACTIVE.
#[test]
fn fragments_vs_flusher_and_recorder() {
    loom::model(|| {
        let (core, locked) = Core::with_spares(1, 5, 2 * HEADER_WORDS + 2, 3);
        core.claim_slot(TID, StackBounds::default()).unwrap();
        core.refill_spares();
        let core = Arc::new(core);
        let l = Arc::new(Mutex::new(Chunk { locked, out: Vec::new() }));
        let owner = {
            let core = core.clone();
            thread::spawn(move || {
                assert!(sample(&core, 1, 1));
                assert!(sample(&core, 2, 12), "the two spares left hold the rest of s2");
            })
        };
        let flusher = {
            let (core, l) = (core.clone(), l.clone());
            thread::spawn(move || {
                let mut g = l.lock().unwrap();
                let Chunk { locked, out } = &mut *g;
                core.drain(locked, &mut collect(out));
            })
        };
        {
            let mut g = l.lock().unwrap();
            let Chunk { locked, out } = &mut *g;
            core.drain_full(locked, &mut collect(out));
        }
        owner.join().unwrap();
        flusher.join().unwrap();
        let mut g = l.lock().unwrap();
        let Chunk { locked, out } = &mut *g;
        core.drain_all_final(locked, &mut collect(out));
        assert_eq!(
            *out,
            vec![(1, vec![100]), (2, (200..212).collect::<Vec<u64>>())],
            "each sample whole, once, in order"
        );
        let (taken, written, lost) = core.retired_totals();
        assert_eq!((taken, written, lost), (2, 2, 0));
    });
}

/// Not enough spares for the whole sample: nothing is written and it is counted lost, while a
/// concurrent flusher never sees a fragment of it.
#[test]
fn sample_larger_than_the_spares_is_lost_whole() {
    loom::model(|| {
        let (core, locked) = Core::with_spares(1, 3, HEADER_WORDS + 2, 1);
        core.claim_slot(TID, StackBounds::default()).unwrap();
        core.refill_spares();
        let core = Arc::new(core);
        let l = Arc::new(Mutex::new(Chunk { locked, out: Vec::new() }));
        let owner = {
            let core = core.clone();
            thread::spawn(move || {
                // 3 frames need two fresh 2-frame buffers; one spare only.
                assert!(!sample(&core, 1, 3));
                assert!(sample(&core, 2, 2));
            })
        };
        {
            let mut g = l.lock().unwrap();
            let Chunk { locked, out } = &mut *g;
            core.drain(locked, &mut collect(out));
        }
        owner.join().unwrap();
        let mut g = l.lock().unwrap();
        let Chunk { locked, out } = &mut *g;
        core.drain_all_final(locked, &mut collect(out));
        assert_eq!(*out, vec![(2, vec![200, 201])]);
        assert_eq!(core.retired_totals(), (2, 1, 1));
    });
}
