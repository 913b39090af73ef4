//! The span word of each thread: the id of the `tracing` span it is in, where the SIGPROF handler
//! reads it without a lock. The word is a cell of its own, not a thread-local: the
//! handler reads no thread-local (signal-context rules); the thread's sampler slot points at the
//! cell instead (`ThreadSlot::span`), and the thread writes it with plain stores.
//!
//! Cells are never freed (a handler may hold a slot's pointer at any moment): a thread that exits
//! clears its cell, unhooks it from its slot and returns it to a pool for the next thread, so
//! memory is bounded by the most threads that used spans at once.

use crate::fork::ForkSafeMutex as Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Cells of exited threads, for reuse.
static POOL: Mutex<Vec<&'static AtomicU64>> = Mutex::new(Vec::new());
/// The cell of each thread that has one (by kernel thread id): what a newly claimed sampler
/// slot points at.
static BY_TID: Mutex<Option<HashMap<u32, &'static AtomicU64>>> = Mutex::new(None);
/// [`POOL`] and [`BY_TID`], for the atfork handlers, which hold them across fork (each is held
/// alone).
pub(crate) static POOL_LOCK: &dyn crate::fork::HeldAcrossFork = &POOL;
pub(crate) static BY_TID_LOCK: &dyn crate::fork::HeldAcrossFork = &BY_TID;

/// A cell for thread `tid` (the caller). `attach_to_slot` points the thread's sampler slot, if it
/// has one, at the cell.
pub(crate) fn acquire(tid: u32, attach_to_slot: impl FnOnce(u32, *const AtomicU64)) -> &'static AtomicU64 {
    let cell = POOL.lock().pop().unwrap_or_else(|| Box::leak(Box::new(AtomicU64::new(0))));
    // Relaxed: the cell is published by the map's lock and the slot's Release store.
    cell.store(0, Ordering::Relaxed);
    BY_TID.lock().get_or_insert_with(HashMap::new).insert(tid, cell);
    // After the map: a slot claimed from now on finds the cell there; one claimed before gets it
    // here.
    attach_to_slot(tid, cell);
    cell
}

/// Thread `tid` (the caller) exits: its cell is unhooked and pooled. `attach_to_slot` points the
/// thread's sampler slot, if it has one, at nothing.
pub(crate) fn release(tid: u32, cell: &'static AtomicU64, attach_to_slot: impl FnOnce(u32, *const AtomicU64)) {
    // Relaxed: only this thread writes it; a handler of this thread reads 0 from now on.
    cell.store(0, Ordering::Relaxed);
    if let Some(map) = BY_TID.lock().as_mut() {
        map.remove(&tid);
    }
    // After the map, before the pool: no slot points at the cell when another thread takes it.
    attach_to_slot(tid, std::ptr::null());
    POOL.lock().push(cell);
}

/// The cell of thread `tid`, or null (for a sampler slot being claimed for it).
pub(crate) fn cell_for(tid: u32) -> *const AtomicU64 {
    BY_TID.lock().as_ref().and_then(|m| m.get(&tid)).map_or(std::ptr::null(), |c| *c as *const AtomicU64)
}
