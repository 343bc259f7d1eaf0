//! Tessera's benchmarks, run as `tessera bench <suite>`.
//!
//! Every suite measures its baseline in the same run and prints each figure as a ratio of it:
//! the machines Tessera is developed on are shared and noisy, so only ratios within one run are
//! comparable. Nothing here asserts a time; targets are printed as met or missed with the figures.

#![warn(missing_docs)]

pub mod formats;
pub mod protocol;
pub mod timing;
pub mod wire;
