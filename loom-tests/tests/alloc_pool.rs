//! loom models of the allocation-sample protocols (`src/alloc/pool.rs`), run against the shipped
//! code: the record pool (claim / write / commit by hooks on any thread, drain by L holders),
//! the live table (insert by the sampling hook, clear by a free on another thread, liveness
//! asked by an L holder) and the gate that lets a recording free the hook's state.
//!
//! Each "hook" is a loom thread; a signal handler nested in a hook is one more producer with its
//! own claim (the protocol has no per-thread state), so two producer threads cover it.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use recorder::__loom::alloc_pool::{Gate, LiveTable, Pool, PoolDrain, SEQ_WORD};

/// Words per record in the models: the sequence number and two payload words.
const WORDS: usize = 3;

/// A hook's record: seq, then `seq * 10`, `seq * 10 + 1`. Returns whether it was committed.
fn produce(pool: &Pool, hint: usize, seq: u64) -> bool {
    let Some(mut c) = pool.claim(hint) else { return false };
    c.write(SEQ_WORD, seq);
    c.write(1, seq * 10);
    c.write(2, seq * 10 + 1);
    c.commit();
    true
}

/// An L holder's drain: checks each record is whole, collects its seq.
fn drain(pool: &Pool, l: &Mutex<(PoolDrain, Vec<u64>)>) {
    let mut g = l.lock().unwrap();
    let (d, out) = &mut *g;
    pool.drain(d, &mut |words| {
        let seq = words[SEQ_WORD];
        assert_eq!(words[1], seq * 10, "a torn record");
        assert_eq!(words[2], seq * 10 + 1, "a torn record");
        out.push(seq);
    });
}

/// Two hooks commit while an L holder drains twice; a last drain under L collects the rest.
/// Every committed record is drained exactly once and whole; a hook that found no free record
/// (two records for three samples) is the only way a sample is missing.
#[test]
fn commits_vs_drains_exactly_once() {
    loom::model(|| {
        let pool = Arc::new(Pool::new(2, WORDS, 0));
        let l = Arc::new(Mutex::new((PoolDrain::default(), Vec::new())));
        let p1 = {
            let pool = pool.clone();
            thread::spawn(move || [produce(&pool, 0, 1), produce(&pool, 0, 2)])
        };
        let p2 = {
            let pool = pool.clone();
            thread::spawn(move || [produce(&pool, 1, 3)])
        };
        let flusher = {
            let (pool, l) = (pool.clone(), l.clone());
            thread::spawn(move || {
                drain(&pool, &l);
                drain(&pool, &l);
            })
        };
        let c1 = p1.join().unwrap();
        let c2 = p2.join().unwrap();
        flusher.join().unwrap();
        drain(&pool, &l);
        let mut committed: Vec<u64> =
            [(1, c1[0]), (2, c1[1]), (3, c2[0])].iter().filter(|c| c.1).map(|c| c.0).collect();
        let mut out = l.lock().unwrap().1.clone();
        out.sort_unstable();
        committed.sort_unstable();
        assert_eq!(out, committed, "drained exactly the committed records");
    });
}

/// Base and reserve (P6): one record of base and two of reserve for three samples on two hooks,
/// while an L holder drains. No sample is lost (a full base sends a hook to the reserve), and
/// every one is drained exactly once and whole: a record claimed in the reserve lies below the
/// `high` of every drain its commit happens before (the last drain, after the joins, sees all).
#[test]
fn a_full_base_overflows_into_the_reserve_and_every_record_is_drained() {
    loom::model(|| {
        let pool = Arc::new(Pool::new(1, WORDS, 2));
        let l = Arc::new(Mutex::new((PoolDrain::default(), Vec::new())));
        let p1 = {
            let pool = pool.clone();
            thread::spawn(move || [produce(&pool, 0, 1), produce(&pool, 0, 2)])
        };
        let p2 = {
            let pool = pool.clone();
            thread::spawn(move || produce(&pool, 0, 3))
        };
        let flusher = {
            let (pool, l) = (pool.clone(), l.clone());
            thread::spawn(move || drain(&pool, &l))
        };
        let c1 = p1.join().unwrap();
        let c2 = p2.join().unwrap();
        flusher.join().unwrap();
        assert!(c1[0] && c1[1] && c2, "a sample lost with a free record in the reserve: {c1:?} {c2}");
        drain(&pool, &l);
        let mut out = l.lock().unwrap().1.clone();
        out.sort_unstable();
        assert_eq!(out, vec![1, 2, 3], "drained exactly the committed records");
    });
}

