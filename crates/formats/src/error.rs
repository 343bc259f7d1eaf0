//! The one error type of every parser in this crate.
//!
//! Every error says what was being read, where (a byte offset from the start of the buffer the
//! caller passed), and what was expected and found. Offsets can be moved into the frame of an
//! enclosing buffer with [`FormatError::shifted`], so a file reader reports file offsets.

use std::fmt;

/// What went wrong while reading a byte format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The buffer ends before the structure does.
    #[error("{what} truncated at byte {offset}: needs {needed} bytes, {available} available")]
    Truncated {
        /// The structure being read, e.g. "FED header".
        what: &'static str,
        /// Byte offset where the structure starts.
        offset: usize,
        /// Bytes the structure needs from `offset`.
        needed: usize,
        /// Bytes available from `offset`.
        available: usize,
    },
    /// A field holds a value the format does not allow.
    #[error("{what}: bad {field} at byte {offset}: expected {expected}, found {found}")]
    BadField {
        /// The structure being read.
        what: &'static str,
        /// The field, e.g. "BOE marker".
        field: &'static str,
        /// Byte offset of the structure (or of the field where that is more precise).
        offset: usize,
        /// What the format requires.
        expected: Value,
        /// What the input holds.
        found: Value,
    },
    /// A checksum does not match the data it covers.
    #[error("{what}: {checksum} mismatch at byte {offset}: stored {stored:#x}, computed {computed:#x}")]
    Checksum {
        /// The structure being read.
        what: &'static str,
        /// The checksum, e.g. "CRC-16".
        checksum: &'static str,
        /// Byte offset of the structure the checksum covers.
        offset: usize,
        /// Checksum stored in the data.
        stored: u64,
        /// Checksum computed over the data.
        computed: u64,
    },
    /// A JSON document lacks a field or holds one of the wrong kind.
    #[error("{what}: field {field}: {problem}")]
    Json {
        /// The document being read, e.g. "index JSON".
        what: &'static str,
        /// The field, e.g. "NEvents" or "data".
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A writer's output buffer is too small for what it must hold.
    #[error("{what}: output buffer holds {available} bytes, needs {needed}")]
    BufferTooSmall {
        /// The structure being written.
        what: &'static str,
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes the buffer holds.
        available: usize,
    },
    /// A file name does not follow the naming rules of docs/formats.md §7–§8.
    #[error("file name {name:?}: {problem}")]
    Name {
        /// The name as found.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl FormatError {
    /// Moves the error's byte offset by `base`: used when the parsed buffer sits at `base` inside
    /// a larger one (a fragment inside an event, an event inside a file).
    #[must_use]
    pub fn shifted(mut self, base: usize) -> Self {
        match &mut self {
            FormatError::Truncated { offset, .. }
            | FormatError::BadField { offset, .. }
            | FormatError::Checksum { offset, .. } => *offset += base,
            FormatError::Json { .. } | FormatError::Name { .. } | FormatError::BufferTooSmall { .. } => {}
        }
        self
    }

    /// The byte offset the error refers to, if it refers to one.
    pub fn offset(&self) -> Option<usize> {
        match self {
            FormatError::Truncated { offset, .. }
            | FormatError::BadField { offset, .. }
            | FormatError::Checksum { offset, .. } => Some(*offset),
            FormatError::Json { .. } | FormatError::Name { .. } | FormatError::BufferTooSmall { .. } => None,
        }
    }

    /// True when more bytes could complete the structure: a stream reader waits for more data
    /// instead of failing.
    pub fn is_truncated(&self) -> bool {
        matches!(self, FormatError::Truncated { .. })
    }

    pub(crate) fn truncated(what: &'static str, offset: usize, needed: usize, available: usize) -> Self {
        FormatError::Truncated { what, offset, needed, available }
    }

    /// A field of `what` at `offset` that holds `found` where the format wants `expected`.
    pub fn bad(
        what: &'static str,
        field: &'static str,
        offset: usize,
        expected: impl Into<Value>,
        found: impl Into<Value>,
    ) -> Self {
        FormatError::BadField { what, field, offset, expected: expected.into(), found: found.into() }
    }
}

/// A value in an error message: a number shown in hex or decimal, or a description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A number, shown in hex (markers, bit fields).
    Hex(u64),
    /// A number, shown in decimal (lengths, counts, identifiers).
    Dec(u64),
    /// A description of an allowed range or a rule, e.g. "1..=510".
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Hex(v) => write!(f, "{v:#x}"),
            Value::Dec(v) => write!(f, "{v}"),
            Value::Text(s) => f.write_str(s),
        }
    }
}

/// Hex display for marker-like values.
pub(crate) fn hex(v: impl Into<u64>) -> Value {
    Value::Hex(v.into())
}

/// Decimal display for counts and lengths.
pub(crate) fn dec(v: impl TryInto<u64>) -> Value {
    Value::Dec(v.try_into().unwrap_or(u64::MAX))
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

/// Result of a parser of this crate.
pub type Result<T> = std::result::Result<T, FormatError>;

/// Reads `N` bytes at `offset`, or says which structure was truncated.
pub(crate) fn take<const N: usize>(buf: &[u8], offset: usize, what: &'static str) -> Result<[u8; N]> {
    buf.get(offset..offset.saturating_add(N))
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| FormatError::truncated(what, offset, N, buf.len().saturating_sub(offset)))
}

/// Little-endian u16 at `offset`.
pub(crate) fn le_u16(buf: &[u8], offset: usize, what: &'static str) -> Result<u16> {
    take::<2>(buf, offset, what).map(u16::from_le_bytes)
}

/// Little-endian u32 at `offset`.
pub(crate) fn le_u32(buf: &[u8], offset: usize, what: &'static str) -> Result<u32> {
    take::<4>(buf, offset, what).map(u32::from_le_bytes)
}

/// Little-endian u64 at `offset`.
pub(crate) fn le_u64(buf: &[u8], offset: usize, what: &'static str) -> Result<u64> {
    take::<8>(buf, offset, what).map(u64::from_le_bytes)
}

/// Checks that `out` can take `needed` bytes before a writer fills it.
pub(crate) fn need_space(out: &[u8], needed: usize, what: &'static str) -> Result<()> {
    if out.len() < needed {
        return Err(FormatError::BufferTooSmall { what, needed, available: out.len() });
    }
    Ok(())
}
