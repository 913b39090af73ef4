//! Built-in event types, with their JDK names and fields where the JDK has one, at fixed ids.

use crate::chunk::{ClassKey, EventOut, FieldValue, Fields, SettingsThread, ThreadKey, ThreadStateKey, TypedEvent};
use crate::stack::StackKey;
use crate::threads::ThreadRef;
use jfr_format::metadata::{event_class, ids, label_annotation, Annotation, Class, EventTypeSpec, Field, SUPER_EVENT};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Whether `jdk.ExecutionSample` declares and carries `spanId`: the recording's
/// setting ([`SPAN_IDS_AUTO`]: when a `RecorderLayer` exists), decided for the whole recording
/// when its first sample is written, so every chunk of a recording has one layout of the event
/// (JMC splits a type whose fields differ between chunks into two). Until then the metadata
/// declares what the setting says now, and is written again if the decision differs (no sample
/// was written under the earlier one). A file without spans keeps the JDK's exact layout of the
/// event; with spans, the ids follow the JDK's fields in a context block that readers which know
/// only those fields skip (`write_sample_context`).
static SPAN_IDS_SETTING: AtomicU8 = AtomicU8::new(SPAN_IDS_AUTO);
/// The setting: when a `RecorderLayer` exists.
const SPAN_IDS_AUTO: u8 = 0;
/// The setting: always / never.
const SPAN_IDS_ALWAYS: u8 = 1;
const SPAN_IDS_NEVER: u8 = 2;
/// A `RecorderLayer` was created in this process.
static SPAN_CONTEXT: AtomicBool = AtomicBool::new(false);
/// The recording's decision: 0 not yet, 1 with `spanId`, 2 without.
static DECIDED: AtomicU8 = AtomicU8::new(0);

/// Sets whether the samples of the recording that starts carry `spanId` (`None`: when a
/// `RecorderLayer` exists when its first sample is written).
#[cfg_attr(loom, allow(dead_code))] // the recorder and the layer are not built under loom
pub(crate) fn set_sample_span_ids(setting: Option<bool>) {
    let v = match setting {
        None => SPAN_IDS_AUTO,
        Some(true) => SPAN_IDS_ALWAYS,
        Some(false) => SPAN_IDS_NEVER,
    };
    // Relaxed (both): read under L by the flushes of the recording that starts after this.
    SPAN_IDS_SETTING.store(v, Ordering::Relaxed);
    DECIDED.store(0, Ordering::Relaxed);
}

/// A `RecorderLayer` exists: a recording that has written no sample yet gives its samples
/// `spanId`.
#[cfg_attr(loom, allow(dead_code))] // the recorder and the layer are not built under loom
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn note_span_context() {
    // Relaxed: a flag the next L holder reads.
    SPAN_CONTEXT.store(true, Ordering::Relaxed);
}

/// The samples' layout was decided without `spanId` because no `RecorderLayer` existed then (the
/// setting left it to the layer): a layer noted now came too late for them.
#[cfg_attr(loom, allow(dead_code))] // the recorder and the layer are not built under loom
#[cfg(feature = "tracing")] // the tracing layer's
pub(crate) fn decided_without_span_context() -> bool {
    // Relaxed (both): written by `set_sample_span_ids` and under L. A decision made at this very
    // moment, which read the flag of `note_span_context` just before its store, goes unreported.
    SPAN_IDS_SETTING.load(Ordering::Relaxed) == SPAN_IDS_AUTO && DECIDED.load(Ordering::Relaxed) == 2
}

fn span_ids_wanted() -> bool {
    // Relaxed (both): see the stores.
    match SPAN_IDS_SETTING.load(Ordering::Relaxed) {
        SPAN_IDS_ALWAYS => true,
        SPAN_IDS_NEVER => false,
        _ => SPAN_CONTEXT.load(Ordering::Relaxed),
    }
}

/// `jdk.ExecutionSample` has `spanId` in the metadata written now: the decision, or what it
/// would be now.
pub(crate) fn declared_span_ids() -> bool {
    // Relaxed: under L.
    match DECIDED.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => span_ids_wanted(),
    }
}

