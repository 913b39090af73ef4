//! The one switch point between std and loom synchronization primitives. Every atomic, cell and
//! fence used by the buffer protocols comes from here, so that the loom models in `loom-tests` run
//! the shipped code.
#![allow(unused_imports)]

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(loom)]
pub(crate) use loom::thread::yield_now;

/// loom has no `compiler_fence`; a full fence is stronger and keeps the model sound
/// (crossbeam's loom#117 workaround).
#[cfg(loom)]
pub(crate) fn compiler_fence(order: Ordering) {
    loom::sync::atomic::fence(order)
}

/// `UnsafeCell` with loom's `with`/`with_mut` API on both sides.
#[cfg(not(loom))]
#[derive(Debug, Default)]
#[allow(dead_code)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
#[allow(dead_code)]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// A mutex for normal-context code of the buffer protocols (never taken in signal context):
/// the crate's fork-safe futex mutex ([`crate::fork::ForkSafeMutex`]), or loom's under the models. Poisoning is ignored under loom: a panicking model
/// fails anyway.
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: crate::fork::ForkSafeMutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = crate::fork::ForkSafeGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Mutex<T> {
        #[cfg(not(loom))]
        let inner = crate::fork::ForkSafeMutex::new(value);
        #[cfg(loom)]
        let inner = loom::sync::Mutex::new(value);
        Mutex { inner }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        let guard = self.inner.lock();
        #[cfg(loom)]
        let guard = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard
    }
}

impl<T> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mutex { .. }")
    }
}

/// One step of a normal-context wait loop on another thread's progress (never in signal
/// context): a scheduler yield, which under loom lets the model run the thread waited for.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(not(loom))]
    std::thread::yield_now();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// std atomics for process-wide statics (const-initialized), which loom's types cannot be. Code
/// that a loom model exercises never uses these.
pub(crate) mod statics {
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    };
}
