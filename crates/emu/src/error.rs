//! What can go wrong in the emulator: a configuration it refuses, or an I/O failure that names
//! the FED and the address or file.

use std::path::PathBuf;

/// The stream an I/O failure happened on: a FEROL stream's FED, or a DTH stream's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamName {
    /// A FEROL stream of FED fragments.
    Fed(u16),
    /// A DTH stream of one source's orbit blocks.
    Source(u16),
}

impl std::fmt::Display for StreamName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamName::Fed(id) => write!(f, "FED {id}"),
            StreamName::Source(id) => write!(f, "source {id}"),
        }
    }
}

/// An emulator error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmuError {
    /// A description of the front ends outside the emulator's bounds (FED id, sizes, clock,
    /// fault).
    #[error(transparent)]
    Emulation(#[from] tessera_config::emulation::EmulationError),
    /// A sender configuration that cannot run (no FEDs, too many, no bound).
    #[error("sender: {0}")]
    BadSender(String),
    /// Writing a fragment failed in the formats layer (a bug if it ever happens: sizes are
    /// checked before).
    #[error("FED {fed}: {source}")]
    Format {
        /// The FED.
        fed: u16,
        /// The error.
        source: tessera_formats::FormatError,
    },
    /// A capture that cannot be replayed: unreadable, truncated, corrupt, or streams that do not
    /// agree. `origin` names the file (or the generated stream).
    #[error("{origin}: {reason}")]
    BadCapture {
        /// The capture file, or what generated the stream.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading a capture file or directory failed.
    #[error("cannot read {}", path.display())]
    ReadCapture {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Connecting a stream failed.
    #[error("{stream}: cannot connect to {address}")]
    Connect {
        /// The stream.
        stream: StreamName,
        /// The address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// Creating a stream's capture file failed.
    #[error("{stream}: cannot create {}", path.display())]
    Create {
        /// The stream.
        stream: StreamName,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing a stream failed.
    #[error("{stream}: write failed after {bytes} bytes")]
    Write {
        /// The stream.
        stream: StreamName,
        /// Bytes written before the failure.
        bytes: u64,
        /// Why.
        source: std::io::Error,
    },
}
