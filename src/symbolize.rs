//! Symbolization of raw instruction pointers of this process, off the signal path.
//!
//! Samples carry raw instruction pointers (docs/architecture.md, data path 2); an L holder or the CLI turns
//! them into [`SymbolizedFrame`]s here, with a per-address cache, so a hot address costs one hash
//! lookup. The process symbolizes *itself*: addresses are live virtual addresses. We read
//! `/proc/self/maps` (no unsafe code, unlike `dl_iterate_phdr`) to find the mapping and file of
//! an address, translate it to the file's own (stated) virtual address through the ELF program
//! headers (this handles the load bias of PIE executables and shared libraries), and look that up
//! with `addr2line` (DWARF lines and inline info, then the ELF symbol table, falling back to
//! `.dynsym` for stripped libraries such as `libc.so.6`).
//!
//! Return addresses (every frame but the leaf) point after the call: we look up `ip - 1`, or the
//! line and the inlined frames would be those of the next instruction.
//!
//! # Crate choice: addr2line (gimli), measured against blazesym
//!
//! Measured on the project's 2-core machine (AMD EPYC, rustc 1.95, addr2line 0.27.1, blazesym
//! 0.2.7), in a scratch binary (a PIE) that symbolizes 10 000 distinct addresses spread evenly
//! over its own text segment, each variant in a fresh process. "first addr" is one cold lookup
//! (opening and parsing the file), "1st pass" the 10 000 new addresses, "2nd pass" the same
//! addresses again. Times are process CPU time (the machine had a load average of 10 from other
//! builds, which made wall times noisy), best of 3 interleaved runs (spread up to 35 % under that
//! load); "RSS" is the growth of `RssAnon` over the whole run (file-backed pages of the mapped
//! ELF stayed under 1.3 MiB), stable to a few KiB. blazesym used `Source::Process` for its own
//! pid with its defaults (demangling, inlined functions, code info); it caches parsed files, not
//! results.
//!
//! | binary 15.6 MiB, release (line-tables-only)   | first addr | 1st pass/addr | 2nd pass/addr | RSS anon |
//! |-----------------------------------------------|-----------:|--------------:|--------------:|---------:|
//! | this module (addr2line + result cache)        |     8.0 ms |       14.3 µs |       0.09 µs | 49.8 MiB |
//! | addr2line `Loader` alone, results dropped     |     7.8 ms |        9.1 µs |        2.4 µs | 29.5 MiB |
//! | blazesym, one call of 10 000 addresses        |     3.5 ms |       14.3 µs |        6.5 µs | 30.3 MiB |
//! | blazesym, one call per address, results dropped |   3.4 ms |       42.4 µs |       33.5 µs | 24.5 MiB |
//!
//! | binary 41.7 MiB, opt-level 3 with debug = 2   | first addr | 1st pass/addr | 2nd pass/addr | RSS anon |
//! |-----------------------------------------------|-----------:|--------------:|--------------:|---------:|
//! | this module (addr2line + result cache)        |    12.8 ms |       18.7 µs |       0.09 µs | 51.9 MiB |
//! | addr2line `Loader` alone, results dropped     |    11.9 ms |       13.9 µs |        3.9 µs | 33.5 MiB |
//! | blazesym, one call of 10 000 addresses        |     6.8 ms |       20.4 µs |        9.3 µs | 36.6 MiB |
//! | blazesym, one call per address, results dropped |   7.0 ms |       48.9 µs |       36.0 µs | 27.8 MiB |
//!
//! Both found the same frames (40 606 in release: ~3 inlined per address) and lines for 95.9 %
//! of them (blazesym 0.3 % more). Our result cache costs about 2 KiB per address (four owned
//! frames of ~500 bytes: long generic names and `/rustc/<hash>/...` paths), hence
//! [`Symbolizer::clear_cache`]. The harness, `examples/symbolize_compare.rs`, takes every
//! `len/10000`-th byte of its own `r-xp` mapping:
//!
//! ```text
//! cargo build --release --example symbolize_compare --features compare-blazesym
//! for m in a2l a2lraw blaze blaze1; do target/release/examples/symbolize_compare $m 10000; done
//! ```
//!
//! and the same with `CARGO_PROFILE_RELEASE_DEBUG=2` for full debug info. (The figures above were
//! taken with the same code in a scratch crate; the example's binary is somewhat larger.)
//!
//! Choice: addr2line. A new address costs 9.1 vs 14.3 µs (line tables) and 13.9 vs 20.4 µs
//! (full debug info) against blazesym's best case, a batch; blazesym's single-address calls
//! re-read `/proc/self/maps` each time (42-49 µs), and the L holder's pattern, "symbolize each
//! new address once, on a cache miss", does not batch naturally. blazesym's parsed state is
//! smaller (24.5 vs 29.5 MiB, 27.8 vs 33.5 MiB) and its cold first lookup 4-5 ms faster; both
//! are small next to the result cache and a one-time cost. addr2line is what std's own
//! backtraces use; its `Loader` does the file work (mmap, symbol table with `.dynsym` fallback,
//! split DWARF) and leaves the process layout (maps, load bias, vDSO, debug files) to us.
//! The dependency trees are of the same size (25 crates each, mostly shared: gimli, flate2,
//! memmap2, both demanglers). What blazesym offers that we do not use yet: address normalization
//! with build IDs for symbolizing elsewhere, and `.gnu_debuglink`/debuginfod lookup; if
//! symbolization from outside the process is needed, revisit.
//!
//! # Gaps
//!
//! - Separate debug files are found by build ID only (`/usr/lib/debug/.build-id/ab/cdef.debug`,
//!   what Debian's `-dbg` and Fedora's debuginfo packages install; other directories with
//!   [`set_debug_file_directories`], `debug_dir=` of the preload); `.gnu_debuglink` and
//!   debuginfod are not used. Without a debug file, a system library gives its exported
//!   (`.dynsym`) names only, without lines.
//! - The vDSO is read from memory and named from its dynamic symbols (`__vdso_clock_gettime`,
//!   class and package `[vdso]`); JIT code and other anonymous executable mappings come out as
//!   hex.
//! - With `debug = "line-tables-only"` (our release profile) DWARF keeps only the bare name of
//!   an inlined function (`push`, no path): such frames have `function` = `method` = the bare
//!   name, and `class` = `package` = the crate guessed from the source path
//!   (`/rustc/<hash>/library/alloc/...` -> `alloc`, `.../registry/src/*/serde-1.0.0/...` ->
//!   `serde`), else the caller's crate. The physical frame has its full path from the symbol
//!   table. `debug = 1` or more gives full paths for inlined frames too.
//! - A library unloaded with `dlclose` and another one loaded at the same addresses keeps the
//!   stale cache entries (the cache is keyed by address); call [`Symbolizer::clear_cache`].
//! - Mappings are re-read at most every 100 ms on a miss, so an address in a library loaded in
//!   the last 100 ms may come out as hex until a later miss re-reads them (hex results of
//!   unmapped addresses are dropped from the cache then).
//! - ELF64 only (x86_64, aarch64); another ELF class assumes file offset = virtual address.

