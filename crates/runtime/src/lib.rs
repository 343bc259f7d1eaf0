//! Tessera's units on real I/O: the sans-IO cores of `tessera-evb` driven by files, sockets and
//! threads. This crate grows with the event builder; today it holds the BU's file side.

#![warn(missing_docs)]

pub mod bu_files;
