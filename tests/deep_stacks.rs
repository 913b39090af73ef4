//! Deep stacks through the whole recorder: samples deeper than a buffer are
//! fragmented by the handler and reassembled by the sampler, so every sample is written whole or
//! counted lost; the depth policy (innermost N, outermost M, both with `<elided:K>`) counts frames
//! as readers show them, inlined functions included: the handler's one bounded walk
//! keeps addresses, the flusher cuts the expanded frames; `jfr print` shows the full stacks and
//! the marker.

mod common;

use common::*;
use recorder::{Recorder, SamplingMode};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const RECURSE: &str = "recurse_deep";
const LEAF: &str = "spin_leaf";

/// Spins on plain arithmetic (no calls, even unoptimized), so nearly every sample's leaf is this
/// function alone and the frames at the leaf side are known.
#[inline(never)]
fn spin_leaf(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        let mut i = 0u32;
        while i < 100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            i += 1;
        }
    }
    x
}

/// `depth + 1` frames of `recurse_deep` above `spin_leaf`.
#[inline(never)]
fn recurse_deep(depth: u32, stop: &AtomicBool) -> u64 {
    if depth == 0 {
        // Not a tail call: an optimized build would jump to `spin_leaf` in place of this frame.
        return std::hint::black_box(spin_leaf(stop));
    }
    std::hint::black_box(recurse_deep(depth - 1, stop)) + 1
}

/// One sample of the deep thread as read back.
#[derive(Debug)]
struct Sample {
    truncated: bool,
    /// Frames as every reader shows them (inlined functions included), innermost first.
    frames: Vec<String>,
    /// Per frame: it is inlined into the next one (one address shows as its inlined frames, then
    /// the physical one).
    inlined: Vec<bool>,
}

impl Sample {
    fn count(&self, method: &str) -> usize {
        self.frames.iter().filter(|f| is(f, method)).count()
    }
    fn has_leaf(&self) -> bool {
        self.frames.iter().any(|f| is(f, LEAF))
    }
    /// Frames before the first recursion frame (the leaf side).
    fn head(&self) -> usize {
        self.frames.iter().position(|f| is(f, RECURSE)).unwrap_or(self.frames.len())
    }
    /// Frames after the last recursion frame (the thread-entry side).
    fn tail(&self) -> &[String] {
        let last = self.frames.iter().rposition(|f| is(f, RECURSE)).map_or(0, |i| i + 1);
        &self.frames[last..]
    }
    /// The thread-entry side's addresses, as their numbers of shown frames, outermost last.
    fn tail_addresses(&self) -> Vec<usize> {
        let start = self.frames.len() - self.tail().len();
        let mut sizes = Vec::new();
        let mut n = 0;
        for &inlined in &self.inlined[start..] {
            n += 1;
            if !inlined {
                sizes.push(n);
                n = 0;
            }
        }
        sizes
    }
    fn elided(&self) -> Vec<(usize, u64)> {
        self.frames
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.strip_prefix("<elided:")?.strip_suffix('>')?.parse().ok().map(|k| (i, k)))
            .collect()
    }
}

fn is(frame: &str, method: &str) -> bool {
    frame.ends_with(&format!(".{method}")) || frame.ends_with(&format!("::{method}"))
}

struct Run {
    samples: Vec<Sample>,
    chunks: Vec<PathBuf>,
    taken: u64,
    written: u64,
    lost: u64,
    _dir: tempfile::TempDir,
}

