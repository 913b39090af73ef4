//! Symbolization of this test binary's own addresses and of libc's.

use recorder::symbolize::{demangle, split_name, NameParts, SymbolizedFrame, Symbolizer};
use std::hint::black_box;

#[inline(never)]
fn my_fn(x: u64) -> u64 {
    black_box(x).wrapping_mul(31).rotate_left(7) ^ black_box(x)
}

#[inline(always)]
fn inner_inlined(x: u64) -> u64 {
    // Several operations so that some instructions surely carry this function's lines.
    let a = black_box(x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let b = black_box(a).rotate_left(13);
    black_box(b ^ a)
}

#[inline(never)]
fn outer_with_inline(x: u64) -> u64 {
    let y = inner_inlined(black_box(x));
    black_box(y).wrapping_add(1)
}

/// The physical frame is the last one.
fn physical(frames: &[SymbolizedFrame]) -> &SymbolizedFrame {
    frames.last().expect("at least one frame")
}

#[test]
fn own_function_names_class_method_package() {
    let mut s = Symbolizer::new();
    let addr = my_fn as *const () as usize as u64;
    let frames = s.symbolize(addr, false).to_vec();
    let f = physical(&frames);
    assert_eq!(f.function, "symbolize::my_fn", "{frames:#?}");
    assert_eq!(f.class, "symbolize");
    assert_eq!(f.method, "my_fn");
    assert_eq!(f.package, "symbolize");
    assert!(f.module.starts_with("symbolize-"), "this test's executable: {}", f.module);
    assert!(!f.inlined);
    assert_eq!(s.cache_len(), 1);

    // A return address just inside the function: ip - 1 is its first byte.
    let ret = s.symbolize(addr + 1, true).to_vec();
    assert_eq!(physical(&ret).function, "symbolize::my_fn", "{ret:#?}");
    assert_eq!(s.cache_len(), 2);
    // Cached: the same answer again, no new entry.
    assert_eq!(s.symbolize(addr + 1, true), &ret[..]);
    assert_eq!(s.cache_len(), 2);
    black_box(my_fn(3));
}

#[test]
fn return_address_uses_ip_minus_one() {
    // The address right after `my_fn`'s first byte as a leaf is still my_fn, but `addr` as a
    // return address means "the call ended at addr - 1": the byte before my_fn, another function
    // (or padding). It must not be my_fn.
    let mut s = Symbolizer::new();
    let addr = my_fn as *const () as usize as u64;
    let before = s.symbolize(addr, true).to_vec();
    assert_ne!(physical(&before).function, "symbolize::my_fn", "{before:#?}");
}

#[test]
fn line_numbers_with_debug_info() {
    let mut s = Symbolizer::new();
    let addr = my_fn as *const () as usize as u64;
    let frames = s.symbolize(addr, false).to_vec();
    let f = physical(&frames);
    if cfg!(debug_assertions) {
        // The dev profile builds with full debug info.
        let line = f.line.expect("line number in a build with debug info");
        assert!((5..=10).contains(&line), "my_fn is at line 7, got {line}");
        assert!(f.file.as_deref().unwrap_or("").ends_with("symbolize.rs"), "{f:#?}");
    }
}

#[test]
fn inlined_frames_are_marked() {
    let mut s = Symbolizer::new();
    let start = outer_with_inline as *const () as usize as u64;
    let mut saw_line_info = false;
    let mut found = None;
    // Scan the function's first bytes for an address inside the inlined call.
    for off in 0..512 {
        let frames = s.symbolize(start + off, false).to_vec();
        if physical(&frames).function != "symbolize::outer_with_inline" {
            break; // past the end of the function
        }
        saw_line_info |= frames.iter().any(|f| f.line.is_some());
        if frames.len() >= 2 && frames[0].method == "inner_inlined" {
            found = Some(frames);
            break;
        }
    }
    if saw_line_info && !cfg!(debug_assertions) {
        // Optimized with line tables: inline info should be present.
        let frames = found.expect("an inlined frame for inner_inlined");
        assert!(frames[0].inlined);
        // line-tables-only keeps only the bare name of inlined functions; the crate is
        // inferred (here: the caller's, as the source is local).
        assert!(["symbolize::inner_inlined", "inner_inlined"].contains(&frames[0].function.as_str()), "{frames:#?}");
        assert_eq!(frames[0].class, "symbolize");
        assert_eq!(frames[0].package, "symbolize");
        assert!(!physical(&frames).inlined);
        assert!(frames[..frames.len() - 1].iter().all(|f| f.inlined));
    } else if let Some(frames) = found {
        // Even at opt-level 0, #[inline(always)] inlines; full debug info names the path.
        assert!(frames[0].inlined);
        assert_eq!(frames[0].function, "symbolize::inner_inlined", "{frames:#?}");
        assert_eq!(frames[0].class, "symbolize");
        assert_eq!(frames[0].package, "symbolize");
        assert!(!physical(&frames).inlined);
    } else if saw_line_info {
        panic!("no inlined frame for inner_inlined in a build with line info");
    }
    black_box(outer_with_inline(5));
}

#[test]
fn libc_function_from_dynamic_symbols() {
    // dlsym gives the real function, not this binary's PLT stub.
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
    assert!(!p.is_null());
    let mut s = Symbolizer::new();
    let frames = s.symbolize(p as u64, false).to_vec();
    let f = physical(&frames);
    // The public alias, not `__getpid` (also exported) or `__GI_getpid` (libc6-dbg's symtab).
    assert_eq!(f.function, "getpid", "{frames:#?}");
    assert_eq!(f.class, "libc.so.6");
    assert_eq!(f.package, "libc.so.6");
    assert_eq!(f.module, "libc.so.6");
    assert_eq!(f.method, "getpid");
    if f.file.is_some() {
        // From a separate debug file (`/usr/lib/debug/.build-id/...`, e.g. libc6-dbg).
        assert!(f.line.is_some(), "{frames:#?}");
    }
}

#[test]
fn unmapped_address_gives_hex() {
    let mut s = Symbolizer::new();
    let frames = s.symbolize(0x10, false).to_vec();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].function, "0x10");
    assert_eq!(frames[0].class, "");
    assert_eq!(frames[0].module, "");
    assert_eq!(frames[0].line, None);
    let frames = s.symbolize(0, true).to_vec();
    assert_eq!(frames[0].function, "0x0");
    let frames = s.symbolize(u64::MAX, true).to_vec();
    assert_eq!(frames[0].function, "0xffffffffffffffff");
}

