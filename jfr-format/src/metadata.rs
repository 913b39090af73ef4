//! The metadata model: the classes (event types, struct types, primitives, annotations, settings)
//! a chunk declares, as described in docs/jfr-format.md, "Metadata". The same model is produced by the reader and
//! consumed by the writer, so a chunk's metadata can be copied or extended losslessly.

use std::collections::HashMap;

/// `superType` of event types.
pub const SUPER_EVENT: &str = "jdk.jfr.Event";
/// `superType` of annotation types.
pub const SUPER_ANNOTATION: &str = "java.lang.annotation.Annotation";
/// `superType` of setting types.
pub const SUPER_SETTING: &str = "jdk.jfr.SettingControl";

/// An annotation on a class, field or setting: the annotation type's id and its attribute values
/// as written (array values appear as `value-0`, `value-1`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    /// Id of the annotation type.
    pub type_id: u64,
    /// Attribute name and value pairs.
    pub values: Vec<(String, String)>,
}

impl Annotation {
    /// An annotation without values.
    pub fn marker(type_id: u64) -> Annotation {
        Annotation { type_id, values: Vec::new() }
    }
    /// An annotation with one `value` attribute.
    pub fn value(type_id: u64, value: impl Into<String>) -> Annotation {
        Annotation { type_id, values: vec![("value".into(), value.into())] }
    }
    /// An annotation with an array-valued `value` attribute.
    pub fn values<S: Into<String>>(type_id: u64, values: impl IntoIterator<Item = S>) -> Annotation {
        Annotation {
            type_id,
            values: values.into_iter().enumerate().map(|(i, v)| (format!("value-{i}"), v.into())).collect(),
        }
    }
    /// The single `value` attribute, if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A field of a class. Field order is wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name.
    pub name: String,
    /// Id of the field's type.
    pub type_id: u64,
    /// The field holds a constant-pool key instead of an inline value.
    pub constant_pool: bool,
    /// The field is an array (`dimension="1"`).
    pub array: bool,
    /// Annotations (label, timestamp, …).
    pub annotations: Vec<Annotation>,
}

impl Field {
    /// A plain inline field.
    pub fn new(name: impl Into<String>, type_id: u64) -> Field {
        Field { name: name.into(), type_id, constant_pool: false, array: false, annotations: Vec::new() }
    }
    /// The same field stored as a constant-pool key.
    pub fn pooled(mut self) -> Field {
        self.constant_pool = true;
        self
    }
    /// The same field as an array.
    pub fn array(mut self) -> Field {
        self.array = true;
        self
    }
    /// Adds an annotation.
    pub fn with(mut self, annotation: Annotation) -> Field {
        self.annotations.push(annotation);
        self
    }
}

/// A setting of an event type (`enabled`, `threshold`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Setting name.
    pub name: String,
    /// Id of the setting's type (a class with superType `jdk.jfr.SettingControl`).
    pub type_id: u64,
    /// Default value as text.
    pub default_value: String,
    /// Annotations.
    pub annotations: Vec<Annotation>,
}

/// A declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// Type id, unique in the chunk, never 0 or 1.
    pub id: u64,
    /// Fully qualified name (`jdk.ExecutionSample`, `long`, …).
    pub name: String,
    /// `jdk.jfr.Event`, `java.lang.annotation.Annotation`, `jdk.jfr.SettingControl` or none.
    pub super_type: Option<String>,
    /// Encoded as its single field.
    pub simple_type: bool,
    /// Fields in wire order.
    pub fields: Vec<Field>,
    /// Settings (event types).
    pub settings: Vec<Setting>,
    /// Type annotations.
    pub annotations: Vec<Annotation>,
}

impl Class {
    /// A class with no fields.
    pub fn new(id: u64, name: impl Into<String>) -> Class {
        Class {
            id,
            name: name.into(),
            super_type: None,
            simple_type: false,
            fields: Vec::new(),
            settings: Vec::new(),
            annotations: Vec::new(),
        }
    }
    /// The class is an event type.
    pub fn is_event(&self) -> bool {
        self.super_type.as_deref() == Some(SUPER_EVENT)
    }
    /// Index of the field called `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
    /// The annotation of type `type_id`, if present.
    pub fn annotation(&self, type_id: u64) -> Option<&Annotation> {
        self.annotations.iter().find(|a| a.type_id == type_id)
    }
}

