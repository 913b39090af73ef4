//! The library is linked without its DWARF (`--strip-debug`; the symbol table stays): every
//! process it is preloaded into maps it, and the first sample whose stack passes through it (a
//! thread it started, the allocator it interposes) made the symbolizer map and parse its debug
//! info, which is most of the file: 53 MB of 56 with the release profile's `debug = "limited"`,
//! +25 MB of file pages and +20 MB of parsed state in the recorded process
//! (`scripts/footprint.sh`). Its frames are named from the symbol table (full Rust paths, no
//! lines).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,--strip-debug");
}
