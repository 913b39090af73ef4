//! The commit path: what runs on an application thread when it records an event.
//!
//! Fast path (no stack trace, the plain settings): one load to see whether a recording runs, one
//! word of the type's settings, the thread's in-flight mark (`tests/stop_race.rs`), one tick read,
//! the record encoded straight into the thread's event buffer (no scratch copy, no lock, no wait
//! for the flusher) and a Release store. Slow paths: a stack trace (walk and interning; no
//! allocation for a known stack, none at all if it is the thread's previous stack), the thread's
//! first commit in a recording (attach: one short lock to find the recording), a full buffer
//! (retire it, take a spare or allocate the next within the memory budget, or count the event as
//! lost), deterministic mode (the logical clock), and once per flush a check of the thread's name.

use crate::buffer::EventBuffer;
use crate::encoder::{Encoder, MAX_VARINT};
use crate::fork::ForkSafeMutex as Mutex;
use crate::metadata_registry::EventType;
use crate::stack::{DepthPolicy, StackTable};
use crate::sync::compiler_fence;
use crate::sync::statics::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crossbeam_queue::{ArrayQueue, SegQueue};
use std::cell::{Cell, RefCell};
use std::sync::Arc;

mod logical_clock;
mod wakeup;
pub(crate) use logical_clock::LogicalClock;
pub(crate) use wakeup::Wakeup;

/// Generation of the running recording; 0 when none runs.
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The running recording's shared state (for threads attaching to it).
pub(crate) static CURRENT: Mutex<Option<Arc<CommitShared>>> = Mutex::new(None);
/// A recording is starting (between its check of `CURRENT` and its publication there).
pub(crate) static STARTING: AtomicBool = AtomicBool::new(false);

/// What a thread reports about itself to the L holders.
#[derive(Debug, Clone)]
pub(crate) struct ThreadNote {
    pub tid: u32,
    pub kind: NoteKind,
    /// When (`ThreadStart` / `ThreadEnd`).
    pub ticks: i64,
    /// The name the thread prefers and the kernel's name (`comm`) when it made the note (empty
    /// for `End`): see `thread::ThreadNames::observe`.
    pub name: String,
    pub comm: String,
}

/// What a [`ThreadNote`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoteKind {
    /// The thread joined the recording (first commit, or registration for sampling).
    Start,
    /// The thread left it (exit, or the recording it was attached to ended).
    End,
    /// The thread's name changed (no event).
    Name,
}

/// Bumped by every flush: a thread's first commit after it takes the slow path once and checks
/// whether the thread was renamed (one `prctl`), so a rename shows up within a flush or two
/// even for a thread that is never sampled.
static NAME_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Called by each flush (see [`NAME_EPOCH`]).
pub(crate) fn next_name_epoch() {
    // Relaxed: a hint; a thread that sees the new value late checks its name one commit later.
    NAME_EPOCH.fetch_add(1, Ordering::Relaxed);
}

/// State shared between committing threads and L holders of one recording.
#[derive(Debug)]
pub(crate) struct CommitShared {
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
    /// Bytes of event buffers alive (adopted, spare or not).
    pub allocated: AtomicUsize,
    /// Drained buffers for the next threads that need one: their pages are already in memory
    /// (a new allocation faults in every page on first write, about 1/5 of the commit path's
    /// time when threads commit at full speed) and the heap does not churn. As many as the
    /// budget allows; [`CommitShared::trim_spare_buffers`] gives back what recent flushes did not use.
    pub spare_buffers: ArrayQueue<EventBuffer>,
    /// Spare buffers taken since the last trim.
    pub spares_taken: AtomicUsize,
    /// When the spares were last trimmed (L holders only).
    pub spares_trimmed: Mutex<Option<std::time::Instant>>,
    pub lost_events: AtomicU64,
    pub lost_bytes: AtomicU64,
    /// Wakes the flusher early when buffers fill up.
    pub wakeup: Wakeup,
    /// Deterministic mode: the logical clock (every event start and thread change takes the next
    /// value) and the logical thread numbers, instead of real ticks and OS thread ids.
    pub logical: Option<LogicalClock>,
    /// The in-flight marks of the threads attached to this recording (see `CommitThreadState::enter`).
    pub in_flight: Mutex<Vec<Arc<AtomicBool>>>,
}

