//! The crate's lock, made for `fork()`: a fork copies memory but none of the other threads, so a
//! lock another thread held at that moment stays held in the child unless something releases it.
//! [`ForkSafeMutex`] can be released there, and [`HeldAcrossFork`] is what the `pthread_atfork`
//! handlers (`recorder/atfork.rs`) hold the process-wide locks through. A leaf of the crate: it
//! uses std and libc only.
//!
//! Every lock of the crate is a [`ForkSafeMutex`] or, where a condvar goes with it, std's: their
//! waiters wait in the kernel, so the child inherits none of them. Never a parking_lot mutex,
//! whose queue of waiting threads a fork copies (see the type's docs).
#![allow(unsafe_code)]

/// The crate's mutex (normal context only): its word is the whole lock and its waiters wait in the
/// kernel (a private futex on the word), so a fork child, whose address space has none of the
/// parent's waiters, is clean once the word of a lock a vanished thread held is reset
/// ([`ForkSafeMutex::release_after_fork`]).
///
/// Not parking_lot's mutex: parking_lot queues a waiting thread in a process-wide table, as a node
/// in that thread's own thread-local memory. A fork copies the table with the nodes of the parent
/// threads that were waiting on any lock (threads the atfork `prepare` handler makes wait, by
/// holding the process-wide locks, and threads waiting for a recording's locks), and the child's
/// glibc reuses those threads' stacks for its new threads. The child then either hands a lock to
/// a waiter that does not exist (parking_lot's fair unlock: the lock stays held forever) or
/// relinks a node that is still in another queue, whatever lock it waits for: `tests/fork.rs` saw
/// a child whose every thread waited on a futex forever (CI, 2026-12-01).
pub(crate) struct ForkSafeMutex<T: ?Sized> {
    /// 0: unlocked; 1: locked; 2: locked, and a thread may wait in the kernel.
    state: std::sync::atomic::AtomicU32,
    value: std::cell::UnsafeCell<T>,
}

// SAFETY: the lock gives one thread at a time access to the value, as `std::sync::Mutex`.
unsafe impl<T: ?Sized + Send> Send for ForkSafeMutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for ForkSafeMutex<T> {}

/// Holds a [`ForkSafeMutex`]; unlocks it when dropped.
pub(crate) struct ForkSafeGuard<'a, T: ?Sized> {
    lock: &'a ForkSafeMutex<T>,
    /// Not `Send`: the lock is released by the thread that took it.
    _not_send: std::marker::PhantomData<*const ()>,
}

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

impl<T> ForkSafeMutex<T> {
    pub(crate) const fn new(value: T) -> ForkSafeMutex<T> {
        ForkSafeMutex { state: std::sync::atomic::AtomicU32::new(UNLOCKED), value: std::cell::UnsafeCell::new(value) }
    }
}

impl<T: ?Sized> ForkSafeMutex<T> {
    pub(crate) fn lock(&self) -> ForkSafeGuard<'_, T> {
        use std::sync::atomic::Ordering;
        // Acquire: pairs with the Release swap in `unlock`: the previous holder's writes are
        // visible to this one.
        if self.state.compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        ForkSafeGuard { lock: self, _not_send: std::marker::PhantomData }
    }

    #[cold]
    fn lock_contended(&self) {
        use std::sync::atomic::Ordering;
        // A short spin first: most holds are short (a flush holds L longer: then we sleep).
        for _ in 0..100 {
            // Relaxed: a hint only; the exchange below decides.
            if self.state.load(Ordering::Relaxed) == UNLOCKED {
                break;
            }
            std::hint::spin_loop();
        }
        // Acquire: as in `lock`. CONTENDED, not LOCKED: a waiter may still sleep behind us, and
        // our unlock must wake it.
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            // SAFETY: FUTEX_WAIT on our own word; it returns at once unless the word is still
            // CONTENDED, and spurious wakeups go round the loop.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.state.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    CONTENDED,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
    }

    fn unlock(&self) {
        use std::sync::atomic::Ordering;
        // Release: pairs with the Acquire in `lock`/`lock_contended` of the next holder.
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            // SAFETY: FUTEX_WAKE of one waiter on our own word.
            unsafe {
                libc::syscall(libc::SYS_futex, self.state.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1)
            };
        }
    }

    /// The value, through exclusive access to the lock (no locking needed).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    pub(crate) fn is_locked(&self) -> bool {
        // Relaxed: a diagnostic and fork-hook question, answered while no other thread runs or
        // without ordering needs.
        self.state.load(std::sync::atomic::Ordering::Relaxed) != UNLOCKED
    }

    /// Releases a lock that the atfork `prepare` handler (or, in the child, a vanished parent
    /// thread) holds across fork. In the parent, a plain unlock (it wakes the threads that queued
    /// meanwhile). In the child, the word is set back to "unlocked": the parent's waiters are not
    /// in the child.
    ///
    /// # Safety
    /// The lock is held by the calling thread (forgotten guard) or, in the child, by a thread
    /// that does not exist; no guard of it is alive. `child`: only in the fork child before it
    /// starts a thread.
    pub(crate) unsafe fn release_after_fork(&self, child: bool) {
        if child {
            // Relaxed: single-threaded child.
            self.state.store(UNLOCKED, std::sync::atomic::Ordering::Relaxed);
        } else {
            self.unlock();
        }
    }
}

