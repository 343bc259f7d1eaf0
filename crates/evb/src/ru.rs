//! The readout unit: takes the fragments of its FEDs, holds them until their event is committed,
//! and sends each assigned event's super-fragment to its BU.

use crate::invariant::InvariantViolation;
use crate::msg::{FragmentRef, Message, SuperFragment, data_batches};
use crate::ring::EventRing;
use crate::spare::Spare;
use crate::types::{BuId, Epoch, EventNumber, EventRange, FedId, Lv1Unwrapper, Nanos, Peer, RuId};
use crate::unit::{Input, Notice, RuOutput};
use std::collections::{BTreeMap, VecDeque};

/// Configuration of a readout unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuConfig {
    /// This RU's index; RU 0 sits with the EVM and holds the trigger FED.
    pub ru: RuId,
    /// The FEDs whose streams this RU reads.
    pub feds: Vec<FedId>,
    /// Number of the run's first event.
    pub first_event: EventNumber,
    /// Events whose fragments the RU may hold at once (its buffer pool); past it, it stops
    /// reading its FED streams. Default 4096.
    pub max_events_buffered: usize,
    /// Give up on a FED whose stream brings nothing for this long, while an assigned event
    /// waits for its fragment and this RU reads the stream: the event is then sent without it,
    /// and so are later ones until the FED catches up, in nanoseconds. `None` (the default):
    /// never; a silent stream holds its events, and through the RU's full buffers the trigger,
    /// until it sends, ends, or is masked ([`StreamChange::Masked`]). A stream that delivers
    /// older events, or that this RU holds back, is never silent.
    pub silent_fed_give_up_ns: Option<Nanos>,
    /// Super-fragments per data message at most. Default 256.
    pub max_parts_per_message: usize,
    /// How long super-fragments ready to go wait for the rest of their assignment's events
    /// (to leave in one message) before they go without them, in nanoseconds. Default 1 ms.
    /// The rest may wait for a FED held back for want of memory, which only their commit frees.
    pub batch_wait_ns: Nanos,
    /// Fragment bytes per data message at most, so that every message fits the frame a BU
    /// accepts; a super-fragment larger than this goes alone. Default unbounded.
    pub max_data_bytes: usize,
    /// Test-only: a deliberate protocol bug, for the simulator's self-check.
    pub bug: Option<RuBug>,
}

impl RuConfig {
    /// Defaults for RU `ru` reading `feds`.
    pub fn new(ru: RuId, feds: Vec<FedId>) -> Self {
        RuConfig {
            ru,
            feds,
            first_event: 1,
            max_events_buffered: 4096,
            silent_fed_give_up_ns: None,
            max_parts_per_message: 256,
            batch_wait_ns: 1_000_000,
            max_data_bytes: usize::MAX,
            bug: None,
        }
    }
}

/// Deliberate RU bugs that the simulator must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuBug {
    /// Free an event's buffers as soon as its super-fragment is sent, before the commit.
    ReleaseBeforeCommit,
}

/// Refusal of a fragment: the RU's buffer is full; offer it again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackPressure;

/// An assigned event that waits for a FED ([`Ru::waiting_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// The event.
    pub event: EventNumber,
    /// The FED it waits for.
    pub fed: FedId,
    /// Since when: its assignment, or the FED's last sign of life if later.
    pub since: Nanos,
}

/// Where a FED's stream is, as the protocol sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FedState {
    /// Its stream has not connected (or has not named its FED) yet: events wait for it, and the
    /// run does not start before it has.
    Unconnected,
    /// Connected and sending: events wait for it.
    Normal,
    /// Silent past the give-up time ([`RuConfig::silent_fed_give_up_ns`]): events after it do
    /// not wait for it until it catches up.
    GivenUp,
    /// Sent an event out of sequence: ignored for the rest of the run.
    SyncLost,
    /// Its stream ended (closed, or broken) before the run's end: no event waits for it.
    Ended,
    /// Masked by the operator: its events go on without it for the rest of the run, and what it
    /// still sends is dropped.
    Masked,
}

impl FedState {
    /// Whether events wait for the FED's fragment.
    pub fn waited_for(self) -> bool {
        matches!(self, FedState::Unconnected | FedState::Normal)
    }
}

/// What the driver, or run control, says of one of an RU's FED streams ([`Ru::stream_changed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamChange {
    /// The stream connected and named its FED (before its first fragment, if the driver sees it
    /// then). Once every stream has, RU 0's node is told ([`Message::StreamsConnected`]).
    Connected,
    /// The stream ended (closed, or broken) before the run's end: it brings nothing more, so the
    /// events that wait for it go on without it now. A FED out of sync or masked stays so.
    Ended,
    /// An operator masks the FED: the events that wait for it go on without it now, and so do
    /// all later ones; what its stream still brings is dropped. A FED already left out (ended,
    /// out of sync) stays so.
    Masked,
}

