//! One simulated system, driven event by event on one thread: the event queue and its steps
//! here; the system a scenario describes with its faults (`setup`), the FED streams (`fed`), the
//! units' inputs and outputs and the network between them (`network`), and the invariants checked
//! after every step (`checks`) in modules of their own.

use crate::rng::Rng;
use crate::scenario::Scenario;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use tessera_evb::intake::Intake;
use tessera_evb::msg::{BufferRef, Message};
use tessera_evb::ru::StreamChange;
use tessera_evb::types::{EventNumber, FedId, FileId, Nanos, Peer};
use tessera_evb::unit::{BuiltEvent, Input};
use tessera_evb::{Bu, BuConfig, RuConfig};

mod checks;
mod fed;
mod network;
mod setup;

use crate::readout::Readout;

/// Counts of what a run injected and saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Fragments accepted by RUs.
    pub fragments: u64,
    /// Times an RU refused a fragment for a full buffer.
    pub back_pressure: u64,
    /// BU crashes injected.
    pub bu_crashes: u64,
    /// BUs made slow.
    pub slow_bus: u64,
    /// FEDs stalled, dead or made to skip an event.
    pub fed_faults: u64,
    /// Corrupt fragments injected.
    pub corrupt_fragments: u64,
    /// Events published with FEDs missing.
    pub incomplete_events: u64,
    /// Sync losses seen by RUs.
    pub sync_losses: u64,
    /// Late fragments dropped by RUs.
    pub late_fragments: u64,
    /// Trigger streams that broke before run control stopped the trigger (said by the EVM's node).
    pub trigger_breaks: u64,
    /// Fragments the RUs hold at the end of events the trigger never issued.
    pub orphan_fragments: u64,
    /// Messages sent, and of them control messages.
    pub messages: u64,
    /// Control messages (everything but data).
    pub control_messages: u64,
    /// Steps simulated.
    pub steps: u64,
    /// Orbit mode: events in the orbits published.
    pub orbit_events: u64,
    /// Orbit mode: orbits published with no event (counted, never written).
    pub empty_orbits: u64,
    /// Orbit mode: orbit blocks the BUs left out of their orbits for disagreeing with the others.
    pub blocks_left_out: u64,
    /// Push: events the BUs shipped incomplete for their age.
    pub aged_events: u64,
    /// Push: parts that came to a BU after their event was shipped.
    pub late_parts: u64,
    /// Time the trigger was held, in nanoseconds (dead time): under push by the throttle, under
    /// pull by RU 0's full buffers refusing the trigger's fragments.
    pub dead_time_ns: u64,
    /// Front-end connections refused (strangers: a FED of no RU, or nothing named in time).
    pub refused_connections: u64,
    /// Fragments that came in pieces.
    pub partial_reads: u64,
    /// Push: events lost with a lost BU (given to it and never published).
    pub lost_events: u64,
    /// Push: data messages a BU held back for want of room (its connection stalled).
    pub held_messages: u64,
}

#[derive(Debug)]
enum Ev {
    FedReady {
        ru: usize,
        fed: usize,
    },
    Deliver {
        from: Peer,
        to: Peer,
        msg: Message,
        incarnation: u32,
    },
    Tick {
        node: Peer,
        generation: u64,
    },
    WriteDone {
        bu: usize,
        file: FileId,
        incarnation: u32,
    },
    PublishDone {
        bu: usize,
        file: FileId,
        incarnation: u32,
    },
    BuCrash {
        bu: usize,
    },
    BuLost {
        bu: usize,
    },
    BuRestart {
        bu: usize,
    },
    StopTrigger,
    /// Push: the trigger's next event is due (it holds while the throttle is up).
    Trigger,
    /// Push: a BU may read the data messages it held back.
    BuRead {
        bu: usize,
    },
    /// A front end connects to RU `ru`: the stream of its FED at `fed`, or a stranger that will
    /// name `names` (a FED of no RU), or nothing.
    Connect {
        ru: usize,
        fed: Option<usize>,
        names: Option<FedId>,
    },
    /// That connection's first block header comes (or, for a stranger that names nothing, its
    /// time to name one runs out).
    Name {
        ru: usize,
        fed: Option<usize>,
        names: Option<FedId>,
    },
    /// The stream of a FED ends for good.
    EndStream {
        ru: usize,
        fed: usize,
    },
    /// An operator masks a FED.
    Mask {
        ru: usize,
        fed: usize,
    },
}

/// The node of RU `ru`: RU 0's is the EVM's (or push's RU 0 node).
fn ru_node(ru: usize) -> Peer {
    if ru == 0 { Peer::Evm } else { Peer::Ru(ru as u16) }
}

