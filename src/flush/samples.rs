//! Sampler-style sources: records taken in signal context, turned into events under L. The CPU
//! sampler is the first; `write_sample` is what every one of them shares.

use super::Segment;
use crate::builtin;
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
    seg.chunk.event(builtin::EXECUTION_SAMPLE, |e| {
        e.long(rec.ticks);
        e.thread(rec.tid);
        e.stack(key);
        e.fixed(THREAD_STATE_RUNNABLE);
        if span_ids {
            e.long(rec.span as i64);
        }
    });
    *seg.tally.samples.entry(rec.tid).or_insert(0) += 1;
}

#[cfg(not(loom))]
pub use cpu::CpuSamples;

#[cfg(not(loom))]
mod cpu {
    use super::write_sample;
    use crate::builtin;
    use crate::chunk::ChunkWriter;
    use crate::flush::{LossReport, SampleSource, Segment, SettingRow, Stopped};
    use crate::sampler::{SampleRecord, Sampler, SamplerLocked, SamplingMode};
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

    /// CPU samples (`jdk.ExecutionSample`) from the SIGPROF sampler (src/sampler).
    #[derive(Debug)]
    pub struct CpuSamples {
        /// Also held by the recorder thread (to wait for work without L) and by `Recorder` (for
        /// registrations and statistics without L).
        sampler: Option<Arc<Sampler>>,
        /// The part of the sampler only L holders touch: it lives here, inside L.
        locked: SamplerLocked,
        samples_since_rate: u64,
        rate_since: Option<Instant>,
        reported_unattributed: u64,
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

    impl CpuSamples {
        /// The source of a started sampler.
        pub fn new(sampler: Arc<Sampler>, locked: SamplerLocked) -> CpuSamples {
            CpuSamples {
                sampler: Some(sampler),
                locked,
                samples_since_rate: 0,
                rate_since: None,
                reported_unattributed: 0,
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

    impl SampleSource for CpuSamples {
        fn drain(&mut self, seg: &mut Segment<'_>) {
            let Some(sampler) = self.sampler.as_ref() else { return };
            name_exited(seg, sampler);
            let mut written = 0;
            sampler.drain(&mut self.locked, &mut |rec: &SampleRecord<'_>| {
                write_sample(seg, rec);
                written += 1;
            });
            self.samples_since_rate += written;
        }

        fn drain_ready(&mut self, seg: &mut Segment<'_>) {
            let Some(sampler) = self.sampler.as_ref() else { return };
            name_exited(seg, sampler);
            let mut written = 0;
            sampler.drain_full(&mut self.locked, &mut |rec: &SampleRecord<'_>| {
                write_sample(seg, rec);
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
            losses
        }

        fn settings(&self) -> Vec<SettingRow> {
            let Some(sampler) = self.sampler.as_ref() else { return Vec::new() };
            vec![
                SettingRow::new(builtin::EXECUTION_SAMPLE, "enabled", "true"),
                SettingRow::new(builtin::EXECUTION_SAMPLE, "period", format!("{} us", sampler.period().as_micros())),
                SettingRow::new(builtin::EXECUTION_SAMPLE, "samplingMode", self.mode_name(true)),
                SettingRow::new(builtin::EXECUTION_SAMPLE, "unwinder", sampler.unwinder().name()),
            ]
        }

        /// `recorder.SamplerStatistics`: the sampler's mode and its effective rate since the last one.
        fn write_statistics(&mut self, chunk: &mut ChunkWriter, now: i64) {
            let Some(sampler) = self.sampler.as_ref() else { return };
            let at = Instant::now();
            let Some(since) = self.rate_since.replace(at) else { return };
            let elapsed = at.duration_since(since).as_secs_f64();
            if elapsed <= 0.0 {
                return;
            }
            let samples = std::mem::take(&mut self.samples_since_rate);
            let stats = sampler.stats();
            let period_ns = sampler.period().as_nanos() as i64;
            let mode = self.mode_name(false);
            let (written, leaf_only, truncated) = crate::diagnostics::take_stack_shapes();
            chunk.event(builtin::SAMPLER_STATISTICS, |e| {
                e.long(now);
                e.string(mode);
                e.long(period_ns);
                e.double(samples as f64 / elapsed);
                e.long(stats.taken as i64);
                e.long(stats.lost as i64);
                e.long(stats.slots_in_use as i64);
                e.long(written as i64);
                e.long(leaf_only as i64);
                e.long(truncated as i64);
            });
        }

        fn stop(&mut self, seg: &mut Segment<'_>) -> Stopped {
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
            let report = owned.stop(&mut self.locked, &mut |rec: &SampleRecord<'_>| write_sample(seg, rec));
            let mut losses = self.losses(report.lost, report.stats.unattributed);
            losses.extend(refused.into_iter().map(refusal));
            Stopped { losses, sampler: Some(report.stats), ..Stopped::default() }
        }
    }
}