#[derive(Debug)]
struct Fed {
    id: FedId,
    lv1: Lv1Unwrapper,
    state: FedState,
    /// When its stream last brought bytes, or this RU last held it back: a stream is silent
    /// only from then on.
    alive_at: Nanos,
}

#[derive(Debug, Default)]
struct RuEvent {
    fragments: Vec<FragmentRef>,
    /// (BU, its epoch, when) of the current assignment.
    assigned: Option<(BuId, Epoch, Nanos)>,
    sent: bool,
}

/// Counters of a readout unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuCounters {
    /// Fragments accepted.
    pub fragments: u64,
    /// Fragments flagged corrupt.
    pub corrupt_fragments: u64,
    /// Fragments dropped because their event had been sent on.
    pub late_fragments: u64,
    /// Fragments refused for a full buffer.
    pub refused: u64,
    /// Fragments of masked FEDs, dropped.
    pub masked_fragments: u64,
    /// Super-fragments sent (resends included).
    pub parts_sent: u64,
    /// Super-fragments sent with FEDs missing.
    pub incomplete_parts: u64,
    /// Events released after commit.
    pub released: u64,
}

/// The readout unit's state machine.
#[derive(Debug)]
pub struct Ru {
    cfg: RuConfig,
    feds: Vec<Fed>,
    events: EventRing<RuEvent>,
    /// Assigned events by assignment time (time only grows, so the queue stays sorted). An
    /// entry whose event was sent, released or assigned again since is stale: it is dropped when
    /// it reaches the front.
    waiting: VecDeque<(Nanos, EventNumber)>,
    /// Per destination, assigned events not yet sent: a batch is sent when it reaches zero.
    unsent: BTreeMap<(BuId, Epoch), usize>,
    /// Per destination, super-fragments ready to send.
    ready: BTreeMap<(BuId, Epoch), Vec<SuperFragment>>,
    /// Since when some super-fragment is ready and not sent: all go at `batch_wait_ns` after.
    ready_since: Option<Nanos>,
    out: VecDeque<RuOutput>,
    counters: RuCounters,
    /// Fragments taken (offered and not refused) and freed: every fragment taken is freed or
    /// held by an event.
    taken: u64,
    freed: u64,
    /// The EVM's drain, once it came: every event of the run is committed, and the run's last
    /// event is this one (none if nothing was triggered).
    drain: Option<Option<EventNumber>>,
    /// Every stream has connected, and RU 0's node has been told so.
    connected_told: bool,
    /// Emptied fragment lists of released events and of sent super-fragments
    /// ([`Ru::recycle`]), at most `max_events_buffered`: an event's list and its
    /// super-fragment's are taken from here, not allocated, once the run is under way.
    spare: Spare<FragmentRef>,
    /// Emptied lists of the super-fragments of sent data messages ([`Ru::recycle`]), for the
    /// next batches ready to send; at most `max_events_buffered` (a batch holds an event at
    /// least).
    spare_batches: Spare<SuperFragment>,
}

impl Ru {
    /// A readout unit at the start of a run.
    pub fn new(cfg: RuConfig) -> Self {
        let feds = cfg
            .feds
            .iter()
            .map(|&id| Fed { id, lv1: Lv1Unwrapper::new(cfg.first_event), state: FedState::Unconnected, alive_at: 0 })
            .collect();
        Ru {
            events: EventRing::new(cfg.first_event),
            feds,
            waiting: VecDeque::new(),
            unsent: BTreeMap::new(),
            ready: BTreeMap::new(),
            ready_since: None,
            out: VecDeque::new(),
            counters: RuCounters::default(),
            taken: 0,
            freed: 0,
            drain: None,
            connected_told: false,
            spare: Spare::new(cfg.max_events_buffered),
            spare_batches: Spare::new(cfg.max_events_buffered),
            cfg,
        }
    }

    /// Takes back the super-fragments of a data message the driver has sent, to reuse their
    /// fragment lists and the list that held them.
    pub fn recycle(&mut self, mut parts: Vec<SuperFragment>) {
        for part in parts.drain(..) {
            self.spare.keep(part.fragments);
        }
        self.spare_batches.keep(parts);
    }

    /// Hands `fragments` back to the driver.
    fn free(&mut self, fragments: Vec<FragmentRef>) {
        self.freed += fragments.len() as u64;
        self.out.push_back(RuOutput::FreeBuffers(fragments));
    }

