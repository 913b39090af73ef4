//! Sampler-style sources: records taken in signal context, turned into events under L. The CPU
//! sampler is the first; `write_sample` is what every one of them shares.

use super::Segment;
use crate::builtin::{self, ExecutionSample, SampleContext, WallClockSample};
use crate::chunk::ThreadStateKey;
use crate::sampler::SampleRecord;
use jfr_format::metadata::THREAD_STATE_RUNNABLE;

/// One `jdk.ExecutionSample`: the sampled thread, the interned stack, RUNNABLE, the span (if the
/// recording declares it).
pub fn write_sample(seg: &mut Segment<'_>, rec: &SampleRecord<'_>) {
    // A leaf-only sample (stack bounds not known yet) is an honest, truncated one-frame stack.
    let key = seg.stacks.intern(rec.ips, rec.truncated || rec.leaf_only);
    let span_ids = builtin::sample_span_ids();
    #[cfg(not(loom))]
    crate::diagnostics::note_sample(rec.ips.len(), rec.truncated, rec.leaf_only);
    let thread = seg.chunk.sampled_thread(rec.tid, &rec.comm);
    let sample = ExecutionSample {
        start_time: rec.ticks,
        sampled_thread: thread,
        stack_trace: key,
        state: ThreadStateKey(THREAD_STATE_RUNNABLE),
    };
    if span_ids {
        seg.chunk.write_followed_by(&sample, &SampleContext::of_span(rec.span));
    } else {
        seg.chunk.write(&sample);
    }
    *seg.tally.samples.entry(rec.tid).or_insert(0) += 1;
}

/// One `profiler.WallClockSample`: `samples` periods of thread `tid` in state `state` (a
/// `jdk.types.ThreadState` key) with stack `key`.
pub fn write_wall_sample(
    seg: &mut Segment<'_>,
    ticks: i64,
    tid: u32,
    key: crate::stack::StackKey,
    state: u64,
    samples: u64,
) {
    write_wall_sample_of(seg, ticks, tid, None, key, state, samples);
}

/// [`write_wall_sample`] of a period the sampler's handler took, under the name (`comm`) the
/// thread had then.
fn write_wall_sample_of(
    seg: &mut Segment<'_>,
    ticks: i64,
    tid: u32,
    comm: Option<&crate::threads::RawComm>,
    key: crate::stack::StackKey,
    state: u64,
    samples: u64,
) {
    let thread = match comm {
        Some(comm) => seg.chunk.sampled_thread(tid, comm),
        None => {
            seg.chunk.reference_thread(tid);
            crate::chunk::ThreadKey(u64::from(tid))
        }
    };
    seg.chunk.write(&WallClockSample {
        start_time: ticks,
        sampled_thread: thread,
        stack_trace: key,
        state: ThreadStateKey(state),
        samples: samples.min(u64::from(u32::MAX)) as u32,
    });
    // Counted as the periods it stands for: a failed write loses that many.
    seg.tally.count_other("wall-clock periods", tid, samples);
}

#[cfg(not(loom))]
pub use cpu::CpuAndWallSamples;

