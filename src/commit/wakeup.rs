//! The flusher's wakeup.

use crate::sync::statics::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Wakes the flusher from another thread without a lock.
#[derive(Debug, Default)]
pub(crate) struct Wakeup {
    pending: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

impl Wakeup {
    /// The thread to wake (the flusher), set once when it starts.
    pub(crate) fn set_thread(&self, thread: std::thread::Thread) {
        let _ = self.thread.set(thread);
    }

    /// Asks the flusher to run soon.
    pub(crate) fn notify(&self) {
        // Release: pairs with the Acquire swap in `take`; nothing else is published.
        if !self.pending.swap(true, Ordering::Release) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// A wakeup was asked for since the last call.
    pub(crate) fn take(&self) -> bool {
        // Acquire: pairs with `notify`.
        self.pending.swap(false, Ordering::Acquire)
    }
}
