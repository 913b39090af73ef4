//! recorder: a flight recorder for native processes.
//!
//! It runs inside the process it records, keeps a continuous record of the application's own typed
//! events (and CPU stack samples), and writes it as JFR 2.1 chunk files into a repository
//! directory that the JDK's `jfr` tool, JDK Mission Control and `EventStream.openRepository` read
//! and follow live.
//!
//! ```no_run
//! recorder::event! {
//!     #[event(name = "app.Request", label = "Request", category = ["App"])]
//!     pub struct Request { pub path: String, pub status: i32 }
//! }
//! use recorder::Event;
//!
//! let rec = recorder::Recorder::builder().repository("/tmp/rec").start()?;
//! Request { path: "/".into(), status: 200 }.commit();
//! let mut req = Request { path: "/slow".into(), status: 0 }.begin(); // duration event
//! req.status = 200;
//! drop(req);
//! rec.dump("/tmp/now.jfr")?;
//! rec.stop()?;
//! # Ok::<(), recorder::Error>(())
//! ```
//!
//! # Design constraints
//! - The commit path takes no lock and never waits for the flusher.
//! - Loss is counted and written into the recording (`recorder.DataLoss`), never silent.
//! - Unsafe code is allowed only where a module says so (`#[allow(unsafe_code)]` below or in the
//!   module), each block with a `// SAFETY:` line; docs/architecture.md, "Unsafe code", lists
//!   those modules and why each needs it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod alloc;
mod buffer;
mod builtin;
#[cfg_attr(loom, allow(dead_code))]
mod chunk;
#[allow(unsafe_code)]
pub mod clock;
#[cfg(not(loom))]
#[allow(unsafe_code)]
mod commit;
#[cfg(not(loom))]
mod compress;
#[cfg(not(loom))]
pub mod consumer;
#[cfg(not(loom))]
#[allow(unsafe_code)]
pub mod control;
#[cfg(not(loom))]
mod diagnostics;
#[cfg(not(loom))]
#[allow(unsafe_code)]
mod encoder;
#[cfg(not(loom))]
mod event;
#[cfg(not(loom))]
#[allow(unsafe_code)]
mod fds;
#[cfg_attr(loom, allow(dead_code))]
mod flush;
#[cfg(not(loom))]
mod fork;
#[cfg_attr(loom, allow(dead_code))]
mod hash;
#[cfg(not(loom))]
mod metadata_registry;
#[cfg(not(loom))]
pub mod own_thread;
#[cfg(not(loom))]
pub mod push;
#[cfg(not(loom))]
mod recorder;
#[cfg(not(loom))]
pub mod repository;
#[cfg(not(loom))]
#[allow(unsafe_code)]
mod resident;
#[allow(unsafe_code)]
pub mod sampler;
#[cfg(not(loom))]
pub mod scope;
#[cfg(not(loom))]
mod span_context;
mod stack;
#[cfg(not(loom))]
pub mod symbolize;
pub(crate) mod sync;
#[cfg_attr(loom, allow(dead_code))]
mod threads;
#[cfg(not(loom))]
pub use threads::thread_hooks;
#[cfg(all(feature = "tracing", not(loom)))]
pub mod tracing;
/// Under the loom models, the tracing layer's span table alone (`tracing/live.rs`), with a
/// payload of the models' own: the table never looks into it.
#[cfg(loom)]
mod tracing {
    #[allow(unsafe_code)]
    pub mod live;

    /// A span's payload in the models: its start, and what `on_record` adds.
    #[derive(Debug, Default)]
    pub struct SpanData {
        /// Set at creation.
        pub start: i64,
        /// Changed by `update`.
        pub fields: String,
    }
}
pub mod units;
/// Stack unwinding: the DWARF CFI tables and the one stack walk; public for the benchmarks.
#[cfg(not(loom))]
#[allow(unsafe_code)]
#[doc(hidden)]
pub mod unwind;

#[cfg(not(loom))]
pub use encoder::Encoder;
#[cfg(not(loom))]
pub use event::{Bytes, Event, EventType, FieldType, Percentage, Span, ThreadRef, Timed};
#[cfg(not(loom))]
pub use metadata_registry::{EventSettings, TypeRegistry};
#[cfg(not(loom))]
pub use recorder::{
    known_event_types, AllocationSampling, Error, FinalReport, Recorder, RecorderBuilder, RecorderStats, Settings,
};
#[cfg(not(loom))]
#[doc(hidden)]
pub use recorder::{Holder as LockHolder, LockHold};
/// Makes a function's body an instrumented scope: `#[recorder::profile]` or
/// `#[recorder::profile(name = "...")]` (see [`scope!`]).
#[cfg(not(loom))]
pub use recorder_macros::profile;
#[cfg(not(loom))]
pub use sampler::{SamplerConfig, SamplerStats, SamplingMode};
#[cfg(not(loom))]
pub use scope::{scope_at, ScopeReport};
#[cfg(not(loom))]
pub use unwind::Unwinder;

#[cfg(not(loom))]
#[doc(hidden)]
pub use event::__field;
#[cfg(not(loom))]
#[doc(hidden)]
pub use jfr_format as __jfr;

/// The README's Rust blocks, compiled as doc tests so that none of them goes stale. The README
/// shows every feature, so its blocks compile with them all (`scripts/test.sh` tests the whole
/// workspace: the CLI turns on `push`).
#[cfg(all(doctest, feature = "push", feature = "zstd"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Internals for the loom models in `loom-tests` (only under `--cfg loom`).
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::alloc::pool as alloc_pool;
    pub use crate::buffer::EventBuffer;
    pub use crate::builtin::classes as builtin_classes;
    pub use crate::chunk::{ChunkWriter, FrameName, Publish, Resolve, Resolved, Unresolved};
    pub use crate::clock::ClockPair;
    pub use crate::flush::own::{write_settings, RecordingInfo};
    pub use crate::flush::samples::write_sample;
    pub use crate::flush::{Segment, SettingRow, Tally};
    pub use crate::sampler::buffer;
    pub use crate::stack::{DepthPolicy, StackKey, StackTable};
    pub use crate::tracing::live as span_table;
    pub use crate::tracing::SpanData;
}
