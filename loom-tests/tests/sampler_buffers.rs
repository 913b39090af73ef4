//! loom models of the SamplerBuffer protocol (docs/sampler-protocol.md §9, interleavings 1-6 and 9),
//! run against the shipped `recorder::sampler::buffer` code: the handler's path is `Core::admit`
//! then `Core::write_record`, the flusher's is `Core::drain` (activation-gated, as
//! `Sampler::drain` calls it), the recorder thread's is `Core::drain_full`. Each "handler" is a
//! loom thread that is the sole user of its slot.
//!
//! Interleaving 10 (shared MPMC free pool popped by handlers) does not apply: handlers never pop
//! a shared pool; each slot has its own spares, filled only under the pool lock with a CAS from
//! null and emptied only by the slot's admitted handler, so no buffer can become ACTIVE in two
//! slots without a tagged head.
//!
//! Sample ids are `slot * 10 + n` so `check_order` can tell threads apart.
#![cfg(loom)]

mod common;

use common::*;
use loom::thread;
use recorder::__loom::buffer::SLOT_FREE;

/// Interleaving 1: commit vs active pass. The flusher runs twice while the owner writes r1, r2; every
/// record is drained exactly once, never a torn one (loom's UnsafeCell flags unpublished reads;
/// `process` asserts I1).
#[test]
fn commit_vs_active_pass() {
    loom::model(|| {
        let m = Model::new(1, 2, 2);
        let core = m.core.clone();
        let owner = thread::spawn(move || {
            produce(&core, 0, 1);
            produce(&core, 0, 2);
        });
        let (core, l) = (m.core.clone(), m.l.clone());
        let flusher = thread::spawn(move || {
            flush(&core, &l);
            flush(&core, &l);
        });
        owner.join().unwrap();
        flusher.join().unwrap();
        check_exact(&m, &[1, 2]);
        check_order(&m);
        assert_eq!(m.l.lock().unwrap().out.len(), 2, "nothing may be lost: both fit one buffer");
    });
}

/// Interleaving 2: rotation vs active pass, with the recorder draining concurrently (serialized by L).
/// Capacity one record: r1 rotates (spare in, old pushed), r2 needs a spare refilled by a drain.
/// The records of the thread come out in the order it wrote them (the activation gate).
#[test]
fn rotation_vs_active_pass_and_recorder() {
    loom::model(|| {
        let m = Model::new(1, 3, 1);
        assert!(produce(&m.core, 0, 0)); // r0: the spare becomes active
        m.core.refill_spares();
        let core = m.core.clone();
        let owner = thread::spawn(move || {
            produce(&core, 0, 1);
            produce(&core, 0, 2);
        });
        let (core, l) = (m.core.clone(), m.l.clone());
        let flusher = thread::spawn(move || flush(&core, &l));
        recorder_drain(&m.core, &m.l);
        owner.join().unwrap();
        flusher.join().unwrap();
        check_exact(&m, &[0, 1, 2]);
        check_order(&m);
        let g = m.l.lock().unwrap();
        assert!(g.out.iter().any(|&(id, _)| id == 1), "r1 had a spare and must not be lost");
    });
}

/// Interleaving 3: rotation finds no spare; the sample is counted lost, the old buffer stays ACTIVE and
/// intact, and the recorder is asked to run.
#[test]
fn empty_spare_counts_lost() {
    loom::model(|| {
        // One buffer: once it is active the pool is empty, so no drain can refill the spare.
        let m = Model::new(1, 1, 1);
        assert!(produce(&m.core, 0, 0)); // spare consumed, none left to refill
        m.core.take_pending();
        let core = m.core.clone();
        let owner = thread::spawn(move || {
            assert!(!produce(&core, 0, 1));
        });
        let (core, l) = (m.core.clone(), m.l.clone());
        let flusher = thread::spawn(move || flush(&core, &l));
        owner.join().unwrap();
        flusher.join().unwrap();
        assert!(m.core.take_pending(), "a missing spare must wake the recorder");
        check_exact(&m, &[0, 1]);
        let g = m.l.lock().unwrap();
        assert_eq!(g.out, vec![(0, 0)]);
        let s = m.core.slot_stats(m.slot(0));
        assert_eq!(s.lost, 1);
    });
}

/// Interleaving 4: recycle vs reuse. The L holder drains buffer X from the full queue, recycles it and
/// puts it into the owner's spare while the owner rotates into it and writes; the next active pass
/// must start from X's fresh `flushed_pos`, never a stale one from X's previous life, and the
/// owner's writes must come after the L holder's reads of X's previous records (the Release CAS
/// that fills the spare; `refill_cas_relaxed` breaks it).
#[test]
fn recycle_vs_reuse() {
    loom::model(|| {
        let m = Model::new(1, 2, 1);
        assert!(produce(&m.core, 0, 0)); // X active with r0
        m.core.refill_spares(); // Y spare; pool now empty
        let core = m.core.clone();
        let owner = thread::spawn(move || {
            produce(&core, 0, 1); // Y active, X pushed
            produce(&core, 0, 2); // needs X back (recycled) or is lost
        });
        let (core, l) = (m.core.clone(), m.l.clone());
        let holder = thread::spawn(move || {
            flush(&core, &l); // may recycle X into the spare
            flush(&core, &l);
        });
        owner.join().unwrap();
        holder.join().unwrap();
        check_exact(&m, &[0, 1, 2]);
        check_order(&m);
    });
}