/// Spare buffers kept however idle the recording is.
const MIN_SPARE_BUFFERS: usize = 4;

impl CommitShared {
    /// A new buffer of at least `min` bytes within the memory budget, or `None`.
    fn new_buffer(&self, tid: u32, min: usize) -> Option<Arc<EventBuffer>> {
        if min <= self.buffer_bytes {
            if let Some(mut spare) = self.spare_buffers.pop() {
                // Relaxed: a statistic for `trim_spare_buffers`.
                self.spares_taken.fetch_add(1, Ordering::Relaxed);
                spare.reset(tid);
                let buffer = Arc::new(spare);
                self.new_buffers.push(Arc::clone(&buffer));
                return Some(buffer);
            }
        }
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

    /// L holder: takes back a buffer its owner retired and a flush drained: kept as a spare if it
    /// has the standard size and there is room, freed otherwise.
    pub(crate) fn recycle(&self, buffer: Arc<EventBuffer>) {
        // The owner let go at retirement and the queue of new buffers no longer holds it, so this
        // is the last reference; if not, it is simply dropped.
        let capacity = buffer.capacity();
        let kept = match Arc::into_inner(buffer) {
            Some(b) if capacity == self.buffer_bytes => self.spare_buffers.push(b).is_ok(),
            _ => false,
        };
        if !kept {
            // Relaxed: budget counter.
            self.allocated.fetch_sub(capacity, Ordering::Relaxed);
        }
    }

    /// L holder, at each flush: once a second, frees half of the spare buffers beyond what was
    /// taken since the last trim (and a few), so that the spares follow the recent rate of buffer
    /// turnover and a burst's memory goes back within seconds.
    pub(crate) fn trim_spare_buffers(&self) {
        let now = std::time::Instant::now();
        {
            let mut last = self.spares_trimmed.lock();
            if last.is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(1)) {
                return;
            }
            *last = Some(now);
        }
        // Relaxed: a statistic.
        let taken = self.spares_taken.swap(0, Ordering::Relaxed);
        let surplus = self.spare_buffers.len().saturating_sub(taken.max(MIN_SPARE_BUFFERS));
        for _ in 0..surplus.div_ceil(2) {
            let Some(b) = self.spare_buffers.pop() else { break };
            // Relaxed: budget counter.
            self.allocated.fetch_sub(b.capacity(), Ordering::Relaxed);
        }
    }