#[cfg(not(loom))]
mod cpu {
    use super::{write_sample, write_wall_sample};
    use crate::builtin;
    use crate::chunk::ChunkWriter;
    use crate::flush::{LossReport, SampleSource, Segment, SettingRow, Stopped};
    use crate::sampler::{SampleRecord, Sampler, SamplerLocked, SamplerStats, SamplingMode};
    use crate::sampler::{WallBatch, WallState};
    use crate::stack::StackKey;
    use jfr_format::metadata::{THREAD_STATE_RUNNABLE, THREAD_STATE_SLEEPING, THREAD_STATE_WAITING};
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Names the threads that exited since the last drain after themselves (`comm`, read on the
    /// thread as it exited): their last samples are drained after they and their /proc entries
    /// are gone. Called before the drain takes the buffers they retired.
    fn name_exited(seg: &mut Segment<'_>, sampler: &Sampler) {
        for (tid, comm) in sampler.take_exited_names() {
            seg.chunk.observe_thread(tid, &comm, None);
        }
    }

    /// The last stack of each thread (from its latest CPU or wall sample): the stack of its
    /// batched wall periods (`sampler::wall`). L holders only.
    #[derive(Debug, Default)]
    struct LastStacks {
        by_tid: HashMap<u32, (i64, StackKey)>,
    }

    impl LastStacks {
        fn note(&mut self, rec: &SampleRecord<'_>, key: StackKey) {
            let e = self.by_tid.entry(rec.tid).or_insert((rec.ticks, key));
            if rec.ticks >= e.0 {
                *e = (rec.ticks, key);
            }
        }
    }

    /// Writes one sampler record: a CPU sample, or a wall sample of one period (the thread ran:
    /// RUNNABLE).
    fn write_record(seg: &mut Segment<'_>, rec: &SampleRecord<'_>, last: &mut LastStacks) {
        let key = seg.stacks.intern(rec.ips, rec.truncated || rec.leaf_only);
        last.note(rec, key);
        if rec.wall {
            super::write_wall_sample_of(seg, rec.ticks, rec.tid, Some(&rec.comm), key, THREAD_STATE_RUNNABLE, 1);
        } else {
            write_sample(seg, rec);
        }
    }

    /// Writes the wall sampler's batches, each with the stack its thread waits in (walked while
    /// it waited), else its last stack (or, for a thread never sampled, the PC of the system call
    /// it is blocked in, as a one-frame truncated stack).
    fn write_batches(seg: &mut Segment<'_>, batches: Vec<WallBatch>, last: &LastStacks) {
        for b in batches {
            let key = match (&b.stack, last.by_tid.get(&b.tid)) {
                (Some((frames, complete)), _) => seg.stacks.intern(frames, !complete),
                (None, Some(&(_, key))) => key,
                (None, None) if b.pc != 0 => seg.stacks.intern(&[b.pc], true),
                (None, None) => StackKey::NONE,
            };
            let state = match b.state {
                WallState::Running => THREAD_STATE_RUNNABLE,
                WallState::Sleeping => THREAD_STATE_SLEEPING,
                WallState::Waiting | WallState::Other => THREAD_STATE_WAITING,
            };
            write_wall_sample(seg, b.ticks, b.tid, key, state, b.periods);
        }
    }

    /// CPU samples (`jdk.ExecutionSample`) from the SIGPROF sampler (src/sampler), and wall-clock
    /// samples (`profiler.WallClockSample`) when its wall sampler runs.
    #[derive(Debug)]
    pub struct CpuAndWallSamples {
        last: LastStacks,
        /// Also held by the recorder thread (to wait for work without L) and by `Recorder` (for
        /// registrations and statistics without L).
        sampler: Option<Arc<Sampler>>,
        /// The part of the sampler only L holders touch: it lives here, inside L.
        locked: SamplerLocked,
        samples_since_rate: u64,
        rate_since: Option<Instant>,
        reported_unattributed: u64,
        /// Once `stop` took the sampler: what the last `recorder.SamplerStatistics` says of it, in
        /// the flush after `stop` (the samples `stop` wrote are counted in no other).
        stopped: Option<StoppedSampler>,
    }

    /// The sampler's last statistics, its period and mode, as `stop` left them.
    #[derive(Debug)]
    struct StoppedSampler {
        stats: SamplerStats,
        period: Duration,
        mode: &'static str,
    }

    /// Wall periods lost (the wall sampler thread was late, a request was never served, too many
    /// batches between two flushes).
    fn wall_loss(periods: u64) -> Option<LossReport> {
        (periods > 0).then(|| LossReport {
            reason: "wall-clock periods not sampled (sampler thread late, or request not served)".into(),
            samples: periods,
            ..LossReport::default()
        })
    }

    fn thread_alive(tid: u32) -> bool {
        crate::threads::proc::task_listed(tid)
    }

    /// A thread that got no sampler slot (every slot taken by live threads): its samples are not
    /// taken until discovery finds it a slot, and the recording says so, for that thread.
    fn refusal(thread: u32) -> LossReport {
        LossReport {
            reason: "thread not sampled from its start: no free sampler slot".into(),
            thread,
            ..LossReport::default()
        }
    }

    impl CpuAndWallSamples {
        /// The source of a started sampler.
        pub fn new(sampler: Arc<Sampler>, locked: SamplerLocked) -> CpuAndWallSamples {
            CpuAndWallSamples {
                last: LastStacks::default(),
                sampler: Some(sampler),
                locked,
                samples_since_rate: 0,
                rate_since: None,
                reported_unattributed: 0,
                stopped: None,
            }
        }

        fn losses(&mut self, lost: Vec<(u32, u64)>, unattributed: u64) -> Vec<LossReport> {
            let mut out: Vec<LossReport> = lost
                .into_iter()
                .map(|(thread, samples)| LossReport {
                    reason: "sampler buffers full".into(),
                    samples,
                    thread,
                    ..LossReport::default()
                })
                .collect();
            if unattributed > self.reported_unattributed {
                out.push(LossReport {
                    reason: "sample of a thread without a sampler slot".into(),
                    samples: unattributed - self.reported_unattributed,
                    ..LossReport::default()
                });
                self.reported_unattributed = unattributed;
            }
            out
        }

        fn mode_name(&self, long: bool) -> &'static str {
            match (self.sampler.as_ref().map(|s| s.mode()), long) {
                (Some(SamplingMode::PerfEvent), true) => "perf_event (task-clock per thread)",
                (Some(SamplingMode::PerfEvent), false) => "perf_event",
                (Some(SamplingMode::CpuTimer), true) => "cpu_timer (POSIX timer on the thread CPU clock)",
                (Some(SamplingMode::CpuTimer), false) => "cpu_timer",
                _ => "auto",
            }
        }
    }

