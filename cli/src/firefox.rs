//! `dump --format firefox`: the selected CPU samples and events in the Firefox Profiler's
//! processed profile format (JSON), written by `fxprof-processed-profile`, the crate samply
//! writes it with; profiler.firefox.com opens it from a file.
//!
//! One process; one thread per recorded thread (by name), its CPU samples (jdk.ExecutionSample)
//! with their stacks (frames as labels, named as in every other view) and times; every other event
//! of a thread is a marker on it: an interval for an event that lasted (duration events,
//! `tracing` spans, named by the span's `name`), an instant otherwise, with the event's type and
//! fields (as `print --json` renders them) and its stack.

use crate::frames;
use crate::profile::{self, ProfileKind};
use crate::render::{JsonRenderer, TypeInfo};
use crate::selection::Selection;
use crate::source::SourceChunk;
use crate::timeline;
use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame, FrameFlags, FrameInfo, MarkerFieldFlags,
    MarkerFieldFormat, MarkerTiming, Profile, ReferenceTimestamp, SamplingInterval, StackHandle, StaticSchemaMarker,
    StaticSchemaMarkerField, StringHandle, ThreadHandle, Timestamp,
};
use std::collections::HashMap;

/// A recorded event as a marker: its name, type and fields.
struct EventMarker {
    name: StringHandle,
    type_name: StringHandle,
    fields: StringHandle,
    category: CategoryHandle,
}

impl StaticSchemaMarker for EventMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "JfrEvent";
    const DESCRIPTION: Option<&'static str> = Some("An event of the recording");
    const CHART_LABEL: Option<&'static str> = Some("{marker.name}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name} {marker.data.fields}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField {
            key: "eventType",
            label: "Event type",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "fields",
            label: "Fields",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
    ];

    fn name(&self, _profile: &mut Profile) -> StringHandle {
        self.name
    }

    fn category(&self, _profile: &mut Profile) -> CategoryHandle {
        self.category
    }

    fn string_field_value(&self, field_index: u32) -> StringHandle {
        if field_index == 0 {
            self.type_name
        } else {
            self.fields
        }
    }

    fn number_field_value(&self, _field_index: u32) -> f64 {
        0.0
    }
}

/// The profile's threads and what each has interned.
struct Builder {
    profile: Profile,
    process: fxprof_processed_profile::ProcessHandle,
    start_ns: i64,
    threads: HashMap<String, ThreadHandle>,
    /// (thread, chunk index, chunk-local stack key) → stack.
    stacks: HashMap<(ThreadHandle, usize, u64), Option<StackHandle>>,
    code: CategoryPairHandle,
    events: CategoryHandle,
}

impl Builder {
    fn thread(&mut self, name: &str) -> ThreadHandle {
        if let Some(&t) = self.threads.get(name) {
            return t;
        }
        let tid = self.threads.len() as u32 + 1;
        let t = self.profile.add_thread(self.process, tid, Timestamp::from_nanos_since_reference(0), false);
        self.profile.set_thread_name(t, name);
        self.threads.insert(name.to_owned(), t);
        t
    }

    fn stack(
        &mut self,
        thread: ThreadHandle,
        chunk: usize,
        key: u64,
        stack: &[jfr_format::FrameInfo],
    ) -> Option<StackHandle> {
        if let Some(&s) = self.stacks.get(&(thread, chunk, key)) {
            return s;
        }
        let shown = &stack[..stack.len() - frames::runtime_frames(stack)];
        let infos: Vec<FrameInfo> = shown
            .iter()
            .rev()
            .map(|f| FrameInfo {
                frame: Frame::Label(self.profile.intern_string(&frames::display_name(f))),
                category_pair: self.code,
                flags: FrameFlags::empty(),
            })
            .collect();
        let s = self.profile.intern_stack_frames(thread, infos.into_iter());
        self.stacks.insert((thread, chunk, key), s);
        s
    }

