//! What ends a node with an error: one type for every unit, since they share their event loop
//! (`crate::event_loop`) and the errors it meets (a socket, a peer out of reach, an abort).

use std::io;
use std::net::SocketAddr;
use tessera_evb::types::{FedId, Peer};

/// What ended a node (an RU, the EVM's node, a BU) with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A socket could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The transport of the protocol links could not be set up (UCX: absent from this build,
    /// or failing to start, with the transports it found).
    #[error("{0}")]
    Transport(String),
    /// A peer could not be reached in time.
    #[error("{peer} at {address} could not be reached within {seconds} s: {source}")]
    Unreachable {
        /// The peer.
        peer: Peer,
        /// Its address.
        address: SocketAddr,
        /// How long we tried.
        seconds: u64,
        /// The last error.
        source: io::Error,
    },
    /// A FEROL stream could not be read on, and the configuration says to fail.
    #[error(
        "RU {ru}: FED {fed} stream, byte {stream_offset} (after {fragments} fragments, last LV1 {last_lv1:?}): {error}"
    )]
    Stream {
        /// The RU.
        ru: u16,
        /// The FED.
        fed: FedId,
        /// Byte offset in the stream.
        stream_offset: u64,
        /// Fragments read before it.
        fragments: u64,
        /// The LV1 id of the last good fragment.
        last_lv1: Option<u32>,
        /// What is there.
        error: Box<tessera_formats::FormatError>,
    },
    /// Some FEROL (or DTH) streams of an RU never connected within `ru.connect_timeout_s`:
    /// the run cannot start without them, and fails before its first event.
    #[error(
        "RU {ru}: the streams of FEDs {} never connected within {waited_s} s (ru.connect_timeout_s): the run cannot \
         start without them; start their front ends (any order will do), or take them out of the system file",
        tessera_config::format_fed_list(feds)
    )]
    StreamsMissing {
        /// The RU.
        ru: u16,
        /// The FEDs (or sources) whose streams never named themselves.
        feds: Vec<FedId>,
        /// How long the RU waited, in s.
        waited_s: u64,
    },
    /// The EVM went away before the run was drained.
    #[error("the connection to the EVM was lost before the run ended: {0}")]
    EvmLost(String),
    /// The EVM lost an RU before the run was drained: no event can be built without it.
    #[error("the EVM lost {0} before the run ended; the run cannot go on without it")]
    RuLost(String),
    /// Run control aborted the unit; what it still held.
    #[error("aborted{}", if .0.is_empty() { String::new() } else { format!(" while waiting for: {}", .0) })]
    Aborted(String),
    /// A BU's file operation failed.
    #[error(transparent)]
    Files(#[from] crate::bu_files::BuFilesError),
    /// A BU's data store refused a frame larger than its room: the RU's frames and the BU's
    /// store do not fit each other.
    #[error("BU {bu}: {source}")]
    StoreFull {
        /// The BU.
        bu: u16,
        /// How far over it was.
        source: StoreFull,
    },
    /// A BU lost the EVM before its end of run.
    #[error("BU {bu}: lost the EVM before the end of run{} ({pending})", why.as_ref().map(|w| format!(": {w}")).unwrap_or_default())]
    EvmLostBeforeEnd {
        /// The BU.
        bu: u16,
        /// How the connection ended, when it said.
        why: Option<String>,
        /// What the BU still waited for.
        pending: String,
    },
    /// One of a BU's own threads (its writers, its bookkeeping) is gone: it can write nothing.
    #[error("BU {bu}: {what} gone")]
    ThreadGone {
        /// The BU.
        bu: u16,
        /// Which threads.
        what: &'static str,
    },
    /// A message could not be encoded (a bug: the core gave one the wire cannot carry).
    #[error("encoding a message: {0}")]
    Encode(#[from] tessera_evb::wire::WireError),
    /// A BU could not record its incarnation in its run directory.
    #[error("recording the BU's incarnation in {}: {source}", path.display())]
    Incarnation {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: Box<tessera_rundir::RunDirError>,
    },
    /// The unit's thread panicked; what it said.
    #[error("the unit panicked: {0}")]
    Panicked(String),
}

/// A data frame that would take the store past its byte budget: the BU stops reading its RU
/// connections until files are written and frames freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the BU's data store holds {held} bytes; a frame of {frame} would pass its budget of {budget}")]
pub struct StoreFull {
    /// Bytes held now.
    pub held: usize,
    /// Bytes of the refused frame.
    pub frame: usize,
    /// The budget.
    pub budget: usize,
}
