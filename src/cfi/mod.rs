//! Unwinding without frame pointers: call frame information (`.eh_frame`) compiled ahead of time
//! into compact per-module tables ([`compile`], normal context), and a stack walk over them that is
//! safe in a signal handler ([`walk`]: no allocation, no lock, no syscall, every read checked
//! against the sampled thread's stack bounds).
//!
//! # The choice: tables in the handler, not a stack copy unwound later
//! The alternative was to copy a bounded slice of the stack and the registers into the
//! SamplerBuffer in the handler and unwind in the flusher (samply's and perf's `--call-graph
//! dwarf` way). Measured with `cargo bench --bench unwind` (figures in the README, "Stacks
//! without frame pointers"): walking these tables costs a few tens of ns per frame in the
//! handler, about what copying 8 KiB of stack costs alone — and a copy still has to be unwound
//! later, under L, by the same kind of table, while making each sample 8-32 KiB instead of
//! ~1 KiB (32-fold buffer memory and flush bandwidth at the same loss rate; a 32 KiB copy
//! still truncates deep stacks). async-profiler made the same choice (`cstack=dwarf`).
//!
//! # Table format
//! One [`Row`] per change of the unwinding rule, sorted by address: where the canonical frame
//! address (CFA) is (stack pointer + n, frame pointer + n, or the PLT's formula), where the
//! caller's frame pointer was saved (or that it is unchanged), and rows that mark gaps between
//! functions, the outermost frame (return address undefined: `_start`, `clone`) and rules we do
//! not express (DWARF expressions other than the PLT's: the walk then tries frame pointers for
//! that frame). The return address is always at CFA - 8 on x86_64 (checked when the table is
//! built; a row with another rule is "not expressed").
//!
//! # Modes
//! [`Unwinder::FramePointer`] walks frame pointers only; [`Unwinder::Dwarf`] uses a module's table for
//! every frame it covers and frame pointers where none does; [`Unwinder::Auto`] (the default) walks
//! frame pointers through modules built with them (most of a module's functions address their
//! frame through the frame pointer) and the table elsewhere: in other modules, and on the pages
//! of a module built with frame pointers that hold a function framed without one (a Rust program
//! built without frame pointers links a standard library built with them; C dependencies such as
//! zstd are built without). Finding the page costs one index read, not a row search.
//!
//! x86_64 only: on other targets [`compile`] returns no tables and the walk is the frame-pointer
//! walk.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(not(loom))]
pub mod compile;

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

/// How the sampler unwinds (`RecorderBuilder::unwinder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unwinder {
    /// Frame pointers through modules that keep them, DWARF CFI elsewhere.
    #[default]
    Auto,
    /// Frame pointers only (the fastest; stops at code built without them).
    FramePointer,
    /// DWARF CFI wherever a module has it; frame pointers elsewhere.
    Dwarf,
}

impl Unwinder {
    /// The name written into `jdk.ActiveSetting` and taken by `RECORDER_OPTIONS` (`unwinder=`).
    pub fn name(self) -> &'static str {
        match self {
            Unwinder::Auto => "auto",
            Unwinder::FramePointer => "fp",
            Unwinder::Dwarf => "dwarf",
        }
    }
}

/// Where the CFA is, for the rows of a [`Row`].
pub(crate) mod kind {
    /// CFA = stack pointer + offset.
    pub const CFA_SP: u8 = 0;
    /// CFA = frame pointer + offset.
    pub const CFA_FP: u8 = 1;
    /// The lazy-binding PLT's expression: CFA = sp + 8, + 8 more when `(pc & 15) >= offset`.
    pub const PLT: u8 = 2;
    /// No CFI here (between functions): try frame pointers.
    pub const NONE: u8 = 3;
    /// CFI we do not express (other expressions, unusual return address rule): try frame pointers.
    pub const UNSUPPORTED: u8 = 4;
    /// The return address is undefined: the outermost frame (`_start`, a thread's `clone`).
    pub const OUTERMOST: u8 = 5;
    /// A signal handler's return trampoline (libc's `__restore_rt`, its CIE augmented `S`): the
    /// interrupted context is the kernel's `ucontext_t` at the stack pointer.
    pub const SIGNAL: u8 = 6;
}

/// Offsets of the interrupted frame pointer, stack pointer and PC in the kernel's x86_64
/// `ucontext_t` (`uc_mcontext.gregs[REG_RBP]`, `[REG_RSP]`, `[REG_RIP]`; the same for glibc and
/// musl: the kernel lays it out).
const UC_RBP: usize = 120;
const UC_RSP: usize = 160;
const UC_RIP: usize = 168;