    /// Checks the RU's conservation laws: every fragment taken is freed or held by exactly one
    /// event, and the events held stay within the buffer pool. It counts every fragment held, so
    /// the simulator calls it after every step; says the first law broken.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let held: u64 = self.events.iter().map(|(_, e)| e.fragments.len() as u64).sum();
        if self.taken != self.freed + held {
            return Err(InvariantViolation::FragmentsNotConserved {
                ru: self.cfg.ru,
                taken: self.taken,
                freed: self.freed,
                held,
            });
        }
        if self.events.window() > self.cfg.max_events_buffered {
            return Err(InvariantViolation::WindowOverBound {
                ru: self.cfg.ru,
                window: self.events.window(),
                bound: self.cfg.max_events_buffered,
            });
        }
        Ok(())
    }

    /// Whether the EVM's drain came: the run is over, and nothing more will be assigned.
    pub fn drain_seen(&self) -> bool {
        self.drain.is_some()
    }

    /// The run's last event, as the EVM's drain said (none before it, or if nothing was
    /// triggered).
    pub fn run_last_event(&self) -> Option<EventNumber> {
        self.drain.flatten()
    }

    /// The first event that some FED of this RU has not delivered yet: every event before it
    /// has a fragment (or a given-up FED) from each.
    pub fn delivered_through(&self) -> EventNumber {
        self.feds.iter().map(|f| f.lv1.expected()).min().unwrap_or(self.cfg.first_event)
    }

    /// The event the FED at `fed_index` is to deliver next: one past the newest it delivered.
    pub fn expected_event(&self, fed_index: usize) -> EventNumber {
        self.feds.get(fed_index).map_or(self.cfg.first_event, |f| f.lv1.expected())
    }

    /// The first event some FED still sending (or not yet connected) has not delivered: FEDs
    /// given up on, out of sync, ended or masked are not waited for. `None` when no FED is left
    /// sending.
    pub fn sending_through(&self) -> Option<EventNumber> {
        self.feds.iter().filter(|f| f.state.waited_for()).map(|f| f.lv1.expected()).min()
    }

    /// The state of the FED at `fed_index`.
    pub fn fed_state(&self, fed_index: usize) -> Option<FedState> {
        self.feds.get(fed_index).map(|f| f.state)
    }

    /// The FEDs whose streams have not connected yet, in the RU's order.
    pub fn unconnected_feds(&self) -> Vec<FedId> {
        self.feds.iter().filter(|f| f.state == FedState::Unconnected).map(|f| f.id).collect()
    }

    /// Whether every stream of this RU has connected (and named its FED): the RU is ready for
    /// the run to start.
    pub fn all_connected(&self) -> bool {
        self.feds.iter().all(|f| f.state != FedState::Unconnected)
    }

    /// The FED at `fed_index`'s stream changed as `change` says; whether the FED's state changed
    /// with it (a second connect, end or mask changes nothing).
    pub fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        let Some(fed) = self.feds.get_mut(fed_index) else { return false };
        let (from, to) = match change {
            StreamChange::Connected => (&[FedState::Unconnected][..], FedState::Normal),
            StreamChange::Ended => {
                (&[FedState::Unconnected, FedState::Normal, FedState::GivenUp, FedState::Ended][..], FedState::Ended)
            }
            StreamChange::Masked => {
                (&[FedState::Unconnected, FedState::Normal, FedState::GivenUp][..], FedState::Masked)
            }
        };
        if !from.contains(&fed.state) {
            return false;
        }
        let changed = fed.state != to;
        fed.state = to;
        if change == StreamChange::Masked {
            let notice = Notice::FedMasked { fed: fed.id, event: fed.lv1.expected() };
            self.out.push_back(RuOutput::Notice(notice));
        }
        // A masked FED no longer keeps the run from starting either.
        self.tell_if_connected();
        if change != StreamChange::Connected {
            self.retry_waiting(now);
        }
        changed
    }

    fn tell_if_connected(&mut self) {
        if !self.connected_told && self.all_connected() {
            self.connected_told = true;
            let msg = Message::StreamsConnected { ru: self.cfg.ru };
            self.out.push_back(RuOutput::Send { to: Peer::Evm, msg });
        }
    }

    /// The oldest event assigned and not yet sent that waits for a FED, with that FED (the
    /// first in the RU's order it waits for) and since when it waits: since its assignment, or
    /// the FED's last sign of life if later. `None` when no assigned event waits.
    pub fn waiting_for(&self) -> Option<Wait> {
        self.waiting.iter().find_map(|&(at, event)| {
            let e = self.events.get(event).filter(|e| !e.sent && e.assigned.is_some_and(|a| a.2 == at))?;
            let fed = self.feds.iter().find(|f| {
                f.state.waited_for() && f.lv1.expected() <= event && !e.fragments.iter().any(|x| x.fed == f.id)
            })?;
            Some(Wait { event, fed: fed.id, since: at.max(fed.alive_at) })
        })
    }

    /// The events held, each with the BU it is assigned to, if any.
    pub fn held_assignments(&self) -> impl Iterator<Item = (EventNumber, Option<BuId>)> + '_ {
        self.events.iter().map(|(event, e)| (event, e.assigned.map(|(bu, _, _)| bu)))
    }

    /// Its configuration.
    pub fn config(&self) -> &RuConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> RuCounters {
        self.counters
    }

    /// Events whose fragments are held now.
    pub fn events_buffered(&self) -> usize {
        self.events.live()
    }

    /// Whether a fragment for the next event of `fed_index` would be taken now.
    pub fn accepts(&self, fed_index: usize) -> bool {
        let Some(fed) = self.feds.get(fed_index) else { return false };
        if matches!(fed.state, FedState::Masked | FedState::SyncLost) {
            // Dropped as it comes: never held.
            return true;
        }
        let event = fed.lv1.expected();
        // The ring's window, not only its live events, is what memory holds.
        event < self.events.end() || self.events.window() < self.cfg.max_events_buffered
    }

    /// The stream of the FED at `fed_index` brought bytes at `now` (a part of a fragment, say),
    /// or the driver held it back (did not read it, for want of memory): either way it is not
    /// silent, and no event may give up on it before `now` plus the give-up time.
    pub fn stream_alive(&mut self, fed_index: usize, now: Nanos) {
        if let Some(fed) = self.feds.get_mut(fed_index) {
            fed.alive_at = fed.alive_at.max(now);
        }
    }

    /// Tries again to send every event that waits: a FED it waited for is no longer waited for.
    fn retry_waiting(&mut self, now: Nanos) {
        let waiting: Vec<EventNumber> = self.waiting.iter().map(|&(_, e)| e).collect();
        self.try_send(now, waiting);
        self.flush_complete_batches();
    }

    /// The BU and incarnation `event` is assigned to, while this RU holds it.
    pub fn assignment(&self, event: EventNumber) -> Option<(BuId, Epoch)> {
        self.events.get(event).and_then(|e| e.assigned).map(|(bu, epoch, _)| (bu, epoch))
    }

    /// Takes the next fragment of the FED at `fed_index` in this RU's list. A full buffer refuses
    /// it; the driver stops reading that stream and offers it again later.
    pub fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        // Offered or refused, the stream is alive: refused, this RU holds it back.
        self.stream_alive(fed_index, now);
        if !self.accepts(fed_index) {
            self.counters.refused += 1;
            return Err(BackPressure);
        }
        self.taken += 1;
        let fed = &mut self.feds[fed_index];
        if fed.state == FedState::Unconnected {
            // A fragment comes only over a connected stream.
            fed.state = FedState::Normal;
            self.tell_if_connected();
        }
        let fed = &mut self.feds[fed_index];
        if matches!(fed.state, FedState::SyncLost | FedState::Masked) {
            self.counters.masked_fragments += u64::from(fed.state == FedState::Masked);
            self.free(vec![fragment]);
            return Ok(());
        }
        let event = match fed.lv1.accept(fragment.lv1) {
            Ok(event) => event,
            Err(expected) => {
                fed.state = FedState::SyncLost;
                let notice = Notice::SyncLoss { fed: fed.id, expected, found_lv1: fragment.lv1 };
                self.out.push_back(RuOutput::Notice(notice));
                self.free(vec![fragment]);
                // Events waiting for this FED no longer do.
                self.retry_waiting(now);
                return Ok(());
            }
        };
        self.counters.fragments += 1;
        self.counters.corrupt_fragments += u64::from(fragment.corrupt);
        let fed_id = fed.id;
        let caught_up = fed.state == FedState::GivenUp;
        // A trigger is a trigger even when its fragment comes late (under push its event may
        // have gone on, or been dropped with a lost BU, before it): it is counted all the same.
        if let Some(info) = fragment.trigger {
            self.out.push_back(RuOutput::Triggered { event, lumi_section: info.lumi_section });
        }
        if self.events.was_removed(event) || self.events.get(event).is_some_and(|e| e.sent) {
            self.counters.late_fragments += 1;
            self.out.push_back(RuOutput::Notice(Notice::LateFragment { fed: fed_id, event }));
            self.free(vec![fragment]);
            return Ok(());
        }
        if caught_up {
            self.feds[fed_index].state = FedState::Normal;
        }
        let e = self.events.entry(event).expect("not removed: checked above");
        if e.fragments.capacity() == 0 {
            e.fragments = self.spare.take();
            e.fragments.reserve_exact(self.feds.len());
        }
        e.fragments.push(fragment);
        debug_assert!(self.events.window() <= self.cfg.max_events_buffered, "accepts() bounds the window");
        let e = self.events.get(event).expect("just filled");
        if e.assigned.is_some() {
            self.try_send(now, [event]);
            self.flush_complete_batches();
        }
        Ok(())
    }

    /// Handles one input.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Message { msg: Message::Assign { bu, epoch, events, release }, .. } => {
                self.release(&release);
                let mut assigned = Vec::with_capacity(self.events_in(&events));
                for range in events {
                    for event in range.iter() {
                        let Some(e) = self.events.entry(event) else {
                            self.out.push_back(RuOutput::Notice(Notice::ProtocolError {
                                what: format!(
                                    "RU {}: event {event} assigned to BU {bu} after its release",
                                    self.cfg.ru
                                ),
                            }));
                            continue;
                        };
                        if let Some(previous) = e.assigned.filter(|_| !e.sent) {
                            // Reassigned before it was sent: it no longer counts for the old batch.
                            self.unsent.entry((previous.0, previous.1)).and_modify(|n| *n = n.saturating_sub(1));
                        }
                        e.assigned = Some((bu, epoch, now));
                        e.sent = false;
                        self.waiting.push_back((now, event));
                        *self.unsent.entry((bu, epoch)).or_default() += 1;
                        assigned.push(event);
                    }
                }
                self.try_send(now, assigned);
                self.flush_complete_batches();
            }
            Input::Message { msg: Message::Release { events }, .. } => self.release(&events),
            Input::Message { from: Peer::Evm, msg: Message::Drain { last_event } } => {
                if self.drain.is_some_and(|seen| seen != last_event) {
                    self.out.push_back(RuOutput::Notice(Notice::ProtocolError {
                        what: format!("RU {}: a second drain with another last event, {last_event:?}", self.cfg.ru),
                    }));
                }
                self.drain.get_or_insert(last_event);
            }
            Input::Tick => {
                if let Some(give_up) = self.cfg.silent_fed_give_up_ns {
                    let waiting: Vec<EventNumber> = self
                        .waiting
                        .iter()
                        .take_while(|&&(at, _)| now >= at.saturating_add(give_up))
                        .map(|&(_, e)| e)
                        .collect();
                    self.try_send(now, waiting);
                }
                self.flush(|_| true);
            }
            Input::Message { from, msg } => self.out.push_back(RuOutput::Notice(Notice::ProtocolError {
                what: format!("RU {}: unexpected message from {from}: {}", self.cfg.ru, message_name(&msg)),
            })),
            _ => {}
        }
    }

    fn release(&mut self, ranges: &[EventRange]) {
        let mut freed = Vec::with_capacity(self.events_in(ranges) * self.feds.len());
        for range in ranges {
            for event in range.iter() {
                if let Some(mut e) = self.events.remove(event) {
                    if let Some((bu, epoch, _)) = e.assigned.filter(|_| !e.sent) {
                        self.unsent.entry((bu, epoch)).and_modify(|n| *n = n.saturating_sub(1));
                    }
                    freed.append(&mut e.fragments);
                    self.spare.keep(e.fragments);
                    self.counters.released += 1;
                }
            }
        }
        if !freed.is_empty() {
            self.free(freed);
        }
        self.trim_waiting();
    }

    /// Events in `ranges`, as many as this RU may hold at most: the room to make for them.
    fn events_in(&self, ranges: &[EventRange]) -> usize {
        ranges.iter().map(|r| r.count as usize).sum::<usize>().min(self.cfg.max_events_buffered)
    }

    /// Moves each of `events` that is assigned, unsent, and complete or timed out to its
    /// destination's ready batch.
    fn try_send(&mut self, now: Nanos, events: impl IntoIterator<Item = EventNumber>) {
        for event in events {
            let Some(e) = self.events.get(event) else { continue };
            let Some((bu, epoch, at)) = e.assigned.filter(|_| !e.sent) else { continue };
            let mut missing = Vec::new();
            let mut wait = false;
            // Each FED gives at most one fragment per event: all there is the common case.
            let complete = e.fragments.len() == self.feds.len();
            for fed in self.feds.iter().filter(|_| !complete) {
                if e.fragments.iter().any(|f| f.fed == fed.id) {
                    continue;
                }
                // A FED that is past this event, given up on, out of sync, ended or masked will
                // not send it.
                let gone = !fed.state.waited_for() || fed.lv1.expected() > event;
                // Silent past the give-up time, if the system sets one: nothing from its stream
                // for that long, counted from the assignment at the earliest. (This RU's own
                // window never holds back a FED an event waits for: its next fragment is of that
                // event or an older one; the driver says when it holds a stream back for want of
                // memory, through `stream_alive`.) Without one, a silent FED is waited for.
                let silent = self
                    .cfg
                    .silent_fed_give_up_ns
                    .is_some_and(|give_up| now >= at.max(fed.alive_at).saturating_add(give_up));
                if gone || silent {
                    missing.push(fed.id);
                } else {
                    wait = true;
                }
            }
            if wait {
                continue;
            }
            let mut fragments = self.spare.take();
            fragments.extend_from_slice(&e.fragments);
            let part = SuperFragment { event, fragments, missing: missing.clone() };
            if let Some(e) = self.events.get_mut(event) {
                e.sent = true;
            }
            // Sized for the events of its assignment not yet sent, so that it does not grow.
            let batch = self.unsent.get(&(bu, epoch)).map_or(1, |&n| n.clamp(1, self.cfg.max_events_buffered));
            self.unsent.entry((bu, epoch)).and_modify(|n| *n = n.saturating_sub(1));
            let spare_batches = &mut self.spare_batches;
            let ready = self.ready.entry((bu, epoch)).or_insert_with(|| {
                let mut list = spare_batches.take();
                list.reserve_exact(batch);
                list
            });
            ready.push(part);
            self.ready_since.get_or_insert(now);
            self.counters.parts_sent += 1;
            if !missing.is_empty() {
                self.counters.incomplete_parts += 1;
                for &fed in &missing {
                    if let Some(f) = self.feds.iter_mut().find(|f| f.id == fed && f.state.waited_for()) {
                        f.state = FedState::GivenUp;
                        self.out.push_back(RuOutput::Notice(Notice::FedGivenUp { fed, event }));
                    }
                }
                self.out.push_back(RuOutput::Notice(Notice::MissingFragments { event, feds: missing }));
            }
        }
        self.trim_waiting();
    }

    /// Drops stale entries from the front of `waiting`.
    fn trim_waiting(&mut self) {
        while let Some(&(at, event)) = self.waiting.front() {
            let live = self.events.get(event).is_some_and(|e| !e.sent && e.assigned.is_some_and(|a| a.2 == at));
            if live {
                return;
            }
            self.waiting.pop_front();
        }
    }

    /// Sends the batches whose assigned events are all ready, and any batch that is full.
    fn flush_complete_batches(&mut self) {
        let max = self.cfg.max_parts_per_message.max(1);
        let mut unsent = std::mem::take(&mut self.unsent);
        self.flush(|(dest, parts)| parts.len() >= max || unsent.get(dest).is_none_or(|&n| n == 0));
        // Kept in place, not collected anew: this runs for every fragment of an assigned event.
        unsent.retain(|_, n| *n > 0);
        self.unsent = unsent;
    }

    /// Sends the ready batches that `pick` selects.
    fn flush(&mut self, pick: impl Fn((&(BuId, Epoch), &Vec<SuperFragment>)) -> bool) {
        // One destination at a time, each sent leaving the map: no list of them is collected.
        while let Some(&(bu, epoch)) = self.ready.iter().find(|&(d, p)| pick((d, p))).map(|(d, _)| d) {
            let parts = self.ready.remove(&(bu, epoch)).expect("just found");
            if self.cfg.bug == Some(RuBug::ReleaseBeforeCommit) {
                let ranges: Vec<EventRange> = parts.iter().map(|p| EventRange { first: p.event, count: 1 }).collect();
                self.release(&ranges);
            }
            let (max_parts, max_bytes) = (self.cfg.max_parts_per_message, self.cfg.max_data_bytes);
            for parts in data_batches(parts, max_parts, max_bytes) {
                let msg = Message::Data { ru: self.cfg.ru, epoch, parts, commits: Vec::new() };
                self.out.push_back(RuOutput::Send { to: Peer::Bu(bu), msg });
            }
        }
        if self.ready.is_empty() {
            self.ready_since = None;
        }
    }

    /// The earliest time at which a tick has work: super-fragments ready for longer than
    /// `batch_wait_ns` go without the rest of their batch; and, when the system sets a give-up
    /// time, a silent FED may be given up on: the oldest waiting event's assignment or the last
    /// sign of life of the FEDs it waits for, whichever is later, plus that time.
    pub fn next_timeout(&self) -> Option<Nanos> {
        let batch = self.ready_since.map(|t| t.saturating_add(self.cfg.batch_wait_ns));
        [batch, self.give_up_at()].into_iter().flatten().min()
    }

    /// When a silent FED may be given up on, with a give-up time (see [`Ru::next_timeout`]).
    fn give_up_at(&self) -> Option<Nanos> {
        let give_up = self.cfg.silent_fed_give_up_ns?;
        let &(at, event) = self.waiting.front()?;
        let fragments = self.events.get(event).map_or(&[][..], |e| e.fragments.as_slice());
        let alive_at = self
            .feds
            .iter()
            .filter(|f| f.state.waited_for() && !fragments.iter().any(|x| x.fed == f.id))
            .map(|f| f.alive_at)
            .min()
            .unwrap_or(at);
        Some(at.max(alive_at).saturating_add(give_up))
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<RuOutput> {
        self.out.pop_front()
    }
}