mod elf;
mod memory;
use elf::read_elf_layout;
pub use memory::{memory_limit, set_memory_limit, Usage, INFLATE_FACTOR};

use crate::threads::proc;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use object::{Object as _, ObjectSymbol as _};

/// One symbolized frame (one function; an address with inline info gives several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolizedFrame {
    /// Demangled full name without the hash suffix (`myapp::parser::Parser::parse`), the plain
    /// name of a C symbol (`epoll_wait`), `library+0x1a2b` for a nameless address of a module's
    /// code (the address in the module's ELF address space), or `0x7f12...` for an address in no
    /// file.
    pub function: String,
    /// The function's path without its last segment (`myapp::parser::Parser`); for a C symbol
    /// the library's file name (`libc.so.6`); for an unknown address the module name or "".
    pub class: String,
    /// The last path segment (`parse`), or the whole C name.
    pub method: String,
    /// The crate (first path segment: `myapp`, `std`, `core`), or the library name for C.
    pub package: String,
    /// The file the code lives in (`myapp`, `libc.so.6`); `linux-vdso.so.1` (its soname) for the
    /// vDSO; the mapping's name (`[anon:…]`, often "") for other executable memory; "" for an
    /// address in no mapping. The recorder writes it as the frame's class, as async-profiler does.
    pub module: String,
    /// Source file from debug info.
    pub file: Option<String>,
    /// Source line from debug info.
    pub line: Option<u32>,
    /// True for frames that come from inline info: all but the outermost (physical) frame of an
    /// address.
    pub inlined: bool,
}

/// Symbolizes instruction pointers of the current process, with a per-address cache.
///
/// Build it once and keep it across flushes: per-module state (the mapped ELF file, its symbol
/// table, its parsed DWARF units) is built on first use and kept.
pub struct Symbolizer {
    cache: HashMap<(u64, bool), Box<[SymbolizedFrame]>>,
    /// Executable mappings, sorted by start address.
    mappings: Vec<Mapping>,
    /// One entry per distinct file among `mappings`.
    objects: Vec<ObjectState>,
    last_refresh: Option<Instant>,
    /// Cache keys of addresses that were in no mapping: dropped from the cache when the maps are
    /// re-read, so a library loaded later is not stuck with hex names.
    unmapped: Vec<(u64, bool)>,
    /// Heap the symbolizer's work left allocated (see [`Usage::heap_bytes`]).
    heap_bytes: u64,
    /// Modules named from their symbol table only, for the memory limit ([`Usage::symbols_only`]).
    symbols_only: Vec<(String, u64)>,
}

// The symbolizer is handed between L holders and the CLI's threads: it must stay `Send`.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<Symbolizer>();
};

/// One symbolizer for the recording process: its per-module state and its cache outlive a
/// recording, so a second recording (or a forked child's) does not parse the debug info again.
/// The flusher uses it with the chunk-writer lock L released (the first
/// symbolization of a module parses its debug info); `recorder/atfork.rs` holds it across the fork.
static PROCESS: crate::fork::ForkSafeMutex<Option<Symbolizer>> = crate::fork::ForkSafeMutex::new(None);
/// [`PROCESS`], for the atfork handlers, which hold it across fork.
pub(crate) static PROCESS_LOCK: &dyn crate::fork::HeldAcrossFork = &PROCESS;

