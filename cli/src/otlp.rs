//! `dump --format otlp|otlp-json`: the recording's samples as one OpenTelemetry
//! `ExportProfilesServiceRequest` (profiles signal, proto `v1development` of opentelemetry-proto
//! release v1.10.0, the types of the `opentelemetry-proto` crate), binary protobuf or OTLP/JSON.
//!
//! One `Profile` per kind of sample present (CPU time, wall time, allocated bytes, bytes still
//! allocated at the last live-set snapshot), all sharing one `ProfilesDictionary`. Samples with the
//! same stack and attributes are one `Sample` whose `values[i]` was taken at
//! `timestamps_unix_nano[i]`, so every sample keeps its time. Attributes: `thread.name` and
//! `thread.id` (the OS thread id; OTel semantic conventions) and, for a sample taken inside a `recorder.Span`, `recorder.span.name`.
//! A frame the recording marks `Inlined` becomes a line of its caller's location (the caller's
//! line last, as the proto asks).

use crate::fold::fold_runtime;
use crate::profile::{self, ProfileKind, Unit, Weighing};
use crate::selection::Selection;
use crate::source::SourceChunk;
use crate::spans::SpanNames;
use jfr_format::FrameInfo;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as pb;
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::HashMap;

/// One profile to make: its weighing, its sample type and unit, and how a weight becomes a value.
struct ProfileSpec {
    weighing: Weighing,
    /// `cpu`, `wall`, `alloc_space`, `live_space`.
    type_name: &'static str,
    /// Only the samples of this selection (the live profile: the last snapshot).
    selection: Selection,
}

/// The dictionary shared by the profiles, with its look-up tables.
#[derive(Default)]
struct Dictionary {
    table: pb::ProfilesDictionary,
    strings: HashMap<String, i32>,
    functions: HashMap<i32, i32>,
    locations: HashMap<Vec<(i32, i64)>, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(i32, AttributeValue), i32>,
}

