//! Typed events: declared once with [`event!`](crate::event), committed with one call.
//!
//! Every event type has the JDK's implicit fields, in the order the JDK reader requires
//! (docs/jfr-format.md, "Records and implicit fields"): `startTime`, `duration` (0 for instant events), `eventThread`, `stackTrace`,
//! then its own fields. The record is encoded on the committing thread into its own event buffer;
//! nothing on this path takes a lock or waits for the flusher (a thread's first commit in a
//! recording, and the first commit of an event type in the process, take a one-time slow path).

use crate::encoder::Encoder;
pub use crate::metadata_registry::EventType;
use crate::metadata_registry::TypeRegistry;
use jfr_format::metadata::{ids, label_annotation, Annotation, Field};

/// A value that can be a field of an event.
pub trait FieldType {
    /// The field's metadata; may register the classes it needs (nested structs).
    fn describe(name: &str, registry: &mut TypeRegistry) -> Field;
    /// Appends the value's encoding. May run more than once for one commit (see [`Encoder`]).
    fn encode(&self, out: &mut Encoder<'_>);
}

macro_rules! primitive {
    ($t:ty, $id:expr, $put:expr $(, $ann:expr)*) => {
        impl FieldType for $t {
            fn describe(name: &str, _: &mut TypeRegistry) -> Field {
                #[allow(unused_mut)]
                let mut f = Field::new(name, $id);
                $( f.annotations.push($ann); )*
                f
            }
            #[inline(always)]
            fn encode(&self, out: &mut Encoder<'_>) {
                let put: fn(&mut Encoder<'_>, $t) = $put;
                put(out, *self)
            }
        }
    };
}

primitive!(bool, ids::BOOLEAN, |o, v| o.put_bool(v));
primitive!(i8, ids::BYTE, |o, v| o.put_byte(v as u8));
// Unsigned Rust integers widen to the next JFR type, so every reader shows their true value (the JDK
// prints an `@Unsigned byte` of 200 as -56). u64 keeps its bits in a long marked `@Unsigned`.
primitive!(u8, ids::SHORT, |o, v| o.put_varint(u64::from(v)));
primitive!(i16, ids::SHORT, |o, v| o.put_varint(u64::from(v as u16)));
primitive!(u16, ids::INT, |o, v| o.put_varint(u64::from(v)));
primitive!(i32, ids::INT, |o, v| o.put_varint(u64::from(v as u32)));
primitive!(u32, ids::LONG, |o, v| o.put_varint(u64::from(v)));
primitive!(i64, ids::LONG, |o, v| o.put_varint(v as u64));
primitive!(u64, ids::LONG, |o, v| o.put_varint(v), Annotation::marker(ids::UNSIGNED));
primitive!(usize, ids::LONG, |o, v| o.put_varint(v as u64), Annotation::marker(ids::UNSIGNED));
primitive!(isize, ids::LONG, |o, v| o.put_varint(v as u64));
primitive!(f32, ids::FLOAT, |o, v| o.put_float(v));
primitive!(f64, ids::DOUBLE, |o, v| o.put_double(v));
primitive!(char, ids::CHAR, |o, v: char| {
    // A JFR char is one UTF-16 code unit. A character outside the BMP needs two; its first alone
    // would be a lone surrogate, which readers refuse (jfrs drops the event, jfrview the file), so
    // it is written as U+FFFD REPLACEMENT CHARACTER. (A Rust char is never a surrogate itself.)
    o.put_varint(u64::from(u16::try_from(u32::from(v)).unwrap_or(0xFFFD)))
});

impl FieldType for String {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::STRING)
    }
    #[inline]
    fn encode(&self, out: &mut Encoder<'_>) {
        out.put_string(Some(self))
    }
}

impl FieldType for &'static str {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::STRING)
    }
    #[inline]
    fn encode(&self, out: &mut Encoder<'_>) {
        out.put_string(Some(self))
    }
}

impl FieldType for Option<String> {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::STRING)
    }
    fn encode(&self, out: &mut Encoder<'_>) {
        out.put_string(self.as_deref())
    }
}

// No `Vec<T>` fields: JDK 17's `jfr print` throws a NullPointerException on every array field of
// an event except stack frames (PrettyWriter.printArray passes no field descriptor to printValue;
// seen for arrays of strings, numbers and structs — the byte[] case of docs/jfr-format.md, "Metadata", is
// one instance), and the JDK's own event API does not allow array fields either. Every file we
// write must pass `jfr print`, so events offer no arrays; the format crate still reads and writes
// them (stack traces are arrays of frames).

