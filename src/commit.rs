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
use crate::metadata_registry::EventType;
use crate::stack::{DepthPolicy, StackTable};
use crate::sync::compiler_fence;
use crate::sync::statics::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crossbeam_queue::SegQueue;
use jfr_format::write;
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, OnceLock};

/// Generation of the running recording; 0 when none runs.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The running recording's shared state (for threads attaching to it).
pub(crate) static CURRENT: Mutex<Option<Arc<Shared>>> = Mutex::new(None);
/// A recording is starting (between its check of `CURRENT` and its publication there).
pub(crate) static STARTING: AtomicBool = AtomicBool::new(false);

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
    pub wakeup: Wakeup,
    /// Deterministic mode: the logical clock (every event start and thread change takes the next
    /// value) and the logical thread numbers, instead of real ticks and OS thread ids.
    pub logical: Option<LogicalClock>,
    /// The in-flight marks of the threads attached to this recording (see `Local::enter`).
    pub in_flight: Mutex<Vec<Arc<AtomicBool>>>,
}

/// Wakes the flusher from another thread without a lock.
#[derive(Debug, Default)]
pub(crate) struct Wakeup {
    pending: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

impl Wakeup {
    /// The thread to wake (the flusher), set once when it starts.
    pub(crate) fn set_thread(&self, thread: std::thread::Thread) {
        let _ = self.thread.set(thread);
    }

