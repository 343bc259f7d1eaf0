//! One simulated system, driven event by event on one thread.

use crate::rng::Rng;
use crate::scenario::{Bug, Scenario};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use tessera_evb::bu::BuBug;
use tessera_evb::evm::EvmBug;
use tessera_evb::msg::{BufferRef, FragmentRef, Message, SuperFragment, TriggerInfo};
use tessera_evb::ru::RuBug;
use tessera_evb::types::{EventNumber, FedId, FileId, Nanos, Peer};
use tessera_evb::unit::{BuOutput, BuiltEvent, Input, Notice, RuOutput};
use tessera_evb::{Bu, BuConfig, BuDisk, EvmConfig, EvmNode, Ru, RuConfig};
use tessera_formats::fed::LV1_MASK;
use tessera_formats::frd::flags;
use tessera_formats::tcds::{TCDS_FED_ID, orbit_in_lumi_section};

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
}

#[derive(Debug)]
enum Ev {
    FedReady { ru: usize, fed: usize },
    Deliver { from: Peer, to: Peer, msg: Message, incarnation: u32 },
    Tick { node: Peer, generation: u64 },
    WriteDone { bu: usize, file: FileId, incarnation: u32 },
    PublishDone { bu: usize, file: FileId, incarnation: u32 },
    BuCrash { bu: usize },
    BuLost { bu: usize },
    BuRestart { bu: usize },
    StopTrigger,
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
}

struct SimFile {
    lumi_section: u32,
    events: Vec<BuiltEvent>,
    written: bool,
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
    ended: bool,
}

/// The simulated system.
pub struct World {
    sc: Scenario,
    rng: Rng,
    now: Nanos,
    seq: u64,
    queue: BinaryHeap<Reverse<(Nanos, u64)>>,
    pending: HashMap<u64, Ev>,
    evm: EvmNode,
    rus: Vec<Ru>,
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
    published: BTreeMap<EventNumber, FileId>,
    stop_sent: bool,
    last_progress: Nanos,
    /// Every broken invariant, in the order found.
    pub violations: Vec<String>,
    /// What the run injected and saw.
    pub tally: Tally,
}

