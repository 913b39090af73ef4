//! The one stack walk: [`walk`], from a frame's registers to the outermost frame, over a stack
//! that a [`StackMemory`] reads. Every walker of the recorder goes through it: the SIGPROF
//! handler over the interrupted thread's own stack, the wall thread over a copy of a blocked
//! thread's stack, the allocation hook and the commit path over the calling thread's stack.
//!
//! # Validation (all of it here)
//! - Reads: only through the [`StackMemory`], which answers for 8-byte aligned words of its
//!   `[lo, hi)` and nothing else ([`OwnStack`] checks before each load; a copy checks its buffer).
//! - Progress: every step goes up the stack (the caller's stack pointer above the frame's): a
//!   cycle or a garbage frame pointer ends the walk instead of repeating it.
//! - Frame pointers: a record must lie at or above the frame's stack pointer and inside the stack
//!   (`frame_pointer_step`); a null frame pointer or return address is the ABI's outermost frame.
//! - The main thread's entry: a chain that breaks within [`ENTRY_SLACK`] below the process's
//!   start stack ([`WalkRules::entry`]) reached the outermost frame: libc's start-up code, built
//!   without frame pointers, is all that lies between.
//! - Limits: at most [`WalkRules::limit`] frames; a walk that reaches it ends [`End::Full`].
//! - Code: with [`WalkRules::known_code_only`], a return address outside every module of the
//!   tables ends the walk (a word of a copied stack that is no return address would lead
//!   anywhere).
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::tables::{fp_rule, kind, Regs, Row, Tables, Unwinder};

/// Offsets of the interrupted frame pointer, stack pointer and PC in the kernel's x86_64
/// `ucontext_t` (`uc_mcontext.gregs[REG_RBP]`, `[REG_RSP]`, `[REG_RIP]`; the same for glibc and
/// musl: the kernel lays it out).
const UC_RBP: usize = 120;
const UC_RSP: usize = 160;
const UC_RIP: usize = 168;

/// How far below the process's start stack the main thread's outermost frame record may lie
/// (glibc 2.36 x86_64: 272 bytes; musl's start-up frames are smaller).
pub const ENTRY_SLACK: usize = 4096;

/// A stack the walk reads: the words of `[lo, hi)`.
pub trait StackMemory {
    /// The range answered for (`hi == 0`: none; the walk then keeps the first frame only).
    fn bounds(&self) -> (usize, usize);
    /// The word at `addr`, `None` unless `addr` is 8-byte aligned and `[addr, addr + 8)` lies in
    /// [`StackMemory::bounds`].
    ///
    /// # Signal safety
    /// Implementations used in a signal handler load memory only.
    fn read(&self, addr: usize) -> Option<usize>;
}

/// The stack the calling thread runs on (or the interrupted thread's, in its signal handler):
/// `[lo, hi)` must be mapped (the caller checked it: the thread's stack from its stack pointer
/// up).
#[derive(Debug, Clone, Copy)]
pub struct OwnStack {
    /// Lowest readable address (the stack pointer or above).
    pub lo: usize,
    /// End of the stack.
    pub hi: usize,
}

impl StackMemory for OwnStack {
    #[inline(always)]
    fn bounds(&self) -> (usize, usize) {
        (self.lo, self.hi)
    }

    /// # Signal safety
    /// One checked load.
    #[inline(always)]
    fn read(&self, addr: usize) -> Option<usize> {
        if !addr.is_multiple_of(8) || addr < self.lo || addr.checked_add(8)? > self.hi {
            return None;
        }
        // SAFETY: 8-byte aligned and inside [lo, hi), which the creator of this `OwnStack`
        // checked is mapped stack of the thread running this code.
        Some(unsafe { std::ptr::read_volatile(addr as *const usize) })
    }
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// At the outermost frame (return address undefined or zero, a null frame pointer, the main
    /// thread's entry): the stack is complete.
    Root,
    /// A frame could not be unwound (no rule, a read outside the stack, no progress).
    Lost,
    /// The walk reached its limit, or the visitor asked to stop.
    Full,
}

