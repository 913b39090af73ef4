//! The slow work a checkpoint needs, done with L released: symbolizing
//! addresses never seen (the first address of a module parses its debug info) and reading the
//! names of threads from `/proc`. The flusher asks the chunk writer what is missing
//! (`ChunkWriter::unresolved`), lets go of L, resolves it here and hands the answers back.

use crate::chunk::{FrameName, Resolve, Resolved, Unresolved};
use crate::symbolize::{with_process_symbolizer, SymbolizedFrame};

fn frame_name(f: &SymbolizedFrame) -> FrameName {
    FrameName { module: f.module.clone(), function: f.function.clone(), line: f.line, inlined: f.inlined }
}

/// A thread's name from `/proc`, or a placeholder for a thread that is gone.
fn os_thread_name(tid: u32) -> String {
    crate::threads::os_thread_name(tid).unwrap_or_else(|| format!("thread-{tid}"))
}

/// Resolves `missing`; call without L. Thread names first: they are quick to read, and a thread
/// may exit while the symbolizer parses a module.
pub(super) fn resolve(missing: &Unresolved) -> Resolved {
    let threads = missing.threads.iter().map(|&tid| (tid, os_thread_name(tid))).collect();
    let addresses = if missing.addresses.is_empty() {
        Vec::new()
    } else {
        with_process_symbolizer(|s| {
            missing
                .addresses
                .iter()
                .map(|&(ip, ret)| ((ip, ret), s.symbolize_uncached(ip, ret).iter().map(frame_name).collect()))
                .collect()
        })
    };
    if !missing.addresses.is_empty() {
        crate::symbolize::enforce_process_limit();
    }
    Resolved { addresses, threads }
}

/// Under L, for what arrived after [`resolve`] ran (rare: samples the recorder thread drained
/// while the flusher resolved).
#[derive(Debug, Default)]
pub(super) struct UnderLock;

impl Resolve for UnderLock {
    fn frames(&mut self, ip: u64, is_return_address: bool) -> Vec<FrameName> {
        with_process_symbolizer(|s| s.symbolize_uncached(ip, is_return_address).iter().map(frame_name).collect())
    }
    fn thread_name(&mut self, tid: u32) -> String {
        os_thread_name(tid)
    }
}
