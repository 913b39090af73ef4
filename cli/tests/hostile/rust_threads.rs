//! Rust std on threads: panics unwound and caught (`catch_unwind`) on eight threads at once
//! while they allocate; channels between threads; child processes through `std::process`;
//! files written with `std::fs`. The panic hook is silenced so the output is the program's own.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc;

#[inline(never)]
fn maybe_panic(depth: u32, v: u64) -> u64 {
    if depth == 0 {
        if v % 3 == 0 {
            panic!("deep {v}");
        }
        return v;
    }
    let frame = vec![depth as u64; depth as usize + 1];
    maybe_panic(depth - 1, v + frame[depth as usize])
}

fn worker(id: u64) -> u64 {
    let mut caught = 0u64;
    let mut sum = 0u64;
    let mut map = BTreeMap::new();
    for i in 0..5000u64 {
        match std::panic::catch_unwind(|| maybe_panic(12, id * 100_000 + i)) {
            Ok(v) => sum = sum.wrapping_add(v),
            Err(_) => caught += 1,
        }
        map.insert(i % 512, format!("{i}"));
    }
    caught.wrapping_mul(1_000_003).wrapping_add(sum).wrapping_add(map.len() as u64)
}

fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    let handles: Vec<_> = (0..8).map(|id| std::thread::spawn(move || worker(id))).collect();
    let total = handles.into_iter().map(|h| h.join().unwrap()).fold(0, |a, b| a ^ b);

    let (to_worker, from_main) = mpsc::channel::<Vec<u8>>();
    let (to_main, from_worker) = mpsc::channel::<usize>();
    let echo = std::thread::spawn(move || {
        for v in from_main {
            to_main.send(v.len()).unwrap();
        }
    });
    let mut echoed = 0;
    for i in 0..5000 {
        to_worker.send(vec![0u8; i % 4096]).unwrap();
        echoed += from_worker.recv().unwrap();
    }
    drop(to_worker);
    echo.join().unwrap();

    let mut ok = 0;
    for _ in 0..20 {
        ok += std::process::Command::new("/bin/true").status().map(|s| s.success() as u32).unwrap_or(0);
    }
    let mut f = std::fs::File::create("rust.out").unwrap();
    writeln!(f, "checksum {total}").unwrap();
    println!("checksum {total}, echoed {echoed} bytes, children ok {ok} of 20");
}
