//! The `tracing` integration (feature `tracing`): [`RecorderLayer`] turns every closed span into a
//! `recorder.Span` event and every `tracing` event into a `recorder.Log` event, makes each entered
//! span a scope of the scope profiler ([`crate::scope`]), and keeps the thread's current span where
//! CPU samples read it (`jdk.ExecutionSample.spanId`).
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! // The layer first: a recording's samples carry `spanId` when a layer exists as it writes
//! // its first sample, which may be soon after `start`.
//! tracing_subscriber::registry().with(recorder::tracing::RecorderLayer::new()).init();
//! let rec = recorder::Recorder::builder().start()?;
//! # Ok::<(), recorder::Error>(())
//! ```
//!
//! Span ids in the recording are process-unique and never reused (`tracing`'s own `Id`s are
//! recycled). A span's `activeNanos` sums the time it was entered (an async span entered at each
//! poll shows busy against idle time); its stack is the one where it was created, from the
//! `span!` call out; its thread is the one that closed it. Per-type settings apply as to every
//! event type: `recorder.Span` with a threshold keeps only slow spans. With no recording running
//! the layer does nothing.
//!
//! Cost: a span's creation, entry, exit and close take no lock (but when a thread refills its
//! free slots, or 8 spans share a table group) and, but for the creation's one compare-and-swap,
//! no atomic read-modify-write: the layer keeps the span's state in a slot a
//! per-thread cache finds (see `live`). A creation renders the span's fields into a string (none
//! for a callsite without fields) and walks its stack (if `recorder.Span` records stacks).
#![allow(non_snake_case)] // JFR field names: spanId, parentSpanId, activeNanos

