//! loom models of the tracing layer's span table (`src/tracing/live.rs`), run against the shipped
//! code: a span's creation publishes its slot (one compare-and-swap into a free bucket of its
//! group, or the locked overflow map when the group is full), a lookup on another thread finds it
//! through its own cache or the group, a close empties the bucket and recycles the slot, and a
//! stale cache entry never passes for a live span.
//!
//! Under loom the table has 2 groups of 2 buckets, so three spans of one group fill it. The
//! payload (`SpanData`) is the models' own; the table never looks into it. `tracing` orders a
//! span's uses before its close (the registry's reference count) and hands a span to another
//! thread through its own synchronization: the models stand for both with a flag (Release /
//! Acquire), never with a lock the shipped code does not take.
//!
//! A thread that frees a slot keeps it (its free list goes back to the table when it exits), so
//! the models' main thread only looks: loom ends an execution's statics before the main thread's
//! thread-locals, and those would then give their slots back to a table that is gone.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use recorder::__loom::span_table::{find, insert, remove, update};
use recorder::__loom::SpanData;

/// The models' layer key: with it, a span's group is its id's lowest bit, so even ids share
/// group 0 (and its 2 buckets).
const LAYER: u32 = 0;

fn data(start: i64) -> SpanData {
    SpanData { start, ..SpanData::default() }
}

fn wait(flag: &AtomicBool) {
    // Acquire: pairs with the Release store of the thread that hands the span over.
    while !flag.load(Ordering::Acquire) {
        thread::yield_now();
    }
}

/// A span created on one thread is looked up and recorded on (`on_record`) another at any
/// moment: the lookup finds it whole or not at all (never a slot whose serial or function is
/// not yet the span's), and the record sees the creation's data (a data race on the payload
/// fails the model). The close on a third place returns what was recorded.
#[test]
fn publication_vs_lookup_and_record() {
    loom::model(|| {
        let creator = thread::spawn(|| insert(LAYER, 2, 101, 7, data(11)));
        let other = thread::spawn(|| {
            let Some((slot, serial)) = find(LAYER, 2) else { return false };
            assert_eq!((serial, slot.func()), (101, 7), "a span found before its slot was whole");
            update(LAYER, 2, |d| {
                assert_eq!(d.start, 11, "the creation's data is not visible to the record");
                d.start += 1;
                d.fields.push_str("x=1");
            });
            true
        });
        creator.join().unwrap();
        let recorded = other.join().unwrap();
        thread::spawn(move || {
            let (serial, closed, _) = remove(LAYER, 2).expect("the span was published");
            assert_eq!(serial, 101);
            assert_eq!((closed.start, closed.fields.as_str()), if recorded { (12, "x=1") } else { (11, "") });
        })
        .join()
        .unwrap();
        assert!(find(LAYER, 2).is_none(), "a closed span is still found");
    });
}

/// Three spans of one group (2 buckets) are created on two threads, one of them closed at once,
/// while buckets are taken and emptied: whichever span lands in the overflow map, every span is
/// found from another thread under its own serial and data until its close, closed once, and
/// nothing is found after.
#[test]
fn a_full_group_overflows_without_losing_a_span() {
    loom::model(|| {
        let a = thread::spawn(|| {
            insert(LAYER, 2, 201, 1, data(2));
            insert(LAYER, 4, 202, 2, data(4));
        });
        let b = thread::spawn(|| {
            insert(LAYER, 6, 203, 3, data(6));
            let (serial, closed, _) = remove(LAYER, 6).expect("a span created here");
            assert_eq!((serial, closed.start), (203, 6));
        });
        a.join().unwrap();
        b.join().unwrap();
        // Another thread: no cache entry, so the group and the map are read.
        let checker = thread::spawn(|| {
            for (id, serial, func) in [(2, 201, 1), (4, 202, 2)] {
                let (slot, found) = find(LAYER, id).unwrap_or_else(|| panic!("span {id} lost"));
                assert_eq!((found, slot.func()), (serial, func), "span {id}");
            }
            assert!(find(LAYER, 6).is_none(), "a closed span is still found");
            for (id, serial) in [(4, 202), (2, 201)] {
                let (found, closed, _) = remove(LAYER, id).unwrap_or_else(|| panic!("span {id} not removed"));
                assert_eq!((found, closed.start), (serial, id as i64));
            }
        });
        checker.join().unwrap();
        for id in [2, 4, 6] {
            assert!(find(LAYER, id).is_none(), "span {id} is found after its close");
            assert!(remove(LAYER, id).is_none(), "span {id} closed twice");
        }
    });
}

/// A thread caches span 2; the span closes on another thread, whose next span gets the same id
/// and, from that thread's free list, the same slot; meanwhile a third thread churns the same
/// group. The first thread's stale cache entry must not pass for the new span: it finds the new
/// span's serial, function and entered time, never the old one's.
#[test]
fn a_stale_cache_entry_never_passes_for_the_span_that_reuses_its_id_and_slot() {
    loom::model(|| {
        let created = Arc::new(AtomicBool::new(false));
        let used = Arc::new(AtomicBool::new(false));
        let reused = Arc::new(AtomicBool::new(false));
        let user = {
            let (created, used, reused) = (created.clone(), used.clone(), reused.clone());
            thread::spawn(move || {
                wait(&created);
                let (slot, serial) = find(LAYER, 2).expect("an open span");
                assert_eq!((serial, slot.func()), (301, 1));
                slot.add_active(5);
                // Release: the registry's reference count orders this use before the close.
                used.store(true, Ordering::Release);
                wait(&reused);
                let (slot, serial) = find(LAYER, 2).expect("the new span with the id");
                assert_eq!((serial, slot.func()), (302, 2), "a stale cache entry passed for the new span");
                slot.add_active(7);
                let (serial, closed, active) = remove(LAYER, 2).expect("the new span");
                assert_eq!((serial, closed.start, active), (302, 2, 7));
            })
        };
        let closer = {
            let (created, used, reused) = (created.clone(), used.clone(), reused.clone());
            thread::spawn(move || {
                insert(LAYER, 2, 301, 1, data(1));
                // Release: tracing hands the span to the user thread.
                created.store(true, Ordering::Release);
                wait(&used);
                let (serial, closed, active) = remove(LAYER, 2).expect("the open span");
                assert_eq!((serial, closed.start, active), (301, 1, 5));
                // The slot just freed is this thread's next.
                insert(LAYER, 2, 302, 2, data(2));
                // Release: as above.
                reused.store(true, Ordering::Release);
            })
        };
        let churn = thread::spawn(|| {
            insert(LAYER, 4, 303, 3, data(4));
            let (serial, _, _) = remove(LAYER, 4).expect("a span created here");
            assert_eq!(serial, 303);
        });
        user.join().unwrap();
        closer.join().unwrap();
        churn.join().unwrap();
        for id in [2, 4] {
            assert!(find(LAYER, id).is_none(), "span {id} is found after its close");
        }
    });
}
