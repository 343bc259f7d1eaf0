//! A BU run directory on disk (docs/formats.md §5 and §7), written in the order the filter farm relies
//! on: a raw file grows under `open/`, its header is rewritten when it closes, it is renamed into
//! the run directory, and only then does its `.jsn` appear (written as `.tmp`, then renamed). An
//! end-of-lumi record is refused unless its counts close; the end-of-run record removes `open/`.
//!
//! [`resources`] is the contract between a BU and its filter farm: the FUs' resource summaries
//! beside the run directories, and the farm's pressure a BU reads from them.
//!
//! [`sample`] writes a whole run of seeded events with this writer, for tools and tests;
//! [`orbit_sample`] a whole run of seeded orbits as a BU writes them in orbit mode.

#![warn(missing_docs)]

mod error;
mod orbit_files;
pub mod orbit_sample;
pub mod resources;
pub mod sample;
mod summary;
mod writer;

pub use error::RunDirError;
pub use summary::{FileSummary, OrbitCounts};
pub use writer::{
    ClosedFile, EventPieces, PUBLISHED_LEDGER, PublishedFile, RawFileWriter, Recovery, RunDirectory, write_atomically,
};
