//! The event manager: owns the event sequence, gives events to BUs that ask for them, commits the
//! files BUs have built, and tells RUs when buffers can be reused.

use crate::invariant::InvariantViolation;
use crate::msg::{BuiltFile, Message};
use crate::ring::EventRing;
use crate::ru::message_name;
use crate::types::{BuId, Epoch, EventNumber, EventRange, FileId, Nanos, Peer, RuId, push_event};
use crate::unit::{EvmOutput, Input, Notice};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Configuration of the event manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvmConfig {
    /// Readout units, RU 0 being the one next to the EVM.
    pub n_ru: u16,
    /// Builder units.
    pub n_bu: u16,
    /// Events given to a BU in one assignment at least, when that many are triggered and the BU
    /// asked for that many. Default 128.
    pub assign_batch_events: u32,
    /// Longest wait to fill an assignment batch, in nanoseconds. Default 1 ms.
    pub assign_delay_ns: Nanos,
    /// Longest wait before commits or releases that found no message to ride on are sent alone,
    /// in nanoseconds. Default 1 ms.
    pub flush_delay_ns: Nanos,
    /// Events a BU may hold assigned and uncommitted at once, whatever it asks. Default 4096.
    pub max_assigned_per_bu: usize,
    /// When triggers pause: the open lumi sections are closed once no trigger has come for this
    /// long, in nanoseconds, so that their end-of-lumi records need not wait for the next
    /// trigger. It must be at least a lumi section's length: then any later trigger belongs to a
    /// later section. A trigger for a section already closed is counted lost
    /// (`LUMI_SECTION_CLOSED`). `None` (the default) closes sections only on a later trigger
    /// and at the end of the run.
    pub lumi_section_timeout_ns: Option<Nanos>,
    /// Test-only: a deliberate protocol bug, for the simulator's self-check.
    pub bug: Option<EvmBug>,
}

impl EvmConfig {
    /// Defaults for a system of `n_ru` RUs and `n_bu` BUs.
    pub fn new(n_ru: u16, n_bu: u16) -> Self {
        EvmConfig {
            n_ru,
            n_bu,
            assign_batch_events: 128,
            assign_delay_ns: 1_000_000,
            flush_delay_ns: 1_000_000,
            max_assigned_per_bu: 4096,
            lumi_section_timeout_ns: None,
            bug: None,
        }
    }
}

/// Deliberate EVM bugs that the simulator must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvmBug {
    /// When a BU is lost, leave its uncommitted events where they are instead of reassigning.
    ForgetReassign,
    /// The EVM's node starts the run at once, not waiting for every RU's streams.
    StartBeforeStreams,
}

#[derive(Debug, Default)]
struct BuState {
    epoch: Epoch,
    alive: bool,
    /// Events it asked for and has not been given yet.
    credits: u32,
    /// Events assigned and not yet committed (which ones: `Evm::owner`).
    assigned: usize,
    /// Files committed and not yet reported published, with their events.
    committed: BTreeMap<FileId, Vec<EventRange>>,
    /// End-of-lumi notices sent and not yet acknowledged: lumi section → events.
    unacked_lumis: BTreeMap<u32, u64>,
    /// Commits not yet sent, and since when.
    pending_commits: Vec<FileId>,
    pending_since: Option<Nanos>,
}

/// A lumi section being triggered or committed.
#[derive(Debug)]
struct Lumi {
    /// Triggers may still come for it.
    open: bool,
    /// Events triggered and not yet committed.
    uncommitted: u64,
    /// Events committed, per BU.
    per_bu: Vec<u64>,
}

/// Counters of the event manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvmCounters {
    /// Events triggered.
    pub triggered: u64,
    /// Events assigned (reassignments included).
    pub assigned: u64,
    /// Events reassigned after their BU was lost.
    pub reassigned: u64,
    /// Events committed.
    pub committed: u64,
    /// Files committed.
    pub files_committed: u64,
    /// Events lost because their lumi section had been closed on its time-out
    /// (`LUMI_SECTION_CLOSED`): their fragments are released unbuilt.
    pub lost_lumi_closed: u64,
}

