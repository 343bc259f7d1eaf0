//! What can go wrong while writing a run directory ([`RunDirError`]), shared by the writer and
//! the orbit files' summaries.

use std::io;
use std::path::{Path, PathBuf};
use tessera_formats::FormatError;

/// What can go wrong while writing a run directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunDirError {
    /// A file system operation failed; the message ends with the operating system's cause
    /// ("No space left on device").
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, e.g. "creating".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// A record handed to the writer is not a valid FRD record.
    #[error("record {index} of {path}")]
    Record {
        /// The raw file being written.
        path: PathBuf,
        /// Position of the record in the file.
        index: u32,
        /// What is wrong with it.
        source: FormatError,
    },
    /// An end-of-lumi record whose counts do not close.
    #[error("lumi section {ls}: {events} built + {lost} lost != {total} triggered; EoLS not written")]
    LumiNotClosed {
        /// The lumi section.
        ls: u32,
        /// Events built.
        events: u64,
        /// Events lost.
        lost: u64,
        /// Events triggered.
        total: u64,
    },
    /// An end-of-lumi record written while some of its raw files are still being written.
    #[error("lumi section {ls}: EoLS says {files} files, {unpublished} of them are still under open/")]
    LumiFilesUnpublished {
        /// The lumi section.
        ls: u32,
        /// Files the record counts.
        files: u64,
        /// Files of the lumi section still under `open/`.
        unpublished: u64,
    },
    /// A file asked to be published is not complete.
    #[error("{path}: not a complete raw file; it cannot be published")]
    Incomplete {
        /// The file in `open/`.
        path: PathBuf,
    },
    /// A raw file too large for its header fields.
    #[error("{path}: {what} overflows its header field")]
    TooLarge {
        /// The raw file.
        path: PathBuf,
        /// The field, e.g. "event count".
        what: &'static str,
    },
}

impl RunDirError {
    /// Whether the file system had no room (ENOSPC, or a quota reached): an error that passes
    /// once space is freed, unlike the others.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, RunDirError::Io { source, .. }
            if matches!(source.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded))
    }

    /// The file or directory the error is about.
    pub fn path(&self) -> Option<&Path> {
        match self {
            RunDirError::Io { path, .. }
            | RunDirError::Record { path, .. }
            | RunDirError::Incomplete { path }
            | RunDirError::TooLarge { path, .. } => Some(path),
            RunDirError::LumiNotClosed { .. } | RunDirError::LumiFilesUnpublished { .. } => None,
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, RunDirError>;

pub(crate) fn io_err<'p>(action: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> RunDirError + 'p {
    move |source| RunDirError::Io { action, path: path.to_owned(), source }
}