    /// `stop`, after clearing `GENERATION` and `CURRENT`: waits until no commit that found this
    /// recording running is still writing its record (`tests/stop_race.rs`). Returns how many were
    /// still in flight after `timeout` (a field encoder that blocks); the caller counts them lost.
    pub(crate) fn wait_for_commits(&self, timeout: std::time::Duration) -> u64 {
        // Every thread has passed a full barrier since `GENERATION` became 0: a commit that read
        // it before has its in-flight mark visible now, and one that reads it later sees 0.
        crate::threads::process_barrier();
        let marks = self.in_flight.lock().clone();
        let deadline = std::time::Instant::now() + timeout;
        let mut stuck = 0;
        for mark in marks {
            // Acquire: pairs with the Release store in `CommitThreadState::leave`; the record is then in its
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

/// The committing thread's place in its event buffer: everything the fast path needs, in a
/// thread-local without destructor (so reaching it costs no registration check).
///
/// Invariant C1: while `state` is a generation, `buffer` is the thread's current buffer of that
/// recording (kept alive by `CommitThreadState::buffer`), `[pos, end)` is its free space, and `shared` is that
/// recording's state (kept alive by `CommitThreadState::shared`). `CommitThreadState` updates the cursor whenever it
/// changes buffer or recording, and sets `state` to [`IDLE`] before it lets go of either.
struct Cursor {
    /// The recording the buffer belongs to, [`IDLE`] or [`BUSY`].
    state: Cell<u64>,
    pos: Cell<*mut u8>,
    end: Cell<*mut u8>,
    buffer: Cell<*const EventBuffer>,
    shared: Cell<*const CommitShared>,
    /// The thread id's varint, encoded at attach (`encoder::varint_word`).
    tid_word: Cell<u64>,
    tid_len: Cell<usize>,
    /// The [`NAME_EPOCH`] at which the thread last checked its name.
    name_epoch: Cell<u64>,
    /// The thread's in-flight mark (`CommitThreadState::in_flight`, which keeps it alive; null before the
    /// thread first attached).
    in_flight: Cell<*const AtomicBool>,
}

/// No buffer to write into (not attached, deterministic mode, or the thread is exiting).
const IDLE: u64 = 0;
/// A record is being encoded: a commit from inside it (a field's encoder committing an event)
/// must not write into the same space. Never a generation (those count up from 1).
const BUSY: u64 = u64::MAX;

thread_local! {
    static CURSOR: Cursor = const {
        Cursor {
            state: Cell::new(IDLE),
            pos: Cell::new(std::ptr::null_mut()),
            end: Cell::new(std::ptr::null_mut()),
            buffer: Cell::new(std::ptr::null()),
            shared: Cell::new(std::ptr::null()),
            tid_word: Cell::new(0),
            tid_len: Cell::new(1),
            name_epoch: Cell::new(0),
            in_flight: Cell::new(std::ptr::null()),
        }
    };
}

/// The calling thread's cursor. (`LocalKey::with` with the whole fast path as its closure is not
/// always inlined; a pointer out of it is.)
#[inline(always)]
fn cursor() -> *const Cursor {
    CURSOR.with(|c| c as *const Cursor)
}

/// Marks the cursor busy while a record is encoded; gives it back (also if an encoder panics).
struct Busy<'a> {
    state: &'a Cell<u64>,
    restore: u64,
}

impl<'a> Busy<'a> {
    #[inline(always)]
    fn new(state: &'a Cell<u64>) -> Busy<'a> {
        let restore = state.replace(BUSY);
        Busy { state, restore }
    }
}

impl Drop for Busy<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.state.set(self.restore);
    }
}

/// The slow path's per-thread state: the recording and buffer the cursor points into (owned here),
/// the stack capture scratch, and the scratch for records that do not fit in place.
struct CommitThreadState {
    generation: u64,
    shared: Option<Arc<CommitShared>>,
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
    /// `tid`'s varint (`encoder::varint_word`).
    tid_word: (u64, usize),
    /// The kernel's name for the thread when it last looked, and the [`NAME_EPOCH`] then.
    comm: crate::threads::RawComm,
    name_epoch: u64,
    /// Set while a commit of this thread is between its generation check and its append; shared
    /// with every recording this thread attached to (see `CommitThreadState::enter`).
    in_flight: Option<Arc<AtomicBool>>,
}

impl CommitThreadState {
    #[cold]
    /// `in_commit`: the caller is a commit (or marked in flight like one) and clears the mark when
    /// done; a thread's first attach creates its mark in that state (the caller's `enter` found
    /// no mark to set). A join that is no commit passes false, or `stop` would wait for it.
    fn attach(&mut self, generation: u64, in_commit: bool) -> bool {
        self.detach();
        let mark = self.in_flight.get_or_insert_with(|| Arc::new(AtomicBool::new(in_commit)));
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
            None => (crate::threads::current_tid(), crate::clock::ticks()),
        };
        self.tid = tid;
        self.tid_word = crate::encoder::varint_word(u64::from(tid));
        self.comm = crate::threads::RawComm::current().unwrap_or_default();
        let (name, comm) = crate::threads::current_thread_name();
        // Relaxed: see `NAME_EPOCH`.
        self.name_epoch = NAME_EPOCH.load(Ordering::Relaxed);
        shared.thread_notes.push(ThreadNote { tid, kind: NoteKind::Start, ticks, name, comm });
        // The buffer comes with the first commit (a thread may attach by registering for
        // sampling and never commit).
        // Keys name nodes of this recording's stack table only.
        self.last_key = 0;
        self.generation = generation;
        self.shared = Some(shared);
        true
    }

    fn detach(&mut self) {
        let _ = CURSOR.try_with(|c| c.state.set(IDLE));
        if let Some(b) = self.buffer.take() {
            b.retire();
        }
        if let Some(shared) = self.shared.take() {
            let ticks = shared.logical.as_ref().map_or_else(crate::clock::ticks, LogicalClock::tick);
            let end =
                ThreadNote { tid: self.tid, kind: NoteKind::End, ticks, name: String::new(), comm: String::new() };
            shared.thread_notes.push(end);
            shared.wakeup.notify();
        }
        self.generation = 0;
    }

