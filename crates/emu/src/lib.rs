//! Front-end emulator: the FEROL TCP streams that FED readout boards send into a readout unit.
//!
//! [`generator`] is pure (no I/O, no clock, no thread): for event *n* of one FED it writes the
//! FED fragment (a seeded payload, or the 952-byte trigger fragment for FED 1024) and plans its
//! FEROL blocks, with the trigger time, orbit, BX and lumi section from a deterministic
//! [`generator::TriggerClock`] and the faults that `FaultSpec`s ask for. What to emulate (the
//! FEDs' sizes, the clock, the faults) is described in `tessera_config::emulation`. Every FED of an
//! event computes the same trigger from the same seed, so streams need not talk to each other,
//! and every byte can be recomputed downstream.
//!
//! [`orbit`] is the pure generator of the HL-LHC DTH's streams: orbit after orbit of one
//! source, its orbit block of SlinkRocket fragments in Tessera's stream blocks, with a Poisson
//! number of events per orbit that every source draws alike, seeded payloads and the faults that
//! `OrbitFaultSpec`s ask for.
//!
//! [`dth`] sends one [`orbit::OrbitGenerator`] per source, paced at the LHC orbit rate or free
//! running, with the FEROL sender's connections and write loop.
//!
//! [`sender`] drives one generator per FED on its own thread and writes the streams over TCP or
//! into capture files, paced by the trigger clock or free running, and measures dead time.
//!
//! [`replay`] holds captured streams in memory and sends them in a loop, renumbering each
//! event as it goes: a sender that does no per-event generation, for baselines that must not be
//! bound by the emulator.

#![warn(missing_docs)]

pub mod dth;
pub mod error;
pub mod generator;
pub mod orbit;
pub mod replay;
pub mod sender;
mod stream;

pub use error::{EmuError, StreamName};
