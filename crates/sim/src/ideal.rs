//! An ideal driver: every unit of a system handed its inputs in order, messages through one
//! queue with no delay and no fault. The protocol benchmark measures the cores with it, and the
//! end-to-end tests run the cores into real files with it.

use crate::scenario::Topology;
use std::collections::VecDeque;
use tessera_evb::msg::{FragmentRef, Message};
use tessera_evb::types::{BuId, EventNumber, FedId, FileId, Nanos, Peer};
use tessera_evb::unit::{BuOutput, BuiltEvent, Input, RuOutput};
use tessera_evb::{Bu, BuConfig, BuDisk, EvmConfig, EvmNode, Ru, RuConfig};
use tessera_formats::tcds::TCDS_FED_ID;

/// What the driver does with the units' effects on the world: a BU's file actions (each
/// completes at once) and how a message travels.
pub trait Effects {
    /// Writes `events` as `file` of BU `bu`.
    fn write(&mut self, bu: BuId, file: FileId, events: &[BuiltEvent]);
    /// Publishes `file` of BU `bu`.
    fn publish(&mut self, bu: BuId, file: FileId);
    /// Writes the end-of-lumi record of `lumi_section` at BU `bu`.
    fn end_lumi(&mut self, _bu: BuId, _lumi_section: u32, _events: u64) {}
    /// Writes the end-of-run record at BU `bu`.
    fn end_run(&mut self, _bu: BuId, _last_lumi_section: u32, _lumi_sections: u32) {}
    /// Carries `msg` from `from` to `to` and returns it as it arrives: by default, as it is.
    fn carry(&mut self, _from: Peer, _to: Peer, msg: Message) -> Message {
        msg
    }
}

/// Effects that do nothing: the cores alone.
#[derive(Debug, Default)]
pub struct NoEffects;

impl Effects for NoEffects {
    fn write(&mut self, _: BuId, _: FileId, _: &[BuiltEvent]) {}
    fn publish(&mut self, _: BuId, _: FileId) {}
}

/// The FED ids of RU `ru` in `topology`: data FEDs `ru · feds_per_ru ..`, and the trigger FED
/// first on RU 0.
pub fn fed_ids(topology: Topology, ru: u16) -> Vec<FedId> {
    let mut feds: Vec<FedId> = (0..topology.feds_per_ru).map(|i| ru * topology.feds_per_ru + i).collect();
    if ru == 0 {
        feds.insert(0, TCDS_FED_ID);
    }
    feds
}

/// Messages and fragments counted by a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Fragments handed to RUs.
    pub fragments: u64,
    /// Control messages sent.
    pub control: u64,
    /// Data messages sent.
    pub data: u64,
}

/// A whole system driven without delays.
pub struct IdealSystem<F> {
    topology: Topology,
    first_event: EventNumber,
    /// The EVM and RU 0.
    pub evm: EvmNode,
    rus: Vec<Ru>,
    bus: Vec<Bu>,
    files: F,
    queue: VecDeque<(Peer, Peer, Message)>,
    ended: Vec<bool>,
    inputs: VecDeque<(Peer, Input)>,
    counts: Counts,
}

impl<F: Effects> IdealSystem<F> {
    /// A system of `topology` with default configurations, numbering events from `first_event`.
    pub fn new(topology: Topology, first_event: EventNumber, files: F) -> Self {
        let ru_cfg = |r| RuConfig { first_event, ..RuConfig::new(r, fed_ids(topology, r)) };
        IdealSystem {
            evm: EvmNode::new(EvmConfig::new(topology.n_ru, topology.n_bu), ru_cfg(0)),
            rus: (1..topology.n_ru).map(|r| Ru::new(ru_cfg(r))).collect(),
            bus: (0..topology.n_bu).map(|b| Bu::new(BuConfig::new(b, topology.n_ru), 1, BuDisk::default())).collect(),
            topology,
            first_event,
            files,
            queue: VecDeque::new(),
            ended: vec![false; usize::from(topology.n_bu)],
            inputs: VecDeque::new(),
            counts: Counts::default(),
        }
    }

    /// The effects, after a run.
    pub fn into_files(self) -> F {
        self.files
    }

    fn outputs(&mut self, node: Peer) {
        match node {
            Peer::Bu(b) => {
                while let Some(out) = self.bus[usize::from(b)].poll_output() {
                    self.bu_output(b, out);
                }
            }
            _ => loop {
                let out = match node {
                    Peer::Ru(r) if r > 0 => self.rus[usize::from(r) - 1].poll_output(),
                    _ => self.evm.poll_output(),
                };
                match out {
                    Some(RuOutput::Send { to, msg }) => self.send(node, to, msg),
                    // Nothing is lost here: buffers need no freeing, and there is nobody to tell.
                    Some(RuOutput::FreeBuffers(_) | RuOutput::Notice(_) | RuOutput::Triggered { .. }) => {}
                    None => return,
                }
            },
        }
    }