/// Interleaving 4, the handoff alone: the recorder drains buffer X (reads its record), recycles it and
/// fills the owner's empty spare with it while the owner, out of room, rotates into that spare and
/// writes. The owner's writes must happen after the recorder's reads of X's previous record: only
/// the Release CAS that fills the spare (paired with the owner's Acquire swap) orders them. With
/// that CAS Relaxed (`refill_cas_relaxed`) loom reports the race on X's first word at once, where
/// `recycle_vs_reuse`, with two flushes and more relaxed loads to branch on, runs for many minutes
/// before it gets there.
#[test]
fn refill_publishes_the_recycled_buffer() {
    loom::model(|| {
        // One spare entry, two one-record buffers: X gets r0, Y gets r1 and X is pushed; the spare
        // and the pool are empty, X (holding r0) is queued.
        let m = Model::new(1, 2, 1);
        assert!(produce(&m.core, 0, 0));
        m.core.refill_spares();
        assert!(produce(&m.core, 0, 1));
        let core = m.core.clone();
        let owner = thread::spawn(move || produce(&core, 0, 2));
        recorder_drain(&m.core, &m.l);
        let wrote = owner.join().unwrap();
        let attempted = [0, 1, 2];
        check_exact(&m, &attempted);
        check_order(&m);
        let g = m.l.lock().unwrap();
        assert_eq!(g.out.len(), 2 + usize::from(wrote));
    });
}

/// Interleaving 5: two owners push on the full queue while the drainer swaps the head; every pushed
/// buffer is drained exactly once.
#[test]
fn two_producers_on_full_queue() {
    loom::model(|| {
        let m = Model::new(2, 4, 1);
        assert!(produce(&m.core, 0, 1));
        assert!(produce(&m.core, 1, 11));
        m.core.refill_spares();
        let c0 = m.core.clone();
        let o0 = thread::spawn(move || assert!(produce(&c0, 0, 2)));
        let c1 = m.core.clone();
        let o1 = thread::spawn(move || assert!(produce(&c1, 1, 12)));
        recorder_drain(&m.core, &m.l);
        o0.join().unwrap();
        o1.join().unwrap();
        check_exact(&m, &[1, 2, 11, 12]);
        check_order(&m);
        assert_eq!(m.l.lock().unwrap().out.len(), 4);
    });
}

/// Interleaving 6: thread exit vs flusher. The owner writes, then retires its slot (active and spare go to
/// the full queue) while the flusher is mid-pass; exactly once, and after the final drain the slot
/// is FREE and every buffer is back in the pool.
#[test]
fn thread_exit_vs_flusher() {
    loom::model(|| {
        let m = Model::new(1, 2, 2);
        let core = m.core.clone();
        let owner = thread::spawn(move || {
            assert!(produce(&core, 0, 1));
            let _ = core.retire_slot(core.slot(0).unwrap());
        });
        let (core, l) = (m.core.clone(), m.l.clone());
        let flusher = thread::spawn(move || flush(&core, &l));
        owner.join().unwrap();
        flusher.join().unwrap();
        check_exact(&m, &[1]);
        let g = m.l.lock().unwrap();
        assert_eq!(g.out.len(), 1);
        assert_eq!(m.slot(0).state(), SLOT_FREE, "reaped");
        assert_eq!(m.core.free_buffers(), 2, "all buffers recycled");
    });
}

/// Interleaving 9: wakeup. The owner rotates (push + set `recorder_pending` + post) and then exits (push +
/// post) while the recorder alternates between `take_pending` and sleeping on the post counter
/// (the eventfd). If a wakeup could be lost, the recorder would sleep forever with buffers queued
/// and loom would report the livelock.
#[test]
fn no_lost_wakeup() {
    loom::model(|| {
        let m = Model::new(1, 3, 1);
        assert!(produce(&m.core, 0, 0));
        m.core.refill_spares();
        m.core.take_pending();
        let core = m.core.clone();
        let owner = thread::spawn(move || {
            assert!(produce(&core, 0, 1)); // rotation: pushes the buffer holding r0
            let _ = core.retire_slot(core.slot(0).unwrap()); // pushes the buffer holding r1
        });
        loop {
            let posted = m.core.wakeups();
            if m.core.take_pending() {
                recorder_drain(&m.core, &m.l);
            }
            if m.l.lock().unwrap().out.len() == 2 {
                break;
            }
            while m.core.wakeups() == posted {
                thread::yield_now(); // asleep in ppoll on the eventfd
            }
        }
        owner.join().unwrap();
        check_exact(&m, &[0, 1]);
    });
}