/// Runs `f` with the process's symbolizer.
pub(crate) fn with_process_symbolizer<R>(f: impl FnOnce(&mut Symbolizer) -> R) -> R {
    let mut guard = PROCESS.lock();
    let s = guard.get_or_insert_with(Symbolizer::new);
    let before = memory::heap_in_use();
    let r = f(s);
    if let (Some(before), Some(after)) = (before, memory::heap_in_use()) {
        s.heap_bytes = s.heap_bytes.saturating_add_signed(after.wrapping_sub(before) as i64);
    }
    r
}

/// Keeps the process's symbolizer within its limit ([`set_memory_limit`]; call after a batch of
/// addresses, without L): see [`Symbolizer::enforce_limit`].
pub(crate) fn enforce_process_limit() {
    let limit = memory_limit() as u64;
    if limit == u64::MAX {
        return;
    }
    if let Some(s) = PROCESS.lock().as_mut() {
        s.enforce_limit(limit);
    }
}

/// What the process's symbolizer holds now, or `None` while another thread symbolizes (which
/// may take seconds for a large binary's first address: a periodic reader must not wait).
pub fn process_usage_if_idle() -> Option<Usage> {
    if PROCESS.is_locked() {
        return None;
    }
    Some(process_usage())
}

/// What the process's symbolizer holds now.
pub fn process_usage() -> Usage {
    let (heap_bytes, symbols_only, mapped) = {
        let guard = PROCESS.lock();
        let Some(s) = guard.as_ref() else { return Usage::default() };
        (s.heap_bytes, s.symbols_only.clone(), s.mapped_dwarf_bytes())
    };
    Usage { heap_bytes, mapped_file_bytes: mapped, symbols_only }
}

/// How often a miss (an address in no known mapping) may re-read `/proc/self/maps`.
const REFRESH_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// Index into `Symbolizer::objects`, or `None` for anonymous and other unnamed mappings.
    object: Option<usize>,
    /// File name (`libc.so.6`) or pseudo-name (`[vdso]`).
    name: String,
}

struct ObjectState {
    /// Path as in `/proc/self/maps` (the key when the maps are re-read).
    maps_path: String,
    /// Path to open (differs from `maps_path` for deleted files).
    open_path: PathBuf,
    /// For `[vdso]`: the mapping to read from our own memory (it has no file).
    vdso: Option<(u64, u64)>,
    name: String,
    /// `PT_LOAD` segments: (file offset, file size, virtual address); `None` until loaded.
    loads: Option<Vec<(u64, u64, u64)>>,
    /// The exported function names of the file itself, (address, name) sorted by address, one
    /// (the public alias) per address: the names users know, where the symbol table (or a
    /// separate debug file's) may give `__getpid` or `__GI_getpid`.
    exports: Vec<(u64, String)>,
    loader: LoadState,
    /// The file whose DWARF `loader` mapped (the object or its debug file) and its expected
    /// cost (`memory::dwarf_cost`).
    dwarf_path: Option<(PathBuf, u64)>,
    /// The file's signal return trampolines (`.eh_frame` FDEs augmented `S`), by file address:
    /// read the first time a nameless address of the file needs a name.
    signal_trampolines: std::cell::OnceCell<Vec<(u64, u64)>>,
}

