//! Typed views of the JDK's well-known constant types: threads, stack traces, frames, methods and
//! classes. They navigate by field name, so they work for any producer's ids.

use crate::error::Result;
use crate::read::{Chunk, Event};
use crate::value::Value;

/// A resolved `java.lang.Thread`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ThreadInfo {
    /// `osName`.
    pub os_name: Option<String>,
    /// `osThreadId`.
    pub os_thread_id: i64,
    /// `javaName`.
    pub java_name: Option<String>,
    /// `javaThreadId`.
    pub java_thread_id: i64,
}

impl ThreadInfo {
    /// The name a person would use: the Java name, else the OS name.
    pub fn name(&self) -> &str {
        self.java_name.as_deref().or(self.os_name.as_deref()).unwrap_or("")
    }
}

/// A resolved stack frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrameInfo {
    /// Method name.
    pub method: String,
    /// Class name (`/` and `.` as written), empty if unknown.
    pub class: String,
    /// Package name, if any.
    pub package: Option<String>,
    /// Line number, −1 or absent if unknown.
    pub line: i32,
    /// Bytecode index.
    pub bytecode_index: i32,
    /// Frame type description (`Native`, `Inlined`, `JIT compiled`, …).
    pub frame_type: Option<String>,
    /// The method's descriptor (`(Ljava/lang/String;)V` for Java; `()L;` for native code).
    pub descriptor: Option<String>,
}

/// The return type async-profiler and this project's recorder give native-code methods: the empty
/// class name. No Java method returns it, so it tells a native function (whose class is its library
/// and whose name is the whole symbol, `myapp::parser::Parser::parse`) from a Java method.
pub const NATIVE_CODE_RETURN: &str = ")L;";

impl FrameInfo {
    /// True for a native-code frame as async-profiler and this recorder write it (see
    /// [`NATIVE_CODE_RETURN`]).
    pub fn is_native_code(&self) -> bool {
        self.descriptor.as_deref().is_some_and(|d| d.ends_with(NATIVE_CODE_RETURN))
    }

    /// The name a person reads: for native code the function alone (its class is only the library
    /// it lives in), as async-profiler's converter shows it; otherwise `class.method`, or the method
    /// alone when there is no class.
    pub fn qualified_name(&self) -> String {
        if self.class.is_empty() || self.is_native_code() {
            self.method.clone()
        } else {
            format!("{}.{}", self.class, self.method)
        }
    }
}

/// A resolved stack trace, innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StackTraceInfo {
    /// Frames were dropped.
    pub truncated: bool,
    /// Frames, innermost first.
    pub frames: Vec<FrameInfo>,
}

/// The text of a string field: an inline string, or a reference followed through at most a few
/// simple (single-field) constants such as `jdk.types.Symbol`. Only one value is decoded per step,
/// so hostile pools whose constants fan out cannot make this slow.
fn text(chunk: &Chunk, value: Option<&Value>) -> Result<Option<String>> {
    let mut current = match value {
        Some(v) => v.clone(),
        None => return Ok(None),
    };
    for _ in 0..4 {
        match current {
            Value::String(t) => return Ok(Some(t.as_str().to_owned())),
            Value::Ref { type_id, key } => match chunk.resolve(type_id, key)? {
                Some(v) => current = v,
                None => return Ok(None),
            },
            Value::Object(o) => match o.fields.into_iter().next() {
                Some(v) => current = v,
                None => return Ok(None),
            },
            _ => return Ok(None),
        }
    }
    Ok(None)
}

fn referenced(chunk: &Chunk, value: Option<&Value>) -> Result<Option<Value>> {
    match value {
        Some(Value::Ref { type_id, key }) => chunk.resolve(*type_id, *key),
        Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
        _ => Ok(None),
    }
}

impl Chunk {
    /// Resolves a `java.lang.Thread` reference.
    pub fn thread_info(&self, value: &Value) -> Result<Option<ThreadInfo>> {
        let Some(thread) = referenced(self, Some(value))? else {
            return Ok(None);
        };
        Ok(Some(ThreadInfo {
            os_name: text(self, self.field(&thread, "osName"))?,
            os_thread_id: self.field(&thread, "osThreadId").and_then(Value::as_i64).unwrap_or(0),
            java_name: text(self, self.field(&thread, "javaName"))?,
            java_thread_id: self.field(&thread, "javaThreadId").and_then(Value::as_i64).unwrap_or(0),
        }))
    }

