//! The recorder's own events: thread starts and ends, data loss, the recording's settings, CPU
//! load and memory. Each writer takes the chunk writer, so every thread it names is defined by
//! the segment's checkpoint (docs/sampler-protocol.md I7, `tests/constant_refs.rs`).

use super::{LossReport, SettingRow};
use crate::builtin::{
    ActiveRecording, ActiveSetting, CpuLoad, DataLoss, JdkDataLoss, ResidentSetSize, ThreadCpuLoad, ThreadEnd,
    ThreadStart,
};
use crate::chunk::{ChunkWriter, SettingsThread};
use crate::stack::StackKey;
use crate::threads::ThreadRef;

/// `jdk.ThreadStart` of `tid` (it names itself as the event thread).
pub fn write_thread_start(chunk: &mut ChunkWriter, ticks: i64, tid: u32) {
    chunk.write(&ThreadStart {
        start_time: ticks,
        event_thread: ThreadRef(tid),
        stack_trace: StackKey::NONE,
        thread: ThreadRef(tid),
        parent_thread: ThreadRef(0),
    });
}

/// `jdk.ThreadEnd` of `tid`.
pub fn write_thread_end(chunk: &mut ChunkWriter, ticks: i64, tid: u32) {
    chunk.write(&ThreadEnd { start_time: ticks, event_thread: ThreadRef(tid), thread: ThreadRef(tid) });
}

/// The recording, as `jdk.ActiveRecording` describes it. The fields mean what the JDK means
/// (JDK 17's `PlatformRecorder`): limits in ms, `i64::MAX` (Long.MAX_VALUE) for none.
#[derive(Debug, Clone, Default)]
pub struct RecordingInfo {
    /// Name.
    pub name: String,
    /// The file written when the recording stops (`None`: the recorder writes none; the
    /// repository is a setting of `recorder.Recording`).
    pub destination: Option<String>,
    /// Retention age in ms (`i64::MAX`: none).
    pub max_age_ms: i64,
    /// Flush interval in ms.
    pub flush_interval_ms: i64,
    /// Retention size in bytes.
    pub max_size: i64,
    /// Start, ms since the epoch.
    pub start_ms: i64,
    /// The configured duration in ms (`i64::MAX`: the recording runs until stopped).
    pub duration_ms: i64,
}

/// `jdk.ActiveRecording` and one `jdk.ActiveSetting` per row, written by thread `tid` (0 in
/// deterministic mode); at each chunk start and whenever settings change.
pub fn write_settings(chunk: &mut ChunkWriter, now: i64, tid: u32, recording: &RecordingInfo, rows: &[SettingRow]) {
    chunk.write(&ActiveRecording {
        start_time: now,
        duration: 0,
        event_thread: SettingsThread(tid),
        stack_trace: StackKey::NONE,
        id: 1,
        name: &recording.name,
        destination: recording.destination.as_deref(),
        max_age: recording.max_age_ms,
        flush_interval: recording.flush_interval_ms,
        max_size: recording.max_size,
        recording_start: recording.start_ms,
        recording_duration: recording.duration_ms,
    });
    write_setting_rows(chunk, now, tid, rows);
}

/// One `jdk.ActiveSetting` per row, written by thread `tid` (0 in deterministic mode): the rows of
/// event types registered since the chunk's last settings (the recording is described already).
pub fn write_setting_rows(chunk: &mut ChunkWriter, now: i64, tid: u32, rows: &[SettingRow]) {
    for row in rows {
        chunk.write(&ActiveSetting {
            start_time: now,
            duration: 0,
            event_thread: SettingsThread(tid),
            stack_trace: StackKey::NONE,
            id: row.event_type as i64,
            name: &row.name,
            value: &row.value,
        });
    }
}

/// `jdk.CPULoad`: shares of all CPUs' time.
pub fn write_cpu_load(chunk: &mut ChunkWriter, now: i64, user: f32, system: f32, machine: f32) {
    chunk.write(&CpuLoad { start_time: now, jvm_user: user, jvm_system: system, machine_total: machine });
}

