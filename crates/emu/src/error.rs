//! What can go wrong in the emulator: a configuration it refuses, or an I/O failure that names
//! the FED and the address or file.

use std::path::PathBuf;

/// An emulator error.
#[derive(Debug, thiserror::Error)]
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
    /// Connecting a FED's stream failed.
    #[error("FED {fed}: cannot connect to {address}")]
    Connect {
        /// The FED.
        fed: u16,
        /// The address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// Creating a FED's capture file failed.
    #[error("FED {fed}: cannot create {}", path.display())]
    Create {
        /// The FED.
        fed: u16,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing a FED's stream failed.
    #[error("FED {fed}: write failed after {bytes} bytes")]
    Write {
        /// The FED.
        fed: u16,
        /// Bytes written before the failure.
        bytes: u64,
        /// Why.
        source: std::io::Error,
    },
}