/// The samples written now carry `spanId` (decided now if not yet; under L, by the writer of a
/// sample).
pub(crate) fn sample_span_ids() -> bool {
    // Relaxed: under L.
    match DECIDED.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = span_ids_wanted();
            // Relaxed: under L.
            DECIDED.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// `jdk.ExecutionSample`.
pub const EXECUTION_SAMPLE: u64 = 100;
/// `jdk.ActiveRecording`.
pub const ACTIVE_RECORDING: u64 = 101;
/// `jdk.ActiveSetting`.
pub const ACTIVE_SETTING: u64 = 102;
/// `jdk.CPULoad`.
pub const CPU_LOAD: u64 = 103;
/// `jdk.ResidentSetSize` (JDK 21's declaration).
pub const RESIDENT_SET_SIZE: u64 = 104;
/// `jdk.ThreadStart`.
pub const THREAD_START: u64 = 105;
/// `jdk.ThreadEnd`.
pub const THREAD_END: u64 = 106;
/// `jdk.DataLoss`: bytes of recording data lost.
pub const JDK_DATA_LOSS: u64 = 107;
/// `recorder.DataLoss`: events and samples lost, with the reason.
pub const DATA_LOSS: u64 = 108;
/// `recorder.SamplerStatistics`: the sampler's mode and effective rate.
pub const SAMPLER_STATISTICS: u64 = 109;
/// `recorder.Diagnostic`: a problem with the recording's quality and its fix (`diagnostics.rs`).
pub const DIAGNOSTIC: u64 = 110;
/// `jdk.ThreadCPULoad`: a thread's user and system CPU time over the last periodic interval.
pub const THREAD_CPU_LOAD: u64 = 113;
/// `recorder.ScopeTiming`: one path of the merged scope tree, cumulative.
pub const SCOPE_TIMING: u64 = 130;
/// `recorder.PushStatistics`: what the Pyroscope uploader posted, retried, and lost.
#[cfg(feature = "push")]
pub const PUSH_STATISTICS: u64 = 111;
/// `jdk.ObjectAllocationSample` (JDK 16+'s declaration): a sampled allocation and the bytes it
/// stands for.
pub const OBJECT_ALLOCATION_SAMPLE: u64 = 120;
/// `recorder.LiveObject`: a sampled allocation still allocated at a flush.
pub const LIVE_OBJECT: u64 = 121;
/// `profiler.WallClockSample` (async-profiler's wall-clock event, which Pyroscope and
/// async-profiler's converter read): one thread's state and stack standing for `samples`
/// wall-clock periods.
pub const WALL_CLOCK_SAMPLE: u64 = 123;
/// `recorder.LiveSet`: one live-set snapshot (its `recorder.LiveObject`s share its id).
pub const LIVE_SET: u64 = 122;
/// `recorder.AllocationStatistics`: the allocation sampler's counts since the recording started.
pub const ALLOCATION_STATISTICS: u64 = 126;
/// `recorder.Footprint`: the recorder's own memory, by part.
pub const FOOTPRINT: u64 = 127;
/// `recorder.Recording`: the type the recording-level settings (flush interval, chunk size, ...)
/// belong to. No event of it is written: it exists because every `jdk.ActiveSetting` must name a
/// declared event type by its id (JMC looks the id up and throws a NullPointerException on any
/// other, such as 0).
pub const RECORDING: u64 = 112;

/// Declares a built-in event type once: the struct its writer fills (`ChunkWriter::write`) and
/// `class()`, its metadata, both made from this one field list, so a writer cannot write the
/// fields in another order or of another kind than the metadata declares (it does not compile).
/// Each field's JFR type is its Rust type's (`chunk::FieldValue`). The implicit fields come first,
/// in the order `jfr_format::metadata::event_fields` declares them (`start_time`, `duration`,
/// `event_thread`, `stack_trace`; another order is refused), checked against their types.
macro_rules! builtin_event {
    (
        $(#[$attr:meta])*
        $name:ident $(<$lt:lifetime>)? = $id:ident {
            name: $type_name:literal,
            label: $label:literal,
            category: [$($category:literal),*],
            description: $description:literal,
            implicit: { $($implicit:ident: $implicit_ty:ty),+ $(,)? },
            fields: { $($field:ident: $ty:ty = $field_name:literal, $field_label:literal $(, $annotation:expr)*;)* } $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy)]
        #[cfg_attr(loom, allow(dead_code))]
        pub(crate) struct $name $(<$lt>)? {
            $(pub $implicit: $implicit_ty,)+
            $(pub $field: $ty,)*
        }

        $(#[$attr])*
        #[cfg_attr(loom, allow(dead_code))]
        impl $(<$lt>)? $name $(<$lt>)? {
            /// The type's metadata.
            pub(crate) fn class() -> Class {
                $(const _: () = assert!(
                    <$implicit_ty as FieldValue>::TYPE_ID == implicit_field!($implicit).0
                        && <$implicit_ty as FieldValue>::POOLED == implicit_field!($implicit).1
                );)+
                let (duration, thread, stack_trace) = implicit_fields!($($implicit)+);
                event_class(EventTypeSpec {
                    duration,
                    thread,
                    stack_trace,
                    fields: vec![$(field::<$ty>($field_name, $field_label)$(.with($annotation))*),*],
                    ..spec($id, $type_name, $label, &[$($category),*], $description)
                })
            }
        }

        $(#[$attr])*
        impl $(<$lt>)? Fields for $name $(<$lt>)? {
            fn write_fields(&self, e: &mut EventOut<'_>) {
                $(self.$implicit.write(e);)+
                $(self.$field.write(e);)*
            }
        }

        $(#[$attr])*
        impl $(<$lt>)? TypedEvent for $name $(<$lt>)? {
            const TYPE_ID: u64 = $id;
        }
    };
}

/// `(duration, eventThread, stackTrace)` of the implicit fields listed, in their only order.
macro_rules! implicit_fields {
    (start_time) => {
        (false, false, false)
    };
    (start_time duration) => {
        (true, false, false)
    };
    (start_time event_thread) => {
        (false, true, false)
    };
    (start_time stack_trace) => {
        (false, false, true)
    };
    (start_time duration event_thread) => {
        (true, true, false)
    };
    (start_time duration stack_trace) => {
        (true, false, true)
    };
    (start_time event_thread stack_trace) => {
        (false, true, true)
    };
    (start_time duration event_thread stack_trace) => {
        (true, true, true)
    };
}

/// `(type id, pooled)` of an implicit field as `jfr_format::metadata::event_fields` declares it.
macro_rules! implicit_field {
    (start_time) => {
        (ids::LONG, false)
    };
    (duration) => {
        (ids::LONG, false)
    };
    (event_thread) => {
        (ids::THREAD, true)
    };
    (stack_trace) => {
        (ids::STACK_TRACE, true)
    };
}

/// A field of Rust type `T` (its JFR type, pooled or not) with a label.
fn field<T: FieldValue>(name: &str, label: &str) -> Field {
    let field = Field::new(name, T::TYPE_ID).with(label_annotation(label));
    if T::POOLED {
        field.pooled()
    } else {
        field
    }
}

fn description(text: &str) -> Annotation {
    Annotation::value(ids::DESCRIPTION, text)
}

fn percentage() -> Annotation {
    Annotation::marker(ids::PERCENTAGE)
}

fn unsigned() -> Annotation {
    Annotation::marker(ids::UNSIGNED)
}

/// An amount of data in bytes.
fn data_bytes() -> Annotation {
    Annotation::value(ids::DATA_AMOUNT, "BYTES")
}

fn timespan(unit: &str) -> Annotation {
    Annotation::value(ids::TIMESPAN, unit)
}

fn timestamp(unit: &str) -> Annotation {
    Annotation::value(ids::TIMESTAMP, unit)
}

fn spec<'a>(
    id: u64,
    name: &'a str,
    label: &'a str,
    category: &'a [&'a str],
    description: &'a str,
) -> EventTypeSpec<'a> {
    EventTypeSpec {
        id,
        name,
        label,
        description: Some(description),
        category,
        duration: false,
        thread: false,
        stack_trace: false,
        fields: Vec::new(),
    }
}

builtin_event! {
    /// `jdk.ExecutionSample`: startTime, sampledThread, stackTrace, state (no duration, no
    /// eventThread), then, unless the recording turned it off, the context block
    /// ([`SampleContext`]).
    ExecutionSample = EXECUTION_SAMPLE {
        name: "jdk.ExecutionSample",
        label: "Method Profiling Sample",
        category: ["Java Virtual Machine", "Profiling"],
        description: "Snapshot of a running thread's stack, taken by the CPU sampler",
        implicit: { start_time: i64 },
        fields: {
            sampled_thread: ThreadKey = "sampledThread", "Thread";
            stack_trace: StackKey = "stackTrace", "Stack Trace";
            state: ThreadStateKey = "state", "Thread State";
        },
    }
}

/// A sample's context block, after the JDK's fields of the event (docs/jfr-format.md, "Context
/// ids on samples"): its size, the number of ids, the ids. Readers that know the event by name
/// read the ids by name (Pyroscope's parser takes `spanId` from `jdk.ExecutionSample`); readers
/// that decode the JDK's fields by position and then read on from there as if a new event started
/// (async-profiler's converter) take the size and the count for an event's size and type, and
/// skip to the sample's end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleContext {
    pub context_size: i32,
    pub context_ids: i32,
    pub span_id: u64,
}

