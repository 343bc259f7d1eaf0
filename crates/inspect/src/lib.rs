//! What `tessera inspect` and `tessera verify` do, as a library.
//!
//! `inspect` shows what a file or directory holds and flags what is wrong; `verify` checks a BU
//! run directory against every rule of the file contract and lists each violation with its file
//! and byte offset. Both share the per-event checks of [`event::check_event`] and the directory
//! listing of [`run_dir::scan_run_dir`].

#![warn(missing_docs)]

pub mod event;
pub mod json;
pub mod orbit_file;
pub mod raw_file;
pub mod render;
pub mod run_dir;
pub mod stream;
pub mod verify;

use event::EventChecks;
use serde::Serialize;
use std::path::Path;
use tessera_formats::orbit::{is_orbit_file, looks_like_dth_stream};

/// What `inspect` found at a path.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// A raw file (`RAW_0001` or `RAW_0002`).
    RawFile(raw_file::RawFileReport),
    /// An orbit file, as a BU writes it in orbit mode (no file header, starts "HO").
    OrbitFile(orbit_file::OrbitFileReport),
    /// A capture of a FEROL TCP stream or a DTH orbit stream.
    Stream(stream::StreamReport),
    /// A BU run directory.
    RunDir(run_dir::RunDirReport),
    /// A JSON bookkeeping file or definition.
    Json(json::JsonReport),
}

impl Target {
    /// Problems found, in total.
    pub fn problem_count(&self) -> usize {
        match self {
            Target::RawFile(r) => r.all_problems().count(),
            Target::OrbitFile(o) => o.problems.len(),
            Target::Stream(s) => s.problems.len(),
            Target::RunDir(d) => d.problems.len(),
            Target::Json(j) => j.problems.len(),
        }
    }
}

/// Errors that keep `inspect` from reading a path at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The path cannot be read.
    #[error("cannot read {path}")]
    Unreadable {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A directory that is not a run directory.
    #[error(transparent)]
    NotARunDir(#[from] run_dir::NotARunDir),
    /// The file is none of the kinds `inspect` knows.
    #[error(
        "{path}: not a raw file (RAW_0001/RAW_0002), an orbit file (48 4F), a FEROL or DTH stream capture (47 5A), a JSON bookkeeping file, nor a run directory; first bytes {first:02x?}"
    )]
    Unknown {
        /// The path.
        path: String,
        /// Its first bytes.
        first: Vec<u8>,
    },
}

/// Reads `path` and reports on it, telling raw files, orbit files, stream captures and run
/// directories apart by their content.
pub fn inspect_path(path: &Path, checks: EventChecks) -> Result<Target, InspectError> {
    let name = path.display().to_string();
    let unreadable = |source| InspectError::Unreadable { path: name.clone(), source };
    if path.is_dir() {
        run_dir::require_run_dir(path)?;
        return run_dir::inspect_run_dir(path, checks).map(Target::RunDir).map_err(unreadable);
    }
    if path.extension().is_some_and(|x| x == "jsn" || x == "jsd") {
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        return Ok(Target::Json(json::inspect_json(&name, &text)));
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    if bytes.starts_with(b"RAW_000") {
        Ok(Target::RawFile(raw_file::inspect_raw_file(&name, &bytes, checks)))
    } else if is_orbit_file(&bytes) {
        Ok(Target::OrbitFile(orbit_file::inspect_orbit_file(&name, &bytes, checks)))
    } else if looks_like_dth_stream(&bytes) {
        Ok(Target::Stream(stream::inspect_dth_stream(&name, &bytes)))
    } else if bytes.starts_with(&[0x47, 0x5A]) {
        Ok(Target::Stream(stream::inspect_ferol_stream(&name, &bytes)))
    } else {
        Err(InspectError::Unknown { path: name, first: bytes.iter().take(8).copied().collect() })
    }
}
