//! The recording's one tick clock: CLOCK_MONOTONIC in nanoseconds (`clock_gettime` is
//! async-signal-safe), and the wall clock read together with it at each chunk start.

/// Ticks per second of [`ticks`].
pub const TICKS_PER_SECOND: i64 = 1_000_000_000;

/// The current tick: CLOCK_MONOTONIC in ns.
///
/// # Signal safety
/// Async-signal-safe: one `clock_gettime` call (a vDSO read), no allocation, no lock.
#[inline]
pub fn ticks() -> i64 {
    read(libc::CLOCK_MONOTONIC)
}

/// `ticks` ticks in ns.
pub fn ticks_to_nanos(ticks: i64) -> i64 {
    ticks
}

/// Wall-clock time in ns since the Unix epoch.
pub fn epoch_nanos() -> i64 {
    read(libc::CLOCK_REALTIME)
}

#[inline]
fn read(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; both clock ids exist on every Linux kernel.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec.wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec)
}

/// A pair of readings taken together: the wall clock and the tick clock at the same moment, the
/// line every chunk's (startNanos, startTicks) must lie on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockPair {
    /// ns since the epoch.
    pub epoch_nanos: i64,
    /// Ticks at the same moment.
    pub ticks: i64,
}

impl ClockPair {
    /// Reads both clocks now.
    pub fn now() -> ClockPair {
        let before = ticks();
        let epoch_nanos = epoch_nanos();
        let after = ticks();
        ClockPair { epoch_nanos, ticks: before + (after - before) / 2 }
    }

    /// The pair `nanos` later on the same line (ticks are nanoseconds): where a chunk that starts
    /// here and lasts `nanos` ends, and so where the next chunk starts.
    pub fn plus(&self, nanos: i64) -> ClockPair {
        ClockPair { epoch_nanos: self.epoch_nanos + nanos, ticks: self.ticks + nanos }
    }

    /// The epoch time of `t` ticks on this line.
    pub fn epoch_at(&self, t: i64) -> i64 {
        self.epoch_nanos + (t - self.ticks)
    }
}
