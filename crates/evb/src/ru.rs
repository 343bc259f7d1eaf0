//! The readout unit: takes the fragments of its FEDs, holds them until their event is committed,
//! and sends each assigned event's super-fragment to its BU.

use crate::invariant::InvariantViolation;
use crate::msg::{FragmentRef, Message, SuperFragment, data_batches};
use crate::ring::EventRing;
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
    /// How long a FED's stream may bring nothing, while an assigned event waits for its
    /// fragment and this RU reads the stream, before the event is sent without it (the FED is
    /// then stalled), in nanoseconds. A stream that delivers older events, or that this RU holds
    /// back, is never stalled: its events wait. Default 100 ms.
    pub fragment_timeout_ns: Nanos,
    /// Super-fragments per data message at most. Default 256.
    pub max_parts_per_message: usize,
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
            fragment_timeout_ns: 100_000_000,
            max_parts_per_message: 256,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FedState {
    Normal,
    /// Stopped sending at `since`: events after it do not wait for it.
    Stalled,
    /// Sent an event out of sequence: ignored for the rest of the run.
    SyncLost,
    /// Its stream ended (closed or broken) before the run's end: no event waits for it.
    Ended,
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
    out: VecDeque<RuOutput>,
    counters: RuCounters,
    /// Fragments taken (offered and not refused) and freed: every fragment taken is freed or
    /// held by an event.
    taken: u64,
    freed: u64,
    /// The EVM's drain, once it came: every event of the run is committed, and the run's last
    /// event is this one (none if nothing was triggered).
    drain: Option<Option<EventNumber>>,
}

