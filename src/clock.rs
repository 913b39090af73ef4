//! The recording's one tick clock, and the wall clock read together with it at each chunk start.
//!
//! Ticks are the CPU's time-stamp counter (`rdtsc`, a few ns instead of the ~25 ns of a
//! `clock_gettime` vDSO call on the machines we measured) where the kernel itself trusts it: its
//! current clocksource is `tsc` (it checked the counter's synchronization across CPUs and keeps
//! watching it) and the CPU has `constant_tsc` and `nonstop_tsc` (the rate does not follow
//! frequency scaling or stop in idle states). Elsewhere, or with `RECORDER_CLOCK=monotonic`, ticks
//! are CLOCK_MONOTONIC in ns. The choice is made once per process, before the first tick is read,
//! and never changes, so every tick source (commits, samples, the flusher's own events, chunk
//! starts and durations) shares one clock.
//!
//! The TSC's rate is calibrated against CLOCK_MONOTONIC (two bracketed readings [`CALIBRATION`]
//! apart), and a TSC reading is scaled to ns by it (one 64 x 64-bit multiplication and a shift):
//! ticks are ns on either source, and every chunk header says 1,000,000,000 ticks per second, as
//! the JVM's do on Linux. JMC needs that: it computes an event's end as its start in epoch ns plus
//! its duration in ticks, exactly in integers only when a tick is a whole ns, and otherwise in a
//! `double` of epoch ticks (a resolution of some 400 ns at 2.6 GHz these years), which made
//! back-to-back events on one thread overlap and its lane builder drop and repeat events
//! (docs/jfr-format.md, "Time fields").

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Ticks per second of CLOCK_MONOTONIC ticks (ns), and of deterministic mode's logical clock.
pub const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// The time between the two readings of a TSC calibration. The rate's error is about the
/// uncertainty of one pair of readings (tens of ns) over this span: 1–2 ppm for 20 ms.
pub const CALIBRATION: Duration = Duration::from_millis(20);

/// Where ticks come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The CPU's time-stamp counter, calibrated against CLOCK_MONOTONIC.
    Tsc,
    /// CLOCK_MONOTONIC in ns.
    Monotonic,
}

/// The process's tick clock, as chosen and calibrated at its first use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// Where ticks come from.
    pub source: Source,
    /// Ticks per second: the chunk header's frequency, [`NANOS_PER_SECOND`] (ticks are ns).
    pub ticks_per_second: i64,
    /// The counter's own rate: the calibrated TSC counts per second, or [`NANOS_PER_SECOND`] for
    /// CLOCK_MONOTONIC.
    pub counter_per_second: i64,
    /// Bound of the relative error of `counter_per_second` against CLOCK_MONOTONIC (0 for
    /// CLOCK_MONOTONIC itself): a time `d` after a chunk's start is off by at most `d * error`.
    pub error: f64,
    /// Why the TSC is not used (`None` when it is).
    pub fallback_reason: Option<&'static str>,
}

const UNSET: u8 = 0;
const MONOTONIC: u8 = 1;
const TSC: u8 = 2;

/// The chosen source, for the tick reads: written once, by `init`. A reader that still sees
/// `UNSET` goes through `init`, whose `OnceLock` hands it the choice made.
static SOURCE: AtomicU8 = AtomicU8::new(UNSET);
static CHOSEN: OnceLock<Calibration> = OnceLock::new();
/// TSC counts to ns: `count * TSC_MULT >> TSC_SHIFT` (a 128-bit product). Written once, by `init`,
/// before `SOURCE` says `TSC`.
static TSC_MULT: AtomicU64 = AtomicU64::new(0);
/// 2^40: the multiplier keeps 12 significant digits at any TSC rate from 10 MHz to 100 GHz, and a
/// count times it fits in 128 bits.
const TSC_SHIFT: u32 = 40;

