//! recorder: a flight recorder for native processes.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod clock;
pub mod symbolize;
#[allow(unsafe_code)]
pub(crate) mod sync;