    /// Resolves a stack trace reference with all its frames.
    pub fn stack_trace_info(&self, value: &Value) -> Result<Option<StackTraceInfo>> {
        let Some(trace) = referenced(self, Some(value))? else {
            return Ok(None);
        };
        // Missing `truncated` defaults to true, as in the JDK's RecordedStackTrace.
        let truncated = self.field(&trace, "truncated").and_then(Value::as_bool).unwrap_or(true);
        let mut frames = Vec::new();
        if let Some(Value::Array(items)) = self.field(&trace, "frames") {
            frames.reserve(items.len());
            for item in items {
                let Some(frame) = referenced(self, Some(item))? else {
                    continue;
                };
                frames.push(self.frame_info(&frame)?);
            }
        }
        Ok(Some(StackTraceInfo { truncated, frames }))
    }

    fn frame_info(&self, frame: &Value) -> Result<FrameInfo> {
        let mut info = FrameInfo {
            line: self.field(frame, "lineNumber").and_then(Value::as_i64).unwrap_or(-1) as i32,
            bytecode_index: self.field(frame, "bytecodeIndex").and_then(Value::as_i64).unwrap_or(-1) as i32,
            frame_type: text(self, self.field(frame, "type"))?,
            ..FrameInfo::default()
        };
        if let Some(method) = referenced(self, self.field(frame, "method"))? {
            info.method = text(self, self.field(&method, "name"))?.unwrap_or_default();
            info.descriptor = text(self, self.field(&method, "descriptor"))?;
            if let Some(class) = referenced(self, self.field(&method, "type"))? {
                info.class = text(self, self.field(&class, "name"))?.unwrap_or_default();
                if let Some(package) = referenced(self, self.field(&class, "package"))? {
                    info.package = text(self, self.field(&package, "name"))?;
                }
            }
        }
        Ok(info)
    }

    /// The event's thread: `eventThread`, or `sampledThread` for samples.
    pub fn event_thread(&self, event: &Event) -> Result<Option<ThreadInfo>> {
        match self.event_field(event, "eventThread").or_else(|| self.event_field(event, "sampledThread")) {
            Some(v) => self.thread_info(v),
            None => Ok(None),
        }
    }

    /// The event's stack trace, if it has one.
    pub fn event_stack_trace(&self, event: &Event) -> Result<Option<StackTraceInfo>> {
        match self.event_field(event, "stackTrace") {
            Some(v) => self.stack_trace_info(v),
            None => Ok(None),
        }
    }

    /// The event's duration in ticks (field `duration` at index 1), if the type has one.
    pub fn event_duration_ticks(&self, event: &Event) -> Option<i64> {
        let class = self.types().class(event.type_id)?;
        if class.fields.get(1).is_some_and(|f| f.name == "duration") {
            event.values.get(1).and_then(Value::as_i64)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(class: &str, method: &str, descriptor: Option<&str>) -> FrameInfo {
        FrameInfo {
            class: class.into(),
            method: method.into(),
            descriptor: descriptor.map(str::to_owned),
            ..FrameInfo::default()
        }
    }

    #[test]
    fn native_code_reads_as_its_function_java_as_class_and_method() {
        let rust = frame("myapp", "myapp::parser::Parser::parse", Some("()L;"));
        assert!(rust.is_native_code());
        assert_eq!(rust.qualified_name(), "myapp::parser::Parser::parse");
        // async-profiler's kernel frames.
        assert_eq!(frame("", "do_syscall_64", Some("(Lk;)L;")).qualified_name(), "do_syscall_64");
        let java = frame("java/lang/String", "indexOf", Some("(I)I"));
        assert!(!java.is_native_code());
        assert_eq!(java.qualified_name(), "java/lang/String.indexOf");
        assert_eq!(frame("libc.so.6", "epoll_wait", None).qualified_name(), "libc.so.6.epoll_wait");
        assert_eq!(frame("", "main", None).qualified_name(), "main");
    }
}
