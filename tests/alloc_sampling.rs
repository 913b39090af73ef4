//! Allocation sampling (issue 13 §1) read back by our reader and judged by the JDK's tools.

mod common;

use common::*;
use recorder::alloc::SamplingAllocator;

#[global_allocator]
static GLOBAL: SamplingAllocator = SamplingAllocator::new();

#[inline(never)]
fn allocate_kib_blocks(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let v = std::hint::black_box(vec![i as u8; 1024]);
        total += v.len();
    }
    total
}

#[test]
fn samples_reach_the_file_with_stacks() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = recorder::Recorder::builder()
        .repository(dir.path())
        .no_sampling()
        .allocation_sampling(64 * 1024)
        .start()
        .unwrap();
    allocate_kib_blocks(100_000);
    let out = std::path::PathBuf::from("/tmp/aw/out.jfr");
    rec.dump(&out).unwrap();
    let report = rec.stop_with_report().unwrap();
    eprintln!("{:?}", report.allocation);
    let events = read_events(&out, "jdk.ObjectAllocationSample");
    eprintln!("{} events", events.len());
    for e in events.iter().take(3) {
        eprintln!("{:?} {:?} {:?}", e.thread, e.fields, e.stack);
    }
}
