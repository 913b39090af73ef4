//! The commit path: what runs on an application thread when it records an event.
//!
//! Fast path: one atomic load to see whether a recording runs, the type's settings, an optional
//! stack walk and interning (no allocation for a known stack; none at all if it is the thread's
//! previous stack), encoding into a reused per-thread
//! scratch vector, one copy into the thread's event buffer and a Release store. No lock, no wait
//! for the flusher. Slow paths: the thread's first commit in a recording (attach: one short lock to
//! find the recording, a buffer allocation) and a full buffer (retire it, allocate the next within
//! the memory budget, or count the event as lost).

use crate::buffer::EventBuffer;
use crate::event::{put_u64, Event};
use crate::stack::{DepthPolicy, StackTable};
use crate::sync::statics::{AtomicU64, AtomicUsize, Ordering};
use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// Generation of the running recording; 0 when none runs.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The running recording's shared state (for threads attaching to it).
pub(crate) static CURRENT: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

/// What a thread reports about itself to the L holders.
#[derive(Debug, Clone)]
pub(crate) struct ThreadNote {
    pub tid: u32,
    pub name: String,
    pub ticks: i64,
    pub started: bool,
}

/// State shared between committing threads and L holders of one recording.
#[derive(Debug)]
pub(crate) struct Shared {
    pub generation: u64,
    pub stacks: StackTable,
    pub depth: DepthPolicy,
    /// Buffers created by application threads, adopted by the next L holder.
    pub new_buffers: SegQueue<Arc<EventBuffer>>,
    /// Threads that attached (started) or detached (ended).
    pub thread_notes: SegQueue<ThreadNote>,
    /// Threads referenced by `ThreadRef` fields.
    pub thread_refs: SegQueue<u32>,
    pub buffer_bytes: usize,
    pub memory_budget: usize,
    /// Bytes of event buffers alive (adopted or not).
    pub allocated: AtomicUsize,
    pub lost_events: AtomicU64,
    pub lost_bytes: AtomicU64,
    /// Wakes the flusher early when buffers fill up.
    pub wakeup: crate::recorder::Wakeup,
    /// Deterministic mode: the logical clock (every event start and thread change takes the next
    /// value) and the logical thread numbers, instead of real ticks and OS thread ids.
    pub logical: Option<LogicalClock>,
}

/// The counters of deterministic mode.
#[derive(Debug, Default)]
pub(crate) struct LogicalClock {
    /// The next logical tick.
    pub ticks: AtomicU64,
    /// The next logical thread number.
    pub threads: AtomicU64,
}

impl LogicalClock {
    /// Takes the next tick.
    pub(crate) fn tick(&self) -> i64 {
        // Relaxed: a counter; deterministic mode is meant for one committing thread at a time.
        self.ticks.fetch_add(1, Ordering::Relaxed) as i64 + 1
    }
    /// The current tick.
    pub(crate) fn now(&self) -> i64 {
        // Relaxed: as above.
        self.ticks.load(Ordering::Relaxed) as i64
    }
}

