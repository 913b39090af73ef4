//! Fuzz harness bodies shared by the libFuzzer targets and the stable corpus-replay mode.
//!
//! With the `libfuzzer` feature (set by `cargo fuzz run <target>` on nightly) each target is a
//! libFuzzer target. Without it each target is a plain binary that replays every file of the
//! directories (or files) given as arguments, so the corpus can be checked on stable:
//! `cargo run --release --bin chunk -- corpus/chunk`.

use bytes::Bytes;
use jfr_format::{chunks, Chunk, Item, Refresh};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Counts live heap bytes so each run can assert that the reader's allocations stay within a
/// small multiple of the input (the reader's documented bound).
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            let now = CURRENT.fetch_add(new_size - layout.size(), Relaxed) + new_size - layout.size();
            PEAK.fetch_max(now, Relaxed);
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `body` on `data` and panics if it ever held more than 64 × the input + 1 MiB at once.
pub fn bounded(data: &[u8], body: fn(&[u8])) {
    let base = CURRENT.load(Relaxed);
    PEAK.store(base, Relaxed);
    body(data);
    let peak = PEAK.load(Relaxed).saturating_sub(base);
    let limit = 64 * data.len() + (1 << 20);
    assert!(peak <= limit, "peak allocation {peak} bytes for a {}-byte input", data.len());
}

/// Parses every chunk, iterates every event, resolves every stack trace and thread, within the
/// allocation bound.
pub fn chunk(data: &[u8]) {
    bounded(data, chunk_body);
}

fn chunk_body(data: &[u8]) {
    for chunk in chunks(Bytes::copy_from_slice(data)) {
        let Ok(chunk) = chunk else { break };
        visit_chunk(&chunk, jfr_format::header::HEADER_SIZE as u64);
        let _ = chunk.pool_sizes().count();
    }
}

fn visit_chunk(chunk: &Chunk, from: u64) -> u64 {
    let mut items = chunk.items(from);
    for item in items.by_ref() {
        match item {
            Ok(Item::Event(event)) => {
                let _ = chunk.event_thread(&event);
                let _ = chunk.event_stack_trace(&event);
                let _ = chunk.event_duration_ticks(&event);
                for v in &event.values {
                    let _ = chunk.resolve_deep(v, 3);
                }
            }
            Ok(Item::Flush) => {}
            Err(_) => break,
        }
    }
    items.position()
}

/// Follows a chunk as if it were being written live. The input (after its first byte) is a chunk;
/// the harness walks its records and publishes growing prefixes through the header protocol:
/// every `n`-th record boundary (n from the first byte) it rewrites size, checkpoint and metadata
/// offsets and the generation in a copy of the file, sometimes leaving the guard byte set, and
/// offers the whole copy (unpublished bytes included) to `Chunk::refresh`. Finally it publishes
/// the chunk as finished.
pub fn live(data: &[u8]) {
    // The harness itself keeps two copies of the input (the file and one snapshot) besides the
    // reader's; still far inside the bound.
    bounded(data, live_body);
}

fn live_body(data: &[u8]) {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let every = usize::from(control % 16) + 1;
    let header = jfr_format::header::HEADER_SIZE;
    if data.len() < header {
        let _ = Chunk::parse(Bytes::copy_from_slice(data), 0);
        return;
    }
    // Record boundaries: (end, latest metadata offset, latest checkpoint offset).
    let mut bounds = Vec::new();
    let (mut pos, mut meta, mut cp, mut n) = (header, 0usize, 0usize, 0usize);
    while pos < data.len() && bounds.len() < 64 {
        let Some((size, size_len)) = jfr_format::varint::read_u64(&data[pos..]) else {
            break;
        };
        let Some((type_id, _)) = data.get(pos + size_len..).and_then(jfr_format::varint::read_u64) else {
            break;
        };
        if size == 0 || size > (data.len() - pos) as u64 {
            break;
        }
        match type_id {
            0 => meta = pos,
            1 => cp = pos,
            _ => {}
        }
        pos += size as usize;
        n += 1;
        if n % every == 0 || pos == data.len() {
            bounds.push((pos, meta, cp));
        }
    }
    let mut file = data.to_vec();
    let mut generation = 1u8;
    let mut chunk: Option<Chunk> = None;
    let mut at = 0;
    let publish = |file: &mut Vec<u8>, end: usize, meta: usize, cp: usize, state: u8| {
        file[8..16].copy_from_slice(&(end as i64).to_be_bytes());
        file[16..24].copy_from_slice(&(cp as i64).to_be_bytes());
        file[24..32].copy_from_slice(&(meta as i64).to_be_bytes());
        file[64] = state;
        file[67] |= 1;
    };
    let last = bounds.len();
    for (i, &(end, meta, cp)) in bounds.iter().enumerate() {
        if i % 4 == 3 {
            // A reader that looks while the header is rewritten must see "locked".
            file[64] = jfr_format::header::STATE_GUARD;
            if let Some(c) = &mut chunk {
                assert_eq!(c.refresh(Bytes::copy_from_slice(&file)).ok(), Some(Refresh::Locked));
            }
        }
        let state = if i + 1 == last { 0 } else { generation };
        generation = jfr_format::header::next_generation(generation);
        publish(&mut file, end, meta, cp, state);
        let bytes = Bytes::copy_from_slice(&file);
        match &mut chunk {
            None => {
                if let Ok(c) = Chunk::parse(bytes, 0) {
                    at = visit_chunk(&c, 0);
                    chunk = Some(c);
                }
            }
            Some(c) => {
                if let Ok(Refresh::Grew) = c.refresh(bytes) {
                    at = visit_chunk(c, at);
                }
            }
        }
    }
}

/// Runs `target` on every file named by the arguments (directories are read one level deep).
pub fn replay(target: fn(&[u8])) {
    let mut n = 0;
    for arg in std::env::args_os().skip(1) {
        let path = std::path::PathBuf::from(arg);
        let files: Vec<_> = if path.is_dir() {
            std::fs::read_dir(&path)
                .expect("readable corpus directory")
                .map(|e| e.expect("directory entry").path())
                .collect()
        } else {
            vec![path]
        };
        for file in files {
            // A running fuzzer may delete files it reduced: skip those.
            let Ok(data) = std::fs::read(&file) else {
                continue;
            };
            target(&data);
            n += 1;
        }
    }
    eprintln!("replayed {n} inputs without a panic");
}
