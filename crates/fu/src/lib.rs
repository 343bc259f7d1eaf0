//! The filter unit (FU) of Tessera's file-based filter farm: it claims raw files from a BU's run
//! directory, runs a selection menu over their events, and writes the accepted events into
//! output streams per lumi section, with the bookkeeping the mergers combine (docs/formats.md §7–§8).

#![warn(missing_docs)]

pub mod menu;
pub mod select;

pub use select::{EventSummary, MenuHlt, MenuSelector, SummaryError};

/// The output streams an event goes to: bit `i` stands for stream `i` of the selector's stream
/// list, so a selector has at most [`StreamSet::MAX_STREAMS`] streams. Empty means rejected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StreamSet(pub u64);

impl StreamSet {
    /// Streams a selector may have.
    pub const MAX_STREAMS: usize = 64;

    /// No stream: the event is rejected.
    pub const NONE: StreamSet = StreamSet(0);

    /// Adds stream `index`.
    pub fn insert(&mut self, index: usize) {
        debug_assert!(index < Self::MAX_STREAMS);
        self.0 |= 1 << index;
    }

    /// Whether stream `index` is in the set.
    pub fn contains(self, index: usize) -> bool {
        index < Self::MAX_STREAMS && self.0 & (1 << index) != 0
    }

    /// Whether no stream is in the set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The streams in the set, lowest index first (one step per stream in the set, not per
    /// possible stream: this runs for every event).
    pub fn iter(self) -> impl Iterator<Item = usize> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                i
            })
        })
    }
}

pub mod broker;
pub mod claim;
pub mod exec;
pub mod instance;
pub mod merge;
pub mod orbit;
pub mod output;
pub mod process;
pub mod reader;
pub mod remote;

use std::path::{Path, PathBuf};
use tessera_formats::FormatError;
use tessera_formats::frd::FrdEvent;

/// The stream that holds events set aside: a corrupt event, or one the HLT failed on after its
/// retries. Every FU writes it, next to the selector's own streams.
pub const ERROR_STREAM: &str = "Error";

/// What the HLT decided for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The streams the event goes to; none means rejected.
    Streams(StreamSet),
    /// The HLT could not process the event, for this reason: it goes to [`ERROR_STREAM`].
    Failed(String),
}

/// The selection an FU runs: the built-in menu, or an external program.
pub trait Hlt {
    /// The output streams, in the order of [`StreamSet`]'s bits. [`ERROR_STREAM`] is not among
    /// them.
    fn streams(&self) -> &[String];

    /// Decides for `events`, records of the raw file `file` in order, pushing one verdict per
    /// event onto `verdicts`. An error means the HLT as a whole cannot go on.
    fn select_file(&mut self, file: &Path, events: &[FrdEvent<'_>], verdicts: &mut Vec<Verdict>)
    -> Result<(), FuError>;

    /// Whether the HLT reads the file named in [`Hlt::select_file`] itself, as an external
    /// program does (the default). An FU then writes the events it unpacked from an orbit file
    /// as a RAW_0002 file of FRD records and names that file; an HLT that judges only the events
    /// it is given says false, and is spared the writing.
    fn reads_file(&self) -> bool {
        true
    }

    /// Most events per call of [`Hlt::select_file`]: an HLT in this process takes a file in
    /// batches small enough to stay in the cache; an external one (the default) a whole file at
    /// once.
    fn batch_events(&self) -> usize {
        usize::MAX
    }
}

/// What can stop an FU or a merger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FuError {
    /// A file system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "claiming".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A name or document that does not follow docs/formats.md.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A file written through the run-directory writer failed.
    #[error(transparent)]
    RunDir(#[from] tessera_rundir::RunDirError),
    /// A bookkeeping document that contradicts the files.
    #[error("{}: {problem}", path.display())]
    Bookkeeping {
        /// The document or file at fault.
        path: PathBuf,
        /// What does not add up.
        problem: String,
    },
    /// The HLT cannot go on.
    #[error("HLT: {0}")]
    Hlt(String),
    /// The BU's file broker cannot be used.
    #[error("file broker: {0}")]
    Broker(String),
}

impl FuError {
    /// Whether the error is a full disk (or quota): the unit waits and tries again instead of
    /// failing.
    pub fn is_disk_full(&self) -> bool {
        // ENOSPC and EDQUOT on Linux.
        let full = |e: &std::io::Error| {
            e.kind() == std::io::ErrorKind::StorageFull || matches!(e.raw_os_error(), Some(28 | 122))
        };
        match self {
            FuError::Io { source, .. } | FuError::RunDir(tessera_rundir::RunDirError::Io { source, .. }) => {
                full(source)
            }
            _ => false,
        }
    }
}

/// An [`FuError::Io`] maker for `map_err`.
pub(crate) fn io_error<'p>(action: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> FuError + 'p {
    move |source| FuError::Io { action, path: path.to_owned(), source }
}

#[cfg(test)]
mod tests {
    use super::StreamSet;

    #[test]
    fn a_stream_set_lists_its_streams_lowest_first() {
        let mut set = StreamSet::NONE;
        assert_eq!(set.iter().count(), 0);
        for i in [63, 5, 0] {
            set.insert(i);
        }
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 5, 63]);
        assert!(set.contains(5) && !set.contains(6) && !set.contains(64));
    }
}