impl SampleContext {
    /// The block of a sample taken in span `span` (0: none). The size must fit in one byte (it
    /// does: at most 2 + 9 bytes per id), so that it reads the same as a varint and as an event
    /// size; the count (ids, fewer than 100) is never the id of an event type (those start at
    /// `ids::FIRST_EVENT`), so a reader that takes it for an event type skips the block.
    pub(crate) fn of_span(span: u64) -> SampleContext {
        let size = 2 + jfr_format::varint::encoded_len(span);
        debug_assert!(size < 0x80);
        SampleContext { context_size: size as i32, context_ids: 1, span_id: span }
    }

    fn fields() -> [Field; 3] {
        [
            field::<i32>("contextSize", "Context Size").with(description(
                "Bytes from this field to the end of the event: readers that know only the JDK's fields skip the context ids by it",
            )),
            field::<i32>("contextIds", "Context Ids").with(description("Context ids that follow")),
            field::<u64>("spanId", "Span Id")
                .with(description("The tracing span the thread was in (recorder.Span spanId; 0: none)")),
        ]
    }
}

impl Fields for SampleContext {
    fn write_fields(&self, e: &mut EventOut<'_>) {
        let SampleContext { context_size, context_ids, span_id } = self;
        context_size.write(e);
        context_ids.write(e);
        span_id.write(e);
    }
}

