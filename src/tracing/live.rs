//! The open spans the layer follows: what it keeps of each, found from `tracing`'s span id on
//! whichever thread asks.
//!
//! Why not the registry's extensions: inserting one allocates, and every lookup takes the
//! registry's slot reference and the extensions' read lock, four atomic read-modify-writes per
//! callback; they were two thirds of the layer's cost. Here a span's state lives in a [`Slot`]
//! that is never freed (slots are recycled through per-thread free lists), found through a
//! per-thread cache whose hits read plain words. Behind the cache, a table of groups of eight
//! buckets: a span's creation publishes its slot with one compare-and-swap into a free bucket of
//! its key's group, its close empties that bucket with a plain store, and a lookup that missed the
//! cache (a span that moved to another thread) reads the group's eight buckets. A group that is
//! full sends the span to a locked map instead.
//!
//! A cached slot is valid while its `serial` is the span's: a slot freed at close gets serial 0
//! before `tracing` can hand the span's id to a new span (the registry frees the id after
//! `on_close` returns), and serials are never reused, so a stale entry can never pass for a live
//! span, even one that reuses the id and the slot.
//!
//! Its atomics, cells and locks come from `crate::sync`, so that the loom models
//! (`loom-tests/tests/span_table.rs`) run this code; under them the table is small (2 groups of
//! 2), so that a few spans fill a group.

use super::SpanData;
use crate::hash::BuildWordHasher;
use crate::sync::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, UnsafeCell};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

/// The table's locks: fork-safe (the atfork handlers hold them across `fork`), or loom's under
/// the models.
#[cfg(not(loom))]
type Lock<T> = crate::fork::ForkSafeMutex<T>;
#[cfg(loom)]
type Lock<T> = crate::sync::Mutex<T>;

/// One open span's state.
pub struct Slot {
    /// The span's key (written before the slot is published, while it is free).
    layer: AtomicU32,
    id: AtomicU64,
    /// The span's process-unique id while the slot holds it; 0 while the slot is free.
    serial: AtomicU64,
    /// Its name's function index (scopes).
    func: AtomicU32,
    /// Ticks it was entered so far, summed over its entries.
    active: AtomicI64,
    /// Written by the creating thread before the slot is published, changed by `on_record`
    /// under the table's `record` lock, taken at close: `tracing` closes a span once every
    /// handle of it is gone, so after every `on_record` (the registry's reference count orders
    /// them).
    data: UnsafeCell<SpanData>,
}

// SAFETY: `data` is only touched as its comment says; the rest are atomics.
unsafe impl Sync for Slot {}

impl Slot {
    fn new() -> Slot {
        Slot {
            layer: AtomicU32::new(0),
            id: AtomicU64::new(0),
            serial: AtomicU64::new(0),
            func: AtomicU32::new(0),
            active: AtomicI64::new(0),
            data: UnsafeCell::new(SpanData::default()),
        }
    }

    /// The span's id (0: the slot was freed since).
    pub fn serial(&self) -> u64 {
        // Acquire: pairs with the Release stores in `insert` and `remove`.
        self.serial.load(Ordering::Acquire)
    }

    /// The function index of the span's name (its scopes').
    pub fn func(&self) -> u32 {
        // Relaxed: written before the slot was published (the publication's Release orders it).
        self.func.load(Ordering::Relaxed)
    }

    /// Adds `ticks` of entered time.
    pub fn add_active(&self, ticks: i64) {
        if ticks > 0 {
            // Relaxed (both): a sum read at close, after the last exit. Not a read-modify-write:
            // exits of one span on two threads at the same instant may lose one entry's time
            // (the layer's cost matters more than that rare precision).
            self.active.store(self.active.load(Ordering::Relaxed) + ticks, Ordering::Relaxed);
        }
    }

    fn key(&self) -> Key {
        // Relaxed (both): written before the slot was published; see `Slot::layer`.
        Key { layer: self.layer.load(Ordering::Relaxed), id: self.id.load(Ordering::Relaxed) }
    }
}

