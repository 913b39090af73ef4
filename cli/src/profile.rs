//! What the profile views (collapsed stacks, flame graphs, `diff`, pprof) weigh: a profile kind
//! (`--type cpu|alloc|wall`) names the event types whose stacks count, and what one event of
//! each weighs. A new kind of sample (our own allocation or wall-clock samples) plugs in as one
//! more [`Contributor`] in [`ProfileKind::contributors`].
//!
//! [`for_each_sample`] walks one chunk's samples of a [`Weighing`]: stack, thread and weight,
//! with stacks and threads resolved once per chunk (their keys are chunk-local).

use crate::selection::Selection;
use jfr_format::{Chunk, FrameInfo, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// A profile view's kind of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileKind {
    /// CPU samples: jdk.ExecutionSample (ours and the JVM's), one per sample.
    Cpu,
    /// Allocation samples: jdk.ObjectAllocationSample (JVM) weighed by its `weight` (bytes).
    Alloc,
    /// Wall-clock samples: profiler.WallClockSample (async-profiler) weighed by its `samples`.
    Wall,
}

/// What one event weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Every event counts one.
    One,
    /// The event's integer field of this name (a missing or negative value weighs nothing).
    Field(&'static str),
}

/// An event type that contributes its stacks to a profile kind.
#[derive(Debug, Clone, Copy)]
pub struct Contributor {
    pub event: &'static str,
    pub weight: Weight,
}

/// The unit of a kind's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Samples.
    Samples,
    /// Bytes.
    Bytes,
}

/// The flame graph's name for what a frame's width counts.
pub fn count_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Samples => "samples",
        Unit::Bytes => "bytes",
    }
}

impl ProfileKind {
    /// The event types that make this kind's stacks, and their weights.
    pub fn contributors(self) -> &'static [Contributor] {
        match self {
            ProfileKind::Cpu => &[Contributor { event: "jdk.ExecutionSample", weight: Weight::One }],
            ProfileKind::Alloc => {
                &[Contributor { event: "jdk.ObjectAllocationSample", weight: Weight::Field("weight") }]
            }
            // Ours and async-profiler's: one event stands for `samples` periods of its thread.
            ProfileKind::Wall => &[Contributor { event: "profiler.WallClockSample", weight: Weight::Field("samples") }],
        }
    }

    /// What the weights count.
    pub fn unit(self) -> Unit {
        match self {
            ProfileKind::Cpu | ProfileKind::Wall => Unit::Samples,
            ProfileKind::Alloc => Unit::Bytes,
        }
    }

    /// `CPU samples`, for messages and titles.
    pub fn describe(self) -> &'static str {
        match self {
            ProfileKind::Cpu => "CPU samples",
            ProfileKind::Alloc => "allocation samples",
            ProfileKind::Wall => "wall-clock samples",
        }
    }

    /// The kind's weighing.
    pub fn weighing(self) -> Weighing {
        Weighing {
            types: self.contributors().iter().map(|c| (c.event.to_owned(), c.weight)).collect(),
            unit: self.unit(),
            what: self.describe().to_owned(),
        }
    }
}

/// The weight of an event type when it is folded on its own (`--events`): the weight its profile
/// kind gives it (jdk.ObjectAllocationSample by `weight`), else one per event.
pub fn weight_of(event: &str) -> Weight {
    kind_of(event).and_then(|k| k.contributors().iter().find(|c| c.event == event)).map_or(Weight::One, |c| c.weight)
}

/// The profile kind an event type contributes to.
fn kind_of(event: &str) -> Option<ProfileKind> {
    [ProfileKind::Cpu, ProfileKind::Alloc, ProfileKind::Wall]
        .into_iter()
        .find(|k| k.contributors().iter().any(|c| c.event == event))
}

/// The event types whose stacks a view folds, and what each event weighs.
#[derive(Debug, Clone)]
pub struct Weighing {
    /// Type names and weights.
    pub types: Vec<(String, Weight)>,
    /// What the weights count.
    pub unit: Unit,
    /// For messages: `CPU samples`, or the `--events` type names.
    pub what: String,
}

impl Weighing {
    /// The weighing of the event types `names` (`--events`): each by [`weight_of`]; the unit is
    /// bytes when they are all weighed in bytes.
    pub fn of_events(names: &[String]) -> Weighing {
        let types: Vec<(String, Weight)> = names.iter().map(|n| (n.clone(), weight_of(n))).collect();
        let bytes = !names.is_empty() && names.iter().all(|n| kind_of(n).is_some_and(|k| k.unit() == Unit::Bytes));
        Weighing { types, unit: if bytes { Unit::Bytes } else { Unit::Samples }, what: names.join(", ") }
    }

    /// The sampled allocations still allocated: `recorder.LiveObject` by its `weight` (bytes).
    pub fn live() -> Weighing {
        Weighing {
            types: vec![("recorder.LiveObject".to_owned(), Weight::Field("weight"))],
            unit: Unit::Bytes,
            what: "live sampled allocations".to_owned(),
        }
    }