/// What a walk may use and how far it goes.
#[derive(Debug, Clone, Copy)]
pub struct WalkRules<'a> {
    /// The DWARF tables (`None`: frame pointers only).
    pub tables: Option<&'a Tables>,
    /// Which of tables and frame pointers unwinds a frame.
    pub mode: Unwinder,
    /// Frames visited at most, the first one included.
    pub limit: usize,
    /// The process's start stack on the main thread (`unwind::main_thread_entry`), 0 elsewhere.
    pub entry: usize,
    /// Every caller's PC must lie in a module of `tables` (a copied stack's walk).
    pub known_code_only: bool,
}

impl<'a> WalkRules<'a> {
    /// Frame pointers only, at most `limit` frames, on a thread whose entry is `entry`.
    #[inline]
    pub fn frame_pointers(limit: usize, entry: usize) -> WalkRules<'a> {
        WalkRules { tables: None, mode: Unwinder::FramePointer, limit, entry, known_code_only: false }
    }

    /// `mode` over `tables` (frame pointers only without tables or in `Unwinder::FramePointer`).
    #[inline]
    pub fn with_tables(tables: Option<&'a Tables>, mode: Unwinder, limit: usize, entry: usize) -> WalkRules<'a> {
        let tables = if mode == Unwinder::FramePointer { None } else { tables };
        WalkRules { tables, mode, limit, entry, known_code_only: false }
    }
}

/// Walks from `start` (the PC exact when `pc_exact`, as an interrupted context's is; a return
/// address otherwise) to the outermost frame, handing each frame's registers to `visit`,
/// innermost first, `start` first; `visit` returns false to stop the walk. Returns the frames
/// visited and how the walk ended.
///
/// # Signal safety
/// Binary searches over immutable tables, reads through `memory`, and `visit`.
#[inline]
pub fn walk(
    memory: &impl StackMemory,
    rules: &WalkRules<'_>,
    start: Regs,
    pc_exact: bool,
    mut visit: impl FnMut(Regs) -> bool,
) -> (usize, End) {
    if rules.limit == 0 {
        return (0, End::Full);
    }
    if !visit(start) {
        return (1, End::Full);
    }
    let (lo, hi) = memory.bounds();
    if hi == 0 {
        return (1, End::Lost);
    }
    // The fields the loop reads at every frame; the others only where it ends.
    let (tables, mode, limit) = (rules.tables, rules.mode, rules.limit);
    let mut n = 1usize;
    let mut cur = start;
    // Made at the first frame that looks a rule up: a frame-pointer walk (the commit path's)
    // never pays for filling it.
    let mut rules_seen: Option<RuleCache> = None;
    loop {
        let row = match tables {
            None => None,
            // Only the first frame's PC may be exact.
            Some(_) if n == 1 => rule_at(tables, mode, cur.pc, pc_exact),
            Some(_) => rules_seen.get_or_insert_with(RuleCache::new).rule(tables, mode, cur.pc),
        };
        let next = match step_by_rule(row, cur, lo, hi, memory) {
            Ok(next) if next.sp > cur.sp => next,
            Ok(_) | Err(End::Lost) => {
                // The frame record read last, where a frame-pointer step read it (none yet at
                // an interrupted context; a start from a record read the one below its sp).
                let last_record = if n == 1 && pc_exact { 0 } else { cur.sp.wrapping_sub(16) };
                let at_root = at_entry(last_record, rules.entry);
                return (n, if at_root { End::Root } else { End::Lost });
            }
            Err(end) => return (n, end),
        };
        if rules.known_code_only && tables.is_none_or(|t| t.module(next.pc).is_none()) {
            return (n, End::Lost);
        }
        if n >= limit {
            return (n, End::Full);
        }
        n += 1;
        if !visit(next) {
            return (n, End::Full);
        }
        cur = next;
    }
}

/// The registers of the caller of the frame whose frame record is at `fp` (its return address,
/// the stack pointer above the record, the frame pointer it saved), read through `memory`: where
/// a walk starts from a frame record instead of an interrupted context.
///
/// # Signal safety
/// Two reads through `memory`.
#[inline]
pub fn caller_of_record(memory: &impl StackMemory, fp: usize) -> Option<Regs> {
    let saved = memory.read(fp)?;
    let ret = memory.read(fp.checked_add(8)?)?;
    (ret != 0).then_some(Regs { pc: ret, sp: fp + 16, fp: saved })
}