builtin_event! {
    /// `jdk.ActiveRecording`.
    ActiveRecording<'a> = ACTIVE_RECORDING {
        name: "jdk.ActiveRecording",
        label: "Flight Recording",
        category: ["Flight Recorder"],
        description: "The recording",
        implicit: { start_time: i64, duration: i64, event_thread: SettingsThread, stack_trace: StackKey },
        fields: {
            id: i64 = "id", "Id";
            name: &'a str = "name", "Name";
            destination: Option<&'a str> = "destination", "Destination";
            max_age: i64 = "maxAge", "Max Age", timespan("MILLISECONDS");
            flush_interval: i64 = "flushInterval", "Flush Interval", timespan("MILLISECONDS");
            max_size: i64 = "maxSize", "Max Size", data_bytes();
            recording_start: i64 = "recordingStart", "Start Time", timestamp("MILLISECONDS_SINCE_EPOCH");
            recording_duration: i64 = "recordingDuration", "Recording Duration", timespan("MILLISECONDS");
        },
    }
}

builtin_event! {
    /// `jdk.ActiveSetting`.
    ActiveSetting<'a> = ACTIVE_SETTING {
        name: "jdk.ActiveSetting",
        label: "Recording Setting",
        category: ["Flight Recorder"],
        description: "A setting in effect",
        implicit: { start_time: i64, duration: i64, event_thread: SettingsThread, stack_trace: StackKey },
        fields: {
            id: i64 = "id", "Event Id";
            name: &'a str = "name", "Setting Name";
            value: &'a str = "value", "Setting Value";
        },
    }
}

builtin_event! {
    /// `jdk.CPULoad`.
    CpuLoad = CPU_LOAD {
        name: "jdk.CPULoad",
        label: "CPU Load",
        category: ["Operating System", "Processor"],
        description: "Process (\"JVM\" fields) and machine CPU load",
        implicit: { start_time: i64 },
        fields: {
            jvm_user: f32 = "jvmUser", "JVM User", percentage();
            jvm_system: f32 = "jvmSystem", "JVM System", percentage();
            machine_total: f32 = "machineTotal", "Machine Total", percentage();
        },
    }
}