/// Chooses and calibrates the clock if that has not happened yet (up to [`CALIBRATION`] on the
/// first call in the process; concurrent first callers wait for it). Call before anything reads
/// ticks in signal context: [`ticks`] initializes on first use, which a signal handler must not do.
pub fn init() -> &'static Calibration {
    CHOSEN.get_or_init(|| {
        let calibration = choose();
        let tsc = calibration.source == Source::Tsc;
        if tsc {
            // Relaxed: published by the Release store of `SOURCE` below.
            TSC_MULT.store(tsc_multiplier(calibration.counter_per_second), Ordering::Relaxed);
        }
        // Release: publishes `TSC_MULT` to the tick reads' Acquire loads of `SOURCE`.
        SOURCE.store(if tsc { TSC } else { MONOTONIC }, Ordering::Release);
        calibration
    })
}

/// The clock in use (choosing it if needed).
pub fn calibration() -> &'static Calibration {
    init()
}

/// Ticks per second (choosing the clock if needed): [`NANOS_PER_SECOND`], ticks are ns.
pub fn ticks_per_second() -> i64 {
    init().ticks_per_second
}

/// `TSC_MULT` for a TSC of `counts_per_second`.
fn tsc_multiplier(counts_per_second: i64) -> u64 {
    ((i128::from(NANOS_PER_SECOND) << TSC_SHIFT) / i128::from(counts_per_second.max(1))) as u64
}

/// A TSC count in ns.
#[inline(always)]
fn tsc_nanos(count: i64) -> i64 {
    // Relaxed: read after an Acquire load of `SOURCE` that saw `TSC` (see `init`).
    scale_tsc(count, TSC_MULT.load(Ordering::Relaxed))
}

/// `count` TSC counts in ns with multiplier `mult` (rounded down).
#[inline(always)]
fn scale_tsc(count: i64, mult: u64) -> i64 {
    ((u128::from(count as u64) * u128::from(mult)) >> TSC_SHIFT) as i64
}

/// The current tick.
///
/// # Signal safety
/// Async-signal-safe once [`init`] has run (one `rdtsc` scaled to ns, or one vDSO
/// `clock_gettime`; no allocation, no lock). The first call in a process initializes, which is
/// not.
#[inline(always)]
pub fn ticks() -> i64 {
    // Acquire: pairs with the Release store in `init` (`TSC_MULT`); a plain load on x86_64.
    match SOURCE.load(Ordering::Acquire) {
        TSC => tsc_nanos(tsc()),
        MONOTONIC => monotonic(),
        _ => ticks_after_init(),
    }
}

/// The current tick, for a signal handler: never initializes. The sampler calls [`init`] before
/// it arms any timer, so the fallback to CLOCK_MONOTONIC below is never taken in practice.
///
/// # Signal safety
/// Async-signal-safe: one `rdtsc` scaled to ns, or one vDSO `clock_gettime`; no allocation, no
/// lock.
#[inline(always)]
pub fn ticks_in_signal_handler() -> i64 {
    // Acquire: as in `ticks`.
    match SOURCE.load(Ordering::Acquire) {
        TSC => tsc_nanos(tsc()),
        _ => monotonic(),
    }
}

/// The current tick, not earlier than anything the calling thread did before (in particular the
/// loads through which it saw other threads' records): for the flusher's own events and chunk
/// boundaries, which must not precede the events they follow. (`rdtsc` alone may execute before
/// earlier loads complete; `lfence` waits for them.)
#[inline]
pub fn ticks_ordered() -> i64 {
    // Acquire: as in `ticks`.
    match SOURCE.load(Ordering::Acquire) {
        TSC => tsc_nanos(tsc_ordered()),
        MONOTONIC => monotonic(),
        _ => ticks_after_init(),
    }
}

#[cold]
#[inline(never)]
fn ticks_after_init() -> i64 {
    init();
    ticks_ordered()
}

/// `ticks` ticks in ns (rounded toward zero).
pub fn ticks_to_nanos(ticks: i64) -> i64 {
    scale(ticks, NANOS_PER_SECOND, ticks_per_second())
}

/// `nanos` ns in ticks (rounded toward zero).
pub fn nanos_to_ticks(nanos: i64) -> i64 {
    scale(nanos, ticks_per_second(), NANOS_PER_SECOND)
}

