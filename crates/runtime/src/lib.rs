//! Tessera's units on real I/O: the sans-IO cores of `tessera-evb` driven by sockets, threads and
//! files.
//!
//! - [`ru_node`]: an RU, or the EVM's node (the EVM with RU 0), on one poller thread: FEROL
//!   streams read into pre-touched receive memory ([`ferol_input`]), fragments offered to the
//!   core, data frames written straight from where the fragments were received ([`conn`]).
//! - [`bu_node`]: a BU: its loop (received frames kept whole, where the socket read put them, in
//!   the [`frame_store`]), its writer and bookkeeping threads ([`bu_files`]), and its account of
//!   the room on its RAM disk, looked at by a watcher thread ([`ramdisk`]); [`copies`]: how often
//!   a payload byte is copied, counted in debug builds.
//! - Both run on one event-loop core (`event_loop`, internal): the poller, the clock, the
//!   protocol connections and run control, with the fixed order of a pass, written once; each
//!   node plugs in only what is its own.
//! - [`link`]: the opening of every protocol connection; `transport` (internal): what a link's
//!   frames travel on once open, TCP or UCX (the feature `ucx`); [`stats`]: live figures.
//!
//! Only nodes live here: a whole system in one process, with its front-end emulators, is
//! `tessera_control::system`.

#![warn(missing_docs)]

pub mod bu_files;
pub mod bu_node;
pub mod conn;
pub mod copies;
mod error;
mod event_loop;
pub mod ferol_input;
pub mod frame_store;
pub mod link;
pub mod ramdisk;
pub mod ru_node;
pub mod state;
pub mod stats;
mod transport;
