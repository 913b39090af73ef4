//! Cost of one stack walk, per sample and per frame: frame pointers vs the DWARF CFI tables of
//! `src/unwind` (the walk the SIGPROF handler runs), at 16, 128, 1000 and 4000 frames, and what the
//! other design would cost in the handler alone: copying a slice of the stack (8 KiB, 32 KiB) into
//! a buffer for unwinding later (`cargo bench --bench unwind`). Plain output, side by side in one run.
//!
//! The walks run in normal context over this thread's own stack, built by a recursion of known
//! depth; the handler does the same work on the interrupted thread's stack. Best of 7 rounds
//! (the machine is shared; the minimum is the least disturbed figure).

use recorder::unwind::compile::Compiler;
use recorder::unwind::walk::caller_registers;
use recorder::unwind::{walk, OwnStack, Regs, Tables, Unwinder, WalkRules};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 7;

fn stack_bounds() -> (usize, usize) {
    // SAFETY: `attr` is initialized by pthread_getattr_np and destroyed after use.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
        let mut addr = std::ptr::null_mut();
        let mut size = 0;
        libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (addr as usize, addr as usize + size)
    }
}

#[inline(never)]
fn at_depth(depth: usize, f: &mut dyn FnMut()) {
    if depth == 0 {
        f();
    } else {
        at_depth(depth - 1, f);
    }
    black_box(depth);
}

/// ns per call of `f`, best of ROUNDS rounds of `iters` calls.
fn time(iters: u32, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    best
}

fn walk_cost(tables: &Tables, mode: Unwinder, regs: Regs, lo: usize, hi: usize, frames: usize) -> (f64, usize) {
    let mut out = [0u64; 256];
    let mut n = 0;
    // About 2.5 M frames a round at any depth.
    let iters = (2_560_000 / frames).clamp(100, 20_000) as u32;
    let ns = time(iters, || {
        let mut i = 0;
        let regs = black_box(regs);
        let rules = WalkRules::with_tables(Some(tables), mode, frames, 0);
        let (got, _) = walk(&OwnStack { lo: lo.max(regs.sp), hi }, &rules, regs, true, |frame| {
            // The handler keeps 128 frames of a deep stack by default; the walk is what costs.
            out[i % out.len()] = frame.pc as u64;
            i += 1;
            true
        });
        n = got;
        black_box(&out);
    });
    (ns, n)
}

fn main() {
    let tables = Compiler::default().refresh().expect("maps");
    let (lo, hi) = stack_bounds();
    println!("stack walk cost (best of {ROUNDS} rounds; walks over this thread's own stack)");
    println!("{:>8} {:>14} {:>12} {:>12}  frames", "depth", "unwinder", "ns/sample", "ns/frame");
    for depth in [16usize, 128, 1000, 4000] {
        let mut rows = Vec::new();
        // The recursion gives `depth` frames above the walk's start, plus main's few.
        at_depth(depth, &mut || {
            let regs = caller_registers();
            for mode in [Unwinder::FramePointer, Unwinder::Auto, Unwinder::Dwarf] {
                let (ns, n) = walk_cost(&tables, mode, regs, lo, hi, depth);
                rows.push((mode, ns, n));
            }
        });
        let fp = rows[0].1;
        for (mode, ns, n) in rows {
            println!(
                "{depth:>8} {:>14} {ns:>12.1} {:>12.2}  {n} ({:.2}x frame pointers)",
                mode.name(),
                ns / n as f64,
                ns / fp
            );
        }
    }
    println!();
    println!("the other design: copy the stack in the handler, unwind later (copy alone)");
    println!("{:>8} {:>12}", "bytes", "ns/sample");
    for bytes in [8 * 1024usize, 32 * 1024] {
        // A stack this deep is rarely all in use here; the copy costs the same from any memory.
        let src = vec![1u8; bytes];
        let mut buf = vec![0u8; bytes];
        let ns = time(20_000, || {
            buf.copy_from_slice(black_box(&src));
            black_box(&buf);
        });
        println!("{bytes:>8} {ns:>12.1}");
    }
}
