//! The events a timeline shows (`recorder view`'s lanes and events table, `dump --format
//! firefox`'s markers): every event with its type, thread, time, duration and stack, each thread
//! and stack resolved once per chunk (their keys are chunk-local).

use crate::selection::Selection;
use jfr_format::{Chunk, Event, FrameInfo, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// One event, as [`for_each_event`] hands it over.
pub struct TimelineEvent<'a> {
    /// The event's type name.
    pub type_name: &'a str,
    /// Its type has a `duration` field (a duration event, even when this one lasted 0 ns).
    pub has_duration: bool,
    /// Its `eventThread`'s name, if it has one.
    pub thread: Option<&'a Arc<str>>,
    /// When it started (epoch ns).
    pub start_ns: i64,
    /// How long it lasted (ns; 0 for an instant).
    pub duration_ns: i64,
    /// The chunk-local stack-trace key (0: none) and the frames, innermost first.
    pub stack_key: u64,
    pub stack: Option<&'a Arc<[FrameInfo]>>,
    /// The event itself (for its fields).
    pub event: &'a Event,
}

/// How one event type of a chunk is read.
struct Plan {
    name: String,
    has_duration: bool,
    thread: Option<usize>,
    stack: Option<usize>,
}

/// Calls `f` for each event of `chunk` that `selection` keeps. Events of the `counted_only`
/// types (samples, which the profiles show) come without their thread and stack, which are then
/// not resolved.
pub fn for_each_event(
    chunk: &Chunk,
    selection: &Selection,
    counted_only: &[&str],
    mut f: impl FnMut(TimelineEvent<'_>) -> jfr_format::Result<()>,
) -> jfr_format::Result<()> {
    let mut plans: HashMap<u64, Option<Plan>> = HashMap::new();
    let mut select = selection.for_chunk(chunk);
    let mut threads: HashMap<u64, Option<Arc<str>>> = HashMap::new();
    let mut stacks: HashMap<u64, Option<Arc<[FrameInfo]>>> = HashMap::new();
    let header = *chunk.header();
    for event in chunk.events() {
        let event = event?;
        let plan = plans.entry(event.type_id).or_insert_with(|| {
            let class = chunk.types().class(event.type_id)?;
            let resolved = !counted_only.contains(&class.name.as_str());
            Some(Plan {
                name: class.name.clone(),
                has_duration: class.fields.get(1).is_some_and(|f| f.name == "duration"),
                thread: class.field_index("eventThread").filter(|_| resolved),
                stack: class.field_index("stackTrace").filter(|_| resolved),
            })
        });
        let Some(plan) = plan.as_ref() else { continue };
        if !select.keeps(&event)? {
            continue;
        }
        let thread = match plan.thread.and_then(|i| event.values.get(i)) {
            Some(v @ Value::Ref { key, .. }) => {
                if !threads.contains_key(key) {
                    let name = chunk.thread_info(v)?.map(|t| Arc::from(t.name()));
                    threads.insert(*key, name);
                }
                threads[key].as_ref()
            }
            _ => None,
        };
        let (stack_key, stack) = match plan.stack.and_then(|i| event.values.get(i)) {
            Some(v @ Value::Ref { key, .. }) if *key != 0 => {
                if !stacks.contains_key(key) {
                    let frames = chunk.stack_trace_info(v)?.map(|t| Arc::from(t.frames));
                    stacks.insert(*key, frames);
                }
                (*key, stacks[key].as_ref())
            }
            _ => (0, None),
        };
        let duration_ns = match plan.has_duration {
            true => header.ticks_to_nanos(event.values.get(1).and_then(Value::as_i64).unwrap_or(0)).max(0),
            false => 0,
        };
        f(TimelineEvent {
            type_name: &plan.name,
            has_duration: plan.has_duration,
            thread,
            start_ns: header.ticks_to_epoch_nanos(event.start_ticks()),
            duration_ns,
            stack_key,
            stack,
            event: &event,
        })?;
    }
    Ok(())
}