enum LoadState {
    NotTried,
    Loaded(Box<addr2line::Loader>),
    /// Symbols only (the vDSO, or a module whose DWARF did not fit the memory limit): (address,
    /// size, mangled name), sorted by address; a size of 0 is unknown (the vDSO's symbol map).
    Symbols(Vec<(u64, u64, String)>),
    Failed,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer").field("cached_addresses", &self.cache_len()).finish()
    }
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// An empty symbolizer; nothing is read before the first [`Symbolizer::symbolize`].
    pub fn new() -> Symbolizer {
        Symbolizer {
            cache: HashMap::new(),
            mappings: Vec::new(),
            objects: Vec::new(),
            last_refresh: None,
            unmapped: Vec::new(),
            heap_bytes: 0,
            symbols_only: Vec::new(),
        }
    }

    /// Frames for one address, innermost (most inlined) first, then the physical function.
    ///
    /// `is_return_address` must be true for every frame of a stack but the leaf: the address
    /// after a call is then looked up as `ip - 1`. Never panics and never fails: an unknown
    /// address gives one frame named by its hex value.
    pub fn symbolize(&mut self, ip: u64, is_return_address: bool) -> &[SymbolizedFrame] {
        let key = (ip, is_return_address);
        if !self.cache.contains_key(&key) {
            let frames = self.symbolize_uncached(ip, is_return_address);
            self.cache.insert(key, frames);
        }
        &self.cache[&key]
    }

    /// As [`Symbolizer::symbolize`], without keeping the result: for a caller that keeps its own
    /// per-address result (the recorder keeps the serialized frames), where this cache would
    /// only grow, by about 2 KiB per address ever seen.
    pub fn symbolize_uncached(&mut self, ip: u64, is_return_address: bool) -> Box<[SymbolizedFrame]> {
        // The parsers are meant not to panic on bad input; if one does anyway, the address gets
        // the hex fallback rather than taking the L holder down.
        let resolved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.resolve(ip, is_return_address)));
        resolved.unwrap_or_else(|_| Box::new([unknown(ip, "")]))
    }

    /// Modules named from their symbol table only because their DWARF did not fit the memory
    /// limit ([`set_memory_limit`]): (module name, estimated bytes of its DWARF).
    pub fn symbols_only(&self) -> &[(String, u64)] {
        &self.symbols_only
    }

    /// While the heap this symbolizer's work left allocated (measured for the process's
    /// symbolizer only) and the DWARF sections of the files it mapped exceed
    /// `limit` bytes, the module with the largest mapped file loses its DWARF and is named from
    /// its symbol table from then on (addresses named already keep their names), reported in
    /// [`Symbolizer::symbols_only`] with the bytes that freed.
    pub fn enforce_limit(&mut self, limit: u64) {
        loop {
            if self.heap_bytes.saturating_add(self.mapped_dwarf_bytes()) <= limit {
                return;
            }
            let largest = self
                .objects
                .iter()
                .enumerate()
                .filter_map(|(i, o)| Some((i, o.dwarf_path.clone()?)))
                .max_by_key(|m| m.1 .1);
            let Some((largest, (path, file_bytes))) = largest else { return };
            let before = memory::heap_in_use();
            // In a descriptor table of its own, as every file read of this module (`ensure_loaded`).
            let symbols = crate::fds::in_private_table(|| memory::function_symbols(&path));
            let object = &mut self.objects[largest];
            object.loader = LoadState::Symbols(symbols);
            object.dwarf_path = None;
            memory::give_back_heap();
            let freed = match (before, memory::heap_in_use()) {
                (Some(b), Some(a)) => b.saturating_sub(a),
                _ => 0,
            };
            self.heap_bytes = self.heap_bytes.saturating_sub(freed);
            let name = self.objects[largest].name.clone();
            self.symbols_only.push((name, freed + file_bytes));
        }
    }

    /// The debug info of the files this symbolizer mapped for their DWARF, as `dwarf_cost`
    /// expects it (what a lookup may bring in; read from no `/proc` file, which a program that
    /// `dup2`s over low descriptor numbers could race with: cli/tests/record_fds.rs).
    fn mapped_dwarf_bytes(&self) -> u64 {
        self.objects.iter().filter_map(|o| o.dwarf_path.as_ref()).map(|d| d.1).sum()
    }

    /// Number of cached addresses.
    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }

    /// Drops the cached results (about 2 KiB per address with four frames), keeping the loaded
    /// modules; for a caller that bounds memory.
    pub fn clear_cache(&mut self) {
        self.cache.clear();
        self.unmapped.clear();
        self.cache.shrink_to_fit();
    }

    fn resolve(&mut self, ip: u64, is_return_address: bool) -> Box<[SymbolizedFrame]> {
        let probe = if is_return_address { ip.saturating_sub(1) } else { ip };
        let mut found = self.find_mapping(probe);
        if found.is_none() && self.may_refresh() {
            self.refresh_maps();
            found = self.find_mapping(probe);
        }
        let Some(mi) = found else {
            self.unmapped.push((ip, is_return_address));
            return Box::new([unknown(ip, "")]);
        };
        let (start, offset) = (self.mappings[mi].start, self.mappings[mi].offset);
        let Some(oi) = self.mappings[mi].object else {
            return Box::new([unknown(ip, &self.mappings[mi].name)]);
        };
        let object = &mut self.objects[oi];
        let room = (memory_limit() as u64).saturating_sub(self.heap_bytes);
        if let Some(dropped) = object.ensure_loaded(room) {
            self.symbols_only.push(dropped);
        }
        let object = &mut self.objects[oi];
        let file_offset = (probe - start).wrapping_add(offset);
        let svma = object.file_offset_to_vaddr(file_offset);
        let object = &*object;
        let module = object.name.as_str();
        // A frame with no name shows where it is as `perf report` and pprof do: the module and the
        // address in the module's own (ELF) address space, the same for every run and every process.
        let here = svma.wrapping_add(ip - probe);
        let loader = match &object.loader {
            LoadState::Loaded(loader) => loader,
            LoadState::Symbols(symbols) => {
                let i = symbols.partition_point(|&(addr, _, _)| addr <= svma);
                // Past the end of the symbol before it: code no symbol covers (a signal
                // trampoline, whose symbol a symbol table may lack).
                let containing =
                    i.checked_sub(1).map(|i| &symbols[i]).filter(|(a, size, _)| *size == 0 || svma - a < *size);
                return Box::new([match containing {
                    Some((addr, _, name)) => {
                        named(demangle(exported_at(&object.exports, *addr).unwrap_or(name)), module, None, None, false)
                    }
                    None => object.nameless(svma, here),
                }]);
            }
            LoadState::NotTried | LoadState::Failed => return Box::new([object.nameless(svma, here)]),
        };

        // DWARF: innermost first. `find_frames` may fail on malformed DWARF: treat as absent.
        let mut dwarf: Vec<DwarfFrame> = Vec::new();
        if let Ok(mut frames) = loader.find_frames(svma) {
            while let Ok(Some(frame)) = frames.next() {
                let name = frame.function.as_ref().and_then(|f| f.raw_name().ok()).map(|n| demangle(&n));
                let rust = frame.function.as_ref().is_some_and(|f| f.language == Some(addr2line::gimli::DW_LANG_Rust));
                let (file, line) = match frame.location {
                    Some(l) => (l.file.map(str::to_owned), l.line),
                    None => (None, None),
                };
                dwarf.push(DwarfFrame { name, rust, file, line });
                if dwarf.len() > 256 {
                    break; // bounded, whatever the DWARF says
                }
            }
        }
        // Demangled only when used: demangling is a good part of the cost of a new address.
        // A symbol table has aliases (`__getpid`, and `__GI_getpid` in a separate debug file):
        // the file's own public exported name for that address wins.
        let symtab = || {
            let sym = loader.find_symbol_info(svma)?;
            let name = exported_at(&object.exports, sym.address()).unwrap_or(sym.name());
            Some(demangle(name))
        };
        let exported = || {
            let sym = loader.find_symbol_info(svma)?;
            exported_at(&object.exports, sym.address()).map(demangle)
        };

        if dwarf.is_empty() {
            return Box::new([match symtab() {
                Some(name) => named(name, module, None, None, false),
                None => object.nameless(svma, here),
            }]);
        }
        let last = dwarf.len() - 1;
        let mut out: Vec<SymbolizedFrame> = Vec::with_capacity(dwarf.len());
        // Physical frame first (its package helps name the inlined ones), then reverse.
        for (i, d) in dwarf.into_iter().enumerate().rev() {
            let inlined = i != last;
            // DWARF names the inlined frames. For the physical one, a DWARF linkage name (full
            // path) is best; with `line-tables-only` DWARF has only the bare name, and the symbol
            // table gives the full path.
            let full_dwarf_name = d.name.as_deref().is_some_and(|n| !d.rust || split_name(n).is_some());
            let name = if inlined {
                d.name
            } else if full_dwarf_name {
                exported().or(d.name)
            } else {
                symtab().or(d.name)
            };
            let frame = match name {
                // `debug = "line-tables-only"` keeps only the bare name of inlined Rust
                // functions (no namespaces): guess their crate from the source path.
                Some(name) if d.rust && split_name(&name).is_none() => {
                    let caller = out.last().map_or("", |f: &SymbolizedFrame| &f.package);
                    let package = crate_from_path(d.file.as_deref()).unwrap_or(caller);
                    SymbolizedFrame {
                        class: package.to_owned(),
                        method: name.clone(),
                        package: package.to_owned(),
                        module: module_name(module).to_owned(),
                        function: name,
                        file: d.file,
                        line: d.line,
                        inlined,
                    }
                }
                Some(name) => {
                    let mut f = named(name, module, d.file, d.line, inlined);
                    if f.package.is_empty() {
                        // `<u16>::fmt`: the source path tells (core), else the caller's crate.
                        let caller = out.last().map_or("", |c: &SymbolizedFrame| &c.package);
                        f.package = crate_from_path(f.file.as_deref()).unwrap_or(caller).to_owned();
                    }
                    f
                }
                None => SymbolizedFrame { file: d.file, line: d.line, inlined, ..unknown_in(module, here) },
            };
            out.push(frame);
        }
        out.reverse();
        out.into_boxed_slice()
    }

    fn find_mapping(&self, addr: u64) -> Option<usize> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        let i = i.checked_sub(1)?;
        (addr < self.mappings[i].end).then_some(i)
    }

    fn may_refresh(&self) -> bool {
        self.last_refresh.is_none_or(|t| t.elapsed() >= REFRESH_INTERVAL)
    }

    /// Re-reads `/proc/self/maps`, keeping the state of files already known.
    fn refresh_maps(&mut self) {
        self.last_refresh = Some(Instant::now());
        for key in self.unmapped.drain(..) {
            self.cache.remove(&key);
        }
        let Some(text) = proc::read_maps() else {
            return;
        };
        let mut mappings = Vec::new();
        for line in text.lines() {
            let Some(m) = proc::parse_maps_line(line) else {
                continue;
            };
            let (start, end) = (m.start as u64, m.end as u64);
            if !m.executable {
                continue;
            }
            let object = if m.path.starts_with('/') || m.path == "[vdso]" {
                Some(self.object_index(m.path, start, end))
            } else {
                None
            };
            let name = match object {
                Some(oi) => self.objects[oi].name.clone(),
                None => m.path.to_owned(),
            };
            mappings.push(Mapping { start, end, offset: m.offset, object, name });
        }
        mappings.sort_by_key(|m| m.start);
        self.mappings = mappings;
    }

    fn object_index(&mut self, maps_path: &str, start: u64, end: u64) -> usize {
        if let Some(i) = self.objects.iter().position(|o| o.maps_path == maps_path) {
            return i;
        }
        let (clean, open_path) = match maps_path.strip_suffix(" (deleted)") {
            // The file is gone from the file system, but the mapping still names it.
            Some(clean) => (clean, PathBuf::from(format!("/proc/self/map_files/{start:x}-{end:x}"))),
            None => (maps_path, PathBuf::from(maps_path)),
        };
        let name = clean.rsplit('/').next().unwrap_or(clean).to_owned();
        self.objects.push(ObjectState {
            maps_path: maps_path.to_owned(),
            open_path,
            vdso: (maps_path == "[vdso]").then_some((start, end)),
            name,
            loads: None,
            exports: Vec::new(),
            loader: LoadState::NotTried,
            dwarf_path: None,
            signal_trampolines: std::cell::OnceCell::new(),
        });
        self.objects.len() - 1
    }
}

