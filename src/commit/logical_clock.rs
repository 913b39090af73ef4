//! Deterministic mode's counters.

use crate::sync::statics::{AtomicU64, Ordering};

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
