//! Instrumented scopes with exact self time: [`scope!`](crate::scope), `#[recorder::profile]`,
//! [`scope_at`], and the spans of [`RecorderLayer`](crate::tracing::RecorderLayer) — one
//! mechanism for all of them:
//!
//! - **A path is interned incrementally on entry**, by (parent node, function index): the last
//!   child entered from a node is cached on the node, other children are found in a hash map, a
//!   new one is created once. The active frame keeps its node, so **a return updates that node's
//!   numbers with no ancestor walk, no allocation and no string lookup**: its cost does not depend
//!   on the depth.
//! - Each thread records the order in which its nodes first receive weight; **paths are expanded
//!   only on export** ([`ScopeReport`]), where identical displayed paths merge.
//! - **A cumulative excluded-time clock** removes the profiler's own bookkeeping from every active
//!   frame: each frame remembers the clock at its entry and subtracts what it advanced by until
//!   its exit. The slow paths (registering a call site, creating a node, [`scope_at`]'s name
//!   lookup) are bracketed by clock reads and added as measured. The fast path (an entry and a
//!   return) is charged as [`ScopeClock`] says:
//!   - [`ScopeClock::Calibrated`] (the default): its cost outside the child's own interval is
//!     measured once per process by running the same code ([`pair_cost_ticks`]) and added at
//!     each return. A scope reads the clock exactly twice. Its cost in place varies with what
//!     the CPU's neighbours do (2× on a shared VM, from one millisecond to the next), and so does
//!     the error of that constant.
//!   - [`ScopeClock::Exact`]: an entry and a return are bracketed by clock reads too and added
//!     as measured; only the part of those reads that falls outside them (about one read's
//!     latency, steady) is the calibrated constant. Four reads per scope.
//! - **Work on other threads is never lost**: each thread has its own tree, which any thread may
//!   read without a lock (see `tree`); [`Recorder::scope_report`](crate::Recorder::scope_report)
//!   and the flush's `recorder.ScopeTiming` events merge the trees of all threads, including
//!   threads that exited.
//! - In deterministic mode the clock is not read: times are zero, counts are kept, and the
//!   report's order is the paths' (so it does not depend on how threads interleave).
//!
//! With no recorder running a scope costs one relaxed load of `GENERATION` and a branch, and its
//! guard's drop one flag test: entry and return are out of line, so nothing else is inlined at
//! the call site (`cargo bench --bench scopes`: 0.27 ns per scope).

pub(crate) mod names;
pub(crate) mod report;
mod tree;

pub(crate) use report::{absorb, Merged};
pub use report::{ScopeNode, ScopeReport, Weight};

use crate::commit::GENERATION;
use crate::hash::BuildWordHasher;
use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::LocalKey;
use tree::{Tree, NONE, ROOT};

/// A `scope!` call site: its name, and its function index once registered (0: not yet).
#[derive(Debug)]
pub struct Site {
    name: &'static str,
    func: AtomicU32,
}

impl Site {
    /// A call site named `name` (used by [`scope!`](crate::scope) and `#[recorder::profile]`).
    pub const fn new(name: &'static str) -> Site {
        Site { name, func: AtomicU32::new(0) }
    }