impl ObjectState {
    /// The frame of an address `svma` (at `here`, its frame's own address) that no symbol names:
    /// a signal return trampoline by the name libcs give it (glibc's and musl's `__restore_rt`,
    /// local, so absent from a stripped library's `.dynsym`), else `library+0xOFFSET`.
    fn nameless(&self, svma: u64, here: u64) -> SymbolizedFrame {
        let trampolines = self.signal_trampolines.get_or_init(|| {
            crate::unwind::compile::signal_trampolines(&self.open_path.to_string_lossy()).unwrap_or_default()
        });
        if trampolines.iter().any(|&(start, end)| (start..end).contains(&svma)) {
            named("__restore_rt".to_owned(), &self.name, None, None, false)
        } else {
            unknown_in(&self.name, here)
        }
    }

    /// Loads the file's symbols and DWARF, the DWARF only if it is expected to take at most
    /// `room` bytes (`memory::dwarf_cost`); otherwise its symbol table only, returned as (module
    /// name, estimated bytes) to be reported.
    fn ensure_loaded(&mut self, room: u64) -> Option<(String, u64)> {
        if !matches!(self.loader, LoadState::NotTried) {
            return None;
        }
        if let Some((start, end)) = self.vdso {
            self.load_vdso(start, end);
            return None;
        }
        // In a descriptor table of its own: the loader keeps its file open while it parses
        // (`fds::in_private_table`).
        let open_path = self.open_path.clone();
        let (loads, exports, loaded) = crate::fds::in_private_table(move || {
            let file = File::open(&open_path).ok();
            let read_at = |buf: &mut [u8], at: u64| file.as_ref()?.read_exact_at(buf, at).ok();
            let layout = read_elf_layout(read_at).unwrap_or_default();
            // A separate debug file (Debian's libc6-dbg, Fedora's debuginfo packages) has the
            // full symbol table and the DWARF at the same addresses; prefer it when present.
            let debug_file = layout.build_id.as_deref().and_then(build_id_debug_path);
            let exports = exported_names(&open_path);
            let dwarf_file = debug_file.unwrap_or_else(|| open_path.clone());
            let cost = memory::dwarf_cost(&dwarf_file);
            let loaded = if cost > room {
                Err((memory::function_symbols(&dwarf_file), cost))
            } else {
                let from_debug_file = (dwarf_file != open_path).then(|| addr2line::Loader::new(&dwarf_file).ok());
                match from_debug_file.flatten() {
                    Some(loader) => Ok(Some((loader, (dwarf_file, cost)))),
                    None => {
                        let cost = memory::dwarf_cost(&open_path);
                        Ok(addr2line::Loader::new(&open_path).ok().map(|l| (l, (open_path, cost))))
                    }
                }
            };
            (layout.loads, exports, loaded)
        });
        self.loads = Some(loads);
        self.exports = exports;
        let mut dropped = None;
        self.loader = match loaded {
            Ok(Some((loader, path))) => {
                self.dwarf_path = Some(path);
                LoadState::Loaded(Box::new(loader))
            }
            Ok(None) => LoadState::Failed,
            Err((symbols, cost)) => {
                dropped = Some((self.name.clone(), cost));
                LoadState::Symbols(symbols)
            }
        };
        dropped
    }

