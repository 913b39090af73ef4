//! The stack of a thread blocked in a system call, walked by the wall thread (normal context)
//! from outside: the stack of its idle wall samples, which before was its last sampled stack,
//! taken before it last ran and possibly far from where it waits.
//!
//! A blocked thread cannot be asked for its stack without breaking its call (see `wall.rs`), but
//! its user registers at the call's entry are in /proc/self/task/TID/syscall (the stack pointer
//! and the PC; not the frame pointer), and its stack is memory of this process. So the wall
//! thread copies the stack (`process_vm_readv`, which fails rather than faults on a page the
//! thread unmapped by exiting meanwhile) and walks the copy with the sampler's unwinder.
//!
//! # The frame pointer
//! The system call's wrapper (libc) keeps none; its caller, if it keeps one, needs the frame
//! pointer register, which /proc does not show. It is the address of the caller's frame record
//! (saved frame pointer, return address), which lies above the caller's stack pointer: the walk
//! tries each such record in turn, lowest first, and keeps the first whose walk reaches the
//! stack's root (the thread's start), with a return address into mapped code at each step. A
//! stack whose walk does not reach the root that way is written truncated where it stopped.
//!
//! # Consistency
//! The copy is of a thread that may wake up and run while it is read: the caller checks that its
//! CPU clock and its system call registers did not change across the walk, and otherwise uses
//! none of it.

use crate::unwind::{walk, End, Regs, StackMemory, Tables, Unwinder, WalkRules};

/// Bytes of stack copied at most, from the stack pointer up (a deeper stack is truncated).
const STACK_COPY: usize = 256 * 1024;
const PAGE: usize = 4096;
/// A frame pointer not known yet: outside any stack, so a step that needs it fails its bounds.
const UNKNOWN_FP: usize = usize::MAX & !7;
/// How far above a frame's stack pointer its frame record is looked for (its locals, saved
/// registers and arguments: a frame larger than this is written truncated).
const RECORD_SEARCH: usize = 16 * 1024;
/// Candidate frame records tried at most (each costs a walk).
const MAX_CANDIDATES: usize = 64;

/// The user stack and program counter of the system call `tid` is blocked in, from
/// `/proc/self/task/TID/syscall` ("nr a1 .. a6 sp pc", "-1 sp pc" when blocked outside one), or
/// `None` if it runs or cannot be read. Read in the recorder's own descriptor table
/// (`fds::privately`).
pub(super) fn syscall_registers(tid: u32) -> Option<(usize, usize)> {
    let line = crate::fds::read_string(&format!("/proc/self/task/{tid}/syscall")).ok()?;
    let mut words = line.split_whitespace().rev();
    let parse = |w: &str| usize::from_str_radix(w.trim_start_matches("0x"), 16).ok();
    let pc = parse(words.next()?)?;
    let sp = parse(words.next()?)?;
    (pc != 0 && sp != 0).then_some((sp, pc))
}

/// A copy of a thread's stack from its stack pointer up.
pub(super) struct StackCopy {
    words: Vec<usize>,
    lo: usize,
    len: usize,
}

impl StackCopy {
    pub(super) fn new() -> StackCopy {
        StackCopy { words: vec![0; STACK_COPY / 8], lo: 0, len: 0 }
    }

    /// Copies from `sp` (8-byte aligned down) up to `top` (the stack's end, if known), else up
    /// to the first page that cannot be read; at most [`STACK_COPY`] bytes. False if nothing could
    /// be read.
    fn fill(&mut self, sp: usize, top: Option<usize>) -> bool {
        let lo = sp & !7;
        let mut remote = Vec::with_capacity(STACK_COPY / PAGE + 1);
        match top {
            // One range: the kernel reads it whole (3 times faster than page by page).
            Some(top) if top > lo && top - lo <= STACK_COPY => {
                remote.push(libc::iovec { iov_base: lo as *mut libc::c_void, iov_len: top - lo });
            }
            _ => {
                // One remote iovec per page: a transfer stops at the first unreadable page, and
                // never splits an iovec, so each page is all read or not at all.
                let page_end = (lo | (PAGE - 1)) + 1;
                let mut at = lo;
                let end = lo + STACK_COPY;
                while at < end {
                    let next = if at == lo { page_end.min(end) } else { (at + PAGE).min(end) };
                    remote.push(libc::iovec { iov_base: at as *mut libc::c_void, iov_len: next - at });
                    at = next;
                }
            }
        }
        let local = libc::iovec { iov_base: self.words.as_mut_ptr().cast(), iov_len: STACK_COPY };
        // SAFETY: `local` is our buffer of STACK_COPY bytes, the remote ranges add up to at most
        // that; the kernel reads our own address space and reports an unmapped page as an error
        // or a short count, never a fault.
        let n = unsafe {
            libc::process_vm_readv(libc::getpid(), &local, 1, remote.as_ptr(), remote.len() as libc::c_ulong, 0)
        };
        if n <= 0 {
            return false;
        }
        self.lo = lo;
        self.len = n as usize & !7;
        true
    }

