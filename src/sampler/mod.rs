//! The CPU sampler core: per-thread sampling sources, the SIGPROF capture path, and the
//! flush-safe SamplerBuffer protocol of `docs/sampler-protocol.md`.
//!
//! # Who calls what
//! ```text
//! let (sampler, locked) = Sampler::start(config)?;      // once; Arc<Sampler> if shared
//! // L owns SamplerLocked: `flush::samples::CpuAndWallSamples` keeps it, in the recorder's `State`
//! state.add_sample_source(Box::new(CpuAndWallSamples::new(Arc::clone(&sampler), locked)));
//!
//! flusher (every flush interval), holding L:
//!     event buffers -> sampler.drain(&mut locked, &mut |rec| intern + ExecutionSample)
//!     -> own event buffer -> checkpoint -> header           (sampler pass AFTER event buffers)
//! recorder thread (sampler.exclude_current_thread() first):
//!     loop { let work = sampler.wait_pending(timeout);       // without L; refills spares
//!            every ~100 ms-1 s: sampler.discover_threads_unlocked();   // without L
//!            lock L; if work { sampler.drain_full(..) }
//!            lost = sampler.take_lost(..) -> write lost as data-loss events; unlock L }
//! application threads (optional, zero delay, exact bounds): sampler.register_current_thread()
//! new threads, first thing (`thread_hooks`' pthread_create wrapper), if the owner called
//!     sampler.register_new_threads(true): register_thread_start()   // the same registration
//! end: lock L; flush; let report = Arc::into_inner(sampler).stop(&mut locked, &mut |rec| ..);
//!      write report.lost; final flush
//! ```
//! - [`Sampler::start`] returns the [`Sampler`] (shared, `Sync`) and the [`SamplerLocked`] state,
//!   which the caller keeps *inside* the chunk-writer mutex L, so every method that takes
//!   `&mut SamplerLocked` is proven to run under L.
//! - The flusher, holding L, calls [`Sampler::drain`] after the event buffers (full queue, then
//!   active buffers; docs/sampler-protocol.md §3 steps 2-3).
//! - The recorder thread loops on [`Sampler::wait_pending`] (which refills spares, no L needed);
//!   when it returns true or times out it takes L and calls [`Sampler::drain_full`] and
//!   [`Sampler::take_lost`]. Periodically, *without* L, it calls
//!   [`Sampler::discover_threads_unlocked`]: /proc is read outside every lock and the result
//!   applied under the registry lock only (the whole of discovery needs nothing L protects).
//! - [`Sampler::stop`] disarms everything, waits out in-flight handlers and hands the last
//!   records to its callback.
//!
//! # Design constraints
//! Modules: `buffer` (the protocol, loom-tested, no syscalls), `signal` (signal context only),
//! `timer` (sampling sources), `wall` (the wall-clock sampler thread: its requests are one-shot
//! perf events whose samples go through the same buffers, flagged `FLAG_WALL`), `config` and
//! `stats` (what goes in and comes out), `shared` (what the handler reaches; arming and
//! disarming sources), `lifecycle` (start, the owner's calls, stop), `registration` and
//! `discovery` (the sampler's side of the thread registry in `crate::threads`: a thread's
//! source is armed when it registers or is discovered, disarmed when it unregisters or is
//! retired). Thread state is found in the handler through the siginfo:
//! `si_value` of the POSIX timer carries the slot index, `si_fd` of a perf event indexes a
//! preallocated fd table; no thread-local is read in signal context. A slot is written only by a
//! handler admitted to it (`Core::admit`: the thread whose tid it holds, while it is not retired;
//! I13), so a stale signal after slot reuse is dropped, not written.
//!
//! Locks, all in normal context and never in the handler: L (the caller's; proven by
//! `&mut SamplerLocked`), the lifecycle lock (start / stop / thread-exit guards), the registry
//! lock (slot bookkeeping for register / unregister / discovery) and the buffer pool's lock
//! (`buffer.rs`); order L -> lifecycle -> registry -> pool. Registering threads and the recorder
//! thread refill spares from the pool without L, so a long L hold does not starve the handlers.
//!
//! # Signal safety
//! See `signal.rs`: no allocation, no lock, no formatting, no panic, errno preserved, every
//! frame-pointer read validated against the thread's stack bounds, and frames read only when the
//! stack pointer lies inside them.
//!
//! # Thread discovery and retirement (docs/sampler-protocol.md §6)
//! Until its stack bounds are known, a discovered thread's samples carry the leaf PC and the stack
//! pointer only; discovery looks the last stack pointer up in /proc/self/maps and stores the
//! mapping as the bounds. The main thread's stack grows down: its bounds reach as low as the
//! stack may grow (RLIMIT_STACK, the mapping below), and the part known to be mapped follows the
//! growth (`signal::walkable`). Registered threads retire their slot from a thread-local guard at
//! exit. A slot is retired on behalf of another thread only when that thread is proven dead:
//! `tgkill(pid, tid, 0)` fails with ESRCH, or its tid now names a thread with another start time
//! (stat field 22) or a zombie. A thread missing from a /proc listing, a listing that could not be
//! read (EMFILE, ENOMEM), a stat that could not be read or a thread that registered after the
//! listing is never taken for dead. Even then the retirer takes over the slot only once no
//! handler is admitted to it (I13), and the next `drain_full` processes its buffers and reaps it.
//! fork: a `pthread_atfork` child hook leaves the child not recording, with no lock held.

