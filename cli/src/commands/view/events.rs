//! The page's events besides samples: a count per event type (the events table), and the
//! events themselves with their fields (as `print --json` renders them), thread lane, time,
//! duration and stack, for the lanes (bars for events with a duration, ticks for instants) and
//! the table of a type's events. At most [`EVENTS_PER_TYPE`] events of a type and
//! [`EVENTS_BUDGET`] in all are embedded: the longest ones (of equals, the earliest), which is
//! where a latency shows; the counts are always whole.

use super::ViewData;
use crate::json;
use crate::render::{JsonRenderer, TypeInfo};
use crate::selection::Selection;
use crate::timeline;
use jfr_format::Chunk;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Events of one type the page embeds at most.
pub const EVENTS_PER_TYPE: u64 = 5_000;
/// Events the page embeds at most (a few hundred bytes of JSON each).
pub const EVENTS_BUDGET: u64 = 20_000;

/// An event type's count and the events of it the page holds.
struct TypeCount {
    name: String,
    count: u64,
    /// The longest events so far, the next to give way on top.
    kept: BinaryHeap<Kept>,
}

/// An embedded event: its JSON array, after its duration and reading order.
struct Kept {
    duration_ns: i64,
    seq: u64,
    json: Vec<u8>,
}

impl Kept {
    /// Greater gives way first: shorter, then later.
    fn key(&self) -> (Reverse<i64>, u64) {
        (Reverse(self.duration_ns), self.seq)
    }
}

impl PartialEq for Kept {
    fn eq(&self, other: &Kept) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Kept {}
impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Kept) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Kept {
    fn cmp(&self, other: &Kept) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// What the page gets of the events.
#[derive(Default)]
pub struct Events {
    types: Vec<TypeCount>,
    type_ids: HashMap<String, usize>,
    /// Events read so far (their reading order).
    seq: u64,
}

/// Adds the events of `chunk` that `selection` keeps; `sample_types` are counted only.
pub fn add_chunk(
    data: &mut ViewData,
    chunk: &Chunk,
    sample_types: &[&str],
    selection: &Selection,
    start_ns: i64,
) -> jfr_format::Result<()> {
    let info = TypeInfo::new(chunk.types());
    let mut renderer = JsonRenderer::new(chunk, &info);
    // Chunk-local keys → the page's stacks.
    let mut stacks: HashMap<u64, i64> = HashMap::new();
    timeline::for_each_event(chunk, selection, sample_types, |e| {
        let events = &mut data.events;
        let index = match events.type_ids.get(e.type_name) {
            Some(&i) => i,
            None => {
                events.types.push(TypeCount { name: e.type_name.to_owned(), count: 0, kept: BinaryHeap::new() });
                events.type_ids.insert(e.type_name.to_owned(), events.types.len() - 1);
                events.types.len() - 1
            }
        };
        let count = &mut events.types[index];
        count.count += 1;
        events.seq += 1;
        let full = count.kept.len() as u64 >= EVENTS_PER_TYPE;
        if sample_types.contains(&e.type_name)
            || full && count.kept.peek().is_some_and(|k| k.duration_ns >= e.duration_ns)
        {
            return Ok(());
        }
        let seq = events.seq;
        let lane = e.thread.map_or(-1, |t| data.thread(t) as i64);
        let stack = match e.stack {
            Some(frames) => *stacks.entry(e.stack_key).or_insert_with(|| data.stack_of(frames) as i64),
            None => -1,
        };
        let mut json = Vec::with_capacity(128);
        json.push(b'[');
        for v in [index as i64, lane, e.start_ns - start_ns, e.duration_ns, stack] {
            json::int(&mut json, v);
            json.push(b',');
        }
        renderer.fields(e.event, &mut json)?;
        json.push(b']');
        let kept = &mut data.events.types[index].kept;
        if full {
            kept.pop();
        }
        kept.push(Kept { duration_ns: e.duration_ns, seq, json });
        Ok(())
    })
}

impl Events {
    /// Appends `,"eventTypes":[{"name","count","shown"}...],"events":[...]`: of each type its
    /// longest events, so many that all fit in [`EVENTS_BUDGET`] (a type with fewer leaves its
    /// share to the others), in reading order.
    pub fn write_json(&self, j: &mut Vec<u8>) {
        let mut kept: Vec<Vec<&Kept>> = self
            .types
            .iter()
            .map(|t| {
                let mut k: Vec<&Kept> = t.kept.iter().collect();
                k.sort_unstable();
                k
            })
            .collect();
        // Equal shares of the budget, what a type leaves over going to the others.
        let mut left = EVENTS_BUDGET as usize;
        let mut order: Vec<usize> = (0..kept.len()).collect();
        order.sort_by_key(|&i| kept[i].len());
        for (done, &i) in order.iter().enumerate() {
            let share = left / (order.len() - done);
            kept[i].truncate(share);
            left -= kept[i].len();
        }
        j.extend_from_slice(b",\"eventTypes\":[");
        for (i, t) in self.types.iter().enumerate() {
            if i > 0 {
                j.push(b',');
            }
            j.extend_from_slice(b"{\"name\":");
            json::string(j, &t.name);
            j.extend_from_slice(b",\"count\":");
            json::uint(j, t.count);
            j.extend_from_slice(b",\"shown\":");
            json::uint(j, kept[i].len() as u64);
            j.push(b'}');
        }
        j.extend_from_slice(b"],\"events\":[");
        let mut all: Vec<&Kept> = kept.into_iter().flatten().collect();
        all.sort_unstable_by_key(|k| k.seq);
        for (i, k) in all.iter().enumerate() {
            if i > 0 {
                j.push(b',');
            }
            j.extend_from_slice(&k.json);
        }
        j.push(b']');
    }
}
