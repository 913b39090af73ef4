//! Thread discovery: the threads /proc/self/task lists are compared with the registry; new
//! ones get a slot and a source, the ones proven dead are retired, and discovered threads get
//! their stack bounds from /proc/self/maps (see the module docs, "Thread discovery and
//! retirement").

use super::buffer::{StackBounds, SLOT_LIVE};
use super::registration::retire_dead;
use super::stats::DiscoveryReport;
use super::timer;
use super::Sampler;
use crate::threads::proc::{self, fate, list_tasks, young_threads, Fate};
use crate::threads::registry::Entry;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// New threads claimed per registry-lock hold during discovery (their sources are armed outside
/// the lock): bounds how long registering and exiting threads wait for discovery.
const ARM_BATCH: usize = 64;

impl Sampler {
    /// Thread discovery, callable without L (and without any other lock of the caller's):
    /// lists /proc/self/task with start times outside every lock, arms sampling for new threads
    /// (a few at a time under the registry lock), retires the slots of threads proven dead
    /// (their buffers go to the full queue; the next `drain_full` processes them and reaps the
    /// slots), finds stack bounds of discovered threads in /proc/self/maps, refills spares and
    /// closes perf fds whose signals can no longer arrive. Never retires a live thread (see the
    /// module docs); a failed /proc read only means less is learned this time.
    pub fn discover_threads_unlocked(&self) -> DiscoveryReport {
        let shared = self.shared();
        if shared.unwinder != crate::unwind::Unwinder::FramePointer {
            // Libraries loaded since (dlopen): their tables, before their code is sampled much.
            shared.cfi.refresh();
        }
        let t0 = Instant::now();
        let mut report = DiscoveryReport::default();
        let mut held = Duration::ZERO;
        let mut held_max = Duration::ZERO;
        let mut hold = |since: Instant| {
            let d = since.elapsed();
            held += d;
            held_max = held_max.max(d);
        };
        // 1. Outside every lock: the listing.
        let mut listing = list_tasks();
        report.listed = listing.threads.len();
        report.listing_complete = listing.complete;
        report.names = std::mem::take(&mut listing.names);
        if shared.threads.registers_new_threads() {
            // A thread this young may not have its own name yet (Rust std names a thread
            // after the thread-start hook registered it): its `comm` is still its creator's,
            // and applied after the thread's own report it would read as a rename. Such a
            // thread names itself (commit, exit); older ones are read at the next pass.
            let young = young_threads(&listing.threads);
            report.names.retain(|(tid, _)| !young.contains(tid));
        }
        let listed_tids: HashMap<u32, Option<u64>> = listing.threads.iter().copied().collect();
        // 2. Under the registry lock: who is missing from the listing (candidates),
        // retirements still waiting for a handler to leave, and who is known already.
        let (candidates, excluded_candidates, known) = {
            let since = Instant::now();
            let reg = shared.threads.registry.lock();
            let c = reg.compare(&listed_tids);
            drop(reg);
            hold(since);
            (c.candidates, c.excluded_candidates, c.known)
        };
        // 3. Outside the lock: the kernel's word on each candidate.
        let mut buf = String::new();
        let proven: Vec<(usize, u32, u64)> = candidates
            .iter()
            .filter_map(|&(i, tid, start, retiring)| {
                if retiring {
                    return Some((i, tid, start));
                }
                match fate(tid, start, &mut buf) {
                    Fate::Dead => Some((i, tid, start)),
                    Fate::Alive | Fate::Unknown => {
                        report.kept_unproven += 1;
                        None
                    }
                }
            })
            .collect();
        let dead_excluded: Vec<(u32, u64)> =
            excluded_candidates.into_iter().filter(|&(tid, start)| fate(tid, start, &mut buf) == Fate::Dead).collect();
        // 4. Under the registry lock: retire the proven dead (if their entry is still the one
        // we proved dead), forget dead excluded threads.
        {
            let since = Instant::now();
            let mut reg = shared.threads.registry.lock();
            reg.excluded.retain(|t| !dead_excluded.contains(t));
            for (i, tid, start) in proven {
                let same =
                    reg.entries.get(i).and_then(Option::as_ref).is_some_and(|e| e.tid == tid && e.start_time == start);
                if !same {
                    continue;
                }
                if retire_dead(shared, &mut reg, i) {
                    report.retired += 1;
                } else {
                    report.retire_pending += 1;
                }
            }
            drop(reg);
            hold(since);
        }
        // 5. New threads, a batch at a time: slots claimed (with their spares) under the
        // registry lock, each checked against the registry as it is then (the thread may have
        // registered or excluded itself meanwhile); sources armed outside it (a few syscalls
        // each); armed sources recorded under it again, unless the entry went away meanwhile
        // (the thread unregistered or excluded itself, or died and was retired).
        let new: Vec<(u32, u64)> = listing
            .threads
            .iter()
            .filter_map(|&(t, s)| s.map(|s| (t, s)))
            .filter(|&(t, s)| !known.contains(&(t, s)) && !known.contains(&(t, 0)))
            // The recorder's own threads, whoever started them (the preload's too).
            .filter(|&(t, _)| !crate::own_thread::is_own(t))
            .collect();
        for batch in new.chunks(ARM_BATCH) {
            let since = Instant::now();
            let mut reg = shared.threads.registry.lock();
            let mut claimed = Vec::with_capacity(batch.len());
            let mut full = false;
            for &(tid, start) in batch {
                if reg.find(tid, start).is_some() || reg.is_excluded(tid, start) {
                    continue;
                }
                let Some(slot) = shared.core.claim_slot(tid, StackBounds::default()) else {
                    full = true;
                    break;
                };
                slot.set_span_cell(crate::span_context::cell_for(tid));
                let index = slot.index() as usize;
                shared.core.fill_spares(slot);
                if let Some(e) = reg.entries.get_mut(index) {
                    *e = Some(Entry { tid, start_time: start, source: None, registered: false, retiring: false });
                }
                claimed.push((index, tid, start));
            }
            drop(reg);
            hold(since);
            let armed: Vec<_> =
                claimed.into_iter().map(|(index, tid, start)| (index, tid, start, shared.arm(tid, index))).collect();
            let since = Instant::now();
            let mut reg = shared.threads.registry.lock();
            for (index, tid, start, source) in armed {
                let entry = reg
                    .entries
                    .get_mut(index)
                    .and_then(Option::as_mut)
                    .filter(|e| e.tid == tid && e.start_time == start && e.source.is_none() && !e.retiring);
                match (entry, source) {
                    (Some(e), Ok(source)) => {
                        e.source = Some(source);
                        report.armed += 1;
                    }
                    (None, Ok(source)) => shared.disarm(source, tid),
                    // The thread exited since the listing (its clock or task is gone): no
                    // handler ever ran for this slot.
                    (Some(_), Err(_)) => {
                        if let Some(e) = reg.entries.get_mut(index) {
                            *e = None;
                        }
                        if let Some(slot) = shared.core.slot(index) {
                            if let Some(true) = shared.core.retire_on_behalf(slot) {
                                shared.post_wake();
                            }
                        }
                    }
                    (None, Err(_)) => {}
                }
            }
            drop(reg);
            hold(since);
            if full {
                break;
            }
        }
        // 6. Stack bounds of discovered threads (unknown, or a main stack that grew past what
        // the handler could verify), from one read of /proc/self/maps.
        let need: Vec<(usize, usize)> = shared
            .core
            .slots()
            .iter()
            .filter(|s| s.state() == SLOT_LIVE && s.last_sp() != 0)
            .filter(|s| {
                let b = s.stack_bounds();
                b.hi == 0 || (s.last_sp() < b.verified_lo && s.last_sp() >= b.lo)
            })
            .map(|s| (s.index() as usize, s.last_sp()))
            .collect();
        if !need.is_empty() {
            let maps = stack_mappings();
            for (index, sp) in need {
                let (Some(b), Some(slot)) = (bounds_from_maps(&maps, sp), shared.core.slot(index)) else {
                    continue;
                };
                let old = slot.stack_bounds();
                if old.hi == 0 {
                    slot.set_stack_bounds(b.lo, b.verified_lo, b.hi);
                } else if b.hi == old.hi {
                    slot.lower_verified(b.verified_lo);
                }
            }
        }
        // 6b. Threads whose perf event the program closed (or whose number it replaced) get a
        // new one: a program that closes every descriptor keeps its threads sampled.
        shared.rearm_taken();
        // 7. Spares for everyone (pool lock only), and perf fds whose last signal is in.
        shared.core.refill_spares();
        timer::release_quarantine();
        report.registry_held = held;
        report.registry_held_max = held_max;
        report.elapsed = t0.elapsed();
        report
    }
}

