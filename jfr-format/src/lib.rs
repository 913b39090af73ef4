//! JFR 2.1 chunk reader and writer.
//!
//! The format crate of the `recorder` project: sans I/O (it parses `Bytes` and appends to
//! caller-provided `Vec<u8>`s), without unsafe code, and written so that **no input makes it panic,
//! hang or allocate more than a small multiple of the input's size** (the tests and fuzz targets
//! assert 64 × input + 1 MiB): counts are checked against the bytes that remain and never reserve
//! memory before elements are decoded, nesting is bounded by [`MAX_NESTING`], decoded metadata text
//! and deep constant resolution are budgeted by the record and chunk sizes, and every error names
//! the byte offset and what was expected there.
//!
//! Constant references stay [`Value::Ref`] even with key 0: the JDK resolves key 0 when the pool
//! defines it (HotSpot's frame type 0 is "Interpreted"), and [`Chunk::resolve`] returns `None`
//! for a key the pool lacks, which readers treat as null.
//!
//! - [`header`]: the 68-byte chunk header and the live-update (guard/generation) protocol.
//! - [`metadata`]: the type model, the JDK 17 stack-trace and thread types ([`metadata::jdk_types`])
//!   and event-type helpers.
//! - [`write`](mod@write): value encoders, records, metadata, checkpoints and [`write::ChunkEncoder`].
//! - [`read`]: [`read::Chunk`] (header, metadata, lazily resolved constant pools, events, refresh of
//!   live chunks) and [`read::chunks`] for multi-chunk files.
//! - [`view`]: typed views of threads and stack traces.
//!
//! The format rules followed here, and why, are in the repository's `docs/jfr-format.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod header;
pub mod metadata;
pub mod read;
pub mod value;
pub mod varint;
pub mod view;
pub mod write;

pub use error::{Error, Result};
pub use header::ChunkHeader;
pub use metadata::{Class, Field, Metadata};
pub use read::{chunks, Chunk, Event, Item, LeadingFields, Refresh};
pub use value::{Object, Text, Value};
pub use view::{FrameInfo, StackTraceInfo, ThreadInfo};
pub use write::{Checkpoint, ChunkEncoder};

/// Deepest nesting of inline structs (and metadata elements) the reader accepts.
pub const MAX_NESTING: usize = 64;