use crate::commit;
use crate::event::Event;
use crate::fork::ForkSafeMutex;
use crate::hash::BuildWordHasher;
use crate::scope;
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tracing_core::field::{Field, Visit};
use tracing_core::{span, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

crate::event! {
    /// A closed span of the `tracing` crate.
    #[event(name = "recorder.Span", label = "Span", description = "A span of the tracing crate, from its creation to its close", category = ["Tracing"])]
    pub struct SpanEvent {
        #[field(label = "Name")]
        pub name: &'static str,
        #[field(label = "Target")]
        pub target: &'static str,
        #[field(label = "Level")]
        pub level: &'static str,
        #[field(label = "Fields", description = "The span's fields as key=value pairs")]
        pub fields: String,
        #[field(label = "Span Id", description = "Process-unique, never reused (jdk.ExecutionSample.spanId refers to it)")]
        pub spanId: u64,
        #[field(label = "Parent Span Id", description = "0: none")]
        pub parentSpanId: u64,
        #[field(label = "Active Time", description = "Time the span was entered, summed over its entries")]
        pub activeNanos: Duration,
    }
}

crate::event! {
    /// An event of the `tracing` crate.
    #[event(name = "recorder.Log", label = "Log", description = "An event of the tracing crate", category = ["Tracing"])]
    pub struct LogEvent {
        #[field(label = "Level")]
        pub level: &'static str,
        #[field(label = "Target")]
        pub target: &'static str,
        #[field(label = "Message")]
        pub message: String,
        #[field(label = "Fields", description = "The event's other fields as key=value pairs")]
        pub fields: String,
        #[field(label = "Span Id", description = "The span the event happened in (0: none)")]
        pub spanId: u64,
    }
}

#[allow(unsafe_code)]
mod live;
pub(crate) use live::{TABLE_OVERFLOW_LOCK, TABLE_POOL_LOCK, TABLE_RECORD_LOCK};

/// What the layer keeps of a span from its creation to its close (in its [`live`] slot).
#[derive(Debug, Default)]
struct SpanData {
    /// The recording it was created in.
    generation: u64,
    parent: u64,
    /// Ticks at creation.
    start: i64,
    fields: String,
    callsite: Option<&'static Callsite>,
    stack: commit::CapturedStack,
}

/// The next block of span ids (ids start at 1; 0 means "no span"). Threads take ids in blocks,
/// so that a span's creation takes no atomic read-modify-write.
static NEXT_SPAN_IDS: AtomicU64 = AtomicU64::new(1);
const SPAN_ID_BLOCK: u64 = 1024;

thread_local! {
    /// This thread's block of span ids: the next one and the block's end.
    static SPAN_IDS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A process-unique span id, never reused.
fn next_span_id() -> u64 {
    SPAN_IDS
        .try_with(|ids| {
            let (next, end) = ids.get();
            if next < end {
                ids.set((next + 1, end));
                return next;
            }
            // Relaxed: unique numbers are all we need.
            let first = NEXT_SPAN_IDS.fetch_add(SPAN_ID_BLOCK, Ordering::Relaxed);
            ids.set((first + 1, first + SPAN_ID_BLOCK));
            first
        })
        // Relaxed: as above (a thread that is exiting takes one id alone).
        .unwrap_or_else(|_| NEXT_SPAN_IDS.fetch_add(1, Ordering::Relaxed))
}

/// The next layer's key (`RecorderLayer::key`).
static NEXT_LAYER: AtomicU32 = AtomicU32::new(1);

/// A `tracing_subscriber` layer that records spans and events into the running recording.
#[derive(Debug)]
pub struct RecorderLayer {
    /// Tells this layer's spans from another's: `tracing`'s span ids are per registry.
    key: u32,
}

impl RecorderLayer {
    /// The layer. Install it once; it records into whichever recording runs. From now on
    /// `jdk.ExecutionSample` carries `spanId` (unless the recording says otherwise:
    /// `RecorderBuilder::sample_span_ids`).
    pub fn new() -> RecorderLayer {
        crate::builtin::note_span_context();
        if commit::generation() != 0 && crate::builtin::decided_without_span_context() {
            crate::diagnostics::report_late_span_layer();
        }
        // Relaxed: a unique number.
        RecorderLayer { key: NEXT_LAYER.fetch_add(1, Ordering::Relaxed) }
    }

    /// The span id (ours) of `tracing`'s span `id`, 0 if this layer does not follow it.
    fn span_id(&self, id: Option<&span::Id>) -> u64 {
        id.and_then(|id| live::find(self.key, id.into_u64())).map_or(0, |(_, serial)| serial)
    }
}

impl Default for RecorderLayer {
    fn default() -> RecorderLayer {
        RecorderLayer::new()
    }
}

/// A clone is a layer of its own (for another subscriber: span ids are per registry).
impl Clone for RecorderLayer {
    fn clone(&self) -> RecorderLayer {
        RecorderLayer::new()
    }
}

/// What the layer needs of a span callsite, made once per callsite.
#[derive(Debug)]
pub(crate) struct Callsite {
    /// Its name's function index (scopes).
    func: u32,
    /// Its name, target and level as `recorder.Span` encodes them (its first three fields).
    encoded: Box<[u8]>,
}

/// Every callsite seen, by its metadata's address.
static CALLSITES: ForkSafeMutex<Option<HashMap<usize, &'static Callsite, BuildWordHasher>>> = ForkSafeMutex::new(None);
/// [`CALLSITES`], for the atfork handlers, which hold it across fork.
pub(crate) static CALLSITES_LOCK: &dyn crate::fork::HeldAcrossFork = &CALLSITES;

const CALLSITE_CACHE: usize = 32;

thread_local! {
    /// The callsites this thread met last, direct-mapped by address.
    static RECENT_CALLSITES: [Cell<(usize, Option<&'static Callsite>)>; CALLSITE_CACHE] =
        const { [const { Cell::new((0, None)) }; CALLSITE_CACHE] };
}

/// The callsite of `meta` (a span's).
#[inline]
fn callsite(meta: &'static Metadata<'static>) -> &'static Callsite {
    let key = meta as *const Metadata<'static> as usize;
    let at = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize >> (usize::BITS - 5);
    if let Ok((k, Some(c))) = RECENT_CALLSITES.try_with(|r| r[at % CALLSITE_CACHE].get()) {
        if k == key {
            return c;
        }
    }
    let c = callsite_slow(meta, key);
    let _ = RECENT_CALLSITES.try_with(|r| r[at % CALLSITE_CACHE].set((key, Some(c))));
    c
}

#[cold]
fn callsite_slow(meta: &'static Metadata<'static>, key: usize) -> &'static Callsite {
    let mut map = CALLSITES.lock();
    let map = map.get_or_insert_with(HashMap::default);
    if let Some(c) = map.get(&key) {
        return c;
    }
    let mut encoded = Vec::new();
    crate::encoder::encode_into_vec(&mut encoded, |out| {
        out.put_string(Some(meta.name()));
        out.put_string(Some(meta.target()));
        out.put_string(Some(meta.level().as_str()));
    });
    // Leaked: one per callsite of the program, and a span may close at any time.
    let c: &'static Callsite =
        Box::leak(Box::new(Callsite { func: scope::function_index(meta.name()), encoded: encoded.into_boxed_slice() }));
    map.insert(key, c);
    c
}

/// Renders fields as `key=value` pairs; the `message` field apart.
#[derive(Default)]
struct Fields {
    text: String,
    message: Option<String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" && self.message.is_none() {
            self.message = Some(format!("{value:?}"));
            return;
        }
        if !self.text.is_empty() {
            self.text.push(' ');
        }
        let _ = write!(self.text, "{}={value:?}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" && self.message.is_none() {
            self.message = Some(value.to_owned());
            return;
        }
        if !self.text.is_empty() {
            self.text.push(' ');
        }
        let _ = write!(self.text, "{}={value}", field.name());
    }
}

/// A new span's fields as `key=value` pairs, `message` first.
#[inline(never)]
fn render_span_fields(attrs: &span::Attributes<'_>) -> String {
    let mut fields = Fields::default();
    attrs.record(&mut fields);
    match fields.message {
        Some(message) if fields.text.is_empty() => format!("message={message}"),
        Some(message) => format!("message={message} {}", fields.text),
        None => fields.text,
    }
}

impl<S> Layer<S> for RecorderLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let generation = commit::generation();
        if generation == 0 {
            return;
        }
        // The registry's rule for a span's parent, without looking the span up.
        let parent = if attrs.is_root() {
            0
        } else if attrs.is_contextual() {
            self.span_id(ctx.current_span().id())
        } else {
            self.span_id(attrs.parent())
        };
        let callsite = callsite(attrs.metadata());
        // A callsite that declares no field has nothing to render.
        let text = if attrs.metadata().fields().is_empty() { String::new() } else { render_span_fields(attrs) };
        let data = SpanData {
            generation,
            parent,
            start: crate::clock::ticks(),
            fields: text,
            callsite: Some(callsite),
            // From the application's `span!` / `#[instrument]` call: the value set it passed
            // lives in its frame, so tracing's own frames (`Layered::new_span`, `Span::new` ...)
            // and ours are left out.
            stack: commit::capture_stack(SpanEvent::event_type(), attrs.values() as *const _ as usize),
        };
        live::insert(self.key, id.into_u64(), next_span_id(), callsite.func, data);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, _ctx: Context<'_, S>) {
        live::update(self.key, id.into_u64(), |data| {
            let mut fields = Fields { text: std::mem::take(&mut data.fields), message: None };
            values.record(&mut fields);
            data.fields = match fields.message {
                Some(message) if fields.text.is_empty() => format!("message={message}"),
                Some(message) => format!("{} message={message}", fields.text),
                None => fields.text,
            };
        });
    }

    fn on_enter(&self, id: &span::Id, _ctx: Context<'_, S>) {
        if !commit::recording() {
            return; // its scope and busy time would belong to no recording
        }
        if let Some((slot, serial)) = live::find(self.key, id.into_u64()) {
            scope::enter_span(slot.func(), serial);
        }
    }

    fn on_exit(&self, id: &span::Id, _ctx: Context<'_, S>) {
        if !commit::recording() {
            return;
        }
        if let Some((slot, serial)) = live::find(self.key, id.into_u64()) {
            // The entry's own time (0 for an entry of an entered span, or one made before the
            // recording started): entries on several threads at once add up.
            slot.add_active(scope::exit_span(serial));
        }
    }

    fn on_close(&self, id: span::Id, _ctx: Context<'_, S>) {
        let Some((serial, data, active)) = live::remove(self.key, id.into_u64()) else { return };
        let Some(callsite) = data.callsite else { return };
        if data.generation != commit::generation() {
            return; // created in a recording that has ended
        }
        let now = crate::clock::ticks();
        // An entered span was busy for 1 ns at least, however short its entries were (a few ticks
        // are less than a ns): 0 says it was never entered.
        let active = if active > 0 { crate::clock::ticks_to_nanos(active).max(1) as u64 } else { 0 };
        // `SpanEvent`'s fields, the callsite's three made once.
        commit::commit_event_with_stack(
            SpanEvent::event_type(),
            |out| {
                out.put_bytes(&callsite.encoded);
                out.put_string(Some(&data.fields));
                out.put_varint(serial);
                out.put_varint(data.parent);
                out.put_varint(active);
            },
            data.start,
            (now - data.start).max(0),
            data.stack,
        );
    }

    fn on_event(&self, event: &tracing_core::Event<'_>, ctx: Context<'_, S>) {
        if commit::generation() == 0 {
            return;
        }
        let span =
            if event.is_contextual() { self.span_id(ctx.current_span().id()) } else { self.span_id(event.parent()) };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let log = LogEvent {
            level: meta.level().as_str(),
            target: meta.target(),
            message: fields.message.unwrap_or_default(),
            fields: fields.text,
            spanId: span,
        };
        // The stack starts at the application's `event!` call: `event` lives in the frame of
        // `Event::dispatch` (the application's, once inlined), and tracing's frames are left out.
        let stack = commit::capture_stack(LogEvent::event_type(), event as *const _ as usize);
        commit::commit_event_with_stack(
            LogEvent::event_type(),
            |out| log.write_fields(out),
            crate::clock::ticks(),
            0,
            stack,
        );
    }
}
