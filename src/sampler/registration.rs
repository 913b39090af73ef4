//! A thread's registration and unregistration: on itself (exact stack bounds, an exit guard),
//! at its start (the thread-start hook), and its retirement on behalf of a thread proven dead.

use super::buffer::{StackBounds, SLOT_EXITED, SLOT_LIVE};
use super::shared::{SamplerShared, LIFECYCLE};
use super::signal;
use super::timer::Source;
use crate::sync::Ordering;
use crate::threads::proc::start_time;
use crate::threads::registry::{Entry, Registry, ThreadStart};
use crate::threads::{getpid, gettid};
use std::cell::RefCell;
use std::io;

#[cfg(doc)]
use super::Sampler;

thread_local! {
    /// Unregisters a registered thread when it exits (normal context; never read by the
    /// handler).
    pub(super) static EXIT_GUARD: RefCell<Option<ExitGuard>> = const { RefCell::new(None) };
}

pub(super) struct ExitGuard {
    pub(super) generation: u64,
    pub(super) start_time: u64,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        if self.generation == 0 {
            // Disarmed (replaced or unregistered): takes no lock, so it may be dropped
            // while LIFECYCLE is held.
            return;
        }
        let _life = LIFECYCLE.lock();
        // Relaxed: under LIFECYCLE, which `start`/`stop` hold while publishing/unpublishing.
        let shared = signal::SHARED.load(Ordering::Relaxed);
        // SAFETY: under LIFECYCLE the published `SamplerShared` cannot be freed.
        if let Some(shared) = unsafe { shared.as_ref() } {
            if shared.generation == self.generation {
                shared.unregister(gettid(), self.start_time);
            }
        }
    }
}

/// Points the sampler slot of thread `tid` (if it is sampled) at its span word (null: none).
/// Normal context; takes the lifecycle and registry locks (in that order).
pub(crate) fn attach_span_cell(tid: u32, cell: *const std::sync::atomic::AtomicU64) {
    let _life = LIFECYCLE.lock();
    // Relaxed: under LIFECYCLE, which `start`/`stop` hold while publishing/unpublishing.
    let shared = signal::SHARED.load(Ordering::Relaxed);
    // SAFETY: under LIFECYCLE the published `SamplerShared` cannot be freed.
    let Some(shared) = (unsafe { shared.as_ref() }) else { return };
    let reg = shared.threads.registry.lock();
    for (index, entry) in reg.entries.iter().enumerate() {
        if entry.as_ref().is_some_and(|e| e.tid == tid) {
            if let Some(slot) = shared.core.slot(index) {
                slot.set_span_cell(cell);
            }
        }
    }
}

/// Stack bounds of the calling thread (shared with the event-stack walk, which caches them per
/// thread). The main thread's stack may still grow: only the part above its current stack
/// pointer counts as verified (the handler checks the rest when it gets there).
pub(super) fn current_stack_bounds() -> StackBounds {
    let (lo, hi) = crate::unwind::current_stack_bounds();
    if hi == 0 {
        return StackBounds::default();
    }
    let verified_lo = if gettid() == getpid() { crate::unwind::frame_pointer().clamp(lo, hi) } else { lo };
    StackBounds { lo, verified_lo, hi }
}

/// Why a registration did not happen.
pub(super) enum RegisterError {
    NoSlot,
    Io(io::Error),
}

impl SamplerShared {
    /// Whether some slot waits for an L holder to reap it (retired, not yet FREE).
    pub(super) fn reaping_pending(&self) -> bool {
        self.core.slots().iter().any(|s| s.state() == SLOT_EXITED)
    }