struct FedSource {
    id: FedId,
    next_event: EventNumber,
    stall: Option<(Nanos, Nanos)>,
    skip: Option<EventNumber>,
    /// Sends at most one fragment every two mean trigger intervals.
    slow: bool,
    /// When it last sent a fragment.
    sent_at: Nanos,
    /// Its fragments the RU holds (not yet freed).
    held: u64,
    /// The last event its stream carries: after it, the stream ends (closes).
    last_event: EventNumber,
    /// Its stream has ended.
    ended: bool,
    /// Push: it waits for the trigger to issue its next event.
    awaiting_trigger: bool,
    /// Its stream has connected and named its FED.
    named: bool,
    /// The first event that may go out without it: its stream ended, it was masked, or it
    /// skipped that event.
    gone_from: Option<EventNumber>,
    /// A fragment of it is arriving in pieces: the rest comes at this time.
    partial_until: Option<Nanos>,
}

struct SimFile {
    lumi_section: u32,
    events: Vec<BuiltEvent>,
    written: bool,
    /// Orbit mode: what the file holds as its writer judged its orbits.
    orbits: OrbitTally,
}

/// Orbit mode: events and empty orbits, of a file or of a lumi section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct OrbitTally {
    events: u64,
    empty_orbits: u64,
    /// Orbits built whole that the writer left a block out of: the BU core is told they are
    /// incomplete, as the runtime's writer tells it.
    made_incomplete: u32,
}

struct BuSlot {
    unit: Option<Bu>,
    incarnation: u32,
    slow: bool,
    files: BTreeMap<FileId, SimFile>,
    next_index: BTreeMap<u32, u32>,
    /// Events published per lumi section whose end-of-lumi record is not written.
    published_events: BTreeMap<u32, u64>,
    /// End-of-lumi records written: lumi section → events.
    end_of_lumis: BTreeMap<u32, u64>,
    /// Push: events its end-of-lumi records count lost (a lost BU started again).
    lost_in_records: u64,
    ended: bool,
}

/// Push: the trigger, which holds while the throttle is up; the data messages each BU has not
/// read for want of room, per connection (in order, as TCP keeps them); the BUs excluded.
#[derive(Default)]
struct PushState {
    /// Events the trigger issued.
    issued: u64,
    /// When each issued event was triggered.
    triggered_at: Vec<Nanos>,
    /// How far the throttle pushed the remaining triggers back.
    delay: Nanos,
    /// Per (RU, BU) connection, the messages the BU has not read.
    unread: BTreeMap<(Peer, Peer), std::collections::VecDeque<Message>>,
    /// BUs with a read scheduled.
    read_scheduled: BTreeSet<usize>,
    /// Excluded BUs: (BU, first event excluded, events given to it before).
    excluded: Vec<(u16, EventNumber, u64)>,
}

/// The simulated system.
pub struct World {
    sc: Scenario,
    rng: Rng,
    now: Nanos,
    seq: u64,
    queue: BinaryHeap<Reverse<(Nanos, u64)>>,
    pending: HashMap<u64, Ev>,
    readout: Readout,
    ru_cfgs: Vec<RuConfig>,
    bus: Vec<BuSlot>,
    bu_cfgs: Vec<BuConfig>,
    sources: Vec<Vec<FedSource>>,
    trigger_times: Vec<Nanos>,
    last_delivery: HashMap<(Peer, Peer), Nanos>,
    tick_generation: HashMap<Peer, (u64, Nanos)>,
    /// Buffers the RUs hold, with the (RU, FED) whose stream filled each and its event.
    buffers: BTreeMap<BufferRef, (usize, usize, EventNumber)>,
    next_buffer: u32,
    corrupt: BTreeSet<(FedId, EventNumber)>,
    /// Orbit mode: each orbit's events, by orbit index from the first.
    orbit_events: Vec<u16>,
    /// Orbit mode: the (source, orbit) whose block lacks one of the orbit's events.
    short_blocks: BTreeSet<(FedId, EventNumber)>,
    /// Orbit mode: what the published files hold, per lumi section.
    published_orbits: BTreeMap<u32, OrbitTally>,
    published: BTreeMap<EventNumber, FileId>,
    stop_sent: bool,
    last_progress: Nanos,
    /// Push: the trigger's state and what push's faults and bounds left.
    push: PushState,
    /// Each RU's rule of which front-end connections it takes.
    intakes: Vec<Intake>,
    /// When the last stream connected: no event may be made before.
    all_named_at: Option<Nanos>,
    /// The longest pause of a stalled FED, up to the run's last trigger.
    longest_pause: Nanos,
    /// Every how many steps the units' full invariants are checked (every step for small
    /// systems; the RUs' walk over what they hold costs more in large ones).
    check_every: u64,
    /// Every broken invariant, in the order found.
    pub violations: Vec<String>,
    /// What the run injected and saw.
    pub tally: Tally,
}