/// A span by (layer, tracing's id): a layer's ids are its registry's, and two registries hand
/// out the same ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    layer: u32,
    id: u64,
}

impl Key {
    /// Its place in a table of `n` (a power of two): the id's low bits, where the registry's
    /// ids keep a span's slab index (a generation count is in their high bits), so a loop that
    /// makes one span after another keeps using the same cache lines.
    fn place(self, n: usize) -> usize {
        (self.id as usize ^ (self.layer as usize).wrapping_mul(0x9e37)) & (n - 1)
    }
}

#[cfg(not(loom))]
const GROUPS: usize = 1024;
#[cfg(not(loom))]
const WAYS: usize = 8;
#[cfg(loom)]
const GROUPS: usize = 2;
#[cfg(loom)]
const WAYS: usize = 2;
const _: () = assert!(GROUPS.is_power_of_two() && CACHE_SIZE.is_power_of_two());

/// A group's buckets, on one cache line (eight; two under loom).
#[repr(align(64))]
struct Group([AtomicPtr<Slot>; WAYS]);

type Overflow = HashMap<Key, &'static Slot, BuildWordHasher>;

/// Where the open spans are, and the locks of the slow paths.
struct Table {
    groups: [Group; GROUPS],
    /// Spans whose group was full.
    overflow: Lock<Option<Overflow>>,
    /// Spans in `overflow`, read without its lock: a lookup that finds 0 has nothing to look for
    /// there (a span's insert happened before any legitimate lookup of it).
    overflowed: AtomicUsize,
    /// Serializes `on_record`s (they change a span's data; rare).
    record: Lock<()>,
    /// Free slots of exited threads, and the surplus of threads that free more than they take.
    pool: Lock<Vec<&'static Slot>>,
}

#[cfg(not(loom))]
static TABLE: Table = Table {
    groups: [const { Group([const { AtomicPtr::new(std::ptr::null_mut()) }; WAYS]) }; GROUPS],
    overflow: Lock::new(None),
    overflowed: AtomicUsize::new(0),
    record: Lock::new(()),
    pool: Lock::new(Vec::new()),
};
/// The table's locks, for the atfork handlers, which hold them across fork.
#[cfg(not(loom))]
pub(crate) static TABLE_RECORD_LOCK: &dyn crate::fork::HeldAcrossFork = &TABLE.record;
#[cfg(not(loom))]
pub(crate) static TABLE_OVERFLOW_LOCK: &dyn crate::fork::HeldAcrossFork = &TABLE.overflow;
#[cfg(not(loom))]
pub(crate) static TABLE_POOL_LOCK: &dyn crate::fork::HeldAcrossFork = &TABLE.pool;

// A new table for each execution of a model.
#[cfg(loom)]
loom::lazy_static! {
    static ref TABLE: Table = Table {
        groups: std::array::from_fn(|_| Group(std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())))),
        overflow: Lock::new(None),
        overflowed: AtomicUsize::new(0),
        record: Lock::new(()),
        pool: Lock::new(Vec::new()),
    };
}

fn group_of(key: Key) -> &'static Group {
    &TABLE.groups[key.place(GROUPS)]
}

/// Slots allocated at once (never freed: a cached pointer may be read at any time).
#[cfg(not(loom))]
const SLOTS_PER_BLOCK: usize = 64;
#[cfg(loom)]
const SLOTS_PER_BLOCK: usize = 2;
/// A thread keeps at most this many free slots; beyond, half go to the pool.
const MAX_LOCAL_FREE: usize = 256;

/// A thread's free slots, back to the pool when it exits.
struct FreeSlots(Vec<&'static Slot>);

impl Drop for FreeSlots {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            TABLE.pool.lock().append(&mut self.0);
        }
    }
}

/// A thread's cached lookup.
#[derive(Clone, Copy)]
struct Cached {
    key: Key,
    slot: *const Slot,
    serial: u64,
}

const CACHE_SIZE: usize = 64;
const NO_ENTRY: Cached = Cached { key: Key { layer: 0, id: 0 }, slot: std::ptr::null(), serial: 0 };

