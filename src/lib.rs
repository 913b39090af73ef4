//! recorder: a flight recorder for native processes.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod clock;
#[allow(unsafe_code)]
pub(crate) mod sync;
pub mod symbolize;
