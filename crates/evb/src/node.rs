//! The EVM's node: the event manager and the readout unit next to it (RU 0, which reads the
//! trigger), wired together without a network. Assignments to RU 0 are handed over in memory,
//! and commits for a BU ride on RU 0's next data message to it.
//!
//! The node keeps the run's start barrier ([`StartBarrier`]): the trigger fragments RU 0 takes
//! make events only once every RU has said that all its streams are connected.
//!
//! The node also judges the trigger stream: its only clean ends are run control's stop and,
//! with an event limit, its close after exactly that many events. Anything else (a close before
//! it, a stream that cannot be read on, an event out of sequence) stops the trigger at the last
//! good fragment and is said as [`Notice::TriggerStreamBroken`]: the events triggered before it
//! are built, and the run has failed.

use crate::evm::{Evm, EvmConfig};
use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, Ru, RuConfig, StreamChange};
use crate::start::StartBarrier;
use crate::trigger_stream::TriggerStream;
use crate::types::{EventNumber, Nanos, Peer, RuId};
use crate::unit::{EvmOutput, Input, Notice, RuOutput, TriggerBreak};
use std::collections::VecDeque;
use tessera_formats::tcds::TCDS_FED_ID;

/// The EVM and RU 0 as one unit.
#[derive(Debug)]
pub struct EvmNode {
    /// The event manager.
    pub evm: Evm,
    /// RU 0.
    pub ru: Ru,
    out: VecDeque<RuOutput>,
    /// The trigger stream's end.
    trigger: TriggerStream,
    /// The other RUs were told the run is drained.
    drain_sent: bool,
    /// The run's start: triggers make events only once every stream is connected.
    barrier: StartBarrier,
    /// The trigger went off before the start: the run's last event, to stop the EVM at once it
    /// has the triggers kept aside.
    stop_at_start: Option<Option<EventNumber>>,
}

impl EvmNode {
    /// The EVM's node at the start of a run.
    pub fn new(evm: EvmConfig, ru: RuConfig) -> Self {
        let mut barrier = StartBarrier::new(evm.n_ru);
        if evm.bug == Some(crate::evm::EvmBug::StartBeforeStreams) {
            for r in 0..evm.n_ru {
                let _ = barrier.ready(r);
            }
        }
        EvmNode {
            drain_sent: false,
            barrier,
            stop_at_start: None,
            evm: Evm::new(evm),
            ru: Ru::new(ru),
            out: VecDeque::new(),
            trigger: TriggerStream::default(),
        }
    }

    /// The trigger stream may close cleanly after `events` events (the run's event limit, or
    /// run control's stop line); a lower limit given later wins.
    pub fn limit_trigger(&mut self, events: u64) {
        self.trigger.limit(events);
    }

    /// Whether the trigger is off: stopped by run control, ended cleanly, or broken.
    pub fn trigger_stopped(&self) -> bool {
        self.trigger.stopped()
    }

    /// How the trigger stream broke before run control stopped the trigger, if it did.
    pub fn trigger_break(&self) -> Option<&TriggerBreak> {
        self.trigger.broke()
    }

    /// The trigger stream ended: closed at a fragment boundary (`broken` none) or could not be
    /// read on (`broken` says why). Its close after the trigger limit stops the trigger
    /// cleanly; any other end before run control stopped the trigger breaks the run.
    pub fn trigger_stream_ended(&mut self, now: Nanos, broken: Option<String>) {
        if self.trigger.stopped() {
            return;
        }
        let what = self.trigger.ended(self.triggers_taken(), broken);
        self.trigger_off(now, what);
        self.pump(now);
    }

    /// Trigger fragments taken: those that made events and those kept aside for the start.
    fn triggers_taken(&self) -> u64 {
        self.evm.counters().triggered + self.barrier.deferred() as u64
    }

