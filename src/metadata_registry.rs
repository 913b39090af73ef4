//! The process-wide registry of event and struct types, and the metadata descriptor built from it.
//!
//! Type ids are assigned once per process and never reused, so they are stable across chunks and
//! recordings. The descriptor's metadata id is the registry version (twice it, plus one where
//! `jdk.ExecutionSample` has `spanId`): it changes exactly when a type is added or that layout
//! differs (docs/jfr-format.md, "Metadata": the JDK reuses the previous chunk's descriptor when
//! the id is the same), and types are only ever added, so metadata grows within a chunk.

use crate::builtin;
use crate::fork::ForkSafeMutex as Mutex;
use crate::sync::statics::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use jfr_format::metadata::{event_class, jdk_types, label_annotation, Class, EventTypeSpec, Field, Metadata, Region};
use std::collections::BTreeMap;

/// First id for user types.
const FIRST_USER_TYPE: u64 = 1000;

/// Per-type settings, applied at start, at registration and at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSettings {
    /// Record the type at all.
    pub enabled: bool,
    /// Drop duration events shorter than this.
    pub threshold: std::time::Duration,
    /// Capture the committing thread's stack.
    pub stack_trace: bool,
}

impl Default for EventSettings {
    fn default() -> EventSettings {
        EventSettings { enabled: true, threshold: std::time::Duration::ZERO, stack_trace: true }
    }
}

/// The static description and run-time settings of one event type. Made by [`event!`](crate::event).
pub struct EventType {
    /// Event name, e.g. `app.Request`.
    pub name: &'static str,
    /// Display label.
    pub label: &'static str,
    /// Description.
    pub description: Option<&'static str>,
    /// Category path, outermost first.
    pub category: &'static [&'static str],
    /// The type's own fields (after the implicit ones).
    pub fields: fn(&mut TypeRegistry) -> Vec<Field>,
    pub(crate) id: AtomicU64,
    pub(crate) enabled: AtomicBool,
    pub(crate) threshold_ticks: AtomicI64,
    pub(crate) stack_trace: AtomicBool,
    /// The id, while the settings are the plain ones (enabled, no threshold, no stack trace): the
    /// commit path then checks one word instead of four. 0 otherwise.
    pub(crate) fast_id: AtomicU64,
}

impl std::fmt::Debug for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventType").field("name", &self.name).finish()
    }
}

impl EventType {
    /// Used by [`event!`](crate::event).
    #[doc(hidden)]
    pub const fn new(
        name: &'static str,
        label: &'static str,
        description: Option<&'static str>,
        category: &'static [&'static str],
        fields: fn(&mut TypeRegistry) -> Vec<Field>,
    ) -> EventType {
        EventType {
            name,
            label,
            description,
            category,
            fields,
            id: AtomicU64::new(0),
            enabled: AtomicBool::new(true),
            threshold_ticks: AtomicI64::new(0),
            stack_trace: AtomicBool::new(true),
            fast_id: AtomicU64::new(0),
        }
    }

    /// The type id, registering the type on first use.
    #[inline]
    pub fn id(&'static self) -> u64 {
        // Acquire: pairs with the Release store in `TypeRegistry::register`, so the settings
        // applied at registration are visible.
        match self.id.load(Ordering::Acquire) {
            0 => register(self),
            id => id,
        }
    }

    /// The type is enabled.
    pub fn is_enabled(&self) -> bool {
        // Relaxed: a setting; a commit racing with a change may go either way.
        self.enabled.load(Ordering::Relaxed)
    }
}

/// Registered types. Passed to [`crate::FieldType::describe`] so nested structs can register.
#[derive(Debug)]
pub struct TypeRegistry {
    classes: Vec<Class>,
    struct_ids: BTreeMap<String, u64>,
    events: Vec<&'static EventType>,
    next_id: u64,
    version: u64,
    settings: BTreeMap<String, EventSettings>,
}

static REGISTRY: Mutex<TypeRegistry> = Mutex::new(TypeRegistry {
    classes: Vec::new(),
    struct_ids: BTreeMap::new(),
    events: Vec::new(),
    next_id: FIRST_USER_TYPE,
    version: 1,
    settings: BTreeMap::new(),
});
/// [`REGISTRY`], for the atfork handlers, which hold it across fork.
pub(crate) static REGISTRY_LOCK: &dyn crate::fork::HeldAcrossFork = &REGISTRY;

impl TypeRegistry {
    /// Registers (once) a struct type with these fields; returns its id.
    ///
    /// A field that is itself a struct is declared flattened: its fields take its place, named
    /// `field_subfield` (labelled "Field Subfield"); the bytes on the wire are the same. JMC
    /// flattens one level of inline struct in an event by itself, and gives a deeper struct type
    /// a new identity in every chunk (its `StructContentType` compares by identity, and each
    /// chunk's parser makes its own), so every chunk of an event with a struct in a struct became
    /// a new event type there.
    pub fn struct_type(&mut self, name: &str, label: &str, fields: Vec<Field>) -> u64 {
        if let Some(&id) = self.struct_ids.get(name) {
            return id;
        }
        let fields = fields.into_iter().flat_map(|f| self.flattened(f)).collect();
        let id = self.next_id;
        self.next_id += 1;
        let mut class = Class::new(id, name);
        class.fields = fields;
        class.annotations.push(label_annotation(label));
        self.classes.push(class);
        self.struct_ids.insert(name.to_owned(), id);
        self.version += 1;
        id
    }