/// Records one thread named `name` spinning under `depth` frames of recursion (64 MiB stack),
/// with the given depth settings and `buffers` (bytes, per thread).
fn record(
    name: &str,
    depth: u32,
    inner: Option<usize>,
    outer: Option<usize>,
    buffers: (usize, usize),
    cpu: Duration,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(4))
        .sampling_mode(SamplingMode::Auto)
        .sampler_buffers(buffers.0, buffers.1)
        .max_sampled_threads(8)
        .flush_interval(Duration::from_millis(100));
    if let Some(n) = inner {
        b = b.stack_depth(n);
    }
    if let Some(m) = outer {
        b = b.stack_depth_outer(m);
        if inner.is_none() {
            // Only the outermost frames asked for (as `recorder demo --stack-depth-outer` does).
            b = b.stack_depth(0);
        }
    }
    let rec = b.start().unwrap();
    // This thread runs the test while it records: registered, its samples have exact stack
    // bounds. A discovered Rust thread's samples taken on its small alternate signal stack before
    // discovery learns its bounds hold the leaf alone (no stack known to have room for a walk),
    // which is not what the runs below measure.
    rec.register_current_thread().unwrap();
    let repo = rec.repository_dir().to_owned();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        let rec = &rec;
        let h = std::thread::Builder::new()
            .name(name.to_owned())
            .stack_size(64 << 20)
            .spawn_scoped(s, move || {
                // Registration hands the thread all its spares at once: deep samples may come
                // right away (before, it got one buffer and waited for an L holder's refill; a
                // sleep here covered that, until the recorder thread came late).
                rec.register_current_thread().unwrap();
                recurse_deep(depth, stop)
            })
            .unwrap();
        // Sampling follows the thread's CPU time: wait for enough of it, not wall time.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < cpu {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut extra = 0;
        while rec.sampler_stats().map_or(0, |s| s.taken) < 40 && extra < 100 {
            std::thread::sleep(Duration::from_millis(50));
            extra += 1;
        }
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    });
    let report = rec.stop_with_report().unwrap();
    let sampler = report.sampler.expect("sampling was on");
    let chunks = chunk_files(&repo);
    let mut samples = Vec::new();
    for c in &chunks {
        let bytes = bytes::Bytes::from(std::fs::read(c).unwrap());
        for chunk in jfr_format::chunks(bytes) {
            let chunk = chunk.unwrap();
            for e in chunk.events() {
                let e = e.unwrap();
                if chunk.types().class(e.type_id).unwrap().name != "jdk.ExecutionSample" {
                    continue;
                }
                let t = chunk.event_thread(&e).unwrap().expect("sampled thread");
                if t.name() != name {
                    continue;
                }
                let st = chunk.event_stack_trace(&e).unwrap().expect("a stack");
                samples.push(Sample {
                    truncated: st.truncated,
                    // Every frame, inlined ones too: the depth limits count what readers show.
                    frames: st.frames.iter().map(|f| f.qualified_name()).collect(),
                    inlined: st.frames.iter().map(|f| f.frame_type.as_deref() == Some("Inlined")).collect(),
                });
            }
        }
    }
    Run { samples, chunks, taken: sampler.taken, written: sampler.written, lost: sampler.lost, _dir: dir }
}

/// The first recording of a process loads the symbolizer (DWARF of this test binary) while
/// holding the chunk lock: meanwhile the recorder thread refills spares from the pool, but nobody
/// recycles full buffers into it, so a long enough load could still exhaust it (and deep samples
/// would be counted lost, correctly). Pay that once before the runs that insist on no loss.
fn warm_up() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let run = record("warm-up", 10, None, None, (8192, 8), Duration::from_millis(100));
        assert_eq!(run.taken, run.written + run.lost);
    });
}

/// Samples of the deep thread taken while it spun at the bottom of the recursion.
fn at_leaf(run: &Run) -> Vec<&Sample> {
    let v: Vec<&Sample> = run.samples.iter().filter(|s| s.has_leaf()).collect();
    assert!(v.len() >= 5, "too few samples at the leaf: {} of {}", v.len(), run.samples.len());
    v
}

/// Exact accounting, and no loss: every sample taken is written (whole, see `check_whole`) or
/// counted lost, and none is lost. The runs give each thread enough spares for the time between
/// two refills: registration fills them all, the recorder thread refills whenever a handler
/// rotates (without L, so even while a flush holds it), and every L holder refills first thing.
/// A loss here means a thread ran out of spares although someone could have refilled them.
fn exact(run: &Run) {
    assert!(run.taken > 0);
    assert_eq!(run.taken, run.written + run.lost, "taken = written + lost");
    assert_eq!(run.lost, 0, "spares suffice: nothing may be lost ({} samples written)", run.written);
}

