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
//! Cost: entering and leaving a span allocate nothing and take no lock a writer could hold for
//! long (the registry's per-span read lock); a span's creation renders its fields into a string.
#![allow(non_snake_case)] // JFR field names: spanId, parentSpanId, activeNanos

use crate::commit::{self, CapturedStack};
use crate::event::Event;
use crate::scope;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
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

/// The next span id (ids start at 1; 0 means "no span").
static NEXT_SPAN_ID: AtomicU64 = AtomicU64::new(1);

/// A `tracing_subscriber` layer that records spans and events into the running recording.
#[derive(Debug, Clone, Copy)]
pub struct RecorderLayer {
    _private: (),
}

impl RecorderLayer {
    /// The layer. Install it once; it records into whichever recording runs. From now on
    /// `jdk.ExecutionSample` carries `spanId` (unless the recording says otherwise:
    /// `RecorderBuilder::sample_span_ids`).
    pub fn new() -> RecorderLayer {
        crate::builtin::note_span_context();
        RecorderLayer { _private: () }
    }
}

impl Default for RecorderLayer {
    fn default() -> RecorderLayer {
        RecorderLayer::new()
    }
}

/// What the layer keeps of a span (in the registry's extensions).
#[derive(Debug)]
struct SpanData {
    /// The recording it was created in.
    generation: u64,
    id: u64,
    parent: u64,
    /// Ticks at creation.
    start: i64,
    fields: String,
    /// Its name's function index (scopes).
    func: u32,
    stack: CapturedStack,
    /// Entries in progress (all threads).
    entered: AtomicU32,
    /// Ticks at the first of the entries in progress.
    entered_at: AtomicI64,
    /// Ticks entered so far.
    active: AtomicI64,
}

thread_local! {
    /// Function index of each span name seen by this thread (keyed by the callsite's metadata).
    static FUNCS: RefCell<HashMap<usize, u32, BuildHasherDefault<AddressHasher>>> = RefCell::new(HashMap::default());
}

/// A hasher for addresses (one multiply: the std's SipHash was a tenth of a span's creation).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
}

/// The function index of the span callsite `meta`.
fn function_index(meta: &'static Metadata<'static>) -> u32 {
    let key = meta as *const Metadata<'static> as usize;
    FUNCS
        .try_with(|f| {
            if let Some(&i) = f.borrow().get(&key) {
                return i;
            }
            let i = scope::function_index(meta.name());
            f.borrow_mut().insert(key, i);
            i
        })
        .unwrap_or_else(|_| scope::function_index(meta.name()))
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

fn span_id<S>(span: Option<tracing_subscriber::registry::SpanRef<'_, S>>) -> u64
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    span.and_then(|s| s.extensions().get::<SpanData>().map(|d| d.id)).unwrap_or(0)
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
        let Some(span) = ctx.span(id) else { return };
        let parent = span_id(span.parent());
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let mut text = fields.text;
        if let Some(message) = fields.message {
            text = if text.is_empty() { format!("message={message}") } else { format!("message={message} {text}") };
        }
        let data = SpanData {
            generation,
            // Relaxed: a unique number is all we need.
            id: NEXT_SPAN_ID.fetch_add(1, Ordering::Relaxed),
            parent,
            start: crate::clock::ticks(),
            fields: text,
            func: function_index(attrs.metadata()),
            // From the application's `span!` / `#[instrument]` call: the value set it passed
            // lives in its frame, so tracing's own frames (`Layered::new_span`, `Span::new` ...)
            // and ours are left out.
            stack: commit::capture_stack(SpanEvent::event_type(), attrs.values() as *const _ as usize),
            entered: AtomicU32::new(0),
            entered_at: AtomicI64::new(0),
            active: AtomicI64::new(0),
        };
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let Some(data) = ext.get_mut::<SpanData>() else { return };
        let mut fields = Fields { text: std::mem::take(&mut data.fields), message: None };
        values.record(&mut fields);
        data.fields = match fields.message {
            Some(message) if fields.text.is_empty() => format!("message={message}"),
            Some(message) => format!("{} message={message}", fields.text),
            None => fields.text,
        };
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let ext = span.extensions();
        let Some(data) = ext.get::<SpanData>() else { return };
        let Some(now) = scope::enter_span(data.func, data.id) else { return };
        // Relaxed (both): the span's own counters; entries and exits of one span on several
        // threads at once only make the busy time approximate.
        if data.entered.fetch_add(1, Ordering::Relaxed) == 0 {
            data.entered_at.store(now, Ordering::Relaxed);
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let ext = span.extensions();
        let Some(data) = ext.get::<SpanData>() else { return };
        let now = scope::exit_span(data.id);
        // Relaxed: see `on_enter`. An exit without an entry (entered before the recording
        // started) leaves the count alone.
        let entered = data.entered.load(Ordering::Relaxed);
        if entered == 0 {
            return;
        }
        data.entered.store(entered - 1, Ordering::Relaxed);
        if entered == 1 {
            let since = data.entered_at.load(Ordering::Relaxed);
            data.active.fetch_add((now - since).max(0), Ordering::Relaxed);
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(data) = span.extensions_mut().remove::<SpanData>() else { return };
        if data.generation != commit::generation() {
            return; // created in a recording that has ended
        }
        let meta = span.metadata();
        let now = crate::clock::ticks();
        // Relaxed: the span is closing; no entry is in progress. Deterministic mode: no real time.
        let active = if scope::deterministic() { 0 } else { data.active.load(Ordering::Relaxed) };
        let event = SpanEvent {
            name: meta.name(),
            target: meta.target(),
            level: meta.level().as_str(),
            fields: data.fields,
            spanId: data.id,
            parentSpanId: data.parent,
            activeNanos: Duration::from_nanos(crate::clock::ticks_to_nanos(active).max(0) as u64),
        };
        commit::commit_event_with_stack(
            SpanEvent::event_type(),
            |out| event.write_fields(out),
            data.start,
            (now - data.start).max(0),
            data.stack,
        );
    }

    fn on_event(&self, event: &tracing_core::Event<'_>, ctx: Context<'_, S>) {
        if commit::generation() == 0 {
            return;
        }
        let span = if event.is_contextual() {
            span_id(ctx.lookup_current())
        } else {
            span_id(event.parent().and_then(|id| ctx.span(id)))
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        LogEvent {
            level: meta.level().as_str(),
            target: meta.target(),
            message: fields.message.unwrap_or_default(),
            fields: fields.text,
            spanId: span,
        }
        .commit();
    }
}