    /// Once per [`NAME_EPOCH`]: if the kernel's name for the thread changed (it renamed itself),
    /// tells the L holders its new name.
    fn check_name(&mut self) {
        // Relaxed: see `NAME_EPOCH`.
        let epoch = NAME_EPOCH.load(Ordering::Relaxed);
        if self.name_epoch == epoch {
            return;
        }
        self.name_epoch = epoch;
        // Compared without allocating: this runs once per flush on every committing thread.
        let Some(raw) = crate::threads::RawComm::current() else { return };
        if raw == self.comm {
            return;
        }
        self.comm = raw;
        let Some(shared) = self.shared.as_ref() else { return };
        let comm = raw.to_string_lossy();
        let name = crate::threads::preferred_name(&comm);
        shared.thread_notes.push(ThreadNote { tid: self.tid, kind: NoteKind::Name, ticks: 0, name, comm });
    }

    /// Points the cursor at the current buffer's free space (C1), or leaves it idle when there is
    /// none or deterministic mode needs the slow path for its logical clock.
    fn point_cursor(&self, c: &Cursor) {
        c.in_flight.set(self.in_flight.as_ref().map_or(std::ptr::null(), Arc::as_ptr));
        match (&self.buffer, &self.shared) {
            (Some(b), Some(shared)) if shared.logical.is_none() => {
                let (pos, end) = b.free_space();
                c.pos.set(pos);
                c.end.set(end);
                c.buffer.set(Arc::as_ptr(b));
                c.shared.set(Arc::as_ptr(shared));
                c.tid_word.set(self.tid_word.0);
                c.tid_len.set(self.tid_word.1);
                c.name_epoch.set(self.name_epoch);
                c.state.set(self.generation);
            }
            _ => c.state.set(IDLE),
        }
    }
}

impl Drop for CommitThreadState {
    fn drop(&mut self) {
        // The thread is exiting: hand its buffer over so nothing it committed is lost.
        self.detach();
    }
}

thread_local! {
    static LOCAL: RefCell<CommitThreadState> = const {
        RefCell::new(CommitThreadState {
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
            tid_word: (0, 1),
            comm: crate::threads::RawComm::EMPTY,
            name_epoch: 0,
            in_flight: None,
        })
    };
}

/// Joins the calling thread to the running recording if it has not yet (as its first commit
/// would): its name is noted now, with a `ThreadStart`, and a `ThreadEnd` follows at its exit.
/// For threads that register for sampling and may never commit.
pub(crate) fn attach_current_thread() {
    // Acquire: as in `commit_event`.
    let generation = GENERATION.load(Ordering::Acquire);
    if generation == 0 {
        return;
    }
    let _ = LOCAL.try_with(|cell| {
        let Ok(mut local) = cell.try_borrow_mut() else { return };
        CURSOR.with(|c| {
            if c.state.get() != BUSY && local.generation != generation && local.attach(generation, false) {
                local.point_cursor(c);
            }
        });
    });
}

/// The running recording's generation (0: none runs).
#[inline]
#[cfg(feature = "tracing")] // the tracing layer's
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

