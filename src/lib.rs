//! recorder: a flight recorder for native processes.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod clock;
#[allow(unsafe_code)]
pub mod sampler;
#[allow(unsafe_code)]
pub(crate) mod sync;

/// Internals for the loom models in `loom-tests` (only under `--cfg loom`).
#[cfg(loom)]
#[doc(hidden)]
pub mod __loom {
    pub use crate::sampler::buffer;
}