    /// The vDSO has no file: read its image from our own memory (a plain file read of
    /// `/proc/self/mem`, no unsafe code) and keep its dynamic symbols.
    fn load_vdso(&mut self, start: u64, end: u64) {
        self.loader = LoadState::Failed;
        let len = end.saturating_sub(start);
        if len == 0 || len > 1 << 20 {
            return;
        }
        let mut image = vec![0u8; len as usize];
        let ok = File::open("/proc/self/mem").and_then(|mem| mem.read_exact_at(&mut image, start)).is_ok();
        if !ok {
            return;
        }
        let read_at = |buf: &mut [u8], at: u64| {
            let at = usize::try_from(at).ok()?;
            buf.copy_from_slice(image.get(at..at.checked_add(buf.len())?)?);
            Some(())
        };
        self.loads = Some(read_elf_layout(read_at).unwrap_or_default().loads);
        let Ok(elf) = object::File::parse(&image[..]) else {
            return;
        };
        let map = elf.symbol_map();
        let mut symbols: Vec<(u64, u64, String)> =
            map.symbols().iter().map(|s| (s.address(), 0, s.name().to_owned())).collect();
        symbols.sort_unstable_by_key(|&(addr, _, _)| addr);
        self.loader = LoadState::Symbols(symbols);
    }

    /// The address the file itself gives to `file_offset` (what DWARF and symbols use).
    fn file_offset_to_vaddr(&self, file_offset: u64) -> u64 {
        self.loads
            .iter()
            .flatten()
            .find(|&&(off, size, _)| file_offset >= off && file_offset - off < size)
            .map_or(file_offset, |&(off, _, vaddr)| (file_offset - off).wrapping_add(vaddr))
    }
}

struct DwarfFrame {
    name: Option<String>,
    rust: bool,
    file: Option<String>,
    line: Option<u32>,
}

/// The crate of a Rust source path, when the path tells: the standard library
/// (`/rustc/<hash>/library/core/src/..`) or a registry or git dependency
/// (`.../registry/src/<index>/serde-1.0.200/src/..`). `None` for local sources.
fn crate_from_path(file: Option<&str>) -> Option<&str> {
    let file = file?;
    if let Some(rest) = file.strip_prefix("/rustc/") {
        let rest = rest.split_once("/library/")?.1;
        return rest.split('/').next().filter(|c| !c.is_empty());
    }
    for marker in ["/registry/src/", "/git/checkouts/"] {
        if let Some((_, rest)) = file.split_once(marker) {
            // Skip the index (or repository) directory, then `name-version`.
            let dir = rest.split('/').nth(1)?;
            let name = match dir.rfind('-') {
                Some(at) if dir[at + 1..].starts_with(|c: char| c.is_ascii_digit()) => &dir[..at],
                _ => dir,
            };
            return Some(name);
        }
    }
    None
}

