//! The conservation laws the cores check of themselves ([`crate::Evm::check_invariants`],
//! [`crate::Ru::check_invariants`], [`crate::Bu::check_invariants`]), and how one is broken,
//! with the figures that break it.

use crate::types::{BuId, RuId};

/// A conservation law of a core broken: which law, and the figures that break it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvariantViolation {
    /// The EVM: every event triggered is committed, lost with its closed lumi section, or in
    /// flight.
    #[error("EVM: {triggered} triggered != {committed} committed + {lost} lost + {in_flight} in flight")]
    EventsNotConserved {
        /// Events triggered.
        triggered: u64,
        /// Events committed.
        committed: u64,
        /// Events lost with their closed lumi section.
        lost: u64,
        /// Events in flight.
        in_flight: usize,
    },
    /// The EVM: every event in flight waits to be assigned, waits to be reassigned, or is
    /// assigned to exactly one BU.
    #[error("EVM: {in_flight} in flight != {unassigned} unassigned + {to_reassign} to reassign + {assigned} assigned")]
    InFlightNotPlaced {
        /// Events in flight.
        in_flight: usize,
        /// Events triggered and not assigned yet.
        unassigned: usize,
        /// Events of lost BUs waiting to be reassigned.
        to_reassign: usize,
        /// Events assigned to BUs, summed over them.
        assigned: usize,
    },
    /// The EVM: no BU is assigned more events than its bound.
    #[error("EVM: BU {bu} holds {assigned} events, bound {bound}")]
    BuOverBound {
        /// The BU.
        bu: BuId,
        /// Events assigned to it.
        assigned: usize,
        /// The bound (`EvmConfig::max_assigned_per_bu`).
        bound: usize,
    },
    /// An RU: every fragment taken is freed or held by exactly one event.
    #[error("RU {ru}: {taken} fragments taken != {freed} freed + {held} held")]
    FragmentsNotConserved {
        /// The RU.
        ru: RuId,
        /// Fragments taken from its FEDs.
        taken: u64,
        /// Fragments freed.
        freed: u64,
        /// Fragments its events hold.
        held: u64,
    },
    /// An RU: the events it holds stay within its buffer pool.
    #[error("RU {ru}: a window of {window} events, bound {bound}")]
    WindowOverBound {
        /// The RU.
        ru: RuId,
        /// Events from the oldest held to the newest.
        window: usize,
        /// The bound (`RuConfig::max_events_buffered`).
        bound: usize,
    },
    /// A BU: it holds at most its bound of events, from request to publication.
    #[error("BU {bu}: {events} events held, bound {bound}")]
    BuEventsOverBound {
        /// The BU.
        bu: BuId,
        /// Events it holds.
        events: u32,
        /// The bound (`BuConfig::max_events_in_flight`).
        bound: u32,
    },
    /// A BU: the data it holds until written stays within its store (or one event, if larger).
    #[error("BU {bu}: {held_bytes} bytes held until written, bound {bound}")]
    BuStoreOverBound {
        /// The BU.
        bu: BuId,
        /// Fragment bytes it holds.
        held_bytes: u64,
        /// The bound (`BuConfig::store_bytes`, or its largest event if larger).
        bound: u64,
    },
}