/// Whether a chain that broke after the frame record at `last` ended at the main thread's entry.
/// `entry`: `unwind::main_thread_entry` on the main thread, 0 elsewhere.
///
/// # Signal safety
/// Arithmetic only.
#[inline]
pub fn at_entry(last: usize, entry: usize) -> bool {
    entry != 0 && last != 0 && last < entry && entry - last <= ENTRY_SLACK
}

/// The table row that unwinds a frame at `pc` (exact when `first`, a return address otherwise),
/// `None` where the frame-pointer step applies.
///
/// # Signal safety
/// Binary searches over immutable tables.
#[inline]
fn rule_at(tables: Option<&Tables>, mode: Unwinder, pc: usize, first: bool) -> Option<Row> {
    // A return address may be one past its function (a call to a function that does not return):
    // look up the call instruction.
    let at = if first { pc } else { pc.wrapping_sub(1) };
    let module = match (mode, tables) {
        (Unwinder::FramePointer, _) | (_, None) => None,
        (_, Some(t)) => t
            .module(pc)
            .filter(|m| mode == Unwinder::Dwarf || !m.table.frame_pointers_at(at.wrapping_sub(m.bias) as u64)),
    };
    module.and_then(|m| m.table.row(at.wrapping_sub(m.bias) as u64)).copied()
}

/// The rules [`walk`] found for the last return addresses it met, by address (direct-mapped).
/// Finding a rule (the module's binary search, then the row's search in its page) was nearly all
/// of a step's cost, and a deep stack is a recursion: the same few return addresses frame after
/// frame (a 4000-deep C recursion: one return address 3999 times).
struct RuleCache {
    /// (return address, its rule); a return address of 0 ends every walk before a lookup, so 0
    /// marks an empty entry.
    entries: [(usize, Option<Row>); RULE_CACHE_SIZE],
}

/// Entries of a [`RuleCache`]: mutual recursion through up to this many functions hits.
const RULE_CACHE_SIZE: usize = 8;

impl RuleCache {
    #[inline]
    fn new() -> RuleCache {
        RuleCache { entries: [(0, None); RULE_CACHE_SIZE] }
    }

    /// [`rule_at`] for return address `pc` (not the first frame), from the cache if it holds it.
    #[inline]
    fn rule(&mut self, tables: Option<&Tables>, mode: Unwinder, pc: usize) -> Option<Row> {
        // Return addresses are byte-aligned: mix the bits above the lowest few in.
        let index = (pc ^ (pc >> 4) ^ (pc >> 9)) % RULE_CACHE_SIZE;
        if let Some(entry) = self.entries.get_mut(index) {
            if entry.0 == pc && pc != 0 {
                return entry.1;
            }
            let rule = rule_at(tables, mode, pc, false);
            *entry = (pc, rule);
            return rule;
        }
        rule_at(tables, mode, pc, false)
    }
}

/// The step from `regs` by `row` (the rule [`rule_at`] found for it; `None`: frame pointers).
///
/// # Signal safety
/// Reads through `memory` only.
// Inlined into the walk: returned through memory, its result was read back before the stores
// that wrote it had retired (a store-forwarding stall at every frame: +7 ns per frame in the
// SIGPROF handler, `cargo bench --bench sampling -- handler-time`).
#[inline(always)]
fn step_by_rule(row: Option<Row>, regs: Regs, lo: usize, hi: usize, memory: &impl StackMemory) -> Result<Regs, End> {
    let Some(r) = row else { return frame_pointer_step(regs, lo, hi, memory) };
    // The two common rules first, as plain compares (a jump table over all of them mispredicted
    // on every step of a deep recursion: `cargo bench --bench unwind`).
    let cfa = if r.kind == kind::CFA_FP {
        regs.fp.wrapping_add_signed(r.cfa_offset as isize)
    } else if r.kind == kind::CFA_SP {
        regs.sp.wrapping_add_signed(r.cfa_offset as isize)
    } else {
        match r.kind {
            kind::PLT => regs.sp + 8 + if (regs.pc & 15) as i32 >= r.cfa_offset { 8 } else { 0 },
            kind::OUTERMOST => return Err(End::Root),
            kind::SIGNAL => return signal_step(regs, memory),
            _ => return frame_pointer_step(regs, lo, hi, memory),
        }
    };
    if cfa <= regs.sp || cfa > hi {
        return Err(End::Lost);
    }
    let ra = memory.read(cfa - 8).ok_or(End::Lost)?;
    if ra == 0 {
        return Err(End::Root);
    }
    let fp = if r.fp_rule == fp_rule::AT_CFA {
        memory.read(cfa.wrapping_add_signed(r.fp_offset as isize)).ok_or(End::Lost)?
    } else {
        regs.fp
    };
    Ok(Regs { pc: ra, sp: cfa, fp })
}

