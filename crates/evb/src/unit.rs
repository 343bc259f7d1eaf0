//! What goes into and comes out of every unit.

use crate::msg::{FragmentRef, Message, SuperFragment};
use crate::types::{BuId, EventNumber, FedId, FileId, Peer, RuId};

/// An input to a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A message from a peer.
    Message {
        /// Who sent it.
        from: Peer,
        /// The message.
        msg: Message,
    },
    /// A file the unit asked to write is written and closed (BU).
    FileWritten(FileId),
    /// A file the unit asked to publish is renamed into place with its JSON (BU).
    FilePublished(FileId),
    /// Orbit mode, before [`Input::FileWritten`] of `file`: its writer left a block out of
    /// `orbits` of its orbits that the unit had built whole (a block CMSSW's reader would refuse,
    /// or one that disagrees with the orbit's other blocks). They count as incomplete (BU).
    OrbitsLeftIncomplete {
        /// The file.
        file: FileId,
        /// The orbits.
        orbits: u32,
    },
    /// The connection to a peer is lost, or the peer stopped answering.
    PeerLost(Peer),
    /// Run control: the trigger is off (EVM).
    StopTrigger {
        /// The last event the trigger issued (none if it issued none): the EVM ends the run
        /// once it has seen it.
        last_event: Option<EventNumber>,
    },
    /// Time passed: check time-outs.
    Tick,
}

/// Something an operator should see, with a stable key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A FED sent an event out of sequence: it is ignored from then on.
    SyncLoss {
        /// The FED.
        fed: FedId,
        /// The event it should have sent.
        expected: EventNumber,
        /// The LV1 id it sent.
        found_lv1: u32,
    },
    /// An event was sent on without some FEDs: they are out of sync, their stream ended, they
    /// are masked or given up on, or their event is already behind them. The notice does not
    /// say which: a driver that knows more of the FEDs' streams (a disconnect, a broken stream)
    /// says it.
    MissingFragments {
        /// The event.
        event: EventNumber,
        /// The FEDs missing.
        feds: Vec<FedId>,
    },
    /// A fragment arrived after its event had been sent on; it was dropped.
    LateFragment {
        /// The FED.
        fed: FedId,
        /// The event.
        event: EventNumber,
    },
    /// A FED's stream brought nothing for the give-up time that the system file sets
    /// (`ru.silent_fed_give_up_ms`; off by default, when a silent FED holds the trigger): events
    /// no longer wait for it until it catches up.
    FedGivenUp {
        /// The FED.
        fed: FedId,
        /// The first event it missed.
        event: EventNumber,
    },
    /// The operator masked a FED: events from `event` on go on without it for the rest of the
    /// run.
    FedMasked {
        /// The FED.
        fed: FedId,
        /// The first event that goes on without it (the first it had not delivered).
        event: EventNumber,
    },
    /// A trigger came for a lumi section already closed on its time-out: the event is counted
    /// lost (`LUMI_SECTION_CLOSED`) and its fragments released.
    LateTrigger {
        /// The event.
        event: EventNumber,
        /// Its lumi section.
        lumi_section: u32,
    },
    /// The trigger stream broke before run control stopped the trigger (EVM's node): the
    /// trigger is stopped at the last good trigger fragment, the events triggered before it are
    /// built, and the run has failed.
    TriggerStreamBroken {
        /// How it broke.
        what: TriggerBreak,
        /// Good trigger fragments before it.
        fragments: u64,
        /// The last event triggered.
        last_event: Option<EventNumber>,
    },
    /// Push: a BU shipped an event flagged incomplete without the parts of some RUs, for its
    /// age: a part of an event `age_events` newer came (`by_time` false), or `age_ns` passed.
    EventAged {
        /// The event.
        event: EventNumber,
        /// The RUs whose parts had not come.
        missing_rus: Vec<RuId>,
        /// Whether the wall-clock bound aged it, rather than newer events.
        by_time: bool,
    },
    /// Push: a part came to a BU after its event was shipped; it was dropped.
    LatePart {
        /// The RU that sent it.
        ru: RuId,
        /// The event.
        event: EventNumber,
    },
    /// Push: a lost BU is excluded from `from_event` on; it was given `assigned` events before,
    /// and those it did not publish are lost (`BU_LOST`).
    BuExcluded {
        /// The BU.
        bu: BuId,
        /// The first event it no longer receives.
        from_event: EventNumber,
        /// Events the destination function gave it before.
        assigned: u64,
    },
    /// A message that breaks the protocol (a bug, or a peer that sends garbage); it was dropped.
    ProtocolError {
        /// What was wrong.
        what: String,
    },
}

/// One complete event as a BU writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltEvent {
    /// The event.
    pub event: EventNumber,
    /// Its lumi section (from the trigger fragment).
    pub lumi_section: u32,
    /// FRD flags (see `tessera_formats::frd::flags`).
    pub flags: u16,
    /// The parts, one per RU, in RU order. Under push, the part of an RU that never sent one
    /// (the event was aged) is empty: no fragments and no missing FEDs.
    pub parts: Vec<SuperFragment>,
}