/// The `/proc/self/maps` mappings, sorted: `(lo, hi, is the main thread's [stack])`.
fn stack_mappings() -> Vec<(usize, usize, bool)> {
    let Some(maps) = proc::read_maps() else {
        return Vec::new();
    };
    let mut out: Vec<(usize, usize, bool)> =
        maps.lines().filter_map(proc::parse_maps_line).map(|m| (m.start, m.end, m.path == "[stack]")).collect();
    out.sort_unstable();
    out
}

/// Bounds for a thread whose stack pointer is `sp`, from the mapping that contains it. For the
/// main thread's growing `[stack]`, `lo` is as low as it may grow: RLIMIT_STACK below its top,
/// and never into the mapping below (`tests/main_thread_stack.rs`).
fn bounds_from_maps(maps: &[(usize, usize, bool)], sp: usize) -> Option<StackBounds> {
    let i = maps.partition_point(|&(lo, _, _)| lo <= sp).checked_sub(1)?;
    let &(lo, hi, growing) = maps.get(i)?;
    if sp >= hi {
        return None;
    }
    if !growing {
        return Some(StackBounds { lo, verified_lo: lo, hi });
    }
    let below = i.checked_sub(1).and_then(|j| maps.get(j)).map_or(0, |m| m.1);
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) };
    let limit = if rl.rlim_cur == libc::RLIM_INFINITY { usize::MAX } else { rl.rlim_cur as usize };
    Some(StackBounds { lo: hi.saturating_sub(limit).max(below).min(lo), verified_lo: lo, hi })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_lookup_finds_the_mapping_and_lets_the_main_stack_grow() {
        let maps = vec![(0x1000, 0x2000, false), (0x10_0000, 0x20_0000, false), (0x7f_0000, 0x80_0000, true)];
        assert_eq!(bounds_from_maps(&maps, 0x1800), Some(StackBounds { lo: 0x1000, verified_lo: 0x1000, hi: 0x2000 }));
        assert_eq!(bounds_from_maps(&maps, 0x3000), None);
        assert_eq!(bounds_from_maps(&maps, 0x500), None);
        // The [stack] mapping may grow down to RLIMIT_STACK below its top, never into the
        // mapping below it.
        let b = bounds_from_maps(&maps, 0x7f_8000).unwrap();
        assert_eq!((b.verified_lo, b.hi), (0x7f_0000, 0x80_0000));
        assert!(b.lo >= 0x20_0000 && b.lo < 0x7f_0000, "{b:?}");
    }
}