/// The exported (`.dynsym`) function names of a file, sorted by address, one per address: of
/// aliases, the one with the fewest leading underscores, then the shortest (`getpid` over
/// `__getpid`). Reads only the parts of the file it needs.
fn exported_names(path: &std::path::Path) -> Vec<(u64, String)> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    let cache = object::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return Vec::new();
    };
    let mut names: Vec<(u64, String)> = elf
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
        .filter_map(|s| Some((s.address(), s.name().ok()?.to_owned())))
        .collect();
    let rank = |n: &str| (n.len() - n.trim_start_matches('_').len(), n.len());
    names.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| rank(&a.1).cmp(&rank(&b.1))));
    names.dedup_by_key(|e| e.0);
    names
}

/// The exported name at exactly `address`.
fn exported_at(exports: &[(u64, String)], address: u64) -> Option<&str> {
    let i = exports.binary_search_by_key(&address, |e| e.0).ok()?;
    Some(&exports[i].1)
}

/// Where separate debug files are looked for when none is set: what Debian's `-dbg` and
/// `-dbgsym` and Fedora's debuginfo packages install under (gdb's default
/// `debug-file-directory`).
pub const DEFAULT_DEBUG_FILE_DIRECTORY: &str = "/usr/lib/debug";

/// The debug-file directories set with [`set_debug_file_directories`] (`None`: the default).
static DEBUG_FILE_DIRECTORIES: crate::fork::ForkSafeMutex<Option<Vec<PathBuf>>> = crate::fork::ForkSafeMutex::new(None);

/// Sets the directories separate debug files are looked for in, in order, as gdb's
/// `debug-file-directory`: a file with build ID `abcdef...` is found at
/// `DIR/.build-id/ab/cdef....debug`. The default is [`DEFAULT_DEBUG_FILE_DIRECTORY`]; include it
/// to keep it. Applies to modules symbolized from then on (call it before a recording starts);
/// an empty list turns separate debug files off.
pub fn set_debug_file_directories<P: Into<PathBuf>>(dirs: impl IntoIterator<Item = P>) {
    *DEBUG_FILE_DIRECTORIES.lock() = Some(dirs.into_iter().map(Into::into).collect());
}

/// The directories separate debug files are looked for in now.
pub fn debug_file_directories() -> Vec<PathBuf> {
    DEBUG_FILE_DIRECTORIES.lock().clone().unwrap_or_else(|| vec![PathBuf::from(DEFAULT_DEBUG_FILE_DIRECTORY)])
}

/// `DIR/.build-id/ab/cdef....debug` for build ID `abcdef...`: the first that exists of the
/// debug-file directories.
fn build_id_debug_path(id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let mut name = format!(".build-id/{first:02x}/");
    for b in rest {
        name.push_str(&format!("{b:02x}"));
    }
    name.push_str(".debug");
    debug_file_directories().into_iter().map(|dir| dir.join(&name)).find(|p| p.is_file())
}

fn unknown(ip: u64, module: &str) -> SymbolizedFrame {
    SymbolizedFrame {
        function: format!("{ip:#x}"),
        class: module.to_owned(),
        method: format!("{ip:#x}"),
        package: module.to_owned(),
        module: module_name(module).to_owned(),
        file: None,
        line: None,
        inlined: false,
    }
}

/// A nameless address of a module's code, as `library+0xOFFSET` (`OFFSET`: the address in the
/// module's ELF address space, as `perf report`, pprof and `addr2line -e library` use it).
fn unknown_in(module: &str, offset: u64) -> SymbolizedFrame {
    let name = format!("{}+{offset:#x}", module_name(module));
    SymbolizedFrame {
        function: name.clone(),
        class: module.to_owned(),
        method: name,
        package: module.to_owned(),
        module: module_name(module).to_owned(),
        file: None,
        line: None,
        inlined: false,
    }
}

fn named(function: String, module: &str, file: Option<String>, line: Option<u32>, inlined: bool) -> SymbolizedFrame {
    let parts = split_name(&function);
    let (class, method, package) = match parts {
        Some(p) => (p.class.to_owned(), p.method.to_owned(), p.package.to_owned()),
        None => (module.to_owned(), function.clone(), module.to_owned()),
    };
    SymbolizedFrame { function, class, method, package, module: module_name(module).to_owned(), file, line, inlined }
}

/// A module's name as [`SymbolizedFrame::module`] gives it: the vDSO by its soname (what `ldd`
/// shows), every other name as it is.
fn module_name(name: &str) -> &str {
    if name == "[vdso]" {
        "linux-vdso.so.1"
    } else {
        name
    }
}

/// Demangles a Rust (legacy or v0) or C++ symbol; other names come back unchanged. The Rust
/// `::h<16 hex>` hash suffix is removed in every case.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // The alternate form omits the hash (legacy) and crate disambiguators (v0).
        let mut s = format!("{d:#}");
        s.truncate(strip_hash(&s).len());
        return s;
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle() {
                return d;
            }
        }
    }
    strip_hash(name).to_owned()
}