#[test]
fn symbolizer_is_send() {
    let mut s = Symbolizer::new();
    let addr = my_fn as *const () as usize as u64;
    let name = std::thread::spawn(move || s.symbolize(addr, false)[0].function.clone()).join().unwrap();
    assert!(name.starts_with("symbolize::"), "{name}");
}

fn parts<'a>(class: &'a str, method: &'a str, package: &'a str) -> Option<NameParts<'a>> {
    Some(NameParts { class, method, package })
}

#[test]
fn split_plain_paths() {
    assert_eq!(split_name("myapp::parser::Parser::parse"), parts("myapp::parser::Parser", "parse", "myapp"));
    assert_eq!(split_name("myapp::main"), parts("myapp", "main", "myapp"));
    assert_eq!(split_name("epoll_wait"), None);
    assert_eq!(split_name("main"), None);
}

#[test]
fn split_generics() {
    assert_eq!(split_name("alloc::vec::Vec<T,A>::push"), parts("alloc::vec::Vec<T,A>", "push", "alloc"));
    assert_eq!(
        split_name("core::ptr::drop_in_place<alloc::vec::Vec<u8>>"),
        parts("core::ptr", "drop_in_place<alloc::vec::Vec<u8>>", "core")
    );
    assert_eq!(
        split_name("std::thread::Builder::spawn_unchecked_<F,T>::{{closure}}"),
        parts("std::thread::Builder::spawn_unchecked_<F,T>", "{{closure}}", "std")
    );
    // v0 turbofish: the generic arguments stay with the method.
    assert_eq!(
        split_name("<addr2line::line::Lines>::parse::<gimli::read::EndianSlice<u8>>"),
        parts("<addr2line::line::Lines>", "parse::<gimli::read::EndianSlice<u8>>", "addr2line")
    );
    assert_eq!(
        split_name("core::ptr::drop_in_place::<alloc::string::String>"),
        parts("core::ptr", "drop_in_place::<alloc::string::String>", "core")
    );
    // An inherent impl on a primitive: no crate in the name.
    assert_eq!(split_name("<u16>::_fmt"), parts("<u16>", "_fmt", ""));
    // `->` inside a generic argument is not a closing bracket.
    assert_eq!(split_name("a::b<fn() -> c::D>::e"), parts("a::b<fn() -> c::D>", "e", "a"));
}