    /// The trigger went off (`what`: the break, if it was one): a break is said, and the EVM
    /// drains the events triggered before it (once the run has started: before, it stops with
    /// the triggers kept aside).
    fn trigger_off(&mut self, now: Nanos, what: Option<TriggerBreak>) {
        let last_event = self.barrier.last_deferred().or(self.evm.last_triggered());
        if let Some(what) = what {
            let notice = Notice::TriggerStreamBroken { what, fragments: self.triggers_taken(), last_event };
            self.out.push_back(RuOutput::Notice(notice));
        }
        if self.barrier.started() {
            self.evm.handle(now, Input::StopTrigger { last_event });
        } else {
            self.stop_at_start = Some(last_event);
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

    /// Run control stopped the trigger at `last_event`: once (a later stop, the stream's end
    /// after run control's, changes nothing). Before the start it waits for the start, unless no
    /// event was issued: then the run ends with none, and the triggers kept aside are no events.
    fn stop_trigger(&mut self, now: Nanos, last_event: Option<EventNumber>) {
        if !self.trigger.stop() {
            return;
        }
        if self.barrier.started() {
            self.evm.handle(now, Input::StopTrigger { last_event });
        } else if last_event.is_none() {
            self.barrier.abandon();
            self.evm.handle(now, Input::StopTrigger { last_event: None });
        } else {
            self.stop_at_start = Some(last_event);
        }
    }

    /// RU 0's FED at `fed_index`'s stream changed (see [`Ru::stream_changed`]).
    pub fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        let changed = self.ru.stream_changed(now, fed_index, change);
        self.pump(now);
        changed
    }

    /// RU `ru` has every stream connected; the last to say it starts the run: the triggers kept
    /// aside make their events, and a stop that came meanwhile takes effect.
    fn ru_ready(&mut self, now: Nanos, ru: RuId) {
        match self.barrier.ready(ru) {
            Err(e) => self.out.push_back(RuOutput::Notice(Notice::ProtocolError { what: format!("EVM: {e}") })),
            Ok(None) => {}
            Ok(Some(triggers)) => {
                for (event, lumi_section) in triggers {
                    self.evm.triggered(now, event, lumi_section);
                }
                if let Some(last_event) = self.stop_at_start.take() {
                    self.evm.handle(now, Input::StopTrigger { last_event });
                }
            }
        }
    }

    /// Offers the next fragment of the FED at `fed_index` of RU 0 (see [`Ru::offer_fragment`]).
    pub fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        let result = self.ru.offer_fragment(now, fed_index, fragment);
        self.pump(now);
        result
    }

    /// Whether RU 0 would take the next fragment of the FED at `fed_index`.
    pub fn accepts(&self, fed_index: usize) -> bool {
        self.ru.accepts(fed_index)
    }