/// P4: a drain frees a record while a hook claims it: the hook's writes never race with the
/// drainer's reads (loom's cells would flag it), and the new record is drained later, whole.
#[test]
fn reuse_after_drain() {
    loom::model(|| {
        let pool = Arc::new(Pool::new(1, WORDS, 0));
        let l = Arc::new(Mutex::new((PoolDrain::default(), Vec::new())));
        assert!(produce(&pool, 0, 1));
        let hook = {
            let pool = pool.clone();
            thread::spawn(move || produce(&pool, 0, 2))
        };
        drain(&pool, &l);
        let second = hook.join().unwrap();
        drain(&pool, &l);
        let out = l.lock().unwrap().1.clone();
        if second {
            assert_eq!(out, vec![1, 2]);
        } else {
            assert_eq!(out, vec![1], "a full pool loses the sample (counted by the hook), nothing else");
        }
    });
}

/// A claimed record that is dropped without a commit (the allocation failed) goes back FREE and
/// is never drained.
#[test]
fn cancelled_claim_is_never_drained() {
    loom::model(|| {
        let pool = Arc::new(Pool::new(1, WORDS, 0));
        let l = Arc::new(Mutex::new((PoolDrain::default(), Vec::new())));
        let hook = {
            let pool = pool.clone();
            thread::spawn(move || {
                if let Some(mut c) = pool.claim(0) {
                    c.write(SEQ_WORD, 9);
                    drop(c);
                }
                produce(&pool, 0, 1)
            })
        };
        drain(&pool, &l);
        assert!(hook.join().unwrap(), "the cancelled record was free again");
        drain(&pool, &l);
        assert_eq!(l.lock().unwrap().1, vec![1]);
    });
}

/// The gate: a hook enters and reads the published state while the recording closes the gate
/// and then destroys the state (a write loom checks against the hook's read). Either the hook
/// saw nothing, or its read happened before the destruction.
#[test]
fn gate_close_waits_for_hooks() {
    loom::model(|| {
        let gate: Arc<Gate<loom::cell::UnsafeCell<u64>>> = Arc::new(Gate::new());
        let state = Box::into_raw(Box::new(loom::cell::UnsafeCell::new(7u64)));
        gate.open(state);
        let hook = {
            let gate = gate.clone();
            thread::spawn(move || {
                let entered = gate.enter();
                // SAFETY (model): the gate keeps the state alive while `entered` lives.
                entered.get().map(|cell| cell.with(|p| unsafe { *p }))
            })
        };
        let closed = gate.close();
        assert_eq!(closed, state);
        // Destroy: a write that races with any read the gate failed to wait for.
        // SAFETY (model): `close` returned: no hook uses the state.
        unsafe { (*closed).with_mut(|p| *p = 0) };
        let seen = hook.join().unwrap();
        assert!(seen.is_none() || seen == Some(7), "{seen:?}");
        // SAFETY (model): allocated above, unpublished.
        drop(unsafe { Box::from_raw(closed) });
    });
}

/// Live table: the sampling hook inserts a block and commits its reference; another thread
/// frees the block and a new block is sampled at the same address; the L holder's liveness
/// check of the first reference is false once the free happened, and never mistakes the second
/// block for the first (the tag).
#[test]
fn live_table_free_and_reuse() {
    loom::model(|| {
        let table = Arc::new(LiveTable::new(8));
        let first = table.insert(0x1000, 1).expect("room");
        assert!(table.is_live(first));
        let freer = {
            let table = table.clone();
            thread::spawn(move || {
                table.free(0x1000);
                table.insert(0x1000, 2)
            })
        };
        let seen_live = table.is_live(first);
        let second = freer.join().unwrap().expect("room");
        assert!(!table.is_live(first), "freed, and the entry's tag is the new block's");
        assert!(table.is_live(second));
        assert_ne!(first.word, second.word);
        // A check racing with the free may see the block live (it was, a moment ago), never a
        // block that is not `first`.
        let _ = seen_live;
    });
}

/// Live table with headers: the free names the entry (`free_at`) while an L holder clears the
/// table (a recording stopped) and a new recording's sample takes the entry: the free never
/// clears the new block's entry (the address differs).
#[test]
fn free_at_never_clears_another_block() {
    loom::model(|| {
        let table = Arc::new(LiveTable::new(8));
        let old = table.insert(0x2000, 1).expect("room");
        let freer = {
            let table = table.clone();
            thread::spawn(move || table.free_at(old.index, 0x2000))
        };
        table.clear();
        let new = table.insert(0x3000, 2).expect("room");
        freer.join().unwrap();
        assert!(table.is_live(new), "the free of another address left the new entry alone");
        assert!(!table.is_live(old));
    });
}