/// The `region` element (mandatory for the JDK reader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Attribute pairs, e.g. `locale="en"`, `gmtOffset="0"`.
    pub attributes: Vec<(String, String)>,
}

impl Default for Region {
    fn default() -> Region {
        Region { attributes: vec![("locale".into(), "en".into()), ("gmtOffset".into(), "0".into())] }
    }
}

/// A complete metadata descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metadata {
    /// The metadata id: identical ids must mean identical descriptors (docs/jfr-format.md,
    /// "Metadata").
    pub id: u64,
    /// Declared classes.
    pub classes: Vec<Class>,
    /// The `region` element.
    pub region: Region,
}

impl Metadata {
    /// Builds an id → index table for lookups.
    pub fn index(&self) -> HashMap<u64, usize> {
        self.classes.iter().enumerate().map(|(i, c)| (c.id, i)).collect()
    }
    /// The class with id `id`.
    pub fn class(&self, id: u64) -> Option<&Class> {
        self.classes.iter().find(|c| c.id == id)
    }
    /// The class called `name`.
    pub fn class_by_name(&self, name: &str) -> Option<&Class> {
        self.classes.iter().find(|c| c.name == name)
    }
    /// Both descriptors declare the same classes (in the same order) and region; the ids are not
    /// compared. When this is false for two descriptors of one recording, they need different ids
    /// (docs/jfr-format.md, "Metadata").
    pub fn same_descriptor(&self, other: &Metadata) -> bool {
        self.classes == other.classes && self.region == other.region
    }
    /// The id this descriptor should be written with when `previous` was the recording's last
    /// descriptor: `previous.id` if nothing changed, else the next id.
    pub fn id_after(&self, previous: &Metadata) -> u64 {
        if self.same_descriptor(previous) {
            previous.id
        } else {
            previous.id.wrapping_add(1).max(1)
        }
    }
}

/// Names of the eight primitive types plus `java.lang.String`: field-less classes the readers
/// decode natively.
pub const PRIMITIVES: [&str; 9] =
    ["boolean", "char", "float", "double", "byte", "short", "int", "long", "java.lang.String"];

/// Fixed type ids of the JDK 17 type set declared by [`jdk_types`], shared by every chunk this
/// project writes so that ids stay stable across chunks and recordings.
pub mod ids {
    #![allow(missing_docs)]
    pub const BOOLEAN: u64 = 4;
    pub const CHAR: u64 = 5;
    pub const FLOAT: u64 = 6;
    pub const DOUBLE: u64 = 7;
    pub const BYTE: u64 = 8;
    pub const SHORT: u64 = 9;
    pub const INT: u64 = 10;
    pub const LONG: u64 = 11;
    pub const STRING: u64 = 20;
    pub const CLASS: u64 = 21;
    pub const THREAD: u64 = 22;
    pub const CLASS_LOADER: u64 = 23;
    pub const FRAME_TYPE: u64 = 24;
    pub const THREAD_STATE: u64 = 25;
    pub const STACK_TRACE: u64 = 26;
    pub const STACK_FRAME: u64 = 27;
    pub const METHOD: u64 = 28;
    pub const MODULE: u64 = 29;
    pub const PACKAGE: u64 = 30;
    pub const SYMBOL: u64 = 31;
    pub const THREAD_GROUP: u64 = 32;

    pub const LABEL: u64 = 200;
    pub const DESCRIPTION: u64 = 201;
    pub const CATEGORY: u64 = 202;
    pub const TIMESTAMP: u64 = 203;
    pub const TIMESPAN: u64 = 204;
    pub const DATA_AMOUNT: u64 = 205;
    pub const UNSIGNED: u64 = 206;
    pub const CONTENT_TYPE: u64 = 207;
    pub const NAME: u64 = 208;
    pub const PERCENTAGE: u64 = 209;
    pub const FREQUENCY: u64 = 210;
    pub const MEMORY_ADDRESS: u64 = 211;
    pub const EXPERIMENTAL: u64 = 212;

    pub const SETTING_ENABLED: u64 = 250;
    pub const SETTING_THRESHOLD: u64 = 251;
    pub const SETTING_STACK_TRACE: u64 = 252;
    pub const SETTING_PERIOD: u64 = 253;

    /// First id free for event types.
    pub const FIRST_EVENT: u64 = 100;
}