/// `jfr print` of every chunk: per ExecutionSample of `thread`, its frame lines.
fn jfr_stacks(chunks: &[PathBuf], thread: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for c in chunks {
        let text = jfr_ok(&["print", "--stack-depth", "5000", "--events", "jdk.ExecutionSample", path(c)]);
        for block in text.split("jdk.ExecutionSample {").skip(1) {
            if !block.contains(&format!("\"{thread}\"")) {
                continue;
            }
            let Some(st) = block.split("stackTrace = [").nth(1) else { continue };
            let st = st.split("\n  ]").next().unwrap_or("");
            out.push(st.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect());
        }
    }
    out
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn check_whole(run: &Run, name: &str, depth: u32) {
    exact(run);
    for s in at_leaf(run) {
        assert_eq!(s.count(RECURSE), depth as usize + 1, "a whole stack: {:?}", &s.frames[..8]);
        assert!(!s.truncated && s.elided().is_empty());
    }
    // The JDK's own reader sees the same whole stacks.
    let stacks = jfr_stacks(&run.chunks, name);
    let deep: Vec<_> = stacks.iter().filter(|s| s.iter().any(|l| l.contains(LEAF))).collect();
    assert!(!deep.is_empty(), "jfr print shows the samples");
    for s in deep {
        assert_eq!(s.iter().filter(|l| l.contains(RECURSE)).count(), depth as usize + 1);
        assert!(!s.iter().any(|l| l == "..."), "jfr print shows no truncation");
    }
}

#[test]
fn recursion_200_deep_in_1k_buffers_is_recorded_whole() {
    let _g = serial();
    warm_up();
    // 1 KiB buffers hold 123 frames: every sample is 2-3 fragments.
    let run = record("deep-200", 200, Some(2048), None, (1024, 64), Duration::from_millis(400));
    check_whole(&run, "deep-200", 200);
}

#[test]
fn recursion_3000_deep_in_8k_buffers_is_recorded_whole() {
    let _g = serial();
    warm_up();
    // 3000 > 2048, but both ends of 2048 keep up to 4096 frames: the stack is kept whole. 8 KiB
    // buffers hold 1019 frames: every sample is 3-4 fragments.
    let run = record("deep-3000", 3000, Some(2048), Some(2048), (8192, 96), Duration::from_millis(400));
    check_whole(&run, "deep-3000", 3000);
}

/// Every row of the depth table on a known recursion of 301 frames, small buffers throughout.
/// Frames are counted as readers show them: the functions inlined at the leaf and in the thread's
/// entry count (a 6 + 3 limit used to show up to 27 frames).
#[test]
fn depth_policy_table() {
    let _g = serial();
    warm_up();
    const D: u32 = 300;
    // Spares for the whole run: 250 ms of CPU at one sample per 4 ms is about 63 samples of up to
    // two 2 KiB buffers each (300 frames split), so no loss depends on the recorder thread
    // getting the CPU to refill them on a loaded machine (`exact` insists on none).
    let bufs = (2048, 192);
    let cpu = Duration::from_millis(250);
    // Reference: everything kept; learn the thread-entry side.
    let full = record("depth-full", D, Some(2048), None, bufs, cpu);
    exact(&full);
    let leaf = at_leaf(&full);
    let tail: Vec<String> = leaf[0].tail().to_vec();
    assert!(
        tail.iter().any(|f| f.contains("thread_start") || f.contains("start_thread")),
        "the outermost frames are the thread's entry: {tail:?}"
    );
    for s in &leaf {
        assert_eq!(s.count(RECURSE), D as usize + 1);
        assert_eq!(s.tail(), &tail[..], "the entry side is the same in every sample");
    }

    // Neither: the innermost 128.
    let run = record("depth-default", D, None, None, bufs, cpu);
    exact(&run);
    for s in at_leaf(&run) {
        assert_eq!(s.frames.len(), 128);
        assert!(s.truncated && s.elided().is_empty());
        assert_eq!(s.count(RECURSE), 128 - s.head(), "innermost frames, in order");
    }

    // stack_depth = 50: the innermost 50.
    let run = record("depth-inner", D, Some(50), None, bufs, cpu);
    exact(&run);
    for s in at_leaf(&run) {
        assert_eq!(s.frames.len(), 50);
        assert!(s.truncated && s.elided().is_empty());
        assert_eq!(s.count(RECURSE), 50 - s.head());
    }

    // stack_depth_outer = 40: the outermost 40 (the leaf is gone, so judge every sample whose
    // outer end is the recursion).
    let run = record("depth-outer", D, None, Some(40), bufs, cpu);
    exact(&run);
    let outer: Vec<&Sample> = run.samples.iter().filter(|s| s.count(RECURSE) > 0).collect();
    assert!(outer.len() >= 5);
    for s in outer {
        assert_eq!(s.frames.len(), 40);
        assert!(s.truncated && s.elided().is_empty());
        assert_eq!(s.tail(), &tail[..], "the real outermost frames");
        assert_eq!(s.count(RECURSE), 40 - tail.len());
    }

    // Both: innermost 20, <elided:K>, outermost 30.
    let run = record("depth-both", D, Some(20), Some(30), bufs, cpu);
    exact(&run);
    for s in at_leaf(&run) {
        assert_eq!(s.frames.len(), 51);
        assert!(s.truncated);
        let total = s.head() + D as usize + 1 + tail.len();
        assert_eq!(s.elided(), vec![(20, (total - 50) as u64)], "one marker with K = dropped");
        assert_eq!(s.tail(), &tail[..]);
        assert_eq!(s.count(RECURSE), 20 - s.head() + 30 - tail.len());
    }
    // The JDK shows the marker as a frame, one stack per sample; so does `recorder print`.
    let stacks = jfr_stacks(&run.chunks, "depth-both");
    let leafy: Vec<_> = stacks.iter().filter(|s| s.iter().any(|l| l.contains(LEAF))).collect();
    assert!(!leafy.is_empty());
    for s in leafy {
        assert_eq!(s.len(), 52, "20 + the marker + 30 frames, then `...`: {s:#?}");
        let markers: Vec<_> = s.iter().filter(|l| l.contains("<elided:")).collect();
        assert_eq!(markers.len(), 1, "one marker frame: {s:#?}");
        assert!(!markers[0].chars().any(char::is_whitespace), "no whitespace in the marker's name");
        assert_eq!(s.last().map(String::as_str), Some("..."), "the JDK sees the truncated flag");
        assert!(s.iter().any(|l| l.contains("start_thread") || l.contains("thread_start")));
    }

    // 6 + 3: at most 6 + the marker + 3 frames in every reader.
    let run = record("depth-6-3", D, Some(6), Some(3), bufs, cpu);
    exact(&run);
    // K counts what is not shown: the addresses the walk never kept (one frame each: they were
    // never symbolized, so the functions inlined into them are unknown), plus the frames of the
    // kept addresses cut here. The walk kept the 6 innermost addresses (the leaf side's, whose
    // inlined frames count, and then the recursion's, one frame each) and the 3 outermost.
    let entry = leaf[0].tail_addresses();
    assert!(entry.len() > 3, "{entry:?}");
    let cut_outer = entry[entry.len() - 3..].iter().sum::<usize>() - 3;
    for s in at_leaf(&run) {
        assert_eq!(s.frames.len(), 10, "{:#?}", s.frames);
        assert!(s.truncated);
        assert!(s.head() < 6, "the recursion shows: {:#?}", s.frames);
        let leaf_addresses = s.inlined[..s.head()].iter().filter(|&&i| !i).count();
        let addresses = leaf_addresses + D as usize + 1 + entry.len();
        let cut_inner = s.head() - leaf_addresses;
        let k = addresses - 9 + cut_inner + cut_outer;
        assert_eq!(s.elided(), vec![(6, k as u64)], "K = frames not shown: {:#?}", s.frames);
        assert_eq!(s.frames[7..], tail[tail.len() - 3..], "the outermost 3 as shown");
    }
    for s in jfr_stacks(&run.chunks, "depth-6-3") {
        assert!(s.len() <= 11, "jfr print shows 6 + 1 + 3 frames and `...`: {s:#?}");
    }

    // A stack no deeper than the limits is kept whole, with no marker (the entry side counts
    // whole: it has more shown frames than addresses).
    let run = record("depth-fits", 20, Some(20), Some(30 + tail.len()), bufs, cpu);
    exact(&run);
    for s in at_leaf(&run) {
        assert!(!s.truncated && s.elided().is_empty());
        assert_eq!(s.count(RECURSE), 21);
    }
}

/// Deeper than the sampler's walk bound (4096 frames, `unwind::SAMPLE_WALK_LIMIT`) with
/// both ends asked for: the walk stops there, so the outermost frames kept are the last ones
/// walked (the recursion's, not the thread's entry), and the record says it is truncated.
#[test]
fn recursion_5000_deep_with_both_ends_is_cut_at_the_walk_bound_and_marked_truncated() {
    let _g = serial();
    warm_up();
    let run = record("deep-5000", 5000, Some(20), Some(30), (8192, 96), Duration::from_millis(300));
    assert_eq!(run.taken, run.written + run.lost, "taken = written + lost");
    for s in at_leaf(&run) {
        assert!(s.truncated, "a stack cut at the walk bound is marked truncated");
        assert!(s.tail().is_empty(), "the outermost frames kept are the recursion's: {:?}", &s.frames[40..]);
        let elided = s.elided();
        assert_eq!(elided.len(), 1, "{:?}", s.frames);
        assert!(elided[0].1 < 4096, "K counts the frames walked (at most 4096): {elided:?}");
    }
}
