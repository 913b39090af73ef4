//! The sampling allocator over another allocator (`SamplingAllocator::with`): an arena allocator
//! that is async-signal-safe, so a signal handler may allocate while the thread it interrupts is
//! itself inside the allocator hook (nested hooks), and the live set is followed without
//! headers (frees search the table). Every call is forwarded; every sample taken is counted.

mod common;

use common::*;
use recorder::alloc::SamplingAllocator;
use recorder::Recorder;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An arena allocator over 1 GiB of address space reserved at first use: power-of-two size
/// classes (16 B and up), each with a lock-free free list, carved from the arena by a bump
/// pointer. Lock-free and allocation-free: usable in a signal handler that interrupts it. Freed
/// blocks are reused (a bump allocator that never reuses runs out of the arena in well under a
/// second of the tests' allocation loops on a fast machine).
struct Arena {
    base: AtomicUsize,
    /// Offset of the arena's unused rest (from 16: offset 0 marks an empty free list).
    next: AtomicUsize,
    /// Per size class, the head of its free list: `tag << 32 | offset / 16` (0: empty). Each
    /// free block's first word holds the next block's `offset / 16`. The tag, bumped by every
    /// push and pop, makes a compare-and-swap fail after the head was popped and pushed back in
    /// between (ABA), including by a signal handler interrupting this thread.
    free: [AtomicU64; CLASSES],
    allocs: AtomicU64,
    frees: AtomicU64,
}

const ARENA: usize = 1 << 30;
/// Size classes 16 B << k: up to the arena's size.
const CLASSES: usize = 27;
/// The alignment every block has; larger alignments are carved apart and never reused.
const BLOCK_ALIGN: usize = 16;

fn class_of(size: usize) -> usize {
    size.max(BLOCK_ALIGN).next_power_of_two().trailing_zeros() as usize - BLOCK_ALIGN.trailing_zeros() as usize
}