impl World {
    /// A system for `sc`, with every random choice drawn from `seed`.
    pub fn new(sc: &Scenario, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let t = sc.topology;
        let ru_cfgs: Vec<RuConfig> = (0..t.n_ru)
            .map(|r| {
                let mut feds: Vec<FedId> = (0..t.feds_per_ru).map(|i| r * t.feds_per_ru + i).collect();
                if r == 0 {
                    feds.insert(0, TCDS_FED_ID);
                }
                RuConfig {
                    first_event: sc.first_event,
                    max_events_buffered: 1024,
                    fragment_timeout_ns: 2_000_000,
                    // Data messages split by bytes too, sometimes below one super-fragment.
                    max_data_bytes: rng.between(1_000, 24_000) as usize,
                    bug: (sc.bug == Some(Bug::ReleaseBeforeCommit)).then_some(RuBug::ReleaseBeforeCommit),
                    ..RuConfig::new(r, feds)
                }
            })
            .collect();
        let evm_cfg = EvmConfig {
            assign_batch_events: 32,
            assign_delay_ns: 500_000,
            bug: (sc.bug == Some(Bug::ForgetReassign)).then_some(EvmBug::ForgetReassign),
            ..EvmConfig::new(t.n_ru, t.n_bu)
        };
        let bu_cfgs: Vec<BuConfig> = (0..t.n_bu)
            .map(|b| BuConfig {
                max_events_in_flight: 256,
                request_batch_events: 32,
                max_events_per_file: 16,
                file_timeout_ns: 20_000_000,
                bug: (sc.bug == Some(Bug::CommitBeforeWritten)).then_some(BuBug::CommitBeforeWritten),
                ..BuConfig::new(b, t.n_ru)
            })
            .collect();
        let mut trigger_times = Vec::with_capacity(sc.events as usize);
        let mut at = 100_000;
        for _ in 0..sc.events {
            at += rng.between(sc.trigger_interval_ns / 2, sc.trigger_interval_ns * 3 / 2);
            trigger_times.push(at);
        }
        let run_end = at;
        let mut sources: Vec<Vec<FedSource>> = ru_cfgs
            .iter()
            .map(|c| {
                c.feds
                    .iter()
                    .map(|&id| FedSource {
                        id,
                        next_event: sc.first_event,
                        stall: None,
                        skip: None,
                        slow: false,
                        sent_at: 0,
                        held: 0,
                        last_event: sc.first_event + sc.events - 1,
                        ended: false,
                    })
                    .collect()
            })
            .collect();
        let mut tally = Tally::default();
        // FED faults never touch the trigger FED: without a trigger there is no event.
        let pick_fed = |rng: &mut Rng| loop {
            let r = rng.below(u64::from(t.n_ru)) as usize;
            let f = rng.below(sources[r].len() as u64) as usize;
            if sources[r][f].id != TCDS_FED_ID {
                break (r, f);
            }
        };
        let mut fed_faults = Vec::new();
        for _ in 0..sc.faults.stalled_feds {
            let (r, f) = pick_fed(&mut rng);
            let from = rng.between(run_end / 5, run_end / 2);
            fed_faults.push((r, f, Some((from, from + rng.between(5_000_000, 20_000_000))), None));
        }
        for _ in 0..sc.faults.dead_feds {
            let (r, f) = pick_fed(&mut rng);
            fed_faults.push((r, f, Some((rng.between(run_end / 5, run_end / 2), Nanos::MAX)), None));
        }
        for _ in 0..sc.faults.sync_losses {
            let (r, f) = pick_fed(&mut rng);
            fed_faults.push((r, f, None, Some(sc.first_event + rng.between(sc.events / 5, sc.events / 2))));
        }
        let slow: Vec<(usize, usize)> = (0..sc.faults.slow_feds).map(|_| pick_fed(&mut rng)).collect();
        for (r, f) in slow {
            sources[r][f].slow = true;
        }
        if sc.faults.trigger_stream_lost {
            sources[0][0].last_event = sc.first_event + rng.between(sc.events / 3, sc.events / 2);
            tally.fed_faults += 1;
        }
        for (r, f, stall, skip) in fed_faults {
            let s = &mut sources[r][f];
            s.stall = s.stall.or(stall);
            s.skip = s.skip.or(skip);
            tally.fed_faults += 1;
        }
        let mut bus: Vec<BuSlot> = (0..t.n_bu)
            .map(|_| BuSlot {
                unit: None,
                incarnation: 1,
                slow: false,
                files: BTreeMap::new(),
                next_index: BTreeMap::new(),
                published_events: BTreeMap::new(),
                end_of_lumis: BTreeMap::new(),
                ended: false,
            })
            .collect();
        for _ in 0..sc.faults.slow_bus.min(t.n_bu) {
            let b = rng.below(u64::from(t.n_bu)) as usize;
            tally.slow_bus += u64::from(!bus[b].slow);
            bus[b].slow = true;
        }
        let mut world = World {
            evm: EvmNode::new(evm_cfg, ru_cfgs[0].clone()),
            rus: ru_cfgs.iter().skip(1).map(|c| Ru::new(c.clone())).collect(),
            ru_cfgs,
            bus,
            bu_cfgs,
            sources,
            trigger_times,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            pending: HashMap::new(),
            last_delivery: HashMap::new(),
            tick_generation: HashMap::new(),
            buffers: BTreeMap::new(),
            next_buffer: 0,
            corrupt: BTreeSet::new(),
            published: BTreeMap::new(),
            stop_sent: false,
            last_progress: 0,
            violations: Vec::new(),
            tally,
            sc: sc.clone(),
        };
        // The trigger stream may end cleanly after the run's events, and no sooner.
        world.evm.limit_trigger(sc.events);
        for b in 0..world.bus.len() {
            world.start_bu(b);
        }
        for r in 0..world.sources.len() {
            for f in 0..world.sources[r].len() {
                world.schedule(world.trigger_times[0], Ev::FedReady { ru: r, fed: f });
            }
        }
        for _ in 0..sc.faults.bu_crashes {
            let at = world.rng.between(run_end / 10, run_end);
            let bu = world.rng.below(u64::from(t.n_bu)) as usize;
            world.schedule(at, Ev::BuCrash { bu });
        }
        world.schedule(run_end + 1_000, Ev::StopTrigger);
        world
    }

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
            self.check_bounds();
            if !self.violations.is_empty() {
                return self.now;
            }
            if self.stop_sent && self.drained() {
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
        match self.evm.trigger_break() {
            Some(_) => self.evm.evm.last_triggered().map_or(0, |last| last + 1 - self.sc.first_event),
            None => self.sc.events,
        }
    }