/// The event manager's state machine.
#[derive(Debug)]
pub struct Evm {
    cfg: EvmConfig,
    bus: Vec<BuState>,
    /// Triggered events not yet assigned, oldest first, with when they arrived.
    triggered: VecDeque<(EventNumber, Nanos)>,
    /// Events of lost BUs, to assign before new ones.
    reassign: BTreeSet<EventNumber>,
    /// Events committed and not yet released at the RUs, and since when.
    pending_release: Vec<EventRange>,
    release_since: Option<Nanos>,
    /// Events triggered and not yet committed.
    in_flight: usize,
    /// The BU each assigned, uncommitted event is assigned to, by event number.
    owner: EventRing<Option<BuId>>,
    /// Lumi sections with events not yet all committed, or still being triggered.
    lumis: BTreeMap<u32, Lumi>,
    last_lumi: Option<u32>,
    lumi_count: u32,
    end_sent: bool,
    next_bu: usize,
    /// Run control stopped the trigger; the last event it issued.
    stop_at: Option<Option<EventNumber>>,
    /// Every event up to the last one issued has been seen.
    stopped: bool,
    drain_sent: bool,
    last_triggered: Option<EventNumber>,
    /// When the last trigger came.
    last_trigger_at: Nanos,
    /// The highest lumi section closed so far: no event of it or an earlier one is built any
    /// more.
    closed_through: Option<u32>,
    out: VecDeque<EvmOutput>,
    counters: EvmCounters,
}

