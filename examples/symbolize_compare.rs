//! Measures symbolization of this binary's own text: `recorder::symbolize` (addr2line with a
//! result cache) against addr2line's `Loader` alone and blazesym. The figures and the choice
//! they led to are in the doc of `src/symbolize.rs`.
//!
//! ```text
//! cargo build --release --example symbolize_compare --features compare-blazesym
//! target/release/examples/symbolize_compare MODE [N]
//! ```
//!
//! MODE: `a2l` (this crate's Symbolizer), `a2lraw` (addr2line `Loader`, results dropped),
//! `blaze` (blazesym, one batch call), `blaze1` (blazesym, one call per address), `dump`
//! (prints a few symbolized addresses). N distinct addresses, default 10 000. Times are process
//! CPU time, so other load on the machine matters less.
#![allow(unsafe_code)]

use recorder::symbolize;

use std::time::Duration;

/// Process CPU time: robust against the other builds loading this 2-core machine.
#[derive(Clone, Copy)]
struct Instant(Duration);
impl Instant {
    fn now() -> Self {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        Instant(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    fn elapsed(&self) -> Duration {
        Instant::now().0 - self.0
    }
}

fn field(k: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with(k)).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}
fn rss_kib() -> u64 {
    field("VmRSS:")
}

fn text_addrs(n: u64) -> Vec<u64> {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let exe = exe.to_str().unwrap().to_owned();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 6 && f[1].contains('x') && f[5] == exe {
            let (a, b) = f[0].split_once('-').unwrap();
            let (a, b) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap());
            let step = (b - a) / n;
            return (0..n).map(|i| a + i * step).collect();
        }
    }
    panic!("no text mapping")
}

fn main() {
    let mode = std::env::args().nth(1).unwrap();
    let n: u64 = std::env::args().nth(2).map_or(10_000, |s| s.parse().unwrap());
    let addrs = text_addrs(n);
    let rss0 = rss_kib();
    let (anon0, file0) = (field("RssAnon:"), field("RssFile:"));
    let (first, pass1, pass2, lines, frames);
    match mode.as_str() {
        "a2l" => {
            let mut s = symbolize::Symbolizer::new();
            let t = Instant::now();
            std::hint::black_box(s.symbolize(addrs[0], false));
            first = t.elapsed();
            let t = Instant::now();
            let (mut l, mut fr) = (0, 0);
            for &a in &addrs {
                let r = s.symbolize(a, false);
                fr += r.len();
                l += r.iter().filter(|f| f.line.is_some()).count();
            }
            pass1 = t.elapsed();
            lines = l;
            frames = fr;
            let t = Instant::now();
            for &a in &addrs {
                std::hint::black_box(s.symbolize(a, false));
            }
            pass2 = t.elapsed();
        }
        "dump" => {
            let mut s = symbolize::Symbolizer::new();
            for &a in addrs.iter().step_by(addrs.len() / 12) {
                for f in s.symbolize(a, true) {
                    println!(
                        "{:#x} {:?} | class={:?} method={:?} pkg={:?} {}:{:?} inl={}",
                        a,
                        f.function,
                        f.class,
                        f.method,
                        f.package,
                        f.file.as_deref().unwrap_or("-"),
                        f.line,
                        f.inlined
                    );
                }
            }
            let p = libc::epoll_wait as *const () as usize as u64;
            println!("{:?}", s.symbolize(p, false));
            return;
        }
        "a2lraw" => {
            let exe = std::fs::read_link("/proc/self/exe").unwrap();
            let t = Instant::now();
            let loader = addr2line::Loader::new(&exe).unwrap();
            // Bias from the mapping: text_addrs are live; PIE with vaddr == file offset layout.
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            let base = maps
                .lines()
                .find(|l| l.ends_with(exe.to_str().unwrap()))
                .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
                .unwrap();
            let count = |a: u64| {
                let mut it = loader.find_frames(a - base).unwrap();
                let (mut l, mut fr) = (0, 0);
                while let Ok(Some(f)) = it.next() {
                    fr += 1;
                    l += f.location.is_some_and(|x| x.line.is_some()) as usize;
                    std::hint::black_box(f.function.map(|n| n.demangle().map(|c| c.into_owned())));
                }
                std::hint::black_box(loader.find_symbol(a - base));
                (l, fr)
            };
            std::hint::black_box(count(addrs[0]));
            first = t.elapsed();
            let t = Instant::now();
            let (mut l, mut fr) = (0, 0);
            for &a in &addrs {
                let (x, y) = count(a);
                l += x;
                fr += y;
            }
            pass1 = t.elapsed();
            lines = l;
            frames = fr;
            let t = Instant::now();
            for &a in &addrs {
                std::hint::black_box(count(a));
            }
            pass2 = t.elapsed();
        }
        "blaze" | "blaze1" => {
            use blazesym::symbolize::{
                source::{Process, Source},
                Input, Symbolized, Symbolizer,
            };
            use blazesym::Pid;
            let s = Symbolizer::new();
            let src = Source::Process(Process::new(Pid::Slf));
            let count = |r: &[Symbolized]| {
                let (mut l, mut fr) = (0, 0);
                for x in r {
                    if let Symbolized::Sym(sym) = x {
                        fr += 1 + sym.inlined.len();
                        l += sym.code_info.as_ref().map_or(0, |c| c.line.is_some() as usize);
                        l += sym
                            .inlined
                            .iter()
                            .filter(|i| i.code_info.as_ref().is_some_and(|c| c.line.is_some()))
                            .count();
                    } else {
                        fr += 1;
                    }
                }
                (l, fr)
            };
            let t = Instant::now();
            std::hint::black_box(s.symbolize(&src, Input::AbsAddr(&addrs[..1])).unwrap());
            first = t.elapsed();
            let t = Instant::now();
            let (l, fr) = if mode == "blaze" {
                let r = s.symbolize(&src, Input::AbsAddr(&addrs)).unwrap();
                count(&r)
            } else {
                let (mut l, mut fr) = (0, 0);
                for a in &addrs {
                    let r = s.symbolize(&src, Input::AbsAddr(std::slice::from_ref(a))).unwrap();
                    let (x, y) = count(&r);
                    l += x;
                    fr += y;
                }
                (l, fr)
            };
            pass1 = t.elapsed();
            lines = l;
            frames = fr;
            let t = Instant::now();
            if mode == "blaze" {
                std::hint::black_box(s.symbolize(&src, Input::AbsAddr(&addrs)).unwrap());
            } else {
                for a in &addrs {
                    std::hint::black_box(s.symbolize(&src, Input::AbsAddr(std::slice::from_ref(a))).unwrap());
                }
            }
            pass2 = t.elapsed();
        }
        _ => panic!("mode"),
    }
    let rss1 = rss_kib();
    println!(
        "{mode:7} n={n} first_addr={:.1}ms pass1={:.1}ms ({:.2}us/addr) pass2={:.2}ms ({:.3}us/addr) frames={frames} with_line={lines} rss_growth={}KiB (anon {} file {})",
        first.as_secs_f64() * 1e3,
        pass1.as_secs_f64() * 1e3,
        pass1.as_secs_f64() * 1e6 / n as f64,
        pass2.as_secs_f64() * 1e3,
        pass2.as_secs_f64() * 1e6 / n as f64,
        rss1 - rss0, field("RssAnon:") as i64 - anon0 as i64, field("RssFile:") as i64 - file0 as i64
    );
}