    fn at(&self, epoch_ns: i64) -> Timestamp {
        Timestamp::from_nanos_since_reference((epoch_ns - self.start_ns).max(0) as u64)
    }
}

/// The profile of the samples and events of `chunks` that `selection` keeps, as JSON.
pub fn write(
    chunks: &[SourceChunk],
    selection: &Selection,
    title: &str,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let start_ns = chunks.iter().map(|c| c.chunk.header().start_nanos).min().unwrap_or(0);
    let cpu = ProfileKind::Cpu.weighing();
    let period = chunks.iter().find_map(|sc| crate::pprof::sampling_period(&sc.chunk, &cpu).ok().flatten());
    let mut profile = Profile::new(
        title,
        ReferenceTimestamp::from_millis_since_unix_epoch(start_ns as f64 / 1e6),
        SamplingInterval::from_nanos(period.unwrap_or(10_000_000)),
    );
    let process = profile.add_process(title, 0, Timestamp::from_nanos_since_reference(0));
    let code = profile.add_category("Code", CategoryColor::Yellow).into();
    let events = profile.add_category("Events", CategoryColor::Blue);
    let mut b = Builder { profile, process, start_ns, threads: HashMap::new(), stacks: HashMap::new(), code, events };
    // Samples of every kind are samples, not markers.
    let kinds = [ProfileKind::Cpu, ProfileKind::Wall, ProfileKind::Alloc].map(ProfileKind::weighing);
    let live = crate::profile::Weighing::live();
    let sample_types: Vec<&str> = kinds.iter().chain([&live]).flat_map(|w| w.names()).collect();
    for (c, sc) in chunks.iter().enumerate() {
        let chunk = &sc.chunk;
        let context = || format!("{}", sc.file.display());
        profile::for_each_sample(chunk, &cpu, selection, |sample| {
            let thread = b.thread(sample.thread.map_or("(no thread)", |t| t));
            let stack = b.stack(thread, c, sample.stack_key, &sample.stack.frames);
            let at = b.at(sample.start_ns);
            let weight = i32::try_from(sample.weight).unwrap_or(i32::MAX);
            b.profile.add_sample(thread, at, stack, CpuDelta::ZERO, weight);
        })
        .map_err(anyhow::Error::new)
        .map_err(|e| e.context(context()))?;
        let info = TypeInfo::new(chunk.types());
        let mut renderer = JsonRenderer::new(chunk, &info);
        let mut fields = Vec::new();
        timeline::for_each_event(chunk, selection, &sample_types, |e| {
            let Some(thread_name) = e.thread else { return Ok(()) };
            if sample_types.contains(&e.type_name) {
                return Ok(());
            }
            let thread = b.thread(thread_name);
            fields.clear();
            renderer.fields(e.event, &mut fields)?;
            let fields_text = String::from_utf8_lossy(&fields);
            // A span is named by its name, other events by their type.
            let name = match chunk.event_field(e.event, "name").and_then(jfr_format::Value::as_str) {
                Some(n) if e.type_name == "recorder.Span" => n.to_owned(),
                _ => e.type_name.to_owned(),
            };
            let marker = EventMarker {
                name: b.profile.intern_string(&name),
                type_name: b.profile.intern_string(e.type_name),
                fields: b.profile.intern_string(&fields_text),
                category: b.events,
            };
            // An event that lasted no time is an instant, whatever its type.
            let timing = match e.has_duration && e.duration_ns > 0 {
                true => MarkerTiming::Interval(b.at(e.start_ns), b.at(e.start_ns + e.duration_ns)),
                false => MarkerTiming::Instant(b.at(e.start_ns)),
            };
            let handle = b.profile.add_marker(thread, timing, marker);
            if let Some(frames) = e.stack {
                let stack = b.stack(thread, c, e.stack_key, frames);
                b.profile.set_marker_stack(thread, handle, stack);
            }
            Ok(())
        })
        .map_err(anyhow::Error::new)
        .map_err(|e| e.context(context()))?;
    }
    serde_json::to_writer(&mut *out, &b.profile)?;
    Ok(())
}