impl Evm {
    /// An event manager at the start of a run; every BU is expected to say Hello.
    pub fn new(cfg: EvmConfig) -> Self {
        Evm {
            bus: (0..cfg.n_bu).map(|_| BuState::default()).collect(),
            cfg,
            triggered: VecDeque::new(),
            reassign: BTreeSet::new(),
            pending_release: Vec::new(),
            release_since: None,
            in_flight: 0,
            owner: EventRing::new(0),
            lumis: BTreeMap::new(),
            last_lumi: None,
            lumi_count: 0,
            end_sent: false,
            next_bu: 0,
            stop_at: None,
            stopped: false,
            drain_sent: false,
            last_triggered: None,
            last_trigger_at: 0,
            closed_through: None,
            out: VecDeque::new(),
            counters: EvmCounters::default(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &EvmConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> EvmCounters {
        self.counters
    }

    /// The last event triggered, if any.
    pub fn last_triggered(&self) -> Option<EventNumber> {
        self.last_triggered
    }

    /// Events triggered and not yet committed: the EVM's table size.
    pub fn events_in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether every triggered event is committed and every committed file published, and the
    /// RUs have been told to release every event.
    pub fn drained(&self) -> bool {
        self.stopped
            && self.pending_release.is_empty()
            && self.triggered.is_empty()
            && self.reassign.is_empty()
            && self.bus.iter().all(|b| b.assigned == 0 && b.committed.is_empty() && b.unacked_lumis.is_empty())
            && self.lumis.is_empty()
    }

    /// Checks the event manager's conservation laws: every event triggered is committed, lost
    /// with its closed lumi section, or in flight; every event in flight waits to be assigned,
    /// waits to be reassigned, or is assigned to exactly one BU; no BU holds more than its
    /// bound. Cheap (per BU), so debug builds check it after every input; says the first law
    /// broken.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let c = &self.counters;
        if c.triggered != c.committed + c.lost_lumi_closed + self.in_flight as u64 {
            return Err(InvariantViolation::EventsNotConserved {
                triggered: c.triggered,
                committed: c.committed,
                lost: c.lost_lumi_closed,
                in_flight: self.in_flight,
            });
        }
        let assigned: usize = self.bus.iter().map(|b| b.assigned).sum();
        if self.in_flight != self.triggered.len() + self.reassign.len() + assigned {
            return Err(InvariantViolation::InFlightNotPlaced {
                in_flight: self.in_flight,
                unassigned: self.triggered.len(),
                to_reassign: self.reassign.len(),
                assigned,
            });
        }
        match self.bus.iter().position(|b| b.assigned > self.cfg.max_assigned_per_bu) {
            Some(b) => Err(InvariantViolation::BuOverBound {
                bu: b as BuId,
                assigned: self.bus[b].assigned,
                bound: self.cfg.max_assigned_per_bu,
            }),
            None => Ok(()),
        }
    }

    /// The BUs lost during the run and not back (no Hello from a new incarnation yet).
    pub fn bus_lost(&self) -> Vec<BuId> {
        (0..self.bus.len()).filter(|&b| !self.bus[b].alive).map(|b| b as BuId).collect()
    }

    /// What keeps the EVM from having drained, for a report on a stuck run.
    pub fn pending(&self) -> String {
        let mut parts = Vec::new();
        if !self.triggered.is_empty() || !self.reassign.is_empty() {
            parts.push(format!("{} unassigned, {} to reassign", self.triggered.len(), self.reassign.len()));
        }
        if !self.pending_release.is_empty() {
            let ranges: Vec<String> = self.pending_release.iter().map(ToString::to_string).collect();
            parts.push(format!("releases of {} not yet sent to the RUs", ranges.join(", ")));
        }
        for (b, s) in self.bus.iter().enumerate() {
            if s.assigned > 0 || !s.committed.is_empty() || !s.unacked_lumis.is_empty() {
                parts.push(format!(
                    "BU {b}: {} assigned, {} files unpublished, end-of-lumi unacknowledged {:?}",
                    s.assigned,
                    s.committed.len(),
                    s.unacked_lumis.keys().collect::<Vec<_>>()
                ));
            }
        }
        for (ls, l) in &self.lumis {
            parts.push(format!(
                "lumi section {ls}: {} uncommitted{}",
                l.uncommitted,
                if l.open { ", open" } else { "" }
            ));
        }
        parts.join("; ")
    }

    /// The EVM's RU saw the trigger of `event`, in lumi section `lumi_section`. Lumi sections
    /// come in order: a trigger of a later one ends the earlier ones.
    pub fn triggered(&mut self, now: Nanos, event: EventNumber, lumi_section: u32) {
        self.counters.triggered += 1;
        self.last_trigger_at = now;
        if self.closed_through.is_some_and(|c| lumi_section <= c) {
            // Its lumi section's end-of-lumi records may be written already: the event cannot
            // be built into it. Counted lost, and its fragments released.
            self.counters.lost_lumi_closed += 1;
            self.last_triggered = Some(event);
            push_event(&mut self.pending_release, event);
            self.release_since.get_or_insert(now);
            self.out.push_back(EvmOutput::Notice(Notice::LateTrigger { event, lumi_section }));
            self.stop_if_complete();
            return;
        }
        if self.in_flight == 0 {
            // Nothing older is uncommitted: the ring of owners may start here.
            self.owner.rebase_if_empty(event);
        }
        self.triggered.push_back((event, now));
        self.in_flight += 1;
        if self.last_lumi != Some(lumi_section) {
            self.lumi_count += 1;
        }
        self.last_lumi = Some(self.last_lumi.map_or(lumi_section, |l| l.max(lumi_section)));
        let n_bu = self.bus.len();
        for (_, lumi) in self.lumis.range_mut(..lumi_section) {
            lumi.open = false;
        }
        let lumi = self.lumis.entry(lumi_section).or_insert_with(|| Lumi {
            open: true,
            uncommitted: 0,
            per_bu: vec![0; n_bu],
        });
        lumi.uncommitted += 1;
        self.last_triggered = Some(event);
        self.close_lumis();
        self.stop_if_complete();
        self.assign(now);
        debug_assert_eq!(self.check_invariants(), Ok(()));
    }

    /// Handles one input.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        self.handle_input(now, input);
        debug_assert_eq!(self.check_invariants(), Ok(()));
    }

    fn handle_input(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Message { from, msg } => self.message(now, from, msg),
            Input::PeerLost(Peer::Bu(bu)) => self.lose_bu(bu),
            Input::StopTrigger { last_event } => {
                self.stop_at = Some(last_event);
                self.stop_if_complete();
                self.assign(now);
            }
            Input::Tick => {
                if self.lumi_timed_out(now) {
                    for lumi in self.lumis.values_mut() {
                        lumi.open = false;
                    }
                    self.close_lumis();
                }
                self.assign(now);
                self.flush(now, false);
            }
            _ => {}
        }
        self.maybe_drain();
    }