impl Ru {
    /// A readout unit at the start of a run.
    pub fn new(cfg: RuConfig) -> Self {
        let feds = cfg
            .feds
            .iter()
            .map(|&id| Fed { id, lv1: Lv1Unwrapper::new(cfg.first_event), state: FedState::Normal, alive_at: 0 })
            .collect();
        Ru {
            events: EventRing::new(cfg.first_event),
            cfg,
            feds,
            waiting: VecDeque::new(),
            unsent: BTreeMap::new(),
            ready: BTreeMap::new(),
            out: VecDeque::new(),
            counters: RuCounters::default(),
            taken: 0,
            freed: 0,
            drain: None,
        }
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

    /// The first event some FED still sending has not delivered: FEDs stalled past the fragment
    /// time-out, out of sync or ended are not waited for. `None` when no FED is left sending.
    pub fn sending_through(&self) -> Option<EventNumber> {
        self.feds.iter().filter(|f| f.state == FedState::Normal).map(|f| f.lv1.expected()).min()
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
        let event = fed.lv1.expected();
        // The ring's window, not only its live events, is what memory holds.
        event < self.events.end() || self.events.window() < self.cfg.max_events_buffered
    }

    /// The stream of the FED at `fed_index` brought bytes at `now` (a part of a fragment, say),
    /// or the driver held it back (did not read it, for want of memory): either way it is not
    /// silent, and no event may give up on it before `now` plus the fragment time-out.
    pub fn stream_alive(&mut self, fed_index: usize, now: Nanos) {
        if let Some(fed) = self.feds.get_mut(fed_index) {
            fed.alive_at = fed.alive_at.max(now);
        }
    }

    /// The stream of the FED at `fed_index` ended (closed, or broken) before the run's end: it
    /// brings nothing more, so the events waiting for it go on without it now rather than after
    /// the fragment time-out.
    pub fn stream_ended(&mut self, fed_index: usize, now: Nanos) {
        let Some(fed) = self.feds.get_mut(fed_index) else { return };
        if fed.state == FedState::SyncLost {
            return;
        }
        fed.state = FedState::Ended;
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
        if fed.state == FedState::SyncLost {
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
                let waiting: Vec<EventNumber> = self.waiting.iter().map(|&(_, e)| e).collect();
                self.try_send(now, waiting);
                self.flush_complete_batches();
                return Ok(());
            }
        };
        self.counters.fragments += 1;
        self.counters.corrupt_fragments += u64::from(fragment.corrupt);
        let fed_id = fed.id;
        let caught_up = fed.state == FedState::Stalled;
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
        if e.fragments.is_empty() {
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
                let mut assigned = Vec::new();
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
                let timeout = self.cfg.fragment_timeout_ns;
                let waiting: Vec<EventNumber> = self
                    .waiting
                    .iter()
                    .take_while(|&&(at, _)| now >= at.saturating_add(timeout))
                    .map(|&(_, e)| e)
                    .collect();
                self.try_send(now, waiting);
                self.flush(|_| true);
            }
            Input::Message { from, msg } => self.out.push_back(RuOutput::Notice(Notice::ProtocolError {
                what: format!("RU {}: unexpected message from {from:?}: {}", self.cfg.ru, message_name(&msg)),
            })),
            _ => {}
        }
    }

    fn release(&mut self, ranges: &[EventRange]) {
        let mut freed = Vec::new();
        for range in ranges {
            for event in range.iter() {
                if let Some(e) = self.events.remove(event) {
                    if let Some((bu, epoch, _)) = e.assigned.filter(|_| !e.sent) {
                        self.unsent.entry((bu, epoch)).and_modify(|n| *n = n.saturating_sub(1));
                    }
                    freed.extend(e.fragments);
                    self.counters.released += 1;
                }
            }
        }
        if !freed.is_empty() {
            self.free(freed);
        }
        self.trim_waiting();
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
                // A FED that is past this event, stalled or out of sync will not send it.
                let gave_up = fed.state != FedState::Normal || fed.lv1.expected() > event;
                // Silent: nothing from its stream for the time-out, counted from the assignment
                // at the earliest. (This RU's own window never holds back a FED an event waits
                // for: its next fragment is of that event or an older one; the driver says when
                // it holds a stream back for want of memory, through `stream_alive`.)
                let silent = now >= at.max(fed.alive_at).saturating_add(self.cfg.fragment_timeout_ns);
                if gave_up || silent {
                    missing.push(fed.id);
                } else {
                    wait = true;
                }
            }
            if wait {
                continue;
            }
            let part = SuperFragment { event, fragments: e.fragments.clone(), missing: missing.clone() };
            if let Some(e) = self.events.get_mut(event) {
                e.sent = true;
            }
            self.unsent.entry((bu, epoch)).and_modify(|n| *n = n.saturating_sub(1));
            self.ready.entry((bu, epoch)).or_default().push(part);
            self.counters.parts_sent += 1;
            if !missing.is_empty() {
                self.counters.incomplete_parts += 1;
                for &fed in &missing {
                    if let Some(f) = self.feds.iter_mut().find(|f| f.id == fed && f.state == FedState::Normal) {
                        f.state = FedState::Stalled;
                        self.out.push_back(RuOutput::Notice(Notice::FedStalled { fed, event }));
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
        let unsent = std::mem::take(&mut self.unsent);
        self.flush(|(dest, parts)| parts.len() >= max || unsent.get(dest).is_none_or(|&n| n == 0));
        self.unsent = unsent.into_iter().filter(|&(_, n)| n > 0).collect();
    }

    /// Sends the ready batches that `pick` selects.
    fn flush(&mut self, pick: impl Fn((&(BuId, Epoch), &Vec<SuperFragment>)) -> bool) {
        let dests: Vec<(BuId, Epoch)> = self.ready.iter().filter(|(d, p)| pick((d, p))).map(|(d, _)| *d).collect();
        for (bu, epoch) in dests {
            let Some(parts) = self.ready.remove(&(bu, epoch)) else { continue };
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
    }

    /// The earliest time at which a tick could send a timed-out event: the oldest waiting event's
    /// assignment or the last sign of life of the FEDs it waits for, whichever is later, plus the
    /// time-out.
    pub fn next_timeout(&self) -> Option<Nanos> {
        let &(at, event) = self.waiting.front()?;
        let fragments = self.events.get(event).map_or(&[][..], |e| e.fragments.as_slice());
        let alive_at = self
            .feds
            .iter()
            .filter(|f| f.state == FedState::Normal && !fragments.iter().any(|x| x.fed == f.id))
            .map(|f| f.alive_at)
            .min()
            .unwrap_or(at);
        Some(at.max(alive_at).saturating_add(self.cfg.fragment_timeout_ns))
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
        let mut ru = Ru::new(RuConfig { fragment_timeout_ns: timeout, ..RuConfig::new(1, vec![7, 8]) });
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
    fn a_silent_stream_is_given_up_after_the_time_out_and_an_ended_one_at_once() {
        let timeout = 1_000;
        let mut ru = Ru::new(RuConfig { fragment_timeout_ns: timeout, ..RuConfig::new(1, vec![7, 8]) });
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        assign_first(&mut ru, 100);
        ru.handle(1_099, Input::Tick);
        assert!(sent(&mut ru).is_empty());
        ru.handle(1_100, Input::Tick);
        assert_eq!(sent(&mut ru), vec![(1, vec![8])], "silent for the time-out since the assignment");

        let mut ru = Ru::new(RuConfig { fragment_timeout_ns: timeout, ..RuConfig::new(1, vec![7, 8]) });
        ru.offer_fragment(0, 0, fragment(7, 1)).unwrap();
        assign_first(&mut ru, 100);
        ru.stream_ended(1, 200);
        assert_eq!(sent(&mut ru), vec![(1, vec![8])], "its stream ended: no wait");
    }
}
