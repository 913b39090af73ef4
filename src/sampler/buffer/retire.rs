//! A slot's retirement (normal context): its gate closed, its buffers handed to the full queue
//! for the L holders to drain and the slot to be reaped.

use super::*;

impl Core {
    /// Closes the slot's gate (I13): no handler is admitted from now on. Returns true once no
    /// handler is inside, i.e. the caller now has the owner's role; false if one still is (it
    /// leaves within moments: a handler takes no lock and never blocks).
    pub(super) fn close_gate(slot: &ThreadSlot) -> bool {
        // Acquire: pairs with the Release clear of INSIDE in `Admission::drop`; when INSIDE is
        // clear here, the last admitted handler's writes happen-before what the caller does next.
        let was = slot.suppress.fetch_or(RETIRED, Ordering::Acquire);
        if cfg!(recorder_mutation = "retire_without_gate") {
            return true;
        }
        // Acquire: as above, for a handler that left after our RMW.
        was & INSIDE == 0 || slot.suppress.load(Ordering::Acquire) & INSIDE == 0
    }

    /// Owner-side retirement (§6, exit), normal context on the owning thread: close the gate
    /// (I11, I13), take `active` and the spares, push them on the full queue, mark the slot
    /// EXITED. Disarm the thread's timer before calling. Returns true if the caller should post
    /// the wakeup.
    ///
    /// See [`Core::retire_own`]; this one is for callers with nothing else to release.
    #[must_use = "post the recorder wakeup when it returns true"]
    pub fn retire_slot(&self, slot: &ThreadSlot) -> bool {
        self.retire_own(slot).wake
    }

    /// [`Core::retire_slot`], saying what it found. The thread's own handler is not running (it
    /// runs to completion before this code resumes), so a gate held by it is held by a handler
    /// that was abandoned half-way: its sample is counted lost and the gate taken over
    /// ([`Retired::abandoned`]). A stale signal of another thread may hold the gate for a moment,
    /// which this waits out, yielding at most `RETIRE_YIELDS` times: a holder still there then
    /// never returns either, and the slot is given up as it is (gated, never reaped, its buffers
    /// out of the pool) rather than wait forever ([`Retired::given_up`]).
    pub fn retire_own(&self, slot: &ThreadSlot) -> Retired {
        let owner = slot.tid();
        let mut abandoned = false;
        let mut yields = 0u32;
        loop {
            // Acquire: pairs with the Release clear of INSIDE in `Admission::drop`.
            let word = slot.suppress.fetch_or(RETIRED, Ordering::Acquire);
            if word & INSIDE == 0 || cfg!(recorder_mutation = "retire_without_gate") {
                break;
            }
            if held_by(word, owner) {
                Self::count_lost(slot);
                // Relaxed: only this thread's own handler could write the word, and it is
                // not running (it would only find RETIRED set and leave).
                slot.suppress.store(RETIRED, Ordering::Relaxed);
                abandoned = true;
                break;
            }
            if yields >= RETIRE_YIELDS {
                return Retired { wake: false, abandoned, given_up: true };
            }
            yields += 1;
            spin_wait();
        }
        // Same-thread order with our own handler (I11): the gate is closed before we touch the
        // buffers.
        compiler_fence(Ordering::SeqCst);
        Retired { wake: self.take_over(slot), abandoned, given_up: false }
    }

    /// Retirement on behalf of a thread the caller proved dead (discovery): as
    /// [`Core::retire_slot`], but if a handler is still admitted to the slot (the thread was
    /// not dead after all, or died inside its handler) nothing but the gate changes and `None` is
    /// returned: call again later. The gate stays closed meanwhile (no new samples are written).
    /// `Some(wake)`: retired; post the wakeup if `wake`.
    #[must_use = "retry on None; post the recorder wakeup on Some(true)"]
    pub fn retire_on_behalf(&self, slot: &ThreadSlot) -> Option<bool> {
        if !Self::close_gate(slot) {
            return None;
        }
        Some(self.take_over(slot))
    }

    /// The owner's role after the gate is closed: empty the slot onto the full queue, EXITED.
    pub(super) fn take_over(&self, slot: &ThreadSlot) -> bool {
        // Acquire: pairs with the handler's Release store of `active` in `rotate` (the gate's
        // Acquire already orders it; kept for a same-thread retire). Release: orders the pushes.
        let b = slot.active.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: null or a pointer into `self.buffers`.
        if let Some(b) = unsafe { b.as_ref() } {
            self.push_full(b);
        }
        for spare in slot.spares.iter() {
            // Acquire: pairs with the Release CAS in `fill_spare`.
            let s = spare.swap(ptr::null_mut(), Ordering::Acquire);
            // SAFETY: null or a pointer into `self.buffers`.
            if let Some(s) = unsafe { s.as_ref() } {
                self.push_full(s);
            }
        }
        // Release: the pushes above happen-before an L holder's Acquire load of EXITED in
        // `drain_full`, which therefore drains them before reaping the slot.
        slot.state.store(SLOT_EXITED, Ordering::Release);
        self.notify_recorder()
    }
}
