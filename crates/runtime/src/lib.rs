//! Tessera's units on real I/O: the sans-IO cores of `tessera-evb` driven by files, sockets and
//! threads. This crate grows with the event builder; today it holds the BU's file side and its
//! store of received data, and the RU's receive memory for FEROL streams.

#![warn(missing_docs)]

pub mod bu_files;
pub mod bu_node;
pub mod conn;
pub mod ferol_input;
pub mod frame_store;
pub mod link;
pub mod ru_node;
pub mod stats;
pub mod system;
pub mod transport;