impl World {
    fn schedule(&mut self, at: Nanos, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at.max(self.now), self.seq)));
        self.pending.insert(self.seq, ev);
    }

    fn violation(&mut self, what: String) {
        if self.violations.len() < 20 {
            self.violations.push(format!("t={} µs: {what}", self.now / 1000));
        }
    }

    /// Runs until the system drains, an invariant breaks, or time runs out. Returns the simulated
    /// time at the end.
    pub fn run(&mut self) -> Nanos {
        let end = self.trigger_times.last().copied().unwrap_or(0);
        // A run that publishes nothing for a second of simulated time after its last trigger is
        // stuck (deadlock or livelock).
        let patience = 1_000_000_000;
        let max_steps = 200 * self.sc.events * u64::from(self.sc.topology.n_ru + self.sc.topology.n_bu) + 1_000_000;
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            let Some(ev) = self.pending.remove(&seq) else { continue };
            self.now = at;
            self.tally.steps += 1;
            self.step(ev);
            if self.tally.steps.is_multiple_of(self.check_every) {
                self.check_bounds();
            }
            if !self.violations.is_empty() {
                return self.now;
            }
            if self.stop_sent && self.drained() {
                self.check_bounds();
                self.check_end();
                return self.now;
            }
            if (self.now > end && self.now > self.last_progress + patience) || self.tally.steps > max_steps {
                break;
            }
        }
        let stuck = self.describe_stuck();
        self.violation(format!(
            "no progress: {} of {} events published when the run stopped ({stuck})",
            self.published.len(),
            self.sc.events
        ));
        self.now
    }

    /// Events published so far.
    pub fn published_count(&self) -> u64 {
        self.published.len() as u64
    }

    /// Events the trigger issued: the scenario's, or fewer when its stream broke.
    pub fn triggered_count(&self) -> u64 {
        self.run_events()
    }

    /// The events of the run: all of the scenario's, or those triggered before the trigger
    /// stream broke.
    fn run_events(&self) -> u64 {
        match self.readout.trigger_break() {
            Some(_) => self.readout.last_triggered().map_or(0, |last| last + 1 - self.sc.first_event),
            None => self.sc.events,
        }
    }

    /// Push: the events of the run given to an excluded BU and never published, each with the
    /// BU it was lost with.
    fn lost_with_bus(&self) -> BTreeMap<EventNumber, u16> {
        let first = self.sc.first_event;
        let Some(mode) = self.sc.push else { return BTreeMap::new() };
        // The function as every RU applied it: each exclusion from its event on.
        let mut destinations = mode.destinations(first, self.bus.len() as u16);
        for &(bu, from, _) in &self.push.excluded {
            destinations.exclude(bu, from).expect("exclusions come in order, each of an enabled BU");
        }
        let excluded: BTreeSet<u16> = self.push.excluded.iter().map(|x| x.0).collect();
        (first..first + self.run_events())
            .filter_map(|e| {
                let bu = destinations.of(e).filter(|bu| excluded.contains(bu))?;
                self.published.get(&e).is_none_or(|f| f.bu != bu).then_some((e, bu))
            })
            .collect()
    }

    /// Every event of the run published, every unit ended, and no buffer held but the orphans
    /// (of events after the run's last).
    fn drained(&self) -> bool {
        let events = self.run_events();
        let end = self.sc.first_event + events;
        // The lost events, which walk the whole run, are counted last and only when needed.
        // Every BU ends, a lost one too: started again, it closes its lumi sections.
        self.readout.drained()
            && (0..self.readout.len()).all(|r| self.readout.ru(r).drain_seen())
            && (0..self.bus.len()).all(|b| self.bus[b].ended && self.bus[b].unit.as_ref().is_some_and(Bu::idle))
            && self.buffers.values().all(|&(_, _, event)| event >= end)
            && (self.published.len() as u64 == events
                || self.published.len() as u64 + self.lost_with_bus().len() as u64 == events)
    }

    fn describe_stuck(&self) -> String {
        let bus: Vec<String> = self
            .bus
            .iter()
            .enumerate()
            .map(|(i, b)| match &b.unit {
                Some(u) => format!(
                    "BU {i}: {} in flight{}{}",
                    u.events_in_flight(),
                    if u.idle() { ", idle" } else { "" },
                    if b.ended { ", ended" } else { "" }
                ),
                None => format!("BU {i}: down"),
            })
            .collect();
        let (in_flight, pending) = self.readout.evm_state();
        let waits: Vec<String> = (0..self.readout.len())
            .filter_map(|r| {
                let w = self.readout.ru(r).waiting_for()?;
                Some(format!("RU {r}'s event {} waits for FED {} since {} µs", w.event, w.fed, w.since / 1000))
            })
            .collect();
        let unconnected: Vec<String> = (0..self.readout.len())
            .filter_map(|r| {
                let feds = self.readout.ru(r).unconnected_feds();
                (!feds.is_empty()).then(|| format!("RU {r} lacks the streams of FEDs {feds:?}"))
            })
            .collect();
        format!(
            "EVM {in_flight} in flight, pending [{pending}]; buffers held {}; {}; {}{}",
            self.buffers.len(),
            bus.join(", "),
            waits.join(", "),
            unconnected.join(", ")
        )
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::FedReady { ru, fed } => self.fed_ready(ru, fed),
            Ev::Deliver { from, to, msg, incarnation } => match to {
                Peer::Evm | Peer::Ru(0) => self.feed(Peer::Evm, Input::Message { from, msg }),
                Peer::Ru(r) => self.feed(Peer::Ru(r), Input::Message { from, msg }),
                Peer::Bu(b) => {
                    let slot = &self.bus[usize::from(b)];
                    if slot.unit.is_some() && slot.incarnation == incarnation {
                        self.deliver_to_bu(from, b, msg);
                    }
                }
            },
            Ev::Tick { node, generation } => {
                if self.tick_generation.get(&node).is_some_and(|&(g, _)| g == generation) {
                    self.tick_generation.remove(&node);
                    self.feed(node, Input::Tick);
                }
            }
            Ev::WriteDone { bu, file, incarnation } => {
                if self.bus[bu].incarnation == incarnation && self.bus[bu].unit.is_some() {
                    let mut made_incomplete = 0;
                    if let Some(f) = self.bus[bu].files.get_mut(&file) {
                        f.written = true;
                        made_incomplete = f.orbits.made_incomplete;
                    }
                    if made_incomplete > 0 {
                        let input = Input::OrbitsLeftIncomplete { file, orbits: made_incomplete };
                        self.feed(Peer::Bu(bu as u16), input);
                    }
                    self.feed(Peer::Bu(bu as u16), Input::FileWritten(file));
                }
            }
            Ev::PublishDone { bu, file, incarnation } => {
                if self.bus[bu].incarnation == incarnation && self.bus[bu].unit.is_some() {
                    self.feed(Peer::Bu(bu as u16), Input::FilePublished(file));
                }
            }
            Ev::BuCrash { bu } => {
                if self.bus[bu].unit.take().is_some() {
                    self.tally.bu_crashes += 1;
                    self.bus[bu].incarnation += 1;
                    self.tick_generation.remove(&Peer::Bu(bu as u16));
                    self.push.unread.retain(|&(_, to), _| to != Peer::Bu(bu as u16));
                    self.schedule(self.now + 3_000_000, Ev::BuLost { bu });
                    // Under push a lost BU is excluded for the rest of the run; started again,
                    // it takes no event and closes its lumi sections, counting what it lost.
                    let back = self.now + self.rng.between(1_000_000, 30_000_000);
                    self.schedule(back, Ev::BuRestart { bu });
                }
            }
            Ev::BuLost { bu } => {
                if self.bus[bu].unit.is_none() {
                    self.feed(Peer::Evm, Input::PeerLost(Peer::Bu(bu as u16)));
                }
            }
            Ev::BuRestart { bu } => self.start_bu(bu),
            Ev::StopTrigger => {
                self.stop_sent = true;
                let last_event = (self.sc.events > 0).then(|| self.sc.first_event + self.sc.events - 1);
                self.feed(Peer::Evm, Input::StopTrigger { last_event });
            }
            Ev::Trigger => self.trigger(),
            Ev::BuRead { bu } => {
                self.push.read_scheduled.remove(&bu);
                self.read_unread(bu);
            }
            Ev::Connect { ru, fed, names } => self.connect(ru, fed, names),
            Ev::Name { ru, fed, names } => self.name(ru, fed, names),
            Ev::EndStream { ru, fed } => {
                let s = &mut self.sources[ru][fed];
                s.gone_from.get_or_insert(s.next_event);
                s.ended = true;
                self.readout.stream_changed(self.now, ru, fed, StreamChange::Ended);
                self.drain_outputs(ru_node(ru));
            }
            Ev::Mask { ru, fed } => {
                let s = &mut self.sources[ru][fed];
                s.gone_from.get_or_insert(s.next_event);
                if !self.readout.stream_changed(self.now, ru, fed, StreamChange::Masked) {
                    self.violation(format!("RU {ru}: FED {} could not be masked", self.sources[ru][fed].id));
                }
                self.drain_outputs(ru_node(ru));
            }
        }
    }
}