/// Where the caller's frame pointer is.
pub(crate) mod fp_rule {
    /// Unchanged: the function did not touch it (yet).
    pub const SAME: u8 = 0;
    /// Saved at CFA + `fp_offset`.
    pub const AT_CFA: u8 = 1;
}

/// One rule, valid from `pc` (an offset from the module's table base) to the next row's `pc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Row {
    /// Start of the range, as an offset from [`ModuleTable::base`].
    pub pc: u32,
    /// CFA offset from the register named by `kind` (for `PLT`: the threshold).
    pub cfa_offset: i32,
    /// Where the caller's frame pointer is saved, relative to the CFA (with `fp_rule::AT_CFA`).
    pub fp_offset: i16,
    /// One of [`kind`].
    pub kind: u8,
    /// One of [`fp_rule`].
    pub fp_rule: u8,
}

/// The rows of one file's `.eh_frame`, by the file's own addresses.
#[derive(Debug, Default)]
pub struct ModuleTable {
    /// The file's path.
    pub path: String,
    /// The file address rows are offsets from.
    pub base: u64,
    /// Sorted by `pc`.
    pub rows: Box<[Row]>,
    /// For each 4 KiB page of offsets, the index of the row in force at its start: a lookup
    /// searches one page's rows, not the whole table (a binary search over a large table costs a
    /// mispredicted branch per step: ~100 ns per frame in a 20 MB binary).
    pub pages: Box<[u32]>,
    /// Built with frame pointers: most functions address their frame through the frame pointer.
    pub has_frame_pointers: bool,
    /// One bit per page of [`ModuleTable::pages`]: the page holds code of a function that sets up
    /// a stack frame without the frame pointer (`Unwinder::Auto` uses the table there).
    pub sp_framed_pages: Box<[u64]>,
}

/// A table placed where the file is mapped in this process.
#[derive(Debug, Clone)]
pub struct Mapped {
    /// Executable range [start, end) in this process.
    pub start: usize,
    /// End of the executable range.
    pub end: usize,
    /// Runtime address minus file address.
    pub bias: usize,
    /// The file's rows.
    pub table: Arc<ModuleTable>,
}

/// Every executable module's table, sorted by `start`. Immutable once built: the handler reads a
/// published snapshot; a new one replaces it when modules are loaded.
#[derive(Debug, Default)]
pub struct Tables {
    /// Sorted by `start`, not overlapping.
    pub modules: Box<[Mapped]>,
}

/// Registers of a frame: program counter, stack pointer, frame pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs {
    /// Program counter (for a caller's frame: the return address).
    pub pc: usize,
    /// Stack pointer.
    pub sp: usize,
    /// Frame pointer.
    pub fp: usize,
}

impl Tables {
    /// The mapped module containing `pc`.
    ///
    /// # Signal safety
    /// A binary search over an immutable slice.
    #[inline]
    pub fn module(&self, pc: usize) -> Option<&Mapped> {
        let modules = &self.modules;
        let (mut lo, mut hi) = (0usize, modules.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let m = modules.get(mid)?;
            if pc < m.start {
                hi = mid;
            } else if pc >= m.end {
                lo = mid + 1;
            } else {
                return Some(m);
            }
        }
        None
    }
}

impl ModuleTable {
    /// The row in force at file address `addr`.
    ///
    /// # Signal safety
    /// A binary search over an immutable slice.
    #[inline]
    pub fn row(&self, addr: u64) -> Option<&Row> {
        let off = addr.checked_sub(self.base)?;
        let off = u32::try_from(off).ok()?;
        let page = (off >> PAGE_SHIFT) as usize;
        let first = *self.pages.get(page)? as usize;
        let end = self.pages.get(page + 1).map_or(self.rows.len(), |&e| e as usize + 1).min(self.rows.len());
        let rows = self.rows.get(first..end)?;
        // The last row whose pc <= off (the first row of the page's range is in force at its start).
        let idx = rows.partition_point(|r| r.pc <= off);
        rows.get(idx.checked_sub(1)?)
    }

    /// `Unwinder::Auto` may take a frame-pointer step at file address `addr`: the module is built
    /// with frame pointers and no function on `addr`'s page frames itself without one.
    ///
    /// # Signal safety
    /// Reads an immutable slice.
    #[inline]
    pub fn frame_pointers_at(&self, addr: u64) -> bool {
        if !self.has_frame_pointers {
            return false;
        }
        let Some(page) = addr.checked_sub(self.base).map(|off| off >> PAGE_SHIFT) else { return true };
        self.sp_framed_pages.get((page / 64) as usize).is_none_or(|w| (w >> (page % 64)) & 1 == 0)
    }