    fn message(&mut self, now: Nanos, from: Peer, msg: Message) {
        match (from, msg) {
            (Peer::Bu(bu), Message::Hello { bu: claimed, epoch, unpublished }) if bu == claimed => {
                self.hello(bu, epoch, unpublished)
            }
            (Peer::Bu(bu), Message::Request { bu: claimed, epoch, credits, built, published, lumis_done })
                if bu == claimed =>
            {
                let Some(state) = self.bus.get_mut(usize::from(bu)) else { return };
                if !state.alive || state.epoch != epoch {
                    return; // from an earlier incarnation
                }
                for file in published {
                    state.committed.remove(&file);
                }
                for ls in lumis_done {
                    state.unacked_lumis.remove(&ls);
                }
                state.credits = state.credits.saturating_add(credits);
                for file in built {
                    self.commit(now, bu, file);
                }
                self.close_lumis();
                self.assign(now);
            }
            (from, msg) => self.out.push_back(EvmOutput::Notice(Notice::ProtocolError {
                what: format!("EVM: unexpected {} from {from}", message_name(&msg)),
            })),
        }
    }

    /// A BU (re)started: whatever its earlier incarnation held uncommitted goes to others; its
    /// committed files it publishes, the others it discards.
    fn hello(&mut self, bu: BuId, epoch: Epoch, unpublished: Vec<FileId>) {
        let Some(state) = self.bus.get(usize::from(bu)) else { return };
        if state.alive && epoch <= state.epoch {
            return;
        }
        self.lose_bu(bu);
        let state = &mut self.bus[usize::from(bu)];
        state.epoch = epoch;
        state.alive = true;
        let (publish, discard): (Vec<FileId>, Vec<FileId>) =
            unpublished.into_iter().partition(|f| state.committed.contains_key(f));
        // A committed file no longer in `open/` was renamed into place before the restart:
        // publishing is one rename, so it is done.
        state.committed.retain(|f, _| publish.contains(f));
        self.out.push_back(EvmOutput::Send { to: Peer::Bu(bu), msg: Message::Welcome { epoch, publish, discard } });
        if self.drain_sent {
            self.out.push_back(EvmOutput::Send {
                to: Peer::Bu(bu),
                msg: Message::Drain { last_event: self.last_triggered },
            });
        }
        let unacked: Vec<(u32, u64)> = self.bus[usize::from(bu)].unacked_lumis.iter().map(|(&l, &n)| (l, n)).collect();
        for (lumi_section, events) in unacked {
            self.out.push_back(EvmOutput::Send { to: Peer::Bu(bu), msg: Message::EndOfLumi { lumi_section, events } });
        }
        if self.end_sent {
            self.send_end_of_run(bu);
        }
    }

    fn lose_bu(&mut self, bu: BuId) {
        let forget = self.cfg.bug == Some(EvmBug::ForgetReassign);
        let Some(state) = self.bus.get_mut(usize::from(bu)) else { return };
        state.alive = false;
        state.credits = 0;
        state.pending_commits.clear();
        state.pending_since = None;
        if !forget {
            state.assigned = 0;
            for (event, owner) in self.owner.iter_mut() {
                if *owner == Some(bu) {
                    *owner = None;
                    self.reassign.insert(event);
                    self.counters.reassigned += 1;
                }
            }
        }
    }

