//! loom models of the event-buffer protocol (src/buffer.rs, invariants E1–E4) and of the shared
//! stack trie (src/stack.rs), run against the shipped code.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use recorder::__loom::{EventBuffer, StackKey, StackTable};

/// The L holder's output: every byte it copied, in order.
fn drain_into(buffer: &EventBuffer, out: &Mutex<Vec<u8>>) {
    let mut out = out.lock().unwrap();
    buffer.drain(|bytes| out.extend_from_slice(bytes));
}

/// Owner appends two records while the flusher drains concurrently (E1–E3): every byte is copied
/// exactly once, in order, and never before it was published.
#[test]
fn commit_vs_flush_copies_every_record_exactly_once() {
    loom::model(|| {
        let buffer = Arc::new(EventBuffer::new(8, 1));
        let out = Arc::new(Mutex::new(Vec::new()));
        let owner = {
            let buffer = buffer.clone();
            thread::spawn(move || {
                assert!(buffer.append(&[1, 2, 3]));
                assert!(buffer.append(&[4, 5]));
            })
        };
        drain_into(&buffer, &out);
        drain_into(&buffer, &out);
        owner.join().unwrap();
        drain_into(&buffer, &out);
        assert_eq!(*out.lock().unwrap(), [1, 2, 3, 4, 5]);
        assert!(buffer.is_drained());
    });
}

/// Thread exit vs flusher (E4): the owner appends and retires; a flusher that sees the buffer
/// retired and drained may drop it, and by then it has copied everything.
#[test]
fn retired_and_drained_means_nothing_is_left() {
    loom::model(|| {
        let buffer = Arc::new(EventBuffer::new(4, 1));
        let out = Arc::new(Mutex::new(Vec::new()));
        let owner = {
            let buffer = buffer.clone();
            thread::spawn(move || {
                assert!(buffer.append(&[7, 8]));
                buffer.retire();
            })
        };
        let flusher = {
            let (buffer, out) = (buffer.clone(), out.clone());
            thread::spawn(move || {
                drain_into(&buffer, &out);
                if buffer.is_retired() {
                    drain_into(&buffer, &out);
                    // The flusher would drop the buffer now: nothing may be missing.
                    assert!(buffer.is_drained());
                    assert_eq!(*out.lock().unwrap(), [7, 8]);
                }
            })
        };
        owner.join().unwrap();
        flusher.join().unwrap();
        drain_into(&buffer, &out);
        assert_eq!(*out.lock().unwrap(), [7, 8]);
    });
}

/// Two threads intern stacks that share a prefix at the same time; each key expands to exactly
/// its own frames, whichever thread created the shared nodes (BUSY slots are skipped, never
/// waited on).
#[test]
fn concurrent_interning_expands_to_the_right_frames() {
    loom::model(|| {
        let table = Arc::new(StackTable::new(8));
        let other = {
            let table = table.clone();
            thread::spawn(move || table.intern(&[3, 1], false))
        };
        let mine = table.intern(&[2, 1], false);
        let theirs = other.join().unwrap();
        let expand = |k: StackKey| {
            let mut v = Vec::new();
            assert!(table.expand(k, &mut v));
            v
        };
        assert_eq!(expand(mine), [2, 1]);
        assert_eq!(expand(theirs), [3, 1]);
        assert_ne!(mine, theirs);
    });
}
