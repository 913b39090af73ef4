//! loom models of a slot's life beyond one owner (docs/sampler-protocol.md §6, I13, I14),
//! on the shipped `Core`:
//! - retirement on behalf of a thread (discovery) racing that thread's own handler: the gate
//!   (I13) makes the retirer wait until no handler is admitted, so nothing is written twice, lost
//!   uncounted or recycled under a writer;
//! - a stale handler (a signal of the slot's previous thread) racing the slot's reap and its claim
//!   by a new thread: it is never admitted to the new thread's slot;
//! - a thread registering itself (claim + `fill_spares` from the pool, without L) racing an L
//!   holder that recycles, refills and reaps (I4, I14).
#![cfg(loom)]

mod common;

use common::*;
use loom::thread;
use recorder::__loom::buffer::{StackBounds, SLOT_FREE};

/// The L holder's side of a retirement on behalf of a thread (discovery proved it dead, or so it
/// believes): retry while a handler is admitted, as discovery does on its next round, then the
/// recorder's pass that processes and reaps.
fn retire_on_behalf_then_drain(m_core: &recorder::__loom::buffer::Core, l: &loom::sync::Mutex<Chunk>) {
    let slot = m_core.slot(0).unwrap();
    while m_core.retire_on_behalf(slot).is_none() {
        thread::yield_now();
    }
    let mut g = l.lock().unwrap();
    let Chunk { locked, out } = &mut *g;
    m_core.drain_full(locked, &mut collect(out));
}

/// The race the gate closes (without it, I6 read 2 vs 1 and a buffer went into the pool twice):
/// discovery retires the slot of a live thread whose handler is
/// writing. With the gate, the retirement waits for the handler; every record is drained once,
/// every sample is accounted for, every buffer is back in the pool once.
fn retire_on_behalf_vs_handler(records: u64) {
    loom::model(move || {
        // One slot, one record per buffer, 4 buffers: r0 makes the first spare active, a refill
        // gives it another, so r1 rotates (spare in, old buffer pushed).
        let m = Model::new(1, 4, 1);
        assert!(produce(&m.core, 0, 0));
        m.core.refill_spares();
        let core = m.core.clone();
        let owner = thread::spawn(move || {
            for id in 1..=records {
                produce(&core, 0, id);
            }
        });
        let (core, l) = (m.core.clone(), m.l.clone());
        let retirer = thread::spawn(move || retire_on_behalf_then_drain(&core, &l));
        owner.join().unwrap();
        retirer.join().unwrap();
        let attempted: Vec<u64> = (0..=records).collect();
        check_exact(&m, &attempted);
        check_order(&m);
        assert_eq!(m.slot(0).state(), SLOT_FREE, "reaped");
        check_pool(&m);
    });
}

#[test]
fn retire_on_behalf_vs_handler_one_record() {
    retire_on_behalf_vs_handler(1);
}

#[test]
fn retire_on_behalf_vs_handler_two_records() {
    retire_on_behalf_vs_handler(2);
}

/// A signal of thread A arrives after A's slot was retired (A's own exit), reaped by an L holder
/// and claimed by thread B, which writes. The stale handler reads the slot's gate and tid: it must
/// see B's tid whenever it sees the gate open (the claim's Release store; `claim_relaxed` breaks
/// it) and so never write into B's buffers. A's stale sample is never written; B's records come
/// out once, in order (one of them may be counted lost if the stale handler held the gate at that
/// instant: the handler never waits).
#[test]
fn stale_handler_vs_reap_and_claim() {
    loom::model(|| {
        let m = Model::new(1, 4, 1);
        let a = TID_BASE;
        let b = TID_BASE + 7;
        // A writes r0 and exits; the recorder drains and reaps the slot.
        assert!(produce(&m.core, 0, 0));
        let _ = m.core.retire_slot(m.slot(0));
        recorder_drain(&m.core, &m.l);
        assert_eq!(m.slot(0).state(), SLOT_FREE);
        let core = m.core.clone();
        let stale = thread::spawn(move || {
            // A's late signal, carrying the old slot index.
            assert!(!produce_as(&core, 0, a, 5), "a stale signal was admitted to another thread's slot");
        });
        let core = m.core.clone();
        let owner_b = thread::spawn(move || {
            // B registers (claim + spares from the pool) and its handler writes.
            let slot = core.claim_slot(b, StackBounds::default()).expect("the reaped slot");
            core.fill_spares(slot);
            [produce_as(&core, 0, b, 1), produce_as(&core, 0, b, 2)]
        });
        stale.join().unwrap();
        let wrote = owner_b.join().unwrap();
        final_drain(&m.core, &m.l);
        let g = m.l.lock().unwrap();
        let ids: Vec<u64> = g.out.iter().map(|&(id, _)| id).collect();
        let want: Vec<u64> = [(true, 0), (wrote[0], 1), (wrote[1], 2)].iter().filter(|w| w.0).map(|w| w.1).collect();
        assert_eq!(ids, want, "A's r0, then B's written records once, in order; never the stale one");
        drop(g);
        let (taken, written, lost) = m.core.retired_totals();
        assert_eq!(written, want.len() as u64);
        assert_eq!(taken, written + lost, "I6");
        assert_eq!(m.core.free_buffers(), 4, "every buffer back in the pool once");
    });
}

/// A thread registers itself while an L holder drains: it claims a slot and takes its spares
/// from the pool under the pool lock (no L), while the L holder recycles a buffer into the pool,
/// refills spares and reaps another thread's retired slot (whose spares go back to the pool under
/// the same lock, I14). No buffer ends up in two places; every record once.
#[test]
fn registration_fills_spares_while_an_l_holder_recycles_and_reaps() {
    loom::model(|| {
        // One slot: a thread that wrote r0 and exits; the registrant gets the slot once the L
        // holder has reaped it. 4 buffers of two records (the registrant's two fit its spare).
        let m = Model::new(1, 4, 2);
        assert!(produce(&m.core, 0, 0));
        let _ = m.core.retire_slot(m.slot(0));
        let registrant = {
            let core = m.core.clone();
            thread::spawn(move || {
                let b = TID_BASE + 9;
                // The exited thread's slot is reaped concurrently; the claim takes it once FREE,
                // else there is no free slot yet and the registration fails.
                let Some(slot) = core.claim_slot(b, StackBounds::default()) else {
                    return false;
                };
                core.fill_spares(slot);
                assert!(produce_as(&core, 0, b, 1));
                assert!(produce_as(&core, 0, b, 2));
                true
            })
        };
        recorder_drain(&m.core, &m.l);
        let registered = registrant.join().unwrap();
        final_drain(&m.core, &m.l);
        let g = m.l.lock().unwrap();
        let ids: Vec<u64> = g.out.iter().map(|&(id, _)| id).collect();
        let want: Vec<u64> = if registered { vec![0, 1, 2] } else { vec![0] };
        assert_eq!(ids, want, "every record once, in order");
        drop(g);
        assert_eq!(m.core.free_buffers(), 4, "every buffer back in the pool once");
    });
}