#[cfg(not(loom))]
thread_local! {
    static CACHE: [Cell<Cached>; CACHE_SIZE] = const { [const { Cell::new(NO_ENTRY) }; CACHE_SIZE] };
    static FREE: RefCell<FreeSlots> = const { RefCell::new(FreeSlots(Vec::new())) };
}
#[cfg(loom)]
loom::thread_local! {
    static CACHE: [Cell<Cached>; CACHE_SIZE] = [const { Cell::new(NO_ENTRY) }; CACHE_SIZE];
    static FREE: RefCell<FreeSlots> = RefCell::new(FreeSlots(Vec::new()));
}

fn remember(key: Key, slot: &'static Slot, serial: u64) {
    let _ = CACHE.try_with(|c| c[key.place(CACHE_SIZE)].set(Cached { key, slot, serial }));
}

/// A free slot: this thread's, the pool's, or a new block's.
fn take_slot() -> &'static Slot {
    let local = FREE.try_with(|f| f.try_borrow_mut().ok().and_then(|mut f| f.0.pop())).ok().flatten();
    local.unwrap_or_else(take_slot_slow)
}

#[cold]
fn take_slot_slow() -> &'static Slot {
    let mut pool = TABLE.pool.lock();
    if pool.is_empty() {
        let block: &'static [Slot] = Vec::leak((0..SLOTS_PER_BLOCK).map(|_| Slot::new()).collect());
        pool.extend(block.iter());
    }
    let at = pool.len() - pool.len().min(SLOTS_PER_BLOCK);
    let mut taken = pool.split_off(at);
    drop(pool);
    let slot = taken.pop().expect("a block holds slots");
    let _ = FREE.try_with(|f| {
        if let Ok(mut f) = f.try_borrow_mut() {
            f.0.append(&mut taken);
        }
    });
    if !taken.is_empty() {
        TABLE.pool.lock().append(&mut taken); // a thread that is exiting
    }
    slot
}

fn release_slot(slot: &'static Slot) {
    let kept = FREE
        .try_with(|f| {
            let Ok(mut f) = f.try_borrow_mut() else { return false };
            f.0.push(slot);
            if f.0.len() > MAX_LOCAL_FREE {
                let surplus = f.0.split_off(MAX_LOCAL_FREE / 2);
                TABLE.pool.lock().extend(surplus);
            }
            true
        })
        .unwrap_or(false);
    if !kept {
        TABLE.pool.lock().push(slot);
    }
}

/// Frees a slot that is no longer published anywhere.
fn free(slot: &'static Slot) -> (u64, SpanData, i64) {
    let serial = slot.serial();
    // Release: pairs with the Acquire in `Slot::serial`; a cached entry of this span is stale
    // from now on, before `tracing` can give its id to another span.
    slot.serial.store(0, Ordering::Release);
    // SAFETY: the span closes (no `on_record` can run) or was abandoned; see `Slot::data`.
    let data = slot.data.with_mut(|data| std::mem::take(unsafe { &mut *data }));
    // Relaxed: the last exit came before the close.
    let active = slot.active.load(Ordering::Relaxed);
    release_slot(slot);
    (serial, data, active)
}

/// The ordering of a slot's publication (Release; the mutation weakens it, and the models must
/// catch that).
#[cfg(not(recorder_mutation = "span_publish_relaxed"))]
const PUBLISH: Ordering = Ordering::Release;
#[cfg(recorder_mutation = "span_publish_relaxed")]
const PUBLISH: Ordering = Ordering::Relaxed;

