//! Unwinding without frame pointers: call frame information (`.eh_frame`) compiled ahead of time
//! into compact per-module tables (`unwind::compile`, normal context), which the stack walk
//! (`unwind::walk`) reads in a signal handler: no allocation, no lock, no syscall.
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
//! x86_64 only: on other targets `unwind::compile` returns no tables and the walk is the frame-pointer
//! walk.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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

    /// Bytes of the table: its rows, page index and page bits.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.rows)
            + std::mem::size_of_val(&*self.pages)
            + std::mem::size_of_val(&*self.sp_framed_pages)
            + self.path.capacity()
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
