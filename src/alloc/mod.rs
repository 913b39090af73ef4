//! Allocation sampling: a global allocator that forwards every call to the allocator it wraps
//! and, while a recording samples allocations ([`crate::RecorderBuilder::allocation_sampling`]),
//! records one allocation per `interval` bytes on average with its stack, as
//! `jdk.ObjectAllocationSample` events whose `weight` estimates the bytes it stands for.
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: recorder::alloc::SamplingAllocator = recorder::alloc::SamplingAllocator::new();
//!
//! let rec = recorder::Recorder::builder()
//!     .allocation_sampling(recorder::alloc::DEFAULT_INTERVAL)
//!     .allocation_live_set(true)
//!     .start()?;
//! # Ok::<(), recorder::Error>(())
//! ```
//!
//! # What the hook does, and where
//! Unsampled allocations (almost all) cost a thread-local countdown: one subtraction and a
//! branch ([`hook::skip`]). A sampled one walks its stack into a preallocated record and commits
//! it with one Release store (`pool.rs` explains why records, not SamplerBuffers or event
//! buffers); the flusher turns records into events after the event buffers, under the
//! chunk-writer lock, at every flush, so a streamed allocation sample always has its stack.
//!
//! - **Allocates nothing, takes no lock, never recurses.** The hook's memory (the record pool,
//!   the live table) is allocated when a recording starts; its per-thread state is a
//!   const-initialized thread-local without a destructor; it calls nothing that allocates.
//! - **Works anywhere an allocation can happen**: on threads the recorder never saw (no
//!   registration), in an application's signal handler (atomics, `clock_gettime`, `gettid` and
//!   the `open`/`read`/`close` of `/proc/self/maps` are all async-signal-safe), during TLS
//!   destruction at thread exit (the thread-local has no destructor, so it is never "destroyed"),
//!   and in a forked child (a `pthread_atfork` child hook leaves the child not sampling, with the
//!   parent's records left alone; the child may start a recording of its own).
//! - **Bounded memory, loss counted.** A recording preallocates its records, and reserves address
//!   space for many more (`pool.rs`'s reserve: memory only for the records a burst writes, from
//!   a mapping made when the recording starts, so the hook never allocates); the flusher is asked
//!   for an early flush at each quarter of the base taken and whenever a sample needs the
//!   reserve. A sample that finds no record free is counted lost (`recorder.DataLoss`, reason
//!   "allocation sample pool full"); every flush writes the counts (`recorder.AllocationStatistics`).
//! - **The recorder's own allocations are not sampled**: its threads (the flusher, the recorder
//!   thread and the Pyroscope uploader) opt out, and the entry points an application calls (start,
//!   flush, dump, stop, thread registration) suspend sampling on the calling thread while they run.
//!   The one exception is the commit path's event buffer, allocated on an application thread's
//!   first commit (and when one fills up): it is sampled and attributed honestly, its stack shows
//!   `recorder::commit`.
//!
//! # Live set
//! With [`crate::RecorderBuilder::allocation_live_set`], every sampled block is entered into a
//! fixed table until it is freed, and each flush writes a `recorder.LiveObject` per sampled block
//! still allocated (`recorder dump --live`). Frees are recognized without a hash lookup on the
//! free path when the wrapped allocator is the system allocator on glibc: sampled blocks are
//! allocated a few bytes larger with a header naming their table entry, and `dealloc` tells them
//! apart by the 8 bytes before the pointer ([`hook::header`]). With any other allocator (or a
//! `malloc` interposed by a preloaded library) the header cannot be told apart safely, and
//! `dealloc` searches the address's bucket of the table instead (one cache line) while the live
//! set is tracked. A library that interposes the C allocator itself (`recorder record --alloc`)
//! samples through [`interpose`] and always uses the table search. In header mode, memory
//! allocated through this allocator must be freed through
//! it (as Rust requires): a C `free()` of a sampled block would see the header, not the block.
#![allow(unsafe_code)]

#[cfg(not(loom))]
mod allocator;
#[cfg(not(loom))]
mod hook;
#[cfg(not(loom))]
pub mod interpose;
#[cfg(loom)]
#[doc(hidden)]
pub mod pool;
#[cfg(not(loom))]
pub(crate) mod pool;

#[cfg(not(loom))]
pub(crate) use allocator::{records_for, AllocConfig, Sampling, StartError};
#[cfg(not(loom))]
pub use allocator::{AllocationStats, SamplingAllocator, DEFAULT_INTERVAL};
#[cfg(not(loom))]
pub(crate) use hook::{forget_in_child, pool_bytes, suspend, AllocRecord};
#[cfg(not(loom))]
pub(crate) use pool::LiveRef;