builtin_event! {
    /// `jdk.ThreadCPULoad`, as the JDK declares it (shares of all CPUs' time, like jdk.CPULoad).
    /// The CPU sampler sees user time only (`sampler/timer.rs`): this is where a thread's system
    /// time shows.
    ThreadCpuLoad = THREAD_CPU_LOAD {
        name: "jdk.ThreadCPULoad",
        label: "Thread CPU Load",
        category: ["Operating System", "Processor"],
        description: "A thread's user and system mode CPU time in the last periodic interval, over the time of all CPUs",
        implicit: { start_time: i64, event_thread: ThreadRef },
        fields: {
            user: f32 = "user", "User Mode CPU Load", percentage(), description("User mode thread CPU load");
            system: f32 = "system", "System Mode CPU Load", percentage(), description("System mode thread CPU load");
        },
    }
}

builtin_event! {
    /// `jdk.ResidentSetSize` (JDK 21's declaration).
    ResidentSetSize = RESIDENT_SET_SIZE {
        name: "jdk.ResidentSetSize",
        label: "Resident Set Size",
        category: ["Operating System", "Memory"],
        description: "Resident set size of the process",
        implicit: { start_time: i64 },
        fields: {
            size: u64 = "size", "Resident Set Size", unsigned(), data_bytes();
            peak: u64 = "peak", "Resident Set Size Peak Value", unsigned(), data_bytes();
        },
    }
}

builtin_event! {
    /// `recorder.Footprint`: the recorder's own memory in the process, by part.
    Footprint<'a> = FOOTPRINT {
        name: "recorder.Footprint",
        label: "Recorder Footprint",
        category: ["Flight Recorder"],
        description: "The recorder's own memory in the process it records, by part: event buffers (allocated), the \
             sampler's buffers and the stack table (their resident pages: allocated at start, resident where \
             written), the allocation sampler's record pool, the unwind tables, the recorder's own code (the \
             pages of its shared library in memory, when it is one: the preload library of recorder record), the symbolizer's heap (measured as the allocator's growth across its work) \
             and the debug info of the files it mapped (the size of their DWARF sections, which lookups read from the page \
             cache); total is their sum. symbolsOnly names \
             the modules named from their symbol table only (no lines) because their debug info did not fit what the \
             symbolizer may hold (symbolizerLimit; 0: no limit)",
        implicit: { start_time: i64 },
        fields: {
            event_buffers: u64 = "eventBuffers", "Event Buffers", unsigned(), data_bytes();
            sampler_buffers: u64 = "samplerBuffers", "Sampler Buffers", unsigned(), data_bytes();
            allocation_pool: u64 = "allocationPool", "Allocation Record Pool", unsigned(), data_bytes();
            stack_table: u64 = "stackTable", "Stack Table", unsigned(), data_bytes();
            unwind_tables: u64 = "unwindTables", "Unwind Tables", unsigned(), data_bytes();
            own_code: u64 = "ownCode", "Recorder Code", unsigned(), data_bytes();
            symbolizer_heap: u64 = "symbolizerHeap", "Symbolizer Heap", unsigned(), data_bytes();
            mapped_debug_files: u64 = "mappedDebugFiles", "Mapped Debug Files", unsigned(), data_bytes();
            total: u64 = "total", "Total", unsigned(), data_bytes();
            memory_limit: u64 = "symbolizerLimit", "Symbolizer Limit", unsigned(), data_bytes();
            symbols_only_modules: u64 = "symbolsOnlyModules", "Modules Named From Symbols Only";
            symbols_only: &'a str = "symbolsOnly", "Symbols Only";
        },
    }
}

builtin_event! {
    /// `jdk.ThreadStart`.
    ThreadStart = THREAD_START {
        name: "jdk.ThreadStart",
        label: "Java Thread Start",
        category: ["Java Application"],
        description: "A thread was seen",
        implicit: { start_time: i64, event_thread: ThreadRef, stack_trace: StackKey },
        fields: {
            thread: ThreadRef = "thread", "New Java Thread";
            parent_thread: ThreadRef = "parentThread", "Parent Java Thread";
        },
    }
}