    /// Every event of the run published, every unit ended, and no buffer held but the orphans
    /// (of events after the run's last).
    fn drained(&self) -> bool {
        let events = self.run_events();
        let end = self.sc.first_event + events;
        self.published.len() as u64 == events
            && self.evm.evm.drained()
            && self.rus.iter().all(Ru::drain_seen)
            && self.bus.iter().all(|b| b.ended && b.unit.as_ref().is_some_and(|u| u.idle()))
            && self.buffers.values().all(|&(_, _, event)| event >= end)
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
        format!(
            "EVM {} in flight, pending [{}]; buffers held {}; {}",
            self.evm.evm.events_in_flight(),
            self.evm.evm.pending(),
            self.buffers.len(),
            bus.join(", ")
        )
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::FedReady { ru, fed } => self.fed_ready(ru, fed),
            Ev::Deliver { from, to, msg, incarnation } => {
                let input = Input::Message { from, msg };
                match to {
                    Peer::Evm | Peer::Ru(0) => self.feed(Peer::Evm, input),
                    Peer::Ru(r) => self.feed(Peer::Ru(r), input),
                    Peer::Bu(b) => {
                        let slot = &self.bus[usize::from(b)];
                        if slot.unit.is_some() && slot.incarnation == incarnation {
                            self.feed(to, input);
                        }
                    }
                }
            }
            Ev::Tick { node, generation } => {
                if self.tick_generation.get(&node).is_some_and(|&(g, _)| g == generation) {
                    self.tick_generation.remove(&node);
                    self.feed(node, Input::Tick);
                }
            }
            Ev::WriteDone { bu, file, incarnation } => {
                if self.bus[bu].incarnation == incarnation && self.bus[bu].unit.is_some() {
                    if let Some(f) = self.bus[bu].files.get_mut(&file) {
                        f.written = true;
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
                    self.schedule(self.now + 3_000_000, Ev::BuLost { bu });
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
        }
    }

    /// Starts (or restarts) BU `bu`: partial files in `open/` are deleted; complete, unpublished
    /// ones are offered to the EVM.
    fn start_bu(&mut self, bu: usize) {
        let slot = &mut self.bus[bu];
        if slot.unit.is_some() {
            return;
        }
        slot.files.retain(|_, f| f.written);
        // What the BU reads off its disk: names, headers, and the records it has written.
        let disk = BuDisk {
            unpublished: slot.files.iter().map(|(&id, f)| (id, f.events.len() as u32)).collect(),
            next_index: slot.next_index.clone(),
            published_events: slot.published_events.clone(),
            lumis_done: slot.end_of_lumis.keys().copied().collect(),
        };
        slot.unit = Some(Bu::new(self.bu_cfgs[bu].clone(), slot.incarnation, disk));
        self.drain_outputs(Peer::Bu(bu as u16));
    }

    fn fed_ready(&mut self, ru: usize, fed: usize) {
        let first = self.sc.first_event;
        let last = first + self.sc.events;
        let s = &mut self.sources[ru][fed];
        if s.skip == Some(s.next_event) {
            s.next_event += 1;
        }
        let event = s.next_event;
        if event >= last || event > s.last_event {
            if s.id == TCDS_FED_ID && !s.ended {
                s.ended = true;
                self.evm.trigger_stream_ended(self.now, None);
                self.drain_outputs(Peer::Evm);
            }
            return;
        }
        let mut due = self.trigger_times[(event - first) as usize] + 2_000 * fed as u64;
        if s.slow {
            due = due.max(s.sent_at + 2 * self.sc.trigger_interval_ns);
        }
        if s.id != TCDS_FED_ID && s.held >= self.sc.fed_buffer_fragments {
            // The RU's memory for this stream is full: it does not read it, and says so.
            if ru == 0 {
                self.evm.ru.stream_alive(fed, self.now);
            } else {
                self.rus[ru - 1].stream_alive(fed, self.now);
            }
            self.tally.back_pressure += 1;
            self.schedule(self.now + 50_000, Ev::FedReady { ru, fed });
            return;
        }
        if self.now < due {
            self.schedule(due, Ev::FedReady { ru, fed });
            return;
        }
        if let Some((from, to)) = s.stall
            && self.now >= from
            && self.now < to
        {
            if to != Nanos::MAX {
                self.schedule(to, Ev::FedReady { ru, fed });
            }
            return;
        }
        let id = s.id;
        let corrupt = self.rng.chance(self.sc.faults.corrupt_fragment_probability);
        let trigger = (id == TCDS_FED_ID).then(|| self.trigger_info(event));
        let fragment = FragmentRef {
            fed: id,
            lv1: (event as u32) & LV1_MASK,
            bytes: 1024,
            corrupt,
            buffer: BufferRef { area: ru as u32, chunk: fed as u32, offset: self.next_buffer, len: 1024 },
            trigger,
        };
        let offered = if ru == 0 {
            self.evm.offer_fragment(self.now, fed, fragment)
        } else {
            self.rus[ru - 1].offer_fragment(self.now, fed, fragment)
        };
        match offered {
            Ok(()) => {
                self.next_buffer += 1;
                self.buffers.insert(fragment.buffer, (ru, fed, event));
                let s = &mut self.sources[ru][fed];
                s.held += 1;
                s.sent_at = self.now;
                self.tally.fragments += 1;
                if corrupt {
                    self.tally.corrupt_fragments += 1;
                    self.corrupt.insert((id, event));
                }
                self.sources[ru][fed].next_event += 1;
                self.schedule(self.now, Ev::FedReady { ru, fed });
            }
            Err(_) => {
                self.tally.back_pressure += 1;
                self.schedule(self.now + 50_000, Ev::FedReady { ru, fed });
            }
        }
        self.drain_outputs(if ru == 0 { Peer::Evm } else { Peer::Ru(ru as u16) });
    }

    fn trigger_info(&self, event: EventNumber) -> TriggerInfo {
        let index = event - self.sc.first_event;
        let ls = (index / self.sc.events_per_lumi_section) as u32 + 1;
        TriggerInfo {
            lumi_section: ls,
            orbit: orbit_in_lumi_section(ls, index % self.sc.events_per_lumi_section),
            bx: (event % 3564) as u16,
        }
    }

    /// Gives `input` to `node` and carries out what it outputs.
    fn feed(&mut self, node: Peer, input: Input) {
        match node {
            Peer::Evm | Peer::Ru(0) => self.evm.handle(self.now, input),
            Peer::Ru(r) => self.rus[usize::from(r) - 1].handle(self.now, input),
            Peer::Bu(b) => match self.bus[usize::from(b)].unit.as_mut() {
                Some(unit) => unit.handle(self.now, input),
                None => return,
            },
        }
        self.drain_outputs(node);
    }

    fn poll_ru(&mut self, node: Peer) -> Option<RuOutput> {
        match node {
            Peer::Evm | Peer::Ru(0) => self.evm.poll_output(),
            Peer::Ru(r) => self.rus[usize::from(r) - 1].poll_output(),
            Peer::Bu(_) => None,
        }
    }

    fn next_timeout(&self, node: Peer) -> Option<Nanos> {
        match node {
            Peer::Evm | Peer::Ru(0) => self.evm.next_timeout(),
            Peer::Ru(r) => self.rus[usize::from(r) - 1].next_timeout(),
            Peer::Bu(b) => self.bus[usize::from(b)].unit.as_ref()?.next_timeout(),
        }
    }

    fn drain_outputs(&mut self, node: Peer) {
        match node {
            Peer::Bu(b) => {
                while let Some(out) = self.bus[usize::from(b)].unit.as_mut().and_then(Bu::poll_output) {
                    self.bu_output(b, out);
                }
            }
            _ => {
                while let Some(out) = self.poll_ru(node) {
                    self.ru_output(node, out);
                }
            }
        }
        if let Some(at) = self.next_timeout(node) {
            // One tick per node at a time, never sooner than 10 µs from now.
            let at = at.max(self.now + 10_000);
            let scheduled = self.tick_generation.get(&node).map(|&(_, t)| t);
            if scheduled.is_none_or(|t| at < t) {
                let generation = self.seq + 1;
                self.tick_generation.insert(node, (generation, at));
                self.seq += 1;
                self.queue.push(Reverse((at, generation)));
                self.pending.insert(generation, Ev::Tick { node, generation });
            }
        }
    }

    fn ru_output(&mut self, node: Peer, out: RuOutput) {
        match out {
            RuOutput::Send { to, msg } => self.send(node, to, msg),
            // The EVM's node keeps its RU's triggers; a plain RU reads no trigger FED.
            RuOutput::Triggered { event, .. } => {
                self.violation(format!("{node:?} passed on the trigger of event {event}"))
            }
            RuOutput::FreeBuffers(fragments) => {
                for f in fragments {
                    match self.buffers.remove(&f.buffer) {
                        Some((ru, fed, _)) => self.sources[ru][fed].held -= 1,
                        None => self.violation(format!("{node:?} freed buffer {:?} twice", f.buffer)),
                    }
                }
            }
            RuOutput::Notice(n) => self.notice(n),
        }
    }

    fn notice(&mut self, notice: Notice) {
        match notice {
            Notice::ProtocolError { what } => self.violation(format!("protocol error: {what}")),
            Notice::SyncLoss { .. } => self.tally.sync_losses += 1,
            Notice::LateFragment { .. } => self.tally.late_fragments += 1,
            Notice::TriggerStreamBroken { .. } => self.tally.trigger_breaks += 1,
            Notice::MissingFragments { .. } | Notice::FedStalled { .. } | Notice::LateTrigger { .. } => {}
        }
    }

    fn bu_output(&mut self, b: u16, out: BuOutput) {
        match out {
            BuOutput::Send { to, msg } => self.send(Peer::Bu(b), to, msg),
            BuOutput::WriteFile { file, lumi_section, events } => {
                let slot = &mut self.bus[usize::from(b)];
                // What a restarted BU learns from the names of the files on its disk.
                let next = slot.next_index.entry(file.lumi_section).or_default();
                *next = (*next).max(file.index + 1);
                let cost = if slot.slow { 20 } else { 1 } * (200_000 + 5_000 * events.len() as u64);
                let incarnation = slot.incarnation;
                if slot.files.insert(file, SimFile { lumi_section, events, written: false }).is_some() {
                    self.violation(format!("BU {b} wrote file {file} twice"));
                }
                self.schedule(self.now + cost, Ev::WriteDone { bu: usize::from(b), file, incarnation });
            }
            BuOutput::PublishFile(file) => self.publish(b, file),
            BuOutput::DiscardFile(file) => {
                if self.bus[usize::from(b)].files.remove(&file).is_none() {
                    self.violation(format!("BU {b} discarded file {file} that it does not hold"));
                }
            }
            BuOutput::EndOfLumi { lumi_section, events } => {
                let slot = &mut self.bus[usize::from(b)];
                let published = slot.published_events.remove(&lumi_section).unwrap_or(0);
                let again = slot.end_of_lumis.insert(lumi_section, events).is_some();
                if again {
                    self.violation(format!("BU {b} wrote the EoLS of lumi section {lumi_section} twice"));
                } else if published != events {
                    self.violation(format!(
                        "BU {b} EoLS of lumi section {lumi_section} says {events} events, it published {published}"
                    ));
                }
            }
            BuOutput::EndOfRun { last_lumi_section, .. } => {
                let slot = &mut self.bus[usize::from(b)];
                let missing: Vec<u32> =
                    (1..=last_lumi_section).filter(|ls| !slot.end_of_lumis.contains_key(ls)).collect();
                let again = std::mem::replace(&mut slot.ended, true);
                if again {
                    self.violation(format!("BU {b} wrote the EoR twice"));
                } else if !missing.is_empty() {
                    self.violation(format!("BU {b} wrote the EoR without the EoLS of lumi sections {missing:?}"));
                }
            }
            BuOutput::Notice(n) => self.notice(n),
        }
    }

    fn send(&mut self, from: Peer, to: Peer, msg: Message) {
        if let Message::Data { ru, parts, .. } = &msg {
            let bound = self.ru_cfgs[usize::from(*ru)].max_data_bytes;
            let bytes: usize = parts.iter().map(SuperFragment::bytes).sum();
            if parts.len() > 1 && bytes > bound {
                self.violation(format!("RU {ru} sent {bytes} fragment bytes in one data message, bound {bound}"));
            }
        }
        self.tally.messages += 1;
        self.tally.control_messages += u64::from(msg.is_control());
        let incarnation = match to {
            Peer::Bu(b) => {
                let slot = &self.bus[usize::from(b)];
                if slot.unit.is_none() {
                    return; // the connection is gone
                }
                slot.incarnation
            }
            _ => 0,
        };
        // Order is kept within a connection, as TCP does; connections overtake each other.
        let delay = 20_000 + self.rng.below(self.sc.faults.network_jitter_ns + 1);
        let at = (self.now + delay).max(self.last_delivery.get(&(from, to)).copied().unwrap_or(0));
        self.last_delivery.insert((from, to), at);
        self.schedule(at, Ev::Deliver { from, to, msg, incarnation });
    }

    /// A BU renames a file into place: it must be written, and each of its events must be new,
    /// whole and correctly flagged.
    fn publish(&mut self, b: u16, file: FileId) {
        let bu = usize::from(b);
        let Some(f) = self.bus[bu].files.remove(&file) else {
            self.violation(format!("BU {b} published file {file} that it does not hold"));
            return;
        };
        if !f.written {
            self.violation(format!("BU {b} published file {file} before its data was written"));
            return;
        }
        self.last_progress = self.now;
        *self.bus[bu].published_events.entry(f.lumi_section).or_default() += f.events.len() as u64;
        for event in &f.events {
            if let Some(other) = self.published.insert(event.event, file) {
                self.violation(format!(
                    "event {} published twice: BU {} file {} and BU {b} file {}",
                    event.event, other.bu, other, file
                ));
            }
            if event.lumi_section != f.lumi_section {
                self.violation(format!(
                    "event {} of lumi section {} in a file of {}",
                    event.event, event.lumi_section, f.lumi_section
                ));
            }
            self.check_event(event);
        }
        let incarnation = self.bus[bu].incarnation;
        self.schedule(self.now + 10_000, Ev::PublishDone { bu, file, incarnation });
    }

    fn check_event(&mut self, e: &BuiltEvent) {
        let lv1 = (e.event as u32) & LV1_MASK;
        let mut missing_any = false;
        let mut corrupt_any = false;
        if e.parts.len() != self.ru_cfgs.len() {
            self.violation(format!("event {} has {} parts for {} RUs", e.event, e.parts.len(), self.ru_cfgs.len()));
            return;
        }
        let mut problems = Vec::new();
        for (r, part) in e.parts.iter().enumerate() {
            let mut seen: Vec<FedId> =
                part.fragments.iter().map(|f| f.fed).chain(part.missing.iter().copied()).collect();
            seen.sort_unstable();
            let mut expected = self.ru_cfgs[r].feds.clone();
            expected.sort_unstable();
            if seen != expected || part.event != e.event {
                problems.push(format!("RU {r} part holds FEDs {seen:?}, expected {expected:?}"));
            }
            for f in &part.fragments {
                if f.lv1 != lv1 {
                    problems.push(format!("FED {} sent LV1 {:#x} in event {}", f.fed, f.lv1, e.event));
                }
                corrupt_any |= self.corrupt.contains(&(f.fed, e.event));
                if f.fed == TCDS_FED_ID {
                    let expected_ls = self.trigger_info(e.event).lumi_section;
                    if e.lumi_section != expected_ls {
                        problems.push(format!("lumi section {} instead of {expected_ls}", e.lumi_section));
                    }
                }
            }
            missing_any |= !part.missing.is_empty();
        }
        if missing_any {
            self.tally.incomplete_events += 1;
            if self.sc.expects_complete_events() {
                problems.push("FEDs missing though no FED fault was injected".into());
            }
        }
        if (e.flags & flags::INCOMPLETE != 0) != missing_any {
            problems
                .push(format!("INCOMPLETE flag {} but missing FEDs {missing_any}", e.flags & flags::INCOMPLETE != 0));
        }
        if corrupt_any && e.flags & flags::FRAGMENT_ERROR == 0 {
            problems.push("a corrupt fragment without the FRAGMENT_ERROR flag".into());
        }
        for p in problems {
            self.violation(format!("event {}: {p}", e.event));
        }
    }

    fn check_bounds(&mut self) {
        let mut found = Vec::new();
        let laws = std::iter::once(self.evm.evm.check_invariants())
            .chain(std::iter::once(&self.evm.ru).chain(self.rus.iter()).map(Ru::check_invariants));
        found.extend(laws.filter_map(Result::err));
        let rus = std::iter::once(&self.evm.ru).chain(self.rus.iter());
        for (r, ru) in rus.enumerate() {
            let max = self.ru_cfgs[r].max_events_buffered;
            if ru.events_buffered() > max {
                found.push(format!("RU {r} holds {} events, bound {max}", ru.events_buffered()));
            }
        }
        for (b, slot) in self.bus.iter().enumerate() {
            if let Some(u) = &slot.unit
                && u.events_in_flight() > self.bu_cfgs[b].max_events_in_flight
            {
                found.push(format!(
                    "BU {b} holds {} events, bound {}",
                    u.events_in_flight(),
                    self.bu_cfgs[b].max_events_in_flight
                ));
            }
        }
        let evm_bound = self.ru_cfgs[0].max_events_buffered;
        if self.evm.evm.events_in_flight() > evm_bound {
            found.push(format!("EVM tracks {} events, bound {evm_bound}", self.evm.evm.events_in_flight()));
        }
        for f in found {
            self.violation(f);
        }
    }

    fn check_end(&mut self) {
        let first = self.sc.first_event;
        let events = self.run_events();
        let missing: Vec<EventNumber> =
            (first..first + events).filter(|e| !self.published.contains_key(e)).take(5).collect();
        if !missing.is_empty() {
            self.violation(format!("events never published, e.g. {missing:?}"));
        }
        if let Some((&event, file)) = self.published.range(first + events..).next() {
            self.violation(format!("event {event}, after the run's last, published in file {file}"));
        }
        let last = self.evm.evm.last_triggered();
        let seen: Vec<Option<EventNumber>> = self.rus.iter().map(Ru::run_last_event).collect();
        for (r, seen) in seen.into_iter().enumerate().filter(|&(_, seen)| seen != last) {
            self.violation(format!("RU {}: drained with last event {seen:?}, the EVM's is {last:?}", r + 1));
        }
        let lost = self.sc.faults.trigger_stream_lost;
        let broke = self.evm.trigger_break().map(ToString::to_string);
        match (lost, &broke, self.tally.trigger_breaks) {
            (true, Some(_), 1) | (false, None, 0) => {}
            _ => self.violation(format!(
                "trigger stream lost {lost}: the EVM's node said {} break(s), {broke:?}",
                self.tally.trigger_breaks
            )),
        }
        // What the RUs still hold is of events the trigger never issued, counted as orphans.
        self.tally.orphan_fragments = self.buffers.len() as u64;
        if lost && self.tally.orphan_fragments == 0 {
            self.violation("the data FEDs sent past the trigger's break, yet no orphan fragment is held".into());
        }
        // Each lumi section's EoLS records, summed over BUs, account for every event of it.
        let mut per_ls: BTreeMap<u32, u64> = BTreeMap::new();
        for e in first..first + events {
            *per_ls.entry(self.trigger_info(e).lumi_section).or_default() += 1;
        }
        for (ls, triggered) in per_ls {
            let recorded: u64 = self.bus.iter().filter_map(|b| b.end_of_lumis.get(&ls)).sum();
            if recorded != triggered {
                self.violation(format!(
                    "lumi section {ls}: EoLS records count {recorded} events, {triggered} were triggered"
                ));
            }
        }
    }
}
