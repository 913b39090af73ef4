//! Problems with a recording's quality that the user can fix, said once on stderr and written into
//! the recording as a `recorder.Diagnostic` event (code, message, fix); and the shape of the
//! sampled stacks, written per flush into `recorder.SamplerStatistics` (`samplesWritten`,
//! `leafOnlyStacks`, `truncatedStacks`) so that `recorder summary` can show the share of stacks
//! that lost frames.
//!
//! Today's diagnostic: **missing frame pointers**. Stacks are walked with frame pointers; code
//! built without them (Rust's default) gives events no stack and samples only their innermost
//! frame, with no other sign. Two checks find it:
//! - at start, a probe walks the stack from a known depth of the recorder's own code, which is
//!   compiled with the application's flags (a `cargo build` applies `RUSTFLAGS` and
//!   `build.rustflags` to every crate): with frame pointers the walk finds each level of the probe;
//! - while sampling, the share of samples whose walk stopped at the first frame although the
//!   thread's stack bounds were known: code the probe does not cover (C libraries, a program the
//!   recorder was preloaded into) shows up there.
//!
//! Everything here runs in normal context: the counters are fed by the L holder that writes the
//! samples, the probe by `Recorder::start`.

use crate::builtin;
use crate::chunk::ChunkWriter;
use crate::fork::ForkSafeMutex as Mutex;
use crate::stack::DepthPolicy;
use crate::sync::statics::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// `recorder.Diagnostic#code` of the missing-frame-pointer diagnostic.
pub const MISSING_FRAME_POINTERS: &str = "missing-frame-pointers";

/// `recorder.Diagnostic#code` of a `RecorderLayer` created after the recording decided that its
/// samples carry no `spanId`.
#[cfg(feature = "tracing")] // the tracing layer's
pub const LATE_SPAN_LAYER: &str = "late-span-layer";

#[cfg(feature = "tracing")] // the tracing layer's
const LATE_SPAN_LAYER_FIX: &str = "create the RecorderLayer before starting the Recorder, or start it with \
     RecorderBuilder::sample_span_ids(true)";

/// `recorder.Diagnostic#code` of allocation sampling that cannot see the process's allocations:
/// its `malloc` is defined ahead of the interposing library (by the program itself, or by an
/// allocator preloaded before it).
pub const ALLOCATOR_NOT_INTERPOSED: &str = "allocator-not-interposed";

const ALLOCATOR_NOT_INTERPOSED_FIX: &str = "preload librecorder_preload.so before the other allocator (recorder \
     record --alloc does: LD_PRELOAD=\"librecorder_preload.so libjemalloc.so.2\"); a program that defines malloc \
     itself can be sampled only by building it with the recorder's SamplingAllocator or its own hooks";

/// How to fix it, as the recording and stderr say it.
const FRAME_POINTER_FIX: &str = "build with frame pointers: RUSTFLAGS=\"-C force-frame-pointers=yes\" cargo build \
     --release, or for good in .cargo/config.toml: [build] rustflags = [\"-C\", \"force-frame-pointers=yes\"] \
     (C and C++: -fno-omit-frame-pointer)";

/// Levels of the start-time probe; the walk must find all but the outermost two.
const PROBE_DEPTH: usize = 8;
/// The sample check speaks only after this many walks with known stack bounds ...
const MIN_WALKS: u64 = 50;
/// ... when at least this share of them stopped at their first frame (percent).
const STOPPED_PERCENT: u64 = 50;

/// One diagnostic, waiting for the next flush to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingDiagnostic {
    pub code: &'static str,
    pub message: String,
    pub fix: &'static str,
}

/// Counts of written samples by the shape of their stack, for the current recording. Relaxed
/// everywhere: statistics written and read by L holders (the lock orders them).
static SAMPLES: AtomicU64 = AtomicU64::new(0);
static LEAF_ONLY: AtomicU64 = AtomicU64::new(0);
static TRUNCATED: AtomicU64 = AtomicU64::new(0);
/// Since the recording started: samples walked with known stack bounds, and of them those whose
/// walk stopped at the first frame.
static WALKS: AtomicU64 = AtomicU64::new(0);
static STOPPED_WALKS: AtomicU64 = AtomicU64::new(0);
/// The current recording has had its frame-pointer diagnostic.
static FRAME_POINTERS_REPORTED: AtomicBool = AtomicBool::new(false);
/// Stderr heard about it already (once per process, however many recordings).
static SAID_ON_STDERR: AtomicBool = AtomicBool::new(false);
/// The current recording has had its late-span-layer diagnostic.
static LATE_SPAN_LAYER_REPORTED: AtomicBool = AtomicBool::new(false);
static PENDING: Mutex<Vec<PendingDiagnostic>> = Mutex::new(Vec::new());
/// [`PENDING`], for the atfork handlers, which hold it across fork (a flush holds it while it
/// writes the diagnostics; its holders wait for no other lock).
pub(crate) static PENDING_LOCK: &dyn crate::fork::HeldAcrossFork = &PENDING;