/// An output of a readout unit, and of the EVM's node (which passes on what its RU and its EVM
/// say, keeping the triggers between them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuOutput {
    /// Send a message.
    Send {
        /// To whom.
        to: Peer,
        /// The message.
        msg: Message,
    },
    /// The RU took a trigger fragment: the event exists. Only the EVM's node reads the trigger
    /// FED, and it hands these to its EVM; they never leave it.
    Triggered {
        /// The event.
        event: EventNumber,
        /// Its lumi section, from the trigger fragment.
        lumi_section: u32,
    },
    /// Receive buffers that can be reused.
    FreeBuffers(Vec<FragmentRef>),
    /// Something for monitoring.
    Notice(Notice),
}

/// An output of the event manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvmOutput {
    /// Send a message.
    Send {
        /// To whom.
        to: Peer,
        /// The message.
        msg: Message,
    },
    /// Something for monitoring.
    Notice(Notice),
}

/// An output of a builder unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuOutput {
    /// Send a message.
    Send {
        /// To whom.
        to: Peer,
        /// The message.
        msg: Message,
    },
    /// Write these events into a new raw file under `open/` and close it.
    WriteFile {
        /// The file.
        file: FileId,
        /// Its lumi section.
        lumi_section: u32,
        /// The events, in the order to write them.
        events: Vec<BuiltEvent>,
    },
    /// Rename the file out of `open/` and write its JSON.
    PublishFile(FileId),
    /// Delete the file from `open/`: its events were given to another BU.
    DiscardFile(FileId),
    /// Write the end-of-lumi record of a lumi section: all of its events given to this BU are
    /// published, or (a push BU started again after its loss) lost.
    EndOfLumi {
        /// The lumi section.
        lumi_section: u32,
        /// Events of it in this BU's files.
        events: u64,
        /// Events of it given to this BU and never published (push: lost with the BU).
        lost: u64,
    },
    /// Write the end-of-run record: every lumi section is closed.
    EndOfRun {
        /// The last lumi section.
        last_lumi_section: u32,
        /// Lumi sections in the run.
        lumi_sections: u32,
    },
    /// Something for monitoring.
    Notice(Notice),
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::SyncLoss { fed, expected, found_lv1 } => write!(
                f,
                "FED {fed} lost sync: expected event {expected}, it sent LV1 {found_lv1:#08x}; it is ignored from then on"
            ),
            Notice::MissingFragments { event, feds } => {
                write!(f, "event {event} sent on without FEDs {feds:?}")
            }
            Notice::LateFragment { fed, event } => {
                write!(f, "FED {fed}'s fragment of event {event} came after the event was sent on; dropped")
            }
            Notice::FedGivenUp { fed, event } => write!(
                f,
                "FED {fed} given up at event {event}: its stream brought nothing for the give-up time \
                 (ru.silent_fed_give_up_ms); events no longer wait for it until it catches up"
            ),
            Notice::FedMasked { fed, event } => {
                write!(f, "FED {fed} masked by the operator: events from {event} on go on without it")
            }
            Notice::LateTrigger { event, lumi_section } => write!(
                f,
                "event {event} of lumi section {lumi_section} came after the section was closed on its time-out: lost (LUMI_SECTION_CLOSED)"
            ),
            Notice::TriggerStreamBroken { what, fragments, last_event } => write!(
                f,
                "the trigger stream {what} after {fragments} fragments (last event {last_event:?}), before run \
                 control stopped the trigger: the run failed"
            ),
            Notice::EventAged { event, missing_rus, by_time } => write!(
                f,
                "event {event} shipped incomplete without the parts of RUs {missing_rus:?}: {}",
                if *by_time { "its time-out passed" } else { "newer events came" }
            ),
            Notice::LatePart { ru, event } => {
                write!(f, "RU {ru}'s part of event {event} came after the event was shipped; dropped")
            }
            Notice::BuExcluded { bu, from_event, assigned } => write!(
                f,
                "BU {bu} lost: excluded from event {from_event} on; of the {assigned} events it was given before, those \
                 it did not publish are lost (BU_LOST)"
            ),
            Notice::ProtocolError { what } => write!(f, "protocol error: {what}"),
        }
    }
}

/// How the trigger stream broke before run control stopped the trigger
/// ([`Notice::TriggerStreamBroken`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerBreak {
    /// It closed at a fragment boundary, before the run's event limit (if it has one).
    Closed {
        /// The run's event limit, or the stop line's.
        expected: Option<u64>,
    },
    /// It could not be read on (garbage, a fragment cut short).
    Broken(String),
    /// It sent an event out of sequence.
    SyncLost {
        /// The event it should have sent.
        expected: EventNumber,
        /// The LV1 id it sent.
        found_lv1: u32,
    },
}

impl TriggerBreak {
    /// A stable key, for summaries and monitoring.
    pub fn key(&self) -> &'static str {
        match self {
            TriggerBreak::Closed { .. } => "TRIGGER_STREAM_CLOSED",
            TriggerBreak::Broken(_) => "TRIGGER_STREAM_BROKEN",
            TriggerBreak::SyncLost { .. } => "TRIGGER_SYNC_LOST",
        }
    }
}

impl std::fmt::Display for TriggerBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TriggerBreak::Closed { expected: Some(n) } => write!(f, "closed early (the run expects {n} events)"),
            TriggerBreak::Closed { expected: None } => write!(f, "closed"),
            TriggerBreak::Broken(why) => write!(f, "broke ({why})"),
            TriggerBreak::SyncLost { expected, found_lv1 } => {
                write!(f, "lost sync (expected event {expected}, it sent LV1 {found_lv1:#08x})")
            }
        }
    }
}