    /// The site's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// Opens a scope named `name` for the rest of the enclosing block: its calls, total time and
/// self time go into the recording's scope tree (see [`crate::scope`](mod@crate::scope)).
///
/// ```
/// fn parse(input: &str) -> usize {
///     recorder::scope!("parse");
///     input.len()
/// }
/// # parse("x");
/// ```
#[macro_export]
macro_rules! scope {
    ($name:expr) => {
        let _recorder_scope_guard = {
            static SITE: $crate::scope::Site = $crate::scope::Site::new($name);
            $crate::scope::enter(&SITE)
        };
    };
}

/// The guard of an open scope: the scope ends when it is dropped, on the thread that opened it.
#[must_use = "the scope ends when the guard is dropped"]
#[derive(Debug)]
pub struct ScopeGuard {
    /// Frames on the thread's stack with this one (0: nothing was entered).
    depth: u32,
    deterministic: bool,
    generation: u64,
    _not_send: PhantomData<*const ()>,
}

impl ScopeGuard {
    const INACTIVE: ScopeGuard = ScopeGuard { depth: 0, deterministic: false, generation: 0, _not_send: PhantomData };
}

impl Drop for ScopeGuard {
    /// With no recording running, a flag test and nothing else: the return itself is out of line
    /// (inlined, it made the drop glue too big to inline, and a call on the disabled path cost
    /// more than the rest of it).
    #[inline(always)]
    fn drop(&mut self) {
        if self.depth != 0 {
            exit_active(self.depth, self.generation, self.deterministic);
        }
    }
}

/// The return of an entered scope.
#[inline(never)]
fn exit_active(depth: u32, generation: u64, deterministic: bool) {
    exit_with(&LOCAL, depth, generation, deterministic);
}

/// Enters the scope of `site` (what [`scope!`](crate::scope) expands to).
#[inline(always)]
pub fn enter(site: &'static Site) -> ScopeGuard {
    // Relaxed: a hint; a thread that attaches reads the recording under the registry lock.
    let generation = GENERATION.load(Ordering::Relaxed);
    if generation == 0 {
        return ScopeGuard::INACTIVE;
    }
    enter_active(site, generation)
}

/// The entry of a scope while a recording runs (out of line: the caller keeps only the check).
#[inline(never)]
fn enter_active(site: &'static Site, generation: u64) -> ScopeGuard {
    enter_with(&LOCAL, site, generation)
}

/// Records one completed call of `name` with explicit timestamps (ticks of
/// [`crate::clock::ticks`]), as a child of the scope open on this thread: its total and self time
/// are exactly `end - start`, and the enclosing scopes do not pay for the bookkeeping.
pub fn scope_at(name: &str, start: i64, end: i64) {
    // Relaxed: as in `enter`.
    let generation = GENERATION.load(Ordering::Relaxed);
    if generation == 0 {
        return;
    }
    let _ = LOCAL.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.record_at(generation, name, start, end);
        }
    });
}

/// How the excluded-time clock charges the fast path of a scope (its entry and return) to the
/// scopes around it ([`RecorderBuilder::scope_clock`](crate::RecorderBuilder::scope_clock)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScopeClock {
    /// Two clock reads per scope; the fast path's cost is a constant measured once per process
    /// (the cheapest: a scope costs about two clock reads). Self times are off by however much
    /// the fast path's cost in place differs from that constant: with 1,000 child scopes per
    /// 200 µs of work, −4 % to +9 % on a shared 2-vCPU VM whose neighbours change the cost
    /// from 13 to 29 ns per scope (`cargo bench --bench scopes`).
    #[default]
    Calibrated,
    /// Four clock reads per scope: the fast path is measured in place, and only the reads' own
    /// latency is a calibrated constant. About twice the cost of a scope; self times stay right
    /// whatever the machine does meanwhile.
    Exact,
}

impl ScopeClock {
    fn index(self) -> usize {
        match self {
            ScopeClock::Calibrated => 0,
            ScopeClock::Exact => 1,
        }
    }
}

/// Ticks that one scope entry and return add to the enclosing scope beyond what `clock` measures
/// in place, as measured by [`calibrate`] (0 before it ran).
pub fn pair_cost_ticks(clock: ScopeClock) -> i64 {
    // Relaxed: a measured constant.
    PAIR_COST[clock.index()].load(Ordering::Relaxed)
}

static PAIR_COST: [AtomicI64; 2] = [AtomicI64::new(0), AtomicI64::new(0)];

thread_local! {
    static LOCAL: RefCell<ScopeThreadState> = const { RefCell::new(ScopeThreadState::new()) };
    /// A private tree that only [`calibrate`] uses, entered through the same code as `LOCAL`.
    static CALIBRATION: RefCell<ScopeThreadState> = const { RefCell::new(ScopeThreadState::new()) };
}

#[inline(always)]
fn enter_with(key: &'static LocalKey<RefCell<ScopeThreadState>>, site: &'static Site, generation: u64) -> ScopeGuard {
    key.try_with(|l| match l.try_borrow_mut() {
        Ok(mut l) => l.enter(site, generation, 0),
        Err(_) => ScopeGuard::INACTIVE,
    })
    .unwrap_or(ScopeGuard::INACTIVE)
}

