//! What `tessera inspect` and `tessera verify` do, as a library.
//!
//! `inspect` shows what a file or directory holds and flags what is wrong; `verify` checks a BU
//! run directory against every rule of the file contract and lists each violation with its file
//! and byte offset. Both share the per-event checks of [`event::check_event`].

#![warn(missing_docs)]

pub mod event;
pub mod raw_file;
pub mod render;
