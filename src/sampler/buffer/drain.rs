//! The L holders' side of the buffers: draining the full queue and the active buffers,
//! reassembling fragmented samples, recycling buffers, refilling spares, reaping retired slots
//! and the statistics they fold.

use super::*;

impl Core {
    // ---------------------------------------------------------------- L holders

    /// Full pass (§3 step 2 / §4): swaps out the full queue, processes what is left of each
    /// buffer, recycles them into the pool, reaps retired slots and refills spares.
    pub fn drain_full(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        self.check_locked(locked);
        // First the spares, from what the pool holds now: processing the queue may take long
        // (the callback serializes stacks), and handlers keep rotating meanwhile.
        self.refill_spares();
        // Slots seen EXITED before the swap below have all their buffers in the queue we take.
        let mut exited = std::mem::take(&mut locked.exited);
        exited.clear();
        exited.extend(self.slots.iter().map(|slot| slot.state() == SLOT_EXITED));
        self.drain_queue(locked, f);
        if exited.iter().any(|&e| e) {
            self.reap_exited(locked, |i| exited.get(i).copied().unwrap_or(false), f);
        }
        locked.exited = exited;
        self.refill_spares();
    }

    /// Swaps the full queue out and processes its buffers oldest push first, so each thread's
    /// buffers (and the fragments of an oversized sample in them) come in the order it filled
    /// them.
    pub(super) fn drain_queue(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        // Acquire: pairs with the Release CAS in `push_full` (and its release sequence); takes
        // the whole list, so no ABA.
        let mut b = self.full_head.swap(ptr::null_mut(), Ordering::Acquire);
        // Reverse the LIFO list in place (we own every node now: DRAINING).
        let mut fifo: *mut SamplerBuffer = ptr::null_mut();
        // SAFETY: the queue holds only pointers into `self.buffers`.
        while let Some(buf) = unsafe { b.as_ref() } {
            // Relaxed: made visible by the Acquire swap above; then private to this L holder.
            b = buf.next.load(Ordering::Relaxed);
            // Relaxed: private to this L holder (the buffer is DRAINING).
            buf.next.store(fifo, Ordering::Relaxed);
            fifo = buf as *const SamplerBuffer as *mut SamplerBuffer;
        }
        // SAFETY: as above.
        while let Some(buf) = unsafe { fifo.as_ref() } {
            // Relaxed: written by this L holder just above.
            fifo = buf.next.load(Ordering::Relaxed);
            self.process(buf, locked, f);
            // Relaxed: published by the owner's Release push (Acquire swap above).
            let act = buf.activation.load(Ordering::Relaxed);
            if act != NOT_ACTIVATED {
                if let Some(e) = locked.expected.get_mut((act >> 40) as usize) {
                    *e = (act & ACTIVATION_MASK) + 1;
                }
            }
            self.recycle(buf, locked);
        }
    }

    /// The flusher's pass (§3 steps 2-3) with per-thread order kept: drains the full queue
    /// (oldest first; reaps, refills), then hands out the records of each slot's active buffer if
    /// every older buffer of that thread has been drained. One that is not (the owner rotated
    /// after the queue was taken, so the buffer it rotated out is still queued) waits for the next
    /// pass, so no record overtakes an older one of its thread and fragments stay in order.
    pub fn drain(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        self.check_locked(locked);
        self.drain_full(locked, f);
        for slot in self.slots.iter() {
            // Acquire: pairs with the owner's Release store of `active` in `rotate` (its
            // `activation` store is visible).
            let b = slot.active.load(Ordering::Acquire);
            // SAFETY: null or a pointer into `self.buffers`; L is held so it cannot be recycled
            // while we use it (I5).
            let Some(buf) = (unsafe { b.as_ref() }) else { continue };
            // Relaxed: ordered by the Acquire load of `active` above.
            let act = buf.activation.load(Ordering::Relaxed);
            let expected = locked.expected.get(slot.index as usize).copied().unwrap_or(0);
            if act & ACTIVATION_MASK != expected & ACTIVATION_MASK && !cfg!(recorder_mutation = "drain_without_gating")
            {
                continue;
            }
            self.process(buf, locked, f);
        }
    }

