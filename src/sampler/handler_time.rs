//! The SIGPROF handler's own time, measured from inside: a clock read at the handler's entry and
//! at its exit, kept in a fixed histogram of atomics. Off unless a benchmark or a diagnostic
//! turns it on ([`enable`]); off, the handler pays one relaxed load and a branch. The CPU-time
//! difference between a sampled and an unsampled run (`cargo bench --bench sampling`, "handler
//! cost by stack depth") also counts the kernel's signal delivery and the cache damage a signal
//! does, and is too noisy on a shared machine to judge a microsecond; this is the handler alone.
//!
//! # Signal safety
//! [`start`] and [`finish`]: one relaxed load, the clock the handler already reads
//! (`clock::ticks_in_signal_handler`) and three relaxed atomic RMWs on statics.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Sub-buckets per power of two: a bucket is at most 1/16 (6%) of its values wide.
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Buckets: values below `SUB` ns get one each, then `SUB` per power of two up to 2^63.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

static ENABLED: AtomicBool = AtomicBool::new(false);
static HISTOGRAM: [AtomicU64; BUCKETS] = [const { AtomicU64::new(0) }; BUCKETS];
static MAX: AtomicU64 = AtomicU64::new(0);

/// The bucket of `ns`.
#[inline]
fn bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    let sub = (ns >> (msb - SUB_BITS)) as usize & (SUB - 1);
    SUB + (msb - SUB_BITS) as usize * SUB + sub
}

/// The smallest value of bucket `b`.
fn bucket_floor(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let octave = ((b - SUB) / SUB) as u32 + SUB_BITS;
    let sub = ((b - SUB) % SUB) as u64;
    (1u64 << octave) | (sub << (octave - SUB_BITS))
}

/// The handler's entry: its clock reading, or 0 when timing is off.
///
/// # Signal safety
/// One relaxed load and, when on, one clock read.
#[inline(always)]
pub(super) fn start() -> i64 {
    // Relaxed: a switch; a handler that sees it late is simply not measured. Partner: the
    // Relaxed store in `enable`.
    if ENABLED.load(Ordering::Relaxed) {
        crate::clock::ticks_in_signal_handler()
    } else {
        0
    }
}

/// The handler's exit: adds the time since `started` ([`start`]'s value) to the histogram.
///
/// # Signal safety
/// One clock read and relaxed atomic RMWs on statics.
#[inline(always)]
pub(super) fn finish(started: i64) {
    if started == 0 {
        return;
    }
    let ns = crate::clock::ticks_in_signal_handler().saturating_sub(started).max(0) as u64;
    if let Some(b) = HISTOGRAM.get(bucket(ns)) {
        // Relaxed: statistics; read by `report` after the measured run (partner: its loads).
        b.fetch_add(1, Ordering::Relaxed);
    }
    // Relaxed: as above.
    MAX.fetch_max(ns, Ordering::Relaxed);
}

/// Turns the measurement on (and empties the histogram) or off. Normal context.
pub fn enable(on: bool) {
    if on {
        for b in &HISTOGRAM {
            // Relaxed: no handler is measured until the store below.
            b.store(0, Ordering::Relaxed);
        }
        // Relaxed: as above.
        MAX.store(0, Ordering::Relaxed);
    }
    // Relaxed: a switch (partner: the Relaxed load in `start`).
    ENABLED.store(on, Ordering::Relaxed);
}

/// The handler times measured since [`enable`]: count, p50, p99 and max in ns (a percentile is
/// the floor of its bucket, at most 6% below the value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandlerTimes {
    /// Handler runs measured.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Longest.
    pub max: u64,
}

/// What the histogram holds now. Normal context.
pub fn report() -> HandlerTimes {
    // Relaxed (all): statistics, read after the measured handlers ran.
    let counts: Vec<u64> = HISTOGRAM.iter().map(|b| b.load(Ordering::Relaxed)).collect();
    let count: u64 = counts.iter().sum();
    let at = |q: f64| -> u64 {
        let rank = ((count as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_floor(b);
            }
        }
        0
    };
    HandlerTimes { count, p50: at(0.5), p99: at(0.99), max: MAX.load(Ordering::Relaxed) }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_floors_belong_to_their_bucket() {
        let mut last = 0;
        for v in (0..5000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let b = bucket(v);
            assert!(b < BUCKETS, "{v}");
            assert!(b >= last, "{v}");
            last = b;
            assert!(bucket_floor(b) <= v && bucket(bucket_floor(b)) == b, "{v}: bucket {b}");
            assert!(v - bucket_floor(b) <= v / SUB as u64, "{v}");
        }
    }
}