#[cfg(not(loom))]
#[allow(unsafe_code)]
mod blocked;
pub mod buffer;
#[cfg(not(loom))]
mod config;
#[cfg(not(loom))]
mod discovery;
#[cfg(not(loom))]
mod handler_time;
#[cfg(not(loom))]
mod lifecycle;
#[cfg(not(loom))]
mod registration;
#[cfg(not(loom))]
mod shared;
#[cfg(not(loom))]
mod signal;
#[cfg(not(loom))]
mod stacks;
#[cfg(not(loom))]
mod stats;
#[cfg(not(loom))]
mod timer;
#[cfg(not(loom))]
mod wall;

pub use buffer::SampleRecord;
#[cfg(not(loom))]
pub(crate) use signal::with_unwind_tables;
#[cfg(not(loom))]
pub use signal::{adopt_application_action, changing_own_action};

/// The sampler's signal source without the sampler, for `benches/sampling.rs`'s no-op floor: the
/// same per-thread perf event delivering SIGPROF, so the bench measures exactly what the sampler
/// adds on top of it.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod bench_support {
    pub use super::handler_time::{enable as time_handler, report as handler_times, HandlerTimes};
    use std::io;
    use std::time::Duration;

    /// Opens and enables a task-clock perf event for `tid` that sends SIGPROF every `period` of
    /// its CPU time; returns the fd to pass to [`close_perf_signal`].
    pub fn open_perf_signal(tid: u32, period: Duration) -> io::Result<i32> {
        let fd = super::timer::perf_open(tid, period)?;
        if let Err(e) = super::timer::perf_enable(fd, tid) {
            super::timer::disarm(super::timer::Source::Perf(fd), tid);
            return Err(e);
        }
        Ok(fd)
    }

    /// Disables and closes a source from [`open_perf_signal`] of thread `tid`.
    pub fn close_perf_signal(fd: i32, tid: u32) {
        super::timer::disarm(super::timer::Source::Perf(fd), tid);
        super::timer::release_quarantine();
    }
}

#[cfg(not(loom))]
pub use crate::threads::exits::ExitedThreadCpu;
#[cfg(not(loom))]
pub use crate::threads::registry::ThreadStart;
#[cfg(not(loom))]
pub use config::{SamplerConfig, SamplingMode};
#[cfg(not(loom))]
pub(crate) use lifecycle::own_library_segments;
#[cfg(not(loom))]
pub use lifecycle::Sampler;
#[cfg(not(loom))]
pub(crate) use registration::attach_span_cell;
#[cfg(not(loom))]
pub use registration::register_thread_start;
#[cfg(not(loom))]
use shared::SamplerShared;
#[cfg(not(loom))]
pub use stats::{DiscoveryReport, SamplerLocked, SamplerStats, StopReport, ThreadStats};
#[cfg(not(loom))]
pub use wall::{WallBatch, WallState, WallStats, DEFAULT_PERIOD as DEFAULT_WALL_PERIOD, REQUESTS_PER_TICK};
