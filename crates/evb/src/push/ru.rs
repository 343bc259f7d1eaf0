//! The readout unit of push: the pull protocol's [`Ru`] with itself as event manager. It assigns
//! every event it sees to the BU the destination function gives it, sends each super-fragment
//! when its event is complete here (or its FEDs' time-out has passed, as in pull), and frees the
//! buffers once the super-fragment is sent: push has no commit to wait for, so what a BU lost
//! before writing is lost (counted by whoever excludes it).

use super::Destinations;
use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, Ru, RuConfig, StreamChange, message_name};
use crate::types::{BuId, EventNumber, EventRange, Nanos, Peer, push_event};
use crate::unit::{Input, Notice, RuOutput};
use std::collections::VecDeque;

/// Longest the events of a block some FED has begun wait for the rest of their block to be seen
/// before they are assigned (and so sent) without it, in nanoseconds: a block goes to its BU as one
/// data message when it can, and the last block of a run, or one the throttle cut, still goes.
pub const PARTIAL_BLOCK_WAIT_NS: Nanos = 1_000_000;

/// The incarnation every push destination is sent to: push has no Hello to number BUs by, and a
/// lost BU is excluded rather than brought back.
pub const PUSH_EPOCH: u32 = 1;

/// Counters of a push RU beyond its [`Ru`]'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushRuCounters {
    /// Events sent to another BU than first chosen, their BU having been excluded before they
    /// left.
    pub redirected: u64,
    /// Events the function gives an excluded BU (those before its exclusion's first event):
    /// never sent to it, freed.
    pub dropped_for_excluded: u64,
}

/// A readout unit of the push protocol.
#[derive(Debug)]
pub struct PushRu {
    ru: Ru,
    destinations: Destinations,
    /// The first event not yet assigned.
    next: EventNumber,
    /// One past the newest event some FED has delivered, kept as fragments come rather than
    /// asked of every FED per fragment.
    seen: EventNumber,
    /// Since when events from `next` on are seen and wait for their block.
    waiting_since: Option<Nanos>,
    /// Events at or above this fill the RU past its high-water mark: the throttle goes up.
    high_water_events: usize,
    out: VecDeque<RuOutput>,
    counters: PushRuCounters,
    /// The window that keeps the RUs in step, if set ([`PushRu::with_window`]).
    window: Option<Window>,
    /// The run has started (RU 0's node said [`Message::Start`]): every stream of every RU is
    /// connected. Before, nothing is sent: a BU would age the events of RUs still waiting for
    /// a stream.
    started: bool,
    /// The run's last event once known (the drain, or RU 0's stop line): no event after it is
    /// assigned, and no FED stream is read past it.
    last_event: Option<EventNumber>,
}

/// The window of event numbers within which the RUs stay of each other (see
/// [`Message::Progress`]): each RU tells its peers how far its FEDs still sending have delivered, and a FED
/// stream more than `events` past the slowest peer's point waits.
#[derive(Debug, Clone)]
struct Window {
    events: u64,
    /// Each peer and its last point ([`Ru::sending_through`]).
    peers: Vec<(Peer, EventNumber)>,
    /// The point last told the peers.
    told: EventNumber,
    /// RU 0: what it tells is the slowest point of all (its own and its peers'), so that every
    /// RU keeps within the window of the slowest, not only of RU 0.
    relay: bool,
}

impl Window {
    /// The last event a FED stream may deliver: `events` past the slowest peer.
    fn line(&self) -> EventNumber {
        self.peers.iter().map(|&(_, e)| e).min().map_or(EventNumber::MAX, |e| e.saturating_add(self.events))
    }
}

impl PushRu {
    /// A push RU at the start of a run; its throttle rises at `high_water_events` events held.
    pub fn new(cfg: RuConfig, destinations: Destinations, high_water_events: usize) -> Self {
        PushRu {
            next: cfg.first_event,
            seen: cfg.first_event,
            waiting_since: None,
            ru: Ru::new(cfg),
            destinations,
            high_water_events,
            out: VecDeque::new(),
            counters: PushRuCounters::default(),
            window: None,
            started: false,
            last_event: None,
        }
    }

    /// The run has started: events go to their BUs from now on.
    pub fn start(&mut self, now: Nanos) {
        self.started = true;
        self.step(now);
    }

