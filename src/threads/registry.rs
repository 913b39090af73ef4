//! The registry of sampled threads: which sampler slot samples which thread, identified by
//! (tid, start time); the threads that asked not to be sampled; the threads refused a slot; and
//! the hand-off from the thread-start hook to the sampler. Normal context only (never the
//! signal handler); the sampler keeps it behind its registry lock and arms or disarms a thread's
//! source (`S`) as entries come and go.

use super::exits::Exits;
use crate::fork::ForkSafeMutex;
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// What the sampler keeps about the threads it samples (normal context; never the signal
/// handler): the registry, whether new threads register at their start, the refusals and the
/// exits not collected yet.
#[derive(Debug)]
pub struct SampledThreads<S> {
    /// Slot bookkeeping for registration and discovery.
    pub registry: ForkSafeMutex<Registry<S>>,
    /// New threads register themselves at their start (`register_thread_start`, called by
    /// `thread_hooks`); off unless the owner asked for it.
    register_new_threads: AtomicBool,
    /// Refusals (see `SamplerStats::refused`), and the tids refused not yet collected.
    pub refusals: Refusals,
    /// Exited registered threads' names and CPU times, not collected yet.
    pub exits: Exits,
}

impl<S> SampledThreads<S> {
    /// Nothing registered yet, `slots` entries.
    pub fn new(slots: usize) -> SampledThreads<S> {
        SampledThreads {
            registry: ForkSafeMutex::new(Registry::with_slots(slots)),
            register_new_threads: AtomicBool::new(false),
            refusals: Refusals::default(),
            exits: Exits::default(),
        }
    }

    /// Whether new threads register themselves at their start.
    pub fn registers_new_threads(&self) -> bool {
        // Relaxed: set before the hook is installed, under no ordering need (a thread that
        // misses it is discovered).
        self.register_new_threads.load(Ordering::Relaxed)
    }

    /// Lets new threads register themselves at their start, or not.
    pub fn set_register_new_threads(&self, on: bool) {
        // Relaxed: see `registers_new_threads`.
        self.register_new_threads.store(on, Ordering::Relaxed);
    }
}

/// A registry entry: the thread a slot samples, identified by (tid, start time).
#[derive(Debug)]
pub struct Entry<S> {
    /// Kernel thread id.
    pub tid: u32,
    /// Stat field 22; 0 if it could not be read (then the tid alone identifies it).
    pub start_time: u64,
    /// The thread's sampling source, once armed.
    pub source: Option<S>,
    /// The thread registered itself (exact bounds, exit guard); else it was discovered.
    pub registered: bool,
    /// Proven dead, slot retirement waiting for a handler to leave (I13).
    pub retiring: bool,
}

impl<S> Entry<S> {
    /// Whether this entry is thread (tid, start); a start time of 0 matches any.
    pub fn is(&self, tid: u32, start: u64) -> bool {
        self.tid == tid && (self.start_time == 0 || start == 0 || self.start_time == start)
    }
}

/// The entries, indexed by slot, and the excluded threads.
#[derive(Debug)]
pub struct Registry<S> {
    /// Indexed by slot.
    pub entries: Vec<Option<Entry<S>>>,
    /// (tid, start time) of threads that asked not to be sampled.
    pub excluded: Vec<(u32, u64)>,
}

/// What a discovery pass learns from comparing a listing with the registry (see
/// [`Registry::compare`]).
#[derive(Debug, Default)]
pub struct Comparison {
    /// (slot, tid, start, retiring) of entries missing from the listing, or being retired.
    pub candidates: Vec<(usize, u32, u64, bool)>,
    /// Excluded threads missing from the listing.
    pub excluded_candidates: Vec<(u32, u64)>,
    /// Every (tid, start) the registry knows (entries and excluded).
    pub known: HashSet<(u32, u64)>,
}

impl<S> Registry<S> {
    /// An empty registry of `slots` entries.
    pub fn with_slots(slots: usize) -> Registry<S> {
        Registry { entries: (0..slots).map(|_| None).collect(), excluded: Vec::new() }
    }

    /// The slot of thread (tid, start), if it has one that is not being retired.
    pub fn find(&self, tid: u32, start: u64) -> Option<usize> {
        self.entries.iter().position(|e| e.as_ref().is_some_and(|e| !e.retiring && e.is(tid, start)))
    }