    fn bu_output(&mut self, b: u16, out: BuOutput) {
        let node = Peer::Bu(b);
        match out {
            BuOutput::Send { to, msg } => self.send(node, to, msg),
            BuOutput::WriteFile { file, events, .. } => {
                self.files.write(b, file, &events);
                self.inputs.push_back((node, Input::FileWritten(file)));
            }
            BuOutput::PublishFile(file) => {
                self.files.publish(b, file);
                self.inputs.push_back((node, Input::FilePublished(file)));
            }
            BuOutput::EndOfLumi { lumi_section, events } => self.files.end_lumi(b, lumi_section, events),
            BuOutput::EndOfRun { last_lumi_section, lumi_sections } => {
                self.files.end_run(b, last_lumi_section, lumi_sections);
                self.ended[usize::from(b)] = true;
            }
            // An ideal BU is never restarted, and nothing goes wrong to be noticed.
            BuOutput::DiscardFile(_) | BuOutput::Notice(_) => {}
        }
    }

    fn send(&mut self, from: Peer, to: Peer, msg: Message) {
        if msg.is_control() {
            self.counts.control += 1;
        } else {
            self.counts.data += 1;
        }
        self.queue.push_back((from, to, msg));
    }

    fn feed(&mut self, now: Nanos, node: Peer, input: Input) {
        match node {
            Peer::Evm | Peer::Ru(0) => self.evm.handle(now, input),
            Peer::Ru(r) => self.rus[usize::from(r) - 1].handle(now, input),
            Peer::Bu(b) => self.bus[usize::from(b)].handle(now, input),
        }
        self.outputs(node);
    }

    fn pump(&mut self, now: Nanos) {
        loop {
            if let Some((from, to, msg)) = self.queue.pop_front() {
                let msg = self.files.carry(from, to, msg);
                self.feed(now, to, Input::Message { from, msg });
            } else if let Some((node, input)) = self.inputs.pop_front() {
                self.feed(now, node, input);
            } else {
                return;
            }
        }
    }

    fn tick_all(&mut self, now: Nanos) {
        self.feed(now, Peer::Evm, Input::Tick);
        for r in 1..self.topology.n_ru {
            self.feed(now, Peer::Ru(r), Input::Tick);
        }
        for b in 0..self.topology.n_bu {
            self.feed(now, Peer::Bu(b), Input::Tick);
        }
        self.pump(now);
    }

    /// Triggers `events` events, one every microsecond, handing each FED's fragment made by
    /// `fragment(ru, fed, event)` to its RU, then stops the trigger and runs until the system
    /// drains. Panics if it does not: the ideal system must.
    pub fn run(&mut self, events: u64, mut fragment: impl FnMut(u16, FedId, EventNumber) -> FragmentRef) -> Counts {
        for b in 0..self.topology.n_bu {
            self.outputs(Peer::Bu(b));
        }
        self.pump(0);
        let mut now = 0;
        for event in self.first_event..self.first_event + events {
            now = now.max((event - self.first_event + 1) * 1_000);
            for r in 0..self.topology.n_ru {
                for (index, fed) in fed_ids(self.topology, r).into_iter().enumerate() {
                    let f = fragment(r, fed, event);
                    loop {
                        let accepted = if r == 0 {
                            self.evm.offer_fragment(now, index, f).is_ok()
                        } else {
                            self.rus[usize::from(r) - 1].offer_fragment(now, index, f).is_ok()
                        };
                        self.outputs(if r == 0 { Peer::Evm } else { Peer::Ru(r) });
                        if accepted {
                            break;
                        }
                        // A full buffer waits for commits, which wait for time-outs.
                        now += 100_000;
                        self.tick_all(now);
                    }
                    self.counts.fragments += 1;
                }
            }
            self.pump(now);
        }
        let last_event = (events > 0).then(|| self.first_event + events - 1);
        self.feed(now, Peer::Evm, Input::StopTrigger { last_event });
        for _ in 0..100 {
            now += 2_000_000;
            self.tick_all(now);
            if self.evm.evm.drained() && self.ended.iter().all(|&e| e) {
                return self.counts;
            }
        }
        panic!("the ideal system did not drain");
    }
}
