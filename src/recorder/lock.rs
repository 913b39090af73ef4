//! L, the chunk-writer lock: a `ForkSafeMutex<State>` (`fork.rs`) whose guard can log how long each
//! holder kept it (diagnostics for `examples/lock_hold.rs`; off unless asked for).

use super::state::State;
use crate::fork::{ForkSafeGuard as MutexGuard, ForkSafeMutex as Mutex};
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

/// Who holds L.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Holder {
    /// A flush: draining the sources and writing the recorder's own events.
    Flush,
    /// A flush after resolving names with L released: checkpoint and publish.
    FlushClose,
    /// The recorder thread's pass over full sampler buffers.
    DrainReady,
    /// The recorder thread's housekeeping (lost samples; thread discovery runs before it, without L).
    Maintain,
    /// Periodic events (CPU load, memory).
    Periodic,
    /// A dump taking its plan.
    Dump,
    /// Start and stop.
    Lifecycle,
}

/// One time L was held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockHold {
    /// By whom.
    pub holder: Holder,
    /// The flush it was part of (numbered from 1), 0 for other holders.
    pub flush: u64,
    /// For how long.
    pub held: Duration,
}

/// L and its hold-time log.
#[derive(Debug)]
pub(super) struct L {
    state: Mutex<State>,
    log: Option<Mutex<Vec<LockHold>>>,
}

impl L {
    pub fn new(state: State, log_holds: bool) -> L {
        L { state: Mutex::new(state), log: log_holds.then(Mutex::default) }
    }

    /// Takes L.
    pub fn lock(&self, holder: Holder, flush: u64) -> Held<'_> {
        let guard = self.state.lock();
        let since = self.log.as_ref().map(|_| Instant::now());
        Held { guard, since, holder, flush, log: self.log.as_ref() }
    }

    /// The holds logged so far.
    pub fn holds(&self) -> Vec<LockHold> {
        self.log.as_ref().map(|l| l.lock().clone()).unwrap_or_default()
    }
}

/// L held (dereferences to the state it protects).
#[derive(Debug)]
pub(super) struct Held<'a> {
    guard: MutexGuard<'a, State>,
    since: Option<Instant>,
    holder: Holder,
    flush: u64,
    log: Option<&'a Mutex<Vec<LockHold>>>,
}

impl Deref for Held<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let (Some(since), Some(log)) = (self.since, self.log) {
            let hold = LockHold { holder: self.holder, flush: self.flush, held: since.elapsed() };
            log.lock().push(hold);
        }
    }
}
