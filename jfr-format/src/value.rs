//! Decoded values, shared by the reader (which produces them) and the writer (which can encode
//! them against a metadata descriptor).

use bytes::Bytes;
use core::fmt;
use std::ops::Deref;

/// A string value that borrows the input when it can (UTF-8 and ASCII Latin-1 payloads).
#[derive(Clone)]
pub struct Text(TextRepr);

#[derive(Clone)]
enum TextRepr {
    Shared(Bytes),
    Owned(String),
}

impl Text {
    /// Wraps bytes that are known to be valid UTF-8; invalid input is converted with replacement
    /// characters.
    pub fn from_utf8(bytes: Bytes) -> Text {
        match core::str::from_utf8(&bytes) {
            Ok(_) => Text(TextRepr::Shared(bytes)),
            Err(_) => Text(TextRepr::Owned(String::from_utf8_lossy(&bytes).into_owned())),
        }
    }
    /// Decodes Latin-1 bytes.
    pub fn from_latin1(bytes: Bytes) -> Text {
        if bytes.is_ascii() {
            Text(TextRepr::Shared(bytes))
        } else {
            Text(TextRepr::Owned(bytes.iter().map(|&b| char::from(b)).collect()))
        }
    }
    /// The text as `&str`.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Shared bytes were checked to be UTF-8 when the Text was made.
            TextRepr::Shared(b) => core::str::from_utf8(b).unwrap_or(""),
            TextRepr::Owned(s) => s,
        }
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text(TextRepr::Owned(s))
    }
}
impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text(TextRepr::Owned(s.to_owned()))
    }
}
impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}
impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for Text {}
impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}
impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}
impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decoded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A null string (tag 0). Constant references are always [`Value::Ref`], even with key 0:
    /// the JDK resolves key 0 when the pool defines it and treats it as null otherwise, which is
    /// what `Chunk::resolve` does.
    Null,
    /// `boolean`.
    Boolean(bool),
    /// `byte`.
    Byte(i8),
    /// `char` (a UTF-16 code unit).
    Char(u16),
    /// `short`.
    Short(i16),
    /// `int`.
    Int(i32),
    /// `long`.
    Long(i64),
    /// `float`.
    Float(f32),
    /// `double`.
    Double(f64),
    /// `java.lang.String`.
    String(Text),
    /// A constant-pool key of type `type_id`, not yet resolved (see `Chunk::resolve`). A key the
    /// pool lacks (usually 0) means null.
    Ref {
        /// Pool type.
        type_id: u64,
        /// Key in the pool.
        key: u64,
    },
    /// An array.
    Array(Vec<Value>),
    /// An inline struct: its fields in declared order.
    Object(Object),
}

/// An inline struct value.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// The struct's type id.
    pub type_id: u64,
    /// Field values in declared order.
    pub fields: Vec<Value>,
}

impl Value {
    /// The value as an i64, for any integer kind.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Byte(v) => Some(v.into()),
            Value::Short(v) => Some(v.into()),
            Value::Char(v) => Some(v.into()),
            Value::Int(v) => Some(v.into()),
            Value::Long(v) => Some(v),
            _ => None,
        }
    }
    /// The value as a string slice.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(t) => Some(t.as_str()),
            _ => None,
        }
    }
    /// The value as a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Boolean(b) => Some(b),
            _ => None,
        }
    }
}