    /// The type names.
    pub fn names(&self) -> Vec<&str> {
        self.types.iter().map(|(n, _)| n.as_str()).collect()
    }
}

/// A resolved stack: frames innermost first.
#[derive(Debug)]
pub struct Stack {
    pub frames: Vec<FrameInfo>,
}

/// One sample of a chunk, as [`for_each_sample`] hands it over.
pub struct Sample<'a> {
    /// The chunk-local stack-trace key (0: the event has none).
    pub stack_key: u64,
    /// The stack (no frames when the event has none).
    pub stack: &'a Arc<Stack>,
    /// The thread's name (Java name, else OS name), if the event has a thread.
    pub thread: Option<&'a Arc<str>>,
    /// The thread's OS thread id (0: none or unknown).
    pub thread_id: i64,
    /// The event's weight.
    pub weight: u64,
    /// The span it was taken in (`spanId` of our CPU samples; 0: none).
    pub span: u64,
    /// When it was taken (epoch ns).
    pub start_ns: i64,
    /// Which of the weighing's types it is (index into [`Weighing::types`]).
    pub type_index: usize,
    /// The thread's state (`STATE_RUNNABLE`, ...), for event types with a `state` field.
    pub state: Option<&'a Arc<str>>,
}

/// Per type id: the field indexes of the stack trace, the thread and the weight.
struct TypePlan {
    stack: usize,
    thread: Option<usize>,
    weight: Option<usize>,
    span: Option<usize>,
    type_index: usize,
    state: Option<usize>,
}

/// Calls `f` for each event of `chunk` whose type `weighing` names and that `selection` keeps.
/// Events of a type without a stack trace field are not samples and are skipped.
pub fn for_each_sample(
    chunk: &Chunk,
    weighing: &Weighing,
    selection: &Selection,
    mut f: impl FnMut(Sample<'_>),
) -> jfr_format::Result<()> {
    let mut plans: HashMap<u64, TypePlan> = HashMap::new();
    for (type_index, (name, weight)) in weighing.types.iter().enumerate() {
        let Some(class) = chunk.metadata().class_by_name(name) else { continue };
        let Some(stack) = class.field_index("stackTrace") else { continue };
        let thread = class.field_index("sampledThread").or_else(|| class.field_index("eventThread"));
        let weight = match weight {
            Weight::One => None,
            Weight::Field(field) => class.field_index(field),
        };
        let (span, state) = (class.field_index("spanId"), class.field_index("state"));
        plans.insert(class.id, TypePlan { stack, thread, weight, span, type_index, state });
    }
    if plans.is_empty() {
        return Ok(());
    }
    let no_stack = Arc::new(Stack { frames: Vec::new() });
    let mut stacks: HashMap<u64, Arc<Stack>> = HashMap::new();
    let mut threads: HashMap<u64, Option<(Arc<str>, i64)>> = HashMap::new();
    let mut states: HashMap<(u64, u64), Option<Arc<str>>> = HashMap::new();
    let mut select = selection.for_chunk(chunk);
    for event in chunk.events() {
        let event = event?;
        let Some(plan) = plans.get(&event.type_id) else { continue };
        if !select.keeps(&event)? {
            continue;
        }
        let weight = match plan.weight {
            None => 1,
            Some(i) => event.values.get(i).and_then(Value::as_i64).map_or(0, |w| w.max(0) as u64),
        };
        let (stack_key, stack) = match event.values.get(plan.stack) {
            Some(v @ Value::Ref { key, .. }) if *key != 0 => {
                if !stacks.contains_key(key) {
                    let frames = chunk.stack_trace_info(v)?.map(|t| t.frames).unwrap_or_default();
                    let stack = Stack { frames };
                    stacks.insert(*key, Arc::new(stack));
                }
                (*key, &stacks[key])
            }
            _ => (0, &no_stack),
        };
        let thread = match plan.thread.and_then(|i| event.values.get(i)) {
            Some(v @ Value::Ref { key, .. }) => {
                if !threads.contains_key(key) {
                    let name = chunk.thread_info(v)?.map(|t| (Arc::from(t.name()), t.os_thread_id));
                    threads.insert(*key, name);
                }
                threads[key].as_ref()
            }
            _ => None,
        };
        let (thread, thread_id) = thread.map_or((None, 0), |(name, id)| (Some(name), *id));
        let span = plan.span.and_then(|i| event.values.get(i)).and_then(Value::as_i64).map_or(0, |s| s.max(0) as u64);
        let state = match plan.state.and_then(|i| event.values.get(i)) {
            Some(Value::Ref { type_id, key }) => {
                let name = states.entry((*type_id, *key)).or_insert_with(|| match chunk.resolve(*type_id, *key) {
                    Ok(Some(Value::String(t))) => Some(Arc::from(t.as_str())),
                    _ => None,
                });
                name.as_ref()
            }
            _ => None,
        };
        let start_ns = chunk.ticks_to_epoch_nanos(event.start_ticks());
        f(Sample { stack_key, stack, thread, thread_id, weight, span, start_ns, type_index: plan.type_index, state });
    }
    Ok(())
}
