//! The one error type of the crate. Every variant names the absolute byte offset in the input where
//! the problem was found and what was expected there.

use core::fmt;

/// A problem found while decoding JFR data.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The data ended while `expected` was being read.
    UnexpectedEof {
        /// Absolute offset of the read that ran past the end.
        offset: u64,
        /// What was being read.
        expected: &'static str,
    },
    /// The chunk does not start with `FLR\0`.
    BadMagic {
        /// Offset of the chunk.
        offset: u64,
        /// The four bytes found instead.
        found: [u8; 4],
    },
    /// The chunk's major version is not 1 or 2.
    UnsupportedVersion {
        /// Offset of the chunk.
        offset: u64,
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// A value is present but not acceptable.
    Invalid {
        /// Absolute offset of the value.
        offset: u64,
        /// What was expected instead.
        expected: &'static str,
        /// The value found (its meaning depends on `expected`).
        found: u64,
    },
    /// A count claims more elements than the remaining input could hold.
    CountTooLarge {
        /// Absolute offset of the count.
        offset: u64,
        /// What is being counted.
        what: &'static str,
        /// The claimed count.
        count: u64,
    },
    /// A type id is used that the metadata does not declare.
    UnknownType {
        /// Absolute offset of the use.
        offset: u64,
        /// The undeclared type id.
        type_id: u64,
    },
    /// Values or types nest deeper than [`crate::MAX_NESTING`] (often a cycle of inline structs).
    NestingTooDeep {
        /// Absolute offset where the limit was hit.
        offset: u64,
    },
    /// The chunk has no metadata record although it has data.
    NoMetadata {
        /// Offset of the chunk.
        offset: u64,
    },
    /// The chunk header is being rewritten (guard byte 255); read again later.
    HeaderLocked {
        /// Offset of the chunk.
        offset: u64,
    },
}

impl Error {
    /// The absolute offset the error refers to.
    pub fn offset(&self) -> u64 {
        match *self {
            Error::UnexpectedEof { offset, .. }
            | Error::BadMagic { offset, .. }
            | Error::UnsupportedVersion { offset, .. }
            | Error::Invalid { offset, .. }
            | Error::CountTooLarge { offset, .. }
            | Error::UnknownType { offset, .. }
            | Error::NestingTooDeep { offset }
            | Error::NoMetadata { offset }
            | Error::HeaderLocked { offset } => offset,
        }
    }

    /// Returns the same error moved by `base` bytes (used when a chunk is embedded in a file).
    pub fn shifted(mut self, base: u64) -> Error {
        match &mut self {
            Error::UnexpectedEof { offset, .. }
            | Error::BadMagic { offset, .. }
            | Error::UnsupportedVersion { offset, .. }
            | Error::Invalid { offset, .. }
            | Error::CountTooLarge { offset, .. }
            | Error::UnknownType { offset, .. }
            | Error::NestingTooDeep { offset }
            | Error::NoMetadata { offset }
            | Error::HeaderLocked { offset } => *offset = offset.wrapping_add(base),
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnexpectedEof { offset, expected } => {
                write!(f, "at offset {offset:#x}: data ends while reading {expected}")
            }
            Error::BadMagic { offset, found } => {
                write!(f, "at offset {offset:#x}: not a JFR chunk (magic {found:02x?}, expected \"FLR\\0\")")
            }
            Error::UnsupportedVersion { offset, major, minor } => {
                write!(f, "at offset {offset:#x}: unsupported JFR version {major}.{minor} (expected 1.x or 2.x)")
            }
            Error::Invalid { offset, expected, found } => {
                write!(f, "at offset {offset:#x}: expected {expected}, found {found}")
            }
            Error::CountTooLarge { offset, what, count } => {
                write!(f, "at offset {offset:#x}: {what} count {count} exceeds the remaining data")
            }
            Error::UnknownType { offset, type_id } => {
                write!(f, "at offset {offset:#x}: type id {type_id} is not declared in the metadata")
            }
            Error::NestingTooDeep { offset } => write!(
                f,
                "at offset {offset:#x}: values nest deeper than {} levels (cyclic inline types?)",
                crate::MAX_NESTING
            ),
            Error::NoMetadata { offset } => {
                write!(f, "at offset {offset:#x}: chunk has data but no metadata record")
            }
            Error::HeaderLocked { offset } => {
                write!(f, "at offset {offset:#x}: chunk header is being rewritten (guard byte set); retry")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Result with the crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