impl Shared {
    /// A new buffer of at least `min` bytes within the memory budget, or `None`.
    fn new_buffer(&self, tid: u32, min: usize) -> Option<Arc<EventBuffer>> {
        let size = self.buffer_bytes.max(min);
        // Relaxed: a budget counter; nothing is published through it.
        let mut current = self.allocated.load(Ordering::Relaxed);
        loop {
            if current + size > self.memory_budget {
                return None;
            }
            match self.allocated.compare_exchange_weak(current, current + size, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        let buffer = Arc::new(EventBuffer::new(size, tid));
        self.new_buffers.push(Arc::clone(&buffer));
        Some(buffer)
    }

    fn lose(&self, bytes: usize) {
        // Relaxed: statistics, reported by the flusher.
        self.lost_events.fetch_add(1, Ordering::Relaxed);
        self.lost_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

struct Local {
    generation: u64,
    shared: Option<Arc<Shared>>,
    buffer: Option<Arc<EventBuffer>>,
    scratch: Vec<u8>,
    frames: Vec<u64>,
    ring: Vec<u64>,
    /// The last stack this thread interned in this recording (frames, truncated flag) and its key
    /// (0: none). A loop that commits from one place walks the same stack every time; comparing it
    /// with the last one costs far less than one trie probe per frame.
    last_frames: Vec<u64>,
    last_truncated: bool,
    last_key: u64,
    tid: u32,
}

impl Local {
    #[cold]
    fn attach(&mut self, generation: u64) -> bool {
        self.detach();
        let Some(shared) = CURRENT.lock().clone() else {
            return false;
        };
        if shared.generation != generation {
            return false;
        }
        let (tid, ticks) = match &shared.logical {
            // Relaxed: a counter (see `LogicalClock`).
            Some(l) => (l.threads.fetch_add(1, Ordering::Relaxed) as u32 + 1, l.tick()),
            None => (crate::thread::current_tid(), crate::clock::ticks()),
        };
        self.tid = tid;
        shared.thread_notes.push(ThreadNote { tid, name: crate::thread::current_thread_name(), ticks, started: true });
        self.buffer = shared.new_buffer(self.tid, 0);
        // Keys name nodes of this recording's stack table only.
        self.last_key = 0;
        self.generation = generation;
        self.shared = Some(shared);
        true
    }

    fn detach(&mut self) {
        if let Some(b) = self.buffer.take() {
            b.retire();
        }
        if let Some(shared) = self.shared.take() {
            let ticks = shared.logical.as_ref().map_or_else(crate::clock::ticks, LogicalClock::tick);
            shared.thread_notes.push(ThreadNote { tid: self.tid, name: String::new(), ticks, started: false });
            shared.wakeup.notify();
        }
        self.generation = 0;
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // The thread is exiting: hand its buffer over so nothing it committed is lost.
        self.detach();
    }
}

thread_local! {
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local {
            generation: 0,
            shared: None,
            buffer: None,
            scratch: Vec::new(),
            frames: Vec::new(),
            ring: Vec::new(),
            last_frames: Vec::new(),
            last_truncated: false,
            last_key: 0,
            tid: 0,
        })
    };
}

/// Before fork: hold `CURRENT` so no other thread holds it while the process is copied.
pub(crate) fn lock_for_fork() {
    std::mem::forget(CURRENT.lock());
}

/// After fork, on both sides: release `CURRENT`; in the child, end the inherited recording (its
/// threads do not exist there).
///
/// # Safety
/// The calling thread holds `CURRENT` through [`lock_for_fork`].
#[allow(unsafe_code)]
pub(crate) unsafe fn unlock_after_fork(child: bool) {
    if child {
        // Release: later commits in the child see no recording.
        GENERATION.store(0, Ordering::Release);
    }
    // SAFETY: the caller holds the lock (see above).
    unsafe { CURRENT.force_unlock() };
    if child {
        // The child's own recordings start from a clean slot. The parent's shared state stays
        // allocated in the child's copy of memory; it is simply no longer reachable.
        std::mem::forget(CURRENT.lock().take());
    }
}

/// A recording is running.
#[inline]
pub(crate) fn recording() -> bool {
    // Relaxed: a hint; `commit_event` re-checks with Acquire.
    GENERATION.load(Ordering::Relaxed) != 0
}

/// Counts an event that could not be recorded at all (no thread-local state during thread exit).
fn lose_untracked() {
    if let Some(shared) = CURRENT.lock().as_ref() {
        shared.lose(0);
    }
}

/// Records `event` with the given start and duration (ticks).
#[inline(never)]
pub(crate) fn commit_event<E: Event>(event: &E, start: i64, duration: i64) {
    // Acquire: pairs with the Release store in `Recorder::start`, making `CURRENT` visible.
    let generation = GENERATION.load(Ordering::Acquire);
    if generation == 0 {
        return;
    }
    // The frame record of this function: the stack walk keeps frames from its caller outwards.
    let anchor = crate::unwind::frame_pointer();
    let ty = E::event_type();
    let type_id = ty.id();
    // Relaxed: settings.
    if !ty.enabled.load(Ordering::Relaxed) || duration < ty.threshold_ticks.load(Ordering::Relaxed) {
        return;
    }
    let with_stack = ty.stack_trace.load(Ordering::Relaxed);
    let done = LOCAL.try_with(|cell| {
        let Ok(mut local) = cell.try_borrow_mut() else {
            // Re-entered from inside a commit (e.g. a field's encoder committed an event).
            return false;
        };
        if local.generation != generation && !local.attach(generation) {
            return true; // the recording stopped meanwhile: nothing to record
        }
        let local = &mut *local;
        let Some(shared) = local.shared.as_ref() else {
            return false;
        };
        let stack_key = if with_stack {
            let truncated = crate::unwind::capture_current(anchor, shared.depth, &mut local.ring, &mut local.frames);
            if local.last_key != 0 && truncated == local.last_truncated && local.frames == local.last_frames {
                // The table is insert-only: the key interned last time still names this stack.
                local.last_key
            } else {
                let key = shared.stacks.intern(&local.frames, truncated).0;
                local.last_frames.clone_from(&local.frames);
                local.last_truncated = truncated;
                local.last_key = key;
                key
            }
        } else {
            0
        };
        local.scratch.clear();
        let out = &mut local.scratch;
        // The bytes of `write::begin_record` .. `write::end_record`, without moving the record.
        out.extend_from_slice(&RESERVED_SIZE);
        put_u64(out, type_id);
        let (start, duration) = match &shared.logical {
            Some(l) => (l.tick(), 0),
            None => (start, duration),
        };
        put_u64(out, start as u64);
        put_u64(out, duration as u64);
        put_u64(out, u64::from(local.tid));
        put_u64(out, stack_key);
        event.write_fields(out);
        let at = finish_record(out);
        let record = &local.scratch[at..];
        publish_thread_refs(shared);
        let appended = local.buffer.as_ref().is_some_and(|b| b.append(record));
        if !appended {
            if let Some(old) = local.buffer.take() {
                old.retire();
            }
            local.buffer = shared.new_buffer(local.tid, record.len());
            shared.wakeup.notify();
            match local.buffer.as_ref() {
                Some(b) if b.append(record) => {}
                _ => shared.lose(record.len()),
            }
        }
        true
    });
    if done != Ok(true) {
        lose_untracked();
    }
}

/// The size slot `write::begin_record` reserves: a 4-byte padded varint.
const RESERVED_SIZE: [u8; 4] = [0x80, 0x80, 0x80, 0x00];

/// Ends the record that fills `out` (begun with [`RESERVED_SIZE`]) and returns where it starts.
/// The record is byte for byte what `write::end_record` makes: a record of at most 127 bytes
/// gets a one-byte size, written just before its type id (so the record starts at 3 and nothing is
/// moved); a larger one keeps the padded 4-byte size.
///
/// # Panics
/// If the record exceeds 2^28 − 1 bytes, as `write::end_record` does.
#[inline(always)]
fn finish_record(out: &mut [u8]) -> usize {
    let total = out.len();
    let compact = total - (RESERVED_SIZE.len() - 1);
    if compact < 0x80 {
        out[RESERVED_SIZE.len() - 1] = compact as u8;
        RESERVED_SIZE.len() - 1
    } else {
        jfr_format::varint::patch_padded(&mut out[..RESERVED_SIZE.len()], total as u64);
        0
    }
}

thread_local! {
    /// Threads referenced by the fields of the event being encoded on this thread.
    static THREAD_REFS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// `THREAD_REFS` may be non-empty. A plain flag (no destructor, so no registration check on
    /// access) that lets every commit without `ThreadRef` fields skip `THREAD_REFS`.
    static THREAD_REFS_PENDING: Cell<bool> = const { Cell::new(false) };
}

/// Notes that a `ThreadRef` to `tid` is being written, so the flusher defines that thread.
pub(crate) fn note_thread_ref(tid: u32) {
    let _ = THREAD_REFS.try_with(|refs| {
        if let Ok(mut refs) = refs.try_borrow_mut() {
            refs.push(tid);
            THREAD_REFS_PENDING.set(true);
        }
    });
}

/// Hands the threads noted while encoding to the flusher (before the record is committed, so a
/// flusher that copies the record also finds the threads).
#[inline(always)]
fn publish_thread_refs(shared: &Shared) {
    if THREAD_REFS_PENDING.get() {
        publish_pending_thread_refs(shared);
    }
}

#[cold]
fn publish_pending_thread_refs(shared: &Shared) {
    let _ = THREAD_REFS.try_with(|refs| {
        if let Ok(mut refs) = refs.try_borrow_mut() {
            for tid in refs.drain(..) {
                shared.thread_refs.push(tid);
            }
            THREAD_REFS_PENDING.set(false);
        }
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use jfr_format::write;

    /// The commit path's framing and varints write exactly what the format crate's writer does.
    #[test]
    fn framing_and_varints_match_the_format_writer() {
        let mut values = vec![0u64, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX, i64::MAX as u64, i64::MIN as u64];
        for shift in 0..64 {
            let p = 1u64 << shift;
            values.extend([p - 1, p, p + 1, p.wrapping_neg(), !p]);
        }
        for &v in &values {
            let (mut ours, mut theirs) = (vec![9u8], vec![9u8]);
            put_u64(&mut ours, v);
            write::put_varint(&mut theirs, v);
            assert_eq!(ours, theirs, "varint of {v:#x}");
        }
        for payload_len in [0usize, 1, 100, 122, 123, 124, 125, 126, 127, 128, 200, 20_000] {
            let payload: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
            let mut theirs = Vec::new();
            let token = write::begin_record(&mut theirs, 300);
            theirs.extend_from_slice(&payload);
            write::end_record(&mut theirs, token);
            let mut ours = RESERVED_SIZE.to_vec();
            put_u64(&mut ours, 300);
            ours.extend_from_slice(&payload);
            let at = finish_record(&mut ours);
            assert_eq!(&ours[at..], &theirs[..], "record with {payload_len} payload bytes");
        }
    }
}