    /// `field` if it is not an inline struct, else the struct's (already flat) fields renamed.
    fn flattened(&self, field: Field) -> Vec<Field> {
        let inner = match self.struct_ids.values().find(|&&id| id == field.type_id) {
            Some(&id) if !field.constant_pool && !field.array => self.classes.iter().find(|c| c.id == id),
            _ => None,
        };
        let Some(inner) = inner else {
            return vec![field];
        };
        let outer_label = label_of(&field).unwrap_or(&field.name).to_owned();
        inner
            .fields
            .iter()
            .map(|sub| {
                let mut f = sub.clone();
                f.name = format!("{}_{}", field.name, sub.name);
                let sub_label = label_of(sub).unwrap_or(&sub.name).to_owned();
                f.annotations.retain(|a| a.type_id != jfr_format::metadata::ids::LABEL);
                f.annotations.push(label_annotation(&format!("{outer_label} {sub_label}")));
                f
            })
            .collect()
    }
}

fn label_of(field: &Field) -> Option<&str> {
    field.annotations.iter().find(|a| a.type_id == jfr_format::metadata::ids::LABEL).and_then(|a| a.get("value"))
}

/// Registers `ty` (first commit of the type in this process); returns its id.
#[cold]
pub(crate) fn register(ty: &'static EventType) -> u64 {
    let mut reg = REGISTRY.lock();
    // Relaxed: we hold the registry lock, which orders registrations.
    let existing = ty.id.load(Ordering::Relaxed);
    if existing != 0 {
        return existing;
    }
    if let Some(other) = reg.events.iter().find(|e| e.name == ty.name) {
        // Two declarations with one name: share the id (the first declaration's fields win).
        let id = other.id.load(Ordering::Relaxed);
        // (`fast_id` stays 0: its commits check the settings one by one.)
        ty.id.store(id, Ordering::Release);
        return id;
    }
    let fields = (ty.fields)(&mut reg);
    let id = reg.next_id;
    reg.next_id += 1;
    let class = event_class(EventTypeSpec {
        id,
        name: ty.name,
        label: ty.label,
        description: ty.description,
        category: ty.category,
        duration: true,
        thread: true,
        stack_trace: true,
        fields,
    });
    reg.classes.push(class);
    reg.events.push(ty);
    reg.version += 1;
    let settings = reg.settings.get(ty.name).copied().unwrap_or_default();
    apply(ty, settings, id);
    // Release: publishes the settings stored by `apply`; pairs with the Acquire load in
    // `EventType::id`.
    ty.id.store(id, Ordering::Release);
    id
}

fn apply(ty: &EventType, s: EventSettings, id: u64) {
    // Relaxed: settings; commits racing with a change may see either value.
    ty.enabled.store(s.enabled, Ordering::Relaxed);
    let threshold_ticks = crate::clock::nanos_to_ticks(i64::try_from(s.threshold.as_nanos()).unwrap_or(i64::MAX));
    ty.threshold_ticks.store(threshold_ticks, Ordering::Relaxed);
    ty.stack_trace.store(s.stack_trace, Ordering::Relaxed);
    let plain = s.enabled && threshold_ticks <= 0 && !s.stack_trace;
    // Release: a commit that sees the id here (Acquire load in `commit::commit_event`) also sees
    // the registration it belongs to, as through `EventType::id`.
    ty.fast_id.store(if plain { id } else { 0 }, Ordering::Release);
}

/// Sets the settings of the event type called `name`, now if it is registered and at its
/// registration otherwise.
pub(crate) fn set_settings(name: &str, settings: EventSettings) {
    let mut reg = REGISTRY.lock();
    reg.settings.insert(name.to_owned(), settings);
    if let Some(ty) = reg.events.iter().find(|e| e.name == name) {
        // Relaxed: under the registry lock, which orders registrations.
        apply(ty, settings, ty.id.load(Ordering::Relaxed));
    }
}

/// Current settings of every registered user event type and every type with explicit settings.
pub(crate) fn all_settings() -> Vec<(String, u64, EventSettings)> {
    let reg = REGISTRY.lock();
    let mut out: Vec<(String, u64, EventSettings)> = reg
        .events
        .iter()
        .map(|e| {
            let s = reg.settings.get(e.name).copied().unwrap_or_default();
            (e.name.to_owned(), e.id.load(Ordering::Relaxed), s)
        })
        .collect();
    for (name, s) in &reg.settings {
        if !out.iter().any(|(n, _, _)| n == name) {
            out.push((name.clone(), 0, *s));
        }
    }
    out
}

/// Declares a built-in class that only some recordings use (once per process; it stays declared,
/// like the types of registered events).
#[cfg(feature = "push")]
pub(crate) fn declare_builtin(class: Class) {
    let mut reg = REGISTRY.lock();
    if reg.classes.iter().any(|c| c.id == class.id) {
        return;
    }
    reg.classes.push(class);
    reg.version += 1;
}

/// The registry version: changes whenever a type is added.
pub(crate) fn version() -> u64 {
    REGISTRY.lock().version
}

/// The version of the descriptor [`metadata`] gives now (its metadata id): the registry version
/// and whether `jdk.ExecutionSample` has `spanId`.
pub(crate) fn descriptor_version() -> u64 {
    let span_ids = builtin::declared_span_ids();
    REGISTRY.lock().version * 2 + u64::from(span_ids)
}

/// The full descriptor: the JDK 17 type set, the built-in events, and every registered type.
pub(crate) fn metadata() -> Metadata {
    let reg = REGISTRY.lock();
    let mut classes = jdk_types();
    let span_ids = builtin::declared_span_ids();
    classes.extend(builtin::classes());
    classes.extend(reg.classes.iter().cloned());
    Metadata { id: reg.version * 2 + u64::from(span_ids), classes, region: Region::default() }
}

/// Names of every known event type (built-in and registered).
pub(crate) fn event_names() -> Vec<String> {
    metadata().classes.iter().filter(|c| c.is_event()).map(|c| c.name.clone()).collect()
}