    /// Builds [`ModuleTable::pages`] for `rows`.
    pub fn page_index(rows: &[Row]) -> Box<[u32]> {
        let Some(last) = rows.last() else { return Box::new([]) };
        let pages = (last.pc >> PAGE_SHIFT) as usize + 1;
        let mut index = Vec::with_capacity(pages);
        let mut r = 0usize;
        for page in 0..pages {
            let start = (page as u64) << PAGE_SHIFT;
            // Advance to the last row starting at or before the page start.
            while rows.get(r + 1).is_some_and(|next| u64::from(next.pc) <= start) {
                r += 1;
            }
            index.push(r as u32);
        }
        index.into_boxed_slice()
    }
}

/// Pages of the row index: 4 KiB of code.
pub(crate) const PAGE_SHIFT: u32 = 12;

/// The tables the handler reads: a snapshot published through an atomic pointer, replaced
/// (never changed in place) when the process's executable mappings change. Replaced snapshots
/// are kept until this is dropped, which the sampler does only after its grace period (no
/// handler can still be reading one).
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub struct Published {
    current: AtomicPtr<Tables>,
    /// The compiler (files already compiled) and the addresses of replaced snapshots.
    state: crate::fork::ForkSafeMutex<(compile::Compiler, Vec<usize>)>,
}

#[cfg(not(loom))]
impl Published {
    /// Compiles the tables of every module mapped now, or of those mapped since the last call,
    /// and publishes them (normal context: reads files, allocates).
    pub fn refresh(&self) {
        self.refresh_files(&|_| true);
    }

    /// As [`Published::refresh`], for the files `wanted` accepts only (a later `refresh` adds the
    /// others).
    pub fn refresh_files(&self, wanted: &dyn Fn(&str) -> bool) {
        let mut state = self.state.lock();
        let Some(tables) = state.0.refresh_files(wanted) else { return };
        let new = Box::into_raw(Box::new(tables));
        // AcqRel: Release publishes the built snapshot to the handler's Acquire load in `load`;
        // Acquire orders the old snapshot's construction before it is kept for freeing.
        let old = self.current.swap(new, Ordering::AcqRel);
        if !old.is_null() {
            state.1.push(old as usize);
        }
    }

    /// The published tables, if any.
    ///
    /// # Signal safety
    /// One atomic load.
    #[inline]
    pub fn load(&self) -> Option<&Tables> {
        // Acquire: pairs with the Release swap in `refresh` (the snapshot is fully built).
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: non-null pointers come from `Box::into_raw` in `refresh` and are freed only in
        // `drop`, which needs `&mut self`: no reference handed out here outlives them.
        unsafe { p.as_ref() }
    }
}