impl<T: Default> Default for ForkSafeMutex<T> {
    fn default() -> ForkSafeMutex<T> {
        ForkSafeMutex::new(T::default())
    }
}

impl<T: ?Sized> std::fmt::Debug for ForkSafeMutex<T> {
    /// Does not lock (a `Debug` of a structure holding the lock must not wait for it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkSafeMutex").field("locked", &self.is_locked()).finish_non_exhaustive()
    }
}

impl<T: ?Sized + std::fmt::Debug> std::fmt::Debug for ForkSafeGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized> std::ops::Deref for ForkSafeGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock: no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T: ?Sized> std::ops::DerefMut for ForkSafeGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and the guard is borrowed mutably.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T: ?Sized> Drop for ForkSafeGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.unlock();
    }
}

/// A process-wide lock that the `pthread_atfork` handlers hold across `fork()`, so that no other
/// thread holds it while the process is copied.
pub(crate) trait HeldAcrossFork: Sync {
    /// Before fork: takes the lock and keeps it held after the call returns.
    fn hold(&self);

    /// After fork, in the parent: releases the lock [`hold`](Self::hold) took (it wakes the
    /// threads that queued meanwhile).
    ///
    /// # Safety
    /// The calling thread took the lock through [`hold`](Self::hold).
    unsafe fn release(&self);

    /// After fork, in the child: sets the lock back to "unlocked" (the parent's waiters are not
    /// in the child).
    ///
    /// # Safety
    /// Only in the fork child before it starts a thread; the lock is held by the calling thread
    /// through [`hold`](Self::hold) or by a thread that does not exist, and no guard of it is
    /// alive.
    unsafe fn force_release_in_child(&self);
}

impl<T: ?Sized + Send> HeldAcrossFork for ForkSafeMutex<T> {
    fn hold(&self) {
        std::mem::forget(self.lock());
    }

    unsafe fn release(&self) {
        // SAFETY: the caller's contract: this thread holds the lock (its guard forgotten).
        unsafe { self.release_after_fork(false) }
    }

    unsafe fn force_release_in_child(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.release_after_fork(true) }
    }
}

#[cfg(test)]
mod tests {
    use super::ForkSafeMutex;
    use std::time::Duration;

    static LOCK: ForkSafeMutex<u32> = ForkSafeMutex::new(0);

    /// The CI hang of 2026-12-01, on a lock of its own: a parent thread waits for a lock held at
    /// fork time; in the child (the holder gone) a new thread, on a stack of another size than
    /// the waiter's (glibc does not hand it the waiter's old stack), waits behind the child's
    /// main thread. With parking_lot's mutex the unlock woke the parent's waiter, which does not
    /// exist in the child, and the new thread slept forever (1 run in 3 of this scenario).
    #[test]
    fn a_waiter_in_the_parent_is_not_woken_in_place_of_the_childs() {
        let held = LOCK.lock();
        let waiter = std::thread::spawn(|| *LOCK.lock() += 1);
        // Long enough for the waiter to sleep in the kernel.
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: the child uses the lock, std threads and libc only, and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: plain libc; the default SIGALRM action ends a hung child.
            unsafe { libc::alarm(10) };
            std::mem::forget(held);
            for _ in 0..3 {
                // SAFETY: single-threaded child; the lock's holder (the parent's guard) is gone.
                unsafe { LOCK.release_after_fork(true) };
                let main_holds = LOCK.lock();
                let late = std::thread::Builder::new().stack_size(1 << 20).spawn(|| *LOCK.lock() += 1).unwrap();
                std::thread::sleep(Duration::from_millis(30)); // `late` sleeps in the kernel
                drop(main_holds);
                late.join().unwrap();
                std::mem::forget(LOCK.lock()); // held again, as by a vanished thread
            }
            // SAFETY: leaves without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        drop(held);
        waiter.join().unwrap();
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child hung or failed: {status:#x}");
        assert_eq!(*LOCK.lock(), 1);
    }

    #[test]
    fn contended_increments_are_all_counted() {
        static COUNT: ForkSafeMutex<u64> = ForkSafeMutex::new(0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..20_000 {
                        *COUNT.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*COUNT.lock(), 80_000);
        assert!(!COUNT.is_locked());
    }
}