/// `jdk.ThreadCPULoad` of thread `tid`: shares of all CPUs' time.
pub fn write_thread_cpu_load(chunk: &mut ChunkWriter, now: i64, tid: u32, user: f32, system: f32) {
    chunk.write(&ThreadCpuLoad { start_time: now, event_thread: ThreadRef(tid), user, system });
}

/// `jdk.ResidentSetSize`.
pub fn write_resident_set_size(chunk: &mut ChunkWriter, now: i64, size: u64, peak: u64) {
    chunk.write(&ResidentSetSize { start_time: now, size, peak });
}

/// Losses on their way into the recording: noted, written into a segment, confirmed when that
/// segment is published (or noted again when its write fails). Loss is never silent.
#[derive(Debug, Default)]
pub struct Losses {
    pending: Vec<LossReport>,
    /// Written into the open segment, not yet on disk.
    unconfirmed: Vec<LossReport>,
    /// Confirmed so far.
    total_events: u64,
    total_samples: u64,
    total_bytes: u64,
}

impl Losses {
    /// Reports `loss` at the next flush.
    pub fn note(&mut self, loss: LossReport) {
        self.pending.push(loss);
    }

    /// Writes the pending reports as `recorder.DataLoss` (and `jdk.DataLoss` for bytes).
    pub fn write(&mut self, chunk: &mut ChunkWriter, now: i64) {
        let (mut events, mut samples, mut bytes) = (self.total_events, self.total_samples, self.total_bytes);
        for loss in self.pending.drain(..) {
            events += loss.events;
            samples += loss.samples;
            bytes += loss.bytes;
            chunk.write(&DataLoss {
                start_time: now,
                thread: ThreadRef(loss.thread),
                reason: &loss.reason,
                events: loss.events,
                samples: loss.samples,
                bytes: loss.bytes,
                total_events: events,
                total_samples: samples,
            });
            if loss.bytes > 0 {
                chunk.write(&JdkDataLoss { start_time: now, amount: loss.bytes, total: bytes });
            }
            self.unconfirmed.push(loss);
        }
    }

    /// The segment with the reports is on disk: returns the (events, samples) they count.
    pub fn confirm(&mut self) -> (u64, u64) {
        let (mut events, mut samples) = (0, 0);
        for loss in self.unconfirmed.drain(..) {
            events += loss.events;
            samples += loss.samples;
            self.total_events += loss.events;
            self.total_samples += loss.samples;
            self.total_bytes += loss.bytes;
        }
        (events, samples)
    }

    /// The segment with the reports did not reach the disk: report them again.
    pub fn unconfirm(&mut self) {
        let mut again = std::mem::take(&mut self.unconfirmed);
        again.append(&mut self.pending);
        self.pending = again;
    }
}

/// `recorder.PushStatistics`: the Pyroscope uploader's counters, written when they changed since
/// the last one or the chunk is new (feature `push`).
#[cfg(feature = "push")]
#[derive(Debug, Default)]
pub struct PushReport {
    written: Option<crate::push::PushStats>,
}

#[cfg(feature = "push")]
impl PushReport {
    /// Writes the event if the recording pushes and there is news (or `new_chunk`).
    pub fn write(&mut self, chunk: &mut ChunkWriter, now: i64, link: &crate::push::Link, new_chunk: bool) {
        let Some((target, stats)) = link.report() else { return };
        if !new_chunk && self.written.as_ref() == Some(&stats) {
            return;
        }
        chunk.write(&crate::builtin::PushStatistics {
            start_time: now,
            target,
            chunks_posted: stats.chunks_posted,
            uploads: stats.uploads,
            bytes_sent: stats.bytes_sent,
            jfr_bytes: stats.jfr_bytes,
            retries: stats.retries,
            rejected: stats.rejected,
            chunks_lost: stats.chunks_lost,
            bytes_lost: stats.bytes_lost,
            pending: stats.pending,
            last_error: stats.stopped.as_deref().or(stats.last_error.as_deref()),
        });
        self.written = Some(stats);
    }
}