    /// Asks the flusher to run soon.
    pub(crate) fn notify(&self) {
        // Release: pairs with the Acquire swap in `take`; nothing else is published.
        if !self.pending.swap(true, Ordering::Release) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// A wakeup was asked for since the last call.
    pub(crate) fn take(&self) -> bool {
        // Acquire: pairs with `notify`.
        self.pending.swap(false, Ordering::Acquire)
    }
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

    /// `stop`, after clearing `GENERATION` and `CURRENT`: waits until no commit that found this
    /// recording running is still writing its record (review finding 11). Returns how many were
    /// still in flight after `timeout` (a field encoder that blocks); the caller counts them lost.
    pub(crate) fn wait_for_commits(&self, timeout: std::time::Duration) -> u64 {
        // Every thread has passed a full barrier since `GENERATION` became 0: a commit that read
        // it before has its in-flight mark visible now, and one that reads it later sees 0.
        crate::thread::process_barrier();
        let marks = self.in_flight.lock().clone();
        let deadline = std::time::Instant::now() + timeout;
        let mut stuck = 0;
        for mark in marks {
            // Acquire: pairs with the Release store in `Local::leave`; the record is then in its
            // buffer for the final flush.
            while mark.load(Ordering::Acquire) {
                if std::time::Instant::now() >= deadline {
                    stuck += 1;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        stuck
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
    /// Set while a commit of this thread is between its generation check and its append; shared
    /// with every recording this thread attached to (see `Local::enter`).
    in_flight: Option<Arc<AtomicBool>>,
}

impl Local {
    #[cold]
    fn attach(&mut self, generation: u64) -> bool {
        self.detach();
        // The first commit of this thread: its in-flight mark starts set (we are in a commit).
        let mark = self.in_flight.get_or_insert_with(|| Arc::new(AtomicBool::new(true)));
        let shared = {
            let current = CURRENT.lock();
            let Some(shared) = current.clone() else {
                return false;
            };
            if shared.generation != generation {
                return false;
            }
            // Under CURRENT: `stop` clears CURRENT before it reads the marks, so it sees this one.
            let mut marks = shared.in_flight.lock();
            if marks.len() == marks.capacity() {
                // Before the list grows: drop the marks of exited threads (only the list holds
                // them), so a recording that sees many short threads keeps a bounded list.
                marks.retain(|m| Arc::strong_count(m) > 1);
            }
            marks.push(Arc::clone(mark));
            drop(marks);
            shared
        };
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
            in_flight: None,
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
        // A start the parent had in progress does not exist in the child. Release: as above.
        STARTING.store(false, Ordering::Release);
    }
    // SAFETY: the caller holds the lock (see above).
    unsafe { CURRENT.force_unlock() };
    if child {
        // The child's own recordings start from a clean slot. The parent's shared state stays
        // allocated in the child's copy of memory; it is simply no longer reachable.
        std::mem::forget(CURRENT.lock().take());
    }
}

/// The running recording's generation (0: none runs).
#[inline]
pub(crate) fn generation() -> u64 {
    // Acquire: pairs with the Release store in `Recorder::start`.
    GENERATION.load(Ordering::Acquire)
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

/// Appends the shortest JFR varint of `v`: exactly the bytes of [`jfr_format::varint::write_u64`],
/// without its byte loop and variable-length copy (a `memcpy` call). The commit path writes every
/// integer through this: the 7-bit groups are spread into one word (three shift-and-mask steps),
/// which is appended whole and cut to length.
#[inline(always)]
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    if v >> 56 != 0 {
        // 9 bytes (the last one of 8 full bits): rare (negative longs), keep the general encoder.
        return write::put_varint(out, v);
    }
    // 2..=8 bytes of 7 bits each; all but the last carry the continuation bit.
    let len = (64 - v.leading_zeros() as usize).div_ceil(7);
    // Spread the 56 low bits into 8 bytes of 7 bits: 28-bit halves into 32-bit lanes, 14-bit
    // quarters into 16-bit lanes, 7-bit groups into bytes.
    let mut word = (v & 0x0FFF_FFFF) | ((v & 0x00FF_FFFF_F000_0000) << 4);
    word = (word & 0x0000_3FFF_0000_3FFF) | ((word & 0x0FFF_C000_0FFF_C000) << 2);
    word = (word & 0x007F_007F_007F_007F) | ((word & 0x3F80_3F80_3F80_3F80) << 1);
    word |= 0x8080_8080_8080_8080 & ((1u64 << (8 * (len - 1))) - 1);
    let at = out.len();
    out.extend_from_slice(&word.to_le_bytes());
    out.truncate(at + len);
}

/// Records an event of type `ty` whose own fields `write_fields` encodes, with the given start and
/// duration (ticks).
#[inline(never)]
pub(crate) fn commit_event(ty: &'static EventType, write_fields: impl FnOnce(&mut Vec<u8>), start: i64, duration: i64) {
    // Relaxed: a hint that skips everything when no recording runs; `Local::record` checks again
    // with Acquire once the commit is marked in flight.
    if GENERATION.load(Ordering::Relaxed) == 0 {
        return;
    }
    // The frame record of this function: the stack walk keeps frames from its caller outwards.
    let anchor = crate::unwind::frame_pointer();
    commit_with(ty, write_fields, start, duration, StackSource::Walk(anchor));
}

/// A stack captured for an event committed later (a span's stack at its entry).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CapturedStack {
    /// The recording whose stack table `key` names (0: no stack).
    generation: u64,
    key: u64,
}

/// Where a record's stack comes from.
#[derive(Debug, Clone, Copy)]
enum StackSource {
    /// Walked now from this frame record (if the type's setting asks for stacks).
    Walk(usize),
    /// Captured earlier.
    Captured(CapturedStack),
}

/// Captures the caller's stack now, for an event of type `ty` committed later with
/// [`commit_event_with_stack`]; nothing if no recording runs or the type records no stacks.
#[inline(never)]
pub(crate) fn capture_stack(ty: &'static EventType) -> CapturedStack {
    // Acquire: pairs with the Release store in `Recorder::start`, making `CURRENT` visible.
    let generation = GENERATION.load(Ordering::Acquire);
    ty.id();
    // Relaxed: a setting.
    if generation == 0 || !ty.stack_trace.load(Ordering::Relaxed) {
        return CapturedStack::default();
    }
    let anchor = crate::unwind::frame_pointer();
    LOCAL
        .try_with(|cell| {
            let Ok(mut local) = cell.try_borrow_mut() else { return CapturedStack::default() };
            if local.generation != generation && !local.attach(generation) {
                return CapturedStack::default();
            }
            CapturedStack { generation, key: local.stack_key(anchor) }
        })
        .unwrap_or_default()
}

/// Records an event of type `ty` with the stack captured earlier (none if it belongs to another
/// recording, or the type's setting is off now).
#[inline(never)]
pub(crate) fn commit_event_with_stack(
    ty: &'static EventType,
    write_fields: impl FnOnce(&mut Vec<u8>),
    start: i64,
    duration: i64,
    stack: CapturedStack,
) {
    // Relaxed: as in `commit_event`.
    if GENERATION.load(Ordering::Relaxed) == 0 {
        return;
    }
    commit_with(ty, write_fields, start, duration, StackSource::Captured(stack));
}

#[inline(always)]
fn commit_with(
    ty: &'static EventType,
    write_fields: impl FnOnce(&mut Vec<u8>),
    start: i64,
    duration: i64,
    stack: StackSource,
) {
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
        local.enter();
        let recorded = local.record(stack, type_id, with_stack, write_fields, start, duration);
        local.leave();
        recorded
    });
    if done != Ok(true) {
        lose_untracked();
    }
}

impl Local {
    /// Marks this thread's commit in flight, before the generation check that decides whether it
    /// records (review finding 11). `stop` clears the generation, runs a process-wide barrier
    /// (`thread::process_barrier`, the heavy half of an asymmetric fence whose light half is the
    /// compiler fence here) and then waits for every in-flight mark to clear, so a commit that
    /// found the recording running is in its buffer before the final flush.
    #[inline(always)]
    fn enter(&self) {
        if let Some(flag) = &self.in_flight {
            // Relaxed: ordered before the generation load by the compiler fence and `stop`'s
            // process-wide barrier.
            flag.store(true, Ordering::Relaxed);
        }
        compiler_fence(Ordering::SeqCst);
    }

    /// The commit is done (recorded, lost or skipped).
    #[inline(always)]
    fn leave(&self) {
        if let Some(flag) = &self.in_flight {
            // Release: publishes the append (the buffer's `committed` store) to `stop`, which
            // waits for this with an Acquire load in `Shared::wait_for_commits`.
            flag.store(false, Ordering::Release);
        }
    }

    /// The key of the stack from frame record `anchor` outwards, in this recording's table.
    fn stack_key(&mut self, anchor: usize) -> u64 {
        let Some(shared) = self.shared.as_ref() else { return 0 };
        let truncated = crate::unwind::capture_current(anchor, shared.depth, &mut self.ring, &mut self.frames);
        if self.last_key != 0 && truncated == self.last_truncated && self.frames == self.last_frames {
            // The table is insert-only: the key interned last time still names this stack.
            self.last_key
        } else {
            let key = shared.stacks.intern(&self.frames, truncated).0;
            self.last_frames.clone_from(&self.frames);
            self.last_truncated = truncated;
            self.last_key = key;
            key
        }
    }

    /// Encodes one event into this thread's buffer. Returns false if it could not be recorded
    /// at all (the caller counts it lost).
    #[inline(always)]
    fn record(
        &mut self,
        stack: StackSource,
        type_id: u64,
        with_stack: bool,
        write_fields: impl FnOnce(&mut Vec<u8>),
        start: i64,
        duration: i64,
    ) -> bool {
        // Acquire: pairs with the Release store in `Recorder::start`, making `CURRENT` visible.
        let generation = GENERATION.load(Ordering::Acquire);
        if generation == 0 || (self.generation != generation && !self.attach(generation)) {
            return true; // the recording stopped meanwhile: nothing to record
        }
        let stack_key = match stack {
            _ if !with_stack => 0,
            StackSource::Walk(anchor) => self.stack_key(anchor),
            StackSource::Captured(c) if c.generation == generation => c.key,
            StackSource::Captured(_) => 0,
        };
        let Some(shared) = self.shared.as_ref() else {
            return false;
        };
        self.scratch.clear();
        let out = &mut self.scratch;
        // The bytes of `write::begin_record` .. `write::end_record`, without moving the record.
        out.extend_from_slice(&RESERVED_SIZE);
        put_u64(out, type_id);
        let (start, duration) = match &shared.logical {
            Some(l) => (l.tick(), 0),
            None => (start, duration),
        };
        put_u64(out, start as u64);
        put_u64(out, duration as u64);
        put_u64(out, u64::from(self.tid));
        put_u64(out, stack_key);
        write_fields(out);
        let at = finish_record(out);
        let record = &self.scratch[at..];
        publish_thread_refs(shared);
        let appended = self.buffer.as_ref().is_some_and(|b| b.append(record));
        if !appended {
            if let Some(old) = self.buffer.take() {
                old.retire();
            }
            self.buffer = shared.new_buffer(self.tid, record.len());
            shared.wakeup.notify();
            match self.buffer.as_ref() {
                Some(b) if b.append(record) => {}
                _ => shared.lose(record.len()),
            }
        }
        true
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