    fn hi(&self) -> usize {
        self.lo + self.len
    }
}

impl StackMemory for StackCopy {
    fn bounds(&self) -> (usize, usize) {
        (self.lo, self.hi())
    }

    fn read(&self, addr: usize) -> Option<usize> {
        if !addr.is_multiple_of(8) || addr < self.lo || addr.checked_add(8)? > self.hi() {
            return None;
        }
        self.words.get((addr - self.lo) / 8).copied()
    }
}

/// Where a blocked thread waits: its system call's stack pointer and PC, and the end of its
/// stack if known.
#[derive(Debug, Clone, Copy)]
pub(super) struct Waiting {
    pub sp: usize,
    pub pc: usize,
    pub top: Option<usize>,
}

/// Walks the stack of a thread blocked as `waiting` says into `out` (innermost first, at most `limit`
/// frames). Returns whether it reached the root (false: truncated), or `None` if the stack could
/// not be read. Needs the DWARF tables (to tell return addresses from other words).
pub(super) fn walk_blocked(
    tables: &Tables,
    mode: Unwinder,
    waiting: Waiting,
    copy: &mut StackCopy,
    limit: usize,
    out: &mut Vec<u64>,
) -> Option<bool> {
    out.clear();
    let Waiting { sp, pc, top } = waiting;
    if limit == 0 || !copy.fill(sp, top) {
        return None;
    }
    let regs = Regs { pc, sp, fp: UNKNOWN_FP };
    let (end, at) = walk_from(tables, mode, copy, regs, true, limit, out);
    if end != End::Lost || at.fp != UNKNOWN_FP {
        return Some(end == End::Root);
    }
    // Stopped for want of the frame pointer: find the frame record of the frame it stopped at.
    let kept = out.len();
    let first = kept == 1;
    let mut tried = 0;
    let search_end = at.sp.saturating_add(RECORD_SEARCH).min(copy.hi());
    let mut x = (at.sp + 7) & !7;
    while x + 16 <= search_end && tried < MAX_CANDIDATES {
        let candidate = x;
        x += 8;
        let (Some(saved), Some(ra)) = (copy.read(candidate), copy.read(candidate + 8)) else { break };
        if tables.module(ra).is_none() || !(saved == 0 || (saved > candidate && saved < copy.hi())) {
            continue;
        }
        tried += 1;
        // From the frame it stopped at (the walk keeps its start again).
        out.truncate(kept - 1);
        let (end, _) = walk_from(tables, mode, copy, Regs { fp: candidate, ..at }, first, limit, out);
        if end == End::Root {
            return Some(true);
        }
    }
    out.truncate(kept);
    Some(false)
}

/// Walks from `regs` into `out` (which holds the frames before it), at most `limit` frames in
/// `out`; returns how it ended and the last frame. Every step goes up the stack, into mapped code
/// (a word that is no return address would lead anywhere).
fn walk_from(
    tables: &Tables,
    mode: Unwinder,
    copy: &StackCopy,
    regs: Regs,
    first: bool,
    limit: usize,
    out: &mut Vec<u64>,
) -> (End, Regs) {
    let before = out.len();
    let mut rules = WalkRules::with_tables(Some(tables), mode, limit.saturating_sub(before), 0);
    rules.known_code_only = true;
    let mut last = regs;
    let (_, end) = walk(copy, &rules, regs, first, |frame| {
        out.push(frame.pc as u64);
        last = frame;
        true
    });
    (end, last)
}