/// A recording starts: counters from zero, and the probe's verdict on frame pointers. `unwinder`:
/// the CPU sampler's (`None`: no CPU sampling), which decides what the missing frame pointers
/// cost CPU samples.
pub(crate) fn recording_started(unwinder: Option<crate::Unwinder>) {
    for counter in [&SAMPLES, &LEAF_ONLY, &TRUNCATED, &WALKS, &STOPPED_WALKS] {
        // Relaxed: see the statics.
        counter.store(0, Ordering::Relaxed);
    }
    // Relaxed: see the statics.
    FRAME_POINTERS_REPORTED.store(false, Ordering::Relaxed);
    LATE_SPAN_LAYER_REPORTED.store(false, Ordering::Relaxed);
    TAKEN_REPORTED.store(crate::fds::taken(), Ordering::Relaxed);
    PENDING.lock().clear();
    if let Some(found) = frame_pointer_probe() {
        let samples = match unwinder {
            None => "",
            // The handler walks the program's `.eh_frame` tables where frame pointers are missing.
            Some(crate::Unwinder::Auto | crate::Unwinder::Dwarf) => {
                "; CPU samples keep their callers by the program's DWARF unwind tables (.eh_frame), which cost \
                 several times a frame-pointer walk per frame"
            }
            Some(crate::Unwinder::FramePointer) => {
                "; CPU samples keep their innermost frame but lose the program's own callers (the frame-pointer \
                 unwinder is chosen)"
            }
        };
        report_frame_pointers(format!(
            "this program is built without frame pointers (a frame-pointer walk through {PROBE_DEPTH} nested \
             calls of the recorder's own code found {found} of them): event stacks stay empty{samples}"
        ));
    }
}

/// A sample is written into the recording (called by the L holder that writes it).
pub(crate) fn note_sample(frames: usize, truncated: bool, bounds_unknown: bool) {
    // Relaxed (all): see the statics.
    SAMPLES.fetch_add(1, Ordering::Relaxed);
    if frames <= 1 {
        LEAF_ONLY.fetch_add(1, Ordering::Relaxed);
    }
    if truncated {
        TRUNCATED.fetch_add(1, Ordering::Relaxed);
    }
    if !bounds_unknown {
        let walks = WALKS.fetch_add(1, Ordering::Relaxed) + 1;
        let stopped = if frames <= 1 {
            STOPPED_WALKS.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            STOPPED_WALKS.load(Ordering::Relaxed)
        };
        // Relaxed: see the statics.
        let reported = FRAME_POINTERS_REPORTED.load(Ordering::Relaxed);
        if !reported && walks >= MIN_WALKS && stopped * 100 >= walks * STOPPED_PERCENT {
            report_frame_pointers(format!(
                "{stopped} of {walks} CPU samples ({}%) stopped at their first frame: the code they ran keeps no \
                 frame pointers, so their stacks hold only the innermost frame",
                stopped * 100 / walks
            ));
        }
    }
}

/// Samples written since the last call: (samples, one-frame stacks, truncated stacks).
pub(crate) fn take_stack_shapes() -> (u64, u64, u64) {
    // Relaxed (all): see the statics.
    (SAMPLES.swap(0, Ordering::Relaxed), LEAF_ONLY.swap(0, Ordering::Relaxed), TRUNCATED.swap(0, Ordering::Relaxed))
}

/// `recorder.Diagnostic#code` of descriptors of the recorder's that the program closed or replaced.
pub const DESCRIPTORS_TAKEN: &str = "descriptors-taken";

const DESCRIPTORS_TAKEN_FIX: &str = "none needed: nothing was written to, read from or closed on the program's files";

/// Descriptors taken already reported (`fds::taken` at the last report).
static TAKEN_REPORTED: AtomicU64 = AtomicU64::new(0);

/// Queues a diagnostic if the program closed or replaced descriptors of ours since the last
/// report (`fds/mod.rs`). Not said on stderr: a program that closes every descriptor may have put
/// one of its own files at number 2.
fn note_descriptors_taken() {
    let taken = crate::fds::taken();
    // Relaxed: L holders are the callers (the lock orders them).
    let before = TAKEN_REPORTED.swap(taken, Ordering::Relaxed);
    if taken > before {
        let message = format!(
            "the program closed or replaced {} of the recorder's file descriptors ({} in all): the recorder \
             left those numbers to the program, reopened its chunk file by path and gave the threads whose \
             sampling event was closed a new one (their samples between the close and the next thread \
             discovery, within 100 ms, were not taken)",
            taken - before,
            taken
        );
        PENDING.lock().push(PendingDiagnostic { code: DESCRIPTORS_TAKEN, message, fix: DESCRIPTORS_TAKEN_FIX });
    }
}