    /// Registers the calling thread (see [`Sampler::register_current_thread`]). Returns the
    /// exit guard it replaced, to be dropped by the caller (after releasing LIFECYCLE).
    ///
    /// `new_thread`: called first thing on a thread that just started (the thread-start
    /// hook). Such a thread is identified by its tid alone (start time 0) unless the registry
    /// already holds an entry with its tid (discovery found it first, or a dead thread's
    /// entry awaits retirement after tid reuse): no /proc read on the creation path. The tid
    /// suffices because the thread's exit guard removes the entry before the tid can be
    /// reused; a thread leaving without thread-local destructors (a raw `exit` system call)
    /// is retired by discovery once `tgkill` says it is gone, as before.
    pub(super) fn register_current(&self, new_thread: bool) -> Result<Option<ExitGuard>, RegisterError> {
        let tid = gettid();
        let bounds = current_stack_bounds();
        let start = if new_thread { 0 } else { start_time(tid) };
        {
            let mut reg = self.threads.registry.lock();
            if new_thread && reg.knows_tid(tid) {
                drop(reg);
                return self.register_current(false);
            }
            if reg.is_excluded(tid, start) {
                return Ok(None);
            }
            if let Some(index) = reg.find(tid, start) {
                let Some(entry) = reg.entries.get_mut(index).and_then(Option::as_mut) else {
                    return Ok(None);
                };
                if entry.registered {
                    return Ok(None);
                }
                // Discovered before: now with exact bounds and an exit guard.
                entry.registered = true;
                if let (Some(slot), true) = (self.core.slot(index), bounds.hi != 0) {
                    slot.set_stack_bounds(bounds.lo, bounds.verified_lo, bounds.hi);
                }
            } else {
                // An entry with our tid but another start time belongs to a dead thread whose
                // tid we reuse (proof enough): retire it now rather than at the next discovery.
                for i in reg.reused_tid(tid, start) {
                    retire_dead(self, &mut reg, i);
                }
                let slot = self.core.claim_slot(tid, bounds).ok_or(RegisterError::NoSlot)?;
                slot.set_span_cell(crate::span_context::cell_for(tid));
                let index = slot.index() as usize;
                // Every spare now, before the timer can fire: the first samples (deep ones
                // need several buffers) do not wait for a refill.
                self.core.fill_spares(slot);
                match self.arm(tid, index) {
                    Ok(source) => {
                        if let Some(e) = reg.entries.get_mut(index) {
                            *e = Some(Entry {
                                tid,
                                start_time: start,
                                source: Some(source),
                                registered: true,
                                retiring: false,
                            });
                        }
                    }
                    Err(err) => {
                        self.retire_own(slot);
                        return Err(RegisterError::Io(err));
                    }
                }
            }
        }
        // `try_with`: fails only during thread teardown, when there is nothing to guard. A
        // previous guard is disarmed (so that dropping it cannot unregister us) and handed
        // back: its drop must not run here, under LIFECYCLE in `register_thread_start`.
        let generation = self.generation;
        Ok(EXIT_GUARD
            .try_with(|g| {
                g.borrow_mut().replace(ExitGuard { generation, start_time: start }).map(|mut old| {
                    old.generation = 0;
                    old
                })
            })
            .ok()
            .flatten())
    }
}

/// The thread-start hook's half in the sampler: registers the calling thread with the running
/// sampler if its owner enabled [`Sampler::register_new_threads`]. Normal context; called
/// first thing on a new thread (`thread_hooks`), so its first instruction of user code is
/// sampled. When every slot is taken it does not wait (a thread's start is the program's
/// time, and a wait could be where the thread is cancelled): the thread is refused (counted;
/// discovery samples it once a slot is free), and if some slots belong to exited threads the
/// recorder has not reaped yet, the recorder is woken to reap them for the next thread.
pub fn register_thread_start() -> ThreadStart {
    let life = LIFECYCLE.lock();
    // Relaxed: under LIFECYCLE, which `start`/`stop` hold while publishing/unpublishing.
    let shared = signal::SHARED.load(Ordering::Relaxed);
    // SAFETY: under LIFECYCLE the published `SamplerShared` cannot be freed.
    let Some(shared) = (unsafe { shared.as_ref() }) else {
        return ThreadStart::NotSampling;
    };
    if !shared.threads.registers_new_threads() {
        return ThreadStart::NotSampling;
    }
    match shared.register_current(true) {
        Ok(old) => {
            drop(life);
            drop(old);
            ThreadStart::Registered
        }
        Err(RegisterError::Io(_)) => ThreadStart::Failed,
        Err(RegisterError::NoSlot) => {
            if shared.reaping_pending() {
                shared.post_wake();
            }
            shared.threads.refusals.note(gettid());
            ThreadStart::Refused
        }
    }
}

/// Retires entry `index` on behalf of its thread, which the caller proved dead (registry lock
/// held). Returns false if a handler is still inside the slot: the entry stays, marked
/// `retiring`, for the next discovery.
pub(super) fn retire_dead(shared: &SamplerShared, reg: &mut Registry<Source>, index: usize) -> bool {
    let Some(entry) = reg.entries.get_mut(index).and_then(Option::as_mut) else {
        return true;
    };
    if let Some(source) = entry.source.take() {
        shared.disarm(source, entry.tid);
    }
    entry.retiring = true;
    let done = match shared.core.slot(index) {
        Some(slot) if slot.state() == SLOT_LIVE => match shared.core.retire_on_behalf(slot) {
            Some(wake) => {
                if wake {
                    shared.post_wake();
                }
                true
            }
            None => false,
        },
        _ => true,
    };
    if done {
        if let Some(e) = reg.entries.get_mut(index) {
            *e = None;
        }
    }
    done
}