/// Frame type pool keys and descriptions, as the JDK and JMC name them.
pub const FRAME_TYPES: [(u64, &str); 7] = [
    (0, "Interpreted"),
    (1, "JIT compiled"),
    (2, "Inlined"),
    (3, "Native"),
    (4, "C++"),
    (5, "Kernel"),
    (6, "C1 compiled"),
];

/// Frame type key for native frames.
pub const FRAME_TYPE_NATIVE: u64 = 3;
/// Frame type key for inlined frames.
pub const FRAME_TYPE_INLINED: u64 = 2;

/// Thread state pool keys used by the JDK.
pub const THREAD_STATES: [(u64, &str); 5] = [
    (0, "STATE_NEW"),
    (2, "STATE_TERMINATED"),
    (5, "STATE_RUNNABLE"),
    (225, "STATE_SLEEPING"),
    (THREAD_STATE_WAITING, "STATE_WAITING"),
];

/// Thread state key for a thread in an interruptible wait (Linux `S`: poll, recv, sleep, futex).
pub const THREAD_STATE_SLEEPING: u64 = 225;
/// Thread state key for a thread in an uninterruptible wait (Linux `D`: disk I/O, page fault):
/// JVMTI's ALIVE | WAITING_INDEFINITELY | WAITING bits (no JDK state names it).
pub const THREAD_STATE_WAITING: u64 = 0x91;

/// Thread state key for a running thread.
pub const THREAD_STATE_RUNNABLE: u64 = 5;

fn label(text: &str) -> Annotation {
    Annotation::value(ids::LABEL, text)
}

/// Builds an annotation `@Label(text)`.
pub fn label_annotation(text: &str) -> Annotation {
    label(text)
}

