//! The page's events besides samples: a count per event type (the events table), and the
//! events themselves with their fields (as `print --json` renders them), thread lane, time,
//! duration and stack, for the lanes (bars for events with a duration, ticks for instants) and
//! the table of a type's events. At most [`EVENTS_PER_TYPE`] events of a type and
//! [`EVENTS_BUDGET`] in all are embedded (the first ones); the counts are always whole.

use super::ViewData;
use crate::json;
use crate::render::{JsonRenderer, TypeInfo};
use crate::selection::Selection;
use crate::timeline;
use jfr_format::Chunk;
use std::collections::HashMap;

/// Events of one type the page embeds at most.
pub const EVENTS_PER_TYPE: u64 = 5_000;
/// Events the page embeds at most (a few hundred bytes of JSON each).
pub const EVENTS_BUDGET: u64 = 20_000;

/// An event type's count.
struct TypeCount {
    name: String,
    count: u64,
    shown: u64,
}

/// What the page gets of the events.
#[derive(Default)]
pub struct Events {
    types: Vec<TypeCount>,
    type_ids: HashMap<String, usize>,
    /// The embedded events, each a JSON array `[type, lane (-1: none), time from start (ns),
    /// duration (ns), stack (-1: none), fields]`, comma-separated.
    json: Vec<u8>,
    shown: u64,
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
                events.types.push(TypeCount { name: e.type_name.to_owned(), count: 0, shown: 0 });
                events.type_ids.insert(e.type_name.to_owned(), events.types.len() - 1);
                events.types.len() - 1
            }
        };
        let count = &mut events.types[index];
        count.count += 1;
        if sample_types.contains(&e.type_name) || count.shown >= EVENTS_PER_TYPE || events.shown >= EVENTS_BUDGET {
            return Ok(());
        }
        count.shown += 1;
        events.shown += 1;
        let lane = e.thread.map_or(-1, |t| data.thread(t) as i64);
        let stack = match e.stack {
            Some(frames) => *stacks.entry(e.stack_key).or_insert_with(|| data.stack_of(frames) as i64),
            None => -1,
        };
        let out = &mut data.events.json;
        if !out.is_empty() {
            out.push(b',');
        }
        out.push(b'[');
        for v in [index as i64, lane, e.start_ns - start_ns, e.duration_ns, stack] {
            json::int(out, v);
            out.push(b',');
        }
        renderer.fields(e.event, out)?;
        out.push(b']');
        Ok(())
    })
}

impl Events {
    /// Appends `,"eventTypes":[{"name","count","shown"}...],"events":[...]`.
    pub fn write_json(&self, j: &mut Vec<u8>) {
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
            json::uint(j, t.shown);
            j.push(b'}');
        }
        j.extend_from_slice(b"],\"events\":[");
        j.extend_from_slice(&self.json);
        j.push(b']');
    }
}