/// A time span, recorded in nanoseconds (`@Timespan("NANOSECONDS")`).
impl FieldType for std::time::Duration {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::LONG).with(Annotation::value(ids::TIMESPAN, "NANOSECONDS"))
    }
    fn encode(&self, out: &mut Encoder<'_>) {
        out.put_varint(i64::try_from(self.as_nanos()).unwrap_or(i64::MAX) as u64)
    }
}

/// A wall-clock instant, recorded in milliseconds since the epoch (`@Timestamp`).
impl FieldType for std::time::SystemTime {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::LONG).with(Annotation::value(ids::TIMESTAMP, "MILLISECONDS_SINCE_EPOCH"))
    }
    fn encode(&self, out: &mut Encoder<'_>) {
        let ms = match self.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_millis() as i64,
            Err(e) => -(e.duration().as_millis() as i64),
        };
        out.put_varint(ms as u64)
    }
}

/// A byte count (`@DataAmount("BYTES")`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bytes(pub u64);

impl FieldType for Bytes {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::LONG).with(Annotation::value(ids::DATA_AMOUNT, "BYTES"))
    }
    fn encode(&self, out: &mut Encoder<'_>) {
        out.put_varint(self.0)
    }
}

/// A fraction 0.0–1.0 shown as a percentage (`@Percentage`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentage(pub f32);

impl FieldType for Percentage {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::FLOAT).with(Annotation::marker(ids::PERCENTAGE))
    }
    fn encode(&self, out: &mut Encoder<'_>) {
        out.put_float(self.0)
    }
}

pub use crate::threads::ThreadRef;

impl FieldType for ThreadRef {
    fn describe(name: &str, _: &mut TypeRegistry) -> Field {
        Field::new(name, ids::THREAD).pooled()
    }
    fn encode(&self, out: &mut Encoder<'_>) {
        crate::commit::note_thread_ref(self.0);
        out.put_varint(u64::from(self.0))
    }
}

/// Describes a field for the `event!` macro.
#[doc(hidden)]
pub fn __field<T: FieldType>(
    name: &str,
    label: Option<&str>,
    description: Option<&str>,
    registry: &mut TypeRegistry,
) -> Field {
    let mut f = T::describe(name, registry);
    f.annotations.insert(0, label_annotation(label.unwrap_or(name)));
    if let Some(d) = description {
        f.annotations.push(Annotation::value(ids::DESCRIPTION, d));
    }
    f
}

/// An event type declared with [`event!`](crate::event).
pub trait Event {
    /// The type's static description and settings.
    fn event_type() -> &'static EventType;
    /// Appends the type's own fields (not the implicit ones).
    fn write_fields(&self, out: &mut Encoder<'_>);

    /// Records the event now, as an instant (duration 0).
    #[inline(always)]
    fn commit(&self)
    where
        Self: Sized,
    {
        crate::commit::commit_event(Self::event_type(), |out| self.write_fields(out), None);
    }

    /// Records the event as having lasted from `span`'s start until now.
    #[inline(always)]
    fn commit_span(&self, span: Span)
    where
        Self: Sized,
    {
        crate::commit::commit_event(Self::event_type(), |out| self.write_fields(out), Some(span.start_ticks));
    }

    /// Starts a duration event: the returned guard commits it (with the time elapsed) when it is
    /// dropped or [`Timed::end`] is called; its fields can be changed meanwhile.
    fn begin(self) -> Timed<Self>
    where
        Self: Sized,
    {
        Timed { event: Some(self), span: Span::begin() }
    }

    /// Registers the type now (otherwise its first commit does): its metadata is then part of
    /// every chunk from the start, which deterministic recordings need.
    fn register()
    where
        Self: Sized,
    {
        Self::event_type().id();
    }

    /// The event type is enabled in the running recording (skip building expensive fields if not).
    fn is_enabled() -> bool
    where
        Self: Sized,
    {
        crate::commit::recording() && Self::event_type().is_enabled()
    }
}

/// The start of a duration event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    start_ticks: i64,
}

impl Span {
    /// Marks now as the start.
    pub fn begin() -> Span {
        Span { start_ticks: crate::clock::ticks() }
    }
}

/// A duration event in progress; commits on drop. See [`Event::begin`].
#[derive(Debug)]
pub struct Timed<E: Event> {
    event: Option<E>,
    span: Span,
}

impl<E: Event> Timed<E> {
    /// Commits now.
    pub fn end(mut self) {
        if let Some(e) = self.event.take() {
            e.commit_span(self.span);
        }
    }
    /// Drops the event without recording it.
    pub fn cancel(mut self) {
        self.event = None;
    }
}

impl<E: Event> std::ops::Deref for Timed<E> {
    type Target = E;
    fn deref(&self) -> &E {
        // The event is only taken by `end`/`cancel`, which consume the guard.
        self.event.as_ref().expect("event present until the guard is consumed")
    }
}