impl Dictionary {
    fn new() -> Dictionary {
        let mut d = Dictionary::default();
        // Index 0 of each table is the "unset" entry the proto reserves.
        d.string("");
        d.table.mapping_table.push(pb::Mapping::default());
        d.table.location_table.push(pb::Location::default());
        d.table.function_table.push(pb::Function::default());
        d.table.link_table.push(pb::Link::default());
        d.table.attribute_table.push(pb::KeyValueAndUnit::default());
        d.table.stack_table.push(pb::Stack::default());
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.table.string_table.len() as i32;
        self.table.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn function(&mut self, name: &str) -> i32 {
        let name = self.string(name);
        let next = self.table.function_table.len() as i32;
        let i = *self.functions.entry(name).or_insert(next);
        if i == next {
            self.table.function_table.push(pb::Function {
                name_strindex: name,
                system_name_strindex: name,
                ..Default::default()
            });
        }
        i
    }

    /// The location of `lines` ((function, line), inlined callees first, caller last).
    fn location(&mut self, lines: Vec<(i32, i64)>) -> i32 {
        if let Some(&i) = self.locations.get(&lines) {
            return i;
        }
        let i = self.table.location_table.len() as i32;
        let pb_lines = lines.iter().map(|&(f, l)| pb::Line { function_index: f, line: l, column: 0 }).collect();
        self.table.location_table.push(pb::Location { lines: pb_lines, ..Default::default() });
        self.locations.insert(lines, i);
        i
    }

    /// The stack of `frames` (innermost first).
    fn stack(&mut self, frames: &[FrameInfo]) -> i32 {
        let mut locations = Vec::with_capacity(frames.len());
        let mut pending: Vec<(i32, i64)> = Vec::new();
        for frame in frames {
            let line = (self.function(&crate::frames::display_name(frame)), i64::from(frame.line.max(0)));
            pending.push(line);
            if frame.frame_type.as_deref() != Some("Inlined") {
                locations.push(self.location(std::mem::take(&mut pending)));
            }
        }
        if !pending.is_empty() {
            locations.push(self.location(pending));
        }
        if locations.is_empty() {
            let no_stack = self.function("[no stack]");
            locations.push(self.location(vec![(no_stack, 0)]));
        }
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.table.stack_table.len() as i32;
        self.table.stack_table.push(pb::Stack { location_indices: locations.clone() });
        self.stacks.insert(locations, i);
        i
    }

    fn attribute(&mut self, key: &str, value: &str) -> i32 {
        self.attribute_of(key, AttributeValue::Text(value.to_owned()))
    }

    fn int_attribute(&mut self, key: &str, value: i64) -> i32 {
        self.attribute_of(key, AttributeValue::Int(value))
    }

    fn attribute_of(&mut self, key: &str, value: AttributeValue) -> i32 {
        let key = self.string(key);
        let next = self.table.attribute_table.len() as i32;
        let any = match &value {
            AttributeValue::Text(s) => string_value(s),
            AttributeValue::Int(n) => AnyValue { value: Some(any_value::Value::IntValue(*n)) },
        };
        let i = *self.attributes.entry((key, value)).or_insert(next);
        if i == next {
            self.table.attribute_table.push(pb::KeyValueAndUnit {
                key_strindex: key,
                value: Some(any),
                unit_strindex: 0,
            });
        }
        i
    }
}

/// An attribute's value, as a dictionary key.
#[derive(PartialEq, Eq, Hash)]
enum AttributeValue {
    Text(String),
    Int(i64),
}

fn string_value(s: &str) -> AnyValue {
    AnyValue { value: Some(any_value::Value::StringValue(s.to_owned())) }
}

/// The request of a recording, with how many samples it holds.
pub struct Export {
    pub request: ExportProfilesServiceRequest,
    pub samples: u64,
}

/// Where the recording came from, for the resource.
pub struct Origin {
    /// `service.name`.
    pub service_name: String,
    /// `process.pid`, when the recording's directory name says it.
    pub pid: Option<i64>,
}

/// Builds the request from the selected samples of every chunk; `live` is the selection of the
/// last live-set snapshot, if the recording has one. Stops at the first damaged chunk (returned
/// with its index; what was read before it is kept).
pub fn build(
    chunks: &[SourceChunk],
    selection: &Selection,
    live: Option<Selection>,
    keep_runtime_frames: bool,
    origin: &Origin,
) -> (Export, Option<(usize, jfr_format::Error)>) {
    let mut specs = vec![
        ProfileSpec { weighing: ProfileKind::Cpu.weighing(), type_name: "cpu", selection: selection.clone() },
        ProfileSpec { weighing: ProfileKind::Wall.weighing(), type_name: "wall", selection: selection.clone() },
        ProfileSpec { weighing: ProfileKind::Alloc.weighing(), type_name: "alloc_space", selection: selection.clone() },
    ];
    if let Some(live) = live {
        specs.push(ProfileSpec { weighing: Weighing::live(), type_name: "live_space", selection: live });
    }
    let mut dict = Dictionary::new();
    let mut spans = SpanNames::default();
    let mut damage = None;
    for (i, sc) in chunks.iter().enumerate() {
        if let Err(e) = spans.add_chunk(&sc.chunk) {
            damage = Some((i, e));
            break;
        }
    }
    let (start_ns, end_ns) = chunks.iter().fold((i64::MAX, i64::MIN), |(s, e), sc| {
        let h = sc.chunk.header();
        (s.min(h.start_nanos), e.max(h.start_nanos.saturating_add(h.duration_nanos)))
    });
    let mut profiles = Vec::new();
    let mut total = 0u64;
    for spec in &specs {
        // Each kind reads the chunks before the first damaged one any kind found.
        let readable = damage.as_ref().map_or(chunks.len(), |(i, _)| *i);
        let mut samples: Vec<pb::Sample> = Vec::new();
        let mut by_key: HashMap<(i32, Vec<i32>), usize> = HashMap::new();
        let mut period_ns: Option<u64> = None;
        let mut first_period_ns: Option<u64> = None;
        for (i, sc) in chunks[..readable].iter().enumerate() {
            let chunk = &sc.chunk;
            let found = crate::pprof::sampling_period(chunk, &spec.weighing).and_then(|p| {
                if let Some(p) = p {
                    period_ns = Some(p);
                    first_period_ns.get_or_insert(p);
                }
                let mut found = Vec::new();
                profile::for_each_sample(chunk, &spec.weighing, &spec.selection, |s| {
                    found.push((
                        s.stack_key,
                        s.stack.clone(),
                        s.thread.cloned(),
                        s.thread_id,
                        s.weight,
                        s.span,
                        s.start_ns,
                    ));
                })?;
                Ok(found)
            });
            let found = match found {
                Ok(found) => found,
                Err(e) => {
                    damage = Some((i, e));
                    break;
                }
            };
            let mut stacks: HashMap<u64, i32> = HashMap::new();
            for (key, stack, thread, thread_id, weight, span, at_ns) in found {
                let stack_index = match stacks.get(&key) {
                    Some(&s) => s,
                    None => {
                        let s = dict.stack(fold_runtime(&stack.frames, keep_runtime_frames));
                        stacks.insert(key, s);
                        s
                    }
                };
                let mut attributes = Vec::new();
                if let Some(thread) = &thread {
                    attributes.push(dict.attribute("thread.name", thread));
                }
                if thread_id != 0 {
                    attributes.push(dict.int_attribute("thread.id", thread_id));
                }
                if span != 0 {
                    let name = spans.path(span).last().map_or_else(String::new, |n| n.to_string());
                    attributes.push(dict.attribute("recorder.span.name", &name));
                }
                let value = match spec.weighing.unit {
                    Unit::Samples => weight.saturating_mul(period_ns.unwrap_or(1)),
                    Unit::Bytes => weight,
                };
                let at = *by_key.entry((stack_index, attributes.clone())).or_insert_with(|| {
                    samples.push(pb::Sample { stack_index, attribute_indices: attributes, ..Default::default() });
                    samples.len() - 1
                });
                samples[at].values.push(i64::try_from(value).unwrap_or(i64::MAX));
                samples[at].timestamps_unix_nano.push(at_ns.max(0) as u64);
                total += 1;
            }
        }
        if samples.is_empty() {
            continue;
        }
        let (type_name, unit) = match (spec.weighing.unit, first_period_ns) {
            (Unit::Bytes, _) => (spec.type_name, "bytes"),
            (Unit::Samples, Some(_)) => (spec.type_name, "nanoseconds"),
            // No period in the recording: each value counts samples.
            (Unit::Samples, None) => (if spec.type_name == "cpu" { "cpu_samples" } else { "wall_samples" }, "count"),
        };
        let sample_type = pb::ValueType { type_strindex: dict.string(type_name), unit_strindex: dict.string(unit) };
        let mut profile = pb::Profile {
            sample_type: Some(sample_type),
            samples,
            time_unix_nano: start_ns.max(0) as u64,
            duration_nano: end_ns.saturating_sub(start_ns).max(0) as u64,
            ..Default::default()
        };
        if let (Unit::Samples, Some(period)) = (spec.weighing.unit, first_period_ns) {
            profile.period_type = Some(sample_type);
            profile.period = i64::try_from(period).unwrap_or(i64::MAX);
        }
        profiles.push(profile);
    }
    let mut resource_attributes = vec![KeyValue {
        key: "service.name".to_owned(),
        value: Some(string_value(&origin.service_name)),
        ..Default::default()
    }];
    if let Some(pid) = origin.pid {
        resource_attributes.push(KeyValue {
            key: "process.pid".to_owned(),
            value: Some(AnyValue { value: Some(any_value::Value::IntValue(pid)) }),
            ..Default::default()
        });
    }
    let request = ExportProfilesServiceRequest {
        resource_profiles: vec![pb::ResourceProfiles {
            resource: Some(Resource { attributes: resource_attributes, ..Default::default() }),
            scope_profiles: vec![pb::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "recorder".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                profiles,
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(dict.table),
    };
    (Export { request, samples: total }, damage)
}

/// The request as binary protobuf.
pub fn to_protobuf(request: &ExportProfilesServiceRequest) -> Vec<u8> {
    prost::Message::encode_to_vec(request)
}

/// The request as OTLP/JSON.
pub fn to_json(request: &ExportProfilesServiceRequest) -> serde_json::Result<Vec<u8>> {
    let mut value = serde_json::to_value(request)?;
    drop_unset_bytes(&mut value);
    serde_json::to_vec(&value)
}

/// The crate's serde form writes the profiles' `bytes` fields it has no OTLP/JSON rule for
/// (`profileId`, `originalPayload`, and `traceId`, `spanId` of a profile `Link`) as arrays of
/// numbers, which OTLP/JSON readers reject. We leave them unset (the dictionary's link 0 is the
/// reserved empty one), and an unset field may be left out, so they are.
fn drop_unset_bytes(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for key in ["profileId", "originalPayload", "traceId", "spanId"] {
                if map.get(key).and_then(serde_json::Value::as_array).is_some_and(Vec::is_empty) {
                    map.remove(key);
                }
            }
            map.values_mut().for_each(drop_unset_bytes);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_unset_bytes),
        _ => {}
    }
}