/// A message's name, for error reports.
pub(crate) fn message_name(msg: &Message) -> &'static str {
    match msg {
        Message::Hello { .. } => "Hello",
        Message::Welcome { .. } => "Welcome",
        Message::Request { .. } => "Request",
        Message::Assign { .. } => "Assign",
        Message::Data { .. } => "Data",
        Message::Commit { .. } => "Commit",
        Message::Release { .. } => "Release",
        Message::Drain { .. } => "Drain",
        Message::EndOfLumi { .. } => "EndOfLumi",
        Message::EndOfRun { .. } => "EndOfRun",
        Message::Exclude { .. } => "Exclude",
        Message::Progress { .. } => "Progress",
        Message::StreamsConnected { .. } => "StreamsConnected",
        Message::Start => "Start",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::BufferRef;

    fn fragment(fed: FedId, lv1: u32) -> FragmentRef {
        FragmentRef {
            fed,
            lv1,
            bytes: 64,
            corrupt: false,
            buffer: BufferRef { offset: lv1, ..BufferRef::default() },
            trigger: None,
        }
    }

    #[test]
    fn a_full_buffer_refuses_and_a_release_makes_room() {
        let mut ru = Ru::new(RuConfig { max_events_buffered: 2, ..RuConfig::new(1, vec![7]) });
        assert_eq!(ru.offer_fragment(0, 0, fragment(7, 1)), Ok(()));
        assert_eq!(ru.offer_fragment(0, 0, fragment(7, 2)), Ok(()));
        assert_eq!(ru.offer_fragment(0, 0, fragment(7, 3)), Err(BackPressure));
        assert_eq!(ru.counters().refused, 1);
        let assign =
            Message::Assign { bu: 0, epoch: 1, events: vec![EventRange { first: 1, count: 1 }], release: vec![] };
        ru.handle(0, Input::Message { from: Peer::Evm, msg: assign });
        ru.handle(
            0,
            Input::Message {
                from: Peer::Evm,
                msg: Message::Release { events: vec![EventRange { first: 1, count: 1 }] },
            },
        );
        assert_eq!(ru.offer_fragment(0, 0, fragment(7, 3)), Ok(()));
        let outputs: Vec<RuOutput> = std::iter::from_fn(|| ru.poll_output()).collect();
        assert!(outputs.iter().any(
            |o| matches!(o, RuOutput::Send { to: Peer::Bu(0), msg: Message::Data { parts, .. } } if parts[0].event == 1)
        ));
        assert!(outputs.iter().any(|o| matches!(o, RuOutput::FreeBuffers(f) if f[0].lv1 == 1)));
    }

    #[test]
    fn an_event_out_of_sequence_is_a_sync_loss_and_the_fed_is_given_up() {
        let mut ru = Ru::new(RuConfig::new(1, vec![7, 8]));
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        ru.offer_fragment(0, 1, fragment(8, 2)).unwrap(); // FED 8 skipped event 1
        let assign =
            Message::Assign { bu: 0, epoch: 1, events: vec![EventRange { first: 1, count: 1 }], release: vec![] };
        ru.handle(0, Input::Message { from: Peer::Evm, msg: assign });
        let outputs: Vec<RuOutput> = std::iter::from_fn(|| ru.poll_output()).collect();
        assert!(outputs.contains(&RuOutput::Notice(Notice::SyncLoss { fed: 8, expected: 1, found_lv1: 2 })));
        let sent = outputs.iter().find_map(|o| match o {
            RuOutput::Send { msg: Message::Data { parts, .. }, .. } => Some(parts[0].clone()),
            _ => None,
        });
        assert_eq!(sent.map(|p| (p.event, p.missing)), Some((1, vec![8])), "sent at once, FED 8 missing");
    }

    fn sent(ru: &mut Ru) -> Vec<(EventNumber, Vec<FedId>)> {
        std::iter::from_fn(|| ru.poll_output())
            .filter_map(|o| match o {
                RuOutput::Send { msg: Message::Data { parts, .. }, .. } => Some(parts),
                _ => None,
            })
            .flatten()
            .map(|p| (p.event, p.missing))
            .collect()
    }

    fn assign_first(ru: &mut Ru, now: Nanos) {
        let assign =
            Message::Assign { bu: 0, epoch: 1, events: vec![EventRange { first: 1, count: 1 }], release: vec![] };
        ru.handle(now, Input::Message { from: Peer::Evm, msg: assign });
    }

    #[test]
    fn a_stream_that_brings_bytes_or_is_held_back_is_waited_for_past_the_time_out() {
        let timeout = 1_000;
        let mut ru = Ru::new(RuConfig { silent_fed_give_up_ns: Some(timeout), ..RuConfig::new(1, vec![7, 8]) });
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        assign_first(&mut ru, 0);
        // FED 8 delivers a part of a fragment, then is held back for want of memory: alive.
        ru.stream_alive(1, 900);
        ru.handle(1_500, Input::Tick);
        ru.stream_alive(1, 1_800);
        assert_eq!(ru.next_timeout(), Some(2_800), "the time-out counts from its last sign of life");
        ru.handle(2_700, Input::Tick);
        assert!(sent(&mut ru).is_empty(), "event 1 waits for FED 8");
        ru.offer_fragment(2_750, 1, fragment(8, 1)).unwrap();
        assert_eq!(sent(&mut ru), vec![(1, vec![])], "complete");
    }

    #[test]
    fn without_a_give_up_time_a_silent_stream_is_waited_for_however_long_and_its_event_is_complete() {
        let mut ru = Ru::new(RuConfig::new(1, vec![7, 8]));
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        assign_first(&mut ru, 100);
        assert_eq!(ru.next_timeout(), None, "nothing to give up on");
        let hour = 3_600_000_000_000;
        ru.handle(hour, Input::Tick);
        assert!(sent(&mut ru).is_empty(), "event 1 waits for FED 8");
        assert_eq!(ru.waiting_for(), Some(Wait { event: 1, fed: 8, since: 100 }));
        ru.offer_fragment(hour + 1, 1, fragment(8, 1)).unwrap();
        assert_eq!(sent(&mut ru), vec![(1, vec![])], "complete");
        assert_eq!(ru.waiting_for(), None);
        assert_eq!(ru.counters().incomplete_parts, 0);
    }

    #[test]
    fn a_masked_fed_is_not_waited_for_from_then_on_and_what_it_still_sends_is_dropped() {
        let mut ru = Ru::new(RuConfig::new(1, vec![7, 8]));
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        ru.offer_fragment(0, 0, fragment(7, 2)).unwrap();
        assign_first(&mut ru, 100);
        assert!(sent(&mut ru).is_empty());
        assert!(ru.stream_changed(200, 1, StreamChange::Masked));
        assert!(!ru.stream_changed(201, 1, StreamChange::Masked), "once");
        let outputs: Vec<RuOutput> = std::iter::from_fn(|| ru.poll_output()).collect();
        assert!(outputs.contains(&RuOutput::Notice(Notice::FedMasked { fed: 8, event: 1 })));
        assert!(
            outputs.iter().any(|o| matches!(o,
            RuOutput::Send { msg: Message::Data { parts, .. }, .. } if parts[0].event == 1 && parts[0].missing == [8]))
        );
        // What FED 8 still sends is dropped, and it is never held back.
        assert!(ru.accepts(1));
        ru.offer_fragment(300, 1, fragment(8, 1)).unwrap();
        assert_eq!(ru.counters().masked_fragments, 1);
        let assign =
            Message::Assign { bu: 0, epoch: 1, events: vec![EventRange { first: 2, count: 1 }], release: vec![] };
        ru.handle(400, Input::Message { from: Peer::Evm, msg: assign });
        assert_eq!(sent(&mut ru), vec![(2, vec![8])], "later events go on without it at once");
    }

    #[test]
    fn ru_0_is_told_once_when_every_stream_has_connected_or_is_masked() {
        let told = |ru: &mut Ru| {
            std::iter::from_fn(|| ru.poll_output())
                .filter(|o| matches!(o, RuOutput::Send { to: Peer::Evm, msg: Message::StreamsConnected { ru: 3 } }))
                .count()
        };
        let mut ru = Ru::new(RuConfig::new(3, vec![7, 8, 9]));
        assert_eq!(ru.unconnected_feds(), vec![7, 8, 9]);
        ru.stream_changed(0, 0, StreamChange::Connected);
        // A first fragment says its stream is connected too.
        ru.offer_fragment(0, 2, fragment(9, 1)).unwrap();
        assert_eq!((told(&mut ru), ru.unconnected_feds()), (0, vec![8]));
        assert!(!ru.all_connected());
        // Events wait for a FED not yet connected.
        assign_first(&mut ru, 0);
        assert_eq!(ru.waiting_for().map(|w| w.fed), Some(7));
        ru.stream_changed(0, 1, StreamChange::Connected);
        assert_eq!(told(&mut ru), 1);
        ru.stream_changed(0, 1, StreamChange::Connected);
        assert_eq!(told(&mut ru), 0, "once");
        let mut ru = Ru::new(RuConfig::new(3, vec![7, 8]));
        ru.stream_changed(0, 0, StreamChange::Connected);
        ru.stream_changed(0, 1, StreamChange::Masked);
        assert_eq!(told(&mut ru), 1, "a masked FED does not hold the start");
    }

    #[test]
    fn a_silent_stream_is_given_up_after_the_time_out_and_an_ended_one_at_once() {
        let timeout = 1_000;
        let mut ru = Ru::new(RuConfig { silent_fed_give_up_ns: Some(timeout), ..RuConfig::new(1, vec![7, 8]) });
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        assign_first(&mut ru, 100);
        ru.handle(1_099, Input::Tick);
        assert!(sent(&mut ru).is_empty());
        ru.handle(1_100, Input::Tick);
        assert_eq!(sent(&mut ru), vec![(1, vec![8])], "silent for the time-out since the assignment");

        let mut ru = Ru::new(RuConfig { silent_fed_give_up_ns: Some(timeout), ..RuConfig::new(1, vec![7, 8]) });
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        assign_first(&mut ru, 100);
        ru.stream_changed(200, 1, StreamChange::Ended);
        assert_eq!(sent(&mut ru), vec![(1, vec![8])], "its stream ended: no wait");
    }
}
