//! Reassembly of oversized samples from hand-made fragment sequences (owner side through the
//! shipped `write_record` / `write_sample`, L side through `drain`).
#![allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

const TID: u32 = 500;

fn core(nslots: usize, nbuffers: usize, words: usize, spares: usize) -> (Core, LockedState) {
    let (core, locked) = Core::with_spares(nslots, nbuffers, words, spares);
    for i in 0..nslots {
        core.claim_slot(TID + i as u32, StackBounds::default()).unwrap();
    }
    core.refill_spares();
    (core, locked)
}

/// Writes fragment `k`/`n` of sample `id` on slot `i` with `frames` (admits on k == 0,
/// as the handler counts a sample taken once).
fn frag(core: &Core, i: usize, id: u64, k: u16, n: u16, frames: &[u64]) {
    let slot = core.slot(i).unwrap();
    // The handler writes all fragments of a sample in one admission; here each fragment is
    // written separately, and only the first counts the sample taken.
    let adm = if k == 0 || n == 1 {
        core.admit(slot, TID + i as u32, false).unwrap()
    } else {
        Admission { slot, recovered: false }
    };
    let hdr = RecordHeader {
        ticks: id as i64,
        tid: TID + i as u32,
        flags: FLAG_TRUNCATED,
        frag_index: k,
        frag_count: n,
        sample_id: id,
        sp: 0,
        span: 0,
        comm: RawComm::EMPTY,
    };
    assert!(core.write_record(&adm, &hdr, frames.len(), |s| frames.iter().for_each(|&f| s.push(f))).committed);
}

fn drain(core: &Core, locked: &mut LockedState) -> Vec<(u32, u64, Vec<u64>)> {
    let mut out = Vec::new();
    core.drain(locked, &mut |r: &SampleRecord<'_>| {
        assert_eq!((r.frag_index, r.frag_count), (0, 1), "callbacks see whole samples only");
        assert!(r.truncated);
        out.push((r.tid, r.sample_id, r.ips.to_vec()));
    });
    out
}

fn exact(core: &Core, i: usize, written: u64, lost: u64) {
    let s = core.slot_stats(core.slot(i).unwrap());
    assert_eq!((s.written, s.lost), (written, lost), "slot {i}: {s:?}");
    assert_eq!(s.taken, s.written + s.lost, "taken = written + lost");
}

