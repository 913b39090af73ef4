//! The commit path: what runs on an application thread when it records an event.
//!
//! Fast path: one atomic load to see whether a recording runs, the type's settings, an optional
//! stack walk and interning (no allocation for a known stack), encoding into a reused per-thread
//! scratch vector, one copy into the thread's event buffer and a Release store. No lock, no wait
//! for the flusher. Slow paths: the thread's first commit in a recording (attach: one short lock to
//! find the recording, a buffer allocation) and a full buffer (retire it, allocate the next within
//! the memory budget, or count the event as lost).

use crate::buffer::EventBuffer;
use crate::event::Event;
use crate::stack::{DepthPolicy, StackTable};
use crate::sync::statics::{AtomicU64, AtomicUsize, Ordering};
use crossbeam_queue::SegQueue;
use jfr_format::write;
use parking_lot::Mutex;
use std::cell::RefCell;
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
        self.tid = crate::thread::current_tid();
        shared.thread_notes.push(ThreadNote {
            tid: self.tid,
            name: crate::thread::current_thread_name(),
            ticks: crate::clock::ticks(),
            started: true,
        });
        self.buffer = shared.new_buffer(self.tid, 0);
        self.generation = generation;
        self.shared = Some(shared);
        true
    }

    fn detach(&mut self) {
        if let Some(b) = self.buffer.take() {
            b.retire();
        }
        if let Some(shared) = self.shared.take() {
            shared.thread_notes.push(ThreadNote {
                tid: self.tid,
                name: String::new(),
                ticks: crate::clock::ticks(),
                started: false,
            });
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
            shared.stacks.intern(&local.frames, truncated).0
        } else {
            0
        };
        local.scratch.clear();
        let out = &mut local.scratch;
        let token = write::begin_record(out, type_id);
        write::put_long(out, start);
        write::put_long(out, duration);
        write::put_varint(out, u64::from(local.tid));
        write::put_varint(out, stack_key);
        event.write_fields(out);
        write::end_record(out, token);
        publish_thread_refs(shared);
        let appended = local.buffer.as_ref().is_some_and(|b| b.append(&local.scratch));
        if !appended {
            if let Some(old) = local.buffer.take() {
                old.retire();
            }
            local.buffer = shared.new_buffer(local.tid, local.scratch.len());
            shared.wakeup.notify();
            match local.buffer.as_ref() {
                Some(b) if b.append(&local.scratch) => {}
                _ => shared.lose(local.scratch.len()),
            }
        }
        true
    });
    if done != Ok(true) {
        lose_untracked();
    }
}

thread_local! {
    /// Threads referenced by the fields of the event being encoded on this thread.
    static THREAD_REFS: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Notes that a `ThreadRef` to `tid` is being written, so the flusher defines that thread.
pub(crate) fn note_thread_ref(tid: u32) {
    let _ = THREAD_REFS.try_with(|refs| {
        if let Ok(mut refs) = refs.try_borrow_mut() {
            refs.push(tid);
        }
    });
}

/// Hands the threads noted while encoding to the flusher (before the record is committed, so a
/// flusher that copies the record also finds the threads).
fn publish_thread_refs(shared: &Shared) {
    let _ = THREAD_REFS.try_with(|refs| {
        if let Ok(mut refs) = refs.try_borrow_mut() {
            for tid in refs.drain(..) {
                shared.thread_refs.push(tid);
            }
        }
    });
}