builtin_event! {
    /// `jdk.ThreadEnd`.
    ThreadEnd = THREAD_END {
        name: "jdk.ThreadEnd",
        label: "Java Thread End",
        category: ["Java Application"],
        description: "A thread ended",
        implicit: { start_time: i64, event_thread: ThreadRef },
        fields: {
            thread: ThreadRef = "thread", "Java Thread";
        },
    }
}

builtin_event! {
    /// `jdk.DataLoss`: bytes of recording data lost.
    JdkDataLoss = JDK_DATA_LOSS {
        name: "jdk.DataLoss",
        label: "Data Loss",
        category: ["Flight Recorder"],
        description: "Data could not be recorded: bytes lost",
        implicit: { start_time: i64 },
        fields: {
            amount: u64 = "amount", "Amount", unsigned(), data_bytes();
            total: u64 = "total", "Total", unsigned(), data_bytes();
        },
    }
}

builtin_event! {
    /// `recorder.DataLoss`: events and samples lost, with the reason.
    DataLoss<'a> = DATA_LOSS {
        name: "recorder.DataLoss",
        label: "Recorder Data Loss",
        category: ["Flight Recorder"],
        description: "Events or CPU samples that could not be recorded, with the reason (buffers full, write failed, ...)",
        implicit: { start_time: i64 },
        fields: {
            thread: ThreadRef = "thread", "Thread";
            reason: &'a str = "reason", "Reason";
            events: u64 = "events", "Lost Events";
            samples: u64 = "samples", "Lost Samples";
            bytes: u64 = "bytes", "Lost Bytes", unsigned(), data_bytes();
            total_events: u64 = "totalEvents", "Total Lost Events";
            total_samples: u64 = "totalSamples", "Total Lost Samples";
        },
    }
}

builtin_event! {
    /// `recorder.SamplerStatistics`: the sampler's mode and effective rate.
    SamplerStatistics<'a> = SAMPLER_STATISTICS {
        name: "recorder.SamplerStatistics",
        label: "Sampler Statistics",
        category: ["Flight Recorder"],
        description: "How the CPU sampler is triggered, the samples per second it delivered since the previous flush, and \
             how many of those samples' stacks hold only their innermost frame (missing frame pointers, stack \
             bounds not known yet) or were cut by the depth limit",
        implicit: { start_time: i64 },
        fields: {
            mode: &'a str = "mode", "Sampling Mode";
            period: i64 = "period", "Period", timespan("NANOSECONDS");
            rate: f64 = "rate", "Effective Rate", Annotation::marker(ids::FREQUENCY);
            taken: u64 = "taken", "Samples Taken";
            lost: u64 = "lost", "Samples Lost";
            threads: u64 = "threads", "Sampled Threads";
            // Since the previous statistics event, like `rate`: sums over any span of a recording.
            samples_written: u64 = "samplesWritten", "Samples Written";
            leaf_only_stacks: u64 = "leafOnlyStacks", "Leaf-Only Stacks";
            truncated_stacks: u64 = "truncatedStacks", "Truncated Stacks";
        },
    }
}

builtin_event! {
    /// `recorder.Diagnostic`: a problem with the recording's quality and its fix (`diagnostics.rs`).
    Diagnostic<'a> = DIAGNOSTIC {
        name: "recorder.Diagnostic",
        label: "Recorder Diagnostic",
        category: ["Flight Recorder"],
        description: "A problem with the recording's quality that the user can fix (also said once on stderr); code \
             missing-frame-pointers: stacks lose their frames because the code keeps no frame pointers",
        implicit: { start_time: i64 },
        fields: {
            code: &'a str = "code", "Code";
            message: &'a str = "message", "Message";
            fix: &'a str = "fix", "Fix";
        },
    }
}