/// The JDK 17 type set (docs/jfr-format.md, "Metadata") with the fixed ids of [`ids`]:
/// primitives, String, the stack-trace and thread types, the common annotation types and the four
/// standard setting types.
pub fn jdk_types() -> Vec<Class> {
    use ids::*;
    let mut classes = Vec::new();
    for (id, name) in [
        (BOOLEAN, "boolean"),
        (CHAR, "char"),
        (FLOAT, "float"),
        (DOUBLE, "double"),
        (BYTE, "byte"),
        (SHORT, "short"),
        (INT, "int"),
        (LONG, "long"),
        (STRING, "java.lang.String"),
    ] {
        classes.push(Class::new(id, name));
    }
    let annotation = |id: u64, name: &str, value: bool, array: bool, label_text: &str| {
        let mut c = Class::new(id, name);
        c.super_type = Some(SUPER_ANNOTATION.into());
        if value {
            let mut f = Field::new("value", STRING);
            if array {
                f = f.array();
            }
            c.fields.push(f);
        }
        c.annotations.push(label(label_text));
        c
    };
    classes.push(annotation(LABEL, "jdk.jfr.Label", true, false, "Label"));
    classes.push(annotation(DESCRIPTION, "jdk.jfr.Description", true, false, "Description"));
    classes.push(annotation(CATEGORY, "jdk.jfr.Category", true, true, "Category"));
    classes.push(annotation(NAME, "jdk.jfr.Name", true, false, "Name"));
    classes.push(annotation(EXPERIMENTAL, "jdk.jfr.Experimental", false, false, "Experimental"));
    let mut content_type = annotation(CONTENT_TYPE, "jdk.jfr.ContentType", false, false, "Content Type");
    content_type.annotations.clear();
    classes.push(content_type);
    for (id, name, value, text) in [
        (TIMESTAMP, "jdk.jfr.Timestamp", true, "Timestamp"),
        (TIMESPAN, "jdk.jfr.Timespan", true, "Timespan"),
        (DATA_AMOUNT, "jdk.jfr.DataAmount", true, "Data Amount"),
        (UNSIGNED, "jdk.jfr.Unsigned", false, "Unsigned Value"),
        (PERCENTAGE, "jdk.jfr.Percentage", false, "Percentage"),
        (FREQUENCY, "jdk.jfr.Frequency", false, "Frequency"),
        (MEMORY_ADDRESS, "jdk.jfr.MemoryAddress", false, "Memory Address"),
    ] {
        let mut c = annotation(id, name, value, false, text);
        c.annotations.push(Annotation::marker(CONTENT_TYPE));
        classes.push(c);
    }
    for (id, name, text) in [
        (SETTING_ENABLED, "jdk.settings.Enabled", "Enabled"),
        (SETTING_THRESHOLD, "jdk.settings.Threshold", "Threshold"),
        (SETTING_STACK_TRACE, "jdk.settings.StackTrace", "Stack Trace"),
        (SETTING_PERIOD, "jdk.settings.Period", "Period"),
    ] {
        let mut c = Class::new(id, name);
        c.super_type = Some(SUPER_SETTING.into());
        c.annotations.push(label(text));
        classes.push(c);
    }

    let mut symbol = Class::new(SYMBOL, "jdk.types.Symbol");
    symbol.simple_type = true;
    symbol.fields.push(Field::new("string", STRING).with(label("String")));
    symbol.annotations.push(label("Symbol"));
    classes.push(symbol);

    let mut thread_group = Class::new(THREAD_GROUP, "jdk.types.ThreadGroup");
    thread_group.fields.push(Field::new("parent", THREAD_GROUP).pooled().with(label("Parent")));
    thread_group.fields.push(Field::new("name", STRING).with(label("Name")));
    thread_group.annotations.push(label("Thread Group"));
    classes.push(thread_group);

    let mut thread = Class::new(THREAD, "java.lang.Thread");
    thread.fields.push(Field::new("osName", STRING).with(label("OS Thread Name")));
    thread.fields.push(Field::new("osThreadId", LONG).with(label("OS Thread Id")));
    thread.fields.push(Field::new("javaName", STRING).with(label("Java Thread Name")));
    thread.fields.push(Field::new("javaThreadId", LONG).with(label("Java Thread Id")));
    thread.fields.push(Field::new("group", THREAD_GROUP).pooled().with(label("Java Thread Group")));
    thread.annotations.push(label("Thread"));
    classes.push(thread);

    let mut class_loader = Class::new(CLASS_LOADER, "jdk.types.ClassLoader");
    class_loader.fields.push(Field::new("type", CLASS).pooled().with(label("Type")));
    class_loader.fields.push(Field::new("name", SYMBOL).pooled().with(label("Name")));
    class_loader.annotations.push(label("Java Class Loader"));
    classes.push(class_loader);

    let mut module = Class::new(MODULE, "jdk.types.Module");
    module.fields.push(Field::new("name", SYMBOL).pooled().with(label("Name")));
    module.fields.push(Field::new("version", SYMBOL).pooled().with(label("Version")));
    module.fields.push(Field::new("location", SYMBOL).pooled().with(label("Location")));
    module.fields.push(Field::new("classLoader", CLASS_LOADER).pooled().with(label("Class Loader")));
    module.annotations.push(label("Module"));
    classes.push(module);

    let mut package = Class::new(PACKAGE, "jdk.types.Package");
    package.fields.push(Field::new("name", SYMBOL).pooled().with(label("Name")));
    package.fields.push(Field::new("module", MODULE).pooled().with(label("Module")));
    package.fields.push(Field::new("exported", BOOLEAN).with(label("Exported")));
    package.annotations.push(label("Package"));
    classes.push(package);

    let mut class = Class::new(CLASS, "java.lang.Class");
    class.fields.push(Field::new("classLoader", CLASS_LOADER).pooled().with(label("Class Loader")));
    class.fields.push(Field::new("name", SYMBOL).pooled().with(label("Name")));
    class.fields.push(Field::new("package", PACKAGE).pooled().with(label("Package")));
    class.fields.push(Field::new("modifiers", INT).with(label("Access Modifiers")));
    class.fields.push(Field::new("hidden", BOOLEAN).with(label("Hidden")));
    class.annotations.push(label("Java Class"));
    classes.push(class);

    let mut method = Class::new(METHOD, "jdk.types.Method");
    method.fields.push(Field::new("type", CLASS).pooled().with(label("Type")));
    method.fields.push(Field::new("name", SYMBOL).pooled().with(label("Name")));
    method.fields.push(Field::new("descriptor", SYMBOL).pooled().with(label("Descriptor")));
    method.fields.push(Field::new("modifiers", INT).with(label("Access Modifiers")));
    method.fields.push(Field::new("hidden", BOOLEAN).with(label("Hidden")));
    method.annotations.push(label("Java Method"));
    classes.push(method);

    let mut frame_type = Class::new(FRAME_TYPE, "jdk.types.FrameType");
    frame_type.simple_type = true;
    frame_type.fields.push(Field::new("description", STRING).with(label("Description")));
    frame_type.annotations.push(label("Frame type"));
    classes.push(frame_type);

    let mut frame = Class::new(STACK_FRAME, "jdk.types.StackFrame");
    frame.fields.push(Field::new("method", METHOD).pooled().with(label("Java Method")));
    frame.fields.push(Field::new("lineNumber", INT).with(label("Line Number")));
    frame.fields.push(Field::new("bytecodeIndex", INT).with(label("Bytecode Index")));
    frame.fields.push(Field::new("type", FRAME_TYPE).pooled().with(label("Frame Type")));
    classes.push(frame);

    let mut trace = Class::new(STACK_TRACE, "jdk.types.StackTrace");
    trace.fields.push(Field::new("truncated", BOOLEAN).with(label("Truncated")));
    trace.fields.push(Field::new("frames", STACK_FRAME).array().with(label("Stack Frames")));
    trace.annotations.push(label("Stacktrace"));
    classes.push(trace);

    let mut state = Class::new(THREAD_STATE, "jdk.types.ThreadState");
    state.simple_type = true;
    state.fields.push(Field::new("name", STRING).with(label("Name")));
    state.annotations.push(label("Java Thread State"));
    classes.push(state);

    classes
}

