//! The filter unit (FU) of Tessera's file-based filter farm: it claims raw files from a BU's run
//! directory, runs a selection menu over their events, and writes the accepted events into
//! output streams per lumi section, with the bookkeeping the mergers combine (FORMATS.md §7–§8).
//! This crate grows with issue #5.

#![warn(missing_docs)]
