//! An ideal driver: every unit of a system handed its inputs in order, messages through one
//! queue with no delay and no fault, under either protocol. The protocol benchmark measures the
//! cores with it, and the end-to-end tests run the cores into real files with it.

use crate::readout::Readout;
use crate::scenario::{PushMode, Topology};
use std::collections::VecDeque;
use tessera_evb::msg::{FragmentRef, Message};
use tessera_evb::push::{PushBu, PushNodeConfig};
use tessera_evb::types::{BuId, EventNumber, FedId, FileId, Nanos, Peer};
use tessera_evb::unit::{BuOutput, BuiltEvent, Input, RuOutput};
use tessera_evb::{Bu, BuConfig, BuDisk, EvmConfig, RuConfig};
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
    readout: Readout,
    bus: Vec<Bu>,
    files: F,
    queue: VecDeque<(Peer, Peer, Message)>,
    ended: Vec<bool>,
    inputs: VecDeque<(Peer, Input)>,
    counts: Counts,
}

impl<F: Effects> IdealSystem<F> {
    /// A system of `topology` under pull with default configurations, numbering events from
    /// `first_event`.
    pub fn new(topology: Topology, first_event: EventNumber, files: F) -> Self {
        Self::with_protocol(topology, first_event, files, None)
    }

    /// The same under push when `push` is given, with default configurations besides.
    pub fn with_protocol(topology: Topology, first_event: EventNumber, files: F, push: Option<PushMode>) -> Self {
        let (n_ru, n_bu) = (topology.n_ru, topology.n_bu);
        let ru_cfgs: Vec<RuConfig> =
            (0..n_ru).map(|r| RuConfig { first_event, ..RuConfig::new(r, fed_ids(topology, r)) }).collect();
        let readout = match push {
            None => Readout::pull(EvmConfig::new(n_ru, n_bu), &ru_cfgs),
            Some(p) => Readout::push(
                PushNodeConfig {
                    ru: ru_cfgs[0].clone(),
                    n_ru,
                    n_bu,
                    destinations: p.destinations(first_event, n_bu),
                    high_water_events: ru_cfgs[0].max_events_buffered / 8,
                    exclude_margin_events: 4096,
                    window_events: None,
                    bug: None,
                },
                &ru_cfgs,
            ),
        };
        let bu_cfg = |b| {
            let cfg = BuConfig::new(b, n_ru);
            let push = push.map(|p| PushBu {
                age_events: p.age_events,
                age_ns: p.age_ns,
                ..PushBu::new(cfg.max_events_in_flight)
            });
            BuConfig { push, ..cfg }
        };
        IdealSystem {
            readout,
            bus: (0..n_bu).map(|b| Bu::new(bu_cfg(b), 1, BuDisk::default())).collect(),
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
                match self.readout.poll(node) {
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
            BuOutput::EndOfLumi { lumi_section, events, .. } => self.files.end_lumi(b, lumi_section, events),
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
            Peer::Bu(b) => self.bus[usize::from(b)].handle(now, input),
            _ => self.readout.handle(now, node, input),
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
                        let accepted = self.readout.offer(now, usize::from(r), index, f).is_ok();
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
            if self.readout.drained() && self.ended.iter().all(|&e| e) {
                return self.counts;
            }
        }
        panic!("the ideal system did not drain");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_evb::msg::{BufferRef, TriggerInfo};

    /// Events written, per BU.
    #[derive(Default)]
    struct Written(Vec<u64>);

    impl Effects for Written {
        fn write(&mut self, bu: BuId, _: FileId, events: &[BuiltEvent]) {
            assert!(events.iter().all(|e| e.flags == 0), "every event whole");
            self.0[usize::from(bu)] += events.len() as u64;
        }
        fn publish(&mut self, _: BuId, _: FileId) {}
    }

    #[test]
    fn an_ideal_push_system_builds_every_event_whole_at_its_destination() {
        let topology = Topology { n_ru: 3, feds_per_ru: 2, n_bu: 2 };
        let push = PushMode { block_events: 10, age_events: 2048, age_ns: 5_000_000, bu_high_water_percent: 50 };
        let mut system = IdealSystem::with_protocol(topology, 1, Written(vec![0; 2]), Some(push));
        let counts = system.run(1_000, |_, fed, event| FragmentRef {
            fed,
            lv1: event as u32,
            bytes: 100,
            corrupt: false,
            buffer: BufferRef { offset: event as u32, ..BufferRef::default() },
            trigger: (fed == TCDS_FED_ID).then_some(TriggerInfo { lumi_section: 1, orbit: event, bx: 1 }),
        });
        assert_eq!(system.into_files().0, vec![500, 500], "blocks of 10 events alternate between the BUs");
        assert_eq!(counts.fragments, 1_000 * 7);
    }
}
