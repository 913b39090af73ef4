//! Built-in event types, with their JDK names and fields where the JDK has one, at fixed ids.

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

/// The fields of a sample's context block, after the JDK's fields of the event (docs/jfr-format.md,
/// "Context ids on samples"): its size, the number of ids, the ids. Readers that know the event by
/// name read the ids by name (Pyroscope's parser takes `spanId` from `jdk.ExecutionSample`);
/// readers that decode the JDK's fields by position and then read on from there as if a new event
/// started (async-profiler's converter) take the size and the count for an event's size and type,
/// and skip to the sample's end.
fn sample_context_fields() -> [Field; 3] {
    [
        f("contextSize", ids::INT, "Context Size").with(Annotation::value(
            ids::DESCRIPTION,
            "Bytes from this field to the end of the event: readers that know only the JDK's fields skip the context ids by it",
        )),
        f("contextIds", ids::INT, "Context Ids").with(Annotation::value(ids::DESCRIPTION, "Context ids that follow")),
        f("spanId", ids::LONG, "Span Id").with(Annotation::value(
            ids::DESCRIPTION,
            "The tracing span the thread was in (recorder.Span spanId; 0: none)",
        )),
    ]
}

/// Writes a sample's context block (the fields of `sample_context_fields`). The size must fit in
/// one byte (it does: at most 2 + 9 bytes per id), so that it reads the same as a varint and as
/// an event size; the count (ids, fewer than 100) is never the id of an event type (those start
/// at `ids::FIRST_EVENT`), so a reader that takes it for an event type skips the block.
pub(crate) fn write_sample_context(e: &mut crate::chunk::EventOut<'_>, span: u64) {
    let context = [span];
    let size = 2 + context.iter().map(|&id| jfr_format::varint::encoded_len(id)).sum::<usize>();
    debug_assert!(size < 0x80 && (context.len() as u64) < ids::FIRST_EVENT);
    e.int(size as i32);
    e.int(context.len() as i32);
    for id in context {
        e.long(id as i64);
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
/// `recorder.Recording`: the type the recording-level settings (flush interval, chunk size, ...)
/// belong to. No event of it is written: it exists because every `jdk.ActiveSetting` must name a
/// declared event type by its id (JMC looks the id up and throws a NullPointerException on any
/// other, such as 0).
pub const RECORDING: u64 = 112;

fn f(name: &str, type_id: u64, label: &str) -> Field {
    Field::new(name, type_id).with(label_annotation(label))
}

fn percentage(name: &str, label: &str) -> Field {
    f(name, ids::FLOAT, label).with(Annotation::marker(ids::PERCENTAGE))
}

fn bytes(name: &str, label: &str) -> Field {
    f(name, ids::LONG, label).with(Annotation::marker(ids::UNSIGNED)).with(Annotation::value(ids::DATA_AMOUNT, "BYTES"))
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

/// The built-in event classes.
pub fn classes() -> Vec<Class> {
    let mut out = Vec::new();

    // jdk.ExecutionSample: startTime, sampledThread, stackTrace, state (no duration, no eventThread),
    // then, unless the recording turned it off, the context block (`write_sample_context`).
    let mut sample_fields = vec![
        f("sampledThread", ids::THREAD, "Thread").pooled(),
        f("stackTrace", ids::STACK_TRACE, "Stack Trace").pooled(),
        f("state", ids::THREAD_STATE, "Thread State").pooled(),
    ];
    if declared_span_ids() {
        sample_fields.extend(sample_context_fields());
    }
    let mut sample = event_class(EventTypeSpec {
        fields: sample_fields,
        ..spec(
            EXECUTION_SAMPLE,
            "jdk.ExecutionSample",
            "Method Profiling Sample",
            &["Java Virtual Machine", "Profiling"],
            "Snapshot of a running thread's stack, taken by the CPU sampler",
        )
    });
    sample.settings.push(jfr_format::metadata::Setting {
        name: "period".into(),
        type_id: ids::SETTING_PERIOD,
        default_value: "10 ms".into(),
        annotations: vec![label_annotation("Period")],
    });
    out.push(sample);

    out.push(event_class(EventTypeSpec {
        duration: true,
        thread: true,
        stack_trace: true,
        fields: vec![
            f("id", ids::LONG, "Id"),
            f("name", ids::STRING, "Name"),
            f("destination", ids::STRING, "Destination"),
            f("maxAge", ids::LONG, "Max Age").with(Annotation::value(ids::TIMESPAN, "MILLISECONDS")),
            f("flushInterval", ids::LONG, "Flush Interval").with(Annotation::value(ids::TIMESPAN, "MILLISECONDS")),
            f("maxSize", ids::LONG, "Max Size").with(Annotation::value(ids::DATA_AMOUNT, "BYTES")),
            f("recordingStart", ids::LONG, "Start Time")
                .with(Annotation::value(ids::TIMESTAMP, "MILLISECONDS_SINCE_EPOCH")),
            f("recordingDuration", ids::LONG, "Recording Duration")
                .with(Annotation::value(ids::TIMESPAN, "MILLISECONDS")),
        ],
        ..spec(ACTIVE_RECORDING, "jdk.ActiveRecording", "Flight Recording", &["Flight Recorder"], "The recording")
    }));

    out.push(event_class(EventTypeSpec {
        duration: true,
        thread: true,
        stack_trace: true,
        fields: vec![
            f("id", ids::LONG, "Event Id"),
            f("name", ids::STRING, "Setting Name"),
            f("value", ids::STRING, "Setting Value"),
        ],
        ..spec(ACTIVE_SETTING, "jdk.ActiveSetting", "Recording Setting", &["Flight Recorder"], "A setting in effect")
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![
            percentage("jvmUser", "JVM User"),
            percentage("jvmSystem", "JVM System"),
            percentage("machineTotal", "Machine Total"),
        ],
        ..spec(
            CPU_LOAD,
            "jdk.CPULoad",
            "CPU Load",
            &["Operating System", "Processor"],
            "Process (\"JVM\" fields) and machine CPU load",
        )
    }));

    // As the JDK declares it (shares of all CPUs' time, like jdk.CPULoad). The CPU sampler sees
    // user time only (`sampler/timer.rs`): this is where a thread's system time shows.
    out.push(event_class(EventTypeSpec {
        thread: true,
        fields: vec![
            percentage("user", "User Mode CPU Load")
                .with(Annotation::value(ids::DESCRIPTION, "User mode thread CPU load")),
            percentage("system", "System Mode CPU Load")
                .with(Annotation::value(ids::DESCRIPTION, "System mode thread CPU load")),
        ],
        ..spec(
            THREAD_CPU_LOAD,
            "jdk.ThreadCPULoad",
            "Thread CPU Load",
            &["Operating System", "Processor"],
            "A thread's user and system mode CPU time in the last periodic interval, over the time of all CPUs",
        )
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![bytes("size", "Resident Set Size"), bytes("peak", "Resident Set Size Peak Value")],
        ..spec(
            RESIDENT_SET_SIZE,
            "jdk.ResidentSetSize",
            "Resident Set Size",
            &["Operating System", "Memory"],
            "Resident set size of the process",
        )
    }));

    out.push(event_class(EventTypeSpec {
        thread: true,
        stack_trace: true,
        fields: vec![
            f("thread", ids::THREAD, "New Java Thread").pooled(),
            f("parentThread", ids::THREAD, "Parent Java Thread").pooled(),
        ],
        ..spec(THREAD_START, "jdk.ThreadStart", "Java Thread Start", &["Java Application"], "A thread was seen")
    }));

    out.push(event_class(EventTypeSpec {
        thread: true,
        fields: vec![f("thread", ids::THREAD, "Java Thread").pooled()],
        ..spec(THREAD_END, "jdk.ThreadEnd", "Java Thread End", &["Java Application"], "A thread ended")
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![bytes("amount", "Amount"), bytes("total", "Total")],
        ..spec(
            JDK_DATA_LOSS,
            "jdk.DataLoss",
            "Data Loss",
            &["Flight Recorder"],
            "Data could not be recorded: bytes lost",
        )
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![
            f("thread", ids::THREAD, "Thread").pooled(),
            f("reason", ids::STRING, "Reason"),
            f("events", ids::LONG, "Lost Events"),
            f("samples", ids::LONG, "Lost Samples"),
            bytes("bytes", "Lost Bytes"),
            f("totalEvents", ids::LONG, "Total Lost Events"),
            f("totalSamples", ids::LONG, "Total Lost Samples"),
        ],
        ..spec(
            DATA_LOSS,
            "recorder.DataLoss",
            "Recorder Data Loss",
            &["Flight Recorder"],
            "Events or CPU samples that could not be recorded, with the reason (buffers full, write failed, ...)",
        )
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![
            f("mode", ids::STRING, "Sampling Mode"),
            f("period", ids::LONG, "Period").with(Annotation::value(ids::TIMESPAN, "NANOSECONDS")),
            f("rate", ids::DOUBLE, "Effective Rate").with(Annotation::marker(ids::FREQUENCY)),
            f("taken", ids::LONG, "Samples Taken"),
            f("lost", ids::LONG, "Samples Lost"),
            f("threads", ids::LONG, "Sampled Threads"),
            // Since the previous statistics event, like `rate`: sums over any span of a recording.
            f("samplesWritten", ids::LONG, "Samples Written"),
            f("leafOnlyStacks", ids::LONG, "Leaf-Only Stacks"),
            f("truncatedStacks", ids::LONG, "Truncated Stacks"),
        ],
        ..spec(
            SAMPLER_STATISTICS,
            "recorder.SamplerStatistics",
            "Sampler Statistics",
            &["Flight Recorder"],
            "How the CPU sampler is triggered, the samples per second it delivered since the previous flush, and \
             how many of those samples' stacks hold only their innermost frame (missing frame pointers, stack \
             bounds not known yet) or were cut by the depth limit",
        )
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![
            f("code", ids::STRING, "Code"),
            f("message", ids::STRING, "Message"),
            f("fix", ids::STRING, "Fix"),
        ],
        ..spec(
            DIAGNOSTIC,
            "recorder.Diagnostic",
            "Recorder Diagnostic",
            &["Flight Recorder"],
            "A problem with the recording's quality that the user can fix (also said once on stderr); code \
             missing-frame-pointers: stacks lose their frames because the code keeps no frame pointers",
        )
    }));

    // profiler.WallClockSample in async-profiler's shape (jfrMetadata.cpp, read by Pyroscope's
    // jfr-parser and async-profiler's converter): startTime, sampledThread, stackTrace, state and
    // `samples` (unsigned int: the periods one event stands for, idle threads being batched).
    // Not jdk.ExecutionSample with a state: every reader takes that one for CPU time.
    let mut wall = event_class(EventTypeSpec {
        fields: vec![
            f("sampledThread", ids::THREAD, "Thread").pooled(),
            f("stackTrace", ids::STACK_TRACE, "Stack Trace").pooled(),
            f("state", ids::THREAD_STATE, "Thread State").pooled(),
            f("samples", ids::INT, "Samples").with(Annotation::marker(ids::UNSIGNED)),
        ],
        ..spec(
            WALL_CLOCK_SAMPLE,
            "profiler.WallClockSample",
            "Wall Clock Sample",
            &["Java Virtual Machine", "Profiling"],
            "A thread's state and stack standing for `samples` wall-clock periods: one period when the \
             thread ran, or all the periods it waited without running, with its last stack",
        )
    });
    wall.settings.push(jfr_format::metadata::Setting {
        name: "period".into(),
        type_id: ids::SETTING_PERIOD,
        default_value: "50 ms".into(),
        annotations: vec![label_annotation("Period")],
    });
    out.push(wall);

    out.push(event_class(EventTypeSpec {
        thread: true,
        stack_trace: true,
        fields: vec![f("objectClass", ids::CLASS, "Object Class").pooled(), bytes("weight", "Sample Weight")],
        ..spec(
            OBJECT_ALLOCATION_SAMPLE,
            "jdk.ObjectAllocationSample",
            "Object Allocation Sample",
            &["Java Application"],
            "A sampled allocation; its class names the size class, its weight estimates the bytes \
             allocated that it stands for (size / (1 - exp(-size / interval)))",
        )
    }));

    out.push(event_class(EventTypeSpec {
        thread: true,
        stack_trace: true,
        fields: vec![
            f("objectClass", ids::CLASS, "Object Class").pooled(),
            bytes("allocationSize", "Allocation Size"),
            bytes("weight", "Estimated Live Bytes"),
            f("allocationTime", ids::LONG, "Allocation Time").with(Annotation::value(ids::TIMESTAMP, "TICKS")),
            f("snapshot", ids::LONG, "Snapshot"),
        ],
        ..spec(
            LIVE_OBJECT,
            "recorder.LiveObject",
            "Live Object",
            &["Java Application"],
            "A sampled allocation not freed yet when its snapshot was taken (the allocating thread and stack)",
        )
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![
            f("snapshot", ids::LONG, "Snapshot"),
            f("objects", ids::LONG, "Sampled Live Objects"),
            bytes("estimatedBytes", "Estimated Live Bytes"),
            f("untracked", ids::LONG, "Untracked Samples"),
        ],
        ..spec(
            LIVE_SET,
            "recorder.LiveSet",
            "Live Set",
            &["Java Application"],
            "A snapshot of the sampled allocations still allocated: its recorder.LiveObject events carry its id",
        )
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![
            bytes("interval", "Sampling Interval"),
            f("taken", ids::LONG, "Samples Taken"),
            f("written", ids::LONG, "Samples Written"),
            f("lost", ids::LONG, "Samples Lost"),
            f("failed", ids::LONG, "Failed Allocations"),
            f("untracked", ids::LONG, "Untracked Samples"),
        ],
        ..spec(
            ALLOCATION_STATISTICS,
            "recorder.AllocationStatistics",
            "Allocation Sampler Statistics",
            &["Flight Recorder"],
            "The allocation sampler's counts since the recording started: allocations chosen (taken), written as \
             jdk.ObjectAllocationSample, lost (no free record: recorder.DataLoss), chosen but failed (nothing \
             allocated), and written but not followed by the live set (its table full). The last one of a recording \
             balances: taken = written + lost + failed",
        )
    }));

    out.push(event_class(EventTypeSpec {
        fields: vec![
            f("pathId", ids::LONG, "Path Id"),
            f("parentPathId", ids::LONG, "Parent Path Id"),
            f("name", ids::STRING, "Name"),
            f("calls", ids::LONG, "Calls"),
            f("totalTime", ids::LONG, "Total Time").with(Annotation::value(ids::TIMESPAN, "NANOSECONDS")),
            f("selfTime", ids::LONG, "Self Time").with(Annotation::value(ids::TIMESPAN, "NANOSECONDS")),
        ],
        ..spec(
            SCOPE_TIMING,
            "recorder.ScopeTiming",
            "Scope Timing",
            &["Flight Recorder", "Scopes"],
            "One call path of the instrumented scopes, all threads merged, since the recording started: completed \
             calls, total time and self time (the profiler's own bookkeeping excluded); parentPathId 0 is the root",
        )
    }));
    out.push(event_class(spec(
        RECORDING,
        "recorder.Recording",
        "Recording Settings",
        &["Flight Recorder"],
        "The recorder's own settings (flush interval, chunk size and age, retention, memory, stack depth, \
         repository): jdk.ActiveSetting rows with this type's id. No events of this type are written.",
    )));

    debug_assert!(out.iter().all(|c| c.super_type.as_deref() == Some(SUPER_EVENT)));
    out
}

/// `recorder.PushStatistics`, declared only by recordings that push (so that the metadata of
/// others does not depend on the `push` feature).
#[cfg(feature = "push")]
pub fn push_statistics_class() -> Class {
    event_class(EventTypeSpec {
        fields: vec![
            f("target", ids::STRING, "Server"),
            f("chunksPosted", ids::LONG, "Chunks Posted"),
            f("uploads", ids::LONG, "Uploads"),
            bytes("bytesSent", "Bytes Sent"),
            bytes("jfrBytes", "JFR Bytes Posted"),
            f("retries", ids::LONG, "Retried Attempts"),
            f("rejected", ids::LONG, "Rejected Uploads"),
            f("chunksLost", ids::LONG, "Chunks Lost"),
            bytes("bytesLost", "Bytes Lost"),
            f("pending", ids::LONG, "Chunks Pending"),
            f("lastError", ids::STRING, "Last Error"),
        ],
        ..spec(
            PUSH_STATISTICS,
            "recorder.PushStatistics",
            "Push Statistics",
            &["Flight Recorder"],
            "Totals of the uploader that ships finished chunks to Grafana Pyroscope: uploads, retries, \
             rejected uploads, and finished chunks deleted by retention before they were posted (lost)",
        )
    })
}
