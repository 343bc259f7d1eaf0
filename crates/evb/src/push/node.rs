//! RU 0 under push: the push RU that reads the trigger, with the little that push still needs of
//! an event manager, none of it per event. From the trigger fragments it knows each lumi
//! section's events, so at a section's end it tells every BU how many of them the destination
//! function gave it (the BU's end-of-lumi record waits for as many published); at the stop it
//! drains the RUs and BUs and ends the run; when a BU is lost it excludes it from an event that
//! no RU has reached yet, tells every RU, and says how many events the lost BU was given.

use super::{Destinations, PushRu};
use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, RuConfig, StreamChange};
use crate::start::StartBarrier;
use crate::trigger_stream::TriggerStream;
use crate::types::{BuId, EventNumber, Nanos, Peer, RuId};
use crate::unit::{Input, Notice, RuOutput, TriggerBreak};
use std::collections::VecDeque;
use tessera_formats::tcds::TCDS_FED_ID;

/// Configuration of RU 0's node under push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushNodeConfig {
    /// RU 0.
    pub ru: RuConfig,
    /// RUs in the system, RU 0 included.
    pub n_ru: u16,
    /// BUs in the system, those the destination function leaves out included (they may still
    /// connect).
    pub n_bu: u16,
    /// The destination function, the same as every RU's.
    pub destinations: Destinations,
    /// Events RU 0 holds at which the throttle rises.
    pub high_water_events: usize,
    /// A lost BU is excluded from the first block at least this many events past the newest
    /// event RU 0 has seen, so that no RU has sent it a part of an event from then on. Default
    /// 4096.
    pub exclude_margin_events: u64,
    /// Keep the RUs within this many event numbers of each other ([`PushRu::with_window`]);
    /// `None` where the driver keeps them in step itself (the simulator's one trigger).
    pub window_events: Option<u64>,
    /// Test-only: a deliberate protocol bug, for the simulator's self-check.
    pub bug: Option<PushNodeBug>,
}

/// Deliberate bugs of RU 0's push node that the simulator must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushNodeBug {
    /// Exclude a lost BU without telling the other RUs: they go on sending it their parts.
    ExcludeUntold,
}

/// The lumi section being triggered: its number and first event.
#[derive(Debug, Clone, Copy)]
struct OpenLumi {
    lumi_section: u32,
    first_event: EventNumber,
}

/// RU 0 and what push keeps of an event manager.
#[derive(Debug)]
pub struct PushNode {
    ru: PushRu,
    n_ru: u16,
    n_bu: u16,
    exclude_margin_events: u64,
    bug: Option<PushNodeBug>,
    /// Every BU not excluded, those the destination function leaves out included: those told of
    /// lumi sections (with no events, if left out) and the run's end.
    bus: Vec<BuId>,
    open_lumi: Option<OpenLumi>,
    /// Lumi sections ended, and the last.
    lumi_sections: u32,
    last_lumi_section: u32,
    last_triggered: Option<EventNumber>,
    /// Events triggered.
    triggered: u64,
    /// The trigger stream's end.
    trigger: TriggerStream,
    /// The trigger is off (run control's stop, the stream's end or break): the run's last event
    /// (none if nothing was triggered).
    stop: Option<Option<EventNumber>>,
    /// Lumi sections ended: (lumi section, first event, last event), for a BU that comes back
    /// after its loss to close the sections it was given events of.
    lumis_ended: Vec<(u32, EventNumber, EventNumber)>,
    /// Excluded BUs started again (they said Hello): each is told the events it was given per
    /// lumi section, and the end of the run, and counts lost what it did not publish.
    closing: Vec<BuId>,
    /// The stop line drawn at run control's stop ([`PushNode::draw_stop_line`]), told the other
    /// RUs as their drain: the trigger runs on to it.
    line: Option<EventNumber>,
    drained: bool,
    out: VecDeque<RuOutput>,
    /// The run's start: events go to BUs, and triggers count, only once every stream of every
    /// RU is connected.
    barrier: StartBarrier,
}

impl PushNode {
    /// RU 0's node at the start of a run.
    pub fn new(cfg: PushNodeConfig) -> Self {
        PushNode {
            bus: (0..cfg.n_bu).collect(),
            n_bu: cfg.n_bu,
            ru: {
                let ru = PushRu::new(cfg.ru, cfg.destinations, cfg.high_water_events);
                match cfg.window_events {
                    Some(w) => ru.with_window(w, (1..cfg.n_ru).map(Peer::Ru).collect(), true),
                    None => ru,
                }
            },
            n_ru: cfg.n_ru,
            exclude_margin_events: cfg.exclude_margin_events,
            bug: cfg.bug,
            open_lumi: None,
            lumi_sections: 0,
            last_lumi_section: 0,
            last_triggered: None,
            triggered: 0,
            trigger: TriggerStream::default(),
            stop: None,
            line: None,
            lumis_ended: Vec::new(),
            closing: Vec::new(),
            drained: false,
            out: VecDeque::new(),
            barrier: StartBarrier::new(cfg.n_ru),
        }
    }

