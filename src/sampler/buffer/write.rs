//! The handler's side of the buffers (signal context): writing a record or a sample's
//! fragments, rotating to a spare, publishing full buffers and waking the recorder.

use super::*;

impl Core {
    /// The handler's buffer step (§2 steps 4-7): reserve `HEADER_WORDS + nframes` words in the
    /// slot's active buffer, rotating to the spare when it does not fit, write the header, let
    /// `fill` push exactly `nframes` IPs (missing ones are written as 0), and commit with a Release
    /// store of `pos`. Call [`Core::admit`] first (it counts the sample as taken). A record larger
    /// than a buffer is counted lost; [`Core::write_sample`] splits such samples instead.
    ///
    /// Only an admitted handler calls it (the [`Admission`] proves it; I13): it is the single
    /// writer of the slot's `active`, of `pos` and of the words above `pos`.
    ///
    /// # Signal safety
    /// No allocation, no lock, no syscall (the wakeup syscall is the caller's, when the outcome
    /// says so), CAS retry loops only.
    #[inline]
    pub fn write_record(
        &self,
        adm: &Admission<'_>,
        hdr: &RecordHeader,
        nframes: usize,
        fill: impl FnOnce(&mut FrameSink<'_>),
    ) -> WriteOutcome {
        let slot = adm.slot;
        let len = HEADER_WORDS + nframes;
        if len > self.max_record_words || nframes > u16::MAX as usize {
            Self::count_lost(slot);
            return WriteOutcome { committed: false, wake: false };
        }
        // Relaxed: only this thread (the owner) writes `active`.
        let mut b = slot.active.load(Ordering::Relaxed);
        // SAFETY: `b` is null or points into `self.buffers`, which lives as long as `self`.
        let mut p = match unsafe { b.as_ref() } {
            // Relaxed: only the owner moves `pos` of its ACTIVE buffer.
            Some(buf) => buf.pos.load(Ordering::Relaxed),
            None => 0,
        };
        let mut rotated = false;
        // SAFETY: as above.
        let fits = unsafe { b.as_ref() }.is_some_and(|buf| buf.capacity().saturating_sub(p) >= len);
        if !fits {
            let Some(n) = self.rotate(slot, b) else {
                Self::count_lost(slot);
                return WriteOutcome { committed: false, wake: self.notify_recorder() };
            };
            b = n;
            // Relaxed: the recycle's reset is ordered before us by the Acquire swap of the spare.
            // SAFETY: `n` came from a spare, which only holds pointers into `self.buffers`.
            p = unsafe { &*n }.pos.load(Ordering::Relaxed);
            rotated = true;
        }
        // SAFETY: `b` is non-null here and points into `self.buffers`.
        let buf = unsafe { &*b };
        if !Self::room_for(buf, p, len) {
            Self::count_lost(slot);
            return WriteOutcome { committed: false, wake: rotated && self.notify_recorder() };
        }
        Self::put(buf, p, slot, hdr, nframes, fill);
        WriteOutcome { committed: true, wake: rotated && self.notify_recorder() }
    }

    /// Rotation (§2 step 5): takes the first non-empty spare, publishes it as `active`, then
    /// pushes the old buffer `b` (if any) on the full queue. `None` (nothing changed) if every
    /// spare is empty. Owner only.
    ///
    /// # Signal safety
    /// Atomic RMWs and a CAS retry loop.
    #[inline]
    pub(super) fn rotate(&self, slot: &ThreadSlot, b: *mut SamplerBuffer) -> Option<*mut SamplerBuffer> {
        let mut n = ptr::null_mut();
        for spare in slot.spares.iter() {
            // Relaxed: a hint that skips the RMW on empty entries; only the owner empties them.
            if spare.load(Ordering::Relaxed).is_null() {
                continue;
            }
            // Acquire: pairs with the Release CAS in `fill_spare`; the recycler's reset of
            // `pos`/`flushed_pos` is visible.
            n = spare.swap(ptr::null_mut(), Ordering::Acquire);
            if !n.is_null() {
                break;
            }
        }
        // SAFETY: null or a pointer into `self.buffers` (spares hold nothing else).
        let nb = unsafe { n.as_ref() }?;
        // Relaxed (both): owner-only counter.
        let seq = slot.activations.load(Ordering::Relaxed);
        slot.activations.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Relaxed: published with the buffer by the Release store of `active` below (active
        // pass) and by the Release push of this buffer later (full pass).
        nb.activation.store((u64::from(slot.index) << 40) | (seq & ACTIVATION_MASK), Ordering::Relaxed);
        // Release: the new buffer's clean positions (and this slot's switch) are visible to an L
        // holder's Acquire load of `active` in `drain`. Stored before the old
        // buffer becomes reachable from the full queue (§2, publication order).
        slot.active.store(n, Ordering::Release);
        if !b.is_null() {
            // SAFETY: `b` points into `self.buffers` (the caller's active buffer).
            self.push_full(unsafe { &*b });
        }
        Some(n)
    }

    /// Spare entries of `slot` holding a buffer. Owner only: the count cannot drop until the
    /// owner takes one (L holders only fill entries).
    ///
    /// # Signal safety
    /// Atomic loads.
    #[inline]
    pub(super) fn spares_ready(slot: &ThreadSlot) -> usize {
        // Relaxed: a count; each buffer is taken later with the Acquire swap in `rotate`.
        slot.spares.iter().filter(|s| !s.load(Ordering::Relaxed).is_null()).count()
    }

    /// Whether a record of `len` words fits at word `p` of a buffer the owner just rotated into
    /// (or holds). A CLEAN buffer's `pos` is 0, so this fails only if the protocol is broken (a
    /// recycle's reset not published to the owner, see `refill_cas_relaxed`); then the sample is
    /// lost instead of written out of bounds (loom models fail on it).
    ///
    /// # Signal safety
    /// Arithmetic only (the assert exists in loom builds only).
    #[inline(always)]
    pub(super) fn room_for(buf: &SamplerBuffer, p: usize, len: usize) -> bool {
        let fits = p <= buf.capacity() && buf.capacity() - p >= len;
        owner_assert!(
            fits,
            "a buffer from a spare has pos {p} (capacity {}): its recycle was not published",
            buf.capacity()
        );
        fits
    }

    /// Writes one record at word `p` of the owner's buffer and commits it.
    #[inline(always)]
    pub(super) fn put(
        buf: &SamplerBuffer,
        p: usize,
        slot: &ThreadSlot,
        hdr: &RecordHeader,
        nframes: usize,
        fill: impl FnOnce(&mut FrameSink<'_>),
    ) {
        let len = HEADER_WORDS + nframes;
        let w0 = (nframes as u64)
            | (u64::from(hdr.flags) << 16)
            | (u64::from(KIND_EXEC_SAMPLE) << 24)
            | (u64::from(hdr.frag_index) << 32)
            | (u64::from(hdr.frag_count) << 48);
        buf.write_word(p, w0);
        buf.write_word(p + 1, hdr.ticks as u64);
        buf.write_word(p + 2, u64::from(hdr.tid) | (u64::from(slot.index) << 32));
        buf.write_word(p + 3, hdr.sample_id);
        buf.write_word(p + 4, hdr.sp);
        buf.write_word(p + 5, hdr.span);
        let [comm_lo, comm_hi] = hdr.comm.words();
        buf.write_word(p + 6, comm_lo);
        buf.write_word(p + 7, comm_hi);
        let mut sink = FrameSink { buf, at: p + HEADER_WORDS, end: p + len };
        fill(&mut sink);
        // Missing frames are zeros. Bounded by `end`, never by the writes' success, so that a
        // record that does not fit (impossible after `room_for`) cannot make the handler spin.
        for at in sink.at..sink.end {
            buf.write_word(at, 0);
        }
        // Release: the commit point; publishes the record's words to L holders. Pairs with the
        // Acquire load of `pos` in `process` (`drain`, `drain_full`).
        buf.pos.store(p + len, ordering!("pos_relaxed", Ordering::Release));
    }

    /// The handler's buffer step for a whole sample of `nframes` frames (`frame(i)`, innermost
    /// first). A sample that fits one buffer is one record ([`Core::write_record`]). A larger one
    /// is split into fragments k/n (same header and sample id, `frag_index` k, `frag_count` n):
    /// the first fills what is left of the active buffer, each further one an empty buffer taken
    /// from the slot's spares by the ordinary rotation, so the fragments lie in consecutive
    /// buffers of this thread, in order. The spares are counted first: if they cannot hold the
    /// whole sample, nothing is written and the sample is counted lost (a partial sample is never
    /// committed). L holders reassemble the fragments (`process`).
    ///
    /// Admitted handler only, like [`Core::write_record`].
    ///
    /// # Signal safety
    /// As [`Core::write_record`]: no allocation, no lock, CAS retry loops only.
    #[inline]
    pub fn write_sample(
        &self,
        adm: &Admission<'_>,
        hdr: &RecordHeader,
        nframes: usize,
        frame: impl Fn(usize) -> u64,
    ) -> WriteOutcome {
        let slot = adm.slot;
        let cap = self.max_record_words;
        if HEADER_WORDS + nframes <= cap {
            let h = RecordHeader { frag_index: 0, frag_count: 1, ..*hdr };
            return self.write_record(adm, &h, nframes, |sink| {
                for i in 0..nframes {
                    sink.push(frame(i));
                }
            });
        }
        // A record holds at most u16::MAX frames (w0).
        let per = (cap - HEADER_WORDS).min(u16::MAX as usize);
        // Relaxed: only this thread (the owner) writes `active`.
        let mut b = slot.active.load(Ordering::Relaxed);
        // SAFETY: `b` is null or points into `self.buffers`.
        let p = match unsafe { b.as_ref() } {
            // Relaxed: only the owner moves `pos` of its ACTIVE buffer.
            Some(buf) => buf.pos.load(Ordering::Relaxed),
            None => cap,
        };
        // Frames the first fragment puts into the active buffer (0: start in a fresh one). The
        // sample does not fit a whole buffer, so it does not fit this remainder either.
        let first = cap.saturating_sub(p).saturating_sub(HEADER_WORDS).min(per);
        let rest = nframes.saturating_sub(first);
        let fresh = rest.div_ceil(per);
        let count = fresh + usize::from(first > 0);
        if count > u16::MAX as usize || Self::spares_ready(slot) < fresh {
            Self::count_lost(slot);
            return WriteOutcome { committed: false, wake: self.notify_recorder() };
        }
        let mut at = 0usize; // next frame to write
        let mut k = 0u16;
        if first > 0 {
            // SAFETY: `first > 0` implies `b` is non-null (p < cap), a pointer into `self.buffers`.
            let buf = unsafe { &*b };
            let h = RecordHeader { frag_index: k, frag_count: count as u16, ..*hdr };
            Self::put(buf, p, slot, &h, first, |sink| {
                for i in 0..first {
                    sink.push(frame(i));
                }
            });
            at = first;
            k += 1;
        }
        while at < nframes {
            // Counted above: every rotation finds a spare (only this thread empties them).
            let Some(n) = self.rotate(slot, b) else {
                // Unreachable with a correct count; the fragments already committed are an
                // incomplete sample, which the L holder discards and counts lost (with none
                // committed, it is counted here).
                if k == 0 {
                    Self::count_lost(slot);
                }
                return WriteOutcome { committed: false, wake: self.notify_recorder() };
            };
            b = n;
            let len = (nframes - at).min(per);
            // SAFETY: `n` came from a spare, which only holds pointers into `self.buffers`.
            let buf = unsafe { &*n };
            // Relaxed: the recycle's reset is ordered before us by the Acquire swap in `rotate`.
            let p = buf.pos.load(Ordering::Relaxed);
            if !Self::room_for(buf, p, HEADER_WORDS + len) {
                // Fragments committed so far are an incomplete sample, which the L holder
                // discards and counts lost; with none committed, it is counted here.
                if k == 0 {
                    Self::count_lost(slot);
                }
                return WriteOutcome { committed: false, wake: self.notify_recorder() };
            }
            let h = RecordHeader { frag_index: k, frag_count: count as u16, ..*hdr };
            let from = at;
            Self::put(buf, p, slot, &h, len, |sink| {
                for i in from..from + len {
                    sink.push(frame(i));
                }
            });
            at += len;
            k += 1;
        }
        WriteOutcome { committed: true, wake: self.notify_recorder() }
    }

    /// Pushes a FULL buffer on the Treiber stack.
    pub(super) fn push_full(&self, b: &SamplerBuffer) {
        let bp = b as *const SamplerBuffer as *mut SamplerBuffer;
        // Relaxed: the CAS below re-validates the head.
        let mut head = self.full_head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            b.next.store(head, Ordering::Relaxed);
            // Release (success): publishes `next` and the buffer's final `pos`/words; pairs with
            // the Acquire swap of `full_head` in `drain_queue`. Relaxed (failure): retry.
            let success = ordering!("push_relaxed", Ordering::Release);
            match self.full_head.compare_exchange_weak(head, bp, success, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Sets `recorder_pending`; returns true if the caller must post the wakeup (it was clear).
    ///
    /// # Signal safety
    /// One atomic RMW.
    #[inline]
    pub fn notify_recorder(&self) -> bool {
        // Release: publishes the push that preceded it; pairs with the Acquire swap in
        // `take_pending`. If it was already set, the recorder has not consumed it yet and will
        // see our push when it does, so no second wakeup is needed.
        let was = self.recorder_pending.swap(true, Ordering::Release);
        if !was {
            // Relaxed: statistics / loom's stand-in for the wakeup syscall.
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        !was
    }

    /// Clears `recorder_pending`; true if it was set (the recorder should run `drain_full`).
    pub fn take_pending(&self) -> bool {
        // Acquire: pairs with the Release swap in `notify_recorder`; the pushes before it are
        // visible to the `drain_full` that follows.
        self.recorder_pending.swap(false, Ordering::Acquire)
    }

    /// Wakeups posted so far (loom models use it as the semaphore count).
    pub fn wakeups(&self) -> u64 {
        // Relaxed: statistics.
        self.wakeups.load(Ordering::Relaxed)
    }
}