    /// Parses `[flushed_pos, pos)` of `b` (L held). Whole samples go to `f` at once; fragments
    /// of an oversized sample are collected in the slot's [`Pending`] and go to `f` as one
    /// record when the last one arrives (possibly in a later pass or another buffer).
    pub(super) fn process(&self, b: &SamplerBuffer, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        // Acquire: pairs with the owner's Release commit in `put`; words below are final.
        let e = b.pos.load(Ordering::Acquire);
        // Relaxed: `flushed_pos` is serialized by L.
        let mut s = b.flushed_pos.load(Ordering::Relaxed);
        protocol_assert!(s <= e && e <= b.capacity(), "I1 violated: flushed_pos {s} pos {e}");
        while s + HEADER_WORDS <= e {
            let w0 = b.read_word(s);
            let nframes = (w0 & 0xffff) as usize;
            let len = HEADER_WORDS + nframes;
            if s + len > e {
                // Corrupt length: cannot happen with a correct owner; skip the rest (I3 still
                // holds: nothing is handed out twice).
                protocol_assert!(false, "record overruns pos");
                break;
            }
            let flags = ((w0 >> 16) & 0xff) as u8;
            let w2 = b.read_word(s + 2);
            let slot_index = (w2 >> 32) as usize;
            let frag_index = (w0 >> 32) as u16;
            let frag_count = (w0 >> 48) as u16;
            let tid = w2 as u32;
            let ticks = b.read_word(s + 1) as i64;
            let sample_id = b.read_word(s + 3);
            let sp = b.read_word(s + 4);
            let span = b.read_word(s + 5);
            let comm = RawComm::from_words([b.read_word(s + 6), b.read_word(s + 7)]);
            let slot = self.slots.get(slot_index);
            let LockedState { scratch, pending, .. } = &mut *locked;
            let Some(p) = pending.get_mut(slot_index) else {
                s += len;
                continue;
            };
            if frag_count <= 1 {
                // A whole sample: whatever was in flight for this thread can no longer complete.
                Self::discard(p, slot);
                scratch.clear();
                scratch.extend((0..nframes).map(|i| b.read_word(s + HEADER_WORDS + i)));
                let rec = SampleRecord {
                    tid,
                    ticks,
                    truncated: flags & FLAG_TRUNCATED != 0,
                    leaf_only: flags & FLAG_LEAF_ONLY != 0,
                    wall: flags & FLAG_WALL != 0,
                    ips: scratch,
                    sample_id,
                    sp,
                    span,
                    comm,
                    frag_index: 0,
                    frag_count: 1,
                };
                Self::emit(slot, &rec, f);
            } else if p.open && p.sample_id == sample_id && p.next == frag_index && p.count == frag_count {
                p.frames.extend((0..nframes).map(|i| b.read_word(s + HEADER_WORDS + i)));
                p.next += 1;
                if p.next == p.count {
                    p.open = false;
                    let rec = SampleRecord {
                        tid: p.tid,
                        ticks: p.ticks,
                        truncated: p.flags & FLAG_TRUNCATED != 0,
                        leaf_only: p.flags & FLAG_LEAF_ONLY != 0,
                        wall: p.flags & FLAG_WALL != 0,
                        ips: &p.frames,
                        sample_id: p.sample_id,
                        sp: p.sp,
                        span: p.span,
                        comm: p.comm,
                        frag_index: 0,
                        frag_count: 1,
                    };
                    Self::emit(slot, &rec, f);
                }
            } else {
                // A fragment that does not continue the sample in flight: that one is incomplete.
                Self::discard(p, slot);
                if sample_id == p.discarded {
                    // A stray fragment of a sample already counted lost.
                } else if frag_index == 0 {
                    p.open = true;
                    p.sample_id = sample_id;
                    p.next = 1;
                    p.count = frag_count;
                    p.tid = tid;
                    p.ticks = ticks;
                    p.flags = flags;
                    p.sp = sp;
                    p.span = span;
                    p.comm = comm;
                    p.frames.clear();
                    p.frames.extend((0..nframes).map(|i| b.read_word(s + HEADER_WORDS + i)));
                } else {
                    // Its first fragments are missing (or came out of order): lost, once.
                    p.discarded = sample_id;
                    if let Some(slot) = slot {
                        Self::count_lost(slot);
                    }
                }
            }
            s += len;
        }
        // Relaxed: serialized by L (the next L holder acquires L after our release).
        b.flushed_pos.store(e, Ordering::Relaxed);
    }

