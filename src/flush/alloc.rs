//! Allocation samples as a flush source: the records the allocator hook committed
//! (`crate::alloc`), turned into `jdk.ObjectAllocationSample` events under L after the event
//! buffers, and, with the live set tracked, one `recorder.LiveObject` per sampled block still
//! allocated plus a `recorder.LiveSet` summary whenever the live set changed or a chunk started.

use super::{LossReport, SampleSource, Segment, SettingRow, Stopped};
use crate::alloc::{AllocConfig, AllocRecord, AllocationStats, LiveRef, Sampling};
use crate::builtin::{self, AllocationStatistics, LiveObject, LiveSet, ObjectAllocationSample};
use crate::chunk::{ChunkWriter, ClassKey};
use crate::clock::ClockPair;
use crate::stack::StackKey;
use crate::threads::ThreadRef;
use std::collections::BTreeMap;

/// A sampled block the live set follows.
#[derive(Debug, Clone, Copy)]
struct Tracked {
    live: LiveRef,
    ticks: i64,
    tid: u32,
    size: u64,
    weight: i64,
    stack: StackKey,
    class: u64,
}

/// Allocation samples (see the module docs).
#[derive(Debug)]
pub struct AllocSamples {
    sampling: Option<Sampling>,
    config: AllocConfig,
    /// Live-set entries by table index (an index names one block at a time).
    tracked: BTreeMap<u32, Tracked>,
    /// The live set changed since the last snapshot.
    changed: bool,
    /// The chunk the last snapshot was written into.
    snapshot_chunk: Option<ClockPair>,
    snapshot: u64,
    /// Losses reported so far (the hook's counters are totals).
    reported_lost: u64,
    reported_untracked: u64,
    /// Size-class keys by bucket.
    classes: BTreeMap<u32, u64>,
    /// The final counters, for the statistics of the flush after `stop`.
    stopped: Option<AllocationStats>,
}

impl AllocSamples {
    /// The source of a started sampling.
    pub(crate) fn new(sampling: Sampling, config: AllocConfig) -> AllocSamples {
        AllocSamples {
            sampling: Some(sampling),
            config,
            tracked: BTreeMap::new(),
            changed: false,
            snapshot_chunk: None,
            snapshot: 0,
            reported_lost: 0,
            reported_untracked: 0,
            classes: BTreeMap::new(),
            stopped: None,
        }
    }

    fn drain_pool(&mut self, seg: &mut Segment<'_>) {
        let Some(sampling) = self.sampling.as_mut() else { return };
        let interval = self.config.interval;
        let mut fresh = Vec::new();
        let classes = &mut self.classes;
        sampling.drain(&mut |rec| {
            let t = write_sample(seg, rec, interval, classes);
            if let Some(live) = rec.live {
                fresh.push(Tracked { live, ..t });
            }
        });
        self.follow(fresh);
    }

    /// Follows the sampled blocks of `fresh` that are still allocated. A block freed before its
    /// sample was drained is never followed; and since drains need not come out in sampling
    /// order (`pool.rs`, P5), an entry is only ever replaced by a block that holds it now.
    fn follow(&mut self, fresh: Vec<Tracked>) {
        let Some(sampling) = self.sampling.as_ref() else { return };
        for t in fresh {
            if sampling.is_live(t.live) {
                self.tracked.insert(t.live.index, t);
                self.changed = true;
            }
        }
    }

    /// The live-set snapshot, if the live set changed or this chunk has none yet.
    fn write_snapshot(&mut self, chunk: &mut ChunkWriter, now: i64) {
        let Some(sampling) = self.sampling.as_ref() else { return };
        if !self.config.live_set {
            return;
        }
        let before = self.tracked.len();
        self.tracked.retain(|_, t| sampling.is_live(t.live));
        if self.tracked.len() != before {
            self.changed = true;
        }
        if !self.changed && self.snapshot_chunk == chunk.start() {
            return;
        }
        self.changed = false;
        self.snapshot_chunk = chunk.start();
        self.snapshot += 1;
        let snapshot = self.snapshot as i64;
        let mut bytes = 0i64;
        for t in self.tracked.values() {
            bytes += t.weight;
            chunk.write(&LiveObject {
                start_time: now,
                event_thread: ThreadRef(t.tid),
                stack_trace: t.stack,
                object_class: ClassKey(t.class),
                allocation_size: t.size,
                weight: t.weight,
                allocation_time: t.ticks,
                snapshot,
            });
        }
        let untracked = sampling.stats().untracked as i64;
        let objects = self.tracked.len() as i64;
        chunk.write(&LiveSet { start_time: now, snapshot, objects, estimated_bytes: bytes, untracked });
    }

    fn losses(&mut self, stats: AllocationStats) -> Vec<LossReport> {
        let mut out = Vec::new();
        if stats.lost > self.reported_lost {
            out.push(LossReport {
                reason: "allocation sample pool full".into(),
                samples: stats.lost - self.reported_lost,
                ..LossReport::default()
            });
            self.reported_lost = stats.lost;
        }
        if stats.untracked > self.reported_untracked {
            out.push(LossReport {
                reason: format!(
                    "live-set table full: {} allocation samples not followed by the live set",
                    stats.untracked - self.reported_untracked
                ),
                ..LossReport::default()
            });
            self.reported_untracked = stats.untracked;
        }
        out
    }
}

