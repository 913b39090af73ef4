//! Entering and leaving scopes and spans allocates nothing once their paths exist: a
//! counting global allocator counts this thread's allocations.
#![cfg(feature = "tracing")]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tracing_subscriber::layer::SubscriberExt;

thread_local! {
    /// Allocations of this thread (const, no destructor: safe to touch from the allocator).
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards to the system allocator; the counting allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn nested(depth: u32) {
    recorder::scope!("nested");
    if depth > 0 {
        nested(depth - 1);
    }
}

#[test]
fn scope_and_span_enter_exit_allocate_nothing() {
    let _serial = common::serial();
    // Either scope clock: the exact one only reads the clock more.
    for clock in [recorder::scope::ScopeClock::Calibrated, recorder::scope::ScopeClock::Exact] {
        enter_exit_allocate_nothing(clock);
    }
}

fn enter_exit_allocate_nothing(clock: recorder::scope::ScopeClock) {
    let dir = tempfile::tempdir().unwrap();
    let rec = recorder::Recorder::builder().repository(dir.path()).no_sampling().scope_clock(clock).start().unwrap();
    let subscriber = tracing_subscriber::registry().with(recorder::tracing::RecorderLayer::new());
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("long_lived");
        // First entries create the paths (and the thread's tree, frames and span word).
        for _ in 0..2 {
            nested(200);
            let _e = span.enter();
            nested(3);
            recorder::scope!("inside");
        }
        let before = allocations();
        for _ in 0..10_000 {
            nested(20);
            let _e = span.enter();
            recorder::scope!("inside");
        }
        let after = allocations();
        assert_eq!(after - before, 0, "allocations while entering and leaving existing paths");
    });
    let report = rec.scope_report();
    rec.stop().unwrap();
    assert_eq!(report.find(&["long_lived", "inside"]).map(|n| n.calls), Some(10_002));
}