/// The step out of a signal handler's return trampoline, to the instruction the signal
/// interrupted, with the registers it had.
#[inline]
fn signal_step(regs: Regs, memory: &impl StackMemory) -> Result<Regs, End> {
    let at = |offset: usize| regs.sp.checked_add(offset).and_then(|a| memory.read(a)).ok_or(End::Lost);
    let (fp, sp, pc) = (at(UC_RBP)?, at(UC_RSP)?, at(UC_RIP)?);
    if pc == 0 {
        return Err(End::Lost);
    }
    // The interrupted instruction, not a return address: one past it, as a return address is,
    // so that the next step's lookup (pc - 1) and the symbolizer (which takes a caller's
    // address minus one) land on it.
    Ok(Regs { pc: pc.wrapping_add(1), sp, fp })
}

/// The frame-pointer step: the caller's frame pointer at `fp`, the return address at `fp + 8`.
#[inline(always)]
fn frame_pointer_step(regs: Regs, lo: usize, hi: usize, memory: &impl StackMemory) -> Result<Regs, End> {
    let fp = regs.fp;
    if fp == 0 {
        // The ABI's end marker (glibc's thread start leaves a null frame pointer).
        return Err(End::Root);
    }
    if fp < regs.sp.max(lo) || fp.checked_add(16).is_none_or(|e| e > hi) {
        return Err(End::Lost);
    }
    let next = memory.read(fp).ok_or(End::Lost)?;
    let ra = memory.read(fp + 8).ok_or(End::Lost)?;
    if ra == 0 {
        return Err(End::Root);
    }
    Ok(Regs { pc: ra, sp: fp + 16, fp: next })
}

