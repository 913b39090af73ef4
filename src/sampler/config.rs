//! The sampler's settings.

use std::time::Duration;

#[cfg(doc)]
use super::Sampler;

/// How samples are triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SamplingMode {
    /// perf events when the kernel allows them, else CPU-clock timers.
    #[default]
    Auto,
    /// Per-thread `perf_event_open` task-clock events (SIGPROF via F_SETSIG/F_SETOWN_EX).
    PerfEvent,
    /// Per-thread POSIX timers on the thread CPU clock (capped near the kernel tick rate).
    CpuTimer,
}

/// Sampler settings. Out-of-range values are clamped by [`Sampler::start`].
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Sampling period of each thread's CPU time. Default 10 ms, at least 100 µs.
    pub period: Duration,
    /// Trigger source.
    pub mode: SamplingMode,
    /// Frames per sample, innermost kept, when started with [`Sampler::start`]. Default 128,
    /// clamped to 1..=2048. [`Sampler::start_with_depth`] takes a whole
    /// [`DepthPolicy`](crate::stack::DepthPolicy) (innermost N and outermost M) instead.
    pub max_depth: usize,
    /// Bytes per buffer (at least 512). A sample larger than a buffer is split into fragments
    /// across consecutive buffers of its thread and reassembled by the drains. Default 16 KiB.
    pub buffer_bytes: usize,
    /// Buffers in the pool per slot: one active, the rest its spares (so a deep sample can
    /// span up to this many buffers). Default 3, at least 2.
    pub buffers_per_thread: usize,
    /// Threads that can be sampled at once (slots). Default 128. Memory used is
    /// `max_threads * buffers_per_thread * buffer_bytes`, allocated at start.
    pub max_threads: usize,
    /// How stacks are walked: frame pointers, DWARF CFI tables, or both (default `Auto`).
    pub unwinder: crate::unwind::Unwinder,
    /// Build the DWARF table of the shared library the recorder's code is in (the preload
    /// library of `recorder record`: the largest of a process's tables, and of code that keeps
    /// frame pointers) on the recorder's sampler thread ([`Sampler::build_unwind_tables`])
    /// instead of in `start` (default false; nothing changes when the recorder is linked into
    /// the executable). The program's own modules get their tables in `start` as always, so
    /// their stacks are whole from the first sample.
    pub tables_in_background: bool,
    /// CPU sampling (default true). Off, only the wall-clock sampler (if any) takes samples.
    pub cpu: bool,
    /// Wall-clock sampling period (`None`, the default: off; see `wall.rs`). Needs perf
    /// events: start fails without them.
    pub wall: Option<Duration>,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig {
            period: Duration::from_millis(10),
            mode: SamplingMode::Auto,
            max_depth: 128,
            buffer_bytes: 16 * 1024,
            buffers_per_thread: 3,
            max_threads: 128,
            unwinder: crate::unwind::Unwinder::Auto,
            tables_in_background: false,
            cpu: true,
            wall: None,
        }
    }
}