#[cfg(not(loom))]
impl Drop for Published {
    fn drop(&mut self) {
        let current = std::mem::replace(self.current.get_mut(), std::ptr::null_mut());
        let retired = std::mem::take(&mut self.state.get_mut().1);
        for p in retired.into_iter().map(|a| a as *mut Tables).chain(std::iter::once(current)) {
            if !p.is_null() {
                // SAFETY: each came from `Box::into_raw` in `refresh`, is freed once, and `&mut
                // self` means no reader is left.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// At the outermost frame (return address undefined, or zero): the stack is complete.
    Root,
    /// A frame could not be unwound (no rule, a read outside the stack, no progress).
    Lost,
    /// `out` was full, or the walk reached its bound.
    Full,
}

/// One step from `regs` (a frame whose pc is exact when `first`, a return address otherwise) to
/// its caller, or how the walk ends.
///
/// # Signal safety
/// Binary searches over immutable tables and loads from `[lo, hi)` (the sampled thread's own
/// stack, which is mapped), each checked first; nothing else.
#[inline]
pub fn step(
    tables: Option<&Tables>,
    mode: Unwinder,
    regs: Regs,
    first: bool,
    lo: usize,
    hi: usize,
) -> Result<Regs, End> {
    let read = stack_reader(lo, hi);
    step_reading(tables, mode, regs, first, lo, hi, &read)
}

/// Reads the word at an address of `[lo, hi)` (the sampled thread's own stack, which is mapped),
/// `None` for any other address.
///
/// # Signal safety
/// One checked load.
#[inline]
fn stack_reader(lo: usize, hi: usize) -> impl Fn(usize) -> Option<usize> {
    move |addr: usize| {
        if !addr.is_multiple_of(8) || addr < lo || addr.checked_add(8)? > hi {
            return None;
        }
        // SAFETY: 8-byte aligned and inside [lo, hi), the mapped stack of the sampled thread.
        Some(unsafe { std::ptr::read_volatile(addr as *const usize) })
    }
}

/// [`step`] over a stack that `read` returns the words of (a copy of another thread's stack:
/// `read` answers for `[lo, hi)` only).
///
/// # Signal safety
/// As [`step`] if `read` is.
#[inline]
pub fn step_reading(
    tables: Option<&Tables>,
    mode: Unwinder,
    regs: Regs,
    first: bool,
    lo: usize,
    hi: usize,
    read: &impl Fn(usize) -> Option<usize>,
) -> Result<Regs, End> {
    step_by_rule(rule_at(tables, mode, regs.pc, first), regs, lo, hi, read)
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
/// Loads through `read` only.
#[inline]
fn step_by_rule(
    row: Option<Row>,
    regs: Regs,
    lo: usize,
    hi: usize,
    read: &impl Fn(usize) -> Option<usize>,
) -> Result<Regs, End> {
    let cfa = match row.map(|r| (r.kind, r)) {
        Some((kind::CFA_SP, r)) => regs.sp.wrapping_add_signed(r.cfa_offset as isize),
        Some((kind::CFA_FP, r)) => regs.fp.wrapping_add_signed(r.cfa_offset as isize),
        Some((kind::PLT, r)) => regs.sp + 8 + if (regs.pc & 15) as i32 >= r.cfa_offset { 8 } else { 0 },
        Some((kind::OUTERMOST, _)) => return Err(End::Root),
        Some((kind::SIGNAL, _)) => return signal_step(regs, read),
        _ => return frame_pointer_step(regs, lo, hi, read),
    };
    if cfa <= regs.sp || cfa > hi {
        return Err(End::Lost);
    }
    let ra = read(cfa - 8).ok_or(End::Lost)?;
    if ra == 0 {
        return Err(End::Root);
    }
    let fp = match row {
        Some(r) if r.fp_rule == fp_rule::AT_CFA => {
            read(cfa.wrapping_add_signed(r.fp_offset as isize)).ok_or(End::Lost)?
        }
        _ => regs.fp,
    };
    Ok(Regs { pc: ra, sp: cfa, fp })
}

/// The step out of a signal handler's return trampoline, to the instruction the signal
/// interrupted, with the registers it had.
#[inline]
fn signal_step(regs: Regs, read: &impl Fn(usize) -> Option<usize>) -> Result<Regs, End> {
    let at = |offset: usize| regs.sp.checked_add(offset).and_then(read).ok_or(End::Lost);
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
#[inline]
fn frame_pointer_step(regs: Regs, lo: usize, hi: usize, read: &impl Fn(usize) -> Option<usize>) -> Result<Regs, End> {
    let fp = regs.fp;
    if fp == 0 {
        // The ABI's end marker (glibc's thread start leaves a null frame pointer).
        return Err(End::Root);
    }
    if fp < regs.sp.max(lo) || fp.checked_add(16).is_none_or(|e| e > hi) {
        return Err(End::Lost);
    }
    let next = read(fp).ok_or(End::Lost)?;
    let ra = read(fp + 8).ok_or(End::Lost)?;
    if ra == 0 {
        return Err(End::Root);
    }
    Ok(Regs { pc: ra, sp: fp + 16, fp: next })
}

/// Walks from `regs` (the interrupted context) into `store`, innermost first: the pc, then each
/// return address; at most `limit` frames. Returns the frames stored and how the walk ended.
///
/// # Signal safety
/// As [`step`]; `store` is the caller's (the sampler's scratch, also signal-safe).
#[inline]
pub fn walk(
    tables: Option<&Tables>,
    mode: Unwinder,
    regs: Regs,
    lo: usize,
    hi: usize,
    limit: usize,
    mut store: impl FnMut(u64),
) -> (usize, End) {
    if limit == 0 {
        return (0, End::Full);
    }
    store(regs.pc as u64);
    let mut n = 1usize;
    let mut cur = regs;
    let lo = lo.max(regs.sp);
    let read = stack_reader(lo, hi);
    let mut rules = RuleCache::new();
    loop {
        if n >= limit {
            return (n, End::Full);
        }
        let row = if tables.is_none() || mode == Unwinder::FramePointer {
            None
        } else if n == 1 {
            rule_at(tables, mode, cur.pc, true)
        } else {
            rules.rule(tables, mode, cur.pc)
        };
        match step_by_rule(row, cur, lo, hi, &read) {
            Ok(next) => {
                if next.sp <= cur.sp && next.pc == cur.pc {
                    return (n, End::Lost);
                }
                store(next.pc as u64);
                n += 1;
                cur = next;
            }
            Err(end) => return (n, end),
        }
    }
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
        let (_, end) = walk(Some(tables), mode, regs, lo, hi, 1024, |ip| out.push(ip));
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
                let (n, _) = walk(Some(&tables), mode, regs, lo, hi, 64, |_| {});
                assert!(n <= 64);
            }
        }
    }
}