/// Publishes a new span: `serial` its process-unique id. The creating thread's cache has it.
pub fn insert(layer: u32, id: u64, serial: u64, func: u32, data: SpanData) {
    let key = Key { layer, id };
    let slot = take_slot();
    // Relaxed (all): published by the Release compare-and-swap below (or the map's lock).
    slot.layer.store(layer, Ordering::Relaxed);
    slot.id.store(id, Ordering::Relaxed);
    slot.func.store(func, Ordering::Relaxed);
    slot.active.store(0, Ordering::Relaxed);
    slot.serial.store(serial, Ordering::Relaxed);
    // SAFETY: a free slot is this thread's alone until published.
    slot.data.with_mut(|cell| unsafe { *cell = data });
    let group = group_of(key);
    let mut published = false;
    for bucket in &group.0 {
        // Acquire: pairs with the Release of the compare-and-swap that published it.
        let held = bucket.load(Ordering::Acquire);
        if held.is_null() {
            // PUBLISH (Release): publishes the slot's contents to the lookups that load it
            // (Acquire, in `find_slow` and here).
            if !published
                && bucket
                    .compare_exchange(
                        std::ptr::null_mut(),
                        slot as *const Slot as *mut Slot,
                        PUBLISH,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                published = true;
            }
            continue;
        }
        // SAFETY: slots are never freed.
        let other: &'static Slot = unsafe { &*held };
        if !std::ptr::eq(other, slot) && other.key() == key && other.serial() != 0 {
            // The registry reused an id whose close this layer never saw: that span is gone.
            // Release: see `remove`.
            bucket.store(std::ptr::null_mut(), Ordering::Release);
            free(other);
        }
    }
    if !published {
        let mut map = TABLE.overflow.lock();
        let map = map.get_or_insert_with(Overflow::default);
        if let Some(old) = map.insert(key, slot) {
            free(old);
        }
        // Relaxed: see `Table::overflowed`; under the lock, so plain stores cannot race.
        TABLE.overflowed.store(map.len(), Ordering::Relaxed);
    }
    remember(key, slot, serial);
}

/// The slot of span `id` of `layer` and its serial, if the layer follows that span.
#[inline]
pub fn find(layer: u32, id: u64) -> Option<(&'static Slot, u64)> {
    let key = Key { layer, id };
    let hit = CACHE
        .try_with(|c| {
            let e = c[key.place(CACHE_SIZE)].get();
            if e.key != key || e.slot.is_null() {
                return None;
            }
            // SAFETY: slots are never freed.
            let slot: &'static Slot = unsafe { &*e.slot };
            // The mutation drops the check that makes a stale entry harmless (the models must
            // catch it).
            let valid = cfg!(recorder_mutation = "span_cache_unchecked") || slot.serial() == e.serial;
            valid.then_some((slot, e.serial))
        })
        .ok()
        .flatten();
    hit.or_else(|| find_slow(key))
}

#[cold]
fn find_slow(key: Key) -> Option<(&'static Slot, u64)> {
    for bucket in &group_of(key).0 {
        // Acquire: pairs with the Release of the compare-and-swap that published it.
        let held = bucket.load(Ordering::Acquire);
        if held.is_null() {
            continue;
        }
        // SAFETY: slots are never freed.
        let slot: &'static Slot = unsafe { &*held };
        if slot.key() == key {
            let serial = slot.serial();
            if serial != 0 {
                remember(key, slot, serial);
                return Some((slot, serial));
            }
        }
    }
    // Relaxed: see `Table::overflowed`.
    if TABLE.overflowed.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let slot = *TABLE.overflow.lock().as_ref()?.get(&key)?;
    let serial = slot.serial();
    remember(key, slot, serial);
    Some((slot, serial))
}

/// Changes span `id`'s data (`on_record`); nothing if the layer does not follow it.
pub fn update(layer: u32, id: u64, change: impl FnOnce(&mut SpanData)) {
    let Some((slot, _)) = find(layer, id) else { return };
    let _serialized = TABLE.record.lock();
    // SAFETY: the span is open (the caller holds it) and `record` is held; see `Slot::data`.
    slot.data.with_mut(|data| change(unsafe { &mut *data }));
}