builtin_event! {
    /// `profiler.WallClockSample` in async-profiler's shape (jfrMetadata.cpp, read by Pyroscope's
    /// jfr-parser and async-profiler's converter): startTime, sampledThread, stackTrace, state and
    /// `samples` (unsigned int: the periods one event stands for, idle threads being batched).
    /// Not jdk.ExecutionSample with a state: every reader takes that one for CPU time.
    WallClockSample = WALL_CLOCK_SAMPLE {
        name: "profiler.WallClockSample",
        label: "Wall Clock Sample",
        category: ["Java Virtual Machine", "Profiling"],
        description: "A thread's state and stack standing for `samples` wall-clock periods: one period when the \
             thread ran, or all the periods it waited without running, with its last stack",
        implicit: { start_time: i64 },
        fields: {
            sampled_thread: ThreadKey = "sampledThread", "Thread";
            stack_trace: StackKey = "stackTrace", "Stack Trace";
            state: ThreadStateKey = "state", "Thread State";
            samples: u32 = "samples", "Samples", unsigned();
        },
    }
}

builtin_event! {
    /// `jdk.ObjectAllocationSample` (JDK 16+'s declaration): a sampled allocation and the bytes it
    /// stands for.
    ObjectAllocationSample = OBJECT_ALLOCATION_SAMPLE {
        name: "jdk.ObjectAllocationSample",
        label: "Object Allocation Sample",
        category: ["Java Application"],
        description: "A sampled allocation; its class names the size class, its weight estimates the bytes \
             allocated that it stands for (size / (1 - exp(-size / interval)))",
        implicit: { start_time: i64, event_thread: ThreadRef, stack_trace: StackKey },
        fields: {
            object_class: ClassKey = "objectClass", "Object Class";
            weight: i64 = "weight", "Sample Weight", unsigned(), data_bytes();
        },
    }
}

builtin_event! {
    /// `recorder.LiveObject`: a sampled allocation still allocated at a flush.
    LiveObject = LIVE_OBJECT {
        name: "recorder.LiveObject",
        label: "Live Object",
        category: ["Java Application"],
        description: "A sampled allocation not freed yet when its snapshot was taken (the allocating thread and stack)",
        implicit: { start_time: i64, event_thread: ThreadRef, stack_trace: StackKey },
        fields: {
            object_class: ClassKey = "objectClass", "Object Class";
            allocation_size: u64 = "allocationSize", "Allocation Size", unsigned(), data_bytes();
            weight: i64 = "weight", "Estimated Live Bytes", unsigned(), data_bytes();
            allocation_time: i64 = "allocationTime", "Allocation Time", timestamp("TICKS");
            snapshot: i64 = "snapshot", "Snapshot";
        },
    }
}

builtin_event! {
    /// `recorder.LiveSet`: one live-set snapshot (its `recorder.LiveObject`s share its id).
    LiveSet = LIVE_SET {
        name: "recorder.LiveSet",
        label: "Live Set",
        category: ["Java Application"],
        description: "A snapshot of the sampled allocations still allocated: its recorder.LiveObject events carry its id",
        implicit: { start_time: i64 },
        fields: {
            snapshot: i64 = "snapshot", "Snapshot";
            objects: i64 = "objects", "Sampled Live Objects";
            estimated_bytes: i64 = "estimatedBytes", "Estimated Live Bytes", unsigned(), data_bytes();
            untracked: i64 = "untracked", "Untracked Samples";
        },
    }
}

builtin_event! {
    /// `recorder.AllocationStatistics`: the allocation sampler's counts since the recording started.
    AllocationStatistics = ALLOCATION_STATISTICS {
        name: "recorder.AllocationStatistics",
        label: "Allocation Sampler Statistics",
        category: ["Flight Recorder"],
        description: "The allocation sampler's counts since the recording started: allocations chosen (taken), written as \
             jdk.ObjectAllocationSample, lost (no free record: recorder.DataLoss), chosen but failed (nothing \
             allocated), and written but not followed by the live set (its table full). The last one of a recording \
             balances: taken = written + lost + failed",
        implicit: { start_time: i64 },
        fields: {
            interval: u64 = "interval", "Sampling Interval", unsigned(), data_bytes();
            taken: u64 = "taken", "Samples Taken";
            written: u64 = "written", "Samples Written";
            lost: u64 = "lost", "Samples Lost";
            failed: u64 = "failed", "Failed Allocations";
            untracked: u64 = "untracked", "Untracked Samples";
        },
    }
}