    /// Handles one input: messages from BUs and run control go to the EVM, ticks to both.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Tick => {
                self.evm.handle(now, Input::Tick);
                self.pump(now);
                self.ru.handle(now, Input::Tick);
            }
            Input::StopTrigger { last_event } => self.stop_trigger(now, last_event),
            Input::Message { msg: Message::StreamsConnected { ru }, .. } => self.ru_ready(now, ru),
            other => self.evm.handle(now, other),
        }
        self.pump(now);
    }

    /// Moves outputs between the two until neither has any for the other.
    fn pump(&mut self, now: Nanos) {
        loop {
            let mut moved = false;
            while let Some(o) = self.ru.poll_output() {
                moved = true;
                match o {
                    // After a break a trigger fragment is of no event; before the start it waits
                    // for the start (see `StartBarrier::admit`).
                    RuOutput::Triggered { .. } if self.trigger.broke().is_some() => {}
                    RuOutput::Triggered { event, lumi_section } => {
                        if self.barrier.admit(event, lumi_section) {
                            self.evm.triggered(now, event, lumi_section);
                        }
                    }
                    RuOutput::Send { to: Peer::Evm, msg: Message::StreamsConnected { ru } } => self.ru_ready(now, ru),
                    // The trigger FED's sync loss is said as such (counted against it) and
                    // breaks the trigger stream.
                    RuOutput::Notice(notice @ Notice::SyncLoss { fed: TCDS_FED_ID, expected, found_lv1 }) => {
                        self.out.push_back(RuOutput::Notice(notice));
                        if let Some(what) = self.trigger.sync_lost(expected, found_lv1) {
                            self.trigger_off(now, Some(what));
                        }
                    }
                    RuOutput::Send { to: Peer::Bu(bu), msg: Message::Data { ru, epoch, parts, mut commits } } => {
                        // The RU has none of its own: the EVM's list is taken, not copied.
                        let pending = self.evm.take_commits(bu);
                        if commits.is_empty() {
                            commits = pending;
                        } else {
                            commits.extend(pending);
                        }
                        self.out.push_back(RuOutput::Send {
                            to: Peer::Bu(bu),
                            msg: Message::Data { ru, epoch, parts, commits },
                        });
                    }
                    other => self.out.push_back(other),
                }
            }
            while let Some(o) = self.evm.poll_output() {
                moved = true;
                match o {
                    EvmOutput::Send { to: Peer::Ru(Evm::LOCAL_RU), msg } => {
                        self.ru.handle(now, Input::Message { from: Peer::Evm, msg })
                    }
                    EvmOutput::Send { to, msg } => self.out.push_back(RuOutput::Send { to, msg }),
                    EvmOutput::Notice(n) => self.out.push_back(RuOutput::Notice(n)),
                }
            }
            if !moved {
                break;
            }
        }
        // Once every event is committed, the other RUs learn the run's end from the EVM: an
        // RU that loses the EVM before this has lost the run.
        if !self.drain_sent && self.evm.drained() {
            self.drain_sent = true;
            let last_event = self.evm.last_triggered();
            self.ru.handle(now, Input::Message { from: Peer::Evm, msg: Message::Drain { last_event } });
            for ru in (0..self.evm.config().n_ru).filter(|&r| r != Evm::LOCAL_RU) {
                self.out.push_back(RuOutput::Send { to: Peer::Ru(ru), msg: Message::Drain { last_event } });
            }
        }
    }

    /// The earliest time at which a tick has work.
    pub fn next_timeout(&self) -> Option<Nanos> {
        [self.evm.next_timeout(), self.ru.next_timeout()].into_iter().flatten().min()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<RuOutput> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::BufferRef;
    use crate::msg::TriggerInfo;

    /// The EVM's node of one RU reading the trigger FED and FED 0, for one BU.
    fn node() -> EvmNode {
        let mut n = EvmNode::new(EvmConfig::new(1, 1), RuConfig::new(0, vec![TCDS_FED_ID, 0]));
        n.stream_changed(0, 0, StreamChange::Connected);
        n.stream_changed(0, 1, StreamChange::Connected);
        assert!(n.started(), "RU 0 is the only RU");
        n
    }

    /// Offers `count` trigger fragments from LV1 `first` on.
    fn trigger(node: &mut EvmNode, first: u32, count: u32) {
        for lv1 in first..first + count {
            let info = TriggerInfo { lumi_section: 1, orbit: 1, bx: 1 };
            let fragment = FragmentRef {
                fed: TCDS_FED_ID,
                lv1,
                bytes: 64,
                corrupt: false,
                buffer: BufferRef { offset: lv1, ..BufferRef::default() },
                trigger: Some(info),
            };
            node.offer_fragment(0, 0, fragment).unwrap();
        }
    }

    fn breaks(node: &mut EvmNode) -> Vec<Notice> {
        std::iter::from_fn(|| node.poll_output())
            .filter_map(|o| match o {
                RuOutput::Notice(n @ Notice::TriggerStreamBroken { .. }) => Some(n),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_trigger_stream_that_closes_after_the_limit_stops_the_trigger_cleanly() {
        let mut n = node();
        n.limit_trigger(5);
        n.limit_trigger(3); // a stop line drawn earlier than the event limit wins
        trigger(&mut n, 1, 3);
        n.trigger_stream_ended(0, None);
        assert!(n.trigger_stopped());
        assert_eq!((n.trigger_break(), n.evm.counters().triggered, n.evm.last_triggered()), (None, 3, Some(3)));
        assert!(breaks(&mut n).is_empty());
    }

    #[test]
    fn a_trigger_stream_that_closes_before_the_limit_breaks_the_run_at_its_last_good_event() {
        let mut n = node();
        n.limit_trigger(10);
        trigger(&mut n, 1, 4);
        n.trigger_stream_ended(0, None);
        assert!(n.trigger_stopped());
        let what = TriggerBreak::Closed { expected: Some(10) };
        assert_eq!(n.trigger_break(), Some(&what));
        assert_eq!(breaks(&mut n), vec![Notice::TriggerStreamBroken { what, fragments: 4, last_event: Some(4) }]);
        // Run control's stop after it changes nothing.
        n.handle(0, Input::StopTrigger { last_event: Some(4) });
        assert!(breaks(&mut n).is_empty());
    }

    #[test]
    fn a_trigger_stream_without_a_limit_that_closes_or_cannot_be_read_breaks_the_run() {
        let mut n = node();
        trigger(&mut n, 1, 2);
        n.trigger_stream_ended(0, None);
        assert_eq!(n.trigger_break(), Some(&TriggerBreak::Closed { expected: None }));
        let mut n = node();
        n.limit_trigger(10);
        trigger(&mut n, 1, 2);
        n.trigger_stream_ended(0, Some("garbage".into()));
        assert_eq!(n.trigger_break(), Some(&TriggerBreak::Broken("garbage".into())));
    }

    #[test]
    fn a_trigger_event_out_of_sequence_breaks_the_run_and_later_triggers_make_no_events() {
        let mut n = node();
        trigger(&mut n, 1, 3);
        trigger(&mut n, 5, 2); // event 4 skipped
        let what = TriggerBreak::SyncLost { expected: 4, found_lv1: 5 };
        assert_eq!(n.trigger_break(), Some(&what));
        assert_eq!(breaks(&mut n), vec![Notice::TriggerStreamBroken { what, fragments: 3, last_event: Some(3) }]);
        assert_eq!((n.evm.counters().triggered, n.evm.last_triggered()), (3, Some(3)));
    }

    /// The EVM's node of two RUs: RU 0 reads the trigger FED and FED 0, RU 1 is elsewhere.
    fn node_of_two_rus() -> EvmNode {
        EvmNode::new(EvmConfig::new(2, 1), RuConfig::new(0, vec![TCDS_FED_ID, 0]))
    }

    fn sends(node: &mut EvmNode) -> Vec<Message> {
        std::iter::from_fn(|| node.poll_output())
            .filter_map(|o| match o {
                RuOutput::Send { msg, .. } => Some(msg),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn triggers_make_events_only_once_every_stream_of_every_ru_is_connected() {
        let mut n = node_of_two_rus();
        n.handle(0, Input::Message { from: Peer::Bu(0), msg: Message::Hello { bu: 0, epoch: 1, unpublished: vec![] } });
        let request =
            Message::Request { bu: 0, epoch: 1, credits: 8, built: vec![], published: vec![], lumis_done: vec![] };
        n.handle(0, Input::Message { from: Peer::Bu(0), msg: request });
        trigger(&mut n, 1, 3);
        assert_eq!((n.started(), n.evm.counters().triggered), (false, 0), "FED 0 and RU 1 are not there");
        assert_eq!(n.rus_not_ready(), vec![0, 1]);
        n.stream_changed(0, 1, StreamChange::Connected);
        assert_eq!(n.rus_not_ready(), vec![1]);
        n.handle(0, Input::Message { from: Peer::Ru(1), msg: Message::StreamsConnected { ru: 1 } });
        assert!(n.started());
        assert_eq!(n.evm.counters().triggered, 3, "the triggers kept aside make their events at the start");
        n.handle(2_000_000, Input::Tick);
        let assigned = sends(&mut n).iter().any(|m| matches!(m, Message::Assign { .. }));
        assert!(assigned, "and are assigned");
    }

    #[test]
    fn a_trigger_stream_that_ends_cleanly_before_the_start_stops_the_run_after_its_events() {
        let mut n = node_of_two_rus();
        n.limit_trigger(3);
        n.stream_changed(0, 1, StreamChange::Connected);
        trigger(&mut n, 1, 3);
        n.trigger_stream_ended(0, None);
        assert!(breaks(&mut n).is_empty(), "3 of 3 triggers: a clean end");
        assert_eq!(n.evm.counters().triggered, 0);
        n.handle(0, Input::Message { from: Peer::Ru(1), msg: Message::StreamsConnected { ru: 1 } });
        assert_eq!((n.evm.counters().triggered, n.evm.last_triggered()), (3, Some(3)));
        assert!(n.evm.pending().contains("3 unassigned"), "the run waits for its 3 events: {}", n.evm.pending());
    }

    #[test]
    fn a_run_stopped_before_every_stream_came_ends_with_no_event() {
        let mut n = node_of_two_rus();
        n.stream_changed(0, 1, StreamChange::Connected);
        trigger(&mut n, 1, 2);
        n.handle(0, Input::StopTrigger { last_event: None });
        assert!(n.trigger_stopped());
        let drained = sends(&mut n).contains(&Message::Drain { last_event: None });
        assert!(drained, "the other RU learns that the run is over, with no event");
        n.handle(0, Input::Message { from: Peer::Ru(1), msg: Message::StreamsConnected { ru: 1 } });
        assert_eq!(n.evm.counters().triggered, 0, "nothing starts after the stop");
    }

    #[test]
    fn after_run_control_stops_the_trigger_its_stream_may_end_as_it_likes() {
        let mut n = node();
        n.limit_trigger(10);
        trigger(&mut n, 1, 2);
        n.handle(0, Input::StopTrigger { last_event: Some(2) });
        n.trigger_stream_ended(0, Some("cut".into()));
        assert_eq!((n.trigger_stopped(), n.trigger_break()), (true, None));
        assert!(breaks(&mut n).is_empty());
    }
}
