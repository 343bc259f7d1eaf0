//! The event-building protocol of Tessera as pure state machines, in the style of quinn-proto:
//! no sockets, threads or clocks inside. A driver (the runtime, or the deterministic simulator)
//! feeds each unit its inputs with the current time and carries out what it outputs.
//!
//! The pull protocol (docs/design.md §8):
//! 1. A BU says Hello, then asks the EVM for events in batches up to its free capacity
//!    ([`msg::Message::Request`]).
//! 2. The EVM gives the next triggered events to that BU and tells every RU
//!    ([`msg::Message::Assign`]).
//! 3. Each RU sends its super-fragments of those events to the BU, many per message
//!    ([`msg::Message::Data`]), waiting at most a time-out for late FEDs.
//! 4. The BU builds the events, writes a file, and reports it built on its next request.
//! 5. The EVM commits the file (on RU 0's next data message to that BU, or alone after a short
//!    delay); only then does the BU publish it, and the RUs free the events' buffers (released on
//!    the next assignment). A BU lost before the commit has its events given to others; when it
//!    restarts, the EVM tells it which of its unpublished files to publish and which to discard.
//! 6. When a lumi section is over and all its events are committed, the EVM tells each BU how
//!    many it was given ([`msg::Message::EndOfLumi`]); the BU writes its end-of-lumi record once
//!    it has published them, and acknowledges it. [`msg::Message::EndOfRun`] follows the last.
//!
//! The push protocol ([`push`], after LHCb's) is the alternative: no event manager, each RU sends
//! every super-fragment to the BU a shared function of the event number gives, BUs age what stays
//! incomplete, and a throttle holds the trigger.
//!
//! [`wire`] gives every message its frame on TCP.
//!
//! A run starts only once every stream of every RU has connected ([`start`]), and a stream that
//! brings nothing holds its events (and through full buffers the trigger) until it sends, ends
//! or is masked: a busy machine or a late front end never makes an event incomplete.
//!
//! Every queue and table is bounded: an RU refuses fragments past its buffer
//! ([`ru::BackPressure`]), a BU never holds more than its configured events, and the EVM never
//! assigns more than a BU asked for.

#![warn(missing_docs)]

pub mod bu;
pub mod evm;
pub mod ingest;
pub mod intake;
pub mod invariant;
pub mod msg;
pub mod node;
pub mod push;
mod ring;
pub mod ru;
pub mod spare;
pub mod start;
mod table;
pub mod trigger_stream;
pub mod types;
pub mod unit;
pub mod wire;

pub use bu::{Bu, BuConfig, BuDisk};
pub use evm::{Evm, EvmConfig};
pub use node::EvmNode;
pub use ru::{Ru, RuConfig};
