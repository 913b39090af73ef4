//! Typed fields of the built-in event types. `builtin.rs` declares each type once
//! (`builtin_event!`): the metadata's field list and the struct its writer fills are made from
//! that one declaration, and the JFR type of every field is the one of its Rust type here
//! ([`FieldValue`]). So a writer cannot write the fields in another order or of another kind
//! than the metadata declares: it would not compile.

use super::{EventOut, ThreadKey};
use crate::stack::StackKey;
use crate::threads::ThreadRef;
use jfr_format::metadata::ids;

/// A Rust type a built-in event's field has: the JFR type the metadata declares for it, and how
/// it is written.
pub trait FieldValue {
    /// The field's type in the metadata.
    const TYPE_ID: u64;
    /// The field holds a constant-pool key.
    const POOLED: bool = false;
    /// Writes the value (a reference is noted for the segment's checkpoint).
    fn write(&self, e: &mut EventOut<'_>);
}

/// Fields written in their declared order: a built-in event type's, or a group of fields that
/// follows them (the samples' context block).
pub trait Fields {
    /// Writes every field, in the declared order.
    fn write_fields(&self, e: &mut EventOut<'_>);
}

/// A built-in event type.
pub trait TypedEvent: Fields {
    /// Its type id.
    const TYPE_ID: u64;
}

/// A key of the class pool (from [`super::ChunkWriter::class_key`]; 0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassKey(pub u64);

/// A key of the fixed thread-state pool (`jfr_format::metadata::THREAD_STATES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadStateKey(pub u64);

/// The settings events' `eventThread`: the thread that wrote them (0 in deterministic mode),
/// noted like a [`ThreadRef`]. Its own type so the mutation `settings_thread_unreferenced`
/// (`loom-tests/README.md`) can forget the note of these events alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingsThread(pub u32);

impl FieldValue for i64 {
    const TYPE_ID: u64 = ids::LONG;
    fn write(&self, e: &mut EventOut<'_>) {
        e.long(*self);
    }
}

/// An unsigned `long` (counts, bytes): written as the `long` of the same bits.
impl FieldValue for u64 {
    const TYPE_ID: u64 = ids::LONG;
    fn write(&self, e: &mut EventOut<'_>) {
        e.long(*self as i64);
    }
}

impl FieldValue for i32 {
    const TYPE_ID: u64 = ids::INT;
    fn write(&self, e: &mut EventOut<'_>) {
        e.int(*self);
    }
}

/// An unsigned `int`: written as the `int` of the same bits.
impl FieldValue for u32 {
    const TYPE_ID: u64 = ids::INT;
    fn write(&self, e: &mut EventOut<'_>) {
        e.int(*self as i32);
    }
}

impl FieldValue for f32 {
    const TYPE_ID: u64 = ids::FLOAT;
    fn write(&self, e: &mut EventOut<'_>) {
        e.float(*self);
    }
}

impl FieldValue for f64 {
    const TYPE_ID: u64 = ids::DOUBLE;
    fn write(&self, e: &mut EventOut<'_>) {
        e.double(*self);
    }
}

impl FieldValue for &str {
    const TYPE_ID: u64 = ids::STRING;
    fn write(&self, e: &mut EventOut<'_>) {
        e.string(self);
    }
}

/// A string or null.
impl FieldValue for Option<&str> {
    const TYPE_ID: u64 = ids::STRING;
    fn write(&self, e: &mut EventOut<'_>) {
        e.optional_string(*self);
    }
}

impl FieldValue for ThreadRef {
    const TYPE_ID: u64 = ids::THREAD;
    const POOLED: bool = true;
    fn write(&self, e: &mut EventOut<'_>) {
        e.thread(self.0);
    }
}

impl FieldValue for ThreadKey {
    const TYPE_ID: u64 = ids::THREAD;
    const POOLED: bool = true;
    fn write(&self, e: &mut EventOut<'_>) {
        e.thread_key(*self);
    }
}

impl FieldValue for SettingsThread {
    const TYPE_ID: u64 = ids::THREAD;
    const POOLED: bool = true;
    fn write(&self, e: &mut EventOut<'_>) {
        #[cfg(not(recorder_mutation = "settings_thread_unreferenced"))]
        e.thread(self.0);
        // The bug I7 forbids, for the loom models to catch.
        #[cfg(recorder_mutation = "settings_thread_unreferenced")]
        e.unreferenced_thread(self.0);
    }
}

impl FieldValue for StackKey {
    const TYPE_ID: u64 = ids::STACK_TRACE;
    const POOLED: bool = true;
    fn write(&self, e: &mut EventOut<'_>) {
        e.stack(*self);
    }
}

impl FieldValue for ClassKey {
    const TYPE_ID: u64 = ids::CLASS;
    const POOLED: bool = true;
    fn write(&self, e: &mut EventOut<'_>) {
        e.class(self.0);
    }
}

impl FieldValue for ThreadStateKey {
    const TYPE_ID: u64 = ids::THREAD_STATE;
    const POOLED: bool = true;
    fn write(&self, e: &mut EventOut<'_>) {
        e.fixed(self.0);
    }
}