/// The HorvitzThompson estimate of the bytes a sample of `size` bytes stands for at `interval`:
/// `size / P(sampled)`, `P = 1 - exp(-size / interval)`.
pub fn estimated_bytes(size: u64, interval: u64) -> i64 {
    if size == 0 {
        return 0;
    }
    let p = -(-(size as f64) / interval.max(1) as f64).exp_m1();
    (size as f64 / p).round() as i64
}

/// The size class of `size`: `[2^k, 2^(k+1))`, all below 16 bytes in one.
pub fn size_bucket(size: u64) -> u32 {
    if size < 16 {
        return 3;
    }
    63 - size.leading_zeros()
}

/// The class name of bucket `k`: `rust.alloc.<low>-<high>` with binary units.
pub fn bucket_name(k: u32) -> String {
    let low = if k <= 3 { 0 } else { 1u64 << k };
    let high = 1u128 << (k + 1);
    format!("rust.alloc.{}-{}", human(u128::from(low)), human(high))
}

fn human(b: u128) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b;
    let mut unit = 0;
    while v >= 1024 && v.is_multiple_of(1024) && unit + 1 < UNITS.len() {
        v /= 1024;
        unit += 1;
    }
    format!("{v}{}", UNITS[unit])
}

/// One `jdk.ObjectAllocationSample`; returns what the live set keeps of it.
fn write_sample(
    seg: &mut Segment<'_>,
    rec: &AllocRecord<'_>,
    interval: u64,
    classes: &mut BTreeMap<u32, u64>,
) -> Tracked {
    let stack = seg.stacks.intern(rec.frames, rec.truncated);
    let bucket = size_bucket(rec.size);
    let class = *classes.entry(bucket).or_insert_with(|| seg.chunk.class_key(&bucket_name(bucket)));
    let weight = estimated_bytes(rec.size, interval);
    seg.chunk.write(&ObjectAllocationSample {
        start_time: rec.ticks,
        event_thread: ThreadRef(rec.tid),
        stack_trace: stack,
        object_class: ClassKey(class),
        weight,
    });
    *seg.tally.samples.entry(rec.tid).or_insert(0) += 1;
    Tracked {
        live: LiveRef { index: 0, word: 0 },
        ticks: rec.ticks,
        tid: rec.tid,
        size: rec.size,
        weight,
        stack,
        class,
    }
}

impl SampleSource for AllocSamples {
    fn drain(&mut self, seg: &mut Segment<'_>) {
        self.drain_pool(seg);
        let now = crate::clock::ticks();
        self.write_snapshot(seg.chunk, now);
    }

    fn drain_ready(&mut self, seg: &mut Segment<'_>) {
        self.drain_pool(seg);
    }

    fn maintain(&mut self, _chunk: &mut ChunkWriter) -> Vec<LossReport> {
        Vec::new()
    }

    fn losses(&mut self) -> Vec<LossReport> {
        match self.sampling.as_ref().map(Sampling::stats) {
            Some(stats) => self.losses(stats),
            None => Vec::new(),
        }
    }

    fn settings(&self) -> Vec<SettingRow> {
        let t = builtin::OBJECT_ALLOCATION_SAMPLE;
        let mut rows = vec![
            SettingRow::new(t, "enabled", "true"),
            SettingRow::new(t, "interval", format!("{} bytes", self.config.interval)),
            SettingRow::new(t, "liveSet", self.config.live_set.to_string()),
        ];
        if self.config.live_set {
            let how = match self.sampling.as_ref().map(Sampling::headers) {
                Some(true) => "header (system allocator on glibc)",
                _ => "table search on free",
            };
            rows.push(SettingRow::new(builtin::LIVE_OBJECT, "freeTracking", how));
        }
        rows
    }

    /// `recorder.AllocationStatistics`: the counters so far (after this flush's drain: `taken`
    /// also counts the samples committed since), and after `stop` the final ones, once.
    fn write_statistics(&mut self, chunk: &mut ChunkWriter, now: i64) {
        let stats = match (self.sampling.as_ref(), self.stopped.take()) {
            (Some(sampling), _) => sampling.stats(),
            (None, Some(stats)) => stats,
            (None, None) => return,
        };
        let interval = self.config.interval;
        chunk.write(&AllocationStatistics {
            start_time: now,
            interval,
            taken: stats.taken,
            written: stats.written,
            lost: stats.lost,
            failed: stats.failed,
            untracked: stats.untracked,
        });
    }

    fn stop(&mut self, seg: &mut Segment<'_>) -> Stopped {
        let Some(mut sampling) = self.sampling.take() else { return Stopped::default() };
        let interval = self.config.interval;
        let mut fresh = Vec::new();
        let classes = &mut self.classes;
        let stats = sampling.stop(&mut |rec| {
            let t = write_sample(seg, rec, interval, classes);
            if let Some(live) = rec.live {
                fresh.push(Tracked { live, ..t });
            }
        });
        // The last snapshot, while the table still follows frees (dropping `sampling` empties it).
        self.sampling = Some(sampling);
        self.follow(fresh);
        self.write_snapshot(seg.chunk, crate::clock::ticks());
        let losses = self.losses(stats);
        self.sampling = None;
        self.stopped = Some(stats);
        Stopped { losses, stats: Some(Box::new(stats)) }
    }
}