/// Records an event of type `ty` whose own fields `write_fields` encodes: an instant now
/// (`span_start` `None`), or a duration event that started at `span_start` and ends now.
/// `write_fields` may run more than once (a record that does not fit is encoded again).
///
/// Fast path (inlined into the caller), for a type with the plain settings: one word for the
/// recording and one for the type, the in-flight mark, one tick read, and the record encoded
/// straight into the thread's event buffer and published with one Release store. Other settings
/// go through [`commit_general`]; a stack trace, the thread's first commit in a recording, a full
/// buffer, deterministic mode and the name check once per flush through [`commit_slow`].
#[inline(always)]
pub(crate) fn commit_event(ty: &'static EventType, write_fields: impl Fn(&mut Encoder<'_>), span_start: Option<i64>) {
    // Relaxed: a hint that skips everything when no recording runs; the check that counts is
    // made below, once the commit is marked in flight.
    if GENERATION.load(Ordering::Relaxed) == 0 {
        return;
    }
    // Acquire: pairs with the Release store in `metadata_registry::apply`.
    let type_id = ty.fast_id.load(Ordering::Acquire);
    if type_id == 0 {
        return commit_general(ty, &write_fields, span_start);
    }
    // SAFETY: a const-initialized thread-local without destructor lives as long as its thread.
    let c = unsafe { &*cursor() };
    let mark = c.in_flight.get();
    enter(mark);
    // Acquire: pairs with the Release store in `Recorder::start`, making `CURRENT` visible.
    let generation = GENERATION.load(Ordering::Acquire);
    if generation != 0 {
        let (start, duration) = times(span_start);
        if !commit_in_place(c, &write_fields, generation, type_id, start, duration, 0) {
            commit_slow(&write_fields, type_id, start, duration, StackSource::None);
        }
    }
    leave(mark);
}

/// A type not registered yet, disabled, with a threshold or a stack trace.
#[inline(never)]
fn commit_general(ty: &'static EventType, write_fields: &impl Fn(&mut Encoder<'_>), span_start: Option<i64>) {
    // The frame record of this function: the stack walk keeps frames from its caller outwards.
    let anchor = crate::unwind::frame_pointer();
    let type_id = ty.id();
    // Relaxed: settings.
    if !ty.enabled.load(Ordering::Relaxed) {
        return;
    }
    let (start, duration) = times(span_start);
    // Relaxed: settings.
    if duration < ty.threshold_ticks.load(Ordering::Relaxed) {
        return;
    }
    // Relaxed: a setting.
    if ty.stack_trace.load(Ordering::Relaxed) {
        return commit_slow(write_fields, type_id, start, duration, StackSource::Walk(anchor));
    }
    // SAFETY: as in `commit_event`.
    let c = unsafe { &*cursor() };
    let mark = c.in_flight.get();
    enter(mark);
    // Acquire: as in `commit_event`.
    let generation = GENERATION.load(Ordering::Acquire);
    if generation != 0 && !commit_in_place(c, write_fields, generation, type_id, start, duration, 0) {
        commit_slow(write_fields, type_id, start, duration, StackSource::None);
    }
    leave(mark);
}

/// A stack captured for an event committed later (a span's stack where it was created).
#[cfg(feature = "tracing")] // the tracing layer's
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CapturedStack {
    /// The recording whose stack table `key` names (0: no stack).
    generation: u64,
    key: u64,
}

/// Where a record's stack comes from.
#[derive(Debug, Clone, Copy)]
enum StackSource {
    None,
    /// Walked now from this frame record (the walk keeps frames from its caller outwards).
    Walk(usize),
    /// Captured earlier ([`capture_stack`]).
    #[cfg(feature = "tracing")] // the tracing layer's
    Captured(CapturedStack),
}

/// Captures the caller's stack now, for an event of type `ty` committed later with
/// [`commit_event_with_stack`]; nothing if no recording runs or the type records no stacks.
/// `from`: an address in the frame of a function further out (a value it passed by reference):
/// the stack starts at that function's call instead (0: the caller's frame).
#[inline(never)]
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn capture_stack(ty: &'static EventType, from: usize) -> CapturedStack {
    // Acquire: pairs with the Release store in `Recorder::start`, making `CURRENT` visible.
    let generation = GENERATION.load(Ordering::Acquire);
    ty.id();
    // Relaxed: settings.
    if generation == 0 || !ty.enabled.load(Ordering::Relaxed) || !ty.stack_trace.load(Ordering::Relaxed) {
        return CapturedStack::default();
    }
    let own = crate::unwind::frame_pointer();
    let anchor = if from == 0 { own } else { crate::unwind::record_below(from).unwrap_or(own) };
    LOCAL
        .try_with(|cell| {
            let Ok(mut local) = cell.try_borrow_mut() else { return CapturedStack::default() };
            // Marked in flight like a commit: a thread's first attach sets its mark (it expects
            // the commit it is part of to clear it), and `stop` waits for every set mark.
            local.enter();
            let attached = local.generation == generation || local.attach(generation, true);
            let key = if attached { local.stack_key(anchor, true) } else { 0 };
            local.leave();
            CapturedStack { generation: if attached { generation } else { 0 }, key }
        })
        .unwrap_or_default()
}