/// Span `id` closes: its serial, data and entered ticks, and its slot is free again.
pub fn remove(layer: u32, id: u64) -> Option<(u64, SpanData, i64)> {
    let key = Key { layer, id };
    let (slot, _) = find(layer, id)?;
    let target = slot as *const Slot as *mut Slot;
    // Relaxed: only this close can empty the bucket that holds a live span (an insert writes
    // empty buckets only).
    match group_of(key).0.iter().find(|b| b.load(Ordering::Relaxed) == target) {
        // Release: a slot recycled later is published again by a compare-and-swap.
        Some(bucket) => bucket.store(std::ptr::null_mut(), Ordering::Release),
        None => {
            let mut map = TABLE.overflow.lock();
            if let Some(map) = map.as_mut() {
                map.remove(&key);
                // Relaxed: as in `insert`.
                TABLE.overflowed.store(map.len(), Ordering::Relaxed);
            }
        }
    }
    Some(free(slot))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_freed_slot_reused_under_the_same_id_is_not_found_through_a_stale_cache_entry() {
        let layer = u32::MAX;
        insert(layer, 7, 1001, 3, SpanData::default());
        let (slot, serial) = find(layer, 7).unwrap();
        assert_eq!(serial, 1001);
        assert_eq!(slot.func(), 3);
        // Closed on another thread: this thread's cache still names the slot.
        std::thread::spawn(move || assert_eq!(remove(layer, 7).map(|r| r.0), Some(1001))).join().unwrap();
        assert!(find(layer, 7).is_none());
        // The id comes back for a new span created on another thread (likely in the same slot).
        std::thread::spawn(move || insert(layer, 7, 1002, 4, SpanData::default())).join().unwrap();
        let (slot, serial) = find(layer, 7).unwrap();
        assert_eq!((serial, slot.func()), (1002, 4));
        assert_eq!(remove(layer, 7).map(|r| r.0), Some(1002));
    }

    #[test]
    fn two_layers_keep_the_same_id_apart_and_entered_time_adds_up() {
        insert(u32::MAX - 1, 5, 2001, 0, SpanData { start: 11, ..SpanData::default() });
        insert(u32::MAX - 2, 5, 2002, 0, SpanData { start: 22, ..SpanData::default() });
        find(u32::MAX - 1, 5).unwrap().0.add_active(30);
        find(u32::MAX - 1, 5).unwrap().0.add_active(12);
        let (serial, data, active) = remove(u32::MAX - 1, 5).unwrap();
        assert_eq!((serial, data.start, active), (2001, 11, 42));
        let (serial, data, active) = remove(u32::MAX - 2, 5).unwrap();
        assert_eq!((serial, data.start, active), (2002, 22, 0));
        assert!(remove(u32::MAX - 2, 5).is_none());
    }

    #[test]
    fn a_span_whose_close_was_never_seen_gives_way_to_the_new_span_with_its_id() {
        let layer = u32::MAX - 3;
        insert(layer, 9, 3001, 1, SpanData::default());
        insert(layer, 9, 3002, 2, SpanData::default());
        std::thread::spawn(move || {
            let (slot, serial) = find(layer, 9).unwrap();
            assert_eq!((serial, slot.func()), (3002, 2));
        })
        .join()
        .unwrap();
        assert_eq!(remove(layer, 9).map(|r| r.0), Some(3002));
        assert!(find(layer, 9).is_none());
    }

    /// Far more spans than a group holds, in every group: the rest go to the locked map, and
    /// every one is found from another thread and removed once.
    #[test]
    fn spans_beyond_a_full_group_are_found_and_removed() {
        let layer = u32::MAX - 4;
        let count = (GROUPS * WAYS * 2) as u64;
        for id in 1..=count {
            insert(layer, id, 1_000_000 + id, id as u32, SpanData { start: id as i64, ..SpanData::default() });
        }
        std::thread::spawn(move || {
            for id in 1..=count {
                let (slot, serial) = find(layer, id).unwrap_or_else(|| panic!("span {id} not found"));
                assert_eq!((serial, slot.func()), (1_000_000 + id, id as u32));
            }
            for id in (1..=count).rev() {
                let (serial, data, _) = remove(layer, id).unwrap_or_else(|| panic!("span {id} not removed"));
                assert_eq!((serial, data.start), (1_000_000 + id, id as i64));
            }
        })
        .join()
        .unwrap();
        for id in 1..=count {
            assert!(find(layer, id).is_none(), "span {id} still found");
        }
    }
}