/// Writes the diagnostics found since the last flush as `recorder.Diagnostic` events.
pub(crate) fn write_pending(writer: &mut ChunkWriter, now_ticks: i64) {
    note_descriptors_taken();
    for d in std::mem::take(&mut *PENDING.lock()) {
        writer.write(&builtin::Diagnostic { start_time: now_ticks, code: d.code, message: &d.message, fix: d.fix });
    }
}

/// A `RecorderLayer` was created after the running recording wrote its first sample without
/// `spanId`: the spans of this recording have no CPU samples (one layout per recording). Said
/// once per recording in the recording, and once per process on stderr.
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn report_late_span_layer() {
    // Relaxed (both): flags; a second layer racing the first at worst reports twice.
    if LATE_SPAN_LAYER_REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let message = "a RecorderLayer was created after this recording wrote its first CPU sample, which \
        decided that its samples carry no spanId: they do not say which span they ran in"
        .to_owned();
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!("recorder: warning: {message}. Fix: {LATE_SPAN_LAYER_FIX}");
    }
    PENDING.lock().push(PendingDiagnostic { code: LATE_SPAN_LAYER, message, fix: LATE_SPAN_LAYER_FIX });
}

/// Allocation sampling runs, but the process's `malloc` is `owner`'s, bound ahead of the library
/// that interposes the C allocator: no allocation reaches the hook, so the recording would hold
/// no allocation sample without saying why. Said on stderr and in the recording (call it after
/// the recording started).
pub(crate) fn report_allocator_not_interposed(owner: &str) {
    let message = format!(
        "allocation sampling is on, but malloc is defined by {owner}, which the dynamic loader binds ahead of \
         the recorder's library: the program's allocations do not reach the recorder and are not sampled"
    );
    eprintln!("recorder: warning: {message}. Fix: {ALLOCATOR_NOT_INTERPOSED_FIX}");
    PENDING.lock().push(PendingDiagnostic {
        code: ALLOCATOR_NOT_INTERPOSED,
        message,
        fix: ALLOCATOR_NOT_INTERPOSED_FIX,
    });
}

fn report_frame_pointers(message: String) {
    // Relaxed: a flag; a second report racing this one is impossible (L holders and `start`,
    // which holds the recording lock, are the callers).
    if FRAME_POINTERS_REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    // Relaxed: as above.
    if !SAID_ON_STDERR.swap(true, Ordering::Relaxed) {
        eprintln!("recorder: warning: {message}. Fix: {FRAME_POINTER_FIX}");
    }
    PENDING.lock().push(PendingDiagnostic { code: MISSING_FRAME_POINTERS, message, fix: FRAME_POINTER_FIX });
}

/// `None` if this build keeps frame pointers, else how many probe levels the walk found
/// (process-wide: the code does not change).
fn frame_pointer_probe() -> Option<usize> {
    static VERDICT: OnceLock<Option<usize>> = OnceLock::new();
    *VERDICT.get_or_init(|| {
        let found = probe_levels();
        (found + 2 < PROBE_DEPTH).then_some(found)
    })
}

/// Walks the stack from the bottom of `PROBE_DEPTH` nested calls of [`probe`] and returns the
/// longest run of equal consecutive return addresses: each level returns to the same call site, so
/// a frame-pointer walk finds a run of `PROBE_DEPTH - 1`; without frame pointers the walk starts
/// from whatever the register holds and finds none (every read is validated, see `unwind`).
fn probe_levels() -> usize {
    let mut frames = Vec::with_capacity(4 * PROBE_DEPTH);
    probe(PROBE_DEPTH, &mut frames);
    let mut longest = 0;
    let mut run = 0;
    let mut previous = None;
    for &ip in &frames {
        run = if previous == Some(ip) { run + 1 } else { 1 };
        longest = longest.max(run);
        previous = Some(ip);
    }
    if longest > 1 {
        longest
    } else {
        0
    }
}

#[inline(never)]
fn probe(depth: usize, frames: &mut Vec<u64>) {
    if depth == 0 {
        let mut ring = Vec::new();
        crate::unwind::capture_current(0, DepthPolicy { inner: 4 * PROBE_DEPTH, outer: 0 }, &mut ring, frames);
        return;
    }
    probe(depth - 1, frames);
    // Work after the call keeps it a real call (no tail call), with its own frame.
    std::hint::black_box(depth);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This crate's own build keeps frame pointers (.cargo/config.toml): the probe sees every level.
    /// A build without them is tested end to end in `tests/frame_pointers.rs`.
    #[test]
    fn probe_finds_every_level_with_frame_pointers() {
        let found = probe_levels();
        assert!(found + 1 >= PROBE_DEPTH, "found {found} of {PROBE_DEPTH} levels");
        assert_eq!(frame_pointer_probe(), None);
    }
}