    fn commit(&mut self, now: Nanos, bu: BuId, file: BuiltFile) {
        let state = &mut self.bus[usize::from(bu)];
        if state.committed.contains_key(&file.file) {
            return; // reported again: already committed
        }
        let owner = &self.owner;
        let foreign = file.events.iter().flat_map(|r| r.iter()).find(|&e| owner.get(e) != Some(&Some(bu)));
        if let Some(event) = foreign {
            self.out.push_back(EvmOutput::Notice(Notice::ProtocolError {
                what: format!("EVM: BU {bu} built file {} with event {event}, not assigned to it", file.file),
            }));
            return;
        }
        for event in file.events.iter().flat_map(|r| r.iter()) {
            self.owner.remove(event);
            state.assigned -= 1;
            self.in_flight -= 1;
            push_event(&mut self.pending_release, event);
            self.counters.committed += 1;
        }
        self.release_since.get_or_insert(now);
        let n: u64 = file.events.iter().map(|r| u64::from(r.count)).sum();
        if let Some(lumi) = self.lumis.get_mut(&file.file.lumi_section) {
            lumi.uncommitted = lumi.uncommitted.saturating_sub(n);
            lumi.per_bu[usize::from(bu)] += n;
        }
        let state = &mut self.bus[usize::from(bu)];
        state.committed.insert(file.file, file.events);
        state.pending_commits.push(file.file);
        state.pending_since.get_or_insert(now);
        self.counters.files_committed += 1;
    }

    /// Gives triggered events to BUs with credits, in batches.
    fn assign(&mut self, now: Nanos) {
        let n = self.bus.len();
        for _ in 0..n {
            let available = self.reassign.len() + self.triggered.len();
            if available == 0 {
                return;
            }
            let b = self.next_bu % n;
            self.next_bu = (self.next_bu + 1) % n;
            let state = &self.bus[b];
            let room = self.cfg.max_assigned_per_bu.saturating_sub(state.assigned);
            let want = (state.credits as usize).min(room);
            if !state.alive || want == 0 {
                continue;
            }
            // Wait to fill a batch unless the oldest event has waited long enough, the run is
            // stopping, or events of a lost BU are waiting.
            let batch = want.min(self.cfg.assign_batch_events as usize);
            let oldest_waited =
                self.triggered.front().is_some_and(|&(_, at)| now >= at.saturating_add(self.cfg.assign_delay_ns));
            if available < batch && !oldest_waited && !self.stopped && self.reassign.is_empty() {
                continue;
            }
            let mut events = Vec::new();
            let mut count = 0;
            while count < want {
                let event = if let Some(e) = self.reassign.pop_first() {
                    e
                } else if let Some((e, _)) = self.triggered.pop_front() {
                    e
                } else {
                    break;
                };
                push_event(&mut events, event);
                if let Some(owner) = self.owner.entry(event) {
                    *owner = Some(b as BuId);
                }
                self.bus[b].assigned += 1;
                count += 1;
            }
            let state = &mut self.bus[b];
            state.credits -= count as u32;
            self.counters.assigned += count as u64;
            let release = std::mem::take(&mut self.pending_release);
            self.release_since = None;
            let (bu, epoch) = (b as BuId, state.epoch);
            for (ru, (events, release)) in to_every_ru(self.cfg.n_ru, (events, release)) {
                let msg = Message::Assign { bu, epoch, events, release };
                self.out.push_back(EvmOutput::Send { to: Peer::Ru(ru), msg });
            }
        }
    }

    /// Sends commits and releases that have waited `flush_delay_ns` (or all, with `force`).
    fn flush(&mut self, now: Nanos, force: bool) {
        let due =
            |since: Option<Nanos>| since.is_some_and(|t| force || now >= t.saturating_add(self.cfg.flush_delay_ns));
        if due(self.release_since) && !self.pending_release.is_empty() {
            let events = std::mem::take(&mut self.pending_release);
            self.release_since = None;
            for (ru, events) in to_every_ru(self.cfg.n_ru, events) {
                self.out.push_back(EvmOutput::Send { to: Peer::Ru(ru), msg: Message::Release { events } });
            }
        }
        for b in 0..self.bus.len() {
            if due(self.bus[b].pending_since) {
                let state = &mut self.bus[b];
                let files = std::mem::take(&mut state.pending_commits);
                state.pending_since = None;
                let msg = Message::Commit { epoch: state.epoch, files };
                self.out.push_back(EvmOutput::Send { to: Peer::Bu(b as BuId), msg });
            }
        }
    }