builtin_event! {
    /// `recorder.ScopeTiming`: one path of the merged scope tree, cumulative.
    ScopeTiming<'a> = SCOPE_TIMING {
        name: "recorder.ScopeTiming",
        label: "Scope Timing",
        category: ["Flight Recorder", "Scopes"],
        description: "One call path of the instrumented scopes, all threads merged, since the recording started: completed \
             calls, total time and self time (the profiler's own bookkeeping excluded); parentPathId 0 is the root",
        implicit: { start_time: i64 },
        fields: {
            path_id: i64 = "pathId", "Path Id";
            parent_path_id: i64 = "parentPathId", "Parent Path Id";
            name: &'a str = "name", "Name";
            calls: u64 = "calls", "Calls";
            total_time: i64 = "totalTime", "Total Time", timespan("NANOSECONDS");
            self_time: i64 = "selfTime", "Self Time", timespan("NANOSECONDS");
        },
    }
}

builtin_event! {
    /// `recorder.PushStatistics`: what the Pyroscope uploader posted, retried, and lost; declared
    /// only by recordings that push (so that the metadata of others does not depend on the `push`
    /// feature).
    #[cfg(feature = "push")]
    PushStatistics<'a> = PUSH_STATISTICS {
        name: "recorder.PushStatistics",
        label: "Push Statistics",
        category: ["Flight Recorder"],
        description: "Totals of the uploader that ships finished chunks to Grafana Pyroscope: uploads, retries, \
             rejected uploads, and finished chunks deleted by retention before they were posted (lost)",
        implicit: { start_time: i64 },
        fields: {
            target: &'a str = "target", "Server";
            chunks_posted: u64 = "chunksPosted", "Chunks Posted";
            uploads: u64 = "uploads", "Uploads";
            bytes_sent: u64 = "bytesSent", "Bytes Sent", unsigned(), data_bytes();
            jfr_bytes: u64 = "jfrBytes", "JFR Bytes Posted", unsigned(), data_bytes();
            retries: u64 = "retries", "Retried Attempts";
            rejected: u64 = "rejected", "Rejected Uploads";
            chunks_lost: u64 = "chunksLost", "Chunks Lost";
            bytes_lost: u64 = "bytesLost", "Bytes Lost", unsigned(), data_bytes();
            pending: u64 = "pending", "Chunks Pending";
            last_error: Option<&'a str> = "lastError", "Last Error";
        },
    }
}

/// The `period` setting of a sampled event type.
fn period_setting(default_value: &str) -> jfr_format::metadata::Setting {
    jfr_format::metadata::Setting {
        name: "period".into(),
        type_id: ids::SETTING_PERIOD,
        default_value: default_value.into(),
        annotations: vec![label_annotation("Period")],
    }
}

/// The built-in event classes.
pub fn classes() -> Vec<Class> {
    let mut sample = ExecutionSample::class();
    if declared_span_ids() {
        sample.fields.extend(SampleContext::fields());
    }
    sample.settings.push(period_setting("10 ms"));
    let mut wall = WallClockSample::class();
    wall.settings.push(period_setting("50 ms"));
    let out = vec![
        sample,
        ActiveRecording::class(),
        ActiveSetting::class(),
        CpuLoad::class(),
        ThreadCpuLoad::class(),
        ResidentSetSize::class(),
        ThreadStart::class(),
        ThreadEnd::class(),
        JdkDataLoss::class(),
        DataLoss::class(),
        SamplerStatistics::class(),
        Diagnostic::class(),
        wall,
        ObjectAllocationSample::class(),
        LiveObject::class(),
        LiveSet::class(),
        AllocationStatistics::class(),
        ScopeTiming::class(),
        Footprint::class(),
        // No event of it is written (see `RECORDING`).
        event_class(spec(
            RECORDING,
            "recorder.Recording",
            "Recording Settings",
            &["Flight Recorder"],
            "The recorder's own settings (flush interval, chunk size and age, retention, memory, stack depth, \
             repository): jdk.ActiveSetting rows with this type's id. No events of this type are written.",
        )),
    ];
    debug_assert!(out.iter().all(|c| c.super_type.as_deref() == Some(SUPER_EVENT)));
    out
}

/// `recorder.PushStatistics`, declared only by recordings that push.
#[cfg(feature = "push")]
pub fn push_statistics_class() -> Class {
    PushStatistics::class()
}