    /// Whether the run has started: every stream of every RU is connected.
    pub fn started(&self) -> bool {
        self.barrier.started()
    }

    /// The RUs that have not yet said that all their streams are connected.
    pub fn rus_not_ready(&self) -> Vec<RuId> {
        self.barrier.waiting_for()
    }

    /// RU 0's FED at `fed_index`'s stream changed (see [`crate::Ru::stream_changed`]).
    pub fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        let changed = self.ru.stream_changed(now, fed_index, change);
        self.pump(now);
        changed
    }

    /// RU `ru` has every stream connected; the last to say it starts the run: the triggers kept
    /// aside count, and every RU (this one too) begins to send.
    fn ru_ready(&mut self, now: Nanos, ru: RuId) {
        let triggers = match self.barrier.ready(ru) {
            Err(e) => {
                self.out.push_back(RuOutput::Notice(Notice::ProtocolError { what: format!("push RU 0: {e}") }));
                return;
            }
            Ok(None) => return,
            Ok(Some(triggers)) => triggers,
        };
        for (event, lumi_section) in triggers {
            self.take_trigger(event, lumi_section);
        }
        for r in 1..self.n_ru {
            self.out.push_back(RuOutput::Send { to: Peer::Ru(r), msg: Message::Start });
        }
        self.ru.start(now);
    }

    /// A trigger makes its event: a new lumi section ends the open one.
    fn take_trigger(&mut self, event: EventNumber, lumi_section: u32) {
        if self.open_lumi.is_some_and(|l| l.lumi_section != lumi_section) {
            self.end_lumi(event - 1);
        }
        self.open_lumi.get_or_insert(OpenLumi { lumi_section, first_event: event });
        self.last_triggered = Some(event);
        self.triggered += 1;
    }

    /// RU 0.
    pub fn ru(&self) -> &PushRu {
        &self.ru
    }

    /// RU 0, for what the driver tells it of its streams.
    pub fn ru_mut(&mut self) -> &mut PushRu {
        &mut self.ru
    }

    /// The last event triggered, if any.
    pub fn last_triggered(&self) -> Option<EventNumber> {
        self.last_triggered
    }

    /// BUs in the run, excluded ones included.
    pub fn n_bu(&self) -> u16 {
        self.n_bu
    }

    /// Events triggered.
    pub fn triggered(&self) -> u64 {
        self.triggered
    }

    /// Whether the run is drained: the trigger stopped, every lumi section ended, and the BUs
    /// and RUs told.
    pub fn drained(&self) -> bool {
        self.drained
    }

    /// Whether the trigger is off: stopped by run control (once it reached the stop line),
    /// ended cleanly, or broken.
    pub fn trigger_stopped(&self) -> bool {
        self.trigger.stopped() && !self.awaits_line()
    }

    /// Whether run control's stop waits for the trigger to reach the stop line.
    fn awaits_line(&self) -> bool {
        self.line.is_some_and(|line| self.stop == Some(Some(line)) && self.last_triggered < Some(line))
    }

    /// Draws the stop line at run control's stop, `last_event` the last event triggered.
    /// Under push every RU reads its FEDs on past the trigger and sends what it reads, so a
    /// stop at the last trigger would leave events that some RU sent to its BU without the
    /// trigger's part. The line is past every event a FED may have delivered
    /// ([`PushRu::furthest_deliverable`]), and no further than the run's event limit; every
    /// other RU is told it as its drain, before any point that would let it read further, and
    /// reads no FED past it; the trigger runs on to it. `None` (the run ends at `last_event`)
    /// before the run started, or without a window to bound the RUs.
    fn draw_stop_line(&mut self, now: Nanos, last_event: Option<EventNumber>) -> Option<EventNumber> {
        if !self.barrier.started() {
            return None;
        }
        let first = self.ru.ru().config().first_event;
        let mut line = self.ru.furthest_deliverable()?.max(last_event.unwrap_or(first));
        if let Some(limit) = self.trigger.limit_events() {
            line = line.min((first + limit).saturating_sub(1));
        }
        if last_event.is_some_and(|last| last >= line) {
            return None;
        }
        self.ru.end_at(now, line);
        let drain = Message::Drain { last_event: Some(line) };
        for ru in 1..self.n_ru {
            self.out.push_back(RuOutput::Send { to: Peer::Ru(ru), msg: drain.clone() });
        }
        self.line = Some(line);
        Some(line)
    }

    /// How the trigger stream broke before run control stopped the trigger, if it did.
    pub fn trigger_break(&self) -> Option<&TriggerBreak> {
        self.trigger.broke()
    }

    /// The trigger stream may close cleanly after `events` events (the run's event limit, or
    /// run control's stop line); a lower limit given later wins.
    pub fn limit_trigger(&mut self, events: u64) {
        self.trigger.limit(events);
    }

    /// The trigger stream ended: closed at a fragment boundary (`broken` none) or could not be
    /// read on (`broken` says why). Its close at the trigger limit stops the trigger cleanly;
    /// any other end before run control's stop breaks the run, and the events triggered before
    /// it are drained.
    pub fn trigger_stream_ended(&mut self, now: Nanos, broken: Option<String>) {
        if self.trigger.stopped() {
            if self.awaits_line() {
                // Stopped at a line the trigger did not reach (its front end's own limit is
                // lower): the run ends at the last trigger, and the BUs drop what came after.
                self.stop = Some(self.barrier.last_deferred().or(self.last_triggered));
                self.pump(now);
            }
            return;
        }
        let what = self.trigger.ended(self.triggers_taken(), broken);
        self.trigger_off(what);
        self.pump(now);
    }

    /// Trigger fragments taken: those that made events and those kept aside for the start.
    fn triggers_taken(&self) -> u64 {
        self.triggered + self.barrier.deferred() as u64
    }

    /// The trigger went off (`what`: the break, if it was one) at the last trigger taken (the
    /// run drains once it has started).
    fn trigger_off(&mut self, what: Option<TriggerBreak>) {
        let last_event = self.barrier.last_deferred().or(self.last_triggered);
        if let Some(what) = what {
            let notice = Notice::TriggerStreamBroken { what, fragments: self.triggers_taken(), last_event };
            self.out.push_back(RuOutput::Notice(notice));
        }
        self.stop.get_or_insert(last_event);
    }

    /// What keeps the node from having drained, for a report on a stuck run.
    pub fn pending(&self) -> String {
        if self.barrier.waits() {
            return format!("the run waits for every stream of RUs {:?} to connect", self.barrier.waiting_for());
        }
        match self.stop {
            None => "the trigger is on".to_string(),
            Some(last) if !self.drained => format!("waiting for the trigger of event {last:?}"),
            Some(_) => format!("{} events held by RU 0", self.ru.ru().events_buffered()),
        }
    }

    /// Whether RU 0 is past its high-water mark.
    pub fn throttled(&self) -> bool {
        self.ru.throttled()
    }

    /// Offers the next fragment of the FED at `fed_index` of RU 0.
    pub fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        let result = self.ru.offer_fragment(now, fed_index, fragment);
        self.pump(now);
        result
    }

    /// Handles one input: run control's stop, a lost BU, ticks.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        match input {
            Input::StopTrigger { last_event } => {
                if self.trigger.stop() {
                    if !self.barrier.started() && last_event.is_none() {
                        // Stopped before every stream came, with no event issued: the run ends
                        // with none, and the triggers kept aside are no events.
                        self.barrier.abandon();
                    }
                    let line = self.draw_stop_line(now, last_event);
                    self.stop = Some(line.or(last_event));
                }
            }
            Input::Message { msg: Message::StreamsConnected { ru }, .. } => self.ru_ready(now, ru),
            Input::PeerLost(Peer::Bu(bu)) => self.exclude(now, bu),
            Input::Message { from: Peer::Bu(from), msg: Message::Hello { bu, .. } } if from == bu => {
                self.bu_back(now, bu)
            }
            Input::PeerLost(_) => {}
            other => self.ru.handle(now, other),
        }
        self.pump(now);
    }

    /// Excludes lost BU `bu` from the first block past the newest event RU 0 has seen plus the
    /// margin (after the drain, from the event after the run's last), and tells every RU: what
    /// they still hold for it is dropped, not sent to a lost BU.
    fn exclude(&mut self, now: Nanos, bu: BuId) {
        if !self.bus.contains(&bu) {
            return;
        }
        let d = self.ru.destinations();
        let from_event = if self.drained {
            self.last_triggered.map_or(self.ru.ru().config().first_event, |e| e + 1)
        } else {
            d.block_start_at_or_after(self.ru.seen_through() + self.exclude_margin_events)
        }
        .max(d.last_change());
        let first_event = self.ru.ru().config().first_event;
        let assigned = if from_event > first_event { d.count_for(bu, first_event, from_event - 1) } else { 0 };
        self.bus.retain(|&b| b != bu);
        let msg = Message::Exclude { bu, from_event };
        self.ru.handle(now, Input::Message { from: Peer::Evm, msg: msg.clone() });
        let told = if self.bug == Some(PushNodeBug::ExcludeUntold) { 1 } else { self.n_ru };
        for ru in 1..told {
            self.out.push_back(RuOutput::Send { to: Peer::Ru(ru), msg: msg.clone() });
        }
        self.out.push_back(RuOutput::Notice(Notice::BuExcluded { bu, from_event, assigned }));
    }

    /// Ends the open lumi section at `last`: every BU learns how many of its events it was given.
    /// A BU lost under push came back (started again, it said Hello): it is excluded (if its
    /// loss was not seen yet), and it closes the run's lumi sections as far as they are ended,
    /// each with the events it was given, and the run once it ends. It takes no event: the
    /// others hold its events no more.
    fn bu_back(&mut self, now: Nanos, bu: BuId) {
        if bu >= self.n_bu {
            return;
        }
        self.exclude(now, bu);
        if !self.closing.contains(&bu) {
            self.closing.push(bu);
        }
        for i in 0..self.lumis_ended.len() {
            let (lumi_section, first, last) = self.lumis_ended[i];
            let events = self.ru.destinations().count_for(bu, first, last);
            self.out.push_back(RuOutput::Send { to: Peer::Bu(bu), msg: Message::EndOfLumi { lumi_section, events } });
        }
        if self.drained {
            self.end_run_of(bu);
        }
    }

    /// BUs lost under push that have not come back to close their lumi sections: RU 0 waits a
    /// while for them at the run's end.
    pub fn bus_lost(&self) -> Vec<BuId> {
        (0..self.n_bu).filter(|b| !self.bus.contains(b) && !self.closing.contains(b)).collect()
    }

    /// Tells `bu` the drain and the end of the run.
    fn end_run_of(&mut self, bu: BuId) {
        let last_event = self.stop.flatten();
        let end = Message::EndOfRun { last_lumi_section: self.last_lumi_section, lumi_sections: self.lumi_sections };
        self.out.push_back(RuOutput::Send { to: Peer::Bu(bu), msg: Message::Drain { last_event } });
        self.out.push_back(RuOutput::Send { to: Peer::Bu(bu), msg: end });
    }

    fn end_lumi(&mut self, last: EventNumber) {
        let Some(open) = self.open_lumi.take() else { return };
        self.lumis_ended.push((open.lumi_section, open.first_event, last));
        for &bu in self.bus.iter().chain(&self.closing) {
            let events = self.ru.destinations().count_for(bu, open.first_event, last);
            let msg = Message::EndOfLumi { lumi_section: open.lumi_section, events };
            self.out.push_back(RuOutput::Send { to: Peer::Bu(bu), msg });
        }
        self.lumi_sections += 1;
        self.last_lumi_section = open.lumi_section;
    }

    /// Takes RU 0's outputs: triggers end lumi sections, the rest goes out. Then drains the run
    /// once the stop's last event is triggered.
    fn pump(&mut self, now: Nanos) {
        while let Some(o) = self.ru.poll_output() {
            match o {
                // After a break a trigger fragment is of no event; before the start it waits for
                // the start (see `StartBarrier::admit`).
                RuOutput::Triggered { .. } if self.trigger.broke().is_some() => {}
                RuOutput::Triggered { event, lumi_section } => {
                    if self.barrier.admit(event, lumi_section) {
                        self.take_trigger(event, lumi_section);
                    }
                }
                RuOutput::Send { to: Peer::Evm, msg: Message::StreamsConnected { ru } } => self.ru_ready(now, ru),
                // The trigger FED's sync loss is said as such and breaks the trigger stream.
                RuOutput::Notice(notice @ Notice::SyncLoss { fed: TCDS_FED_ID, expected, found_lv1 }) => {
                    self.out.push_back(RuOutput::Notice(notice));
                    if let Some(what) = self.trigger.sync_lost(expected, found_lv1) {
                        self.trigger_off(Some(what));
                    }
                }
                other => self.out.push_back(other),
            }
        }
        let Some(last_event) = self.stop else { return };
        if self.drained || self.barrier.waits() || (last_event.is_some() && self.last_triggered < last_event) {
            return;
        }
        self.drained = true;
        if let Some(last) = last_event {
            self.end_lumi(last);
        }
        let drain = Message::Drain { last_event };
        self.ru.handle(now, Input::Message { from: Peer::Evm, msg: drain.clone() });
        self.out.extend(std::iter::from_fn(|| self.ru.poll_output()));
        // RUs told the stop line have their drain.
        for ru in (1..self.n_ru).filter(|_| self.line.is_none()) {
            self.out.push_back(RuOutput::Send { to: Peer::Ru(ru as RuId), msg: drain.clone() });
        }
        for bu in self.bus.clone().into_iter().chain(self.closing.clone()) {
            self.end_run_of(bu);
        }
    }

    /// When a tick has work.
    pub fn next_timeout(&self) -> Option<Nanos> {
        self.ru.next_timeout()
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<RuOutput> {
        self.out.pop_front()
    }
}