impl<E: Event> std::ops::DerefMut for Timed<E> {
    fn deref_mut(&mut self) -> &mut E {
        self.event.as_mut().expect("event present until the guard is consumed")
    }
}

impl<E: Event> Drop for Timed<E> {
    fn drop(&mut self) {
        if let Some(e) = self.event.take() {
            e.commit_span(self.span);
        }
    }
}

/// The metadata of a declared struct's fields (shared by [`event!`](crate::event) and
/// [`event_struct!`](crate::event_struct)).
#[doc(hidden)]
#[macro_export]
macro_rules! __describe_fields {
    ($registry:ident; $( $fname:ident : $fty:ty => ($($flabel:literal)?) ($($fdesc:literal)?) );*) => {
        ::std::vec![ $( $crate::__field::<$fty>(
            ::core::stringify!($fname),
            $crate::__opt!($($flabel)?),
            $crate::__opt!($($fdesc)?),
            $registry,
        ) ),* ]
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __opt {
    () => {
        None
    };
    ($e:expr) => {
        Some($e)
    };
}

/// Declares an event type.
///
/// ```
/// recorder::event! {
///     /// One handled request.
///     #[event(name = "app.Request", label = "Request", description = "An HTTP request", category = ["App", "HTTP"])]
///     pub struct Request {
///         #[field(label = "Path")]
///         pub path: String,
///         #[field(label = "Status", description = "HTTP status code")]
///         pub status: i32,
///         pub bytes: recorder::Bytes,
///     }
/// }
/// use recorder::Event;
/// Request { path: "/".into(), status: 200, bytes: recorder::Bytes(512) }.commit();
/// ```
///
/// Fields may be any [`FieldType`]: integers, floats, `bool`, `char`, strings,
/// [`Duration`](std::time::Duration), [`SystemTime`](std::time::SystemTime), [`Bytes`],
/// [`Percentage`], [`ThreadRef`], and structs declared with [`event_struct!`](crate::event_struct).
#[macro_export]
macro_rules! event {
    (
        $(#[doc = $doc:literal])*
        #[event(name = $name:literal, label = $label:literal $(, description = $desc:literal)? $(, category = [$($cat:literal),* $(,)?])? $(,)?)]
        $vis:vis struct $ty:ident {
            $(
                $(#[doc = $fdoc:literal])*
                $(#[field(label = $flabel:literal $(, description = $fdesc:literal)? $(,)?)])?
                $fvis:vis $fname:ident : $fty:ty
            ),* $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        $vis struct $ty {
            $( $(#[doc = $fdoc])* $fvis $fname : $fty ),*
        }

        impl $crate::Event for $ty {
            fn event_type() -> &'static $crate::EventType {
                static TYPE: $crate::EventType = $crate::EventType::new(
                    $name,
                    $label,
                    $crate::__opt!($($desc)?),
                    &[$($($cat),*)?],
                    |registry| $crate::__describe_fields!(registry; $( $fname: $fty => ($($flabel)?) ($($($fdesc)?)?) );*),
                );
                &TYPE
            }

            #[inline(always)]
            fn write_fields(&self, _out: &mut $crate::Encoder<'_>) {
                $( $crate::FieldType::encode(&self.$fname, _out); )*
            }
        }
    };
}

/// Declares a struct that can be an event field (encoded inline, as a nested JFR struct type).
///
/// ```
/// recorder::event_struct! {
///     #[struct_type(name = "app.Endpoint", label = "Endpoint")]
///     pub struct Endpoint { pub host: String, pub port: u16 }
/// }
/// ```
#[macro_export]
macro_rules! event_struct {
    (
        $(#[doc = $doc:literal])*
        #[struct_type(name = $name:literal, label = $label:literal $(,)?)]
        $vis:vis struct $ty:ident {
            $(
                $(#[doc = $fdoc:literal])*
                $(#[field(label = $flabel:literal $(, description = $fdesc:literal)? $(,)?)])?
                $fvis:vis $fname:ident : $fty:ty
            ),* $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        $vis struct $ty {
            $( $(#[doc = $fdoc])* $fvis $fname : $fty ),*
        }

        impl $crate::FieldType for $ty {
            fn describe(name: &str, registry: &mut $crate::TypeRegistry) -> $crate::__jfr::metadata::Field {
                let fields =
                    $crate::__describe_fields!(registry; $( $fname: $fty => ($($flabel)?) ($($($fdesc)?)?) );*);
                let id = registry.struct_type($name, $label, fields);
                $crate::__jfr::metadata::Field::new(name, id)
            }
            #[inline]
            fn encode(&self, _out: &mut $crate::Encoder<'_>) {
                $( $crate::FieldType::encode(&self.$fname, _out); )*
            }
        }
    };
}
