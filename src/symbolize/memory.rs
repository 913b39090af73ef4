//! What the symbolizer holds in memory, and its bound.
//!
//! Measured with `scripts/footprint.sh` (a small C program recorded with default settings):
//! naming the first address of `libc.so.6` from Debian's separate debug file (its DWARF
//! sections zlib-compressed, 8.6 MB inflated) took 33 MB of heap: the inflated sections plus
//! `addr2line`'s state for each of the file's ~1,500 compilation units, three quarters of the
//! recorder's whole footprint in that process. DWARF that is not compressed is mapped from the
//! file instead (its pages are the page cache's; [`Usage::mapped_file_bytes`] counts its DWARF
//! sections), and its units are parsed when an address needs them.
//!
//! The bound: a recording may limit what the symbolizer holds ([`set_memory_limit`],
//! `RecorderBuilder::symbol_memory`; `recorder record` sets 16 MiB). A module whose DWARF is
//! expected ([`dwarf_cost`]) not to fit in what is left of that limit is named from its symbol
//! table only (the debug file's full one when there is a debug file: function names, no lines
//! or inlined frames). After each batch of new addresses, while the symbolizer's heap and the
//! DWARF of the files it mapped exceed the limit, the module with the largest mapped
//! file loses its DWARF the same way (`enforce_process_limit`). Each such module is named in
//! [`Usage::symbols_only`], which the recording reports in `recorder.Footprint`. Without a
//! limit (the library's default) the symbolizer is not bounded.

use crate::sync::{AtomicUsize, Ordering};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use std::path::Path;

/// Heap one inflated byte of DWARF was found to take with its parsed state: 33 MB for 8.6 MB of
/// sections (libc 2.36's debug file, after its first lookup; the figures above).
pub const INFLATE_FACTOR: u64 = 4;

/// What the symbolizer may hold (its heap and the DWARF of the files it mapped), set by
/// the running recording; `usize::MAX`: no bound.
static MEMORY_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Sets what the process's symbolizer may hold: its heap and the DWARF of the files it
/// mapped (`usize::MAX`: unbounded). Modules loaded from then on are checked against it.
pub fn set_memory_limit(bytes: usize) {
    // Relaxed: a setting read at the next module load; nothing else is published with it.
    MEMORY_LIMIT.store(bytes, Ordering::Relaxed);
}

/// What the process's symbolizer may hold.
pub fn memory_limit() -> usize {
    // Relaxed: see `set_memory_limit`.
    MEMORY_LIMIT.load(Ordering::Relaxed)
}

/// What the symbolizer holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Heap the symbolizer's work left allocated: parsed debug info, inflated sections, symbol
    /// tables, cached results. Measured as the allocator's growth across each of its calls
    /// (glibc's `mallinfo2`; another thread's allocations in those milliseconds count too), 0
    /// where the allocator does not tell.
    pub heap_bytes: u64,
    /// The DWARF sections of the files the symbolizer mapped (objects and debug files read for
    /// their DWARF): what its lookups may bring in from the page cache. Not read from
    /// `/proc/self/smaps`: a `/proc` read every periodic interval is an open in the shared
    /// descriptor table (see `Symbolizer::mapped_dwarf_bytes`).
    pub mapped_file_bytes: u64,
    /// Modules named from their symbol table only, because their DWARF did not fit the limit:
    /// (module name, estimated bytes of its DWARF).
    pub symbols_only: Vec<(String, u64)>,
}

/// The allocator's bytes in use (glibc: `mallinfo2`'s `uordblks + hblkhd`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(super) fn heap_in_use() -> Option<u64> {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct (glibc 2.33+; it takes the
    // arenas' locks, which no caller of the symbolizer holds).
    let info = unsafe { libc::mallinfo2() };
    Some(info.uordblks as u64 + info.hblkhd as u64)
}

/// The allocator's bytes in use: unknown here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn heap_in_use() -> Option<u64> {
    None
}

/// Returns freed heap to the kernel (glibc keeps freed memory in its arenas otherwise).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(super) fn give_back_heap() {
    // SAFETY: malloc_trim takes a pad size and the arenas' locks, which no caller holds.
    unsafe { libc::malloc_trim(0) };
}

/// Returns freed heap to the kernel: the allocator does it itself here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn give_back_heap() {}

/// What loading the DWARF of `path` is expected to cost: [`INFLATE_FACTOR`] times the size its
/// compressed sections inflate to (heap), plus the size of its other sections (mapped from the
/// file; a lookup reads the parts of them its compilation unit needs, which for a large program
/// soon adds up: 33 MB of a 44 MB `.debug_*` within seconds, `scripts/footprint.sh`). Read from
/// the section headers; nothing is inflated. Location lists and macros are left out:
/// symbolizing does not read them. Opens the file: call it in a descriptor table of its own
/// (`fds::in_private_table`).
pub(super) fn dwarf_cost(path: &Path) -> u64 {
    let Ok(file) = std::fs::File::open(path) else { return 0 };
    let cache = object::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else { return 0 };
    let mut total = 0u64;
    for section in elf.sections() {
        let Ok(name) = section.name() else { continue };
        if !name.starts_with(".debug_") || name.starts_with(".debug_loc") || name.starts_with(".debug_mac") {
            continue;
        }
        if let Ok(range) = section.compressed_file_range() {
            let cost = if range.format == object::CompressionFormat::None {
                range.uncompressed_size
            } else {
                range.uncompressed_size.saturating_mul(INFLATE_FACTOR)
            };
            total = total.saturating_add(cost);
        }
    }
    total
}

/// The function symbols of `path` (its `.symtab`, else `.dynsym`), (address, size, mangled name)
/// sorted by address: what a module is named from when its DWARF is not loaded. Opens the file:
/// call it in a descriptor table of its own (`fds::in_private_table`).
pub(super) fn function_symbols(path: &Path) -> Vec<(u64, u64, String)> {
    let Ok(file) = std::fs::File::open(path) else { return Vec::new() };
    let cache = object::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else { return Vec::new() };
    let text = |s: &object::Symbol<'_, '_, _>| s.is_definition() && s.kind() == object::SymbolKind::Text;
    let entry = |s: object::Symbol<'_, '_, _>| Some((s.address(), s.size(), s.name().ok()?.to_owned()));
    let mut symbols: Vec<(u64, u64, String)> = elf.symbols().filter(text).filter_map(entry).collect();
    if symbols.is_empty() {
        symbols = elf.dynamic_symbols().filter(text).filter_map(entry).collect();
    }
    symbols.sort_unstable_by_key(|&(addr, _, _)| addr);
    symbols.dedup_by_key(|e| e.0);
    symbols
}