    /// Hands a complete sample to `f` and counts it written.
    pub(super) fn emit(slot: Option<&ThreadSlot>, rec: &SampleRecord<'_>, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        f(rec);
        if let Some(slot) = slot {
            // Relaxed: statistics; only L holders write it.
            slot.written.fetch_add(1, Ordering::Relaxed);
            if rec.wall {
                // Relaxed: as `written`.
                slot.wall_written.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops the sample in flight (if any) as incomplete and counts it lost.
    pub(super) fn discard(p: &mut Pending, slot: Option<&ThreadSlot>) {
        if p.open {
            p.open = false;
            p.discarded = p.sample_id;
            if let Some(slot) = slot {
                Self::count_lost(slot);
            }
        }
    }

    /// DRAINING -> CLEAN: reset both positions and put the buffer into the pool (L held).
    pub(super) fn recycle(&self, b: &SamplerBuffer, _locked: &mut LockedState) {
        // Relaxed: the buffer is unreachable; the reset is published by the pool lock to the
        // refiller, and by its Release CAS that puts the buffer into a spare to the owner.
        b.pos.store(0, Ordering::Relaxed);
        // Relaxed: as above.
        b.flushed_pos.store(0, Ordering::Relaxed);
        // Relaxed: as above.
        b.next.store(ptr::null_mut(), Ordering::Relaxed);
        // Relaxed: as above.
        b.activation.store(NOT_ACTIVATED, Ordering::Relaxed);
        self.pool.lock().push(b.index);
    }

    /// Gives every LIVE slot's empty spare entries CLEAN buffers from the pool, one entry per slot
    /// per round (first entries first), so a short pool is shared fairly. Any normal-context
    /// thread may call it; L is not needed (the pool lock serializes refillers, I4, I14).
    pub fn refill_spares(&self) {
        let mut pool = self.pool.lock();
        let rounds = self.slots.first().map_or(0, |s| s.spares.len());
        for round in 0..rounds {
            for slot in self.slots.iter() {
                if pool.is_empty() {
                    return;
                }
                if slot.state() != SLOT_LIVE {
                    continue;
                }
                if let Some(spare) = slot.spares.get(round) {
                    self.fill_spare(&mut pool, spare);
                }
            }
        }
    }

    /// Fills every empty spare entry of `slot` from the pool at once: a thread that registers
    /// itself gets all its spares before its timer is armed, without waiting for anyone.
    pub fn fill_spares(&self, slot: &ThreadSlot) {
        let mut pool = self.pool.lock();
        if slot.state() != SLOT_LIVE {
            return;
        }
        for spare in slot.spares.iter() {
            if pool.is_empty() {
                return;
            }
            self.fill_spare(&mut pool, spare);
        }
    }

    /// Puts the pool's last buffer into `spare` if it is empty (pool lock held).
    pub(super) fn fill_spare(&self, pool: &mut Vec<u32>, spare: &AtomicPtr<SamplerBuffer>) {
        // Relaxed: a hint; the CAS below decides.
        if !spare.load(Ordering::Relaxed).is_null() {
            return;
        }
        let Some(&i) = pool.last() else { return };
        let Some(buf) = self.buffers.get(i as usize) else { return };
        buf.prefault();
        let bp = buf as *const SamplerBuffer as *mut SamplerBuffer;
        // Release (success): publishes the recycle's resets (which reached us through the pool
        // lock); pairs with the Acquire swap of the entry in `rotate` (and `take_over`, the
        // reaper). Relaxed (failure): only the owner empties an entry and only pool-lock holders
        // fill one, so a non-null entry is simply left alone.
        let success = ordering!("refill_cas_relaxed", Ordering::Release);
        if spare.compare_exchange(ptr::null_mut(), bp, success, Ordering::Relaxed).is_ok() {
            pool.pop();
        }
    }

    /// Frees retired slots selected by `is_exited` (seen EXITED before the last queue swap):
    /// reclaims a spare that a refill put there after the retirement (I14), folds the slot's
    /// statistics into the retired totals, marks it FREE.
    pub(super) fn reap_exited(
        &self,
        locked: &mut LockedState,
        is_exited: impl Fn(usize) -> bool,
        f: &mut dyn FnMut(&SampleRecord<'_>),
    ) {
        for slot in self.slots.iter() {
            if !is_exited(slot.index as usize) || slot.state() != SLOT_EXITED {
                continue;
            }
            // Acquire: pairs with the owner's Release store (it is null after `take_over`).
            let a = slot.active.swap(ptr::null_mut(), Ordering::Acquire);
            // SAFETY: null or a pointer into `self.buffers`; the slot is retired, so we own it.
            if let Some(a) = unsafe { a.as_ref() } {
                self.process(a, locked, f);
                self.recycle(a, locked);
            }
            // Every buffer this slot activated has been drained: the next owner's first buffer is
            // the next one expected. Relaxed: the retired owner's stores are ordered before our
            // Acquire load of EXITED.
            if let Some(e) = locked.expected.get_mut(slot.index as usize) {
                *e = slot.activations.load(Ordering::Relaxed);
            }
            // A sample still in flight can no longer complete: it is lost.
            if let Some(p) = locked.pending.get_mut(slot.index as usize) {
                if p.open {
                    p.open = false;
                    Self::count_lost(slot);
                }
                p.discarded = 0;
            }
            let lost = self.fold_stats(slot);
            if lost != 0 {
                locked.reaped_lost.push((slot.tid(), lost));
            }
            // Under the pool lock (I14): no refill runs between the reclaim and FREE.
            let mut pool = self.pool.lock();
            for spare in slot.spares.iter() {
                // Acquire: pairs with the Release CAS in `fill_spare`.
                let s = spare.swap(ptr::null_mut(), Ordering::Acquire);
                // SAFETY: null or a pointer into `self.buffers`. Spares only ever hold CLEAN
                // buffers, so it goes straight back to the pool.
                if let Some(s) = unsafe { s.as_ref() } {
                    pool.push(s.index);
                }
            }
            // Release: publishes the resets above; pairs with the Acquire CAS in `claim_slot`.
            slot.state.store(SLOT_FREE, Ordering::Release);
        }
    }

    /// Folds a retired slot's counters into the totals; returns its lost samples not yet
    /// collected by `take_lost`.
    pub(super) fn fold_stats(&self, slot: &ThreadSlot) -> u64 {
        // Relaxed (all): statistics; the slot is retired, its owner no longer writes them.
        let t = slot.taken.swap(0, Ordering::Relaxed);
        let w = slot.written.swap(0, Ordering::Relaxed);
        let l = slot.lost_total.swap(0, Ordering::Relaxed);
        let uncollected = slot.lost.swap(0, Ordering::Relaxed);
        self.retired_taken.fetch_add(t, Ordering::Relaxed);
        self.retired_written.fetch_add(w, Ordering::Relaxed);
        self.retired_lost.fetch_add(l, Ordering::Relaxed);
        let wt = slot.wall_taken.swap(0, Ordering::Relaxed);
        let ww = slot.wall_written.swap(0, Ordering::Relaxed);
        self.retired_wall_taken.fetch_add(wt, Ordering::Relaxed);
        self.retired_wall_written.fetch_add(ww, Ordering::Relaxed);
        uncollected
    }

    /// Lost samples since the last call, per thread (L held).
    pub fn take_lost(&self, locked: &mut LockedState) -> Vec<(u32, u64)> {
        self.check_locked(locked);
        let mut out = std::mem::take(&mut locked.reaped_lost);
        for slot in self.slots.iter() {
            if slot.state() == SLOT_FREE {
                continue;
            }
            // Relaxed: statistics; the counter itself is the only data.
            let n = slot.lost.swap(0, Ordering::Relaxed);
            if n != 0 {
                out.push((slot.tid(), n));
            }
        }
        out
    }

    /// Statistics of one slot.
    pub fn slot_stats(&self, slot: &ThreadSlot) -> SlotStats {
        // Relaxed (all): statistics.
        SlotStats {
            tid: slot.tid(),
            taken: slot.taken.load(Ordering::Relaxed),
            written: slot.written.load(Ordering::Relaxed),
            lost: slot.lost_total.load(Ordering::Relaxed),
            wall_taken: slot.wall_taken.load(Ordering::Relaxed),
            wall_written: slot.wall_written.load(Ordering::Relaxed),
        }
    }

    /// Wall-clock totals of reaped slots `(taken, written)`.
    pub fn retired_wall_totals(&self) -> (u64, u64) {
        // Relaxed (both): statistics.
        (self.retired_wall_taken.load(Ordering::Relaxed), self.retired_wall_written.load(Ordering::Relaxed))
    }

    /// Totals of reaped slots `(taken, written, lost)`.
    pub fn retired_totals(&self) -> (u64, u64, u64) {
        // Relaxed (all): statistics.
        (
            self.retired_taken.load(Ordering::Relaxed),
            self.retired_written.load(Ordering::Relaxed),
            self.retired_lost.load(Ordering::Relaxed),
        )
    }

    /// Teardown after every producer is gone (all timers disarmed, no handler running): drains
    /// everything, retires and reaps every slot, returns all buffers to the pool.
    pub fn drain_all_final(&self, locked: &mut LockedState, f: &mut dyn FnMut(&SampleRecord<'_>)) {
        self.check_locked(locked);
        for slot in self.slots.iter() {
            if slot.state() == SLOT_LIVE {
                // No handler runs any more: nobody to wake.
                let _ = self.retire_slot(slot);
            }
        }
        self.drain_queue(locked, f);
        self.reap_exited(locked, |_| true, f);
        self.take_pending();
    }
}
