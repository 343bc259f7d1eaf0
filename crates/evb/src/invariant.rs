//! The conservation laws the cores check of themselves ([`crate::Evm::check_invariants`],
//! [`crate::Ru::check_invariants`], [`crate::Bu::check_invariants`]), and how one is broken,
//! with the figures that break it.

use crate::types::{BuId, EventNumber, FileId, RuId};

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
    /// A BU: the bytes it holds are those of its events being built, in open files, and in
    /// files being written.
    #[error(
        "BU {bu}: {held_bytes} bytes held ({built_bytes} of events built) != {building} being built + {built} \
         in open files and files being written"
    )]
    BuBytesNotConserved {
        /// The BU.
        bu: BuId,
        /// Fragment bytes it counts held.
        held_bytes: u64,
        /// Of those, the bytes it counts of events built.
        built_bytes: u64,
        /// Bytes of the events being built, summed.
        building: u64,
        /// Bytes of the open files and the files being written, summed.
        built: u64,
    },
    /// A BU: every event it built, or found in a file on its disk, is in an open file, in a
    /// file not yet published, published, or discarded.
    #[error(
        "BU {bu}: {built} built + {found} found on disk != {open} in open files + {unpublished} in files \
         unpublished + {published} published + {discarded} discarded"
    )]
    BuEventsNotConserved {
        /// The BU.
        bu: BuId,
        /// Events built by this incarnation.
        built: u64,
        /// Events in the unpublished files it found on its disk at its start.
        found: u64,
        /// Events in its open files.
        open: u64,
        /// Events in its files not yet published.
        unpublished: u64,
        /// Events published by this incarnation.
        published: u64,
        /// Events in files discarded at the EVM's word.
        discarded: u64,
    },
    /// A BU: an event it holds is in one place only: being built, in an open file, or in a
    /// file not yet published.
    #[error("BU {bu}: event {event} held twice")]
    BuEventHeldTwice {
        /// The BU.
        bu: BuId,
        /// The event.
        event: EventNumber,
    },
    /// A BU (pull): it holds no event it did not ask the EVM for.
    #[error("BU {bu}: {outstanding} awaited + {building} being built + {built} built > {asked} asked for")]
    BuHoldsUnasked {
        /// The BU.
        bu: BuId,
        /// Events asked for by this incarnation (its credits, summed).
        asked: u64,
        /// Events asked for and not yet seen.
        outstanding: u32,
        /// Events being built.
        building: usize,
        /// Events built by this incarnation.
        built: u64,
    },
    /// A BU: each file it holds (open or unpublished) has an index its lumi section issued, and
    /// is held once: indices are never reused.
    #[error("BU {bu}: file {file} held twice or numbered past its lumi section's next index {next_index}")]
    BuFileMisnumbered {
        /// The BU.
        bu: BuId,
        /// The file.
        file: FileId,
        /// The next index of its lumi section.
        next_index: u32,
    },
    /// A BU: at most `BuConfig::max_open_files` files open at once.
    #[error("BU {bu}: {open} files open, bound {bound}")]
    BuOpenFilesOverBound {
        /// The BU.
        bu: BuId,
        /// Files open.
        open: usize,
        /// The bound (`BuConfig::max_open_files`, at least 1).
        bound: usize,
    },
    /// A BU: one file open per lumi section at most, which takes all its events built.
    #[error("BU {bu}: two files open for lumi section {lumi_section}")]
    BuLumiSectionOpenTwice {
        /// The BU.
        bu: BuId,
        /// The lumi section.
        lumi_section: u32,
    },
    /// A BU: a lumi section whose end-of-lumi record is written is never due again, and holds
    /// no file: its record is written only once all its files are published.
    #[error("BU {bu}: lumi section {lumi_section} ended, yet {what}")]
    BuEndedLumiSectionReopened {
        /// The BU.
        bu: BuId,
        /// The lumi section.
        lumi_section: u32,
        /// What it still has: `due again`, or the file it holds.
        what: String,
    },
}
