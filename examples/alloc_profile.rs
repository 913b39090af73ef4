//! Allocation profiling of a program: the sampling allocator installed as the
//! global allocator, a recording that samples allocations and tracks the live set, a call site
//! that leaks and one that only churns. Writes `alloc.jfr` (or the path given) and prints what
//! to look at:
//!
//! ```text
//! cargo run --release --example alloc_profile -- alloc.jfr
//! recorder summary alloc.jfr                                       # estimated bytes, live set
//! recorder dump alloc.jfr --format flamegraph --type alloc -o alloc.svg   # who allocates
//! recorder dump alloc.jfr --format collapsed --live                # who still holds memory
//! jfr print --events jdk.ObjectAllocationSample alloc.jfr
//! ```

use recorder::alloc::{SamplingAllocator, DEFAULT_INTERVAL};
use recorder::Recorder;
use std::collections::BTreeMap;
use std::hint::black_box;

#[global_allocator]
static GLOBAL: SamplingAllocator = SamplingAllocator::new();

/// Blocks the program keeps until it exits: the "leak".
#[inline(never)]
fn cache_forever(kept: &mut Vec<Vec<u8>>, n: usize) {
    for i in 0..n {
        kept.push(black_box(vec![i as u8; 64 * 1024]));
    }
}

/// Maps of strings built and dropped: much allocation, nothing kept.
#[inline(never)]
fn build_index(round: usize) -> usize {
    let mut m = BTreeMap::new();
    for i in 0..20_000 {
        m.insert(format!("key-{i:08}-{round}"), format!("value of {i}"));
    }
    black_box(m).len()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).unwrap_or_else(|| "alloc.jfr".to_owned());
    let rec = Recorder::builder()
        .allocation_sampling(DEFAULT_INTERVAL) // one sample per 512 KiB allocated, on average
        .allocation_live_set(true) // and remember which sampled blocks are still allocated
        .start()?;

    let mut kept = Vec::new();
    let mut entries = 0;
    for round in 0..20 {
        entries += build_index(round);
        cache_forever(&mut kept, 64); // 4 MiB a round, 80 MiB in all
    }
    rec.dump(&out)?;
    let report = rec.stop_with_report()?;
    let a = report.allocation.expect("allocation sampling was on");
    println!(
        "{entries} entries indexed, {} MiB kept; {} allocation samples taken, {} written, {} lost; wrote {out}",
        kept.iter().map(Vec::len).sum::<usize>() >> 20,
        a.taken,
        a.written,
        a.lost
    );
    Ok(())
}
