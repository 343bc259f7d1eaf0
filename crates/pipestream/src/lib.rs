//! pipestream: an all-to-all network benchmark whose traffic looks like event building.
//!
//! Clients send messages to servers, each client to every server in turn as an event builder's
//! readout units send to its builder units, over connections that each carry a bounded number of
//! messages in flight. Every message carries its sequence number on its connection, and on
//! request a checksum, so that a server proves that nothing was lost, duplicated, reordered or
//! damaged. Processes (*instances*) are driven over REST through a state machine, and a driver
//! scans message sizes, thread counts and topologies, with baselines measured in the same run.
#![warn(missing_docs)]

pub mod config;
pub mod core;
pub mod engine;
pub mod fsm;
pub mod instance;
pub mod iperf3;
pub mod report;
pub mod results;
pub mod scan;
pub mod wire;
