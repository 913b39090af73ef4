//! A flush source after the samples: the merged scope tree (`crate::scope`), as one
//! `recorder.ScopeTiming` event per node whose numbers changed since the last flush. The values
//! are cumulative, so the newest event of a path id holds its numbers; a new chunk gets every
//! node again (retention may remove the chunks that had them), and an event's ancestors are in
//! its chunk before it.

use crate::builtin::ScopeTiming;
use crate::chunk::ChunkWriter;
use crate::scope::{self, Merged};

/// The scope tree's source: what the live chunk already has.
#[derive(Debug, Default)]
pub struct ScopeTimings {
    /// Start ticks of the chunk `written` is about.
    chunk: Option<i64>,
    /// Merged nodes written into that chunk.
    written: Vec<bool>,
}

impl ScopeTimings {
    /// Absorbs every thread's news and writes the nodes that changed (all of them in a new chunk).
    pub fn write(&mut self, chunk: &mut ChunkWriter, now: i64) {
        let start = chunk.start().map(|s| s.ticks);
        if start != self.chunk {
            self.chunk = start;
            self.written.clear();
        }
        scope::absorb(|merged| {
            let changed = merged.take_changed();
            let nodes: Vec<u32> = if self.written.is_empty() {
                (1..merged.nodes().len() as u32).filter(|&m| merged.nodes()[m as usize].counts.calls > 0).collect()
            } else {
                changed
            };
            if nodes.is_empty() {
                return;
            }
            let names = scope::function_names();
            for m in nodes {
                self.write_node(chunk, now, merged, &names, m);
            }
        });
    }

    /// Writes node `m` after its ancestors that the chunk lacks.
    fn write_node(
        &mut self,
        chunk: &mut ChunkWriter,
        now: i64,
        merged: &Merged,
        names: &[std::sync::Arc<str>],
        m: u32,
    ) {
        let nodes = merged.nodes();
        if self.written.len() < nodes.len() {
            self.written.resize(nodes.len(), false);
        }
        let mut chain = vec![m];
        let mut at = nodes[m as usize].parent;
        while at != 0 && !self.written[at as usize] && chain.len() <= nodes.len() {
            chain.push(at);
            at = nodes[at as usize].parent;
        }
        let deterministic = merged.deterministic();
        for &n in chain.iter().rev() {
            self.written[n as usize] = true;
            let node = &nodes[n as usize];
            let name = names.get(node.func as usize).map_or("?", |s| &**s);
            let nanos = |t: u64| if deterministic { 0 } else { scope::ticks_to_nanos(t) as i64 };
            chunk.write(&ScopeTiming {
                start_time: now,
                path_id: i64::from(n),
                parent_path_id: i64::from(node.parent),
                name,
                calls: node.counts.calls,
                total_time: nanos(node.counts.total),
                self_time: nanos(node.counts.self_ticks),
            });
        }
    }
}