/// A handler abandoned half-way (its admission never released: a `siglongjmp` out of a
/// handler nested in it) stops neither its thread's later samples nor its exit: the same
/// thread's next handler takes the admission over, the exit takes the gate at once (before,
/// it waited for the gate forever), and each abandoned sample is counted lost.
#[test]
fn an_abandoned_admission_is_taken_over_by_the_same_threads_next_handler_and_exit() {
    let (c, mut l) = core(1, 4, 64, 1);
    let slot = c.slot(0).unwrap();
    std::mem::forget(c.admit(slot, TID, false).unwrap());
    assert!(c.admit(slot, TID + 1, false).is_none(), "another thread's stale signal still stays out");
    let adm = c.admit(slot, TID, false).expect("the same thread's next handler is admitted");
    assert!(adm.recovered());
    c.lose(&adm);
    drop(adm);
    frag(&c, 0, 1, 0, 1, &[1, 2]);
    std::mem::forget(c.admit(slot, TID, false).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    // On another thread with a generous limit: a retirement that waits for the gate never
    // returns.
    std::thread::spawn(move || {
        let retired = c.retire_own(c.slot(0).unwrap());
        tx.send((c, retired)).unwrap();
    });
    let (c, retired) = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the exit waited for the gate");
    assert!(retired.abandoned && !retired.given_up, "{retired:?}");
    let slot = c.slot(0).unwrap();
    let out = drain(&c, &mut l);
    assert_eq!(out, vec![(TID, 1, vec![1, 2])]);
    let s = c.slot_stats(slot);
    let (t, w, lost) = c.retired_totals();
    assert_eq!((t + s.taken, w + s.written, lost + s.lost), (4, 1, 3), "taken = written + lost");
}

#[test]
fn interleaved_threads_reassemble_separately() {
    let (c, mut l) = core(2, 6, 64, 1);
    frag(&c, 0, 1, 0, 3, &[1, 2]);
    frag(&c, 1, 2, 0, 2, &[10]);
    frag(&c, 0, 1, 1, 3, &[3]);
    frag(&c, 1, 2, 1, 2, &[11, 12]);
    frag(&c, 0, 1, 2, 3, &[4, 5, 6]);
    let mut out = drain(&c, &mut l);
    out.sort();
    assert_eq!(out, vec![(TID, 1, vec![1, 2, 3, 4, 5, 6]), (TID + 1, 2, vec![10, 11, 12])]);
    exact(&c, 0, 1, 0);
    exact(&c, 1, 1, 0);
}

#[test]
fn fragments_split_across_two_flushes() {
    let (c, mut l) = core(1, 3, 64, 1);
    frag(&c, 0, 7, 0, 2, &[1, 2, 3]);
    assert!(drain(&c, &mut l).is_empty(), "half a sample is never handed out");
    frag(&c, 0, 7, 1, 2, &[4]);
    assert_eq!(drain(&c, &mut l), vec![(TID, 7, vec![1, 2, 3, 4])]);
    exact(&c, 0, 1, 0);
}

#[test]
fn missing_fragment_discards_the_sample() {
    let (c, mut l) = core(1, 3, 64, 1);
    frag(&c, 0, 5, 0, 3, &[1]);
    frag(&c, 0, 5, 2, 3, &[3]); // 1/3 missing
    frag(&c, 0, 6, 0, 1, &[9]);
    // A sample whose last fragment never comes, followed by a new sample's first fragment.
    frag(&c, 0, 8, 0, 2, &[1]);
    frag(&c, 0, 9, 0, 2, &[2]);
    frag(&c, 0, 9, 1, 2, &[3]);
    assert_eq!(drain(&c, &mut l), vec![(TID, 6, vec![9]), (TID, 9, vec![2, 3])]);
    exact(&c, 0, 2, 2);
}

#[test]
fn out_of_order_fragments_discard_the_sample_once() {
    let (c, mut l) = core(1, 3, 64, 1);
    frag(&c, 0, 7, 1, 2, &[2]);
    frag(&c, 0, 7, 0, 2, &[1]);
    frag(&c, 0, 8, 0, 1, &[5]);
    frag(&c, 0, 10, 0, 3, &[1]);
    frag(&c, 0, 10, 2, 3, &[3]);
    frag(&c, 0, 10, 1, 3, &[2]);
    frag(&c, 0, 11, 0, 1, &[6]);
    assert_eq!(drain(&c, &mut l), vec![(TID, 8, vec![5]), (TID, 11, vec![6])]);
    exact(&c, 0, 2, 2);
}

#[test]
fn sample_larger_than_every_buffer_together_is_lost() {
    // 16-word buffers hold `per` frames each; active + 2 spares.
    let per = 16 - HEADER_WORDS;
    let (c, mut l) = core(1, 6, 16, 2);
    let slot = c.slot(0).unwrap();
    let hdr = RecordHeader { tid: TID, sample_id: 1, ..RecordHeader::default() };
    let adm = c.admit(slot, TID, false).unwrap();
    // Nothing active yet, so at most 2 spares * `per` frames.
    let o = c.write_sample(&adm, &hdr, 2 * per + 1, |i| i as u64);
    drop(adm);
    assert!(!o.committed);
    assert!(drain(&c, &mut l).is_empty());
    exact(&c, 0, 0, 1);
    // The same sample with one frame fewer fits two buffers exactly.
    let adm = c.admit(slot, TID, false).unwrap();
    let hdr = RecordHeader { sample_id: 2, flags: FLAG_TRUNCATED, ..hdr };
    assert!(c.write_sample(&adm, &hdr, 2 * per, |i| 1000 + i as u64).committed);
    drop(adm);
    let out = drain(&c, &mut l);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].2, (1000..1000 + 2 * per as u64).collect::<Vec<u64>>());
    exact(&c, 0, 1, 1);
}

#[test]
fn write_sample_uses_the_active_remainder_and_keeps_order_across_drains() {
    // Buffers of 10 frames each after the header.
    let (c, mut l) = core(1, 16, HEADER_WORDS + 10, 6);
    let slot = c.slot(0).unwrap();
    let mut want = Vec::new();
    for id in 1..=6u64 {
        let adm = c.admit(slot, TID, false).unwrap();
        let n = [3usize, 30, 7, 44, 11, 12][id as usize - 1];
        let hdr = RecordHeader { tid: TID, sample_id: id, flags: FLAG_TRUNCATED, ..RecordHeader::default() };
        assert!(c.write_sample(&adm, &hdr, n, |i| id * 100 + i as u64).committed, "sample {id}");
        drop(adm);
        want.push((TID, id, (0..n as u64).map(|i| id * 100 + i).collect::<Vec<_>>()));
        if id % 2 == 0 {
            let got = drain(&c, &mut l);
            assert_eq!(got, std::mem::take(&mut want));
        }
    }
    exact(&c, 0, 6, 0);
}
