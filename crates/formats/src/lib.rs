//! Byte formats of the CMS DAQ as Tessera reads and writes them (docs/formats.md,
//! whose numbered sections the modules cite).
//!
//! No I/O and no threads: parsers are views over `&[u8]` that check every field and never panic
//! on any input; writers fill caller-provided buffers. Every error is a [`FormatError`] that says
//! what was read, at which byte offset, and what was expected and found.

#![warn(missing_docs)]

pub mod bookkeeping;
pub mod crc;
mod crc16;
pub mod error;
pub mod fed;
pub mod ferol;
pub mod frd;
pub mod names;
pub mod orbit;
pub mod raw;
pub mod seeded;
pub mod tcds;

pub use error::{FormatError, Result, Value};