    /// Whether thread (tid, start) asked not to be sampled.
    pub fn is_excluded(&self, tid: u32, start: u64) -> bool {
        self.excluded.iter().any(|&(t, s)| t == tid && (s == 0 || start == 0 || s == start))
    }

    /// Whether any entry or exclusion has this tid, whatever its start time.
    pub fn knows_tid(&self, tid: u32) -> bool {
        self.entries.iter().flatten().any(|e| e.tid == tid) || self.excluded.iter().any(|e| e.0 == tid)
    }

    /// Entries with `tid` but another known start time than `start`: they belong to a dead
    /// thread whose tid was reused.
    pub fn reused_tid(&self, tid: u32, start: u64) -> Vec<usize> {
        (0..self.entries.len())
            .filter(|&i| {
                self.entries
                    .get(i)
                    .and_then(Option::as_ref)
                    .is_some_and(|e| e.tid == tid && e.start_time != 0 && start != 0 && e.start_time != start)
            })
            .collect()
    }

    /// Compares the registry with a listing of (tid, start time if read): who is missing from
    /// it (candidates for a proof of death), retirements still waiting for a handler to leave,
    /// and who is known already.
    pub fn compare(&self, listed: &HashMap<u32, Option<u64>>) -> Comparison {
        let is_listed = |tid: u32, start: u64| match listed.get(&tid) {
            Some(&Some(s)) => start == 0 || s == start,
            _ => false,
        };
        let known: HashSet<(u32, u64)> =
            self.entries.iter().flatten().map(|e| (e.tid, e.start_time)).chain(self.excluded.iter().copied()).collect();
        let candidates: Vec<(usize, u32, u64, bool)> = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| e.retiring || !is_listed(e.tid, e.start_time))
            .map(|(i, e)| (i, e.tid, e.start_time, e.retiring))
            .collect();
        let excluded_candidates: Vec<(u32, u64)> =
            self.excluded.iter().copied().filter(|&(t, s)| !is_listed(t, s)).collect();
        Comparison { candidates, excluded_candidates, known }
    }
}

/// Tids refused a slot kept for per-thread reports; beyond this they are only counted.
const MAX_REFUSED_LISTED: usize = 1 << 14;

/// Threads refused a slot (every slot taken): counted, and listed for per-thread reports.
#[derive(Debug, Default)]
pub struct Refusals {
    count: AtomicU64,
    threads: ForkSafeMutex<Vec<u32>>,
}

impl Refusals {
    /// Thread `tid` was refused a slot.
    pub fn note(&self, tid: u32) {
        // Relaxed: a statistic.
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut list = self.threads.lock();
        if list.len() < MAX_REFUSED_LISTED {
            list.push(tid);
        }
    }

    /// Refusals so far.
    pub fn count(&self) -> u64 {
        // Relaxed: a statistic.
        self.count.load(Ordering::Relaxed)
    }

    /// Tids refused since the last call.
    pub fn take(&self) -> Vec<u32> {
        std::mem::take(&mut *self.threads.lock())
    }
}

/// What a thread-start registration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadStart {
    /// No sampler runs, or its owner did not ask for new threads to register at their start.
    NotSampling,
    /// The thread is sampled (or excluded, or was already registered).
    Registered,
    /// Every slot is taken (by live threads, or by exited ones not reaped yet): counted and
    /// reported as this thread's refusal
    /// (`SamplerStats::refused`, `Sampler::take_refused`); discovery may sample it later.
    Refused,
    /// The sampling source could not be armed (discovery retries later).
    Failed,
}

/// The sampler's registration of a starting thread, set when the first sampler starts.
static ON_THREAD_START: OnceLock<fn() -> ThreadStart> = OnceLock::new();

/// Sets the function that registers a starting thread with the sampler (the first call wins;
/// the sampler passes the same function every time).
pub fn set_thread_start(register: fn() -> ThreadStart) {
    let _ = ON_THREAD_START.set(register);
}

/// Registers the calling, just started thread with the running sampler, if one runs and asked
/// for it ([`ThreadStart::NotSampling`] before any sampler started).
pub fn thread_started() -> ThreadStart {
    ON_THREAD_START.get().map_or(ThreadStart::NotSampling, |register| register())
}