impl Arena {
    fn base(&self) -> usize {
        let b = self.base.load(Ordering::Acquire);
        if b != 0 {
            return b;
        }
        // SAFETY: an anonymous private reservation; MAP_NORESERVE keeps it lazily backed.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ARENA,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        match self.base.compare_exchange(0, p as usize, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => p as usize,
            Err(other) => {
                // SAFETY: ours, never published.
                unsafe { libc::munmap(p, ARENA) };
                other
            }
        }
    }

    /// `size` bytes aligned to `align` from the arena's unused rest; null once it is used up.
    fn carve(&self, base: usize, size: usize, align: usize) -> *mut u8 {
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let start = (base + cur).next_multiple_of(align) - base;
            let end = start + size;
            if end > ARENA {
                // Out of arena: fail like an allocator out of memory.
                return std::ptr::null_mut();
            }
            match self.next.compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return (base + start) as *mut u8,
                Err(c) => cur = c,
            }
        }
    }

    /// The first word of the block at `offset`, as the free list links through it.
    fn link(base: usize, offset: u64) -> &'static AtomicU64 {
        // SAFETY: `offset` names a block of the arena (16-byte aligned, at least 16 bytes), which
        // stays mapped for the process's life.
        unsafe { &*((base + offset as usize * BLOCK_ALIGN) as *const AtomicU64) }
    }

    fn pop(&self, base: usize, class: usize) -> *mut u8 {
        // Acquire: pairs with the Release push, making the pushed block's link visible.
        let mut head = self.free[class].load(Ordering::Acquire);
        loop {
            let offset = head & 0xFFFF_FFFF;
            if offset == 0 {
                return std::ptr::null_mut();
            }
            // If another thread pops this block first, this reads whatever it wrote there; the
            // tag then fails the exchange below and the value is never used.
            let next = Self::link(base, offset).load(Ordering::Relaxed);
            let tagged = ((head >> 32).wrapping_add(1) << 32) | (next & 0xFFFF_FFFF);
            // Acquire on success: as the load above; on failure, the new head's link likewise.
            match self.free[class].compare_exchange_weak(head, tagged, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return (base + offset as usize * BLOCK_ALIGN) as *mut u8,
                Err(h) => head = h,
            }
        }
    }

    fn push(&self, base: usize, class: usize, ptr: *mut u8) {
        let offset = ((ptr as usize - base) / BLOCK_ALIGN) as u64;
        let mut head = self.free[class].load(Ordering::Relaxed);
        loop {
            Self::link(base, offset).store(head & 0xFFFF_FFFF, Ordering::Relaxed);
            let tagged = ((head >> 32).wrapping_add(1) << 32) | offset;
            // Release: pairs with the Acquire pop, publishing the link stored above.
            match self.free[class].compare_exchange_weak(head, tagged, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }
}

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = self.base();
        let p = if layout.align() > BLOCK_ALIGN {
            self.carve(base, layout.size(), layout.align())
        } else {
            let class = class_of(layout.size());
            if class >= CLASSES {
                return std::ptr::null_mut(); // more than the arena
            }
            match self.pop(base, class) {
                p if p.is_null() => self.carve(base, BLOCK_ALIGN << class, BLOCK_ALIGN),
                p => p,
            }
        };
        if !p.is_null() {
            self.allocs.fetch_add(1, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.frees.fetch_add(1, Ordering::Relaxed);
        if layout.align() <= BLOCK_ALIGN {
            self.push(self.base(), class_of(layout.size()), ptr);
        }
    }
}

static ARENA_ALLOCATOR: Arena = Arena {
    base: AtomicUsize::new(0),
    next: AtomicUsize::new(BLOCK_ALIGN),
    free: [const { AtomicU64::new(0) }; CLASSES],
    allocs: AtomicU64::new(0),
    frees: AtomicU64::new(0),
};

struct ViaArena;

unsafe impl GlobalAlloc for ViaArena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { ARENA_ALLOCATOR.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded.
        unsafe { ARENA_ALLOCATOR.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: SamplingAllocator<ViaArena> = SamplingAllocator::with(ViaArena);

// The system allocator is still reachable for the test harness's own large buffers if needed.
#[allow(dead_code)]
static SYSTEM: System = System;

static HANDLED: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn allocate_in_handler() {
    std::hint::black_box(vec![1u8; 8 * 1024]);
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

extern "C" fn on_sigusr2(_: libc::c_int) {
    allocate_in_handler();
}

#[inline(never)]
fn busy_allocator(stop: &AtomicBool) -> u64 {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        std::hint::black_box(vec![n as u8; 512]);
        n += 1;
    }
    n
}

/// A thread allocates in a loop (so signals land inside the hook, its slow path included, at
/// an interval of 1 KiB) while a signal handler on that thread allocates too: no crash, no
/// deadlock, every sample counted, the handler's samples written with its stack.
#[test]
fn nested_hooks_in_signal_handlers_are_safe_and_counted() {
    let _s = serial();
    // SAFETY: installs a plain handler for SIGUSR2 (restored below).
    let old = unsafe { libc::signal(libc::SIGUSR2, on_sigusr2 as *const () as libc::sighandler_t) };
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().allocation_sampling(1024).start().unwrap();
    let repo = rec.repository_dir().to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // SAFETY: no preconditions.
            tx.send(unsafe { libc::pthread_self() } as u64).unwrap();
            busy_allocator(&stop)
        })
    };
    let target = rx.recv().unwrap() as libc::pthread_t;
    let deadline = Instant::now() + Duration::from_secs(60);
    while HANDLED.load(Ordering::Relaxed) < 2_000 {
        assert!(Instant::now() < deadline, "the handler stopped running (deadlock?)");
        // SAFETY: the worker lives until `stop`.
        unsafe { libc::pthread_kill(target, libc::SIGUSR2) };
        std::thread::sleep(Duration::from_micros(50));
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let a = rec.stop_with_report().unwrap().allocation.unwrap();
    // SAFETY: restores the previous disposition.
    unsafe { libc::signal(libc::SIGUSR2, old) };
    assert_eq!(a.taken, a.written + a.lost + a.failed, "{a:?}");
    let events: Vec<ReadEvent> =
        chunk_files(&repo).iter().flat_map(|c| read_events(c, "jdk.ObjectAllocationSample")).collect();
    assert_eq!(events.len() as u64, a.written);
    let in_handler = events
        .iter()
        .filter(|e| e.stack.as_ref().is_some_and(|s| s.iter().any(|f| f.contains("allocate_in_handler"))))
        .count();
    assert!(in_handler > 100, "handler samples {in_handler} of {}", events.len());
}

#[inline(never)]
fn keep_site(out: &mut Vec<Vec<u8>>) {
    for i in 0..1_000 {
        out.push(vec![i as u8; 2048]);
    }
}

#[inline(never)]
fn drop_site() {
    for i in 0..10_000 {
        std::hint::black_box(vec![i as u8; 2048]);
    }
}

/// Without headers (another allocator than the system's) the live set is followed by searching
/// the table on free: the kept site is live, the dropped one is not.
#[test]
fn live_set_without_headers_follows_frees() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .allocation_sampling(8 * 1024)
        .allocation_live_set(true)
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let mut kept = Vec::new();
    keep_site(&mut kept);
    drop_site();
    rec.stop().unwrap();
    let files = chunk_files(&repo);
    let settings: Vec<ReadEvent> = files.iter().flat_map(|c| read_events(c, "jdk.ActiveSetting")).collect();
    assert!(settings.iter().any(|e| e.field("name").as_str() == Some("freeTracking")
        && e.field("value").as_str() == Some("table search on free")));
    let sets: Vec<ReadEvent> = files.iter().flat_map(|c| read_events(c, "recorder.LiveSet")).collect();
    let last = sets.iter().max_by_key(|e| e.field_i64("snapshot")).expect("a live-set snapshot");
    let snapshot = last.field_i64("snapshot");
    let live: Vec<ReadEvent> = files
        .iter()
        .flat_map(|c| read_events(c, "recorder.LiveObject"))
        .filter(|e| e.field_i64("snapshot") == snapshot)
        .collect();
    assert_eq!(live.len() as i64, last.field_i64("objects"));
    let names =
        |f: &str| live.iter().filter(|e| e.stack.as_ref().is_some_and(|s| s.iter().any(|x| x.contains(f)))).count();
    assert!(names("keep_site") > 100, "kept blocks are live: {}", names("keep_site"));
    assert_eq!(names("drop_site"), 0, "dropped blocks are not");
    let bytes: i64 = live
        .iter()
        .filter(|e| e.stack.as_ref().unwrap().iter().any(|x| x.contains("keep_site")))
        .map(|e| e.field_i64("weight"))
        .sum();
    let truth = 1_000.0 * 2048.0;
    assert!((bytes as f64 / truth - 1.0).abs() < 0.3, "estimated live bytes {bytes} vs {truth}");
    drop(kept);
    assert!(
        ARENA_ALLOCATOR.allocs.load(Ordering::Relaxed) > 0 && ARENA_ALLOCATOR.frees.load(Ordering::Relaxed) > 0,
        "calls are forwarded"
    );
}