    /// Ends every lumi section that no trigger can add to and whose events are all committed:
    /// each BU is told how many of its events it must have published before its end-of-lumi
    /// record. Once the run has stopped and everything is closed, the end of the run follows.
    fn close_lumis(&mut self) {
        let done: Vec<u32> =
            self.lumis.iter().filter(|(_, l)| !l.open && l.uncommitted == 0).map(|(&ls, _)| ls).collect();
        for ls in done {
            let Some(lumi) = self.lumis.remove(&ls) else { continue };
            self.closed_through = Some(self.closed_through.map_or(ls, |c| c.max(ls)));
            for (b, &events) in lumi.per_bu.iter().enumerate() {
                let state = &mut self.bus[b];
                state.unacked_lumis.insert(ls, events);
                if state.alive {
                    let msg = Message::EndOfLumi { lumi_section: ls, events };
                    self.out.push_back(EvmOutput::Send { to: Peer::Bu(b as BuId), msg });
                }
            }
        }
        if self.stopped
            && !self.end_sent
            && self.lumis.is_empty()
            && self.triggered.is_empty()
            && self.reassign.is_empty()
        {
            self.end_sent = true;
            for b in 0..self.cfg.n_bu {
                if self.bus[usize::from(b)].alive {
                    self.send_end_of_run(b);
                }
            }
        }
    }

    /// Once the trigger is off and its last event seen, no lumi section can grow any more.
    fn stop_if_complete(&mut self) {
        let Some(last) = self.stop_at else { return };
        if self.stopped || last.is_some_and(|l| self.last_triggered.is_none_or(|t| t < l)) {
            return;
        }
        self.stopped = true;
        for lumi in self.lumis.values_mut() {
            lumi.open = false;
        }
        self.close_lumis();
    }

    fn send_end_of_run(&mut self, bu: BuId) {
        let msg = Message::EndOfRun { last_lumi_section: self.last_lumi.unwrap_or(0), lumi_sections: self.lumi_count };
        self.out.push_back(EvmOutput::Send { to: Peer::Bu(bu), msg });
    }

    /// Takes the commits waiting for BU `bu`, to ride on a data message from the EVM's RU.
    pub fn take_commits(&mut self, bu: BuId) -> Vec<FileId> {
        let Some(state) = self.bus.get_mut(usize::from(bu)) else { return Vec::new() };
        state.pending_since = None;
        std::mem::take(&mut state.pending_commits)
    }

    /// Once the trigger has stopped and every event is assigned, tells everyone.
    fn maybe_drain(&mut self) {
        if self.stopped && !self.drain_sent && self.triggered.is_empty() && self.reassign.is_empty() {
            self.drain_sent = true;
            for b in 0..self.cfg.n_bu {
                let msg = Message::Drain { last_event: self.last_triggered };
                self.out.push_back(EvmOutput::Send { to: Peer::Bu(b), msg });
            }
        }
    }

    /// Whether open lumi sections have waited longer than the time-out for a trigger.
    fn lumi_timed_out(&self, now: Nanos) -> bool {
        self.cfg.lumi_section_timeout_ns.is_some_and(|t| now >= self.last_trigger_at.saturating_add(t))
            && self.lumis.values().any(|l| l.open)
    }

