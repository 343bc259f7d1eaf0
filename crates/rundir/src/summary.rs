//! What a complete raw file in `open/` holds ([`FileSummary`]), and the one-line summary an orbit
//! file keeps beside it until it is published ([`OrbitCounts`]; docs/formats.md §6 and §7): the
//! writer reads it to publish and to recover, [`crate::orbit_files`] writes it.

use crate::error::{Result, io_err};
use std::path::{Path, PathBuf};

/// The orbits and events of an orbit file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrbitCounts {
    /// Orbits the file stands for: those given to the BU for it, the empty ones included.
    pub orbits: u32,
    /// Orbits written in it (those with events).
    pub written: u32,
}

/// What a complete raw file in `open/` holds, whether its header or its orbit summary says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSummary {
    /// Events (of an event file, its records).
    pub events: u32,
    /// Its size in bytes.
    pub bytes: u64,
    /// An orbit file's orbits.
    pub orbits: Option<OrbitCounts>,
}

impl FileSummary {
    /// The file's units in the protocol: its orbits in orbit mode, else its events.
    pub fn units(&self) -> u32 {
        self.orbits.map_or(self.events, |o| o.orbits)
    }

    /// The ledger's fields after lumi section and index: `EVENTS BYTES`, and for an orbit file
    /// `ORBITS WRITTEN` after them.
    pub(crate) fn ledger_fields(&self) -> String {
        match self.orbits {
            None => format!("{} {}", self.events, self.bytes),
            Some(o) => format!("{} {} {} {}", self.events, self.bytes, o.orbits, o.written),
        }
    }

    /// Reads the fields [`FileSummary::ledger_fields`] wrote.
    pub(crate) fn from_fields(fields: &[u64]) -> Option<Self> {
        let events = u32::try_from(*fields.first()?).ok()?;
        let bytes = *fields.get(1)?;
        let orbits = match fields.get(2..)? {
            [] => None,
            [orbits, written] => {
                Some(OrbitCounts { orbits: u32::try_from(*orbits).ok()?, written: u32::try_from(*written).ok()? })
            }
            _ => return None,
        };
        Some(FileSummary { events, bytes, orbits })
    }
}

/// The summary beside raw file `raw` in `open/`: `<raw>.orbits`.
pub(crate) fn summary_path(raw: &Path) -> PathBuf {
    let mut name = raw.as_os_str().to_owned();
    name.push(".orbits");
    PathBuf::from(name)
}

/// The orbit summary of `raw` if it has one that agrees with the file's size: a file still
/// being written has none yet.
pub(crate) fn read_orbit_summary(raw: &Path) -> Result<Option<FileSummary>> {
    let path = summary_path(raw);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("reading", &path)(e)),
    };
    let fields: Vec<u64> = text.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    let size = std::fs::metadata(raw).map_err(io_err("reading the size of", raw))?.len();
    Ok(FileSummary::from_fields(&fields).filter(|s| s.orbits.is_some() && s.bytes == size))
}

/// Removes the summary beside `raw`, once the ledger holds it; a summary already gone is fine.
pub(crate) fn remove_summary(raw: &Path) -> Result<()> {
    let path = summary_path(raw);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err("removing", &path)(e)),
        _ => Ok(()),
    }
}

/// Removes an orbit file of no orbit, which is counted but never published.
pub(crate) fn remove_empty(raw: &Path) -> Result<()> {
    std::fs::remove_file(raw).map_err(io_err("removing empty orbit file", raw))
}