    /// Whether the run has started.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The FED at `fed_index`'s stream changed (see [`Ru::stream_changed`]).
    pub fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        let changed = self.ru.stream_changed(now, fed_index, change);
        self.step(now);
        changed
    }

    /// Keeps this RU within `events` event numbers of `peers` (RU 0's node: every other RU;
    /// another RU: RU 0's node): it tells them how far its FEDs have delivered, each time that
    /// moves by an eighth of the window, and a FED stream more than `events` ahead of the
    /// slowest of them waits ([`PushRu::accepts`]). The slowest FED of the system never waits
    /// for the window: the trigger holds for it, as a throttle would.
    /// On RU 0, `relay` makes what it tells the slowest point of all: another RU, which hears
    /// only RU 0, then keeps within the window of the slowest RU too (without it, two RUs
    /// could be two windows apart, each one window from RU 0).
    pub fn with_window(mut self, events: u64, peers: Vec<Peer>, relay: bool) -> Self {
        let first = self.ru.config().first_event;
        let peers = peers.into_iter().map(|p| (p, first)).collect();
        self.window = Some(Window { events: events.max(1), peers, told: first, relay });
        self
    }

    /// Whether the RU takes the next fragment of the FED at `fed_index`: the RU has room
    /// ([`Ru::accepts`]) and the fragment's event is within the window.
    pub fn accepts(&self, fed_index: usize) -> bool {
        let event = self.ru.expected_event(fed_index);
        self.ru.accepts(fed_index)
            && self.window.as_ref().is_none_or(|w| event <= w.line())
            && self.last_event.is_none_or(|last| event <= last)
    }

    /// The furthest event any RU may have delivered so far, when the window bounds it: this
    /// RU's FEDs have delivered no further than what it has seen, and another RU no further
    /// than the window past the point this RU last told it (RU 0 tells every RU). A stop line
    /// drawn there, and told before any later point, leaves every event that some FED has
    /// delivered inside the run. `None` without a window, or once every FED stopped sending
    /// (the point told is then unbounded).
    pub fn furthest_deliverable(&self) -> Option<EventNumber> {
        let w = self.window.as_ref()?;
        let peers = w.told.checked_add(w.events)?;
        Some(peers.max(self.seen.saturating_sub(1)))
    }

    /// The run ends at `last` (or earlier, if told so before): no event after it is assigned,
    /// and no FED stream is read past it. Its fragments that came already stay unsent, counted
    /// at the run's end as fragments after the run's last event.
    pub fn end_at(&mut self, now: Nanos, last: EventNumber) {
        self.last_event = Some(self.last_event.map_or(last, |l| l.min(last)));
        self.step(now);
    }

    /// Whether a FED stream waits for the window: some peer is more than the window behind.
    pub fn held_by_window(&self) -> bool {
        self.window.as_ref().is_some_and(|w| self.ru.sending_through().is_some_and(|d| d > w.line()))
    }

    /// The RU inside.
    pub fn ru(&self) -> &Ru {
        &self.ru
    }

    /// The RU inside, for what the driver tells it of its streams.
    pub fn ru_mut(&mut self) -> &mut Ru {
        &mut self.ru
    }

    /// The destination function as this RU applies it.
    pub fn destinations(&self) -> &Destinations {
        &self.destinations
    }

    /// The counters beyond the RU's.
    pub fn push_counters(&self) -> PushRuCounters {
        self.counters
    }

    /// Whether this RU holds events past its high-water mark: the trigger must hold.
    pub fn throttled(&self) -> bool {
        self.ru.events_buffered() >= self.high_water_events
    }

    /// Offers the next fragment of the FED at `fed_index` (see [`Ru::offer_fragment`]).
    pub fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        let result = self.ru.offer_fragment(now, fed_index, fragment);
        self.seen = self.seen.max(self.ru.expected_event(fed_index));
        self.step(now);
        result
    }

    /// One past the newest event some FED of this RU has delivered: push assigns events as
    /// FEDs deliver them.
    pub fn seen_through(&self) -> EventNumber {
        self.seen
    }

    /// Handles one input: the exclusion of a BU from an event on, the drain, ticks.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Message { msg: Message::Exclude { bu, from_event }, .. } => self.exclude(now, bu, from_event),
            Input::Message { msg: Message::Start, from: Peer::Evm } => self.started = true,
            Input::Message { msg: Message::Progress { through }, from } => {
                if let Some(p) = self.window.as_mut().and_then(|w| w.peers.iter_mut().find(|(p, _)| *p == from)) {
                    p.1 = p.1.max(through);
                }
            }
            Input::Message { msg: msg @ Message::Drain { last_event }, from } => {
                self.ru.handle(now, Input::Message { from, msg });
                // No event triggered: none is the run's.
                let last = last_event.unwrap_or(self.ru.config().first_event.saturating_sub(1));
                self.last_event = Some(self.last_event.map_or(last, |l| l.min(last)));
            }
            Input::Tick => {
                self.ru.handle(now, Input::Tick);
                self.assign_seen(now, true);
            }
            Input::Message { from, msg } => self.out.push_back(RuOutput::Notice(Notice::ProtocolError {
                what: format!(
                    "push RU {}: unexpected message from {from}: {}",
                    self.ru.config().ru,
                    message_name(&msg)
                ),
            })),
            _ => {}
        }
        self.step(now);
    }

    /// Excludes `bu` from event `from` on: events from then on that are still held go to their
    /// new destination. Events before it held for `bu` are never sent to the lost BU: they are
    /// freed as they would have been sent ([`PushRu::step`]), once whole, so that their
    /// fragments still to come are taken, not counted late.
    fn exclude(&mut self, now: Nanos, bu: BuId, from: EventNumber) {
        let held_for_bu: Vec<EventNumber> =
            self.ru.held_assignments().filter(|&(_, to)| to == Some(bu)).map(|(e, _)| e).collect();
        if let Err(e) = self.destinations.exclude(bu, from) {
            let what = format!("push RU {}: {e}", self.ru.config().ru);
            self.out.push_back(RuOutput::Notice(Notice::ProtocolError { what }));
            return;
        }
        for event in held_for_bu.into_iter().filter(|&e| e >= from) {
            if let Some(to) = self.destinations.of(event) {
                self.counters.redirected += 1;
                self.assign(now, to, vec![EventRange { first: event, count: 1 }]);
            }
        }
    }

    fn assign(&mut self, now: Nanos, bu: BuId, events: Vec<EventRange>) {
        let msg = Message::Assign { bu, epoch: PUSH_EPOCH, events, release: Vec::new() };
        self.ru.handle(now, Input::Message { from: Peer::Evm, msg });
    }

    /// Assigns to its destination each block whose events some FED has delivered, the whole
    /// block at once, so that it leaves as one data message; with `partial`, also the events of
    /// a block begun, once they waited [`PARTIAL_BLOCK_WAIT_NS`].
    fn assign_seen(&mut self, now: Nanos, partial: bool) {
        if !self.started {
            return;
        }
        let seen = self.last_event.map_or(self.seen, |last| self.seen.min(last.saturating_add(1)));
        let partial = partial && self.waiting_since.is_some_and(|t| now >= t.saturating_add(PARTIAL_BLOCK_WAIT_NS));
        while self.next < seen {
            let block_end = self.destinations.block_start_at_or_after(self.next + 1);
            if block_end > seen && !partial {
                break;
            }
            let end = block_end.min(seen);
            let count = u32::try_from(end - self.next).unwrap_or(u32::MAX);
            let range = EventRange { first: self.next, count };
            self.next += u64::from(count);
            // With no BU left nothing can be built: the events stay held, and the run fails.
            if let Some(bu) = self.destinations.of(range.first) {
                self.assign(now, bu, vec![range]);
            }
        }
        self.waiting_since = if self.next < seen { Some(self.waiting_since.unwrap_or(now)) } else { None };
    }

    /// Tells the peers how far this RU's FEDs have delivered, once that moved by an eighth of
    /// the window (or every FED stopped sending: then as far as it goes).
    fn tell_progress(&mut self) {
        let Some(w) = self.window.as_mut() else { return };
        let own = self.ru.sending_through().unwrap_or(EventNumber::MAX);
        let slowest_peer = w.peers.iter().map(|&(_, e)| e).min().unwrap_or(EventNumber::MAX);
        let through = if w.relay { own.min(slowest_peer) } else { own };
        if through >= w.told.saturating_add(w.events.div_ceil(8)) || (through == EventNumber::MAX && w.told != through)
        {
            w.told = through;
            for &(peer, _) in &w.peers {
                self.out.push_back(RuOutput::Send { to: peer, msg: Message::Progress { through } });
            }
        }
    }

    /// Assigns what is seen, passes on what the RU outputs, and frees the events whose
    /// super-fragments left.
    fn step(&mut self, now: Nanos) {
        self.tell_progress();
        self.assign_seen(now, false);
        let mut sent = Vec::new();
        while let Some(o) = self.ru.poll_output() {
            if let RuOutput::Send { to: Peer::Bu(bu), msg: Message::Data { parts, .. } } = &o {
                for p in parts {
                    push_event(&mut sent, p.event);
                }
                // An event before an exclusion's first event that the function gives the lost
                // BU: never sent to it, freed with the rest.
                if !self.destinations.current().contains(bu) {
                    self.counters.dropped_for_excluded += parts.len() as u64;
                    continue;
                }
            }
            self.out.push_back(o);
        }
        if !sent.is_empty() {
            self.ru.handle(now, Input::Message { from: Peer::Evm, msg: Message::Release { events: sent } });
            self.out.extend(std::iter::from_fn(|| self.ru.poll_output()));
        }
    }

    /// When a tick has work: the RU's time-outs (see [`Ru::next_timeout`]), and the wait of a
    /// block begun.
    pub fn next_timeout(&self) -> Option<Nanos> {
        let partial = self.waiting_since.map(|t| t.saturating_add(PARTIAL_BLOCK_WAIT_NS));
        [self.ru.next_timeout(), partial].into_iter().flatten().min()
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<RuOutput> {
        self.out.pop_front()
    }
}
