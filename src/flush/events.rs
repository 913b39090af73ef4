//! The first source of every flush: the application threads' event buffers.

use super::Segment;
use crate::buffer::EventBuffer;
use crate::commit::CommitShared;
use std::sync::Arc;

/// The event buffers of one recording: adopted from the commit path's queue, copied at every
/// flush, dropped once their thread retired them and everything in them was copied.
#[derive(Debug)]
pub struct EventBuffers {
    shared: Arc<CommitShared>,
    buffers: Vec<Arc<EventBuffer>>,
    /// Every thread a `ThreadRef` field has named in this recording, referenced again at every
    /// flush. A thread notes the tid before it commits the record, so a flush may take the note
    /// but not the record. The record then lands in a later flush, possibly in the next chunk,
    /// which would not define the thread. One entry per thread ever named: what an application
    /// names in `ThreadRef` fields is its own choice of a few threads, not every thread it runs.
    referenced: std::collections::BTreeSet<u32>,
}

impl EventBuffers {
    /// The buffers of the recording `shared` belongs to.
    pub fn new(shared: Arc<CommitShared>) -> EventBuffers {
        EventBuffers { shared, buffers: Vec::new(), referenced: Default::default() }
    }

    /// Copies `[flushed, committed)` of every buffer into the chunk (E3); the chunk writer notes
    /// the thread and stack of each record, and the threads of `ThreadRef` fields.
    pub fn drain(&mut self, seg: &mut Segment<'_>) {
        while let Some(b) = self.shared.new_buffers.pop() {
            self.buffers.push(b);
        }
        for b in &self.buffers {
            b.drain(|bytes| {
                seg.tally.bytes += bytes.len() as u64;
                seg.tally.events += seg.chunk.records(bytes);
            });
        }
        // Drained buffers their threads let go of: kept as spares (pages already in memory) or
        // freed.
        for done in self.buffers.extract_if(.., |b| b.is_retired() && b.is_drained()) {
            self.shared.recycle(done);
        }
        self.shared.trim_spare_buffers();
        // Threads referenced from fields, noted before their records were committed: this
        // flush's records, and records still to come (see `referenced`).
        while let Some(tid) = self.shared.thread_refs.pop() {
            self.referenced.insert(tid);
        }
        for &tid in &self.referenced {
            seg.chunk.reference_thread(tid);
        }
    }
}
