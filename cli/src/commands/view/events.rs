//! The page's events besides samples: a count per event type (the events table), and the
//! events themselves with their fields (as `print --json` renders them), thread lane, time,
//! duration and stack, for the lanes (bars for events with a duration, ticks for instants) and
//! the table of a type's events. At most [`EVENTS_PER_TYPE`] events of a type and
//! [`EVENTS_BUDGET`] in all are embedded (the first ones); the counts are always whole.

use super::ViewData;
use crate::json;
use crate::render::{JsonRenderer, TypeInfo};
use crate::selection::Selection;
use jfr_format::{Chunk, Value};
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

/// How one event type of a chunk is read.
struct Plan {
    /// Index into [`Events::types`].
    index: usize,
    /// A sample type: counted only (the sample kinds show them).
    sample: bool,
    duration: bool,
    thread: Option<usize>,
    stack: Option<usize>,
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
    let mut plans: HashMap<u64, Option<Plan>> = HashMap::new();
    let mut select = selection.for_chunk(chunk);
    // Chunk-local keys → the page's lanes and stacks.
    let mut lanes: HashMap<u64, i64> = HashMap::new();
    let mut stacks: HashMap<u64, i64> = HashMap::new();
    let header = *chunk.header();
    for event in chunk.events() {
        let event = event?;
        let plan = plans.entry(event.type_id).or_insert_with(|| {
            let class = chunk.types().class(event.type_id)?;
            let index = match data.events.type_ids.get(&class.name) {
                Some(&i) => i,
                None => {
                    data.events.types.push(TypeCount { name: class.name.clone(), count: 0, shown: 0 });
                    data.events.type_ids.insert(class.name.clone(), data.events.types.len() - 1);
                    data.events.types.len() - 1
                }
            };
            Some(Plan {
                index,
                sample: sample_types.contains(&class.name.as_str()),
                duration: class.fields.get(1).is_some_and(|f| f.name == "duration"),
                thread: class.field_index("eventThread"),
                stack: class.field_index("stackTrace"),
            })
        });
        let Some(plan) = plan.as_ref() else { continue };
        if !select.keeps(&event)? {
            continue;
        }
        let events = &mut data.events;
        let count = &mut events.types[plan.index];
        count.count += 1;
        if plan.sample || count.shown >= EVENTS_PER_TYPE || events.shown >= EVENTS_BUDGET {
            continue;
        }
        count.shown += 1;
        events.shown += 1;
        let lane = match plan.thread.and_then(|i| event.values.get(i)) {
            Some(v @ Value::Ref { key, .. }) => match lanes.get(key) {
                Some(&lane) => lane,
                None => {
                    let lane = match chunk.thread_info(v)? {
                        Some(t) => data.thread(t.name()) as i64,
                        None => -1,
                    };
                    lanes.insert(*key, lane);
                    lane
                }
            },
            _ => -1,
        };
        let stack = match plan.stack.and_then(|i| event.values.get(i)) {
            Some(v @ Value::Ref { key, .. }) if *key != 0 => match stacks.get(key) {
                Some(&stack) => stack,
                None => {
                    let stack = match chunk.stack_trace_info(v)? {
                        Some(trace) => data.stack_of(&trace.frames) as i64,
                        None => -1,
                    };
                    stacks.insert(*key, stack);
                    stack
                }
            },
            _ => -1,
        };
        let duration = match plan.duration {
            true => header.ticks_to_nanos(event.values.get(1).and_then(Value::as_i64).unwrap_or(0)).max(0),
            false => 0,
        };
        let out = &mut data.events.json;
        if !out.is_empty() {
            out.push(b',');
        }
        out.push(b'[');
        for v in [plan.index as i64, lane, header.ticks_to_epoch_nanos(event.start_ticks()) - start_ns, duration, stack]
        {
            json::int(out, v);
            out.push(b',');
        }
        renderer.fields(&event, out)?;
        out.push(b']');
    }
    Ok(())
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