#[test]
fn split_trait_impls() {
    assert_eq!(split_name("<a::B as c::D>::e"), parts("<a::B as c::D>", "e", "a"));
    assert_eq!(split_name("<T as core::fmt::Debug>::fmt"), parts("<T as core::fmt::Debug>", "fmt", "core"));
    assert_eq!(
        split_name("<&mut std::io::Stdout as std::io::Write>::flush"),
        parts("<&mut std::io::Stdout as std::io::Write>", "flush", "std")
    );
    assert_eq!(
        split_name("<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop"),
        parts("<alloc::vec::Vec<T,A> as core::ops::drop::Drop>", "drop", "alloc")
    );
    assert_eq!(split_name("<[T] as core::fmt::Debug>::fmt"), parts("<[T] as core::fmt::Debug>", "fmt", "core"));
    assert_eq!(split_name("<myapp::Foo>::new"), parts("<myapp::Foo>", "new", "myapp"));
}

#[test]
fn split_closures() {
    assert_eq!(split_name("myapp::main::{{closure}}"), parts("myapp::main", "{{closure}}", "myapp"));
    assert_eq!(split_name("myapp::main::{closure#0}"), parts("myapp::main", "{closure#0}", "myapp"));
    assert_eq!(
        split_name("<myapp::W as core::ops::Fn<()>>::call::{{closure}}"),
        parts("<myapp::W as core::ops::Fn<()>>::call", "{{closure}}", "myapp")
    );
}

#[test]
fn split_cpp_names() {
    assert_eq!(
        split_name("std::vector<int, std::allocator<int> >::push_back(int const&)"),
        parts("std::vector<int, std::allocator<int> >", "push_back(int const&)", "std")
    );
    assert_eq!(split_name("ns::Widget::draw(ns::Canvas&) const"), parts("ns::Widget", "draw(ns::Canvas&) const", "ns"));
    assert_eq!(split_name("foo(int)"), None);
}

#[test]
fn demangling() {
    // Rust legacy, with the hash removed.
    assert_eq!(demangle("_ZN5myapp6parser6Parser5parse17h0123456789abcdefE"), "myapp::parser::Parser::parse");
    // Rust v0, without the crate disambiguator.
    assert_eq!(demangle("_RNvCs1234_5myapp4main"), "myapp::main");
    // C++.
    assert_eq!(demangle("_ZN2ns6Widget4drawEv"), "ns::Widget::draw()");
    // C and already-demangled names.
    assert_eq!(demangle("epoll_wait"), "epoll_wait");
    assert_eq!(demangle("a::b::h0123456789abcdef"), "a::b");
}

trait Shape {
    fn area(&self) -> u64;
}

struct Square(u64);

impl Shape for Square {
    #[inline(never)]
    fn area(&self) -> u64 {
        black_box(self.0).wrapping_mul(black_box(self.0))
    }
}

#[test]
fn trait_impl_in_this_binary() {
    let mut s = Symbolizer::new();
    let f: fn(&Square) -> u64 = <Square as Shape>::area;
    let frames = s.symbolize(f as *const () as usize as u64, false).to_vec();
    let p = physical(&frames);
    assert_eq!(p.function, "<symbolize::Square as symbolize::Shape>::area", "{frames:#?}");
    assert_eq!(p.class, "<symbolize::Square as symbolize::Shape>");
    assert_eq!(p.method, "area");
    assert_eq!(p.package, "symbolize");

    // (A closure coerced to `fn` points at a `FnOnce::call_once` shim, not at its body, so
    // closures are covered by the splitting tests only.)
    black_box(f(&Square(3)));
}

#[test]
fn vdso_symbols_from_memory() {
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base == 0 {
        return; // no vDSO (some sandboxes)
    }
    let mut s = Symbolizer::new();
    let mut names = Vec::new();
    for off in (0..16 * 1024).step_by(16) {
        let f = physical(s.symbolize(base + off, false)).clone();
        if f.class == "[vdso]" && !f.function.starts_with("0x") {
            assert_eq!(f.package, "[vdso]");
            assert_eq!(f.module, "linux-vdso.so.1", "its soname");
            names.push(f.function);
        }
    }
    names.dedup();
    assert!(names.iter().any(|n| n.contains("clock_gettime")), "vDSO names: {names:?}");
}

#[test]
fn library_loaded_later_is_found() {
    let mut s = Symbolizer::new();
    let addr = my_fn as *const () as usize as u64;
    s.symbolize(addr, false); // reads the maps once
                              // SAFETY: libm is part of glibc; dlopen/dlsym with NUL-terminated names.
    let f = unsafe {
        let h = libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null());
        libc::dlsym(h, c"cbrt".as_ptr())
    };
    assert!(!f.is_null());
    // Mappings are re-read on a miss at most every 100 ms.
    std::thread::sleep(std::time::Duration::from_millis(120));
    let frames = s.symbolize(f as u64, false).to_vec();
    let p = physical(&frames);
    assert_eq!(p.function, "cbrt", "{frames:#?}");
    assert_eq!(p.package, "libm.so.6");
}