/// Removes a trailing `::h` + 16 hex digits (a legacy Rust hash already demangled elsewhere).
fn strip_hash(name: &str) -> &str {
    match name.len().checked_sub(19) {
        Some(at)
            if name.is_char_boundary(at)
                && name[at..].starts_with("::h")
                && name[at + 3..].bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            &name[..at]
        }
        _ => name,
    }
}

/// A demangled name split into class, method and package (see [`SymbolizedFrame`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameParts<'a> {
    /// Everything before the last top-level `::`.
    pub class: &'a str,
    /// The last top-level segment.
    pub method: &'a str,
    /// The crate (or C++ namespace): the first segment of the path, or for a trait impl
    /// `<A as B>` the first segment of `A` (of `B` when `A` has no path).
    pub package: &'a str,
}

/// Splits a demangled path on its last `::` that is not inside `<...>`, `(...)`, `[...]` or
/// `{...}`. Returns `None` for a name without a top-level `::` (a C symbol).
pub fn split_name(name: &str) -> Option<NameParts<'_>> {
    let mut first = None;
    let mut last = None;
    for at in TopLevelSeps::new(name) {
        first.get_or_insert(at);
        // A last segment that is only generic arguments (v0's `parse::<T>`) stays with its
        // method.
        if !name[at + 2..].starts_with('<') {
            last = Some(at);
        }
    }
    let last = last?;
    let class = &name[..last];
    let first = first.filter(|&f| f < last).unwrap_or(last);
    Some(NameParts { class, method: &name[last + 2..], package: package_of(&class[..first]) })
}

/// Byte offsets of every `::` at nesting depth 0, in order; no allocation (this runs for every
/// frame of every new address).
struct TopLevelSeps<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
}

impl<'a> TopLevelSeps<'a> {
    fn new(name: &'a str) -> Self {
        TopLevelSeps { b: name.as_bytes(), i: 0, depth: 0 }
    }
}

impl Iterator for TopLevelSeps<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let b = self.b;
        while self.i < b.len() {
            let i = self.i;
            self.i += 1;
            match b[i] {
                b'<' | b'(' | b'[' | b'{' => self.depth += 1,
                // `->` in a fn type is not a closing angle bracket.
                b'>' if i > 0 && b[i - 1] == b'-' => {}
                b'>' | b')' | b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                b':' if self.depth == 0 && b.get(i + 1) == Some(&b':') => {
                    self.i += 1;
                    return Some(i);
                }
                _ => {}
            }
        }
        None
    }
}

/// The crate named by the first segment of a path (see [`NameParts::package`]).
fn package_of(first: &str) -> &str {
    let Some(inner) = first.strip_prefix('<').and_then(|s| s.strip_suffix('>')) else {
        return first;
    };
    // `<Self as Trait>` or `<Self>`: find the top-level " as ".
    let (self_ty, trait_path) = split_as(inner);
    let self_ty = strip_type_prefixes(self_ty);
    if let Some(at) = TopLevelSeps::new(self_ty).next() {
        return strip_type_prefixes(&self_ty[..at]);
    }
    if let Some(tr) = trait_path {
        let tr = strip_type_prefixes(tr);
        if let Some(at) = TopLevelSeps::new(tr).next() {
            return &tr[..at];
        }
    }
    "" // `<u16>::fmt`: a primitive or generic type, no crate in the name
}

/// Splits `A as B` at its top-level ` as `.
fn split_as(s: &str) -> (&str, Option<&str>) {
    let b = s.as_bytes();
    let mut depth = 0usize;
    for i in 0..b.len() {
        match b[i] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' | b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b' ' if depth == 0 && s[i..].starts_with(" as ") => {
                return (&s[..i], Some(&s[i + 4..]));
            }
            _ => {}
        }
    }
    (s, None)
}

/// Removes reference, pointer, `dyn`/`impl` and slice/array brackets in front of a type path.
fn strip_type_prefixes(mut s: &str) -> &str {
    loop {
        let t = s.trim_start();
        let next = ["&", "mut ", "*const ", "*mut ", "dyn ", "impl ", "[", "("].iter().find_map(|p| t.strip_prefix(p));
        match next {
            Some(n) => s = n,
            None => return t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_from_source_path() {
        let f = |p: &'static str| crate_from_path(Some(p));
        assert_eq!(f("/rustc/59807616e/library/core/src/num/mod.rs"), Some("core"));
        assert_eq!(f("/rustc/59807616e/library/std/src/io/mod.rs"), Some("std"));
        assert_eq!(
            f("/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/serde_json-1.0.120/src/de.rs"),
            Some("serde_json")
        );
        assert_eq!(f("/home/u/.cargo/registry/src/idx/foo-bar-0.1.0/src/a.rs"), Some("foo-bar"));
        assert_eq!(f("src/main.rs"), None);
        assert_eq!(crate_from_path(None), None);
    }

    #[test]
    fn hash_stripping() {
        assert_eq!(strip_hash("a::b::h0123456789abcdef"), "a::b");
        assert_eq!(strip_hash("a::b::hxyz"), "a::b::hxyz");
        assert_eq!(strip_hash("h"), "h");
    }
}
