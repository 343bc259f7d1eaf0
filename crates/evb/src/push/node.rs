//! RU 0 under push: the push RU that reads the trigger, with the little that push still needs of
//! an event manager, none of it per event. From the trigger fragments it knows each lumi
//! section's events, so at a section's end it tells every BU how many of them the destination
//! function gave it (the BU's end-of-lumi record waits for as many published); at the stop it
//! drains the RUs and BUs and ends the run; when a BU is lost it excludes it from an event that
//! no RU has reached yet, tells every RU, and says how many events the lost BU was given.

use super::{Destinations, PushRu};
use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, RuConfig};
use crate::types::{BuId, EventNumber, Nanos, Peer, RuId};
use crate::unit::{Input, Notice, RuOutput};
use std::collections::VecDeque;

/// Configuration of RU 0's node under push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushNodeConfig {
    /// RU 0.
    pub ru: RuConfig,
    /// RUs in the system, RU 0 included.
    pub n_ru: u16,
    /// The destination function, the same as every RU's.
    pub destinations: Destinations,
    /// Events RU 0 holds at which the throttle rises.
    pub high_water_events: usize,
    /// A lost BU is excluded from the first block at least this many events past the newest
    /// event RU 0 has seen, so that no RU has sent it a part of an event from then on. Default
    /// 4096.
    pub exclude_margin_events: u64,
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
    exclude_margin_events: u64,
    bug: Option<PushNodeBug>,
    /// Every BU ever enabled and not excluded: those told of lumi sections and the run's end.
    bus: Vec<BuId>,
    open_lumi: Option<OpenLumi>,
    /// Lumi sections ended, and the last.
    lumi_sections: u32,
    last_lumi_section: u32,
    last_triggered: Option<EventNumber>,
    /// Run control's stop: the run's last event (none if nothing was triggered).
    stop: Option<Option<EventNumber>>,
    drained: bool,
    out: VecDeque<RuOutput>,
}

impl PushNode {
    /// RU 0's node at the start of a run.
    pub fn new(cfg: PushNodeConfig) -> Self {
        PushNode {
            bus: cfg.destinations.current().to_vec(),
            ru: PushRu::new(cfg.ru, cfg.destinations, cfg.high_water_events),
            n_ru: cfg.n_ru,
            exclude_margin_events: cfg.exclude_margin_events,
            bug: cfg.bug,
            open_lumi: None,
            lumi_sections: 0,
            last_lumi_section: 0,
            last_triggered: None,
            stop: None,
            drained: false,
            out: VecDeque::new(),
        }
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

    /// Whether the run is drained: the trigger stopped, every lumi section ended, and the BUs
    /// and RUs told.
    pub fn drained(&self) -> bool {
        self.drained
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
                self.stop.get_or_insert(last_event);
            }
            Input::PeerLost(Peer::Bu(bu)) => self.exclude(now, bu),
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
    fn end_lumi(&mut self, last: EventNumber) {
        let Some(open) = self.open_lumi.take() else { return };
        for &bu in &self.bus {
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
                RuOutput::Triggered { event, lumi_section } => {
                    if self.open_lumi.is_some_and(|l| l.lumi_section != lumi_section) {
                        self.end_lumi(event - 1);
                    }
                    self.open_lumi.get_or_insert(OpenLumi { lumi_section, first_event: event });
                    self.last_triggered = Some(event);
                }
                other => self.out.push_back(other),
            }
        }
        let Some(last_event) = self.stop else { return };
        if self.drained || (last_event.is_some() && self.last_triggered < last_event) {
            return;
        }
        self.drained = true;
        if let Some(last) = last_event {
            self.end_lumi(last);
        }
        let drain = Message::Drain { last_event };
        self.ru.handle(now, Input::Message { from: Peer::Evm, msg: drain.clone() });
        self.out.extend(std::iter::from_fn(|| self.ru.poll_output()));
        for ru in 1..self.n_ru {
            self.out.push_back(RuOutput::Send { to: Peer::Ru(ru as RuId), msg: drain.clone() });
        }
        let end = Message::EndOfRun { last_lumi_section: self.last_lumi_section, lumi_sections: self.lumi_sections };
        for &bu in &self.bus {
            self.out.push_back(RuOutput::Send { to: Peer::Bu(bu), msg: drain.clone() });
            self.out.push_back(RuOutput::Send { to: Peer::Bu(bu), msg: end.clone() });
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