/// The implicit leading fields of an event type: `startTime`, optionally `duration`, then
/// optionally `eventThread` and `stackTrace` (docs/jfr-format.md, "Records and implicit fields").
pub fn event_fields(duration: bool, thread: bool, stack_trace: bool) -> Vec<Field> {
    let mut fields = vec![Field::new("startTime", ids::LONG)
        .with(label("Start Time"))
        .with(Annotation::value(ids::TIMESTAMP, "TICKS"))];
    if duration {
        fields.push(
            Field::new("duration", ids::LONG).with(label("Duration")).with(Annotation::value(ids::TIMESPAN, "TICKS")),
        );
    }
    if thread {
        fields.push(Field::new("eventThread", ids::THREAD).pooled().with(label("Event Thread")));
    }
    if stack_trace {
        fields.push(Field::new("stackTrace", ids::STACK_TRACE).pooled().with(label("Stack Trace")));
    }
    fields
}

/// Describes an event type to [`event_class`].
#[derive(Debug, Clone)]
pub struct EventTypeSpec<'a> {
    /// Type id (≥ [`ids::FIRST_EVENT`]).
    pub id: u64,
    /// Event name, e.g. `app.Request`.
    pub name: &'a str,
    /// Display label.
    pub label: &'a str,
    /// Description, if any.
    pub description: Option<&'a str>,
    /// Category path, outermost first.
    pub category: &'a [&'a str],
    /// Has a `duration` field.
    pub duration: bool,
    /// Has an `eventThread` field.
    pub thread: bool,
    /// Has a `stackTrace` field.
    pub stack_trace: bool,
    /// The type's own fields, after the implicit ones.
    pub fields: Vec<Field>,
}

/// Builds an event class with the implicit fields, annotations and standard settings.
pub fn event_class(spec: EventTypeSpec<'_>) -> Class {
    let mut c = Class::new(spec.id, spec.name);
    c.super_type = Some(SUPER_EVENT.into());
    c.fields = event_fields(spec.duration, spec.thread, spec.stack_trace);
    c.fields.extend(spec.fields);
    c.annotations.push(Annotation::value(ids::NAME, spec.name));
    c.annotations.push(label(spec.label));
    if let Some(d) = spec.description {
        c.annotations.push(Annotation::value(ids::DESCRIPTION, d));
    }
    if !spec.category.is_empty() {
        c.annotations.push(Annotation::values(ids::CATEGORY, spec.category.iter().copied()));
    }
    let setting = |name: &str, type_id: u64, default: &str, text: &str| Setting {
        name: name.into(),
        type_id,
        default_value: default.into(),
        annotations: vec![label(text)],
    };
    c.settings.push(setting("enabled", ids::SETTING_ENABLED, "true", "Enabled"));
    if spec.duration {
        c.settings.push(setting("threshold", ids::SETTING_THRESHOLD, "0 ns", "Threshold"));
    }
    if spec.stack_trace {
        c.settings.push(setting("stackTrace", ids::SETTING_STACK_TRACE, "true", "Stack Trace"));
    }
    c
}