/// The calling function's registers (for unwinding one's own stack in normal context: tests,
/// benchmarks). `pc` is a return address into the caller, so the walk starts at the caller.
#[inline(never)]
#[cfg(target_arch = "x86_64")]
pub fn caller_registers() -> Regs {
    let (pc, sp, fp): (usize, usize, usize);
    // SAFETY: reads rbp, the return address at [rbp + 8] and computes the caller's sp; this
    // function keeps a frame pointer (the crate is built with them), so [rbp] and [rbp + 8] are its
    // own frame record.
    unsafe {
        std::arch::asm!(
            "mov {fp}, [rbp]",
            "mov {pc}, [rbp + 8]",
            "lea {sp}, [rbp + 16]",
            fp = out(reg) fp, pc = out(reg) pc, sp = out(reg) sp,
            options(nostack, readonly, preserves_flags)
        );
    }
    Regs { pc, sp, fp }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::super::compile;
    use super::super::tables::kind;
    use super::*;

    #[inline(never)]
    fn recurse(n: usize, f: &mut dyn FnMut()) {
        if n == 0 {
            f();
        } else {
            recurse(n - 1, f);
        }
        std::hint::black_box(n);
    }

    fn walk_here(tables: &Tables, mode: Unwinder) -> (Vec<u64>, End) {
        let regs = caller_registers();
        let (lo, hi) = crate::unwind::current_stack_bounds();
        let mut out = Vec::new();
        let rules = WalkRules::with_tables(Some(tables), mode, 1024, 0);
        let (_, end) = walk(&OwnStack { lo: lo.max(regs.sp), hi }, &rules, regs, true, |r| {
            out.push(r.pc as u64);
            true
        });
        (out, end)
    }

    #[test]
    fn dwarf_walk_matches_frame_pointers_and_reaches_the_root() {
        let tables = compile::Compiler::default().refresh().unwrap();
        assert!(tables.modules.len() >= 2, "{:?}", tables.modules.iter().map(|m| &m.table.path).collect::<Vec<_>>());
        let mut result = None;
        recurse(20, &mut || {
            let fp = walk_here(&tables, Unwinder::FramePointer);
            let dwarf = walk_here(&tables, Unwinder::Dwarf);
            result = Some((fp, dwarf));
        });
        let ((fp, _), (dwarf, dwarf_end)) = result.unwrap();
        let where_ = |ips: &[u64]| -> Vec<String> {
            ips.iter()
                .map(|ip| match tables.module(*ip as usize) {
                    Some(m) => format!("{ip:#x} {}+{:#x}", m.table.path, (*ip as usize).wrapping_sub(m.bias)),
                    None => format!(
                        "{ip:#x} (no module; modules: {:x?})",
                        tables.modules.iter().map(|m| (m.start, m.end, &m.table.path)).collect::<Vec<_>>()
                    ),
                })
                .collect()
        };
        assert!(fp.len() > 20, "frame pointers walked {} frames", fp.len());
        // Frame 1 is the return address into the closure (two call sites); from there on the
        // walks agree through the recursion and up to the first frame of code without frame
        // pointers (glibc's thread start), which only the DWARF walk sees.
        assert!(dwarf.len() >= 24, "{:#?}", where_(&dwarf));
        assert_eq!(&fp[2..24], &dwarf[2..24]);
        assert_eq!(dwarf_end, End::Root, "dwarf walk did not reach the thread's root: {:#?}", where_(&dwarf));
        assert!(dwarf.len() >= fp.len());
    }

    #[test]
    fn libcs_signal_trampoline_is_found_alone_and_marked_in_its_table() {
        let path = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let found = compile::signal_trampolines(path).unwrap();
        let libc = compile::compile_file(path).unwrap();
        // glibc has one (__restore_rt), and the compiled table marks exactly it.
        assert_eq!(found.len(), 1, "{found:x?}");
        let (start, end) = found[0];
        for addr in start..end {
            assert_eq!(libc.row(addr).map(|r| r.kind), Some(kind::SIGNAL), "at {addr:#x}");
        }
        assert_ne!(libc.row(start - 1).map(|r| r.kind), Some(kind::SIGNAL));
        assert_ne!(libc.row(end).map(|r| r.kind), Some(kind::SIGNAL));
    }

    #[test]
    fn paged_lookup_finds_the_row_a_full_search_finds() {
        let libc = compile::compile_file("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        assert!(libc.rows.len() > 1000 && !libc.has_frame_pointers);
        let last = u64::from(libc.rows.last().unwrap().pc);
        let mut addr = libc.base;
        while addr <= libc.base + last + 64 {
            let off = (addr - libc.base) as u32;
            let want = libc.rows.iter().rev().find(|r| r.pc <= off);
            assert_eq!(libc.row(addr), want, "at {addr:#x}");
            addr += 997;
        }
        assert_eq!(libc.row(libc.base.wrapping_sub(1)), None);
    }

    #[test]
    fn this_crate_is_seen_as_built_with_frame_pointers() {
        let tables = compile::Compiler::default().refresh().unwrap();
        let here = tables.module(caller_registers().pc).unwrap();
        assert!(here.table.has_frame_pointers, "{}", here.table.path);
        // This function's page is walked by frame pointers under Auto.
        let pc = caller_registers().pc;
        assert!(here.table.frame_pointers_at(pc.wrapping_sub(here.bias) as u64));
    }

    #[test]
    fn garbage_registers_end_the_walk_without_faulting() {
        let tables = compile::Compiler::default().refresh().unwrap();
        let (lo, hi) = crate::unwind::current_stack_bounds();
        for regs in [
            Regs { pc: 0, sp: 0, fp: 0 },
            Regs { pc: usize::MAX, sp: usize::MAX - 8, fp: usize::MAX },
            Regs { pc: caller_registers().pc, sp: lo, fp: hi - 8 },
            Regs { pc: caller_registers().pc, sp: hi - 8, fp: 1 },
        ] {
            for mode in [Unwinder::Auto, Unwinder::Dwarf, Unwinder::FramePointer] {
                let rules = WalkRules::with_tables(Some(&tables), mode, 64, 0);
                let (n, _) = walk(&OwnStack { lo: lo.max(regs.sp), hi }, &rules, regs, true, |_| true);
                assert!(n <= 64);
            }
        }
    }
}