    impl SampleSource for CpuAndWallSamples {
        fn drain(&mut self, seg: &mut Segment<'_>) {
            let Some(sampler) = self.sampler.as_ref() else { return };
            name_exited(seg, sampler);
            // Batches first: every served request they follow is committed, so in this drain.
            let batches = sampler.take_wall_batches();
            let mut written = 0;
            let last = &mut self.last;
            sampler.drain(&mut self.locked, &mut |rec: &SampleRecord<'_>| {
                write_record(seg, rec, last);
                written += 1;
            });
            write_batches(seg, batches, &self.last);
            self.samples_since_rate += written;
        }

        fn drain_ready(&mut self, seg: &mut Segment<'_>) {
            let Some(sampler) = self.sampler.as_ref() else { return };
            name_exited(seg, sampler);
            let mut written = 0;
            let last = &mut self.last;
            sampler.drain_full(&mut self.locked, &mut |rec: &SampleRecord<'_>| {
                write_record(seg, rec, last);
                written += 1;
            });
            self.samples_since_rate += written;
        }

        fn maintain(&mut self, _chunk: &mut ChunkWriter) -> Vec<LossReport> {
            let Some(sampler) = self.sampler.clone() else { return Vec::new() };
            // Thread discovery ran before, without L, and its names went to the chunk
            // (`Inner::sampler_loop`, `State::maintain_sources`).
            let lost = sampler.take_lost(&mut self.locked);
            let unattributed = sampler.stats().unattributed;
            let mut losses = self.losses(lost, unattributed);
            losses.extend(sampler.take_refused().into_iter().map(refusal));
            losses.extend(wall_loss(sampler.take_wall_lost()));
            // Exited threads' batches were written by the last drains; forget their stacks.
            self.last.by_tid.retain(|&tid, _| thread_alive(tid));
            losses
        }

        fn settings(&self) -> Vec<SettingRow> {
            let Some(sampler) = self.sampler.as_ref() else { return Vec::new() };
            let mut rows = Vec::new();
            if sampler.cpu_enabled() {
                rows.extend([
                    SettingRow::new(builtin::EXECUTION_SAMPLE, "enabled", "true"),
                    SettingRow::new(
                        builtin::EXECUTION_SAMPLE,
                        "period",
                        format!("{} us", sampler.period().as_micros()),
                    ),
                    SettingRow::new(builtin::EXECUTION_SAMPLE, "samplingMode", self.mode_name(true)),
                    SettingRow::new(builtin::EXECUTION_SAMPLE, "unwinder", sampler.unwinder().name()),
                ]);
            }
            if let Some(period) = sampler.wall_period() {
                rows.extend([
                    SettingRow::new(builtin::WALL_CLOCK_SAMPLE, "enabled", "true"),
                    SettingRow::new(builtin::WALL_CLOCK_SAMPLE, "period", format!("{} ms", period.as_millis())),
                    SettingRow::new(
                        builtin::WALL_CLOCK_SAMPLE,
                        "requestsPerTick",
                        crate::sampler::REQUESTS_PER_TICK.to_string(),
                    ),
                ]);
            }
            rows
        }

        /// `recorder.SamplerStatistics`: the sampler's mode and its effective rate since the last one.
        fn write_statistics(&mut self, chunk: &mut ChunkWriter, now: i64) {
            let (stats, period, mode) = match (self.sampler.as_ref(), self.stopped.take()) {
                (Some(sampler), _) => (sampler.stats(), sampler.period(), self.mode_name(false)),
                // The flush after `stop`: the last statistics, once.
                (None, Some(s)) => (s.stats, s.period, s.mode),
                (None, None) => return,
            };
            let at = Instant::now();
            let Some(since) = self.rate_since.replace(at) else { return };
            let elapsed = at.duration_since(since).as_secs_f64();
            if elapsed <= 0.0 {
                return;
            }
            let samples = std::mem::take(&mut self.samples_since_rate);
            let period_ns = period.as_nanos() as i64;
            let (written, leaf_only, truncated) = crate::diagnostics::take_stack_shapes();
            chunk.write(&builtin::SamplerStatistics {
                start_time: now,
                mode,
                period: period_ns,
                rate: samples as f64 / elapsed,
                taken: stats.taken,
                lost: stats.lost,
                threads: stats.slots_in_use as u64,
                samples_written: written,
                leaf_only_stacks: leaf_only,
                truncated_stacks: truncated,
            });
        }

        fn stop(&mut self, seg: &mut Segment<'_>) -> Stopped {
            let mode = self.mode_name(false);
            let Some(mut sampler) = self.sampler.take() else { return Stopped::default() };
            // The recorder thread and `Recorder` dropped their handles before the final flush;
            // a `register_current_thread` in progress lets go within moments.
            let owned = loop {
                match Arc::try_unwrap(sampler) {
                    Ok(s) => break s,
                    Err(shared) => {
                        sampler = shared;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            };
            let refused = owned.take_refused();
            name_exited(seg, &owned);
            let period = owned.period();
            let last = &mut self.last;
            let mut written = 0;
            let report = owned.stop(&mut self.locked, &mut |rec: &SampleRecord<'_>| {
                write_record(seg, rec, last);
                written += 1;
            });
            self.samples_since_rate += written;
            self.stopped = Some(StoppedSampler { stats: report.stats.clone(), period, mode });
            write_batches(seg, report.wall_batches, &self.last);
            let mut losses = self.losses(report.lost, report.stats.unattributed);
            losses.extend(refused.into_iter().map(refusal));
            losses.extend(wall_loss(report.wall_lost));
            Stopped { losses, stats: Some(Box::new(report.stats)) }
        }
    }
}