    /// The earliest time at which a tick has work: a batch to give out, something to flush, or
    /// open lumi sections to close.
    pub fn next_timeout(&self) -> Option<Nanos> {
        // A batch waits only while some BU has asked for events.
        let asking = self.bus.iter().any(|b| b.alive && b.credits > 0);
        let assign =
            self.triggered.front().filter(|_| asking).map(|&(_, at)| at.saturating_add(self.cfg.assign_delay_ns));
        let release = self.release_since.map(|t| t + self.cfg.flush_delay_ns);
        let commits = self.bus.iter().filter_map(|b| b.pending_since).min().map(|t| t + self.cfg.flush_delay_ns);
        let lumi = self
            .cfg
            .lumi_section_timeout_ns
            .filter(|_| self.lumis.values().any(|l| l.open))
            .map(|t| self.last_trigger_at.saturating_add(t));
        [assign, release, commits, lumi].into_iter().flatten().min()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<EvmOutput> {
        self.out.pop_front()
    }

    /// Index of the RU next to the EVM.
    pub const LOCAL_RU: RuId = 0;
}

/// `lists` for each of `n_ru` RUs: copies for all but the last, which takes them (with one RU,
/// nothing is copied).
fn to_every_ru<T: Clone>(n_ru: u16, lists: T) -> impl Iterator<Item = (RuId, T)> {
    let mut lists = Some(lists);
    (0..n_ru).map(move |ru| {
        let mine = if ru + 1 == n_ru { lists.take() } else { lists.clone() };
        (ru, mine.expect("taken by the last RU only"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::BuiltFile;

    fn drain(evm: &mut Evm) -> Vec<EvmOutput> {
        std::iter::from_fn(|| evm.poll_output()).collect()
    }

    fn from_bu(msg: Message) -> Input {
        Input::Message { from: Peer::Bu(0), msg }
    }

    #[test]
    fn a_pause_in_triggers_closes_the_lumi_section_and_a_late_trigger_for_it_is_counted_lost() {
        let ms = 1_000_000;
        let cfg = EvmConfig { lumi_section_timeout_ns: Some(50 * ms), ..EvmConfig::new(1, 1) };
        let mut evm = Evm::new(cfg);
        evm.handle(0, from_bu(Message::Hello { bu: 0, epoch: 1, unpublished: Vec::new() }));
        let request = |credits, built: Vec<BuiltFile>, published: Vec<FileId>| Message::Request {
            bu: 0,
            epoch: 1,
            credits,
            built,
            published,
            lumis_done: Vec::new(),
        };
        evm.handle(0, from_bu(request(10, Vec::new(), Vec::new())));
        evm.triggered(ms, 1, 1);
        evm.handle(5 * ms, Input::Tick);
        assert!(drain(&mut evm).iter().any(|o| matches!(o, EvmOutput::Send { msg: Message::Assign { .. }, .. })));
        let file = FileId { bu: 0, lumi_section: 1, index: 0 };
        let built = vec![BuiltFile { file, events: vec![EventRange { first: 1, count: 1 }] }];
        evm.handle(6 * ms, from_bu(request(0, built, Vec::new())));
        evm.handle(8 * ms, Input::Tick);
        evm.handle(8 * ms, from_bu(request(0, Vec::new(), vec![file])));
        let end_of_lumi = |outs: &[EvmOutput]| {
            outs.iter()
                .any(|o| matches!(o, EvmOutput::Send { msg: Message::EndOfLumi { lumi_section: 1, events: 1 }, .. }))
        };
        // Before the time-out the section stays open: a trigger could still come for it.
        evm.handle(40 * ms, Input::Tick);
        assert!(!end_of_lumi(&drain(&mut evm)));
        assert_eq!(evm.next_timeout(), Some(51 * ms));
        evm.handle(52 * ms, Input::Tick);
        assert!(end_of_lumi(&drain(&mut evm)), "closed after 50 ms without a trigger");
        // A trigger for the closed section: lost, counted, its fragments released.
        evm.triggered(60 * ms, 2, 1);
        let outs = drain(&mut evm);
        assert!(outs.contains(&EvmOutput::Notice(Notice::LateTrigger { event: 2, lumi_section: 1 })), "{outs:?}");
        assert_eq!(evm.counters().lost_lumi_closed, 1);
        evm.handle(70 * ms, Input::Tick);
        let released = drain(&mut evm).into_iter().any(|o| match o {
            EvmOutput::Send { msg: Message::Release { events }, .. } => events.iter().any(|r| r.iter().any(|e| e == 2)),
            _ => false,
        });
        assert!(released, "the lost event's fragments are released at the RUs");
    }
}