/// `v * num / den` without overflow (saturating at the i64 range).
fn scale(v: i64, num: i64, den: i64) -> i64 {
    if num == den {
        return v;
    }
    // Exact either way: one 64-bit division wherever the product fits (ticks to ns: up to 9.2e9
    // ticks, seconds of a GHz counter, so every short span a hot path converts), the 128-bit
    // one (a library call of about a hundred instructions) beyond.
    if let Some(product) = v.checked_mul(num) {
        return product / den.max(1);
    }
    let r = i128::from(v) * i128::from(num) / i128::from(den.max(1));
    r.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Wall-clock time in ns since the Unix epoch.
pub fn epoch_nanos() -> i64 {
    read(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns.
#[inline]
fn monotonic() -> i64 {
    read(libc::CLOCK_MONOTONIC)
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

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc() -> i64 {
    // SAFETY: `rdtsc` exists on every x86_64 CPU and has no preconditions; the kernel did not
    // disable it for user space (its clocksource is the TSC, checked in `choose`).
    (unsafe { core::arch::x86_64::_rdtsc() }) as i64
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc_ordered() -> i64 {
    // SAFETY: `lfence` (SSE2, part of x86_64) and `rdtsc` have no preconditions.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc() as i64
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn tsc() -> i64 {
    monotonic()
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn tsc_ordered() -> i64 {
    monotonic()
}

/// A file the clock's choice reads, in the recorder's own descriptor table: the program may be
/// closing or `dup2`ing its descriptors meanwhile (`fds/mod.rs`). Under the loom models (which
/// build no descriptor code) a plain read.
#[cfg(not(loom))]
fn read_probe(path: &str) -> std::io::Result<String> {
    crate::fds::read_string(path)
}

#[cfg(loom)]
fn read_probe(path: &str) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// Picks the source: the TSC when the kernel trusts it (and the environment does not say
/// otherwise), calibrated; CLOCK_MONOTONIC else.
fn choose() -> Calibration {
    let monotonic = |reason| Calibration {
        source: Source::Monotonic,
        ticks_per_second: NANOS_PER_SECOND,
        counter_per_second: NANOS_PER_SECOND,
        error: 0.0,
        fallback_reason: Some(reason),
    };
    match std::env::var("RECORDER_CLOCK").as_deref() {
        Ok("monotonic") => return monotonic("RECORDER_CLOCK=monotonic"),
        Ok("") | Ok("auto") | Err(_) => {}
        Ok(other) => {
            eprintln!("recorder: RECORDER_CLOCK={other:?} is not one of auto, monotonic; using auto");
        }
    }
    if !cfg!(target_arch = "x86_64") {
        return monotonic("not an x86_64 CPU");
    }
    let clocksource = read_probe("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    let cpuinfo = read_probe("/proc/cpuinfo").unwrap_or_default();
    if let Err(reason) = tsc_trusted(clocksource.as_deref().ok(), &cpuinfo) {
        return monotonic(reason);
    }
    let (counter_per_second, error) = calibrate(CALIBRATION);
    if counter_per_second <= 0 {
        return monotonic("the TSC did not advance during calibration");
    }
    Calibration {
        source: Source::Tsc,
        ticks_per_second: NANOS_PER_SECOND,
        counter_per_second,
        error,
        fallback_reason: None,
    }
}

/// The kernel's verdict on the TSC, from its current clocksource and the CPU flags it reports.
fn tsc_trusted(clocksource: Option<&str>, cpuinfo: &str) -> Result<(), &'static str> {
    if clocksource.map(str::trim) != Some("tsc") {
        return Err("the kernel's clocksource is not the TSC");
    }
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let has = |flag: &str| flags.split_whitespace().any(|f| f == flag);
    if !has("constant_tsc") || !has("nonstop_tsc") {
        return Err("the CPU lacks constant_tsc or nonstop_tsc");
    }
    Ok(())
}

/// One reading of both clocks: the TSC halfway between two TSC reads around a CLOCK_MONOTONIC
/// read, and the span of those two TSC reads (the uncertainty of the pairing).
#[derive(Debug, Clone, Copy)]
struct Pair {
    tsc: i64,
    mono: i64,
    window: i64,
}

/// The tightest of several readings (a reading that was interrupted has a wide window).
fn read_pair() -> Pair {
    let mut best = Pair { tsc: 0, mono: 0, window: i64::MAX };
    for _ in 0..16 {
        let before = tsc_ordered();
        let mono = monotonic();
        let after = tsc_ordered();
        let window = after - before;
        if window < best.window {
            best = Pair { tsc: before + window / 2, mono, window };
        }
    }
    best
}

/// The TSC rate against CLOCK_MONOTONIC over `span`, and the bound of its relative error.
fn calibrate(span: Duration) -> (i64, f64) {
    let a = read_pair();
    std::thread::sleep(span);
    let b = read_pair();
    let (ticks, nanos) = (b.tsc - a.tsc, b.mono - a.mono);
    if ticks <= 0 || nanos <= 0 {
        return (0, 0.0);
    }
    let rate = i128::from(ticks) * i128::from(NANOS_PER_SECOND) / i128::from(nanos);
    // Each pairing is off by at most half its window (plus one ns of CLOCK_MONOTONIC resolution).
    let uncertainty_ticks = (a.window + b.window) as f64 / 2.0;
    let error = uncertainty_ticks / ticks as f64 + 2.0 / nanos as f64;
    (rate as i64, error)
}

/// A pair of readings taken together: the wall clock and the tick clock at the same moment, the
/// line every chunk's (startNanos, startTicks) must lie on, and the tick rate along it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockPair {
    /// ns since the epoch.
    pub epoch_nanos: i64,
    /// Ticks at the same moment.
    pub ticks: i64,
    /// Ticks per second along the line.
    pub ticks_per_second: i64,
}

impl ClockPair {
    /// Reads both clocks now: the wall clock between two tick reads, the tightest of a few tries
    /// (a try that was preempted has a wide bracket and would pair the wall time with a tick up
    /// to half of it away).
    pub fn now() -> ClockPair {
        let ticks_per_second = ticks_per_second();
        let mut best = (i64::MAX, 0, 0);
        for _ in 0..4 {
            let before = ticks_ordered();
            let epoch_nanos = epoch_nanos();
            let after = ticks_ordered();
            if after - before < best.0 {
                best = (after - before, epoch_nanos, before + (after - before) / 2);
            }
        }
        ClockPair { epoch_nanos: best.1, ticks: best.2, ticks_per_second }
    }

    /// A point of deterministic mode's logical clock: ticks are ns, and the epoch starts at 0.
    pub fn logical(ticks: i64) -> ClockPair {
        ClockPair { epoch_nanos: ticks, ticks, ticks_per_second: NANOS_PER_SECOND }
    }

    /// The ns from this pair to tick `t`.
    pub fn nanos_until(&self, t: i64) -> i64 {
        scale(t - self.ticks, NANOS_PER_SECOND, self.ticks_per_second)
    }

    /// The pair `nanos` later on the same line: where a chunk that starts here and lasts `nanos`
    /// ends, and so where the next chunk starts.
    pub fn plus(&self, nanos: i64) -> ClockPair {
        ClockPair {
            epoch_nanos: self.epoch_nanos + nanos,
            ticks: self.ticks + scale(nanos, self.ticks_per_second, NANOS_PER_SECOND),
            ticks_per_second: self.ticks_per_second,
        }
    }

    /// The epoch time of `t` ticks on this line.
    pub fn epoch_at(&self, t: i64) -> i64 {
        self.epoch_nanos + self.nanos_until(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_is_exact_on_both_sides_of_the_64_bit_product() {
        let exact = |v: i64, num: i64, den: i64| (i128::from(v) * i128::from(num) / i128::from(den)) as i64;
        for (num, den) in [(NANOS_PER_SECOND, 2_594_101_000), (2_594_101_000, NANOS_PER_SECOND), (3, 7)] {
            let limit = i64::MAX / num;
            for v in [0, 1, -1, 12_345, limit - 1, limit, limit + 1, -limit, -limit - 1, i64::MAX / 3] {
                assert_eq!(scale(v, num, den), exact(v, num, den), "{v} * {num} / {den}");
            }
        }
    }

    #[test]
    fn tsc_counts_scale_to_ns_within_a_ns_and_never_backwards() {
        for rate in [1_000_000_000i64, 2_594_101_000, 3_700_000_123, 10_000_000] {
            let mult = tsc_multiplier(rate);
            // Up to a year of counts since the TSC's reset: within 1 ns and a part per billion
            // (the rate itself is known to a few parts per million).
            for seconds in [0i64, 1, 3_600, 86_400, 31_536_000] {
                let count = rate * seconds + rate / 3;
                let exact = i128::from(count) * i128::from(NANOS_PER_SECOND) / i128::from(rate);
                let ns = scale_tsc(count, mult);
                assert!(
                    (i128::from(ns) - exact).abs() <= 1 + exact / 1_000_000_000,
                    "{rate}: {count} -> {ns}, {exact}"
                );
            }
            let mut last = scale_tsc(1 << 50, mult);
            for count in (1i64 << 50) + 1..(1i64 << 50) + 10_000 {
                let ns = scale_tsc(count, mult);
                assert!(ns >= last && ns - last <= 1 + NANOS_PER_SECOND / rate, "{rate}: {count}");
                last = ns;
            }
        }
    }

    #[test]
    fn the_kernel_verdict_needs_the_tsc_clocksource_and_both_flags() {
        let good = "processor\t: 0\nflags\t\t: fpu tsc constant_tsc rdtscp nonstop_tsc\n";
        assert_eq!(tsc_trusted(Some("tsc\n"), good), Ok(()));
        assert!(tsc_trusted(Some("kvm-clock\n"), good).is_err());
        assert!(tsc_trusted(None, good).is_err());
        assert!(tsc_trusted(Some("tsc\n"), "flags\t: fpu tsc constant_tsc\n").is_err());
        assert!(tsc_trusted(Some("tsc\n"), "flags\t: fpu tsc nonstop_tsc\n").is_err());
        // `nonstop_tsc_s3` is another flag.
        assert!(tsc_trusted(Some("tsc\n"), "flags\t: constant_tsc nonstop_tsc_s3\n").is_err());
    }

    #[test]
    fn conversions_round_trip_and_saturate() {
        assert_eq!(scale(3_000_000_000, NANOS_PER_SECOND, 3_000_000_000), 1_000_000_000);
        assert_eq!(scale(-3_000_000_000, NANOS_PER_SECOND, 3_000_000_000), -1_000_000_000);
        assert_eq!(scale(i64::MAX, 3, 1), i64::MAX);
        assert_eq!(scale(12345, 7, 7), 12345);
        let pair = ClockPair { epoch_nanos: 1_000, ticks: 500, ticks_per_second: 2_000_000_000 };
        assert_eq!(pair.nanos_until(2_500), 1_000);
        assert_eq!(pair.epoch_at(2_500), 2_000);
        let next = pair.plus(1_000);
        assert_eq!((next.epoch_nanos, next.ticks), (2_000, 2_500));
        assert_eq!(next.epoch_at(4_500), pair.epoch_at(4_500));
    }

    #[test]
    fn the_chosen_clock_is_the_kernels_verdict_and_advances_with_monotonic() {
        let c = init();
        let clocksource = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let trusted = cfg!(target_arch = "x86_64")
            && tsc_trusted(clocksource.as_deref().ok(), &cpuinfo).is_ok()
            && std::env::var("RECORDER_CLOCK").as_deref() != Ok("monotonic");
        assert_eq!(c.source == Source::Tsc, trusted, "{c:?}");
        // Ticks advance with CLOCK_MONOTONIC at the calibrated rate: the span between two tick
        // reads, converted, lies between the CLOCK_MONOTONIC spans read inside and around it,
        // widened by the calibration error (a busy machine only widens the brackets).
        let (m0, t0, m1) = (monotonic(), ticks_ordered(), monotonic());
        std::thread::sleep(Duration::from_millis(30));
        let (m2, t1, m3) = (monotonic(), ticks_ordered(), monotonic());
        let by_ticks = ticks_to_nanos(t1 - t0);
        let (inner, outer) = (m2 - m1, m3 - m0);
        let slack = |d: i64| (d as f64 * c.error) as i64 + 2;
        assert!(by_ticks >= inner - slack(inner), "{by_ticks} ns by ticks, {inner} ns inside, {c:?}");
        assert!(by_ticks <= outer + slack(outer), "{by_ticks} ns by ticks, {outer} ns around, {c:?}");
    }
}