/// Records an event of type `ty` that started at `start` and lasted `duration` ticks, with the
/// stack captured earlier (none if it belongs to another recording, or the type's setting is off
/// now). The fast path of [`commit_event`] when the thread's cursor allows it (the stack's key is
/// known: no walk).
#[inline(never)]
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn commit_event_with_stack(
    ty: &'static EventType,
    write_fields: impl Fn(&mut Encoder<'_>),
    start: i64,
    duration: i64,
    stack: CapturedStack,
) {
    // Relaxed: as in `commit_event`.
    if GENERATION.load(Ordering::Relaxed) == 0 {
        return;
    }
    let type_id = ty.id();
    // Relaxed: settings.
    if !ty.enabled.load(Ordering::Relaxed) || duration < ty.threshold_ticks.load(Ordering::Relaxed) {
        return;
    }
    // Relaxed: a setting.
    let stack = if ty.stack_trace.load(Ordering::Relaxed) { StackSource::Captured(stack) } else { StackSource::None };
    // The fast path of `commit_event`, with the stack's key known already.
    // SAFETY: as in `commit_event`.
    let c = unsafe { &*cursor() };
    let mark = c.in_flight.get();
    enter(mark);
    // Acquire: as in `commit_event`.
    let generation = GENERATION.load(Ordering::Acquire);
    if generation != 0 {
        let key = match stack {
            StackSource::Captured(s) if s.generation == generation => s.key,
            _ => 0,
        };
        if !commit_in_place(c, &write_fields, generation, type_id, start, duration, key) {
            commit_slow(&write_fields, type_id, start, duration, stack);
        }
    }
    leave(mark);
}

/// (start, duration) of an event that ends now.
#[inline(always)]
fn times(span_start: Option<i64>) -> (i64, i64) {
    let now = crate::clock::ticks();
    match span_start {
        Some(start) => (start, now - start),
        None => (now, 0),
    }
}

/// Marks the calling thread's commit in flight (its mark from the cursor; null before the
/// thread's first attach, whose slow path marks it), before the generation check that decides
/// whether it records (`tests/stop_race.rs`). `stop` clears the generation, runs a process-wide
/// barrier (`thread::process_barrier`, the heavy half of an asymmetric fence whose light half is
/// the compiler fence here) and then waits for every in-flight mark to clear, so a commit that
/// found the recording running is in its buffer before the final flush.
#[inline(always)]
fn enter(mark: *const AtomicBool) {
    if !mark.is_null() {
        // SAFETY: `CommitThreadState::in_flight` keeps the mark alive for the thread's lifetime.
        // Relaxed: ordered before the generation load by the compiler fence and `stop`'s
        // process-wide barrier.
        unsafe { (*mark).store(true, Ordering::Relaxed) };
    }
    compiler_fence(Ordering::SeqCst);
}

/// The commit is done (recorded, lost or skipped).
#[inline(always)]
fn leave(mark: *const AtomicBool) {
    if !mark.is_null() {
        // SAFETY: as in `enter`.
        // Release: publishes the append (the buffer's `committed` store) to `stop`, which waits
        // for this with an Acquire load in `CommitShared::wait_for_commits`.
        unsafe { (*mark).store(false, Ordering::Release) };
    }
}

/// The fast path: encodes the record at the cursor and publishes it. `false`: nothing was
/// published (no cursor for this recording, the name check is due, or the record does not fit);
/// take the slow path.
#[inline(always)]
fn commit_in_place(
    c: &Cursor,
    write_fields: &impl Fn(&mut Encoder<'_>),
    generation: u64,
    type_id: u64,
    start: i64,
    duration: i64,
    stack_key: u64,
) -> bool {
    // Relaxed: see `NAME_EPOCH`.
    if c.state.get() != generation || c.name_epoch.get() != NAME_EPOCH.load(Ordering::Relaxed) {
        return false;
    }
    let _busy = Busy::new(&c.state);
    // SAFETY: the cursor holds this recording's generation, so `[pos, end)` is the free space
    // of the live buffer `buffer` (C1), written by this thread only (E2).
    let mut enc = unsafe { Encoder::new(c.pos.get(), c.end.get()) };
    let tid = (c.tid_word.get(), c.tid_len.get());
    let Some(end) = encode_record(&mut enc, write_fields, type_id, start, duration, tid, stack_key, false) else {
        return false;
    };
    if THREAD_REFS_PENDING.get() {
        // SAFETY: `shared` is alive while the cursor holds its generation (C1).
        publish_pending_thread_refs(unsafe { &*c.shared.get() });
    }
    // SAFETY: `end` is where the complete record just encoded at the cursor ends, inside the
    // free space of `buffer`, which is alive (C1).
    unsafe { (*c.buffer.get()).publish_to(end) };
    c.pos.set(end);
    true
}

/// The most bytes the implicit fields take: the size slot, four varints and the thread id's
/// (written as one 8-byte word).
const HEADER_MAX: usize = 1 + 4 * MAX_VARINT + 8;

/// Encodes one record: a one-byte size slot, the implicit fields (docs/jfr-format.md, "Records
/// and implicit fields": type id,
/// start, duration, thread, stack trace), the event's own fields, then the size. Its end, or
/// `None` if it did not fit. `tid`: the thread id's varint as a word and its length. `start` is
/// padded to 8 bytes (see `Encoder::put_varint_padded_unchecked`: this is what lets the tick read
/// overlap with the rest of the commit) unless `logical` (deterministic mode writes the shortest
/// encoding, so its files stay byte for byte the same).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn encode_record(
    enc: &mut Encoder<'_>,
    write_fields: &impl Fn(&mut Encoder<'_>),
    type_id: u64,
    start: i64,
    duration: i64,
    tid: (u64, usize),
    stack_key: u64,
    logical: bool,
) -> Option<*mut u8> {
    if !enc.has_room(HEADER_MAX) {
        return None;
    }
    let record = enc.position();
    // SAFETY: `HEADER_MAX` bytes of room (checked above) hold all of these.
    unsafe {
        enc.put_word_unchecked(0, 1);
        enc.put_varint_unchecked(type_id);
        if logical {
            enc.put_varint_unchecked(start as u64);
        } else {
            enc.put_varint_padded_unchecked(start as u64);
        }
        enc.put_varint_unchecked(duration as u64);
        enc.put_word_unchecked(tid.0, tid.1);
        enc.put_varint_unchecked(stack_key);
    }
    write_fields(enc);
    enc.finish_record(record)
}

/// Everything the fast path does not do: attach the thread to the recording, capture the stack
/// (`stack`), take
/// the logical clock, check the thread's name, or move to a new buffer when the record does not
/// fit. Marks itself in flight and checks the recording again (the caller's mark may not exist
/// yet: it is made at the thread's first attach).
#[inline(never)]
fn commit_slow(write_fields: &impl Fn(&mut Encoder<'_>), type_id: u64, start: i64, duration: i64, stack: StackSource) {
    let done = LOCAL.try_with(|cell| {
        let Ok(mut local) = cell.try_borrow_mut() else {
            // Re-entered from inside a commit (e.g. a field's encoder committed an event).
            return false;
        };
        CURSOR.with(|c| {
            if c.state.get() == BUSY {
                // Re-entered from inside a fast-path commit.
                return false;
            }
            local.enter();
            let recorded = local.record(c, write_fields, type_id, start, duration, stack);
            local.leave();
            recorded
        })
    });
    if done != Ok(true) {
        lose_untracked();
    }
}

impl CommitThreadState {
    /// Marks this thread's commit in flight (see [`enter`]).
    #[inline(always)]
    fn enter(&self) {
        enter(self.in_flight.as_ref().map_or(std::ptr::null(), Arc::as_ptr));
    }

    /// The commit is done (recorded, lost or skipped).
    #[inline(always)]
    fn leave(&self) {
        leave(self.in_flight.as_ref().map_or(std::ptr::null(), Arc::as_ptr));
    }

    /// The key of the stack from frame record `anchor` outwards, in this recording's table.
    /// `instrumented`: the stack is taken at an instrumentation call
    /// ([`crate::stack::INSTRUMENTED_MARK`]).
    fn stack_key(&mut self, anchor: usize, instrumented: bool) -> u64 {
        let Some(shared) = self.shared.as_ref() else { return 0 };
        let truncated = crate::unwind::capture_current(anchor, shared.depth, &mut self.ring, &mut self.frames);
        if instrumented {
            self.frames.insert(0, crate::stack::INSTRUMENTED_MARK);
        }
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

    /// The slow path's record. Returns false if the event could not be recorded at all (the
    /// caller counts it lost).
    fn record(
        &mut self,
        c: &Cursor,
        write_fields: &impl Fn(&mut Encoder<'_>),
        type_id: u64,
        start: i64,
        duration: i64,
        stack: StackSource,
    ) -> bool {
        // Acquire: pairs with the Release store in `Recorder::start`, making `CURRENT` visible.
        let generation = GENERATION.load(Ordering::Acquire);
        if generation == 0 || (self.generation != generation && !self.attach(generation, true)) {
            return true; // the recording stopped meanwhile: nothing to record
        }
        let _busy = Busy::new(&c.state);
        self.check_name();
        let stack_key = match stack {
            StackSource::None => 0,
            StackSource::Walk(anchor) => self.stack_key(anchor, false),
            #[cfg(feature = "tracing")]
            StackSource::Captured(captured) if captured.generation == generation => captured.key,
            #[cfg(feature = "tracing")]
            StackSource::Captured(_) => 0,
        };
        let Some(shared) = self.shared.as_ref() else {
            return false;
        };
        if self.buffer.is_none() {
            self.buffer = shared.new_buffer(self.tid, 0);
        }
        let logical = shared.logical.is_some();
        let (start, duration) = match &shared.logical {
            Some(l) => (l.tick(), 0),
            None => (start, duration),
        };
        let (tid, tid_word) = (self.tid, self.tid_word);
        // In place, as the fast path does.
        let placed = self.buffer.as_ref().and_then(|b| {
            let (pos, end) = b.free_space();
            // SAFETY: the free space of this thread's own buffer, written by it only (E2).
            let mut enc = unsafe { Encoder::new(pos, end) };
            encode_record(&mut enc, write_fields, type_id, start, duration, tid_word, stack_key, logical)
                .map(|end| (b, end))
        });
        if let Some((b, end)) = placed {
            publish_thread_refs(shared);
            // SAFETY: `end` ends the complete record just encoded in `b`'s free space.
            unsafe { b.publish_to(end) };
        } else {
            // It does not fit: encode it aside, then into a new buffer that holds it.
            self.scratch.clear();
            crate::encoder::encode_into_vec(&mut self.scratch, |enc| {
                enc.put_bytes(&RESERVED_SIZE);
                enc.put_varint(type_id);
                enc.put_varint(start as u64);
                enc.put_varint(duration as u64);
                enc.put_varint(u64::from(tid));
                enc.put_varint(stack_key);
                write_fields(enc);
            });
            jfr_format::write::end_record(&mut self.scratch, 0);
            let record = &self.scratch[..];
            publish_thread_refs(shared);
            let appended = self.buffer.as_ref().is_some_and(|b| b.append(record));
            if !appended {
                if let Some(old) = self.buffer.take() {
                    old.retire();
                }
                self.buffer = shared.new_buffer(tid, record.len());
                shared.wakeup.notify();
                match self.buffer.as_ref() {
                    Some(b) if b.append(record) => {}
                    _ => shared.lose(record.len()),
                }
            }
        }
        drop(_busy);
        self.point_cursor(c);
        true
    }
}

/// The size slot `write::begin_record` reserves: a 4-byte padded varint.
const RESERVED_SIZE: [u8; 4] = [0x80, 0x80, 0x80, 0x00];

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
fn publish_thread_refs(shared: &CommitShared) {
    if THREAD_REFS_PENDING.get() {
        publish_pending_thread_refs(shared);
    }
}

#[cold]
fn publish_pending_thread_refs(shared: &CommitShared) {
    let _ = THREAD_REFS.try_with(|refs| {
        if let Ok(mut refs) = refs.try_borrow_mut() {
            for tid in refs.drain(..) {
                shared.thread_refs.push(tid);
            }
            THREAD_REFS_PENDING.set(false);
        }
    });
}