#[inline(always)]
fn exit_with(key: &'static LocalKey<RefCell<ScopeThreadState>>, depth: u32, generation: u64, deterministic: bool) {
    // The first thing a return does: everything after this is the profiler's.
    let now = if deterministic { 0 } else { crate::clock::ticks() };
    let _ = key.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.exit(depth, generation, now);
        }
    });
}

/// The recording's scopes start: trees of an earlier recording are dropped, and the fast path's
/// cost is measured once per process and clock (unless deterministic).
pub(crate) fn start(generation: u64, deterministic: bool, clock: ScopeClock) {
    if !deterministic {
        calibrate(clock);
    }
    report::reset(generation, deterministic, clock);
}

/// Measures the fast path's cost with the code the application runs (a private tree, the same
/// entry and return functions): `pairs` entries and returns of a child under one parent take
/// `elapsed` ticks, of which the child's own recorded total is inside the child and `clock`
/// measured some as excluded time; the rest is what each pair costs its parent beyond that. The
/// smallest of several rounds (a round the thread was interrupted in only costs more). Once per
/// process and clock.
pub fn calibrate(clock: ScopeClock) -> i64 {
    static DONE: [std::sync::OnceLock<i64>; 2] = [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    *DONE[clock.index()].get_or_init(|| {
        static PARENT: Site = Site::new("[calibration parent]");
        static CHILD: Site = Site::new("[calibration child]");
        const PAIRS: i64 = 2000;
        let mut best = i64::MAX;
        for _ in 0..7 {
            let tree = Arc::new(Tree::new());
            let _ = CALIBRATION.try_with(|l| l.borrow_mut().attach_private(Arc::clone(&tree), clock));
            let parent = enter_with(&CALIBRATION, &PARENT, 1);
            let excluded_before = CALIBRATION.try_with(|l| l.borrow().excluded).unwrap_or(0);
            let start = crate::clock::ticks();
            for _ in 0..PAIRS {
                let child = enter_with(&CALIBRATION, &CHILD, 1);
                exit_with(&CALIBRATION, child.depth, 1, false);
                std::mem::forget(child);
            }
            let elapsed = crate::clock::ticks() - start;
            let excluded = CALIBRATION.try_with(|l| l.borrow().excluded).unwrap_or(0) - excluded_before;
            exit_with(&CALIBRATION, parent.depth, 1, false);
            std::mem::forget(parent);
            // The child is node 2 (root, parent, child).
            let inside = tree.counts(2).total as i64;
            best = best.min((elapsed - inside - excluded) / PAIRS);
        }
        let _ = CALIBRATION.try_with(|l| *l.borrow_mut() = ScopeThreadState::new());
        let cost = best.max(0);
        // Relaxed: a constant, read by threads as they attach.
        PAIR_COST[clock.index()].store(cost, Ordering::Relaxed);
        cost
    })
}

/// `ticks` of the scope clock ([`crate::clock::ticks`]) in nanoseconds.
pub(crate) fn ticks_to_nanos(ticks: u64) -> u64 {
    crate::clock::ticks_to_nanos(i64::try_from(ticks).unwrap_or(i64::MAX)).max(0) as u64
}

/// Enters a span's scope: `func` its name's function index, `span` its process-unique id.
/// `false`: nothing was entered (no recording).
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn enter_span(func: u32, span: u64) -> bool {
    // Relaxed: as in `enter`.
    let generation = GENERATION.load(Ordering::Relaxed);
    if generation == 0 {
        return false;
    }
    LOCAL.try_with(|l| l.try_borrow_mut().is_ok_and(|mut l| l.enter_func(func, generation, span) != 0)).unwrap_or(false)
}

/// Leaves the innermost open scope of span `span` on this thread (scopes opened inside it and
/// still open end with it). Nothing happens if it has none open (entered before the recording
/// started, or never entered on this thread). Returns how long that entry lasted, in ticks (0:
/// it ended nothing, a re-entry did, or deterministic mode; at least 1 otherwise).
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn exit_span(span: u64) -> i64 {
    let now = crate::clock::ticks();
    LOCAL
        .try_with(|l| match l.try_borrow_mut() {
            Ok(mut l) => {
                let now = if l.deterministic { 0 } else { now };
                l.exit_span(span, now)
            }
            Err(_) => 0,
        })
        .unwrap_or(0)
}

/// Every function name, by index.
pub(crate) fn function_names() -> Vec<Arc<str>> {
    names::snapshot()
}

/// Interns a function name (a span's name, say): its index for [`enter_span`].
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn function_index(name: &str) -> u32 {
    names::intern(name)
}

/// An open scope.
#[derive(Debug, Clone, Copy)]
struct Frame {
    node: u32,
    /// Raw ticks at entry.
    start: i64,
    /// The excluded-time clock at entry.
    excluded: i64,
    /// Totals of the children that returned.
    children: i64,
    /// The span this frame belongs to (0: a plain scope).
    span: u64,
    /// The thread's span word before this frame.
    span_before: u64,
    /// Entries of the same span while it is this frame's (tracing allows entering an entered
    /// span again): they add no frame, and their exits end nothing.
    reentries: u32,
}

/// Private, per node: the child entered last (a loop enters the same child again).
#[derive(Debug, Clone, Copy)]
struct Cached {
    func: u32,
    child: u32,
    linked: bool,
}

/// One thread's profiler state: the shared tree it writes, and what only it needs.
#[derive(Debug)]
struct ScopeThreadState {
    generation: u64,
    deterministic: bool,
    /// [`ScopeClock::Exact`]: entries and returns are bracketed by clock reads.
    exact: bool,
    /// Ticks added to the excluded-time clock at each return (see [`calibrate`]).
    pair_cost: i64,
    tree: Option<Arc<Tree>>,
    frames: Vec<Frame>,
    /// Indexed by node.
    cache: Vec<Cached>,
    children: Option<HashMap<u64, u32, BuildWordHasher>>,
    /// Last node of the first-weight order list.
    tail: u32,
    /// The excluded-time clock: ticks of bookkeeping so far.
    excluded: i64,
    /// The span word (what the cell holds).
    span: u64,
    /// Where the SIGPROF handler reads the span word (taken at the thread's first span).
    cell: Option<(u32, &'static std::sync::atomic::AtomicU64)>,
    /// The node that paths go to once the tree is full (NONE: not created).
    overflow: u32,
}

impl ScopeThreadState {
    const fn new() -> ScopeThreadState {
        ScopeThreadState {
            generation: 0,
            deterministic: false,
            exact: false,
            pair_cost: 0,
            tree: None,
            frames: Vec::new(),
            cache: Vec::new(),
            children: None,
            tail: NONE,
            excluded: 0,
            span: 0,
            cell: None,
            overflow: NONE,
        }
    }

    fn now(&self) -> i64 {
        if self.deterministic {
            0
        } else {
            crate::clock::ticks()
        }
    }

    /// Joins recording `generation` with a new tree (registered for the reports), or keeps
    /// nothing if that recording is gone.
    #[cold]
    fn attach(&mut self, generation: u64) -> bool {
        self.detach();
        let Some((tree, deterministic, clock)) = report::register(generation) else {
            return false;
        };
        self.deterministic = deterministic;
        self.exact = clock == ScopeClock::Exact && !deterministic;
        self.pair_cost = if deterministic { 0 } else { pair_cost_ticks(clock) };
        self.generation = generation;
        self.install(tree);
        true
    }

    /// The calibration's private tree.
    fn attach_private(&mut self, tree: Arc<Tree>, clock: ScopeClock) {
        self.detach();
        self.deterministic = false;
        self.exact = clock == ScopeClock::Exact;
        self.pair_cost = 0;
        self.generation = 1;
        self.install(tree);
    }

    fn install(&mut self, tree: Arc<Tree>) {
        self.frames.clear();
        self.frames.reserve(64);
        self.cache.clear();
        self.cache.push(Cached { func: 0, child: NONE, linked: false });
        self.children.get_or_insert_with(Default::default).clear();
        self.tail = NONE;
        self.excluded = 0;
        self.tree = Some(tree);
        self.overflow = NONE;
    }

    fn detach(&mut self) {
        if let Some(tree) = self.tree.take() {
            tree.set_exited();
        }
        self.frames.clear();
        self.set_span(0);
        self.generation = 0;
    }

    #[cold]
    #[inline(never)]
    fn take_cell(&mut self) {
        let tid = crate::threads::current_tid();
        self.cell = Some((tid, crate::span_context::acquire(tid, crate::sampler::attach_span_cell)));
    }

    /// Sets the span word, where CPU samples read it.
    #[inline(always)]
    fn set_span(&mut self, span: u64) {
        self.span = span;
        if span != 0 && self.cell.is_none() {
            self.take_cell();
        }
        if let Some((_, cell)) = self.cell {
            // Relaxed: read by this thread's own signal handler (program order).
            cell.store(span, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    fn enter(&mut self, site: &'static Site, generation: u64, span: u64) -> ScopeGuard {
        // Relaxed: the index is all we need; `names` publishes it under its lock.
        let func = site.func.load(Ordering::Relaxed);
        let func = if func == 0 { self.register_site(site) } else { func };
        let depth = self.enter_func(func, generation, span);
        ScopeGuard { depth, deterministic: self.deterministic, generation, _not_send: PhantomData }
    }

    /// Registration of a call site, charged to the excluded-time clock.
    #[cold]
    #[inline(never)]
    fn register_site(&mut self, site: &'static Site) -> u32 {
        let t0 = self.now();
        let func = names::intern(site.name);
        // Relaxed: any thread may store the same value.
        site.func.store(func, Ordering::Relaxed);
        self.excluded += self.now() - t0;
        func
    }

    /// Pushes a frame for `func` under the current one and reads the clock last; returns the
    /// depth (0: nothing entered).
    #[inline(always)]
    fn enter_func(&mut self, func: u32, generation: u64, span: u64) -> u32 {
        if self.generation != generation && !self.attach(generation) {
            return 0;
        }
        if span != 0 {
            if let Some(top) = self.frames.last_mut().filter(|f| f.span == span) {
                top.reentries += 1;
                return self.frames.len() as u32;
            }
        }
        // Exact clock: the entry is measured from here (what the slow paths add is inside).
        let (entered, excluded_then) = if self.exact { (self.now(), self.excluded) } else { (0, 0) };
        let parent = self.frames.last().map_or(ROOT, |f| f.node);
        let node = match self.cache.get(parent as usize) {
            Some(c) if c.func == func => c.child,
            _ => self.child_slow(parent, func),
        };
        let span_before = self.span;
        if span != 0 {
            self.set_span(span);
        }
        // `start` and `excluded` are set below, once the entry's bookkeeping is over.
        self.frames.push(Frame { node, start: 0, excluded: 0, children: 0, span, span_before, reentries: 0 });
        let depth = self.frames.len() as u32;
        // The last thing an entry does: everything before this was the profiler's.
        let start = self.now();
        if self.exact {
            self.excluded = excluded_then + (start - entered);
        }
        // The frame's own clock starts after its entry's bookkeeping.
        let excluded = self.excluded;
        if let Some(f) = self.frames.last_mut() {
            f.start = start;
            f.excluded = excluded;
        }
        depth
    }

    /// The child `func` of `parent`, found in the map or created, charged to the excluded-time
    /// clock; remembered as the parent's last child.
    #[cold]
    #[inline(never)]
    fn child_slow(&mut self, parent: u32, func: u32) -> u32 {
        let t0 = self.now();
        let key = (u64::from(parent) << 32) | u64::from(func);
        let found = self.children.as_ref().and_then(|m| m.get(&key).copied());
        let child = match found {
            Some(c) => c,
            None => match self.new_node(parent, func) {
                Some(node) => node,
                None => self.overflow_node(),
            },
        };
        if let Some(c) = self.cache.get_mut(parent as usize) {
            c.func = func;
            c.child = child;
        }
        self.excluded += self.now() - t0;
        child
    }

    /// The node that every new path goes to once the tree is full (the tree keeps one free place
    /// for it).
    #[cold]
    fn overflow_node(&mut self) -> u32 {
        if self.overflow == NONE {
            let func = names::intern("[scope tree full]");
            self.overflow = self.tree.as_ref().and_then(|t| t.push_last(ROOT, func)).unwrap_or(ROOT);
            self.cache.push(Cached { func: 0, child: NONE, linked: false });
        }
        self.overflow
    }

    fn new_node(&mut self, parent: u32, func: u32) -> Option<u32> {
        let node = self.tree.as_ref()?.push(parent, func)?;
        self.cache.push(Cached { func: 0, child: NONE, linked: false });
        let key = (u64::from(parent) << 32) | u64::from(func);
        self.children.get_or_insert_with(Default::default).insert(key, node);
        Some(node)
    }

    /// A return at `now` from the frame at `depth` (frames above it, left open by a guard that
    /// was forgotten or dropped out of order, end with it).
    #[inline(always)]
    fn exit(&mut self, depth: u32, generation: u64, now: i64) {
        if self.generation != generation || (self.frames.len() as u32) < depth {
            return; // a recording that ended, or frames already closed
        }
        while self.frames.len() as u32 > depth {
            self.pop(now);
        }
        self.pop(now);
        self.returned(now);
    }

    /// Exact clock: a return (read at `now`) is charged as measured, up to here.
    #[inline(always)]
    fn returned(&mut self, now: i64) {
        if self.exact {
            self.excluded += self.now() - now;
        }
    }

    /// Ends the innermost frame: no ancestor walk, no allocation, no lookup.
    #[inline(always)]
    fn pop(&mut self, now: i64) {
        let Some(f) = self.frames.pop() else { return };
        // A call lasts at least as long as its children: where the excluded time taken off it
        // (the calibrated cost of each child pair) exceeds what its children's bookkeeping
        // really cost, by the jitter of a few ticks, its total is its children's, not less, so a
        // node's total is always its self time plus its children's totals.
        let total = (now - f.start - (self.excluded - f.excluded)).max(f.children);
        let self_ticks = total - f.children;
        if let Some(parent) = self.frames.last_mut() {
            parent.children += total;
        }
        if f.span != 0 {
            self.set_span(f.span_before);
        }
        self.count(f.node, total, self_ticks);
        self.excluded += self.pair_cost;
    }

    #[inline(always)]
    fn count(&mut self, node: u32, total: i64, self_ticks: i64) {
        let Some(tree) = self.tree.as_deref() else { return };
        tree.add(node, total as u64, self_ticks as u64);
        if let Some(c) = self.cache.get_mut(node as usize) {
            // First weight: self time (in deterministic mode, with no times, the first call).
            if !c.linked && (self_ticks > 0 || self.deterministic) {
                c.linked = true;
                tree.link_after(self.tail, node);
                self.tail = node;
            }
        }
    }

    /// Ends span `span`'s frame and those above it; how long the span's frame lasted.
    #[cfg(feature = "tracing")] // the tracing layer's
    fn exit_span(&mut self, span: u64, now: i64) -> i64 {
        if self.generation == 0 {
            return 0;
        }
        if let Some(top) = self.frames.last_mut().filter(|f| f.span == span && f.reentries > 0) {
            top.reentries -= 1;
            return 0;
        }
        let Some(at) = self.frames.iter().rposition(|f| f.span == span) else { return 0 };
        // At least a tick: the entry happened. (`rdtsc` does not wait for the instructions
        // before it, so a short entry's two reads may even execute in the wrong order.)
        let lasted = if self.deterministic { 0 } else { (now - self.frames[at].start).max(1) };
        while self.frames.len() > at {
            self.pop(now);
        }
        self.returned(now);
        lasted
    }

    fn record_at(&mut self, generation: u64, name: &str, start: i64, end: i64) {
        if self.generation != generation && !self.attach(generation) {
            return;
        }
        let t0 = self.now();
        let func = names::intern(name);
        let parent = self.frames.last().map_or(ROOT, |f| f.node);
        let node = match self.cache.get(parent as usize) {
            Some(c) if c.func == func => c.child,
            _ => self.child_slow(parent, func),
        };
        let total = if self.deterministic { 0 } else { (end - start).max(0) };
        if let Some(parent) = self.frames.last_mut() {
            parent.children += total;
        }
        self.count(node, total, total);
        self.excluded += self.now() - t0;
    }
}

impl Drop for ScopeThreadState {
    fn drop(&mut self) {
        // The thread exits: its tree's values are final (the reports keep them).
        self.detach();
        if let Some((tid, cell)) = self.cell.take() {
            crate::span_context::release(tid, cell, crate::sampler::attach_span_cell);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_measures_a_small_positive_cost() {
        for clock in [ScopeClock::Calibrated, ScopeClock::Exact] {
            let cost = calibrate(clock);
            // A pair costs its parent something, and far less than a millisecond.
            assert!((0..1_000_000).contains(&cost), "{clock:?}: {cost}");
            assert_eq!(pair_cost_ticks(clock), cost);
        }
    }
}
