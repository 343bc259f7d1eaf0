//! Tessera's benchmarks, run as `tessera bench <suite>`.
//!
//! Every suite measures its baseline in the same run and prints each figure as a ratio of it:
//! the machines Tessera is developed on are shared and noisy, so only ratios within one run are
//! comparable. Nothing here asserts a time; targets are printed as met or missed with the figures.

#![warn(missing_docs)]

pub mod broker;
pub mod evb;
pub mod evb_suite;
pub mod formats;
pub mod fu;
pub mod links;
pub mod minimal;
pub mod net;
pub mod net_suite;
pub mod orbit_suite;
pub mod protocol;
pub mod protocols;
pub mod scan;
pub mod timing;
pub mod watched;
pub mod wire;

use std::path::PathBuf;

/// A target a suite is measured against: what is asked, what was measured, of what baseline
/// (measured in the same run), and whether it is met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// What is asked.
    pub name: String,
    /// What was measured.
    pub figure: String,
    /// What the figure is a ratio of, or the fixed bound it is held to.
    pub baseline: String,
    /// Whether it is met.
    pub met: bool,
}

impl Target {
    /// "met", or "MISSED" so that a miss stands out in a table.
    pub fn verdict(&self) -> &'static str {
        if self.met { "met" } else { "MISSED" }
    }
}

/// Why a benchmark could not run or could not write its results.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The front-end emulator failed.
    #[error("front-end emulator: {0}")]
    Emulator(#[from] tessera_emu::EmuError),
    /// A run did not end within its bound.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The event builder's run failed: a unit ended with an error, or an event was not built.
    #[error("event builder: {0}")]
    System(String),
    /// An FU process or a merger failed.
    #[error("filter farm: {0}")]
    Fu(#[from] tessera_fu::FuError),
    /// A case's parameters make no sense.
    #[error("bad case: {0}")]
    BadCase(String),
    /// A plot could not be drawn.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// Why.
        reason: scan::PlotError,
    },
}
